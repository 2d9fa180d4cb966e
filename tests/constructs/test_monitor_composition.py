"""Monitoring by composition (issue 37): one Monitor per watched construct, one dashboard builder for every target.

A shared endpoint's dashboard shows every component and adapter on it, those added after ``add_dashboard`` too, and
its alarm row every alarm; an adapter's alarms are its invocations' only; a construct of the user's own that
describes itself as a ``Watched`` gets the same alarms and rows.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from constructs import Construct

from constructs_lib import AdapterComponent, ComponentEndpoint, Monitor, S3ModelData, Watched
from constructs_lib.monitoring import AlarmThresholds
from tests.constructs.test_monitoring import alarms_by_id, dashboard_body, of_type


def shared_endpoint():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6.12xlarge")
    first = endpoint.add_component("Small", model=S3ModelData(bucket, "models/org--small/abc"), tensor_parallel_size=1)
    return stack, bucket, endpoint, first


def titles(body: dict) -> list[str]:
    return [w["properties"].get("title", "") for w in body["widgets"]]


def test_every_component_and_adapter_has_rows_even_when_added_after_the_dashboard():
    stack, bucket, endpoint, first = shared_endpoint()
    endpoint.add_dashboard()
    second = endpoint.add_component(
        "Medium", model=S3ModelData(bucket, "models/org--medium/abc"), tensor_parallel_size=1
    )
    AdapterComponent(stack, "Sql", base=first, artifact_url="s3://adapters/sql.tar.gz")
    names = titles(dashboard_body(Template.from_stack(stack).to_json()))
    assert names[0] == "Endpoint GPU utilization, GPU memory, GPU reserved (%)"
    # Each component's row, each adapter right under its base: the order the endpoint was built in.
    rows = [n.split(":")[0] for n in names if ": invocations and errors" in n]
    assert rows == ["Small", "Sql", "Medium"]
    assert "Sql: latency p50/p99 (microseconds)" in names
    assert not any(n.startswith("Sql: copies") for n in names)  # no copies of its own: its base's serve it
    assert [n for n in names if n.startswith("Medium: ")] == [
        "Medium: invocations and errors (per minute)",
        "Medium: latency p50/p99 (microseconds)",
        "Medium: copies, GPU and GPU memory of the copies (%)",
    ]
    assert second.inference_component_name in str(Template.from_stack(stack).to_json()["Resources"])


def test_the_alarm_row_shows_every_components_alarms_added_after_the_dashboard():
    stack, bucket, endpoint, first = shared_endpoint()
    endpoint.add_dashboard()
    second = endpoint.add_component(
        "Medium", model=S3ModelData(bucket, "models/org--medium/abc"), tensor_parallel_size=1
    )
    adapter = AdapterComponent(stack, "Sql", base=first, artifact_url="s3://adapters/sql.tar.gz")
    first.add_alarms()
    second.add_alarms()
    adapter.add_alarms()
    t = Template.from_stack(stack).to_json()
    (status,) = [w for w in dashboard_body(t)["widgets"] if w["type"] == "alarm"]
    assert len(status["properties"]["alarms"]) == 4 + 4 + 2
    assert len(endpoint.alarms) == 10
    assert set(endpoint.alarms) == {*first.alarms, *second.alarms, *adapter.alarms}


def test_an_adapter_alarms_on_its_errors_and_latency_only():
    stack, _, _, first = shared_endpoint()
    adapter = AdapterComponent(stack, "Sql", base=first, artifact_url="s3://adapters/sql.tar.gz")
    alarms = adapter.add_alarms(AlarmThresholds(p99_latency_ms=5000))
    assert [a.node.id for a in alarms] == ["Errors5xx", "LatencyP99"]
    t = Template.from_stack(stack).to_json()
    props = [p for k, p in of_type(t, "AWS::CloudWatch::Alarm").items() if k.startswith("Sql")]
    assert len(props) == 2
    for p in props:
        assert p["Dimensions"] == [{"Name": "InferenceComponentName", "Value": adapter.inference_component_name}]
        assert p["AlarmDescription"].startswith(f"SageMaker adapter component {adapter.inference_component_name}: ")
    latency = next(p for p in props if p["MetricName"] == "ModelLatency")
    assert latency["Threshold"] == 5_000_000 and latency["ExtendedStatistic"] == "p99"


def test_adapter_metric_helpers_name_its_component():
    stack, _, _, first = shared_endpoint()
    adapter = AdapterComponent(stack, "Sql", base=first, artifact_url="s3://adapters/sql.tar.gz", component_name="sql")
    metric = adapter.metric_invocations()
    assert metric.metric_name == "Invocations" and metric.dimensions == {"InferenceComponentName": "sql"}
    # No copies of its own (its base's serve it): no copy or capacity helpers.
    assert not hasattr(adapter, "metric_no_capacity_invocation_failures") and not hasattr(adapter, "metric_copy_count")


class _Mine(Construct):
    """A construct of a user's own: an endpoint their code made, watched through the protocol."""

    def __init__(self, scope: Construct, id: str, *, gpus: int) -> None:
        super().__init__(scope, id)
        self.monitor = Monitor(self)
        self.gpus = gpus

    def watched(self) -> Watched:
        return Watched(kind="variant", name="mine", title="Mine", variant_name="AllTraffic", gpus=self.gpus)


