"""Dashboard and GPU-memory alarm with instance pools (per InstanceType) and enhanced metrics (per GPU): issue 28."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from constructs_lib import ComponentEndpoint, GpuEndpoint, S3ModelData
from tests.constructs.test_monitoring import alarms_by_id, dashboard_body, widget_metrics

ENDPOINTS = "/aws/sagemaker/Endpoints"
PER_GPU_SCHEMA = f'SCHEMA("{ENDPOINTS}", AcceleratorId, EndpointName, InstanceId, VariantName)'
COPIES_PER_GPU_SCHEMA = (
    'SCHEMA("/aws/sagemaker/InferenceComponents", AcceleratorId, ContainerId, InferenceComponentName, InstanceId)'
)


def endpoint_template(**props) -> tuple[dict, GpuEndpoint]:
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "models/org--m/abc"), **props)
    endpoint.add_alarms()
    endpoint.add_dashboard()
    return Template.from_stack(stack).to_json(), endpoint


def component_template(**endpoint_props) -> tuple[dict, ComponentEndpoint, object]:
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", **endpoint_props)
    component = endpoint.add_component("Chat", model=S3ModelData(bucket, "models/org--m/abc"))
    endpoint.add_alarms()
    endpoint.add_dashboard()
    return Template.from_stack(stack).to_json(), endpoint, component


def queries(body: dict) -> list[str]:
    """Every Metrics Insights query or math expression of the dashboard's graphs."""
    return [
        m[-1]["expression"]
        for m in widget_metrics(body)
        if isinstance(m[-1], dict) and "expression" in m[-1] and len(m) == 1
    ]


def graph(body: dict, title_start: str) -> dict:
    (widget,) = [w for w in body["widgets"] if w["properties"].get("title", "").startswith(title_start)]
    return widget["properties"]


def where(name: str, **more: str) -> str:
    return " AND ".join(f"{k} = '{v}'" for k, v in {"EndpointName": name, "VariantName": "AllTraffic", **more}.items())


# --- standard mode: instance pools ---


def test_without_pools_or_enhanced_metrics_nothing_is_a_metrics_insights_query():
    t, _ = endpoint_template()
    assert not [q for q in queries(dashboard_body(t)) if q.startswith("SELECT")]
    memory = alarms_by_id(t)["GpuMemory"]
    (expression,) = [m for m in memory["Metrics"] if m.get("ReturnData", True) and "Expression" in m]
    assert expression["Expression"] == "m / 1"


def test_pools_graph_one_line_per_instance_type_with_one_grouped_query_per_graph():
    types = ["ml.g6.12xlarge", "ml.g6e.12xlarge", "ml.g5.12xlarge"]
    t, endpoint = endpoint_template(instance_type=types[0], instance_pools=types[1:])
    assert endpoint.instance_types == types
    body = dashboard_body(t)
    name = endpoint.monitored_name

    # "each GetMetricData operation can include only one [Metrics Insights] query" (botocore cloudwatch): a graph is
    # one GetMetricData call, so each graph holds one query, grouped by InstanceType (one line per type).
    for title in ("Invocations per instance type", "Slowest model latency per instance type"):
        assert sum(q.startswith("SELECT") for q in (m[-1]["expression"] for m in graph(body, title)["metrics"])) == 1
    (calls,) = graph(body, "Invocations per instance type")["metrics"]
    assert calls[-1]["expression"] == (
        f'SELECT SUM(Invocations) FROM "AWS/SageMaker" WHERE {where(name)} GROUP BY InstanceType'
    )
    (slowest,) = graph(body, "Slowest model latency per instance type")["metrics"]
    assert slowest[-1]["expression"] == (
        f'SELECT MAX(ModelLatency) FROM "AWS/SageMaker" WHERE {where(name)} GROUP BY InstanceType'
    )
    # No SCHEMA: the per-type series' exact dimension set is documented two ways (module docstring).
    assert "SCHEMA" not in calls[-1]["expression"] + slowest[-1]["expression"]

    for metric, title in (("GPUMemoryUtilization", "GPU memory per"), ("GPUUtilization", "GPU utilization per")):
        lines = graph(body, title)["metrics"]
        shown = [m[-1] for m in lines if m[-1].get("visible", True)]
        hidden = [m[-1]["expression"] for m in lines if m[-1].get("visible") is False]
        # 0-100 x GPUs per instance, divided by the GPUs (4: every pool type has the primary's GPUs), per series.
        assert [line["expression"] for line in shown] == ["q0 / 4"]
        assert hidden == [f'SELECT MAX({metric}) FROM "{ENDPOINTS}" WHERE {where(name)} GROUP BY InstanceType']


