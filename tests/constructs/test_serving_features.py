"""Enhanced metrics, component data caching and prefix-aware routing (issue 28 item 4), each off unless asked for.

Source: the cfn-lint schemas of AWS::SageMaker::EndpointConfig (MetricsConfig, RoutingConfig,
PrefixAwareRoutingConfig) and AWS::SageMaker::InferenceComponent (DataCacheConfig).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from constructs_lib import GpuEndpoint, S3ModelData
from constructs_lib.inference_component import ComponentEndpoint
from tests.conftest import build
from tests.stacks.test_config import problems_of

# Whole apps synthesized per feature: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")


def _one(t: dict, type_: str) -> dict:
    (props,) = [r["Properties"] for r in t["Resources"].values() if r["Type"] == type_]
    return props


def _stack() -> tuple[cdk.Stack, s3.IBucket]:
    stack = cdk.Stack(cdk.App(), "Test")
    return stack, s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")


def test_nothing_is_set_by_default():
    stack, bucket = _stack()
    GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "m/"))
    assert "MetricsConfig" not in _one(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")
    stack, bucket = _stack()
    ComponentEndpoint(stack, "Endpoint").add_component("Chat", model=S3ModelData(bucket, "m/"))
    t = Template.from_stack(stack).to_json()
    assert "MetricsConfig" not in _one(t, "AWS::SageMaker::EndpointConfig")
    assert "DataCacheConfig" not in _one(t, "AWS::SageMaker::InferenceComponent")["Specification"]


def test_enhanced_metrics_on_a_standard_endpoint():
    stack, bucket = _stack()
    GpuEndpoint(
        stack, "Endpoint", model=S3ModelData(bucket, "m/"), enhanced_metrics=True, metric_publish_frequency_s=10
    )
    config = _one(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")
    assert config["MetricsConfig"] == {"EnableEnhancedMetrics": True, "MetricPublishFrequencyInSeconds": 10}


def test_prefix_aware_routing_data_cache_and_metrics_on_components():
    stack, bucket = _stack()
    endpoint = ComponentEndpoint(
        stack,
        "Endpoint",
        routing_strategy="PREFIX_AWARE",
        prefix_routing_length=4096,
        prefix_routing_concurrency=8,
        enhanced_metrics=True,
    )
    endpoint.add_component("Chat", model=S3ModelData(bucket, "m/"), data_cache=True)
    t = Template.from_stack(stack).to_json()
    config = _one(t, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["ProductionVariants"]
    assert variant["RoutingConfig"] == {
        "RoutingStrategy": "PREFIX_AWARE",
        "PrefixAwareRoutingConfig": {"PrefixLength": 4096, "ConcurrencyThreshold": 8},
    }
    assert config["MetricsConfig"] == {"EnableEnhancedMetrics": True}
    spec = _one(t, "AWS::SageMaker::InferenceComponent")["Specification"]
    assert spec["DataCacheConfig"] == {"EnableCaching": True}


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"routing_strategy": "PREFIX_AWARE"}, r"PREFIX_AWARE needs prefix_routing_length"),
        ({"prefix_routing_length": 4096}, r"prefix_routing_length=4096: only with routing_strategy=PREFIX_AWARE"),
        (
            {"routing_strategy": "PREFIX_AWARE", "prefix_routing_length": 100, "prefix_routing_concurrency": 8},
            r"prefix_routing_length=100: allowed 1024 to 65536",
        ),
        ({"metric_publish_frequency_s": 15}, r"metric_publish_frequency_s=15: allowed 10, 30, 60"),
    ],
)
def test_bad_settings_fail_synth(props, message):
    stack, _ = _stack()
    with pytest.raises(ValueError, match=message):
        ComponentEndpoint(stack, "Endpoint", **props)
    stack, bucket = _stack()
    if "metric_publish_frequency_s" not in props:  # the same routing rules on a standard endpoint
        with pytest.raises(ValueError, match=message):
            GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "m/"), **props)


def test_prefix_aware_routing_on_a_standard_endpoint():
    """RoutingConfig is on every ProductionVariant and routes "to the instances that the endpoint hosts" (API
    ProductionVariantRoutingConfig): a standard endpoint of several instances routes shared prefixes too."""
    stack, bucket = _stack()
    GpuEndpoint(
        stack,
        "Endpoint",
        model=S3ModelData(bucket, "m/"),
        instance_count=2,
        routing_strategy="PREFIX_AWARE",
        prefix_routing_length=2048,
        prefix_routing_concurrency=16,
    )
    (variant,) = _one(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["RoutingConfig"] == {
        "RoutingStrategy": "PREFIX_AWARE",
        "PrefixAwareRoutingConfig": {"PrefixLength": 2048, "ConcurrencyThreshold": 16},
    }
    stack, bucket = _stack()
    GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "m/"), routing_strategy="LEAST_OUTSTANDING_REQUESTS")
    (variant,) = _one(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}  # no prefix settings
    with pytest.raises(ValueError, match=r"routing_strategy='ROUND_ROBIN' is not a routing strategy"):
        GpuEndpoint(_stack()[0], "Endpoint", model=S3ModelData(bucket, "m/"), routing_strategy="ROUND_ROBIN")


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"metric_publish_frequency_s": "45"}, r"metric_publish_frequency_s=45: allowed 10, 30"),
        ({"data_cache": "true"}, r"data_cache=True: only with deployment_mode=inference-component"),
        (
            {"deployment_mode": "inference-component", "routing_strategy": "PREFIX_AWARE"},
            r"routing_strategy=PREFIX_AWARE needs prefix_routing_concurrency",
        ),
    ],
)
def test_bad_context_fails_synth_naming_the_key(context, message):
    problems = problems_of(**context)
    assert any(re.search(message, p) for p in problems), problems


def test_a_standard_stack_with_prefix_routing_passes_cfn_lint(tmp_path):
    build(
        outdir=str(tmp_path),
        instance_count="2",
        routing_strategy="PREFIX_AWARE",
        prefix_routing_length="2048",
        prefix_routing_concurrency="16",
    ).synth()
    path = tmp_path / "LlmEndpoint.template.json"
    (variant,) = _one(json.loads(path.read_text()), "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["RoutingConfig"]["RoutingStrategy"] == "PREFIX_AWARE"
    result = subprocess.run([CFN_LINT, "--ignore-checks", "W3005", "--", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_stack_with_every_feature_passes_cfn_lint(tmp_path):
    build(
        outdir=str(tmp_path),
        deployment_mode="inference-component",
        routing_strategy="PREFIX_AWARE",
        prefix_routing_length="2048",
        prefix_routing_concurrency="16",
        data_cache="true",
        enhanced_metrics="true",
        metric_publish_frequency_s="30",
    ).synth()
    path = tmp_path / "LlmEndpoint.template.json"
    t = json.loads(path.read_text())
    assert _one(t, "AWS::SageMaker::EndpointConfig")["MetricsConfig"]["MetricPublishFrequencyInSeconds"] == 30
    result = subprocess.run([CFN_LINT, "--ignore-checks", "W3005", "--", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_provision_timeout_is_on_the_variant_in_both_modes_and_checked():
    """VariantInstanceProvisionTimeoutInSeconds: how long SageMaker retries capacity before "the next instance pool
    (if configured)", 300-3600 (botocore ProductionVariant; cfn-lint schema of AWS::SageMaker::EndpointConfig)."""
    stack, bucket = _stack()
    GpuEndpoint(
        stack,
        "Endpoint",
        model=S3ModelData(bucket, "m/"),
        instance_pools=["ml.g5.xlarge"],
        provision_timeout=cdk.Duration.minutes(10),
    )
    (variant,) = _one(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["VariantInstanceProvisionTimeoutInSeconds"] == 600
    stack, bucket = _stack()
    ComponentEndpoint(stack, "Endpoint", provision_timeout=cdk.Duration.seconds(900)).add_component(
        "Chat", model=S3ModelData(bucket, "m/")
    )
    (variant,) = _one(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["VariantInstanceProvisionTimeoutInSeconds"] == 900
    stack, bucket = _stack()
    GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "m/"))
    (variant,) = _one(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert "VariantInstanceProvisionTimeoutInSeconds" not in variant  # SageMaker's own unless given
    for bad in (cdk.Duration.seconds(120), cdk.Duration.hours(2)):
        with pytest.raises(ValueError, match=r"provision_timeout=\d+ s: allowed 300 to 3600 whole seconds"):
            GpuEndpoint(_stack()[0], "Endpoint", model=S3ModelData(bucket, "m/"), provision_timeout=bad)


def test_provision_timeout_key_reaches_the_variant_and_is_range_checked():
    assert problems_of(provision_timeout_s="120") == ["provision_timeout_s='120': out of range; allowed: 300 to 3600"]
    t = build(provision_timeout_s="1200")
    (stack,) = [c for c in t.node.children if isinstance(c, cdk.Stack)]
    (variant,) = _one(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["VariantInstanceProvisionTimeoutInSeconds"] == 1200
