"""``llmops status`` against botocore Stubbers: every call and answer is checked against the service models."""

from __future__ import annotations

import datetime as dt
import io
import json
from contextlib import ExitStack
from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from llmops import status
from tests.fakes.fixtures import boto_session

ACCOUNT = "123456789012"
REGION = "us-east-1"
STACK = "LlmEndpoint"
BUCKET = f"llmendpoint-models-{ACCOUNT}-{REGION}"
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
T = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)
ENDPOINT = "LlmEndpoint-099A270C"
ENDPOINT_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/{ENDPOINT.lower()}"
SERVICES = {
    "sts": "sts",
    "cloudformation": "cloudformation",
    "sagemaker": "sagemaker",
    "s3": "s3",
    "cloudwatch": "cloudwatch",
    "logs": "logs",
    "tagging": "resourcegroupstaggingapi",
}


class Aws:
    def __init__(self) -> None:
        session = boto_session()
        self.clients = {
            key: session.client(name, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
            for key, name in SERVICES.items()
        }
        self.stubs = {key: Stubber(client) for key, client in self.clients.items()}

    def add(self, service: str, method: str, response: dict[str, Any], params: dict[str, Any] | None = None) -> None:
        self.stubs[service].add_response(method, response, params)

    def error(self, service: str, method: str, code: str, message: str, status_code: int = 400) -> None:
        self.stubs[service].add_client_error(method, code, message, http_status_code=status_code)


@pytest.fixture
def aws():
    fake = Aws()
    with ExitStack() as stack:
        for stub in fake.stubs.values():
            stack.enter_context(stub)
        yield fake
        for stub in fake.stubs.values():
            stub.assert_no_pending_responses()


def identity(aws: Aws) -> None:
    aws.add("sts", "get_caller_identity", {"Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/me", "UserId": "A"})


def no_jobs(aws: Aws) -> None:
    for state in status.RUNNING_JOB:
        aws.add(
            "sagemaker",
            "list_processing_jobs",
            {"ProcessingJobSummaries": []},
            {"NameContains": "hfstage-", "StatusEquals": state},
        )


def kept_bucket(aws: Aws, size: float | None = 16.4e9) -> None:
    aws.add("s3", "head_bucket", {}, {"Bucket": BUCKET, "ExpectedBucketOwner": ACCOUNT})
    points = [{"Timestamp": T, "Average": size, "Unit": "Bytes"}] if size is not None else []
    aws.add(
        "cloudwatch",
        "get_metric_statistics",
        {"Label": "BucketSizeBytes", "Datapoints": points},
        {
            "Namespace": "AWS/S3",
            "MetricName": "BucketSizeBytes",
            "Dimensions": [
                {"Name": "BucketName", "Value": BUCKET},
                {"Name": "StorageType", "Value": "StandardStorage"},
            ],
            "StartTime": NOW - dt.timedelta(days=3),
            "EndTime": NOW,
            "Period": 86400,
            "Statistics": ["Average"],
        },
    )


def log_groups(aws: Aws, prefixes: list[str], groups: dict[str, list[str]]) -> None:
    for prefix in sorted(prefixes):
        aws.add(
            "logs",
            "describe_log_groups",
            {
                "logGroups": [
                    {"logGroupName": g, "storedBytes": 2048, "retentionInDays": 30, "creationTime": 1}
                    for g in groups.get(prefix, [])
                ]
            },
            {"logGroupNamePrefix": prefix},
        )


def run(aws: Aws, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return status.main(list(argv), clients=aws.clients, out=out, now=NOW), out.getvalue()


def stacks(aws: Aws, *stacks: tuple[str, str | None]) -> None:
    """DescribeStacks without a name: every stack, each ``(name, app tag or None)``."""
    aws.add(
        "cloudformation",
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": name,
                    "StackStatus": "CREATE_COMPLETE",
                    "CreationTime": T,
                    "Tags": [{"Key": status.APP_TAG, "Value": app}] if app else [],
                }
                for name, app in stacks
            ]
        },
        {},
    )


