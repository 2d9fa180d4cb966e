"""An asynchronous request end to end over HTTP: the fake runtime, moto's S3 and SNS, an SQS queue subscribed to the
endpoint's topics, as a user's pipeline would subscribe (docs/guide/async-inference.md).

Submit -> the answer object -> the success topic's message names that object; submit -> a failure object -> the error
topic's message says Failed with the reason, and the client raises with the failure object's text.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from endpoint_client import InvocationError, build_chat_request
from endpoint_client.async_invocations import FAILED, remove, submit_chat, wait_for_answer
from tests.fakes.fake_runtime import FakeSageMaker, Reply, client
from tests.fakes.fixtures import moto_endpoint

ENDPOINT = "async-llm"


@pytest.fixture(scope="module")
def aws():
    url = moto_endpoint()
    with FakeSageMaker(s3_url=url) as fake:
        yield url, fake


@pytest.fixture
def pipeline(aws):
    """A bucket, two topics, one queue subscribed to both (raw delivery off: SNS's envelope, as SQS receives it)."""
    url, fake = aws
    s3, sns, sqs = client("s3", url), client("sns", url), client("sqs", url)
    bucket = f"answers-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    topics = [sns.create_topic(Name=f"{name}-{uuid.uuid4().hex[:8]}")["TopicArn"] for name in ("ok", "failed")]
    queue = sqs.create_queue(QueueName=f"answers-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    for topic in topics:
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    fake.reset()
    endpoint = fake.add_endpoint(
        ENDPOINT,
        async_output=f"s3://{bucket}/async/output",
        async_failure=f"s3://{bucket}/async/failure",
        async_success_topic=topics[0],
        async_error_topic=topics[1],
    )
    return {"s3": s3, "sqs": sqs, "queue": queue, "bucket": bucket, "endpoint": endpoint, "fake": fake}


def notifications(sqs, queue: str, count: int, timeout_s: float = 10.0) -> list[dict]:
    found: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while len(found) < count and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
            "Messages", []
        ):
            found.append(json.loads(json.loads(message["Body"])["Message"]))
    return found


def test_an_answer_is_written_and_announced_on_the_success_topic(pipeline):
    runtime = client("sagemaker-runtime", pipeline["fake"].url)
    submitted = submit_chat(runtime, ENDPOINT, build_chat_request("Say hello", max_tokens=8), inference_id="req-1")
    answer = wait_for_answer(pipeline["s3"], submitted, deadline=time.time() + 10, sleep=lambda s: time.sleep(0.05))
    assert answer.content and answer.tokens > 0
    (message,) = notifications(pipeline["sqs"], pipeline["queue"], 1)
    assert message["invocationStatus"] == "Completed" and message["eventName"] == "InferenceResult"
    assert message["responseParameters"]["outputLocation"] == submitted.output_location
    assert message["inferenceId"] == "req-1" and message["requestParameters"]["endpointName"] == ENDPOINT
    remove(pipeline["s3"], submitted)
    assert pipeline["s3"].list_objects_v2(Bucket=pipeline["bucket"]).get("KeyCount") == 0


def test_a_failure_is_written_announced_on_the_error_topic_and_raised_with_its_text(pipeline):
    pipeline["endpoint"].default = Reply.model_error(400, '{"error": "prompt too long"}')
    runtime = client("sagemaker-runtime", pipeline["fake"].url)
    submitted = submit_chat(runtime, ENDPOINT, build_chat_request("Say hello", max_tokens=8))
    with pytest.raises(InvocationError) as info:
        wait_for_answer(pipeline["s3"], submitted, deadline=time.time() + 10, sleep=lambda s: time.sleep(0.05))
    assert info.value.info.code == FAILED and "prompt too long" in info.value.info.body
    assert not info.value.transient
    (message,) = notifications(pipeline["sqs"], pipeline["queue"], 1)
    assert message["invocationStatus"] == "Failed" and "prompt too long" in message["failureReason"]
    remove(pipeline["s3"], submitted)
