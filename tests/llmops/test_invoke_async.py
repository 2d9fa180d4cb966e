"""``llmops invoke --async`` against the fake SageMaker runtime and a moto S3 server, both over real HTTP.

The fake answers ``InvokeEndpointAsync`` with 202 and the locations, then writes the answer (or, for an error reply,
the failure object) into moto after the reply's ``delay_s``; invoke finds it with GetObject as it would in AWS.
"""

from __future__ import annotations

import io
import json

import pytest

from endpoint_client import async_invocations
from llmops import invoke
from tests.fakes import fixtures
from tests.fakes.fake_runtime import CREDENTIALS, DEFAULT_ANSWER, REGION, Reply, client

BUCKET = "invoke-async-answers"
PROMPT = "Write a haiku about S3"


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    """Looks for the answer every 50 ms instead of from 0.5 s up: the fake answers in a fraction of a second."""
    monkeypatch.setattr(async_invocations, "FIRST_POLL_S", 0.05)
    monkeypatch.setattr(async_invocations, "MAX_POLL_S", 0.05)


# The shared fixtures: the session's moto server and the fake runtime answering into it.
moto_url, async_fake = fixtures.moto_url, fixtures.async_fake


@pytest.fixture(scope="module")
def fake(async_fake):
    return async_fake


@pytest.fixture
def s3(moto_url):
    """The answers' bucket, made again if another module reset moto."""
    s3 = client("s3", moto_url)
    s3.create_bucket(Bucket=BUCKET)
    return s3


@pytest.fixture
def endpoint(fake, s3, request) -> str:
    """An asynchronous endpoint of its own per test (its own output and failure prefixes)."""
    fake.reset()
    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    fake.add_endpoint(name, async_output=f"s3://{BUCKET}/{name}/out", async_failure=f"s3://{BUCKET}/{name}/fail")
    return name


