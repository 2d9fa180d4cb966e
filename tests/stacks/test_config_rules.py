"""The cross-key rules of ``DeploymentConfig.from_context``, each message as the user reads it, both sides of each rule.

``cdk synth`` prints these lines and nothing else, so a rule that stops firing, fires on the wrong
combination, or garbles its advice is a user-visible defect; the mutation audit (issue 18) found that
only the rule's existence, not its text or its other branch, was tested.
"""

from __future__ import annotations

import pytest

from constructs_lib.deployment.config import FIELDS, DeploymentConfig, describe_allowed
from constructs_lib.images import recorded_tag_key
from tests.conftest import default_context
from tests.stacks.test_config import load, problems_of

KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
PREFIX = "s3://my-models/qwen3/"
GGUF_ADVICE = (
    "a .gguf file name or glob in the repository, such as Qwen3-8B-Q4_K_M.gguf or *Q4_K_M*.gguf "
    "(a split file's parts -00001-of-0000N.gguf are included)"
)


def test_a_key_missing_from_cdk_json_names_the_key_and_what_it_takes() -> None:
    context = default_context()
    del context["instance_type"]
    with pytest.raises(Exception) as info:
        DeploymentConfig.from_context(context)
    assert info.value.problems == [
        "instance_type: missing; cdk.json must give a default (a SageMaker instance type such as ml.g6.xlarge)"
    ]


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_every_key_says_what_it_takes(key: str) -> None:
    assert FIELDS[key].__doc__ and FIELDS[key].__doc__.strip() not in ("", "None")
    assert describe_allowed(key) == FIELDS[key].__doc__


def test_a_misspelt_key_gets_the_one_nearest_key() -> None:
    assert problems_of(instance_typ="ml.g6.xlarge") == [
        "instance_typ: unknown context key; did you mean 'instance_type'?"
    ]


def test_keys_cdk_owns_are_not_ours_to_refuse() -> None:
    config = load(**{"aws-cdk:enableDiffNoFail": "true", "aws:cdk:toolkit:default-region": "us-east-1"})
    assert config.instance_type == "ml.g6.xlarge"


REUSE = (
    "reuse_model_bucket=true: reuses the bucket this app created before (<stack>-models-<account>-<region>); "
    "give it alone, not with model_bucket or model_s3_uri"
)


@pytest.mark.parametrize("given", [{"model_bucket": "my-models"}, {"model_s3_uri": PREFIX}])
def test_reusing_the_apps_bucket_goes_alone(given: dict) -> None:
    assert problems_of(reuse_model_bucket=True, **given) == [REUSE]
    assert load(**given).reuse_model_bucket is False  # either source alone is fine


def test_reusing_the_apps_bucket_alone_is_accepted() -> None:
    assert load(reuse_model_bucket="true").reuse_model_bucket is True


@pytest.mark.parametrize("given", [{"model_bucket": "my-models"}, {"model_s3_uri": PREFIX}])
def test_a_bucket_key_goes_with_a_given_bucket(given: dict) -> None:
    assert load(model_kms_key_arn=KMS_KEY, **given).model_kms_key_arn == KMS_KEY


def test_a_bucket_key_without_a_given_bucket_is_refused() -> None:
    assert problems_of(model_kms_key_arn=KMS_KEY) == [
        f"model_kms_key_arn={KMS_KEY!r}: only for a given bucket (model_bucket or model_s3_uri); the bucket this "
        "stack creates uses S3-managed keys"
    ]


def test_a_token_key_goes_with_its_secret() -> None:
    assert load(hf_token_kms_key_arn=KMS_KEY, hf_token_secret_arn=SECRET).hf_token_kms_key_arn == KMS_KEY
    assert problems_of(hf_token_kms_key_arn=KMS_KEY) == [
        f"hf_token_kms_key_arn={KMS_KEY!r}: only with hf_token_secret_arn (it is the key that secret is encrypted with)"
    ]


@pytest.mark.parametrize("given", [{"hf_token_secret_arn": SECRET}, {"include": '["*.json"]'}])
def test_a_staged_prefix_takes_no_hub_settings(given: dict) -> None:
    assert problems_of(model_s3_uri=PREFIX, **given) == [
        f"model_s3_uri={PREFIX!r}: serves an existing prefix as it is, so hf_token_secret_arn and include (which "
        "only apply to staging from the Hub) must not be given with it"
    ]


def test_both_bucket_sources_name_each_value_and_what_each_does() -> None:
    assert problems_of(model_s3_uri=PREFIX, model_bucket="my-models") == [
        f"model_s3_uri={PREFIX!r} and model_bucket='my-models': give at most one (model_s3_uri serves that exact "
        "prefix; model_bucket holds models/<org>--<name>/<revision>/)"
    ]


