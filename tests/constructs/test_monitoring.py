"""Alarms, alarm topic, dashboard and update policies of GpuEndpoint, ComponentEndpoint and InferenceComponent."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template

from constructs_lib import ComponentEndpoint, GpuEndpoint, S3ModelData
from constructs_lib.monitoring import AlarmThresholds, AlarmTopic
from constructs_lib.update_policy import UpdatePolicy

COPIES = "/aws/sagemaker/InferenceComponents"


def gpu_endpoint(**props):
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "models/org--m/abc"), **props)
    return stack, endpoint


def component_endpoint(endpoint_props: dict | None = None, **component_props):
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", **(endpoint_props or {}))
    component = endpoint.add_component("Chat", model=S3ModelData(bucket, "models/org--m/abc"), **component_props)
    return stack, endpoint, component


def of_type(t: dict, type_: str) -> dict[str, dict]:
    return {k: r["Properties"] for k, r in t["Resources"].items() if r["Type"] == type_}


def alarms_by_id(t: dict) -> dict[str, dict]:
    """Alarm properties by the construct id before the hash (``...Alarms<Id><hash>``)."""
    result = {}
    for logical, props in of_type(t, "AWS::CloudWatch::Alarm").items():
        for name in ("Errors5xx", "LatencyP99", "GpuMemory", "NoCapacity"):
            if f"Alarms{name}" in logical:
                result[name] = props
    return result


def dashboard_body(t: dict) -> dict:
    """The dashboard JSON with every token replaced by ``TOKEN``."""
    (props,) = of_type(t, "AWS::CloudWatch::Dashboard").values()
    body = props["DashboardBody"]
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    return json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in parts))


def stat_of(metric: list) -> str:
    """A graph metric's statistic; CDK leaves out the default (Average)."""
    return (metric[-1] if isinstance(metric[-1], dict) else {}).get("stat", "Average")


def widget_metrics(body: dict) -> list[list]:
    return [m for w in body["widgets"] if w["type"] == "metric" for m in w["properties"]["metrics"]]


# --- alarms ---


