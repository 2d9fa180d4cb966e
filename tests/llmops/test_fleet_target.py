"""--deployment / --adapter (llmops/fleet_target.py): names from the fleet stacks' outputs, CloudFormation stubbed
with DescribeStacks' response shape (botocore cloudformation service-2.json: Stacks[].StackName, Outputs[])."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber

from llmops.fleet_target import TargetError, add_fleet_options, apply_target, resolve
from llmops.invoke import main as invoke_main
from tests.fakes.fake_runtime import REGION, FakeSageMaker, Reply, client

OUTPUTS = {
    "ChatEndpointName": "chat-ep",
    "SmallEndpointName": "shared-ep",
    "SmallInferenceComponentName": "small-ic",
    "SmallSqlAdapterComponentName": "small-sql-ic",
    "MediumEndpointName": "shared-ep",
    "MediumInferenceComponentName": "medium-ic",
}


def stack(name: str, outputs: dict[str, str]) -> dict:
    return {
        "StackName": name,
        "StackId": f"arn:aws:cloudformation:{REGION}:111122223333:stack/{name}/1",
        "CreationTime": datetime(2026, 12, 1, tzinfo=UTC),
        "StackStatus": "CREATE_COMPLETE",
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
    }


def cloudformation(*stacks: dict):
    cfn = boto3.client("cloudformation", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    stubber = Stubber(cfn)
    stubber.add_response("describe_stacks", {"Stacks": list(stacks)}, {})
    stubber.activate()
    return cfn, stubber


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint")
    parser.add_argument("--ic", dest="inference_component")
    parser.add_argument("--region", default=REGION)
    add_fleet_options(parser)
    return parser.parse_args(argv)


def test_a_standalone_a_packed_deployment_and_an_adapter():
    assert resolve(OUTPUTS, "chat", None) == ("chat-ep", None)
    assert resolve(OUTPUTS, "medium", None) == ("shared-ep", "medium-ic")
    assert resolve(OUTPUTS, "small", "sql") == ("shared-ep", "small-sql-ic")


def test_unknown_names_say_what_is_deployed():
    with pytest.raises(TargetError, match="deployed: Chat, Medium, Small"):
        resolve(OUTPUTS, "coder", None)
    with pytest.raises(TargetError, match="has no such adapter; its adapters: Sql"):
        resolve(OUTPUTS, "small", "chat")


def test_only_the_apps_stacks_are_read():
    cfn, stubber = cloudformation(
        stack("LlmEndpoint-chat", {"ChatEndpointName": "chat-ep"}),
        stack("Other-chat", {"ChatEndpointName": "someone-elses"}),
    )
    a = args("--deployment", "chat")
    apply_target(a, cfn)
    assert (a.endpoint, a.inference_component) == ("chat-ep", None)
    stubber.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--adapter", "sql"], "--adapter needs --deployment"),
        ([], "give --endpoint"),
        (["--deployment", "chat", "--endpoint", "x"], "not with --endpoint or --ic"),
    ],
)
def test_conflicting_or_missing_choices(argv, expected):
    with pytest.raises(TargetError, match=expected):
        apply_target(args(*argv), cloudformation()[0])


def test_a_cloudformation_error_is_one_line():
    cfn = boto3.client("cloudformation", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    stubber = Stubber(cfn)
    stubber.add_client_error("describe_stacks", "AccessDenied", "not authorized to perform DescribeStacks")
    stubber.activate()
    with pytest.raises(TargetError, match="cannot read the stacks' outputs"):
        apply_target(args("--deployment", "chat"), cfn)


def test_invoke_reaches_the_adapter_by_its_component_name(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    with FakeSageMaker() as fake:
        fake.add_endpoint("shared-ep", component="small-sql-ic", default=Reply())
        cfn, _ = cloudformation(stack("LlmEndpoint-shared", OUTPUTS))
        out, err = io.StringIO(), io.StringIO()
        code = invoke_main(
            ["--deployment", "small", "--adapter", "sql", "--no-stream", "--region", REGION, "hello"],
            runtime_client=client("sagemaker-runtime", fake.url),
            cloudformation_client=cfn,
            stdin=io.StringIO(),
            stdout=out,
            stderr=err,
        )
        assert code == 0, err.getvalue()
        (request,) = fake.invocations()
        assert request.headers["x-amzn-sagemaker-inference-component"] == "small-sql-ic"
