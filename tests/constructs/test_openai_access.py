"""OpenAI-compatible access (issue 28 item 3): the base URL per endpoint and component, and the bearer-token grant.

Source: SageMaker developer guide, realtime-endpoints-openai-compatible (the /openai/v1/chat/completions path on
every endpoint and inference component; bearer tokens need sagemaker:CallWithBearerToken and InvokeEndpoint),
and AWS's sample aws-samples/sagemaker-genai-hosting-examples 03-features/openai/sagemaker-inference-openai-api.ipynb
(the URLs, and CallWithBearerToken on Resource "*").
"""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from constructs_lib import GpuEndpoint, S3ModelData
from constructs_lib.inference_component import ComponentEndpoint
from tests.conftest import build


def _outputs(**context: str) -> dict:
    app = build(**context)
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    return Template.from_stack(stack).to_json()["Outputs"]


def _joined(value: dict) -> str:
    return "".join(p if isinstance(p, str) else json.dumps(p) for p in value["Fn::Join"][1])


def test_the_stack_outputs_the_endpoints_openai_base_url():
    url = _joined(_outputs()["OpenAiBaseUrl"]["Value"])
    assert url.startswith('https://runtime.sagemaker.{"Ref": "AWS::Region"}.{"Ref": "AWS::URLSuffix"}/endpoints/')
    assert url.endswith("/openai/v1") and "inference-components" not in url


def test_in_component_mode_the_url_names_the_component():
    url = _joined(_outputs(deployment_mode="inference-component", component_name="qwen-chat")["OpenAiBaseUrl"]["Value"])
    assert url.endswith("/inference-components/qwen-chat/openai/v1")


def _statements(stack: cdk.Stack) -> list[dict]:
    t = Template.from_stack(stack).to_json()
    (policy,) = [r for r in t["Resources"].values() if r["Type"] == "AWS::IAM::Policy" and "Client" in json.dumps(r)]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_grant_invoke_adds_the_bearer_token_action_only_when_asked():
    for bearer in (False, True):
        app = cdk.App()
        stack = cdk.Stack(app, "Test")
        bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
        endpoint = GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "m/"))
        client = iam.Role(stack, "Client", assumed_by=iam.AccountRootPrincipal())
        endpoint.grant_invoke(client, bearer_token=bearer)
        actions = {json.dumps(s["Action"]): s["Resource"] for s in _statements(stack)}
        assert json.dumps(["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]) in actions
        if bearer:
            assert actions['"sagemaker:CallWithBearerToken"'] == "*"
        else:
            assert '"sagemaker:CallWithBearerToken"' not in actions


def test_a_components_grant_and_url():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint")
    chat = endpoint.add_component("Chat", model=S3ModelData(bucket, "m/"), component_name="chat")
    client = iam.Role(stack, "Client", assumed_by=iam.AccountRootPrincipal())
    chat.grant_invoke(client, bearer_token=True)
    assert '"sagemaker:CallWithBearerToken"' in {json.dumps(s["Action"]) for s in _statements(stack)}
    assert "/inference-components/chat/openai/v1" in json.dumps(stack.resolve(chat.openai_base_url))