def test_endpoint_alarms_watch_the_documented_metrics_with_literal_dimensions():
    stack, endpoint = gpu_endpoint(instance_type="ml.g6.12xlarge")
    endpoint.add_alarms()
    t = Template.from_stack(stack).to_json()
    alarms = alarms_by_id(t)
    assert set(alarms) == {"Errors5xx", "LatencyP99", "GpuMemory", "NoCapacity"}
    dims = [{"Name": "EndpointName", "Value": endpoint.monitored_name}, {"Name": "VariantName", "Value": "AllTraffic"}]

    errors = alarms["Errors5xx"]
    assert (errors["Namespace"], errors["MetricName"], errors["Statistic"]) == (
        "AWS/SageMaker",
        "Invocation5XXErrors",
        "Average",
    )
    assert errors["Dimensions"] == dims
    assert (errors["Threshold"], errors["EvaluationPeriods"], errors["DatapointsToAlarm"]) == (0.05, 3, 2)
    assert errors["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert errors["TreatMissingData"] == "notBreaching"

    latency = alarms["LatencyP99"]
    assert (latency["MetricName"], latency["ExtendedStatistic"], latency["Threshold"]) == (
        "ModelLatency",
        "p99",
        30_000_000,  # microseconds
    )
    assert latency["Dimensions"] == dims

    memory = alarms["GpuMemory"]
    expression, raw = memory["Metrics"]
    assert expression["Expression"] == "m / 4"  # GPUMemoryUtilization is 0-100 x 4 GPUs on ml.g6.12xlarge
    assert raw["MetricStat"]["Metric"] == {
        "Dimensions": dims,
        "MetricName": "GPUMemoryUtilization",
        "Namespace": "/aws/sagemaker/Endpoints",
    }
    assert raw["MetricStat"]["Stat"] == "Maximum" and memory["Threshold"] == 95

    capacity = alarms["NoCapacity"]
    assert (capacity["Namespace"], capacity["MetricName"], capacity["Statistic"]) == (
        "/aws/sagemaker/Endpoints",
        "CPUUtilization",
        "SampleCount",
    )
    assert capacity["ComparisonOperator"] == "LessThanThreshold" and capacity["Threshold"] == 1
    assert capacity["TreatMissingData"] == "breaching"  # no instance reports nothing at all
    for props in alarms.values():
        assert "AlarmActions" not in props  # no topic given


def test_the_instances_reporting_alarm_waits_for_the_endpoint_and_goes_first():
    """Issue 28 item 5: missing data is breaching for it (no instance reports nothing), so it must not exist while
    the endpoint has no instances yet (create) or any more (delete): it depends on the endpoint, or on what is
    given as ``serving``, and rolls nothing back (the endpoint's DeploymentConfig cannot name it)."""
    stack, endpoint = gpu_endpoint()
    endpoint.add_alarms()
    endpoint.apply_update_policy(UpdatePolicy("all-at-once"))
    t = Template.from_stack(stack).to_json()
    alarms = {k: r for k, r in t["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    (no_capacity,) = [k for k in alarms if "NoCapacity" in k]
    (endpoint_id,) = [k for k, r in t["Resources"].items() if r["Type"] == "AWS::SageMaker::Endpoint"]
    assert endpoint_id in alarms[no_capacity]["DependsOn"]
    assert all(endpoint_id not in r.get("DependsOn", []) for k, r in alarms.items() if k != no_capacity)
    rollback = [a["AlarmName"]["Ref"] for a in endpoint_config(t)["AutoRollbackConfiguration"]["Alarms"]]
    assert no_capacity not in rollback and len(rollback) == 3

    stack, endpoint = gpu_endpoint()
    serving = cdk.CfnWaitConditionHandle(stack, "Serving")
    endpoint.add_alarms(serving=serving)
    t = Template.from_stack(stack).to_json()
    (props,) = [r for k, r in t["Resources"].items() if "NoCapacity" in k and r["Type"] == "AWS::CloudWatch::Alarm"]
    assert props["DependsOn"] == ["Serving"]


def test_thresholds_change_and_disable_each_alarm():
    stack, endpoint = gpu_endpoint()
    endpoint.add_alarms(
        AlarmThresholds(errors_5xx_percent=1, p99_latency_ms=None, gpu_memory_percent=99, no_capacity=False)
    )
    alarms = alarms_by_id(Template.from_stack(stack).to_json())
    assert set(alarms) == {"Errors5xx", "GpuMemory"}
    assert alarms["Errors5xx"]["Threshold"] == 0.01 and alarms["GpuMemory"]["Threshold"] == 99


def test_bad_thresholds_fail_synth_naming_each_field_of_the_library():
    # The library's own field names (AlarmThresholds'), not the app's context keys (alarm_5xx_percent ...).
    _, endpoint = gpu_endpoint()
    with pytest.raises(ValueError, match=r"(?s)errors_5xx_percent=150: .*p99_latency_ms=0: ") as raised:
        endpoint.add_alarms(AlarmThresholds(errors_5xx_percent=150, p99_latency_ms=0))
    assert "alarm_" not in str(raised.value)


@pytest.mark.parametrize(
    ("field", "low", "high"),
    [
        ("errors_5xx_percent", 0, 100),
        ("p99_latency_ms", 0, 3_600_000),
        ("gpu_memory_percent", 0, 100),
        ("model_errors_percent", 0, 100),
    ],
)
def test_each_threshold_at_its_edges(field, low, high):
    # More than the floor, at most the ceiling: the floor and one step above the ceiling are refused.
    assert AlarmThresholds(**{field: high}).problems() == []
    assert AlarmThresholds(**{field: low + 0.001}).problems() == []
    assert AlarmThresholds(**{field: low}).problems() == [f"{field}={low}: allowed more than {low}, at most {high}"]
    assert AlarmThresholds(**{field: high + 1}).problems()[0].startswith(f"{field}={high + 1}: ")


def test_alarms_notify_the_topic_on_alarm_and_ok():
    stack, endpoint = gpu_endpoint()
    topic = AlarmTopic(stack, "Topic")
    endpoint.add_alarms(topic=topic.topic)
    t = Template.from_stack(stack).to_json()
    (topic_id,) = of_type(t, "AWS::SNS::Topic")
    for props in alarms_by_id(t).values():
        assert props["AlarmActions"] == [{"Ref": topic_id}] and props["OKActions"] == [{"Ref": topic_id}]


def test_component_alarms_use_the_component_dimension_and_drop_no_capacity_with_scale_to_zero():
    stack, endpoint, component = component_endpoint()
    endpoint.add_alarms()
    alarms = alarms_by_id(Template.from_stack(stack).to_json())
    dims = [{"Name": "InferenceComponentName", "Value": component.inference_component_name}]
    assert {k: a.get("Dimensions") for k, a in alarms.items()} == dict.fromkeys(alarms, dims)
    assert alarms["GpuMemory"]["Namespace"] == "/aws/sagemaker/InferenceComponents"
    assert alarms["GpuMemory"]["MetricName"] == "GPUMemoryUtilizationNormalized"
    assert alarms["NoCapacity"]["MetricName"] == "NoCapacityInvocationFailures"
    assert alarms["NoCapacity"]["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert endpoint.alarms == component.alarms and len(component.alarms) == 4

    stack, endpoint, _ = component_endpoint({"scale_to_zero": True})
    endpoint.add_alarms()
    # With scale-to-zero, a request that finds no copy is how the component wakes: not an alarm.
    assert set(alarms_by_id(Template.from_stack(stack).to_json())) == {"Errors5xx", "LatencyP99", "GpuMemory"}


def test_alarms_are_added_once():
    _, endpoint = gpu_endpoint()
    endpoint.add_alarms()
    with pytest.raises(ValueError, match="add_alarms was already called"):
        endpoint.add_alarms()


# --- topic ---


def test_topic_is_encrypted_with_a_rotated_key_cloudwatch_may_use_and_ssl_only_with_email():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    AlarmTopic(stack, "Topic", email="ops@example.com")
    t = Template.from_stack(stack)
    t.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    t.has_resource_properties(
        "AWS::KMS::Key",
        {
            "KeyPolicy": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                            }
                        )
                    ]
                )
            }
        },
    )
    t.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})
    t.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            }
        },
    )
    t.has_resource_properties("AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"})


