"""``Custom::DeploymentPreflight``: refuse a deployment that cannot work, before any GPU is paid for.

``on_event`` only, synchronous, a few seconds: every check that is not skipped runs, every problem is
collected, and the resource fails with ONE reason that lists them all with their numbers. The checks:

- ``s3``: the prefix holds ``config.json`` and at least one weight file (``.safetensors``, ``.bin``,
  ``.gguf``); the staging manifest ``.hf-model-manifest.json`` exists and every file it lists is in S3
  with the listed size. ``AllowUnverifiedS3`` accepts a prefix without a manifest (one staged by other
  means); a manifest that is there is still checked.
- ``memory``: :func:`preflight.estimate_memory_fit` with config.json and the weight bytes (from the
  manifest, else summed over the listing by :func:`preflight.select_weight_files`): weights per GPU,
  overhead and the KV cache of ``MaxNumSeqs`` full-length sequences against the GPU memory the engine
  may use; a problem says by how much, the largest context that fits and what to change.
- ``tensor-parallel``: :func:`preflight.tp_divides_heads`.
- ``format``: :func:`preflight.formats.check_checkpoint`: config.json's dtype and quantization (the engine's
  ``dtype``/``quantization`` flags win) against the GPU's compute capability, from the format table
  ``preflight/data/weight_formats.json``; a refusal names the nearest instance type that can run it.
- ``quota``: the Service Quotas value ``<instance type> for endpoint usage`` (applied value, else the
  AWS default) against ``InstancesNeeded``. A quota does not guarantee capacity: that is a note in the
  resource's data, never a failure.

The physical ID is ``preflight-<hash of stack and logical ID>``: the same for a retried create, kept by
every update (a preflight has nothing to replace). Delete does nothing. Logs are ``key=value`` lines.

Rollback: a failed stack update sends this resource an Update with its old properties while the stack is
``UPDATE_ROLLBACK_IN_PROGRESS`` (aws-cdk #17040). Those properties passed before; failing now (a throttled
Service Quotas call) would leave the stack ``UPDATE_ROLLBACK_FAILED``. So the checks run for the data
they give, and their problems are logged, not raised.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

import handler_kit
from handler_kit import update_rolling_back
from preflight import (
    CHECKS,
    GIB,
    KV_CACHE_DTYPES,
    WEIGHT_SUFFIXES,
    MemoryFit,
    estimate_memory_fit,
    select_weight_files,
    tp_divides_heads,
)
from preflight.checkpoint_code import CHECKPOINT_CODE_PATTERNS, code_files_note, code_files_problem
from preflight.formats import check_deployment
from preflight.gguf import S3Gguf, estimate_gguf_fit, read_s3_gguf
from preflight.memory_fit import context_limit, text_config
from preflight.weights import SAFETENSORS_INDEX

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

MANIFEST_NAME = ".hf-model-manifest.json"
CONFIG_NAME = "config.json"
PHYSICAL_ID_PREFIX = "preflight-"
# CloudFormation takes at most 4 KB for the whole response; the Provider framework adds its own lines
# (the log group) and the event's IDs around the reason.
REASON_LIMIT = 3000
DATA_LIMIT = 3000
# Listed by name in a problem; the rest are counted.
SHOWN_FILES = 5
QUOTA_NAME = "{} for endpoint usage"
QUOTA_SERVICE = "sagemaker"
QUOTA_NOTE = (
    "a quota is a limit, not a reservation: SageMaker can still answer InsufficientCapacity; "
    "a capacity reservation (capacity_reservation_arn) guarantees instances"
)
THROTTLED = frozenset({"ThrottlingException", "TooManyRequestsException", "Throttling", "RequestLimitExceeded"})
DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
# Throttling on Service Quotas is retried by botocore (standard mode: exponential backoff with jitter).
RETRY_ATTEMPTS = 6
S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>.+)$")

# Every key is always present (empty when its check was skipped or could not run), so GetAtt never fails.
DATA_KEYS = (
    "InstanceType",
    "TensorParallelSize",
    "MaxModelLen",
    "WeightsBytes",
    "WeightsSource",
    "WeightsGiBPerGpu",
    "OverheadGiBPerGpu",
    "KvCacheGiBPerSequence",
    "KvCacheBudgetGiBPerGpu",
    "MaxModelLenThatFits",
    "FullLengthSequences",
    "ManifestFiles",
    "S3Verified",
    "QuotaName",
    "QuotaCode",
    "QuotaValue",
    "QuotaSource",
    "InstancesNeeded",
    "ChecksRun",
    "ChecksSkipped",
    "Notes",
)


class PreflightFailed(Exception):
    """The deployment cannot work; the message (under 4 KB) lists every problem and is CloudFormation's reason."""


