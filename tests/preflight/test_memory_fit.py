"""preflight.memory_fit against hand-computed figures for real model configs.

Shared arithmetic (every figure below is per GPU):
- ml.g6.xlarge: 1 x L4 "24 GB" -> 24e9 usable bytes; x 0.90 -> 21,600,000,000 available.
- ml.g6e.12xlarge: 4 x L40S "48 GB" -> 48e9 usable; x 0.90 -> 43,200,000,000 available.
- overhead = 1.5 GiB (1,610,612,736) + 5% of the weights on the GPU counted as 16-bit: the arithmetic below is
  checked with this explicit ``ARITHMETIC_OVERHEAD`` (the figures were worked by hand with it); the calibrated
  default (``Overhead()``) is checked against published vLLM logs in test_calibration.py and below.
- budget = available - weights / TP - overhead; sequences = budget // KV of one sequence.
Weight sizes are the approximate on-disk sizes of each repository's weight files.
"""

from __future__ import annotations

import pytest

from preflight import (
    GIB,
    AttentionLayout,
    Overhead,
    attention_layout,
    estimate_memory_fit,
    format_table,
    text_config,
    tp_divides_heads,
)

G6_XLARGE = {"gpu_count": 1, "gpu_memory_gib": 24}  # 1 x NVIDIA L4
G6E_12XLARGE = {"gpu_count": 4, "gpu_memory_gib": 48}  # 4 x NVIDIA L40S
FIXED = 1_610_612_736  # 1.5 GiB
ARITHMETIC_OVERHEAD = Overhead(fixed_bytes_per_gpu=FIXED, activation_fraction=0.05)

# Qwen/Qwen3-8B config.json (the fields that matter).
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 4096,
    "head_dim": 128,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 40960,
    "sliding_window": None,
    "use_sliding_window": False,
    "rope_scaling": None,
    "torch_dtype": "bfloat16",
}
QWEN3_8B_BYTES = 16_400_000_000

# meta-llama/Llama-2-7b-hf: no num_key_value_heads (plain multi-head attention), head_dim = 4096 / 32.
LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 4096,
    "torch_dtype": "float16",
}
LLAMA2_7B_BYTES = 13_480_000_000

# Qwen/Qwen3-30B-A3B: MoE, 128 experts, 8 active.
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 2048,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
    "max_position_embeddings": 40960,
    "use_sliding_window": False,
    "sliding_window": None,
    "torch_dtype": "bfloat16",
}
QWEN3_30B_A3B_BYTES = 61_100_000_000

# Qwen/Qwen2.5-7B-Instruct-AWQ: 4-bit AWQ; sliding_window is set but unused (use_sliding_window false).
QWEN25_7B_AWQ = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32768,
    "sliding_window": 131072,
    "use_sliding_window": False,
    "max_window_layers": 28,
    "quantization_config": {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm", "zero_point": True},
    "torch_dtype": "float16",
}
QWEN25_7B_AWQ_BYTES = 5_580_000_000

# Qwen/Qwen3-8B-FP8: Qwen3-8B's shape with block-wise FP8 weights.
QWEN3_8B_FP8 = {
    **QWEN3_8B,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
}
QWEN3_8B_FP8_BYTES = 9_440_000_000

# mistralai/Mistral-Small-3.1-24B-Instruct-2503: multimodal; the language model is in text_config.
MISTRAL_SMALL_31 = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "mistral",
        "hidden_size": 5120,
        "head_dim": 128,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "sliding_window": None,
    },
    "vision_config": {"model_type": "pixtral", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16},
}
MISTRAL_SMALL_31_BYTES = 48_000_000_000

# deepseek-ai/DeepSeek-V2-Lite: multi-head latent attention, MoE with 64 routed experts.
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 64,
    "num_experts_per_tok": 6,
    "max_position_embeddings": 163840,
    "torch_dtype": "bfloat16",
}
DEEPSEEK_V2_LITE_BYTES = 31_400_000_000

# google/gemma-3-4b-it: multimodal; 1,024-token sliding window on 5 of every 6 layers
# (sliding_window_pattern 6 is Gemma3TextConfig's value: layers 6, 12, ... are global).
GEMMA3_4B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "head_dim": 256,
        "num_hidden_layers": 34,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "max_position_embeddings": 131072,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    },
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "num_hidden_layers": 27},
}
GEMMA3_4B_BYTES = 8_600_000_000

# openai/gpt-oss-20b: layer_types alternate a 128-token sliding window with full attention; MXFP4 experts.
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"],
    "hidden_size": 2880,
    "head_dim": 64,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "max_position_embeddings": 131072,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]},
    "torch_dtype": "bfloat16",
}
GPT_OSS_20B_BYTES = 13_800_000_000

# Qwen/Qwen3-Next-80B-A3B-Instruct: 3 linear-attention layers to 1 gated full-attention layer.
QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"],
    "hidden_size": 2048,
    "head_dim": 256,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "full_attention_interval": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "torch_dtype": "bfloat16",
}

# mistralai/Mistral-7B-v0.1: sliding_window with no word on which layers use it.
MISTRAL_7B_V01 = {
    "architectures": ["MistralForCausalLM"],
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}


def fit(config, weight_bytes, instance, max_model_len=32768, **kwargs):
    kwargs.setdefault("overhead", ARITHMETIC_OVERHEAD)
    return estimate_memory_fit(config, weight_bytes=weight_bytes, max_model_len=max_model_len, **instance, **kwargs)


def test_the_default_overhead_is_the_calibrated_one():
    # 8.5 % of the 16-bit-equivalent weights, nothing fixed: Qwen3-8B (16.4 GB) on one L4.
    default = estimate_memory_fit(QWEN3_8B, weight_bytes=QWEN3_8B_BYTES, max_model_len=32768, **G6_XLARGE)
    assert Overhead() == Overhead(fixed_bytes_per_gpu=0, activation_fraction=0.085)
    assert default.overhead_bytes_per_gpu == round(0.085 * QWEN3_8B_BYTES)
    assert default.kv_budget_bytes_per_gpu == 21_600_000_000 - QWEN3_8B_BYTES - round(0.085 * QWEN3_8B_BYTES)
    assert any("calibrated against published vLLM start-up logs" in a for a in default.assumptions)


