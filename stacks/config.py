"""The deployment's settings, read once from CDK context and validated together.

``app.py`` hands the raw context to ``DeploymentConfig.from_context``; nothing else reads context.
CLI context (``-c key=value``) always arrives as text, so numbers, booleans and JSON objects are
accepted both as JSON values (from cdk.json) and as their text form.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any

from constructs_lib import (
    BUCKET_RULE,
    DEPLOYMENT_MODES,
    GGUF_FILE,
    GGUF_FILE_DESCRIPTION,
    INFERENCE_COMPONENT,
    ROUTING_STRATEGIES,
    SECRET_HINT,
    EngineSpec,
    ServingImage,
    bucket_name_problem,
    default_image,
    engine_names,
    get_engine,
    known_ami_versions,
    looks_secret,
    parse_s3_uri,
    plan_endpoint,
    plan_scaling,
    recorded_tag_key,
    remote_code_keys,
    repo_id_problem,
    revision_problem,
    staging_patterns,
)
from constructs_lib.names import (
    COMPONENT_NAME,
    INSTANCE_TYPE,
    KMS_KEY_ARN,
    REPO_ID_RULE,
    REVISION_RULE,
    SECRET_ARN,
    SECRET_ARN_RULE,
    STACK_NAME,
    matches,
)
from preflight import KV_CACHE_DTYPES

from .observability import observability_fields, observability_problems

# Context keys CDK itself (or the CLI) sets; they are not ours to validate.
CDK_OWN_KEYS = {"cli-telemetry", "acknowledged-issue-numbers"}
NONE_WORDS = {"", "null", "none"}
DEFAULT_ENGINE = "vllm"
# Free-form maps may hold a pasted secret by mistake: never repeat their raw text in an error.
# hf_token_secret_arn too: a token pasted where its secret's ARN belongs must not be printed back.
UNECHOED_KEYS = {"engine_env", "container_env", "hf_token_secret_arn"}

# Context keys handed to component_plan.plan_scaling under the same names.
SCALING_KEYS = (
    "scale_to_zero",
    "min_instances",
    "max_instances",
    "accelerators_per_copy",
    "min_copies",
    "initial_copies",
    "max_copies",
    "target_concurrency",
    "target_invocations_per_instance",
    "routing_strategy",
    "min_memory_mb",
)
# The preflight's checks (lambda/deployment_preflight), which preflight_skip may name.
PREFLIGHT_CHECKS = ("s3", "memory", "tensor-parallel", "quota", "format")


def is_cdk_key(key: str) -> bool:
    """Keys CDK owns: feature flags, its own settings, and recorded lookups (ours included)."""
    return (
        key.startswith(("@aws-cdk/", "aws:", "aws-cdk:", "dlc-image-tag:")) or ":account=" in key or key in CDK_OWN_KEYS
    )


class ConfigError(ValueError):
    """Every problem with the context, one per line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(f"  - {p}" for p in problems))


# --- one parser per kind of value: (raw) -> value, raising ValueError with what is allowed ---


def _text(raw: Any) -> str:
    """text"""
    if isinstance(raw, str):
        return raw
    raise ValueError("expected text")


def _bound(parse: Callable[..., Any], doc: str, *settings: Any) -> Callable[[Any], Any]:
    """``parse`` with its settings bound, described by ``doc`` (what the error and the key table say).

    The parsers are module-level functions with their settings as arguments, not closures: a test (and a
    mutation tool) then reaches the code that runs on a value, not a factory that ran once at import.
    The factories run only at import, before mutmut forks a mutant, so no mutant of them could ever run:
    their lines say ``pragma: no mutate``; the bounds are checked by tests/test_config_limits.py (integers) and
    tests/test_config_rules.py (numbers) instead.
    """
    bound = functools.partial(parse, *settings)  # pragma: no mutate
    bound.__doc__ = doc  # pragma: no mutate
    return bound


def _parse_optional(parse: Callable[[Any], Any], raw: Any) -> Any:
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in NONE_WORDS):
        return None
    return parse(raw)


def _optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return _bound(_parse_optional, f"{parse.__doc__ or ''}, or null", parse)  # pragma: no mutate


def _parse_pattern(regex: re.Pattern[str], what: str, raw: Any) -> str:
    value = _text(raw)
    if not matches(regex, value):
        raise ValueError(f"expected {what}")
    return value