def test_pools_leave_the_gpu_memory_alarm_on_the_variant_aggregate_of_every_type():
    t, endpoint = endpoint_template(instance_type="ml.g6.xlarge", instance_pools=["ml.g6e.xlarge", "ml.g5.2xlarge"])
    memory = alarms_by_id(t)["GpuMemory"]
    (raw,) = [m for m in memory["Metrics"] if "MetricStat" in m]
    metric = raw["MetricStat"]["Metric"]
    # Aggregated over every instance of the variant, whatever pool it came from (realtime-endpoints-heterogeneous).
    assert metric["MetricName"] == "GPUMemoryUtilization" and raw["MetricStat"]["Stat"] == "Maximum"
    assert metric["Dimensions"] == [
        {"Name": "EndpointName", "Value": endpoint.monitored_name},
        {"Name": "VariantName", "Value": "AllTraffic"},
    ]


def test_a_pool_type_with_other_gpus_is_refused_so_one_divisor_fits_every_type():
    """The premise of the aggregate alarm: in standard mode every pool type has the primary's GPU count."""
    with pytest.raises(ValueError, match=r"instance_pools\[0\]='ml.g6e.xlarge'.*1 GPU"):
        endpoint_template(instance_type="ml.g6.12xlarge", instance_pools=["ml.g6e.xlarge"])


# --- standard mode: enhanced metrics ---


def test_enhanced_metrics_put_the_gpu_memory_alarm_on_the_fullest_single_gpu():
    t, endpoint = endpoint_template(instance_type="ml.g6.12xlarge", enhanced_metrics=True)
    memory = alarms_by_id(t)["GpuMemory"]
    (query,) = memory["Metrics"]
    assert query["Expression"] == (
        f"SELECT MAX(GPUMemoryUtilization) FROM {PER_GPU_SCHEMA} WHERE {where(endpoint.monitored_name)}"
    )
    assert query["Period"] == 60 and query.get("ReturnData", True) is True
    # 0-100 for one GPU: the threshold is the percentage itself, not times the GPU count.
    assert memory["Threshold"] == 95 and memory["EvaluationPeriods"] == 5
    assert memory["TreatMissingData"] == "notBreaching"


def test_enhanced_metrics_graph_memory_and_use_per_gpu():
    t, endpoint = endpoint_template(instance_type="ml.g6.12xlarge", enhanced_metrics=True)
    body = dashboard_body(t)
    for metric in ("GPUMemoryUtilization", "GPUUtilization"):
        (line,) = graph(body, f"{metric} per GPU")["metrics"]
        assert line[-1]["expression"] == (
            f"SELECT MAX({metric}) FROM {PER_GPU_SCHEMA} WHERE {where(endpoint.monitored_name)}"
            " GROUP BY InstanceId, AcceleratorId"
        )


def test_enhanced_metrics_off_keeps_the_instance_average_alarm_and_no_per_gpu_graphs():
    t, _ = endpoint_template(instance_type="ml.g6.12xlarge", enhanced_metrics=False)
    assert not [q for q in queries(dashboard_body(t)) if "AcceleratorId" in q]
    memory = alarms_by_id(t)["GpuMemory"]
    assert [m["Expression"] for m in memory["Metrics"] if "Expression" in m] == ["m / 4"]


def test_pools_and_enhanced_metrics_together_show_both_rows():
    t, _ = endpoint_template(instance_type="ml.g6.xlarge", instance_pools=["ml.g6e.xlarge"], enhanced_metrics=True)
    body = dashboard_body(t)
    graph(body, "Invocations per instance type")
    graph(body, "GPUMemoryUtilization per GPU")
    assert "AcceleratorId" in alarms_by_id(t)["GpuMemory"]["Metrics"][0]["Expression"]


# --- component mode ---


def test_component_enhanced_metrics_alarm_on_the_fullest_gpu_of_any_copy():
    t, _, component = component_template(enhanced_metrics=True)
    memory = alarms_by_id(t)["GpuMemory"]
    (query,) = memory["Metrics"]
    assert query["Expression"] == (
        f"SELECT MAX(GPUMemoryUtilizationNormalized) FROM {COPIES_PER_GPU_SCHEMA} "
        f"WHERE InferenceComponentName = '{component.inference_component_name}'"
    )
    body = dashboard_body(t)
    graph(body, "GPUMemoryUtilizationNormalized per GPU")
    graph(body, "GPUUtilization per GPU")  # the endpoint's instances, per GPU


def test_component_without_enhanced_metrics_keeps_the_copies_maximum():
    t, _, _ = component_template()
    memory = alarms_by_id(t)["GpuMemory"]
    assert (memory["MetricName"], memory["Statistic"]) == ("GPUMemoryUtilizationNormalized", "Maximum")
    assert not [q for q in queries(dashboard_body(t)) if q.startswith("SELECT")]


