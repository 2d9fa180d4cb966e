"""The smoke test of an asynchronous endpoint (issue 38): submit, the answer or failure object in S3, the verdict.

The fake SageMaker (tests/fakes/fake_runtime.py) answers ``InvokeEndpointAsync`` with 202 and the locations, then
writes the answer (or the failure) to the moto S3 server over HTTP from a thread. ``on_event`` submits the one
request of a CloudFormation request; each ``is_complete`` run gets on_event's ``Data`` (as the Provider framework
passes it) and waits for that request's objects. The handler's waits run on a fake clock: ``settling`` sleeps let
the fake's writes finish first (time passes, the queue answers), ``held`` keeps them back until the test lets them
go (an answer slower than the handler's run). Each test has its own bucket.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import botocore.endpoint
import pytest
from aws_cdk.assertions import Template
from botocore.exceptions import ClientError

from constructs_lib import EndpointSmokeTest
from endpoint_client.async_invocations import Submitted
from handler_kit.resources import SMOKE_INFERENCE_ID_PREFIX, SMOKE_OUTPUT_EXTENSION
from tests.conftest import default_context
from tests.fakes import fixtures
from tests.fakes.fake_runtime import FakeSageMaker, Reply, client, load_handler
from tests.handlers import test_smoke_handler as smoke
from tests.handlers.test_failure_paths import SMOKE_ENDPOINT, Driver, assert_well_behaved
from tests.handlers.test_smoke_handler import CONFIG, ENDPOINT, PROMPT, Clock, describe, event
from tests.harness import Clock as HarnessClock
from tests.harness import Faults, HandlerUnderTest, LambdaContext, Stacks, Timeouts

sagemaker = smoke.sagemaker  # a Stubber-backed control plane, checked for unused answers
ASYNC = "async-invocations"
METRIC_KEYS = {"TimeToFirstTokenMs", "LatencyMs", "TokensPerSecond", "CompletionTokens", "StreamEndedWithDone"}
ASYNC_KEYS = {"AsyncInferenceId", "AsyncOutputLocation", "AsyncFailureLocation", "AsyncSubmittedAt"}
TTL_HEADER = "x-amzn-sagemaker-requestttlseconds"
RESOURCE = "Custom::EndpointSmokeTest"
REFUSED = "prompt is longer than the model's context (4096 tokens)"


# The shared fixtures: the session's moto server and the fake runtime answering into it.
moto_url, async_fake = fixtures.moto_url, fixtures.async_fake


@pytest.fixture(scope="module")
def fake(async_fake):
    return async_fake


@pytest.fixture
def bucket(moto_url, fake):
    """A bucket of its own; emptied and removed after the test, once the fake's writes have ended."""
    name = f"smoke-async-{uuid.uuid4().hex[:12]}"
    s3 = client("s3", moto_url)
    s3.create_bucket(Bucket=name)
    yield name
    fake.settle()
    for key in keys(s3, name):
        s3.delete_object(Bucket=name, Key=key)
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def s3(moto_url):
    return client("s3", moto_url)


@pytest.fixture
def runtime(fake):
    return client("sagemaker-runtime", fake.url)


@pytest.fixture
def handler(fake, moto_url, monkeypatch):
    for key, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": fake.url,
        "AWS_ENDPOINT_URL_S3": moto_url,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
    fake.reset()
    module = load_handler("endpoint_smoke_test")
    module._clients["cloudformation"] = Stacks()
    return module


def keys(s3: Any, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def paths(bucket: str) -> dict[str, str]:
    return {"AsyncOutputPath": f"s3://{bucket}/async/out", "AsyncFailurePath": f"s3://{bucket}/async/fail"}


def async_endpoint(fake: FakeSageMaker, bucket: str, *replies: Reply, name: str = ENDPOINT, **settings: Any):
    where = paths(bucket)
    return fake.add_endpoint(
        name, *replies, async_output=where["AsyncOutputPath"], async_failure=where["AsyncFailurePath"], **settings
    )


def async_props(bucket: str, **props: Any) -> dict[str, Any]:
    return {**paths(bucket), "InvocationTimeoutSeconds": "120", "Stream": "false", **props}


def submissions(fake: FakeSageMaker) -> list[Any]:
    return [r for r in fake.requests if r.kind == ASYNC]


def settling(clock: Clock, fake: FakeSageMaker) -> Callable[[float], None]:
    """A sleep during which the queue answers: the fake's pending writes finish, then the clock moves."""

    def sleep(seconds: float) -> None:
        fake.settle()
        clock.sleep(seconds)

    return sleep


@contextlib.contextmanager
def held(fake: FakeSageMaker, monkeypatch: pytest.MonkeyPatch):
    """The fake's answers wait until the block ends: an endpoint slower than the handler's run."""
    release = threading.Event()
    write = fake.answer_async

    def answer_later(*args: Any) -> None:
        release.wait(10)
        write(*args)

    monkeypatch.setattr(fake, "answer_async", answer_later)
    try:
        yield
    finally:
        release.set()
        fake.settle()


def s3_error(code: str, message: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject"
    )


SLOW_DOWN = ("SlowDown", "Please reduce your request rate.", 503)
KMS_DENIED = ("AccessDenied", "User is not authorized to perform: kms:Decrypt on the resource", 403)


class Spy:
    """The handler's S3 client, recording each GetObject and DeleteObject; with ``read_error``, the first ``times``
    GetObject fail with it (S3's own answer, raised as botocore raises it)."""

    def __init__(self, s3: Any, read_error: tuple[str, str, int] | None = None, times: int = 0) -> None:
        self._s3 = s3
        self.read: list[str] = []
        self.deleted: list[str] = []
        self.read_error, self.times, self.failed_reads = read_error, times, 0

    def get_object(self, **kwargs: Any) -> Any:
        self.read.append(f"s3://{kwargs['Bucket']}/{kwargs['Key']}")
        if self.read_error and self.failed_reads < self.times:
            self.failed_reads += 1
            raise s3_error(*self.read_error)
        return self._s3.get_object(**kwargs)

    def delete_object(self, **kwargs: Any) -> Any:
        self.deleted.append(f"s3://{kwargs['Bucket']}/{kwargs['Key']}")
        return self._s3.delete_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)


