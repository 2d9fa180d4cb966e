"""The deployment's settings, read once from CDK context and validated together.

``app.py`` hands the raw context to ``DeploymentConfig.from_context``; nothing else reads context.
CLI context (``-c key=value``) always arrives as text, so numbers, booleans and JSON objects are
accepted both as JSON values (from cdk.json) and as their text form.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field, make_dataclass
from difflib import get_close_matches
from typing import TYPE_CHECKING, Any

from constructs_lib import EngineSpec, LoadGate, Refusal, ServingImage, get_engine
from constructs_lib.names import (
    COMPONENT_NAME,
    local_storage_problem,
    matches,
)
from constructs_lib.rules import (
    ASYNC,
    DEFAULT_INVOCATION_TIMEOUT_S,
    GGUF_FILE_DESCRIPTION,
    INFERENCE_COMPONENT,
    LOAD_CONTEXT_KEYS,
    SECRET_HINT,
    default_image,
    engine_names,
    engine_timeout_problems,
    is_model_archive,
    job_source_problem,
    load_gate_problems,
    looks_secret,
    parse_s3_uri,
    plan_endpoint,
    plan_scaling,
    pool_problems,
    recorded_tag_key,
    remote_code_keys,
    resolve_scaling,
    smoke_request_problems,
    staging_patterns,
)
from hfstage.uris import parse_source
from preflight import KV_CACHE_DTYPES

from .context_keys import FIELDS, KEYS  # the registry: one entry per key
from .observability import observability_problems, update_batch_copies

# Context keys CDK itself (or the CLI) sets; they are not ours to validate.
CDK_OWN_KEYS = {"cli-telemetry", "acknowledged-issue-numbers"}
DEFAULT_ENGINE = "vllm"
# Free-form maps may hold a pasted secret by mistake: never repeat their raw text in an error.
# hf_token_secret_arn too: a token pasted where its secret's ARN belongs must not be printed back.
UNECHOED_KEYS = {"engine_env", "container_env", "hf_token_secret_arn"}
# Any other bad value is shown in its refusal up to this many characters, then cut (with its length).
MAX_ECHOED = 200

# Context keys handed to component_plan.plan_scaling under the same names.
SCALING_KEYS = (
    "scale_to_zero",
    "min_instances",
    "max_instances",
    "accelerators_per_copy",
    "min_copies",
    "initial_copies",
    "max_copies",
    "target_concurrency",
    "target_invocations_per_instance",
    "routing_strategy",
    "min_memory_mb",
    "target_backlog_per_instance",
)
# The keys of an asynchronous endpoint (the registry's "async" section), refused in the other modes rather than ignored.
ASYNC_KEYS = tuple(key.name for key in KEYS if key.section == "async")


def is_cdk_key(key: str) -> bool:
    """Keys CDK owns: feature flags, its own settings, and recorded lookups (ours included)."""
    return (
        key.startswith(("@aws-cdk/", "aws:", "aws-cdk:", "dlc-image-tag:")) or ":account=" in key or key in CDK_OWN_KEYS
    )


class ConfigError(Refusal):
    """Every problem with the context (constructs_lib.problems: the one format of every refusal at synth)."""

    SUBJECT = "context (fix with -c key=value or in cdk.json)"

    def __init__(self, problems: list[str]) -> None:
        super().__init__(self.SUBJECT, problems)


SLO_KEYS = tuple(f"slo_{field}" for field in LOAD_CONTEXT_KEYS if field != "budget")


def _load_gate(values: Mapping[str, Any]) -> LoadGate | None:
    given = {key.removeprefix("slo_"): values[key] for key in SLO_KEYS if values.get(key) is not None}
    return LoadGate(**given) if given else None


def _load_gate_problems(values: Mapping[str, Any]) -> list[str]:
    """The construct's rules for the gate (constructs_lib/load_gate.py), named by their context keys; the ranges
    are the parsers' (a bad value is reported there, and the gate is not checked further)."""
    if not all(key in values for key in (*SLO_KEYS, "smoke_budget_s")):
        return []
    gate = _load_gate(values)
    if gate is None:
        return []
    if values.get("smoke_test") is False:
        given = ", ".join(key for key in SLO_KEYS if values.get(key) is not None)
        return [
            f"{given}: the load gate runs in the smoke test, and smoke_test=false leaves it out; set both or neither"
        ]
    return load_gate_problems(gate, values["smoke_budget_s"], names=LOAD_CONTEXT_KEYS, own_ranges=False)


