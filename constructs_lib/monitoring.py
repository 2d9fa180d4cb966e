"""Seeing a deployment and guarding its updates: SageMaker metrics, alarms, an alarm topic and a dashboard.

Metric names, namespaces and dimensions are those of "Amazon SageMaker AI metrics in Amazon CloudWatch"
(sagemaker/latest/dg/monitoring-cloudwatch):

- ``AWS/SageMaker`` (invocation metrics, 1-minute): ``Invocations``, ``Invocation4XXErrors``,
  ``Invocation5XXErrors``, ``InvocationModelErrors`` (1 per failed request, else 0, so the Average is the
  failed share), ``ModelLatency`` and ``OverheadLatency`` (microseconds, percentiles valid), with
  dimensions ``EndpointName, VariantName``, or ``InferenceComponentName`` for a component.
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

Alarms whose dimensions name the endpoint must not reference it (``attr_endpoint_name``): the endpoint's
``DeploymentConfig`` names the alarms, so the alarms use the literal endpoint and component names, which
the constructs set themselves (``EndpointName``/``InferenceComponentName``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from .catalog import lookup_instance
from .hosting import sagemaker_metric
from .problems import construct_subject, refuse
from .update_policy import MAX_ROLLBACK_ALARMS, UpdatePolicy, reservation_problems

INVOCATIONS = "AWS/SageMaker"
ENDPOINT_INSTANCES = "/aws/sagemaker/Endpoints"
COMPONENT_COPIES = "/aws/sagemaker/InferenceComponents"
ONE_MINUTE = cdk.Duration.minutes(1)


# Each threshold's range, more than the first and at most the second: also the context keys' (context_keys.py).
THRESHOLD_RANGES = {
    "errors_5xx_percent": (0, 100),
    "p99_latency_ms": (0, 3_600_000),  # an hour: ModelLatency beyond any answer
    "gpu_memory_percent": (0, 100),
}
THRESHOLD_KEYS = {
    "errors_5xx_percent": "alarm_5xx_percent",
    "p99_latency_ms": "alarm_p99_latency_ms",
    "gpu_memory_percent": "alarm_gpu_memory_percent",
}


@dataclass(frozen=True)
class AlarmThresholds:
    """What each alarm watches for; ``None`` (``False`` for ``no_capacity``) leaves that alarm out.

    :param errors_5xx_percent: share of requests answered 5xx, in percent, in 2 of 3 minutes. Default: 5.
    :param p99_latency_ms: p99 ``ModelLatency`` in milliseconds, for 3 minutes in a row. ModelLatency covers
        the whole answer of a non-streamed request, so size it for the longest answer you expect; what it
        measures for a streamed response (first chunk or end) is not documented. Default: 30000 (30 s).
    :param gpu_memory_percent: GPU memory in use, percent of all GPUs, for 5 minutes in a row. vLLM
        reserves ``gpu_memory_utilization`` (0.9 by default) of each GPU at start-up and SGLang a similar
        share, so a healthy engine sits near that value: keep the threshold above it. Default: 95.
    :param no_capacity: an endpoint with no instance reporting for 5 minutes (standard mode), or a
        component whose requests find no copy (component mode, left out with scale-to-zero, where that is
        how it wakes up). Default: on.
    """

    errors_5xx_percent: float | None = 5.0
    p99_latency_ms: float | None = 30_000.0
    gpu_memory_percent: float | None = 95.0
    no_capacity: bool = True

    def problems(self) -> list[str]:
        errors = []
        for name, (low, high) in THRESHOLD_RANGES.items():
            value = getattr(self, name)
            if value is not None and not low < value <= high:
                errors.append(f"{THRESHOLD_KEYS[name]}={value}: allowed more than {low:g}, at most {high:g}")
        return errors


class AlarmTopic(Construct):
    """An SNS topic for alarm notifications: encrypted with its own KMS key, SSL-only, optionally e-mailed.

    CloudWatch publishes to an encrypted topic only when the key lets ``cloudwatch.amazonaws.com`` use it
    (kms:Decrypt, kms:GenerateDataKey*: SNS docs, sns-key-management "compatibility with AWS services");
    the AWS-managed ``alias/aws/sns`` key cannot be given that grant, hence a customer-managed key.
    """

    def __init__(self, scope: Construct, id: str, *, email: str | None = None) -> None:
        """
        :param email: an address to subscribe; SNS sends it a confirmation first, and nothing is delivered
            until it is confirmed. Default: no subscription (the alarms still show on the dashboard).
        """
        super().__init__(scope, id)
        self.key = kms.Key(
            self,
            "Key",
            description="Encrypts the LLM endpoint's alarm topic",
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.DESTROY,
            pending_window=cdk.Duration.days(7),
        )
        # No aws:SourceArn/aws:SourceAccount condition: SNS ("Enable compatibility between event sources from AWS
        # services and encrypted topics") and CloudWatch document this statement without one, and a key the request
        # does not carry would drop every notification unseen. The topic policy below limits the publishers.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
            )
        )
        # enforce_ssl: a topic policy denying aws:SecureTransport=false (cdk-nag AwsSolutions-SNS3);
        # master_key: server-side encryption (AwsSolutions-SNS2).
        self.topic = sns.Topic(self, "Resource", master_key=self.key, enforce_ssl=True)
        self.node.default_child = self.topic
        # The topic policy CDK writes for enforce_ssl replaces SNS's default policy, which let the account
        # publish; without an Allow for CloudWatch, every alarm action fails with "Resource: arn:...:alarm:...
        # is not authorized to perform: SNS:Publish" (AWS re:Post knowledge center,
        # cloudwatch-receive-sns-for-alarm-trigger). Scoped to this account's alarms in this region.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowPublishFromThisAccountsAlarms",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "ArnLike": {
                        "aws:SourceArn": cdk.Arn.format(
                            cdk.ArnComponents(
                                service="cloudwatch",
                                resource="alarm",
                                resource_name="*",
                                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                            ),
                            cdk.Stack.of(self),
                        )
                    },
                    "StringEquals": {"aws:SourceAccount": cdk.Stack.of(self).account},
                },
            )
        )
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))


# --- metrics with literal dimensions, for alarms and dashboards ---


def _variant_dims(endpoint_name: str, variant_name: str) -> dict[str, str]:
    return {"EndpointName": endpoint_name, "VariantName": variant_name}


def _component_dims(component_name: str) -> dict[str, str]:
    return {"InferenceComponentName": component_name}


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


def _alarm(
    scope: Construct,
    id: str,
    *,
    metric: cloudwatch.IMetric,
    threshold: float,
    comparison: cloudwatch.ComparisonOperator,
    periods: int,
    datapoints: int,
    missing: cloudwatch.TreatMissingData,
    description: str,
    topic: sns.ITopic | None,
) -> cloudwatch.Alarm:
    alarm = cloudwatch.Alarm(
        scope,
        id,
        metric=metric,
        threshold=threshold,
        comparison_operator=comparison,
        evaluation_periods=periods,
        datapoints_to_alarm=datapoints,
        treat_missing_data=missing,
        alarm_description=description,
    )
    if topic is not None:
        action = cloudwatch_actions.SnsAction(topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
    return alarm


@dataclass(frozen=True)
class AlarmWindow:
    """How an alarm reads its metric: ``datapoints`` of ``periods`` periods of ``period_s`` seconds.

    SageMaker's ``MetricPublishFrequencyInSeconds`` "applies to utilization metrics regardless of whether enhanced
    metrics is enabled. With enhanced metrics enabled, it also applies to invocation metrics"
    (monitoring-cloudwatch-enhanced-metrics). Read at one minute, a metric published every 120-300 s leaves empty
    minutes between datapoints: an alarm needing every minute of its window (missing data not breaching) could then
    never fire, and one whose missing data breaches would fire while the endpoint serves. So a metric the interval
    applies to is read at that interval (never below one minute), and the window keeps its length: as many periods as
    cover it, with the same share of them breaching. An instance-count alarm (missing data breaching) waits at least
    three intervals, so one late datapoint is not an outage."""

    period_s: int
    periods: int
    datapoints: int

    @classmethod
    def over(
        cls, window_s: int, datapoints: int, periods: int, *, publish_s: int, applies: bool, min_periods: int = 1
    ) -> AlarmWindow:
        period_s = max(60, publish_s) if applies else 60
        count = max(min_periods, math.ceil(window_s / period_s))
        return cls(period_s, count, max(1, math.ceil(datapoints * count / periods)))

    def span(self, count: int) -> str:
        """``count`` periods in words: minutes at the one-minute period, otherwise periods of the interval."""
        if self.period_s == 60:
            return f"{count} minute{'s' if count != 1 else ''}"
        return f"{count} period{'s' if count != 1 else ''} of {self.period_s} s"

    def read(self, metric: cloudwatch.IMetric) -> cloudwatch.IMetric:
        if self.period_s == 60:
            return metric
        # A math expression's period "overrides all periods in the metrics used in this math expression" (CDK).
        return metric.with_(period=cdk.Duration.seconds(self.period_s))  # type: ignore[attr-defined]


def serving_alarms(
    scope: Construct,
    *,
    what: str,
    dims: Mapping[str, str],
    gpu_memory: cloudwatch.IMetric,
    no_capacity: tuple[cloudwatch.IMetric, bool] | None,
    thresholds: AlarmThresholds,
    topic: sns.ITopic | None,
    publish_s: int = 60,
    enhanced: bool = False,
) -> list[cloudwatch.Alarm]:
    """The alarms of one variant or component, children of ``scope`` (ids ``Errors5xx``, ``LatencyP99``,
    ``GpuMemory``, ``NoCapacity``). ``no_capacity`` is the metric and whether it is an instance count
    (alarm below 1, missing data breaching) rather than a failure count (alarm at 1 or more). ``publish_s`` and
    ``enhanced``: the endpoint's ``MetricsConfig``, which sets the period each metric is read at (AlarmWindow)."""
    alarms = []
    if thresholds.errors_5xx_percent is not None:
        window = AlarmWindow.over(180, 2, 3, publish_s=publish_s, applies=enhanced)
        alarms.append(
            _alarm(
                scope,
                "Errors5xx",
                # Average of 1-or-0 per request: the share of requests answered 5xx.
                metric=window.read(sagemaker_metric("Invocation5XXErrors", dims, statistic="Average")),
                threshold=thresholds.errors_5xx_percent / 100,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                periods=window.periods,
                datapoints=window.datapoints,
                missing=cloudwatch.TreatMissingData.NOT_BREACHING,
                description=f"{what}: {thresholds.errors_5xx_percent:g}% or more of requests answered 5xx "
                f"in {window.datapoints} of {window.span(window.periods)}.",
                topic=topic,
            )
        )
    if thresholds.p99_latency_ms is not None:
        window = AlarmWindow.over(180, 3, 3, publish_s=publish_s, applies=enhanced)
        alarms.append(
            _alarm(
                scope,
                "LatencyP99",
                metric=window.read(sagemaker_metric("ModelLatency", dims, statistic="p99")),
                threshold=thresholds.p99_latency_ms * 1000,  # ModelLatency is in microseconds
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                periods=window.periods,
                datapoints=window.datapoints,
                missing=cloudwatch.TreatMissingData.NOT_BREACHING,
                description=f"{what}: p99 model latency above {thresholds.p99_latency_ms:g} ms for "
                f"{window.span(window.periods)}.",
                topic=topic,
            )
        )
    if thresholds.gpu_memory_percent is not None:
        window = AlarmWindow.over(300, 5, 5, publish_s=publish_s, applies=True)
        alarms.append(
            _alarm(
                scope,
                "GpuMemory",
                metric=window.read(gpu_memory),
                threshold=thresholds.gpu_memory_percent,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                periods=window.periods,
                datapoints=window.datapoints,
                missing=cloudwatch.TreatMissingData.NOT_BREACHING,
                description=f"{what}: GPU memory above {thresholds.gpu_memory_percent:g}% for "
                f"{window.span(window.periods)} "
                "(the engine reserves most of it at start-up; this is beyond that reservation).",
                topic=topic,
            )
        )
    if thresholds.no_capacity and no_capacity is not None:
        metric, is_count = no_capacity
        # The instance count is CPUUtilization's SampleCount (a utilization metric); failures an invocation metric.
        window = (
            AlarmWindow.over(300, 5, 5, publish_s=publish_s, applies=True, min_periods=3)
            if is_count
            else AlarmWindow.over(60, 1, 1, publish_s=publish_s, applies=enhanced)
        )
        alarms.append(
            _alarm(
                scope,
                "NoCapacity",
                metric=window.read(metric),
                threshold=1,
                comparison=(
                    cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD
                    if is_count
                    else cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
                ),
                periods=window.periods,
                datapoints=window.datapoints,
                # No instance reports no datapoint at all: missing data is the signal itself.
                missing=cloudwatch.TreatMissingData.BREACHING
                if is_count
                else cloudwatch.TreatMissingData.NOT_BREACHING,
                description=(
                    f"{what}: no instance reported for {window.span(window.periods)} "
                    "(no capacity serving the endpoint)."
                    if is_count
                    else f"{what}: requests found no copy to serve them (no capacity)."
                ),
                topic=topic,
            )
        )
    return alarms


