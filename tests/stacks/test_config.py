"""Context -> DeploymentConfig: types, ranges, unknown keys and cross-key guards, all in one message."""

from __future__ import annotations

import json
import re

import pytest

from constructs_lib.deployment.config import FIELDS, ConfigError, DeploymentConfig
from tests.conftest import ROOT, context_with, default_context


def load(**overrides):
    return DeploymentConfig.from_context(context_with(**overrides))


def problems_of(**overrides) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(**overrides)
    return info.value.problems


def test_defaults_parse_into_typed_values():
    config = load()
    assert config.model_id == "Qwen/Qwen3-4B-Instruct-2507"
    assert config.engine == "vllm"
    assert config.instance_type == "ml.g6.xlarge"
    assert config.instance_count == 1
    assert config.tensor_parallel_size is None
    assert config.max_model_len == 32768
    assert config.model_s3_uri is None and config.image is None
    assert config.serving_image.repository == "vllm"
    assert config.image_source.startswith("engine default")


def test_every_field_has_a_default_in_cdk_json():
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    assert set(FIELDS) <= set(context)


def test_cli_text_values_are_coerced():
    config = load(
        instance_count="2",
        instance_type="ml.g9.12xlarge",
        gpu_count="4",
        tensor_parallel_size="4",
        max_num_seqs="64",
        gpu_memory_gib="44.5",
        engine_env='{"SM_VLLM_ENABLE_PREFIX_CACHING": true}',
        container_env="",
        endpoint_name="null",
        startup_timeout_s="600",
    )
    assert config.instance_count == 2
    assert config.tensor_parallel_size == 4
    assert config.max_num_seqs == 64
    assert config.gpu_memory_gib == 44.5
    assert config.engine_env == {"SM_VLLM_ENABLE_PREFIX_CACHING": True}
    assert config.container_env == {}
    assert config.endpoint_name is None
    assert config.startup_timeout_s == 600


def test_unknown_key_suggests_the_closest_valid_key():
    (problem,) = problems_of(max_num_seq="3")
    assert problem == "max_num_seq: unknown context key; did you mean 'max_num_seqs'?"


def test_unknown_key_without_close_match_lists_known_keys():
    (problem,) = problems_of(flavour="x")
    assert problem.startswith("flavour: unknown context key; known keys: accelerators_per_copy, alarm_5xx_percent, ")


def test_misspelt_map_key_never_echoes_its_value():
    (problem,) = problems_of(**{"container-env": '{"HF_TOKEN": "hf_SECRET123"}'})
    assert problem == "container-env: unknown context key; did you mean 'container_env'?"


def test_cdk_own_context_keys_are_not_ours_to_check():
    context = default_context()
    context.update({"@aws-cdk/core:newStyleStackSynthesis": True, "aws:cdk:enable-path-metadata": True})
    context["availability-zones:account=1:region=x"] = ["a"]
    assert DeploymentConfig.from_context(context).engine == "vllm"


def test_other_keys_with_a_colon_are_not_silently_ignored():
    (problem,) = problems_of(**{"foo:bar": "1"})
    assert problem.startswith("foo:bar: unknown context key")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"SM_VLLM_X": 1, "SM_VLLM_X": 2}', "the key(s) SM_VLLM_X appear more than once"),
        ('{"SM_VLLM_X": NaN}', "NaN is not a number JSON allows"),
        ('{"SM_VLLM_X": Infinity}', "Infinity is not a number JSON allows"),
    ],
)
def test_json_maps_refuse_duplicates_and_non_numbers(raw, message):
    (problem,) = problems_of(engine_env=raw)
    assert problem.startswith("engine_env=<") and message in problem


def test_overflowing_number_is_refused():
    (problem,) = problems_of(engine_env='{"SM_VLLM_GPU_MEMORY_UTILIZATION": 1e999}')
    assert "has the value inf; give a finite number" in problem


@pytest.mark.parametrize("name", ["a..b", "192.168.1.1", "Bad_Bucket", "ab", "-abc"])
def test_bucket_names_are_checked_before_cdk_sees_them(name):
    (problem,) = problems_of(model_bucket=name)
    assert problem.startswith(f"model_bucket={name!r}: expected an existing S3 bucket name (3-63 lower-case")
    (problem,) = problems_of(model_s3_uri=f"s3://{name}/models/x/")
    assert f"{name!r} is not a valid S3 bucket name" in problem


