"""The model's checks against the instance: weight format, memory fit, context limit, tensor parallel size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from preflight_checkpoint import Weights
from preflight_settings import Settings

from preflight import (
    GIB,
    MemoryFit,
    estimate_memory_fit,
    tp_divides_heads,
)
from preflight.context import context_problem, engine_context_limit
from preflight.formats import check_deployment
from preflight.gguf import S3Gguf, estimate_gguf_fit
from preflight.memory_fit import text_config


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


def effective_max_model_len(config: Mapping[str, Any], settings: Settings) -> tuple[int | None, str | None]:
    """The context to check: the given one, else the model's own limit (what engines derive)."""
    if settings.max_model_len is not None:
        return settings.max_model_len, None
    # What the engine derives when none is given (vLLM's rule, rope scaling included); a larger given one is the
    # context check's refusal (check_context, preflight/context.py), not a note.
    derived = engine_context_limit(text_config(config))
    limit = derived.tokens if derived is not None else None
    if limit is None:
        return None, "MaxModelLen is not set and config.json gives no max_position_embeddings: set max_model_len"
    return limit, None


def _gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def check_memory(
    config: Mapping[str, Any], weights: Weights, settings: Settings, gguf: S3Gguf | None = None
) -> tuple[list[str], dict[str, str], MemoryFit | None]:
    """Problems (with numbers and what to change), the key figures, and the estimate itself.

    The context limit is the ``context`` check's (``fit.context_refusal``, reported by check_context): with that
    check on, a refused context's memory advice works from the longest context the engine accepts.
    """
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
                max_num_batched_tokens=settings.max_num_batched_tokens,
                refuse_beyond_context="context" not in settings.skip,
                long_context=settings.long_context or None,
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
    shortfalls = [p for p in fit.problems if p not in (tp_problem, fit.context_refusal)]
    head = (
        f"{settings.instance_type} ({settings.gpu_count} x {settings.gpu_memory_gib:g} GB, tensor parallel "
        f"{fit.tensor_parallel_size}, max_model_len {max_model_len:,}, {settings.max_num_seqs} sequence(s), "
        f"KV cache {fit.kv_cache_dtype}): "
    )
    return [head + p for p in shortfalls], figures, fit


def check_context(config: Mapping[str, Any], settings: Settings, fit: MemoryFit | None) -> list[str]:
    """The refusal of a max_model_len above the longest context the engine accepts (vLLM's rule, preflight/context.py),
    unless the engine's opt-in (``LongContext``) is set. ``fit``: the memory check's estimate, whose refusal names
    the largest context that fits; None when that check is skipped (then the limit alone is named)."""
    if settings.max_model_len is None or settings.long_context:
        return []
    if fit is not None:
        return [fit.context_refusal] if fit.context_refusal else []
    refusal = context_problem(text_config(config), settings.max_model_len)
    return [refusal] if refusal else []


def check_tensor_parallel(config: Mapping[str, Any], settings: Settings) -> list[str]:
    try:
        problem = tp_divides_heads(config, settings.tensor_parallel_size)
    except ValueError as e:
        return [f"cannot read the attention heads from config.json: {e}"]
    return [problem] if problem else []
