"""The app with its dashboard, alarms and update policy, as `cdk synth` builds it (cdk-nag and cfn-lint included)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Annotations, Match, Template

from tests.conftest import build

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
VARIANTS = {
    "default": {},
    "canary-email": {
        "instance_count": "2",
        "update_policy": "canary",
        "update_termination_wait_s": "600",
        "alarm_email": "ops@example.com",
    },
    "component": {"deployment_mode": "inference-component", "update_step_size": "1", "update_wait_s": "120"},
    "quiet": {"alarms": "false", "dashboard": "false"},
    # Issue 28: the dashboard per instance type and per GPU, the GPU-memory alarm on the fullest GPU.
    "pools-enhanced": {"instance_pools": '["ml.g6e.xlarge","ml.g5.2xlarge"]', "enhanced_metrics": "true"},
}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, dict]:
    out = {}
    for name, overrides in VARIANTS.items():
        outdir = tmp_path_factory.mktemp(name)
        build(outdir=str(outdir), **overrides).synth()  # raises on an unacknowledged cdk-nag finding
        out[name] = json.loads((outdir / "LlmEndpoint.template.json").read_text())
        out[name]["_path"] = str(outdir / "LlmEndpoint.template.json")
    return out


def resources(t: dict, type_: str) -> dict[str, dict]:
    return {k: r.get("Properties", {}) for k, r in t["Resources"].items() if r["Type"] == type_}


def the(t: dict, type_: str) -> dict:
    (props,) = resources(t, type_).values()
    return props


@pytest.mark.integration  # cfn-lint over the observability variants: `make test-integration`
def test_cfn_lint_passes(synthesized):
    paths = [t["_path"] for t in synthesized.values()]
    result = subprocess.run([CFN_LINT, "--ignore-checks", "W3005", "--", *paths], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_has_dashboard_alarms_and_a_blue_green_policy_with_auto_rollback(synthesized):
    t = synthesized["default"]
    alarms = resources(t, "AWS::CloudWatch::Alarm")
    assert len(alarms) == 4
    (topic,) = resources(t, "AWS::SNS::Topic")
    assert all(a["AlarmActions"] == [{"Ref": topic}] for a in alarms.values())
    assert resources(t, "AWS::SNS::Subscription") == {}
    config = the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]
    assert config["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"] == {
        "Type": "ALL_AT_ONCE",
        "WaitIntervalInSeconds": 300,
    }
    # The instances-reporting alarm waits for the endpoint (it would fire before the endpoint has instances and
    # while it is deleted: missing data is breaching for it) and so rolls nothing back (issue 28 item 5).
    (no_capacity,) = [k for k in alarms if "NoCapacity" in k]
    (endpoint,) = resources(t, "AWS::SageMaker::Endpoint")
    assert endpoint in t["Resources"][no_capacity]["DependsOn"]
    rollback = {a["AlarmName"]["Ref"] for a in config["AutoRollbackConfiguration"]["Alarms"]}
    assert rollback == set(alarms) - {no_capacity}
    the(t, "AWS::CloudWatch::Dashboard")
    assert set(t["Outputs"]) >= {"DashboardUrl", "AlarmTopicArn"}
    url = json.dumps(t["Outputs"]["DashboardUrl"]["Value"])
    assert "console.aws.amazon.com/cloudwatch/home?region=" in url and "#dashboards/dashboard/" in url
    # The quota must hold the green fleet of an update beside the serving one.
    preflight = the(t, "Custom::DeploymentPreflight")
    assert (preflight["InstancesNeeded"], preflight["UpdateInstances"]) == ("1", "1")


def test_canary_with_email(synthesized):
    t = synthesized["canary-email"]
    policy = the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]["BlueGreenUpdatePolicy"]
    assert policy["TrafficRoutingConfiguration"]["CanarySize"] == {"Type": "INSTANCE_COUNT", "Value": 1}
    assert policy["TerminationWaitInSeconds"] == 600
    assert the(t, "AWS::SNS::Subscription")["Endpoint"] == "ops@example.com"
    preflight = the(t, "Custom::DeploymentPreflight")
    assert (preflight["InstancesNeeded"], preflight["UpdateInstances"]) == ("2", "2")


def test_component_mode_has_the_rolling_policy_on_the_component(synthesized):
    t = synthesized["component"]
    assert "DeploymentConfig" not in the(t, "AWS::SageMaker::Endpoint")
    config = the(t, "AWS::SageMaker::InferenceComponent")["DeploymentConfig"]
    assert config["RollingUpdatePolicy"] == {
        # Issue 35 item 5: one copy, update_policy unset: 50 % of the copies (inside the documented 5-50 %), and a
        # rollback of the same batch, not 100 %.
        "MaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": 50},
        "RollbackMaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": 50},
        "WaitIntervalInSeconds": 120,
        # Issue 28: explicit, 1 batch x (120 s bake + 1200 + 1200 s download and start-up + 600 s for an instance).
        "MaximumExecutionTimeoutInSeconds": 3120,
    }
    assert len(config["AutoRollbackConfiguration"]["Alarms"]) == 4
    # Room for the batch's new copy beside the serving one, counted by the quota check as an update's instance.
    (variant,) = the(t, "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["ManagedInstanceScaling"]["MaxInstanceCount"] == 2
    preflight = the(t, "Custom::DeploymentPreflight")
    assert (preflight["InstancesNeeded"], preflight["UpdateInstances"]) == ("1", "1")
    # The smoke test checks the component runs this deploy's model: a rolled-back rolling update does not.
    (model,) = resources(t, "AWS::SageMaker::Model")
    assert the(t, "Custom::EndpointSmokeTest")["ModelName"] == {"Fn::GetAtt": [model, "ModelName"]}
    assert "ModelName" not in the(synthesized["default"], "Custom::EndpointSmokeTest")


def test_component_mode_default_synth_prints_no_warning():
    """Issue 28: the README's component example warned on every synth about its rolling batch. With the revision
    pinned (what model-facts.json does at synth) nothing warns; with the floating default "main" only issue 26's
    floating-revision warning remains, the one a floating image tag also gets."""
    app = build(deployment_mode="inference-component", revision="0" * 40)
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    Annotations.from_stack(stack).has_no_warning("*", Match.any_value())
    app = build(deployment_mode="inference-component")
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    warnings = Annotations.from_stack(stack).find_warning("*", Match.any_value())
    assert [w.entry.data for w in warnings] and all("[ack: llm:floating-revision]" in w.entry.data for w in warnings)


def test_a_standard_rolling_policy_updates_one_batch_of_instances():
    """The endpoint's own RollingUpdatePolicy (AWS::SageMaker::Endpoint DeploymentConfig): no second fleet."""
    app = build(instance_count="2", update_policy="rolling")
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    t = Template.from_stack(stack).to_json()
    config = the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]
    assert "BlueGreenUpdatePolicy" not in config
    assert config["RollingUpdatePolicy"] == {
        "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1},
        "WaitIntervalInSeconds": 300,
        "MaximumExecutionTimeoutInSeconds": 2 * (300 + 2400 + 600),
        # Issue 35 item 1: a rollback brings the old fleet back one batch at a time (absent: 100 %).
        "RollbackMaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1},
    }
    preflight = the(t, "Custom::DeploymentPreflight")
    assert (preflight["InstancesNeeded"], preflight["UpdateInstances"]) == ("2", "1")


