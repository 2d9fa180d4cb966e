"""SageMaker's CloudWatch metrics: the constructs' ``metric_*`` methods, and the series alarms and dashboards read.

Metric names, namespaces and dimensions are those of "Amazon SageMaker AI metrics in Amazon CloudWatch"
(sagemaker/latest/dg/monitoring-cloudwatch):

- ``AWS/SageMaker`` (invocation metrics, 1-minute): ``Invocations``, ``Invocation4XXErrors``,
  ``Invocation5XXErrors``, ``InvocationModelErrors`` (1 per failed request, else 0, so the Average is the
  failed share), ``ModelLatency`` and ``OverheadLatency`` (microseconds, percentiles valid), with
  dimensions ``EndpointName, VariantName``, or ``InferenceComponentName`` for a component (an adapter
  component too: it is an inference component, invoked by its own name).
- ``/aws/sagemaker/Endpoints`` (instance metrics, each instance reports one datapoint a minute):
  ``GPUUtilization``/``GPUMemoryUtilization`` (0-100 x GPUs), ``CPUUtilization`` (0-100 x cores),
  ``MemoryUtilization``, ``DiskUtilization``; on endpoints hosting components also ``GPUReservation``,
  ``GPUMemoryUtilizationNormalized`` and ``CPUUtilizationNormalized`` (0-100); dimensions
  ``EndpointName, VariantName``.
- ``/aws/sagemaker/InferenceComponents`` (reported by each copy): ``GPUUtilizationNormalized``,
  ``GPUMemoryUtilizationNormalized``, ``CPUUtilizationNormalized``, ``MemoryUtilizationNormalized``;
  dimension ``InferenceComponentName``.
- ``NoCapacityInvocationFailures`` (``AWS/SageMaker``, ``InferenceComponentName``): requests that found no
  copy (endpoint-auto-scaling-zero-instances, the scale-to-zero wake-up signal).

SageMaker publishes no instance-count or copy-count metric; since every instance (every copy) reports one
utilization datapoint a minute, the ``SampleCount`` of ``CPUUtilization`` (of ``CPUUtilizationNormalized``
per component) over one minute counts them. That is how the dashboard and the no-capacity alarm count.

With instance pools (realtime-endpoints-heterogeneous, "Monitor instance pools"), the variant's aggregated
metrics "continue to work the same way", and CloudWatch also publishes them per ``InstanceType``
(``EndpointName, VariantName, InstanceType``; ``InferenceComponentName, InstanceType``). That page gives three
dimensions, but the detailed-observability mapping (monitoring-detailed-observability-metric-mapping) lists
the per-type series with ``Region`` and ``AvailabilityZone`` too, and CloudWatch identifies a series by its exact
dimension set; so the per-type queries are Metrics Insights queries ``FROM`` the namespace without ``SCHEMA``:
``FROM "<namespace>"`` matches a metric whatever its dimensions, ``SCHEMA(namespace, keys)`` only the exact set
(CloudWatch, cloudwatch-metrics-insights-querylanguage, SCHEMA). The aggregate lacks ``InstanceType``: the filter
leaves it out.

Enhanced metrics (``MetricsConfig.EnableEnhancedMetrics``, monitoring-cloudwatch-enhanced-metrics) add
``InstanceId`` and, on GPU metrics, ``AcceleratorId`` "alongside the existing namespace dimensions" of
``/aws/sagemaker/Endpoints`` (and ``InstanceId, ContainerId, AcceleratorId`` in
``/aws/sagemaker/InferenceComponents``): one series per GPU, so its value is that GPU's alone (0-100), where the
instance-level GPU metrics add up every GPU (0-100 x GPUs, monitoring-cloudwatch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sagemaker as sagemaker

from ..hosting import sagemaker_metric
from .watched import ADAPTER, VARIANT, Watched

INVOCATIONS = "AWS/SageMaker"
ENDPOINT_INSTANCES = "/aws/sagemaker/Endpoints"
COMPONENT_COPIES = "/aws/sagemaker/InferenceComponents"
ONE_MINUTE = cdk.Duration.minutes(1)


def metrics_settings(endpoint_config: sagemaker.CfnEndpointConfig) -> tuple[bool, int]:
    """An endpoint config's ``MetricsConfig`` as (``EnableEnhancedMetrics``, ``MetricPublishFrequencyInSeconds``):
    SageMaker's off and 60 s where unset (monitoring-cloudwatch-enhanced-metrics). Read from the config's property when
    the alarms and rows are made, so a ``metrics_config`` assigned after the construct is seen; a raw
    ``add_property_override`` is not (it never reaches the property)."""
    config = endpoint_config.metrics_config
    if not isinstance(config, sagemaker.CfnEndpointConfig.MetricsConfigProperty):
        return False, 60
    return bool(config.enable_enhanced_metrics), int(config.metric_publish_frequency_in_seconds or 60)


# --- the constructs' metric_* methods: dimensions through the construct's own attributes (tokens) ---


class _Metrics:
    """``metric_*`` helpers over one ``metric`` whose dimensions a subclass names."""

    def _metric_dimensions(self) -> dict[str, str]:
        raise NotImplementedError

    def metric(self, metric_name: str, **kwargs: Any) -> cloudwatch.Metric:
        """A CloudWatch metric of this target (``namespace``, ``statistic``, ``period``; one minute by default)."""
        return sagemaker_metric(metric_name, self._metric_dimensions(), **kwargs)

    def metric_invocations(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("Invocations", statistic="Sum", **kwargs)

    def metric_invocation_4xx_errors(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("Invocation4XXErrors", statistic="Sum", **kwargs)

    def metric_invocation_5xx_errors(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("Invocation5XXErrors", statistic="Sum", **kwargs)

    def metric_invocation_model_errors(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("InvocationModelErrors", statistic="Sum", **kwargs)

    def metric_model_latency(self, **kwargs: Any) -> cloudwatch.Metric:
        """Model latency in microseconds (p90 by default)."""
        return self.metric("ModelLatency", statistic=kwargs.pop("statistic", "p90"), **kwargs)

    def metric_overhead_latency(self, **kwargs: Any) -> cloudwatch.Metric:
        """SageMaker's own latency on top of the model's, in microseconds (p90 by default)."""
        return self.metric("OverheadLatency", statistic=kwargs.pop("statistic", "p90"), **kwargs)


class VariantMetrics(_Metrics):
    """Metrics of an endpoint's variant (``EndpointName, VariantName``): ``GpuEndpoint``, ``ComponentEndpoint``."""

    endpoint_name: str
    variant_name: str

    def _metric_dimensions(self) -> dict[str, str]:
        return {"EndpointName": self.endpoint_name, "VariantName": self.variant_name}

    def metric_cpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("CPUUtilization", namespace=ENDPOINT_INSTANCES, **kwargs)

    def metric_disk_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("DiskUtilization", namespace=ENDPOINT_INSTANCES, **kwargs)

    def metric_instance_count(self, **kwargs: Any) -> cloudwatch.Metric:
        """Instances reporting: every instance sends one CPUUtilization datapoint a minute (0 when scaled to zero)."""
        return self.metric("CPUUtilization", namespace=ENDPOINT_INSTANCES, statistic="SampleCount", **kwargs)


