"""The refusal preflight gives when a model does not fit, at each of its boundaries, as the user reads it.

Figures: Qwen3-8B (16.4 GB of weights) on one L4 with the arithmetic overhead of test_memory_fit leaves a
2,769,387,264-byte KV budget (2.58 GiB); its KV cache takes 147,456 bytes per token in bf16 (36 layers x 8 KV
heads x 128 x 2 x 2), 73,728 in fp8, so 18,781 tokens fit in bf16 and 37,562 in fp8.
"""

from __future__ import annotations

from dataclasses import replace

from preflight.memory_fit import _shortfall
from tests.preflight.test_memory_fit import G6_XLARGE, QWEN3_8B, QWEN3_8B_BYTES, fit

FP8 = "an fp8 KV cache (kv-cache-dtype fp8: engine_env SM_<ENGINE>_KV_CACHE_DTYPE, or plan --kv-cache-dtype; halves "
# The same model with room for 200,000 positions, so that memory alone refuses (test_context_limit covers the limit).
LONG = {**QWEN3_8B, "max_position_embeddings": 262_144}
QUANTIZED = "a quantized checkpoint (4-bit AWQ/GPTQ weights are about a quarter of 16-bit, FP8 half)"


def test_a_context_too_long_even_for_an_fp8_cache_names_the_fp8_limit_and_the_gpu_size():
    (problem,) = fit(LONG, QWEN3_8B_BYTES, G6_XLARGE, max_model_len=200_000).problems
    # 15.27 + 2.26 + 27.47 GiB = 48.3 GB, / 0.9 = 53.7 -> GPUs of at least 54 GB.
    assert problem == (
        "KV cache does not fit: one 200,000-token sequence needs 27.47 GiB of KV cache per GPU, but 2.58 GiB is left "
        "after weights (15.27 GiB) and overhead (2.26 GiB). Set max_model_len to at most 18,781; or "
        f"{FP8}the KV cache: max_model_len up to 37,562); or GPUs of at least 54 GB each at TP 1, or more GPUs (a "
        f"larger tensor_parallel_size); or {QUANTIZED}."
    )


def test_a_cache_already_in_fp8_is_not_offered_fp8_again():
    (too_long,) = fit(LONG, QWEN3_8B_BYTES, G6_XLARGE, max_model_len=200_000, kv_cache_dtype="fp8").problems
    assert too_long == (
        "KV cache does not fit: one 200,000-token sequence needs 13.73 GiB of KV cache per GPU, but 2.58 GiB is left "
        "after weights (15.27 GiB) and overhead (2.26 GiB). Set max_model_len to at most 37,562; or GPUs of at least "
        f"38 GB each at TP 1, or more GPUs (a larger tensor_parallel_size); or {QUANTIZED}."
    )
    (crowded,) = fit(
        QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE, max_model_len=12_000, max_num_seqs=4, kv_cache_dtype="fp8"
    ).problems
    assert crowded == (
        "concurrency does not fit: max_num_seqs=4 sequences of 12,000 tokens need 3.30 GiB of KV cache per GPU; "
        "2.58 GiB is left, enough for 3. Set max_num_seqs to at most 3, or max_model_len to at most 9,390 for 4 "
        "sequences; or more GPUs (a larger tensor_parallel_size)."
    )


def test_two_sequences_where_one_fits_is_a_concurrency_problem_fp8_solves():
    crowded = fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE, max_model_len=12_000, max_num_seqs=2)
    assert crowded.full_length_sequences == 1
    assert crowded.problems == [
        "concurrency does not fit: max_num_seqs=2 sequences of 12,000 tokens need 3.30 GiB of KV cache per GPU; "
        "2.58 GiB is left, enough for 1. Set max_num_seqs to at most 1, or max_model_len to at most 9,390 for 2 "
        f"sequences; or {FP8}the KV cache: 3 full-length sequences fit); or more GPUs (a larger "
        "tensor_parallel_size)."
    ]
    assert fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE, max_model_len=12_000, max_num_seqs=2, kv_cache_dtype="fp8").fits


def test_the_boundaries_between_fitting_no_kv_room_and_no_weight_room():
    base = fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE, max_model_len=4096)
    needed = base.kv_bytes_needed_per_gpu
    # A budget of exactly what the KV cache needs fits; one byte less does not.
    assert _shortfall(replace(base, kv_budget_bytes_per_gpu=needed)) is None
    one_short = _shortfall(replace(base, kv_budget_bytes_per_gpu=needed - 1, full_length_sequences=0))
    assert one_short.startswith("KV cache does not fit: one 4,096-token sequence needs 0.56 GiB")
    # Nothing left after the weights and overhead: the weights are what does not fit.
    nothing = replace(base, kv_budget_bytes_per_gpu=0, full_length_sequences=0, max_model_len_that_fits=0)
    assert _shortfall(nothing) == (
        "weights do not fit: 15.27 GiB of weights plus 2.26 GiB runtime overhead per GPU exceed the 20.12 GiB the "
        "engine may use (90% of usable memory) by 0.00 GiB, before any KV cache. Use GPUs of at least 22 GB each at "
        f"TP 1, or more GPUs (a larger tensor_parallel_size); or {QUANTIZED}."
    )
    one_byte = _shortfall(replace(nothing, kv_budget_bytes_per_gpu=1))
    assert one_byte.startswith(
        "KV cache does not fit: one 4,096-token sequence needs 0.56 GiB of KV cache per GPU, but 0.00 GiB is left"
    )
