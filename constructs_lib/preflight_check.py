"""``DeploymentPreflight``: fail a deployment in seconds, before any GPU is paid for, when it cannot work.

A ``Custom::DeploymentPreflight`` resource, served by ``lambda/deployment_preflight`` (with the
``preflight`` package bundled) through the stack's one ``DeploymentPreflightProvider``, runs after the
weights are in S3 and before the SageMaker Model. It checks, all at once, and fails with one reason that
lists every problem with its numbers (PRODUCT.md section 6):

- ``s3``: config.json and a weight file under the prefix; the staging manifest there, every listed size
  matching S3 (``allow_unverified_s3`` accepts a prefix without a manifest);
- ``memory``: weights / TP + overhead + KV cache of ``max_num_seqs`` full-length sequences fit the GPUs;
- ``context``: ``max_model_len`` is within the longest context the engine accepts for the model (vLLM's rule);
- ``tensor-parallel``: the tensor-parallel size divides the attention heads;
- ``quota``: the Service Quotas value ``<instance type> for endpoint usage`` covers ``instances_needed``.

Use ``checked_model`` as the endpoint's model: it is the same S3 prefix, and the Model waits for the
preflight::

    preflight = DeploymentPreflight(self, "Preflight", model=checkpoint, instance_type="ml.g6.xlarge",
                                    max_model_len=32768)
    GpuEndpoint(self, "Endpoint", model=preflight.checked_model, instance_type="ml.g6.xlarge", ...)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct, DependencyGroup, IDependable

from handler_kit.resources import DeploymentPreflightProperties
from preflight import CHECKS, DEFAULT_GPU_MEMORY_UTILIZATION, KV_CACHE_DTYPES

from .catalog import lookup_instance, resolve_instance
from .engines import checkpoint_code_patterns
from .format_guard import nearest_capable
from .model_data import ModelSource, parse_s3_uri
from .nag import acknowledge_wildcard
from .network import VpcPlacement
from .problems import construct_subject, refuse
from .provider import HandlerProvider

RESOURCE_TYPE = "Custom::DeploymentPreflight"
PROVIDER_ID = "DeploymentPreflightProvider"
HANDLER = "deployment_preflight"
HANDLER_TIMEOUT = cdk.Duration.minutes(2)
# One synchronous handler run, the Provider framework around it, and its retry of a crashed invocation.
SERVICE_TIMEOUT = cdk.Duration.minutes(6)
QUOTA_ACTIONS = ("servicequotas:ListServiceQuotas", "servicequotas:ListAWSDefaultServiceQuotas")
# What each check would have caught: printed when it is skipped.
SKIPPED_RISK = {
    "s3": "a missing config.json, weight file or manifest, or a half-copied prefix, fails only when the "
    "container starts",
    "memory": "an out-of-memory context fails only after the endpoint is created (20+ minutes)",
    "context": "a max_model_len above the longest context the engine accepts for the model fails when the engine "
    "starts (vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)",
    "tensor-parallel": "a tensor-parallel size that does not divide the attention heads fails when the engine starts",
    "quota": "a quota below the instances needed fails only when the endpoint is created",
    "format": "a weight format the GPU cannot run (bfloat16 below compute capability 8.0, FP8 on Volta) fails "
    "only when the engine starts",
}


class _CheckedModel:
    """The same model source, ready only once the preflight has passed (implements ``ModelSource``)."""

    def __init__(self, source: ModelSource, preflight: DeploymentPreflight) -> None:
        self._source = source
        self._dependable = DependencyGroup(preflight.resource)
        # The hosting construct that serves it checks its own network through it (check_placement).
        self.preflight = preflight

    @property
    def s3_uri(self) -> str:
        return self._source.s3_uri

    @property
    def object_arn_pattern(self) -> str:
        return self._source.object_arn_pattern

    @property
    def dependable(self) -> IDependable:
        return self._dependable

    @property
    def source(self) -> ModelSource:
        """The model source the preflight checks (a staged checkpoint, an S3 prefix)."""
        return self._source

    @property
    def bucket(self) -> Any:
        """The source's bucket, where it has one (an asynchronous endpoint writes its answers there by default)."""
        return getattr(self._source, "bucket", None)

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        return self._source.grant_read(grantee)