def submit(handler, runtime, bucket, *, clock, sleep=None, context=None, **props) -> dict[str, Any]:
    """on_event on a Create, and the event every is_complete run then gets: the request with on_event's answer."""
    request = event(**async_props(bucket, **props))
    answer = handler.on_event(request, context, clock=clock, runtime=runtime, sleep=sleep or clock.sleep)
    return {**request, **answer}


def poll(handler, waiter_event, sagemaker, runtime, s3, *, clock, sleep, remaining=None) -> dict[str, Any]:
    """One is_complete run."""
    return handler.complete(
        waiter_event,
        sagemaker=sagemaker,
        runtime=runtime,
        s3=s3,
        clock=clock,
        sleep=sleep,
        remaining_s=remaining or (lambda: 300.0),
    )


def run(handler, sagemaker, runtime, s3, fake, bucket, *, clock=None, sleep=None, remaining=None, **props):
    """on_event, then one is_complete run."""
    clock = clock or Clock()
    sleep = sleep or settling(clock, fake)
    waiter_event = submit(handler, runtime, bucket, clock=clock, sleep=sleep, **props)
    return poll(handler, waiter_event, sagemaker, runtime, s3, clock=clock, sleep=sleep, remaining=remaining)


def failure(handler, *args, **kwargs) -> str:
    with pytest.raises(handler.SmokeTestFailed) as info:
        run(handler, *args, **kwargs)
    return checked_reason(str(info.value))


def checked_reason(reason: str) -> str:
    assert len(reason.encode("utf-8")) <= 3000
    assert reason.startswith(f"Smoke test of endpoint {ENDPOINT} failed: ")
    assert reason.endswith(f"See CloudWatch log group /aws/sagemaker/Endpoints/{ENDPOINT}."), reason
    return reason


# --- submit -> output object -> pass ----------------------------------------------------------------------------


def test_answer_in_the_output_object_passes_with_the_attributes_and_leaves_no_object(
    handler, sagemaker, runtime, s3, fake, bucket, capsys
):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    spy = Spy(s3)
    clock = Clock()
    waiter_event = submit(handler, runtime, bucket, clock=clock)
    result = poll(handler, waiter_event, sagemaker, runtime, spy, clock=clock, sleep=settling(clock, fake))
    assert result["IsComplete"] is True
    data = result["Data"]
    assert set(data) == METRIC_KEYS and all(isinstance(v, str) for v in data.values())
    assert data["TimeToFirstTokenMs"] == data["LatencyMs"] and int(data["LatencyMs"]) >= 0
    assert data["CompletionTokens"] == "15" and data["StreamEndedWithDone"] == "true"

    # One inline, non-streamed request, named for the role's key condition, with the per-request timeout and the
    # budget as its time to live in the queue.
    (submitted,) = submissions(fake)
    assert fake.invocations() == []  # no real-time call, no stream
    assert submitted.body == {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 64}
    inference_id = submitted.headers["x-amzn-sagemaker-inference-id"]
    assert inference_id.startswith(SMOKE_INFERENCE_ID_PREFIX) and len(inference_id) <= 64
    assert submitted.headers["x-amzn-sagemaker-invocationtimeoutseconds"] == "120"
    assert submitted.headers[TTL_HEADER] == "540"  # the budget of 600 s less a minute
    assert submitted.headers["x-amzn-sagemaker-s3outputpathextension"] == SMOKE_OUTPUT_EXTENSION == "smoke-test"
    # Both objects removed (the answer below the extension), and nothing else is in the bucket once the fake is done.
    output, failure_object = spy.deleted
    assert output.startswith(f"s3://{bucket}/async/out/smoke-test/") and output.endswith(".out")
    assert failure_object.startswith(f"s3://{bucket}/async/fail/") and failure_object.endswith("-error.out")
    fake.settle()
    assert keys(s3, bucket) == []
    out = capsys.readouterr().out
    assert "event=submitted" in out and "event=removed" in out and "call=invoke_async" in out
    assert PROMPT not in out and "Buckets" not in out