def test_instance_facts_match_the_catalog():
    from constructs_lib.catalog import lookup_instance

    for name, facts in (("ml.g6.xlarge", G6_XLARGE), ("ml.g6e.12xlarge", G6E_12XLARGE)):
        spec = lookup_instance(name)
        assert spec is not None
        assert (spec.gpu_count, spec.gpu_memory_gib) == (facts["gpu_count"], facts["gpu_memory_gib"])


def test_usable_memory_reads_nominal_gb_and_applies_utilization():
    l4 = fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE)
    l40s = fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE)
    assert l4.usable_bytes_per_gpu == 24_000_000_000  # 22.35 GiB
    assert l4.available_bytes_per_gpu == 21_600_000_000
    assert l40s.usable_bytes_per_gpu == 48_000_000_000  # 44.70 GiB
    assert l40s.available_bytes_per_gpu == 43_200_000_000
    measured = fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE, usable_gpu_memory_bytes=23_034 * 2**20)
    assert measured.usable_bytes_per_gpu == 24_152_899_584  # what the driver reports for an L4
    assert measured.available_bytes_per_gpu == 21_737_609_625  # floor(x 0.9)
    assert fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE, gpu_memory_utilization=0.5).available_bytes_per_gpu == 12 * 10**9


def test_dense_gqa_qwen3_8b():
    # KV per token = 2 x 36 layers x 8 KV heads x 128 x 2 bytes = 147,456 (144 KiB).
    l4 = fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE)
    assert l4.attention.kind == "gqa"
    assert l4.kv_bytes_per_token == l4.kv_bytes_per_token_per_gpu == 147_456
    # overhead = FIXED + 0.05 x 16.4e9 = 2,430,612,736; budget = 21.6e9 - 16.4e9 - that = 2,769,387,264.
    assert l4.weights_bytes_per_gpu == 16_400_000_000
    assert l4.overhead_bytes_per_gpu == FIXED + 820_000_000
    assert l4.kv_budget_bytes_per_gpu == 2_769_387_264
    # one 32,768-token sequence = 147,456 x 32,768 = 4,831,838,208 > budget: does not fit on an L4.
    assert l4.kv_bytes_per_sequence_per_gpu == 4_831_838_208
    assert not l4.fits
    assert l4.full_length_sequences == 0
    assert l4.max_model_len_that_fits == 18_781  # 2,769,387,264 // 147,456
    (problem,) = l4.problems
    assert "KV cache does not fit" in problem
    assert "max_model_len to at most 18,781" in problem
    assert "an fp8 KV cache (kv-cache-dtype fp8" in problem and "32,768 tokens then fit" in problem

    # TP 4: 8 KV heads / 4 = 2 per GPU -> 2 x 36 x 2 x 128 x 2 = 36,864 per token per GPU.
    x4 = fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE)
    assert x4.tensor_parallel_size == 4
    assert x4.kv_bytes_per_token == 147_456
    assert x4.kv_bytes_per_token_per_gpu == 36_864
    # weights 4.1e9 per GPU; overhead FIXED + 205e6; budget 43.2e9 - 4.1e9 - 1,815,612,736 = 37,284,387,264.
    assert x4.kv_budget_bytes_per_gpu == 37_284_387_264
    assert x4.kv_bytes_per_sequence_per_gpu == 1_207_959_552  # 36,864 x 32,768
    assert x4.fits and x4.problems == []
    assert x4.full_length_sequences == 30  # 37,284,387,264 // 1,207,959,552
    assert x4.max_model_len_that_fits == 1_011_403  # 37,284,387,264 // 36,864


def test_multi_head_without_gqa_llama2_7b():
    # No num_key_value_heads: KV heads = 32 attention heads; head_dim = 4096 / 32 = 128.
    # KV per token = 2 x 32 x 32 x 128 x 2 = 524,288 (512 KiB).
    l4 = fit(LLAMA2_7B, LLAMA2_7B_BYTES, G6_XLARGE, max_model_len=4096)
    assert l4.attention.kind == "mha"
    assert (l4.attention.kv_heads, l4.attention.head_dim) == (32, 128)
    assert l4.kv_bytes_per_token == 524_288
    assert l4.kv_cache_dtype == "float16"
    # budget = 21.6e9 - 13.48e9 - (FIXED + 674e6) = 5,835,387,264; sequence = 524,288 x 4,096 = 2,147,483,648.
    assert l4.kv_budget_bytes_per_gpu == 5_835_387_264
    assert l4.kv_bytes_per_sequence_per_gpu == 2_147_483_648
    assert l4.fits
    assert l4.full_length_sequences == 2
    assert l4.max_model_len_that_fits == 11_130  # 5,835,387,264 // 524,288

    x4 = fit(LLAMA2_7B, LLAMA2_7B_BYTES, G6E_12XLARGE, max_model_len=4096)
    assert x4.kv_bytes_per_token_per_gpu == 131_072  # 8 heads per GPU
    # budget = 43.2e9 - 3.37e9 - (FIXED + 168.5e6) = 38,050,887,264; sequence = 131,072 x 4,096.
    assert x4.kv_budget_bytes_per_gpu == 38_050_887_264
    assert x4.fits
    assert x4.full_length_sequences == 70  # // 536,870,912
    assert x4.max_model_len_that_fits == 290_305


def test_moe_qwen3_30b_a3b():
    # KV per token = 2 x 48 x 4 x 128 x 2 = 98,304 (96 KiB); the experts do not change it.
    l4 = fit(QWEN3_30B_A3B, QWEN3_30B_A3B_BYTES, G6_XLARGE)
    assert l4.kv_bytes_per_token == 98_304
    # All 128 experts are resident: 61.1e9 + (FIXED + 3.055e9) exceeds 21.6e9 by 44,165,612,736.
    assert l4.kv_budget_bytes_per_gpu == -44_165_612_736
    assert not l4.fits
    assert l4.max_model_len_that_fits == 0
    assert l4.full_length_sequences == 0
    (problem,) = l4.problems
    assert problem.startswith("weights do not fit")
    assert "quantized checkpoint" in problem
    assert any("all 128 experts resident" in a and "8 active" in a for a in l4.assumptions)

    x4 = fit(QWEN3_30B_A3B, QWEN3_30B_A3B_BYTES, G6E_12XLARGE)
    # 4 KV heads / TP 4 = 1 per GPU: 2 x 48 x 1 x 128 x 2 = 24,576 per token per GPU.
    assert x4.kv_bytes_per_token_per_gpu == 24_576
    # budget = 43.2e9 - 15.275e9 - (FIXED + 763.75e6) = 25,550,637,264; sequence = 24,576 x 32,768 = 805,306,368.
    assert x4.kv_budget_bytes_per_gpu == 25_550_637_264
    assert x4.fits
    assert x4.full_length_sequences == 31
    assert x4.max_model_len_that_fits == 1_039_658


