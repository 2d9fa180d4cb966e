"""The model-against-instance checks in one call: memory fit (the context limit within it), tensor parallel
size against the heads, and weight format against the GPU. ``cdk synth`` (stacks/model_checks.py, from the
recorded Hub lookup) and ``llmops plan`` call this; the deploy preflight runs the same three functions
(``estimate_memory_fit``, ``tp_divides_heads``, ``check_checkpoint``) as its ``memory``, ``tensor-parallel`` and
``format`` checks, on what it reads from S3. A mistake is thus refused by the first of the three that sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .context import engine_context_limit
from .formats import FormatCheck, check_checkpoint
from .memory_fit import DEFAULT_GPU_MEMORY_UTILIZATION, MemoryFit, estimate_memory_fit, text_config, tp_divides_heads


@dataclass(frozen=True)
class ModelCheck:
    """Problems by check name (``memory``, ``tensor-parallel``, ``format``), warnings, and the two reports."""

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
) -> ModelCheck:
    """Every check not in ``skip`` for ``config`` with ``weight_bytes`` of weights on ``gpu_count`` GPUs.

    max_model_len: Default: the longest context the engine accepts for the model (what engines use when none
    is given). splits_heads: the engine splits attention heads over GPUs (llama.cpp splits layers). Raises
    ValueError for a config.json the estimate cannot read (no layer or head counts).
    """
    tp = tensor_parallel_size or gpu_count
    problems: list[tuple[str, str]] = []
    warnings: list[str] = []
    fit = None
    head_check = "tensor-parallel" not in skip and splits_heads
    if "memory" in skip and head_check and (problem := tp_divides_heads(config, tp)):
        problems.append(("tensor-parallel", problem))
    if "memory" not in skip:
        if max_model_len is None:
            limit = engine_context_limit(text_config(config))
            if limit is None:
                raise ValueError("config.json gives no max_position_embeddings: set max_model_len")
            max_model_len = limit.tokens
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
        )
        for problem in fit.problems:
            # The head-count rule is its own check, so that skipping one never hides the other.
            if problem.startswith("tensor_parallel_size="):
                if head_check:
                    problems.append(("tensor-parallel", problem))
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
