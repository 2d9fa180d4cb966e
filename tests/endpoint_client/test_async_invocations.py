"""The asynchronous client's pure parts: S3 locations in every form SageMaker's DestinationS3Uri allows, and what
``wait_for_answer`` makes of each way a read of the answer can fail (an in-memory S3, a fake clock)."""

from __future__ import annotations

import io
import json

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from endpoint_client import InvocationError
from endpoint_client.async_invocations import (
    EXPIRED,
    FAILED,
    Submitted,
    new_inference_id,
    s3_location,
    wait_for_answer,
)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://b/k/x.out", ("b", "k/x.out")),
        ("https://my.bucket.s3.us-east-1.amazonaws.com/a/b.out", ("my.bucket", "a/b.out")),
        ("https://s3.us-east-1.amazonaws.com/bkt/a/b.out", ("bkt", "a/b.out")),
        ("https://bkt.s3-us-west-2.amazonaws.com/k", ("bkt", "k")),
        ("https://a.s3.b.s3.us-east-1.amazonaws.com/k", ("a.s3.b", "k")),
    ],
)
def test_every_s3_form_names_its_bucket_and_key(uri, expected):
    assert s3_location(uri) == expected


@pytest.mark.parametrize("uri", ["s3://b", "s3:///k", "https://example.com/x", "ftp://b/k", "", "https://s3.x.com/b"])
def test_what_is_not_an_object_location_is_refused(uri):
    with pytest.raises(ValueError, match="is not an S3 object location"):
        s3_location(uri)


def test_an_inference_id_is_unique_and_at_most_64_characters():
    first, second = new_inference_id("smoke-test-"), new_inference_id("smoke-test-")
    assert first != second and first.startswith("smoke-test-") and len(first) <= 64
    assert len(new_inference_id("x" * 32)) == 64
    with pytest.raises(ValueError, match="64 characters"):
        new_inference_id("x" * 33)


# --- wait_for_answer: what a read that fails means -----------------------------------------------------------------

OUTPUT, FAILURE = "s3://b/out/smoke-test/a.out", "s3://b/fail/a-error.out"
ANSWER = json.dumps({"choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]}).encode()


def s3_error(code: str, message: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject"
    )


class Objects:
    """GetObject over a dict of ``s3://`` locations; the scripted errors come first, one a read."""

    def __init__(self, objects: dict[str, bytes], errors: list[Exception] | None = None) -> None:
        self.objects, self.errors, self.reads = objects, list(errors or []), 0

    def get_object(self, *, Bucket: str, Key: str) -> dict:
        self.reads += 1
        if self.errors:
            raise self.errors.pop(0)
        location = f"s3://{Bucket}/{Key}"
        if location not in self.objects:
            raise s3_error("NoSuchKey", "The specified key does not exist.", 404)
        return {"Body": io.BytesIO(self.objects[location])}


class Clock:
    def __init__(self) -> None:
        self.now, self.sleeps = 100.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def wait(s3: Objects, clock: Clock, *, within: float = 60.0):
    submitted = Submitted("smoke-test-1", OUTPUT, FAILURE, submitted_at=clock())
    return wait_for_answer(s3, submitted, deadline=clock() + within, clock=clock, sleep=clock.sleep)


TRANSIENT = [
    s3_error("SlowDown", "Please reduce your request rate.", 503),
    s3_error("InternalError", "We encountered an internal error. Please try again.", 500),
    EndpointConnectionError(endpoint_url="https://b.s3.amazonaws.com/out"),
    ReadTimeoutError(endpoint_url="https://b.s3.amazonaws.com/out"),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=["SlowDown", "InternalError", "connection", "read-timeout"])
def test_a_transient_read_failure_is_tried_again_at_the_next_poll(error):
    clock = Clock()
    s3 = Objects({OUTPUT: ANSWER}, [error] * 4)
    result = wait(s3, clock)
    assert result.content == "hello" and s3.reads == 5  # two polls of both objects failed, then the answer
    assert clock.sleeps == [0.5, 1.0] and result.latency_s == 1.5


def test_transient_failures_until_the_deadline_end_the_wait_as_a_timeout_naming_the_last():
    clock = Clock()
    s3 = Objects({}, [s3_error("SlowDown", "Please reduce your request rate.", 503)] * 1000)
    with pytest.raises(InvocationError) as info:
        wait(s3, clock, within=10)
    assert info.value.info.code == EXPIRED and info.value.transient
    assert f"{s3.reads} reads failed and were tried again, the last with SlowDown, HTTP 503" in str(info.value)
    assert clock() == 110  # the deadline, not the first failure, ended it


def test_reads_denied_without_kms_are_not_yet_and_end_as_a_plain_timeout():
    clock = Clock()
    s3 = Objects({}, [s3_error("AccessDenied", "Access Denied", 403)] * 1000)
    with pytest.raises(InvocationError) as info:
        wait(s3, clock, within=10)
    assert (
        info.value.info.code == EXPIRED and "tried again" not in str(info.value) and "s3:ListBucket" in str(info.value)
    )


@pytest.mark.parametrize(
    ("objects", "errors", "code"),
    [
        ({}, [s3_error("AccessDenied", "not authorized to perform: kms:Decrypt", 403)], "AccessDenied"),
        ({OUTPUT: b"<html>gone</html>"}, [], "MalformedResponse"),
        ({FAILURE: b"CUDA out of memory"}, [], FAILED),
    ],
    ids=["kms-denied", "malformed-answer", "failure-object"],
)
def test_a_permanent_outcome_ends_the_wait_at_once(objects, errors, code):
    clock = Clock()
    with pytest.raises(InvocationError) as info:
        wait(Objects(objects, errors), clock)
    assert info.value.info.code == code and not info.value.transient and clock.sleeps == []


def test_an_answer_over_the_cap_is_refused_not_retried():
    clock = Clock()
    submitted = Submitted("smoke-test-1", OUTPUT, FAILURE, submitted_at=clock())
    with pytest.raises(InvocationError) as info:
        wait_for_answer(Objects({OUTPUT: ANSWER}), submitted, deadline=clock() + 60, clock=clock, max_bytes=10)
    assert info.value.info.code == "StreamLimitExceeded" and not info.value.transient