def test_awq_4bit_qwen25_7b():
    # head_dim = 3584 / 28 = 128; KV per token = 2 x 28 x 4 x 128 x 2 = 57,344 (56 KiB): weights are 4-bit,
    # the KV cache is not.
    l4 = fit(QWEN25_7B_AWQ, QWEN25_7B_AWQ_BYTES, G6_XLARGE)
    assert l4.attention.head_dim == 128
    assert l4.attention.window_layers == 0  # use_sliding_window is false
    assert l4.kv_bytes_per_token == 57_344
    # Weights count as stored (5.58e9); activations as if 16-bit: 0.05 x 5.58e9 x 16/4 = 1,116,000,000.
    assert l4.weights_bytes_per_gpu == 5_580_000_000
    assert l4.overhead_bytes_per_gpu == FIXED + 1_116_000_000
    assert l4.kv_budget_bytes_per_gpu == 13_293_387_264
    assert l4.fits
    assert l4.full_length_sequences == 7  # // (57,344 x 32,768 = 1,879,048,192)
    assert l4.max_model_len_that_fits == 231_818
    assert any("awq, 4-bit weights" in a for a in l4.assumptions)

    x4 = fit(QWEN25_7B_AWQ, QWEN25_7B_AWQ_BYTES, G6E_12XLARGE)
    assert x4.kv_bytes_per_token_per_gpu == 14_336  # 1 KV head per GPU
    assert x4.kv_budget_bytes_per_gpu == 39_915_387_264  # 43.2e9 - 1.395e9 - (FIXED + 279e6)
    assert x4.fits
    assert x4.full_length_sequences == 84


def test_fp8_checkpoint_keeps_a_16_bit_kv_cache_unless_asked():
    # Same shape as Qwen3-8B: 147,456 bytes per token in bfloat16, FP8 weights or not.
    l4 = fit(QWEN3_8B_FP8, QWEN3_8B_FP8_BYTES, G6_XLARGE)
    assert l4.kv_cache_dtype == "bfloat16"
    assert l4.kv_bytes_per_token == 147_456
    # activations: 0.05 x 9.44e9 x 16/8 = 944,000,000; budget = 21.6e9 - 9.44e9 - 2,554,612,736.
    assert l4.overhead_bytes_per_gpu == FIXED + 944_000_000
    assert l4.kv_budget_bytes_per_gpu == 9_605_387_264
    assert l4.fits  # where the 16-bit checkpoint does not
    assert l4.full_length_sequences == 1  # // 4,831,838,208
    assert l4.max_model_len_that_fits == 65_140

    fp8_kv = fit(QWEN3_8B_FP8, QWEN3_8B_FP8_BYTES, G6_XLARGE, kv_cache_dtype="fp8")
    assert fp8_kv.kv_bytes_per_token == 73_728  # 2 x 36 x 8 x 128 x 1
    assert fp8_kv.full_length_sequences == 3  # 9,605,387,264 // 2,415,919,104
    assert fp8_kv.max_model_len_that_fits == 130_281

    x4 = fit(QWEN3_8B_FP8, QWEN3_8B_FP8_BYTES, G6E_12XLARGE)
    assert x4.kv_bytes_per_token_per_gpu == 36_864
    assert x4.kv_budget_bytes_per_gpu == 38_993_387_264  # 43.2e9 - 2.36e9 - (FIXED + 236e6)
    assert x4.fits
    assert x4.full_length_sequences == 32


def test_multimodal_reads_the_text_config_mistral_small_31():
    # text_config, not vision_config (24 layers, 16 heads): 2 x 40 x 8 x 128 x 2 = 163,840 per token.
    assert text_config(MISTRAL_SMALL_31)["num_hidden_layers"] == 40
    assert text_config(MISTRAL_SMALL_31)["torch_dtype"] == "bfloat16"  # top-level keys still apply
    l4 = fit(MISTRAL_SMALL_31, MISTRAL_SMALL_31_BYTES, G6_XLARGE)
    assert l4.kv_bytes_per_token == 163_840
    assert l4.kv_budget_bytes_per_gpu == -30_410_612_736  # 48e9 of weights on a 21.6e9 budget
    assert not l4.fits
    assert any(a.startswith("multimodal") for a in l4.assumptions)

    x4 = fit(MISTRAL_SMALL_31, MISTRAL_SMALL_31_BYTES, G6E_12XLARGE)
    assert x4.kv_bytes_per_token_per_gpu == 40_960  # 2 KV heads per GPU
    assert x4.kv_budget_bytes_per_gpu == 28_989_387_264  # 43.2e9 - 12e9 - (FIXED + 600e6)
    assert x4.fits
    assert x4.full_length_sequences == 21  # // 1,342,177,280
    assert x4.max_model_len_that_fits == 707_748


def test_latent_attention_deepseek_v2_lite():
    # MLA: (512 + 64) elements x 2 bytes x 27 layers = 31,104 bytes per token; no factor 2.
    l4 = fit(DEEPSEEK_V2_LITE, DEEPSEEK_V2_LITE_BYTES, G6_XLARGE)
    assert l4.attention.kind == "mla"
    assert l4.kv_bytes_per_token == 31_104
    assert l4.kv_budget_bytes_per_gpu == -12_980_612_736  # 31.4e9 of weights alone exceed 21.6e9
    assert not l4.fits
    assert l4.max_model_len_that_fits == 0

    x4 = fit(DEEPSEEK_V2_LITE, DEEPSEEK_V2_LITE_BYTES, G6E_12XLARGE)
    # The latent cache is replicated on every TP rank: per GPU equals the whole model's.
    assert x4.kv_bytes_per_token_per_gpu == 31_104
    assert x4.kv_budget_bytes_per_gpu == 33_346_887_264  # 43.2e9 - 7.85e9 - (FIXED + 392.5e6)
    assert x4.fits
    assert x4.full_length_sequences == 32  # // (31,104 x 32,768 = 1,019,215,872)
    assert x4.max_model_len_that_fits == 1_072_109
    assert any("replicated on every tensor-parallel rank" in a for a in x4.assumptions)
    assert any("all 64 experts resident" in a for a in x4.assumptions)


