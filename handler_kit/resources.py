"""The properties of each custom resource, typed and defined once: the construct writes them, the handler reads them.

CloudFormation passes every scalar property as a string (CloudFormation User Guide, "Custom resources":
``ResourceProperties`` values arrive as strings), so ``to_properties`` renders numbers as text and
``from_properties`` parses them back. A default lives here only: the construct fills what its user left out
from the same fields the handler falls back to (provider framework's consts.ts shares its names the same way).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any, ClassVar, Self

import safejson
from handler_kit import refusal, shorten, string_list

GIB = 2**30
# The tags every staging job carries besides the user's (lambda/staged_checkpoint/staging_job.py): the repository
# or archive it stages, and the revision. A user tag may not take these keys (constructs_lib/tags.py).
JOB_TAG_KEYS = ("hf-repo-id", "hf-revision")


# --- the declared form: one ``prop`` per property, read and written by one base class -------------------------

TEXT, WHOLE, NUMBER, LIST, OBJECT = "text", "whole number", "number", "list", "JSON object"
FLAG = "flag (true or false)"
TAGS = "list of tags ({Key, Value})"  # CreateProcessingJob's Tags shape; the field holds (key, value) pairs


def prop(
    name: str,
    kind: str = TEXT,
    default: Any = MISSING,
    *,
    required: bool = False,
    omit_default: bool = False,
    omit_empty: bool = False,
    blank_when_unset: bool = False,
    blank_is_value: bool = False,
) -> Any:
    """A field of a properties class: its CloudFormation name, how its text is read, and its one default.

    ``required``: the template must hold it; a ``default`` given with it is the constructor's only (a value the
    construct sets late, or fills from this default). ``omit_default``: the template leaves the property out while
    it has its default (so adding the property did not change the templates, and re-run the resource, of stacks
    deployed before it existed); ``omit_empty``: likewise while it is empty (``""``, 0, false, no items). A field
    set to ``None`` is left out, unless ``blank_when_unset``: then it is written as ``""`` (what older templates
    hold). ``blank_is_value``: a blank property that is present is read as given, not as the default.
    """
    metadata = {
        "cfn": name,
        "kind": kind,
        "required": required,
        "omit_default": omit_default,
        "omit_empty": omit_empty,
        "blank_when_unset": blank_when_unset,
        "blank_is_value": blank_is_value,
    }
    if required and default is MISSING:
        return dataclass_field(metadata=metadata)
    if isinstance(default, dict):
        frozen = dict(default)
        return dataclass_field(default_factory=lambda: dict(frozen), metadata=metadata)
    if default is MISSING:
        default = () if kind in (LIST, TAGS) else None
    return dataclass_field(default=default, metadata=metadata)


class PropertiesError(ValueError):
    """A resource's properties cannot be read: every bad property, its value and what it must be."""


