"""Engines as data: derived keys, flag rendering, and what the free-form maps may not do."""

from __future__ import annotations

import json

import pytest

from constructs_lib.engines import MAX_ENV_ENTRIES, build_environment, engine_names, get_engine, looks_secret


def env_for(engine: str, *, tp: int = 1, max_model_len=None, max_num_seqs=None, engine_env=None, container_env=None):
    return build_environment(
        get_engine(engine),
        tensor_parallel_size=tp,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        engine_env=engine_env or {},
        container_env=container_env or {},
    )


def test_engines_listed_from_data():
    assert engine_names() == ["llamacpp", "lmi", "sglang", "vllm"]
    with pytest.raises(ValueError, match=r"engine='foo' is not a known engine; allowed: llamacpp, lmi, sglang, vllm"):
        get_engine("foo")


def test_vllm_derived_keys_and_model_path():
    env, problems = env_for("vllm", tp=4, max_model_len=32768, max_num_seqs=16)
    assert problems == []
    assert env == {
        "SM_VLLM_MODEL": "/opt/ml/model",
        "SM_VLLM_TENSOR_PARALLEL_SIZE": "4",
        "SM_VLLM_MAX_MODEL_LEN": "32768",
        "SM_VLLM_MAX_NUM_SEQS": "16",
        "STANDARD_AUTO_INSTALL_REQ": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


def test_sglang_derived_keys_and_model_path():
    env, problems = env_for("sglang", tp=2, max_model_len=8192, max_num_seqs=8)
    assert problems == []
    assert env == {
        "SM_SGLANG_MODEL_PATH": "/opt/ml/model",
        "SM_SGLANG_TP_SIZE": "2",
        "SM_SGLANG_CONTEXT_LENGTH": "8192",
        "SM_SGLANG_MAX_RUNNING_REQUESTS": "8",
        "STANDARD_AUTO_INSTALL_REQ": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def test_unset_optional_settings_are_left_to_the_engine():
    env, _ = env_for("vllm", tp=1)
    assert "SM_VLLM_MAX_MODEL_LEN" not in env and "SM_VLLM_MAX_NUM_SEQS" not in env


def test_flag_values_render_as_the_entrypoint_expects():
    env, problems = env_for(
        "vllm",
        engine_env={
            "SM_VLLM_ENABLE_PREFIX_CACHING": True,
            "SM_VLLM_ENFORCE_EAGER": False,
            "SM_VLLM_GPU_MEMORY_UTILIZATION": 0.92,
            "SM_VLLM_MAX_NUM_BATCHED_TOKENS": 8192,
            "SM_VLLM_DTYPE": "bfloat16",
            "SM_VLLM_HF_OVERRIDES": {"rope_scaling": {"type": "yarn", "factor": 4.0}},
            "SM_VLLM_ALLOWED_LOCAL_MEDIA_PATH": "",
            "SM_VLLM_MIDDLEWARE": ["a.b", "c.d"],
        },
    )
    assert problems == []
    # An empty value is a bare flag in every image version; false is expressed by leaving the key out.
    assert env["SM_VLLM_ENABLE_PREFIX_CACHING"] == ""
    assert "SM_VLLM_ENFORCE_EAGER" not in env
    assert env["SM_VLLM_GPU_MEMORY_UTILIZATION"] == "0.92"
    assert env["SM_VLLM_MAX_NUM_BATCHED_TOKENS"] == "8192"
    assert env["SM_VLLM_DTYPE"] == "bfloat16"
    assert json.loads(env["SM_VLLM_HF_OVERRIDES"]) == {"rope_scaling": {"type": "yarn", "factor": 4.0}}
    assert " " not in env["SM_VLLM_HF_OVERRIDES"]
    assert json.loads(env["SM_VLLM_MIDDLEWARE"]) == ["a.b", "c.d"]


def test_plain_container_variables():
    env, problems = env_for(
        "sglang",
        engine_env={"SM_SGLANG_MEM_FRACTION_STATIC": 0.85, "SM_SGLANG_ENABLE_METRICS": True},
        container_env={"SGLANG_DISABLE_CUDNN_CHECK": 1, "NCCL_DEBUG": "INFO", "SOME_FLAG": True, "CFG": {"a": 1}},
    )
    assert problems == []
    assert env["SM_SGLANG_MEM_FRACTION_STATIC"] == "0.85"
    assert env["SM_SGLANG_ENABLE_METRICS"] == ""
    assert env["SGLANG_DISABLE_CUDNN_CHECK"] == "1"
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["SOME_FLAG"] == "true"
    assert env["CFG"] == '{"a":1}'


@pytest.mark.parametrize(
    ("engine", "key"),
    [
        ("vllm", "SM_VLLM_TENSOR_PARALLEL_SIZE"),
        ("vllm", "SM_VLLM_TP"),
        ("vllm", "sm_vllm_max_model_len"),
        ("vllm", "SM_VLLM_MAX_NUM_SEQS"),
        ("vllm", "SM_VLLM_MODEL"),
        ("vllm", "SM_VLLM_PORT"),
        ("sglang", "SM_SGLANG_TP"),
        ("sglang", "SM_SGLANG_TENSOR_PARALLEL_SIZE"),
        ("sglang", "SM_SGLANG_TP_SIZE"),
        ("sglang", "SM_SGLANG_CONTEXT_LENGTH"),
        ("sglang", "SM_SGLANG_MODEL_PATH"),
    ],
)
def test_derived_keys_and_aliases_cannot_be_overridden(engine, key):
    env, problems = env_for(engine, tp=2, engine_env={key: "3"})
    assert len(problems) == 1
    assert f"engine_env key {key!r} would override a setting the app derives" in problems[0]
    # The derived value stands.
    assert env.get(get_engine(engine).derived_key("tensor_parallel_size")) == "2"


@pytest.mark.parametrize(
    "key", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MY_SECRET_VALUE", "DB_PASSWORD", "OPENAI_API_KEY", "hf_token"]
)
def test_secret_looking_keys_are_refused_with_a_pointer_to_secrets_manager(key):
    assert looks_secret(key)
    _, problems = env_for("vllm", container_env={key: "hf_abcdefsecretvalue"})
    assert len(problems) == 1
    assert "looks like a secret" in problems[0] and "Secrets Manager" in problems[0]
    assert "hf_abcdefsecretvalue" not in problems[0]


def test_secret_check_applies_to_engine_flags_too():
    _, problems = env_for("vllm", engine_env={"SM_VLLM_API_KEY": "k"})
    assert len(problems) == 1 and "looks like a secret" in problems[0]


def test_token_counts_are_not_mistaken_for_tokens():
    assert not looks_secret("SM_VLLM_MAX_NUM_BATCHED_TOKENS")
    assert not looks_secret("SM_SGLANG_MAX_TOTAL_TOKENS")
    assert not looks_secret("SM_VLLM_TOKENIZER")


def test_engine_env_needs_the_engine_prefix_and_container_env_must_not_have_it():
    _, problems = env_for(
        "vllm", engine_env={"SM_SGLANG_TP": "2", "NCCL_DEBUG": "INFO"}, container_env={"SM_VLLM_DTYPE": "half"}
    )
    assert len(problems) == 3
    assert "engine_env key 'SM_SGLANG_TP' does not start with 'SM_VLLM_' (upper case)" in problems[0]
    assert "engine_env key 'NCCL_DEBUG' does not start with 'SM_VLLM_' (upper case)" in problems[1]
    assert "container_env key 'SM_VLLM_DTYPE' starts with 'SM_VLLM_'" in problems[2]


def test_invalid_names_null_values_and_size_limits():
    _, problems = env_for(
        "vllm",
        engine_env={"SM_VLLM_X": None},
        container_env={"1BAD": "x", "HAS-DASH": "x", "LONG": "x" * 1025},
    )
    assert any("'SM_VLLM_X' has the value null" in p for p in problems)
    assert any("'1BAD' is not a valid environment variable name" in p for p in problems)
    assert any("'HAS-DASH' is not a valid environment variable name" in p for p in problems)
    assert any("value of 'LONG' is 1025 characters; SageMaker allows 1024" in p for p in problems)

    _, problems = env_for("vllm", container_env={f"V{i}": "1" for i in range(MAX_ENV_ENTRIES)})
    assert any(f"SageMaker allows {MAX_ENV_ENTRIES}" in p for p in problems)


def test_lower_case_flag_keys_are_refused_because_the_entrypoint_would_drop_them():
    env, problems = env_for("vllm", engine_env={"sm_vllm_enable_prefix_caching": True})
    assert problems == [
        "engine_env key 'sm_vllm_enable_prefix_caching' does not start with 'SM_VLLM_' (upper case) followed by a "
        "flag name, the prefix engine 'vllm' turns into command-line flags; put other variables in container_env."
    ]
    assert "sm_vllm_enable_prefix_caching" not in env


@pytest.mark.parametrize(
    ("engine", "key", "read_as"),
    [
        ("sglang", "SM_SGLANG_CONTEXT_LEN", "SM_SGLANG_CONTEXT_LENGTH"),
        ("sglang", "SM_SGLANG_TP_SI", "SM_SGLANG_TP_SIZE"),
        ("sglang", "SM_SGLANG_MAX_RUNNING", "SM_SGLANG_MAX_RUNNING_REQUESTS"),
        ("vllm", "SM_VLLM_MAX_MODEL", "SM_VLLM_MAX_MODEL_LEN"),
        ("vllm", "SM_VLLM_TENSOR_PARALLEL", "SM_VLLM_TENSOR_PARALLEL_SIZE"),
    ],
)
def test_abbreviations_of_derived_flags_are_refused(engine, key, read_as):
    env, problems = env_for(engine, tp=4, max_model_len=4096, max_num_seqs=4, engine_env={key: 9})
    assert len(problems) == 1
    assert (
        f"engine_env key {key!r} is an abbreviation the engine's argument parser would read as {read_as!r}"
        in (problems[0])
    )
    assert key not in env


def test_flags_that_merely_share_a_prefix_word_are_fine():
    env, problems = env_for("vllm", engine_env={"SM_VLLM_MAX_LORAS": 4, "SM_VLLM_MAX_NUM_BATCHED_TOKENS": 8192})
    assert problems == []
    assert env["SM_VLLM_MAX_LORAS"] == "4"


@pytest.mark.parametrize(
    ("engine", "key"), [("vllm", "SM_VLLM_PIPELINE_PARALLEL_SIZE"), ("sglang", "SM_SGLANG_PP_SIZE")]
)
def test_pipeline_parallelism_is_refused_in_standard_mode(engine, key):
    _, problems = env_for(engine, engine_env={key: 2})
    assert len(problems) == 1 and "pipeline parallelism would ask for more GPUs" in problems[0]


def test_bare_prefix_is_not_a_flag():
    _, problems = env_for("vllm", engine_env={"SM_VLLM_": 1})
    assert len(problems) == 1 and "followed by a flag name" in problems[0]


def test_non_finite_numbers_are_refused():
    _, problems = env_for(
        "vllm",
        engine_env={"SM_VLLM_GPU_MEMORY_UTILIZATION": float("inf"), "SM_VLLM_HF_OVERRIDES": {"x": float("nan")}},
        container_env={"SCALE": float("-inf")},
    )
    assert len(problems) == 3
    assert all("finite" in p for p in problems)