def test_topic_policy_lets_this_accounts_alarms_publish():
    """The enforce_ssl topic policy replaces SNS's default one; CloudWatch then needs its own Allow."""
    app = cdk.App()
    stack = cdk.Stack(app, "Test", env=cdk.Environment(account="111122223333", region="us-east-1"))
    AlarmTopic(stack, "Topic")
    t = Template.from_stack(stack).to_json()
    (policy,) = of_type(t, "AWS::SNS::TopicPolicy").values()
    allows = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert allows == [
        {
            "Sid": "AllowPublishFromThisAccountsAlarms",
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": "sns:Publish",
            "Resource": {"Ref": next(k for k in t["Resources"] if t["Resources"][k]["Type"] == "AWS::SNS::Topic")},
            "Condition": {
                "ArnLike": {
                    "aws:SourceArn": {
                        "Fn::Join": [
                            "",
                            ["arn:", {"Ref": "AWS::Partition"}, ":cloudwatch:us-east-1:111122223333:alarm:*"],
                        ]
                    }
                },
                "StringEquals": {"aws:SourceAccount": "111122223333"},
            },
        }
    ]


def test_topic_without_email_has_no_subscription():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    AlarmTopic(stack, "Topic")
    Template.from_stack(stack).resource_count_is("AWS::SNS::Subscription", 0)


# --- dashboard ---


