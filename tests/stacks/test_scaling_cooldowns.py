"""scale_in_cooldown_s / scale_out_cooldown_s: the target tracking policy's cooldowns, in both modes."""

from __future__ import annotations

import pytest

from tests.conftest import stack_template

POLICY = "AWS::ApplicationAutoScaling::ScalingPolicy"


def _target_tracking(template) -> list[dict]:
    return [
        p["Properties"]["TargetTrackingScalingPolicyConfiguration"]
        for p in template.find_resources(POLICY).values()
        if "TargetTrackingScalingPolicyConfiguration" in p["Properties"]
    ]


@pytest.mark.parametrize(
    "mode",
    [
        {"deployment_mode": "standard", "min_instances": 1, "max_instances": 3},
        {"deployment_mode": "inference-component", "instance_type": "ml.g6.12xlarge", "accelerators_per_copy": 1,
         "max_copies": 2, "max_instances": 3},
    ],
    ids=["standard", "inference-component"],
)  # fmt: skip
def test_the_cooldowns_reach_the_target_tracking_policy_as_given_text(mode):
    (policy,) = _target_tracking(stack_template(**mode, scale_in_cooldown_s="900", scale_out_cooldown_s="0"))
    assert policy["ScaleInCooldown"] == 900 and policy["ScaleOutCooldown"] == 0
    (default,) = _target_tracking(stack_template(**mode))
    assert "ScaleInCooldown" not in default and "ScaleOutCooldown" not in default  # Application Auto Scaling's 300 s


def test_cooldowns_where_nothing_autoscales_are_refused_naming_them():
    from constructs_lib.deployment import ConfigError, DeploymentConfig
    from tests.conftest import context_with

    with pytest.raises(ConfigError) as info:
        DeploymentConfig.from_context(context_with(scale_in_cooldown_s="60"))  # standard mode, a fixed count
    (problem,) = info.value.problems
    assert problem.startswith("scale_in_cooldown_s=60: only when the deployment autoscales")
    ic = {"deployment_mode": "inference-component", "instance_type": "ml.g6.12xlarge", "accelerators_per_copy": 1}
    with pytest.raises(ConfigError, match="scale_out_cooldown_s=5: only when"):
        DeploymentConfig.from_context(context_with(**ic, scale_out_cooldown_s="5"))  # one copy, no range
    DeploymentConfig.from_context(context_with(**ic, max_copies="2", max_instances="3", scale_out_cooldown_s="5"))