def _pattern(regex: re.Pattern[str], what: str) -> Callable[[Any], str]:
    return _bound(_parse_pattern, what, regex, what)  # pragma: no mutate


def _parse_checked(problem: Callable[[str], str | None], raw: Any) -> str:
    value = _text(raw)
    if (why := problem(value)) is not None:
        raise ValueError(why)
    return value


def _checked(problem: Callable[[str], str | None], what: str) -> Callable[[Any], str]:
    """A text value checked by one of constructs_lib.names' rules, the same the constructs apply."""
    return _bound(_parse_checked, what, problem)  # pragma: no mutate


def _prompt(raw: Any) -> str:
    """a non-empty prompt"""
    value = _text(raw)
    if not value.strip():
        raise ValueError("expected a non-empty prompt")
    if "\x00" in value:
        raise ValueError("expected a prompt without NUL characters")
    return value


def _parse_integer(low: int, high: int, raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"expected an integer from {low} to {high}")
    if isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw):
        raw = int(raw)
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if not isinstance(raw, int):
        raise ValueError(f"expected an integer from {low} to {high}")
    if not low <= raw <= high:
        raise ValueError(f"out of range; allowed: {low} to {high}")
    return raw


def _integer(low: int, high: int) -> Callable[[Any], int]:
    return _bound(_parse_integer, f"integer {low}-{high}", low, high)  # pragma: no mutate


def _parse_number(low: float, high: float, raw: Any) -> float:
    try:
        value = float(raw) if not isinstance(raw, bool) else None
    except (TypeError, ValueError):
        value = None
    if value is None:
        raise ValueError(f"expected a number from {low} to {high}")
    if not low < value <= high:
        raise ValueError(f"out of range; allowed: more than {low}, at most {high}")
    return value


def _number(low: float, high: float) -> Callable[[Any], float]:
    return _bound(_parse_number, f"number {low}-{high}", low, high)  # pragma: no mutate


def _boolean(raw: Any) -> bool:
    """true | false"""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ValueError("expected true or false")


def _bucket(raw: Any) -> str:
    """an existing S3 bucket name"""
    value = _text(raw)
    if bucket_name_problem(value):
        raise ValueError(f"expected an existing S3 bucket name ({BUCKET_RULE}; not an IP address)")
    return value


def _parse_choice(allowed: list[str], raw: Any) -> str:
    if raw not in allowed:
        raise ValueError(f"not allowed; allowed: {', '.join(allowed)}")
    return raw


def _choice(allowed: list[str]) -> Callable[[Any], str]:
    return _bound(_parse_choice, " | ".join(allowed), allowed)  # pragma: no mutate


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"the key(s) {', '.join(duplicates)} appear more than once; give each once")
    return dict(pairs)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows; give a finite number")


