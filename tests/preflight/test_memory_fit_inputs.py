"""preflight.memory_fit's inputs: every name config.json gives a size under, the bounds of the estimate's own
arguments, and the report lines that repeat them, each stated whole.

Model families name the same sizes differently (GPT-2 ``n_layer``/``n_head``/``n_embd``, Falcon ``num_kv_heads``,
MPT ``n_layers``/``n_heads``/``d_model``, OLMo ``n_kv_heads``); a name the reader drops makes preflight refuse a
model it could size, so each alias is read here on its own.
"""

from __future__ import annotations

import pytest

from preflight import GIB, attention_layout, estimate_memory_fit, text_config
from tests.preflight.test_memory_fit import DEEPSEEK_V2_LITE, G6_XLARGE, LLAMA2_7B, LLAMA2_7B_BYTES, fit

# 4 layers, 8 heads of 1024 / 8 = 128, 2 KV heads.
BASE = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 1024}
SIZES = (4, 8, 2, 128)


def sizes(config):
    layout = attention_layout(config)
    return layout.num_layers, layout.num_attention_heads, layout.kv_heads, layout.head_dim


def renamed(old, new):
    return {new if k == old else k: v for k, v in BASE.items()}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("num_hidden_layers", "n_layer"),
        ("num_hidden_layers", "num_layers"),
        ("num_hidden_layers", "n_layers"),
        ("num_attention_heads", "n_head"),
        ("num_attention_heads", "num_heads"),
        ("num_attention_heads", "n_heads"),
        ("num_key_value_heads", "num_kv_heads"),
        ("num_key_value_heads", "n_kv_heads"),
        ("hidden_size", "n_embd"),
        ("hidden_size", "d_model"),
    ],
)
def test_every_name_for_a_size_is_read(old, new):
    assert sizes(renamed(old, new)) == SIZES


@pytest.mark.parametrize(
    ("missing", "names"),
    [
        ("num_hidden_layers", "num_hidden_layers / n_layer / num_layers / n_layers"),
        ("num_attention_heads", "num_attention_heads / n_head / num_heads / n_heads"),
        ("hidden_size", "hidden_size / n_embd / d_model"),
    ],
)
def test_a_missing_size_names_every_key_looked_for(missing, names):
    config = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ValueError) as raised:
        attention_layout(config)
    assert str(raised.value) == f"config.json has no {names}: cannot size the KV cache"


def test_sizes_must_be_positive_whole_numbers_and_one_is():
    assert sizes({**BASE, "num_hidden_layers": 1, "num_key_value_heads": 1}) == (1, 8, 1, 128)
    for bad in (0, -1, "4", 4.0, True):
        with pytest.raises(ValueError) as raised:
            attention_layout({**BASE, "num_hidden_layers": bad})
        assert str(raised.value) == f"config.json num_hidden_layers={bad!r} must be a positive integer"


def test_kinds_of_attention_by_kv_heads():
    assert attention_layout({**BASE, "num_key_value_heads": 1}).kind == "mqa"
    assert attention_layout({**BASE, "num_key_value_heads": 8}).kind == "mha"
    assert attention_layout(BASE).kind == "gqa"
    assert attention_layout({k: v for k, v in BASE.items() if k != "num_key_value_heads"}).kind == "mha"


def test_falcon_multi_query_means_one_kv_head_unless_kv_heads_are_given():
    plain = {k: v for k, v in BASE.items() if k != "num_key_value_heads"}
    assert sizes({**plain, "multi_query": True}) == (4, 8, 1, 128)
    # Falcon-40B: multi_query true and num_kv_heads 8 (new_decoder_architecture): the stated count wins.
    assert sizes({**plain, "multi_query": True, "num_kv_heads": 4}) == (4, 8, 4, 128)
    assert sizes({**plain, "multi_query": True, "num_key_value_heads": 2}) == (4, 8, 2, 128)
    assert sizes({**plain, "multi_query": "true"}) == (4, 8, 8, 128)  # only the JSON true


