"""The longest context an engine accepts: vLLM's _get_and_verify_max_len rule (preflight/context.py cites it)."""

from __future__ import annotations

import pytest

from preflight.context import context_problem, engine_context_limit
from preflight.memory_fit import text_config
from tests.fakes.hub_models import GPT_OSS_20B, LLAMA_31_8B, MISTRAL_SMALL_24B, QWEN3_32B

QWEN3_32B_YARN = {
    **QWEN3_32B,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}


@pytest.mark.parametrize(
    ("config", "tokens", "key"),
    [
        (LLAMA_31_8B, 131_072, "max_position_embeddings"),  # llama3: factor 8 does not extend 131,072
        (QWEN3_32B, 40_960, "max_position_embeddings"),  # rope_scaling null
        (QWEN3_32B_YARN, 131_072, "original_max_position_embeddings"),  # yarn: 32,768 x 4, not 40,960 x 4
        (GPT_OSS_20B, 131_072, "original_max_position_embeddings"),  # yarn: 4,096 x 32
        (MISTRAL_SMALL_24B, 32_768, "max_position_embeddings"),
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}, 8192, None),
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": 4}}, 16384, None),
        ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "longrope", "factor": 32}}, 131072, None),
        ({"max_position_embeddings": 131072, "rope_scaling": {"type": "su", "factor": 32}}, 131072, None),
        # transformers v5: one rope_parameters entry per layer type
        (
            {
                "max_position_embeddings": 8192,
                "rope_parameters": {
                    "full_attention": {"rope_type": "linear", "factor": 4},
                    "sliding_attention": {"rope_type": "default"},
                },
            },
            32768,
            None,
        ),
        # Gemma 3 states its scaled length already: never multiplied
        (
            {
                "model_type": "gemma3_text",
                "max_position_embeddings": 131072,
                "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            },
            131072,
            None,
        ),
        # the smallest of the length keys; model_max_length replaces it (Command-R)
        ({"max_position_embeddings": 8192, "seq_length": 4096}, 4096, "seq_length"),
        ({"max_position_embeddings": 8192, "model_max_length": 131072}, 131072, "model_max_length"),
    ],
)
def test_the_limit_is_vllms_derived_max_model_len(config, tokens, key):
    limit = engine_context_limit(text_config(config))
    assert limit is not None and limit.tokens == tokens
    if key:
        assert limit.key == key


def test_no_stated_length_accepts_any_context():
    assert engine_context_limit({"hidden_size": 4096}) is None
    assert context_problem({"hidden_size": 4096}, 10**6) is None


def test_llama_31_at_200000_is_refused_naming_the_key_value_limit_and_largest():
    problem = context_problem(LLAMA_31_8B, 200_000, largest_that_fits=150_000)
    assert problem is not None
    assert problem.startswith(
        "max_model_len=200000: above the longest context the engine accepts for this model, "
        "131,072 tokens (max_position_embeddings=131,072; rope_type llama3 does not extend it"
    )
    assert "The largest context that fits here: 131,072" in problem  # the limit, memory allows more
    assert "at most 100,000" not in problem
    assert "largest context that fits here: 9,000" in context_problem(LLAMA_31_8B, 200_000, largest_that_fits=9000)
    assert context_problem(LLAMA_31_8B, 131_072) is None


def test_qwen3_32b_at_131072_needs_its_yarn_scaling():
    problem = context_problem(QWEN3_32B, 131_072)
    assert problem is not None and "40,960 tokens (max_position_embeddings=40,960;" in problem
    assert context_problem(QWEN3_32B_YARN, 131_072) is None
    assert "original_max_position_embeddings 32,768 x rope_scaling yarn factor 4 = 131,072" in (
        engine_context_limit(QWEN3_32B_YARN).how
    )
    assert context_problem(QWEN3_32B_YARN, 131_073) is not None


def test_a_multimodal_config_is_limited_by_its_text_model():
    config = {"architectures": ["X"], "text_config": {**MISTRAL_SMALL_24B}, "vision_config": {}}
    assert engine_context_limit(text_config(config)).tokens == 32_768


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "yarn", "factor": float("inf")},
        {"rope_type": "linear", "factor": float("nan")},
        {"rope_type": "linear", "factor": "4"},
        {"rope_type": "yarn", "factor": 1e308, "original_max_position_embeddings": 1e308},
        {"rope_type": ["yarn"], "factor": 2},
    ],
)
def test_hostile_rope_values_never_raise(rope):
    limit = engine_context_limit({"max_position_embeddings": 4096, "rope_scaling": rope})
    assert limit is None or limit.tokens >= 4096
    problem = context_problem({"max_position_embeddings": 4096, "rope_scaling": rope}, 10**6)
    assert problem is None if limit is None else problem.startswith("max_model_len=1000000: above")