def _async_problems(values: Mapping[str, Any], engine: Any) -> list[str]:
    """What an asynchronous deployment cannot do, and async keys outside one, each named by its key."""
    if "deployment_mode" not in values:
        return []
    given = [key for key in ASYNC_KEYS if values.get(key) is not None]
    if values["deployment_mode"] != ASYNC:
        return [
            f"{key}={values[key]!r} applies only with deployment_mode=async (this is deployment_mode="
            f"{values['deployment_mode']}); leave it unset or switch modes"
            for key in given
        ]
    problems = []
    if values.get("alarm_model_errors_percent") is not None:
        problems.append(
            f"alarm_model_errors_percent={values['alarm_model_errors_percent']}: an asynchronous endpoint publishes no "
            "InvocationModelErrors (async-inference-monitor.html); its failed requests have their own alarm, "
            "alarm_async_failures; leave it unset"
        )
    slo = [key for key in SLO_KEYS if values.get(key) is not None]
    if slo:
        problems.append(
            f"{', '.join(slo)}: the load gate streams its requests, and an asynchronous endpoint answers only "
            "through its queue (no InvokeEndpoint, no response stream); leave them unset, and measure with "
            "llmops bench --async"
        )
    if engine is not None:
        timeout = values.get("async_invocation_timeout_s") or DEFAULT_INVOCATION_TIMEOUT_S
        problems += engine_timeout_problems(
            engine,
            values.get("engine_env"),
            values.get("container_env"),
            timeout,
            key="async_invocation_timeout_s",
        )
    return problems


def _preflight_engine_settings(engine: Any, engine_env: Mapping[str, Any]) -> list[str]:
    """The engine flags the memory-fit preflight reads must hold values it understands."""
    problems = []
    settings = engine.preflight_settings(engine_env)
    keys = engine.preflight_keys
    dtype = settings.get("kv_cache_dtype")
    if dtype is not None and dtype not in KV_CACHE_DTYPES:
        problems.append(
            f"engine_env {keys['kv_cache_dtype']}={dtype!r}: the preflight cannot size this KV-cache dtype; "
            f"allowed: {', '.join(KV_CACHE_DTYPES)}"
        )
    tokens = settings.get("max_num_batched_tokens")
    if tokens is not None and not (isinstance(tokens, float) and tokens.is_integer() and tokens >= 1):
        problems.append(
            f"engine_env {keys['max_num_batched_tokens']}={engine_env[keys['max_num_batched_tokens']]!r}: expected a "
            'whole number of at least 1 (as a number or as text such as "8192")'
        )
    share = settings.get("gpu_memory_utilization")
    if share is None:
        return problems
    given = engine_env[keys["gpu_memory_utilization"]]
    # A JSON infinity (1e999) is reported by the engine-flag check already; text such as "inf" is not.
    reported = isinstance(given, float) and not math.isfinite(given)
    if not reported and (not isinstance(share, float) or not (math.isfinite(share) and 0 < share <= 1)):
        problems.append(
            f"engine_env {keys['gpu_memory_utilization']}={given!r}: expected a number above 0 and at most 1 "
            '(as a number or as text such as "0.9")'
        )
    return problems