def test_on_event_submits_the_request_and_its_data_names_what_is_complete_waits_for(
    handler, sagemaker, runtime, s3, fake, bucket
):
    async_endpoint(fake, bucket)
    clock = Clock()
    waiter_event = submit(handler, runtime, bucket, clock=clock)
    data = waiter_event["Data"]
    assert set(data) == {"StartedAt", *ASYNC_KEYS} and all(isinstance(v, str) for v in data.values())
    (submitted,) = submissions(fake)
    assert data["AsyncInferenceId"] == submitted.headers["x-amzn-sagemaker-inference-id"]
    assert data["AsyncOutputLocation"].startswith(f"s3://{bucket}/async/out/smoke-test/")
    assert data["AsyncFailureLocation"].startswith(f"s3://{bucket}/async/fail/")
    assert data["AsyncSubmittedAt"] == data["StartedAt"] == f"{clock():.3f}"

    # is_complete reads and removes exactly those objects, and submits nothing.
    describe(sagemaker)
    spy = Spy(s3)
    locations = [data["AsyncOutputLocation"], data["AsyncFailureLocation"]]
    result = poll(handler, waiter_event, sagemaker, runtime, spy, clock=clock, sleep=settling(clock, fake))
    assert result["IsComplete"] is True and ASYNC_KEYS.isdisjoint(result["Data"])  # the framework merges on_event's
    assert set(spy.read) <= set(locations) and spy.read[-1] == locations[0] and spy.deleted == locations
    assert len(submissions(fake)) == 1 and keys(s3, bucket) == []


def test_the_handler_makes_its_own_clients_from_the_environment(handler, sagemaker, fake, bucket, s3):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    clock = Clock()
    request = event(**async_props(bucket))
    waiter_event = {**request, **handler.on_event(request, clock=clock)}
    result = handler.complete(waiter_event, sagemaker=sagemaker, clock=clock, sleep=settling(clock, fake))
    assert result["IsComplete"] is True and len(submissions(fake)) == 1
    assert handler.CLIENT_CONFIG["s3"]["retries"]["total_max_attempts"] == 2
    assert handler._clients["s3"].meta.config.read_timeout == 5
    assert handler._clients["sagemaker-runtime"].meta.config.read_timeout == handler.CALL_TIMEOUT_S
    fake.settle()
    assert keys(s3, bucket) == []


def test_stream_true_is_not_read_and_the_budget_waits_for_an_updating_endpoint(
    handler, sagemaker, runtime, s3, fake, bucket
):
    async_endpoint(fake, bucket)
    describe(sagemaker, status="Updating")
    describe(sagemaker)
    clock = Clock()
    assert run(handler, sagemaker, runtime, s3, fake, bucket, clock=clock, Stream="true")["IsComplete"] is True
    assert clock.sleeps[0] == 2.0  # the back-off of the transient status; the request was submitted once, before
    assert len(submissions(fake)) == 1 and fake.invocations() == []


# --- RequestTTLSeconds -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "ttl"),
    [("60", "60"), ("120", "60"), ("121", "61"), ("600", "540"), ("21660", "21600"), ("21661", "21600")],
)
def test_the_requests_time_to_live_is_the_budget_within_the_apis_range(handler, runtime, fake, bucket, budget, ttl):
    # The budget less a minute (it expires before the last read), clamped to RequestTTLSeconds' 60-21600 s.
    async_endpoint(fake, bucket)
    submit(handler, runtime, bucket, clock=Clock(), BudgetSeconds=budget)
    (submitted,) = submissions(fake)
    assert submitted.headers[TTL_HEADER] == ttl
    assert settings_of(handler, **async_props(bucket, BudgetSeconds=budget)).request_ttl_s == int(ttl)


# --- the submission in on_event ---------------------------------------------------------------------------------


def test_a_throttled_submission_is_retried_within_on_event_and_the_check_passes(
    handler, sagemaker, runtime, s3, fake, bucket, capsys
):
    async_endpoint(fake, bucket)
    faults = Faults(runtime).throttle("InvokeEndpointAsync", times=2)
    clock = Clock()
    waiter_event = submit(handler, runtime, bucket, clock=clock, sleep=settling(clock, fake))
    assert faults.attempts("InvokeEndpointAsync") == 3 and len(submissions(fake)) == 1
    assert clock.sleeps == [handler.SUBMIT_FIRST_BACKOFF_S, 2 * handler.SUBMIT_FIRST_BACKOFF_S]
    out = capsys.readouterr().out
    assert out.count("code=ThrottlingException") == 2 and "event=submitted" in out and "attempt=3" in out
    # The time to first token counts from the submission that was accepted.
    assert float(waiter_event["Data"]["AsyncSubmittedAt"]) == float(waiter_event["Data"]["StartedAt"]) + 3
    describe(sagemaker)
    assert poll(handler, waiter_event, sagemaker, runtime, s3, clock=clock, sleep=settling(clock, fake))["IsComplete"]
    assert len(submissions(fake)) == 1
    fake.settle()
    assert keys(s3, bucket) == []


def test_a_submission_failing_for_a_transient_reason_gives_up_within_the_retry_window(handler, runtime, fake, bucket):
    async_endpoint(fake, bucket)
    faults = Faults(runtime).inject("InvokeEndpointAsync", "ServiceUnavailable", "busy", status=503, times=None)
    clock = Clock()
    began = clock()
    with pytest.raises(handler.SmokeTestFailed) as info:
        submit(handler, runtime, bucket, clock=clock)
    reason = checked_reason(str(info.value))
    attempts = faults.attempts("InvokeEndpointAsync")
    assert f"{handler.ASYNC_CHECK}: HTTP 503 from SageMaker (ServiceUnavailable)" in reason
    assert f"(still failing after {attempts} submissions in {clock() - began:.0f} s)" in reason
    assert clock() - began <= handler.SUBMIT_RETRY_S and attempts > 3 and submissions(fake) == []
    assert max(clock.sleeps) == handler.SUBMIT_MAX_BACKOFF_S