def test_endpoint_dashboard_widgets_name_the_documented_metrics():
    stack, endpoint = gpu_endpoint()
    endpoint.add_alarms()
    endpoint.add_dashboard()
    t = Template.from_stack(stack).to_json()
    body = dashboard_body(t)
    metrics = widget_metrics(body)
    name = endpoint.monitored_name
    variant = ["EndpointName", name, "VariantName", "AllTraffic"]
    for namespace, metric, stat in [
        ("AWS/SageMaker", "Invocations", "Sum"),
        ("AWS/SageMaker", "Invocation4XXErrors", "Sum"),
        ("AWS/SageMaker", "Invocation5XXErrors", "Sum"),
        ("AWS/SageMaker", "InvocationModelErrors", "Sum"),
        ("AWS/SageMaker", "ModelLatency", "p50"),
        ("AWS/SageMaker", "ModelLatency", "p99"),
        ("AWS/SageMaker", "OverheadLatency", "p50"),
        ("AWS/SageMaker", "OverheadLatency", "p99"),
        ("/aws/sagemaker/Endpoints", "GPUUtilization", "Average"),
        ("/aws/sagemaker/Endpoints", "GPUMemoryUtilization", "Average"),
        ("/aws/sagemaker/Endpoints", "CPUUtilization", "Average"),
        ("/aws/sagemaker/Endpoints", "MemoryUtilization", "Average"),
        ("/aws/sagemaker/Endpoints", "DiskUtilization", "Average"),
        ("/aws/sagemaker/Endpoints", "CPUUtilization", "SampleCount"),
    ]:
        found = [m for m in metrics if m[:2] == [namespace, metric] and m[2:6] == variant and stat_of(m) == stat]
        assert found, (namespace, metric, stat)
    alarm_widgets = [w for w in body["widgets"] if w["type"] == "alarm"]
    assert len(alarm_widgets[0]["properties"]["alarms"]) == 4
    url = stack.resolve(endpoint.dashboard_url)
    assert "#dashboards/dashboard/" in json.dumps(url)


def test_dashboard_shows_the_last_smoke_figures():
    from constructs_lib import EndpointSmokeTest

    stack, endpoint = gpu_endpoint()
    smoke = EndpointSmokeTest.for_endpoint(stack, "Smoke", endpoint)
    endpoint.add_dashboard(smoke_test=smoke, scope=stack)
    t = Template.from_stack(stack).to_json()
    (props,) = of_type(t, "AWS::CloudWatch::Dashboard").values()
    parts = props["DashboardBody"]["Fn::Join"][1]
    attributes = {p["Fn::GetAtt"][1] for p in parts if isinstance(p, dict) and "Fn::GetAtt" in p}
    assert {"TimeToFirstTokenMs", "LatencyMs"} <= attributes
    assert "Time to first token" in "".join(p for p in parts if isinstance(p, str))


def test_component_dashboard_has_endpoint_and_component_widgets():
    stack, endpoint, component = component_endpoint()
    endpoint.add_dashboard()
    metrics = widget_metrics(dashboard_body(Template.from_stack(stack).to_json()))
    name = component.inference_component_name
    by_component = {(m[0], m[1], stat_of(m)) for m in metrics if m[2:4] == ["InferenceComponentName", name]}
    assert {
        ("AWS/SageMaker", "Invocations", "Sum"),
        ("AWS/SageMaker", "Invocation5XXErrors", "Sum"),
        ("AWS/SageMaker", "NoCapacityInvocationFailures", "Sum"),
        ("AWS/SageMaker", "ModelLatency", "p99"),
        ("/aws/sagemaker/InferenceComponents", "GPUUtilizationNormalized", "Average"),
        ("/aws/sagemaker/InferenceComponents", "GPUMemoryUtilizationNormalized", "Average"),
        ("/aws/sagemaker/InferenceComponents", "CPUUtilizationNormalized", "SampleCount"),  # copies
    } <= by_component
    by_endpoint = {m[1] for m in metrics if m[2] == "EndpointName"}
    assert {"GPUUtilizationNormalized", "GPUMemoryUtilizationNormalized", "GPUReservation", "DiskUtilization"} <= (
        by_endpoint
    )