@pytest.mark.parametrize("uri", ["s3://my-bucket/*", "s3://my-bucket/models/?/", "s3://my-bucket/${aws:username}/"])
def test_prefix_wildcards_that_would_widen_iam_are_refused(uri):
    (problem,) = problems_of(model_s3_uri=uri)
    assert "which IAM would read as a wildcard or variable" in problem


def test_wrong_engine_names_key_value_and_allowed():
    (problem,) = problems_of(engine="foo")
    assert problem == "engine='foo': not allowed; allowed: llamacpp, lmi, sglang, vllm"


def test_tensor_parallel_size_must_match_the_gpu_count():
    (problem,) = problems_of(instance_type="ml.g6e.12xlarge", tensor_parallel_size="3")
    assert "tensor_parallel_size=3" in problem
    assert "instance_type='ml.g6e.12xlarge', which has 4 GPU(s); allowed: 4" in problem


def test_all_problems_are_reported_together():
    problems = problems_of(
        engine="foo",
        instance_type="ml.g6e.12xlarge",
        tensor_parallel_size="3",
        instance_count="two",
        startup_timeout_s="30",
        max_num_seq="1",
    )
    text = "\n".join(problems)
    assert len(problems) == 5
    for fragment in (
        "max_num_seq:",
        "engine='foo'",
        "instance_count='two'",
        "startup_timeout_s='30'",
        "tensor_parallel",
    ):
        assert fragment in text
    assert str(ConfigError(problems)).count("\n  - ") == 5  # one line per problem, after the count


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("instance_count", "0", "instance_count='0': out of range; allowed: 1 to 100"),
        ("instance_count", True, "instance_count=True: expected an integer from 1 to 100"),
        ("instance_count", "1.5", "instance_count='1.5': expected an integer from 1 to 100"),
        ("max_model_len", 0, "max_model_len=0: out of range; allowed: 1 to 16777216"),
        ("startup_timeout_s", 3601, "startup_timeout_s=3601: out of range; allowed: 60 to 3600"),
        ("download_timeout_s", "59", "download_timeout_s='59': out of range; allowed: 60 to 3600"),
        ("gpu_memory_gib", "lots", "gpu_memory_gib='lots': expected a number from 0 to 1024"),
        ("engine_env", "[1, 2]", "engine_env=<6 characters, not echoed>: expected a JSON object"),
        ("model_id", "not a repo!", "model_id='not a repo!': expected a Hugging Face repository id"),
        ("instance_type", "g6.xlarge", "instance_type='g6.xlarge': expected a SageMaker instance type"),
        ("stack_name", "1stack", "stack_name='1stack': expected a CloudFormation stack name"),
        ("inference_ami_version", "al2-foo", "inference_ami_version='al2-foo': not allowed; allowed: al2-ami-"),
    ],
)
def test_wrong_types_and_ranges(key, value, message):
    problems = problems_of(**{key: value})
    assert any(p.startswith(message) for p in problems), problems


def test_invalid_json_is_reported_without_echoing_the_text():
    (problem,) = problems_of(container_env='{HF_TOKEN: "hf_secret"}')
    assert problem.startswith("container_env=<23 characters, not echoed>: not valid JSON")
    assert "hf_secret" not in problem


def test_secret_in_container_env_is_refused():
    (problem,) = problems_of(container_env='{"HF_TOKEN": "hf_secret"}')
    assert "container_env key 'HF_TOKEN' looks like a secret" in problem
    assert "hf_secret" not in problem


def test_derived_key_in_engine_env_is_refused():
    (problem,) = problems_of(engine="sglang", engine_env='{"SM_SGLANG_TENSOR_PARALLEL_SIZE": 2}')
    assert "would override a setting the app derives (derived from tensor_parallel_size)" in problem


