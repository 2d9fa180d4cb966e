"""The smoke-test handler: every outcome, with Stubber for the control plane and the fake runtime over HTTP."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from endpoint_client import ErrorInfo, MalformedResponse, classify, short_reason
from tests.fakes.fake_runtime import FakeSageMaker, Reply, client, load_handler
from tests.harness import Stacks

ENDPOINT = "llm-endpoint-abc"
CONFIG = "EndpointConfig-new"
COMPONENT = "llm-component-abc"
PROMPT = "Write a haiku about S3"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def fake():
    with FakeSageMaker() as server:
        yield server


@pytest.fixture
def handler(fake, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", fake.url)
    fake.reset()
    module = load_handler("endpoint_smoke_test")
    module._clients["cloudformation"] = Stacks()  # a plain update; the rollback tests set its status
    return module


@pytest.fixture
def runtime(fake):
    return client("sagemaker-runtime", fake.url)


@pytest.fixture
def sagemaker():
    sm = client("sagemaker")
    with Stubber(sm) as stubber:
        sm.stubber = stubber
        yield sm
        stubber.assert_no_pending_responses()


class Clock:
    """Wall time that moves only when the handler sleeps."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def describe(sm, *, status="InService", config=CONFIG, times=1, failure=None):
    response = {
        "EndpointName": ENDPOINT,
        "EndpointArn": f"arn:aws:sagemaker:us-east-1:123456789012:endpoint/{ENDPOINT}",
        "EndpointConfigName": config,
        "EndpointStatus": status,
        "CreationTime": NOW,
        "LastModifiedTime": NOW,
    }
    if failure:
        response["FailureReason"] = failure
    for _ in range(times):
        sm.stubber.add_response("describe_endpoint", response, {"EndpointName": ENDPOINT})


def describe_component(sm, *, status="InService", copies=1, endpoint=ENDPOINT):
    response = {
        "InferenceComponentName": COMPONENT,
        "InferenceComponentArn": f"arn:aws:sagemaker:us-east-1:123456789012:inference-component/{COMPONENT}",
        "EndpointName": endpoint,
        "EndpointArn": f"arn:aws:sagemaker:us-east-1:123456789012:endpoint/{endpoint}",
        "InferenceComponentStatus": status,
        "RuntimeConfig": {"DesiredCopyCount": copies, "CurrentCopyCount": copies},
        "CreationTime": NOW,
        "LastModifiedTime": NOW,
    }
    sm.stubber.add_response("describe_inference_component", response, {"InferenceComponentName": COMPONENT})


def event(request="Create", physical_id=None, started=None, **props):
    properties = {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:framework",
        "EndpointName": ENDPOINT,
        "EndpointConfigName": CONFIG,
        "Prompt": PROMPT,
        "MaxTokens": "64",
        "BudgetSeconds": "600",
        "Stream": "true",
        "Fingerprint": "abc",
        **props,
    }
    result = {"RequestType": request, "ResourceProperties": properties, "RequestId": "r-1"}
    if physical_id:
        result["PhysicalResourceId"] = physical_id
    if started is not None:
        result["Data"] = {"StartedAt": f"{started:.3f}"}
    return result


def run(handler, sagemaker, runtime, clock=None, remaining=None, **props):
    clock = clock or Clock()
    return handler.complete(
        event(started=clock(), **props),
        sagemaker=sagemaker,
        runtime=runtime,
        clock=clock,
        sleep=clock.sleep,
        remaining_s=remaining or (lambda: 900.0),
    )


def failure(handler, sagemaker, runtime, clock=None, **props) -> str:
    with pytest.raises(handler.SmokeTestFailed) as info:
        run(handler, sagemaker, runtime, clock, **props)
    reason = str(info.value)
    assert len(reason.encode("utf-8")) <= 3000
    groups = f"/aws/sagemaker/Endpoints/{ENDPOINT}"
    if "InferenceComponentName" in props:
        groups = f"groups {groups} and /aws/sagemaker/InferenceComponents/{props['InferenceComponentName']}"
    else:
        groups = f"group {groups}"
    assert reason.endswith(f"See CloudWatch log {groups}."), reason
    return reason


# --- passing ------------------------------------------------------------------------------------------