def _network_of(placement: VpcPlacement) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(placement.subnet_ids), tuple(placement.security_group_ids)


def check_placement(model: ModelSource, placement: VpcPlacement | None) -> None:
    """A hosting construct's own wiring: when ``model`` is a ``DeploymentPreflight``'s ``checked_model``, that
    preflight checks ``placement`` (the subnets and groups the endpoint runs in) before the Model exists."""
    if isinstance(model, _CheckedModel):
        model.preflight.check_network(placement)


# What preflight/network.py calls; none has resource-level permissions (Service Authorization Reference, Amazon EC2).
NETWORK_CHECK_ACTIONS = (
    "ec2:DescribeRouteTables",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcEndpoints",
)


# The resource's own defaults (handler_kit/resources.py), the ones its handler falls back to.
_DEFAULT = DeploymentPreflightProperties(model_s3_uri="", instance_type="", gpu_count=1, gpu_memory_gib=1.0)


class DeploymentPreflight(Construct):
    """Checks a deployment's S3 prefix, GPU memory fit, tensor-parallel size and quota before it starts.

    Minimal use: ``DeploymentPreflight(self, "Preflight", model=checkpoint, instance_type="ml.g6.xlarge")``;
    then give ``preflight.checked_model`` to ``GpuEndpoint``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: ModelSource,
        instance_type: str,
        max_model_len: int | None = None,
        gpu_count: int | None = None,
        gpu_memory_gib: float | None = None,
        tensor_parallel_size: int | None = None,
        max_num_seqs: int = _DEFAULT.max_num_seqs,
        kv_cache_dtype: str = _DEFAULT.kv_cache_dtype,
        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
        max_num_batched_tokens: int | None = None,
        instances_needed: int = _DEFAULT.instances_needed,
        update_instances: int = _DEFAULT.update_instances,
        allow_unverified_s3: bool = False,
        skip_checks: Sequence[str] = (),
        instance_pools: Sequence[str] = (),
        engine: str | None = None,
        dtype: str | None = None,
        quantization: str | None = None,
        gguf_file: str | None = None,
        allow_checkpoint_code: bool = False,
        trust_remote_code: bool = False,
        long_context: str | None = None,
    ) -> None:
        """
        :param model: the weights' S3 prefix (``S3ModelData``, ``StagedCheckpoint``): read access to it is
            granted to the handler, and when it has a ``dependable`` (staging) the preflight waits for it.
        :param instance_type: the endpoint's instance type, e.g. ``ml.g6.xlarge``.
        :param max_model_len: context length that must fit; above the longest context the engine accepts for
            the model it is refused. Default: that longest context (``max_position_embeddings``, rope scaling as
            vLLM applies it: preflight/context.py), which is what the engines use when none is set.
        :param gpu_count: GPUs per instance, for types the catalog lacks. Default: from the catalog.
        :param gpu_memory_gib: nominal memory per GPU, for types the catalog lacks. Default: from the catalog.
        :param tensor_parallel_size: GPUs one model copy spans. Default: every GPU of the instance.
        :param max_num_seqs: full-length sequences that must fit in the KV cache at once. This is not
            the engine's ``max_num_seqs`` (most sequences are short). Default: 1, the engine's own start-up check.
        :param kv_cache_dtype: one of ``auto``, ``fp8``, ``fp8_e4m3``, ``fp8_e5m2``, ``bfloat16``, ``float16``,
            ``float32``. Default: ``auto``, the model's 16-bit dtype.
        :param gpu_memory_utilization: share of GPU memory the engine may use, in (0, 1]. Default: 0.9 (vLLM's).
        :param max_num_batched_tokens: the engine's ``max_num_batched_tokens`` (vLLM), the tokens of the profiling
            pass whose activations it reserves before sizing the KV cache; more than 2048 leaves less KV cache.
            Default: vLLM's serving default of 2048 (what the estimate is calibrated at).
        :param instances_needed: instances the quota must allow (the maximum instance count in inference
            component mode). Default: 1.
        :param update_instances: instances an update adds while it runs, counted by the quota check on top
            of ``instances_needed`` (a blue/green update's green fleet: ``UpdatePolicy.extra_instances_during_update``).
            Default: 0.
        :param instance_pools: the variant's fallback instance types (``GpuEndpoint``'s or ``ComponentEndpoint``'s
            ``instance_pools``): the quota check reads each one's ``<type> for endpoint usage`` quota too, against
            the same instances, since SageMaker may place every instance on a fallback, and the memory and format
            checks run on each catalog type's GPUs (``PoolGpus``). Default: none.
        :param allow_unverified_s3: accept a prefix without the staging manifest (copied by other means);
            a manifest that is there is still checked. Default: the manifest is required.
        :param skip_checks: names of checks not to run (``s3``, ``memory``, ``context``, ``tensor-parallel``,
            ``quota``, ``format``, ``network``); each skipped check is a synth warning. ``context`` is the context
            limit (``max_model_len`` within what the engine accepts for the model); skipping ``memory`` leaves it
            on. Default: every check runs.
        :param long_context: the engine's opt-in to start beyond the model's context limit, as set in the
            container's environment (``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``; ``preflight.context.long_context_opt_in``):
            a longer ``max_model_len`` is then a note, not a refusal, and is sized as given. Default: none.
        :param engine: the serving engine (``vllm``, ``sglang``...), whose rows of the weight-format table apply.
            Default: the weight format is not checked against the GPU.
        :param dtype: the engine's ``dtype`` flag, when set (it wins over config.json's). Default: config.json's.
        :param quantization: the engine's ``quantization`` flag, when set. Default: config.json's.
        :param gguf_file: the GGUF model (file name or glob) llama.cpp serves from the prefix: its header,
            read by range GETs, stands in for config.json. Default: a config.json checkpoint (or the only
            GGUF model when the prefix has no config.json).
        :param allow_checkpoint_code: accept a prefix holding files the serving container would run as code or
            read as its settings (``engine``'s ``checkpoint_code`` in data/engines.json: requirements.txt,
            model.py, code/*, serving.properties, and for lmi any .py), each named in a note. Default: such a
            prefix is refused before any GPU starts.
        :param trust_remote_code: the engine's remote-code flag is on, so the engine's ``remote_code_files`` (for
            lmi: ``*.py``, the modeling files it imports) are accepted. Default: false.
        """
        super().__init__(scope, id)
        skipped = tuple(dict.fromkeys(skip_checks))
        gpus, gpu_memory = self._validate(
            model=model,
            instance_type=instance_type,
            max_model_len=max_model_len,
            gpu_count=gpu_count,
            gpu_memory_gib=gpu_memory_gib,
            tensor_parallel_size=tensor_parallel_size,
            max_num_seqs=max_num_seqs,
            kv_cache_dtype=kv_cache_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            instances_needed=instances_needed,
            update_instances=update_instances,
            skip_checks=skipped,
        )
        tp = tensor_parallel_size or gpus
        if skipped:
            risks = "; ".join(f"{name}: {SKIPPED_RISK[name]}" for name in skipped)
            cdk.Annotations.of(self).add_warning_v2(
                "llm:preflight-skip", f"Preflight checks skipped ({', '.join(skipped)}). Without them, {risks}."
            )
        if allow_unverified_s3 and "s3" not in skipped:
            cdk.Annotations.of(self).add_warning_v2(
                "llm:preflight-unverified-s3",
                "allow_unverified_s3: a prefix without the staging manifest is accepted, so file sizes are not "
                "verified against a manifest (only config.json and a weight file are required).",
            )

        self.provider = HandlerProvider.of(
            self, PROVIDER_ID, handler=HANDLER, packages=["preflight"], timeout=HANDLER_TIMEOUT
        )
        role = self.provider.role
        model.grant_read(role)
        role.add_to_principal_policy(iam.PolicyStatement(actions=list(QUOTA_ACTIONS), resources=["*"]))
        policy = role.node.find_child("DefaultPolicy")
        acknowledge_wildcard(
            policy,
            resource=model.object_arn_pattern,
            reason="The preflight reads config.json, the staging manifest and the weight files' sizes under the "
            "model's own prefix; nothing else in the bucket.",
        )
        acknowledge_wildcard(
            policy,
            resource="*",
            reason="servicequotas:ListServiceQuotas and ListAWSDefaultServiceQuotas support no resource-level "
            "permissions; the handler only reads SageMaker's '<instance type> for endpoint usage' quota.",
        )

        self._placement: VpcPlacement | None = None  # check_network's, once
        self.resource = self.provider.custom_resource(
            self,
            DeploymentPreflightProperties(
                model_s3_uri=model.s3_uri,
                instance_type=instance_type,
                instance_pools=tuple(instance_pools),
                pool_gpus=self._pool_gpus(instance_pools, engine),
                gpu_count=gpus,
                gpu_memory_gib=gpu_memory,
                tensor_parallel_size=tp,
                max_model_len=max_model_len,
                max_num_seqs=max_num_seqs,
                kv_cache_dtype=kv_cache_dtype,
                gpu_memory_utilization=gpu_memory_utilization,
                max_num_batched_tokens=max_num_batched_tokens,  # left out unset: older templates stay as they were
                instances_needed=instances_needed,
                update_instances=update_instances,
                allow_unverified_s3=allow_unverified_s3,
                skip_checks=skipped,
                **self._format_properties(instance_type, engine, dtype, quantization),
                gguf_file=gguf_file or None,
                checkpoint_code=tuple(sorted(checkpoint_code_patterns(engine, trust_remote_code=trust_remote_code))),
                allow_checkpoint_code=allow_checkpoint_code,
                long_context=long_context or "",
            ),
            service_timeout=SERVICE_TIMEOUT,
        )
        # The handler's permissions must be in place before it runs, and the weights before it reads them.
        self.resource.node.add_dependency(role)
        dependable: IDependable | None = getattr(model, "dependable", None)
        if dependable is not None:
            self.resource.node.add_dependency(dependable)
        self.node.default_child = self.resource
        self.model = model
        self.skipped_checks = skipped
        self.tensor_parallel_size = tp

    @staticmethod
    def _format_properties(
        instance_type: str, engine: str | None, dtype: str | None, quantization: str | None
    ) -> dict[str, str | None]:
        """What the format check needs: the GPU's compute capability and the nearest types that can do more;
        the group is left out of the template (None) when the engine or the GPU is unknown."""
        spec = lookup_instance(instance_type)
        if engine is None or spec is None:
            return dict.fromkeys(("engine", "compute_capability", "dtype", "quantization", "format_alternatives"))
        return {
            "engine": engine,
            "compute_capability": spec.compute_capability or "",
            "dtype": dtype or "",
            "quantization": quantization or "",
            "format_alternatives": json.dumps(nearest_capable(spec), sort_keys=True, separators=(",", ":")),
        }

    @classmethod
    def _pool_gpus(cls, instance_pools: Sequence[str], engine: str | None) -> dict[str, dict[str, Any]]:
        """Each catalog fallback's GPUs, so the memory and format checks run on it as on ``instance_type``."""
        out: dict[str, dict[str, Any]] = {}
        for pool in instance_pools:
            spec = lookup_instance(pool)
            if spec is None:
                continue
            entry: dict[str, Any] = {"GpuCount": spec.gpu_count, "GpuMemoryGib": spec.gpu_memory_gib}
            formats = cls._format_properties(pool, engine, None, None)
            if formats["compute_capability"]:
                entry.update(
                    ComputeCapability=formats["compute_capability"], FormatAlternatives=formats["format_alternatives"]
                )
            out[pool] = entry
        return out

    def check_network(self, placement: VpcPlacement | None) -> None:
        """Check ``placement``'s subnets and security groups before the endpoint is created (preflight/network.py):
        that they exist, the groups are in the subnets' VPC, the subnets span two Availability Zones (a note
        otherwise) and reach S3. ``GpuEndpoint`` and ``InferenceComponent`` call it themselves with their
        ``placement`` when their model is this preflight's ``checked_model``; calling it again with the same
        placement does nothing, and a second, other placement is refused (the check reads one network). None does
        nothing."""
        if placement is None:
            return
        if self._placement is not None:
            # The same subnets and groups (ids, or the tokens of a group created here) are the same network, whichever
            # endpoint's placement object names them.
            if _network_of(self._placement) != _network_of(placement):
                refuse(
                    construct_subject("DeploymentPreflight", self),
                    [
                        "its checked_model is served on two networks (two endpoints with other subnets or groups); "
                        "the network check reads one: allowed: one DeploymentPreflight per endpoint"
                    ],
                )
            return
        self._placement = placement
        self.resource.node.default_child.add_property_override("Subnets", placement.subnet_ids)
        self.resource.node.default_child.add_property_override("SecurityGroupIds", placement.security_group_ids)
        policy = self.provider.role.node.find_child("DefaultPolicy")
        self.provider.role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(NETWORK_CHECK_ACTIONS), resources=["*"])
        )
        acknowledge_wildcard(
            policy,
            resource="*",
            reason="ec2:DescribeSubnets, DescribeSecurityGroups, DescribeRouteTables and DescribeVpcEndpoints support "
            "no resource-level permissions; the preflight reads the endpoint's subnets, groups and routes to S3.",
        )

    @property
    def checked_model(self) -> ModelSource:
        """The same S3 prefix as ``model``; whatever uses it (the SageMaker Model) waits for the preflight."""
        return _CheckedModel(self.model, self)

    @property
    def max_model_len_that_fits(self) -> str:
        """The largest context one sequence can have on these GPUs (empty when the memory check is skipped)."""
        return self.resource.get_att_string("MaxModelLenThatFits")

    @property
    def weights_gib_per_gpu(self) -> str:
        return self.resource.get_att_string("WeightsGiBPerGpu")

    @property
    def kv_cache_gib_per_sequence(self) -> str:
        """KV cache of one ``max_model_len`` sequence on one GPU."""
        return self.resource.get_att_string("KvCacheGiBPerSequence")

    @property
    def quota_value(self) -> str:
        """The ``<instance type> for endpoint usage`` quota (empty when the quota check is skipped)."""
        return self.resource.get_att_string("QuotaValue")

    def _validate(
        self,
        *,
        model: ModelSource,
        instance_type: str,
        max_model_len: int | None,
        gpu_count: int | None,
        gpu_memory_gib: float | None,
        tensor_parallel_size: int | None,
        max_num_seqs: int,
        kv_cache_dtype: str,
        gpu_memory_utilization: float,
        max_num_batched_tokens: int | None,
        instances_needed: int,
        update_instances: int,
        skip_checks: Sequence[str],
    ) -> tuple[int, float]:
        """(GPUs per instance, memory per GPU); one ValueError naming every problem."""
        problems: list[str] = []
        if not cdk.Token.is_unresolved(model.s3_uri):
            try:
                parse_s3_uri(model.s3_uri)
            except ValueError as e:
                problems.append(str(e))
        spec, instance_problems = resolve_instance(instance_type, gpu_count=gpu_count, gpu_memory_gib=gpu_memory_gib)
        problems += instance_problems
        gpus = spec.gpu_count if spec else 1
        for name, value in (
            ("max_model_len", max_model_len),
            ("max_num_seqs", max_num_seqs),
            ("instances_needed", instances_needed),
            ("tensor_parallel_size", tensor_parallel_size),
            ("max_num_batched_tokens", max_num_batched_tokens),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                problems.append(f"{name}={value!r} must be a whole number of at least 1")
        if isinstance(tensor_parallel_size, int) and spec and tensor_parallel_size > gpus:
            problems.append(
                f"tensor_parallel_size={tensor_parallel_size} exceeds the {gpus} GPU(s) of {instance_type}; "
                f"allowed: 1-{gpus}"
            )
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            problems.append(f"kv_cache_dtype={kv_cache_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)}")
        if not 0 < gpu_memory_utilization <= 1:
            problems.append(f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1]")
        unknown = [name for name in skip_checks if name not in CHECKS]
        if isinstance(update_instances, bool) or not isinstance(update_instances, int) or update_instances < 0:
            problems.append(f"update_instances={update_instances!r} must be a whole number of at least 0")
        if unknown:
            problems.append(f"skip_checks names unknown checks {unknown}; allowed: {', '.join(CHECKS)}")
        refuse(construct_subject("DeploymentPreflight", self), problems)
        assert spec is not None
        return spec.gpu_count, spec.gpu_memory_gib