def test_sliding_window_gemma3_4b():
    # Layers 6, 12, 18, 24, 30 (of 34) are global: 5 full, 29 with a 1,024-token window.
    layout = attention_layout(GEMMA3_4B)
    assert (layout.full_layers, layout.window_layers, layout.window) == (5, 29, 1024)
    l4 = fit(GEMMA3_4B, GEMMA3_4B_BYTES, G6_XLARGE)
    # Per layer and token: 2 x 4 x 256 x 2 = 4,096 bytes. Full-attention equivalent: x 34 = 139,264.
    assert l4.kv_bytes_per_token == 139_264
    # One 32,768-token sequence: 4,096 x (5 x 32,768 + 29 x 1,024) = 792,723,456 (not 34 x 32,768 x 4,096).
    assert l4.kv_bytes_per_sequence_per_gpu == 792_723_456
    assert l4.kv_budget_bytes_per_gpu == 10_959_387_264  # 21.6e9 - 8.6e9 - (FIXED + 430e6)
    assert l4.fits
    assert l4.full_length_sequences == 13
    # Past the window only the 5 full layers grow: (budget - 29 x 4,096 x 1,024) // (5 x 4,096).
    assert l4.max_model_len_that_fits == 529_187
    assert l4.context_limit == 131_072
    assert l4.warnings == []  # rope scaling is configured, and 32,768 is within the limit anyway

    x4 = fit(GEMMA3_4B, GEMMA3_4B_BYTES, G6E_12XLARGE)
    assert x4.kv_bytes_per_token_per_gpu == 34_816  # 1 KV head per GPU: 34 x 1,024
    assert x4.kv_bytes_per_sequence_per_gpu == 198_180_864  # 1,024 x 193,536
    assert x4.fits
    assert x4.full_length_sequences == 198


def test_sliding_window_from_layer_types_gpt_oss_20b():
    layout = attention_layout(GPT_OSS_20B)
    assert (layout.full_layers, layout.window_layers, layout.window) == (12, 12, 128)
    l4 = fit(GPT_OSS_20B, GPT_OSS_20B_BYTES, G6_XLARGE)
    # Per layer and token: 2 x 8 x 64 x 2 = 2,048; full-attention equivalent x 24 = 49,152.
    assert l4.kv_bytes_per_token == 49_152
    # 2,048 x (12 x 32,768 + 12 x 128) = 808,452,096.
    assert l4.kv_bytes_per_sequence_per_gpu == 808_452_096
    # MXFP4 weights: activations 0.05 x 13.8e9 x 16/4 = 2.76e9; budget = 21.6e9 - 13.8e9 - 4,370,612,736.
    assert l4.kv_budget_bytes_per_gpu == 3_429_387_264
    assert l4.fits
    assert l4.full_length_sequences == 4
    assert l4.max_model_len_that_fits == 139_414

    x4 = fit(GPT_OSS_20B, GPT_OSS_20B_BYTES, G6E_12XLARGE)
    assert x4.kv_bytes_per_token_per_gpu == 12_288  # 2 KV heads per GPU
    assert x4.fits
    assert x4.full_length_sequences == 185


def test_inside_the_window_every_layer_counts():
    # At 512 tokens (< 1,024) the window has not started to save anything: 139,264 x 512.
    assert fit(GEMMA3_4B, GEMMA3_4B_BYTES, G6_XLARGE, max_model_len=512).kv_bytes_per_sequence_per_gpu == 71_303_168
    tiny = fit(GEMMA3_4B, GEMMA3_4B_BYTES, G6_XLARGE, usable_gpu_memory_bytes=12_000_000_000)
    # budget = 10.8e9 - 8.6e9 - 2,040,612,736 = 159,387,264; 159,387,264 // 139,264 = 1,144 is past the
    # window, so: (159,387,264 - 29 x 4,096 x 1,024) // (5 x 4,096) = 37,752,448 // 20,480 = 1,843.
    assert tiny.kv_budget_bytes_per_gpu == 159_387_264
    assert tiny.max_model_len_that_fits == 1_843
    smaller = fit(GEMMA3_4B, GEMMA3_4B_BYTES, G6_XLARGE, usable_gpu_memory_bytes=11_900_000_000)
    # budget = 10.71e9 - 10,640,612,736 = 69,387,264 -> 69,387,264 // 139,264 = 498 (inside the window).
    assert smaller.max_model_len_that_fits == 498


def test_sliding_window_without_a_layer_map_is_counted_in_full():
    layout = attention_layout(MISTRAL_7B_V01)
    assert (layout.full_layers, layout.window_layers) == (32, 0)
    assert any("over-estimate" in note for note in layout.notes)
    # 2 x 32 x 8 x 128 x 2 = 131,072 per token at every length.
    assert fit(MISTRAL_7B_V01, 14_480_000_000, G6_XLARGE).kv_bytes_per_sequence_per_gpu == 131_072 * 32_768