class ResourceProperties:
    """The base of a frozen dataclass of ``prop`` fields: one custom resource's properties, typed.

    ``to_properties`` writes the template's text: numbers as text, flags as ``"true"``/``"false"``, lists as
    lists, an object as compact JSON (or the construct's token for one), unset values left out. ``from_properties``
    reads what CloudFormation sends, with every problem in one ``PropertiesError``, or appended to ``problems``
    (the handler then adds its own checks and reports all of them together).

    ``READ_AS_GIVEN`` reads a resource as the staged checkpoint's first release did, which its handler and tests
    still rely on: a required property missing is a ``KeyError`` naming it, one present is read even when blank,
    a blank optional one (``""``) is its default, a value that does not parse raises at once (``int()``'s
    ``ValueError``), and a flag is true only when it reads ``true`` in any case.
    """

    RESOURCE: ClassVar[str] = "Custom::Resource"
    READ_AS_GIVEN: ClassVar[bool] = False
    if TYPE_CHECKING:  # every subclass is a dataclass: what dataclasses.fields() reads
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @classmethod
    def names(cls) -> dict[str, str]:
        """field -> CloudFormation property name."""
        return {f.name: f.metadata["cfn"] for f in fields(cls)}

    @classmethod
    def default(cls, name: str) -> Any:
        """The one default of field ``name`` (the construct's and the handler's)."""
        (spec,) = (f for f in fields(cls) if f.name == name)
        if spec.default_factory is not MISSING:
            return spec.default_factory()
        return None if spec.default is MISSING else spec.default

    def to_properties(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for spec in fields(self):
            value, kind = getattr(self, spec.name), spec.metadata["kind"]
            if value is None and spec.metadata["blank_when_unset"]:
                out[spec.metadata["cfn"]] = ""
                continue
            if value is None or (kind == OBJECT and value == {}):
                continue
            if spec.metadata["omit_default"] and value == self.default(spec.name):
                continue
            if spec.metadata["omit_empty"] and not value:
                continue
            if kind == FLAG:
                value = "true" if value else "false"
            elif kind == WHOLE and isinstance(value, int):
                value = str(value)
            elif kind == NUMBER and isinstance(value, int | float):
                value = f"{value:g}"
            elif kind == LIST:
                value = list(value)
            elif kind == TAGS:
                value = [{"Key": key, "Value": text} for key, text in value]
            elif kind == OBJECT and isinstance(value, dict):
                value = json.dumps(value, sort_keys=True, separators=(",", ":"))
            out[spec.metadata["cfn"]] = value
        return out

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], problems: list[str] | None = None) -> Self:
        """Parse what CloudFormation sent. Without ``problems``, raise on any; with it, append them and fill the
        bad or missing fields with their defaults (an empty text for a required one). ``READ_AS_GIVEN``: raise
        the first, with or without ``problems``."""
        if cls.READ_AS_GIVEN:
            return cls(**{spec.name: cls._read_as_given(spec, props) for spec in fields(cls)})
        found: list[str] = []
        values: dict[str, Any] = {}
        for spec in fields(cls):
            key, kind = spec.metadata["cfn"], spec.metadata["kind"]
            raw = props.get(key)
            blank = raw is None or (isinstance(raw, str) and raw.strip() == "")
            if blank and not (raw is not None and spec.metadata["blank_is_value"]):
                if spec.metadata["required"]:
                    found.append(f"{key} is required")
                values[spec.name] = "" if spec.metadata["required"] else cls.default(spec.name)
                continue
            value = _read(key, kind, raw, found)
            values[spec.name] = cls.default(spec.name) if value is None else value
        if problems is None and found:
            raise PropertiesError(refusal(f"{cls.RESOURCE} properties", found))
        if problems is not None:
            problems.extend(found)
        return cls(**values)

    @classmethod
    def _read_as_given(cls, spec: Field[Any], props: Mapping[str, Any]) -> Any:
        """One property as ``READ_AS_GIVEN`` reads it (raising, not collecting)."""
        key, kind, meta = spec.metadata["cfn"], spec.metadata["kind"], spec.metadata
        if props.get(key) in (None, "") and not meta["required"] and not (meta["blank_is_value"] and key in props):
            return cls.default(spec.name)
        raw = props[key]  # a required property that is missing: a KeyError naming it
        if kind == WHOLE:
            return int(raw)
        if kind == FLAG:
            return str(raw).lower() == "true"
        if kind == LIST:
            return string_list(raw)
        if kind == TAGS:
            return _tags(raw)
        return str(raw)


def _tags(raw: Any) -> tuple[tuple[str, str], ...]:
    """A list of ``{"Key": k, "Value": v}`` as (key, value) pairs; entries without a key are dropped."""
    return tuple((str(t["Key"]), str(t.get("Value", ""))) for t in raw if isinstance(t, dict) and "Key" in t)


def _read(key: str, kind: str, raw: Any, problems: list[str]) -> Any:
    """One property's text as its kind, or None and a problem naming the key, the value and the kind."""
    text = raw.strip() if isinstance(raw, str) else raw
    try:
        if kind == TEXT:
            return str(raw)
        if kind == WHOLE:
            return int(str(text))
        if kind == NUMBER:
            return float(str(text))
        if kind == FLAG:
            if str(text).lower() not in ("true", "false"):
                raise ValueError(text)
            return str(text).lower() == "true"
        if kind == LIST:
            return string_list(raw)
        if kind == TAGS:
            if not isinstance(raw, list):
                raise ValueError(raw)
            return _tags(raw)
        if kind == OBJECT:
            value = safejson.loads(raw, source=key) if isinstance(raw, str) else raw
            if not isinstance(value, dict):
                raise ValueError(raw)
            return value
    except (ValueError, TypeError):
        problems.append(f"{key}={shorten(repr(raw), 200)} is not a {kind}")
        return None
    raise AssertionError(f"unknown kind {kind!r}")