def keys(s3, prefix: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def run(fake, moto_url, *argv: str, stdin: str = "", s3_client=None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = invoke.main(
        list(argv),
        runtime_client=client("sagemaker-runtime", fake.url),
        s3_client=s3_client or client("s3", moto_url),
        stdin=io.StringIO(stdin),
        stdout=out,
        stderr=err,
        environ={},
    )
    return code, out.getvalue(), err.getvalue()


def test_the_answer_is_printed_with_its_queue_time_and_inference_id(fake, moto_url, s3, endpoint):
    fake.endpoint(endpoint).default = Reply(delay_s=0.2)
    code, out, err = run(fake, moto_url, "--async", "--endpoint", endpoint, PROMPT)
    assert code == 0, err
    assert out == DEFAULT_ANSWER + "\n"
    timing, kept = err.splitlines()
    assert timing.startswith("queue to answer ") and " tokens | inference id " in timing
    queued_s = float(timing.split()[3])
    assert 0.2 <= queued_s < 1.0  # the reply's delay, and a poll every 50 ms
    (request,) = fake.requests
    assert request.kind == "async-invocations"
    assert "stream" not in request.body and request.body["messages"][-1]["content"] == PROMPT
    inference_id = request.headers["x-amzn-sagemaker-inference-id"]
    assert timing.endswith(f"inference id {inference_id}")
    # The answer is the user's: left where SageMaker wrote it, and said so.
    (answer,) = keys(s3, endpoint)
    assert answer.startswith(f"{endpoint}/out/")
    assert kept == f"answer kept at s3://{BUCKET}/{answer} (--delete-output deletes it)"


def test_delete_output_removes_the_answer_once_printed(fake, moto_url, s3, endpoint):
    code, out, err = run(fake, moto_url, "--async", "--delete-output", "--endpoint", endpoint, PROMPT)
    assert code == 0, err
    assert out == DEFAULT_ANSWER + "\n" and "answer kept" not in err
    assert keys(s3, endpoint) == []


def test_no_wait_prints_the_locations_one_per_line_and_exits_0(fake, moto_url, s3, endpoint):
    fake.endpoint(endpoint).default = Reply(delay_s=0.2)
    code, out, err = run(fake, moto_url, "--async", "--no-wait", "--endpoint", endpoint, PROMPT)
    assert code == 0, err
    lines = dict(line.split("=", 1) for line in out.splitlines())
    assert list(lines) == ["inference_id", "output_location", "failure_location"]
    assert lines["inference_id"] == fake.requests[-1].headers["x-amzn-sagemaker-inference-id"]
    assert lines["output_location"].startswith(f"s3://{BUCKET}/{endpoint}/out/")
    assert lines["failure_location"].startswith(f"s3://{BUCKET}/{endpoint}/fail/")
    assert keys(s3, endpoint) == []  # it did not wait
    fake.settle()
    assert [f"s3://{BUCKET}/{key}" for key in keys(s3, endpoint)] == [lines["output_location"]]


def test_a_failure_object_exits_1_with_one_line_carrying_its_text(fake, moto_url, s3, endpoint):
    fake.endpoint(endpoint).default = Reply.model_error(400, '{"error":\n "temperature must be non-negative"}')
    code, out, err = run(fake, moto_url, "--async", "--endpoint", endpoint, PROMPT)
    assert code == 1 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"error: invoking {endpoint} asynchronously failed: AsyncInferenceFailed")
    assert '{"error": "temperature must be non-negative"}' in line
    assert "-error.out" in line  # where the reason is kept
    assert len(keys(s3, f"{endpoint}/fail/")) == 1  # kept: no --delete-output


def test_a_failure_object_is_deleted_with_delete_output(fake, moto_url, s3, endpoint):
    fake.endpoint(endpoint).default = Reply.model_error(500, "CUDA out of memory")
    code, _, err = run(fake, moto_url, "--async", "--delete-output", "--endpoint", endpoint, PROMPT)
    assert code == 1 and "CUDA out of memory" in err
    assert keys(s3, endpoint) == []


def test_no_answer_within_wait_s_exits_1_naming_where_it_will_be(fake, moto_url, s3, endpoint):
    fake.endpoint(endpoint).default = Reply(delay_s=1.0)
    code, _, err = run(fake, moto_url, "--async", "--wait-s", "0.2", "--endpoint", endpoint, PROMPT)
    assert code == 1
    assert f"no answer from {endpoint} within --wait-s 0.2 s" in err
    assert f"its answer will be at s3://{BUCKET}/{endpoint}/out/" in err


@pytest.mark.parametrize(
    ("option", "value", "header"),
    [
        ("--invocation-timeout-s", "1", "x-amzn-sagemaker-invocationtimeoutseconds"),
        ("--invocation-timeout-s", "3600", "x-amzn-sagemaker-invocationtimeoutseconds"),
        ("--request-ttl-s", "60", "x-amzn-sagemaker-requestttlseconds"),
        ("--request-ttl-s", "21600", "x-amzn-sagemaker-requestttlseconds"),
    ],
)
def test_request_limits_at_their_edges_are_passed_through(fake, moto_url, endpoint, option, value, header):
    code, _, err = run(fake, moto_url, "--async", "--no-wait", option, value, "--endpoint", endpoint, PROMPT)
    assert code == 0, err
    assert fake.requests[-1].headers[header] == value


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--invocation-timeout-s", "0", "allowed: 1 to 3600 seconds"),
        ("--invocation-timeout-s", "3601", "allowed: 1 to 3600 seconds"),
        ("--request-ttl-s", "59", "allowed: 60 to 21600 seconds"),
        ("--request-ttl-s", "21601", "allowed: 60 to 21600 seconds"),
        ("--wait-s", "0", "allowed: more than 0 to 25200 seconds"),
        ("--wait-s", "25201", "allowed: more than 0 to 25200 seconds"),
    ],
)
def test_request_limits_one_outside_exit_2_naming_the_option_and_range(
    fake, moto_url, endpoint, option, value, allowed
):
    code, _, err = run(fake, moto_url, "--async", option, value, "--endpoint", endpoint, PROMPT)
    assert code == 2
    assert f"{option} {value} must be" in err and allowed in err
    assert fake.requests == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--async", "--openai-base-url", "http://127.0.0.1:9/v1"], "--openai-base-url does not go with --async"),
        (["--async", "--stream"], "--stream does not go with --async"),
        (["--async", "--ic", "component"], "--ic does not go with --async"),
        (["--async", "--no-wait", "--delete-output"], "--delete-output does not go with --no-wait"),
        (["--async", "--no-wait", "--wait-s", "5"], "--wait-s does not go with --no-wait"),
        (["--async", "--input-s3-uri", "bucket/prefix"], "--input-s3-uri: 'bucket/prefix' is not an S3 prefix"),
        (["--no-wait"], "--no-wait needs --async"),
        (["--delete-output"], "--delete-output needs --async"),
        (["--keep-output"], "--keep-output needs --async"),
        (["--request-ttl-s", "60"], "--request-ttl-s needs --async"),
    ],
)
def test_options_that_do_not_go_together_exit_2(fake, moto_url, endpoint, argv, said):
    code, out, err = run(fake, moto_url, *argv, "--endpoint", endpoint, PROMPT)
    assert code == 2 and out == ""
    assert said in err
    assert fake.requests == []


