"""Hostile context values and container environments: each refused by the config check, naming the key.

Context values reach IAM ARNs, tags, S3 keys and the model's environment. Sources: Python ``re`` docs (``$``
matches before a trailing newline; ``\\w`` is Unicode unless ``re.ASCII``); git-check-ref-format(1);
aws/deep-learning-containers scripts/docker/vllm/sagemaker_args.py (a JSON array becomes one argv token per
element) and scripts/docker/sglang/sagemaker_entrypoint.sh (``env | grep`` read line by line).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.engines import (
    build_environment,
    checkpoint_code_patterns,
    engine_names,
    environment_warnings,
    get_engine,
    guarded_env,
)
from constructs_lib.names import repo_id_problem, revision_problem
from constructs_lib.staged_checkpoint import _validate
from tests.conftest import context_with, stack_template

SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
RESERVATION = "arn:aws:sagemaker:us-east-1:123456789012:ml-reservation/abc"

# key -> (a valid value, extra context it needs)
TEXT_KEYS: dict[str, tuple[str, dict[str, str]]] = {
    "stack_name": ("LlmEndpoint", {}),
    "model_id": ("Qwen/Qwen3-4B-Instruct-2507", {}),
    "revision": ("main", {}),
    "instance_type": ("ml.g6.xlarge", {}),
    "staging_instance_type": ("ml.m5.2xlarge", {}),
    "hf_token_secret_arn": (SECRET, {}),
    "model_kms_key_arn": (KEY, {"model_bucket": "my-models"}),
    "endpoint_name": ("my-endpoint", {}),
    "component_name": ("my-component", {"deployment_mode": "inference-component"}),
    # A reservation must say it holds a blue/green update's second fleet (issue 28).
    "capacity_reservation_arn": (RESERVATION, {"capacity_reservation_instances": "2"}),
    "model_s3_uri": ("s3://my-models/models/q/", {"include": "[]"}),
    "gguf_file": ("m-Q4_K_M.gguf", {"engine": "llamacpp", "instance_type": "ml.g5.xlarge"}),
}
# What an attacker (or a bad paste) appends or swaps in; U+0664 and U+FF11 are digits \d and \w accept.
SUFFIXES = ["\n", "\r", "\r\n", "\x00", " ", "\t", "\u2028", "\u0085"]


def problems_for(**context) -> list[str]:
    try:
        DeploymentConfig.from_context(context_with(**context))
    except ConfigError as e:
        return e.problems
    return []


@pytest.mark.parametrize("key", sorted(TEXT_KEYS))
def test_every_text_key_accepts_its_valid_value(key):
    value, extra = TEXT_KEYS[key]
    assert problems_for(**{key: value}, **extra) == []


@pytest.mark.parametrize("suffix", SUFFIXES, ids=repr)
@pytest.mark.parametrize("key", sorted(TEXT_KEYS))
def test_a_trailing_control_or_space_is_refused_naming_the_key(key, suffix):
    value, extra = TEXT_KEYS[key]
    problems = problems_for(**{key: value + suffix}, **extra)
    assert problems and any(p.startswith(f"{key}=") or f"{key}=" in p for p in problems), problems


@pytest.mark.parametrize("key", ["stack_name", "model_id", "instance_type", "hf_token_secret_arn", "endpoint_name"])
@pytest.mark.parametrize("swap", ["\u0664", "\uff11", "\u0131", "\u00e9"], ids=repr)
def test_non_ascii_look_alikes_are_refused(key, swap):
    value, extra = TEXT_KEYS[key]
    # Swap the first ASCII digit or letter after position 3 for a character \d or \w would have accepted.
    index = next(i for i, c in enumerate(value) if i > 3 and c.isalnum())
    assert problems_for(**{key: value[:index] + swap + value[index + 1 :]}, **extra)


@pytest.mark.parametrize(
    "revision",
    [
        "main/../../x",
        "../main",
        "/main",
        "main/",
        "a//b",
        ".hidden",
        "refs/.x",
        "x.lock",
        "v1.",
        "a@{1}",
        "@",
        "ma in",
        "ma~1",
        "ma^",
        "ma:b",
        "ma?b",
        "ma*b",
        "ma[b",
        "ma\\b",
        "",
        "x" * 256,
    ],
)
def test_revisions_git_would_refuse_are_refused(revision):
    assert revision_problem(revision) is not None
    assert any(p.startswith("revision=") for p in problems_for(revision=revision))
    with pytest.raises(ValueError, match="revision="):
        construct_validate(revision=revision)


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", "release/2026-01", "0" * 40, "a+b=c@d,e"])
def test_real_revisions_pass(revision):
    assert revision_problem(revision) is None and problems_for(revision=revision) == []


@pytest.mark.parametrize(
    "repo_id",
    ["Qwen", "org/a--b", "org--x/b", "org/a..b", "org/model.git", "/x", "org/", "org/-x", "a/b/c", "org/x\n"],
)
def test_repository_ids_the_hub_refuses_are_refused_at_synth_and_by_the_construct(repo_id):
    assert repo_id_problem(repo_id) is not None
    assert any(p.startswith("model_id=") for p in problems_for(model_id=repo_id))
    with pytest.raises(ValueError, match="repo_id="):
        construct_validate(repo_id=repo_id)


def test_a_secret_arn_without_its_six_character_suffix_is_refused():
    (problem,) = problems_for(hf_token_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token")
    assert problem.startswith("hf_token_secret_arn=") and "six-character suffix" in problem


def test_the_construct_and_the_config_agree_on_instance_types_with_a_hyphen():
    """botocore lists ml.m7i-flex.large for Processing: the construct refused it, the config took it."""
    construct_validate(instance_type="ml.m7i-flex.large")
    assert problems_for(staging_instance_type="ml.m7i-flex.large") == []


def construct_validate(**overrides) -> None:
    args = dict(
        subject="StagedCheckpoint Test/Staged",
        repo_id="org/name",
        revision="main",
        prefix="models/",
        max_instances=1,
        volume_size_gb=30,
        max_runtime_s=3600,
        handoff_s=600,
        instance_type="ml.m5.2xlarge",
    )
    _validate(**(args | overrides))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(min_size=1, max_size=40).filter(lambda t: not t.isascii() or any(ord(c) < 32 for c in t)),
    where=st.sampled_from(["model_id", "revision"]),
)
def test_property_any_non_ascii_or_control_character_is_refused(text, where):
    base = {"model_id": "org/name", "revision": "main"}[where]
    value = base + text
    checker = repo_id_problem if where == "model_id" else revision_problem
    assert checker(value) is not None


# --- container environments ---------------------------------------------------------------------------


def env_problems(engine: str, engine_env=None, container_env=None, allow: bool = False) -> list[str]:
    _, problems = build_environment(
        get_engine(engine),
        tensor_parallel_size=1,
        max_model_len=None,
        max_num_seqs=None,
        engine_env=engine_env or {},
        container_env=container_env or {},
        allow_checkpoint_code=allow,
    )
    return problems


FLAG = {name: get_engine(name).env_prefix + "SEED" for name in engine_names()}


@settings(max_examples=80, deadline=None)
@given(
    engine=st.sampled_from(engine_names()),
    where=st.sampled_from(["engine_env", "container_env"]),
    before=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
    control=st.sampled_from(["\n", "\r", "\x00", "\x1b", "\x7f"]),
    after=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
)
def test_property_a_control_character_in_any_value_is_refused(engine, where, before, control, after):
    value = before + control + after
    if where == "engine_env":
        problems = env_problems(engine, engine_env={FLAG[engine]: value})
    else:
        problems = env_problems(engine, container_env={"NCCL_DEBUG": value})
    assert any("control character" in p for p in problems), problems
    assert all(value not in p for p in problems)  # the value is never echoed


def test_a_newline_cannot_inject_a_variable_into_sglang():
    (problem,) = env_problems("sglang", engine_env={"SM_SGLANG_SEED": "0\nSM_SGLANG_TRUST_REMOTE_CODE=true"})
    assert "U+000A" in problem


@pytest.mark.parametrize(
    "value",
    [
        ["0", "--trust-remote-code", "--model", "/tmp"],
        '["0", "--trust-remote-code"]',
        ["-x"],
        "--trust-remote-code",
        "-m",
        ["--served-model-name=x"],
    ],
    ids=repr,
)
def test_vllm_values_that_would_become_flags_are_refused(value):
    (problem,) = env_problems("vllm", engine_env={"SM_VLLM_SEED": value})
    assert "starts with '-'" in problem


@pytest.mark.parametrize(
    "value",
    # argparse reads a token as an option only when its first character is '-' (a leading space keeps a value).
    [["a", "b"], [{"name": "l", "path": "/opt/ml/model/l"}], "-1", -1, ["-2", "3"], "-0.5", "1e-3", [" --model"]],
    ids=repr,
)
def test_vllm_values_that_stay_values_pass(value):
    assert env_problems("vllm", engine_env={"SM_VLLM_SEED": value}) == []


def test_sglang_takes_an_array_as_one_token_but_still_refuses_a_flag_value():
    assert env_problems("sglang", engine_env={"SM_SGLANG_SEED": ["0", "--x"]}) == []  # one token "[...]"
    assert env_problems("sglang", engine_env={"SM_SGLANG_SEED": "--trust-remote-code"})


@pytest.mark.parametrize("name", sorted(guarded_env()))
def test_variables_that_load_code_or_fetch_models_elsewhere_are_refused_or_warned(name):
    rule = guarded_env()[name]
    engine = "lmi" if name.startswith("OPTION_") else "vllm"
    where = "engine_env" if name.startswith("OPTION_") else "container_env"
    value = "/opt/ml/model/handler.py" if rule["kind"] == "code" else "https://mirror.example"
    problems = env_problems(engine, **{where: {name: value}})
    warnings = environment_warnings(get_engine(engine), {}, {name: value}) if where == "container_env" else []
    if rule["kind"] == "warn":
        assert problems == [] and any(name in w for w in warnings)
        return
    assert len(problems) == 1 and f"key {name!r} is refused" in problems[0]
    allowed = env_problems(engine, allow=True, **{where: {name: value}})
    assert allowed == ([] if rule["kind"] == "code" else problems)


def test_lmi_entry_points_of_its_own_package_pass_and_files_do_not():
    assert env_problems("lmi", engine_env={"OPTION_ENTRYPOINT": "djl_python.huggingface"}) == []
    assert env_problems("lmi", engine_env={"OPTION_ENTRYPOINT": "handler.py"})
    assert env_problems("lmi", engine_env={"OPTION_ENTRYPOINT": "djl_python.x\n"})
    assert env_problems("lmi", container_env={"DJL_ENTRY_POINT": "model.py"})


def test_offline_switches_may_only_stay_offline():
    assert env_problems("vllm", container_env={"TRANSFORMERS_OFFLINE": "1"}) == []
    assert env_problems("vllm", container_env={"TRANSFORMERS_OFFLINE": "0"})
    assert env_problems("vllm", container_env={"VLLM_USE_MODELSCOPE": "true"})


@pytest.mark.parametrize("key", ["SM_VLLM_TRUST_REMOTE_CODE", "SM_VLLM_TRUST_REMOTE", "SM_VLLM_TRUST_REM"])
def test_trust_remote_code_is_warned_under_every_abbreviation_argparse_reads(key):
    (warning,) = environment_warnings(get_engine("vllm"), {key: ""})
    assert warning.startswith(f"engine_env {key}") and "import and run the Python files" in warning


def test_lmi_trust_remote_code_stages_modeling_files_but_never_its_settings_or_handler():
    plain, trusting = checkpoint_code_patterns("lmi"), checkpoint_code_patterns("lmi", trust_remote_code=True)
    assert "*.py" in plain and "*.py" not in trusting
    assert {"serving.properties", "model.py", "requirements.txt", "code/*"} <= set(trusting)
    assert env_problems("lmi", engine_env={"OPTION_TRUST_REMOTE_CODE": "true"}) == []


@pytest.mark.integration  # a whole app synthesized: `make test-integration`
def test_lmi_with_trust_remote_code_stages_python_files_and_keeps_serving_properties_out():
    template = stack_template(engine="lmi", engine_env='{"OPTION_TRUST_REMOTE_CODE": "true"}')
    excluded = ["original/*", "requirements.txt", "model.py", "code/*", "serving.properties"]
    template.has_resource_properties("Custom::StagedCheckpoint", {"Exclude": excluded})


def test_sglang_engine_switch_is_reserved():
    (problem,) = env_problems("sglang", engine_env={"SM_SGLANG_ENGINE": "diffusion"})
    assert "would override a setting the app derives" in problem


def test_context_refuses_a_smuggled_flag_naming_engine_env():
    problems = problems_for(engine_env='{"SM_VLLM_SEED": ["0", "--trust-remote-code"]}')
    assert any("engine_env key 'SM_VLLM_SEED'" in p for p in problems)
    assert problems_for(container_env='{"PYTHONPATH": "/opt/ml/model"}')
    assert problems_for(container_env='{"PYTHONPATH": "/opt/ml/model"}', allow_checkpoint_code="true") == []
