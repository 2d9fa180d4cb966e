"""The smoke test of an asynchronous endpoint (issue 38): submit, the answer or failure object in S3, the verdict.

The fake SageMaker (tests/fakes/fake_runtime.py) answers ``InvokeEndpointAsync`` with 202 and the locations, then
writes the answer (or the failure) to the moto S3 server over HTTP from a thread. The handler's waits run on a fake
clock: ``settling`` sleeps let the fake's writes finish first (time passes, the queue answers), ``held`` keeps
them back until the test lets them go (an answer slower than the handler's run). Each test has its own bucket.
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

from constructs_lib import EndpointSmokeTest
from endpoint_client.async_invocations import Submitted
from handler_kit.resources import SMOKE_INFERENCE_ID_PREFIX, SMOKE_OUTPUT_EXTENSION
from tests.conftest import default_context
from tests.fakes.fake_runtime import FakeSageMaker, Reply, client, load_handler
from tests.fakes.fixtures import moto_endpoint
from tests.handlers import test_smoke_handler as smoke
from tests.handlers.test_failure_paths import ENDPOINT_ARN, SMOKE_ENDPOINT, Driver, assert_well_behaved
from tests.handlers.test_smoke_handler import CONFIG, ENDPOINT, PROMPT, Clock, describe, event
from tests.harness import Clock as HarnessClock
from tests.harness import HandlerUnderTest, Stacks

sagemaker = smoke.sagemaker  # a Stubber-backed control plane, checked for unused answers
ASYNC = "async-invocations"
METRIC_KEYS = {"TimeToFirstTokenMs", "LatencyMs", "TokensPerSecond", "CompletionTokens", "StreamEndedWithDone"}
REFUSED = "prompt is longer than the model's context (4096 tokens)"


@pytest.fixture(scope="module")
def moto_url() -> str:
    return moto_endpoint()


@pytest.fixture(scope="module")
def fake(moto_url):
    with FakeSageMaker(s3_url=moto_url) as server:
        yield server


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


class Deletes:
    """The handler's S3 client, recording each DeleteObject."""

    def __init__(self, s3: Any) -> None:
        self._s3 = s3
        self.deleted: list[str] = []

    def delete_object(self, **kwargs: Any) -> Any:
        self.deleted.append(f"s3://{kwargs['Bucket']}/{kwargs['Key']}")
        return self._s3.delete_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)


def run(handler, sagemaker, runtime, s3, fake, bucket, *, clock=None, sleep=None, remaining=None, **props):
    clock = clock or Clock()
    return handler.complete(
        event(started=clock(), **async_props(bucket, **props)),
        sagemaker=sagemaker,
        runtime=runtime,
        s3=s3,
        clock=clock,
        sleep=sleep or settling(clock, fake),
        remaining_s=remaining or (lambda: 300.0),
    )


def failure(handler, *args, **kwargs) -> str:
    with pytest.raises(handler.SmokeTestFailed) as info:
        run(handler, *args, **kwargs)
    reason = str(info.value)
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
    deletes = Deletes(s3)
    result = run(handler, sagemaker, runtime, deletes, fake, bucket)
    assert result["IsComplete"] is True
    data = result["Data"]
    assert set(data) == METRIC_KEYS and all(isinstance(v, str) for v in data.values())
    assert data["TimeToFirstTokenMs"] == data["LatencyMs"] and int(data["LatencyMs"]) >= 0
    assert data["CompletionTokens"] == "15" and data["StreamEndedWithDone"] == "true"

    # One inline, non-streamed request, named for the role's key condition, with the per-request timeout.
    (submitted,) = submissions(fake)
    assert fake.invocations() == []  # no real-time call, no stream
    assert submitted.body == {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 64}
    inference_id = submitted.headers["x-amzn-sagemaker-inference-id"]
    assert inference_id.startswith(SMOKE_INFERENCE_ID_PREFIX) and len(inference_id) <= 64
    assert submitted.headers["x-amzn-sagemaker-invocationtimeoutseconds"] == "120"
    assert submitted.headers["x-amzn-sagemaker-s3outputpathextension"] == SMOKE_OUTPUT_EXTENSION == "smoke-test"
    # Both objects removed (the answer below the extension), and nothing else is in the bucket once the fake is done.
    output, failure_object = deletes.deleted
    assert output.startswith(f"s3://{bucket}/async/out/smoke-test/") and output.endswith(".out")
    assert failure_object.startswith(f"s3://{bucket}/async/fail/") and failure_object.endswith("-error.out")
    fake.settle()
    assert keys(s3, bucket) == []
    out = capsys.readouterr().out
    assert "event=submitted" in out and "event=removed" in out and "call=invoke_async" in out
    assert PROMPT not in out and "Buckets" not in out


