"""Mistakes a new user makes get a hint: a close value, a missing ``ml.``, the mode that does what was meant."""

from __future__ import annotations

import pytest

from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from tests.conftest import context_with


def problems(**context) -> list[str]:
    with pytest.raises(ConfigError) as info:
        DeploymentConfig.from_context(context_with(**context))
    return info.value.problems


@pytest.mark.parametrize(
    ("given", "meant"), [("vLLM", "vllm"), ("SGLang", "sglang"), ("sglng", "sglang"), ("LMI", "lmi")]
)
def test_an_engine_in_another_case_or_misspelt_gets_did_you_mean(given, meant):
    (problem,) = problems(engine=given)
    assert problem.startswith(f"engine={given!r}: not allowed;") and problem.endswith(f"did you mean {meant!r}?")


def test_an_unrelated_engine_gets_no_guess():
    (problem,) = problems(engine="tensorrt")
    assert "did you mean" not in problem


@pytest.mark.parametrize("key", ["instance_type", "staging_instance_type"])
def test_an_instance_type_without_ml_gets_did_you_mean(key):
    (problem,) = problems(**{key: "g5.2xlarge"})
    assert problem.startswith(f"{key}='g5.2xlarge': expected") and problem.endswith("did you mean 'ml.g5.2xlarge'?")


def test_fewer_gpus_than_the_instance_has_points_to_component_mode():
    (problem,) = problems(instance_type="ml.g6e.12xlarge", tensor_parallel_size="2")
    assert "use deployment_mode=inference-component with accelerators_per_copy=2" in problem
    assert "run 2 copies on it" in problem


def test_llamacpp_takes_no_tensor_parallel_size():
    (problem,) = problems(
        engine="llamacpp",
        model_id="org/m-GGUF",
        gguf_file="m-Q4_K_M.gguf",
        instance_type="ml.g5.12xlarge",
        tensor_parallel_size="4",
    )
    assert problem.startswith("tensor_parallel_size=4: engine='llamacpp' has no tensor parallel size")


def test_lmi_rolling_batch_beside_the_async_entry_point_gets_djls_rule():
    from constructs_lib import get_engine
    from constructs_lib.engines import environment_warnings

    (warning,) = environment_warnings(get_engine("lmi"), {"OPTION_ROLLING_BATCH": "vllm"})
    assert warning.startswith("engine_env OPTION_ROLLING_BATCH='vllm' with OPTION_ASYNC_MODE, OPTION_ENTRYPOINT")
    assert "expected OPTION_ROLLING_BATCH='disable'" in warning
    assert environment_warnings(get_engine("lmi"), {"OPTION_ROLLING_BATCH": "DISABLE"}) == []
    # Without the async engine the rule does not apply.
    assert environment_warnings(get_engine("lmi"), {"OPTION_ROLLING_BATCH": "vllm", "OPTION_ASYNC_MODE": "false"}) == []
