"""The LMI engine (DJL Serving with vLLM's async engine) as data: image, derived keys, defaults, guards.

The public configurations below are the environment blocks of AWS's SageMaker examples
(aws-samples/sagemaker-genai-hosting-examples, commit 80ee5eb, August 2026), each turned into context
alone: the model pointer (HF_MODEL_ID) becomes model_id, OPTION_TENSOR_PARALLEL_DEGREE, OPTION_MAX_MODEL_LEN
and OPTION_MAX_ROLLING_BATCH_SIZE become the typed parameters, OPTION_* keys go to engine_env and every
other variable to container_env. Every value must reach the Model's Environment exactly as written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk.assertions import Annotations, Match

from constructs_lib.catalog import resolve_instance
from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.endpoint_plan import plan_endpoint
from constructs_lib.engines import build_environment, engine_names, get_engine
from constructs_lib.images import ServingImage, cuda_of_tag, default_ami_for_cuda, recorded_tag_key, version_key
from endpoint_client import STREAM_FORMATS
from llmops.resolve_image import compatible_tags
from tests.conftest import build, context_with, stack_template

LMI = get_engine("lmi")
EXAMPLES = "aws-samples/sagemaker-genai-hosting-examples@80ee5eb"


def model_environment(template) -> dict[str, str]:
    (model,) = template.find_resources("AWS::SageMaker::Model").values()
    return model["Properties"]["PrimaryContainer"]["Environment"]


def model_image(template) -> str:
    (model,) = template.find_resources("AWS::SageMaker::Model").values()
    return json.dumps(model["Properties"]["PrimaryContainer"]["Image"])


# --- engine data -----------------------------------------------------------------------------------


def test_lmi_image_is_the_newest_pinned_djl_inference_tag_and_runs_on_cuda_13():
    image = ServingImage.from_dlc(LMI)
    assert (image.repository, image.tag) == ("djl-inference", "0.36.0-lmi28.0.0-cu130")
    assert image.is_pinned
    assert image.cuda == (13, 0)
    assert default_ami_for_cuda(image.cuda) == "al2023-ami-sagemaker-inference-gpu-4-1"
    # A floating re-release suffix and other djl-inference flavours are not LMI pins.
    for tag in ("0.36.0-lmi20.0.0-cu128-v1.0", "0.36.0-cpu-full", "0.33.0-tensorrtllm0.21.0-cu128"):
        assert not LMI.tag_pattern.match(tag)
    assert not ServingImage.from_dlc(LMI, "0.36.0-lmi20.0.0-cu128-v1.0").is_pinned


@pytest.mark.parametrize("name", engine_names())
def test_every_engines_data_is_usable(name):
    engine = get_engine(name)
    assert engine.stream_format in STREAM_FORMATS
    assert set(engine.default_env).isdisjoint(engine.protected_keys())
    if engine.image_build:  # built by CDK from containers/<engine>: its Dockerfile pins the sources and bases
        assert (Path(__file__).resolve().parents[2] / engine.image_build["directory"] / "Dockerfile").is_file()
        return
    assert {"version", "cuda"} <= set(engine.tag_pattern.groupindex)
    assert engine.tag_pattern.match(engine.default_tag), "the default tag must be a pin"
    assert version_key(engine.default_tag, engine.tag_pattern) is not None


def test_the_commands_read_the_same_stream_formats_without_loading_the_cdk():
    from llmops.engine_streams import stream_formats

    assert stream_formats() == {name: get_engine(name).stream_format for name in engine_names()}
    assert stream_formats()["lmi"] == "jsonlines"


def test_derived_keys_model_path_and_async_defaults():
    env, problems = build_environment(
        LMI, tensor_parallel_size=4, max_model_len=16384, max_num_seqs=32, engine_env={}, container_env={}
    )
    assert problems == []
    assert env == {
        "HF_MODEL_ID": "/opt/ml/model",
        "OPTION_TENSOR_PARALLEL_DEGREE": "4",
        "OPTION_MAX_MODEL_LEN": "16384",
        "OPTION_MAX_ROLLING_BATCH_SIZE": "32",
        "OPTION_ASYNC_MODE": "true",
        "OPTION_ROLLING_BATCH": "disable",
        "OPTION_ENTRYPOINT": "djl_python.lmi_vllm.vllm_async_service",
        "SERVING_FAIL_FAST": "true",
        "STANDARD_AUTO_INSTALL_REQ": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


@pytest.mark.parametrize(
    ("key", "where", "why"),
    [
        ("OPTION_TENSOR_PARALLEL_DEGREE", "engine_env", "derived from tensor_parallel_size"),
        ("OPTION_TENSOR_PARALLEL_SIZE", "engine_env", "derived from tensor_parallel_size"),
        ("TENSOR_PARALLEL_DEGREE", "container_env", "derived from tensor_parallel_size"),
        ("SM_NUM_GPUS", "container_env", "derived from tensor_parallel_size"),
        ("OPTION_MAX_MODEL_LEN", "engine_env", "derived from max_model_len"),
        ("OPTION_MAX_ROLLING_BATCH_SIZE", "engine_env", "derived from max_num_seqs"),
        ("OPTION_MAX_NUM_SEQS", "engine_env", "derived from max_num_seqs"),
        ("MAX_BATCH_SIZE", "container_env", "derived from max_num_seqs"),
        ("HF_MODEL_ID", "container_env", "the model path"),
        ("OPTION_MODEL_ID", "engine_env", "staged S3 prefix"),
        ("OPTION_MODEL", "engine_env", "staged S3 prefix"),
        ("OPTION_PIPELINE_PARALLEL_DEGREE", "engine_env", "pipeline parallelism"),
        ("HF_HUB_OFFLINE", "container_env", "set by the app"),
    ],
)
def test_derived_keys_and_their_aliases_are_refused_in_the_free_maps(key, where, why):
    maps = {"engine_env": {}, "container_env": {}}
    maps[where] = {key: "8"}
    env, problems = build_environment(LMI, tensor_parallel_size=1, max_model_len=None, max_num_seqs=None, **maps)
    (problem,) = problems
    assert f"{where} key {key!r} would override a setting the app derives" in problem and why in problem
    assert env.get(key) != "8"


def test_async_defaults_yield_to_the_users_value_which_passes_through_unchanged():
    env, problems = build_environment(
        LMI,
        tensor_parallel_size=1,
        max_model_len=None,
        max_num_seqs=None,
        engine_env={"OPTION_ROLLING_BATCH": "vllm", "OPTION_ASYNC_MODE": "false", "OPTION_ENFORCE_EAGER": True},
        container_env={"SERVING_FAIL_FAST": "false", "PYTHONHASHSEED": 0},
    )
    assert problems == []
    assert env["OPTION_ROLLING_BATCH"] == "vllm" and env["OPTION_ASYNC_MODE"] == "false"
    assert env["SERVING_FAIL_FAST"] == "false" and env["PYTHONHASHSEED"] == "0"
    # DJL passes 'true'/'false' on as --flag/--no-flag: a JSON boolean is written as that text, never dropped.
    assert env["OPTION_ENFORCE_EAGER"] == "true"
    assert env["OPTION_ENTRYPOINT"] == "djl_python.lmi_vllm.vllm_async_service"


def test_trusting_remote_code_warns_at_synth():
    plan = plan_endpoint(
        engine=LMI,
        image=ServingImage.from_dlc(LMI),
        instance_type="ml.g6e.2xlarge",
        engine_env={"OPTION_TRUST_REMOTE_CODE": "true"},
    )
    assert any(w.startswith("engine_env OPTION_TRUST_REMOTE_CODE lets the engine import") for w in plan.warnings)


def test_engine_flags_need_the_option_prefix_and_no_abbreviation_check_applies():
    _, problems = build_environment(
        LMI,
        tensor_parallel_size=1,
        max_model_len=None,
        max_num_seqs=None,
        # DJL hands vLLM only exact EngineArgs names, so a prefix of a derived key is no abbreviation.
        engine_env={"OPTION_MAX_MODEL": "1", "SM_VLLM_MAX_NUM_SEQS": "8"},
        container_env={"OPTION_DTYPE": "bf16"},
    )
    assert len(problems) == 2
    assert "engine_env key 'SM_VLLM_MAX_NUM_SEQS' does not start with 'OPTION_'" in problems[0]
    assert "container_env key 'OPTION_DTYPE' starts with 'OPTION_'" in problems[1]


def test_preflight_reads_lmis_memory_flags():
    settings = LMI.preflight_settings({"OPTION_GPU_MEMORY_UTILIZATION": 0.85, "OPTION_KV_CACHE_DTYPE": "fp8"})
    assert settings == {"gpu_memory_utilization": 0.85, "kv_cache_dtype": "fp8"}
    template = stack_template(
        engine="lmi",
        instance_type="ml.g6e.2xlarge",
        # Written as text, the way every public example writes it.
        engine_env=json.dumps({"OPTION_GPU_MEMORY_UTILIZATION": "0.85", "OPTION_KV_CACHE_DTYPE": "fp8"}),
    )
    template.has_resource_properties(
        "Custom::DeploymentPreflight", Match.object_like({"GpuMemoryUtilization": "0.85", "KvCacheDtype": "fp8"})
    )


def test_weight_formats_lmi_states_are_checked_against_the_gpu():
    # LMI names the dtype bf16 and runtime quantization OPTION_QUANTIZE (vllm_user_guide.md).
    with pytest.raises(ConfigError, match=r"engine_env OPTION_DTYPE=bf16: .*ml.g4dn.12xlarge"):
        DeploymentConfig.from_context(
            context_with(engine="lmi", instance_type="ml.g4dn.12xlarge", engine_env='{"OPTION_DTYPE": "bf16"}')
        )
    plan = plan_endpoint(
        engine=LMI,
        image=ServingImage.from_dlc(LMI),
        instance_type="ml.g5.2xlarge",
        engine_env={"OPTION_QUANTIZE": "fp8"},
    )
    assert plan.errors == []
    assert any(w.startswith("engine_env OPTION_QUANTIZE=fp8: ") for w in plan.warnings)


# --- pinned tags and resolve_image -------------------------------------------------------------------

LMI_TAGS = [
    "0.36.0-lmi28.0.0-cu130",
    "0.36.0-lmi27.0.0-cu130-v1.1",  # a re-release suffix: not a pin
    "0.36.0-lmi22.0.0-cu129",
    "0.36.0-lmi18.0.0-cu128",
    "0.29.0-lmi11.0.0-cu124",  # lmi11 < lmi28 numerically, though "11" > "1" as text
    "0.36.0-cpu-full",
    "0.33.0-tensorrtllm0.21.0-cu128",
    "latest",
]


def test_resolve_image_sorts_lmi_tags_by_lmi_version_and_filters_by_cuda():
    ada, _ = resolve_instance("ml.g6e.xlarge")
    volta, _ = resolve_instance("ml.p3.2xlarge")
    assert compatible_tags(LMI_TAGS, ada, LMI.tag_pattern) == [
        "0.36.0-lmi28.0.0-cu130",
        "0.36.0-lmi22.0.0-cu129",
        "0.36.0-lmi18.0.0-cu128",
        "0.29.0-lmi11.0.0-cu124",
    ]
    # CUDA 13 dropped Volta: the newest LMI it can run is the cu129 build.
    assert compatible_tags(LMI_TAGS, volta, LMI.tag_pattern)[0] == "0.36.0-lmi22.0.0-cu129"
    assert cuda_of_tag("0.36.0-lmi22.0.0-cu129") == (12, 9)


def test_a_recorded_lmi_tag_is_used_and_a_vllm_style_tag_for_lmi_is_refused():
    key = recorded_tag_key("lmi", "ml.g6e.2xlarge")
    config = DeploymentConfig.from_context(
        context_with(engine="lmi", instance_type="ml.g6e.2xlarge", **{key: "0.36.0-lmi22.0.0-cu129"})
    )
    assert config.serving_image == ServingImage(repository="djl-inference", tag="0.36.0-lmi22.0.0-cu129")
    with pytest.raises(ConfigError, match=r"not a pinned DLC tag \(<djl>-lmi<N.N.N>-cuNNN"):
        DeploymentConfig.from_context(
            context_with(
                engine="lmi",
                instance_type="ml.g6e.2xlarge",
                **{key: "0.27.1-gpu-py312-cu130-ubuntu22.04-sagemaker"},
            )
        )


def test_an_lmi_image_for_blackwell_must_be_cuda_13():
    with pytest.raises(ConfigError, match=r"ml.g7e.2xlarge.*needs a CUDA 13 \(cu130\) image.*lmi18.0.0-cu128"):
        DeploymentConfig.from_context(
            context_with(
                engine="lmi",
                instance_type="ml.g7e.2xlarge",
                image="763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.36.0-lmi18.0.0-cu128",
            )
        )


# --- model-loading timeout against the health-check timeout -----------------------------------------


def lmi_plan(startup_timeout_s: int, **env):
    engine_env = {k: v for k, v in env.items() if k.startswith("OPTION_")}
    container_env = {k: v for k, v in env.items() if not k.startswith("OPTION_")}
    return plan_endpoint(
        engine=LMI,
        image=ServingImage.from_dlc(LMI),
        instance_type="ml.g6e.2xlarge",
        startup_timeout_s=startup_timeout_s,
        engine_env=engine_env,
        container_env=container_env,
    )


def test_a_loading_timeout_longer_than_the_health_check_is_refused():
    plan = lmi_plan(1200, OPTION_MODEL_LOADING_TIMEOUT="1500")
    (error,) = plan.errors
    assert error.startswith("OPTION_MODEL_LOADING_TIMEOUT=1500 is longer than startup_timeout_s=1200")
    assert "set OPTION_MODEL_LOADING_TIMEOUT to at most 1200" in error
    # SageMaker's own variable is translated to the same setting by DJL Serving.
    (error,) = lmi_plan(900, SAGEMAKER_STARTUP_TIMEOUT="1000").errors
    assert error.startswith("SAGEMAKER_STARTUP_TIMEOUT=1000 is longer than startup_timeout_s=900")
    (error,) = lmi_plan(900, OPTION_MODEL_LOADING_TIMEOUT="soon").errors
    assert error == "OPTION_MODEL_LOADING_TIMEOUT='soon' is not a number of seconds."


def test_a_loading_timeout_that_fits_passes_as_text():
    plan = lmi_plan(1800, OPTION_MODEL_LOADING_TIMEOUT="1500")
    assert plan.errors == [] and plan.environment["OPTION_MODEL_LOADING_TIMEOUT"] == "1500"
    assert not any("waits up to" in w for w in plan.warnings)


def test_the_images_default_loading_timeout_over_the_health_check_only_warns():
    plan = lmi_plan(600)
    assert plan.errors == []
    (warning,) = [w for w in plan.warnings if "waits up to" in w]
    assert "lmi waits up to 1200 s for the model to load (the image's MODEL_LOADING_TIMEOUT)" in warning
    assert lmi_plan(1200).warnings == []
    # Engines without such a setting are never checked.
    vllm = plan_endpoint(
        engine=get_engine("vllm"),
        image=ServingImage.from_dlc(get_engine("vllm")),
        instance_type="ml.g6e.2xlarge",
        startup_timeout_s=60,
    )
    assert vllm.errors == [] and not any("waits up to" in w for w in vllm.warnings)


def test_the_loading_timeout_guard_fails_synth_naming_the_key():
    with pytest.raises(ConfigError, match=r"OPTION_MODEL_LOADING_TIMEOUT=3000 is longer than startup_timeout_s=1200"):
        build(engine="lmi", instance_type="ml.g6e.2xlarge", engine_env='{"OPTION_MODEL_LOADING_TIMEOUT": "3000"}')


# --- the done-when synth, both modes ------------------------------------------------------------------


def test_standard_mode_serves_lmi_with_derived_keys_and_a_jsonlines_smoke_test():
    template = stack_template(engine="lmi", instance_type="ml.g6e.12xlarge", max_model_len=16384)
    env = model_environment(template)
    assert env["OPTION_TENSOR_PARALLEL_DEGREE"] == "4" and env["OPTION_MAX_MODEL_LEN"] == "16384"
    assert env["HF_MODEL_ID"] == "/opt/ml/model"
    assert "/djl-inference:0.36.0-lmi28.0.0-cu130" in model_image(template)
    template.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "ProductionVariants": [
                Match.object_like(
                    {
                        "InstanceType": "ml.g6e.12xlarge",
                        "InferenceAmiVersion": "al2023-ami-sagemaker-inference-gpu-4-1",
                    }
                )
            ]
        },
    )
    template.has_resource_properties("Custom::EndpointSmokeTest", Match.object_like({"StreamFormat": "jsonlines"}))


def test_component_mode_serves_lmi_with_derived_keys_and_a_jsonlines_smoke_test():
    template = stack_template(
        engine="lmi", instance_type="ml.g6e.12xlarge", max_model_len=16384, deployment_mode="inference-component"
    )
    env = model_environment(template)
    assert env["OPTION_TENSOR_PARALLEL_DEGREE"] == "4" and env["OPTION_MAX_MODEL_LEN"] == "16384"
    assert "/djl-inference:0.36.0-lmi28.0.0-cu130" in model_image(template)
    template.has_resource_properties(
        "AWS::SageMaker::InferenceComponent",
        {
            "Specification": Match.object_like(
                {"ComputeResourceRequirements": Match.object_like({"NumberOfAcceleratorDevicesRequired": 4})}
            )
        },
    )
    template.has_resource_properties("Custom::EndpointSmokeTest", Match.object_like({"StreamFormat": "jsonlines"}))


def test_sse_engines_keep_their_smoke_test_properties():
    template = stack_template()
    (smoke,) = template.find_resources("Custom::EndpointSmokeTest").values()
    assert "StreamFormat" not in smoke["Properties"]


# --- public LMI configurations, by context alone ------------------------------------------------------

PUBLIC_CONFIGS = {
    # 01-models/Qwen/Qwen3-30B-A3B/Qwen3-30B-A3B-LMI.ipynb: weights from an S3 prefix, no HF_MODEL_ID.
    "qwen3-30b-a3b": {
        "context": {"instance_type": "ml.g5.24xlarge", "max_num_seqs": 8, "startup_timeout_s": 3600},
        "env": {
            "SAGEMAKER_MODEL_SERVER_WORKERS": "1",
            "MESSAGES_API_ENABLED": "true",
            "OPTION_MAX_ROLLING_BATCH_SIZE": "8",
            "OPTION_MODEL_LOADING_TIMEOUT": "1500",
            "SERVING_FAIL_FAST": "true",
            "OPTION_ROLLING_BATCH": "disable",
            "OPTION_ASYNC_MODE": "true",
            "OPTION_ENTRYPOINT": "djl_python.lmi_vllm.vllm_async_service",
            "OPTION_ENABLE_STREAMING": "true",
        },
    },
    # 01-models/Qwen/Qwen3.6/Qwen3.6-27B.ipynb, the LMI cell.
    "qwen3.6-27b": {
        "context": {
            "model_id": "Qwen/Qwen3.6-27B",
            "instance_type": "ml.g6e.12xlarge",
            "tensor_parallel_size": 4,
            "max_model_len": 32768,
            "startup_timeout_s": 900,
        },
        "env": {
            "SERVING_FAIL_FAST": "true",
            "OPTION_ASYNC_MODE": "true",
            "OPTION_TENSOR_PARALLEL_DEGREE": "4",
            "OPTION_MAX_MODEL_LEN": "32768",
            "OPTION_ENABLE_AUTO_TOOL_CHOICE": "true",
            "OPTION_TOOL_CALL_PARSER": "qwen3_coder",
            "OPTION_REASONING_PARSER": "qwen3",
            "OPTION_SPECULATIVE_CONFIG": json.dumps({"method": "mtp", "num_speculative_tokens": 3}),
        },
    },
    # 01-models/openai/gpt-oss/openai_gpt_oss.ipynb, the LMI cell (an inference component).
    "gpt-oss-120b": {
        "context": {
            "model_id": "openai/gpt-oss-120b",
            "instance_type": "ml.g6e.12xlarge",
            "deployment_mode": "inference-component",
            "accelerators_per_copy": 4,
            "max_model_len": 16384,
            "startup_timeout_s": 600,
        },
        "env": {
            "SERVING_FAIL_FAST": "true",
            "OPTION_ASYNC_MODE": "true",
            "OPTION_ROLLING_BATCH": "disable",
            "OPTION_ENTRYPOINT": "djl_python.lmi_vllm.vllm_async_service",
            "OPTION_TENSOR_PARALLEL_DEGREE": "4",
            "OPTION_MAX_MODEL_LEN": "16384",
            "OPTION_TRUST_REMOTE_CODE": "true",
        },
    },
    # 02-engines/LMI/LMIv18/LMI_v18.ipynb, the LoRA cell.
    "phi-4-mini-lora": {
        "context": {
            "model_id": "microsoft/Phi-4-mini-instruct",
            "instance_type": "ml.g6e.4xlarge",
            "tensor_parallel_size": 1,
            "max_model_len": 16384,
            "startup_timeout_s": 600,
        },
        "env": {
            "SERVING_FAIL_FAST": "true",
            "OPTION_ASYNC_MODE": "true",
            "OPTION_ROLLING_BATCH": "disable",
            "OPTION_TENSOR_PARALLEL_DEGREE": "1",
            "OPTION_ENTRYPOINT": "djl_python.lmi_vllm.vllm_async_service",
            "OPTION_MAX_MODEL_LEN": "16384",
            "OPTION_TRUST_REMOTE_CODE": "true",
            "OPTION_ENABLE_LORA": "true",
            "OPTION_MAX_LORAS": "4",
            "OPTION_MAX_CPU_LORAS": "8",
            "OPTION_MAX_LORA_RANK": "64",
        },
    },
    # 02-engines/LMI/LMIv18/LMI_v18.ipynb, the LMCache cell.
    "qwen3-8b-lmcache": {
        "context": {
            "model_id": "Qwen/Qwen3-8B",
            "instance_type": "ml.g6e.2xlarge",
            "tensor_parallel_size": 1,
            "max_model_len": 16384,
            "startup_timeout_s": 600,
        },
        "env": {
            "SERVING_FAIL_FAST": "true",
            "OPTION_ASYNC_MODE": "true",
            "OPTION_ROLLING_BATCH": "disable",
            "OPTION_TENSOR_PARALLEL_DEGREE": "1",
            "OPTION_ENTRYPOINT": "djl_python.lmi_vllm.vllm_async_service",
            "OPTION_MAX_MODEL_LEN": "16384",
            "OPTION_LMCACHE_AUTO_CONFIG": "true",
            "PYTHONHASHSEED": "0",
        },
    },
    # 01-models/Kimi/LMI/kimi-k2.5.ipynb (an inference component on ml.p5e.48xlarge).
    "kimi-k2.5": {
        "context": {
            "model_id": "moonshotai/Kimi-K2.5",
            "instance_type": "ml.p5e.48xlarge",
            "deployment_mode": "inference-component",
            "accelerators_per_copy": 8,
            "max_model_len": 262000,
            "startup_timeout_s": 2600,
        },
        "env": {
            "SERVING_FAIL_FAST": "true",
            "OPTION_ASYNC_MODE": "true",
            "OPTION_ROLLING_BATCH": "disable",
            "OPTION_ENTRYPOINT": "djl_python.lmi_vllm.vllm_async_service",
            "OPTION_TENSOR_PARALLEL_DEGREE": "8",
            "OPTION_MAX_MODEL_LEN": "262000",
            "OPTION_TRUST_REMOTE_CODE": "true",
            "OPTION_ENABLE_AUTO_TOOL_CHOICE": "true",
            "OPTION_TOOL_CALL_PARSER": "kimi_k2",
        },
    },
}
DERIVED = {"OPTION_TENSOR_PARALLEL_DEGREE", "OPTION_MAX_MODEL_LEN", "OPTION_MAX_ROLLING_BATCH_SIZE"}


@pytest.mark.parametrize("name", sorted(PUBLIC_CONFIGS))
def test_public_lmi_configuration_synthesizes_by_context_alone(name):
    example = PUBLIC_CONFIGS[name]
    free = {k: v for k, v in example["env"].items() if k not in DERIVED}
    context = {
        "engine": "lmi",
        **{k: str(v) for k, v in example["context"].items()},
        "engine_env": json.dumps({k: v for k, v in free.items() if k.startswith("OPTION_")}),
        "container_env": json.dumps({k: v for k, v in free.items() if not k.startswith("OPTION_")}),
    }
    app = build(**context)
    (stack,) = [c for c in app.node.children if c.node.id == "LlmEndpoint"]
    from aws_cdk.assertions import Template

    env = model_environment(Template.from_stack(stack))
    for key, value in example["env"].items():
        assert env[key] == value, f"{EXAMPLES} {name}: {key}"
    assert env["HF_MODEL_ID"] == "/opt/ml/model"
    Annotations.from_stack(stack).has_no_error("*", Match.any_value())