class EndpointMetrics(VariantMetrics):
    """A ``GpuEndpoint``'s instance metrics (one model on whole instances: GPU figures are 0-100 x GPUs)."""

    def metric_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("MemoryUtilization", namespace=ENDPOINT_INSTANCES, **kwargs)

    def metric_gpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("GPUUtilization", namespace=ENDPOINT_INSTANCES, **kwargs)

    def metric_gpu_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("GPUMemoryUtilization", namespace=ENDPOINT_INSTANCES, **kwargs)

    def metric_queue(self, metric_name: str, **kwargs: Any) -> cloudwatch.Metric:
        """An asynchronous endpoint's queue metric, whose one dimension is ``EndpointName``
        (``ApproximateBacklogSize``, ``ApproximateBacklogSizePerInstance``, ``ApproximateAgeOfOldestRequest``,
        ``HasBacklogWithoutCapacity``; "Monitoring asynchronous endpoints", async-inference-monitor.html)."""
        endpoint = {"EndpointName": self._metric_dimensions()["EndpointName"]}
        return sagemaker_metric(metric_name, endpoint, **kwargs)


class ComponentHostMetrics(VariantMetrics):
    """A ``ComponentEndpoint``'s instance metrics (normalized, 0-100 whatever the GPU count)."""

    def metric_cpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("CPUUtilizationNormalized", namespace=ENDPOINT_INSTANCES, **kwargs)

    def metric_gpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        """GPU use of the endpoint's instances, 0-100 whatever the GPU count."""
        return self.metric("GPUUtilizationNormalized", namespace=ENDPOINT_INSTANCES, **kwargs)

    def metric_gpu_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("GPUMemoryUtilizationNormalized", namespace=ENDPOINT_INSTANCES, **kwargs)

    def metric_gpu_reservation(self, **kwargs: Any) -> cloudwatch.Metric:
        """Share of the instances' GPUs reserved by component copies (0-100)."""
        return self.metric("GPUReservation", namespace=ENDPOINT_INSTANCES, **kwargs)


