"""The smoke test's settings: the resource's properties (handler_kit/resources.py), checked, with what the reasons
name (the subject, the log groups).

The lowest module of the handler: index.py, smoke_checks.py and smoke_load.py import it, it imports none of them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import handler_kit
from endpoint_client import STREAM_FORMATS, build_chat_request
from endpoint_client.async_invocations import INVOCATION_TIMEOUT_RANGE, MAX_INLINE_BODY_BYTES, REQUEST_TTL_RANGE
from handler_kit.resources import EndpointSmokeTestProperties

ENDPOINT_LOG_GROUP = "/aws/sagemaker/Endpoints/{}"
TTL_MARGIN_S = 60  # the request expires this long before the budget ends
COMPONENT_LOG_GROUP = "/aws/sagemaker/InferenceComponents/{}"


class SettingsError(ValueError):
    """The resource's properties are unusable; nothing was called."""


class Settings(EndpointSmokeTestProperties):
    """The resource's properties (handler_kit/resources.py, the class the construct writes them with), checked."""

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], problems: list[str] | None = None) -> Settings:
        """Every problem is reported together, before anything is called."""
        problems = []
        settings = super().from_properties(props, problems)
        if settings.max_tokens <= 0:
            problems.append(f"MaxTokens={props.get('MaxTokens')!r} must be positive")
        if not (settings.budget_s > 0 and math.isfinite(settings.budget_s)):
            problems.append(f"BudgetSeconds={props.get('BudgetSeconds')!r} must be positive")
        if settings.expected_pattern is not None:
            try:
                re.compile(settings.expected_pattern)
            except re.error as e:
                problems.append(f"ExpectedPattern {settings.expected_pattern!r} is not a regular expression ({e})")
        # The engine's framing of a streamed answer (engines.json stream_format): SSE or JSON Lines (LMI).
        if settings.stream_format not in STREAM_FORMATS:
            problems.append(
                f"StreamFormat={settings.stream_format!r} is not allowed; allowed: {', '.join(STREAM_FORMATS)}"
            )
        try:
            build_chat_request("", extra=settings.extra_body)
        except ValueError as e:
            problems.append(f"ExtraBody: {e}")
        if settings.load_gate:
            problems += _load_problems(settings, props)
        problems += _async_problems(settings, props)
        if problems:
            raise SettingsError(handler_kit.refusal(f"{cls.RESOURCE} properties", problems))
        return settings

    @property
    def log_groups(self) -> list[str]:
        groups = [ENDPOINT_LOG_GROUP.format(self.endpoint_name)]
        if self.inference_component_name:
            groups.append(COMPONENT_LOG_GROUP.format(self.inference_component_name))
        return groups

    @property
    def chat_body(self) -> dict[str, Any]:
        """The non-streamed chat completion the answer check sends."""
        return build_chat_request(self.prompt, max_tokens=self.max_tokens, extra=self.extra_body)

    @property
    def request_ttl_s(self) -> int:
        """The asynchronous request's ``RequestTTLSeconds``: the budget less a minute (``TTL_MARGIN_S``), within the
        API's 60-21600 s, so a request still queued expires before the test's last read instead of waking a
        scaled-to-zero endpoint later (it is submitted as the budget starts)."""
        low, high = REQUEST_TTL_RANGE
        return min(max(math.ceil(self.budget_s) - TTL_MARGIN_S, low), high)

    @property
    def subject(self) -> str:
        if self.inference_component_name:
            return f"endpoint {self.endpoint_name} (inference component {self.inference_component_name})"
        return f"endpoint {self.endpoint_name}"


def _load_problems(settings: Settings, props: Mapping[str, Any]) -> list[str]:
    problems = []
    for name, key, low in (
        ("load_requests", "LoadRequests", 1),
        ("load_concurrency", "LoadConcurrency", 1),
        ("load_max_tokens", "LoadMaxTokens", 2),
    ):
        value = getattr(settings, name)
        if value is None or value < low:
            problems.append(f"{key}={props.get(key)!r} must be a whole number of at least {low} with LoadRequests")
    if not (settings.load_window_s and settings.load_window_s > 0 and math.isfinite(settings.load_window_s)):
        problems.append(f"LoadWindowSeconds={props.get('LoadWindowSeconds')!r} must be positive with LoadRequests")
    for name, key in (
        ("target_ttft_p95_ms", "TargetTtftP95Ms"),
        ("target_itl_p95_ms", "TargetItlP95Ms"),
        ("target_min_output_tokens_per_s", "TargetMinOutputTokensPerSecond"),
        ("target_max_error_rate", "TargetMaxErrorRate"),
    ):
        value = getattr(settings, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            problems.append(f"{key}={props.get(key)!r} must be a number of at least 0")
    return problems


def s3_prefix(path: str) -> tuple[str, str] | None:
    """``s3://bucket[/prefix]`` -> (bucket, prefix ending in ``/`` or empty); None when it is not such a path."""
    if not path.startswith("s3://"):
        return None
    bucket, _, prefix = path[5:].partition("/")
    if not bucket:
        return None
    prefix = prefix.rstrip("/")
    return bucket, f"{prefix}/" if prefix else ""


def _async_problems(settings: Settings, props: Mapping[str, Any]) -> list[str]:
    """An asynchronous endpoint's properties (``AsyncOutputPath`` set). ``Stream`` is not read with them: the queue
    writes one whole answer to S3, so the answer check is one non-streamed request whatever ``Stream`` says."""
    problems = []
    if not settings.asynchronous:
        for name, key in (
            ("async_failure_path", "AsyncFailurePath"),
            ("invocation_timeout_s", "InvocationTimeoutSeconds"),
        ):
            if getattr(settings, name) is not None:
                problems.append(f"{key}={props.get(key)!r} is for an asynchronous endpoint: set AsyncOutputPath too")
        return problems
    for key in ("AsyncOutputPath", "AsyncFailurePath"):
        value = props.get(key)
        if value is not None and s3_prefix(str(value)) is None:
            problems.append(f"{key}={value!r} must be an S3 path, s3://<bucket>/<prefix>")
    low, high = INVOCATION_TIMEOUT_RANGE
    timeout = settings.invocation_timeout_s
    if timeout is not None and not low <= timeout <= high:
        problems.append(f"InvocationTimeoutSeconds={props.get('InvocationTimeoutSeconds')!r} must be {low}-{high}")
    if settings.load_gate:
        problems.append(
            f"LoadRequests={props.get('LoadRequests')!r} cannot gate an asynchronous endpoint (AsyncOutputPath): the "
            "load gate measures a burst of streamed real-time requests, and such an endpoint answers through its "
            "queue into S3; leave the load gate out"
        )
    if settings.inference_component_name:
        problems.append(
            f"InferenceComponentName={settings.inference_component_name!r} cannot be checked on an asynchronous "
            "endpoint (AsyncOutputPath): InvokeEndpointAsync names no inference component"
        )
    try:
        size = len(json.dumps(settings.chat_body).encode("utf-8"))
    except ValueError:
        return problems  # ExtraBody's own problem is reported already
    if size > MAX_INLINE_BODY_BYTES:
        problems.append(
            f"the request (Prompt, ExtraBody) is {size} bytes; InvokeEndpointAsync takes at most "
            f"{MAX_INLINE_BODY_BYTES} bytes inline: shorten the prompt"
        )
    return problems