def test_pass_returns_metrics_as_strings(handler, sagemaker, runtime, fake, capsys):
    fake.add_endpoint(ENDPOINT)
    describe(sagemaker)
    result = run(handler, sagemaker, runtime)
    assert result["IsComplete"] is True
    data = result["Data"]
    assert set(data) == {
        "TimeToFirstTokenMs",
        "LatencyMs",
        "TokensPerSecond",
        "CompletionTokens",
        "StreamEndedWithDone",
    }
    assert all(isinstance(v, str) for v in data.values())
    assert int(data["TimeToFirstTokenMs"]) >= 0 and int(data["LatencyMs"]) >= 0 and float(data["TokensPerSecond"]) > 0
    assert data["CompletionTokens"] == "15" and data["StreamEndedWithDone"] == "true"
    assert len(json.dumps(data)) < 4096

    whole, streamed = fake.invocations(ENDPOINT)
    assert whole.kind == "invocations" and streamed.kind == "invocations-response-stream"
    assert whole.headers["content-type"] == "application/json"
    assert whole.body == {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 64}
    assert streamed.body["stream"] is True
    assert "x-amzn-sagemaker-inference-component" not in whole.headers
    # Logs: key=value lines, never the prompt or the answer.
    out = capsys.readouterr().out
    assert "event=passed" in out and "attempt=1" in out
    assert PROMPT not in out and "Buckets" not in out


def test_extra_body_pattern_and_reasoning_only_answers(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, default=Reply(content="", reasoning="S3 stores objects in buckets"))
    describe(sagemaker)
    result = run(
        handler,
        sagemaker,
        runtime,
        ExtraBody='{"temperature": 0, "chat_template_kwargs": {"x": 1}}',
        ExpectedPattern="bucket",
    )
    assert result["IsComplete"]
    body = fake.invocations(ENDPOINT)[0].body
    assert body["temperature"] == 0 and body["chat_template_kwargs"] == {"x": 1}


def test_without_stream_one_call_and_ttft_is_the_latency(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT)
    describe(sagemaker)
    data = run(handler, sagemaker, runtime, Stream="false")["Data"]
    assert [r.kind for r in fake.invocations()] == ["invocations"]
    assert data["TimeToFirstTokenMs"] == data["LatencyMs"]


def test_stream_without_done_passes_with_a_note(handler, sagemaker, runtime, fake, capsys):
    fake.add_endpoint(ENDPOINT, Reply(), Reply(done=False, line_end="\r"))
    describe(sagemaker)
    data = run(handler, sagemaker, runtime)["Data"]
    assert data["StreamEndedWithDone"] == "false"
    assert "note=stream_ended_without_done" in capsys.readouterr().out


# --- failing at once -------------------------------------------------------------------------------


def test_empty_content_fails_without_retry(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, default=Reply(content=""))
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime)
    assert "chat completion: choices[0].message.content and reasoning_content are empty" in reason
    assert len(fake.invocations()) == 1


def test_malformed_json_fails_with_the_start_of_the_body(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, default=Reply(raw_body=b"<html><body>502 Bad Gateway</body></html>"))
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime)
    assert "the response is not JSON" in reason and "<html><body>502 Bad Gateway" in reason
    assert len(fake.invocations()) == 1


def test_container_4xx_is_not_retried(handler, sagemaker, runtime, fake, capsys):
    body = '{"object":"error","message":"max_tokens must be at least 1, got 0.","type":"BadRequestError","code":400}'
    fake.add_endpoint(ENDPOINT, default=Reply.model_error(400, body))
    describe(sagemaker)
    clock = Clock()
    reason = failure(handler, sagemaker, runtime, clock)
    assert len(fake.invocations()) == 1 and clock.sleeps == []
    assert (
        f"Smoke test of endpoint {ENDPOINT} failed: chat completion: HTTP 400 from the model container (ModelError)"
        in reason
    )
    assert "max_tokens must be at least 1" in reason
    assert "not retried: a client error does not go away" in reason
    out = capsys.readouterr().out
    assert "event=check_failed" in out and "status=400" in out and "transient=false" in out
    assert "max_tokens must be" not in out  # error bodies stay out of the logs