_clients: dict[str, Any] = {}


def client(name: str) -> Any:
    """One boto3 client per service for the life of the execution environment."""
    return handler_kit.cached_client(
        _clients, name, retries={"mode": "standard", "total_max_attempts": RETRY_ATTEMPTS}, connect_timeout=10
    )


def log(event: str, **fields: Any) -> None:
    """One ``key=value`` line (handler_kit.log_line)."""
    LOG.info(handler_kit.log_line(event, **fields))


shorten = handler_kit.shorten


# --- settings ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The resource's properties, typed (CloudFormation passes every scalar as a string)."""

    bucket: str
    prefix: str
    instance_type: str
    gpu_count: int
    gpu_memory_gib: float
    tensor_parallel_size: int
    max_model_len: int | None  # None: the model's own limit (max_position_embeddings), as engines derive it
    max_num_seqs: int = 1
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    instances_needed: int = 1
    update_instances: int = 0  # a blue/green update's green fleet, on top of instances_needed
    allow_unverified_s3: bool = False
    skip: frozenset[str] = frozenset()
    # Weight format against GPU (preflight/data/weight_formats.json): empty engine or capability = not checked.
    engine: str = ""
    compute_capability: str = ""
    dtype: str = ""
    quantization: str = ""
    format_alternatives: str = ""  # JSON {"8.0": "ml.g6.xlarge"}: nearest instance type per minimum capability
    gguf_file: str | None = None  # the GGUF model to check (llama.cpp); None: a config.json checkpoint
    # Files the serving container runs or reads as settings (engines.json checkpoint_code), refused unless allowed.
    checkpoint_code: tuple[str, ...] = CHECKPOINT_CODE_PATTERNS
    allow_checkpoint_code: bool = False

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def checks(self) -> tuple[str, ...]:
        return tuple(c for c in CHECKS if c not in self.skip)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> Settings:
        problems: list[str] = []

        def number(key: str, kind: type, default: Any = None, *, required: bool = False) -> Any:
            raw = props.get(key)
            if raw is None or str(raw).strip() == "":
                if required:
                    problems.append(f"{key} is required")
                return default
            try:
                value = kind(str(raw).strip())
            except ValueError:
                problems.append(f"{key}={raw!r} is not a {'whole number' if kind is int else 'number'}")
                return default
            if not value > 0:
                problems.append(f"{key}={raw!r} must be positive")
                return default
            return value

        uri = str(props.get("ModelS3Uri") or "")
        match = S3_URI.match(uri)
        if not match:
            problems.append(f"ModelS3Uri={uri!r} is not s3://<bucket>/<prefix>/")
        instance_type = str(props.get("InstanceType") or "")
        if not instance_type:
            problems.append("InstanceType is required")
        gpu_count = number("GpuCount", int, 1, required=True)
        tp = number("TensorParallelSize", int, gpu_count)
        if tp > gpu_count:
            problems.append(f"TensorParallelSize={tp} exceeds GpuCount={gpu_count}")
        utilization = number("GpuMemoryUtilization", float, 0.9)
        if utilization > 1:
            problems.append(f"GpuMemoryUtilization={utilization} must be at most 1")
        kv_dtype = str(props.get("KvCacheDtype") or "auto")
        if kv_dtype not in KV_CACHE_DTYPES:
            problems.append(f"KvCacheDtype={kv_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)}")
        skip = _names(props.get("SkipChecks"))
        unknown = sorted(skip - set(CHECKS))
        if unknown:
            problems.append(f"SkipChecks names unknown checks {unknown}; allowed: {', '.join(CHECKS)}")
        allow = str(props.get("AllowUnverifiedS3") or "false").strip().lower()
        if allow not in ("true", "false"):
            problems.append(f"AllowUnverifiedS3={allow!r} must be true or false")
        allow_code = str(props.get("AllowCheckpointCode") or "false").strip().lower()
        if allow_code not in ("true", "false"):
            problems.append(f"AllowCheckpointCode={allow_code!r} must be true or false")
        # A template from before the property existed names none: every engine's files are checked then.
        code_patterns = handler_kit.string_list(props.get("CheckpointCode")) or CHECKPOINT_CODE_PATTERNS
        # 0 (no extra instances during an update) is valid here, unlike the other numbers.
        raw_update = str(props.get("UpdateInstances") or "0").strip()
        update_instances = int(raw_update) if raw_update.isdigit() else number("UpdateInstances", int, 0)
        settings = cls(
            bucket=match["bucket"] if match else "",
            prefix=(match["prefix"].rstrip("/") + "/") if match else "",
            instance_type=instance_type,
            gpu_count=gpu_count,
            gpu_memory_gib=number("GpuMemoryGib", float, 0.0, required=True),
            tensor_parallel_size=tp,
            max_model_len=number("MaxModelLen", int),
            max_num_seqs=number("MaxNumSeqs", int, 1),
            kv_cache_dtype=kv_dtype,
            gpu_memory_utilization=utilization,
            instances_needed=number("InstancesNeeded", int, 1),
            update_instances=update_instances,
            allow_unverified_s3=allow == "true",
            skip=frozenset(skip & set(CHECKS)),
            **{k: str(props.get(p) or "") for k, p in FORMAT_PROPERTIES.items()},
            gguf_file=str(props.get("GgufFile") or "") or None,
            checkpoint_code=code_patterns,
            allow_checkpoint_code=allow_code == "true",
        )
        if problems:
            raise PreflightFailed(shorten("Preflight properties are invalid: " + "; ".join(problems), REASON_LIMIT))
        return settings


