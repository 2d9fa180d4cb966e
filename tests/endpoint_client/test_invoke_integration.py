"""The smoke-test handler and ``python -m llmops.invoke`` against the fake SageMaker, over real HTTP.

boto3's own clients do the talking (SigV4, rest-json errors, the event-stream parser); the fake serves
standard and inference-component endpoints, streamed and whole answers, and scripted failures.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmops.invoke import main
from tests.fakes.fake_runtime import CREDENTIALS, REGION, FakeSageMaker, Reply, client, load_handler

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = "llm-endpoint"
COMPONENT = "llm-component"
PROMPT = "Write a haiku about S3"


@pytest.fixture(scope="module")
def fake():
    with FakeSageMaker() as server:
        yield server


@pytest.fixture
def env(fake, monkeypatch):
    """The environment a deployed handler or a user's shell would have, pointed at the fake."""
    values = {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
        "AWS_ENDPOINT_URL_SAGEMAKER": fake.url,
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": fake.url,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    fake.reset()
    return values


@pytest.fixture
def handler(env):
    return load_handler("endpoint_smoke_test")


class Context:
    """What Lambda passes: only the remaining time is used."""

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


def deploy(handler, request="Create", physical_id=None, **props):
    """What the Provider framework does: on_event, then is_complete with on_event's answer merged in."""
    properties = {
        "EndpointName": ENDPOINT,
        "EndpointConfigName": "config-1",
        "Prompt": PROMPT,
        "MaxTokens": "64",
        "BudgetSeconds": "60",
        **props,
    }
    event = {"RequestType": request, "ResourceProperties": properties, "RequestId": "req-1"}
    if physical_id:
        event["PhysicalResourceId"] = physical_id
    started = handler.on_event(event, Context())
    result = handler.is_complete({**event, **started}, Context())
    return started, result


# --- smoke handler ---------------------------------------------------------------------------------


def test_smoke_test_passes_on_a_standard_endpoint(handler, fake):
    fake.add_endpoint(ENDPOINT, default=Reply(line_end="\r\n", token_delay_s=0.01))
    started, result = deploy(handler)
    assert started["PhysicalResourceId"] == f"smoke-{ENDPOINT}"
    assert result["IsComplete"] is True
    assert int(result["Data"]["TimeToFirstTokenMs"]) >= 10
    assert [r.kind for r in fake.requests] == [
        "DescribeEndpoint",
        "invocations",
        "invocations-response-stream",
    ]


def test_smoke_test_passes_on_an_inference_component(handler, fake):
    fake.add_endpoint(ENDPOINT, component=COMPONENT, default=Reply(reasoning="Think about buckets.", line_end="\r"))
    _, result = deploy(handler, InferenceComponentName=COMPONENT, ExpectedPattern="(?i)bucket")
    assert result["IsComplete"] is True
    kinds = [r.kind for r in fake.requests]
    assert kinds == ["DescribeEndpoint", "DescribeInferenceComponent", "invocations", "invocations-response-stream"]
    assert {r.headers["x-amzn-sagemaker-inference-component"] for r in fake.invocations()} == {COMPONENT}


def test_smoke_test_waits_for_a_scaled_to_zero_component(handler, fake, monkeypatch):
    monkeypatch.setattr(handler, "FIRST_BACKOFF_S", 0.01)
    fake.add_endpoint(ENDPOINT, component=COMPONENT, copies=0, no_capacity_answers=1)
    _, result = deploy(handler, InferenceComponentName=COMPONENT)
    assert result["IsComplete"] is True
    assert len(fake.invocations()) == 3  # no capacity, then both calls


def test_smoke_test_fails_the_stack_on_a_bad_request(handler, fake):
    fake.add_endpoint(ENDPOINT, default=Reply.model_error(400, '{"message":"temperature must be non-negative"}'))
    with pytest.raises(handler.SmokeTestFailed) as info:
        deploy(handler, ExtraBody='{"temperature": -1}')
    reason = str(info.value)
    assert "HTTP 400 from the model container (ModelError)" in reason
    assert "temperature must be non-negative" in reason
    assert reason.endswith(f"See CloudWatch log group /aws/sagemaker/Endpoints/{ENDPOINT}.")
    assert len(fake.invocations()) == 1


def test_smoke_test_catches_a_silent_rollback_on_update(handler, fake):
    fake.add_endpoint(ENDPOINT, config_name="config-1")
    with pytest.raises(
        handler.SmokeTestFailed, match="runs endpoint config config-1, but this deployment created config-2"
    ):
        deploy(handler, "Update", physical_id=f"smoke-{ENDPOINT}", EndpointConfigName="config-2")


# --- llmops.invoke in process ----------------------------------------------------------------------


class TimedWriter(io.StringIO):
    """Remembers when each write came, to tell streaming from printing at the end."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def write(self, text: str) -> int:
        if text.strip():
            self.times.append(time.monotonic())
        return super().write(text)


def invoke(fake, *args, stdin: str = ""):
    out, err = TimedWriter(), io.StringIO()
    runtime = client("sagemaker-runtime", fake.url)
    code = main([*args], runtime_client=runtime, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out, err.getvalue()


def test_ic_is_the_short_form_of_inference_component(env, fake):
    fake.add_endpoint(ENDPOINT, component=COMPONENT, default=Reply())
    code, _, err = invoke(fake, "--endpoint", ENDPOINT, "--ic", COMPONENT, "--no-stream", PROMPT)
    assert code == 0, err
    (request,) = fake.invocations()
    assert request.headers["x-amzn-sagemaker-inference-component"] == COMPONENT


def test_invoke_streams_token_by_token_and_reports_timing(env, fake):
    fake.add_endpoint(ENDPOINT, default=Reply(token_delay_s=0.03))
    code, out, err = invoke(fake, "--endpoint", ENDPOINT, PROMPT)
    assert code == 0
    assert out.getvalue() == "Buckets hold the sky / objects drift in quiet rows / durable as stone 🪣\n"
    assert len(out.times) == 15 and out.times[-1] - out.times[0] > 0.2  # tokens came as they arrived
    assert "time to first token" in err and "| 15 tokens |" in err and "tokens/s" in err
    (request,) = fake.invocations()
    assert request.kind == "invocations-response-stream"
    assert request.body["max_tokens"] == 512 and request.body["stream"] is True


def test_invoke_without_streaming_with_component_system_extra_and_stdin(env, fake):
    fake.add_endpoint(ENDPOINT, component=COMPONENT, default=Reply(reasoning="Buckets, then haiku."))
    args = ["--endpoint", ENDPOINT, "--inference-component", COMPONENT, "--no-stream", "--max-tokens", "32"]
    args += ["--system", "Answer in English.", "--extra", '{"temperature": 0.2}', "-"]
    code, out, err = invoke(fake, *args, stdin=PROMPT)
    assert code == 0
    assert out.getvalue().startswith("Buckets hold the sky")
    assert err.startswith("Buckets, then haiku.\n")  # reasoning goes to stderr
    assert "time to first token" not in err and "| 18 tokens |" in err
    (request,) = fake.invocations()
    assert request.kind == "invocations"
    assert request.headers["x-amzn-sagemaker-inference-component"] == COMPONENT
    assert request.body == {
        "messages": [{"role": "system", "content": "Answer in English."}, {"role": "user", "content": PROMPT}],
        "max_tokens": 32,
        "temperature": 0.2,
    }


def test_invoke_reports_a_stream_without_done_and_counted_tokens(env, fake):
    fake.add_endpoint(ENDPOINT, default=Reply(done=False, usage=False))
    code, _, err = invoke(fake, "--endpoint", ENDPOINT, PROMPT)
    assert code == 0
    assert "15 tokens (counted deltas)" in err and "stream ended without [DONE]" in err


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply.model_error(400, '{"message":"bad request"}'), "HTTP 400 from the model container (ModelError)"),
        (Reply.service_error("ModelNotReadyException", "not ready"), "(transient: try again)"),
        (Reply(stream_error="ModelStreamError", done=False), "ModelStreamError: Model stream broke mid-answer."),
        (Reply(content=""), "answered with empty content"),
    ],
    ids=["4xx", "not-ready", "stream-error", "empty"],
)
def test_invoke_failures_exit_1_with_one_line(env, fake, reply, expected):
    fake.add_endpoint(ENDPOINT, default=reply)
    code, _, err = invoke(fake, "--endpoint", ENDPOINT, PROMPT)
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and expected in line


def test_invoke_unknown_endpoint_and_missing_component_header(env, fake):
    code, _, err = invoke(fake, "--endpoint", "nope", PROMPT)
    assert code == 1 and "Endpoint nope of account" in err
    fake.add_endpoint(ENDPOINT, component=COMPONENT)
    code, _, err = invoke(fake, "--endpoint", ENDPOINT, "--no-stream", PROMPT)
    assert code == 1 and "Inference Component Name header is required" in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--endpoint", ENDPOINT, "--extra", "{oops", PROMPT], "--extra is not JSON"),
        (["--endpoint", ENDPOINT, "--extra", "[1]", PROMPT], "--extra must be a JSON object"),
        (["--endpoint", ENDPOINT, "--extra", '{"messages": []}', PROMPT], "must not set 'messages'"),
        (["--endpoint", ENDPOINT, "--max-tokens", "0", PROMPT], "--max-tokens 0 must be at least 1"),
        (["--endpoint", ENDPOINT, "   "], "the prompt is empty"),
        ([PROMPT], "give --endpoint (the stack's EndpointName output) or --deployment NAME"),
    ],
)
def test_invoke_bad_arguments_exit_2(env, fake, args, expected):
    code, _, err = invoke(fake, *args)
    assert code == 2 and expected in err
    assert fake.invocations() == []


# --- llmops.invoke as a command --------------------------------------------------------------------


def command(env, *args, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-m", "llmops.invoke", *args],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


def test_command_streams_and_times(env, fake):
    fake.add_endpoint(ENDPOINT)
    process = command(env, "--endpoint", ENDPOINT, "--region", REGION, PROMPT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out.decode() == "Buckets hold the sky / objects drift in quiet rows / durable as stone 🪣\n"
    assert err.decode().startswith("time to first token ")


def test_command_ctrl_c_exits_130_without_a_traceback(env, fake):
    fake.add_endpoint(ENDPOINT, default=Reply(token_delay_s=0.5))
    # A shell without job control starts background jobs with SIGINT ignored, and Python keeps an ignored
    # SIGINT ignored: give the command the default disposition a user's terminal gives it.
    restore = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    process = command(env, "--endpoint", ENDPOINT, PROMPT, preexec_fn=restore)
    try:
        first = process.stdout.read(1)  # the first token has been printed: we are mid-stream
        assert first
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert "Traceback" not in err.decode()
    assert err.decode().strip().endswith("interrupted")


def test_command_without_a_region_exits_2(env, fake):
    env = {k: v for k, v in env.items() if k != "AWS_DEFAULT_REGION"}
    clean = {k: v for k, v in os.environ.items() if k not in ("AWS_DEFAULT_REGION", "AWS_REGION")}
    process = subprocess.run(
        [sys.executable, "-m", "llmops.invoke", "--endpoint", ENDPOINT, PROMPT],
        cwd=ROOT,
        env={**clean, **env, "AWS_CONFIG_FILE": os.devnull},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.returncode == 2
    assert process.stderr.strip() == "error: no AWS region: pass --region or set AWS_REGION"
