"""Will this GPU run this checkpoint's weight format? Pure, standard library only (the preflight Lambda uses it).

The facts are data, each row with its sources: ``preflight/data/weight_formats.json``. A checkpoint has a
compute dtype (config.json ``torch_dtype``/``dtype``, or the engine's ``dtype`` flag when one is given) and,
when quantized, a weight format (``quantization_config``). Each is looked up against the GPU's compute
capability:

- below ``min_compute_capability`` the engine cannot run it: a *problem* (plan, synth and preflight refuse);
- between that and ``native_compute_capability`` the engine runs a fallback kernel: a *warning* that says
  which (vLLM's Marlin weight-only path for FP8 on Ampere, for example);
- a compute dtype read from config.json (no dtype flag) below the minimum, on an engine that resolves its
  ``auto`` dtype to one the GPU has (the row's ``auto_fallback``: vLLM and SGLang serve bfloat16 as float16
  before Ampere): a *warning*, and the fallback dtype's row is checked instead.

A row applies only to the engines it lists; for any other engine the format is not checked, and the
result says so. Code never branches on an engine name: the rows name engines as data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import safejson

DATA = Path(__file__).parent / "data" / "weight_formats.json"


@cache
def format_table() -> dict[str, Any]:
    return json.loads(DATA.read_text())


def capability(text: str | None) -> tuple[int, int] | None:
    """'8.6' -> (8, 6); None or unparseable -> None."""
    if not text:
        return None
    try:
        major, minor = str(text).split(".", 1)
        return int(major), int(minor)
    except ValueError:
        return None


def _text(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def _nested_text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, Mapping):
            return nested
    return {}


def checkpoint_dtype(config: Mapping[str, Any]) -> str | None:
    """The compute dtype config.json declares (``torch_dtype`` or ``dtype``, also in a nested text config)."""
    aliases = format_table()["dtype_aliases"]
    for cfg in (config, _nested_text_config(config)):
        raw = cfg.get("torch_dtype") or cfg.get("dtype")
        if raw:
            return aliases.get(str(raw).removeprefix("torch.").lower())
    return None


def quantization_format(config: Mapping[str, Any]) -> str | None:
    """The weight format row of a quantized checkpoint (``fp8``, ``awq``, ``nvfp4``...), None when not quantized.

    A method the table does not know is returned as ``quant_method`` itself (then: not checked).
    """
    quant = config.get("quantization_config") or _nested_text_config(config).get("quantization_config")
    if not isinstance(quant, Mapping):
        return None
    method = str(quant.get("quant_method") or "").lower()
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method == "modelopt":
        algo = str(quant.get("quant_algo") or "").upper()
        return "nvfp4" if "FP4" in algo else "fp8" if "FP8" in algo else method
    if method == "compressed-tensors":
        if "nvfp4" in str(quant.get("format") or "").lower():
            return "nvfp4"
        for group in (quant.get("config_groups") or {}).values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping) and str(weights.get("type")) == "float":
                return "nvfp4" if weights.get("num_bits") == 4 else "fp8"
        return "compressed-tensors"
    return method or None


@dataclass(frozen=True)
class FormatCheck:
    """What the GPU can do with the checkpoint: problems refuse, warnings inform, notes say what was not checked."""

    formats: tuple[str, ...]  # as found: compute dtype first, then the quantization format
    min_compute_capability: str | None  # the highest minimum among the formats' rows (None: nothing known)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def resolve_formats(
    config: Mapping[str, Any] | None = None,
    *,
    dtype: str | None = None,
    quantization: str | None = None,
) -> tuple[str, ...]:
    """The formats to check: the engine's ``dtype`` flag over config.json's, and the quantization format."""
    table = format_table()
    found: list[str] = []
    given = table["dtype_aliases"].get(str(dtype).lower(), str(dtype).lower()) if dtype else None
    compute = given or (checkpoint_dtype(config) if config else None)
    if compute:
        found.append(compute)
    quant = quantization_format(config) if config else None
    if quantization:
        quant = str(quantization).lower()
        if quant in ("fbgemm_fp8",):
            quant = "fp8"
    if quant:
        found.append(quant)
    return tuple(found)


def minimum_for(row: Mapping[str, Any], engine: str) -> str:
    """The row's minimum compute capability for ``engine`` (an engine may need more than the row's default)."""
    return str((row.get("engine_min_compute_capability") or {}).get(engine) or row["min_compute_capability"])


def check_formats(
    formats: tuple[str, ...],
    *,
    compute_capability: str | None,
    engine: str,
    gpu: str = "this GPU",
    alternatives: Mapping[str, str] | None = None,
    auto_dtype: str | None = None,
) -> FormatCheck:
    """Check ``formats`` against a GPU of ``compute_capability`` for ``engine``.

    ``alternatives`` maps a minimum compute capability ('8.0') to the nearest instance type that has it;
    a problem names it. Unknown compute capability: nothing is refused, a note says so. ``auto_dtype``: the
    compute dtype when it comes from config.json (no dtype flag): an engine that resolves its ``auto`` dtype
    to one the GPU supports (the row's ``auto_fallback``) runs it in that dtype, checked in its place.
    """
    table = format_table()["formats"]
    cc = capability(compute_capability)
    problems: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    minimums: list[tuple[int, int]] = []
    for name in formats:
        row = table.get(name)
        if row is None:
            notes.append(f"weight format {name!r} is not in the format table: not checked against the GPU")
            continue
        if engine not in row["engines"]:
            notes.append(f"{row['label']}: no source for engine {engine!r} in the format table, not checked")
            continue
        need_text = minimum_for(row, engine)
        need = capability(need_text)
        assert need is not None
        if cc is None:
            minimums.append(need)
            notes.append(f"{row['label']}: the GPU's compute capability is unknown, not checked")
            continue
        where = f"{gpu} (compute capability {_text(cc)})"
        fallback = row.get("auto_fallback")
        if cc < need and name == auto_dtype and fallback and engine in fallback["engines"]:
            warnings.append(f"{row['label']} on {where}: {fallback['text']}. Source: {fallback['sources'][0]}")
            row = table[fallback["to"]]
            need_text = minimum_for(row, engine)
            need = capability(need_text)
            assert need is not None
        minimums.append(need)
        if cc < need:
            nearest = (alternatives or {}).get(need_text)
            fix = f"; the nearest instance type that can: {nearest}" if nearest else ""
            problems.append(
                f"{row['label']} need compute capability {need_text} or newer with {engine}; "
                f"{where} cannot run them: {row['below_min']}{fix}. Source: {row['sources'][0]}"
            )
            continue
        native = capability(row.get("native_compute_capability"))
        if native is not None and cc < native:
            warnings.append(
                f"{row['label']} on {where}: {row['below_native']} (native kernels from compute capability "
                f"{row['native_compute_capability']}). Source: {row['sources'][0]}"
            )
    highest = _text(max(minimums)) if minimums else None
    return FormatCheck(formats, highest, problems, warnings, notes)


def engine_format_settings(
    env_prefix: str, engine_env: Mapping[str, Any], keys: Mapping[str, str] | None = None
) -> dict:
    """The ``dtype`` and ``quantization`` an engine_env sets, if any (keys from the engine's data, else the prefix)."""
    flags = format_table()["engine_flags"]
    found: dict[str, str] = {}
    for setting, suffix in flags.items():
        key = (keys or {}).get(setting) or env_prefix + suffix
        value = engine_env.get(key)
        if value is not None and str(value).strip():
            found[setting] = str(value).strip()
    return found


def required_capabilities() -> list[str]:
    """Every distinct minimum compute capability in the table, ascending (for nearest-instance lookups)."""
    rows = format_table()["formats"].values()
    found = {r["min_compute_capability"] for r in rows}
    found |= {v for r in rows for v in (r.get("engine_min_compute_capability") or {}).values()}
    return sorted(found, key=lambda t: capability(t) or (0, 0))


def check_checkpoint(
    config: Mapping[str, Any],
    *,
    engine: str,
    compute_capability: str | None,
    dtype: str | None = None,
    quantization: str | None = None,
    gpu: str = "this GPU",
    alternatives: Mapping[str, str] | None = None,
) -> FormatCheck:
    """The deploy-time check: config.json's dtype and quantization (the engine's flags win) against the GPU."""
    formats = resolve_formats(config, dtype=dtype, quantization=quantization)
    # No dtype flag (or "auto"): the compute dtype is config.json's, which the engine may resolve to another.
    stated = resolve_formats(dtype=dtype) if dtype else ()
    auto_dtype = None if stated else checkpoint_dtype(config)
    return check_formats(
        formats,
        compute_capability=compute_capability,
        engine=engine,
        gpu=gpu,
        alternatives=alternatives,
        auto_dtype=auto_dtype,
    )


def check_deployment(
    config: Mapping[str, Any],
    *,
    engine: str,
    compute_capability: str,
    dtype: str = "",
    quantization: str = "",
    gpu: str = "this GPU",
    alternatives_json: str = "",
) -> tuple[list[str], list[str]]:
    """(problems, warnings and notes) for the preflight's properties as CloudFormation passes them (text)."""
    try:
        alternatives = safejson.loads(alternatives_json, source="alternatives") if alternatives_json else {}
    except safejson.JsonError:
        alternatives = {}
    check = check_checkpoint(
        config,
        engine=engine,
        compute_capability=compute_capability or None,
        dtype=dtype or None,
        quantization=quantization or None,
        gpu=gpu,
        alternatives=alternatives if isinstance(alternatives, dict) else {},
    )
    return check.problems, check.warnings + check.notes
