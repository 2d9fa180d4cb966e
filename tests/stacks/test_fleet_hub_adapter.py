"""A fleet whose adapter comes from the Hub: staged like a model (Custom::StagedCheckpoint with Pack), its
ArtifactUrl the packed archive, read by the base model's role, created after its wait condition."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template

from tests.conftest import build

# A whole fleet synthesized: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

APP = "LlmEndpoint"
DEPLOYMENTS = {
    "small": {
        "deployment_mode": "inference-component",
        "instance_type": "ml.g6.12xlarge",
        "accelerators_per_copy": 1,
        "model_id": "Qwen/Qwen3-0.6B",
        "adapters": {"sql": {"model_id": "org/qwen3-0.6b-sql-lora", "revision": "v1"}},
    }
}


@pytest.fixture(scope="module")
def stack_template() -> dict:
    app = build(deployments=json.dumps(DEPLOYMENTS))
    stack = next(s for s in app.node.children if getattr(s, "stack_name", "") == f"{APP}-small")
    return Template.from_stack(stack).to_json()


def resources(t: dict, kind: str) -> dict:
    return {k: r for k, r in t["Resources"].items() if r["Type"] == kind}


def test_the_hub_adapter_is_staged_packed_and_served_from_its_archive(stack_template):
    t = stack_template
    staged = resources(t, "Custom::StagedCheckpoint")
    (adapter_id, adapter) = next(
        (k, r) for k, r in staged.items() if r["Properties"]["RepoId"] == "org/qwen3-0.6b-sql-lora"
    )
    props = adapter["Properties"]
    assert props["Pack"] == "true" and props["Revision"] == "v1"
    # Checked before any job against the base and vLLM's default max_lora_rank (engines.json).
    assert props["AdapterBase"] == "Qwen/Qwen3-0.6B" and props["MaxLoraRank"] == "16"
    assert props["Include"] == ["adapter_config.json", "adapter_model.safetensors"]
    (model,) = [r for r in staged.values() if r["Properties"]["RepoId"] == "Qwen/Qwen3-0.6B"]
    assert "Pack" not in model["Properties"]  # the base model stages as before: its template is unchanged
    assert props["Bucket"] == model["Properties"]["Bucket"]  # the app's one bucket

    components = resources(t, "AWS::SageMaker::InferenceComponent")
    (component,) = [r for r in components.values() if "BaseInferenceComponentName" in r["Properties"]["Specification"]]
    url = component["Properties"]["Specification"]["Container"]["ArtifactUrl"]
    assert url == {"Fn::Join": ["", [{"Fn::GetAtt": [adapter_id, "S3Uri"]}, "model.tar.gz"]]}
    waits = [k for k, r in resources(t, "AWS::CloudFormation::WaitCondition").items() if adapter_id[:-8] in k]
    assert waits and set(waits) <= set(component["DependsOn"])  # served only once every byte is verified


def test_the_base_role_may_read_the_adapters_archive_only(stack_template):
    t = stack_template
    adapter_id = next(
        k
        for k, r in resources(t, "Custom::StagedCheckpoint").items()
        if r["Properties"]["RepoId"] == "org/qwen3-0.6b-sql-lora"
    )
    prefix = json.dumps({"Fn::GetAtt": [adapter_id, "Prefix"]})
    base_roles = [k for k in resources(t, "AWS::IAM::Role") if k.startswith("EndpointRole")]
    statements = [
        s
        for p in resources(t, "AWS::IAM::Policy").values()
        if any(r.get("Ref") in base_roles for r in p["Properties"]["Roles"])
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if prefix in json.dumps(s)
    ]
    (grant,) = statements  # GetObject on the one archive object: no ListBucket, no wildcard
    assert grant["Action"] == "s3:GetObject"
    # (merged by CDK with the base model's own GetObject on its prefix)
    (archive,) = [r for r in grant["Resource"] if prefix in json.dumps(r)]
    assert archive["Fn::Join"][1][-2:] == [{"Fn::GetAtt": [adapter_id, "Prefix"]}, "model.tar.gz"]