FORMAT_PROPERTIES = {
    "engine": "Engine",
    "compute_capability": "ComputeCapability",
    "dtype": "Dtype",
    "quantization": "Quantization",
    "format_alternatives": "FormatAlternatives",
}


def check_format(config: Mapping[str, Any], settings: Settings) -> tuple[list[str], list[str]]:
    """(problems, notes) of config.json's weight format on this instance's GPU."""
    return check_deployment(
        config,
        engine=settings.engine,
        compute_capability=settings.compute_capability,
        dtype=settings.dtype,
        quantization=settings.quantization,
        gpu=settings.instance_type,
        alternatives_json=settings.format_alternatives,
    )


def _names(raw: Any) -> set[str]:
    """A list of check names as CloudFormation passes it (a list), or a JSON / comma-separated string."""
    if raw is None or raw == "":
        return set()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raw = raw.split(",")
    if isinstance(raw, str):
        raw = [raw]
    return {str(name).strip().lower() for name in raw if str(name).strip()}


# --- reading the checkpoint -----------------------------------------------------------------------


@dataclass
class Checkpoint:
    """What the prefix holds, read once for every check. ``error`` says why the prefix could not be read."""

    where: str
    sizes: dict[str, int] = field(default_factory=dict)  # key relative to the prefix -> bytes
    config: dict[str, Any] | None = None
    manifest: dict[str, Any] | None = None
    index: dict[str, Any] | None = None
    error: str | None = None
    # Files that are there but could not be used: name -> why (unreadable, not JSON).
    unusable: dict[str, str] = field(default_factory=dict)
    # A GGUF model (llama.cpp) stands in for config.json: its header gives the same settings.
    gguf: S3Gguf = field(default_factory=S3Gguf)


def _denied_hint(code: str, action: str) -> str:
    return f" (the preflight role needs {action} on the prefix)" if code in DENIED else ""