@dataclass(frozen=True)
class StagedCheckpointProperties(ResourceProperties):
    """``Custom::StagedCheckpoint``: constructs_lib.StagedCheckpoint writes it, lambda/staged_checkpoint reads it.

    Only ARNs and names: the Hub token itself is never a property. The names are the template's spelling, as the
    first release wrote them; the VPC, tags, volume key and adapter check are left out when empty, so a template
    without them keeps the properties (and their hash) it had.
    """

    RESOURCE: ClassVar[str] = "Custom::StagedCheckpoint"
    READ_AS_GIVEN: ClassVar[bool] = True
    repo_id: str = prop("RepoId", required=True)  # "" for an archive source (source_s3_uri)
    bucket: str = prop("Bucket", required=True)
    image_uri: str = prop("ImageUri", required=True)
    role_arn: str = prop("RoleArn", required=True)
    code_uri: str = prop("CodeUri", required=True)
    revision: str = prop("Revision", TEXT, "main")
    prefix: str = prop("Prefix", TEXT, "models/", blank_is_value=True)
    include: tuple[str, ...] = prop("Include", LIST)
    exclude: tuple[str, ...] = prop("Exclude", LIST)
    token_secret_arn: str | None = prop("TokenSecretArn", blank_when_unset=True)  # "" is read as unset
    hub_endpoint: str | None = prop("HubEndpoint", blank_when_unset=True)
    instance_type: str = prop("InstanceType", TEXT, "ml.m5.2xlarge")
    max_instances: int = prop("MaxInstances", WHOLE, 4)
    bytes_per_instance: int = prop("BytesPerInstance", WHOLE, 100 * GIB)
    volume_size_gb: int = prop("VolumeSizeGb", WHOLE, 30)
    max_runtime_s: int = prop("MaxRuntimeSeconds", WHOLE, 6 * 3600, required=True)
    handoff_s: int = prop("HandoffSeconds", WHOLE, 600)
    # The job's VpcConfig (NetworkConfig.VpcConfig of CreateProcessingJob): both or neither.
    subnets: tuple[str, ...] = prop("Subnets", LIST, omit_empty=True)
    security_group_ids: tuple[str, ...] = prop("SecurityGroupIds", LIST, omit_empty=True)
    # The user's tags for the job, (key, value) pairs, added to the job's own (CreateProcessingJob Tags).
    tags: tuple[tuple[str, str], ...] = prop("Tags", TAGS, omit_empty=True)
    # The job's ML storage volume key (ProcessingResources.ClusterConfig.VolumeKmsKeyId).
    volume_kms_key_arn: str | None = prop("VolumeKmsKeyId", omit_empty=True)
    # A model.tar.gz to unpack instead of a Hub repository (repo_id is then ""): s3://bucket/key.tar.gz. Left out
    # until set, so a Hub checkpoint's template is unchanged.
    source_s3_uri: str | None = prop("SourceS3Uri")
    # A Hub repository packed into one model.tar.gz (hfstage.pack: a LoRA adapter's ArtifactUrl), not unpacked.
    pack: bool = prop("Pack", FLAG, False, omit_empty=True)
    # With pack, a LoRA adapter: its adapter_config.json is checked against the base before any job
    # (preflight/adapters.py). "" base: a base served from S3 (its name is not compared); 0 rank: no check.
    adapter_base: str | None = prop("AdapterBase", omit_empty=True)
    max_lora_rank: int = prop("MaxLoraRank", WHOLE, 0, omit_empty=True)
    # Set by the construct once the other properties are known (their hash names the job family and handle).
    job_name_prefix: str | None = prop("JobNamePrefix", TEXT, None, required=True)
    wait_handle: str | None = prop("WaitHandle")

    @property
    def source(self) -> str:
        """What is staged, as the manifest's ``repo_id`` names it: the Hub repository or the archive's URI."""
        return self.source_s3_uri or self.repo_id