def test_component_pools_graph_each_component_per_instance_type():
    types = ["ml.g6.xlarge", "ml.g6e.xlarge"]
    t, endpoint, component = component_template(instance_type=types[0], instance_pools=types[1:])
    assert endpoint.instance_types == types  # set by ComponentEndpoint itself
    body = dashboard_body(t)
    name = component.inference_component_name
    (calls,) = graph(body, "Chat: Invocations per instance type")["metrics"]
    assert calls[-1]["expression"] == (
        f"SELECT SUM(Invocations) FROM \"AWS/SageMaker\" WHERE InferenceComponentName = '{name}' GROUP BY InstanceType"
    )
    (memory,) = graph(body, "Chat: GPU memory of the copies per instance type")["metrics"]
    assert memory[-1]["expression"] == (
        'SELECT MAX(GPUMemoryUtilizationNormalized) FROM "/aws/sagemaker/InferenceComponents" '
        f"WHERE InferenceComponentName = '{name}' GROUP BY InstanceType"
    )
    # Nothing per type under the endpoint's dimensions: its invocations are the components', its GPUs hold copies.
    assert not [q for q in queries(body) if "EndpointName" in q and "InstanceType" in q]
    # Without pools, no per-type graph.
    t, _, _ = component_template(instance_type=types[0])
    assert not [q for q in queries(dashboard_body(t)) if "InstanceType" in q]


# --- the alarms read each metric at the endpoint's publishing interval (MetricPublishFrequencyInSeconds) ---


def _periods(alarm: dict) -> set[int]:
    """Every period an alarm reads: its own, its metrics' and its math expressions' (Metrics Insights included)."""
    found = {alarm["Period"]} if "Period" in alarm else set()
    for m in alarm.get("Metrics", []):
        if "Period" in m:
            found.add(m["Period"])
        if "MetricStat" in m:
            found.add(m["MetricStat"]["Period"])
    return found


def _window(alarm: dict) -> tuple[int, int]:
    return alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]


def test_at_the_default_interval_every_alarm_reads_one_minute_periods():
    t, _ = endpoint_template()
    alarms = alarms_by_id(t)
    assert {n: _periods(a) for n, a in alarms.items()} == {n: {60} for n in alarms}
    assert _window(alarms["GpuMemory"]) == (5, 5) and _window(alarms["NoCapacity"]) == (5, 5)
    assert _window(alarms["Errors5xx"]) == (2, 3) and _window(alarms["LatencyP99"]) == (3, 3)


def test_a_slower_interval_stretches_the_utilization_alarms_and_keeps_invocations_at_a_minute():
    # The interval "applies to utilization metrics regardless of whether enhanced metrics is enabled"
    # (monitoring-cloudwatch-enhanced-metrics): read at 60 s, a 300 s series leaves four empty minutes of five, and
    # a 5-of-5 alarm could never fire; missing data breaching, the instance count would fire while serving.
    t, _ = endpoint_template(metric_publish_frequency_s=300)
    alarms = alarms_by_id(t)
    assert _periods(alarms["GpuMemory"]) == {300} and _window(alarms["GpuMemory"]) == (1, 1)
    assert _periods(alarms["NoCapacity"]) == {300} and _window(alarms["NoCapacity"]) == (3, 3)
    assert alarms["NoCapacity"]["TreatMissingData"] == "breaching"
    assert "3 periods of 300 s" in alarms["NoCapacity"]["AlarmDescription"]
    # Without enhanced metrics, invocation metrics keep SageMaker's one-minute publishing.
    assert _periods(alarms["Errors5xx"]) == {60} and _periods(alarms["LatencyP99"]) == {60}


def test_with_enhanced_metrics_the_interval_applies_to_invocation_alarms_too():
    # "With enhanced metrics enabled, it also applies to invocation metrics" (monitoring-cloudwatch-enhanced-metrics).
    t, _ = endpoint_template(enhanced_metrics=True, metric_publish_frequency_s=120)
    alarms = alarms_by_id(t)
    assert {n: _periods(a) for n, a in alarms.items()} == {n: {120} for n in alarms}
    assert _window(alarms["Errors5xx"]) == (2, 2)  # 2 of 3 minutes: 2 of the 2 periods covering 180 s
    assert _window(alarms["LatencyP99"]) == (2, 2)
    assert _window(alarms["GpuMemory"]) == (3, 3)  # 300 s: 3 periods of 120 s
    assert _window(alarms["NoCapacity"]) == (3, 3)
    assert "2 of 2 periods of 120 s" in alarms["Errors5xx"]["AlarmDescription"]


def test_a_faster_interval_keeps_one_minute_periods():
    t, _ = endpoint_template(enhanced_metrics=True, metric_publish_frequency_s=10)
    alarms = alarms_by_id(t)
    assert {n: _periods(a) for n, a in alarms.items()} == {n: {60} for n in alarms}


def test_component_alarms_read_the_endpoints_interval():
    t, _, _ = component_template(enhanced_metrics=True, metric_publish_frequency_s=300)
    alarms = alarms_by_id(t)
    assert _periods(alarms["GpuMemory"]) == {300} and _window(alarms["GpuMemory"]) == (1, 1)
    # Requests finding no copy (an invocation metric) are read at the interval too, one period.
    assert _periods(alarms["NoCapacity"]) == {300} and _window(alarms["NoCapacity"]) == (1, 1)
    assert _periods(alarms["Errors5xx"]) == {300} and _window(alarms["Errors5xx"]) == (1, 1)