def test_hybrid_linear_attention_counts_attention_layers_only_qwen3_next():
    # Every 4th of 48 layers is attention: 12 layers x 2 x 2 KV heads x 256 x 2 = 24,576 per token.
    layout = attention_layout(QWEN3_NEXT_80B)
    assert (layout.num_layers, layout.full_layers, layout.window_layers) == (48, 12, 0)
    same_as_list = {**QWEN3_NEXT_80B, "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 12}
    fit_interval = fit(QWEN3_NEXT_80B, 162_000_000_000, G6E_12XLARGE)
    fit_list = fit(same_as_list, 162_000_000_000, G6E_12XLARGE)
    assert fit_interval.kv_bytes_per_token == fit_list.kv_bytes_per_token == 24_576
    assert any("fixed-size state" in a for a in fit_list.assumptions)
    # 162e9 / 4 = 40.5e9 of weights + (FIXED + 2.025e9) exceed 43.2e9 by 935,612,736.
    assert fit_interval.kv_budget_bytes_per_gpu == -935_612_736
    assert not fit_interval.fits


def test_unknown_layer_types_count_as_full_attention():
    config = {**QWEN3_8B, "layer_types": ["full_attention"] * 30 + ["mystery_attention"] * 6}
    result = fit(config, QWEN3_8B_BYTES, G6E_12XLARGE)
    assert result.kv_bytes_per_token == 147_456
    assert any("unknown type (mystery_attention)" in a for a in result.assumptions)


def test_tp_split_replicates_kv_heads_when_tp_exceeds_them():
    eight_gpus = {"gpu_count": 8, "gpu_memory_gib": 48}
    sixteen_gpus = {"gpu_count": 16, "gpu_memory_gib": 48}
    # Qwen3-30B-A3B: 4 KV heads. TP 8 -> ceil(4/8) = 1 head per GPU, as at TP 4.
    tp8 = fit(QWEN3_30B_A3B, QWEN3_30B_A3B_BYTES, eight_gpus)
    assert tp8.attention.kv_heads_per_rank(8) == 1
    assert tp8.kv_bytes_per_token_per_gpu == 24_576
    assert tp8.kv_bytes_per_token == 98_304
    assert any("replicated" in a for a in tp8.assumptions)
    # Qwen3-8B: 8 KV heads. TP 2 -> 4 per GPU; TP 8 -> 1; TP 16 -> still 1.
    per_gpu = {
        tp: fit(QWEN3_8B, QWEN3_8B_BYTES, sixteen_gpus, tensor_parallel_size=tp).kv_bytes_per_token_per_gpu
        for tp in (1, 2, 8, 16)
    }
    assert per_gpu == {1: 147_456, 2: 73_728, 8: 18_432, 16: 18_432}
    # Weights divide by TP (ceil): 16.4e9 / 16.
    assert fit(QWEN3_8B, QWEN3_8B_BYTES, sixteen_gpus).weights_bytes_per_gpu == 1_025_000_000


def test_fewer_tp_ranks_than_gpus_warns():
    result = fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE, tensor_parallel_size=2)
    assert result.fits
    assert result.weights_bytes_per_gpu == 8_200_000_000
    assert result.warnings == ["tensor_parallel_size=2 uses 2 of the instance's 4 GPUs; the rest stay idle"]


@pytest.mark.parametrize(
    ("config", "tp", "expected"),
    [
        (QWEN3_8B, 1, None),
        (QWEN3_8B, 4, None),
        (QWEN3_8B, 16, None),  # 16 is a multiple of the 8 KV heads: replicated
        (QWEN3_8B, 3, "does not divide num_attention_heads=32"),
        (QWEN25_7B_AWQ, 4, None),
        (QWEN25_7B_AWQ, 8, "does not divide num_attention_heads=28"),
        (QWEN25_7B_AWQ, 7, "neither divides num_key_value_heads=4 nor is a multiple of it"),
        (DEEPSEEK_V2_LITE, 8, None),
        (DEEPSEEK_V2_LITE, 3, "does not divide num_attention_heads=16"),
        (MISTRAL_SMALL_31, 4, None),  # text_config's 32 heads, not the vision tower's 16
        (QWEN3_8B, 0, "must be at least 1"),
    ],
)
def test_tp_divides_heads(config, tp, expected):
    problem = tp_divides_heads(config, tp)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem


def test_tp_problem_names_the_sizes_that_work_and_fails_the_fit():
    problem = tp_divides_heads(QWEN25_7B_AWQ, 8)
    assert problem is not None
    assert "tensor_parallel_size=8" in problem and "Allowed: 1, 2, 4;" in problem
    result = fit(QWEN25_7B_AWQ, QWEN25_7B_AWQ_BYTES, {"gpu_count": 8, "gpu_memory_gib": 24})
    assert not result.fits
    assert result.problems == [problem]  # memory alone would fit


@pytest.mark.parametrize(
    "config",
    [QWEN3_8B, LLAMA2_7B, QWEN3_30B_A3B, QWEN25_7B_AWQ, MISTRAL_SMALL_31, DEEPSEEK_V2_LITE, GEMMA3_4B, GPT_OSS_20B],
)
def test_fp8_kv_cache_halves_the_kv_and_float32_doubles_it(config):
    auto = fit(config, 1_000_000_000, G6E_12XLARGE)
    for dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        half = fit(config, 1_000_000_000, G6E_12XLARGE, kv_cache_dtype=dtype)
        assert half.kv_bytes_per_element == 1
        assert 2 * half.kv_bytes_per_token == auto.kv_bytes_per_token
        assert 2 * half.kv_bytes_per_sequence_per_gpu == auto.kv_bytes_per_sequence_per_gpu
        assert half.full_length_sequences >= 2 * auto.full_length_sequences
    double = fit(config, 1_000_000_000, G6E_12XLARGE, kv_cache_dtype="float32")
    assert double.kv_bytes_per_token == 2 * auto.kv_bytes_per_token


def test_concurrency_shortfall_says_how_many_fit():
    # Qwen3-8B on 4 x L40S fits 30 sequences of 32,768 tokens; ask for 64.
    result = fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE, max_num_seqs=64)
    assert result.kv_bytes_needed_per_gpu == 64 * 1_207_959_552
    assert not result.fits
    (problem,) = result.problems
    assert "enough for 30" in problem
    assert "max_num_seqs to at most 30" in problem
    # 37,284,387,264 // 64 = 582,568,551 per sequence -> // 36,864 = 15,803 tokens.
    assert "max_model_len to at most 15,803 for 64 sequences" in problem
    assert "61 full-length sequences fit" in problem  # with an fp8 KV cache
    assert fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE, max_num_seqs=30).fits


def test_float32_config_is_served_in_16_bit():
    result = fit({**LLAMA2_7B, "torch_dtype": "float32"}, LLAMA2_7B_BYTES, G6E_12XLARGE, max_model_len=4096)
    assert result.kv_bytes_per_element == 2
    assert result.kv_bytes_per_token == 524_288
    assert any("float32" in a for a in result.assumptions)


