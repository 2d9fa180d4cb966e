"""The deployment's dashboard, alarms, alarm topic and update policy, from the context keys below.

Their keys are declared with every other key in ``context_keys.py``; ``config.py`` adds
``observability_problems`` (the checks across keys) to its list; the stack calls ``add_observability`` once
the endpoint and the smoke test exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk

from constructs_lib import (
    AlarmThresholds,
    AlarmTopic,
    ComponentEndpoint,
    EndpointSmokeTest,
    GpuEndpoint,
    InferenceComponent,
    UpdatePolicy,
)
from constructs_lib.rules import (
    INFERENCE_COMPONENT,
    metrics_problems,
    prefix_routing_problems,
    reservation_pools_problem,
    reservation_problems,
)

from .context_keys import KEYS


def most_copies(values: Mapping[str, Any]) -> int:
    """The most copies a component update can start at (copy autoscaling may leave it at max_copies)."""
    return max(values.get("initial_copies") or 1, values.get("max_copies") or 1)


def update_policy_of(values: Mapping[str, Any]) -> UpdatePolicy:
    component_mode = values.get("deployment_mode") == INFERENCE_COMPONENT
    default = UpdatePolicy.default_for(component_mode, copies=most_copies(values))
    kind = values.get("update_policy") or default.kind
    return UpdatePolicy(
        kind,
        # Unset update_policy on a one-copy component: the default's CAPACITY_PERCENT batch (default_for).
        step_percent=default.step_percent if not values.get("update_policy") else None,
        step_size=values.get("update_step_size", 1),
        wait_s=values.get("update_wait_s", 300),
        termination_wait_s=values.get("update_termination_wait_s"),
        max_execution_timeout_s=values.get("update_timeout_s"),
    )


def update_batch_copies(values: Mapping[str, Any]) -> int:
    """Copies a component update places beside the serving ones (UpdatePolicy.extra_instances_for_component_update)."""
    return update_policy_of({**values, "deployment_mode": INFERENCE_COMPONENT}).extra_instances_for_component_update()


def thresholds_of(values: Mapping[str, Any]) -> AlarmThresholds:
    """The thresholds the context sets: each registry key naming an ``AlarmThresholds`` field (``threshold``)."""
    return AlarmThresholds(**{key.threshold: values[key.name] for key in KEYS if key.threshold and key.name in values})


def observability_problems(values: Mapping[str, Any]) -> list[str]:
    """Cross-key checks; keys that failed to parse are skipped (their problem is already reported)."""
    if "update_policy" not in values or "deployment_mode" not in values:
        return []
    component_mode = values["deployment_mode"] == INFERENCE_COMPONENT
    policy = update_policy_of(values)
    instances = values.get("instance_count", 1)
    problems = policy.problems(
        component_mode=component_mode,
        instances=instances,
        # Standard mode has no copies: with them, steps() counted one copy, not the instances (and refused a batch
        # of more than one instance as "more than the component's 1 copies").
        copies=most_copies(values) if component_mode else None,
        provisioning_s=(values.get("download_timeout_s") or 0) + (values.get("startup_timeout_s") or 0),
        # A total across every pool before the operation fails (SageMaker guide, realtime-endpoints-heterogeneous).
        provision_s=values.get("provision_timeout_s") or 0,
        # An autoscaled variant keeps its count through an update (RetainAllVariantProperties): the most it starts at.
        most_instances=max(instances, values.get("max_instances") or instances),
    )
    if values.get("capacity_reservation_instances") is not None and not values.get("capacity_reservation_arn"):
        problems.append(
            f"capacity_reservation_instances={values['capacity_reservation_instances']}: only with "
            "capacity_reservation_arn (the size of that reservation)"
        )
    if values.get("capacity_reservation_arn") and not component_mode and not problems:
        instances = values.get("instance_count", 1)
        problems += reservation_problems(
            policy,
            fleet=max(instances, values.get("max_instances") or instances),
            reservation_instances=values.get("capacity_reservation_instances"),
        )
    if pools := reservation_pools_problem(values.get("instance_pools"), values.get("capacity_reservation_arn")):
        problems.append(pools)
    problems += metrics_problems(bool(values.get("enhanced_metrics")), values.get("metric_publish_frequency_s"))
    problems += prefix_routing_problems(
        values.get("routing_strategy"), values.get("prefix_routing_length"), values.get("prefix_routing_concurrency")
    )
    if values.get("data_cache") is not None and not component_mode:
        problems.append(f"data_cache={values['data_cache']}: only with deployment_mode=inference-component")
    if values.get("alarm_email") and not values.get("alarms", True):
        problems.append(f"alarm_email={values['alarm_email']!r}: only with alarms=true (there is nothing to send)")
    return problems


def add_observability(
    stack: cdk.Stack,
    values: Mapping[str, Any],
    *,
    endpoint: GpuEndpoint | ComponentEndpoint,
    component: InferenceComponent | None,
    smoke_test: EndpointSmokeTest | None,
    gpu_memory_share: float | None = None,
) -> None:
    """Alarms (and their topic), the update policy, the dashboard and their outputs, from a deployment's settings
    (``vars(config)``)."""
    policy = update_policy_of(values)
    guarded: GpuEndpoint | InferenceComponent = component if component is not None else endpoint
    alarms = []
    if values["alarms"]:
        topic = AlarmTopic(stack, "AlarmTopic", email=values["alarm_email"])
        thresholds = thresholds_of(values)
        alarms = guarded.add_alarms(thresholds, topic=topic.topic)
        cdk.CfnOutput(stack, "AlarmTopicArn", value=topic.topic.topic_arn, description="SNS topic of the alarms")
        limit = thresholds.gpu_memory_percent
        if gpu_memory_share is not None and limit is not None and gpu_memory_share * 100 >= limit:
            cdk.Annotations.of(guarded).add_warning_v2(
                "llm:gpu-memory-alarm",
                f"The engine reserves {gpu_memory_share:g} of GPU memory, at or above alarm_gpu_memory_percent="
                f"{limit:g}: the GPU memory alarm would always fire (and roll back every update). Raise the "
                "threshold or set it to null.",
            )
    guarded.apply_update_policy(policy, rollback_on=alarms)
    if values["dashboard"]:
        # In the stack: the smoke test depends on the endpoint construct and the dashboard shows the smoke test.
        endpoint.add_dashboard(smoke_test=smoke_test, scope=stack)
        cdk.CfnOutput(
            stack, "DashboardUrl", value=endpoint.dashboard_url, description="CloudWatch dashboard of this deployment"
        )