def test_metric_helpers():
    stack, endpoint = gpu_endpoint()
    for metric, namespace, name, statistic in [
        (endpoint.metric_invocation_4xx_errors(), "AWS/SageMaker", "Invocation4XXErrors", "Sum"),
        (endpoint.metric_invocation_model_errors(), "AWS/SageMaker", "InvocationModelErrors", "Sum"),
        (endpoint.metric_overhead_latency(), "AWS/SageMaker", "OverheadLatency", "p90"),
        (endpoint.metric_cpu_utilization(), "/aws/sagemaker/Endpoints", "CPUUtilization", "Average"),
        (endpoint.metric_disk_utilization(), "/aws/sagemaker/Endpoints", "DiskUtilization", "Average"),
        (endpoint.metric_instance_count(), "/aws/sagemaker/Endpoints", "CPUUtilization", "SampleCount"),
    ]:
        assert (metric.namespace, metric.metric_name, metric.statistic) == (namespace, name, statistic)
        assert stack.resolve(metric.dimensions)["EndpointName"]["Fn::GetAtt"][1] == "EndpointName"
    _, cendpoint, component = component_endpoint()
    for metric, namespace, name, statistic in [
        (component.metric_gpu_memory_utilization(), COPIES, "GPUMemoryUtilizationNormalized", "Average"),
        (component.metric_copy_count(), COPIES, "CPUUtilizationNormalized", "SampleCount"),
        (component.metric_invocation_5xx_errors(), "AWS/SageMaker", "Invocation5XXErrors", "Sum"),
        (cendpoint.metric_gpu_reservation(), "/aws/sagemaker/Endpoints", "GPUReservation", "Average"),
    ]:
        assert (metric.namespace, metric.metric_name, metric.statistic) == (namespace, name, statistic)


# --- update policies ---


def endpoint_config(t: dict) -> dict | None:
    (props,) = of_type(t, "AWS::SageMaker::Endpoint").values()
    return props.get("DeploymentConfig")


@pytest.mark.parametrize(
    ("policy", "instances", "traffic"),
    [
        (UpdatePolicy("all-at-once", wait_s=600), 1, {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 600}),
        (
            UpdatePolicy("canary", step_size=1),
            2,
            {"Type": "CANARY", "WaitIntervalInSeconds": 300, "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 1}},
        ),
        (
            UpdatePolicy("linear", step_size=2),
            4,
            {"Type": "LINEAR", "WaitIntervalInSeconds": 300, "LinearStepSize": {"Type": "INSTANCE_COUNT", "Value": 2}},
        ),
    ],
)
def test_blue_green_policies_roll_back_on_the_alarms(policy, instances, traffic):
    stack, endpoint = gpu_endpoint(instance_count=instances)
    alarms = endpoint.add_alarms()
    endpoint.apply_update_policy(policy)
    t = Template.from_stack(stack).to_json()
    config = endpoint_config(t)
    assert config["BlueGreenUpdatePolicy"] == {"TrafficRoutingConfiguration": traffic}
    names = [a["AlarmName"]["Ref"] for a in config["AutoRollbackConfiguration"]["Alarms"]]
    # Every alarm but NoCapacity, which waits for the endpoint (issue 28 item 5).
    assert len(alarms) == 4 and len(names) == 3 and all("Alarms" in n and "NoCapacity" not in n for n in names)
    # SageMaker reads the alarms as the execution role (deployment-guardrails-configuration).
    Template.from_stack(stack).has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Action": "cloudwatch:DescribeAlarms", "Resource": Match.any_value()})]
                )
            }
        },
    )


@pytest.mark.parametrize(
    ("policy", "min_capacity", "max_capacity", "warns"),
    [
        (UpdatePolicy("canary", step_size=1), 1, 4, True),  # may be at 1 instance: a canary of 1 is all of it
        (UpdatePolicy("canary", step_size=1), 2, 4, False),
        (UpdatePolicy("linear", step_size=1), 2, 20, True),  # at 20 instances a step of 1 is 5 %
        (UpdatePolicy("linear", step_size=1), 2, 4, False),
        (UpdatePolicy("all-at-once"), 1, 4, False),
        (UpdatePolicy("rolling", step_size=1), 1, 4, True),  # at 1 instance a batch of 1 is all of it
        (UpdatePolicy("rolling", step_size=1), 2, 4, False),
    ],
)
def test_canary_and_linear_steps_are_checked_against_the_autoscaled_range(policy, min_capacity, max_capacity, warns):
    # instance_count=2 passes the synth check; the autoscaled count at update time may not.
    stack, endpoint = gpu_endpoint(instance_count=2)
    endpoint.autoscale_instances(min_capacity=min_capacity, max_capacity=max_capacity)
    endpoint.apply_update_policy(policy)
    annotations = Annotations.from_stack(stack)
    message = Match.string_like_regexp("autoscaling may leave the variant")
    if warns:
        annotations.has_warning("/Test/Endpoint", message)
    else:
        annotations.has_no_warning("*", message)


