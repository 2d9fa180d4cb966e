"""``ServingImageCheck``: every Model this library creates waits for one, which waits for nothing but its function;
its role may read only the image's repository (statements asserted whole); its properties name the Model's image."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from constructs_lib import GpuEndpoint, S3ModelData, ServingImage
from constructs_lib.image_check import ServingImageCheck
from constructs_lib.inference_component import ComponentEndpoint

URI = "111122223333.dkr.ecr.us-west-2.amazonaws.com/team/vllm:0.11.0-gpu-py312-cu129-ubuntu22.04-sagemaker"


def endpoint_template(**props: Any) -> dict[str, Any]:
    stack = cdk.Stack(cdk.App(), "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "models/org--m/abc123"), **props)
    return Template.from_stack(stack).to_json()


def of_type(t: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in t["Resources"].items() if v["Type"] == type_}


def check_role_statements(t: dict[str, Any]) -> list[dict[str, Any]]:
    (role_id,) = [k for k in of_type(t, "AWS::IAM::Role") if k.startswith("ServingImageCheckProviderRole")]
    return [
        s
        for p in of_type(t, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_of_finds_the_check_a_model_waits_for():
    stack = cdk.Stack(cdk.App(), "Test")
    endpoint = GpuEndpoint(stack, "Endpoint", model=S3ModelData(s3.Bucket.from_bucket_name(stack, "B", "bkt"), "m/"))
    check = ServingImageCheck.of(endpoint.model)
    assert isinstance(check, ServingImageCheck) and check.image is endpoint.image
    assert ServingImageCheck.of(check) is None  # what waits for none


def test_the_model_waits_for_the_check_which_waits_only_for_its_own_grant():
    t = endpoint_template()
    ((check_id, check),) = of_type(t, "Custom::ServingImageCheck").items()
    ((_, model),) = of_type(t, "AWS::SageMaker::Model").items()
    assert check_id in model["DependsOn"]
    # Nothing but its role's policy: it is the first thing a deploy does, and staging waits for it.
    assert [d for d in check.get("DependsOn", []) if not d.startswith("ServingImageCheckProviderRole")] == []
    assert check["Properties"]["ImageUri"] == model["Properties"]["PrimaryContainer"]["Image"]
    assert "Architecture" not in check["Properties"]  # amd64, the default, is left out
    assert check["Properties"]["ServiceTimeout"] == "480"


def test_the_check_role_reads_only_the_images_repository():
    t = endpoint_template(image=ServingImage.from_uri(URI))
    ecr = [s for s in check_role_statements(t) if any(str(a).startswith("ecr:") for a in s["Action"])]
    assert ecr == [
        {
            "Action": ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            "Effect": "Allow",
            "Resource": {
                "Fn::Join": [
                    "",
                    ["arn:", {"Ref": "AWS::Partition"}, ":ecr:us-west-2:111122223333:repository/team/vllm"],
                ]
            },
        }
    ]
    ((_, check),) = of_type(t, "Custom::ServingImageCheck").items()
    assert check["Properties"]["ImageUri"] == URI


def test_the_default_dlc_image_is_checked_in_the_regions_registry():
    t = endpoint_template()
    (statement,) = [s for s in check_role_statements(t) if "ecr:BatchGetImage" in s["Action"]]
    text = json.dumps(statement["Resource"])
    assert "DlcRegistryAccounts" in text and "repository/vllm" in text
    ((_, check),) = of_type(t, "Custom::ServingImageCheck").items()
    assert "DlcRegistryAccounts" in json.dumps(check["Properties"]["ImageUri"])


def test_every_component_model_waits_for_its_own_check_and_one_provider_serves_them():
    stack = cdk.Stack(cdk.App(), "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint")
    endpoint.add_component("Chat", model=S3ModelData(bucket, "a/"))
    endpoint.add_component("Code", model=S3ModelData(bucket, "b/"), image=ServingImage.from_uri(URI))
    t = Template.from_stack(stack).to_json()
    checks = of_type(t, "Custom::ServingImageCheck")
    models = of_type(t, "AWS::SageMaker::Model")
    assert len(checks) == 2 and len(models) == 2
    for model in models.values():
        (waits_for,) = [d for d in model["DependsOn"] if d in checks]
        assert checks[waits_for]["Properties"]["ImageUri"] == model["Properties"]["PrimaryContainer"]["Image"]
    assert len(of_type(t, "AWS::Lambda::Function")) == 3  # one handler, the framework's, the log retention's
    assert len({json.dumps(c["Properties"]["ServiceToken"]) for c in checks.values()}) == 1


@pytest.mark.parametrize(("architecture", "written"), [("amd64", None), ("arm64", "arm64")])
def test_the_architecture_is_written_only_when_not_the_default(architecture, written):
    stack = cdk.Stack(cdk.App(), "Test")
    check = ServingImageCheck(stack, "Check", image=ServingImage.from_uri(URI), architecture=architecture)
    ((_, resource),) = of_type(Template.from_stack(stack).to_json(), "Custom::ServingImageCheck").items()
    assert resource["Properties"].get("Architecture") == written
    resource_id, attribute = stack.resolve(check.image_digest)["Fn::GetAtt"]
    assert resource_id.startswith("Check") and attribute == "ImageDigest"


def test_cdk_nag_finds_nothing_unacknowledged(tmp_path):
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Test", env=cdk.Environment(account="111122223333", region="us-west-2"))
    ServingImageCheck(stack, "Check", image=ServingImage.from_uri(URI))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises on any unacknowledged finding


def test_staging_waits_for_the_check_directly_and_behind_a_preflight():
    """So a check that fails leaves no staging job to start after the rollback's Delete (aws-cdk #26139)."""
    from constructs_lib import DeploymentPreflight, StagedCheckpoint

    for through_preflight in (False, True):
        stack = cdk.Stack(cdk.App(), "Test")
        checkpoint = StagedCheckpoint(stack, "Checkpoint", repo_id="Qwen/Qwen3-4B-Instruct-2507")
        model = checkpoint
        if through_preflight:
            model = DeploymentPreflight(
                stack, "Preflight", model=checkpoint, instance_type="ml.g6.xlarge"
            ).checked_model
        GpuEndpoint(stack, "Endpoint", model=model)
        t = Template.from_stack(stack).to_json()
        (check_id,) = of_type(t, "Custom::ServingImageCheck")
        (staging,) = of_type(t, "Custom::StagedCheckpoint").values()
        assert check_id in staging["DependsOn"], through_preflight
        check = t["Resources"][check_id]
        assert all(d.startswith("ServingImageCheckProvider") for d in check.get("DependsOn", []))  # and on no more


