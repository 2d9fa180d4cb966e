"""Instance pools (issue 28 item 2): fallback instance types on the variant, each checked like the primary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from constructs_lib import GpuEndpoint, S3ModelData
from constructs_lib.instance_pools import MAX_FALLBACKS, pool_problems
from tests.conftest import build, context_with
from tests.stacks.test_config import load, problems_of

# Whole apps synthesized per pool variant: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
ISSUE_POOLS = '["ml.g6e.xlarge","ml.g5.2xlarge"]'


def variant_of(t: dict) -> dict:
    (config,) = [r for r in t["Resources"].values() if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    (variant,) = config["Properties"]["ProductionVariants"]
    return variant


def test_the_issues_pools_synthesize_with_every_type_in_the_variant_and_pass_cfn_lint(tmp_path):
    build(outdir=str(tmp_path), instance_pools=ISSUE_POOLS).synth()
    path = tmp_path / "LlmEndpoint.template.json"
    variant = variant_of(json.loads(path.read_text()))
    # InstancePools replaces InstanceType (SageMaker developer guide, realtime-endpoints-heterogeneous).
    assert "InstanceType" not in variant
    assert variant["InstancePools"] == [
        {"InstanceType": "ml.g6.xlarge", "Priority": 1},
        {"InstanceType": "ml.g6e.xlarge", "Priority": 2},
        {"InstanceType": "ml.g5.2xlarge", "Priority": 3},
    ]
    result = subprocess.run([CFN_LINT, "--ignore-checks", "W3005", "--", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    # The preflight reads each fallback's quota too (lambda/deployment_preflight/preflight_quota.py).
    (preflight,) = [
        r for r in json.loads(path.read_text())["Resources"].values() if r["Type"] == "Custom::DeploymentPreflight"
    ]
    assert preflight["Properties"]["InstancePools"] == ["ml.g6e.xlarge", "ml.g5.2xlarge"]


def test_no_pools_keep_the_instance_type():
    variant = variant_of(Template.from_stack(_stack_of(build())).to_json())
    assert variant["InstanceType"] == "ml.g6.xlarge" and "InstancePools" not in variant


def _stack_of(app: cdk.App) -> cdk.Stack:
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    return stack


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        # 4 GPUs cannot run the primary's tensor parallel size of 1 in standard mode: one model, every GPU.
        ('["ml.g6.12xlarge"]', r"instance_pools\[0\]='ml.g6.12xlarge': tensor_parallel_size=1 does not match"),
        ('["ml.m5.xlarge"]', r"instance_pools\[0\]='ml.m5.xlarge': instance_type='ml.m5.xlarge' is not in the GPU"),
        ('["ml.g6.xlarge"]', r"instance_pools\[0\]='ml.g6.xlarge' is listed twice \(or is instance_type itself\)"),
        (
            '["ml.g6e.xlarge","ml.g5.xlarge","ml.g5.2xlarge","ml.g6e.2xlarge","ml.g5.4xlarge"]',
            r"instance_pools has 5 instance types; allowed: at most 4 beside instance_type='ml.g6.xlarge'",
        ),
        ('["g5.2xlarge"]', r"not SageMaker instance types: 'g5.2xlarge'"),
        ("ml.g5.2xlarge", r"expected a JSON array of instance types"),
    ],
)
def test_a_pool_entry_that_fails_the_primarys_checks_is_refused_naming_it(pools, message):
    problems = problems_of(instance_pools=pools)
    assert any(__import__("re").search(message, p) for p in problems), problems


def test_a_pool_entry_whose_gpu_the_image_cannot_run_is_refused():
    """The image's CUDA level is checked against each pool's GPU, as for instance_type (endpoint_plan)."""
    calls = []

    def check(pool: str) -> list[str]:
        calls.append(pool)
        return ["needs a CUDA 13 (cu130) image"] if pool == "ml.g7e.2xlarge" else []

    assert pool_problems("ml.g6.xlarge", ["ml.g5.2xlarge", "ml.g7e.2xlarge"], check) == [
        "instance_pools[1]='ml.g7e.2xlarge': needs a CUDA 13 (cu130) image"
    ]
    assert calls == ["ml.g5.2xlarge", "ml.g7e.2xlarge"] and MAX_FALLBACKS == 4


def test_component_mode_with_the_issues_pools_synthesizes_a_specification_per_type_and_passes_cfn_lint(tmp_path):
    build(outdir=str(tmp_path), deployment_mode="inference-component", instance_pools=ISSUE_POOLS).synth()
    path = tmp_path / "LlmEndpoint.template.json"
    t = json.loads(path.read_text())
    variant = variant_of(t)
    assert "InstanceType" not in variant and "ModelName" not in variant
    assert [p["InstanceType"] for p in variant["InstancePools"]] == ["ml.g6.xlarge", "ml.g6e.xlarge", "ml.g5.2xlarge"]
    (component,) = [r for r in t["Resources"].values() if r["Type"] == "AWS::SageMaker::InferenceComponent"]
    props = component["Properties"]
    assert "Specification" not in props
    assert [s["InstanceType"] for s in props["Specifications"]] == ["ml.g6.xlarge", "ml.g6e.xlarge", "ml.g5.2xlarge"]
    result = subprocess.run([CFN_LINT, "--ignore-checks", "W3005", "--", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    (plugin,) = json.loads((tmp_path / "validation-report.json").read_text())["pluginReports"]  # cdk-nag
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    # The preflight reads each fallback's quota in component mode too.
    (preflight,) = [r for r in t["Resources"].values() if r["Type"] == "Custom::DeploymentPreflight"]
    assert preflight["Properties"]["InstancePools"] == ["ml.g6e.xlarge", "ml.g5.2xlarge"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # A copy takes the primary's 4 GPUs on every type (one Model): a 1-GPU fallback cannot hold it.
        (
            {"instance_type": "ml.g6.12xlarge", "instance_pools": '["ml.g5.2xlarge"]'},
            r"instance_pools\[0\]='ml.g5.2xlarge': tensor_parallel_size=4 is more than the 1 GPU\(s\) of one instance",
        ),
        # max_instances must leave room for an update batch on every type.
        (
            {
                "instance_type": "ml.g6.12xlarge",
                "accelerators_per_copy": "1",
                "max_instances": "1",
                "instance_pools": '["ml.g6.xlarge"]',
            },
            r"instance_pools\[0\]='ml.g6.xlarge': max_instances=1 x 1 GPU\(s\) per instance give 1 GPUs",
        ),
        ('["ml.m5.xlarge"]', r"instance_pools\[0\]='ml.m5.xlarge': instance_type='ml.m5.xlarge' is not in the GPU"),
    ],
)
def test_component_mode_refuses_a_pool_entry_that_fails_the_components_checks(settings, message):
    settings = settings if isinstance(settings, dict) else {"instance_pools": settings}
    problems = problems_of(deployment_mode="inference-component", **settings)
    assert any(__import__("re").search(message, p) for p in problems), problems


def test_component_mode_pools_whose_copies_fit_are_accepted():
    config = load(deployment_mode="inference-component", instance_pools=ISSUE_POOLS)
    assert config.instance_pools == ("ml.g6e.xlarge", "ml.g5.2xlarge")


def test_the_key_parses_and_defaults_to_none():
    assert load().instance_pools == ()
    assert load(instance_pools=ISSUE_POOLS).instance_pools == ("ml.g6e.xlarge", "ml.g5.2xlarge")
    assert context_with(instance_pools=ISSUE_POOLS)["instance_pools"] == ISSUE_POOLS


def test_the_construct_checks_each_pool_with_its_own_settings():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    with pytest.raises(ValueError, match=r"instance_pools\[0\]='ml.g6e.12xlarge': tensor_parallel_size=1"):
        GpuEndpoint(stack, "Bad", model=S3ModelData(bucket, "m/"), instance_pools=["ml.g6e.12xlarge"])
    endpoint = GpuEndpoint(
        stack,
        "Endpoint",
        model=S3ModelData(bucket, "m/"),
        instance_type="ml.g6.12xlarge",
        instance_pools=["ml.g5.12xlarge"],
    )
    assert endpoint.instance_types == ["ml.g6.12xlarge", "ml.g5.12xlarge"]
    t = Template.from_stack(stack).to_json()
    assert [p["InstanceType"] for p in variant_of(t)["InstancePools"]] == ["ml.g6.12xlarge", "ml.g5.12xlarge"]


def test_component_pools_size_the_preflight_for_the_type_with_fewest_gpus(tmp_path):
    # 2 copies of 1 GPU and an update's batch of 1: one ml.g6.12xlarge would hold them, but every instance may be an
    # ml.g6.xlarge fallback (1 GPU), so MaxInstanceCount is 3 and the preflight counts 2 serving + 1 for the update.
    build(
        outdir=str(tmp_path),
        deployment_mode="inference-component",
        instance_type="ml.g6.12xlarge",
        accelerators_per_copy="1",
        initial_copies="2",
        instance_pools='["ml.g6.xlarge"]',
    ).synth()
    t = json.loads((tmp_path / "LlmEndpoint.template.json").read_text())
    assert variant_of(t)["ManagedInstanceScaling"]["MaxInstanceCount"] == 3
    (preflight,) = [r for r in t["Resources"].values() if r["Type"] == "Custom::DeploymentPreflight"]
    assert (preflight["Properties"]["InstancesNeeded"], preflight["Properties"]["UpdateInstances"]) == ("2", "1")
    assert preflight["Properties"]["InstancePools"] == ["ml.g6.xlarge"]