def test_blue_green_timeouts_and_termination_wait():
    stack, endpoint = gpu_endpoint()
    # 300 s bake + 900 s termination wait + 2 x 1200 s for the green fleet to download and start: 3600 s.
    endpoint.apply_update_policy(UpdatePolicy("all-at-once", termination_wait_s=900, max_execution_timeout_s=3601))
    config = endpoint_config(Template.from_stack(stack).to_json())
    assert config["BlueGreenUpdatePolicy"]["TerminationWaitInSeconds"] == 900
    assert config["BlueGreenUpdatePolicy"]["MaximumExecutionTimeoutInSeconds"] == 3601
    assert "AutoRollbackConfiguration" not in config  # no alarms, nothing to roll back on


def test_policy_none_leaves_sagemakers_default():
    stack, endpoint = gpu_endpoint()
    endpoint.add_alarms()
    endpoint.apply_update_policy(UpdatePolicy("none"))
    assert endpoint_config(Template.from_stack(stack).to_json()) is None


@pytest.mark.parametrize(
    ("policy", "instances", "message"),
    [
        (UpdatePolicy("canary"), 1, r"canary with update_step_size=1 needs at least 2 instances"),
        (UpdatePolicy("linear", step_size=3), 4, r"linear step is 10-50% of the instance count \(4\); allowed here: 1"),
        # A rolling endpoint batch is 5-50% of the instances (API RollingUpdatePolicy): one instance has none.
        (UpdatePolicy("rolling"), 1, r"update_policy=rolling with update_step_size=1 needs at least 2 instances"),
        (UpdatePolicy("all-at-once", wait_s=4000), 1, r"update_wait_s=4000: allowed 0 to 3600"),
        (
            UpdatePolicy("all-at-once", max_execution_timeout_s=600, wait_s=600),
            1,
            r"update_timeout_s=600 must exceed what the update may wait \(all-at-once\): 1 x update_wait_s 600",
        ),
    ],
)
def test_bad_policies_fail_synth(policy, instances, message):
    _, endpoint = gpu_endpoint(instance_count=instances)
    with pytest.raises(ValueError, match=message):
        endpoint.apply_update_policy(policy)


def test_component_rolling_policy_rolls_back_on_its_alarms():
    stack, _, component = component_endpoint(
        {"instance_type": "ml.g6e.12xlarge"},
        tensor_parallel_size=1,
        initial_copies=4,
        min_copies=4,  # copy autoscaling down to 1 would make a batch of 2 more than half (warned)
        max_copies=4,
    )
    component.add_alarms()
    component.apply_update_policy(UpdatePolicy("rolling", step_size=2, wait_s=120))
    t = Template.from_stack(stack).to_json()
    (props,) = of_type(t, "AWS::SageMaker::InferenceComponent").values()
    config = props["DeploymentConfig"]
    assert config["RollingUpdatePolicy"] == {
        "MaximumBatchSize": {"Type": "COPY_COUNT", "Value": 2},
        "WaitIntervalInSeconds": 120,
        # Derived (issue 28): 2 batches x (120 s bake + 2400 s download and start-up + 600 s to launch an instance).
        "MaximumExecutionTimeoutInSeconds": 6240,
        # Issue 35: a rollback returns the old copies one batch at a time, not all at once (100 %).
        "RollbackMaximumBatchSize": {"Type": "COPY_COUNT", "Value": 2},
    }
    assert len(config["AutoRollbackConfiguration"]["Alarms"]) == 4
    Annotations.from_stack(stack).has_no_warning("*", Match.string_like_regexp("Rolling update batch"))


def test_one_copy_component_default_batch_is_50_percent_of_its_copies_and_no_warning():
    """Issue 35 item 5: the default of a one-copy component is CAPACITY_PERCENT 50, inside the 5-50 % SageMaker
    documents (API InferenceComponentRollingUpdatePolicy.MaximumBatchSize), not COPY_COUNT 1 (100 %); rollback too."""
    stack, _, component = component_endpoint()
    component.apply_update_policy(UpdatePolicy.default_for(True, copies=1))
    Annotations.from_stack(stack).has_no_warning("*", Match.any_value())
    (ic,) = Template.from_stack(stack).find_resources("AWS::SageMaker::InferenceComponent").values()
    rolling = ic["Properties"]["DeploymentConfig"]["RollingUpdatePolicy"]
    assert rolling["MaximumBatchSize"] == {"Type": "CAPACITY_PERCENT", "Value": 50}
    assert rolling["RollbackMaximumBatchSize"] == {"Type": "CAPACITY_PERCENT", "Value": 50}