def test_unknown_instance_type_needs_explicit_gpu_facts():
    (problem,) = problems_of(instance_type="ml.g9.xlarge")
    assert "instance_type='ml.g9.xlarge' is not in the GPU instance catalog" in problem
    assert "gpu_count and gpu_memory_gib" in problem
    config = load(instance_type="ml.g9.xlarge", gpu_count="2", gpu_memory_gib="64")
    assert config.gpu_count == 2


def test_unknown_instance_type_close_to_a_known_one_gets_a_suggestion():
    (problem,) = problems_of(instance_type="ml.g6e.xlarg")
    assert "Did you mean ml.g6e.xlarge" in problem


def test_model_source_options_exclude_each_other_and_are_checked():
    (problem,) = problems_of(model_s3_uri="s3://bucket-a/models/x/", model_bucket="bucket-b")
    assert "give at most one" in problem
    (problem,) = problems_of(model_s3_uri="s3://bucket-a")
    assert problem.startswith("model_s3_uri=") and "expected s3://<bucket>/<prefix>/" in problem
    (problem,) = problems_of(model_s3_uri="s3://bucket-a/")
    assert "the prefix is empty" in problem
    assert load(model_s3_uri="s3://bucket-a/models/x").model_s3_uri == "s3://bucket-a/models/x"


def test_image_override_is_parsed_and_checked():
    uri = "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-vllm:0.27.1-gpu-py312-cu130-ubuntu22.04-sagemaker"
    config = load(image=uri)
    assert config.serving_image.source_uri == uri
    assert config.image_source == "image context key"
    (problem,) = problems_of(image="vllm/vllm-openai:latest")
    assert problem.startswith("image='vllm/vllm-openai:latest' is not an ECR image URI")


def test_cuda13_image_refuses_an_older_inference_ami():
    (problem,) = problems_of(inference_ami_version="al2-ami-sagemaker-inference-gpu-3-1")
    assert "ships CUDA 12.4" in problem and "built for CUDA 13.0" in problem
    assert "allowed: al2023-ami-sagemaker-inference-gpu-4-1" in problem


def test_blackwell_instance_refuses_a_cuda12_image():
    image = "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.10.2-gpu-py312-cu129-ubuntu22.04-sagemaker"
    (problem,) = problems_of(instance_type="ml.g7e.2xlarge", image=image)
    assert "needs a CUDA 13 (cu130) image" in problem and "CUDA 12.9" in problem


def test_volta_instance_refuses_a_cuda13_image():
    (problem,) = problems_of(instance_type="ml.p3.2xlarge")
    assert "needs a CUDA 12 image" in problem


def test_endpoint_name_and_reservation_arn_are_checked():
    problems = problems_of(endpoint_name="bad_name", capacity_reservation_arn="reservation-1")
    assert any(p.startswith("endpoint_name='bad_name' is not a valid SageMaker endpoint name") for p in problems)
    assert any(p.startswith("capacity_reservation_arn='reservation-1' is not") for p in problems)


def test_unknown_secret_looking_key_is_not_echoed():
    (problem,) = problems_of(HF_TOKEN="hf_abcdef123")
    assert problem.startswith("HF_TOKEN: unknown context key; Secrets never go into")
    assert "hf_abcdef123" not in problem


@pytest.mark.parametrize("recorded", ["latest", 42, "server-sagemaker-cuda-v2.3"])
def test_a_recorded_tag_that_is_not_a_pin_is_refused(recorded):
    from constructs_lib.images import recorded_tag_key

    key = recorded_tag_key("vllm", "ml.g6.xlarge")
    with pytest.raises(ConfigError) as info:
        DeploymentConfig.from_context({**default_context(), key: recorded})
    (problem,) = info.value.problems
    assert problem.startswith(f"{key}={recorded!r} in cdk.context.json is not a pinned DLC tag")
    assert "npx cdk context --reset" in problem


def test_model_kms_key_only_with_a_given_bucket():
    arn = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    (problem,) = problems_of(model_kms_key_arn=arn)
    assert problem.startswith(f"model_kms_key_arn={arn!r}: only for a given bucket")
    assert load(model_bucket="my-models", model_kms_key_arn=arn).model_kms_key_arn == arn
    (problem,) = problems_of(model_bucket="my-models", model_kms_key_arn="alias/mine")
    assert problem.startswith(
        "model_kms_key_arn='alias/mine': expected the key ARN arn:aws:kms:<region>:<account>:key/<key-id>"
    )


