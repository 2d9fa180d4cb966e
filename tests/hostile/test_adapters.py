"""Hostile adapter_config.json files and max-rank flags: refused exactly where vLLM refuses them at load.

Source: vllm-project/vllm vllm/lora/peft_helper.py (``PEFTHelper.from_dict``'s required fields, ``__post_init__``,
``_validate_features``, ``validate_legal``). A field vLLM does not read is not refused for vLLM's sake. The flag is
argparse ``type=int``: Python's ``int()`` of the text (Python argparse docs, "type"; built-in ``int``).
"""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template
from hypothesis import given
from hypothesis import strategies as st

from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.engines import get_engine, int_in_text
from preflight.adapters import adapter_config_problems
from tests.conftest import build, context_with

BASE = "Qwen/Qwen3-0.6B"
GOOD = {"peft_type": "LORA", "base_model_name_or_path": BASE, "r": 16, "lora_alpha": 32, "target_modules": ["q_proj"]}


def check(config, rank=16):
    return adapter_config_problems(config, adapter="sql", base_model_id=BASE, max_lora_rank=rank)


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("use_dora", True, "use_dora=True: vLLM does not support DoRA"),
        ("modules_to_save", ["lm_head"], "not ['lm_head']"),
        ("modules_to_save", ["classifier", "embed_tokens"], "not ['embed_tokens']"),
        ("bias", "all", "bias='all': vLLM serves only bias 'none'"),
        ("bias", "lora_only", "bias='lora_only'"),
        ("bias", None, "bias=None"),
        ("lora_bias", True, "LoRA bias (lora_bias)"),
        ("init_lora_weights", "pissa", "init_lora_weights='pissa': this init modifies the base model's weights"),
        ("init_lora_weights", "olora", "init_lora_weights='olora'"),
        ("init_lora_weights", "loftq", "init_lora_weights='loftq'"),
        ("alora_invocation_tokens", [1, 2], "Activated LoRA (aLoRA)"),
        ("layer_replication", [[0, 4]], "layer_replication"),
        ("use_bdlora", {"blocks": 2}, "block-diagonal LoRA (BD-LoRA)"),
        ("use_qalora", True, "QALoRA"),
        ("rank_pattern", {"q_proj": 17}, "rank_pattern={'q_proj': 17}: above the engine's max_lora_rank 16"),
        ("rank_pattern", {"q_proj": "32"}, "rank_pattern={'q_proj': '32'}: expected module patterns"),
        ("rank_pattern", [32], "rank_pattern=[32]: expected module patterns"),
        ("r", 17, "r=17: above the engine's max_lora_rank 16"),
        ("r", 0, "r=0: expected the adapter's rank"),
        ("r", True, "r=True: expected the adapter's rank"),
    ],
)
def test_each_field_vllm_refuses_is_refused_by_name(field, value, says):
    (problem,) = check({**GOOD, field: value})
    assert problem.startswith("adapter sql: adapter_config.json") and says in problem


@pytest.mark.parametrize("missing", ["r", "lora_alpha", "target_modules"])
def test_a_field_pefthelper_requires_is_named_when_missing(missing):
    config = {k: v for k, v in GOOD.items() if k != missing}
    assert any(f"lacks {missing}: vLLM refuses" in p for p in check(config))


@pytest.mark.parametrize(
    "field, value",
    [
        ("modules_to_save", ["classifier", "score"]),  # classification heads: allowed by _validate_features
        ("modules_to_save", None),
        ("modules_to_save", []),
        ("bias", "none"),
        ("init_lora_weights", True),
        ("init_lora_weights", False),
        ("init_lora_weights", "gaussian"),
        ("init_lora_weights", "EVA"),  # compared lower-cased
        ("init_lora_weights", "lora_ga"),
        ("use_dora", False),
        ("use_rslora", True),  # a scaling vLLM implements
        ("rank_pattern", {"q_proj": 16}),  # exactly the maximum
        ("rank_pattern", {}),
        ("alpha_pattern", {"q_proj": 64}),
        # The deployment's own base, in each form a base is written in: compared, and the same model.
        ("base_model_name_or_path", "https://huggingface.co/Qwen/Qwen3-0.6B"),
        ("base_model_name_or_path", "hf://Qwen/Qwen3-0.6B"),
        ("base_model_name_or_path", "qwen/qwen3-0.6b@main"),
        ("base_model_name_or_path", "Qwen/Qwen3-0.6B@refs/pr/7"),
        ("base_model_name_or_path", "/opt/ml/base"),  # the trainer's local copy says nothing: not compared
        ("target_modules", "all-linear"),
    ],
)
def test_what_vllm_loads_passes(field, value):
    assert check({**GOOD, field: value}) == []


