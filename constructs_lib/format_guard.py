"""Weight format against GPU at synth time, and the nearest instance type that can run a format.

The facts (``preflight/data/weight_formats.json``) and the check (:func:`preflight.formats.check_formats`)
are shared with the deploy-time preflight and ``python -m llmops.plan``. At synth time the format is known
only when the deployment states it: an engine ``dtype`` or ``quantization`` flag in ``engine_env``; the
checkpoint's own config.json is read by the preflight at deploy time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from preflight.formats import FormatCheck, capability, check_formats, engine_format_settings, required_capabilities

from .catalog import InstanceSpec, known_instance_types, lookup_instance
from .prices import price

DEFAULT_PRICE_REGION = "us-east-1"


def nearest_capable(instance: InstanceSpec, region: str = DEFAULT_PRICE_REGION) -> dict[str, str]:
    """For each minimum compute capability of the format table above ``instance``'s: the catalog type that has it
    with at least as many GPUs and as much memory per GPU, cheapest known price first, then least GPU memory."""
    own = capability(instance.compute_capability) or (0, 0)
    found: dict[str, str] = {}
    for need_text in required_capabilities():
        need = capability(need_text) or (0, 0)
        if need <= own:
            continue
        candidates = []
        for name in known_instance_types():
            spec = lookup_instance(name)
            if spec is None or (capability(spec.compute_capability) or (0, 0)) < need:
                continue
            if spec.gpu_count < instance.gpu_count or spec.gpu_memory_gib < instance.gpu_memory_gib:
                continue
            cost = price(name, region).usd_per_hour
            candidates.append((cost is None, cost or 0.0, spec.total_gpu_memory_gib, spec.gpu_count, name))
        if candidates:
            found[need_text] = min(candidates)[-1]
    return found


def synth_format_check(
    engine_name: str,
    env_prefix: str,
    instance: InstanceSpec,
    engine_env: Mapping[str, Any],
    keys: Mapping[str, str] | None = None,
) -> FormatCheck:
    """The format check for what ``engine_env`` states (a ``dtype`` or ``quantization`` flag); empty otherwise."""
    stated = engine_format_settings(env_prefix, engine_env, keys)
    if not stated:
        return FormatCheck((), None)
    from preflight.formats import resolve_formats

    formats = resolve_formats(dtype=stated.get("dtype"), quantization=stated.get("quantization"))
    check = check_formats(
        formats,
        compute_capability=instance.compute_capability,
        engine=engine_name,
        gpu=f"{instance.instance_type} ({instance.gpu_model})",
        alternatives=nearest_capable(instance),
    )
    given = ", ".join(f"{(keys or {}).get(k) or env_prefix + k.upper()}={v}" for k, v in stated.items())
    return FormatCheck(
        check.formats,
        check.min_compute_capability,
        [f"engine_env {given}: {p}" for p in check.problems],
        [f"engine_env {given}: {w}" for w in check.warnings],
        check.notes,
    )


def weight_format_flags(engine: Any, engine_env: Mapping[str, Any]) -> dict[str, str]:
    """``dtype``/``quantization`` keyword arguments for ``DeploymentPreflight`` from what engine_env sets."""
    return engine_format_settings(engine.env_prefix, engine_env, engine.preflight_keys)
