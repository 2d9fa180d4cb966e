"""engine=llamacpp: context checks, the built image asset, the GGUF model path and what staging copies."""

from __future__ import annotations

import fnmatch
import importlib.util
import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.engines import get_engine
from constructs_lib.gguf_file import staging_patterns
from constructs_lib.image_asset import ALL_ARCHITECTURES, ASSET_ID, AssetImage, cuda_architectures, default_image
from tests.conftest import ROOT, build, context_with

GGUF_REPO = "lmstudio-community/Qwen3.6-35B-A3B-GGUF"
GGUF = "Qwen3.6-35B-A3B-Q4_K_M.gguf"
LLAMACPP = {"engine": "llamacpp", "model_id": GGUF_REPO, "gguf_file": GGUF, "instance_type": "ml.g5.2xlarge"}
ECR_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-llamacpp:2026-11-30"


def load(**overrides) -> DeploymentConfig:
    return DeploymentConfig.from_context(context_with(**overrides))


def problems_of(**overrides) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(**overrides)
    return info.value.problems


@pytest.fixture(scope="module")
def default_llamacpp() -> tuple[cdk.Stack, Template]:
    return synth()


def synth(**overrides) -> tuple[cdk.Stack, Template]:
    app = build(**{**LLAMACPP, **overrides})
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    return stack, Template.from_stack(stack)


# --- context ------------------------------------------------------------------------------------------


def test_gguf_file_with_another_engine_is_refused_naming_both():
    (problem,) = problems_of(gguf_file=GGUF)
    assert problem.startswith(f"gguf_file={GGUF!r}: engine='vllm' serves safetensors checkpoints")
    assert "engine=llamacpp" in problem


def test_llamacpp_without_gguf_file_is_refused():
    (problem,) = problems_of(engine="llamacpp", model_id=GGUF_REPO, instance_type="ml.g5.2xlarge")
    assert problem.startswith("gguf_file: missing; engine='llamacpp' serves one GGUF file")


@pytest.mark.parametrize("value", ["model.safetensors", "../up.gguf", "/abs.gguf", "a b.gguf"])
def test_gguf_file_must_be_a_gguf_name_or_glob(value):
    (problem,) = problems_of(**{**LLAMACPP, "gguf_file": value})
    assert problem.startswith(f"gguf_file={value!r}: expected a .gguf file name or glob")


def test_llamacpp_config_derives_the_model_path_and_the_staging_include():
    config = load(**LLAMACPP, include='["README.md"]')
    assert config.engine_spec.model_path_value == f"/opt/ml/model/{GGUF}"
    assert config.staging_include == ("README.md", *staging_patterns(GGUF))
    assert isinstance(config.serving_image, AssetImage)
    assert config.image_source == "built by cdk deploy from containers/llamacpp (Docker needed)"


def test_llamacpp_refuses_what_the_adapter_owns_and_downloads():
    problems = problems_of(**LLAMACPP, engine_env='{"LLAMA_ARG_PORT": 9000, "LLAMA_ARG_HF_REPO": "x/y"}')
    assert any("'LLAMA_ARG_PORT' would override" in p and "set by the adapter" in p for p in problems)
    assert any("'LLAMA_ARG_HF_REPO' would override" in p and "network isolation" in p for p in problems)
    (problem,) = problems_of(**LLAMACPP, engine_env='{"LLAMA_ARG_CTX_SIZE": 4096}')
    assert "derived from max_model_len" in problem
    (problem,) = problems_of(**LLAMACPP, engine_env='{"LLAMA_ARG_OFFLINE": false}')
    assert "'LLAMA_ARG_OFFLINE' would override" in problem and "never reaches out" in problem


def test_llamacpp_on_an_instance_cuda_13_cannot_drive_is_refused():
    (problem,) = problems_of(**{**LLAMACPP, "instance_type": "ml.p3.2xlarge"})
    assert (
        "needs a CUDA 12 image (CUDA 13 dropped it), but the llamacpp image built from containers/llamacpp" in problem
    )
    assert problem.endswith("is built for CUDA 13.0.")


# --- the image ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "architectures"),
    [("ml.g5.2xlarge", "86"), ("ml.g6.xlarge", "89"), ("ml.p5.48xlarge", "90"), ("ml.g7e.2xlarge", "120")],
)
def test_cuda_architectures_follow_the_instance_types_compute_capability(instance_type, architectures):
    assert cuda_architectures(instance_type) == architectures


def test_an_unknown_instance_type_builds_for_every_catalog_architecture():
    assert cuda_architectures("ml.zz9.xlarge") == ALL_ARCHITECTURES
    assert cuda_architectures(None) == ALL_ARCHITECTURES


def test_default_image_is_built_for_llamacpp_and_pulled_for_the_dlc_engines():
    image = default_image(get_engine("llamacpp"), "ml.g5.2xlarge")
    assert isinstance(image, AssetImage)
    assert image.build_args == (("CUDA_ARCHITECTURES", "86"),)
    assert image.cuda == (13, 0) and image.is_pinned
    assert not isinstance(default_image(get_engine("vllm"), "ml.g5.2xlarge"), AssetImage)