def test_wrong_endpoint_config_is_a_rollback(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT)
    describe(sagemaker, config="EndpointConfig-old")
    reason = failure(handler, sagemaker, runtime)
    assert "endpoint config: the endpoint runs endpoint config EndpointConfig-old" in reason
    assert f"this deployment created {CONFIG}" in reason and "rolled the update back" in reason
    assert fake.invocations() == []


def test_failed_endpoint_reports_its_failure_reason(handler, sagemaker, runtime, fake):
    describe(sagemaker, status="Failed", failure="CUDA error: no kernel image is available")
    reason = failure(handler, sagemaker, runtime)
    assert "endpoint status: status is Failed, expected InService (FailureReason: CUDA error" in reason


def test_missing_endpoint_is_permanent(handler, sagemaker, runtime):
    sagemaker.stubber.add_client_error(
        "describe_endpoint", "ValidationException", 'Could not find endpoint "x".', http_status_code=400
    )
    reason = failure(handler, sagemaker, runtime)
    assert "DescribeEndpoint: HTTP 400 from SageMaker (ValidationException): Could not find endpoint" in reason


def test_a_stream_without_any_delta_fails(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, Reply(), Reply(content=""))
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime)
    assert "streamed chat completion: the stream ended with [DONE] before a single content delta" in reason


def test_pattern_mismatch_names_the_pattern_not_the_answer(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT)
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime, ExpectedPattern=r"(?i)\bparis\b")
    assert "does not match ExpectedPattern '(?i)\\\\bparis\\\\b'" in reason
    assert "Buckets" not in reason


def test_a_long_reason_is_cut_below_the_limit_keeping_the_log_group(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, default=Reply.model_error(400, "漢字🪣" * 3000))
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime)
    assert len(reason.encode("utf-8")) <= 3000 < 4096
    assert "…" in reason and reason.endswith(f"/aws/sagemaker/Endpoints/{ENDPOINT}.")


# --- retries -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "transient",
    [
        Reply.model_error(503, "engine is starting"),
        Reply.model_error(500, "CUDA out of memory"),
        Reply.service_error("ThrottlingException", "Rate exceeded"),
        Reply.service_error("ModelNotReadyException", "Model is not ready"),
        Reply.service_error("ServiceUnavailable"),
        Reply.service_error("InternalFailure"),
    ],
    ids=["5xx", "500", "throttling", "not-ready", "503", "internal"],
)
def test_transient_errors_are_retried_then_pass(handler, sagemaker, runtime, fake, transient):
    fake.add_endpoint(ENDPOINT, transient)
    describe(sagemaker, times=2)
    clock = Clock()
    result = run(handler, sagemaker, runtime, clock)
    assert result["IsComplete"] is True
    assert clock.sleeps == [2.0]
    assert [r.kind for r in fake.invocations()] == ["invocations", "invocations", "invocations-response-stream"]


def test_a_broken_stream_is_retried(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, Reply(), Reply(stream_error="ModelStreamError", done=False))
    describe(sagemaker, times=2)
    assert run(handler, sagemaker, runtime)["IsComplete"] is True
    assert len(fake.invocations()) == 4


def test_endpoint_still_updating_is_waited_for(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT)
    describe(sagemaker, status="Updating", times=2)
    describe(sagemaker)
    clock = Clock()
    assert run(handler, sagemaker, runtime, clock)["IsComplete"] is True
    assert clock.sleeps == [2.0, 4.0]


def test_the_budget_ends_the_retries_with_the_last_reason(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, default=Reply.model_error(503, "upstream connect error"))
    describe(sagemaker, times=6)
    clock = Clock()
    reason = failure(handler, sagemaker, runtime, clock, BudgetSeconds="60")
    # Backoff doubles from 2 s; the last wait is cut to what is left of the budget.
    assert clock.sleeps == [2.0, 4.0, 8.0, 16.0, 30.0]
    assert "HTTP 503 from the model container" in reason and "upstream connect error" in reason
    assert "still failing after 60 s, the smoke-test budget of 60 s is spent" in reason


def test_not_inservice_until_the_budget_is_spent(handler, sagemaker, runtime, fake):
    describe(sagemaker, status="Creating", times=3)
    clock = Clock()
    reason = failure(handler, sagemaker, runtime, clock, BudgetSeconds="5")
    assert clock.sleeps == [2.0, 3.0]
    assert "endpoint status: status is Creating, expected InService" in reason and "budget of 5 s is spent" in reason


