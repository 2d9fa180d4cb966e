"""The longest context an engine accepts for a model, derived from config.json as vLLM derives it.

vLLM refuses to start when ``--max-model-len`` exceeds the length it derives from the model's config.json
(``ValueError: User-specified max_model_len (...) is greater than the derived max_model_len ...``) unless
``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` is set. The rule, from ``_get_and_verify_max_len`` in vLLM's
``vllm/config/model.py`` (https://github.com/vllm-project/vllm/blob/18ec6629253632af0a384f2ffbb8c6b28af322e7/vllm/config/model.py):

1. The smallest of ``max_position_embeddings``, ``n_positions``, ``max_seq_len``, ``seq_length``,
   ``model_max_length``, ``max_target_positions``, ``max_sequence_length``, ``max_seq_length``, ``seq_len``
   that config.json gives; a ``model_max_length`` (Command-R, Cohere) replaces it.
2. RoPE scaling (``rope_scaling``, or transformers v5's ``rope_parameters``, possibly one entry per layer type)
   multiplies that length by its ``factor`` (1.0 when absent) for every rope type except ``su``, ``longrope``
   and ``llama3``: those do not extend it (a Llama 3.1 config already states its 131,072 positions). For
   ``yarn`` the base is ``original_max_position_embeddings`` (``original x factor``). Gemma 3 configs are
   never scaled (their length is already scaled).
3. A length above the derived one is still accepted when it is at most ``model_max_length``.
4. No key at all: any length is accepted (vLLM takes the user's).

vLLM reads the text model's config (``hf_text_config``): a multimodal config's ``text_config`` (``text_config``
below). vLLM also takes the minimum with ``tokenizer_config.json``'s ``model_max_length``; that file is not read
here (it rarely states less), so the limit may be higher than vLLM's in that case, never lower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The variable that makes vLLM start beyond the derived length: _get_and_verify_max_len only warns when
# envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN is true (vllm/config/model.py at the commit above), which vllm/envs.py reads as
# os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")
# (https://github.com/vllm-project/vllm/blob/001f69f8b52e0803c910525974d17010814947ad/vllm/envs.py). Per engine: only
# the vllm image runs vLLM's check as cited here.
LONG_CONTEXT_ENV = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN"}
LONG_CONTEXT_TRUE = ("1", "true")
# What a refusal offers as the ways past the limit, besides a shorter context.
BEYOND_HINT = (
    "; to run past it anyway, vLLM starts with container_env VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (it then warns that "
    "positions beyond the limit give NaN with RoPE), and a context extended with rope scaling in the engine's "
    'hf-overrides flag needs preflight_skip ["context"] (skip_checks "context")'
)

# vLLM's possible_keys, in its order.
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# Rope types whose factor does not extend the derived length (vLLM: ("su", "longrope", "llama3")).
NOT_EXTENDING = frozenset({"su", "longrope", "llama3"})
# transformers' layer types, under which v5 may nest one rope_parameters entry each (ALLOWED_LAYER_TYPES).
LAYER_TYPES = frozenset(
    {"full_attention", "sliding_attention", "chunked_attention", "linear_attention", "mamba", "conv"}
)


@dataclass(frozen=True)
class ContextLimit:
    """The longest ``max_model_len`` the engine starts with, and how config.json gives it."""

    tokens: int
    key: str  # the config.json key the length comes from
    how: str  # one line: the keys and the rope rule that produced ``tokens``
    model_max_length: int | None = None  # a longer length vLLM still accepts (rule 3)

    @property
    def largest(self) -> int:
        """The longest ``max_model_len`` the engine starts with: the derived length, or a longer model_max_length."""
        return max(self.tokens, self.model_max_length or 0)

    def accepts(self, max_model_len: int) -> bool:
        return max_model_len <= self.largest


def _number(value: Any) -> float | None:
    """A positive finite number, else None (config.json is hostile input: JSON parsers accept Infinity, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def _rope_entries(cfg: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """rope_parameters (v5) or rope_scaling, as a list of entries (one per layer type when nested)."""
    rope = cfg.get("rope_parameters")
    if not isinstance(rope, Mapping) or not rope:
        rope = cfg.get("rope_scaling")
    if not isinstance(rope, Mapping) or not rope:
        return []
    if set(rope) <= LAYER_TYPES and all(isinstance(v, Mapping) for v in rope.values()):
        return list(rope.values())
    return [rope]


def engine_context_limit(cfg: Mapping[str, Any]) -> ContextLimit | None:
    """vLLM's derived max_model_len for the (text) config ``cfg``; None when config.json states no length."""
    derived: float | None = None
    key = ""
    for name in LENGTH_KEYS:
        value = _number(cfg.get(name))
        if value is not None and (derived is None or value < derived):
            derived, key = value, name
    model_max_length = _number(cfg.get("model_max_length"))
    if model_max_length is not None:
        derived, key = model_max_length, "model_max_length"
    if derived is None:
        return None
    how = f"{key}={int(derived):,}"

    model_type = str(cfg.get("model_type") or "")
    entries = _rope_entries(cfg)
    if entries and "gemma3" not in model_type:
        factor, scaled_by = 1.0, ""
        for rope in entries:
            rope_type = str(rope.get("rope_type") or rope.get("type") or "default")
            if rope_type in NOT_EXTENDING:
                how += f"; rope_type {rope_type} does not extend it"
                continue
            factor = _number(rope.get("factor")) or factor
            original = _number(rope.get("original_max_position_embeddings"))
            if rope_type == "yarn" and original is not None:
                derived, key = original, "original_max_position_embeddings"
                how = f"rope_scaling yarn: original_max_position_embeddings {int(original):,}"
            scaled_by = rope_type
        if factor != 1.0:
            derived *= factor
            if not math.isfinite(derived):  # a finite factor times a finite length can still overflow
                return None
            how += f" x rope_scaling {scaled_by} factor {factor:g} = {int(derived):,}"
    tokens = int(derived)
    return ContextLimit(
        tokens=tokens,
        key=key,
        how=how,
        model_max_length=int(model_max_length) if model_max_length is not None else None,
    )


def context_problem(
    cfg: Mapping[str, Any], max_model_len: int, *, largest_that_fits: int | None = None, key: str = "max_model_len"
) -> str | None:
    """The refusal for a context the engine will not start with, or None. Names the key, the value, the model's
    limit and the largest context that fits (the limit, or less when memory allows less)."""
    limit = engine_context_limit(cfg)
    if limit is None or limit.accepts(max_model_len):
        return None
    largest = limit.largest if largest_that_fits is None else min(limit.largest, largest_that_fits)
    return (
        f"{key}={max_model_len}: above the longest context the engine accepts for this model, {limit.largest:,} "
        f"tokens ({limit.how}; vLLM's _get_and_verify_max_len refuses to start beyond it, whatever the memory). "
        f"The largest context that fits here: {largest:,}; set {key} to at most that" + BEYOND_HINT
    )


def long_context_opt_in(engine: str | None, env: Mapping[str, Any] | None) -> str | None:
    """``NAME=value`` when ``env`` (the container's variables) holds the engine's variable that lets it start beyond
    the derived length, set true as the engine reads it; None otherwise (also for engines without one)."""
    name = LONG_CONTEXT_ENV.get(engine or "")
    if name is None or not env or name not in env:
        return None
    value = env[name]
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return f"{name}={text}" if text.strip().lower() in LONG_CONTEXT_TRUE else None


def long_context_settings(engine: str | None, env: Mapping[str, Any] | None) -> dict[str, str]:
    """``{"long_context": "NAME=value"}`` (check_model's keyword) when the opt-in is set, else ``{}``."""
    found = long_context_opt_in(engine, env)
    return {"long_context": found} if found else {}


def beyond_context_warning(
    cfg: Mapping[str, Any], max_model_len: int, opt_in: str, *, key: str = "max_model_len"
) -> str | None:
    """The warning for a context above the engine's limit that ``opt_in`` lets it start with, or None."""
    limit = engine_context_limit(cfg)
    if limit is None or limit.accepts(max_model_len):
        return None
    return (
        f"{key}={max_model_len:,} is above the longest context the engine accepts for this model, "
        f"{limit.largest:,} tokens ({limit.how}); {opt_in} lets vLLM start with it (its own warning: positions beyond "
        "the limit give NaN with RoPE, or out-of-bounds errors with absolute positions)"
    )
