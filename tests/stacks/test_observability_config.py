"""Context keys of the dashboard, alarms and update policy (constructs_lib/deployment/observability.py through
constructs_lib/deployment/config.py)."""

from __future__ import annotations

import pytest

from constructs_lib.deployment.observability import thresholds_of, update_policy_of
from tests.stacks.test_config import load, problems_of


def test_defaults_are_alarms_dashboard_and_the_modes_policy():
    config = load()
    assert (config.alarms, config.dashboard, config.alarm_email) == (True, True, None)
    policy = update_policy_of(vars(config))
    assert (policy.kind, policy.step_size, policy.wait_s) == ("all-at-once", 1, 300)
    thresholds = thresholds_of(vars(config))
    assert (thresholds.errors_5xx_percent, thresholds.p99_latency_ms, thresholds.gpu_memory_percent) == (5, 30000, 95)
    assert thresholds.no_capacity is True
    component = load(deployment_mode="inference-component")
    assert update_policy_of(vars(component)).kind == "rolling"


def test_cli_text_values_parse_and_null_disables_an_alarm():
    config = load(
        instance_count="4",
        update_policy="linear",
        update_step_size="2",
        update_wait_s="60",
        update_termination_wait_s="120",
        update_timeout_s="7200",
        alarm_email="ops@example.com",
        alarm_5xx_percent="2.5",
        alarm_p99_latency_ms="null",
        alarm_no_capacity="false",
    )
    policy = update_policy_of(vars(config))
    assert (policy.kind, policy.step_size, policy.wait_s, policy.termination_wait_s) == ("linear", 2, 60, 120)
    assert policy.max_execution_timeout_s == 7200
    thresholds = thresholds_of(vars(config))
    assert thresholds.errors_5xx_percent == 2.5 and thresholds.p99_latency_ms is None
    assert thresholds.no_capacity is False and config.alarm_email == "ops@example.com"


def test_wrong_values_name_the_key_and_what_is_allowed():
    problems = "\n".join(
        problems_of(update_policy="blue", update_wait_s="7200", alarm_email="ops", alarm_gpu_memory_percent="120")
    )
    assert "update_policy='blue': not allowed; allowed: all-at-once, canary, linear, rolling, none" in problems
    assert "update_wait_s='7200': out of range; allowed: 0 to 3600" in problems
    assert "alarm_email='ops': expected an e-mail address to notify" in problems
    assert "alarm_gpu_memory_percent='120'" in problems


def test_policy_must_fit_the_mode_and_the_instances():
    (problem,) = problems_of(update_policy="rolling")
    # Rolling is an endpoint policy too (API RollingUpdatePolicy), with a batch of at most half the instances.
    assert "update_policy=rolling with update_step_size=1 needs at least 2 instances" in problem
    assert load(update_policy="rolling", instance_count="2").update_policy == "rolling"
    (problem,) = problems_of(update_policy="canary")
    assert "needs at least 2 instances" in problem and "instance_count is 1" in problem
    (problem,) = problems_of(deployment_mode="inference-component", update_policy="canary")
    assert "does not apply in inference-component mode; allowed: rolling, none" in problem
    assert load(update_policy="canary", instance_count="2").update_policy == "canary"


def test_alarm_email_needs_alarms():
    (problem,) = problems_of(alarms="false", alarm_email="ops@example.com")
    assert "alarm_email='ops@example.com': only with alarms=true" in problem


def test_the_issues_timeout_that_every_update_would_hit_is_refused_at_synth():
    """update_timeout_s=900 with a 300 s bake: the green fleet alone may take 2 x 1200 s to come up."""
    from constructs_lib.deployment.config import ConfigError, DeploymentConfig
    from tests.conftest import context_with

    with pytest.raises(
        ConfigError,
        match=r"update_timeout_s=900 must exceed what the update may wait \(all-at-once\): 1 x update_wait_s 300 "
        r"\+ download_timeout_s \+ startup_timeout_s 2400",
    ):
        DeploymentConfig.from_context(context_with(update_timeout_s="900"))
    DeploymentConfig.from_context(context_with(update_timeout_s="2701"))


