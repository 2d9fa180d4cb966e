"""The resource's properties as the handler reads them: handler_kit's typed class, plus the checks of their values."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from preflight_base import PreflightFailed, shorten

import handler_kit
import handler_kit.resources
from handler_kit.resources import DeploymentPreflightProperties
from preflight import (
    CHECKS,
    KV_CACHE_DTYPES,
)
from preflight.checkpoint_code import CHECKPOINT_CODE_PATTERNS

S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>.+)$")


class Settings(DeploymentPreflightProperties):
    """The resource's properties (handler_kit/resources.py, the class the construct writes them with), checked."""

    @property
    def bucket(self) -> str:
        match = S3_URI.match(self.model_s3_uri)
        return match["bucket"] if match else ""

    @property
    def prefix(self) -> str:
        match = S3_URI.match(self.model_s3_uri)
        return (match["prefix"].rstrip("/") + "/") if match else ""

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def skip(self) -> frozenset[str]:
        return frozenset(_names(self.skip_checks)) & set(CHECKS)

    @property
    def checks(self) -> tuple[str, ...]:
        return tuple(c for c in CHECKS if c not in self.skip)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], problems: list[str] | None = None) -> Settings:
        """Every problem is reported together (CloudFormation's one reason), before anything is read."""
        problems = []
        read = super().from_properties(props, problems)
        for name in ("gpu_count", "gpu_memory_gib", "tensor_parallel_size", "max_model_len", "max_num_seqs"):
            _positive(read, name, props, problems)
        for name in ("gpu_memory_utilization", "max_num_batched_tokens", "instances_needed"):
            _positive(read, name, props, problems)
        if read.update_instances < 0:  # 0 (no extra instances during an update) is valid, unlike the others
            problems.append(f"UpdateInstances={props.get('UpdateInstances')!r} must be positive")
        if not S3_URI.match(read.model_s3_uri):
            problems.append(f"ModelS3Uri={read.model_s3_uri!r} is not s3://<bucket>/<prefix>/")
        gpu_count = read.gpu_count if read.gpu_count and read.gpu_count > 0 else 1
        tp = read.tensor_parallel_size or gpu_count
        if tp > gpu_count:
            problems.append(f"TensorParallelSize={tp} exceeds GpuCount={gpu_count}")
        if read.gpu_memory_utilization > 1:
            problems.append(f"GpuMemoryUtilization={read.gpu_memory_utilization:g} must be at most 1")
        if read.kv_cache_dtype not in KV_CACHE_DTYPES:
            problems.append(f"KvCacheDtype={read.kv_cache_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)}")
        unknown = sorted(_names(read.skip_checks) - set(CHECKS))
        if unknown:
            problems.append(f"SkipChecks names unknown checks {unknown}; allowed: {', '.join(CHECKS)}")
        if problems:
            raise PreflightFailed(shorten(handler_kit.resources.refusal(f"{cls.RESOURCE} properties", problems)))
        return dataclasses.replace(
            read,
            gpu_count=gpu_count,
            tensor_parallel_size=tp,
            # A template from before the property existed names none: every engine's files are checked then.
            checkpoint_code=read.checkpoint_code or CHECKPOINT_CODE_PATTERNS,
        )


def _positive(read: Settings, name: str, props: Mapping[str, Any], problems: list[str]) -> None:
    value = getattr(read, name)
    if value is not None and not value > 0:
        key = read.names()[name]
        problems.append(f"{key}={props.get(key)!r} must be positive")


def _names(items: Sequence[str]) -> set[str]:
    """Check names from SkipChecks as read (a list, or a JSON array in a string): commas split, case ignored."""
    return {part.strip().lower() for item in items for part in str(item).split(",") if part.strip()}


def pool_settings(settings: Settings) -> list[tuple[str, Settings | None, str | None]]:
    """Each fallback of ``InstancePools`` as the checks see it: the settings with its GPUs (``PoolGpus``), or None
    and why it cannot be checked. A copy keeps the primary's tensor parallel size on every type (one Model)."""
    out: list[tuple[str, Settings | None, str | None]] = []
    gpus = settings.pool_gpus if isinstance(settings.pool_gpus, Mapping) else {}
    for pool in settings.instance_pools:
        spec = gpus.get(pool)
        if not isinstance(spec, Mapping):
            continue  # a template from before PoolGpus, or a type the catalog lacks: the quota check still runs
        try:
            count, memory = int(spec["GpuCount"]), float(spec["GpuMemoryGib"])
        except (KeyError, TypeError, ValueError):
            out.append((pool, None, f"PoolGpus[{pool!r}]={spec!r} has no whole GpuCount and GpuMemoryGib"))
            continue
        if count < settings.tensor_parallel_size:
            why = f"{pool} has {count} GPU(s), fewer than TensorParallelSize={settings.tensor_parallel_size}"
            out.append((pool, None, why))
            continue
        on_pool = dataclasses.replace(
            settings,
            instance_type=pool,
            gpu_count=count,
            gpu_memory_gib=memory,
            compute_capability=str(spec.get("ComputeCapability") or ""),
            format_alternatives=str(spec.get("FormatAlternatives") or ""),
        )
        out.append((pool, on_pool, None))
    return out