def read_checkpoint(s3: Any, bucket: str, prefix: str, gguf_file: str | None = None) -> Checkpoint:
    checkpoint = Checkpoint(where=f"s3://{bucket}/{prefix}")
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                checkpoint.sizes[obj["Key"][len(prefix) :]] = int(obj["Size"])
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        checkpoint.error = f"could not list {checkpoint.where}: {code}{_denied_hint(code, 's3:ListBucket')}"
        return checkpoint
    except BotoCoreError as e:
        checkpoint.error = f"could not list {checkpoint.where}: {type(e).__name__}"
        return checkpoint
    for name, attribute in ((CONFIG_NAME, "config"), (MANIFEST_NAME, "manifest"), (SAFETENSORS_INDEX, "index")):
        if name in checkpoint.sizes:
            value, why = _read_json(s3, bucket, prefix + name)
            if why:
                checkpoint.unusable[name] = why
            else:
                setattr(checkpoint, attribute, value)
    if gguf_file or CONFIG_NAME not in checkpoint.sizes:
        checkpoint.gguf = read_s3_gguf(s3, bucket, prefix, checkpoint.sizes, gguf_file)
        if checkpoint.gguf.error:
            checkpoint.unusable[str(checkpoint.gguf.name)] = checkpoint.gguf.error
        elif checkpoint.gguf.config is not None:
            checkpoint.config = checkpoint.gguf.config
    return checkpoint


def _read_json(s3: Any, bucket: str, key: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        return None, f"could not be read: {code}{_denied_hint(code, 's3:GetObject')}"
    except BotoCoreError as e:
        return None, f"could not be read: {type(e).__name__}"
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        return None, f"is not valid JSON ({e})"
    if not isinstance(value, dict):
        return None, "is not a JSON object"
    return value, None


def manifest_sizes(manifest: Mapping[str, Any]) -> dict[str, int] | None:
    """path -> size of the manifest's files; None when its ``files`` list is missing or malformed."""
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        return None
    try:
        return {str(f["path"]): int(f["size"]) for f in files}
    except (KeyError, TypeError, ValueError):
        return None


def _listed(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:SHOWN_FILES])
    return shown + (f" and {len(paths) - SHOWN_FILES} more" if len(paths) > SHOWN_FILES else "")


# --- the checks (pure) ------------------------------------------------------------------------------


def check_s3(checkpoint: Checkpoint, *, allow_unverified: bool) -> list[str]:
    """What is missing or wrong under the prefix."""
    where = checkpoint.where
    if checkpoint.error:
        return [checkpoint.error]
    if not checkpoint.sizes:
        return [f"{where} is empty: stage the model first, or check model_s3_uri (it must be the checkpoint's root)"]
    problems = []
    if checkpoint.gguf.name:
        if checkpoint.gguf.error:
            problems.append(f"{where}{checkpoint.gguf.name} {checkpoint.gguf.error}")
    elif CONFIG_NAME not in checkpoint.sizes:
        problems.append(f"no {CONFIG_NAME} under {where}: is this the checkpoint's root prefix?")
    elif CONFIG_NAME in checkpoint.unusable:
        problems.append(f"{where}{CONFIG_NAME} {checkpoint.unusable[CONFIG_NAME]}")
    if not any(path.endswith(WEIGHT_SUFFIXES) for path in checkpoint.sizes):
        problems.append(
            f"no weight file ({', '.join('*' + s for s in WEIGHT_SUFFIXES)}) under {where} "
            f"({len(checkpoint.sizes)} object(s) there)"
        )
    if MANIFEST_NAME not in checkpoint.sizes:
        if not allow_unverified:
            problems.append(
                f"no staging manifest {MANIFEST_NAME} under {where}: staging did not finish, or the prefix was "
                "copied by other means (then set allow_unverified_s3 to deploy it unverified)"
            )
        return problems
    if MANIFEST_NAME in checkpoint.unusable:
        return [*problems, f"the manifest {where}{MANIFEST_NAME} {checkpoint.unusable[MANIFEST_NAME]}"]
    listed = manifest_sizes(checkpoint.manifest or {})
    if listed is None:
        return [*problems, f"the manifest {where}{MANIFEST_NAME} lists no files (each needs a path and a size)"]
    missing = sorted(p for p in listed if p not in checkpoint.sizes)
    differ = sorted(p for p in listed if p in checkpoint.sizes and checkpoint.sizes[p] != listed[p])
    if missing:
        problems.append(
            f"{len(missing)} of {len(listed)} file(s) in the manifest are missing from {where}: {_listed(missing)}"
        )
    if differ:
        detail = [f"{p} (manifest {listed[p]:,} bytes, S3 {checkpoint.sizes[p]:,})" for p in differ]
        problems.append(f"{len(differ)} file(s) under {where} differ in size from the manifest: {_listed(detail)}")
    return problems