def test_model_image_is_the_built_asset_with_the_gguf_model_path():
    stack, t = synth(max_model_len="16384", max_num_seqs="4", engine_env='{"LLAMA_ARG_FLASH_ATTN": "on"}')
    asset = stack.node.find_child(ASSET_ID)
    t.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "EnableNetworkIsolation": True,
            "PrimaryContainer": {
                "Image": {"Fn::Sub": Match.string_like_regexp(r"cdk-hnb659fds-container-assets-.*:[0-9a-f]{64}$")},
                "Environment": {
                    "LLAMA_ARG_MODEL": f"/opt/ml/model/{GGUF}",
                    "LLAMA_ARG_CTX_SIZE": "16384",
                    "LLAMA_ARG_N_PARALLEL": "4",
                    "LLAMA_ARG_FLASH_ATTN": "on",
                    "LLAMA_ARG_OFFLINE": "true",
                    "LLAMA_ARG_KV_UNIFIED": "true",
                },
            },
        },
    )
    assert asset.image_tag in str(t.find_resources("AWS::SageMaker::Model"))
    # CUDA 13 image: the inference AMI with the 580 driver.
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {"ProductionVariants": [Match.object_like({"InferenceAmiVersion": "al2023-ami-sagemaker-inference-gpu-4-1"})]},
    )


def test_the_asset_builds_containers_llamacpp_for_the_instance_gpu(tmp_path):
    app = build(outdir=str(tmp_path), **LLAMACPP)
    assembly = app.synth()
    (artifact,) = assembly.stacks
    manifest = (tmp_path / f"{artifact.stack_name}.assets.json").read_text()
    (image,) = json.loads(manifest)["dockerImages"].values()
    assert image["source"]["dockerBuildArgs"] == {"CUDA_ARCHITECTURES": "86"}
    assert image["source"]["platform"] == "linux/amd64"
    staged = tmp_path / image["source"]["directory"]
    assert sorted(p.name for p in staged.iterdir()) == sorted([".dockerignore", "Dockerfile", "serve.py"])
    assert (staged / "serve.py").read_text() == (ROOT / "containers" / "llamacpp" / "serve.py").read_text()


def test_execution_role_pulls_only_the_asset_repository(default_llamacpp):
    _, t = default_llamacpp
    policies = str(t.find_resources("AWS::IAM::Policy"))
    assert "cdk-hnb659fds-container-assets-" in policies
    assert "763104351884" not in policies


def test_image_uri_skips_the_build():
    stack, t = synth(image=ECR_URI)
    assert stack.node.try_find_child(ASSET_ID) is None
    t.has_resource_properties("AWS::SageMaker::Model", {"PrimaryContainer": Match.object_like({"Image": ECR_URI})})


def test_component_mode_serves_the_built_image_too():
    stack, t = synth(deployment_mode="inference-component")
    assert stack.node.try_find_child(ASSET_ID) is not None
    t.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "PrimaryContainer": Match.object_like(
                {"Environment": Match.object_like({"LLAMA_ARG_MODEL": f"/opt/ml/model/{GGUF}"})}
            )
        },
    )


def test_staging_copies_only_the_gguf_file_and_its_split_parts():
    _, t = synth()
    (staging,) = (
        t.find_resources("Custom::StagedCheckpoint").values()
        or t.find_resources("AWS::CloudFormation::CustomResource").values()
    )
    assert staging["Properties"]["Include"] == list(staging_patterns(GGUF))


# --- staging and the adapter agree on what the file is ------------------------------------------------

REPO_FILES = [
    "README.md",
    "Qwen3.6-35B-A3B-Q4_K_M.gguf",
    "Qwen3.6-35B-A3B-Q8_0.gguf",
    "mmproj-Qwen3.6-35B-A3B-F16.gguf",
    "Q6_K/Qwen3.6-35B-A3B-Q6_K-00001-of-00002.gguf",
    "Q6_K/Qwen3.6-35B-A3B-Q6_K-00002-of-00002.gguf",
]


def load_serve():
    spec = importlib.util.spec_from_file_location("llamacpp_serve_engine", ROOT / "containers/llamacpp/serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("gguf_file", "staged", "served"),
    [
        (GGUF, ["Qwen3.6-35B-A3B-Q4_K_M.gguf"], "Qwen3.6-35B-A3B-Q4_K_M.gguf"),
        (
            "Qwen3.6-35B-A3B-Q6_K.gguf",
            ["Q6_K/Qwen3.6-35B-A3B-Q6_K-00001-of-00002.gguf", "Q6_K/Qwen3.6-35B-A3B-Q6_K-00002-of-00002.gguf"],
            "Q6_K/Qwen3.6-35B-A3B-Q6_K-00001-of-00002.gguf",
        ),
        ("*Q8_0*.gguf", ["Qwen3.6-35B-A3B-Q8_0.gguf"], "Qwen3.6-35B-A3B-Q8_0.gguf"),
    ],
)
def test_staging_selects_the_file_the_adapter_then_serves(tmp_path, gguf_file, staged, served):
    patterns = staging_patterns(gguf_file)
    selected = [f for f in REPO_FILES if any(fnmatch.fnmatchcase(f, p) for p in patterns)]
    assert selected == staged
    for name in selected:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"GGUF")
    model_path = (
        get_engine("llamacpp").for_model_file(gguf_file).model_path_value.replace("/opt/ml/model", str(tmp_path))
    )
    assert load_serve().resolve_model(model_path) == tmp_path / served


def test_preflight_reads_the_gguf_file_the_endpoint_serves(default_llamacpp):
    _, t = default_llamacpp
    t.has_resource_properties("Custom::DeploymentPreflight", Match.object_like({"GgufFile": GGUF}))


def test_other_engines_give_the_preflight_no_gguf_file():
    _, t = synth(engine="vllm", gguf_file="", model_id="Qwen/Qwen3-4B-Instruct-2507", instance_type="ml.g6.xlarge")
    (preflight,) = t.find_resources("Custom::DeploymentPreflight").values()
    assert "GgufFile" not in preflight["Properties"]