def test_a_rolling_timeout_must_cover_every_batchs_new_copies_coming_up():
    """Four copies rolled one at a time: four batches, each provisioning a new copy (download + start-up, 2400 s)
    before its 300 s bake (InferenceComponentRollingUpdatePolicy: "For each step, SageMaker AI provisions capacity");
    counting the provisioning once (3,600 s) would accept a timeout every such update would hit."""
    from constructs_lib.deployment.config import ConfigError, DeploymentConfig
    from tests.conftest import context_with

    copies = {"deployment_mode": "inference-component", "initial_copies": "4", "max_copies": "4", "max_instances": "5"}
    with pytest.raises(
        ConfigError,
        match=r"update_timeout_s=3700 must exceed what the update may wait \(rolling\): 4 batches \(4 copies, "
        r"update_step_size 1\) x \(update_wait_s 300 \+ download_timeout_s \+ startup_timeout_s 2400 for each "
        r"batch's new copies\) "
        r"= 10800 s \(API "
        r"InferenceComponentRollingUpdatePolicy",
    ):
        DeploymentConfig.from_context(context_with(update_timeout_s="3700", **copies))
    DeploymentConfig.from_context(context_with(update_timeout_s="10801", **copies))
    # Without a timeout the derived one covers the same batches, with each instance's launch allowance on top.
    derived = update_policy_of(vars(DeploymentConfig.from_context(context_with(**copies))))
    assert derived.derived_timeout_s(instances=5, copies=4, provisioning_s=2400) > 10800


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {},
            r"capacity_reservation_arn: an update with update_policy=all-at-once runs 2 instances at once \(1 serving "
            r"\+ 1 new\).*set capacity_reservation_instances",
        ),
        (
            {"capacity_reservation_instances": "1"},
            r"capacity_reservation_instances=1: an update with "
            r"update_policy=all-at-once runs 2 instances",
        ),
        (
            {"instance_count": "2", "update_policy": "rolling", "capacity_reservation_instances": "2"},
            r"update_policy=rolling runs 3 instances at once \(2 serving \+ 1 new: the larger of a batch and a "
            r"rollback batch\)",
        ),
    ],
)
def test_a_reservation_that_cannot_hold_an_update_is_refused(settings, message):
    """Issue 28 item 2: capacity-reservations-only leaves a blue/green update no room beside the serving fleet."""
    from constructs_lib.deployment.config import ConfigError, DeploymentConfig
    from tests.conftest import context_with

    arn = "arn:aws:sagemaker:us-east-1:123456789012:ml-reservation/r1"
    with pytest.raises(ConfigError, match=message):
        DeploymentConfig.from_context(context_with(capacity_reservation_arn=arn, **settings))


@pytest.mark.parametrize(
    "settings",
    [
        {"capacity_reservation_instances": "2"},  # blue/green: both fleets
        {"instance_count": "2", "update_policy": "rolling", "capacity_reservation_instances": "3"},
    ],
)
def test_a_reservation_that_holds_the_update_is_accepted(settings):
    from constructs_lib.deployment.config import DeploymentConfig
    from tests.conftest import context_with

    arn = "arn:aws:sagemaker:us-east-1:123456789012:ml-reservation/r1"
    config = DeploymentConfig.from_context(context_with(capacity_reservation_arn=arn, **settings))
    assert config.capacity_reservation_instances == int(settings["capacity_reservation_instances"])


COMPONENT = {"deployment_mode": "inference-component"}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # The default component: one copy on a 1-GPU type, and a rolling batch of one copy beside it.
        (
            {},
            r"capacity_reservation_arn: the endpoint runs on reserved capacity only.*need 2 instances.*set "
            r"capacity_reservation_instances",
        ),
        (
            {"capacity_reservation_instances": "1"},
            r"capacity_reservation_instances=1: .*\(1 \+ 1\) x 1 GPU\(s\) per copy on 1-GPU instances need 2 "
            r"instances, so every update would wait for room until it times out",
        ),
        (
            {
                "instance_type": "ml.g6.12xlarge",
                "accelerators_per_copy": "2",
                "max_copies": "2",
                "capacity_reservation_instances": "1",
            },
            r"capacity_reservation_instances=1: .*\(2 \+ 1\) x 2 GPU\(s\) per copy on 4-GPU instances need 2",
        ),
        (
            {"max_copies": "3", "capacity_reservation_instances": "2"},
            r"capacity_reservation_instances=2: .*need 4 instances, so the copies could never all be placed",
        ),
    ],
)
def test_a_component_reservation_must_hold_every_copy_and_an_update_batch(settings, message):
    """The component default leaves room for a rolling batch in max_instances; on reserved capacity only
    (capacity-reservations-only, API CapacityReservationConfig) that room must be in the reservation, or a
    one-instance reservation brings back the update that waits until it times out."""
    from constructs_lib.deployment.config import ConfigError, DeploymentConfig
    from tests.conftest import context_with

    arn = "arn:aws:sagemaker:us-east-1:123456789012:ml-reservation/r1"
    with pytest.raises(ConfigError, match=message):
        DeploymentConfig.from_context(context_with(capacity_reservation_arn=arn, **COMPONENT, **settings))