def test_max_model_len_beyond_the_models_positions_is_refused_with_the_limit_and_what_fits():
    result = fit(LLAMA2_7B, LLAMA2_7B_BYTES, G6E_12XLARGE, max_model_len=8192)
    assert not result.fits
    (refusal,) = result.problems
    assert refusal.startswith("max_model_len=8192: above the longest context the engine accepts for this model, 4,096")
    assert "The largest context that fits here: 4,096" in refusal
    assert result.warnings == []


def test_quantization_flavours_scale_the_activation_allowance():
    weights = 8_000_000_000
    base = fit(QWEN3_8B, weights, G6E_12XLARGE).overhead_bytes_per_gpu - FIXED
    assert base == 100_000_000  # 0.05 x 2e9 per GPU
    cases = {
        "compressed-tensors w4a16": {
            "quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}, "targets": ["Linear"]}},
            "kv_cache_scheme": {"num_bits": 8, "type": "float"},
        },
        "gptq 8-bit": {"quant_method": "gptq", "bits": 8},
        "bitsandbytes 4-bit": {"quant_method": "bitsandbytes", "load_in_4bit": True},
        "unknown": {"quant_method": "something-new"},
    }
    scale = {name: fit({**QWEN3_8B, "quantization_config": q}, weights, G6E_12XLARGE) for name, q in cases.items()}
    assert scale["compressed-tensors w4a16"].overhead_bytes_per_gpu - FIXED == 4 * base
    assert scale["gptq 8-bit"].overhead_bytes_per_gpu - FIXED == 2 * base
    assert scale["bitsandbytes 4-bit"].overhead_bytes_per_gpu - FIXED == 4 * base
    assert scale["unknown"].overhead_bytes_per_gpu - FIXED == base
    assert any("KV-cache scales" in a for a in scale["compressed-tensors w4a16"].assumptions)


def test_overhead_is_configurable():
    lean = fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE, overhead=Overhead(fixed_bytes_per_gpu=GIB, activation_fraction=0))
    assert lean.overhead_bytes_per_gpu == GIB
    assert lean.kv_budget_bytes_per_gpu == 21_600_000_000 - 16_400_000_000 - GIB


def test_all_windowed_layers_leave_the_context_to_the_model_limit():
    all_sliding = {**MISTRAL_7B_V01, "layer_types": ["sliding_attention"] * 32}
    result = fit(all_sliding, 14_480_000_000, G6E_12XLARGE)
    assert result.kv_bytes_per_sequence_per_gpu == 32 * 2 * 2 * 128 * 2 * 4096  # every layer capped at 4,096
    assert result.max_model_len_that_fits == 32_768  # max_position_embeddings


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tensor_parallel_size": 2, "gpu_count": 1}, "tensor_parallel_size=2 must be between 1 and gpu_count=1"),
        ({"kv_cache_dtype": "int4"}, "kv_cache_dtype='int4' is not one of auto, fp8"),
        ({"gpu_memory_utilization": 1.5}, r"gpu_memory_utilization=1.5 must be in \(0, 1\]"),
        ({"max_model_len": 0}, "max_model_len=0 must be at least 1"),
        ({"max_num_seqs": 0}, "max_num_seqs=0 must be at least 1"),
        ({"weight_bytes": -1}, "weight_bytes=-1 must not be negative"),
        ({"usable_gpu_memory_bytes": 0}, "usable_gpu_memory_bytes=0 must be positive"),
    ],
)
def test_impossible_inputs_raise(kwargs, message):
    args = {"weight_bytes": 1, "gpu_count": 1, "gpu_memory_gib": 24, "max_model_len": 1024, **kwargs}
    with pytest.raises(ValueError, match=message):
        estimate_memory_fit(QWEN3_8B, **args)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"num_attention_heads": 32, "hidden_size": 4096}, "no num_hidden_layers"),
        ({"num_hidden_layers": 2, "num_attention_heads": 32}, "no hidden_size"),
        ({"num_hidden_layers": 2, "num_attention_heads": 3, "hidden_size": 4096}, "not a multiple"),
        ({"num_hidden_layers": "2", "num_attention_heads": 2, "hidden_size": 8}, "must be a positive integer"),
        ({**QWEN3_8B, "layer_types": ["mamba"] * 36}, "no attention layers"),
        ({**DEEPSEEK_V2_LITE, "qk_rope_head_dim": None}, "no qk_rope_head_dim"),
    ],
)
def test_configs_that_cannot_be_sized_raise(config, message):
    with pytest.raises(ValueError, match=message):
        attention_layout(config)


def test_layout_is_a_plain_value():
    layout = attention_layout(QWEN3_8B)
    assert isinstance(layout, AttentionLayout)
    assert layout.elements_per_token_per_layer(4) == 2 * 2 * 128
    assert layout.sequence_elements(10, 1) == 36 * 2 * 8 * 128 * 10


def test_format_table_shows_the_numbers_and_the_verdict():
    table = format_table(fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE), title="ml.g6.xlarge")
    assert table.startswith("ml.g6.xlarge: 1 GPU(s), tensor parallel 1; figures per GPU")
    for expected in (
        "22.35 GiB",  # usable
        "20.12 GiB",  # x 0.90
        "15.27 GiB",  # 16.4e9 of weights
        "2.26 GiB",  # overhead
        "2.58 GiB",  # KV budget
        "144.0 KiB",  # per token
        "4.50 GiB",  # one 32,768-token sequence
        "18,781 tokens",
        "40,960 tokens",  # model limit
        "DOES NOT FIT",
        "problems:",
        "assumptions:",
    ):
        assert expected in table
    fits = format_table(fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE))
    assert "FITS" in fits and "DOES NOT FIT" not in fits and "problems:" not in fits