@dataclass(frozen=True)
class Weights:
    total_bytes: int
    source: str  # "manifest" or "listing"
    files: int
    notes: tuple[str, ...] = ()


def weights_of(checkpoint: Checkpoint) -> Weights | None:
    """The weight bytes an engine loads: the manifest's sizes when there is a usable manifest, else the listing's."""
    listed = manifest_sizes(checkpoint.manifest) if checkpoint.manifest else None
    sizes, source = (listed, "manifest") if listed is not None else (checkpoint.sizes, "listing")
    if checkpoint.gguf.files:  # llama.cpp loads one GGUF model (its parts), whatever else is there
        sizes = {p: size for p, size in sizes.items() if p in checkpoint.gguf.files}
    selected = select_weight_files(sizes, checkpoint.index)
    if not selected.files:
        return None
    return Weights(selected.total_bytes, source, len(selected.files), selected.notes)


def effective_max_model_len(config: Mapping[str, Any], settings: Settings) -> tuple[int | None, str | None]:
    """The context to check: the given one, else the model's own limit (what engines derive)."""
    if settings.max_model_len is not None:
        return settings.max_model_len, None
    limit = context_limit(text_config(config))
    if limit is None:
        return None, "MaxModelLen is not set and config.json gives no max_position_embeddings: set max_model_len"
    return limit, None


def _gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def check_memory(
    config: Mapping[str, Any], weights: Weights, settings: Settings, gguf: S3Gguf | None = None
) -> tuple[list[str], dict[str, str], MemoryFit | None]:
    """Problems (with numbers and what to change), the key figures, and the estimate itself."""
    max_model_len, problem = effective_max_model_len(config, settings)
    if problem or max_model_len is None:
        return [problem or "no context length to check"], {}, None
    try:
        if gguf is not None and gguf.header is not None:
            fit = estimate_gguf_fit(
                gguf.header,
                weight_bytes=weights.total_bytes,
                gpu_count=settings.gpu_count,
                gpu_memory_gib=settings.gpu_memory_gib,
                max_model_len=max_model_len,
                max_num_seqs=settings.max_num_seqs,
            )
        else:
            fit = estimate_memory_fit(
                config,
                weight_bytes=weights.total_bytes,
                gpu_count=settings.gpu_count,
                gpu_memory_gib=settings.gpu_memory_gib,
                tensor_parallel_size=settings.tensor_parallel_size,
                max_model_len=max_model_len,
                max_num_seqs=settings.max_num_seqs,
                kv_cache_dtype=settings.kv_cache_dtype,
                gpu_memory_utilization=settings.gpu_memory_utilization,
            )
    except ValueError as e:
        return [f"cannot estimate GPU memory: {e}"], {}, None
    figures = {
        "MaxModelLen": str(max_model_len),
        "WeightsGiBPerGpu": _gib(fit.weights_bytes_per_gpu),
        "OverheadGiBPerGpu": _gib(fit.overhead_bytes_per_gpu),
        "KvCacheGiBPerSequence": _gib(fit.kv_bytes_per_sequence_per_gpu),
        "KvCacheBudgetGiBPerGpu": _gib(fit.kv_budget_bytes_per_gpu),
        "MaxModelLenThatFits": str(fit.max_model_len_that_fits),
        "FullLengthSequences": str(fit.full_length_sequences),
    }
    # The head-count rule has its own check (tensor-parallel), so that skipping one never hides the other.
    tp_problem = tp_divides_heads(config, settings.tensor_parallel_size)
    shortfalls = [p for p in fit.problems if p != tp_problem]
    head = (
        f"{settings.instance_type} ({settings.gpu_count} x {settings.gpu_memory_gib:g} GB, tensor parallel "
        f"{fit.tensor_parallel_size}, max_model_len {max_model_len:,}, {settings.max_num_seqs} sequence(s), "
        f"KV cache {fit.kv_cache_dtype}): "
    )
    return [head + p for p in shortfalls], figures, fit