def _gguf_file_problems(engine: EngineSpec, gguf_file: str | None) -> list[str]:
    """gguf_file goes with an engine that serves GGUF files, and such an engine needs one."""
    if gguf_file and engine.model_format != "gguf":
        serving = [n for n in engine_names() if get_engine(n).model_format == "gguf"]
        return [
            f"gguf_file={gguf_file!r}: engine={engine.name!r} serves {engine.model_format} checkpoints, not GGUF "
            f"files; allowed: engine={' or '.join(serving)} with gguf_file, or no gguf_file"
        ]
    if not gguf_file and engine.model_format == "gguf":
        return [f"gguf_file: missing; engine={engine.name!r} serves one GGUF file: give {GGUF_FILE_DESCRIPTION}"]
    return []


def _governance_problems(values: Mapping[str, Any]) -> list[str]:
    """The network, key and tag settings that only make sense together."""
    problems = []
    subnets, groups = values.get("vpc_subnet_ids"), values.get("vpc_security_group_ids")
    if groups and not subnets:
        problems.append(
            f"vpc_security_group_ids={list(groups)!r}: only with vpc_subnet_ids (the subnets the groups apply in)"
        )
    if values.get("vpc_id") and not subnets:
        problems.append(f"vpc_id={values['vpc_id']!r}: only with vpc_subnet_ids (subnets of that VPC)")
    if subnets and not groups and not values.get("vpc_id") and "vpc_security_group_ids" in values:
        problems.append(
            f"vpc_subnet_ids={list(subnets)!r}: give vpc_security_group_ids, or vpc_id to create a security group "
            "(no inbound rule, HTTPS out) in that VPC"
        )
    if values.get("hf_endpoint") and values.get("model_s3_uri"):
        problems.append(
            f"hf_endpoint={values['hf_endpoint']!r}: only applies to staging from the Hub, not with model_s3_uri"
        )
    # A model.tar.gz is staged into the app's bucket, which bucket_kms_key_arn encrypts; a prefix is served as is.
    given_prefix = values.get("model_s3_uri") and not is_model_archive(values["model_s3_uri"])
    if values.get("bucket_kms_key_arn") and (values.get("model_bucket") or given_prefix):
        problems.append(
            f"bucket_kms_key_arn={values['bucket_kms_key_arn']!r}: for the bucket this stack creates (or reuses); "
            "a given bucket's key is model_kms_key_arn"
        )
    staging_type = values.get("staging_instance_type")
    staged = values.get("volume_kms_key_arn") and staging_type and not values.get("model_s3_uri")
    if staged and (why := local_storage_problem(staging_type)):
        problems.append(f"volume_kms_key_arn with staging_instance_type={staging_type!r}: {why}")
    return problems


def describe_allowed(key: str) -> str:
    """What ``key`` takes: every parser carries a description (tests/stacks/test_config_rules.py checks it)."""
    return str(FIELDS[key].__doc__)


