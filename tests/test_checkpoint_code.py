"""No code from the checkpoint runs unless asked: fixed container variables, staging exclusions, warnings.

Sources: aws/model-hosting-container-standards common/dependency_manager.py (STANDARD_AUTO_INSTALL_REQ,
default true; a failed install aborts start-up) and sagemaker/sagemaker_loader.py (model.py loaded from
the model directory); aws/deep-learning-containers scripts/docker/vllm/sagemaker_entrypoint.sh.
"""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Annotations, Match

from constructs_lib.engines import engine_names, environment_warnings, get_engine
from preflight.checkpoint_code import code_files, code_files_note, staging_exclude
from stacks.config import ConfigError, DeploymentConfig
from tests.conftest import build, context_with, stack_template


def model_environment(template) -> dict[str, str]:
    (model,) = template.find_resources("AWS::SageMaker::Model").values()
    props = model["Properties"]
    return (props.get("PrimaryContainer") or props["Containers"][0])["Environment"]


# The DLC engines start through standard-supervisor; the images this repository builds (llama.cpp) do not.
@pytest.mark.parametrize("engine", [name for name in engine_names() if not get_engine(name).image_build])
def test_every_engine_turns_off_requirements_install_and_hub_access(engine):
    env = model_environment(stack_template(engine=engine, instance_type="ml.g6e.2xlarge"))
    assert env["STANDARD_AUTO_INSTALL_REQ"] == "false"
    assert env["HF_HUB_OFFLINE"] == "1"


def test_llamacpp_runs_no_checkpoint_code_and_downloads_nothing():
    """Its adapter only resolves the .gguf path; llama-server is told to stay offline."""
    env = model_environment(
        stack_template(
            engine="llamacpp", gguf_file="m-Q4_K_M.gguf", model_id="org/m-GGUF", instance_type="ml.g5.xlarge"
        )
    )
    assert env["LLAMA_ARG_OFFLINE"] == "true"
    assert env["LLAMA_ARG_MODEL"] == "/opt/ml/model/m-Q4_K_M.gguf"


def test_component_mode_gets_the_same_fixed_variables():
    env = model_environment(stack_template(deployment_mode="inference-component"))
    assert env["STANDARD_AUTO_INSTALL_REQ"] == "false" and env["VLLM_NO_USAGE_STATS"] == "1"


@pytest.mark.parametrize("key", ["STANDARD_AUTO_INSTALL_REQ", "standard_auto_install_req", "HF_HUB_OFFLINE"])
def test_fixed_variables_cannot_be_overridden(key):
    with pytest.raises(ConfigError) as info:
        DeploymentConfig.from_context(context_with(container_env=f'{{"{key}": "true"}}'))
    (problem,) = info.value.problems
    assert f"container_env key {key!r} would override a setting the app derives (set by the app:" in problem


def test_staging_leaves_out_code_files_unless_include_names_them():
    assert staging_exclude((), ("original/*",)) == ("original/*", "requirements.txt", "model.py", "code/*")
    # A broad pattern (modeling files for trust_remote_code) is not a request for model.py.
    assert "model.py" in staging_exclude(("*.json", "*.py"), ())
    assert staging_exclude(("*.json", "model.py", "code/**"), ()) == ("requirements.txt",)
    assert staging_exclude((), ("model.py",)) == ("model.py", "requirements.txt", "code/*")


def test_the_staging_resource_gets_the_exclusions():
    template = stack_template(include='["*.json", "*.safetensors", "requirements.txt"]')
    template.has_resource_properties("Custom::StagedCheckpoint", {"Exclude": ["original/*", "model.py", "code/*"]})


def test_code_files_are_found_at_the_top_level_and_under_code():
    paths = ["config.json", "model.py", "requirements.txt", "code/inference.py", "sub/model.py", "modeling_x.py"]
    assert code_files(paths) == ["code/inference.py", "model.py", "requirements.txt"]
    assert code_files_note(["config.json", "modeling_x.py"], "s3://b/p/") is None
    note = code_files_note(paths, "s3://b/p/")
    assert note.startswith("s3://b/p/ holds code/inference.py, model.py, requirements.txt:")


@pytest.mark.parametrize("value", [True, "", "true", "TRUE"])
def test_trust_remote_code_gets_a_synth_warning(value):
    engine = get_engine("vllm")
    (warning,) = environment_warnings(engine, {"SM_VLLM_TRUST_REMOTE_CODE": value})
    assert "import and run the Python files of the checkpoint" in warning


@pytest.mark.parametrize("value", [False, "false"])
def test_trust_remote_code_switched_off_gets_no_warning(value):
    assert environment_warnings(get_engine("sglang"), {"SM_SGLANG_TRUST_REMOTE_CODE": value}) == []


def test_trust_remote_code_warning_reaches_cdk_synth():
    import aws_cdk as cdk

    app = build(engine_env='{"SM_VLLM_TRUST_REMOTE_CODE": "true"}')
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp("SM_VLLM_TRUST_REMOTE_CODE lets"))


def test_a_prefix_with_many_code_files_names_five_and_counts_the_rest():
    paths = [f"code/handler_{i}.py" for i in range(7)] + ["model.py"]
    assert code_files_note(paths, "s3://b/p/") == (
        "s3://b/p/ holds code/handler_0.py, code/handler_1.py, code/handler_2.py, code/handler_3.py, "
        "code/handler_4.py and 3 more: the vLLM image's standard-supervisor would pip-install a requirements.txt "
        "(STANDARD_AUTO_INSTALL_REQ, which this app sets to false) and imports model.py as a handler; remove "
        "them from the prefix unless you meant the container to run them"
    )
    five = [f"code/h{i}.py" for i in range(5)]
    assert code_files_note(five, "s3://b/p/").startswith(f"s3://b/p/ holds {', '.join(five)}: ")
    # Six: the sixth is not named but still counted.
    six = [f"code/h{i}.py" for i in range(6)]
    assert code_files_note(six, "s3://b/p/").startswith(f"s3://b/p/ holds {', '.join(six[:5])} and 1 more: ")
