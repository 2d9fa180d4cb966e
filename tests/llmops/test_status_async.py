"""``llmops status`` for asynchronous endpoints, against botocore Stubbers (calls and answers checked against the
service models): the mode and output paths from DescribeEndpointConfig, the queue from CloudWatch's
ApproximateBacklogSize, and a queue that cannot be read shown as unknown without failing the report."""

from __future__ import annotations

import datetime as dt
import io
import json
from contextlib import ExitStack

import pytest

from llmops import status
from tests.llmops.test_status import (
    ACCOUNT,
    NOW,
    PREFIXES,
    REGION,
    STACK,
    Aws,
    T,
    identity,
    kept_bucket,
    listed,
    log_groups,
    no_jobs,
    resources,
    run,
    stacks,
    tagged,
)

ENDPOINT = f"{STACK}-Async-1A2B"
CONFIG = f"{STACK}-AsyncConfig-1"
OUTPUT = "s3://answers-bucket/async/out"
FAILURE = "s3://answers-bucket/async/fail"


@pytest.fixture
def aws():
    fake = Aws()
    with ExitStack() as stack:
        for stub in fake.stubs.values():
            stack.enter_context(stub)
        yield fake
        for stub in fake.stubs.values():
            stub.assert_no_pending_responses()


def backlog_call() -> dict:
    return {
        "Namespace": "AWS/SageMaker",
        "MetricName": "ApproximateBacklogSize",
        "Dimensions": [{"Name": "EndpointName", "Value": ENDPOINT}],
        "StartTime": NOW - dt.timedelta(minutes=5),
        "EndTime": NOW,
        "Period": 60,
        "Statistics": ["Average"],
    }


def async_endpoint(aws: Aws, *, backlog: list[tuple[int, float]] | None = None, error: str | None = None) -> None:
    """The app with one asynchronous endpoint (found by its name); ``backlog``: (minutes ago, Average) datapoints,
    or ``error``: the code GetMetricStatistics answers."""
    identity(aws)
    stacks(aws, (STACK, None))
    resources(aws, STACK)
    aws.add("sagemaker", "list_endpoints", listed(ENDPOINT), {})
    tagged(aws)
    aws.add(
        "sagemaker",
        "describe_endpoint",
        {
            "EndpointName": ENDPOINT,
            "EndpointArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/{ENDPOINT.lower()}",
            "EndpointConfigName": CONFIG,
            "EndpointStatus": "InService",
            "CreationTime": T,
            "LastModifiedTime": T,
            "ProductionVariants": [{"VariantName": "AllTraffic", "CurrentInstanceCount": 0, "DesiredInstanceCount": 0}],
        },
        {"EndpointName": ENDPOINT},
    )
    aws.add(
        "sagemaker",
        "describe_endpoint_config",
        {
            "EndpointConfigName": CONFIG,
            "EndpointConfigArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint-config/{CONFIG.lower()}",
            "CreationTime": T,
            "ProductionVariants": [
                {"VariantName": "AllTraffic", "InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1}
            ],
            "AsyncInferenceConfig": {
                "ClientConfig": {"MaxConcurrentInvocationsPerInstance": 4},
                "OutputConfig": {"S3OutputPath": OUTPUT, "S3FailurePath": FAILURE},
            },
        },
        {"EndpointConfigName": CONFIG},
    )
    # One GetMetricStatistics call for the endpoint, its parameters checked by the Stubber.
    if error:
        aws.stubs["cloudwatch"].add_client_error(
            "get_metric_statistics", error, "not allowed", http_status_code=400, expected_params=backlog_call()
        )
    else:
        points = [
            {"Timestamp": NOW - dt.timedelta(minutes=ago), "Average": value, "Unit": "None"}
            for ago, value in backlog or []
        ]
        answer = {"Label": "ApproximateBacklogSize", "Datapoints": points}
        aws.add("cloudwatch", "get_metric_statistics", answer, backlog_call())
    aws.add("sagemaker", "list_inference_components", {"InferenceComponents": []}, {"EndpointNameEquals": ENDPOINT})
    no_jobs(aws)
    kept_bucket(aws)
    log_groups(aws, [*PREFIXES, f"/aws/sagemaker/Endpoints/{ENDPOINT}"], {})


def test_an_async_endpoint_is_marked_with_its_output_paths_and_queue(aws: Aws) -> None:
    async_endpoint(aws, backlog=[(3, 2.0), (1, 5.0), (2, 4.0)])
    code, out = run(aws)
    assert code == 0
    assert f"  endpoint {ENDPOINT}: InService (async)\n" in out
    assert f"    answers to {OUTPUT}, failures to {FAILURE}\n" in out
    # The latest minute's Average, whatever order the datapoints came in.
    assert "    queue: 5 requests (ApproximateBacklogSize, average of the minute from 11:59 UTC)\n" in out
    assert "    variant AllTraffic: ml.g6.xlarge x 0 of 0 instances\n" in out


def test_an_empty_queue_is_0_requests(aws: Aws) -> None:
    async_endpoint(aws, backlog=[(1, 0.0)])
    code, out = run(aws)
    assert code == 0 and "    queue: 0 requests (" in out


def test_the_json_report_has_the_mode_paths_and_backlog(aws: Aws) -> None:
    async_endpoint(aws, backlog=[(1, 3.5)])
    code, out = run(aws, "--json")
    assert code == 0
    (endpoint,) = json.loads(out)["endpoints"]
    assert endpoint["mode"] == "async"
    assert (endpoint["output_path"], endpoint["failure_path"], endpoint["backlog"]) == (OUTPUT, FAILURE, 3.5)


def test_a_queue_that_cannot_be_read_is_unknown_and_status_still_succeeds(aws: Aws) -> None:
    async_endpoint(aws, error="AccessDenied")
    code, out = run(aws)
    assert code == 0
    assert "    queue: unknown (GetMetricStatistics ApproximateBacklogSize: AccessDenied)\n" in out
    assert "bucket " in out  # the rest of the report is there


def test_no_datapoint_in_the_last_5_minutes_is_unknown(aws: Aws) -> None:
    async_endpoint(aws, backlog=[])
    code, out = run(aws)
    assert code == 0
    assert "    queue: unknown (no ApproximateBacklogSize datapoint in the last 5 minutes)\n" in out


def test_a_real_time_config_is_real_time_and_an_unread_one_unknown() -> None:
    assert status._mode({"ProductionVariants": []}) == {"mode": "real-time"}
    assert status.Endpoint("E", "InService").mode == "real-time"
    out = io.StringIO()
    report = status.Report(STACK, ACCOUNT, REGION, "CREATE_COMPLETE", endpoints=[status.Endpoint("E", "InService")])
    status.render(report, out)
    assert "  endpoint E: InService\n" in out.getvalue() and "queue" not in out.getvalue()
