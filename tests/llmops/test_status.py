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
    from constructs_lib.deployment.parsers import APP_TAG

    assert status.APP_TAG == APP_TAG


# -- each step at its edges (mutation testing of llmops/status.py found these untested) ------------------------


class Fake:
    """A client whose methods answer (or raise) what a test gives, for answers a Stubber would not accept."""

    def __init__(self, **methods: Any) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        for name, answer in methods.items():
            setattr(self, name, self._method(name, answer))

    def _method(self, name: str, answer: Any) -> Any:
        def call(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            result = answer(**kwargs) if callable(answer) else answer
            if isinstance(result, Exception):
                raise result
            return result

        return call


def client_error(code: str, message: str = "") -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": message}}, "Operation")


def test_an_error_without_an_answer_is_named_by_its_class() -> None:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    assert status._error_of(client_error("Throttling", "Rate exceeded")) == ("Throttling", "Rate exceeded")
    assert status._error_of(NoCredentialsError()) == ("NoCredentialsError", "")
    assert status._error_of(client_error("", "")) == ("ClientError", "")
    odd = RuntimeError("x")
    odd.response = {"Error": "not a mapping"}  # type: ignore[attr-defined]
    assert status._error_of(odd) == ("RuntimeError", "")
    with pytest.raises(status.AwsFailure, match=r"^GetCallerIdentity: NoCredentialsError$"):
        status._call("GetCallerIdentity", Fake(go=NoCredentialsError()).go)

    class Paginated:
        def get_paginator(self, operation: str) -> Any:
            class Pages:
                def paginate(self, **kwargs: Any) -> Any:
                    raise EndpointConnectionError(endpoint_url="https://sagemaker.invalid")

            return Pages()

    with pytest.raises(status.AwsFailure, match=r"^list_endpoints: EndpointConnectionError$"):
        status._pages(Paginated(), "list_endpoints", "Endpoints")


def test_a_page_without_its_key_adds_nothing() -> None:
    class Paginated:
        def get_paginator(self, operation: str) -> Any:
            class Pages:
                def paginate(self, **kwargs: Any) -> Any:
                    return iter([{"Endpoints": [{"EndpointName": "a"}]}, {}, {"Endpoints": [{"EndpointName": "b"}]}])

            return Pages()

    assert status._pages(Paginated(), "list_endpoints", "Endpoints") == [{"EndpointName": "a"}, {"EndpointName": "b"}]


@pytest.mark.parametrize(
    "app",
    [
        "-LlmEndpoint-",  # hyphens at either end go
        "___",  # nothing left: "llm"
        "A" * 27,  # exactly the app's share: kept whole
        "A" * 28,  # one over: cut and hashed
        "a" * 19 + "-" + "b" * 10,  # the cut ends in a hyphen, which goes
    ],
)
def test_the_bucket_name_is_the_constructs_at_its_edges(app: str) -> None:
    test_the_bucket_name_is_the_constructs(app)


def test_the_bucket_name_edges_by_value() -> None:
    assert status.app_bucket_name("___", ACCOUNT, REGION) == f"llm-models-{ACCOUNT}-{REGION}"
    assert status.app_bucket_name("-Ab-", ACCOUNT, REGION) == f"ab-models-{ACCOUNT}-{REGION}"
    assert status.app_bucket_name("A" * 27, ACCOUNT, REGION) == f"{'a' * 27}-models-{ACCOUNT}-{REGION}"
    cut = status.app_bucket_name("a" * 19 + "-" + "b" * 10, ACCOUNT, REGION)
    assert cut.startswith("a" * 19 + "-") and not cut.startswith("a" * 19 + "--") and len(cut.split("-")[1]) == 6


def test_app_stacks_claims_its_own_and_names_only_untagged_lookalikes(aws: Aws) -> None:
    stacks(
        aws,
        (STACK, None),  # untagged, its own name
        ("Pinned", None),  # untagged, named by --stack
        (f"{STACK}-fleet", STACK),  # tagged
        (f"{STACK}-prod", "LlmEndpoint-prod"),  # another app's, named like ours: neither read nor named
        ("Elsewhere", "OtherApp"),  # another app's
        (f"{STACK}-old", None),  # untagged lookalike: named, not read
        ("Unrelated", None),
    )
    mine, untagged = status.app_stacks(aws.clients["cloudformation"], STACK, ["Pinned"])
    assert [s.name for s in mine] == [STACK, f"{STACK}-fleet", "Pinned"]
    assert untagged == [f"{STACK}-old"]


def test_stack_resources_skip_deleted_and_unnamed_ones_and_read_on(aws: Aws) -> None:
    aws.add(
        "cloudformation",
        "list_stack_resources",
        {
            "StackResourceSummaries": [
                {
                    "LogicalResourceId": "Pending",  # no physical ID yet: skipped, the rest still read
                    "ResourceType": "AWS::SageMaker::Endpoint",
                    "LastUpdatedTimestamp": T,
                    "ResourceStatus": "CREATE_IN_PROGRESS",
                },
                {
                    "LogicalResourceId": "Old",  # deleted in an update: skipped
                    "PhysicalResourceId": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint-config/old",
                    "ResourceType": "AWS::SageMaker::EndpointConfig",
                    "LastUpdatedTimestamp": T,
                    "ResourceStatus": "DELETE_COMPLETE",
                },
                {
                    "LogicalResourceId": "Model",
                    "PhysicalResourceId": "model-by-name",  # a bare name is its own name
                    "ResourceType": "AWS::SageMaker::Model",
                    "LastUpdatedTimestamp": T,
                    "ResourceStatus": "UPDATE_COMPLETE",
                },
                {
                    "LogicalResourceId": "Endpoint",
                    "PhysicalResourceId": ENDPOINT_ARN,
                    "ResourceType": "AWS::SageMaker::Endpoint",
                    "LastUpdatedTimestamp": T,
                    "ResourceStatus": "CREATE_COMPLETE",
                },
            ]
        },
        {"StackName": STACK},
    )
    endpoints, defined = status.stack_resources(aws.clients["cloudformation"], [status.StackInfo(STACK, "x")])
    assert endpoints == [ENDPOINT_ARN]
    assert defined == [status.Defined("model", "model-by-name", STACK)]


def endpoint_names_of(aws: Aws, *, listed_names: list[str], tags: dict[str, str], from_stacks: list[str]) -> list[str]:
    aws.add("sagemaker", "list_endpoints", listed(*listed_names), {})
    aws.add(
        "tagging",
        "get_resources",
        {
            "ResourceTagMappingList": [
                {"ResourceARN": arn, "Tags": [{"Key": status.APP_TAG, "Value": app}]} for arn, app in tags.items()
            ]
        },
        {"TagFilters": [{"Key": status.APP_TAG}], "ResourceTypeFilters": ["sagemaker:endpoint"]},
    )
    return status.endpoint_names(aws.clients["sagemaker"], aws.clients["tagging"], STACK, ["Given"], from_stacks)


def arn_of(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/{name.lower()}"


def test_an_endpoint_named_like_ours_but_tagged_for_another_app_is_left_out(aws: Aws) -> None:
    theirs, ours = f"{STACK}-prod-Endpoint-1", f"{STACK}-Endpoint-2"
    names = endpoint_names_of(
        aws,
        listed_names=[theirs, ours, "Unlisted-Ours"],
        tags={arn_of(theirs): f"{STACK}-prod", arn_of(ours): STACK},
        from_stacks=[],
    )
    assert names == ["Given", ours]


def test_a_stack_may_name_its_endpoint_in_any_case(aws: Aws) -> None:
    name = "LlmEndpointChat-Endpoint-1A2B3C"
    found = endpoint_names_of(aws, listed_names=[name], tags={}, from_stacks=[name.lower()])
    assert found == ["Given", name]


def test_an_endpoint_without_variants_or_config_variants_is_shown_empty() -> None:
    sagemaker = Fake(
        describe_endpoint={"EndpointStatus": "Creating", "EndpointConfigName": "C"},
        describe_endpoint_config={},
    )
    assert status.describe_endpoint(sagemaker, "E") == status.Endpoint("E", "Creating", [])
    sagemaker = Fake(
        describe_endpoint={
            "EndpointStatus": "Updating",
            "EndpointConfigName": "C",
            "ProductionVariants": [{"VariantName": "AllTraffic"}],
        },
        describe_endpoint_config={},
    )
    (variant,) = status.describe_endpoint(sagemaker, "E").variants
    assert variant == status.Variant("AllTraffic", None, None, None, {})


def test_pools_without_a_priority_come_first() -> None:
    pools = [{"InstanceType": "ml.b", "Priority": 1}, {"InstanceType": "ml.a"}]
    assert status._instance_types({"InstancePools": pools}) == "ml.a or ml.b"
    assert status._instance_types({"InstancePools": []}) is None
    assert status._instance_types({"InstanceType": "ml.c", "InstancePools": pools}) == "ml.c"


def test_components_gone_between_list_and_describe_are_skipped_and_the_rest_read() -> None:
    class Sagemaker(Fake):
        def get_paginator(self, operation: str) -> Any:
            class Pages:
                def paginate(self, **kwargs: Any) -> Any:
                    return iter(
                        [{"InferenceComponents": [{"InferenceComponentName": "Gone"}, {"InferenceComponentName": "C"}]}]
                    )

            return Pages()

    def describe(InferenceComponentName: str) -> Any:
        if InferenceComponentName == "Gone":
            return client_error("ValidationException", 'Could not find inference component "Gone".')
        return {"RuntimeConfig": {"DesiredCopyCount": 3, "CurrentCopyCount": 2}}

    (component,) = status.components_on(Sagemaker(describe_inference_component=describe), "E")
    assert component == status.Component("C", "E", "", 3, 2)  # no status listed: empty, not "None"


class Jobs(Fake):
    def __init__(self, listed: dict[str, list[str]], details: dict[str, Any]) -> None:
        super().__init__(describe_processing_job=lambda ProcessingJobName: details[ProcessingJobName])
        self.listed = listed

    def get_paginator(self, operation: str) -> Any:
        listed = self.listed

        class Pages:
            def paginate(self, **kwargs: Any) -> Any:
                names = listed.get(kwargs["StatusEquals"], [])
                return iter([{"ProcessingJobSummaries": [{"ProcessingJobName": n} for n in names]}])

        return Pages()


def test_staging_jobs_skip_lookalikes_and_other_apps_and_read_on() -> None:
    mine = job("hfstage-1-mine", f"s3://{BUCKET}/models/x/")
    sagemaker = Jobs(
        {"InProgress": ["my-hfstage-1", "hfstage-0-other", "hfstage-2-untargeted", "hfstage-1-mine"]},
        {
            "hfstage-0-other": job("hfstage-0-other", "s3://someone-else/models/x/"),
            "hfstage-2-untargeted": {**job("hfstage-2-untargeted", ""), "Environment": {}},
            "hfstage-1-mine": mine,
        },
    )
    (found,) = status.staging_jobs(sagemaker, BUCKET)
    assert found == status.Job("hfstage-1-mine", "InProgress", "ml.m5.2xlarge", 2, f"s3://{BUCKET}/models/x/")
    assert [c[1]["ProcessingJobName"] for c in sagemaker.calls] == [
        "hfstage-0-other",
        "hfstage-2-untargeted",
        "hfstage-1-mine",
    ]  # a name that only contains the family is never described


def test_a_staging_job_that_cannot_be_described_is_named() -> None:
    sagemaker = Jobs({"Stopping": ["hfstage-9"]}, {"hfstage-9": client_error("AccessDeniedException")})
    with pytest.raises(status.AwsFailure, match=r"^DescribeProcessingJob hfstage-9: AccessDeniedException$"):
        status.staging_jobs(sagemaker, BUCKET)


@pytest.mark.parametrize("code", ["404", "NoSuchBucket", "NotFound"])
def test_a_missing_bucket_is_not_kept(code: str) -> None:
    s3 = Fake(head_bucket=client_error(code))
    assert status.bucket_kept(s3, Fake(), BUCKET, ACCOUNT, NOW) is None


@pytest.mark.parametrize(("error", "named"), [("403", "403"), ("AccessDenied", "AccessDenied"), (None, "RuntimeError")])
def test_a_bucket_that_cannot_be_read_is_named(error: str | None, named: str) -> None:
    s3 = Fake(head_bucket=client_error(error) if error else RuntimeError("boom"))
    with pytest.raises(status.AwsFailure, match=rf"^HeadBucket {BUCKET}: {named}$"):
        status.bucket_kept(s3, Fake(), BUCKET, ACCOUNT, NOW)


def test_the_bucket_size_is_the_latest_days_and_a_failed_read_is_named() -> None:
    points = [
        {"Timestamp": T, "Average": 2e9},
        {"Timestamp": T - dt.timedelta(days=1), "Average": 1e9},
        {"Timestamp": T + dt.timedelta(hours=1), "Average": 3.7e9},
    ]
    kept = status.bucket_kept(
        Fake(head_bucket={}), Fake(get_metric_statistics={"Datapoints": points}), BUCKET, ACCOUNT, NOW
    )
    assert kept == status.Kept("bucket", BUCKET, 3700000000, "as of 2026-11-30")
    none = status.bucket_kept(Fake(head_bucket={}), Fake(get_metric_statistics={}), BUCKET, ACCOUNT, NOW)
    assert none == status.Kept("bucket", BUCKET, None, "size not reported yet (S3 sends it once a day)")
    failing = Fake(get_metric_statistics=client_error("Throttling"))
    with pytest.raises(status.AwsFailure, match=rf"^GetMetricStatistics BucketSizeBytes {BUCKET}: Throttling$"):
        status.bucket_kept(Fake(head_bucket={}), failing, BUCKET, ACCOUNT, NOW)


def test_a_log_group_without_retention_is_kept_forever(aws: Aws) -> None:
    for prefix in sorted({*PREFIXES}):
        groups = [{"logGroupName": prefix + "a", "creationTime": 1}] if prefix == PREFIXES[0] else []
        aws.add("logs", "describe_log_groups", {"logGroups": groups}, {"logGroupNamePrefix": prefix})
    (kept,) = status.log_groups_kept(aws.clients["logs"], STACK, [])
    assert kept == status.Kept("log group", PREFIXES[0] + "a", None, "kept forever")


def test_who_am_i_failing_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    from botocore.exceptions import NoCredentialsError

    clients = {"sts": Fake(get_caller_identity=NoCredentialsError())}
    assert status.main([], clients=clients, out=io.StringIO()) == status.EXIT_AWS
    assert capsys.readouterr().err == (
        "llmops status: could not read GetCallerIdentity: NoCredentialsError (see docs/guide/status.md for the "
        "read-only policy)\n"
    )


def test_collect_reads_on_past_a_gone_endpoint_and_takes_no_extras(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    identity(aws)
    stacks(aws, ("Unrelated", None))  # untagged and not ours: compared with no extra names
    aws.add("sagemaker", "list_endpoints", listed(f"{STACK}-A", f"{STACK}-B"), {})
    tagged(aws)
    aws.error("sagemaker", "describe_endpoint", "ValidationException", f'Could not find endpoint "{STACK}-A".')
    endpoint_answers(aws, f"{STACK}-B")
    aws.add("sagemaker", "list_inference_components", {"InferenceComponents": []}, {"EndpointNameEquals": f"{STACK}-B"})
    no_jobs(aws)
    seen: list[dt.datetime] = []
    monkeypatch.setattr(status, "bucket_kept", lambda s3, cw, bucket, account, now: seen.append(now))
    log_groups(aws, [*PREFIXES, f"/aws/sagemaker/Endpoints/{STACK}-B"], {})
    report = status.collect(aws.clients, STACK)
    assert [e.name for e in report.endpoints] == [f"{STACK}-B"]
    (now,) = seen
    assert now.tzinfo is dt.UTC and abs(dt.datetime.now(dt.UTC) - now) < dt.timedelta(minutes=1)


def full_report() -> status.Report:
    return status.Report(
        stack=STACK,
        account=ACCOUNT,
        region=REGION,
        stack_status="UPDATE_COMPLETE",
        stacks=[status.StackInfo(STACK, "UPDATE_COMPLETE"), status.StackInfo(f"{STACK}-chat", "CREATE_COMPLETE")],
        untagged=[f"{STACK}-old"],
        endpoints=[
            status.Endpoint(
                "E1",
                "InService",
                [
                    status.Variant("AllTraffic", "ml.a or ml.b", 1, 2, {"ml.a": 1, "ml.b": None}),
                    status.Variant("Shadow", None, None, None),
                ],
            )
        ],
        defined=[status.Defined("model", "m-1", STACK)],
        components=[status.Component("C1", "E1", "Creating", None, 1), status.Component("C2", "E9", "InService")],
        jobs=[status.Job("hfstage-1", "Stopping", "ml.m5.xlarge", 1, "s3://b/models/x/")],
        kept=[
            status.Kept("bucket", "b", 999, "as of 2026-11-30"),
            status.Kept("log group", "/aws/sagemaker/Endpoints/E1", 1000),
        ],
    )


def test_the_report_reads_line_by_line() -> None:
    out = io.StringIO()
    status.render(full_report(), out)
    assert out.getvalue() == (
        f"{STACK} in account {ACCOUNT}, {REGION}: stack UPDATE_COMPLETE\n"
        f"  and stack {STACK}-chat: CREATE_COMPLETE\n"
        f"  stack {STACK}-old is named like this app's but carries no {status.APP_TAG} tag: not read "
        f"(--stack {STACK}-old)\n"
        "billing by the hour:\n"
        "  endpoint E1: InService\n"
        "    variant AllTraffic: ml.a or ml.b x 1 of 2 instances\n"
        "      instance pools: ml.a x 1, ml.b x ?\n"
        "    variant Shadow: instance type unknown x ? of ? instances\n"
        "    inference component C1: Creating, copies 1 of ?\n"
        "  staging job hfstage-1: Stopping, ml.m5.xlarge x 1, writing s3://b/models/x/\n"
        "defined by the stacks, not billing (cdk destroy deletes them):\n"
        f"  model m-1 (stack {STACK})\n"
        "kept by design (not compute; delete by hand when no longer wanted):\n"
        "  bucket b: 999 B (as of 2026-11-30)\n"
        "  log group /aws/sagemaker/Endpoints/E1: 1.0 kB\n"
    )


def test_an_empty_report_says_nothing_is_left() -> None:
    out = io.StringIO()
    status.render(status.Report(STACK, ACCOUNT, REGION, None), out)
    assert out.getvalue() == (
        f"{STACK} in account {ACCOUNT}, {REGION}: stack not deployed (no such stack)\n"
        "billing by the hour:\n"
        "  nothing: no endpoint, inference component or staging job\n"
        "kept by design (not compute; delete by hand when no longer wanted):\n"
        "  nothing\n"
    )


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (None, "size unknown"),
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (999_999, "1000.0 kB"),
        (1_000_000, "1.0 MB"),
        (1_000_000_000, "1.0 GB"),
        (16_400_000_000, "16.4 GB"),
        (1_000_000_000_000, "1.0 TB"),
        (2_500_000_000_000_000, "2500.0 TB"),
    ],
)
def test_sizes_at_each_units_edge(size: int | None, text: str) -> None:
    assert status._size(size) == text


def test_the_clients_are_the_seven_services_in_the_region_and_profile(monkeypatch, tmp_path) -> None:
    config = tmp_path / "config"
    config.write_text("[profile other]\nregion = ap-south-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    clients = status.make_clients("eu-west-3", None)
    assert {k: c.meta.service_model.service_name for k, c in clients.items()} == SERVICES
    assert {k: type(c).__name__ for k, c in clients.items()}["tagging"] == "ResourceGroupsTaggingAPI"
    assert {c.meta.region_name for c in clients.values()} == {"eu-west-3"}
    assert {c.meta.region_name for c in status.make_clients(None, "other").values()} == {"ap-south-1"}
    assert {c.meta.region_name for c in status.make_clients("eu-west-3", "other").values()} == {"eu-west-3"}


def test_the_options_reach_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[Any, Any]] = []
    collected: list[dict[str, Any]] = []
    monkeypatch.setattr(status, "make_clients", lambda region, profile: made.append((region, profile)) or {})

    def collect(clients: Any, stack: str, **kwargs: Any) -> status.Report:
        collected.append({"stack": stack, **kwargs})
        return status.Report(stack, ACCOUNT, REGION, None)

    monkeypatch.setattr(status, "collect", collect)
    argv = ["--region", "eu-west-2", "--profile", "p", "--bucket", "b", "--stack-name", "App"]
    argv += ["--endpoint", "e1", "--endpoint", "e2", "--stack", "s1", "--stack", "s2"]
    assert status.main(argv, out=io.StringIO(), now=NOW) == 0
    assert made == [("eu-west-2", "p")]
    assert collected == [
        {"stack": "App", "bucket": "b", "extra_endpoints": ["e1", "e2"], "extra_stacks": ["s1", "s2"], "now": NOW}
    ]
    collected.clear()
    assert status.main([], clients={"given": None}, out=io.StringIO()) == 0
    assert collected == [
        {"stack": "LlmEndpoint", "bucket": None, "extra_endpoints": [], "extra_stacks": [], "now": None}
    ]


def test_help_names_every_option(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps at the terminal's width, and breaks words at hyphens
    assert status.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: llmops status ")
    flat = " ".join(out.split())
    for text in (
        "What this app has running and billing in an account and region, and what it keeps by design (read-only).",
        "--stack-name STACK_NAME the app's stack (stack_name; default LlmEndpoint)",
        "--region REGION AWS region (default: the session's, AWS_REGION)",
        "--profile PROFILE AWS profile (default: the session's)",
        "--bucket BUCKET the model bucket, when model_bucket named one (default: the app's bucket)",
        "--endpoint ENDPOINT an endpoint of the app with a custom name (repeatable)",
        f"--stack STACK a stack of the app deployed before it carried the {status.APP_TAG} tag, by its exact name "
        "(repeatable)",
        "--expect-none exit 1 when any endpoint, component or staging job is left",
        "--json print the report as JSON",
    ):
        assert text in flat, text
    assert "Billing compute:" not in out  # the description is the docstring's first paragraph only
    assert status.main(["--no-such-option"]) == status.EXIT_USAGE


def test_a_bad_stack_name_is_named_on_stderr_cut_to_200_characters(capsys: pytest.CaptureFixture[str]) -> None:
    assert status.main(["--stack-name", "x;" + "y" * 300]) == status.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"llmops status: --stack-name {('x;' + 'y' * 198)!r} is not a CloudFormation stack name\n"


def test_an_error_before_any_call_is_named_on_stderr(monkeypatch, capsys: pytest.CaptureFixture[str]) -> None:
    from botocore.exceptions import NoRegionError

    def no_region(region: Any, profile: Any) -> Any:
        raise NoRegionError()

    monkeypatch.setattr(status, "make_clients", no_region)
    assert status.main([]) == status.EXIT_AWS
    out, err = capsys.readouterr()
    assert out == "" and err == "llmops status: NoRegionError: You must specify a region.\n"


def test_the_json_report_is_indented_by_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "collect", lambda clients, stack, **_: full_report())
    out = io.StringIO()
    assert status.main(["--json"], clients={"given": None}, out=out) == 0
    data = json.loads(out.getvalue())
    assert out.getvalue() == json.dumps(data, indent=2) + "\n"
    assert data["compute_left"] == [
        "endpoint E1 (InService)",
        "inference component C1 (Creating)",
        "inference component C2 (InService)",
        "staging job hfstage-1 (Stopping)",
    ]