def check_tensor_parallel(config: Mapping[str, Any], settings: Settings) -> list[str]:
    try:
        problem = tp_divides_heads(config, settings.tensor_parallel_size)
    except ValueError as e:
        return [f"cannot read the attention heads from config.json: {e}"]
    return [problem] if problem else []


@dataclass(frozen=True)
class Quota:
    name: str
    code: str
    value: float
    source: str  # "applied" or "AWS default"


class QuotaLookupError(Exception):
    """Service Quotas could not be read; the message says why and what to do."""


def find_quota(quotas: Any, instance_type: str) -> Quota | None:
    """The ``<instance type> for endpoint usage`` quota: the account's applied value, else the AWS default."""
    name = QUOTA_NAME.format(instance_type)
    for operation, source in (("list_service_quotas", "applied"), ("list_aws_default_service_quotas", "AWS default")):
        try:
            for page in quotas.get_paginator(operation).paginate(ServiceCode=QUOTA_SERVICE):
                for quota in page.get("Quotas", []):
                    if quota.get("QuotaName") == name:
                        return Quota(name, str(quota.get("QuotaCode", "")), float(quota.get("Value", 0)), source)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code == "NoSuchResourceException":
                continue  # no applied values for this service: the defaults apply
            raise QuotaLookupError(_quota_error(e, code)) from None
        except BotoCoreError as e:
            raise QuotaLookupError(f"could not read Service Quotas: {type(e).__name__}: {e}") from None
    return None


def _quota_error(error: ClientError, code: str) -> str:
    action = f"servicequotas:{error.operation_name}"
    if code in DENIED:
        return (
            f"access denied to Service Quotas ({code}): the preflight role needs {action} (the check uses "
            "servicequotas:ListServiceQuotas and servicequotas:ListAWSDefaultServiceQuotas; an SCP may deny them). "
            "Grant it, or skip the quota check"
        )
    if code in THROTTLED:
        attempts = error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
        return (
            f"Service Quotas throttled {error.operation_name} ({code}) after {attempts} attempt(s): deploy again "
            "later, or skip the quota check"
        )
    message = error.response.get("Error", {}).get("Message", "")
    return f"could not read Service Quotas ({error.operation_name}): {code}: {message}"


def check_quota(quota: Quota | None, settings: Settings) -> list[str]:
    # An update of a standard endpoint provisions a whole new (green) fleet beside the serving one
    # (SageMaker deployment-guardrails-blue-green), so the quota must hold both while it runs.
    needed = settings.instances_needed + settings.update_instances
    why = (
        f" ({settings.instances_needed} serving + {settings.update_instances} for an update's new instances: "
        "a blue/green fleet or a rolling batch)"
        if settings.update_instances
        else ""
    )
    name = QUOTA_NAME.format(settings.instance_type)
    if quota is None:
        return [
            f"Service Quotas has no quota named {name!r} for SageMaker in this region: the instance type may not "
            "be offered for endpoints here (check the name and the region), or skip the quota check"
        ]
    if quota.value < needed:
        return [
            f"the quota {name!r} ({quota.code}, {quota.source} value) is {quota.value:g} in this account and "
            f"region; this deployment needs {needed} instance(s){why}. Request an increase in the Service Quotas "
            f"console (quota code {quota.code}), or choose another instance type. Instances of this type in other "
            "endpoints of the account count against the same quota"
        ]
    return []


# --- running them -----------------------------------------------------------------------------------


@dataclass
class Report:
    problems: list[tuple[str, str]] = field(default_factory=list)  # (check, text)
    data: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, check: str, problems: Sequence[str]) -> None:
        self.problems += [(check, p) for p in problems]