@pytest.mark.parametrize(
    ("rope", "refused"),
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, False),  # 4,096 x 4
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, False),  # transformers v5's name
        ({"rope_scaling": None, "rope_parameters": {"rope_type": "llama3", "factor": 8.0}}, True),  # never extends
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, False),  # the older key inside it: 8,192
        ({"rope_scaling": {"type": "dynamic", "factor": 1.5}}, True),  # 6,144 < 8,192
        ({"rope_scaling": {"rope_type": "longrope", "factor": 4.0}}, True),
        ({"rope_scaling": {"rope_type": "default"}}, True),  # present, but no scaling
        ({"rope_parameters": {"rope_theta": 10000.0}}, True),  # no type given: default
        ({"rope_scaling": "yarn"}, True),  # not a mapping: not read as scaling
    ],
)
def test_rope_scaling_extends_the_limit_only_as_vllm_does(rope, refused):
    result = fit({**LLAMA2_7B, **rope}, LLAMA2_7B_BYTES, G6E_12XLARGE, max_model_len=8192)
    beyond = [p for p in result.problems if "above the longest context the engine accepts" in p]
    assert bool(beyond) is refused


def test_largest_context_for_several_sequences_splits_the_budget_and_keeps_to_the_model_limit():
    from preflight.memory_fit import largest_context_for

    l4 = fit(QWEN3_8B, QWEN3_8B_BYTES, G6_XLARGE)  # budget 2,769,387,264; 147,456 bytes per token
    assert largest_context_for(l4, 1) == l4.max_model_len_that_fits == 18_781
    # What the plan prints ("max_model_len up to 9,390"): whole tokens, the budget split in two.
    assert f"{largest_context_for(l4, 2):,}" == "9,390"
    # One L40S has room for 165,265 tokens, 41,316 for each of 4; the model stops at 40,960.
    l40s = fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE, tensor_parallel_size=1, max_num_seqs=4)
    assert l40s.max_model_len_that_fits == 165_265
    assert largest_context_for(l40s, 4) == 40_960
    # Every layer windowed at 4,096: 64 sequences of 18,020 tokens would fill the budget if the window did
    # not bound them, but it does, so the model's own limit is the answer.
    all_sliding = {**MISTRAL_7B_V01, "layer_types": ["sliding_attention"] * 32}
    assert largest_context_for(fit(all_sliding, 14_480_000_000, G6E_12XLARGE), 64) == 32_768


def test_format_table_rows_and_sections_as_the_plan_prints_them():
    result = fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE, max_model_len=65536, tensor_parallel_size=1, max_num_seqs=4)
    lines = format_table(result).split("\n")
    assert lines[:14] == [
        "memory fit: 4 GPU(s), tensor parallel 1; figures per GPU",
        "  usable GPU memory                       44.70 GiB",
        "  engine budget (x 0.90)                  40.23 GiB",
        "  - weights (16.40 GB / TP 1)             15.27 GiB",
        "  - runtime overhead                       2.26 GiB",
        "  = KV-cache budget                       22.70 GiB",
        "  KV cache per token (bfloat16)        144.0 KiB (whole model 144.0 KiB)",
        "  KV cache, one 65,536-token sequence      9.00 GiB",
        "  KV cache needed (max_num_seqs 4)        36.00 GiB",
        "  largest context for one sequence     165,265 tokens",
        "  longest context the engine accepts   40,960 tokens",
        "  65,536-token sequences at once                  2",
        "  verdict                              DOES NOT FIT",
        "problems:",
    ]
    # One problem: 65,536 is past the 40,960 positions. Four 65,536-token sequences would not fit, but the engine
    # refuses that context whatever the memory, and four of 40,960 do fit: no memory advice. One warning (idle GPUs).
    assert len(result.problems) == 1 and result.problems == [result.context_refusal]
    assert len(result.warnings) == 1
    assert lines[14:] == [
        *(f"  - {p}" for p in result.problems),
        "warnings:",
        *(f"  - {w}" for w in result.warnings),
        "assumptions:",
        *(f"  - {a}" for a in result.assumptions),
    ]
    fits = format_table(fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE)).split("\n")
    assert "  verdict                                      FITS" in fits and "problems:" not in fits


def test_attention_kind_is_named_by_its_kv_heads():
    # tiiuae/falcon-7b: multi_query, 71 heads of 64; one KV head for all.
    falcon = {"multi_query": True, "n_layer": 32, "n_head": 71, "hidden_size": 4544, "torch_dtype": "bfloat16"}
    result = fit(falcon, 14_400_000_000, G6E_12XLARGE, max_model_len=2048, tensor_parallel_size=1)
    assert "MQA: 1 KV heads x head_dim 64 over 32 attention layers; 1 per GPU at TP 1" in result.assumptions
    two = attention_layout({**QWEN3_8B, "num_key_value_heads": 2})
    assert (two.kind, two.kv_heads) == ("gqa", 2)


def _quant_note(quant):
    """The report's line on a quantized checkpoint (None when it says none)."""
    notes = [a for a in fit({**LLAMA2_7B, "quantization_config": quant}, 4 * GIB, G6_XLARGE).assumptions]
    return next((a for a in notes if a.startswith("quantized checkpoint: ")), None)


@pytest.mark.parametrize(
    ("quant", "said"),
    [
        ({}, "unknown (bits unknown"),
        ({"quant_method": "gptq", "w_bit": 4}, "gptq, 4-bit weights"),  # AutoAWQ's name
        ({"quant_method": "gptq", "weight_bits": 3}, "gptq, 3-bit weights"),
        ({"quant_method": "fbgemm_fp8"}, "fbgemm_fp8, 8-bit weights"),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "bitsandbytes, 8-bit weights"),
        ({"quant_method": "bitsandbytes"}, "bitsandbytes (bits unknown"),
        ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {}}}}, "compressed-tensors (bits"),
        ({"quant_method": "compressed-tensors", "config_groups": {"g": "x"}}, "compressed-tensors (bits unknown"),
        ({"quant_method": "modelopt", "quant_algo": "fp4"}, "modelopt, 4-bit weights"),
        ({"quant_method": "modelopt", "quant_algo": "W4A16_AWQ_INT4"}, "modelopt, 4-bit weights"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "modelopt, 8-bit weights"),
        ({"quant_method": "modelopt", "quant_algo": "W8A8_SQ_INT8"}, "modelopt, 8-bit weights"),
        ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}, "modelopt (bits unknown"),
        ({"quant_method": "modelopt"}, "modelopt (bits unknown"),
        ({"quant_method": "gptq", "bits": 1}, "gptq, 1-bit weights"),
        ({"quant_method": "gptq", "bits": 16}, "gptq, 16-bit weights"),
        ({"quant_method": "gptq", "bits": 17}, "gptq (bits unknown"),
        ({"quant_method": "gptq", "bits": True}, "gptq (bits unknown"),
    ],
)
def test_the_quantized_checkpoint_line_names_the_bits_each_method_states(quant, said):
    assert _quant_note(quant).startswith(f"quantized checkpoint: {said}")