def test_the_submissions_retries_stay_inside_on_events_lambda_timeout(handler, runtime, fake, bucket, deployed):
    # The last attempt starts within the retry window and lasts at most the runtime client's timeouts.
    on_event_timeout = Timeouts.from_template(deployed, "Custom::EndpointSmokeTest").handler_s
    runtime_config = handler.CLIENT_CONFIG["sagemaker-runtime"]
    longest = handler.SUBMIT_RETRY_S + runtime_config["connect_timeout"] + runtime_config["read_timeout"]
    assert on_event_timeout == 300 and longest < on_event_timeout
    # And it stops early when its own run is ending (a context with little time left).
    async_endpoint(fake, bucket)
    faults = Faults(runtime).throttle("InvokeEndpointAsync", times=None)
    clock = Clock()
    context = LambdaContext(clock, handler.SUBMIT_ATTEMPT_RESERVE_S + 2)
    with pytest.raises(handler.SmokeTestFailed, match=r"still failing after 2 submissions in 1 s"):
        submit(handler, runtime, bucket, clock=clock, context=context)
    assert faults.attempts("InvokeEndpointAsync") == 2


def test_a_refused_submission_fails_at_once(handler, sagemaker, runtime, s3, fake, bucket):
    fake.add_endpoint(ENDPOINT)  # a real-time endpoint: InvokeEndpointAsync is a ValidationError
    clock = Clock()
    reason = failure(handler, sagemaker, runtime, s3, fake, bucket, clock=clock)
    assert f"{handler.ASYNC_CHECK}: HTTP 400 from SageMaker (ValidationError)" in reason
    assert "not configured for asynchronous inference" in reason and "(not retried: a client error" in reason
    assert len(submissions(fake)) == 1 and clock.sleeps == []  # on_event failed: no describe, no wait


def test_a_location_outside_the_configured_paths_fails_without_touching_it(
    handler, sagemaker, runtime, s3, fake, bucket
):
    fake.add_endpoint(ENDPOINT, async_output=f"s3://{bucket}/elsewhere/out", async_failure=f"s3://{bucket}/async/fail")
    spy = Spy(s3)
    reason = failure(handler, sagemaker, runtime, spy, fake, bucket)
    assert f"answered OutputLocation s3://{bucket}/elsewhere/out/smoke-test/" in reason
    assert f"outside s3://{bucket}/async/out/smoke-test/ (AsyncOutputPath and S3OutputPathExtension)" in reason
    assert spy.deleted == [] and len(submissions(fake)) == 1  # on_event failed at once; the role may not delete there


@pytest.mark.parametrize(
    ("output", "under"),
    [
        ("s3://b/p/out/smoke-test/0f1e.out", True),
        ("https://b.s3.us-east-1.amazonaws.com/p/out/smoke-test/0f1e.out", True),
        ("s3://b/p/out/0f1e.out", False),  # not below the smoke test's extension: another caller's answer
        ("s3://b/p/out/smoke-tests/0f1e.out", False),  # a prefix is a folder, not the start of a name
        ("s3://other/p/out/smoke-test/0f1e.out", False),
    ],
)
def test_locations_are_checked_against_the_paths_folder_by_folder(handler, output, under):
    import smoke_checks

    settings = handler.Settings.from_properties(event(AsyncOutputPath="s3://b/p/out/")["ResourceProperties"])
    submitted = Submitted("smoke-test-1", output, "s3://b/p/out/0f1e-error.out", 0.0)
    if under:
        smoke_checks.check_locations(submitted, settings, "check")
    else:
        with pytest.raises(smoke_checks.CheckFailure, match=r"outside s3://b/p/out/smoke-test/ \(AsyncOutputPath"):
            smoke_checks.check_locations(submitted, settings, "check")
    # Without a failure path the failure object is looked for under the output path.
    elsewhere = Submitted("smoke-test-1", "s3://b/p/out/smoke-test/x.out", "s3://b/fail/x-error.out", 0.0)
    with pytest.raises(
        smoke_checks.CheckFailure, match=r"FailureLocation s3://b/fail/x-error.out, outside s3://b/p/out/ \("
    ):
        smoke_checks.check_locations(elsewhere, settings, "check")


def test_is_complete_without_a_recorded_request_fails_and_submits_nothing(
    handler, sagemaker, runtime, s3, fake, bucket
):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    clock = Clock()
    with pytest.raises(handler.SmokeTestFailed) as info:
        poll(
            handler,
            event(started=clock(), **async_props(bucket)),
            sagemaker,
            runtime,
            s3,
            clock=clock,
            sleep=clock.sleep,
        )
    assert "on_event recorded no request to wait for (AsyncInferenceId, AsyncOutputLocation" in checked_reason(
        str(info.value)
    )
    assert submissions(fake) == []