class _Settings:
    """DeploymentConfig's methods. Its fields are the registry's keys, one each (context_keys.py), made into the
    frozen dataclass below: a new key is a registry entry and the code that reads it, never a field kept here."""

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> DeploymentConfig:
        """Parse and check every key; raise ``ConfigError`` naming each bad key, value and what is allowed."""
        problems: list[str] = []
        ours = {k: v for k, v in context.items() if not is_cdk_key(k)}
        for key in sorted(set(ours) - set(FIELDS)):
            near = get_close_matches(key, FIELDS, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(sorted(FIELDS))}"
            # The value is never echoed: a misspelt key may hold a pasted secret ("container-env={HF_TOKEN...").
            if looks_secret(key):
                problems.append(f"{key}: unknown context key; {SECRET_HINT}")
            else:
                problems.append(f"{key}: unknown context key{hint}")

        values: dict[str, Any] = {}
        for key, parse in FIELDS.items():
            # CDK drops null values, so an optional key whose cdk.json default is null is simply absent.
            raw = ours.get(key)
            try:
                values[key] = parse(raw)
            except ValueError as e:
                if raw is None:
                    problems.append(f"{key}: missing; cdk.json must give a default ({describe_allowed(key)})")
                else:
                    shown = f"<{len(str(raw))} characters, not echoed>" if key in UNECHOED_KEYS else repr(raw)
                    if len(shown) > MAX_ECHOED:  # a 100,000-bracket value is named, not printed
                        shown = f"{shown[: MAX_ECHOED // 2]}… ({len(str(raw)):,} characters)"
                    problems.append(f"{key}={shown}: {e}")
        # Keep going after bad values so one run names every problem: checks that need a value that
        # failed to parse are skipped, the rest still run.
        if values.get("model_s3_uri") and values.get("model_bucket"):
            problems.append(
                f"model_s3_uri={values['model_s3_uri']!r} and model_bucket={values['model_bucket']!r}: "
                "give at most one (model_s3_uri serves that exact prefix; model_bucket holds "
                "models/<org>--<name>/<revision>/)"
            )
        archive = is_model_archive(values.get("model_s3_uri"))  # a model.tar.gz: staged into the app's bucket
        if values.get("reuse_model_bucket") and (
            (values.get("model_s3_uri") and not archive) or values.get("model_bucket")
        ):
            problems.append(
                "reuse_model_bucket=true: reuses the bucket this app created before (<stack>-models-<account>-"
                "<region>); give it alone, not with model_bucket or model_s3_uri"
            )
        if values.get("model_kms_key_arn") and not (values.get("model_s3_uri") or values.get("model_bucket")):
            problems.append(
                f"model_kms_key_arn={values['model_kms_key_arn']!r}: only for a given bucket (model_bucket or "
                "model_s3_uri); the bucket this stack creates uses S3-managed keys"
            )
        if values.get("hf_token_kms_key_arn") and not values.get("hf_token_secret_arn"):
            problems.append(
                f"hf_token_kms_key_arn={values['hf_token_kms_key_arn']!r}: only with hf_token_secret_arn (it is the "
                "key that secret is encrypted with)"
            )
        if values.get("model_s3_uri") and archive and values.get("hf_token_secret_arn"):
            problems.append(
                f"model_s3_uri={values['model_s3_uri']!r}: a model.tar.gz is read from S3 with the staging job's "
                "role, so hf_token_secret_arn (a Hugging Face token) must not be given with it"
            )
        if values.get("model_s3_uri") and not archive and (values.get("hf_token_secret_arn") or values.get("include")):
            problems.append(
                f"model_s3_uri={values['model_s3_uri']!r}: serves an existing prefix as it is, so hf_token_secret_arn "
                "and include (which only apply to staging from the Hub) must not be given with it"
            )
        problems += _governance_problems(values)
        if values.get("model_s3_uri"):
            try:
                if archive:
                    parse_source(values["model_s3_uri"])
                else:
                    parse_s3_uri(values["model_s3_uri"])
            except ValueError as e:
                problems.append(f"model_s3_uri: {e}" if archive else str(e))
            else:  # the construct's rule (StagedCheckpoint source_s3_uri), named by its context key
                if archive and (why := job_source_problem(values["model_s3_uri"])):
                    problems.append(f"model_s3_uri={values['model_s3_uri'][:200]!r}: {why}")

        engine_known = "engine" in values
        engine = get_engine(values["engine"] if engine_known else DEFAULT_ENGINE)
        image_source = "engine default (constructs_lib/data/engines.json)"
        image = default_image(engine, values.get("instance_type"))
        if engine.image_build:
            image_source = f"built by cdk deploy from {engine.image_build['directory']} (Docker needed)"
        try:
            if values.get("image"):
                image = ServingImage.from_uri(values["image"])
                image_source = "image context key"
            elif "instance_type" in values and not engine.image_build:
                key = recorded_tag_key(engine.name, values["instance_type"])
                recorded = context.get(key)
                if recorded is not None:
                    if not isinstance(recorded, str) or not engine.tag_pattern.fullmatch(recorded):
                        raise ValueError(
                            f"{key}={recorded!r} in cdk.context.json is not a pinned DLC tag "
                            f"({engine.tag_format}); rerun python -m llmops.resolve_image "
                            f"or remove it with `npx cdk context --reset {key}`"
                        )
                    image = ServingImage.from_dlc(
                        engine,
                        recorded,
                        origin=f"the tag recorded under {key} in cdk.context.json (to drop it: npx cdk context "
                        f"--reset {key})",
                    )
                    image_source = "recorded by llmops.resolve_image in cdk.context.json"
        except ValueError as e:
            problems.append(str(e))

        component_mode = values.get("deployment_mode") == INFERENCE_COMPONENT
        if engine_known and values.get("tensor_parallel_size") is not None and not engine.splits_tensors:
            problems.append(
                f"tensor_parallel_size={values['tensor_parallel_size']}: engine={engine.name!r} has no tensor parallel "
                "size (it spreads the model over every GPU it is given by itself); allowed: leave it unset"
                + (", and give a component its GPUs with accelerators_per_copy" if component_mode else "")
            )
        if component_mode and values.get("tensor_parallel_size") is None:
            values["tensor_parallel_size"] = values.get("accelerators_per_copy")
        if engine_known and "gguf_file" in values:
            problems += _gguf_file_problems(engine, values["gguf_file"])
        if "instance_type" in values:
            # Only the settings the parsers above cannot check alone (instance_count, max_model_len,
            # max_num_seqs and download_timeout_s are range-checked there; the model file does not change
            # any check): the constructs plan again with every setting when they build the endpoint.
            plan = plan_endpoint(
                engine=engine,
                image=image,
                instance_type=values["instance_type"],
                gpu_count=values.get("gpu_count"),
                gpu_memory_gib=values.get("gpu_memory_gib"),
                # A component's copy may use fewer GPUs than the instance has: plan_scaling checks it.
                tensor_parallel_size=None if component_mode else values.get("tensor_parallel_size"),
                # Engine flags can only be checked against a known engine.
                engine_env=values.get("engine_env") if engine_known else None,
                container_env=values.get("container_env") if engine_known else None,
                inference_ami_version=values.get("inference_ami_version"),
                capacity_reservation_arn=values.get("capacity_reservation_arn"),
                startup_timeout_s=values.get("startup_timeout_s"),
                endpoint_name=values.get("endpoint_name"),
                allow_checkpoint_code=bool(values.get("allow_checkpoint_code")),
                volume_kms_key=bool(values.get("volume_kms_key_arn")),
            )
            problems += plan.errors
            scaling_problems = []
            if "deployment_mode" in values:
                scaling = resolve_scaling(
                    deployment_mode=values["deployment_mode"],
                    instance_spec_gpu_count=plan.instance.gpu_count if plan.instance else None,
                    tensor_parallel_size=values.get("tensor_parallel_size"),
                    initial_instances=values.get("instance_count"),
                    # The default max_instances leaves room for one update batch; a given one must (component_plan).
                    update_batch_copies=update_batch_copies(values) if component_mode else None,
                    # Standard mode checks its reservation against the update policy (observability.py).
                    capacity_reservation=component_mode and bool(values.get("capacity_reservation_arn")),
                    capacity_reservation_instances=values.get("capacity_reservation_instances"),
                    **{key: values.get(key) for key in SCALING_KEYS if key in values},
                )
                scaling_problems = scaling.errors
                problems += scaling_problems
                cooldowns = [k for k in ("scale_in_cooldown_s", "scale_out_cooldown_s") if values.get(k) is not None]
                if cooldowns and not scaling_problems and not (scaling.scales_instances or scaling.scales_copies):
                    # The stack adds them to the target tracking policy, which exists only when something scales.
                    problems.append(
                        f"{' and '.join(f'{k}={values[k]}' for k in cooldowns)}: only when the deployment autoscales "
                        "(standard mode: max_instances above min_instances; component mode: max_copies above "
                        "min_copies, or scale_to_zero); here nothing scales, so it would be ignored"
                    )
            if values.get("instance_pools") and not plan.errors and not scaling_problems:

                def pool_check(pool: str) -> list[str]:
                    # The primary's settings on each type: one Model (its tensor parallel size), one AMI.
                    checked = plan_endpoint(
                        engine=engine,
                        image=image,
                        instance_type=pool,
                        tensor_parallel_size=None if component_mode else plan.tensor_parallel_size,
                        engine_env=values.get("engine_env") if engine_known else None,
                        container_env=values.get("container_env") if engine_known else None,
                        inference_ami_version=plan.inference_ami_version,
                        allow_checkpoint_code=bool(values.get("allow_checkpoint_code")),
                        volume_kms_key=bool(values.get("volume_kms_key_arn")),
                    )
                    if not component_mode or checked.instance is None or "deployment_mode" not in values:
                        return checked.errors
                    # A copy keeps the primary's GPUs on every type; its copies and an update's batch must fit there.
                    return checked.errors + plan_scaling(
                        deployment_mode=values["deployment_mode"],
                        instance_spec_gpu_count=checked.instance.gpu_count,
                        initial_instances=values.get("instance_count"),
                        update_batch_copies=update_batch_copies(values),
                        **{key: values.get(key) for key in SCALING_KEYS if key in values},
                        tensor_parallel_size=values.get("tensor_parallel_size") or plan.tensor_parallel_size,
                    )

                problems += pool_problems(values["instance_type"], values["instance_pools"], pool_check)
        if values.get("component_name") is not None and not matches(COMPONENT_NAME, values["component_name"]):
            problems.append(
                f"component_name={values['component_name']!r}: not a valid inference component name; allowed: "
                "1-63 letters, digits and hyphens, starting and ending with a letter or digit"
            )
        if values.get("component_name") is not None and not component_mode:
            problems.append(
                f"component_name={values['component_name']!r}: only with deployment_mode=inference-component"
            )
        if "engine" in values:
            problems += _preflight_engine_settings(get_engine(values["engine"]), values.get("engine_env") or {})
        problems += smoke_request_problems(
            values.get("smoke_inputs"),
            values.get("smoke_expected_pattern"),
            body_key="smoke_inputs",
            pattern_key="smoke_expected_pattern",
        )
        problems += _load_gate_problems(values)
        problems += _async_problems(values, engine if engine_known else None)
        problems += observability_problems(values)
        if problems:
            raise ConfigError(problems)
        return cls(**values, serving_image=image, image_source=image_source)

    @property
    def load_gate(self) -> LoadGate | None:
        """The smoke test's load gate: on when any ``slo_*`` key is set, the others at the gate's defaults."""
        return _load_gate(vars(self))

    @property
    def engine_spec(self) -> EngineSpec:
        """The engine, its model path pointing at ``gguf_file`` when one is given."""
        engine = get_engine(self.engine)
        return engine.for_model_file(self.gguf_file) if self.gguf_file else engine

    @property
    def trust_remote_code(self) -> bool:
        """Whether engine_env switches on the engine's remote-code flag, under any spelling it reads."""
        return bool(remote_code_keys(self.engine_spec, self.engine_env))

    @property
    def staging_include(self) -> tuple[str, ...]:
        """``include``, plus the GGUF file and its split parts: the only weights staged for llama.cpp."""
        return (*self.include, *staging_patterns(self.gguf_file)) if self.gguf_file else self.include


# One field per registry key, in its order (the registry's parsers give each its value), then what is derived.
# Type checkers see a class whose fields are Any (they cannot read make_dataclass); at run time it is the dataclass.
if TYPE_CHECKING:

    class DeploymentConfig(_Settings):
        serving_image: ServingImage
        image_source: str

        def __getattr__(self, name: str) -> Any: ...

else:
    DeploymentConfig = make_dataclass(
        "DeploymentConfig",
        [
            *((key.name, Any) for key in KEYS),
            ("serving_image", ServingImage, field(repr=False, default=None)),
            ("image_source", str, field(default="engine default")),
        ],
        bases=(_Settings,),
        frozen=True,
    )
    DeploymentConfig.__module__ = __name__  # make_dataclass's own module argument is Python 3.12's
    DeploymentConfig.__doc__ = "A deployment's settings: every context key parsed and checked (from_context)."