@dataclass(frozen=True)
class EndpointSmokeTestProperties(ResourceProperties):
    """``Custom::EndpointSmokeTest``: constructs_lib.EndpointSmokeTest writes it, lambda/endpoint_smoke_test reads it.

    The prompt appears in the template (no secrets); ``fingerprint`` only makes a change re-run the test.
    """

    RESOURCE: ClassVar[str] = "Custom::EndpointSmokeTest"
    endpoint_name: str = prop("EndpointName", required=True)
    endpoint_config_name: str = prop("EndpointConfigName", required=True)
    prompt: str = prop("Prompt", required=True)
    max_tokens: int = prop("MaxTokens", WHOLE, 64)
    inference_component_name: str | None = prop("InferenceComponentName")
    model_name: str | None = prop("ModelName")  # the component's model this deployment created
    # A dict, or the construct's JSON token for one. prop() copies its default per instance (RUF009 cannot see it).
    extra_body: Any = prop("ExtraBody", OBJECT, {})  # noqa: RUF009
    expected_pattern: str | None = prop("ExpectedPattern")
    budget_s: float = prop("BudgetSeconds", NUMBER, 600.0)
    stream: bool = prop("Stream", FLAG, True)
    stream_format: str = prop("StreamFormat", TEXT, "sse", omit_default=True)  # engines.json stream_format
    fingerprint: str | None = prop("Fingerprint")
    # The load gate (constructs_lib/load_gate.py), left out without one: LoadRequests set turns it on. Targets not
    # given are not checked, except the error rate (none allowed).
    load_concurrency: int | None = prop("LoadConcurrency", WHOLE)
    load_requests: int | None = prop("LoadRequests", WHOLE)
    load_max_tokens: int | None = prop("LoadMaxTokens", WHOLE)
    load_window_s: float | None = prop("LoadWindowSeconds", NUMBER)
    target_ttft_p95_ms: float | None = prop("TargetTtftP95Ms", NUMBER)
    target_itl_p95_ms: float | None = prop("TargetItlP95Ms", NUMBER)
    target_min_output_tokens_per_s: float | None = prop("TargetMinOutputTokensPerSecond", NUMBER)
    target_max_error_rate: float | None = prop("TargetMaxErrorRate", NUMBER)
    metric_deployment: str | None = prop("MetricDeployment")  # the metrics' Deployment dimension
    # An asynchronous endpoint (AsyncInferenceConfig): the answer check submits with InvokeEndpointAsync (inline
    # body) and reads the answer from the output object; no stream, no load gate. Left out of real-time templates.
    async_output_path: str | None = prop("AsyncOutputPath")  # the config's S3OutputPath, s3://bucket/prefix
    async_failure_path: str | None = prop("AsyncFailurePath")  # its S3FailurePath
    invocation_timeout_s: int | None = prop("InvocationTimeoutSeconds", WHOLE)  # per request, 1-3600

    @property
    def load_gate(self) -> bool:
        return self.load_requests is not None

    @property
    def asynchronous(self) -> bool:
        return bool(self.async_output_path)


# The load gate's figures: the resource's attributes (Fn::GetAtt) and, under the same names, one CloudWatch metric
# each in SMOKE_METRIC_NAMESPACE with the dimension Deployment. Attribute -> CloudWatch unit (PutMetricData
# MetricDatum.Unit). The handler writes them, the construct reads them and grants PutMetricData in that namespace.
SMOKE_METRIC_NAMESPACE = "LlmEndpoint/SmokeTest"
# The smoke test's requests to an asynchronous endpoint: their InferenceId starts with the prefix (logs), and their
# answers go below <S3OutputPath>/<extension>/ (InvokeEndpointAsync S3OutputPathExtension), the only answers its
# role may read and delete. SageMaker names the objects itself, so the extension, not the name, scopes the grant.
SMOKE_INFERENCE_ID_PREFIX = "smoke-test-"
SMOKE_OUTPUT_EXTENSION = "smoke-test"
SMOKE_METRIC_DIMENSION = "Deployment"
LOAD_FIGURES: dict[str, str] = {
    "LoadTtftP50Ms": "Milliseconds",
    "LoadTtftP95Ms": "Milliseconds",
    "LoadItlP50Ms": "Milliseconds",
    "LoadItlP95Ms": "Milliseconds",
    "LoadE2eP50Ms": "Milliseconds",
    "LoadE2eP95Ms": "Milliseconds",
    "LoadOutputTokensPerSecondP5": "Count/Second",
    "LoadOutputTokensPerSecondP50": "Count/Second",
    "LoadErrorRate": "None",
    "LoadRequests": "Count",
    "LoadEffectiveConcurrency": "None",
    "LoadDurationSeconds": "Seconds",
}


def processing_network(settings: StagedCheckpointProperties) -> dict[str, Any]:
    """CreateProcessingJob's ``NetworkConfig`` for the job's subnets; none without them (SageMaker's own network).

    The job's network interfaces go into these subnets and groups ("Give SageMaker AI Processing jobs access to
    resources in your Amazon VPC", sagemaker/latest/dg/process-vpc.html). Not network-isolated: the job downloads
    from the Hub (or its mirror), through the VPC's NAT or the mirror's address.
    """
    if not settings.subnets:
        return {}
    return {
        "NetworkConfig": {
            "VpcConfig": {"Subnets": list(settings.subnets), "SecurityGroupIds": list(settings.security_group_ids)}
        }
    }


