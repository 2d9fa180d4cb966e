"""One dashboard builder for every target: an endpoint's variant, each of its components, each adapter.

The rows are laid out when the app synthesizes (an aspect of the dashboard), so a component or adapter added to
an endpoint after ``add_dashboard`` has its rows too, and the alarm row shows every alarm that exists by then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import aws_cdk as cdk
import jsii
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct, IConstruct

from ..hosting import sagemaker_metric
from .metrics import (
    COMPONENT_COPIES,
    ENDPOINT_INSTANCES,
    INVOCATIONS,
    ONE_MINUTE,
    copy_count,
    insights,
    instance_count,
    invocation_metrics,
    latency_metrics,
    per_gpu_query,
    per_type_query,
)
from .watched import ADAPTER, VARIANT, Watched

Row = list[cloudwatch.IWidget]


class SmokeFigures(Protocol):
    """What the dashboard reads of an ``EndpointSmokeTest``: its last figures (resource attributes)."""

    @property
    def time_to_first_token_ms(self) -> str: ...

    @property
    def latency_ms(self) -> str: ...


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


def smoke_text(smoke_test: SmokeFigures | None) -> cloudwatch.TextWidget | None:
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


def graph(title: str, left: Sequence[cloudwatch.IMetric], **kwargs: Any) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=list(left), width=kwargs.pop("width", 8), height=6, **kwargs)


def pool_graphs(
    dims: Mapping[str, str], gpus: int | None, *, namespace: str, prefix: str = ""
) -> list[cloudwatch.GraphWidget]:
    """One line per instance type (and ``Other``, the whole variant), each graph one grouped query: invocations, the
    slowest answer and (``gpus``: the GPUs per instance, the same on every type in standard mode, where a pool must
    have the primary's GPU count) GPU memory and GPU use of the fullest instance as a share of its GPUs."""
    calls = insights(per_type_query("SUM", "Invocations", INVOCATIONS, dims), label="")
    slowest = insights(per_type_query("MAX", "ModelLatency", INVOCATIONS, dims), label="")
    graphs = [
        graph(f"{prefix}Invocations per instance type (per minute)", [calls]),
        graph(f"{prefix}Slowest model latency per instance type (microseconds)", [slowest]),
    ]
    if gpus:
        for metric, title in (("GPUMemoryUtilization", "GPU memory"), ("GPUUtilization", "GPU utilization")):
            query = insights(per_type_query("MAX", metric, namespace, dims), label="")
            # Math over a GROUP BY query applies to each series (cloudwatch-metrics-insights-math: "q1/1024/1024").
            share = cloudwatch.MathExpression(
                expression=f"q0 / {gpus}", using_metrics={"q0": query}, label="", period=ONE_MINUTE
            )
            graphs.append(graph(f"{title} per instance type (% of its GPUs, fullest instance)", [share]))
    return graphs


def per_gpu_graphs(namespace: str, dims: Mapping[str, str], metrics: Sequence[str]) -> list[cloudwatch.GraphWidget]:
    """One line per GPU (``InstanceId AcceleratorId``) of each metric, 0-100 for that GPU (enhanced metrics)."""
    return [
        graph(
            f"{metric} per GPU (%)", [insights(per_gpu_query("MAX", metric, namespace, dims, per_gpu=True), label="")]
        )
        for metric in metrics
    ]


def queue_graphs(target: Watched) -> Row:
    """An asynchronous endpoint's queue: backlog and the oldest request's age (``EndpointName`` only), failed and
    expired requests (with the variant), and the messages on its error topic (AWS/SNS ``NumberOfMessagesPublished``
    by ``TopicName``); async-inference-monitor.html, SNS developer guide sns-monitoring-using-cloudwatch."""
    endpoint = {"EndpointName": target.name}
    backlog = graph(
        "Queue: requests waiting, and the oldest one's age (s)",
        [sagemaker_metric("ApproximateBacklogSize", endpoint, statistic="Maximum")],
        right=[sagemaker_metric("ApproximateAgeOfOldestRequest", endpoint, statistic="Maximum")],
    )
    failed = graph(
        "Queued requests failed and expired (per minute)",
        [
            sagemaker_metric("InvocationFailures", target.dimensions, statistic="Sum"),
            sagemaker_metric("ExpiredRequests", target.dimensions, statistic="Sum"),
        ],
    )
    row: Row = [backlog, failed]
    if target.error_topic:
        row.append(
            graph(
                "Error topic: failures announced (per minute)",
                [
                    sagemaker_metric(
                        "NumberOfMessagesPublished",
                        {"TopicName": target.error_topic},
                        namespace="AWS/SNS",
                        statistic="Sum",
                    )
                ],
            )
        )
    return row


def _instances(dims: Mapping[str, str]) -> cloudwatch.GraphWidget:
    return graph("Instances reporting", [instance_count(dims).with_(label="instances")])


def _usage(names: Sequence[str], dims: Mapping[str, str], namespace: str) -> list[cloudwatch.IMetric]:
    return [sagemaker_metric(n, dims, namespace=namespace) for n in names]


def rows_of(target: Watched) -> list[Row]:
    """The dashboard rows of one target, in the order they are shown."""
    dims = target.dimensions
    if target.kind == VARIANT and not target.hosts_components:
        rows: list[Row] = [
            [
                graph("Invocations and errors (per minute)", list(invocation_metrics(dims).values()), width=12),
                graph("Latency p50/p99 (microseconds)", latency_metrics(dims), width=12),
            ],
            [
                graph(
                    "GPU utilization and GPU memory (% x GPUs per instance)",
                    _usage(("GPUUtilization", "GPUMemoryUtilization"), dims, ENDPOINT_INSTANCES),
                ),
                graph(
                    "CPU (% x cores), memory and disk (%)",
                    _usage(("CPUUtilization", "MemoryUtilization", "DiskUtilization"), dims, ENDPOINT_INSTANCES),
                ),
                _instances(dims),
            ],
        ]
        if target.pools:
            rows.append(pool_graphs(dims, target.pool_gpus, namespace=ENDPOINT_INSTANCES))
        if target.queue:
            rows.append(queue_graphs(target))
    elif target.kind == VARIANT:
        # A component-hosting endpoint publishes its invocations per component (their rows), and its instances'
        # GPU use mixes the copies of every component: per instance type is on each component's row.
        rows = [
            [
                graph(
                    "Endpoint GPU utilization, GPU memory, GPU reserved (%)",
                    _usage(
                        ("GPUUtilizationNormalized", "GPUMemoryUtilizationNormalized", "GPUReservation"),
                        dims,
                        ENDPOINT_INSTANCES,
                    ),
                ),
                graph(
                    "Endpoint CPU, disk (%)",
                    _usage(("CPUUtilizationNormalized", "DiskUtilization"), dims, ENDPOINT_INSTANCES),
                ),
                _instances(dims),
            ]
        ]
    else:
        prefix = f"{target.title}: "
        calls = invocation_metrics(dims)
        latency = graph(f"{prefix}latency p50/p99 (microseconds)", latency_metrics(dims))
        if target.kind == ADAPTER:
            # Served by its base's copies: no GPU, copies or capacity of its own.
            return [[graph(f"{prefix}invocations and errors (per minute)", list(calls.values())), latency]]
        calls["NoCapacityInvocationFailures"] = sagemaker_metric("NoCapacityInvocationFailures", dims, statistic="Sum")
        copies = copy_count(dims).with_(label="copies")
        rows = [
            [
                graph(f"{prefix}invocations and errors (per minute)", list(calls.values())),
                latency,
                graph(
                    f"{prefix}copies, GPU and GPU memory of the copies (%)",
                    _usage(("GPUUtilizationNormalized", "GPUMemoryUtilizationNormalized"), dims, COMPONENT_COPIES),
                    right=[copies],
                ),
            ]
        ]
        if target.pools:
            per_type: Row = pool_graphs(dims, None, namespace=COMPONENT_COPIES, prefix=prefix)
            fullest = insights(
                per_type_query("MAX", "GPUMemoryUtilizationNormalized", COMPONENT_COPIES, dims), label=""
            )
            per_type.append(graph(f"{prefix}GPU memory of the copies per instance type (%, fullest copy)", [fullest]))
            rows.append(per_type)
        if target.enhanced:
            rows.append(
                per_gpu_graphs(COMPONENT_COPIES, dims, ("GPUMemoryUtilizationNormalized", "GPUUtilizationNormalized"))
            )
        return rows
    if target.enhanced:
        rows.append(per_gpu_graphs(ENDPOINT_INSTANCES, dims, ("GPUMemoryUtilization", "GPUUtilization")))
    return rows


def new_dashboard(
    scope: Construct,
    *,
    targets: Callable[[], Sequence[Watched]],
    alarms: Callable[[], Sequence[cloudwatch.IAlarm]],
    smoke_test: SmokeFigures | None,
) -> cloudwatch.Dashboard:
    """A ``Dashboard`` child of ``scope``: each of ``targets`` (read at synth) with its rows, then the state of
    ``alarms`` (read at synth) beside the last smoke test's figures."""
    dashboard = cloudwatch.Dashboard(scope, "Dashboard")

    def rows() -> list[Row]:
        laid = [row for target in targets() for row in rows_of(target)]
        found = list(alarms())
        status = cloudwatch.AlarmStatusWidget(alarms=found, title="Alarms", width=16, height=6) if found else None
        last = [w for w in (status, smoke_text(smoke_test)) if w is not None]
        return [*laid, last] if last else laid

    cdk.Aspects.of(dashboard).add(_LayOut(dashboard, rows), priority=cdk.AspectPriority.MUTATING)
    return dashboard


@jsii.implements(cdk.IAspect)
class _LayOut:
    """Adds the dashboard's rows once, when the app synthesizes (aspects run before the template is written)."""

    def __init__(self, dashboard: cloudwatch.Dashboard, rows: Callable[[], list[Row]]) -> None:
        self.dashboard, self.rows, self.done = dashboard, rows, False

    def visit(self, node: IConstruct) -> None:
        if node is not self.dashboard or self.done:
            return
        self.done = True
        for row in self.rows():
            if row:
                self.dashboard.add_widgets(*row)