def test_short_of_lambda_time_it_hands_back_to_the_waiter(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, default=Reply.service_error("ModelNotReadyException"))
    describe(sagemaker)
    clock = Clock()
    assert run(handler, sagemaker, runtime, clock, remaining=lambda: 150.0) == {"IsComplete": False}
    assert clock.sleeps == []


def test_a_later_poll_fails_once_the_budget_recorded_by_on_event_is_spent(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, default=Reply.service_error("ModelNotReadyException"))
    describe(sagemaker)
    clock = Clock()
    started = handler.on_event(event(), clock=clock)["Data"]["StartedAt"]
    clock.now += 601
    with pytest.raises(handler.SmokeTestFailed, match="budget of 600 s is spent"):
        handler.complete(
            {**event(), "Data": {"StartedAt": started}},
            sagemaker=sagemaker,
            runtime=runtime,
            clock=clock,
            sleep=clock.sleep,
        )


# --- inference components ----------------------------------------------------------------------------


def test_component_mode_checks_the_component_and_sends_its_name(handler, sagemaker, runtime, fake):
    fake.add_endpoint(ENDPOINT, component=COMPONENT)
    describe(sagemaker)
    describe_component(sagemaker)
    assert run(handler, sagemaker, runtime, InferenceComponentName=COMPONENT)["IsComplete"]
    for request in fake.invocations():
        assert request.headers["x-amzn-sagemaker-inference-component"] == COMPONENT


def test_scaled_to_zero_component_gets_the_budget_to_start_a_copy(handler, sagemaker, runtime, fake, capsys):
    fake.add_endpoint(ENDPOINT, component=COMPONENT, copies=0, no_capacity_answers=2)
    for _ in range(3):
        describe(sagemaker)
        describe_component(sagemaker, copies=0)
    clock = Clock()
    assert run(handler, sagemaker, runtime, clock, InferenceComponentName=COMPONENT)["IsComplete"]
    assert clock.sleeps == [2.0, 4.0]
    out = capsys.readouterr().out
    assert "note=component_scaled_to_zero" in out and "code=ValidationError" in out


def test_failed_component_and_missing_header_are_permanent(handler, sagemaker, runtime, fake):
    describe(sagemaker)
    describe_component(sagemaker, status="Failed")
    reason = failure(handler, sagemaker, runtime, InferenceComponentName=COMPONENT)
    assert "inference component status: status is Failed" in reason
    assert (
        f"log groups /aws/sagemaker/Endpoints/{ENDPOINT} and /aws/sagemaker/InferenceComponents/{COMPONENT}" in reason
    )

    fake.add_endpoint(ENDPOINT, component=COMPONENT)
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime)  # no InferenceComponentName: SageMaker refuses
    assert "HTTP 400 from SageMaker (ValidationError): Inference Component Name header is required" in reason


def test_component_on_another_endpoint_is_refused(handler, sagemaker, runtime):
    describe(sagemaker)
    describe_component(sagemaker, endpoint="other-endpoint")
    reason = failure(handler, sagemaker, runtime, InferenceComponentName=COMPONENT)
    assert "it runs on endpoint other-endpoint" in reason


# --- lifecycle ----------------------------------------------------------------------------------------


def test_create_gets_a_stable_physical_id_and_records_the_start(handler):
    response = handler.on_event(event(), clock=lambda: 1234.5)
    assert response == {"PhysicalResourceId": f"smoke-{ENDPOINT}", "Data": {"StartedAt": "1234.500"}}


def test_update_keeps_the_physical_id(handler):
    response = handler.on_event(event("Update", physical_id="smoke-original", EndpointName="renamed"))
    assert response["PhysicalResourceId"] == "smoke-original"


def test_delete_does_nothing(handler, sagemaker, runtime, fake):
    delete = {"RequestType": "Delete", "PhysicalResourceId": f"smoke-{ENDPOINT}", "ResourceProperties": {}}
    assert handler.on_event(delete) == {"PhysicalResourceId": f"smoke-{ENDPOINT}"}
    assert handler.complete(delete, sagemaker=sagemaker, runtime=runtime) == {"IsComplete": True}
    assert handler.is_complete(delete, None) == {"IsComplete": True}
    assert fake.requests == []  # and the Stubber saw no call either