def run_checks(settings: Settings, *, s3: Callable[[], Any], quotas: Callable[[], Any]) -> Report:
    """Every check that is not skipped; every problem. ``s3``/``quotas`` give the clients when needed."""
    report = Report(data=dict.fromkeys(DATA_KEYS, ""))
    report.data.update(
        InstanceType=settings.instance_type,
        TensorParallelSize=str(settings.tensor_parallel_size),
        InstancesNeeded=str(settings.instances_needed),
        ChecksRun=",".join(settings.checks),
        ChecksSkipped=",".join(c for c in CHECKS if c in settings.skip),
    )
    checks = settings.checks
    reads_checkpoint = {"s3", "memory", "tensor-parallel"} | ({"format"} if settings.engine else set())
    if reads_checkpoint & set(checks):
        checkpoint = read_checkpoint(s3(), settings.bucket, settings.prefix, settings.gguf_file)
        # Refused before any GPU runs them, unless the user asked for them (allow_checkpoint_code): then a note.
        if settings.allow_checkpoint_code:
            report.notes += filter(
                None, [code_files_note(checkpoint.sizes, checkpoint.where, settings.checkpoint_code)]
            )
        elif problem := code_files_problem(checkpoint.sizes, checkpoint.where, settings.checkpoint_code):
            report.add("checkpoint-code", [problem])
        if "s3" in checks:
            report.add("s3", check_s3(checkpoint, allow_unverified=settings.allow_unverified_s3))
        report.data["S3Verified"] = "true" if checkpoint.manifest and "s3" in checks else "false"
        listed = manifest_sizes(checkpoint.manifest) if checkpoint.manifest else None
        report.data["ManifestFiles"] = str(len(listed)) if listed else ""
        config = checkpoint.config
        unavailable = _why_no_config(checkpoint)
        if "memory" in checks:
            weights = weights_of(checkpoint)
            if config is None:
                report.add("memory", [f"cannot estimate GPU memory: {unavailable}"])
            elif weights is None:
                report.add("memory", [f"cannot estimate GPU memory: no weight files under {checkpoint.where}"])
            else:
                problems, figures, fit = check_memory(config, weights, settings, checkpoint.gguf)
                report.add("memory", problems)
                report.data.update(figures, WeightsBytes=str(weights.total_bytes), WeightsSource=weights.source)
                report.notes += list(weights.notes) + (fit.warnings if fit else [])
        if "tensor-parallel" in checks:
            if config is None:
                report.add("tensor-parallel", [f"cannot read the attention heads: {unavailable}"])
            elif not checkpoint.gguf.name:  # llama.cpp splits layers over GPUs, not attention heads
                report.add("tensor-parallel", check_tensor_parallel(config, settings))
        # A GGUF's quantization is llama.cpp's own (ggml kernels for every CUDA GPU it builds for): no table row.
        if "format" in checks and config is not None and settings.engine and not checkpoint.gguf.name:
            problems, notes = check_format(config, settings)
            report.add("format", problems)
            report.notes += notes
    if "quota" in checks:
        try:
            quota = find_quota(quotas(), settings.instance_type)
        except QuotaLookupError as e:
            report.add("quota", [str(e)])
        else:
            report.add("quota", check_quota(quota, settings))
            if quota is not None:
                report.data.update(
                    QuotaName=quota.name, QuotaCode=quota.code, QuotaValue=f"{quota.value:g}", QuotaSource=quota.source
                )
        report.notes.append(QUOTA_NOTE)
    return report


def _why_no_config(checkpoint: Checkpoint) -> str:
    if checkpoint.error:
        return checkpoint.error
    if checkpoint.gguf.error:
        return f"{checkpoint.where}{checkpoint.gguf.name} {checkpoint.gguf.error}"
    if CONFIG_NAME in checkpoint.unusable:
        return f"{checkpoint.where}{CONFIG_NAME} {checkpoint.unusable[CONFIG_NAME]}"
    return f"no {CONFIG_NAME} under {checkpoint.where}"


