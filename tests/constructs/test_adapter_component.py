"""AdapterComponent: a LoRA adapter as an adapter inference component on its base (constructs_lib/adapter_component)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from constructs_lib import AdapterComponent, Refusal, S3ModelData, adapter_env, get_engine
from constructs_lib.inference_component import ComponentEndpoint

# Adapter components synthesized in whole apps: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

ARCHIVE = "s3://my-adapters/sql/adapter.tar.gz"


def base(engine: str = "vllm"):
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6.12xlarge", engine=engine)
    component = endpoint.add_component(
        "Chat", model=S3ModelData(bucket, "models/org--m/abc123"), engine=engine, tensor_parallel_size=1
    )
    return stack, component


def test_the_adapter_names_its_base_and_its_archive_and_asks_for_no_compute():
    stack, component = base()
    adapter = AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE, component_name="chat-sql")
    resources = Template.from_stack(stack).find_resources("AWS::SageMaker::InferenceComponent")
    (logical_id, resource) = next((k, r) for k, r in resources.items() if k.startswith("Sql"))
    props = resource["Properties"]
    assert props["InferenceComponentName"] == "chat-sql" == adapter.inference_component_name
    assert props["Specification"] == {
        "BaseInferenceComponentName": component.inference_component_name,
        "Container": {"ArtifactUrl": ARCHIVE},
    }
    assert "VariantName" not in props and "RuntimeConfig" not in props
    base_id = next(k for k in resources if k != logical_id)
    assert base_id in resource["DependsOn"]


def test_the_smoke_test_invokes_the_adapter_not_its_base():
    stack, component = base()
    adapter = AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE, component_name="chat-sql")
    adapter.smoke_test(adapter, "SmokeTest")
    (smoke,) = Template.from_stack(stack).find_resources("Custom::EndpointSmokeTest").values()
    assert smoke["Properties"]["InferenceComponentName"] == "chat-sql"
    assert "ModelName" not in smoke["Properties"]  # an adapter component runs no model of its own


@pytest.mark.parametrize(
    "url",
    ["s3://my-adapters/sql/", "s3://my-adapters/sql/adapter.zip", "https://example.com/a.tar.gz", "s3://A/x.tar.gz"],
)
def test_anything_but_one_archive_in_s3_is_refused(url):
    stack, component = base()
    with pytest.raises(Refusal, match="must be one gzip compressed tar archive"):
        AdapterComponent(stack, "Sql", base=component, artifact_url=url)


def test_an_engine_without_adapter_data_is_refused():
    stack, component = base("sglang")
    with pytest.raises(Refusal, match="engine='sglang' has no verified way to serve LoRA adapter"):
        AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE)


def test_adapter_env_adds_the_engine_data_and_the_user_value_wins():
    engine_env, container_env = adapter_env(get_engine("vllm"), {"SM_VLLM_MAX_LORA_RANK": "64"}, {})
    assert engine_env == {"SM_VLLM_ENABLE_LORA": True, "SM_VLLM_MAX_LORA_RANK": "64"}
    assert container_env == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    assert adapter_env(get_engine("vllm"), {}, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"})[1] == {
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"
    }
    with pytest.raises(ValueError, match="allowed: engine=vllm"):
        adapter_env(get_engine("lmi"), {}, {})


def _policy_statements(stack: cdk.Stack, role_logical_prefix: str) -> list[dict]:
    policies = Template.from_stack(stack).find_resources("AWS::IAM::Policy")
    return [
        s
        for p in policies.values()
        if any(r["Ref"].startswith(role_logical_prefix) for r in p["Properties"].get("Roles", []))
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_grant_invoke_names_the_endpoint_and_the_adapter_not_the_base():
    from aws_cdk import aws_iam as iam

    stack, component = base()
    adapter = AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE, component_name="chat-sql")
    caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    adapter.grant_invoke(caller, bearer_token=True)
    statements = _policy_statements(stack, "Caller")
    invoke = next(s for s in statements if "sagemaker:InvokeEndpoint" in s["Action"])
    assert invoke["Action"] == ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
    resources = [next(iter(r.values()))[0] if isinstance(r, dict) else r for r in invoke["Resource"]]
    (adapter_id,) = [
        k
        for k in Template.from_stack(stack).find_resources("AWS::SageMaker::InferenceComponent")
        if k.startswith("Sql")
    ]
    assert adapter_id in resources and len(resources) == 2  # the endpoint and this adapter only
    bearer = next(s for s in statements if s["Action"] == "sagemaker:CallWithBearerToken")
    assert bearer["Resource"] == "*"


def test_the_adapters_openai_base_url_names_the_adapter_component():
    stack, component = base()
    adapter = AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE, component_name="chat-sql")
    cdk.CfnOutput(stack, "Url", value=adapter.openai_base_url)
    value = Template.from_stack(stack).to_json()["Outputs"]["Url"]["Value"]
    joined = "".join(p for p in value["Fn::Join"][1] if isinstance(p, str))
    assert joined.endswith("/inference-components/chat-sql/openai/v1")
