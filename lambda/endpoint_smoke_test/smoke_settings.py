"""The smoke test's settings: the resource's properties (handler_kit/resources.py), checked, with what the reasons
name (the subject, the log groups).

The lowest module of the handler: index.py, smoke_checks.py and smoke_load.py import it, it imports none of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import handler_kit
from endpoint_client import STREAM_FORMATS, build_chat_request
from handler_kit.resources import EndpointSmokeTestProperties

ENDPOINT_LOG_GROUP = "/aws/sagemaker/Endpoints/{}"
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