def failure_reason(problems: Sequence[tuple[str, str]], settings: Settings, limit: int = REASON_LIMIT) -> str:
    """One message naming every problem's check; each problem is cut to its share of ``limit`` if need be."""
    head = (
        f"Preflight refused the deployment of {settings.where} on {settings.instances_needed} x "
        f"{settings.instance_type}: {len(problems)} problem(s)."
    )
    tail = " To skip a check on purpose, name it in the preflight's skip_checks (" + ", ".join(CHECKS) + ")."
    lines = [
        f" ({i}) [{check}] {text.rstrip()}{'' if text.rstrip().endswith('.') else '.'}"
        for i, (check, text) in enumerate(problems, 1)
    ]
    text = head + "".join(lines) + tail
    if len(text.encode()) <= limit:
        return text
    room = limit - len(head.encode()) - len(tail.encode())
    share = max(40, room // max(1, len(lines)))
    text = head + "".join(shorten(line, share) for line in lines) + tail
    return shorten(text, limit)


def bounded_data(data: dict[str, str], notes: Sequence[str], limit: int = DATA_LIMIT) -> dict[str, str]:
    """The resource's attributes, every value a string, all of them under ``limit`` bytes as JSON."""
    result = {k: shorten(str(v), 256) for k, v in data.items()}
    result["Notes"] = "; ".join(dict.fromkeys(notes))
    size = len(json.dumps(result).encode())
    if size > limit:
        result["Notes"] = shorten(result["Notes"], max(0, len(result["Notes"].encode()) - (size - limit) - 16))
    return result


def physical_id(event: Mapping[str, Any]) -> str:
    """Stable: a retried create gets the same ID, an update keeps the one it has."""
    if event["RequestType"] != "Create" and event.get("PhysicalResourceId"):
        return event["PhysicalResourceId"]
    seed = f"{event.get('StackId', '')}/{event.get('LogicalResourceId', '')}"
    return PHYSICAL_ID_PREFIX + hashlib.sha256(seed.encode()).hexdigest()[:16]


def rolling_back(stack_id: str) -> bool:
    """Whether the stack is rolling an update back (DescribeStacks); False when it cannot be told."""
    return update_rolling_back(stack_id, client("cloudformation"), log)


def rollback_answer(event: Mapping[str, Any]) -> dict[str, Any]:
    """Success with the same physical ID and the checks' data; nothing found here fails the rollback."""
    data, notes, found = dict.fromkeys(DATA_KEYS, ""), [], []
    try:
        settings = Settings.from_properties(event["ResourceProperties"])
        report = run_checks(settings, s3=lambda: client("s3"), quotas=lambda: client("service-quotas"))
        data, notes, found = report.data, report.notes, [check for check, _ in report.problems]
    except Exception as e:
        found = [type(e).__name__]
    if found:
        notes = [*notes, f"rollback: {len(found)} problem(s) not enforced ({', '.join(dict.fromkeys(found))})"]
    log("rollback", physical_id=event["PhysicalResourceId"], problems=len(found))
    return {"PhysicalResourceId": event["PhysicalResourceId"], "Data": bounded_data(data, notes)}


def on_event(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    request = event["RequestType"]
    if request == "Delete":
        log("delete", physical_id=event.get("PhysicalResourceId", ""))
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    if request == "Update" and event.get("PhysicalResourceId") and rolling_back(event.get("StackId", "")):
        return rollback_answer(event)
    settings = Settings.from_properties(event["ResourceProperties"])
    if request == "Create" and settings.update_instances:
        # A first deploy creates the endpoint: no old fleet serves beside a new one. Deployment guardrails
        # (blue/green) apply to UpdateEndpoint only (SageMaker deployment-guardrails docs), so the second
        # fleet counts from the first update on; counting it here would refuse a quota that fits exactly.
        settings = dataclasses.replace(settings, update_instances=0)
    log(
        "start",
        request=request,
        model=settings.where,
        instance_type=settings.instance_type,
        checks=",".join(settings.checks) or "none",
        skipped=",".join(sorted(settings.skip)) or "none",
    )
    report = run_checks(settings, s3=lambda: client("s3"), quotas=lambda: client("service-quotas"))
    for check in settings.checks:
        found = [text for name, text in report.problems if name == check]
        log("check", name=check, result="problem" if found else "ok", problems=len(found))
    if report.problems:
        raise PreflightFailed(failure_reason(report.problems, settings))
    data = bounded_data(report.data, report.notes)
    log(
        "passed",
        weights_gib_per_gpu=data["WeightsGiBPerGpu"] or "-",
        max_model_len_that_fits=data["MaxModelLenThatFits"] or "-",
        quota=data["QuotaValue"] or "-",
    )
    return {"PhysicalResourceId": physical_id(event), "Data": data}


if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
    logging.getLogger("botocore").setLevel(logging.WARNING)
