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
- ``context``: ``MaxModelLen`` within the longest context the engine accepts for the model
  (:func:`preflight.context.context_problem`, vLLM's rule), whatever the memory; ``LongContext`` (vLLM's
  ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` in the container) makes a longer one a note. Skipping ``memory`` leaves it on.
- ``tensor-parallel``: :func:`preflight.tp_divides_heads`.
- ``format``: :func:`preflight.formats.check_checkpoint`: config.json's dtype and quantization (the engine's
  ``dtype``/``quantization`` flags win) against the GPU's compute capability, from the format table
  ``preflight/data/weight_formats.json``; a refusal names the nearest instance type that can run it.
- ``quota``: the Service Quotas value ``<instance type> for endpoint usage`` (applied value, else the
  AWS default) against ``InstancesNeeded``. A quota does not guarantee capacity: that is a note in the
  resource's data, never a failure.

With ``InstancePools``, ``memory`` and ``format`` run on each fallback's GPUs too (``PoolGpus``), and ``quota``
reads each fallback's quota: SageMaker may place any instance on a fallback (realtime-endpoints-heterogeneous).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The handler by concern, in modules beside this one (named after it: see tests/fakes/handlers.py); index.py keeps
# the entry points, the clients and all state. Names tests reach through this module are imported here too.
from preflight_base import DATA_LIMIT, REASON_LIMIT, PreflightFailed, log, shorten
from preflight_checkpoint import (  # noqa: F401
    Checkpoint,
    _why_no_config,
    check_s3,
    manifest_sizes,
    read_checkpoint,
    weights_of,
)
from preflight_model import (  # noqa: F401
    check_context,
    check_format,
    check_memory,
    check_tensor_parallel,
    effective_max_model_len,
)
from preflight_quota import QUOTA_NOTE, Quota, QuotaLookupError, check_quota, find_quota  # noqa: F401
from preflight_settings import Settings, pool_settings

import handler_kit
import handler_kit.resources
from handler_kit import update_rolling_back
from preflight import (
    CHECKS,
)
from preflight.checkpoint_code import code_files_note, code_files_problem
from preflight.endpoint_policy import ModelObjects
from preflight.network import network_check

PHYSICAL_ID_PREFIX = "preflight-"
# Throttling on Service Quotas is retried by botocore (standard mode: exponential backoff with jitter).
RETRY_ATTEMPTS = 6

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


_clients: dict[str, Any] = {}


def client(name: str) -> Any:
    """One boto3 client per service for the life of the execution environment."""
    return handler_kit.cached_client(
        _clients, name, retries={"mode": "standard", "total_max_attempts": RETRY_ATTEMPTS}, connect_timeout=10
    )


# --- settings ---------------------------------------------------------------------------------------


# --- reading the checkpoint -----------------------------------------------------------------------


# --- the checks (pure) ------------------------------------------------------------------------------


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
    reads_checkpoint = {"s3", "memory", "context", "tensor-parallel"} | ({"format"} if settings.engine else set())
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
        fit = None
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
                for pool, on_pool, why in pool_settings(settings):  # a fallback may hold every instance
                    problems = [why] if why else check_memory(config, weights, on_pool, checkpoint.gguf)[0]
                    report.add("memory", [f"instance_pools fallback {pool}: {p}" for p in problems])
        # llama.cpp runs past the trained context (a note from the memory check), so a GGUF has no context refusal.
        if "context" in checks and config is not None and not checkpoint.gguf.name:
            report.add("context", check_context(config, settings, fit))
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
            for pool, on_pool, _why in pool_settings(settings):
                if on_pool is not None and on_pool.compute_capability:
                    problems = check_format(config, on_pool)[0]
                    report.add("format", [f"instance_pools fallback {pool}: {p}" for p in problems])
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
        for pool in settings.instance_pools:  # each fallback may have to hold every instance
            try:
                report.add("quota", check_quota(find_quota(quotas(), pool), settings, pool))
            except QuotaLookupError as e:
                report.add("quota", [f"{pool}: {e}"])
        report.notes.append(QUOTA_NOTE)
    return report


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
    if "network" in settings.checks:  # the VpcConfig's subnets and groups (preflight/network.py)
        model = ModelObjects(settings.bucket, settings.prefix)
        network = network_check(event["ResourceProperties"], lambda: client("ec2"), model)
        report.add("network", network.problems)
        report.notes += network.notes
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
