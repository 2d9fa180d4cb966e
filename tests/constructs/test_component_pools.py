"""Instance pools in component mode (issue 28 item 2): InstancePools on the component endpoint's variant, one
Specifications entry per type on each component, every type checked with the component's own settings."""

from __future__ import annotations

import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from constructs_lib import AdapterComponent, Refusal, S3ModelData, ServingImage, get_engine
from constructs_lib.inference_component import ComponentEndpoint

POOLS = ["ml.g6e.xlarge", "ml.g5.2xlarge"]
CU129 = "0.10.2-gpu-py312-cu129-ubuntu22.04-sagemaker"


def make(endpoint_props: dict | None = None, **component_props):
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", **(endpoint_props or {}))
    component = endpoint.add_component("Chat", model=S3ModelData(bucket, "models/org--m/abc123"), **component_props)
    return stack, endpoint, component


def resource(t: dict, type_: str) -> dict:
    (found,) = [r for r in t["Resources"].values() if r["Type"] == type_]
    return found["Properties"]


def test_the_variant_carries_instance_pools_and_the_component_one_specification_per_type():
    stack, endpoint, component = make({"instance_pools": POOLS})
    t = Template.from_stack(stack).to_json()
    (variant,) = resource(t, "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    # InstancePools replaces InstanceType (SageMaker developer guide, realtime-endpoints-heterogeneous).
    assert "InstanceType" not in variant and "ModelName" not in variant
    assert variant["InstancePools"] == [
        {"InstanceType": "ml.g6.xlarge", "Priority": 1},
        {"InstanceType": "ml.g6e.xlarge", "Priority": 2},
        {"InstanceType": "ml.g5.2xlarge", "Priority": 3},
    ]
    assert variant["ManagedInstanceScaling"]["Status"] == "ENABLED"
    props = resource(t, "AWS::SageMaker::InferenceComponent")
    assert "Specification" not in props  # Specification XOR Specifications (cfn-lint schema)
    specs = props["Specifications"]
    assert [s["InstanceType"] for s in specs] == ["ml.g6.xlarge", *POOLS]
    model = {"Fn::GetAtt": [stack.get_logical_id(component.model), "ModelName"]}
    for spec in specs:
        assert spec["ModelName"] == model
        assert spec["ComputeResourceRequirements"] == {
            "NumberOfAcceleratorDevicesRequired": 1,
            "MinMemoryRequiredInMb": 1024,
        }
        assert set(spec["StartupParameters"]) == {
            "ModelDataDownloadTimeoutInSeconds",
            "ContainerStartupHealthCheckTimeoutInSeconds",
        }
    assert endpoint.instance_types == ["ml.g6.xlarge", *POOLS]


def test_without_pools_the_template_keeps_instance_type_and_the_singular_specification():
    stack, endpoint, _ = make()
    t = Template.from_stack(stack).to_json()
    (variant,) = resource(t, "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["InstanceType"] == "ml.g6.xlarge" and "InstancePools" not in variant
    props = resource(t, "AWS::SageMaker::InferenceComponent")
    assert "Specification" in props and "Specifications" not in props
    assert endpoint.instance_types == ["ml.g6.xlarge"]


def test_the_default_max_instances_leaves_update_room_on_the_type_with_fewest_gpus():
    # 2 copies x 1 GPU + a batch of 1 copy: 1 instance of ml.g6.12xlarge (4 GPUs), 3 of ml.g6.xlarge (1 GPU). Every
    # instance may be a fallback, so MaxInstanceCount is sized for it.
    stack, endpoint, _ = make(
        {"instance_type": "ml.g6.12xlarge", "instance_pools": ["ml.g6.xlarge"]},
        tensor_parallel_size=1,
        initial_copies=2,
    )
    (variant,) = resource(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["ManagedInstanceScaling"]["MaxInstanceCount"] == 3 == endpoint.max_instance_count
    assert endpoint.update_instance_count == 1


@pytest.mark.parametrize(
    ("endpoint_props", "component_props", "message"),
    [
        # The primary's copy takes 4 GPUs; a 1-GPU fallback cannot hold one.
        (
            {"instance_type": "ml.g6.12xlarge", "instance_pools": ["ml.g5.2xlarge"]},
            {},
            r"instance_pools\[0\]='ml.g5.2xlarge': tensor_parallel_size=4 is more than the 1 GPU\(s\) of one instance",
        ),
        # A given max_instances must leave room for an update batch on every type.
        (
            {"instance_type": "ml.g6.12xlarge", "instance_pools": ["ml.g6.xlarge"], "max_instances": 1},
            {"tensor_parallel_size": 1},
            r"instance_pools\[0\]='ml.g6.xlarge': max_instances=1 x 1 GPU\(s\) per instance give 1 GPUs",
        ),
        # Blackwell needs a CUDA 13 image; this one is CUDA 12, which the primary's L4 runs.
        (
            {"instance_pools": ["ml.g7e.2xlarge"], "image": ServingImage.from_dlc(get_engine("vllm"), CU129)},
            {"image": ServingImage.from_dlc(get_engine("vllm"), CU129)},
            r"instance_pools\[0\]='ml.g7e.2xlarge': instance_type='ml.g7e.2xlarge' .* needs a CUDA 13",
        ),
        # bfloat16 needs compute capability 8.0: the primary's L4 (8.9) runs it, a T4 (7.5) cannot.
        (
            {"instance_pools": ["ml.g4dn.xlarge"]},
            {"engine_env": {"SM_VLLM_DTYPE": "bfloat16"}},
            r"instance_pools\[0\]='ml.g4dn.xlarge': engine_env SM_VLLM_DTYPE=bfloat16: bfloat16 weights",
        ),
        # One copy's host memory reservation must fit that type's memory (32 GiB on ml.g5.2xlarge, 16 on ml.g6.xlarge).
        (
            {"instance_type": "ml.g5.2xlarge", "instance_pools": ["ml.g6.xlarge"]},
            {"min_memory_mb": 20000},
            r"instance_pools\[0\]='ml.g6.xlarge': min_memory_mb=20000 is more than the 16 GiB \(16384 MB\) of host",
        ),
        (
            {},
            {"min_memory_mb": 20000},
            r"min_memory_mb=20000 is more than the 16 GiB \(16384 MB\) of host memory of ml.g6",
        ),
    ],
)
def test_a_pool_entry_that_fails_a_components_checks_is_refused_naming_it(endpoint_props, component_props, message):
    with pytest.raises(Refusal) as e:
        make(endpoint_props, **component_props)
    assert re.search(message, str(e.value)), str(e.value)


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        (["ml.m5.xlarge"], r"instance_pools\[0\]='ml.m5.xlarge': instance_type='ml.m5.xlarge' is not in the GPU"),
        (["ml.g6.xlarge"], r"instance_pools\[0\]='ml.g6.xlarge' is listed twice"),
        (
            ["ml.g6e.xlarge", "ml.g5.xlarge", "ml.g5.2xlarge", "ml.g6e.2xlarge", "ml.g5.4xlarge"],
            r"instance_pools has 5 instance types; allowed: at most 4",
        ),
    ],
)
def test_the_endpoint_refuses_a_bad_pool_entry_naming_it(pools, message):
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    with pytest.raises(Refusal, match=message):
        ComponentEndpoint(stack, "Endpoint", instance_pools=pools)


def test_an_adapter_on_a_pooled_base_is_refused():
    stack, _, component = make({"instance_type": "ml.g6.12xlarge", "instance_pools": ["ml.g5.12xlarge"]})
    with pytest.raises(Refusal, match=r"an adapter component needs a base created with the singular Specification"):
        AdapterComponent(stack, "Sql", base=component, artifact_url="s3://my-adapters/sql/adapter.tar.gz")


def test_several_components_must_leave_update_room_together_on_the_type_with_fewest_gpus():
    # Each alone fits 2 instances of 1 GPU with its batch; together (1 + 1) + (1 + 1) = 4 GPUs do not. One 4-GPU
    # ml.g6.12xlarge pair would hold them, but every instance may be the ml.g6.xlarge fallback.
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(
        stack, "Endpoint", instance_type="ml.g6.12xlarge", instance_pools=["ml.g6.xlarge"], max_instances=2
    )
    endpoint.add_component("A", model=S3ModelData(bucket, "a/"), tensor_parallel_size=1)
    endpoint.add_component("B", model=S3ModelData(bucket, "b/"), tensor_parallel_size=1)
    with pytest.raises(
        RuntimeError,
        match=r"max_copies plus one update batch each need 4 GPUs, but max_instances=2 x 1 GPU\(s\) per instance "
        r"\(ml.g6.xlarge\) give 2",
    ):
        app.synth()