def test_one_copy_component_asking_for_rolling_by_copies_is_warned():
    stack, _, component = component_endpoint()
    component.apply_update_policy(UpdatePolicy("rolling"))
    Annotations.from_stack(stack).has_warning(
        "/Test/Endpoint/Chat", Match.string_like_regexp("100 % of its copies, outside the 5-50%")
    )


def test_default_for_a_component_of_two_copies_rolls_one_copy_at_a_time():
    assert UpdatePolicy.default_for(True, copies=2) == UpdatePolicy("rolling")
    assert UpdatePolicy.default_for(True) == UpdatePolicy("rolling")
    assert UpdatePolicy.default_for(False, copies=1) == UpdatePolicy("all-at-once")


@pytest.mark.parametrize(
    ("copies", "step", "warning"),
    [
        ({"initial_copies": 4, "min_copies": 4}, 2, None),  # 50 % of 4, no copy autoscaling
        ({"initial_copies": 4, "min_copies": 1, "max_copies": 4}, 2, "more than half"),  # autoscaled down to 1
        ({"initial_copies": 30, "min_copies": 30}, 1, "less than 5%"),  # 1 of 30 is 3 %
        ({"initial_copies": 4, "min_copies": 2, "max_copies": 40}, 1, "less than 5%"),  # 1 of 40 is 2.5 %
        ({"initial_copies": 4, "min_copies": 2, "max_copies": 20}, 1, None),
    ],
)
def test_rolling_batch_fits_5_to_50_percent_of_every_copy_count_an_update_may_start_at(copies, step, warning):
    # 40 copies + a batch of 1; short timeouts so that 40 batches fit MaximumExecutionTimeoutInSeconds' 28800 s.
    quick = {"startup_timeout": cdk.Duration.minutes(1), "download_timeout": cdk.Duration.minutes(1)}
    stack, _, component = component_endpoint({"max_instances": 41}, **copies, **quick)
    component.apply_update_policy(UpdatePolicy("rolling", step_size=step))
    annotations = Annotations.from_stack(stack)
    if warning:
        annotations.has_warning("/Test/Endpoint/Chat", Match.string_like_regexp(warning))
    else:
        annotations.has_no_warning("*", Match.string_like_regexp("Rolling update batch"))


def test_component_refuses_blue_green_and_oversized_batches():
    _, _, component = component_endpoint()
    with pytest.raises(ValueError, match="does not apply in inference-component mode; allowed: rolling, none"):
        component.apply_update_policy(UpdatePolicy("canary"))
    with pytest.raises(ValueError, match="more than the component's 1 copies"):
        component.apply_update_policy(UpdatePolicy("rolling", step_size=2))


def test_extra_instances_during_an_update():
    assert UpdatePolicy("all-at-once").extra_instances_during_update(3) == 3
    assert UpdatePolicy("none").extra_instances_during_update(2) == 2  # SageMaker's default is blue/green too
    assert UpdatePolicy("rolling").extra_instances_during_update(4) == 1  # one batch of instances (endpoint)
    assert UpdatePolicy("rolling", step_size=2).extra_instances_for_component_update() == 2  # one batch of copies
    assert UpdatePolicy("none").extra_instances_for_component_update() == 1


def test_component_policy_none_sets_no_deployment_config():
    stack, _, component = component_endpoint()
    component.add_alarms()
    component.apply_update_policy(UpdatePolicy("none"))
    (props,) = of_type(Template.from_stack(stack).to_json(), "AWS::SageMaker::InferenceComponent").values()
    assert "DeploymentConfig" not in props
    assert component.update_policy.kind == "none"


