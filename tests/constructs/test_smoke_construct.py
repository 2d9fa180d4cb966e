"""EndpointSmokeTest: the resource, its ordering, its timeouts, its narrow role, its fingerprint, cdk-nag."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from constructs_lib import GpuEndpoint, S3ModelData, ServingImage, get_engine
from constructs_lib.smoke_test import (
    HANDLER_TIMEOUT,
    MAX_BUDGET,
    SERVICE_TIMEOUT_MARGIN,
    TOTAL_TIMEOUT,
    EndpointSmokeTest,
)
from tests.fakes.fake_runtime import load_handler

CU129 = "0.10.2-gpu-py312-cu129-ubuntu22.04-sagemaker"
COMPONENT_ARN = "arn:aws:sagemaker:us-east-1:123456789012:inference-component/llm-component"


def make(endpoint_props=None, app=None, **smoke_props):
    """A fresh stack with one GpuEndpoint and its smoke test."""
    app = app or cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "models/x/"), **(endpoint_props or {}))
    smoke = EndpointSmokeTest.for_endpoint(stack, "SmokeTest", endpoint, **smoke_props)
    return stack, endpoint, smoke


@pytest.fixture(scope="module")
def default_template() -> Template:
    """One synth of the default stack, shared by the tests that only read it."""
    stack, _, _ = make()
    return Template.from_stack(stack)


def smoke_resource(template: Template) -> dict:
    (resource,) = template.find_resources("Custom::EndpointSmokeTest").values()
    return resource


def logical_id(template: Template, resource_type: str) -> str:
    (key,) = template.find_resources(resource_type)
    return key


def handler_statements(template: Template) -> list[dict]:
    role = next(k for k in template.find_resources("AWS::IAM::Role") if k.startswith("EndpointSmokeTestProviderRole"))
    return [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_smoke_resource_and_its_properties(default_template):
    t = default_template
    endpoint_id = logical_id(t, "AWS::SageMaker::Endpoint")
    config_id = logical_id(t, "AWS::SageMaker::EndpointConfig")
    t.has_resource_properties(
        "Custom::EndpointSmokeTest",
        {
            "ServiceToken": {
                "Fn::GetAtt": [Match.string_like_regexp("^EndpointSmokeTestProviderframeworkonEvent"), "Arn"]
            },
            "EndpointName": {"Fn::GetAtt": [endpoint_id, "EndpointName"]},
            "EndpointConfigName": {"Fn::GetAtt": [config_id, "EndpointConfigName"]},
            "Prompt": Match.string_like_regexp("S3"),
            "MaxTokens": "64",
            "BudgetSeconds": "600",
            "Stream": "true",
            "Fingerprint": Match.string_like_regexp("^[0-9a-f]{64}$"),
            # 10 minutes of budget plus one more handler run and a poll: a crash fails in 18, not 60.
            "ServiceTimeout": "1080",
        },
    )
    props = smoke_resource(t)["Properties"]
    assert not {"InferenceComponentName", "ExtraBody", "ExpectedPattern"} & set(props)


def test_it_runs_after_the_endpoint_and_its_own_permissions(default_template):
    t = default_template
    depends_on = smoke_resource(t)["DependsOn"]
    for resource_type in ("AWS::SageMaker::Endpoint", "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Model"):
        assert logical_id(t, resource_type) in depends_on
    policy = next(k for k in t.find_resources("AWS::IAM::Policy") if k.startswith("EndpointSmokeTestProviderRole"))
    assert policy in depends_on


def test_role_may_only_describe_and_invoke_this_endpoint(default_template):
    t = default_template
    endpoint_arn = {"Fn::GetAtt": [logical_id(t, "AWS::SageMaker::Endpoint"), "EndpointArn"]}
    sagemaker = [s for s in handler_statements(t) if "sagemaker" in json.dumps(s["Action"])]
    assert sagemaker == [
        {"Action": "sagemaker:DescribeEndpoint", "Effect": "Allow", "Resource": endpoint_arn},
        {
            "Action": ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
            "Effect": "Allow",
            "Resource": endpoint_arn,
        },
    ]
    others = [s for s in handler_statements(t) if s not in sagemaker]
    assert [s["Action"] for s in others] == [
        "cloudformation:DescribeStacks",
        ["logs:CreateLogStream", "logs:PutLogEvents"],
    ]
    assert others[0]["Resource"] == {"Ref": "AWS::StackId"}  # its own stack: is this update a rollback?
    assert all("*" not in json.dumps(s) for s in handler_statements(t))


def test_inference_component_mode():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    smoke = EndpointSmokeTest(
        stack,
        "SmokeTest",
        endpoint_name="llm-endpoint",
        endpoint_config_name="llm-config",
        endpoint_arn="arn:aws:sagemaker:us-east-1:123456789012:endpoint/llm-endpoint",
        inference_component_name="llm-component",
        inference_component_arn=COMPONENT_ARN,
        extra_body={"temperature": 0, "chat_template_kwargs": {"enable_thinking": False}},
        expected_pattern=r"(?i)\bbucket",
        max_tokens=16,
        budget=cdk.Duration.minutes(30),
        stream=False,
        fingerprint=["image:v2", {"copies": 1}],
    )
    t = Template.from_stack(stack)
    t.has_resource_properties(
        "Custom::EndpointSmokeTest",
        {
            "InferenceComponentName": "llm-component",
            "ExtraBody": '{"temperature":0,"chat_template_kwargs":{"enable_thinking":false}}',
            "ExpectedPattern": r"(?i)\bbucket",
            "MaxTokens": "16",
            "BudgetSeconds": "1800",
            "Stream": "false",
            "ServiceTimeout": "2280",
        },
    )
    statements = [s for s in handler_statements(t) if "sagemaker" in json.dumps(s["Action"])]
    by_action = {json.dumps(s["Action"]): s["Resource"] for s in statements}
    endpoint_arn = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/llm-endpoint"
    assert by_action == {
        '"sagemaker:DescribeEndpoint"': endpoint_arn,
        '["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]': [endpoint_arn, COMPONENT_ARN],
        '"sagemaker:DescribeInferenceComponent"': COMPONENT_ARN,
    }
    assert smoke.budget.to_minutes() == 30


def test_attributes_are_get_att_tokens():
    stack, _, smoke = make()
    cdk.CfnOutput(stack, "Ttft", value=smoke.time_to_first_token_ms)
    t = Template.from_stack(stack)
    smoke_id = logical_id(t, "Custom::EndpointSmokeTest")
    assert stack.resolve(smoke.time_to_first_token_ms) == {"Fn::GetAtt": [smoke_id, "TimeToFirstTokenMs"]}
    assert stack.resolve(smoke.latency_ms) == {"Fn::GetAtt": [smoke_id, "LatencyMs"]}
    assert stack.resolve(smoke.tokens_per_second) == {"Fn::GetAtt": [smoke_id, "TokensPerSecond"]}
    t.has_output("Ttft", {"Value": {"Fn::GetAtt": [smoke_id, "TimeToFirstTokenMs"]}})


def fingerprint(**endpoint_props) -> str:
    stack, _, _ = make(endpoint_props)
    return smoke_resource(Template.from_stack(stack))["Properties"]["Fingerprint"]


def test_fingerprint_follows_the_model_and_the_config():
    baseline = fingerprint()
    assert fingerprint() == baseline  # deterministic across synths
    changed = {
        "image": fingerprint(image=ServingImage.from_dlc(get_engine("vllm"), CU129)),
        "instance type": fingerprint(instance_type="ml.g6e.xlarge"),
        "engine flag": fingerprint(max_num_seqs=8),
        "startup timeout": fingerprint(startup_timeout=cdk.Duration.minutes(30)),
    }
    assert all(value != baseline for value in changed.values()), changed
    assert len(set(changed.values())) == len(changed)


def test_fingerprint_sees_changes_made_after_the_smoke_test_is_defined():
    before = fingerprint()
    stack, endpoint, _ = make()
    endpoint.model.enable_network_isolation = False  # computed at synth time, not when the test was defined
    after = smoke_resource(Template.from_stack(stack))["Properties"]["Fingerprint"]
    assert after != before


def test_two_smoke_tests_share_one_provider():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    for name in ("A", "B"):
        endpoint = GpuEndpoint(stack, name, model=S3ModelData(bucket, f"{name}/"))
        EndpointSmokeTest.for_endpoint(stack, f"{name}Smoke", endpoint)
    t = Template.from_stack(stack)
    t.resource_count_is("Custom::EndpointSmokeTest", 2)
    t.resource_count_is("AWS::StepFunctions::StateMachine", 1)
    resources = {json.dumps(s["Resource"]) for s in handler_statements(t) if "sagemaker" in json.dumps(s["Action"])}
    assert len(resources) == 2


def test_handler_functions_and_waiter():
    stack, _, _ = make()
    t = Template.from_stack(stack)
    for handler in ("index.on_event", "index.is_complete"):
        t.has_resource_properties(
            "AWS::Lambda::Function",
            {"Handler": handler, "Runtime": "python3.14", "Timeout": int(HANDLER_TIMEOUT.to_seconds())},
        )
    (machine,) = t.find_resources("AWS::StepFunctions::StateMachine").values()
    definition = json.dumps(machine["Properties"]["DefinitionString"])
    attempts = int(TOTAL_TIMEOUT.to_seconds() // 20)
    assert f'\\"MaxAttempts\\":{attempts}' in definition and '\\"IntervalSeconds\\":20' in definition


def test_timeouts_fit_together(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    handler = load_handler("endpoint_smoke_test")
    # A handler run never starts an attempt it cannot finish before Lambda stops it...
    assert HANDLER_TIMEOUT.to_seconds() > handler.ATTEMPT_RESERVE_S
    # ...the waiter outlives every budget, so the handler's reason, not "timed out", reaches CloudFormation...
    assert TOTAL_TIMEOUT.to_seconds() > MAX_BUDGET.to_seconds() + HANDLER_TIMEOUT.to_seconds()
    # ...and CloudFormation's ServiceTimeout (at most one hour) covers the budget and one more run.
    assert MAX_BUDGET.to_seconds() + SERVICE_TIMEOUT_MARGIN.to_seconds() <= 3600
    assert SERVICE_TIMEOUT_MARGIN.to_seconds() > HANDLER_TIMEOUT.to_seconds() + 20


def test_the_asset_ships_the_handler_with_the_client_package(tmp_path):
    app = cdk.App(outdir=str(tmp_path))
    make(app=app)
    app.synth()
    handlers = [p.parent for p in tmp_path.glob("asset.*/index.py") if (p.parent / "endpoint_client").is_dir()]
    assert handlers, "no asset holds index.py and endpoint_client/"
    shipped = {p.relative_to(handlers[0]).as_posix() for p in handlers[0].rglob("*") if p.is_file()}
    assert "endpoint_client/sse.py" in shipped and "index.py" in shipped
    assert not any("__pycache__" in p for p in shipped)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"budget": cdk.Duration.hours(2)}, r"budget=7200 s is outside 60-2700 s"),
        ({"budget": cdk.Duration.seconds(10)}, r"budget=10 s is outside"),
        ({"max_tokens": 0}, r"max_tokens=0 must be a whole number of at least 1"),
        ({"expected_pattern": "("}, r"expected_pattern='\(': not a Python regular expression"),
        ({"extra_body": {"stream": False}}, r"extra_body: sets stream, which the smoke test sends itself"),
        ({"prompt": "  "}, r"prompt must not be empty"),
        ({"inference_component_name": "c"}, r"inference_component_name and inference_component_arn go together"),
    ],
)
def test_invalid_settings_fail_synth(props, message):
    with pytest.raises(ValueError, match=message):
        make(**props)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ValueError) as info:
        make(max_tokens=0, prompt="", budget=cdk.Duration.hours(1))
    assert str(info.value).startswith("EndpointSmokeTest Test/SmokeTest: 3 problems:\n  - ")


def test_cdk_nag_is_clean(tmp_path):
    app = cdk.App(outdir=str(tmp_path))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    make(app=app)
    app.synth()  # raises on an unacknowledged finding
    report = json.loads((Path(tmp_path) / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    for finding in plugin["suppressedViolations"]:
        assert len(finding["reason"]) > 40, finding
        for construct in finding["violatingConstructs"]:
            assert construct["constructPath"].startswith(finding["acknowledgedAt"]), finding
