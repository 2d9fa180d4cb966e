"""The context limit as its own check: never hidden by skipping ``memory``, its own ``context`` skip, vLLM's
``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` opt-in, and memory advice that works from the longest accepted context."""

from __future__ import annotations

import pytest

from preflight import CHECKS
from preflight.context import long_context_opt_in
from preflight.memory_fit import estimate_memory_fit
from preflight.model_check import check_model
from tests.fakes.hub_models import LLAMA_31_8B

WEIGHTS = 16_060_000_000  # Llama 3.1 8B in bf16
L40S = {"gpu_count": 1, "gpu_memory_gib": 48, "compute_capability": "8.9", "engine": "vllm"}
L4 = {**L40S, "gpu_memory_gib": 24}


def checked(instance, **kwargs):
    return check_model(LLAMA_31_8B, weight_bytes=WEIGHTS, **instance, **kwargs)


def test_context_is_a_check_of_its_own():
    assert CHECKS.index("context") == CHECKS.index("memory") + 1


def test_above_the_limit_with_room_at_the_limit_only_the_context_is_refused():
    result = checked(L40S, max_model_len=200_000)
    assert [check for check, _ in result.problems] == ["context"]
    (text,) = [text for _, text in result.problems]
    assert "fp8" not in text and "GPUs of at least" not in text and "quantized" not in text


def test_memory_advice_for_a_refused_context_is_sized_at_the_limit():
    fit = estimate_memory_fit(LLAMA_31_8B, weight_bytes=WEIGHTS, gpu_count=1, gpu_memory_gib=24, max_model_len=10**6)
    memory = [p for p in fit.problems if p != fit.context_refusal]
    assert len(memory) == 1 and fit.context_refusal is not None
    assert memory[0].startswith("at 131,072 tokens, the longest context the engine accepts (max_model_len=1000000")
    assert "one 131,072-token sequence needs" in memory[0] and "1,000,000" not in memory[0]
    # Without the limit (llama.cpp's way, or the context check skipped) the advice is for the length as given.
    free = estimate_memory_fit(
        LLAMA_31_8B,
        weight_bytes=WEIGHTS,
        gpu_count=1,
        gpu_memory_gib=24,
        max_model_len=10**6,
        refuse_beyond_context=False,
    )
    assert free.context_refusal is None and "one 1,000,000-token sequence needs" in free.problems[0]


@pytest.mark.parametrize(
    ("skip", "checks"),
    [
        ((), ["memory", "context"]),
        (("memory",), ["context"]),  # skipping memory never drops the limit: vLLM refuses it whatever the memory
        (("context",), ["memory"]),
        (("memory", "context"), []),
    ],
)
def test_each_skip_drops_only_its_own_check(skip, checks):
    result = checked(L4, max_model_len=200_000, skip=skip)
    assert [check for check, _ in result.problems] == checks


def test_the_opt_in_makes_a_longer_context_a_warning_sized_as_given():
    assert [check for check, _ in checked(L40S, max_model_len=150_000).problems] == ["context"]
    opted = checked(L40S, max_model_len=150_000, long_context="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    assert opted.problems == []
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets vLLM start with it" in w for w in opted.warnings)
    assert opted.fit is not None and opted.fit.max_model_len == 150_000
    on_l4 = checked(L4, max_model_len=200_000, long_context="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    assert [check for check, _ in on_l4.problems] == ["memory"]
    assert "one 200,000-token sequence needs" in on_l4.problems[0][1]


@pytest.mark.parametrize(
    ("engine", "env", "found"),
    [
        ("vllm", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
        ("vllm", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": " True "}, "VLLM_ALLOW_LONG_MAX_MODEL_LEN= True "),
        ("vllm", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": True}, "VLLM_ALLOW_LONG_MAX_MODEL_LEN=true"),
        ("vllm", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"}, None),
        ("vllm", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "yes"}, None),  # vLLM reads only 1 and true
        ("vllm", {}, None),
        ("sglang", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, None),  # another engine's check, not vLLM's
    ],
)
def test_the_opt_in_is_read_as_vllm_reads_it(engine, env, found):
    assert long_context_opt_in(engine, env) == found
