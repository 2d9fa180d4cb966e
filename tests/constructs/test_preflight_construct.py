"""``DeploymentPreflight``: the resource, its grants, its warnings and dependencies; cdk-nag and cfn-lint clean."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks

from constructs_lib import GpuEndpoint, S3ModelData
from constructs_lib.preflight_check import CHECKS, RESOURCE_TYPE, SERVICE_TIMEOUT, DeploymentPreflight
from tests.conftest import default_context

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
PREFIX = "models/acme--tiny-llm/0123abcd/"


class StagedSource(S3ModelData):
    """A model source that something else fills first (as ``StagedCheckpoint`` does)."""

    def __init__(self, bucket: s3.IBucket, prefix: str, dependable: cdk.CfnResource) -> None:
        super().__init__(bucket, prefix)
        self.dependable = dependable


def new_stack(outdir: str | None = None) -> tuple[cdk.App, cdk.Stack, s3.IBucket]:
    app = cdk.App(context=default_context(), outdir=outdir)
    stack = cdk.Stack(app, "PreflightTest")
    return app, stack, s3.Bucket.from_bucket_name(stack, "Models", "my-models")


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> tuple[cdk.Stack, Path]:
    """One app as a deployment wires it: staging -> preflight -> endpoint, with cdk-nag run at synth."""
    outdir = tmp_path_factory.mktemp("preflight")
    app, stack, bucket = new_stack(str(outdir))
    staging = cdk.CfnWaitConditionHandle(stack, "StagingDone")
    model = StagedSource(bucket, PREFIX, staging)
    preflight = DeploymentPreflight(
        stack,
        "Preflight",
        model=model,
        instance_type="ml.g6e.12xlarge",
        max_model_len=32768,
        max_num_seqs=4,
        kv_cache_dtype="fp8",
        instances_needed=2,
        skip_checks=["quota"],
    )
    GpuEndpoint(stack, "Endpoint", model=preflight.checked_model, instance_type="ml.g6e.12xlarge", max_model_len=32768)
    cdk.CfnOutput(stack, "Fits", value=preflight.max_model_len_that_fits)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises if any cdk-nag finding is unacknowledged
    return stack, outdir


def template_of(synthesized) -> Template:
    return Template.from_json(json.loads((synthesized[1] / "PreflightTest.template.json").read_text()))


def preflight_resource(template: Template) -> tuple[str, dict]:
    (item,) = template.find_resources(RESOURCE_TYPE).items()
    return item


def test_resource_type_service_timeout_and_properties(synthesized):
    template = template_of(synthesized)
    template.has_resource_properties(
        RESOURCE_TYPE,
        {
            "ServiceToken": {"Fn::GetAtt": [Match.string_like_regexp("^DeploymentPreflightProvider"), "Arn"]},
            "ServiceTimeout": str(int(SERVICE_TIMEOUT.to_seconds())),
            "ModelS3Uri": f"s3://my-models/{PREFIX}",
            "InstanceType": "ml.g6e.12xlarge",
            "GpuCount": "4",
            "GpuMemoryGib": "48",
            "TensorParallelSize": "4",
            "MaxModelLen": "32768",
            "MaxNumSeqs": "4",
            "KvCacheDtype": "fp8",
            "GpuMemoryUtilization": "0.9",
            "InstancesNeeded": "2",
            "AllowUnverifiedS3": "false",
            "SkipChecks": ["quota"],
        },
    )
    assert 60 <= SERVICE_TIMEOUT.to_seconds() <= 900  # fails in minutes, not CloudFormation's hour


def test_max_num_batched_tokens_is_passed_only_when_set(synthesized):
    # Unset: no property, so the handler estimates at vLLM's 2048-token default and templates stay unchanged.
    _, properties = preflight_resource(template_of(synthesized))
    assert "MaxNumBatchedTokens" not in properties["Properties"]
    _, stack, bucket = new_stack()
    DeploymentPreflight(
        stack, "Batched", model=S3ModelData(bucket, PREFIX), instance_type="ml.g6.xlarge", max_num_batched_tokens=8192
    )
    Template.from_stack(stack).has_resource_properties(RESOURCE_TYPE, {"MaxNumBatchedTokens": "8192"})


def test_instance_pools_are_passed_for_their_quotas_only_when_given(synthesized):
    # Unset: no property, so templates deployed before it existed stay unchanged (no preflight re-run).
    _, properties = preflight_resource(template_of(synthesized))
    assert "InstancePools" not in properties["Properties"]
    _, stack, bucket = new_stack()
    DeploymentPreflight(
        stack,
        "Pools",
        model=S3ModelData(bucket, PREFIX),
        instance_type="ml.g6.xlarge",
        instance_pools=["ml.g5.xlarge", "ml.g6.2xlarge"],
    )
    Template.from_stack(stack).has_resource_properties(
        RESOURCE_TYPE, {"InstanceType": "ml.g6.xlarge", "InstancePools": ["ml.g5.xlarge", "ml.g6.2xlarge"]}
    )


def test_the_handler_is_bundled_with_the_preflight_package(synthesized):
    template = template_of(synthesized)
    functions = template.find_resources(
        "AWS::Lambda::Function",
        {
            "Properties": {
                "Handler": "index.on_event",
                "Timeout": 120,
                "Role": {"Fn::GetAtt": [Match.string_like_regexp("^DeploymentPreflightProviderRole"), "Arn"]},
            }
        },
    )
    assert len(functions) == 1
    assert template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": "index.is_complete"}}) == {}
    bundled = [p for p in synthesized[1].glob("asset.*") if (p / "preflight" / "memory_fit.py").is_file()]
    assert len(bundled) == 1 and "def on_event" in (bundled[0] / "index.py").read_text()
    assert not (bundled[0] / "hfstage").exists()  # only the packages it imports


def test_role_reads_only_the_model_prefix_and_the_quotas(synthesized):
    template = template_of(synthesized)
    policies = template.find_resources(
        "AWS::IAM::Policy",
        {"Properties": {"Roles": [{"Ref": Match.string_like_regexp("^DeploymentPreflightProviderRole")}]}},
    )
    ((_, policy),) = policies.items()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    by_action = {json.dumps(s["Action"]): s for s in statements}
    listing = by_action['"s3:ListBucket"']
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [PREFIX, f"{PREFIX}*"]}}
    assert by_action['"s3:GetObject"']["Resource"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":s3:::my-models/{PREFIX}*"]]
    }
    quotas = by_action['["servicequotas:ListAWSDefaultServiceQuotas", "servicequotas:ListServiceQuotas"]']
    assert quotas["Resource"] == "*"
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert by_action['"cloudformation:DescribeStacks"']["Resource"] == {"Ref": "AWS::StackId"}  # rollback or not
    assert actions == {
        "cloudformation:DescribeStacks",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "s3:ListBucket",
        "s3:GetObject",
        "servicequotas:ListServiceQuotas",
        "servicequotas:ListAWSDefaultServiceQuotas",
    }


def test_preflight_waits_for_the_weights_and_the_model_waits_for_the_preflight(synthesized):
    template = template_of(synthesized)
    logical_id, resource = preflight_resource(template)
    staging = next(iter(template.find_resources("AWS::CloudFormation::WaitConditionHandle")))
    assert staging in resource["DependsOn"]
    assert any(d.startswith("DeploymentPreflightProviderRole") for d in resource["DependsOn"])
    ((_, model),) = template.find_resources("AWS::SageMaker::Model").items()
    assert logical_id in model["DependsOn"]
    assert template.find_outputs("Fits")["Fits"]["Value"] == {"Fn::GetAtt": [logical_id, "MaxModelLenThatFits"]}


def test_a_skipped_check_is_a_synth_warning(synthesized):
    stack, _ = synthesized
    Annotations.from_stack(stack).has_warning(
        "/PreflightTest/Preflight",
        Match.string_like_regexp(r"Preflight checks skipped \(quota\)\. Without them, quota: a quota below"),
    )


def test_nothing_skipped_no_warning_and_unverified_s3_warns():
    _, stack, bucket = new_stack()
    DeploymentPreflight(stack, "Checked", model=S3ModelData(bucket, PREFIX), instance_type="ml.g6.xlarge")
    DeploymentPreflight(
        stack, "Unverified", model=S3ModelData(bucket, "other/"), instance_type="ml.g6.xlarge", allow_unverified_s3=True
    )
    annotations = Annotations.from_stack(stack)
    annotations.has_no_warning("/PreflightTest/Checked", Match.any_value())
    annotations.has_warning("/PreflightTest/Unverified", Match.string_like_regexp("allow_unverified_s3"))
    template = Template.from_stack(stack)
    # One provider per stack, whatever the number of preflights; each reads its own prefix.
    template.resource_count_is(RESOURCE_TYPE, 2)
    template.resource_count_is("AWS::Lambda::Function", 2)  # the handler and the framework's onEvent
    template.has_resource_properties(RESOURCE_TYPE, {"MaxModelLen": "", "SkipChecks": [], "AllowUnverifiedS3": "true"})


def test_every_problem_is_reported_in_one_error():
    _, stack, bucket = new_stack()
    with pytest.raises(ValueError) as error:
        DeploymentPreflight(
            stack,
            "Bad",
            model=S3ModelData(bucket, PREFIX),
            instance_type="ml.g6.12xlarge",
            tensor_parallel_size=8,
            max_model_len=0,
            kv_cache_dtype="int4",
            gpu_memory_utilization=1.2,
            max_num_batched_tokens=0,
            instances_needed=0,
            skip_checks=["quota", "vibes"],
        )
    message = str(error.value)
    for fragment in (
        "DeploymentPreflight PreflightTest/Bad:",
        "max_model_len=0 must be a whole number of at least 1",
        "instances_needed=0",
        "tensor_parallel_size=8 exceeds the 4 GPU(s) of ml.g6.12xlarge; allowed: 1-4",
        "kv_cache_dtype='int4'",
        "gpu_memory_utilization=1.2",
        "max_num_batched_tokens=0 must be a whole number of at least 1",
        f"skip_checks names unknown checks ['vibes']; allowed: {', '.join(CHECKS)}",
    ):
        assert fragment in message


def test_an_unknown_instance_type_needs_its_gpu_facts():
    _, stack, bucket = new_stack()
    with pytest.raises(
        ValueError, match=r"ml\.g6\.xlarg.*not in the GPU instance catalog.*Did you mean ml\.g6\.xlarge"
    ):
        DeploymentPreflight(stack, "Typo", model=S3ModelData(bucket, PREFIX), instance_type="ml.g6.xlarg")
    preflight = DeploymentPreflight(
        stack, "Custom", model=S3ModelData(bucket, PREFIX), instance_type="ml.x9.xlarge", gpu_count=2, gpu_memory_gib=80
    )
    assert preflight.tensor_parallel_size == 2


def test_cdk_nag_is_clean_with_reasons_next_to_the_resources(synthesized):
    report = json.loads((synthesized[1] / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    preflight = [f for f in plugin["suppressedViolations"] if "DeploymentPreflightProvider/Role" in json.dumps(f)]
    assert {f["ruleName"] for f in preflight} == {
        "AwsSolutions-IAM5[Resource::*]",  # Service Quotas: no resource-level permissions
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::my-models/{PREFIX}*]",
    }
    for finding in preflight:
        assert len(finding["reason"]) > 40
        for construct in finding["violatingConstructs"]:
            assert construct["constructPath"].startswith(finding["acknowledgedAt"]), finding


@pytest.mark.slow
def test_cfn_lint_is_clean(synthesized):
    template = synthesized[1] / "PreflightTest.template.json"
    result = subprocess.run(
        [CFN_LINT, "--ignore-checks", "W3005", "--", str(template)], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr
