"""preflight.memory_fit's reading of config.json, rule by rule: which layers keep a per-token KV cache, what the
report says about the model, and the context limit.

Each case states the whole answer (the layer counts and every note), so a rule that starts counting a layer twice,
or a note that loses its number, fails here rather than shifting an estimate by a few percent somewhere else.
"""

from __future__ import annotations

import pytest

from preflight import attention_layout
from preflight.memory_fit import _classify_layers, _model_assumptions, context_limit
from tests.preflight.test_memory_fit import DEEPSEEK_V2_LITE, GEMMA3_4B, MISTRAL_SMALL_31, QWEN3_8B, QWEN3_30B_A3B

SLIDE_FULL = ["sliding_attention", "full_attention"]
NO_WINDOW = "sliding_attention layers without a sliding_window size: counted at full length"


def classify(cfg, num_layers):
    notes: list[str] = []
    return (*_classify_layers(cfg, num_layers, notes), notes)


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        # (full layers, windowed layers, window, notes)
        ({"sliding_window": 1, "layer_types": SLIDE_FULL}, (1, 1, 1, [])),  # the smallest window is a window
        ({"sliding_window": 0, "layer_types": SLIDE_FULL}, (2, 0, None, [NO_WINDOW])),
        ({"sliding_window": "4096", "layer_types": SLIDE_FULL}, (2, 0, None, [NO_WINDOW])),  # not a number
        ({"sliding_window": 8, "use_sliding_window": False, "layer_types": SLIDE_FULL}, (2, 0, None, [NO_WINDOW])),
        ({"sliding_window": 8, "use_sliding_window": True, "layer_types": SLIDE_FULL}, (1, 1, 8, [])),
        ({"sliding_window": 8, "layer_types": ["full_attention"] * 2}, (2, 0, None, [])),  # no layer slides
    ],
)
def test_a_window_needs_a_positive_size_in_use_and_layers_that_slide(cfg, expected):
    assert classify(cfg, 2) == expected


def test_a_short_layer_list_is_padded_with_full_attention_and_says_so():
    assert classify({"sliding_window": 16, "layer_types": ["sliding_attention"]}, 3) == (
        2,
        1,
        16,
        ["layer_types lists fewer than 3 layers; the rest counted as full attention"],
    )
    # As many types as layers: nothing padded, nothing said; more types than layers: the extra ones are ignored.
    assert classify({"sliding_window": 16, "layer_types": ["sliding_attention"] * 3}, 3) == (0, 3, 16, [])
    assert classify({"sliding_window": 16, "layer_types": ["full_attention"] + ["sliding_attention"] * 5}, 2) == (
        1,
        1,
        16,
        [],
    )


def test_an_empty_layer_list_is_no_layer_map():
    assert classify({"layer_types": []}, 4) == (4, 0, None, [])


def test_every_kind_of_layer_is_counted_once_and_named():
    types = [
        "full_attention",
        "attention",
        "global_attention",
        "sliding_attention",
        "local_attention",
        "chunked_attention",
        "chunked_attention",
        "linear_attention",
        "mamba",
        "mystery",
        "mystery",
        "other_kind",
    ]
    assert classify({"sliding_window": 64, "layer_types": types}, len(types)) == (
        # 3 full + 2 chunked (counted in full) + 3 unknown (counted in full); 2 windowed; 2 state layers not counted
        8,
        2,
        64,
        [
            "2 chunked-attention layers counted at full length (an over-estimate)",
            "3 layers of unknown type (mystery, other_kind) counted as full attention",
            "hybrid model: 2 of 12 layers keep a fixed-size state, not a per-token cache (not counted); only its "
            "attention layers are",
        ],
    )


def test_sliding_layers_without_a_window_are_counted_in_full_with_the_others():
    types = ["sliding_attention", "sliding_attention", "full_attention", "chunked_attention"]
    assert classify({"layer_types": types}, 4) == (
        4,
        0,
        None,
        [NO_WINDOW, "1 chunked-attention layers counted at full length (an over-estimate)"],
    )


@pytest.mark.parametrize(
    ("interval", "expected"),
    [
        (1, 7),  # every layer is full attention
        (2, 3),  # layers 2, 4, 6
        (3, 2),  # layers 3 and 6
        (4, 1),  # layer 4 only: the 8th does not exist
        (0, None),  # not an interval: no hybrid reading
    ],
)
def test_a_full_attention_interval_counts_every_nth_layer(interval, expected):
    full, sliding, window, notes = classify({"full_attention_interval": interval}, 7)
    if expected is None:
        assert (full, sliding, window, notes) == (7, 0, None, [])
        return
    assert (full, sliding, window) == (expected, 0, None)
    assert notes == [
        f"hybrid model: every {interval}th layer is full attention ({expected} of 7); the others are linear "
        "attention with a fixed-size state per sequence (not counted)"
    ]


