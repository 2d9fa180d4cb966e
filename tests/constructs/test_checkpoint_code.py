"""No code from the checkpoint runs unless asked: fixed container variables, staging exclusions, warnings.

Sources: aws/model-hosting-container-standards common/dependency_manager.py (STANDARD_AUTO_INSTALL_REQ,
default true; a failed install aborts start-up) and sagemaker/sagemaker_loader.py (model.py loaded from
the model directory); aws/deep-learning-containers scripts/docker/vllm/sagemaker_entrypoint.sh.
"""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Annotations, Match

from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.engines import checkpoint_code_patterns, engine_names, environment_warnings, get_engine
from preflight.checkpoint_code import (
    CHECKPOINT_CODE_PATTERNS,
    code_files,
    code_files_note,
    code_files_problem,
    staging_exclude,
)
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


def test_staging_leaves_out_code_files_unless_allowed():
    assert staging_exclude(("original/*",)) == (
        "original/*",
        "requirements.txt",
        "model.py",
        "code/*",
        "serving.properties",
    )
    # Naming a file in include is no longer a way in: only allow_checkpoint_code is.
    assert staging_exclude((), ("model.py", "*.py")) == ("model.py", "*.py")
    assert staging_exclude(("model.py",), ("model.py", "*.py")) == ("model.py", "*.py")
    assert staging_exclude(("original/*",), ("model.py",), allow=True) == ("original/*",)


def test_every_engine_gets_the_common_patterns_and_lmi_every_python_file():
    """The preflight's fallback list is engines.json's common list (a template without the property)."""
    assert checkpoint_code_patterns(None) == CHECKPOINT_CODE_PATTERNS
    for name in engine_names():
        assert set(CHECKPOINT_CODE_PATTERNS) <= set(checkpoint_code_patterns(name))
    assert "*.py" in checkpoint_code_patterns("lmi")
    assert "*.py" not in checkpoint_code_patterns("vllm")  # trust_remote_code's modeling files stay staged


@pytest.mark.parametrize(
    ("engine", "excluded"),
    [
        ("vllm", ["original/*", "requirements.txt", "model.py", "code/*", "serving.properties"]),
        ("lmi", ["original/*", "requirements.txt", "model.py", "code/*", "serving.properties", "*.py"]),
    ],
)
def test_the_staging_resource_gets_the_engines_exclusions(engine, excluded):
    template = stack_template(engine=engine, include='["*.json", "*.safetensors", "requirements.txt"]')
    template.has_resource_properties("Custom::StagedCheckpoint", {"Exclude": excluded})
    template.has_resource_properties(
        "Custom::DeploymentPreflight",
        {"CheckpointCode": sorted(excluded[1:]), "AllowCheckpointCode": "false"},
    )


def test_allow_checkpoint_code_stages_everything_but_the_users_exclusions():
    template = stack_template(engine="lmi", allow_checkpoint_code="true")
    template.has_resource_properties("Custom::StagedCheckpoint", {"Exclude": ["original/*"]})
    template.has_resource_properties("Custom::DeploymentPreflight", {"AllowCheckpointCode": "true"})


def test_code_files_are_found_at_the_top_level_and_under_code():
    paths = ["config.json", "model.py", "requirements.txt", "code/inference.py", "sub/model.py", "modeling_x.py"]
    assert code_files(paths) == ["code/inference.py", "model.py", "requirements.txt"]
    assert code_files([*paths, "serving.properties"], ("serving.properties", "*.py")) == [
        "code/inference.py",
        "model.py",
        "modeling_x.py",
        "serving.properties",
        "sub/model.py",
    ]
    assert code_files_problem(["config.json", "modeling_x.py"], "s3://b/p/") is None
    problem = code_files_problem(paths, "s3://b/p/")
    assert problem.startswith("s3://b/p/ holds code/inference.py, model.py, requirements.txt, which the serving")
    assert "set allow_checkpoint_code=true" in problem
    assert code_files_note(paths, "s3://b/p/").endswith("(allow_checkpoint_code is set)")


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
    assert code_files_problem(paths, "s3://b/p/") == (
        "s3://b/p/ holds code/handler_0.py, code/handler_1.py, code/handler_2.py, code/handler_3.py, "
        "code/handler_4.py and 3 more, which the serving container would run as code or read as its settings "
        "(files matching requirements.txt, model.py, code/*, serving.properties): remove them from the prefix, "
        "or set allow_checkpoint_code=true for a repository and revision you have read"
    )
    five = [f"code/h{i}.py" for i in range(5)]
    assert code_files_problem(five, "s3://b/p/").startswith(f"s3://b/p/ holds {', '.join(five)}, which")
    # Six: the sixth is not named but still counted.
    six = [f"code/h{i}.py" for i in range(6)]
    assert code_files_problem(six, "s3://b/p/").startswith(f"s3://b/p/ holds {', '.join(six[:5])} and 1 more, ")
