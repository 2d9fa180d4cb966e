"""Custom::EndpointSmokeTest: the last step of a deploy asks the model a question and checks the answer.

``on_event`` validates the properties and records the start time (and, for an asynchronous endpoint, submits the
one request its check waits for); ``is_complete`` runs the checks,
retrying transient failures with exponential backoff until ``BudgetSeconds`` is spent, and raises with
a reason a person can act on. The checks, in order:

1. ``DescribeEndpoint``: ``InService`` and running ``EndpointConfigName``, the config this deployment
   created. Anything else after CloudFormation reported the endpoint done means SageMaker rolled the
   update back (or someone changed the endpoint since): the test fails with both names.
2. In component mode, ``DescribeInferenceComponent``: ``InService`` on this endpoint. A component scaled
   to zero has no copy: the first requests fail with "no capacity" (``NoCapacityInvocationFailures``),
   which is transient here, so a scale-out policy on that metric gets the budget to start a copy.
3. A non-streamed chat completion: HTTP 200 and a non-empty ``choices[0].message.content`` (or
   ``reasoning_content``), matching ``ExpectedPattern`` when one is given.
4. Unless ``Stream`` is false, a streamed chat completion: at least one content (or reasoning) delta,
   and the end of the stream. ``ExpectedPattern`` is not applied here: with sampling the two answers
   differ, and one pattern check tells a working model from a broken one. A stream that ends without
   ``data: [DONE]`` after yielding content passes, with ``note=stream_ended_without_done`` in the log
   and ``StreamEndedWithDone=false``: the answer did come, token by token, and SageMaker ended the
   response, which is what clients rely on. A stream without a single delta fails. ``StreamFormat``
   names the engine's framing: ``sse`` (the default) or ``jsonlines`` (LMI: one chunk a line, no
   ``[DONE]``; a last line cut off mid-way counts as a stream that did not end).
5. With a load gate (``LoadRequests`` set), a burst of streamed requests (smoke_load.py): its figures become the
   resource's attributes and one CloudWatch metric each, then every target must be met. A missed target fails
   the create or the update (which CloudFormation then rolls back) with each figure beside its target. The
   burst runs after the checks pass, in the same handler run, within ``LoadWindowSeconds``.

Asynchronous endpoints (``AsyncOutputPath`` set, the config's ``AsyncInferenceConfig``): after check 1, one
non-streamed chat completion goes through the queue instead of checks 3-5. ``InvokeEndpointAsync`` takes the body
inline (``Body``, at most 128,000 bytes) and answers 202 with the ``OutputLocation`` and ``FailureLocation`` the
answer or the error will be written to (botocore's sagemaker-runtime model, ``InvokeEndpointAsync``). The request is
submitted once per CloudFormation request, by ``on_event`` on Create and on an Update that is not a rollback: its
``InferenceId``, both locations and the submission time go into on_event's ``Data`` (``AsyncInferenceId``,
``AsyncOutputLocation``, ``AsyncFailureLocation``, ``AsyncSubmittedAt``), which the Provider framework hands to every
``is_complete`` run, so a run that ends before the answer and a transient failure while waiting both wait again for
the same request: nothing is submitted twice. A submission that fails for a transient reason (throttling, a 5xx, a
connection error) is tried again within on_event for at most ``SUBMIT_RETRY_S``, well inside its Lambda timeout; a
permanent one fails the resource at once. The request carries ``RequestTTLSeconds``, the budget within the API's
60-21600 s, so one still queued when the test stops waiting expires instead of waking a scaled-to-zero endpoint
hours later (API reference: "Maximum age in seconds a request can be in the queue before it is marked as expired").
The answer goes below ``<AsyncOutputPath>/smoke-test/`` (``S3OutputPathExtension``) and the failure below
``AsyncFailurePath``, the only objects the role may read: a location elsewhere fails on_event at once. Each
``is_complete`` run polls them (a read S3 fails for a transient reason, such as ``SlowDown``, is tried again) until
the budget ends or its own run is nearly over, then hands back to the waiter. Once the answer or the failure object
is read (the check passed, the answer check failed, or the failure object's text fails the stack), or the budget ends
without either (the reason says so), both objects are deleted (DeleteObject answers 204 for an absent key). ``Stream``
is not read; a load gate is refused. The attributes are the same keys: first token and latency are both the
queue-to-answer time.

Transient (retried): endpoint or component still ``Creating``/``Updating``, ``ModelNotReadyException``,
throttling, 5xx from SageMaker or the container, stream failures, connection errors, "no capacity".
Permanent (fails at once): the container's 4xx (a bad request does not get better), other validation
errors, a failed or mismatched endpoint, an empty or unparseable answer, a pattern mismatch.

Rollback: when an update of the stack fails, CloudFormation sends this resource an Update with its old
properties while the stack is ``UPDATE_ROLLBACK_IN_PROGRESS`` (aws-cdk #17040). The endpoint is then
still on the new config (CloudFormation rolls the endpoint back after this resource, which depends on it)
and a component may be scaled to zero, so the checks would fail the rollback. ``on_event`` reads the
stack's status (DescribeStacks) and answers at once: the same physical ID, every attribute key, no call.

Logs are ``key=value`` lines; they never contain the prompt, the answer or an error body (which can
echo the request). The failure reason, which CloudFormation shows, carries the status code, the first
bytes of the error body and the log group to open, in under 3 KB.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

# The checks themselves, pure, in the module beside this one (named after the handler: see tests/fakes/handlers.py).
from smoke_checks import (
    CheckFailure,
    check_answer,
    check_component,
    check_endpoint,
    check_locations,
    check_stream,
    failure_reason,
    metrics,
)
from smoke_load import attributes, figures, missed, publish, run_burst
from smoke_load import failure_reason as load_failure_reason
from smoke_settings import Settings, SettingsError  # noqa: F401  (tests reach SettingsError through this module)

import handler_kit
from endpoint_client import (
    InvocationError,
    InvocationResult,
    build_chat_request,
    classify,
    invoke_chat,
    stream_chat,
)
from endpoint_client.async_invocations import Submitted, new_inference_id, remove, submit_chat, wait_for_answer
from handler_kit import update_rolling_back
from handler_kit.resources import (
    LOAD_FIGURES,
    SMOKE_INFERENCE_ID_PREFIX,
    SMOKE_OUTPUT_EXTENSION,
    EndpointSmokeTestProperties,
)

PHYSICAL_ID_PREFIX = "smoke-"
# One model call may take this long; SageMaker itself gives a container 60 s for a non-streamed answer.
CALL_TIMEOUT_S = 90
# is_complete leaves the function when a backoff would not leave room for one more full attempt
# (two calls and two describes); the Provider's waiter calls it again after its query interval.
ATTEMPT_RESERVE_S = 2 * CALL_TIMEOUT_S + 20
FIRST_BACKOFF_S = 2.0
MAX_BACKOFF_S = 30.0
# The load burst must start with this much of the handler's run left beyond its window: the last requests' join
# (5 s), publishing (at most 2 x (3 + 10) s, the cloudwatch CLIENT_CONFIG below) and answering.
LOAD_SLACK_S = 45
# A burst's requests in flight at once, at most (constructs_lib/load_gate.py CONCURRENCY_RANGE): the runtime
# client's connection pool holds that many, so no request waits for a connection (botocore's default is 10).
MAX_LOAD_CONCURRENCY = 64
# An asynchronous answer is waited for until this much of the handler's run is left: the wait's last round (two
# GetObject) and the removal (two DeleteObject) run after its deadline, each at most 2 x (3 + 5) s and a back-off
# (the s3 CLIENT_CONFIG below), and then the answer.
ASYNC_CLEANUP_RESERVE_S = 75
ASYNC_CHECK = "asynchronous chat completion"
# on_event's Data for an asynchronous endpoint: the one request of this CloudFormation request, which every is_complete
# run waits for (the Provider framework passes on_event's Data to is_complete). They become attributes too.
ASYNC_DATA_KEYS = ("AsyncInferenceId", "AsyncOutputLocation", "AsyncFailureLocation", "AsyncSubmittedAt")
# A submission that fails for a transient reason is tried again within on_event for this long, with these back-offs.
# The on_event function runs at most 300 s (constructs_lib/smoke_test.py HANDLER_TIMEOUT): the last attempt starts
# within SUBMIT_RETRY_S and takes at most the runtime client's connect and read timeouts (10 + 90 s, CLIENT_CONFIG).
SUBMIT_RETRY_S = 60.0
SUBMIT_FIRST_BACKOFF_S = 1.0
SUBMIT_MAX_BACKOFF_S = 10.0
# Another attempt starts only with this much of on_event's run left: one call's timeouts and the answer.
SUBMIT_ATTEMPT_RESERVE_S = CALL_TIMEOUT_S + 20


# Each service's botocore Config; its client is made when first used (client()). Our own retry loop decides about
# retries: botocore makes exactly one attempt per model call. The load gate's figures (PutMetricData, the gate's
# statement allows its one namespace only) have short timeouts: in subnets without a route to CloudWatch (no NAT,
# no monitoring endpoint) publishing gives up in seconds, and the deploy does not wait on it (smoke_load.publish
# logs and goes on).
CLIENT_CONFIG: dict[str, dict[str, Any]] = {
    "sagemaker": {"retries": {"mode": "standard", "total_max_attempts": 3}},
    "sagemaker-runtime": {
        "connect_timeout": 10,
        "read_timeout": CALL_TIMEOUT_S,
        "retries": {"total_max_attempts": 1},
        "max_pool_connections": MAX_LOAD_CONCURRENCY,
    },
    "cloudwatch": {"connect_timeout": 3, "read_timeout": 10, "retries": {"mode": "standard", "total_max_attempts": 2}},
    "cloudformation": {"retries": {"mode": "standard", "total_max_attempts": 5}},
    # An asynchronous endpoint's answer and failure objects: small, polled every few seconds, then deleted.
    "s3": {"connect_timeout": 3, "read_timeout": 5, "retries": {"mode": "standard", "total_max_attempts": 2}},
}
_clients: dict[str, Any] = {}


def client(name: str) -> Any:
    """One boto3 client per service for the life of the execution environment, with its ``CLIENT_CONFIG``."""
    return handler_kit.cached_client(_clients, name, **CLIENT_CONFIG[name])


# The attributes a deploy publishes (metrics()); a rollback keeps every key, since the restored template's
# Fn::GetAtt reads them. CloudFormation does not send the previous values, so they read ROLLBACK_VALUE.
METRIC_KEYS = ("TimeToFirstTokenMs", "LatencyMs", "TokensPerSecond", "CompletionTokens", "StreamEndedWithDone")
ROLLBACK_VALUE = "n/a (rolled back)"


# --- checks (pure) ----------------------------------------------------------------------------------


class SmokeTestFailed(Exception):
    """Raised to CloudFormation: the message is the resource's failure reason."""