class ComponentMetrics(_Metrics):
    """Metrics of an inference component or adapter component (dimension ``InferenceComponentName``)."""

    inference_component_name: str

    def _metric_dimensions(self) -> dict[str, str]:
        return {"InferenceComponentName": self.inference_component_name}


class CopyMetrics(ComponentMetrics):
    """An ``InferenceComponent``'s copies (``/aws/sagemaker/InferenceComponents``, 0-100 of what a copy reserves)."""

    def metric_no_capacity_invocation_failures(self, **kwargs: Any) -> cloudwatch.Metric:
        """Requests that found no copy to serve them (the scale-to-zero wake-up signal)."""
        return self.metric("NoCapacityInvocationFailures", statistic="Sum", **kwargs)

    def metric_gpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        """GPU use of the component's copies, 0-100 over the GPUs reserved for them."""
        return self.metric("GPUUtilizationNormalized", namespace=COMPONENT_COPIES, **kwargs)

    def metric_gpu_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("GPUMemoryUtilizationNormalized", namespace=COMPONENT_COPIES, **kwargs)

    def metric_cpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("CPUUtilizationNormalized", namespace=COMPONENT_COPIES, **kwargs)

    def metric_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("MemoryUtilizationNormalized", namespace=COMPONENT_COPIES, **kwargs)

    def metric_copy_count(self, **kwargs: Any) -> cloudwatch.Metric:
        """Copies reporting: each copy sends one CPUUtilizationNormalized datapoint a minute."""
        return self.metric("CPUUtilizationNormalized", namespace=COMPONENT_COPIES, statistic="SampleCount", **kwargs)


# --- series with literal dimensions, for alarms and dashboards ---


def invocation_metrics(dims: Mapping[str, str]) -> dict[str, cloudwatch.Metric]:
    """The ``AWS/SageMaker`` invocation metrics for one variant or one component."""
    return {
        "Invocations": sagemaker_metric("Invocations", dims, statistic="Sum"),
        "Invocation4XXErrors": sagemaker_metric("Invocation4XXErrors", dims, statistic="Sum"),
        "Invocation5XXErrors": sagemaker_metric("Invocation5XXErrors", dims, statistic="Sum"),
        "InvocationModelErrors": sagemaker_metric("InvocationModelErrors", dims, statistic="Sum"),
    }


def latency_metrics(dims: Mapping[str, str]) -> list[cloudwatch.Metric]:
    """Model and overhead latency, p50 and p99 (microseconds)."""
    return [
        sagemaker_metric(name, dims, statistic=stat).with_(label=f"{name} {stat}")
        for name in ("ModelLatency", "OverheadLatency")
        for stat in ("p50", "p99")
    ]


def instance_count(dims: Mapping[str, str]) -> cloudwatch.Metric:
    """Instances reporting (each sends one CPUUtilization datapoint a minute)."""
    return sagemaker_metric("CPUUtilization", dims, namespace=ENDPOINT_INSTANCES, statistic="SampleCount")


def copy_count(dims: Mapping[str, str]) -> cloudwatch.Metric:
    """Copies reporting (each copy sends one CPUUtilizationNormalized datapoint a minute)."""
    return sagemaker_metric("CPUUtilizationNormalized", dims, namespace=COMPONENT_COPIES, statistic="SampleCount")