def test_the_handler_makes_its_own_s3_client_from_the_environment(handler, sagemaker, runtime, fake, bucket, s3):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    clock = Clock()
    result = handler.complete(
        event(started=clock(), **async_props(bucket)),
        sagemaker=sagemaker,
        runtime=runtime,
        clock=clock,
        sleep=settling(clock, fake),
    )
    assert result["IsComplete"] is True
    assert handler.CLIENT_CONFIG["s3"]["retries"]["total_max_attempts"] == 2
    assert handler._clients["s3"].meta.config.read_timeout == 5
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
    assert clock.sleeps[0] == 2.0  # the back-off of the transient status, then one submission
    assert len(submissions(fake)) == 1 and fake.invocations() == []


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


def test_a_refused_submission_fails_at_once(handler, sagemaker, runtime, s3, fake, bucket):
    fake.add_endpoint(ENDPOINT)  # a real-time endpoint: InvokeEndpointAsync is a ValidationError
    describe(sagemaker)
    reason = failure(handler, sagemaker, runtime, s3, fake, bucket)
    assert f"{handler.ASYNC_CHECK}: HTTP 400 from SageMaker (ValidationError)" in reason
    assert "not configured for asynchronous inference" in reason


def test_a_location_outside_the_configured_paths_fails_without_touching_it(
    handler, sagemaker, runtime, s3, fake, bucket
):
    fake.add_endpoint(ENDPOINT, async_output=f"s3://{bucket}/elsewhere/out", async_failure=f"s3://{bucket}/async/fail")
    describe(sagemaker)
    deletes = Deletes(s3)
    reason = failure(handler, sagemaker, runtime, deletes, fake, bucket)
    assert f"answered OutputLocation s3://{bucket}/elsewhere/out/smoke-test/" in reason
    assert f"outside s3://{bucket}/async/out/smoke-test/ (AsyncOutputPath and S3OutputPathExtension)" in reason
    assert deletes.deleted == []  # the role may not delete there either


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


def test_a_delete_that_fails_is_logged_and_the_verdict_stands(handler, sagemaker, runtime, s3, fake, bucket, capsys):
    from tests.harness import Faults

    async_endpoint(fake, bucket)
    describe(sagemaker)
    Faults(s3).deny("DeleteObject", times=None)
    assert run(handler, sagemaker, runtime, s3, fake, bucket)["IsComplete"] is True
    out = capsys.readouterr().out
    assert "note=async_objects_not_removed" in out and "code=AccessDenied" in out


# --- an answer slower than the handler's run -------------------------------------------------------------------


def test_an_answer_slower_than_the_run_hands_back_to_the_waiter_and_the_next_poll_submits_again(
    handler, sagemaker, runtime, s3, fake, bucket, capsys, monkeypatch
):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    clock = Clock()
    ends = clock() + 150  # this Lambda run's end
    deletes = Deletes(s3)
    with held(fake, monkeypatch):
        result = run(
            handler,
            sagemaker,
            runtime,
            deletes,
            fake,
            bucket,
            clock=clock,
            sleep=clock.sleep,
            remaining=lambda: ends - clock(),
        )
        assert result == {"IsComplete": False}
        # It waited until the cleanup reserve, not the budget's end, and removed what it had submitted.
        assert ends - clock() == pytest.approx(handler.ASYNC_CLEANUP_RESERVE_S)
        (first,) = submissions(fake)
        first_id = first.headers["x-amzn-sagemaker-inference-id"]
        assert len(deletes.deleted) == 2
    out = capsys.readouterr().out
    assert "code=AsyncAnswerTimedOut" in out and "transient=true" in out
    assert f"note=answer_still_pending inference_id={first_id}" in out and "next_poll=waiter" in out
    # The abandoned request's answer came after its removal: the one object a hand-back leaves (see index.py).
    left = deletes.deleted[0].removeprefix(f"s3://{bucket}/")
    assert left.startswith("async/out/smoke-test/") and keys(s3, bucket) == [left]

    # The waiter's next poll: a fresh request, answered in time, removed.
    describe(sagemaker)
    assert run(handler, sagemaker, runtime, s3, fake, bucket, clock=clock)["IsComplete"] is True
    assert len(submissions(fake)) == 2
    fake.settle()
    assert keys(s3, bucket) == [left]