def grant_describe_alarms(role: iam.IRole, alarms: Sequence[cloudwatch.IAlarm]) -> None:
    """SageMaker reads the rollback alarms as the execution role: "Ensure that your IAM execution role has
    permission to perform the cloudwatch:DescribeAlarms action on the auto-rollback alarms you specify"
    (sagemaker/latest/dg/deployment-guardrails-configuration). Scoped to the alarms' ARNs: only composite
    alarms need DescribeAlarms on "*" (CloudWatch API reference, DescribeAlarms), and these are metric alarms."""
    if alarms:
        iam.Grant.add_to_principal(
            grantee=role, actions=["cloudwatch:DescribeAlarms"], resource_arns=[a.alarm_arn for a in alarms]
        )


def rollback_alarms(alarms: Sequence[cloudwatch.Alarm], node_path: str) -> list[cloudwatch.Alarm]:
    if len(alarms) > MAX_ROLLBACK_ALARMS:
        raise ValueError(
            f"{node_path}: {len(alarms)} rollback alarms; AutoRollbackConfiguration takes at most {MAX_ROLLBACK_ALARMS}"
        )
    return list(alarms)


def dashboard_url(dashboard: cloudwatch.Dashboard) -> str:
    """The console address of ``dashboard`` (commercial partition console)."""
    return cdk.Fn.join(
        "",
        [
            "https://",
            cdk.Aws.REGION,
            ".console.aws.amazon.com/cloudwatch/home?region=",
            cdk.Aws.REGION,
            "#dashboards/dashboard/",
            dashboard.dashboard_name,
        ],
    )


