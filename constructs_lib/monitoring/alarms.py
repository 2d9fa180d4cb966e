"""Alarms on what a monitor watches, their SNS topic, and what an update's rollback needs of them.

Alarms whose dimensions name the endpoint must not reference it (``attr_endpoint_name``): the endpoint's
``DeploymentConfig`` names the alarms, so the alarms use the literal endpoint and component names, which
the constructs set themselves (``EndpointName``/``InferenceComponentName``): ``Watched``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from ..hosting import sagemaker_metric
from ..update_policy import MAX_ROLLBACK_ALARMS
from .metrics import gpu_memory, no_capacity
from .watched import ADAPTER, VARIANT, Watched

# Each threshold's range, more than the first and at most the second: also the context keys' (context_keys.py).
THRESHOLD_RANGES = {
    "errors_5xx_percent": (0, 100),
    "p99_latency_ms": (0, 3_600_000),  # an hour: ModelLatency beyond any answer
    "gpu_memory_percent": (0, 100),
    "model_errors_percent": (0, 100),
    "async_failures": (0, 1_000_000),
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
    :param model_errors_percent: share of requests whose call to the model did not end in a 2xx, in percent, in 2
        of 3 minutes (``InvocationModelErrors``: the container's 4xx and 5xx, low-level socket errors, malformed
        responses and timeouts; monitoring-cloudwatch). Callers get these as ``ModelError``, HTTP 424 (botocore
        sagemaker-runtime). It counts the container's 4xx too, which callers cause (vLLM answers a prompt longer
        than ``max_model_len`` with a 400), and it is among an update's rollback alarms: set it above the share of
        bad requests your callers send. Default: off.
    :param async_failures: an asynchronous endpoint's failed requests (``InvocationFailures``, a Sum) in 5 minutes
        at or above this; other endpoints have no such alarm. Default: 1 (any failure).
    """

    errors_5xx_percent: float | None = 5.0
    p99_latency_ms: float | None = 30_000.0
    gpu_memory_percent: float | None = 95.0
    no_capacity: bool = True
    model_errors_percent: float | None = None
    async_failures: float | None = 1.0

    def problems(self) -> list[str]:
        errors = []
        for name, (low, high) in THRESHOLD_RANGES.items():
            value = getattr(self, name)
            if value is not None and not low < value <= high:
                errors.append(f"{name}={value}: allowed more than {low}, at most {high}")
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


WHAT = {VARIANT: "endpoint", "component": "inference component", ADAPTER: "adapter component"}


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
        if not isinstance(metric, cloudwatch.Metric | cloudwatch.MathExpression):
            raise TypeError(f"cannot read {metric!r} at another period")
        return metric.with_(period=cdk.Duration.seconds(self.period_s))


def serving_alarms(
    scope: Construct, target: Watched, thresholds: AlarmThresholds, *, topic: sns.ITopic | None
) -> list[cloudwatch.Alarm]:
    """The alarms of one variant, component or adapter, children of ``scope`` (ids ``Errors5xx``, ``ModelErrors``,
    ``LatencyP99``, ``GpuMemory``, ``NoCapacity``; an adapter has no GPU of its own and no capacity alarm: its
    base's copies serve it). ``target.publish_s`` and ``target.enhanced``, the endpoint's ``MetricsConfig``, set the
    period each metric is read at (AlarmWindow)."""
    what = f"SageMaker {WHAT[target.kind]} {target.name}"
    dims = target.dimensions
    publish_s, enhanced = target.publish_s, target.enhanced
    memory, capacity = gpu_memory(target), no_capacity(target)
    alarms = []
    # Invocation metrics sent as 1 per failed request, else 0 (metrics.py): the Average is the failed share.
    shares = (
        ("Errors5xx", "Invocation5XXErrors", thresholds.errors_5xx_percent, "answered 5xx"),
        (
            "ModelErrors",
            "InvocationModelErrors",
            thresholds.model_errors_percent,
            "failed in or on the way to the model's container (ModelError to the caller)",
        ),
    )
    for id, metric_name, percent, failed in shares:
        if percent is None or (target.queue and id == "ModelErrors"):
            # InvocationModelErrors is not among an asynchronous endpoint's metrics (async-inference-monitor.html's
            # list): GpuEndpoint.add_alarms and the configuration refuse the threshold there.
            continue
        window = AlarmWindow.over(180, 2, 3, publish_s=publish_s, applies=enhanced)
        alarms.append(
            _alarm(
                scope,
                id,
                metric=window.read(sagemaker_metric(metric_name, dims, statistic="Average")),
                threshold=percent / 100,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                periods=window.periods,
                datapoints=window.datapoints,
                missing=cloudwatch.TreatMissingData.NOT_BREACHING,
                description=f"{what}: {percent:g}% or more of requests {failed} "
                f"in {window.datapoints} of {window.span(window.periods)}.",
                topic=topic,
            )
        )
    if thresholds.p99_latency_ms is not None and not target.queue:
        # (an asynchronous request may run up to its invocation timeout by design: no latency alarm there)
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
    if thresholds.gpu_memory_percent is not None and memory is not None:
        window = AlarmWindow.over(300, 5, 5, publish_s=publish_s, applies=True)
        alarms.append(
            _alarm(
                scope,
                "GpuMemory",
                metric=window.read(memory),
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
    if target.queue and thresholds.async_failures is not None:
        alarms.append(
            _alarm(
                scope,
                "AsyncFailures",
                metric=sagemaker_metric("InvocationFailures", dims, statistic="Sum", period=cdk.Duration.minutes(5)),
                threshold=thresholds.async_failures,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                periods=1,
                datapoints=1,
                missing=cloudwatch.TreatMissingData.NOT_BREACHING,
                description=f"{what}: {thresholds.async_failures:g} or more queued requests failed in 5 minutes "
                "(InvocationFailures; each failure is also on the error topic).",
                topic=topic,
            )
        )
    if thresholds.no_capacity and target.idles_to_zero:
        # No instance is normal for an asynchronous endpoint that scales to zero; requests waiting with none for
        # longer than an instance takes to start are not (HasBacklogWithoutCapacity: 1 while requests are queued and
        # no instance runs; async-inference-monitor.html). At least 15 minutes, in 5-minute periods.
        periods = max(3, math.ceil((target.wake_s + 300) / 300))
        alarms.append(
            _alarm(
                scope,
                "NoCapacity",
                metric=sagemaker_metric(
                    "HasBacklogWithoutCapacity",
                    {"EndpointName": target.name},
                    statistic="Minimum",
                    period=cdk.Duration.minutes(5),
                ),
                threshold=1,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                periods=periods,
                datapoints=periods,
                missing=cloudwatch.TreatMissingData.NOT_BREACHING,
                description=f"{what}: requests waited {periods * 5} minutes in the queue with no instance to serve "
                "them (longer than an instance takes to start).",
                topic=topic,
            )
        )
        capacity = None
    if thresholds.no_capacity and capacity is not None:
        metric, is_count = capacity
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
    """At most what ``AutoRollbackConfiguration`` takes."""
    if len(alarms) > MAX_ROLLBACK_ALARMS:
        raise ValueError(
            f"{node_path}: {len(alarms)} rollback alarms; AutoRollbackConfiguration takes at most {MAX_ROLLBACK_ALARMS}"
        )
    return list(alarms)