def test_a_component_reservation_that_holds_the_batch_is_accepted():
    from constructs_lib.deployment.config import DeploymentConfig
    from tests.conftest import context_with

    arn = "arn:aws:sagemaker:us-east-1:123456789012:ml-reservation/r1"
    config = DeploymentConfig.from_context(
        context_with(capacity_reservation_arn=arn, capacity_reservation_instances="2", **COMPONENT)
    )
    assert config.capacity_reservation_instances == 2


def test_a_reservation_size_needs_a_reservation():
    from constructs_lib.deployment.config import ConfigError, DeploymentConfig
    from tests.conftest import context_with

    with pytest.raises(ConfigError, match=r"capacity_reservation_instances=2: only with capacity_reservation_arn"):
        DeploymentConfig.from_context(context_with(capacity_reservation_instances="2"))


def test_update_policy_none_is_a_policy_not_null():
    """`-c update_policy=none` chose the mode's default before: the optional parser read "none" as null."""
    assert load(update_policy="none").update_policy == "none"
    assert load(update_policy="null").update_policy is None
    assert load(deployment_mode="inference-component", update_policy="none").update_policy == "none"


def test_update_policy_none_synthesizes_without_a_deployment_config():
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from tests.conftest import build

    (stack,) = [c for c in build(update_policy="none").node.children if isinstance(c, cdk.Stack)]
    (endpoint,) = Template.from_stack(stack).find_resources("AWS::SageMaker::Endpoint").values()
    assert "DeploymentConfig" not in endpoint["Properties"]


def test_instance_pools_beside_a_capacity_reservation_are_refused():
    """capacity-reservations-only: "SageMaker AI launches instances only into an ML capacity reservation. If no
    capacity is available, the instances fail to launch" (API ProductionVariantCapacityReservationConfig): a fallback
    type has no reserved capacity, so it could never launch."""
    arn = "arn:aws:sagemaker:us-east-1:123456789012:ml-reservation/r1"
    problems = problems_of(
        capacity_reservation_arn=arn, capacity_reservation_instances="2", instance_pools='["ml.g6.2xlarge"]'
    )
    assert any(
        p.startswith("instance_pools=['ml.g6.2xlarge'] with capacity_reservation_arn:") and "not both" in p
        for p in problems
    ), problems


def test_the_constructs_refuse_pools_beside_a_reservation_too():
    import aws_cdk as cdk
    from aws_cdk import aws_s3 as s3

    from constructs_lib import GpuEndpoint, Refusal, S3ModelData
    from constructs_lib.inference_component import ComponentEndpoint

    arn = "arn:aws:sagemaker:us-east-1:123456789012:ml-reservation/r1"
    for build_one in (
        lambda stack, bucket: GpuEndpoint(
            stack,
            "E",
            model=S3ModelData(bucket, "m/"),
            instance_pools=["ml.g6.2xlarge"],
            capacity_reservation_arn=arn,
            capacity_reservation_instances=2,
        ),
        lambda stack, bucket: ComponentEndpoint(
            stack, "E", instance_pools=["ml.g6.2xlarge"], capacity_reservation_arn=arn, capacity_reservation_instances=2
        ),
    ):
        stack = cdk.Stack(cdk.App(), "T")
        with pytest.raises(Refusal, match=r"with capacity_reservation_arn: the variant launches only into"):
            build_one(stack, s3.Bucket.from_bucket_name(stack, "B", "model-bucket"))


def test_every_alarm_threshold_has_one_context_key_and_its_range():
    # thresholds_of reads the registry's threshold= fields: a field without a key could never be set from context,
    # and a key whose range is not the field's would accept what the construct refuses.
    import dataclasses

    from constructs_lib.deployment.context_keys import KEYS
    from constructs_lib.monitoring import THRESHOLD_RANGES, AlarmThresholds

    keyed = [key.threshold for key in KEYS if key.threshold]
    assert sorted(keyed) == sorted(f.name for f in dataclasses.fields(AlarmThresholds))
    for key in KEYS:
        if key.threshold in THRESHOLD_RANGES:
            low, high = THRESHOLD_RANGES[key.threshold]
            assert key.parse(str(high)) == high and key.parse(None) is None
            for outside in (low, high + 1):
                with pytest.raises(ValueError):
                    key.parse(str(outside))