def smoke_text(smoke_test: Any | None) -> cloudwatch.TextWidget | None:
    """The last smoke test's figures, read from its resource attributes (the values of the stack outputs)."""
    if smoke_test is None:
        return None
    markdown = cdk.Fn.join(
        "",
        [
            "### Last smoke test\nTime to first token: **",
            smoke_test.time_to_first_token_ms,
            " ms**; whole answer: ",
            smoke_test.latency_ms,
            " ms. It runs at every deploy that changes the model, config, image or component.",
        ],
    )
    return cloudwatch.TextWidget(markdown=markdown, width=8, height=6)


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


def enhanced_metrics_on(endpoint: Any) -> bool:
    """Whether ``endpoint``'s EndpointConfig enables enhanced metrics (its ``MetricsConfig``, set by the construct)."""
    config = getattr(getattr(endpoint, "endpoint_config", None), "metrics_config", None)
    return bool(getattr(config, "enable_enhanced_metrics", False))


def publish_frequency_s(endpoint: Any) -> int:
    """``endpoint``'s ``MetricPublishFrequencyInSeconds`` (its ``MetricsConfig``); SageMaker's 60 when unset."""
    config = getattr(getattr(endpoint, "endpoint_config", None), "metrics_config", None)
    return int(getattr(config, "metric_publish_frequency_in_seconds", None) or 60)


def gpus_per_type(instance_types: Sequence[str], primary: Any) -> dict[str, int]:
    """GPUs per instance of each type: the primary's resolved spec (it may be outside the catalog), the pools' from the
    catalog (every pool entry is a catalog type: instance_pools.pool_problems)."""
    counts = {}
    for index, instance_type in enumerate(instance_types):
        spec = primary if index == 0 and primary is not None else lookup_instance(instance_type)
        counts[instance_type] = spec.gpu_count if spec is not None else 1
    return counts