# -- image, engine and GGUF ----------------------------------------------------------------------------


def test_an_engine_built_by_cdk_says_so_and_where_from() -> None:
    config = load(engine="llamacpp", gguf_file="Qwen3-8B-Q4_K_M.gguf")
    assert config.image_source == "built by cdk deploy from containers/llamacpp (Docker needed)"
    assert config.engine_spec.model_path_value.endswith("Qwen3-8B-Q4_K_M.gguf")


def test_the_default_image_follows_the_instance_type() -> None:
    # The CUDA architecture list of a built image comes from the instance's GPU (L4 is sm_89, L40S too,
    # H100 is sm_90): the image is chosen for the instance type the user gave.
    l4 = load(engine="llamacpp", gguf_file="m.gguf", instance_type="ml.g6.xlarge").serving_image.describe()
    h100 = load(engine="llamacpp", gguf_file="m.gguf", instance_type="ml.p5.48xlarge").serving_image.describe()
    assert "CUDA_ARCHITECTURES=89" in l4 and "CUDA_ARCHITECTURES=90" in h100


def test_a_recorded_tag_says_where_it_came_from() -> None:
    tag = "0.26.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
    config = load(**{recorded_tag_key("vllm", "ml.g6.xlarge"): tag})
    assert config.image_source == "recorded by llmops.resolve_image in cdk.context.json"
    assert config.serving_image.tag == tag


def test_a_gguf_file_with_an_engine_that_serves_checkpoints_names_the_engines_that_serve_gguf() -> None:
    assert problems_of(engine="vllm", gguf_file="m-Q4_K_M.gguf") == [
        "gguf_file='m-Q4_K_M.gguf': engine='vllm' serves safetensors checkpoints, not GGUF files; allowed: "
        "engine=llamacpp with gguf_file, or no gguf_file"
    ]


def test_an_engine_that_serves_gguf_needs_a_file() -> None:
    assert problems_of(engine="llamacpp") == [
        f"gguf_file: missing; engine='llamacpp' serves one GGUF file: give {GGUF_ADVICE}"
    ]


def test_an_unknown_engine_is_the_only_problem_named() -> None:
    # Checks that need the engine (GGUF, engine flags) wait until it is known: no second-guessing
    # against a default engine the user did not choose.
    engine = "engine='nope': not allowed; allowed: llamacpp, lmi, sglang, vllm"
    assert problems_of(engine="nope", gguf_file="m-Q4_K_M.gguf") == [engine]
    assert problems_of(engine="nope", engine_env='{"OPTION_X": "1"}', container_env='{"1BAD": "x"}') == [engine]


def test_a_bad_gguf_file_name_is_the_only_problem_named() -> None:
    assert problems_of(engine="lmi", gguf_file="bad name") == [f"gguf_file='bad name': expected {GGUF_ADVICE}"]


def test_a_container_env_problem_is_found_before_deploy() -> None:
    problems = problems_of(container_env='{"1BAD": "x"}')
    assert problems == [
        "container_env key '1BAD' is not a valid environment variable name (letters, digits and underscores, "
        "not starting with a digit)."
    ]


def test_an_engine_loading_timeout_beyond_the_health_check_is_refused_at_synth() -> None:
    assert problems_of(engine="lmi", engine_env='{"OPTION_MODEL_LOADING_TIMEOUT": "1800"}', startup_timeout_s=1200) == [
        "OPTION_MODEL_LOADING_TIMEOUT=1800 is longer than startup_timeout_s=1200 (the endpoint's container "
        "health-check timeout): SageMaker would fail the endpoint before lmi gives up loading; set "
        "OPTION_MODEL_LOADING_TIMEOUT to at most 1200 in engine_env, or raise startup_timeout_s (at most 3600)."
    ]
    assert load(engine="lmi", engine_env='{"OPTION_MODEL_LOADING_TIMEOUT": "1800"}', startup_timeout_s=1800)


# -- scaling and components ----------------------------------------------------------------------------


def test_the_instance_count_is_the_initial_count_autoscaling_starts_from() -> None:
    assert problems_of(instance_count=3, max_instances=2) == [
        # min_instances defaults to instance_count in standard mode, capped at max_instances (issue 35 item 3).
        "initial_instances=3 is outside min_instances=2 to max_instances=2; allowed: a value in that range "
        "(autoscaling would move it there at once)."
    ]
    assert load(instance_count=2, max_instances=2).instance_count == 2