def gpu_memory(target: Watched) -> cloudwatch.IMetric | None:
    """The GPU memory an alarm watches, in percent; ``None`` for an adapter (it reserves no GPU of its own).

    A variant: with enhanced metrics, the fullest single GPU (the per-GPU series, 0-100 each); without,
    GPUMemoryUtilization (0-100 x GPUs) divided by the GPU count, a share of all GPUs, and the Maximum over instances
    is the fullest one. With instance pools that aggregate still covers every instance of every type ("Existing
    CloudWatch metrics that are aggregated across all instances in a variant ... continue to work the same way",
    realtime-endpoints-heterogeneous), and one divisor fits them all: in standard mode every pool type has the
    primary's GPU count (pool_problems refuses a type whose GPUs differ from tensor_parallel_size).
    A component: the fullest copy (0-100 of its GPUs, whatever the instance type) or, with the endpoint's enhanced
    metrics, the fullest single GPU of any copy."""
    dims = target.dimensions
    if target.kind == ADAPTER:
        return None
    if target.kind == VARIANT:
        if target.enhanced:
            query = per_gpu_query("MAX", "GPUMemoryUtilization", ENDPOINT_INSTANCES, dims, per_gpu=False)
            return insights(query, label="GPU memory (fullest GPU, %)")
        raw = sagemaker_metric("GPUMemoryUtilization", dims, namespace=ENDPOINT_INSTANCES, statistic="Maximum")
        return cloudwatch.MathExpression(
            expression=f"m / {target.gpus or 1}",
            using_metrics={"m": raw},
            label="GPU memory (% of all GPUs)",
            period=ONE_MINUTE,
        )
    if target.enhanced:
        query = per_gpu_query("MAX", "GPUMemoryUtilizationNormalized", COMPONENT_COPIES, dims, per_gpu=False)
        return insights(query, label="GPU memory (fullest GPU of a copy, %)")
    return sagemaker_metric("GPUMemoryUtilizationNormalized", dims, namespace=COMPONENT_COPIES, statistic="Maximum")


def no_capacity(target: Watched) -> tuple[cloudwatch.IMetric, bool] | None:
    """What says nothing serves ``target``, and whether it is an instance count (alarm below 1, missing data
    breaching) rather than a failure count (alarm at 1 or more). A variant: its instances reporting. A component:
    requests that found no copy, except with scale-to-zero, where that is how it wakes. An adapter: none (its
    base's copies serve it)."""
    if target.kind == VARIANT:
        return instance_count(target.dimensions), True
    if target.kind == ADAPTER or target.wakes_on_request:
        return None
    return sagemaker_metric("NoCapacityInvocationFailures", target.dimensions, statistic="Sum"), False


# --- Metrics Insights queries: per instance type (instance pools) and per GPU (enhanced metrics) ---


def _where(filters: Mapping[str, str]) -> str:
    # Literal names the constructs set (endpoint, variant, component) and catalog instance types: no quotes in them.
    return " AND ".join(f"{key} = '{value}'" for key, value in filters.items())


def insights(select: str, *, label: str, period: cdk.Duration = ONE_MINUTE) -> cloudwatch.MathExpression:
    """A Metrics Insights query as a metric: an alarm's or a graph's ``Expression`` holds the SQL itself
    (CloudWatch, Create_Metrics_Insights_Alarm; botocore cloudwatch MetricDataQuery.Expression)."""
    return cloudwatch.MathExpression(expression=select, using_metrics={}, label=label, period=period)


def per_type_query(function: str, metric: str, namespace: str, dims: Mapping[str, str]) -> str:
    """``function(metric)`` over the series of ``dims``, one line per ``InstanceType`` (``GROUP BY``). One query per
    widget: "If you include a Metrics Insights query, each GetMetricData operation can include only one query"
    (botocore cloudwatch GetMetricData), and a graph is one GetMetricData call. No SCHEMA (see the module docstring
    on which dimensions the per-type series carry); the variant's series without the dimension come back as one
    group named ``Other`` (CloudWatch, cloudwatch-metrics-insights-troubleshooting): the whole variant."""
    return f'SELECT {function}({metric}) FROM "{namespace}" WHERE {_where(dims)} GROUP BY InstanceType'


# The per-GPU series: the namespace's own dimensions, with InstanceId and AcceleratorId beside them
# (monitoring-cloudwatch-enhanced-metrics, "Instance-level utilization metrics", "Container-level utilization metrics").
PER_GPU_KEYS = {
    ENDPOINT_INSTANCES: ("AcceleratorId", "EndpointName", "InstanceId", "VariantName"),
    COMPONENT_COPIES: ("AcceleratorId", "ContainerId", "InferenceComponentName", "InstanceId"),
}


def per_gpu_query(function: str, metric: str, namespace: str, dims: Mapping[str, str], *, per_gpu: bool) -> str:
    """``function(metric)`` over the per-GPU series of ``dims``: one series (the fullest GPU, for an alarm), or one per
    GPU (``per_gpu``, for a graph). SCHEMA keeps out the instance-level series, which add up its GPUs (0-100 x GPUs)."""
    schema = ", ".join([f'"{namespace}"', *PER_GPU_KEYS[namespace]])
    group = " GROUP BY InstanceId, AcceleratorId" if per_gpu else ""
    return f"SELECT {function}({metric}) FROM SCHEMA({schema}) WHERE {_where(dims)}{group}"