def pool_graphs(
    dims: Mapping[str, str],
    gpus: int | None,
    *,
    namespace: str,
    prefix: str = "",
) -> list[cloudwatch.GraphWidget]:
    """One line per instance type (and ``Other``, the whole variant), each graph one grouped query: invocations, the
    slowest answer and (``gpus``: the GPUs per instance, the same on every type in standard mode, where a pool must
    have the primary's GPU count) GPU memory and GPU use of the fullest instance as a share of its GPUs."""
    calls = insights(per_type_query("SUM", "Invocations", INVOCATIONS, dims), label="")
    slowest = insights(per_type_query("MAX", "ModelLatency", INVOCATIONS, dims), label="")
    graphs = [
        _graph(f"{prefix}Invocations per instance type (per minute)", [calls]),
        _graph(f"{prefix}Slowest model latency per instance type (microseconds)", [slowest]),
    ]
    if gpus:
        for metric, title in (("GPUMemoryUtilization", "GPU memory"), ("GPUUtilization", "GPU utilization")):
            query = insights(per_type_query("MAX", metric, namespace, dims), label="")
            # Math over a GROUP BY query applies to each series (cloudwatch-metrics-insights-math: "q1/1024/1024").
            share = cloudwatch.MathExpression(
                expression=f"q0 / {gpus}", using_metrics={"q0": query}, label="", period=ONE_MINUTE
            )
            graphs.append(_graph(f"{title} per instance type (% of its GPUs, fullest instance)", [share]))
    return graphs


def per_gpu_graphs(namespace: str, dims: Mapping[str, str], metrics: Sequence[str]) -> list[cloudwatch.GraphWidget]:
    """One line per GPU (``InstanceId AcceleratorId``) of each metric, 0-100 for that GPU (enhanced metrics)."""
    return [
        _graph(
            f"{metric} per GPU (%)", [insights(per_gpu_query("MAX", metric, namespace, dims, per_gpu=True), label="")]
        )
        for metric in metrics
    ]


# --- the constructs' side: mixins giving GpuEndpoint, ComponentEndpoint and InferenceComponent the same API ---


class _DashboardOwner:
    dashboard: cloudwatch.Dashboard | None = None

    def _new_dashboard(
        self, rows: Sequence[Sequence[cloudwatch.IWidget | None]], scope: Construct | None
    ) -> cloudwatch.Dashboard:
        if self.dashboard is not None:
            raise ValueError(f"{self.node.path}: add_dashboard was already called")  # type: ignore[attr-defined]
        self.dashboard = cloudwatch.Dashboard(scope or self, "Dashboard")  # type: ignore[arg-type]
        for row in rows:
            widgets = [w for w in row if w is not None]
            if widgets:
                self.dashboard.add_widgets(*widgets)
        return self.dashboard

    def _pool_and_gpu_rows(self, dims: Mapping[str, str], *, pools: bool) -> list[list[Any]]:
        """With instance pools (``pools``), a row of per-instance-type graphs; with enhanced metrics, a row of per-GPU
        graphs of the endpoint's instances."""
        rows: list[list[Any]] = []
        types = list(getattr(self, "instance_types", None) or [])
        if pools and len(types) > 1:
            counts = set(gpus_per_type(types, getattr(self, "instance", None)).values())
            gpus = counts.pop() if len(counts) == 1 else None  # standard mode: one GPU count (pool_problems)
            rows.append(pool_graphs(dims, gpus, namespace=ENDPOINT_INSTANCES))
        if enhanced_metrics_on(self):
            rows.append(per_gpu_graphs(ENDPOINT_INSTANCES, dims, ("GPUMemoryUtilization", "GPUUtilization")))
        return rows

    @property
    def dashboard_url(self) -> str:
        if self.dashboard is None:
            raise ValueError(f"{self.node.path}: call add_dashboard first")  # type: ignore[attr-defined]
        return dashboard_url(self.dashboard)


def _graph(title: str, left: Sequence[cloudwatch.IMetric], *, label: str | None = None, **kwargs: Any):
    return cloudwatch.GraphWidget(
        title=title,
        left=list(left),
        width=kwargs.pop("width", 8),
        height=6,
        left_y_axis=cloudwatch.YAxisProps(label=label, show_units=False) if label else None,
        **kwargs,
    )


