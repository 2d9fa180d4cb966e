"""The deployment's settings, read once from CDK context and validated together.

``app.py`` hands the raw context to ``DeploymentConfig.from_context``; nothing else reads context.
CLI context (``-c key=value``) always arrives as text, so numbers, booleans and JSON objects are
accepted both as JSON values (from cdk.json) and as their text form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any

from constructs_lib.endpoint_plan import plan_endpoint
from constructs_lib.engines import SECRET_HINT, engine_names, get_engine, looks_secret
from constructs_lib.images import SEMANTIC_TAG, ServingImage, known_ami_versions, recorded_tag_key
from constructs_lib.model_data import BUCKET_RULE, bucket_name_problem, parse_s3_uri

# Context keys CDK itself (or the CLI) sets; they are not ours to validate.
CDK_OWN_KEYS = {"cli-telemetry", "acknowledged-issue-numbers"}
NONE_WORDS = {"", "null", "none"}
DEFAULT_ENGINE = "vllm"
# Free-form maps may hold a pasted secret by mistake: never repeat their raw text in an error.
UNECHOED_KEYS = {"engine_env", "container_env"}

STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
REPO_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")
REVISION = re.compile(r"^[\w][\w./-]{0,254}$")
INSTANCE_TYPE = re.compile(r"^ml\.[a-z0-9-]+\.[a-z0-9]+$")
KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")


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


def _optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def parse_optional(raw: Any) -> Any:
        if raw is None or (isinstance(raw, str) and raw.strip().lower() in NONE_WORDS):
            return None
        return parse(raw)

    parse_optional.__doc__ = f"{parse.__doc__ or ''}, or null"
    return parse_optional


def _pattern(regex: re.Pattern[str], what: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = _text(raw)
        if not regex.match(value):
            raise ValueError(f"expected {what}")
        return value

    parse.__doc__ = what
    return parse


def _integer(low: int, high: int) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
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

    parse.__doc__ = f"integer {low}-{high}"
    return parse


def _number(low: float, high: float) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        try:
            value = float(raw) if not isinstance(raw, bool) else None
        except (TypeError, ValueError):
            value = None
        if value is None:
            raise ValueError(f"expected a number from {low} to {high}")
        if not low < value <= high:
            raise ValueError(f"out of range; allowed: more than {low}, at most {high}")
        return value

    parse.__doc__ = f"number {low}-{high}"
    return parse


def _bucket(raw: Any) -> str:
    """an existing S3 bucket name"""
    value = _text(raw)
    if bucket_name_problem(value):
        raise ValueError(f"expected an existing S3 bucket name ({BUCKET_RULE}; not an IP address)")
    return value


def _choice(allowed: list[str]) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        if raw not in allowed:
            raise ValueError(f"not allowed; allowed: {', '.join(allowed)}")
        return raw

    parse.__doc__ = " | ".join(allowed)
    return parse


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


FIELDS: dict[str, Callable[[Any], Any]] = {
    "stack_name": _pattern(STACK_NAME, "a CloudFormation stack name (letters, digits, hyphens; starts with a letter)"),
    "model_id": _pattern(REPO_ID, "a Hugging Face repository id such as Qwen/Qwen3-4B-Instruct-2507"),
    "revision": _pattern(REVISION, "a branch, tag or commit SHA (letters, digits, '.', '_', '-', '/')"),
    "model_s3_uri": _optional(_pattern(re.compile(r"^s3://.+"), "an S3 prefix URI s3://<bucket>/<prefix>/")),
    "model_bucket": _optional(_bucket),
    "model_kms_key_arn": _optional(
        _pattern(KMS_KEY_ARN, "the key ARN arn:aws:kms:<region>:<account>:key/<key-id> of the given bucket's key")
    ),
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
}


def describe_allowed(key: str) -> str:
    return FIELDS[key].__doc__ or ""


@dataclass(frozen=True)
class DeploymentConfig:
    stack_name: str
    model_id: str
    revision: str
    model_s3_uri: str | None
    model_bucket: str | None
    model_kms_key_arn: str | None
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
    # Derived, not context keys.
    serving_image: ServingImage = field(repr=False, default=None)  # type: ignore[assignment]
    image_source: str = "engine default"

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> DeploymentConfig:
        """Parse and check every key; raise ``ConfigError`` naming each bad key, value and what is allowed."""
        problems: list[str] = []
        ours = {k: v for k, v in context.items() if not is_cdk_key(k)}
        for key in sorted(set(ours) - set(FIELDS)):
            near = get_close_matches(key, FIELDS, n=1, cutoff=0.6)
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
        if values.get("model_kms_key_arn") and not (values.get("model_s3_uri") or values.get("model_bucket")):
            problems.append(
                f"model_kms_key_arn={values['model_kms_key_arn']!r}: only for a given bucket (model_bucket or "
                "model_s3_uri); the bucket this stack creates uses S3-managed keys"
            )
        if values.get("model_s3_uri"):
            try:
                parse_s3_uri(values["model_s3_uri"])
            except ValueError as e:
                problems.append(str(e))

        engine_known = "engine" in values
        engine = get_engine(values["engine"] if engine_known else DEFAULT_ENGINE)
        image_source = "engine default (constructs_lib/data/engines.json)"
        image = ServingImage.from_dlc(engine)
        try:
            if values.get("image"):
                image = ServingImage.from_uri(values["image"])
                image_source = "image context key"
            elif "instance_type" in values:
                key = recorded_tag_key(engine.name, values["instance_type"])
                recorded = context.get(key)
                if recorded is not None:
                    if not isinstance(recorded, str) or not SEMANTIC_TAG.match(recorded):
                        raise ValueError(
                            f"{key}={recorded!r} in cdk.context.json is not a pinned DLC tag "
                            "(X.Y.Z[.postN]-gpu-pyNNN-cuNNN-ubuntuA.B-sagemaker); rerun python -m llmops.resolve_image "
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

        if "instance_type" in values:
            plan = plan_endpoint(
                engine=engine,
                image=image,
                instance_type=values["instance_type"],
                instance_count=values.get("instance_count", 1),
                gpu_count=values.get("gpu_count"),
                gpu_memory_gib=values.get("gpu_memory_gib"),
                tensor_parallel_size=values.get("tensor_parallel_size"),
                max_model_len=values.get("max_model_len"),
                max_num_seqs=values.get("max_num_seqs"),
                # Engine flags can only be checked against a known engine.
                engine_env=values.get("engine_env", {}) if engine_known else {},
                container_env=values.get("container_env", {}) if engine_known else {},
                inference_ami_version=values.get("inference_ami_version"),
                capacity_reservation_arn=values.get("capacity_reservation_arn"),
                startup_timeout_s=values.get("startup_timeout_s"),
                download_timeout_s=values.get("download_timeout_s"),
                endpoint_name=values.get("endpoint_name"),
            )
            problems += plan.errors
        if problems:
            raise ConfigError(problems)
        return cls(**values, serving_image=image, image_source=image_source)
