"""The model-against-instance checks in one call: memory fit, the context limit, tensor parallel size against the
heads, and weight format against the GPU (``check_model``; for a GGUF model, llama.cpp's memory fit: ``check_gguf``).
``cdk synth`` (constructs_lib/deployment/model_checks.py, from the recorded Hub lookup) and ``llmops plan`` call
this; the deploy preflight runs the same functions (``estimate_memory_fit``, ``estimate_gguf_fit``,
``context_problem``, ``tp_divides_heads``, ``check_checkpoint``) as its ``memory``, ``context``, ``tensor-parallel``
and ``format`` checks, on what it reads from S3. A mistake is thus refused by the first of the three that sees it.
Each check is skipped by its own name: skipping ``memory`` leaves the context limit checked (vLLM refuses a longer
context whatever the memory).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .context import context_problem, engine_context_limit
from .formats import FormatCheck, check_checkpoint
from .gguf import GgufHeader, estimate_gguf_fit, gguf_config
from .memory_fit import DEFAULT_GPU_MEMORY_UTILIZATION, MemoryFit, estimate_memory_fit, text_config, tp_divides_heads


@dataclass(frozen=True)
class ModelCheck:
    """Problems by check name (``memory``, ``context``, ``tensor-parallel``, ``format``), warnings, the two reports."""

    fit: MemoryFit | None
    formats: FormatCheck | None
    problems: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_model(
    config: Mapping[str, Any],
    *,
    weight_bytes: int,
    gpu_count: int,
    gpu_memory_gib: float,
    compute_capability: str | None,
    engine: str,
    max_model_len: int | None = None,
    tensor_parallel_size: int | None = None,
    max_num_seqs: int = 1,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_num_batched_tokens: int | None = None,
    dtype: str | None = None,
    quantization: str | None = None,
    gpu: str = "this GPU",
    alternatives: Mapping[str, str] | None = None,
    splits_heads: bool = True,
    skip: Sequence[str] = (),
    long_context: str | None = None,
) -> ModelCheck:
    """Every check not in ``skip`` for ``config`` with ``weight_bytes`` of weights on ``gpu_count`` GPUs.

    max_model_len: Default: the longest context the engine accepts for the model (what engines use when none
    is given). splits_heads: the engine splits attention heads over GPUs (llama.cpp splits layers). long_context:
    the engine's opt-in to start beyond the model's limit as set (preflight.context.long_context_opt_in): a longer
    context is then a warning. Raises ValueError for a config.json the estimate cannot read (no layer or head counts).
    """
    tp = tensor_parallel_size or gpu_count
    problems: list[tuple[str, str]] = []
    warnings: list[str] = []
    fit = None
    head_check = "tensor-parallel" not in skip and splits_heads
    context_check = "context" not in skip
    cfg = text_config(config)
    if "memory" in skip and head_check and (problem := tp_divides_heads(config, tp)):
        problems.append(("tensor-parallel", problem))
    skip_memory_check_context = "memory" in skip and context_check and max_model_len is not None
    if skip_memory_check_context and long_context is None and (refusal := context_problem(cfg, max_model_len)):
        problems.append(("context", refusal))
    if "memory" not in skip:
        if max_model_len is None:
            max_model_len = _trained_context(text_config(config), "config.json gives no max_position_embeddings")
        fit = estimate_memory_fit(
            config,
            weight_bytes=weight_bytes,
            gpu_count=gpu_count,
            gpu_memory_gib=gpu_memory_gib,
            tensor_parallel_size=tp,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            kv_cache_dtype=kv_cache_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            refuse_beyond_context=context_check,
            long_context=long_context,
        )
        for problem in fit.problems:
            # The head-count rule and the context limit are their own checks: skipping one never hides another.
            if problem.startswith("tensor_parallel_size="):
                if head_check:
                    problems.append(("tensor-parallel", problem))
            elif problem == fit.context_refusal:
                problems.append(("context", problem))
            else:
                problems.append(("memory", problem))
        warnings += fit.warnings
    formats = None
    if "format" not in skip:
        formats = check_checkpoint(
            config,
            engine=engine,
            compute_capability=compute_capability,
            dtype=dtype,
            quantization=quantization,
            gpu=gpu,
            alternatives=alternatives,
        )
        problems += [("format", p) for p in formats.problems]
        warnings += formats.warnings
    return ModelCheck(fit=fit, formats=formats, problems=problems, warnings=warnings)


def check_gguf(
    header: GgufHeader,
    *,
    weight_bytes: int,
    gpu_count: int,
    gpu_memory_gib: float,
    max_model_len: int | None = None,
    max_num_seqs: int = 1,
    skip: Sequence[str] = (),
) -> ModelCheck:
    """check_model for a GGUF model, whose header stands in for config.json: llama.cpp's memory fit
    (``estimate_gguf_fit``), the only check that applies (llama.cpp splits layers, not heads; no format rule).

    max_model_len: Default: the context the model was trained for (what the deploy preflight checks when none is
    given). The estimate is made even when ``memory`` is skipped; its problems are then dropped. Raises ValueError
    for a header that states no context length when none is given."""
    if max_model_len is None:
        max_model_len = _trained_context(gguf_config(header), "the GGUF header states no context_length")
    fit = estimate_gguf_fit(
        header,
        weight_bytes=weight_bytes,
        gpu_count=gpu_count,
        gpu_memory_gib=gpu_memory_gib,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
    )
    problems = [] if "memory" in skip else [("memory", p) for p in fit.problems]
    return ModelCheck(fit=fit, formats=None, problems=problems, warnings=fit.warnings)


def _trained_context(config: Mapping[str, Any], missing: str) -> int:
    """The context the model was trained for, what the deploy preflight checks when no max_model_len is given."""
    limit = engine_context_limit(config)
    if limit is None:
        raise ValueError(f"{missing}: set max_model_len")
    return limit.tokens