def test_the_rollback_update_and_the_delete_make_no_call(handler, sagemaker, runtime, s3, fake, bucket):
    async_endpoint(fake, bucket)
    faults = Faults(runtime)
    spy = Spy(s3)
    handler._clients["cloudformation"].status = "UPDATE_ROLLBACK_IN_PROGRESS"
    request = event("Update", physical_id=f"smoke-{ENDPOINT}", **async_props(bucket))
    answer = handler.on_event(request, clock=Clock(), runtime=runtime)
    # The restored template may read the request's attributes as well as the figures: every key, none submitted.
    assert set(answer["Data"]) == METRIC_KEYS | ASYNC_KEYS | {"StartedAt", "RolledBack"}
    waiter_event = {**request, **answer}
    assert poll(handler, waiter_event, sagemaker, runtime, spy, clock=Clock(), sleep=Clock().sleep) == {
        "IsComplete": True
    }

    handler._clients["cloudformation"].status = "DELETE_IN_PROGRESS"
    delete = event("Delete", physical_id=f"smoke-{ENDPOINT}", **async_props(bucket))
    assert handler.on_event(delete, runtime=runtime) == {"PhysicalResourceId": f"smoke-{ENDPOINT}"}
    assert poll(handler, delete, sagemaker, runtime, spy, clock=Clock(), sleep=Clock().sleep) == {"IsComplete": True}
    assert faults.calls == [] and submissions(fake) == [] and spy.read == spy.deleted == []


# --- submit -> failure object -> stack failure -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "text"),
    [
        (Reply.model_error(400, json.dumps({"object": "error", "message": REFUSED})), REFUSED),
        (Reply.service_error("ModelError", "Received server error (500) from primary: CUDA out of memory"), "CUDA"),
    ],
    ids=["container-4xx", "container-5xx"],
)
def test_a_failure_object_fails_with_its_text_and_is_removed(
    handler, sagemaker, runtime, s3, fake, bucket, capsys, reply, text
):
    async_endpoint(fake, bucket, default=reply)
    describe(sagemaker)
    clock = Clock()
    reason = failure(handler, sagemaker, runtime, s3, fake, bucket, clock=clock)
    assert f"{handler.ASYNC_CHECK}: AsyncInferenceFailed: SageMaker wrote the failure object s3://{bucket}/" in reason
    assert text in reason and "(not retried)" in reason
    assert len(submissions(fake)) == 1  # a failure object is permanent: no second request
    fake.settle()
    assert keys(s3, bucket) == []
    out = capsys.readouterr().out
    assert "code=AsyncInferenceFailed" in out and "transient=false" in out
    assert text not in out  # the failure's text may echo the request: it stays out of the logs


def test_a_long_failure_text_is_cut_below_the_limit(handler, sagemaker, runtime, s3, fake, bucket):
    async_endpoint(fake, bucket, default=Reply.model_error(400, "漢字🪣" * 3000))
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime, s3, fake, bucket)
    assert "漢字🪣" in reason and len(reason.encode("utf-8")) <= 3000


@pytest.mark.parametrize(
    ("reply", "text"),
    [
        (Reply.model_error(400, json.dumps({"object": "error", "message": REFUSED})), REFUSED),
        (Reply(raw_body=b"<html>upstream gone</html>"), "MalformedResponse"),
    ],
    ids=["failure-object", "malformed-answer"],
)
def test_a_slow_s3_while_waiting_is_read_again_and_the_verdict_comes_from_the_object(
    handler, sagemaker, runtime, s3, fake, bucket, capsys, reply, text
):
    async_endpoint(fake, bucket, default=reply)
    describe(sagemaker)
    spy = Spy(s3, SLOW_DOWN, times=3)
    reason = failure(handler, sagemaker, runtime, spy, fake, bucket)
    assert text in reason and spy.failed_reads == 3 and len(submissions(fake)) == 1
    assert len(spy.deleted) == 2
    fake.settle()
    assert keys(s3, bucket) == []
    assert "code=SlowDown" not in capsys.readouterr().out  # retried inside the wait, not a failed check


def test_a_transient_s3_error_while_waiting_is_retried_and_the_check_passes(
    handler, sagemaker, runtime, s3, fake, bucket
):
    async_endpoint(fake, bucket)
    describe(sagemaker)  # one describe: the wait went on through the errors, no second attempt at the checks
    spy = Spy(s3, SLOW_DOWN, times=4)
    clock = Clock()
    assert run(handler, sagemaker, runtime, spy, fake, bucket, clock=clock)["IsComplete"] is True
    assert spy.failed_reads == 4 and len(submissions(fake)) == 1
    assert clock.sleeps == [0.5, 1.0]  # the wait's own back-off between polls: two rounds of two failed reads
    fake.settle()
    assert keys(s3, bucket) == []


def test_a_kms_denied_read_fails_at_once_and_removes_the_objects(handler, sagemaker, runtime, s3, fake, bucket):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    spy = Spy(s3, KMS_DENIED, times=1)
    reason = failure(handler, sagemaker, runtime, spy, fake, bucket)
    assert f"{handler.ASYNC_CHECK}: HTTP 403 from" in reason and "(AccessDenied)" in reason and "kms:Decrypt" in reason
    assert "(not retried: a client error" in reason and len(spy.deleted) == 2


