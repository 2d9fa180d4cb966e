"""A fleet from one file (issue 29): tests/data/fleet.json, synthesized as `cdk synth -c deployments_file=...` does.

Two standalone models, two models packed on one component endpoint, one LoRA adapter on one of those: three
endpoints, three inference components (one of them the adapter), five smoke tests, one model bucket; cfn-lint and
cdk-nag clean for every stack.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk.assertions import Match, Template

from tests.conftest import build

# Whole apps in many variants: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

FLEET = "tests/data/fleet.json"
APP = "LlmEndpoint"
ENDPOINT_STACKS = [f"{APP}-chat", f"{APP}-coder", f"{APP}-shared"]
CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")


@pytest.fixture(scope="module")
def assembly(tmp_path_factory) -> Path:
    outdir = tmp_path_factory.mktemp("fleet")
    build(outdir=str(outdir), deployments_file=FLEET).synth()  # raises on an unacknowledged cdk-nag finding
    return outdir


def template(assembly: Path, stack: str) -> dict:
    return json.loads((assembly / f"{stack}.template.json").read_text())


def count(assembly: Path, resource_type: str) -> int:
    return sum(
        1
        for stack in [*ENDPOINT_STACKS, f"{APP}-models"]
        for r in template(assembly, stack)["Resources"].values()
        if r["Type"] == resource_type
    )


def test_one_stack_per_endpoint_and_the_bucket_stack(assembly):
    manifest = json.loads((assembly / "manifest.json").read_text())
    stacks = {k for k, v in manifest["artifacts"].items() if v["type"] == "aws:cloudformation:stack"}
    assert stacks == {*ENDPOINT_STACKS, f"{APP}-models"}
    # Each endpoint stack deploys alone: it needs only the bucket stack, never another endpoint.
    for stack in ENDPOINT_STACKS:
        deps = set(manifest["artifacts"][stack].get("dependencies", []))
        assert deps & set(ENDPOINT_STACKS) == set(), (stack, deps)
        assert f"{APP}-models" in deps, (stack, deps)


def test_counts_of_the_done_when(assembly):
    assert count(assembly, "AWS::SageMaker::Endpoint") == 3
    assert count(assembly, "AWS::SageMaker::InferenceComponent") == 3
    assert count(assembly, "Custom::EndpointSmokeTest") == 5
    assert count(assembly, "Custom::StagedCheckpoint") == 4
    named = [
        r
        for r in template(assembly, f"{APP}-models")["Resources"].values()
        if r["Type"] == "AWS::S3::Bucket" and "BucketName" in r["Properties"]
    ]
    assert len(named) == 1  # the model bucket (the other bucket there holds its access logs)
    for stack in ENDPOINT_STACKS:
        # Every endpoint stack stages into the app's bucket by name, and creates none.
        buckets = [r for r in template(assembly, stack)["Resources"].values() if r["Type"] == "AWS::S3::Bucket"]
        assert buckets == [], stack


def test_every_checkpoint_stages_into_the_app_bucket(assembly):
    name = {"Fn::Join": ["", [f"{APP.lower()}-models-", {"Ref": "AWS::AccountId"}, "-", {"Ref": "AWS::Region"}]]}
    for stack in ENDPOINT_STACKS:
        for r in template(assembly, stack)["Resources"].values():
            if r["Type"] == "Custom::StagedCheckpoint":
                assert r["Properties"]["Bucket"] == name, stack


def test_the_adapter_is_a_component_on_its_base_without_compute(assembly):
    t = Template.from_json(template(assembly, f"{APP}-shared"))
    components = t.find_resources("AWS::SageMaker::InferenceComponent")
    adapters = [r for r in components.values() if "BaseInferenceComponentName" in r["Properties"]["Specification"]]
    (adapter,) = adapters
    spec = adapter["Properties"]["Specification"]
    assert spec["Container"] == {"ArtifactUrl": "s3://my-adapters/qwen3-0.6b-sql/adapter.tar.gz"}
    assert "ComputeResourceRequirements" not in spec and "ModelName" not in spec
    assert "RuntimeConfig" not in adapter["Properties"]
    base = next(
        (k, r)
        for k, r in components.items()
        if r["Properties"]["Specification"].get("ModelName")
        and r["Properties"]["InferenceComponentName"] == spec["BaseInferenceComponentName"]
    )
    assert base[0] in adapter["DependsOn"]  # named literally: created after its base, deleted before it
    # The base model's container serves adapters (engines.json vllm.adapters), the other packed model is unchanged.
    envs = [
        r["Properties"]["PrimaryContainer"]["Environment"] for r in t.find_resources("AWS::SageMaker::Model").values()
    ]
    lora = [e for e in envs if "SM_VLLM_ENABLE_LORA" in e]
    assert (
        len(lora) == 1
        and lora[0]["SM_VLLM_ENABLE_LORA"] == ""
        and lora[0]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    )
    # Its role may read that archive and nothing else of the adapter bucket.
    t.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": "s3:GetObject",
                                "Resource": {
                                    "Fn::Join": [
                                        "",
                                        [
                                            "arn:",
                                            {"Ref": "AWS::Partition"},
                                            ":s3:::my-adapters/qwen3-0.6b-sql/adapter.tar.gz",
                                        ],
                                    ]
                                },
                            }
                        )
                    ]
                )
            }
        },
    )


def test_the_adapter_smoke_test_invokes_the_adapter_by_its_name(assembly):
    resources = template(assembly, f"{APP}-shared")["Resources"]
    names = {
        json.dumps(r["Properties"]["InferenceComponentName"])
        for r in resources.values()
        if r["Type"] == "AWS::SageMaker::InferenceComponent"
    }
    smoke = [r for r in resources.values() if r["Type"] == "Custom::EndpointSmokeTest"]
    assert len(smoke) == 3
    assert {json.dumps(r["Properties"]["InferenceComponentName"]) for r in smoke} == names


def test_outputs_name_each_deployment_and_adapter(assembly):
    outputs = template(assembly, f"{APP}-shared")["Outputs"]
    assert {"SmallInferenceComponentName", "MediumInferenceComponentName", "SmallSqlAdapterComponentName"} <= set(
        outputs
    )


def test_every_deployment_and_adapter_outputs_its_openai_base_url(assembly):
    """Issue 28 item 3: "the base URL per endpoint and component", fleets included."""

    def url(stack: str, key: str) -> str:
        value = template(assembly, stack)["Outputs"][key]["Value"]
        return "".join(p for p in value["Fn::Join"][1] if isinstance(p, str))

    assert url(f"{APP}-chat", "ChatOpenAiBaseUrl").endswith("/openai/v1")
    assert "inference-components" not in url(f"{APP}-chat", "ChatOpenAiBaseUrl")  # a standard endpoint
    outputs = template(assembly, f"{APP}-shared")["Outputs"]
    for name in ("Small", "Medium"):
        component = outputs[f"{name}InferenceComponentName"]["Value"]
        assert url(f"{APP}-shared", f"{name}OpenAiBaseUrl").endswith(f"/inference-components/{component}/openai/v1")
    adapter = outputs["SmallSqlAdapterComponentName"]["Value"]
    assert url(f"{APP}-shared", "SmallSqlAdapterOpenAiBaseUrl").endswith(f"/inference-components/{adapter}/openai/v1")


def test_cfn_lint_passes_on_every_stack(assembly):
    templates = [str(assembly / f"{s}.template.json") for s in [*ENDPOINT_STACKS, f"{APP}-models"]]
    result = subprocess.run([CFN_LINT, "--ignore-checks", "W3005", "--", *templates], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cdk_nag_is_clean_for_every_stack(assembly):
    report = json.loads((assembly / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["conclusion"] == "success"
    assert plugin["violations"] == []
    for finding in plugin["suppressedViolations"]:
        assert len(finding["reason"]) > 40, finding


def test_packed_components_are_accounted_together_on_their_endpoint(tmp_path):
    """Each copy fits alone (4 GPUs of ml.g6.12xlarge), both with their update batches do not fit max_instances=2:
    synth refuses, counting every component on the endpoint (issue 28: room for a rolling batch each)."""
    packed = {
        "deployment_mode": "inference-component",
        "instance_type": "ml.g6.12xlarge",
        "accelerators_per_copy": 4,
        "max_instances": 2,
    }
    fleet = tmp_path / "fleet.json"
    fleet.write_text(
        json.dumps({"a": {**packed, "endpoint": "e"}, "b": {**packed, "endpoint": "e", "model_id": "Qwen/Qwen3-0.6B"}})
    )
    with pytest.raises(Exception, match=r"max_copies plus one update batch each need 16 GPUs, but max_instances=2"):
        build(outdir=str(tmp_path / "out"), deployments_file=str(fleet)).synth()


def test_every_packed_model_gets_alarms_and_a_rolling_update_policy(assembly):
    resources = template(assembly, f"{APP}-shared")["Resources"]
    models = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::SageMaker::InferenceComponent" and "ModelName" in r["Properties"]["Specification"]
    ]
    assert len(models) == 2
    for component in models:
        rolling = component["Properties"]["DeploymentConfig"]["RollingUpdatePolicy"]
        # One copy each, update_policy unset: 50 % of the copies, rolled back by the same (issue 35 item 5).
        assert rolling["MaximumBatchSize"] == {"Type": "CAPACITY_PERCENT", "Value": 50}
        assert rolling["RollbackMaximumBatchSize"] == rolling["MaximumBatchSize"]
        alarms = component["Properties"]["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
        assert alarms
    names = [json.dumps(m["Properties"]["DeploymentConfig"]["AutoRollbackConfiguration"]) for m in models]
    assert names[0] != names[1]  # each component is rolled back by its own alarms
    # The adapter has no deployment config: it rolls with its base.
    (adapter,) = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::SageMaker::InferenceComponent"
        and "BaseInferenceComponentName" in r["Properties"]["Specification"]
    ]
    assert "DeploymentConfig" not in adapter["Properties"]


def test_the_shared_endpoints_summary_counts_its_instances_once_and_labels_each_policy(assembly):
    """Two models packed on one endpoint share its instances: the summary shows the cost once, the second model's
    copies on those instances, and one update policy per component, each named."""
    from llmops.summary import describe

    lines = describe(template(assembly, f"{APP}-shared"), "us-east-1")
    assert sum(1 for line in lines if line.strip().startswith("cost in us-east-1:")) == 1, lines
    assert any("on the instances of the endpoint above (shared; its cost is counted once)" in line for line in lines)
    policies = [line for line in lines if line.strip().startswith("update policy")]
    assert len(policies) == 2 and all(line.strip().startswith("update policy of component ") for line in policies)
    # A one-model endpoint keeps the plain line.
    single = describe(template(assembly, f"{APP}-chat"), "us-east-1")
    assert [line for line in single if line.strip().startswith("update policy")] == [
        line for line in single if line.strip().startswith("update policy:")
    ]


def test_every_stack_and_sagemaker_resource_carries_the_apps_tag(assembly):
    """``llmops status`` finds a fleet's stacks and endpoints by this tag: their names carry no usable prefix."""
    from llmops.status import APP_TAG

    manifest = json.loads((assembly / "manifest.json").read_text())
    for stack in [*ENDPOINT_STACKS, f"{APP}-models"]:
        assert manifest["artifacts"][stack]["properties"]["tags"] == {APP_TAG: APP}, stack
        resources = template(assembly, stack)["Resources"].values()
        sagemaker = [r for r in resources if r["Type"].startswith("AWS::SageMaker")]
        for resource in sagemaker:
            assert {"Key": APP_TAG, "Value": APP} in resource["Properties"]["Tags"], (stack, resource["Type"])
    assert count(assembly, "AWS::SageMaker::Endpoint") == 3


def test_the_fleets_bucket_is_created_with_the_apps_bucket_key_and_reused_with_it(tmp_path):
    # bucket_kms_key_arn has scope "app": the bucket stack creates the one bucket with it (it was created with
    # SSE-S3 while the endpoint stacks granted the key), and every endpoint stack reuses it with the same key.
    key = "arn:aws:kms:us-east-1:123456789012:key/1111abcd-12ab-34cd-56ef-1234567890ab"
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"a": {}, "b": {"model_id": "Qwen/Qwen3-0.6B"}}))
    app = build(outdir=str(tmp_path / "out"), deployments_file=str(fleet), bucket_kms_key_arn=key)
    stacks = {s.stack_name: Template.from_stack(s) for s in app.node.children if hasattr(s, "stack_name")}
    stacks[f"{APP}-models"].has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {
                        "ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key},
                        "BucketKeyEnabled": True,
                    }
                ]
            }
        },
    )
    for name in (f"{APP}-a", f"{APP}-b"):
        assert key in json.dumps(stacks[name].to_json()), name  # the staging role may use the bucket's key