def test_endpoint_name_longer_than_63_characters_is_refused():
    name = "a" + "-" * 70 + "b"
    (problem,) = problems_of(endpoint_name=name)
    assert problem.startswith(f"endpoint_name={name!r} is not a valid SageMaker endpoint name")


def test_a_conflict_with_a_recorded_tag_names_the_recorded_key_not_image():
    from constructs_lib.images import recorded_tag_key

    key = recorded_tag_key("vllm", "ml.g7e.2xlarge")
    context = {**context_with(instance_type="ml.g7e.2xlarge"), key: "0.9.0-gpu-py312-cu128-ubuntu22.04-sagemaker"}
    with pytest.raises(ConfigError) as info:
        DeploymentConfig.from_context(context)
    (problem,) = info.value.problems
    assert f"the tag recorded under {key} in cdk.context.json" in problem
    assert f"npx cdk context --reset {key}" in problem
    assert "image=" not in problem


def test_default_image_is_named_as_the_engine_default_in_warnings_and_errors():
    (problem,) = problems_of(instance_type="ml.p3.2xlarge")
    assert "the default image of engine vllm 'vllm:0.27.1-gpu-py312-cu130" in problem


def test_staging_keys_parse_from_cdk_json_and_cli_text():
    config = load()
    assert config.include == () and config.exclude == ("original/*",)
    assert config.hf_token_secret_arn is None
    assert (config.staging_instance_type, config.staging_max_instances) == ("ml.m5.2xlarge", 4)
    config = load(
        include='["*.json", "*.safetensors"]',
        exclude="[]",
        hf_token_secret_arn="arn:aws:secretsmanager:eu-west-1:123456789012:secret:hf-token-AbCdEf",
        staging_max_instances="10",
        staging_max_runtime_s="36000",
    )
    assert config.include == ("*.json", "*.safetensors") and config.exclude == ()
    assert config.hf_token_secret_arn.endswith(":secret:hf-token-AbCdEf")
    assert (config.staging_max_instances, config.staging_max_runtime_s) == (10, 36000)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("include", "*.json", r"^include='\*\.json': not valid JSON .* expected a JSON array"),
        ("include", '{"a": 1}', r"^include=.*expected a JSON array of non-empty glob patterns"),
        ("exclude", '["ok", ""]', r"^exclude=.*non-empty glob patterns"),
        ("staging_max_instances", "0", r"^staging_max_instances='0': out of range; allowed: 1 to 100"),
        ("staging_max_runtime_s", "50000", r"^staging_max_runtime_s='50000': out of range; allowed: 60 to 42300"),
        ("staging_instance_type", "m5.large", r"^staging_instance_type='m5.large': expected a SageMaker Processing"),
    ],
)
def test_staging_keys_name_key_value_and_what_is_allowed(key, value, message):
    (problem,) = problems_of(**{key: value})
    assert re.match(message, problem), problem


def test_a_token_pasted_as_the_secret_arn_is_refused_and_never_echoed():
    token = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    (problem,) = problems_of(hf_token_secret_arn=token)
    assert problem.startswith("hf_token_secret_arn=<") and "the ARN of a Secrets Manager secret" in problem
    assert token not in problem


def test_staging_options_do_not_combine_with_a_given_prefix():
    (problem,) = problems_of(model_s3_uri="s3://my-models/custom/", include='["*.gguf"]')
    assert "model_s3_uri='s3://my-models/custom/'" in problem and "include" in problem