def test_a_delete_that_fails_is_logged_and_the_verdict_stands(handler, sagemaker, runtime, s3, fake, bucket, capsys):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    Faults(s3).deny("DeleteObject", times=None)
    assert run(handler, sagemaker, runtime, s3, fake, bucket)["IsComplete"] is True
    out = capsys.readouterr().out
    assert "note=async_objects_not_removed" in out and "code=AccessDenied" in out


# --- an answer slower than the handler's run -------------------------------------------------------------------


def test_one_request_per_cloudformation_request_however_many_runs_wait_for_it(
    handler, sagemaker, runtime, s3, fake, bucket, capsys, monkeypatch
):
    async_endpoint(fake, bucket)
    clock = Clock()
    spy = Spy(s3)
    with held(fake, monkeypatch):
        waiter_event = submit(handler, runtime, bucket, clock=clock)
        inference_id = waiter_event["Data"]["AsyncInferenceId"]
        for _ in range(3):  # three runs end before the answer: each hands back to the waiter, keeping the request
            describe(sagemaker)
            ends = clock() + 150  # this Lambda run's end
            left = lambda end=ends: end - clock()  # noqa: E731
            result = poll(
                handler, waiter_event, sagemaker, runtime, spy, clock=clock, sleep=clock.sleep, remaining=left
            )
            assert result == {"IsComplete": False}
            # It waited until the cleanup reserve, not the budget's end, and left the request's objects alone.
            assert ends - clock() == pytest.approx(handler.ASYNC_CLEANUP_RESERVE_S)
            clock.sleep(20)  # the waiter's query interval
        assert len(submissions(fake)) == 1 and spy.deleted == []
    out = capsys.readouterr().out
    assert out.count("code=AsyncAnswerTimedOut") == 3 and "transient=true" in out
    assert out.count(f"next_poll=waiter inference_id={inference_id}") == 3
    assert "answer_still_pending" not in out

    # The answer has come: the next run reads it, then removes both objects. Still the one request.
    describe(sagemaker)
    result = poll(handler, waiter_event, sagemaker, runtime, spy, clock=clock, sleep=settling(clock, fake))
    assert result["IsComplete"] is True and len(submissions(fake)) == 1
    assert int(result["Data"]["LatencyMs"]) >= 3 * (150 - handler.ASYNC_CLEANUP_RESERVE_S + 20) * 1000  # from on_event
    assert spy.deleted == [waiter_event["Data"]["AsyncOutputLocation"], waiter_event["Data"]["AsyncFailureLocation"]]
    fake.settle()
    assert keys(s3, bucket) == []


def test_no_answer_by_the_budgets_end_fails_naming_the_wait_and_removes_once(
    handler, sagemaker, runtime, s3, fake, bucket, monkeypatch
):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    clock = Clock()
    spy = Spy(s3)
    with held(fake, monkeypatch):
        reason = failure(
            handler, sagemaker, runtime, spy, fake, bucket, clock=clock, sleep=clock.sleep, BudgetSeconds="60"
        )
        assert len(spy.deleted) == 2  # one removal, of objects not there yet
    assert "AsyncAnswerTimedOut: no answer or failure object 60 s after submission" in reason
    assert "the smoke-test budget of 60 s is spent" in reason
    (submitted,) = submissions(fake)
    # SageMaker expires a request still queued when the test gives up (the fake does not play the queue's TTL).
    assert submitted.headers[TTL_HEADER] == "60"


# --- the same answer checks, the same endpoint checks -----------------------------------------------------------


def test_pattern_mismatch_fails_and_the_objects_are_removed(handler, sagemaker, runtime, s3, fake, bucket):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime, s3, fake, bucket, ExpectedPattern=r"(?i)\bparis\b")
    assert f"{handler.ASYNC_CHECK}: the answer (" in reason and "does not match ExpectedPattern" in reason
    assert "Buckets" not in reason
    fake.settle()
    assert keys(s3, bucket) == []


def test_an_empty_answer_fails(handler, sagemaker, runtime, s3, fake, bucket):
    async_endpoint(fake, bucket, default=Reply(content=""))
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime, s3, fake, bucket)
    assert "choices[0].message.content and reasoning_content are empty" in reason


def test_an_endpoint_not_in_service_or_on_another_config_fails_as_in_real_time(
    handler, sagemaker, runtime, s3, fake, bucket
):
    async_endpoint(fake, bucket)
    describe(sagemaker, status="Failed", failure="CUDA error: no kernel image is available")
    spy = Spy(s3)
    reason = failure(handler, sagemaker, runtime, spy, fake, bucket)
    assert "endpoint status: status is Failed, expected InService (FailureReason: CUDA error" in reason

    describe(sagemaker, config="EndpointConfig-old")
    reason = failure(handler, sagemaker, runtime, spy, fake, bucket)
    assert "endpoint config: the endpoint runs endpoint config EndpointConfig-old" in reason
    assert f"this deployment created {CONFIG}" in reason
    # on_event had submitted each CloudFormation request's one request; the verdict came before any read, and the
    # objects were removed once each (the fake answers at once; SageMaker's answer may come after the removal).
    assert len(submissions(fake)) == 2 and spy.read == [] and len(spy.deleted) == 4


# --- the properties ---------------------------------------------------------------------------------------------


def settings_of(handler, **props):
    return handler.Settings.from_properties(event(**props)["ResourceProperties"])