def test_alarms_and_dashboard_can_be_left_out(synthesized):
    t = synthesized["quiet"]
    for type_ in ("AWS::CloudWatch::Alarm", "AWS::SNS::Topic", "AWS::CloudWatch::Dashboard", "AWS::KMS::Key"):
        assert resources(t, type_) == {}, type_
    assert "DashboardUrl" not in t["Outputs"] and "AlarmTopicArn" not in t["Outputs"]
    config = the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]
    assert "AutoRollbackConfiguration" not in config and "BlueGreenUpdatePolicy" in config


def test_a_gpu_memory_threshold_below_the_engines_reservation_warns():
    app = build(engine_env='{"SM_VLLM_GPU_MEMORY_UTILIZATION": "0.96"}')
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp("GPU memory alarm would always fire"))
    Template.from_stack(stack).resource_count_is("AWS::CloudWatch::Alarm", 4)


def test_summary_prints_each_update_policy(synthesized):
    from llmops.summary import describe

    assert "  update policy: blue/green ALL_AT_ONCE, bake 300 s, rolled back by 3 alarm(s)" in describe(
        synthesized["default"]
    )
    assert "  update policy: blue/green CANARY by 1 instance(s), bake 300 s, rolled back by 3 alarm(s)" in describe(
        synthesized["canary-email"]
    )
    assert (
        "  update policy: rolling by 50 % of the copies (rollback by 50 % of the copies), bake 120 s, rolled back by "
        "4 alarm(s)"
    ) in describe(synthesized["component"])