# --- running them -----------------------------------------------------------------------------------


def log(event: str, **fields: Any) -> None:
    """One ``key=value`` line (handler_kit.log_line). Never pass prompts or answers."""
    print(handler_kit.log_line(event, **fields), file=sys.stdout, flush=True)


def _describe(call: Callable[..., dict], check: str, **kwargs: Any) -> dict:
    try:
        return call(**kwargs)
    except (ClientError, BotoCoreError) as e:
        raise CheckFailure.from_error(check, classify(e)) from e


def run_checks(
    settings: Settings,
    *,
    sagemaker: Any,
    runtime: Any,
    s3: Any = None,
    submitted: Submitted | None = None,
    answer_by: float = math.inf,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str]:
    """One attempt at every check; raises :class:`CheckFailure` at the first that fails.

    An asynchronous endpoint's answer, to the request on_event submitted (``submitted``), is waited for until
    ``answer_by`` (on ``clock``), in S3 through ``s3``.
    """
    endpoint = _describe(sagemaker.describe_endpoint, "DescribeEndpoint", EndpointName=settings.endpoint_name)
    check_endpoint(endpoint, settings)
    if settings.asynchronous:
        if submitted is None:
            raise CheckFailure(
                ASYNC_CHECK,
                "on_event recorded no request to wait for (" + ", ".join(ASYNC_DATA_KEYS[:2]) + " in its Data)",
                transient=False,
            )
        whole = run_async_check(settings, submitted, s3=s3, answer_by=answer_by, clock=clock, sleep=sleep)
        return metrics(whole, None)
    component = settings.inference_component_name
    if component:
        described = _describe(
            sagemaker.describe_inference_component, "DescribeInferenceComponent", InferenceComponentName=component
        )
        check_component(described, settings)
        copies = (described.get("RuntimeConfig") or {}).get("CurrentCopyCount")
        if copies == 0:
            log("note", note="component_scaled_to_zero", component=component)

    body = settings.chat_body
    try:
        whole = invoke_chat(runtime, settings.endpoint_name, body, inference_component_name=component)
    except InvocationError as e:
        raise CheckFailure.from_error("chat completion", e.info) from e
    check_answer(whole, settings, "chat completion")
    log("call_passed", call="invoke", latency_ms=round(whole.latency_s * 1000), tokens=whole.tokens)

    streamed = None
    if settings.stream:
        body = build_chat_request(
            settings.prompt, max_tokens=settings.max_tokens, extra=settings.extra_body, stream=True
        )
        try:
            streamed = stream_chat(
                runtime,
                settings.endpoint_name,
                body,
                inference_component_name=component,
                stream_format=settings.stream_format,
            )
        except InvocationError as e:
            raise CheckFailure.from_error("streamed chat completion", e.info) from e
        check_stream(streamed)
        if not streamed.done:
            log("note", note="stream_ended_without_done", deltas=streamed.deltas)
        log(
            "call_passed",
            call="invoke_stream",
            ttft_ms=round((streamed.time_to_first_token_s or 0) * 1000),
            latency_ms=round(streamed.latency_s * 1000),
            tokens=streamed.tokens,
            token_source=streamed.token_source,
        )
    return metrics(whole, streamed)