def test_an_update_timeout_must_cover_every_step_and_the_new_fleet_coming_up():
    """MaximumExecutionTimeoutInSeconds must exceed the total waiting (API BlueGreenUpdatePolicy), and the green
    fleet downloads and starts before any traffic moves: linear waits once per step, canary twice."""
    policy = UpdatePolicy("linear", step_size=1, wait_s=300, max_execution_timeout_s=3600)
    (problem,) = policy.problems(component_mode=False, instances=4, provisioning_s=2400)
    assert "4 x update_wait_s 300" in problem and "= 3600 s" in problem and "allowed: more than 3600" in problem
    assert policy.problems(component_mode=False, instances=4, provisioning_s=2399) == []
    rolling = UpdatePolicy("rolling", step_size=1, wait_s=120, max_execution_timeout_s=2880)
    (problem,) = rolling.problems(component_mode=True, instances=0, copies=4, provisioning_s=2400)
    assert "4 batches (4 copies, update_step_size 1) x (update_wait_s 120 + download_timeout_s + " in problem
    assert "2400 for each batch's new copies" in problem
    assert "= 10080 s" in problem  # every batch provisions its own copies: 4 x (120 + 2400)
    assert rolling.problems(component_mode=True, instances=0, copies=4, provisioning_s=580) == []  # 4 x 700 < 2880
    endpoint = UpdatePolicy("rolling", step_size=1, wait_s=120, max_execution_timeout_s=2880)
    (problem,) = endpoint.problems(component_mode=False, instances=2, provisioning_s=2400)
    assert "2 batches (2 instances" in problem and "new instances" in problem and "(API RollingUpdatePolicy" in problem


def test_canary_bakes_twice():
    """Canary: a bake after the canary, then "a final baking period" after the rest shifts
    (deployment-guardrails-blue-green-canary): two waits, where the old rule counted one."""
    canary = UpdatePolicy("canary", wait_s=600, max_execution_timeout_s=3000)
    (problem,) = canary.problems(component_mode=False, instances=2, provisioning_s=1800)
    assert "2 x update_wait_s 600" in problem and "= 3000 s" in problem
    assert (
        UpdatePolicy("canary", wait_s=600, max_execution_timeout_s=3001).problems(
            component_mode=False, instances=2, provisioning_s=1800
        )
        == []
    )


def test_a_rolling_update_gets_a_timeout_derived_from_its_batches():
    """Issue 28: no MaximumExecutionTimeoutInSeconds left to SageMaker's unstated default for a rolling update."""
    assert UpdatePolicy("rolling").derived_timeout_s(instances=0, copies=1, provisioning_s=2400) == 3300
    assert UpdatePolicy("rolling", wait_s=0).derived_timeout_s(instances=0, copies=1, provisioning_s=0) == 600
    assert UpdatePolicy("rolling").derived_timeout_s(instances=0, copies=30, provisioning_s=2400) == 28800
    assert UpdatePolicy("rolling", max_execution_timeout_s=5000).derived_timeout_s(instances=0, copies=1) == 5000
    assert UpdatePolicy("all-at-once").derived_timeout_s(instances=1, provisioning_s=2400) is None


def _config_id(policy: UpdatePolicy | None, thresholds: AlarmThresholds | None = None) -> str:
    stack, endpoint = gpu_endpoint()
    if thresholds is not None:
        endpoint.add_alarms(thresholds)
    if policy is not None:
        endpoint.apply_update_policy(policy)
    (config,) = of_type(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")
    return config


def test_the_endpoint_config_follows_what_the_endpoints_update_sends():
    """Issue 28 item 4: a change of DeploymentConfig alone is a new EndpointConfig (UpdateEndpoint names a new one)."""
    plain = _config_id(None)
    assert re.fullmatch(r"EndpointConfig[0-9A-F]{8}", plain)  # nothing the update sends: CDK's own logical ID
    bake_300, bake_120 = _config_id(UpdatePolicy("all-at-once")), _config_id(UpdatePolicy("all-at-once", wait_s=120))
    assert len({plain, bake_300, bake_120}) == 3
    assert _config_id(UpdatePolicy("all-at-once", wait_s=120)) == bake_120
    # A threshold lives on the alarm, not on the Endpoint: the same config.
    assert _config_id(UpdatePolicy("all-at-once"), AlarmThresholds(p99_latency_ms=1000)) == _config_id(
        UpdatePolicy("all-at-once"), AlarmThresholds()
    )
