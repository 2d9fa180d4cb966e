"""The smoke test's checks, pure: what a described endpoint or component and an answer must show, and the reason.

No AWS calls here (index.py makes them); each check raises ``CheckFailure`` naming what failed and whether
retrying within the budget can help.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from smoke_settings import Settings, s3_prefix

from endpoint_client import ErrorInfo, InvocationResult, short_reason
from endpoint_client.async_invocations import Submitted, s3_location
from handler_kit.resources import SMOKE_OUTPUT_EXTENSION

TRANSIENT_ENDPOINT_STATUSES = frozenset({"Creating", "Updating", "SystemUpdating", "RollingBack"})


TRANSIENT_COMPONENT_STATUSES = frozenset({"Creating", "Updating"})


class CheckFailure(Exception):
    """One check failed. ``transient`` failures are retried within the budget."""

    def __init__(self, check: str, detail: str, *, transient: bool, info: ErrorInfo | None = None) -> None:
        super().__init__(f"{check}: {detail}")
        self.check = check
        self.detail = detail
        self.transient = transient
        self.info = info

    @classmethod
    def from_error(cls, check: str, info: ErrorInfo) -> CheckFailure:
        return cls(check, info.describe(), transient=info.transient, info=info)


def check_endpoint(description: Mapping[str, Any], settings: Settings) -> None:
    status = description.get("EndpointStatus")
    if status != "InService":
        detail = f"status is {status}, expected InService"
        if description.get("FailureReason"):
            detail += f" (FailureReason: {description['FailureReason']})"
        raise CheckFailure("endpoint status", detail, transient=status in TRANSIENT_ENDPOINT_STATUSES)
    running = description.get("EndpointConfigName")
    if running != settings.endpoint_config_name:
        raise CheckFailure(
            "endpoint config",
            f"the endpoint runs endpoint config {running}, but this deployment created "
            f"{settings.endpoint_config_name}: SageMaker rolled the update back, or the endpoint was changed "
            "outside this stack",
            transient=False,
        )


def check_component(description: Mapping[str, Any], settings: Settings) -> None:
    status = description.get("InferenceComponentStatus")
    if status != "InService":
        detail = f"status is {status}, expected InService"
        if description.get("FailureReason"):
            detail += f" (FailureReason: {description['FailureReason']})"
        raise CheckFailure("inference component status", detail, transient=status in TRANSIENT_COMPONENT_STATUSES)
    running = (description.get("Specification") or {}).get("ModelName")
    if settings.model_name and running and running != settings.model_name:
        # A rolling update that an alarm rolled back leaves the component InService on its old model.
        raise CheckFailure(
            "inference component model",
            f"the component runs model {running}, but this deployment created {settings.model_name}: SageMaker "
            "rolled the update back (an alarm fired during the rolling update), or the component was changed "
            "outside this stack",
            transient=False,
        )
    if description.get("EndpointName") != settings.endpoint_name:
        raise CheckFailure(
            "inference component",
            f"it runs on endpoint {description.get('EndpointName')}, not {settings.endpoint_name}",
            transient=False,
        )


def check_answer(result: InvocationResult, settings: Settings, check: str) -> None:
    text = result.content or result.reasoning
    if not text.strip():
        raise CheckFailure(
            check,
            f"choices[0].message.content and reasoning_content are empty (finish_reason={result.finish_reason})",
            transient=False,
        )
    if settings.expected_pattern and not re.search(settings.expected_pattern, text):
        raise CheckFailure(
            check,
            f"the answer ({len(text)} characters) does not match ExpectedPattern {settings.expected_pattern!r}; "
            f"python -m llmops.invoke --endpoint {settings.endpoint_name} shows what the model says",
            transient=False,
        )


def check_locations(submitted: Submitted, settings: Settings, check: str) -> None:
    """The answer must lie below ``AsyncOutputPath``/``SMOKE_OUTPUT_EXTENSION`` and the failure below
    ``AsyncFailurePath`` (without one, below the output path): the handler's role reads and deletes only there, so
    anything else cannot be checked."""
    output_path = f"{(settings.async_output_path or '').rstrip('/')}/{SMOKE_OUTPUT_EXTENSION}"
    expected = (
        ("OutputLocation", submitted.output_location, output_path, "AsyncOutputPath and S3OutputPathExtension"),
        (
            "FailureLocation",
            submitted.failure_location,
            settings.async_failure_path or settings.async_output_path or "",
            "AsyncFailurePath" if settings.async_failure_path else "AsyncOutputPath",
        ),
    )
    for name, location, path, source in expected:
        if location is not None and not _under(location, path):
            raise CheckFailure(
                check,
                f"InvokeEndpointAsync answered {name} {location}, outside {path.rstrip('/')}/ ({source}), where "
                "the smoke test may read: the endpoint's config is not the one this deployment created, or the "
                "properties name other paths",
                transient=False,
            )


def _under(location: str, path: str) -> bool:
    prefix = s3_prefix(path)
    try:
        bucket, key = s3_location(location)
    except ValueError:
        return False
    return prefix is not None and bucket == prefix[0] and key.startswith(prefix[1])


def check_stream(result: InvocationResult) -> None:
    if result.deltas == 0:
        ending = "with" if result.done else "without"
        raise CheckFailure(
            "streamed chat completion",
            f"the stream ended {ending} [DONE] before a single content delta",
            transient=False,
        )


def metrics(whole: InvocationResult, streamed: InvocationResult | None) -> dict[str, str]:
    """The resource's attributes, as strings. Without a stream, the first token comes with the answer."""
    timed = streamed or whole
    first = timed.time_to_first_token_s if timed.time_to_first_token_s is not None else timed.latency_s
    return {
        "TimeToFirstTokenMs": str(round(first * 1000)),
        "LatencyMs": str(round(whole.latency_s * 1000)),
        "TokensPerSecond": f"{timed.tokens_per_second:.1f}",
        "CompletionTokens": str(timed.tokens),
        "StreamEndedWithDone": "true" if streamed is None or streamed.done else "false",
    }


def failure_reason(
    failure: CheckFailure, settings: Settings, *, elapsed_s: float, budget_spent: bool, outcome: str | None = None
) -> str:
    """The resource's failure reason, under 3000 bytes; ``outcome`` (what the retries came to) replaces the one
    derived from ``budget_spent`` and the status."""
    if outcome is None:
        if budget_spent:
            spent = f"the smoke-test budget of {settings.budget_s:.0f} s is spent"
            outcome = f"still failing after {elapsed_s:.0f} s, {spent}"
        elif failure.info is not None and failure.info.status is not None and 400 <= failure.info.status < 500:
            outcome = "not retried: a client error does not go away"
        else:
            outcome = "not retried"
    head = f"Smoke test of {settings.subject} failed: {failure.check}: {failure.detail} ({outcome})."
    groups = " and ".join(settings.log_groups)
    noun = "groups" if len(settings.log_groups) > 1 else "group"
    return short_reason(head, suffix=f" See CloudWatch log {noun} {groups}.")