@pytest.mark.parametrize(
    "base",
    ["https://huggingface.co/Org/Other", "hf://Org/Other", "Org/Other@main", "hf://models/Org/Other@v1"],
)
def test_another_base_in_any_form_is_refused(base):
    # vLLM reads no base model name, so any of these loads there: the deployment compares it, whatever the form,
    # or an adapter trained for another model passes by being written as a URL.
    (problem,) = check({**GOOD, "base_model_name_or_path": base})
    assert f"base_model_name_or_path={base!r}: trained on another model" in problem


@pytest.mark.parametrize("base", ["https://example.com/Org/Other", "s3://bucket/base", "ftp://x/y"])
def test_a_base_that_names_no_readable_repository_is_refused_not_skipped(base):
    (problem,) = check({**GOOD, "base_model_name_or_path": base})
    assert "names no Hub repository this check can read" in problem


@pytest.mark.parametrize("targets", [["q_proj", ""], ["  "], " "])
def test_an_empty_target_module_is_refused(targets):
    (problem,) = check({**GOOD, "target_modules": targets})
    assert "adapts nothing" in problem


def test_the_rank_limit_at_its_boundary():
    assert check({**GOOD, "r": 16}, rank=16) == []
    assert check({**GOOD, "r": 8, "rank_pattern": {"q_proj": 16}}, rank=16) == []
    assert len(check({**GOOD, "r": 8, "rank_pattern": {"q_proj": 16, "v_proj": 17}}, rank=16)) == 1


def test_every_problem_is_reported_at_once():
    config = {**GOOD, "use_dora": True, "bias": "all", "modules_to_save": ["lm_head"], "rank_pattern": {"x": 64}}
    assert len(check(json.dumps(config))) == 4


@pytest.mark.parametrize(
    "text, rank",
    [
        ("16", 16),
        ("+16", 16),
        (" 16 ", 16),
        ("16\n", 16),
        ("1_6", 16),
        ("\u0663\u0662", 32),  # Arabic-Indic digits: int() reads them, so vLLM does
        (16, 16),
        ("16.0", None),
        ("1e3", None),
        ("1__6", None),
        ("", None),
        ("0", None),
        ("-16", None),
        (True, None),
        ("\u00b2", None),  # isdigit() is true for a superscript two, int() refuses it
    ],
)
def test_max_lora_rank_is_parsed_as_vllms_int_parses_it(text, rank):
    vllm = get_engine("vllm")
    assert vllm.max_lora_rank({"SM_VLLM_MAX_LORA_RANK": text}) == rank
    assert vllm.max_lora_rank({}) == 16  # engines.json default


@given(st.text(alphabet="0123456789+-_ \t\n.e\u0663\u00b2", max_size=8))
def test_int_in_text_is_pythons_int(text):
    try:
        expected = int(text)
    except ValueError:
        expected = None
    assert int_in_text(text) == expected


@pytest.mark.integration  # a whole fleet synthesized, as tests/stacks/test_fleet_hub_adapter.py
def test_a_signed_max_lora_rank_still_checks_the_adapter_at_synth():
    """Before, "+16" failed str.isdigit() and the staged adapter carried no MaxLoraRank: no check at all."""
    deployments = {
        "small": {
            "deployment_mode": "inference-component",
            "instance_type": "ml.g6.12xlarge",
            "accelerators_per_copy": 1,
            "model_id": BASE,
            "engine_env": {"SM_VLLM_MAX_LORA_RANK": "+32"},
            "adapters": {"sql": {"model_id": "org/qwen3-0.6b-sql-lora", "revision": "v1"}},
        }
    }
    app = build(deployments=json.dumps(deployments))
    stack = next(s for s in app.node.children if getattr(s, "stack_name", "").endswith("-small"))
    staged = Template.from_stack(stack).find_resources("Custom::StagedCheckpoint")
    (adapter,) = [r for r in staged.values() if r["Properties"]["RepoId"] == "org/qwen3-0.6b-sql-lora"]
    assert adapter["Properties"]["MaxLoraRank"] == "32"


@pytest.mark.parametrize("text", ["8192.0", "1e4", "8_192.0", "nan", "inf"])
def test_a_batched_token_count_vllms_int_refuses_is_refused_at_synth(text):
    """vLLM reads max_num_batched_tokens with int() (optional_type(int)); float() read "8192.0" and "1e4" before."""
    with pytest.raises(ConfigError) as info:
        DeploymentConfig.from_context(context_with(engine_env=json.dumps({"SM_VLLM_MAX_NUM_BATCHED_TOKENS": text})))
    (problem,) = info.value.problems
    assert "SM_VLLM_MAX_NUM_BATCHED_TOKENS=" in problem and "expected a whole number of at least 1" in problem


@pytest.mark.parametrize("text, tokens", [("8192", 8192.0), ("+8192", 8192.0), (" 8_192 ", 8192.0), (8192, 8192.0)])
def test_a_batched_token_count_vllms_int_reads_is_read_as_it(text, tokens):
    settings = get_engine("vllm").preflight_settings({"SM_VLLM_MAX_NUM_BATCHED_TOKENS": text})
    assert settings["max_num_batched_tokens"] == tokens