def _json_object(raw: Any) -> dict[str, Any]:
    """JSON object"""
    if isinstance(raw, str):
        if raw.strip() == "":
            return {}
        try:
            raw = json.loads(raw, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
        except json.JSONDecodeError as e:
            raise ValueError(f"not valid JSON ({e.msg} at character {e.pos}); expected a JSON object") from None
    if not isinstance(raw, dict):
        raise ValueError('expected a JSON object such as {"KEY": "value"}')
    return raw


def _patterns(raw: Any) -> tuple[str, ...]:
    """JSON array of glob patterns such as ["*.json", "*.safetensors"]"""
    if isinstance(raw, str):
        if raw.strip() == "":
            return ()
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(
                f'not valid JSON ({e.msg} at character {e.pos}); expected a JSON array such as ["*.json"]'
            ) from None
    if not isinstance(raw, list) or not all(isinstance(p, str) and p.strip() for p in raw):
        raise ValueError('expected a JSON array of non-empty glob patterns such as ["*.json", "*.safetensors"]')
    return tuple(raw)


def _parse_choices_list(allowed: tuple[str, ...], raw: Any) -> tuple[str, ...]:
    values = _patterns(raw)
    wrong = [v for v in values if v not in allowed]
    if wrong:
        raise ValueError(f"unknown check(s) {', '.join(map(repr, wrong))}; allowed: {', '.join(allowed)}")
    return values


def _choices_list(allowed: tuple[str, ...]) -> Callable[[Any], tuple[str, ...]]:
    doc = f"JSON array of check names ({', '.join(allowed)})"  # pragma: no mutate
    return _bound(_parse_choices_list, doc, allowed)  # pragma: no mutate


FIELDS: dict[str, Callable[[Any], Any]] = {
    "stack_name": _pattern(STACK_NAME, "a CloudFormation stack name (letters, digits, hyphens; starts with a letter)"),
    "model_id": _checked(repo_id_problem, REPO_ID_RULE),
    "revision": _checked(revision_problem, REVISION_RULE),
    "model_s3_uri": _optional(
        _pattern(re.compile(r"s3://[^\s\x00-\x1f\x7f-\x9f]+"), "an S3 prefix URI s3://<bucket>/<prefix>/")
    ),
    "model_bucket": _optional(_bucket),
    "reuse_model_bucket": _boolean,
    "model_kms_key_arn": _optional(
        _pattern(KMS_KEY_ARN, "the key ARN arn:aws:kms:<region>:<account>:key/<key-id> of the given bucket's key")
    ),
    "hf_token_secret_arn": _optional(
        _pattern(SECRET_ARN, f"{SECRET_ARN_RULE}, of a secret holding a Hugging Face token")
    ),
    "hf_token_kms_key_arn": _optional(
        _pattern(KMS_KEY_ARN, "the ARN of the customer-managed KMS key of the token secret (arn:aws:kms:...)")
    ),
    "include": _patterns,
    "exclude": _patterns,
    "staging_instance_type": _pattern(INSTANCE_TYPE, "a SageMaker Processing instance type such as ml.m5.2xlarge"),
    "staging_max_instances": _integer(1, 100),
    "staging_max_runtime_s": _integer(600, 42300),
    "deployment_mode": _choice(list(DEPLOYMENT_MODES)),
    "scale_to_zero": _boolean,
    "min_instances": _optional(_integer(0, 100)),
    "max_instances": _optional(_integer(1, 100)),
    "accelerators_per_copy": _optional(_integer(1, 64)),
    "min_copies": _optional(_integer(0, 1000)),
    "initial_copies": _optional(_integer(0, 1000)),
    "max_copies": _optional(_integer(1, 1000)),
    "target_concurrency": _optional(_number(0, 10_000)),
    "target_invocations_per_instance": _optional(_number(0, 1_000_000)),
    "routing_strategy": _optional(_choice(list(ROUTING_STRATEGIES))),
    "min_memory_mb": _optional(_integer(128, 4_000_000)),
    "component_name": _optional(_text),
    "preflight_skip": _choices_list(PREFLIGHT_CHECKS),
    "allow_unverified_s3": _boolean,
    "allow_checkpoint_code": _boolean,
    "preflight_sequences": _integer(1, 4096),
    "smoke_test": _boolean,
    "smoke_prompt": _prompt,
    "smoke_max_tokens": _integer(1, 4096),
    "smoke_inputs": _json_object,
    "smoke_expected_pattern": _optional(_text),
    "smoke_budget_s": _integer(60, 2700),
    "engine": _choice(engine_names()),
    "image": _optional(_text),
    "instance_type": _pattern(INSTANCE_TYPE, "a SageMaker instance type such as ml.g6.xlarge"),
    "instance_count": _integer(1, 100),
    "gpu_count": _optional(_integer(1, 64)),
    "gpu_memory_gib": _optional(_number(0, 1024)),
    "tensor_parallel_size": _optional(_integer(1, 64)),
    "max_model_len": _optional(_integer(1, 16_777_216)),
    "max_num_seqs": _optional(_integer(1, 65_536)),
    "engine_env": _json_object,
    "container_env": _json_object,
    "inference_ami_version": _optional(_choice(known_ami_versions())),
    "capacity_reservation_arn": _optional(_text),
    "startup_timeout_s": _integer(60, 3600),
    "download_timeout_s": _integer(60, 3600),
    "endpoint_name": _optional(_text),
    "gguf_file": _optional(_pattern(GGUF_FILE, GGUF_FILE_DESCRIPTION)),
}
# Dashboard, alarms and update policy (stacks/observability.py), parsed with the parsers above.
FIELDS.update(
    observability_fields(
        {
            "optional": _optional,
            "choice": _choice,
            "integer": _integer,
            "number": _number,
            "boolean": _boolean,
            "pattern": _pattern,
        }
    )
)


def _preflight_engine_settings(engine: Any, engine_env: Mapping[str, Any]) -> list[str]:
    """The engine flags the memory-fit preflight reads must hold values it understands."""
    problems = []
    settings = engine.preflight_settings(engine_env)
    keys = engine.preflight_keys
    dtype = settings.get("kv_cache_dtype")
    if dtype is not None and dtype not in KV_CACHE_DTYPES:
        problems.append(
            f"engine_env {keys['kv_cache_dtype']}={dtype!r}: the preflight cannot size this KV-cache dtype; "
            f"allowed: {', '.join(KV_CACHE_DTYPES)}"
        )
    share = settings.get("gpu_memory_utilization")
    if share is None:
        return problems
    given = engine_env[keys["gpu_memory_utilization"]]
    # A JSON infinity (1e999) is reported by the engine-flag check already; text such as "inf" is not.
    reported = isinstance(given, float) and not math.isfinite(given)
    if not reported and (not isinstance(share, float) or not (math.isfinite(share) and 0 < share <= 1)):
        problems.append(
            f"engine_env {keys['gpu_memory_utilization']}={given!r}: expected a number above 0 and at most 1 "
            '(as a number or as text such as "0.9")'
        )
    return problems


def _gguf_file_problems(engine: EngineSpec, gguf_file: str | None) -> list[str]:
    """gguf_file goes with an engine that serves GGUF files, and such an engine needs one."""
    if gguf_file and engine.model_format != "gguf":
        serving = [n for n in engine_names() if get_engine(n).model_format == "gguf"]
        return [
            f"gguf_file={gguf_file!r}: engine={engine.name!r} serves {engine.model_format} checkpoints, not GGUF "
            f"files; allowed: engine={' or '.join(serving)} with gguf_file, or no gguf_file"
        ]
    if not gguf_file and engine.model_format == "gguf":
        return [f"gguf_file: missing; engine={engine.name!r} serves one GGUF file: give {GGUF_FILE_DESCRIPTION}"]
    return []


def describe_allowed(key: str) -> str:
    """What ``key`` takes: every parser carries a description (tests/test_config_rules.py checks it)."""
    return str(FIELDS[key].__doc__)


@dataclass(frozen=True)
class DeploymentConfig:
    stack_name: str
    model_id: str
    revision: str
    model_s3_uri: str | None
    model_bucket: str | None
    reuse_model_bucket: bool
    model_kms_key_arn: str | None
    hf_token_secret_arn: str | None
    hf_token_kms_key_arn: str | None
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    staging_instance_type: str
    staging_max_instances: int
    staging_max_runtime_s: int
    deployment_mode: str
    scale_to_zero: bool
    min_instances: int | None
    max_instances: int | None
    accelerators_per_copy: int | None
    min_copies: int | None
    initial_copies: int | None
    max_copies: int | None
    target_concurrency: float | None
    target_invocations_per_instance: float | None
    routing_strategy: str | None
    min_memory_mb: int | None
    component_name: str | None
    preflight_skip: tuple[str, ...]
    allow_unverified_s3: bool
    allow_checkpoint_code: bool
    preflight_sequences: int
    smoke_test: bool
    smoke_prompt: str
    smoke_max_tokens: int
    smoke_inputs: dict[str, Any]
    smoke_expected_pattern: str | None
    smoke_budget_s: int
    engine: str
    image: str | None
    instance_type: str
    instance_count: int
    gpu_count: int | None
    gpu_memory_gib: float | None
    tensor_parallel_size: int | None
    max_model_len: int | None
    max_num_seqs: int | None
    engine_env: dict[str, Any]
    container_env: dict[str, Any]
    inference_ami_version: str | None
    capacity_reservation_arn: str | None
    startup_timeout_s: int
    download_timeout_s: int
    endpoint_name: str | None
    update_policy: str | None
    update_step_size: int
    update_wait_s: int
    update_termination_wait_s: int | None
    update_timeout_s: int | None
    alarms: bool
    alarm_email: str | None
    alarm_5xx_percent: float | None
    alarm_p99_latency_ms: float | None
    alarm_gpu_memory_percent: float | None
    alarm_no_capacity: bool
    dashboard: bool
    gguf_file: str | None
    # Derived, not context keys.
    serving_image: ServingImage = field(repr=False, default=None)  # type: ignore[assignment]
    image_source: str = "engine default"

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> DeploymentConfig:
        """Parse and check every key; raise ``ConfigError`` naming each bad key, value and what is allowed."""
        problems: list[str] = []
        ours = {k: v for k, v in context.items() if not is_cdk_key(k)}
        for key in sorted(set(ours) - set(FIELDS)):
            near = get_close_matches(key, FIELDS, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(sorted(FIELDS))}"
            # The value is never echoed: a misspelt key may hold a pasted secret ("container-env={HF_TOKEN...").
            if looks_secret(key):
                problems.append(f"{key}: unknown context key; {SECRET_HINT}")
            else:
                problems.append(f"{key}: unknown context key{hint}")

        values: dict[str, Any] = {}
        for key, parse in FIELDS.items():
            # CDK drops null values, so an optional key whose cdk.json default is null is simply absent.
            raw = ours.get(key)
            try:
                values[key] = parse(raw)
            except ValueError as e:
                if raw is None:
                    problems.append(f"{key}: missing; cdk.json must give a default ({describe_allowed(key)})")
                else:
                    shown = f"<{len(str(raw))} characters, not echoed>" if key in UNECHOED_KEYS else repr(raw)
                    problems.append(f"{key}={shown}: {e}")
        # Keep going after bad values so one run names every problem: checks that need a value that
        # failed to parse are skipped, the rest still run.
        if values.get("model_s3_uri") and values.get("model_bucket"):
            problems.append(
                f"model_s3_uri={values['model_s3_uri']!r} and model_bucket={values['model_bucket']!r}: "
                "give at most one (model_s3_uri serves that exact prefix; model_bucket holds "
                "models/<org>--<name>/<revision>/)"
            )
        if values.get("reuse_model_bucket") and (values.get("model_s3_uri") or values.get("model_bucket")):
            problems.append(
                "reuse_model_bucket=true: reuses the bucket this app created before (<stack>-models-<account>-"
                "<region>); give it alone, not with model_bucket or model_s3_uri"
            )
        if values.get("model_kms_key_arn") and not (values.get("model_s3_uri") or values.get("model_bucket")):
            problems.append(
                f"model_kms_key_arn={values['model_kms_key_arn']!r}: only for a given bucket (model_bucket or "
                "model_s3_uri); the bucket this stack creates uses S3-managed keys"
            )
        if values.get("hf_token_kms_key_arn") and not values.get("hf_token_secret_arn"):
            problems.append(
                f"hf_token_kms_key_arn={values['hf_token_kms_key_arn']!r}: only with hf_token_secret_arn (it is the "
                "key that secret is encrypted with)"
            )
        if values.get("model_s3_uri") and (values.get("hf_token_secret_arn") or values.get("include")):
            problems.append(
                f"model_s3_uri={values['model_s3_uri']!r}: serves an existing prefix as it is, so hf_token_secret_arn "
                "and include (which only apply to staging from the Hub) must not be given with it"
            )
        if values.get("model_s3_uri"):
            try:
                parse_s3_uri(values["model_s3_uri"])
            except ValueError as e:
                problems.append(str(e))

        engine_known = "engine" in values
        engine = get_engine(values["engine"] if engine_known else DEFAULT_ENGINE)
        image_source = "engine default (constructs_lib/data/engines.json)"
        image = default_image(engine, values.get("instance_type"))
        if engine.image_build:
            image_source = f"built by cdk deploy from {engine.image_build['directory']} (Docker needed)"
        try:
            if values.get("image"):
                image = ServingImage.from_uri(values["image"])
                image_source = "image context key"
            elif "instance_type" in values and not engine.image_build:
                key = recorded_tag_key(engine.name, values["instance_type"])
                recorded = context.get(key)
                if recorded is not None:
                    if not isinstance(recorded, str) or not engine.tag_pattern.match(recorded):
                        raise ValueError(
                            f"{key}={recorded!r} in cdk.context.json is not a pinned DLC tag "
                            f"({engine.tag_format}); rerun python -m llmops.resolve_image "
                            f"or remove it with `npx cdk context --reset {key}`"
                        )
                    image = ServingImage.from_dlc(
                        engine,
                        recorded,
                        origin=f"the tag recorded under {key} in cdk.context.json (to drop it: npx cdk context "
                        f"--reset {key})",
                    )
                    image_source = "recorded by llmops.resolve_image in cdk.context.json"
        except ValueError as e:
            problems.append(str(e))

        component_mode = values.get("deployment_mode") == INFERENCE_COMPONENT
        if component_mode and values.get("tensor_parallel_size") is None:
            values["tensor_parallel_size"] = values.get("accelerators_per_copy")
        if engine_known and "gguf_file" in values:
            problems += _gguf_file_problems(engine, values["gguf_file"])
        if "instance_type" in values:
            # Only the settings the parsers above cannot check alone (instance_count, max_model_len,
            # max_num_seqs and download_timeout_s are range-checked there; the model file does not change
            # any check): the constructs plan again with every setting when they build the endpoint.
            plan = plan_endpoint(
                engine=engine,
                image=image,
                instance_type=values["instance_type"],
                gpu_count=values.get("gpu_count"),
                gpu_memory_gib=values.get("gpu_memory_gib"),
                # A component's copy may use fewer GPUs than the instance has: plan_scaling checks it.
                tensor_parallel_size=None if component_mode else values.get("tensor_parallel_size"),
                # Engine flags can only be checked against a known engine.
                engine_env=values.get("engine_env") if engine_known else None,
                container_env=values.get("container_env") if engine_known else None,
                inference_ami_version=values.get("inference_ami_version"),
                capacity_reservation_arn=values.get("capacity_reservation_arn"),
                startup_timeout_s=values.get("startup_timeout_s"),
                endpoint_name=values.get("endpoint_name"),
                allow_checkpoint_code=bool(values.get("allow_checkpoint_code")),
            )
            problems += plan.errors
            if "deployment_mode" in values:
                problems += plan_scaling(
                    deployment_mode=values["deployment_mode"],
                    instance_spec_gpu_count=plan.instance.gpu_count if plan.instance else None,
                    tensor_parallel_size=values.get("tensor_parallel_size"),
                    initial_instances=values.get("instance_count"),
                    **{key: values.get(key) for key in SCALING_KEYS if key in values},
                )
        if values.get("component_name") is not None and not matches(COMPONENT_NAME, values["component_name"]):
            problems.append(
                f"component_name={values['component_name']!r}: not a valid inference component name; allowed: "
                "1-63 letters, digits and hyphens, starting and ending with a letter or digit"
            )
        if values.get("component_name") is not None and not component_mode:
            problems.append(
                f"component_name={values['component_name']!r}: only with deployment_mode=inference-component"
            )
        if "engine" in values:
            problems += _preflight_engine_settings(get_engine(values["engine"]), values.get("engine_env") or {})
        reserved = sorted({"messages", "stream"} & set(values.get("smoke_inputs") or {}))
        if reserved:
            problems.append(
                f"smoke_inputs: sets {', '.join(reserved)}, which the smoke test sends itself; allowed: other "
                'request fields such as {"chat_template_kwargs": {"enable_thinking": false}}'
            )
        if values.get("smoke_expected_pattern") is not None:
            try:
                re.compile(values["smoke_expected_pattern"])
            except re.error as e:
                problems.append(f"smoke_expected_pattern={values['smoke_expected_pattern']!r}: not a regex ({e})")
        problems += observability_problems(values)
        if problems:
            raise ConfigError(problems)
        return cls(**values, serving_image=image, image_source=image_source)

    @property
    def engine_spec(self) -> EngineSpec:
        """The engine, its model path pointing at ``gguf_file`` when one is given."""
        engine = get_engine(self.engine)
        return engine.for_model_file(self.gguf_file) if self.gguf_file else engine

    @property
    def trust_remote_code(self) -> bool:
        """Whether engine_env switches on the engine's remote-code flag, under any spelling it reads."""
        return bool(remote_code_keys(self.engine_spec, self.engine_env))

    @property
    def staging_include(self) -> tuple[str, ...]:
        """``include``, plus the GGUF file and its split parts: the only weights staged for llama.cpp."""
        return (*self.include, *staging_patterns(self.gguf_file)) if self.gguf_file else self.include