def test_component_mode_keys_parse():
    config = load(
        deployment_mode="inference-component",
        scale_to_zero="true",
        instance_type="ml.g6e.12xlarge",
        accelerators_per_copy="2",
        max_copies="2",
        max_instances="2",  # (2 copies + an update batch of 1) x 2 GPUs need 2 instances of 4 GPUs
        target_concurrency="4",
        routing_strategy="LEAST_OUTSTANDING_REQUESTS",
        component_name="qwen-chat",
    )
    assert config.deployment_mode == "inference-component" and config.scale_to_zero is True
    assert config.tensor_parallel_size == 2  # a copy's GPUs are its tensor parallel size
    assert (config.max_copies, config.max_instances, config.target_concurrency) == (2, 2, 4.0)
    assert load().deployment_mode == "standard" and load().scale_to_zero is False


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"deployment_mode": "serverless"}, "deployment_mode='serverless': not allowed; allowed: standard, "),
        ({"scale_to_zero": "yes"}, "scale_to_zero='yes': expected true or false"),
        ({"scale_to_zero": "true"}, "scale_to_zero"),  # standard mode cannot scale to zero
        ({"routing_strategy": "ROUND_ROBIN"}, "routing_strategy='ROUND_ROBIN': not allowed"),
        (
            {"deployment_mode": "inference-component", "instance_type": "ml.g6e.2xlarge", "accelerators_per_copy": "2"},
            "accelerators_per_copy",
        ),
        ({"component_name": "x"}, "component_name='x': only with deployment_mode=inference-component"),
        ({"deployment_mode": "inference-component", "component_name": "-bad-"}, "component_name='-bad-'"),
    ],
)
def test_component_mode_guards_name_the_key(overrides, expected):
    problems = problems_of(**overrides)
    assert any(expected in p for p in problems), problems


def test_component_mode_allows_fewer_gpus_per_copy_than_the_instance_has():
    config = load(deployment_mode="inference-component", instance_type="ml.g6e.12xlarge", tensor_parallel_size="1")
    assert config.tensor_parallel_size == 1
    (problem,) = problems_of(instance_type="ml.g6e.12xlarge", tensor_parallel_size="1")
    assert "tensor_parallel_size=1 does not match" in problem


def test_smoke_keys_are_checked():
    config = load(smoke_inputs='{"temperature": 0}', smoke_budget_s="900", smoke_test="false")
    assert config.smoke_inputs == {"temperature": 0} and config.smoke_budget_s == 900 and not config.smoke_test
    problems = problems_of(
        smoke_inputs='{"stream": false, "messages": []}', smoke_expected_pattern="(", smoke_budget_s="5"
    )
    assert any(p.startswith("smoke_inputs: sets messages, stream, which the smoke test sends itself") for p in problems)
    assert any(p.startswith("smoke_expected_pattern='(': not a Python regular expression") for p in problems)
    assert any(p.startswith("smoke_budget_s='5': out of range; allowed: 60 to 2700") for p in problems)


def test_preflight_keys_are_checked():
    config = load(preflight_skip='["quota", "memory"]', allow_unverified_s3="true")
    assert config.preflight_skip == ("quota", "memory") and config.allow_unverified_s3
    problems = problems_of(
        preflight_skip='["quotas"]',
        engine_env='{"SM_VLLM_KV_CACHE_DTYPE": "int3", "SM_VLLM_GPU_MEMORY_UTILIZATION": 1.5}',
    )
    assert any(p.startswith("preflight_skip='[\"quotas\"]': unknown check(s) 'quotas'; allowed: s3,") for p in problems)
    assert any("SM_VLLM_KV_CACHE_DTYPE='int3': the preflight cannot size" in p for p in problems)
    assert any("SM_VLLM_GPU_MEMORY_UTILIZATION=1.5: expected a number above 0" in p for p in problems)
    for bad in ('"0"', '"8192.5"', '"lots"', "true"):
        (problem,) = problems_of(engine_env=f'{{"SM_VLLM_MAX_NUM_BATCHED_TOKENS": {bad}}}')
        assert "SM_VLLM_MAX_NUM_BATCHED_TOKENS=" in problem and "expected a whole number of at least 1" in problem
    assert (
        load(engine_env='{"SM_VLLM_MAX_NUM_BATCHED_TOKENS": "8192"}').engine_env["SM_VLLM_MAX_NUM_BATCHED_TOKENS"]
        == "8192"
    )


def test_token_kms_key_only_with_a_token_secret():
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    (problem,) = problems_of(hf_token_kms_key_arn=key)
    assert problem.startswith(f"hf_token_kms_key_arn={key!r}: only with hf_token_secret_arn")
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-AbCdEf"
    assert load(hf_token_secret_arn=secret, hf_token_kms_key_arn=key).hf_token_kms_key_arn == key