def test_no_stream_is_accepted_with_async(fake, moto_url, endpoint):
    code, out, err = run(fake, moto_url, "--async", "--no-stream", "--endpoint", endpoint, PROMPT)
    assert code == 0, err
    assert out == DEFAULT_ANSWER + "\n"


def test_a_body_over_the_inline_limit_needs_input_s3_uri(fake, moto_url, endpoint):
    code, _, err = run(fake, moto_url, "--async", "--endpoint", endpoint, "-", stdin="word " * 26_000)
    assert code == 2
    assert "an inline body is at most 128,000 bytes" in err and "--input-s3-uri" in err
    assert fake.requests == []


def test_input_s3_uri_uploads_the_request_and_deletes_it_once_answered(fake, moto_url, s3, endpoint):
    prompt = "word " * 26_000
    uri = f"s3://{BUCKET}/{endpoint}/in"
    code, out, err = run(fake, moto_url, "--async", "--input-s3-uri", uri, "--endpoint", endpoint, "-", stdin=prompt)
    assert code == 0, err
    assert out == DEFAULT_ANSWER + "\n"
    (request,) = fake.requests
    identifier = request.headers["x-amzn-sagemaker-inference-id"]
    assert request.headers["x-amzn-sagemaker-inputlocation"] == f"{uri}/{identifier}.json"
    assert request.body == b""  # no inline body
    assert keys(s3, f"{endpoint}/in/") == []  # the upload was a copy of the prompt: gone once answered
    assert len(keys(s3, f"{endpoint}/out/")) == 1


def test_no_wait_with_input_s3_uri_keeps_the_upload_and_names_it(fake, moto_url, s3, endpoint):
    uri = f"s3://{BUCKET}/{endpoint}/in/"
    code, out, err = run(fake, moto_url, "--async", "--no-wait", "--input-s3-uri", uri, "--endpoint", endpoint, PROMPT)
    assert code == 0, err
    lines = dict(line.split("=", 1) for line in out.splitlines())
    assert lines["input_location"] == f"{uri}{lines['inference_id']}.json"
    uploaded = s3.get_object(Bucket=BUCKET, Key=lines["input_location"].removeprefix(f"s3://{BUCKET}/"))
    assert json.loads(uploaded["Body"].read())["messages"][-1]["content"] == PROMPT
    fake.settle()


class DeniedS3:
    """An S3 client whose every read is denied, as S3 answers a reader without s3:ListBucket for a missing key."""

    def get_object(self, **request):
        from botocore.exceptions import ClientError

        error = {
            "Error": {"Code": "AccessDenied", "Message": "Access Denied"},
            "ResponseMetadata": {"HTTPStatusCode": 403},
        }
        raise ClientError(error, "GetObject")


def test_reads_denied_until_the_wait_ends_name_s3_list_bucket(fake, moto_url, endpoint):
    code, _, err = run(
        fake, moto_url, "--async", "--wait-s", "0.2", "--endpoint", endpoint, PROMPT, s3_client=DeniedS3()
    )
    assert code == 1
    assert "within --wait-s 0.2 s" in err and "s3:ListBucket" in err
    fake.settle()


def test_the_clients_come_from_the_environment_in_one_region(fake, moto_url, s3, endpoint, monkeypatch):
    for name, value in {
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": fake.url,
        "AWS_ENDPOINT_URL_S3": moto_url,
        "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    out, err = io.StringIO(), io.StringIO()
    argv = ["--async", "--region", REGION, "--endpoint", endpoint, PROMPT]
    assert invoke.main(argv, stdout=out, stderr=err, environ={}) == 0, err.getvalue()
    assert out.getvalue() == DEFAULT_ANSWER + "\n"