@pytest.mark.parametrize("seconds", ["1", "3600"])
def test_the_invocation_timeouts_range_is_accepted_to_its_ends(handler, seconds):
    settings = settings_of(handler, **async_props("b", InvocationTimeoutSeconds=seconds))
    assert settings.asynchronous and settings.invocation_timeout_s == int(seconds)


@pytest.mark.parametrize("seconds", ["0", "3601"])
def test_one_step_outside_the_invocation_timeouts_range_is_refused(handler, seconds):
    with pytest.raises(handler.SettingsError, match=f"InvocationTimeoutSeconds='{seconds}' must be 1-3600"):
        settings_of(handler, **async_props("b", InvocationTimeoutSeconds=seconds))


def test_without_an_invocation_timeout_sagemakers_default_applies(handler, runtime, fake, bucket):
    async_endpoint(fake, bucket)
    request = event(**{k: v for k, v in async_props(bucket).items() if k != "InvocationTimeoutSeconds"})
    handler.on_event(request, clock=Clock(), runtime=runtime)
    (submitted,) = submissions(fake)
    assert "x-amzn-sagemaker-invocationtimeoutseconds" not in submitted.headers


def test_what_an_asynchronous_check_cannot_do_is_refused_together(handler):
    props = async_props(
        "b",
        LoadRequests="12",
        LoadConcurrency="4",
        LoadMaxTokens="32",
        LoadWindowSeconds="120",
        InferenceComponentName="llm-component",
        AsyncFailurePath="https://b/fail",
    )
    with pytest.raises(handler.SettingsError) as info:
        handler.on_event(event(**props))
    message = str(info.value)
    assert message.startswith("Custom::EndpointSmokeTest properties: 3 problems: ")
    assert "LoadRequests='12' cannot gate an asynchronous endpoint (AsyncOutputPath)" in message
    assert "InferenceComponentName='llm-component' cannot be checked on an asynchronous endpoint" in message
    assert "AsyncFailurePath='https://b/fail' must be an S3 path" in message


def test_asynchronous_properties_without_an_output_path_are_refused(handler):
    with pytest.raises(handler.SettingsError) as info:
        settings_of(handler, AsyncFailurePath="s3://b/fail", InvocationTimeoutSeconds="60")
    message = str(info.value)
    assert "AsyncFailurePath='s3://b/fail' is for an asynchronous endpoint: set AsyncOutputPath too" in message
    assert "InvocationTimeoutSeconds='60' is for an asynchronous endpoint" in message


def test_a_request_over_the_inline_limit_is_refused_before_any_call(handler):
    with pytest.raises(handler.SettingsError, match=r"InvokeEndpointAsync takes at most 128000 bytes inline"):
        settings_of(handler, **async_props("b", Prompt="x" * 128_000))
    assert settings_of(handler, **async_props("b", Prompt="x" * 120_000)).asynchronous


def test_real_time_properties_are_read_as_before(handler):
    settings = settings_of(handler)
    assert not settings.asynchronous and settings.stream and settings.invocation_timeout_s is None


# --- create, update, failed update and rollback, delete: the harness --------------------------------------------


@pytest.fixture(scope="module")
def deployed() -> dict[str, Any]:
    """The smoke test of an asynchronous GpuEndpoint as the construct deploys it: its properties, and its limits
    (is_complete's 900 s run, the waiter, ServiceTimeout)."""
    from aws_cdk import aws_s3 as s3

    from constructs_lib import AsyncInference, GpuEndpoint, S3ModelData

    app = cdk.App(context=default_context())
    stack = cdk.Stack(app, "Handlers")
    model = S3ModelData(s3.Bucket.from_bucket_name(stack, "Models", "model-bucket"), "models/x/")
    endpoint = GpuEndpoint(
        stack, "Endpoint", model=model, endpoint_name=SMOKE_ENDPOINT, async_inference=AsyncInference()
    )
    EndpointSmokeTest.for_endpoint(stack, "SmokeTest", endpoint)
    return Template.from_stack(stack).to_json()


