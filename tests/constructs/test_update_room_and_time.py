"""Issue 35 items 1-5: what a rolling update and its rollback need in room and time, held against real AWS rules.

Sources: botocore sagemaker RollingUpdatePolicy / InferenceComponentRollingUpdatePolicy (RollbackMaximumBatchSize
absent: 100 %, the whole old fleet at once; MaximumExecutionTimeoutInSeconds 600-28800), the SageMaker guide
realtime-endpoints-heterogeneous (VariantInstanceProvisionTimeoutInSeconds: the total time across all pools).
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Annotations, Match

from constructs_lib.component_plan import resolve_scaling
from constructs_lib.update_policy import UpdatePolicy, reservation_problems
from tests.conftest import stack_template

ARN = "arn:aws:sagemaker:us-east-1:123456789012:ml-reservation/r1"


def _config_error(**context: str) -> str:
    from constructs_lib.deployment.config import ConfigError, DeploymentConfig
    from tests.conftest import context_with

    with pytest.raises(ConfigError) as raised:
        DeploymentConfig.from_context(context_with(**context))
    return str(raised.value)


def _the(template, type_: str) -> dict:
    (resource,) = template.find_resources(type_).values()
    return resource["Properties"]


# --- item 1: a rollback needs room too -------------------------------------------------------------------------


def test_rolling_endpoint_rolls_back_one_batch_at_a_time():
    # RollbackMaximumBatchSize absent: "100% of total capacity" (botocore RollingUpdatePolicy).
    config = UpdatePolicy("rolling", step_size=3).endpoint_deployment_config([])
    back = config.rolling_update_policy.rollback_maximum_batch_size
    assert (back.type, back.value) == ("INSTANCE_COUNT", 3)
    own = UpdatePolicy("rolling", step_size=3, rollback_step_size=2).endpoint_deployment_config([])
    assert own.rolling_update_policy.rollback_maximum_batch_size.value == 2


def test_rolling_component_rolls_back_one_batch_at_a_time():
    # absent: "100% of the total capacity", blue/green (botocore InferenceComponentRollingUpdatePolicy).
    config = UpdatePolicy("rolling", step_size=3).component_deployment_config([])
    back = config.rolling_update_policy.rollback_maximum_batch_size
    assert (back.type, back.value) == ("COPY_COUNT", 3)


def test_a_rollback_batch_larger_than_the_update_batch_is_what_the_room_counts():
    assert UpdatePolicy("rolling", step_size=3).extra_instances_during_update(7) == 3
    assert UpdatePolicy("rolling", step_size=3, rollback_step_size=4).extra_instances_during_update(7) == 4
    assert UpdatePolicy("rolling", step_size=2, rollback_step_size=3).extra_instances_for_component_update() == 3
    # A blue/green rollback shifts traffic back to the blue fleet, still there: the green fleet only.
    assert UpdatePolicy("all-at-once").extra_instances_during_update(7) == 7


@pytest.mark.parametrize(("reserved", "ok"), [(9, False), (10, True)])
def test_a_reservation_holds_7_instances_and_a_batch_of_3_for_the_update_and_its_rollback(reserved, ok):
    policy = UpdatePolicy("rolling", step_size=3)
    problems = reservation_problems(policy, fleet=7, reservation_instances=reserved)
    assert (problems == []) is ok
    if not ok:
        assert (
            "runs 10 instances at once (7 serving + 3 new: the larger of a batch and a rollback batch)" in (problems[0])
        )
    bigger_rollback = UpdatePolicy("rolling", step_size=3, rollback_step_size=4)
    assert reservation_problems(bigger_rollback, fleet=7, reservation_instances=10)  # 11 needed
    assert reservation_problems(bigger_rollback, fleet=7, reservation_instances=11) == []


def test_a_reserved_rolling_stack_sets_the_rollback_batch_and_the_quota_counts_it():
    t = stack_template(
        instance_count="7",
        update_policy="rolling",
        update_step_size="3",
        capacity_reservation_arn=ARN,
        capacity_reservation_instances="10",
    )
    rolling = _the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]["RollingUpdatePolicy"]
    assert rolling["MaximumBatchSize"] == rolling["RollbackMaximumBatchSize"] == {"Type": "INSTANCE_COUNT", "Value": 3}
    preflight = _the(t, "Custom::DeploymentPreflight")
    assert (preflight["InstancesNeeded"], preflight["UpdateInstances"]) == ("7", "3")
    assert "runs 10 instances at once" in _config_error(
        instance_count="7",
        update_policy="rolling",
        update_step_size="3",
        capacity_reservation_arn=ARN,
        capacity_reservation_instances="9",
    )


def test_rollback_step_size_below_one_is_refused():
    assert UpdatePolicy("rolling", rollback_step_size=0).problems(component_mode=False, instances=2) == [
        "rollback_step_size=0: at least 1"
    ]


# --- item 2: an update starts at the autoscaled count ------------------------------------------------------------


def test_the_rolling_timeout_counts_the_autoscaled_maximum_not_instance_count():
    """instance_count=2 max_instances=10: 10 batches x (300 + 2400 + 600) = 33000 s, past the API's 28800, so
    28800 (before: 2 batches, 6600 s, where 10 batches need 27000 s)."""
    t = stack_template(instance_count="2", max_instances="10", update_policy="rolling")
    rolling = _the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]["RollingUpdatePolicy"]
    assert rolling["MaximumExecutionTimeoutInSeconds"] == 28800


@pytest.mark.integration  # several synths (10-16 s): make test-integration, which CI runs
def test_seven_to_ten_instances_at_three_per_batch_time_four_batches():
    t = stack_template(instance_count="7", max_instances="10", update_policy="rolling", update_step_size="3")
    rolling = _the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]["RollingUpdatePolicy"]
    assert rolling["MaximumExecutionTimeoutInSeconds"] == 4 * (300 + 2400 + 600)  # ceil(10 / 3); 3 at 7


def test_an_update_timeout_shorter_than_the_autoscaled_maximum_needs_is_refused():
    message = _config_error(instance_count="2", max_instances="10", update_policy="rolling", update_timeout_s="7000")
    assert "10 batches (10 instances, the most an update starts at, update_step_size 1)" in message
    assert "= 27000 s" in message and "allowed: more than 27000" in message


@pytest.mark.parametrize(("most", "refused"), [(10, False), (11, True)])
def test_a_rolling_update_the_api_maximum_cannot_cover_is_refused_naming_the_keys(most, refused):
    # MaximumExecutionTimeoutInSeconds: at most 28800 (botocore sagemaker). 11 x 2700 = 29700; 10 x 2700 = 27000.
    context = {"instance_count": "2", "max_instances": str(most), "update_policy": "rolling"}
    if not refused:
        stack_template(**context)
        return
    message = _config_error(**context)
    assert "cannot finish within MaximumExecutionTimeoutInSeconds' maximum of 28800 s" in message
    for key in ("update_step_size", "update_wait_s", "download_timeout_s", "startup_timeout_s", "max_instances"):
        assert key in message


def test_the_api_maximum_itself_is_not_enough_when_the_need_equals_it():
    """The timeout must exceed the need: 12 batches x 2400 s = 28800 s is refused, 12 x 2399 is not."""
    policy = UpdatePolicy("rolling", wait_s=0)
    (problem,) = policy.problems(component_mode=False, instances=2, most_instances=12, provisioning_s=2400)
    assert "cannot finish within" in problem and "= 28800 s" in problem
    assert policy.problems(component_mode=False, instances=2, most_instances=12, provisioning_s=2399) == []


# --- item 3: instance_count alone does not autoscale -------------------------------------------------------------


def test_instance_count_two_alone_does_not_autoscale():
    plan = resolve_scaling(initial_instances=2)
    assert (plan.min_instances, plan.max_instances, plan.scales_instances) == (2, 2, False)
    t = stack_template(instance_count="2")
    t.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 0)


def test_a_larger_max_instances_scales_down_to_instance_count_not_one():
    t = stack_template(instance_count="3", max_instances="7")
    t.has_resource_properties("AWS::ApplicationAutoScaling::ScalableTarget", {"MinCapacity": 3, "MaxCapacity": 7})
    assert resolve_scaling(initial_instances=3, max_instances=7, min_instances=1).min_instances == 1  # asked for


# --- item 4: provision_timeout_s is a total, counted once per new capacity ---------------------------------------


@pytest.mark.parametrize(
    ("terms", "needed"),
    [
        ({"wait_s": 300}, 2 * 300),  # the bake alone
        ({"wait_s": 0, "provisioning_s": 2400}, 2 * 2400),  # download + start-up alone
        ({"wait_s": 0, "provision_s": 600}, 2 * 600),  # provisioning alone
        ({"wait_s": 300, "provisioning_s": 2400, "provision_s": 600}, 2 * 3300),
    ],
)
def test_each_term_of_a_rolling_need_counts_once_per_batch(terms, needed):
    terms = dict(terms)  # the parameter is shared by every run of the test in one process (mutmut runs it twice)
    wait = terms.pop("wait_s")
    # 3 instances at 2 per batch: ceil(3 / 2) = 2 batches.
    assert UpdatePolicy("rolling", step_size=2, wait_s=wait).needed_s(instances=3, **terms) == needed


@pytest.mark.parametrize(
    ("terms", "needed"),
    [({"wait_s": 300}, 300), ({"wait_s": 0, "provisioning_s": 2400}, 2400), ({"wait_s": 0, "provision_s": 600}, 600)],
)
def test_each_term_of_a_blue_green_need_counts_once(terms, needed):
    terms = dict(terms)  # the parameter is shared by every run of the test in one process (mutmut runs it twice)
    wait = terms.pop("wait_s")
    assert UpdatePolicy("all-at-once", wait_s=wait).needed_s(instances=7, **terms) == needed


def test_provision_timeout_enters_the_derived_rolling_timeout():
    t = stack_template(instance_count="2", update_policy="rolling", provision_timeout_s="900")
    rolling = _the(t, "AWS::SageMaker::Endpoint")["DeploymentConfig"]["RollingUpdatePolicy"]
    assert rolling["MaximumExecutionTimeoutInSeconds"] == 2 * (300 + 2400 + 900 + 600)


def test_provision_timeout_enters_the_update_timeout_rule():
    """Blue/green: 300 s bake + 2400 s download and start-up = 2700 s; with provision_timeout_s 300, 3000 s."""
    stack_template(update_timeout_s="2701")
    message = _config_error(update_timeout_s="2701", provision_timeout_s="300")
    assert "provision_timeout_s 300 + download_timeout_s + startup_timeout_s 2400" in message
    assert "= 3000 s" in message


def test_a_component_update_timeout_counts_its_endpoints_provision_timeout():
    from aws_cdk import aws_s3 as s3

    from constructs_lib import ComponentEndpoint, S3ModelData

    def timeout(**endpoint_props):
        stack = cdk.Stack(cdk.App(), "Test")
        bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
        endpoint = ComponentEndpoint(stack, "Endpoint", **endpoint_props)
        component = endpoint.add_component("Chat", model=S3ModelData(bucket, "m/"), initial_copies=3, max_copies=3)
        component.apply_update_policy(UpdatePolicy("rolling", step_size=2))
        (ic,) = (
            r["Properties"]
            for r in cdk.assertions.Template.from_stack(stack).to_json()["Resources"].values()
            if r["Type"] == "AWS::SageMaker::InferenceComponent"
        )
        return ic["DeploymentConfig"]["RollingUpdatePolicy"]["MaximumExecutionTimeoutInSeconds"]

    # 3 copies at 2 per batch: 2 batches.
    assert timeout() == 2 * (300 + 2400 + 600)
    assert timeout(provision_timeout=cdk.Duration.seconds(500)) == 2 * (300 + 2400 + 500 + 600)


# --- item 5: a one-copy component's default batch ----------------------------------------------------------------


def test_a_one_copy_component_stack_warns_only_when_rolling_by_copies_is_asked_for():
    from tests.conftest import build

    def stack(**context):
        app = build(deployment_mode="inference-component", revision="0" * 40, **context)
        (s,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
        return s

    Annotations.from_stack(stack()).has_no_warning("*", Match.any_value())
    asked = stack(update_policy="rolling")
    Annotations.from_stack(asked).has_warning("*", Match.string_like_regexp("100 % of its copies"))
    t = cdk.assertions.Template.from_stack(asked)
    rolling = _the(t, "AWS::SageMaker::InferenceComponent")["DeploymentConfig"]["RollingUpdatePolicy"]
    assert rolling["MaximumBatchSize"] == {"Type": "COPY_COUNT", "Value": 1}


def test_a_two_copy_component_keeps_a_batch_of_one_copy():
    t = stack_template(deployment_mode="inference-component", initial_copies="2", max_copies="2", max_instances="3")
    rolling = _the(t, "AWS::SageMaker::InferenceComponent")["DeploymentConfig"]["RollingUpdatePolicy"]
    assert rolling["MaximumBatchSize"] == rolling["RollbackMaximumBatchSize"] == {"Type": "COPY_COUNT", "Value": 1}


@pytest.mark.parametrize(("percent", "ok"), [(4, False), (5, True), (50, True), (51, False)])
def test_a_batch_percent_is_5_to_50(percent, ok):
    problems = UpdatePolicy("rolling", step_percent=percent).problems(component_mode=True, instances=0, copies=1)
    assert (problems == []) is ok


@pytest.mark.parametrize(
    ("instances", "step", "allowed"),
    [
        (10, 6, "1 to 5 instance(s)"),  # 10 % is exactly 1
        (20, 1, "2 to 10 instance(s)"),  # 10 % of 20: 2, one step below refused
        (3, 2, "1 to 1 instance(s)"),  # 0.3 rounds up to 1 and 1.5 down to 1: one size left
        (25, 13, "3 to 12 instance(s)"),  # 2.5 up to 3, 12.5 down to 12
        (1, 1, "none (at least 2 instances are needed)"),  # 0.1 to 0.5: no whole step
    ],
)
def test_a_linear_step_outside_10_to_50_percent_names_the_whole_steps_allowed(instances, step, allowed):
    (problem,) = UpdatePolicy("linear", step_size=step).problems(component_mode=False, instances=instances)
    assert problem == (
        f"update_policy=linear with update_step_size={step}: a linear step is 10-50% of the instance count "
        f"({instances}); allowed here: {allowed}"
    )


def test_a_components_rolling_time_counts_its_copies_not_the_endpoints_instances():
    # 10 copies one at a time on 1 instance: 10 batches x (3600 + 600) = 42,000 s, over the 28,800 s maximum.
    (problem,) = UpdatePolicy("rolling", step_size=1, wait_s=3600).problems(
        component_mode=True, instances=1, copies=10, provisioning_s=600
    )
    assert (
        "10 batches (10 copies, update_step_size 1) x (update_wait_s 3600 + download_timeout_s + startup_timeout_s "
        "600 for each batch's new copies) = 42000 s (API InferenceComponentRollingUpdatePolicy" in problem
    )