def test_a_hybrid_override_pattern_counts_its_attention_layers():
    assert classify({"hybrid_override_pattern": "M-M*-M*"}, 7) == (
        2,
        0,
        None,
        [
            "hybrid model: 2 of 7 layers are attention ('*' in hybrid_override_pattern); Mamba state per sequence "
            "not counted"
        ],
    )
    assert classify({"hybrid_override_pattern": ""}, 7) == (7, 0, None, [])
    assert classify({"hybrid_override_pattern": 5}, 7) == (7, 0, None, [])


@pytest.mark.parametrize(
    ("every", "expected"),
    [
        (1, (7, 0, 32)),  # every layer is the full one
        (2, (3, 4, 32)),  # layers 2, 4, 6
        (3, (2, 5, 32)),  # layers 3 and 6
        (4, (1, 6, 32)),  # layer 4 only
    ],
)
def test_a_sliding_window_pattern_makes_every_nth_layer_full(every, expected):
    full, sliding, window, notes = classify({"sliding_window": 32, "sliding_window_pattern": every}, 7)
    assert ((full, sliding, window), notes) == (expected, [])


def test_a_sliding_window_pattern_of_zero_or_without_a_window_is_no_pattern():
    over = (
        "config.json sets sliding_window=32 but not which layers use it: every layer counted at full length (an "
        "over-estimate for interleaved models)"
    )
    assert classify({"sliding_window": 32, "sliding_window_pattern": 0}, 6) == (6, 0, None, [over])
    assert classify({"sliding_window_pattern": 2}, 6) == (6, 0, None, [])


def assumptions(config, tp=1):
    return _model_assumptions(config, config, attention_layout(config), tp)


def test_the_attention_line_says_when_tp_replicates_kv_heads():
    # Qwen3-30B-A3B has 4 KV heads: at TP 4 each GPU holds one; at TP 8 each still holds one (replicated).
    at_4, at_8 = assumptions(QWEN3_30B_A3B, 4), assumptions(QWEN3_30B_A3B, 8)
    assert at_4[0] == "GQA: 4 KV heads x head_dim 128 over 48 attention layers; 1 per GPU at TP 4"
    assert at_8[0] == (
        "GQA: 4 KV heads x head_dim 128 over 48 attention layers; 1 per GPU at TP 8 (KV heads replicated: TP "
        "exceeds them)"
    )


def test_latent_attention_has_no_kv_head_line():
    assert not any(a.startswith(("MLA", "GQA", "MHA", "MQA")) for a in assumptions(DEEPSEEK_V2_LITE))


def test_the_window_line_gives_both_layer_counts_and_the_window():
    layout = attention_layout(GEMMA3_4B)
    line = (
        f"{layout.window_layers} sliding-window layers keep at most {layout.window:,} tokens per sequence "
        f"({layout.full_layers} full-attention layers keep all); per-token figures are full-attention equivalents"
    )
    assert line in assumptions(GEMMA3_4B)
    assert (layout.window_layers, layout.full_layers) == (29, 5)
    assert not any("sliding-window layers" in a for a in assumptions(QWEN3_8B))


@pytest.mark.parametrize(
    ("experts", "said"),
    [
        (
            {"num_local_experts": 8, "num_experts_per_tok": 2},
            "MoE: all 8 experts resident in GPU memory, 2 active per token",
        ),
        ({"n_routed_experts": 64, "moe_topk": 6}, "MoE: all 64 experts resident in GPU memory, 6 active per token"),
        ({"num_experts": 16, "top_k": 4}, "MoE: all 16 experts resident in GPU memory, 4 active per token"),
        ({"num_experts": 2}, "MoE: all 2 experts resident in GPU memory"),  # the count active per token unstated
        ({"num_experts": 1, "num_experts_per_tok": 1}, None),  # one expert is a dense model
        ({"num_experts": "8"}, None),
    ],
)
def test_the_moe_line_names_every_expert_count_config_json_uses(experts, said):
    lines = [a for a in assumptions({**QWEN3_8B, **experts}) if a.startswith("MoE")]
    assert lines == ([said] if said else [])


def test_only_a_nested_text_config_is_called_multimodal():
    multimodal = (
        "multimodal: language model read from the nested text config; the vision encoder is in the weight bytes, "
        "its activations are not estimated, and image tokens count against max_model_len"
    )
    nested = MISTRAL_SMALL_31
    assert _model_assumptions(nested, nested["text_config"], attention_layout(nested), 1)[-1] == multimodal
    assert not any(a.startswith("multimodal") for a in assumptions(QWEN3_8B))


@pytest.mark.parametrize(
    ("cfg", "limit"),
    [
        ({"max_position_embeddings": 1}, 1),
        ({"max_position_embeddings": 0}, None),
        ({"max_position_embeddings": -4}, None),
        ({"max_position_embeddings": "4096"}, None),
        ({"max_position_embeddings": True}, None),
        ({"max_position_embeddings": 4096, "n_positions": 2048}, 4096),  # the first name wins
        ({}, None),
    ],
)
def test_the_context_limit_is_a_positive_whole_number_or_none(cfg, limit):
    assert context_limit(cfg) == limit