def test_latent_attention_caches_one_vector_and_says_so():
    layout = attention_layout(DEEPSEEK_V2_LITE)
    rank, rope = DEEPSEEK_V2_LITE["kv_lora_rank"], DEEPSEEK_V2_LITE["qk_rope_head_dim"]
    assert (layout.kind, layout.kv_heads, layout.head_dim) == ("mla", 0, rank + rope)
    assert layout.notes[0] == (
        f"latent attention (MLA): {rank} + {rope} = {rank + rope} cached elements per layer and token, no separate "
        "K and V; replicated on every tensor-parallel rank (vLLM), so not divided by TP"
    )


def test_a_model_without_attention_layers_is_refused_by_name():
    with pytest.raises(ValueError) as raised:
        attention_layout({**BASE, "layer_types": ["mamba"] * 4})
    assert str(raised.value) == (
        "config.json describes no attention layers: this estimate covers attention KV caches only"
    )


def test_per_token_and_per_sequence_figures_default_to_one_rank():
    layout = attention_layout(BASE)
    assert layout.elements_per_token_per_layer() == layout.elements_per_token_per_layer(1) == 2 * 2 * 128
    assert layout.elements_per_token_per_layer(2) == 2 * 1 * 128
    assert layout.sequence_elements(10) == layout.sequence_elements(10, 1) == 512 * 4 * 10


def test_a_nested_text_config_keeps_the_top_level_quantization_but_no_other_sub_config():
    config = {
        "architectures": ["X"],
        "quantization_config": {"quant_method": "fp8"},
        "vision_config": {"hidden_size": 7},
        "text_config": {**BASE},
    }
    assert text_config(config) == {"architectures": ["X"], "quantization_config": {"quant_method": "fp8"}, **BASE}


def report(**kwargs):
    return fit(LLAMA2_7B, LLAMA2_7B_BYTES, G6_XLARGE, max_model_len=4096, **kwargs)


def test_the_memory_lines_say_where_the_figure_came_from():
    nominal, measured = report().assumptions, report(usable_gpu_memory_bytes=23 * GIB).assumptions
    assert nominal[0] == "usable GPU memory: 24 GB nominal = 22.35 GiB per GPU"
    assert measured[0] == "usable GPU memory: 23.00 GiB per GPU, as given"
    assert nominal[1:3] == [
        "engine budget: gpu_memory_utilization 0.90 of it = 20.12 GiB per GPU",
        "weights: 13.48 GB on disk, split evenly over 1 tensor-parallel rank(s)",
    ]
    assert nominal[3] == (
        "overhead: 1.50 GiB fixed per GPU + 5.0% of the 16-bit-equivalent weights per GPU (activation peak, CUDA "
        "graphs, non-torch memory; calibrated against published vLLM start-up logs)"
    )


def test_the_quantized_line_gives_the_activation_scale():
    awq = fit({**LLAMA2_7B, "quantization_config": {"quant_method": "awq", "bits": 4}}, 4 * GIB, G6_XLARGE, 4096)
    assert (
        "quantized checkpoint: awq, 4-bit weights; weight bytes taken as stored; activations run in 16-bit, so that "
        "share counts the weights x4" in awq.assumptions
    )
    unknown = fit({**LLAMA2_7B, "quantization_config": {"quant_method": "hqq"}}, 4 * GIB, G6_XLARGE, 4096)
    assert (
        "quantized checkpoint: hqq (bits unknown: activation allowance not scaled); weight bytes taken as stored"
        in unknown.assumptions
    )


SCALES = "the checkpoint carries KV-cache scales: kv_cache_dtype=fp8 would use them"