def resources(aws: Aws, stack: str, *items: tuple[str, str]) -> None:
    aws.add(
        "cloudformation",
        "list_stack_resources",
        {
            "StackResourceSummaries": [
                {
                    "LogicalResourceId": f"R{i}",
                    "PhysicalResourceId": physical,
                    "ResourceType": kind,
                    "LastUpdatedTimestamp": T,
                    "ResourceStatus": "CREATE_COMPLETE",
                }
                for i, (kind, physical) in enumerate(items)
            ]
        },
        {"StackName": stack},
    )


def tagged(aws: Aws, *arns: str, app: str = STACK) -> None:
    aws.add(
        "tagging",
        "get_resources",
        {"ResourceTagMappingList": [{"ResourceARN": a, "Tags": [{"Key": status.APP_TAG, "Value": app}]} for a in arns]},
        {"TagFilters": [{"Key": status.APP_TAG}], "ResourceTypeFilters": ["sagemaker:endpoint"]},
    )


def listed(*names: str) -> dict[str, Any]:
    return {
        "Endpoints": [
            {
                "EndpointName": n,
                "EndpointArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/{n.lower()}",
                "CreationTime": T,
                "LastModifiedTime": T,
                "EndpointStatus": "InService",
            }
            for n in names
        ]
    }