def test_the_context_limit_comes_from_each_name_config_json_gives_it():
    for key in ("n_positions", "max_sequence_length", "seq_length"):
        config = {k: v for k, v in LLAMA2_7B.items() if k != "max_position_embeddings"}
        assert fit({**config, key: 2048}, LLAMA2_7B_BYTES, G6_XLARGE, max_model_len=1024).context_limit == 2048


def test_only_windowed_layers_and_no_stated_limit_fit_any_context_the_memory_allows():
    # Every layer slides over 128 tokens and config.json states no maximum: the cache stops growing at the window,
    # so the longest context that fits is reported as the token count the memory would hold, never None.
    config = {k: v for k, v in GPT_OSS_20B.items() if k != "max_position_embeddings"}
    config["layer_types"] = ["sliding_attention"] * 24
    result = fit(config, GPT_OSS_20B_BYTES, G6_XLARGE, max_model_len=4096)
    assert result.context_limit is None and isinstance(result.max_model_len_that_fits, int)
    assert result.max_model_len_that_fits > 128


@pytest.mark.parametrize(
    ("dtype", "cached", "note"),
    [
        ({"torch_dtype": "torch.bfloat16"}, "bfloat16", None),  # some exporters write torch's repr
        ({"dtype": "float16"}, "float16", None),  # transformers >= 4.56 writes dtype
        ({}, "16-bit", "config.json dtype unset: engines serve it, and cache KV, in 16-bit"),
    ],
)
def test_the_kv_cache_dtype_follows_the_checkpoints_16_bit_dtype_however_config_json_names_it(dtype, cached, note):
    config = {k: v for k, v in LLAMA2_7B.items() if k not in ("torch_dtype", "dtype")}
    result = fit({**config, **dtype}, LLAMA2_7B_BYTES, G6_XLARGE, max_model_len=4096)
    assert result.kv_cache_dtype == cached and result.kv_bytes_per_element == 2
    assert [a for a in result.assumptions if a.startswith("config.json dtype")] == ([note] if note else [])


def test_a_budget_that_reaches_the_window_exactly_counts_the_tokens_past_it():
    from preflight.memory_fit import _largest_context

    # One full and one 128-token windowed layer, 2 bytes per token each: 515 bytes hold 128 tokens in both
    # (512 bytes); past the window only the full layer grows, so 129 tokens need 258 + 256 = 514 bytes: they fit.
    layout = AttentionLayout("gqa", 2, 1, 1, 128, 8, 1, 1)
    assert _largest_context(layout, 1, 1, 515, None) == 129
    assert _largest_context(layout, 1, 1, 513, None) == 128


def test_the_refusals_say_what_is_needed_in_full():
    # 60 GB of weights on one 24 GB L4: the bigger GPU is sized for 90 % use (needed / utilization).
    (weights,) = fit(QWEN3_8B, 60 * 10**9, G6_XLARGE).problems
    assert weights == (
        "weights do not fit: 55.88 GiB of weights plus 4.29 GiB runtime overhead per GPU exceed the 20.12 GiB the "
        "engine may use (90% of usable memory) by 40.06 GiB, before any KV cache. Use GPUs of at least 78 GB each "
        "at TP 1, or more GPUs (a larger tensor_parallel_size); or a quantized checkpoint (4-bit AWQ/GPTQ weights "
        "are about a quarter of 16-bit, FP8 half)."
    )
    (concurrency,) = fit(QWEN3_8B, QWEN3_8B_BYTES, G6E_12XLARGE, max_num_seqs=64).problems
    assert concurrency == (
        "concurrency does not fit: max_num_seqs=64 sequences of 32,768 tokens need 72.00 GiB of KV cache per GPU; "
        "34.72 GiB is left, enough for 30. Set max_num_seqs to at most 30, or max_model_len to at most 15,803 for "
        "64 sequences; or an fp8 KV cache (kv-cache-dtype fp8: engine_env SM_<ENGINE>_KV_CACHE_DTYPE, or plan "
        "--kv-cache-dtype; halves the KV cache: 61 full-length sequences fit); or more GPUs (a larger "
        "tensor_parallel_size)."
    )


def test_a_longer_profiling_pass_costs_activation_memory_per_token():
    # vLLM profiles max_num_batched_tokens tokens (max_model_len without chunked prefill): beyond the 2048 the
    # overhead fraction was calibrated at, each token adds 2 x (hidden + intermediate / TP) 16-bit elements.
    from preflight.memory_fit import PROFILED_TOKENS

    config = {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "torch_dtype": "bfloat16",
    }
    args = dict(weight_bytes=16_000_000_000, gpu_count=1, gpu_memory_gib=24, max_model_len=8192)
    base = estimate_memory_fit(config, **args)
    assert estimate_memory_fit(config, **args, max_num_batched_tokens=PROFILED_TOKENS) == base
    assert estimate_memory_fit(config, **args, max_num_batched_tokens=512).overhead_bytes_per_gpu == (
        base.overhead_bytes_per_gpu
    )
    long = estimate_memory_fit(config, **args, max_num_batched_tokens=PROFILED_TOKENS + 1000)
    assert long.overhead_bytes_per_gpu - base.overhead_bytes_per_gpu == 1000 * 2 * (4096 + 14336) * 2
    assert any("max_num_batched_tokens 3,048" in a for a in long.assumptions)
    tp2 = estimate_memory_fit(config, **{**args, "gpu_count": 2}, max_num_batched_tokens=PROFILED_TOKENS + 1000)
    base2 = estimate_memory_fit(config, **{**args, "gpu_count": 2})
    assert tp2.overhead_bytes_per_gpu - base2.overhead_bytes_per_gpu == 1000 * 2 * (4096 + 14336 // 2) * 2