@pytest.mark.parametrize(
    ("quant", "kv_cache_dtype", "said"),
    [
        ({"kv_cache_scheme": {"num_bits": 8}}, "auto", True),  # compressed-tensors
        ({"kv_cache_quant_algo": "FP8"}, "auto", True),  # ModelOpt
        ({"kv_cache_quant_algo": "FP8"}, "fp8", False),  # already asked for
        ({}, "auto", False),
    ],
)
def test_kv_cache_scales_in_the_checkpoint_are_pointed_out_once(quant, kv_cache_dtype, said):
    config = {**LLAMA2_7B, "quantization_config": {"quant_method": "fp8", **quant}}
    result = fit(config, 7 * 10**9, G6_XLARGE, max_model_len=4096, kv_cache_dtype=kv_cache_dtype)
    assert (SCALES in result.assumptions) is said


def test_the_context_refusal_starts_past_the_models_limit():
    at_limit = fit(LLAMA2_7B, LLAMA2_7B_BYTES, G6_XLARGE, max_model_len=4096)
    assert at_limit.warnings == [] and at_limit.fits
    (past,) = fit(LLAMA2_7B, LLAMA2_7B_BYTES, G6_XLARGE, max_model_len=4097).problems
    assert past == (
        "max_model_len=4097: above the longest context the engine accepts for this model, 4,096 tokens "
        "(max_position_embeddings=4,096; vLLM's _get_and_verify_max_len refuses to start beyond it, whatever the "
        "memory). The largest context that fits here: 4,096; set max_model_len to at most that; to run past it "
        "anyway, vLLM starts with container_env VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (it then warns that positions beyond "
        "the limit give NaN with RoPE), and a context extended with rope scaling in the engine's hf-overrides flag "
        'needs preflight_skip ["context"] (skip_checks "context")'
    )


def estimate(**kwargs):
    args = {"weight_bytes": 10**9, "gpu_count": 1, "gpu_memory_gib": 24, "max_model_len": 1024, **kwargs}
    return estimate_memory_fit(LLAMA2_7B, **args)


@pytest.mark.parametrize(
    "edge",
    [
        {"weight_bytes": 0},
        {"gpu_memory_gib": 0.5},
        {"gpu_memory_gib": 0, "usable_gpu_memory_bytes": 24 * 10**9},  # a measured figure replaces the nominal one
        {"usable_gpu_memory_bytes": 24 * 10**9},
        {"usable_gpu_memory_bytes": 1},  # nothing fits in one byte, but that is the verdict, not an error
        {"max_model_len": 1},
        {"max_num_seqs": 1},
        {"gpu_memory_utilization": 1},
        {"gpu_memory_utilization": 1e-9},
    ],
)
def test_the_smallest_and_largest_allowed_arguments_are_estimated(edge):
    assert estimate(**edge).max_model_len == edge.get("max_model_len", 1024)


@pytest.mark.parametrize(
    ("edge", "message"),
    [
        ({"weight_bytes": -1}, "weight_bytes=-1 must not be negative"),
        (
            {"gpu_count": 0, "tensor_parallel_size": 1},
            "gpu_count=0 must be at least 1; tensor_parallel_size=1 must be between 1 and gpu_count=0",
        ),
        ({"gpu_memory_gib": 0}, "gpu_memory_gib=0 must be positive"),
        ({"usable_gpu_memory_bytes": 0}, "usable_gpu_memory_bytes=0 must be positive"),
        ({"max_model_len": 0}, "max_model_len=0 must be at least 1"),
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization=0 must be in (0, 1]"),
        ({"gpu_memory_utilization": 1.01}, "gpu_memory_utilization=1.01 must be in (0, 1]"),
        (
            {"weight_bytes": -1, "max_model_len": 0},
            "weight_bytes=-1 must not be negative; max_model_len=0 must be at least 1",
        ),
    ],
)
def test_impossible_arguments_are_each_named(edge, message):
    with pytest.raises(ValueError) as raised:
        estimate(**edge)
    assert str(raised.value) == message