def test_an_instance_type_outside_the_catalog_leaves_the_platform_unchecked():
    t = endpoint_template(instance_type="ml.g9.2xlarge", gpu_count=2, gpu_memory_gib=64)
    ((_, check),) = of_type(t, "Custom::ServingImageCheck").items()
    assert check["Properties"]["Architecture"] == ""  # its CPU is not known: the handler notes, never refuses


def test_an_adapters_staging_waits_for_its_bases_image_check():
    from constructs_lib import AdapterComponent, StagedCheckpoint

    stack = cdk.Stack(cdk.App(), "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6.12xlarge")
    base = endpoint.add_component(
        "Chat", model=S3ModelData(bucket, "base/"), tensor_parallel_size=1, engine_env={"SM_VLLM_ENABLE_LORA": "true"}
    )
    artifact = StagedCheckpoint(stack, "Sql", repo_id="acme/sql-lora", pack=True, adapter_base_model_id=None)
    AdapterComponent(stack, "SqlAdapter", base=base, artifact=artifact)
    t = Template.from_stack(stack).to_json()
    (check_id,) = of_type(t, "Custom::ServingImageCheck")
    (staging,) = of_type(t, "Custom::StagedCheckpoint").values()
    assert check_id in staging["DependsOn"]


def test_a_model_source_in_another_stack_does_not_wait_and_says_so():
    """Across stacks the endpoint's stack depends on the staging's already (its S3 prefix): a wait would be a cycle."""
    from aws_cdk.assertions import Annotations

    from constructs_lib import StagedCheckpoint

    app = cdk.App()
    models = cdk.Stack(app, "Models")
    checkpoint = StagedCheckpoint(models, "Checkpoint", repo_id="Qwen/Qwen3-4B-Instruct-2507")
    serving = cdk.Stack(app, "Serving")
    GpuEndpoint(serving, "Endpoint", model=checkpoint)
    app.synth()  # no DependencyCycle
    Annotations.from_stack(serving).has_warning("*", Match.string_like_regexp("is in another stack: its staging does"))
    staging = of_type(Template.from_stack(models).to_json(), "Custom::StagedCheckpoint")
    assert all("ImageCheck" not in json.dumps(r.get("DependsOn", [])) for r in staging.values())