class InvocationMetrics:
    """The invocation metrics an endpoint variant and an inference component both publish in AWS/SageMaker
    (SageMaker monitoring docs, "Endpoint invocation metrics"), through the owner's own ``metric``."""

    def metric_invocation_4xx_errors(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("Invocation4XXErrors", statistic="Sum", **kwargs)  # type: ignore[attr-defined]

    def metric_invocation_5xx_errors(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("Invocation5XXErrors", statistic="Sum", **kwargs)  # type: ignore[attr-defined]

    def metric_invocation_model_errors(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("InvocationModelErrors", statistic="Sum", **kwargs)  # type: ignore[attr-defined]

    def metric_overhead_latency(self, **kwargs: Any) -> cloudwatch.Metric:
        """SageMaker's own latency on top of the model's, in microseconds (p90 by default)."""
        return self.metric("OverheadLatency", statistic=kwargs.pop("statistic", "p90"), **kwargs)  # type: ignore[attr-defined]


class MonitoredEndpoint(InvocationMetrics, _DashboardOwner):
    """Metrics, alarms, dashboard and update policy of a ``GpuEndpoint`` (one model on whole instances).

    Expects ``monitored_name`` (the literal endpoint name), ``variant_name``, ``instance``, ``endpoint``,
    ``role`` and ``metric`` on the construct.
    """

    monitored_name: str
    alarms: Sequence[cloudwatch.Alarm] = ()
    update_policy: UpdatePolicy | None = None

    def _dims(self) -> dict[str, str]:
        return _variant_dims(self.monitored_name, self.variant_name)  # type: ignore[attr-defined]

    # metric_* helpers (dimensions through the endpoint's attributes, like metric_invocations)
    def metric_cpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("CPUUtilization", namespace=ENDPOINT_INSTANCES, **kwargs)  # type: ignore[attr-defined]

    def metric_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("MemoryUtilization", namespace=ENDPOINT_INSTANCES, **kwargs)  # type: ignore[attr-defined]

    def metric_disk_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("DiskUtilization", namespace=ENDPOINT_INSTANCES, **kwargs)  # type: ignore[attr-defined]

    def metric_instance_count(self, **kwargs: Any) -> cloudwatch.Metric:
        """Instances reporting: every instance sends one CPUUtilization datapoint a minute."""
        return self.metric("CPUUtilization", namespace=ENDPOINT_INSTANCES, statistic="SampleCount", **kwargs)  # type: ignore[attr-defined]

    def _gpu_memory_percent(self) -> cloudwatch.IMetric:
        """With enhanced metrics, the fullest single GPU (the per-GPU series, 0-100 each). Without, GPUMemoryUtilization
        (0-100 x GPUs) divided by the GPU count, a share of all GPUs, and the Maximum over instances is the fullest one.
        With instance pools that aggregate still covers every instance of every type ("Existing CloudWatch metrics that
        are aggregated across all instances in a variant ... continue to work the same way", realtime-endpoints-
        heterogeneous), and one divisor fits them all: in standard mode every pool type has the primary's GPU count
        (the model spans every GPU, so pool_problems refuses a type whose GPUs differ from tensor_parallel_size)."""
        if enhanced_metrics_on(self):
            query = per_gpu_query("MAX", "GPUMemoryUtilization", ENDPOINT_INSTANCES, self._dims(), per_gpu=False)
            return insights(query, label="GPU memory (fullest GPU, %)")
        gpus = self.instance.gpu_count if self.instance else 1  # type: ignore[attr-defined]
        raw = sagemaker_metric("GPUMemoryUtilization", self._dims(), namespace=ENDPOINT_INSTANCES, statistic="Maximum")
        return cloudwatch.MathExpression(
            expression=f"m / {gpus}", using_metrics={"m": raw}, label="GPU memory (% of all GPUs)", period=ONE_MINUTE
        )

    no_capacity_alarm: cloudwatch.Alarm | None = None

    def add_alarms(
        self,
        thresholds: AlarmThresholds | None = None,
        *,
        topic: sns.ITopic | None = None,
        serving: Construct | None = None,
    ) -> list[cloudwatch.Alarm]:
        """Alarms on 5xx errors, p99 model latency, GPU memory and instances reporting (``AlarmThresholds``
        says when each fires), notifying ``topic`` when given. They are children ``Alarms/<Name>``.

        :param serving: what completes once the endpoint serves (the stack's smoke test). The instances-reporting
            alarm (``NoCapacity``) treats missing data as breaching, since no instance reports nothing at all
            ("breaching: Missing data points are treated as 'bad' and breaching the threshold", CloudWatch user
            guide, AlarmThatSendsEmail "Configuring how CloudWatch alarms treat missing data"). Before the endpoint
            has instances and while it is deleted there is no data either, so that alarm is created after
            ``serving`` and deleted before it, and it is left out of the update's rollback alarms (the endpoint's
            DeploymentConfig cannot name an alarm that waits for the endpoint; a blue/green or rolling update keeps
            old instances reporting, so it has nothing to add there). Default: the endpoint, whose CloudFormation
            create polls DescribeEndpoint for up to 160 minutes and whose delete polls it too (cfn-lint schema of
            AWS::SageMaker::Endpoint, handlers), so the alarm starts once the endpoint is created and goes first.
        """
        thresholds = thresholds or AlarmThresholds()
        _check(self, thresholds.problems())
        if getattr(self, "alarms", None):
            raise ValueError(f"{self.node.path}: add_alarms was already called")  # type: ignore[attr-defined]
        scope = Construct(self, "Alarms")  # type: ignore[arg-type]
        dims = self._dims()
        instances = sagemaker_metric("CPUUtilization", dims, namespace=ENDPOINT_INSTANCES, statistic="SampleCount")
        self.alarms = serving_alarms(
            scope,
            what=f"SageMaker endpoint {self.monitored_name}",
            dims=dims,
            gpu_memory=self._gpu_memory_percent(),
            no_capacity=(instances, True),
            thresholds=thresholds,
            topic=topic,
            publish_s=publish_frequency_s(self),
            enhanced=enhanced_metrics_on(self),
        )
        self.no_capacity_alarm = next((a for a in self.alarms if a.node.id == "NoCapacity"), None)
        if self.no_capacity_alarm is not None:
            self.no_capacity_alarm.node.add_dependency(serving or self.endpoint)  # type: ignore[attr-defined]
        return self.alarms

    def apply_update_policy(
        self, policy: UpdatePolicy, *, rollback_on: Sequence[cloudwatch.Alarm] | None = None
    ) -> UpdatePolicy:
        """Set the endpoint's ``DeploymentConfig``: blue/green with ``policy``'s traffic shifting, rolled back
        when one of ``rollback_on`` fires. Default ``rollback_on``: the alarms of ``add_alarms``. Call it after
        ``autoscale_instances``, so that a canary or linear step is also checked against the autoscaled range."""
        provisioning = getattr(self, "provisioning_s", 0)
        provision = getattr(self, "provision_s", 0)
        instances = self.instance_count  # type: ignore[attr-defined]
        scaling = getattr(self, "scalable_target", None)
        # The most instances an update can start at: autoscaling's maximum, which UpdateEndpoint keeps
        # (RetainAllVariantProperties, set by autoscale_instances); the timeout counts a batch for each of them.
        fleet = max(instances, scaling.node.default_child.max_capacity) if scaling is not None else instances
        problems = policy.problems(
            component_mode=False,
            instances=instances,
            provisioning_s=provisioning,
            provision_s=provision,
            most_instances=fleet,
        )
        if getattr(self, "capacity_reservation_arn", None):
            problems += reservation_problems(
                policy, fleet=fleet, reservation_instances=getattr(self, "capacity_reservation_instances", None)
            )
        _check(self, problems)
        if scaling is not None:  # autoscale_instances was called first (the stack does)
            target = scaling.node.default_child
            for warning in policy.autoscaled_warnings(
                min_instances=target.min_capacity, max_instances=target.max_capacity
            ):
                cdk.Annotations.of(self).add_warning_v2("llm:update-policy-autoscaled", warning)  # type: ignore[arg-type]
        alarms = rollback_alarms(
            [
                a
                for a in (list(rollback_on) if rollback_on is not None else list(getattr(self, "alarms", [])))
                if a is not self.no_capacity_alarm  # created after the endpoint serves (add_alarms)
            ],
            self.node.path,  # type: ignore[attr-defined]
        )
        timeout = policy.derived_timeout_s(instances=fleet, provisioning_s=provisioning, provision_s=provision)
        config = policy.endpoint_deployment_config([a.alarm_name for a in alarms], timeout_s=timeout)
        self.endpoint.deployment_config = config  # type: ignore[attr-defined]
        if config is not None:
            grant_describe_alarms(self.role, alarms)  # type: ignore[attr-defined]
        self.update_policy = policy
        return policy

    def add_dashboard(self, *, smoke_test: Any | None = None, scope: Construct | None = None) -> cloudwatch.Dashboard:
        """A dashboard of this endpoint: invocations and errors, latency, GPU, CPU/memory/disk, instances,
        with instance pools the same per instance type, with enhanced metrics GPU memory and use per GPU,
        the alarms' state and, with ``smoke_test`` (an ``EndpointSmokeTest``), its last figures.

        :param scope: where the ``Dashboard`` goes. Default: this construct. A dashboard showing a smoke test
            that depends on this construct must go elsewhere (the stack), or the two depend on each other.
        """
        dims = self._dims()
        calls = invocation_metrics(dims)
        alarms = list(getattr(self, "alarms", []))
        return self._new_dashboard(
            [
                [
                    _graph("Invocations and errors (per minute)", list(calls.values()), width=12),
                    _graph("Latency p50/p99 (microseconds)", latency_metrics(dims), width=12),
                ],
                [
                    _graph(
                        "GPU utilization and GPU memory (% x GPUs per instance)",
                        [
                            sagemaker_metric(n, dims, namespace=ENDPOINT_INSTANCES)
                            for n in ("GPUUtilization", "GPUMemoryUtilization")
                        ],
                    ),
                    _graph(
                        "CPU (% x cores), memory and disk (%)",
                        [
                            sagemaker_metric(n, dims, namespace=ENDPOINT_INSTANCES)
                            for n in ("CPUUtilization", "MemoryUtilization", "DiskUtilization")
                        ],
                    ),
                    _graph(
                        "Instances reporting",
                        [
                            sagemaker_metric(
                                "CPUUtilization", dims, namespace=ENDPOINT_INSTANCES, statistic="SampleCount"
                            ).with_(label="instances")
                        ],
                    ),
                ],
                *self._pool_and_gpu_rows(dims, pools=True),
                [
                    cloudwatch.AlarmStatusWidget(alarms=alarms, title="Alarms", width=16, height=6) if alarms else None,
                    smoke_text(smoke_test),
                ],
            ],
            scope,
        )


class MonitoredComponent(InvocationMetrics):
    """Metrics, alarms and update policy of an ``InferenceComponent`` (dimension ``InferenceComponentName``).

    Expects ``inference_component_name``, ``component``, ``role``, ``scale_to_zero``, ``initial_copies`` and
    ``metric`` on the construct.
    """

    alarms: Sequence[cloudwatch.Alarm] = ()
    update_policy: UpdatePolicy | None = None

    def metric_gpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        """GPU use of the component's copies, 0-100 over the GPUs reserved for them."""
        return self.metric("GPUUtilizationNormalized", namespace=COMPONENT_COPIES, **kwargs)  # type: ignore[attr-defined]

    def metric_gpu_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("GPUMemoryUtilizationNormalized", namespace=COMPONENT_COPIES, **kwargs)  # type: ignore[attr-defined]

    def metric_cpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("CPUUtilizationNormalized", namespace=COMPONENT_COPIES, **kwargs)  # type: ignore[attr-defined]

    def metric_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("MemoryUtilizationNormalized", namespace=COMPONENT_COPIES, **kwargs)  # type: ignore[attr-defined]

    def metric_copy_count(self, **kwargs: Any) -> cloudwatch.Metric:
        """Copies reporting: each copy sends one CPUUtilizationNormalized datapoint a minute."""
        return self.metric(  # type: ignore[attr-defined]
            "CPUUtilizationNormalized", namespace=COMPONENT_COPIES, statistic="SampleCount", **kwargs
        )

    def _gpu_memory_metric(self, dims: Mapping[str, str]) -> cloudwatch.IMetric:
        """The fullest copy (0-100 of its GPUs, whatever the instance type: instance pools need nothing more) or, with
        the endpoint's enhanced metrics, the fullest single GPU of any copy."""
        if enhanced_metrics_on(getattr(self, "endpoint", None)):
            query = per_gpu_query("MAX", "GPUMemoryUtilizationNormalized", COMPONENT_COPIES, dims, per_gpu=False)
            return insights(query, label="GPU memory (fullest GPU of a copy, %)")
        return sagemaker_metric("GPUMemoryUtilizationNormalized", dims, namespace=COMPONENT_COPIES, statistic="Maximum")

    def add_alarms(
        self, thresholds: AlarmThresholds | None = None, *, topic: sns.ITopic | None = None
    ) -> list[cloudwatch.Alarm]:
        """Alarms on this component's 5xx errors, p99 model latency, GPU memory of its copies and requests
        that find no copy (left out with scale-to-zero). Children ``Alarms/<Name>``."""
        thresholds = thresholds or AlarmThresholds()
        _check(self, thresholds.problems())
        if getattr(self, "alarms", None):
            raise ValueError(f"{self.node.path}: add_alarms was already called")  # type: ignore[attr-defined]
        name = self.inference_component_name  # type: ignore[attr-defined]
        dims = _component_dims(name)
        scope = Construct(self, "Alarms")  # type: ignore[arg-type]
        failures = sagemaker_metric("NoCapacityInvocationFailures", dims, statistic="Sum")
        self.alarms = serving_alarms(
            scope,
            what=f"SageMaker inference component {name}",
            dims=dims,
            gpu_memory=self._gpu_memory_metric(dims),
            # With scale-to-zero, a request finding no copy is how the component wakes: not an alarm.
            no_capacity=None if self.scale_to_zero else (failures, False),  # type: ignore[attr-defined]
            thresholds=thresholds,
            topic=topic,
            publish_s=publish_frequency_s(getattr(self, "endpoint", None)),
            enhanced=enhanced_metrics_on(getattr(self, "endpoint", None)),
        )
        return self.alarms

    def apply_update_policy(
        self, policy: UpdatePolicy, *, rollback_on: Sequence[cloudwatch.Alarm] | None = None
    ) -> UpdatePolicy:
        """Set the component's ``DeploymentConfig``: a rolling update of ``policy.step_size`` copies per
        batch, rolled back when one of ``rollback_on`` fires. Default ``rollback_on``: ``add_alarms``'s."""
        copies = max(self.initial_copies, self.max_copies)  # type: ignore[attr-defined]
        provisioning = getattr(self, "provisioning_s", 0)
        # A batch may need a new instance (managed instance scaling), which may wait for capacity.
        provision = getattr(getattr(self, "endpoint", None), "provision_s", 0)
        problems = policy.problems(
            component_mode=True, instances=0, copies=copies, provisioning_s=provisioning, provision_s=provision
        )
        room = self._rolling_room_problem(policy.extra_instances_for_component_update())  # type: ignore[attr-defined]
        _check(self, problems + ([room] if room else []))
        alarms = rollback_alarms(
            list(rollback_on) if rollback_on is not None else list(getattr(self, "alarms", [])),
            self.node.path,  # type: ignore[attr-defined]
        )
        # An explicit limit, so that an update that cannot finish fails and rolls back in time (derived_timeout_s).
        timeout = policy.derived_timeout_s(
            instances=0, copies=copies, provisioning_s=provisioning, provision_s=provision
        )
        config = policy.component_deployment_config([a.alarm_name for a in alarms], timeout_s=timeout)
        self.component.deployment_config = config  # type: ignore[attr-defined]
        if config is not None:
            grant_describe_alarms(self.role, alarms)  # type: ignore[attr-defined]
            # 5-50% of the copy count when the update starts, which copy autoscaling may have moved anywhere
            # from min_copies (at least 1: scale-to-zero's 0 leaves nothing to roll) to max_copies.
            scaled = getattr(self, "scalable_target", None) is not None
            fewest = max(self.min_copies if scaled else self.initial_copies, 1)  # type: ignore[attr-defined]
            most = max(self.max_copies if scaled else self.initial_copies, 1)  # type: ignore[attr-defined]
            if policy.step_percent is not None:
                pass  # CAPACITY_PERCENT within 5-50 % of any copy count (API InferenceComponentRollingUpdatePolicy)
            elif most == 1:
                # One copy: no batch of whole copies is 5-50% of it (CapacitySizeValue is at least 1, botocore
                # sagemaker): a COPY_COUNT batch is the whole component. The default (update_policy unset) is
                # CAPACITY_PERCENT 50 instead (UpdatePolicy.default_for); this one was asked for.
                cdk.Annotations.of(self).add_warning_v2(  # type: ignore[arg-type]
                    "llm:rolling-batch",
                    f"Rolling update of a one-copy component with a batch of {policy.step_size} copy (COPY_COUNT): "
                    "the batch is the whole component, 100 % of its copies, outside the 5-50% of the copy count "
                    "SageMaker documents (API InferenceComponentRollingUpdatePolicy); if SageMaker refuses it, the "
                    "update fails and rolls back. Leave update_policy unset for the default batch of 50 % "
                    "(CAPACITY_PERCENT), or set update_policy=none.",
                )
            elif policy.step_size * 2 > fewest:
                cdk.Annotations.of(self).add_warning_v2(  # type: ignore[arg-type]
                    "llm:rolling-batch",
                    f"Rolling update batch of {policy.step_size} copies is more than half of the component's "
                    f"{fewest} copies (its fewest when an update may start); SageMaker documents a batch of 5-50% of "
                    "the copy count (API InferenceComponentRollingUpdatePolicy). With one copy the batch is the whole "
                    "component: if SageMaker refuses it, the update fails and rolls back; set update_policy=none to "
                    "update without a rolling policy.",
                )
            elif policy.step_size < most * 0.05:
                cdk.Annotations.of(self).add_warning_v2(  # type: ignore[arg-type]
                    "llm:rolling-batch",
                    f"Rolling update batch of {policy.step_size} copies is less than 5% of the component's {most} "
                    "copies (its most when an update may start); SageMaker documents a batch of 5-50% of the copy "
                    "count (API InferenceComponentRollingUpdatePolicy). Raise update_step_size to at least "
                    f"{math.ceil(most * 0.05)}.",
                )
        self.update_policy = policy
        return policy


class MonitoredComponentEndpoint(_DashboardOwner):
    """Endpoint-level metrics of a ``ComponentEndpoint``, its components' alarms and one dashboard of all."""

    monitored_name: str

    def _dims(self) -> dict[str, str]:
        return _variant_dims(self.monitored_name, self.variant_name)  # type: ignore[attr-defined]

    def metric_gpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        """GPU use of the endpoint's instances, 0-100 whatever the GPU count."""
        return self.metric("GPUUtilizationNormalized", namespace=ENDPOINT_INSTANCES, **kwargs)  # type: ignore[attr-defined]

    def metric_gpu_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("GPUMemoryUtilizationNormalized", namespace=ENDPOINT_INSTANCES, **kwargs)  # type: ignore[attr-defined]

    def metric_gpu_reservation(self, **kwargs: Any) -> cloudwatch.Metric:
        """Share of the instances' GPUs reserved by component copies (0-100)."""
        return self.metric("GPUReservation", namespace=ENDPOINT_INSTANCES, **kwargs)  # type: ignore[attr-defined]

    def metric_cpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("CPUUtilizationNormalized", namespace=ENDPOINT_INSTANCES, **kwargs)  # type: ignore[attr-defined]

    def metric_disk_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("DiskUtilization", namespace=ENDPOINT_INSTANCES, **kwargs)  # type: ignore[attr-defined]

    def metric_instance_count(self, **kwargs: Any) -> cloudwatch.Metric:
        """Instances reporting (0 when scaled to zero)."""
        return self.metric("CPUUtilization", namespace=ENDPOINT_INSTANCES, statistic="SampleCount", **kwargs)  # type: ignore[attr-defined]

    @property
    def alarms(self) -> list[cloudwatch.Alarm]:
        """Every alarm of every component on this endpoint."""
        return [a for c in self.components for a in getattr(c, "alarms", [])]  # type: ignore[attr-defined]

    def add_alarms(
        self, thresholds: AlarmThresholds | None = None, *, topic: sns.ITopic | None = None
    ) -> list[cloudwatch.Alarm]:
        """``add_alarms`` on each component added so far."""
        for component in self.components:  # type: ignore[attr-defined]
            component.add_alarms(thresholds, topic=topic)
        return self.alarms

    def add_dashboard(self, *, smoke_test: Any | None = None, scope: Construct | None = None) -> cloudwatch.Dashboard:
        """A dashboard of the endpoint (GPU, CPU, disk, GPU reservation, instances) and of each component
        added so far (invocations and errors, latency, GPU of its copies, copies, requests finding no copy).
        ``scope`` as for ``GpuEndpoint.add_dashboard``."""
        dims = self._dims()
        rows: list[list[Any]] = [
            [
                _graph(
                    "Endpoint GPU utilization, GPU memory, GPU reserved (%)",
                    [
                        sagemaker_metric(n, dims, namespace=ENDPOINT_INSTANCES)
                        for n in ("GPUUtilizationNormalized", "GPUMemoryUtilizationNormalized", "GPUReservation")
                    ],
                ),
                _graph(
                    "Endpoint CPU, disk (%)",
                    [
                        sagemaker_metric(n, dims, namespace=ENDPOINT_INSTANCES)
                        for n in ("CPUUtilizationNormalized", "DiskUtilization")
                    ],
                ),
                _graph(
                    "Instances reporting",
                    [
                        sagemaker_metric(
                            "CPUUtilization", dims, namespace=ENDPOINT_INSTANCES, statistic="SampleCount"
                        ).with_(label="instances")
                    ],
                ),
            ]
        ]
        # Per instance type on each component's row: a component-hosting endpoint publishes its invocations per
        # component, and its instances' GPU use mixes the copies of every component.
        rows += self._pool_and_gpu_rows(dims, pools=False)
        types = list(getattr(self, "instance_types", None) or [])
        for component in self.components:  # type: ignore[attr-defined]
            name = component.inference_component_name
            cdims = _component_dims(name)
            calls = invocation_metrics(cdims)
            calls["NoCapacityInvocationFailures"] = sagemaker_metric(
                "NoCapacityInvocationFailures", cdims, statistic="Sum"
            )
            rows.append(
                [
                    _graph(f"{component.node.id}: invocations and errors (per minute)", list(calls.values())),
                    _graph(f"{component.node.id}: latency p50/p99 (microseconds)", latency_metrics(cdims)),
                    _graph(
                        f"{component.node.id}: copies, GPU and GPU memory of the copies (%)",
                        [
                            sagemaker_metric(n, cdims, namespace=COMPONENT_COPIES)
                            for n in ("GPUUtilizationNormalized", "GPUMemoryUtilizationNormalized")
                        ],
                        right=[
                            sagemaker_metric(
                                "CPUUtilizationNormalized", cdims, namespace=COMPONENT_COPIES, statistic="SampleCount"
                            ).with_(label="copies")
                        ],
                    ),
                ]
            )
            if len(types) > 1:
                per_type = pool_graphs(cdims, None, namespace=COMPONENT_COPIES, prefix=f"{component.node.id}: ")
                copies = insights(
                    per_type_query("MAX", "GPUMemoryUtilizationNormalized", COMPONENT_COPIES, cdims), label=""
                )
                per_type.append(
                    _graph(
                        f"{component.node.id}: GPU memory of the copies per instance type (%, fullest copy)", [copies]
                    )
                )
                rows.append(per_type)
            if enhanced_metrics_on(self):
                rows.append(
                    per_gpu_graphs(
                        COMPONENT_COPIES, cdims, ("GPUMemoryUtilizationNormalized", "GPUUtilizationNormalized")
                    )
                )
        alarms = self.alarms
        rows.append(
            [
                cloudwatch.AlarmStatusWidget(alarms=alarms, title="Alarms", width=16, height=6) if alarms else None,
                smoke_text(smoke_test),
            ]
        )
        return self._new_dashboard(rows, scope)


def _check(construct: Any, problems: list[str]) -> None:
    refuse(construct_subject(type(construct).__name__, construct), problems)


__all__ = [
    "AlarmThresholds",
    "AlarmTopic",
    "MonitoredComponent",
    "MonitoredComponentEndpoint",
    "MonitoredEndpoint",
    "dashboard_url",
]