def test_any_watchable_construct_gets_the_same_alarms_and_dashboard():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    mine = _Mine(stack, "Mine", gpus=4)
    mine.monitor.add_alarms(None, topic=None)
    mine.monitor.add_dashboard(scope=None, smoke_test=None)
    t = Template.from_stack(stack).to_json()
    alarms = alarms_by_id(t)
    assert set(alarms) == {"Errors5xx", "LatencyP99", "GpuMemory", "NoCapacity"}
    # The GPU memory share divides the instance's sum by its GPU count.
    (memory,) = [m for m in alarms["GpuMemory"]["Metrics"] if "Expression" in m]
    assert memory["Expression"] == "m / 4"
    assert {"Name": "EndpointName", "Value": "mine"} in alarms["Errors5xx"]["Dimensions"]
    assert titles(dashboard_body(t))[0] == "Invocations and errors (per minute)"
    url = stack.resolve(mine.monitor.dashboard_url)["Fn::Join"][1]
    assert "#dashboards/dashboard/" in url and url[-1] == {
        "Ref": stack.get_logical_id(mine.monitor.dashboard.node.default_child)
    }


def test_a_monitor_adds_its_alarms_and_dashboard_once():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    mine = _Mine(stack, "Mine", gpus=1)
    mine.monitor.add_alarms(None, topic=None)
    with pytest.raises(ValueError, match="add_alarms was already called"):
        mine.monitor.add_alarms(None, topic=None)
    with pytest.raises(ValueError, match="call add_dashboard first"):
        _ = mine.monitor.dashboard_url
    mine.monitor.add_dashboard(scope=None, smoke_test=None)
    with pytest.raises(ValueError, match="add_dashboard was already called"):
        mine.monitor.add_dashboard(scope=None, smoke_test=None)


def test_thresholds_are_refused_naming_the_library_fields_on_any_target():
    stack, _, _, first = shared_endpoint()
    adapter = AdapterComponent(stack, "Sql", base=first, artifact_url="s3://adapters/sql.tar.gz")
    with pytest.raises(ValueError, match=r"AdapterComponent Test/Sql: .*gpu_memory_percent=101: allowed more than 0"):
        adapter.add_alarms(AlarmThresholds(gpu_memory_percent=101))


# --- the model-errors alarm: the one alarm added through adding-things.md's steps (alarms.py + context_keys.py) ---


def test_model_errors_are_off_by_default_and_alarm_on_the_failed_share_when_set():
    _, _, _, first = shared_endpoint()
    assert "ModelErrors" not in [a.node.id for a in first.add_alarms()]
    second_stack, _, _, other = shared_endpoint()
    alarms = other.add_alarms(AlarmThresholds(model_errors_percent=2.5))
    assert [a.node.id for a in alarms] == ["Errors5xx", "ModelErrors", "LatencyP99", "GpuMemory", "NoCapacity"]
    t = Template.from_stack(second_stack).to_json()
    (props,) = [p for k, p in of_type(t, "AWS::CloudWatch::Alarm").items() if "AlarmsModelErrors" in k]
    # Average of 1-or-0 per request (InvocationModelErrors): the share failed in the container, 2 of 3 minutes.
    assert props["MetricName"] == "InvocationModelErrors" and props["Statistic"] == "Average"
    assert props["Threshold"] == 0.025 and props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert (props["EvaluationPeriods"], props["DatapointsToAlarm"], props["Period"]) == (3, 2, 60)
    assert props["TreatMissingData"] == "notBreaching"
    assert "(ModelError to the caller)" in props["AlarmDescription"]


def test_an_update_rolls_back_on_model_errors_too():
    from constructs_lib import UpdatePolicy

    stack, _, _, first = shared_endpoint()
    first.add_alarms(AlarmThresholds(model_errors_percent=5))
    first.apply_update_policy(UpdatePolicy(kind="rolling", step_size=1))
    (component,) = Template.from_stack(stack).find_resources("AWS::SageMaker::InferenceComponent").values()
    rollback = component["Properties"]["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
    assert len(rollback) == 5 and any("ModelErrors" in str(a) for a in rollback)


def test_the_endpoints_add_alarms_reaches_every_adapter_too():
    stack, _, endpoint, first = shared_endpoint()
    adapter = AdapterComponent(stack, "Sql", base=first, artifact_url="s3://adapters/sql.tar.gz")
    endpoint.add_alarms()
    assert [a.node.id for a in adapter.alarms] == ["Errors5xx", "LatencyP99"]
    assert len(endpoint.alarms) == 4 + 2


def test_a_monitor_needs_a_construct_to_hold_its_alarms():
    class NotAConstruct:
        class node:  # what the protocol reads: a node with a path
            path = "Nowhere"

        def watched(self) -> Watched:
            return Watched(kind="variant", name="x", title="X", variant_name="AllTraffic")

    with pytest.raises(TypeError, match="is not a construct"):
        Monitor(NotAConstruct()).add_alarms(None, topic=None)


@pytest.mark.parametrize(("gpus", "divisor"), [(None, 1), (1, 1), (8, 8)])
def test_the_gpu_memory_share_divides_by_the_gpus_known(gpus, divisor):
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    mine = _Mine(stack, "Mine", gpus=gpus)
    mine.monitor.add_alarms(None, topic=None)
    (memory,) = [
        m for m in alarms_by_id(Template.from_stack(stack).to_json())["GpuMemory"]["Metrics"] if "Expression" in m
    ]
    assert memory["Expression"] == f"m / {divisor}"