def submit_check_request(
    settings: Settings,
    *,
    runtime: Any,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    remaining_s: Callable[[], float] = lambda: math.inf,
) -> Submitted:
    """The asynchronous check's one request, submitted inline with the budget as its ``RequestTTLSeconds``;
    :class:`SmokeTestFailed` when SageMaker refuses it, when it keeps failing for a transient reason for
    ``SUBMIT_RETRY_S`` (or on_event's run nearly ends), or when its locations lie outside the configured paths.

    Every attempt carries the same ``InferenceId``: one request, tried again, under one name in the logs.
    """
    inference_id = new_inference_id(SMOKE_INFERENCE_ID_PREFIX)
    began = clock()
    delay = SUBMIT_FIRST_BACKOFF_S
    attempt = 0
    while True:
        attempt += 1
        try:
            submitted = submit_chat(
                runtime,
                settings.endpoint_name,
                settings.chat_body,
                inference_id=inference_id,
                invocation_timeout_s=settings.invocation_timeout_s,
                request_ttl_s=settings.request_ttl_s,
                output_path_extension=SMOKE_OUTPUT_EXTENSION,
                clock=clock,
            )
        except InvocationError as e:
            failure = CheckFailure.from_error(ASYNC_CHECK, e.info)
        else:
            log(
                "submitted",
                endpoint=settings.endpoint_name,
                inference_id=submitted.inference_id,
                request_ttl_s=settings.request_ttl_s,
                attempt=attempt,
            )
            try:
                # Outside the paths the role may not read the objects, nor delete them: nothing to wait for or remove.
                check_locations(submitted, settings, ASYNC_CHECK)
                return submitted
            except CheckFailure as refused:
                failure = refused
        elapsed = clock() - began
        _log_failure(settings, failure, attempt=attempt, elapsed_s=elapsed)
        again = elapsed + delay <= SUBMIT_RETRY_S and remaining_s() - delay >= SUBMIT_ATTEMPT_RESERVE_S
        if not (failure.transient and again):
            outcome = f"still failing after {attempt} submissions in {elapsed:.0f} s" if failure.transient else None
            reason = failure_reason(failure, settings, elapsed_s=elapsed, budget_spent=False, outcome=outcome)
            raise SmokeTestFailed(reason) from None
        sleep(delay)
        delay = min(delay * 2, SUBMIT_MAX_BACKOFF_S)


