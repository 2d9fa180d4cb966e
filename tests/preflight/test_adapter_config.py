"""preflight/adapters.py: adapter_config.json against the deployment's base model and max_lora_rank."""

from __future__ import annotations

import json

import pytest

from preflight.adapters import adapter_config_problems

GOOD = {
    "peft_type": "LORA",
    "base_model_name_or_path": "Qwen/Qwen3-0.6B",
    "r": 16,
    "lora_alpha": 32,
    "target_modules": ["q_proj", "v_proj"],
}


def check(config, base="Qwen/Qwen3-0.6B", rank=16):
    return adapter_config_problems(config, adapter="sql", base_model_id=base, max_lora_rank=rank)


def test_a_matching_adapter_passes_as_text_bytes_or_object():
    assert check(GOOD) == []
    assert check(json.dumps(GOOD)) == []
    assert check(json.dumps(GOOD).encode()) == []
    assert check({**GOOD, "base_model_name_or_path": "qwen/qwen3-0.6b"}) == []  # the Hub's ids are case-insensitive


def test_another_base_model_is_named():
    (problem,) = check({**GOOD, "base_model_name_or_path": "meta-llama/Llama-3.1-8B"})
    assert problem.startswith("adapter sql: adapter_config.json base_model_name_or_path='meta-llama/Llama-3.1-8B'")


@pytest.mark.parametrize("path", ["/opt/ml/model", "./base", "base"])
def test_a_local_base_path_or_an_s3_base_is_not_compared(path):
    assert check({**GOOD, "base_model_name_or_path": path}) == []
    assert check({**GOOD, "base_model_name_or_path": "meta-llama/Llama-3.1-8B"}, base=None) == []


def test_a_rank_above_max_lora_rank_says_what_to_raise():
    (problem,) = check({**GOOD, "r": 64}, rank=16)
    assert "r=64: above the engine's max_lora_rank 16" in problem and "at least 64" in problem
    assert check({**GOOD, "r": 64}, rank=64) == []


@pytest.mark.parametrize("rank", [0, -1, "16", True, None, 1.5])
def test_a_rank_that_is_not_a_whole_number_is_refused(rank):
    (problem,) = check({**GOOD, "r": rank})
    assert f"r={rank!r}: expected the adapter's rank" in problem


@pytest.mark.parametrize("targets", [None, [], [1], 3])
def test_target_modules_are_required(targets):
    (problem,) = check({**GOOD, "target_modules": targets})
    assert "target_modules=" in problem
    assert check({**GOOD, "target_modules": "all-linear"}) == []


def test_not_lora_or_not_json():
    (problem,) = check({**GOOD, "peft_type": "PREFIX_TUNING"})
    assert "peft_type='PREFIX_TUNING': only LoRA adapters" in problem
    assert "is not valid JSON" in check("{")[0]
    assert check("[1]") == ["adapter sql: adapter_config.json is not a JSON object"]
