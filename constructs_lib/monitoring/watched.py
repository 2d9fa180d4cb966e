"""What a monitor watches: one endpoint variant, inference component or adapter, by its literal names.

Each watched construct (``GpuEndpoint``, ``ComponentEndpoint``, ``InferenceComponent``, ``AdapterComponent``)
describes itself as a ``Watched`` through ``watched()`` (the ``Watchable`` protocol); the metrics, alarms and
dashboards read nothing else of it. The names are literal, never the endpoint's attributes: the endpoint's
``DeploymentConfig`` names the alarms, so alarms naming the endpoint through a reference would make a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from constructs import Node

VARIANT = "variant"
COMPONENT = "component"
ADAPTER = "adapter"

Kind = Literal["variant", "component", "adapter"]


@dataclass(frozen=True)
class Watched:
    """One target of metrics, alarms and dashboard rows.

    :param kind: ``variant`` (an endpoint's production variant), ``component`` (an inference component and its
        copies) or ``adapter`` (an adapter component: invocations and latency only, since it reserves no GPU).
    :param name: the literal endpoint name (variant) or inference component name (component, adapter).
    :param title: what its dashboard rows and alarm descriptions call it (a component's construct id).
    :param variant_name: the variant (``variant`` only).
    :param hosts_components: a variant whose endpoint hosts inference components (its GPU metrics are the
        normalized ones, and its invocations are published per component).
    :param gpus: GPUs per instance (variant) for the GPU-memory share; ``None`` when unknown (1 is used).
    :param instance_types: the variant's instance types, the primary first (instance pools when more than one).
    :param pool_gpus: with instance pools, the GPUs per instance when every type has as many, for the per-type
        GPU graphs; ``None`` otherwise.
    :param enhanced: the endpoint's ``MetricsConfig.EnableEnhancedMetrics``.
    :param publish_s: the endpoint's ``MetricPublishFrequencyInSeconds`` (60 when unset).
    :param wakes_on_request: a component that scales to zero (a request finding no copy is how it wakes).
    :param queue: a variant of an asynchronous endpoint: its requests wait in a queue (the queue metrics, with the
        ``EndpointName`` dimension only: async-inference-monitor.html), and no instance may be normal.
    :param error_topic: with ``queue``, the name of the topic SageMaker announces failures on (its SNS metrics).
    :param idles_to_zero: with ``queue``, autoscaling may leave no instance (``min_instances=0``): "no instance" is
        then normal, and requests waiting with none are what the capacity alarm watches.
    :param wake_s: how long an instance may take to serve from zero (the download and start-up timeouts).
    """

    kind: Kind
    name: str
    title: str
    variant_name: str = ""
    hosts_components: bool = False
    gpus: int | None = None
    instance_types: tuple[str, ...] = ()
    pool_gpus: int | None = None
    enhanced: bool = False
    publish_s: int = 60
    wakes_on_request: bool = False
    queue: bool = False
    error_topic: str | None = None
    idles_to_zero: bool = False
    wake_s: int = 0

    @property
    def dimensions(self) -> dict[str, str]:
        """Its series' dimensions in ``AWS/SageMaker`` and the utilization namespaces."""
        if self.kind == VARIANT:
            return {"EndpointName": self.name, "VariantName": self.variant_name}
        return {"InferenceComponentName": self.name}

    @property
    def pools(self) -> bool:
        return len(self.instance_types) > 1


class Watchable(Protocol):
    """A construct a ``Monitor`` can watch."""

    @property
    def node(self) -> Node: ...

    def watched(self) -> Watched: ...