def submission_data(submitted: Submitted) -> dict[str, str]:
    """on_event's Data for the request (``ASYNC_DATA_KEYS``): strings, as attributes are."""
    return dict(
        zip(
            ASYNC_DATA_KEYS,
            (
                submitted.inference_id,
                submitted.output_location,
                submitted.failure_location or "",
                f"{submitted.submitted_at:.3f}",
            ),
            strict=True,
        )
    )


def submitted_from(data: Mapping[str, Any], started_at: float) -> Submitted | None:
    """The request on_event submitted, from the Data is_complete gets; None when it names none."""
    inference_id, output, failure, sent = (data.get(key) for key in ASYNC_DATA_KEYS)
    if not inference_id or not output:
        return None
    return Submitted(str(inference_id), str(output), str(failure) if failure else None, float(sent or started_at))


def run_async_check(
    settings: Settings,
    submitted: Submitted,
    *,
    s3: Any,
    answer_by: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> InvocationResult:
    """The answer to on_event's request, read from S3 once there (``complete`` removes the objects)."""
    try:
        whole = wait_for_answer(s3, submitted, deadline=answer_by, clock=clock, sleep=sleep)
    except InvocationError as e:
        raise CheckFailure.from_error(ASYNC_CHECK, e.info) from e
    check_answer(whole, settings, ASYNC_CHECK)
    log("call_passed", call="invoke_async", latency_ms=round(whole.latency_s * 1000), tokens=whole.tokens)
    return whole


def remove_objects(s3: Any, submitted: Submitted) -> None:
    """Delete the request's output and failure objects; a failure is logged, never raised (the verdict stands)."""
    try:
        remove(s3, submitted)
    except (ClientError, BotoCoreError) as e:
        log("note", note="async_objects_not_removed", inference_id=submitted.inference_id, code=classify(e).code)
    else:
        log("removed", inference_id=submitted.inference_id)


def run_with_retries(
    settings: Settings,
    started_at: float,
    *,
    sagemaker: Any,
    runtime: Any,
    s3: Any = None,
    submitted: Submitted | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    remaining_s: Callable[[], float] = lambda: math.inf,
    reserve_s: float = ATTEMPT_RESERVE_S,
) -> dict[str, str] | None:
    """The checks' data; ``None`` to be called again later; :class:`SmokeTestFailed` when it is over.

    ``reserve_s``: the handler's run left for one more attempt (and, with a gate, its burst) after a back-off. An
    asynchronous answer is waited for until the budget ends or only ``ASYNC_CLEANUP_RESERVE_S`` of the run is left.
    """
    delay = FIRST_BACKOFF_S
    attempt = 0
    while True:
        attempt += 1
        answer_by = min(started_at + settings.budget_s, clock() + remaining_s() - ASYNC_CLEANUP_RESERVE_S)
        try:
            data = run_checks(
                settings,
                sagemaker=sagemaker,
                runtime=runtime,
                s3=s3,
                submitted=submitted,
                answer_by=answer_by,
                clock=clock,
                sleep=sleep,
            )
        except CheckFailure as failure:
            elapsed = clock() - started_at
            _log_failure(settings, failure, attempt=attempt, elapsed_s=elapsed)
            left = settings.budget_s - elapsed
            if not failure.transient or left <= 0:
                reason = failure_reason(failure, settings, elapsed_s=elapsed, budget_spent=failure.transient)
                raise SmokeTestFailed(reason) from None
            wait = min(delay, left)
            if remaining_s() - wait < reserve_s:
                # An asynchronous request stays queued: the next run waits for the same one.
                log(
                    "waiting",
                    endpoint=settings.endpoint_name,
                    elapsed_s=round(elapsed),
                    next_poll="waiter",
                    inference_id=submitted.inference_id if submitted else None,
                )
                return None
            sleep(wait)
            delay = min(delay * 2, MAX_BACKOFF_S)
        else:
            log("passed", endpoint=settings.endpoint_name, attempt=attempt, **{_snake(k): v for k, v in data.items()})
            return data


def _log_failure(settings: Settings, failure: CheckFailure, *, attempt: int, elapsed_s: float) -> None:
    info = failure.info
    log(
        "check_failed",
        endpoint=settings.endpoint_name,
        check=failure.check,
        transient=str(failure.transient).lower(),
        code=info.code if info else None,
        status=info.status if info else None,
        attempt=attempt,
        elapsed_s=round(elapsed_s),
    )


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# --- handlers ---------------------------------------------------------------------------------------


def physical_id(event: Mapping[str, Any], settings: Settings) -> str:
    """Stable: an update keeps the id it has, so CloudFormation never sees a replacement."""
    if event["RequestType"] == "Update" and event.get("PhysicalResourceId"):
        return event["PhysicalResourceId"]
    return PHYSICAL_ID_PREFIX + settings.endpoint_name


def rolling_back(stack_id: str, cloudformation: Any) -> bool:
    """Whether the stack is rolling an update back: the one Update that must not run the checks.

    A stack that cannot be described counts as not rolling back: the checks then run, as before.
    """
    return update_rolling_back(stack_id, cloudformation, log)


def on_event(
    event: dict,
    context: Any = None,
    *,
    clock: Callable[[], float] = time.time,
    cloudformation: Any = None,
    runtime: Any = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict:
    request = event["RequestType"]
    if request == "Delete":
        log("delete", physical_id=event.get("PhysicalResourceId"))
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    if (
        request == "Update"
        and event.get("PhysicalResourceId")
        and rolling_back(event.get("StackId", ""), cloudformation or client("cloudformation"))
    ):
        log("rollback", physical_id=event["PhysicalResourceId"], checks="skipped")
        # The restored template reads the attributes of its own properties: with a gate, the burst's figures too;
        # for an asynchronous endpoint, the request's keys on_event wrote.
        restored = EndpointSmokeTestProperties.from_properties(event.get("ResourceProperties") or {}, [])
        keys = (
            METRIC_KEYS
            + (tuple(LOAD_FIGURES) if restored.load_gate else ())
            + (ASYNC_DATA_KEYS if restored.asynchronous else ())
        )
        data = {**dict.fromkeys(keys, ROLLBACK_VALUE), "StartedAt": f"{clock():.3f}", "RolledBack": "true"}
        return {"PhysicalResourceId": event["PhysicalResourceId"], "Data": data}
    settings = Settings.from_properties(event["ResourceProperties"])
    log(
        "start",
        request=request,
        endpoint=settings.endpoint_name,
        component=settings.inference_component_name,
        mode="async" if settings.asynchronous else "real-time",
        budget_s=round(settings.budget_s),
        stream=str(settings.stream and not settings.asynchronous).lower(),
        load_requests=settings.load_requests,
        load_concurrency=settings.load_concurrency,
    )
    data = {"StartedAt": f"{clock():.3f}"}
    if settings.asynchronous:
        submitted = submit_check_request(
            settings,
            runtime=runtime or client("sagemaker-runtime"),
            clock=clock,
            sleep=sleep,
            remaining_s=_remaining_s(context),
        )
        data.update(submission_data(submitted))
    return {"PhysicalResourceId": physical_id(event, settings), "Data": data}


def complete(
    event: dict,
    *,
    sagemaker: Any = None,
    runtime: Any = None,
    cloudwatch: Any = None,
    s3: Any = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    remaining_s: Callable[[], float] = lambda: math.inf,
) -> dict:
    if event["RequestType"] == "Delete" or (event.get("Data") or {}).get("RolledBack") == "true":
        return {"IsComplete": True}
    settings = Settings.from_properties(event["ResourceProperties"])
    recorded = event.get("Data") or {}
    started_raw = recorded.get("StartedAt")
    started_at = float(started_raw) if started_raw else clock()
    window = settings.load_window_s or 0.0
    submitted = submitted_from(recorded, started_at) if settings.asynchronous else None
    s3 = (s3 or client("s3")) if settings.asynchronous else None
    try:
        data = run_with_retries(
            settings,
            started_at,
            sagemaker=sagemaker or client("sagemaker"),
            runtime=runtime or client("sagemaker-runtime"),
            s3=s3,
            submitted=submitted,
            clock=clock,
            sleep=sleep,
            remaining_s=remaining_s,
            reserve_s=ATTEMPT_RESERVE_S + (window + LOAD_SLACK_S if settings.load_gate else 0),
        )
    except Exception:
        # The resource fails: its answer or failure object was read, or the budget is spent. Either way the request
        # is over for this test, and its objects go (an absent one too: harmless).
        if submitted is not None:
            remove_objects(s3, submitted)
        raise
    if data is None:
        return {"IsComplete": False}  # the request is still pending: its objects stay until the next run reads them
    if submitted is not None:
        remove_objects(s3, submitted)
    if settings.load_gate:
        if remaining_s() < window + LOAD_SLACK_S:
            # The checks passed late in this run: the next poll starts a fresh one, checks again, then loads.
            log("waiting", endpoint=settings.endpoint_name, next_poll="waiter", reason="load_window")
            return {"IsComplete": False}
        data = {
            **data,
            **run_load_gate(
                settings,
                runtime=runtime or client("sagemaker-runtime"),
                cloudwatch=cloudwatch or client("cloudwatch"),
            ),
        }
    return {"IsComplete": True, "Data": data}


def run_load_gate(settings: Settings, *, runtime: Any, cloudwatch: Any) -> dict[str, str]:
    """The burst, its figures published, then its targets: the figures as attributes, or SmokeTestFailed."""
    log(
        "load_started",
        endpoint=settings.endpoint_name,
        requests=settings.load_requests,
        concurrency=settings.load_concurrency,
        window_s=round(settings.load_window_s or 0),
    )
    burst = run_burst(settings, runtime, window_s=float(settings.load_window_s or 0))
    measured = figures(burst)
    published = publish(cloudwatch, measured, settings.metric_deployment or settings.endpoint_name, log)
    misses = missed(settings, measured)
    log(
        "load_failed" if misses else "load_passed",
        endpoint=settings.endpoint_name,
        published=str(published).lower(),
        **{_snake(k): v for k, v in attributes(measured).items()},
    )
    if misses:
        raise SmokeTestFailed(load_failure_reason(settings, burst, measured, misses))
    return attributes(measured)


def _remaining_s(context: Any) -> Callable[[], float]:
    """Seconds left in this Lambda run (``context``), or no limit without one."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return (lambda: remaining() / 1000) if remaining else (lambda: math.inf)


def is_complete(event: dict, context: Any = None) -> dict:
    return complete(event, remaining_s=_remaining_s(context))