def test_a_copys_gpus_must_match_its_tensor_parallel_degree() -> None:
    component = {"deployment_mode": "inference-component", "instance_type": "ml.g6.12xlarge"}
    assert problems_of(tensor_parallel_size=2, accelerators_per_copy=1, **component) == [
        "accelerators_per_copy=1 does not match tensor_parallel_size=2; allowed: 2 (the engine shards the model "
        "over exactly the GPUs a copy is given), or leave it unset."
    ]
    # In component mode a copy may use fewer GPUs than the instance has; standard mode may not.
    assert load(tensor_parallel_size=2, accelerators_per_copy=2, **component).tensor_parallel_size == 2
    assert load(accelerators_per_copy=2, **component).tensor_parallel_size == 2  # derived from the copy


def test_a_component_name_is_checked_and_only_for_components() -> None:
    assert problems_of(component_name="-bad", deployment_mode="inference-component") == [
        "component_name='-bad': not a valid inference component name; allowed: 1-63 letters, digits and "
        "hyphens, starting and ending with a letter or digit"
    ]
    assert problems_of(component_name="chat") == [
        "component_name='chat': only with deployment_mode=inference-component"
    ]
    assert load(component_name="chat", deployment_mode="inference-component").component_name == "chat"
    assert problems_of(component_name=5, deployment_mode="inference-component") == ["component_name=5: expected text"]


def test_smoke_inputs_leave_the_fields_the_smoke_test_sends_to_it() -> None:
    assert problems_of(smoke_inputs='{"stream": true, "messages": []}') == [
        "smoke_inputs: sets messages, stream, which the smoke test sends itself; allowed: other request fields "
        'such as {"chat_template_kwargs": {"enable_thinking": false}}'
    ]


# -- value parsers at their edges ----------------------------------------------------------------------


def test_a_whole_number_written_as_json_float_is_an_integer() -> None:
    config = load(instance_count=2.0, max_instances=2)
    assert config.instance_count == 2 and isinstance(config.instance_count, int)


def test_numbers_exclude_their_floor_include_their_ceiling_and_refuse_booleans() -> None:
    component = {"deployment_mode": "inference-component"}
    assert problems_of(target_concurrency=0, **component) == [
        "target_concurrency=0: out of range; allowed: more than 0, at most 10000"
    ]
    assert load(target_concurrency=10000, **component).target_concurrency == 10000.0
    assert load(target_concurrency="0.5", **component).target_concurrency == 0.5
    assert problems_of(gpu_memory_gib=True)[0] == "gpu_memory_gib=True: expected a number from 0 to 1024"


def test_glob_lists_accept_blank_text_and_name_what_they_expect() -> None:
    assert load(include="  ").include == ()
    assert problems_of(include='[""]') == [
        'include=\'[""]\': expected a JSON array of non-empty glob patterns such as ["*.json", "*.safetensors"]'
    ]


def test_every_unknown_check_and_every_repeated_key_is_named() -> None:
    assert problems_of(preflight_skip='["a", "b"]') == [
        "preflight_skip='[\"a\", \"b\"]': unknown check(s) 'a', 'b'; allowed: s3, memory, context, tensor-parallel, "
        "quota, format, network"
    ]
    problems = problems_of(smoke_inputs='{"top_p": 1, "top_p": 2, "seed": 1, "seed": 2}')
    assert problems == [
        'smoke_inputs=\'{"top_p": 1, "top_p": 2, "seed": 1, "seed": 2}\': the key(s) seed, top_p appear more '
        "than once; give each once"
    ]


# -- what the memory preflight will read from engine_env -----------------------------------------------


def test_an_unsizable_kv_cache_dtype_lists_the_ones_the_preflight_sizes() -> None:
    assert problems_of(engine_env='{"SM_VLLM_KV_CACHE_DTYPE": "int3"}') == [
        "engine_env SM_VLLM_KV_CACHE_DTYPE='int3': the preflight cannot size this KV-cache dtype; allowed: auto, "
        "fp8, fp8_e4m3, fp8_e5m2, bfloat16, float16, float32"
    ]


@pytest.mark.parametrize("share", ["1", 1, "0.9", 0.9, "0.01"])
def test_a_gpu_memory_share_above_zero_up_to_one_is_accepted_as_number_or_text(share) -> None:
    config = load(engine_env={"SM_VLLM_GPU_MEMORY_UTILIZATION": share})
    assert config.engine_env == {"SM_VLLM_GPU_MEMORY_UTILIZATION": share}  # passed through as written


@pytest.mark.parametrize("share", ["0", 0, "1.01", "abc", "nan"])
def test_a_gpu_memory_share_outside_it_is_refused_as_written(share) -> None:
    assert problems_of(engine_env={"SM_SGLANG_MEM_FRACTION_STATIC": share}, engine="sglang") == [
        f"engine_env SM_SGLANG_MEM_FRACTION_STATIC={share!r}: expected a number above 0 and at most 1 (as a number "
        'or as text such as "0.9")'
    ]
