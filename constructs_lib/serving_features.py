"""Observability and start-up features of the endpoint API, each off (SageMaker's default) unless asked for.

- ``MetricsConfig`` on AWS::SageMaker::EndpointConfig: ``EnableEnhancedMetrics`` ("utilization and invocation
  data at instance and container granularity") and ``MetricPublishFrequencyInSeconds`` ("Valid values are 10, 30,
  60, 120, 180, 240, and 300. The default is 60"), cfn-lint schema of AWS::SageMaker::EndpointConfig.
- ``DataCacheConfig.EnableCaching`` on an inference component's specification: "Whether the endpoint caches the
  model artifacts and container image on each instance it provisions for the inference component"; SageMaker
  turns it on by itself "on instance types with more than 232 GiB of local NVMe storage" (cfn-lint schema of
  AWS::SageMaker::InferenceComponent, DataCacheConfig and CurrentDataCacheConfig).
- ``RoutingConfig`` ``PREFIX_AWARE`` with ``PrefixAwareRoutingConfig``: ``PrefixLength`` 1024-65536 and
  ``ConcurrencyThreshold`` 1-1024, both "Required when RoutingStrategy is PREFIX_AWARE" (cfn-lint schema of
  AWS::SageMaker::EndpointConfig), so neither has a default here.

No CDK import: the configuration loader calls it before any construct exists.
"""

from __future__ import annotations

PUBLISH_FREQUENCIES_S = (10, 30, 60, 120, 180, 240, 300)
PREFIX_AWARE = "PREFIX_AWARE"
PREFIX_LENGTH_RANGE = (1024, 65536)
CONCURRENCY_THRESHOLD_RANGE = (1, 1024)


def metrics_problems(enhanced_metrics: bool, metric_publish_frequency_s: int | None) -> list[str]:
    if metric_publish_frequency_s is None or metric_publish_frequency_s in PUBLISH_FREQUENCIES_S:
        return []
    return [
        f"metric_publish_frequency_s={metric_publish_frequency_s!r}: allowed "
        f"{', '.join(map(str, PUBLISH_FREQUENCIES_S))} (MetricPublishFrequencyInSeconds), or leave it unset (60)"
    ]


def prefix_routing_problems(
    routing_strategy: str | None, prefix_length: int | None, concurrency_threshold: int | None
) -> list[str]:
    given = {"prefix_routing_length": prefix_length, "prefix_routing_concurrency": concurrency_threshold}
    if routing_strategy != PREFIX_AWARE:
        return [
            f"{key}={value!r}: only with routing_strategy={PREFIX_AWARE}"
            for key, value in given.items()
            if value is not None
        ]
    errors = [
        f"routing_strategy={PREFIX_AWARE} needs {key} (PrefixAwareRoutingConfig requires it; no default)"
        for key, value in given.items()
        if value is None
    ]
    for key, value, (low, high) in (
        ("prefix_routing_length", prefix_length, PREFIX_LENGTH_RANGE),
        ("prefix_routing_concurrency", concurrency_threshold, CONCURRENCY_THRESHOLD_RANGE),
    ):
        if value is not None and not low <= value <= high:
            errors.append(f"{key}={value}: allowed {low} to {high}")
    return errors