def test_the_sequence_runs_under_the_async_templates_limits(deployed):
    functions = [r["Properties"] for r in deployed["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    assert 900 in [f.get("Timeout") for f in functions]  # is_complete's run in async mode
    (smoke,) = [r["Properties"] for r in deployed["Resources"].values() if r["Type"] == RESOURCE]
    assert {"AsyncOutputPath", "AsyncFailurePath", "InvocationTimeoutSeconds"} <= set(smoke) and smoke[
        "Stream"
    ] == "false"


@pytest.fixture
def harness_clock():
    clock = HarnessClock()
    with clock.installed(botocore.endpoint):  # botocore's retry back-off runs on it
        yield clock


class AsyncSmokeDriver(Driver):
    """The smoke-test handler of an asynchronous endpoint, its clients made from the environment: the fake
    SageMaker (describe and runtime), moto S3 for the answers. While the queue answers, the handler's sleeps let
    the fake's writes finish."""

    name = "endpoint_smoke_test"
    resource_type = "Custom::EndpointSmokeTest"

    def __init__(self, request, clock, template, *, fake: FakeSageMaker, bucket: str, moto_url: str) -> None:
        super().__init__(request, clock, template)
        self.fake, self.bucket = fake, bucket
        fake.reset()
        self.endpoint = async_endpoint(fake, bucket, name=SMOKE_ENDPOINT, config_name="config-1")
        monkeypatch = request.getfixturevalue("monkeypatch")
        for key, value in {
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ENDPOINT_URL_SAGEMAKER": fake.url,
            "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": fake.url,
            "AWS_ENDPOINT_URL_S3": moto_url,
        }.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
        self.module = load_handler(self.name)
        self.stacks = self.module._clients["cloudformation"] = Stacks()

    def handler(self) -> HandlerUnderTest:
        module, clock, fake = self.module, self.clock, self.fake

        def sleep(seconds: float) -> None:
            fake.settle()
            clock.sleep(seconds)

        def on_event(event, context):
            return module.on_event(event, context, clock=clock, sleep=sleep)

        def is_complete(event, context):
            remaining = context.get_remaining_time_in_millis
            return module.complete(event, clock=clock, sleep=sleep, remaining_s=lambda: remaining() / 1000)

        return HandlerUnderTest(self.name, self.resource_type, on_event, self.timeouts, is_complete)

    def properties(self, **overrides: Any) -> dict[str, Any]:
        # The construct's own properties, with the paths of this test's bucket (the template's name the model bucket).
        synthesized = {k: v for k, v in self.template_properties.items() if k not in ("ServiceToken", "ServiceTimeout")}
        return {**synthesized, **async_props(self.bucket), "EndpointName": SMOKE_ENDPOINT, **overrides}


def test_create_update_failed_update_rollback_delete(request, harness_clock, deployed, fake, bucket, moto_url, s3):
    driver = AsyncSmokeDriver(request, harness_clock, deployed, fake=fake, bucket=bucket, moto_url=moto_url)
    with driver.stack:
        endpoint = driver.endpoint
        cfn = driver.cloudformation()
        created = cfn.create(driver.properties(EndpointConfigName="config-1"))
        assert created.ok, created.reason
        assert set(created.data) >= METRIC_KEYS | ASYNC_KEYS and created.data["StreamEndedWithDone"] == "true"
        assert created.data["AsyncInferenceId"] == submissions(fake)[-1].headers["x-amzn-sagemaker-inference-id"]
        assert len(submissions(fake)) == 1

        endpoint.config_name = "config-2"
        updated = cfn.update(driver.properties(EndpointConfigName="config-2", MaxTokens="32"))
        assert updated.ok, updated.reason
        assert updated.physical_id == created.physical_id and updated.cleanup is None
        assert submissions(fake)[-1].body["max_tokens"] == 32 and len(submissions(fake)) == 2
        assert updated.data["AsyncInferenceId"] != created.data["AsyncInferenceId"]

        # The next update's model answers every request with a failure object.
        endpoint.config_name, endpoint.default = "config-3", Reply.model_error(400, REFUSED)
        failed = cfn.update(driver.properties(EndpointConfigName="config-3"))
        assert not failed.ok
        assert "AsyncInferenceFailed" in failed.message and REFUSED in failed.message, failed.message
        assert cfn.status == "UPDATE_ROLLBACK_IN_PROGRESS"
        assert len(submissions(fake)) == 3

        # The rollback Update: answered at once with every attribute (the request's keys too), no call.
        rolled_back = cfn.rollback()
        endpoint.config_name, endpoint.default = "config-2", Reply()
        assert rolled_back.ok, rolled_back.reason
        assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"
        assert set(created.data) <= set(rolled_back.data) and rolled_back.data["RolledBack"] == "true"
        assert {rolled_back.data[key] for key in ASYNC_KEYS} == {"n/a (rolled back)"}
        assert len(submissions(fake)) == 3 and rolled_back.polls == 1

        deleted = cfn.delete()
        assert deleted.ok and deleted.physical_id == created.physical_id
        assert len(submissions(fake)) == 3
        assert_well_behaved(cfn, created, updated, failed, rolled_back, deleted)
        fake.settle()
        assert keys(s3, bucket) == []  # three requests, no object left


def test_a_throttled_submission_is_retried_in_on_event_within_its_lambda_timeout(
    request, harness_clock, deployed, fake, bucket, moto_url, s3
):
    driver = AsyncSmokeDriver(request, harness_clock, deployed, fake=fake, bucket=bucket, moto_url=moto_url)
    with driver.stack:
        runtime = Faults(driver.module.client("sagemaker-runtime")).throttle("InvokeEndpointAsync", times=3)
        cfn = driver.cloudformation()
        created = cfn.create(driver.properties(EndpointConfigName="config-1"))
        assert created.ok, created.reason
        assert runtime.attempts("InvokeEndpointAsync") == 4 and len(submissions(fake)) == 1
        assert_well_behaved(cfn, created)

        # Throttled for good: on_event gives up within its retry window, well before Lambda would end it.
        runtime.throttle("InvokeEndpointAsync", times=None)
        updated = cfn.update(driver.properties(EndpointConfigName="config-1", MaxTokens="32"))
        assert not updated.ok and updated.timed_out is None and updated.polls == 0
        assert "ThrottlingException" in updated.message and "still failing after" in updated.message
        assert updated.elapsed_s <= driver.module.SUBMIT_RETRY_S < driver.timeouts.handler_s
        assert len(submissions(fake)) == 1
        fake.settle()
        assert keys(s3, bucket) == []
