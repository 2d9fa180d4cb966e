"""Env blocks from AWS's public SageMaker vLLM/SGLang examples synthesize, their text passed through unchanged.

Every public example writes environment values as text ("0.9", "8192", "true"): SageMaker's
Environment is a string-to-string map (CreateModel API reference). The data file cites each block.
"""

from __future__ import annotations

import json

import pytest

from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.engines import get_engine, looks_secret
from tests.conftest import ROOT, context_with, stack_template

EXAMPLES = json.loads((ROOT / "tests" / "data" / "public_env_examples.json").read_text())["examples"]


def split(example: dict) -> tuple[dict, dict, dict]:
    """The example's block as our context: typed parameters, engine_env, container_env.

    Keys the app derives move to their typed parameter (given as the example's text), the model
    path is set by the construct, and a token is never put into a model's environment.
    """
    engine = get_engine(example["engine"])
    alias_to_setting = {alias: setting for setting, aliases in engine.derived_keys.items() for alias in aliases}
    typed: dict[str, str] = {}
    engine_env: dict[str, str] = {}
    container_env: dict[str, str] = {}
    for key, value in example["env"].items():
        if key in alias_to_setting:
            typed[alias_to_setting[key]] = value
        elif key == engine.model_path_key or looks_secret(key):
            continue
        elif key.startswith(engine.env_prefix):
            engine_env[key] = value
        else:
            container_env[key] = value
    return typed, engine_env, container_env


def container_environment(template) -> dict[str, str]:
    (model,) = template.find_resources("AWS::SageMaker::Model").values()
    props = model["Properties"]
    container = props.get("PrimaryContainer") or props["Containers"][0]
    return container["Environment"]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["source"].split(" ", 1)[1] for e in EXAMPLES])
def test_public_example_env_block_synthesizes_unchanged(example):
    typed, engine_env, container_env = split(example)
    template = stack_template(
        engine=example["engine"],
        instance_type=example["instance_type"],
        # As cdk.json or `-c engine_env=...` hands them over: JSON text whose values are text.
        engine_env=json.dumps(engine_env),
        container_env=json.dumps(container_env),
        **typed,
    )
    env = container_environment(template)
    for key, value in {**engine_env, **container_env}.items():
        assert env[key] == value, (example["source"], key)
    engine = get_engine(example["engine"])
    for setting, value in typed.items():
        assert env[engine.derived_key(setting)] == str(int(value)), (example["source"], setting)


def test_numbers_as_text_are_range_checked_on_their_value():
    config = DeploymentConfig.from_context(
        context_with(engine="sglang", engine_env='{"SM_SGLANG_MEM_FRACTION_STATIC": "0.8"}')
    )
    assert config.engine_env == {"SM_SGLANG_MEM_FRACTION_STATIC": "0.8"}  # the user's text, unchanged
    for bad in ('"1.5"', '"0"', '"most"', '"inf"', '"nan"'):
        with pytest.raises(ConfigError) as info:
            DeploymentConfig.from_context(context_with(engine_env=f'{{"SM_VLLM_GPU_MEMORY_UTILIZATION": {bad}}}'))
        (problem,) = info.value.problems
        assert "SM_VLLM_GPU_MEMORY_UTILIZATION=" in problem and "expected a number above 0 and at most 1" in problem


def test_preflight_reads_a_memory_share_given_as_text():
    t = stack_template(engine_env='{"SM_VLLM_GPU_MEMORY_UTILIZATION": "0.85"}')
    (props,) = [r["Properties"] for r in t.find_resources("Custom::DeploymentPreflight").values()]
    assert str(props["GpuMemoryUtilization"]) == "0.85"
    assert container_environment(t)["SM_VLLM_GPU_MEMORY_UTILIZATION"] == "0.85"