def deployed(aws: Aws) -> None:
    identity(aws)
    stacks(aws, (STACK, None))
    resources(
        aws,
        STACK,
        ("AWS::SageMaker::Model", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model/model-1"),
        ("AWS::SageMaker::EndpointConfig", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint-config/config-1"),
        ("AWS::SageMaker::Endpoint", ENDPOINT_ARN),
    )
    aws.add(
        "sagemaker",
        "list_endpoints",
        {
            "Endpoints": [
                {
                    "EndpointName": ENDPOINT,
                    "EndpointArn": ENDPOINT_ARN,
                    "CreationTime": T,
                    "LastModifiedTime": T,
                    "EndpointStatus": "InService",
                },
                # NameContains matches anywhere: another app's endpoint is left out.
                {
                    "EndpointName": "OtherLlmEndpoint-1",
                    "EndpointArn": ENDPOINT_ARN + "x",
                    "CreationTime": T,
                    "LastModifiedTime": T,
                    "EndpointStatus": "InService",
                },
            ]
        },
        {},
    )
    # The tagged endpoint is already gone (not listed): the tagging index lags behind deletes.
    tagged(aws, f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/custom-gone")
    aws.add(
        "sagemaker",
        "describe_endpoint",
        {
            "EndpointName": ENDPOINT,
            "EndpointArn": ENDPOINT_ARN,
            "EndpointConfigName": "LlmEndpoint-Config-1",
            "EndpointStatus": "InService",
            "CreationTime": T,
            "LastModifiedTime": T,
            "ProductionVariants": [{"VariantName": "AllTraffic", "CurrentInstanceCount": 1, "DesiredInstanceCount": 1}],
        },
        {"EndpointName": ENDPOINT},
    )
    aws.add(
        "sagemaker",
        "describe_endpoint_config",
        {
            "EndpointConfigName": "LlmEndpoint-Config-1",
            "EndpointConfigArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint-config/llmendpoint-config-1",
            "CreationTime": T,
            "ProductionVariants": [
                {"VariantName": "AllTraffic", "InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1}
            ],
        },
        {"EndpointConfigName": "LlmEndpoint-Config-1"},
    )
    aws.add(
        "sagemaker",
        "list_inference_components",
        {
            "InferenceComponents": [
                {
                    "InferenceComponentName": "LlmEndpoint-Component-1",
                    "InferenceComponentArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:inference-component/c1",
                    "EndpointName": ENDPOINT,
                    "EndpointArn": ENDPOINT_ARN,
                    "VariantName": "AllTraffic",
                    "InferenceComponentStatus": "InService",
                    "CreationTime": T,
                    "LastModifiedTime": T,
                }
            ]
        },
        {"EndpointNameEquals": ENDPOINT},
    )
    aws.add(
        "sagemaker",
        "describe_inference_component",
        {
            "InferenceComponentName": "LlmEndpoint-Component-1",
            "InferenceComponentArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:inference-component/c1",
            "EndpointName": ENDPOINT,
            "EndpointArn": ENDPOINT_ARN,
            "CreationTime": T,
            "LastModifiedTime": T,
            "RuntimeConfig": {"DesiredCopyCount": 2, "CurrentCopyCount": 1},
        },
        {"InferenceComponentName": "LlmEndpoint-Component-1"},
    )


def job(name: str, target: str) -> dict[str, Any]:
    return {
        "ProcessingJobName": name,
        "ProcessingJobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:processing-job/{name}",
        "ProcessingJobStatus": "InProgress",
        "CreationTime": T,
        "AppSpecification": {"ImageUri": "123.dkr.ecr.us-east-1.amazonaws.com/x:1"},
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/r",
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": 2, "InstanceType": "ml.m5.2xlarge", "VolumeSizeInGB": 30}
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "Environment": {"HFSTAGE_TARGET": target},
    }


def staging(aws: Aws) -> None:
    mine, other = "hfstage-1a2b3c4d-aaaa", "hfstage-99999999-bbbb"
    summaries = [
        {
            "ProcessingJobName": n,
            "ProcessingJobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:processing-job/{n}",
            "CreationTime": T,
            "ProcessingJobStatus": "InProgress",
        }
        for n in (mine, other)
    ]
    aws.add(
        "sagemaker",
        "list_processing_jobs",
        {"ProcessingJobSummaries": summaries},
        {"NameContains": "hfstage-", "StatusEquals": "InProgress"},
    )
    aws.add(
        "sagemaker",
        "describe_processing_job",
        job(mine, f"s3://{BUCKET}/models/Org--M/abc/"),
        {"ProcessingJobName": mine},
    )
    aws.add(
        "sagemaker", "describe_processing_job", job(other, "s3://someone-else/models/x/"), {"ProcessingJobName": other}
    )
    aws.add(
        "sagemaker",
        "list_processing_jobs",
        {"ProcessingJobSummaries": []},
        {"NameContains": "hfstage-", "StatusEquals": "Stopping"},
    )


PREFIXES = [
    f"/aws/sagemaker/Endpoints/{STACK}-",
    f"/aws/sagemaker/InferenceComponents/{STACK}-",
]


def test_a_deployed_app_lists_its_compute_and_what_it_keeps(aws: Aws) -> None:
    deployed(aws)
    staging(aws)
    kept_bucket(aws)
    log_groups(
        aws,
        [*PREFIXES, f"/aws/sagemaker/Endpoints/{ENDPOINT}"],
        {PREFIXES[0]: [f"/aws/sagemaker/Endpoints/{ENDPOINT}"]},
    )
    code, out = run(aws)
    assert code == 0
    assert f"{STACK} in account {ACCOUNT}, {REGION}: stack CREATE_COMPLETE" in out
    assert f"endpoint {ENDPOINT}: InService" in out
    assert "variant AllTraffic: ml.g6.xlarge x 1 of 1 instances" in out
    assert "inference component LlmEndpoint-Component-1: InService, copies 1 of 2" in out
    assert "staging job hfstage-1a2b3c4d-aaaa: InProgress, ml.m5.2xlarge x 2" in out
    assert "hfstage-99999999" not in out and "OtherLlmEndpoint" not in out and "custom-gone" not in out
    assert f"bucket {BUCKET}: 16.4 GB (as of 2026-11-30)" in out
    assert f"log group /aws/sagemaker/Endpoints/{ENDPOINT}: 2.0 kB (kept 30 days)" in out
    assert "model model-1 (stack LlmEndpoint)" in out and "endpoint config config-1 (stack LlmEndpoint)" in out


def test_expect_none_fails_while_compute_is_left(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    deployed(aws)
    no_jobs(aws)
    kept_bucket(aws)
    log_groups(aws, [*PREFIXES, f"/aws/sagemaker/Endpoints/{ENDPOINT}"], {})
    code, _ = run(aws, "--expect-none")
    assert code == status.EXIT_LEFT
    err = capsys.readouterr().err
    assert (
        f"2 billing resource(s) left: endpoint {ENDPOINT} (InService); inference component LlmEndpoint-Component-1"
        in err
    )


def destroyed(aws: Aws) -> None:
    identity(aws)
    stacks(aws, ("Other", None))
    aws.add("sagemaker", "list_endpoints", {"Endpoints": []}, {})
    aws.add(
        "tagging",
        "get_resources",
        {"ResourceTagMappingList": []},
        {"TagFilters": ANY, "ResourceTypeFilters": ["sagemaker:endpoint"]},
    )
    no_jobs(aws)


def test_after_destroy_expect_none_passes_and_shows_what_is_kept(aws: Aws) -> None:
    destroyed(aws)
    kept_bucket(aws, size=None)
    log_groups(aws, PREFIXES, {PREFIXES[0]: [f"/aws/sagemaker/Endpoints/{ENDPOINT}"]})
    code, out = run(aws, "--expect-none")
    assert code == 0
    assert "stack not deployed (no such stack)" in out
    assert "nothing: no endpoint, inference component or staging job" in out
    assert f"bucket {BUCKET}: size unknown (size not reported yet" in out
    assert f"log group /aws/sagemaker/Endpoints/{ENDPOINT}" in out


def test_json_report(aws: Aws) -> None:
    destroyed(aws)
    aws.error("s3", "head_bucket", "404", "Not Found", status_code=404)
    log_groups(aws, PREFIXES, {})
    code, out = run(aws, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["stack_status"] is None and data["compute_left"] == [] and data["kept"] == []
    assert data["account"] == ACCOUNT and data["region"] == REGION


def test_a_denied_call_is_named_with_exit_3(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    identity(aws)
    stacks(aws)
    aws.error("sagemaker", "list_endpoints", "AccessDeniedException", "not authorized", status_code=400)
    code, _ = run(aws)
    assert code == status.EXIT_AWS
    assert "could not read list_endpoints: AccessDeniedException" in capsys.readouterr().err


def test_a_bad_stack_name_is_a_usage_error(aws: Aws) -> None:
    assert run(aws, "--stack-name", "bad name;rm")[0] == status.EXIT_USAGE


@pytest.mark.parametrize("app", ["LlmEndpoint", "my_app.v2", "A" * 40])
def test_the_bucket_name_is_the_constructs(app: str) -> None:
    import aws_cdk as cdk

    from constructs_lib.model_bucket import app_bucket_name

    stack = cdk.Stack(cdk.App(), "S")
    joined = stack.resolve(app_bucket_name(app))["Fn::Join"][1]
    expected = "".join(
        ACCOUNT if p == {"Ref": "AWS::AccountId"} else REGION if p == {"Ref": "AWS::Region"} else p for p in joined
    )
    assert status.app_bucket_name(app, ACCOUNT, REGION) == expected


def test_llmops_status_is_a_subcommand() -> None:
    from llmops.__main__ import COMMANDS

    assert COMMANDS["status"] == "status"


# -- a fleet, errors that are not "gone", instance pools ------------------------------------------------------

FLEET_ENDPOINT = "LlmEndpointchat-Endpoint-1A2B3C"  # CloudFormation's generated name drops the stack's hyphen


def endpoint_answers(
    aws: Aws,
    name: str,
    variant: dict[str, Any] | None = None,
    config: dict | None = None,
    config_error: tuple[str, str, int] | None = None,
) -> None:
    aws.add(
        "sagemaker",
        "describe_endpoint",
        {
            "EndpointName": name,
            "EndpointArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/{name.lower()}",
            "EndpointConfigName": "Config-1",
            "EndpointStatus": "InService",
            "CreationTime": T,
            "LastModifiedTime": T,
            "ProductionVariants": [
                variant or {"VariantName": "AllTraffic", "CurrentInstanceCount": 1, "DesiredInstanceCount": 1}
            ],
        },
        {"EndpointName": name},
    )
    if config_error is not None:
        code, message, http = config_error
        aws.error("sagemaker", "describe_endpoint_config", code, message, status_code=http)
        return
    aws.add(
        "sagemaker",
        "describe_endpoint_config",
        {
            "EndpointConfigName": "Config-1",
            "EndpointConfigArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint-config/config-1",
            "CreationTime": T,
            "ProductionVariants": [
                config or {"VariantName": "AllTraffic", "InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1}
            ],
        },
        {"EndpointConfigName": "Config-1"},
    )


def fleet_found(aws: Aws) -> None:
    identity(aws)
    stacks(
        aws,
        (f"{STACK}-models", STACK),
        (f"{STACK}-chat", STACK),
        (f"{STACK}-prod", f"{STACK}-prod"),  # another app, named with this one's prefix: never read
        (f"{STACK}-old", None),  # untagged: named like a fleet stack, not read without --stack
    )
    resources(aws, f"{STACK}-chat", ("AWS::SageMaker::Endpoint", listed(FLEET_ENDPOINT)["Endpoints"][0]["EndpointArn"]))
    resources(aws, f"{STACK}-models")
    aws.add("sagemaker", "list_endpoints", listed(FLEET_ENDPOINT, "LlmEndpointprod-Endpoint-9Z"), {})
    tagged(aws)


def test_a_fleets_endpoints_are_found_through_its_stacks_not_by_name(aws: Aws) -> None:
    fleet_found(aws)
    endpoint_answers(aws, FLEET_ENDPOINT)
    aws.add("sagemaker", "list_inference_components", {"InferenceComponents": []}, {"EndpointNameEquals": ANY})
    no_jobs(aws)
    kept_bucket(aws)
    log_groups(aws, [*PREFIXES, f"/aws/sagemaker/Endpoints/{FLEET_ENDPOINT}"], {})
    code, out = run(aws, "--expect-none")
    assert code == status.EXIT_LEFT
    assert f"endpoint {FLEET_ENDPOINT}: InService" in out and "LlmEndpointprod" not in out
    assert f"and stack {STACK}-chat: CREATE_COMPLETE" in out and f"{STACK}-prod:" not in out
    assert f"stack {STACK}-old is named like this app's but carries no {status.APP_TAG} tag" in out


def test_a_tagged_endpoint_is_found_without_its_stack(aws: Aws) -> None:
    identity(aws)
    stacks(aws)
    aws.add("sagemaker", "list_endpoints", listed(FLEET_ENDPOINT), {})
    tagged(aws, f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/{FLEET_ENDPOINT.lower()}")
    endpoint_answers(aws, FLEET_ENDPOINT)
    aws.add("sagemaker", "list_inference_components", {"InferenceComponents": []}, {"EndpointNameEquals": ANY})
    no_jobs(aws)
    kept_bucket(aws)
    log_groups(aws, [*PREFIXES, f"/aws/sagemaker/Endpoints/{FLEET_ENDPOINT}"], {})
    code, out = run(aws, "--expect-none")
    assert code == status.EXIT_LEFT and f"endpoint {FLEET_ENDPOINT}: InService" in out


def one_component(aws: Aws) -> None:
    aws.add(
        "sagemaker",
        "list_inference_components",
        {
            "InferenceComponents": [
                {
                    "InferenceComponentName": "C1",
                    "InferenceComponentArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:inference-component/c1",
                    "EndpointName": ENDPOINT,
                    "EndpointArn": ENDPOINT_ARN,
                    "VariantName": "AllTraffic",
                    "InferenceComponentStatus": "InService",
                    "CreationTime": T,
                    "LastModifiedTime": T,
                }
            ]
        },
        {"EndpointNameEquals": ENDPOINT},
    )


NOT_GONE = [
    ("ThrottlingException", "Rate exceeded", 400),
    ("ThrottlingException", "Rate exceeded", 429),
    ("AccessDeniedException", "not authorized to perform sagemaker:DescribeEndpoint", 400),
    # A second kind of ValidationException: not "Could not find", so not gone.
    ("ValidationException", "1 validation error detected: Value at 'endpointName' failed to satisfy constraint", 400),
]


@pytest.mark.parametrize(("code", "message", "http"), NOT_GONE)
@pytest.mark.parametrize("call", ["describe_endpoint", "describe_endpoint_config", "describe_inference_component"])
def test_an_error_other_than_not_found_is_an_error_never_gone(
    aws: Aws, capsys: pytest.CaptureFixture[str], call: str, code: str, message: str, http: int
) -> None:
    identity(aws)
    stacks(aws, (STACK, STACK))
    resources(aws, STACK, ("AWS::SageMaker::Endpoint", ENDPOINT_ARN))
    aws.add("sagemaker", "list_endpoints", listed(ENDPOINT), {})
    tagged(aws)
    if call == "describe_endpoint":
        aws.error("sagemaker", call, code, message, status_code=http)
    else:
        endpoint_answers(
            aws, ENDPOINT, config_error=(code, message, http) if call == "describe_endpoint_config" else None
        )
        if call == "describe_inference_component":
            one_component(aws)
            aws.error("sagemaker", call, code, message, status_code=http)
    assert run(aws, "--expect-none")[0] == status.EXIT_AWS
    assert f": {code} (see docs/guide/status.md" in capsys.readouterr().err


@pytest.mark.parametrize("call", ["describe_endpoint", "describe_endpoint_config", "describe_inference_component"])
def test_could_not_find_is_gone(aws: Aws, call: str) -> None:
    identity(aws)
    stacks(aws, (STACK, STACK))
    resources(aws, STACK, ("AWS::SageMaker::Endpoint", ENDPOINT_ARN))
    aws.add("sagemaker", "list_endpoints", listed(ENDPOINT), {})
    tagged(aws)
    gone = ("ValidationException", f'Could not find endpoint "{ENDPOINT_ARN}".')
    if call == "describe_endpoint":
        aws.error("sagemaker", call, *gone)
    else:
        missing = ("ValidationException", 'Could not find endpoint configuration "Config-1".', 400)
        endpoint_answers(aws, ENDPOINT, config_error=missing if call == "describe_endpoint_config" else None)
        if call == "describe_endpoint_config":
            aws.add("sagemaker", "list_inference_components", {"InferenceComponents": []}, {"EndpointNameEquals": ANY})
        else:
            one_component(aws)
            aws.error("sagemaker", call, "ValidationException", 'Could not find inference component "C1".')
    no_jobs(aws)
    kept_bucket(aws)
    endpoints = [] if call == "describe_endpoint" else [f"/aws/sagemaker/Endpoints/{ENDPOINT}"]
    log_groups(aws, [*PREFIXES, *endpoints], {})
    code, out = run(aws)
    assert code == 0
    if call == "describe_endpoint":
        assert "nothing: no endpoint" in out
    elif call == "describe_endpoint_config":
        assert "variant AllTraffic: instance type unknown x 1 of 1 instances" in out
    else:
        assert "inference component C1" not in out


def test_instance_pools_give_the_instance_types_and_counts(aws: Aws) -> None:
    identity(aws)
    stacks(aws, (STACK, STACK))
    resources(aws, STACK, ("AWS::SageMaker::Endpoint", ENDPOINT_ARN))
    aws.add("sagemaker", "list_endpoints", listed(ENDPOINT), {})
    tagged(aws)
    endpoint_answers(
        aws,
        ENDPOINT,
        variant={
            "VariantName": "AllTraffic",
            "CurrentInstanceCount": 1,
            "DesiredInstanceCount": 1,
            "InstancePools": [
                {"InstanceType": "ml.g6e.2xlarge", "CurrentInstanceCount": 0},
                {"InstanceType": "ml.g6.12xlarge", "CurrentInstanceCount": 1},
            ],
        },
        config={
            "VariantName": "AllTraffic",
            "InitialInstanceCount": 1,
            "InstancePools": [
                {"InstanceType": "ml.g6.12xlarge", "Priority": 2},
                {"InstanceType": "ml.g6e.2xlarge", "Priority": 1},
            ],
        },
    )
    aws.add("sagemaker", "list_inference_components", {"InferenceComponents": []}, {"EndpointNameEquals": ANY})
    no_jobs(aws)
    kept_bucket(aws)
    log_groups(aws, [*PREFIXES, f"/aws/sagemaker/Endpoints/{ENDPOINT}"], {})
    code, out = run(aws)
    assert code == 0
    assert "variant AllTraffic: ml.g6e.2xlarge or ml.g6.12xlarge x 1 of 1 instances" in out
    assert "instance pools: ml.g6e.2xlarge x 0, ml.g6.12xlarge x 1" in out


def test_the_app_tag_is_the_stacks() -> None:
    from stacks.parsers import APP_TAG

    assert status.APP_TAG == APP_TAG