def test_invalid_properties_fail_at_once_with_every_problem(handler):
    bad = event(
        EndpointConfigName="",
        MaxTokens="lots",
        BudgetSeconds="-1",
        ExtraBody='{"messages": []}',
        ExpectedPattern="(",
        Stream="maybe",
    )
    with pytest.raises(handler.SettingsError) as info:
        handler.on_event(bad)
    message = str(info.value)
    for fragment in ("EndpointConfigName is required", "MaxTokens='lots'", "BudgetSeconds='-1' must be positive"):
        assert fragment in message
    for fragment in ("must not set 'messages'", "ExpectedPattern '('", "Stream='maybe'"):
        assert fragment in message
    assert message.startswith("Custom::EndpointSmokeTest properties: 6 problems: ")  # one refusal, one line
    with pytest.raises(handler.SettingsError, match=r"^Custom::EndpointSmokeTest properties: ExtraBody='\{' is not a"):
        handler.on_event(event(ExtraBody="{"))


def test_is_complete_uses_the_lambda_context_clock(handler, monkeypatch):
    seen = {}

    def fake_complete(evt, *, remaining_s, **kwargs):
        seen["remaining"] = remaining_s()
        return {"IsComplete": False}

    monkeypatch.setattr(handler, "complete", fake_complete)

    class Context:
        def get_remaining_time_in_millis(self):
            return 42_000

    assert handler.is_complete(event(), Context()) == {"IsComplete": False}
    assert seen["remaining"] == 42.0


# --- classification and reasons ---------------------------------------------------------------------


def client_error(code, message="m", status=400, **members):
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}, **members}
    return ClientError(response, "InvokeEndpoint")


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (client_error("ModelError", status=424, OriginalStatusCode=400, OriginalMessage="bad"), False),
        (client_error("ModelError", status=424, OriginalStatusCode=404, OriginalMessage="no route"), False),
        (client_error("ModelError", status=424, OriginalStatusCode=429, OriginalMessage="busy"), True),
        (client_error("ModelError", status=424, OriginalStatusCode=502, OriginalMessage="down"), True),
        (client_error("ModelError", status=424), True),
        (client_error("ModelNotReadyException", status=429), True),
        (client_error("ThrottlingException"), True),
        (client_error("ServiceUnavailable", status=503), True),
        (client_error("InternalFailure", status=500), True),
        (client_error("InternalDependencyException", status=530), True),
        (client_error("ModelStreamError"), True),
        (client_error("ValidationError", "Endpoint x of account 1 not found."), False),
        (client_error("ValidationError", "Inference Component has no capacity to process this request."), True),
        (client_error("AccessDeniedException", status=403), False),
        (client_error("SomethingNew", status=502), True),
        (EndpointConnectionError(endpoint_url="https://runtime.sagemaker"), True),
        (ReadTimeoutError(endpoint_url="https://runtime.sagemaker"), True),
        (MalformedResponse("not JSON", "<html>"), False),
    ],
)
def test_classify(error, transient):
    assert classify(error).transient is transient


def test_model_error_reports_the_container_status_and_body():
    info = classify(client_error("ModelError", "wrapped", 424, OriginalStatusCode=400, OriginalMessage='{"a":\n 1}'))
    assert info == ErrorInfo("ModelError", "wrapped", False, 400, '{"a": 1}', from_container=True)
    assert info.describe() == 'HTTP 400 from the model container (ModelError): body: {"a": 1}'


@given(text=st.text(), suffix=st.text(max_size=50), limit=st.integers(min_value=0, max_value=400))
def test_short_reason_fits_the_limit_and_keeps_the_suffix(text, suffix, limit):
    reason = short_reason(text, limit, suffix=suffix)
    encoded = reason.encode("utf-8", errors="surrogatepass")
    assert len(encoded) <= limit
    if len(suffix.encode("utf-8", errors="surrogatepass")) <= limit:
        assert reason.endswith(suffix)
    if len((text + suffix).encode("utf-8", errors="surrogatepass")) <= limit:
        assert reason == text + suffix