def test_pools_and_enhanced_metrics_reach_the_dashboard_and_the_gpu_memory_alarm(synthesized):
    """Synthesized through the context keys (cdk-nag clean: the fixture's synth raises otherwise; cfn-lint above)."""
    t = synthesized["pools-enhanced"]
    alarms = resources(t, "AWS::CloudWatch::Alarm")
    (memory,) = [a for k, a in alarms.items() if "GpuMemory" in k]
    (query,) = memory["Metrics"]
    assert query["Expression"].startswith(
        'SELECT MAX(GPUMemoryUtilization) FROM SCHEMA("/aws/sagemaker/Endpoints", AcceleratorId, EndpointName, '
        "InstanceId, VariantName) WHERE EndpointName = '"
    )
    # The alarm rolls updates back like the others (its name in the endpoint's DeploymentConfig).
    config = the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]
    (memory_id,) = [k for k in alarms if "GpuMemory" in k]
    assert {"Ref": memory_id} in [a["AlarmName"] for a in config["AutoRollbackConfiguration"]["Alarms"]]
    body = json.dumps(the(t, "AWS::CloudWatch::Dashboard")["DashboardBody"])
    assert body.count("GROUP BY InstanceType") == 4  # invocations, latency, GPU memory, GPU use: a query per graph
    assert "GROUP BY InstanceId, AcceleratorId" in body
    default = json.dumps(the(synthesized["default"], "AWS::CloudWatch::Dashboard")["DashboardBody"])
    assert "InstanceType" not in default and "AcceleratorId" not in default


@pytest.mark.parametrize(("value", "threshold"), [("5", 0.05), ("100", 1.0), ("0.1", 0.001)])
def test_the_model_errors_key_adds_its_alarm_to_the_rollback_alarms(value, threshold):
    # The context text ("5") passes through the registry's parser to AlarmThresholds.model_errors_percent.
    app = build(alarm_model_errors_percent=value)
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    t = Template.from_stack(stack).to_json()
    (errors,) = [p for k, p in resources(t, "AWS::CloudWatch::Alarm").items() if "ModelErrors" in k]
    assert errors["MetricName"] == "InvocationModelErrors" and errors["Threshold"] == threshold
    config = the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]
    names = json.dumps(config["AutoRollbackConfiguration"]["Alarms"])
    assert "ModelErrors" in names


@pytest.mark.parametrize("value", ["0", "100.5", "-1"])
def test_the_model_errors_key_outside_its_range_fails_naming_it(value):
    with pytest.raises(
        Exception,
        match=rf"alarm_model_errors_percent='{re.escape(value)}': out of range; allowed: more than 0, at most 100",
    ):
        build(alarm_model_errors_percent=value)