def test_no_answer_by_the_budgets_end_fails_naming_the_wait(handler, sagemaker, runtime, s3, fake, bucket, monkeypatch):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    clock = Clock()
    with held(fake, monkeypatch):
        reason = failure(
            handler, sagemaker, runtime, s3, fake, bucket, clock=clock, sleep=clock.sleep, BudgetSeconds="60"
        )
    assert "AsyncAnswerTimedOut: no answer or failure object 60 s after submission" in reason
    assert "the smoke-test budget of 60 s is spent" in reason
    assert len(submissions(fake)) == 1


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
    reason = failure(handler, sagemaker, runtime, s3, fake, bucket)
    assert "endpoint status: status is Failed, expected InService (FailureReason: CUDA error" in reason

    describe(sagemaker, config="EndpointConfig-old")
    reason = failure(handler, sagemaker, runtime, s3, fake, bucket)
    assert "endpoint config: the endpoint runs endpoint config EndpointConfig-old" in reason
    assert f"this deployment created {CONFIG}" in reason
    assert submissions(fake) == []


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


def test_without_an_invocation_timeout_sagemakers_default_applies(handler, sagemaker, runtime, s3, fake, bucket):
    async_endpoint(fake, bucket)
    describe(sagemaker)
    clock = Clock()
    props = {k: v for k, v in async_props(bucket).items() if k != "InvocationTimeoutSeconds"}
    handler.complete(
        event(started=clock(), **props),
        sagemaker=sagemaker,
        runtime=runtime,
        s3=s3,
        clock=clock,
        sleep=settling(clock, fake),
    )
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
    """The smoke test's limits as the construct deploys them (handler timeout, waiter, ServiceTimeout)."""
    app = cdk.App(context=default_context())
    stack = cdk.Stack(app, "Handlers")
    EndpointSmokeTest(
        stack, "SmokeTest", endpoint_name=SMOKE_ENDPOINT, endpoint_config_name="config-2", endpoint_arn=ENDPOINT_ARN
    )
    return Template.from_stack(stack).to_json()


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

        def on_event(event, context):
            return module.on_event(event, context, clock=clock)

        def sleep(seconds: float) -> None:
            fake.settle()
            clock.sleep(seconds)

        def is_complete(event, context):
            remaining = context.get_remaining_time_in_millis
            return module.complete(event, clock=clock, sleep=sleep, remaining_s=lambda: remaining() / 1000)

        return HandlerUnderTest(self.name, self.resource_type, on_event, self.timeouts, is_complete)

    def properties(self, **overrides: Any) -> dict[str, Any]:
        # Written by hand from the synthesized real-time ones: what the construct writes for an asynchronous endpoint
        # (the paths, the invocation timeout, no stream). Switch to its template once it writes them.
        synthesized = {k: v for k, v in self.template_properties.items() if k not in ("ServiceToken", "ServiceTimeout")}
        return {**synthesized, **async_props(self.bucket), "EndpointName": SMOKE_ENDPOINT, **overrides}


def test_create_update_failed_update_rollback_delete(request, harness_clock, deployed, fake, bucket, moto_url, s3):
    driver = AsyncSmokeDriver(request, harness_clock, deployed, fake=fake, bucket=bucket, moto_url=moto_url)
    with driver.stack:
        endpoint = driver.endpoint
        cfn = driver.cloudformation()
        created = cfn.create(driver.properties(EndpointConfigName="config-1"))
        assert created.ok, created.reason
        assert set(created.data) >= METRIC_KEYS and created.data["StreamEndedWithDone"] == "true"

        endpoint.config_name = "config-2"
        updated = cfn.update(driver.properties(EndpointConfigName="config-2", MaxTokens="32"))
        assert updated.ok, updated.reason
        assert updated.physical_id == created.physical_id and updated.cleanup is None
        assert submissions(fake)[-1].body["max_tokens"] == 32

        # The next update's model answers every request with a failure object.
        endpoint.config_name, endpoint.default = "config-3", Reply.model_error(400, REFUSED)
        failed = cfn.update(driver.properties(EndpointConfigName="config-3"))
        assert not failed.ok
        assert "AsyncInferenceFailed" in failed.message and REFUSED in failed.message, failed.message
        assert cfn.status == "UPDATE_ROLLBACK_IN_PROGRESS"
        assert len(submissions(fake)) == 3

        # The rollback Update: answered at once with every attribute, no call.
        rolled_back = cfn.rollback()
        endpoint.config_name, endpoint.default = "config-2", Reply()
        assert rolled_back.ok, rolled_back.reason
        assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"
        assert set(created.data) <= set(rolled_back.data) and rolled_back.data["RolledBack"] == "true"
        assert len(submissions(fake)) == 3 and rolled_back.polls == 1

        deleted = cfn.delete()
        assert deleted.ok and deleted.physical_id == created.physical_id
        assert len(submissions(fake)) == 3
        assert_well_behaved(cfn, created, updated, failed, rolled_back, deleted)
        fake.settle()
        assert keys(s3, bucket) == []  # three requests, no object left