@dataclass(frozen=True)
class DeploymentPreflightProperties(ResourceProperties):
    """``Custom::DeploymentPreflight``: constructs_lib.DeploymentPreflight writes it, lambda/deployment_preflight
    reads it. The weight-format group (engine ... format_alternatives) is left out when the engine is unknown."""

    RESOURCE: ClassVar[str] = "Custom::DeploymentPreflight"
    model_s3_uri: str = prop("ModelS3Uri", required=True)
    instance_type: str = prop("InstanceType", required=True)
    gpu_count: int = prop("GpuCount", WHOLE, required=True)
    gpu_memory_gib: float = prop("GpuMemoryGib", NUMBER, required=True)
    tensor_parallel_size: int | None = prop("TensorParallelSize", WHOLE)  # None: every GPU of the instance
    # None: the longest context the engine accepts for the model (preflight.context), as engines derive it.
    max_model_len: int | None = prop("MaxModelLen", WHOLE, blank_when_unset=True)
    max_num_seqs: int = prop("MaxNumSeqs", WHOLE, 1)
    kv_cache_dtype: str = prop("KvCacheDtype", TEXT, "auto")
    gpu_memory_utilization: float = prop("GpuMemoryUtilization", NUMBER, 0.9)
    max_num_batched_tokens: int | None = prop("MaxNumBatchedTokens", WHOLE)  # None: vLLM's serving default
    instances_needed: int = prop("InstancesNeeded", WHOLE, 1)
    update_instances: int = prop("UpdateInstances", WHOLE, 0)  # an update's new instances, on top of the serving
    allow_unverified_s3: bool = prop("AllowUnverifiedS3", FLAG, False)
    skip_checks: tuple[str, ...] = prop("SkipChecks", LIST)
    # The variant's fallback types (instance pools, after instance_type); the quota check reads each one's quota.
    instance_pools: tuple[str, ...] = prop("InstancePools", LIST, omit_default=True)
    # The GPUs of each fallback, for the memory, tensor-parallel and format checks on it (as synth runs them):
    # {"<type>": {"GpuCount": n, "GpuMemoryGib": x, "ComputeCapability": "8.6", "FormatAlternatives": "{...}"}}.
    pool_gpus: Any = prop("PoolGpus", OBJECT, {})  # noqa: RUF009
    # Weight format against GPU (preflight/data/weight_formats.json): empty engine or capability = not checked.
    engine: str | None = prop("Engine", TEXT, "")
    compute_capability: str | None = prop("ComputeCapability", TEXT, "")
    dtype: str | None = prop("Dtype", TEXT, "")
    quantization: str | None = prop("Quantization", TEXT, "")
    format_alternatives: str | None = prop("FormatAlternatives", TEXT, "")  # JSON {"8.0": "ml.g6.xlarge"}
    gguf_file: str | None = prop("GgufFile")  # the GGUF model to check (llama.cpp); None: a config.json checkpoint
    # Files the serving container runs or reads as settings (engines.json checkpoint_code), refused unless allowed;
    # none named (a template from before the property): every engine's files (preflight.CHECKPOINT_CODE_PATTERNS).
    checkpoint_code: tuple[str, ...] = prop("CheckpointCode", LIST)
    allow_checkpoint_code: bool = prop("AllowCheckpointCode", FLAG, False)
    # The engine's opt-in to start beyond the model's context limit as set ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"): the
    # context check then notes a longer max_model_len instead of refusing it. "": not set.
    long_context: str = prop("LongContext", TEXT, "", omit_default=True)


@dataclass(frozen=True)
class ServingImageCheckProperties(ResourceProperties):
    """``Custom::ServingImageCheck``: constructs_lib.image_check.ServingImageCheck writes it, lambda/serving_image_check
    reads it."""

    RESOURCE: ClassVar[str] = "Custom::ServingImageCheck"
    image_uri: str = prop("ImageUri", required=True)
    # The instances' CPU, as an OCI platform architecture: every GPU type in constructs_lib/data/instances.json is
    # x86-64 (its note: the one ARM64 host, ml.p6e-gb200, is left out). "": not known (a type outside the catalog).
    architecture: str = prop("Architecture", TEXT, "amd64", omit_default=True, blank_is_value=True)
