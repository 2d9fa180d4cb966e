"""A DeploymentPreflight checks the network its checked_model is served on, wired by the hosting construct itself
(issue 36: the check was off unless a library user found ``check_network`` in the source)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from constructs_lib import ComponentEndpoint, DeploymentPreflight, GpuEndpoint, Refusal, S3ModelData
from constructs_lib.preflight_check import NETWORK_CHECK_ACTIONS

SUBNETS = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
GROUP = "sg-0123456789abcdef0"


def _stack():
    stack = cdk.Stack(cdk.App(), "Net")
    model = S3ModelData(s3.Bucket.from_bucket_name(stack, "Models", "my-models"), "models/org--m/abc/")
    return stack, model


def _network(stack: cdk.Stack, subnets=SUBNETS, group=GROUP, tag: str = "") -> dict:
    return {
        "vpc_subnets": ec2.SubnetSelection(
            subnets=[ec2.Subnet.from_subnet_id(stack, f"S{tag}{i}", s) for i, s in enumerate(subnets)]
        ),
        "security_groups": [ec2.SecurityGroup.from_security_group_id(stack, f"G{tag}", group, mutable=False)],
    }


def _preflights(stack: cdk.Stack) -> list[dict]:
    return list(Template.from_stack(stack).find_resources("Custom::DeploymentPreflight").values())


def _network_statements(stack: cdk.Stack) -> list[dict]:
    return [
        s
        for p in Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == list(NETWORK_CHECK_ACTIONS)
    ]


def test_a_gpu_endpoint_in_a_vpc_has_its_preflight_check_that_network():
    stack, model = _stack()
    preflight = DeploymentPreflight(stack, "Preflight", model=model, instance_type="ml.g6.xlarge")
    GpuEndpoint(stack, "Chat", model=preflight.checked_model, instance_type="ml.g6.xlarge", **_network(stack))
    (resource,) = _preflights(stack)
    assert resource["Properties"]["Subnets"] == SUBNETS and resource["Properties"]["SecurityGroupIds"] == [GROUP]
    # The read the check needs, whole: EC2's Describe calls have no resource-level permissions.
    assert _network_statements(stack) == [{"Action": list(NETWORK_CHECK_ACTIONS), "Effect": "Allow", "Resource": "*"}]


def test_a_component_in_a_vpc_has_its_preflight_check_the_endpoints_network():
    stack, model = _stack()
    preflight = DeploymentPreflight(stack, "Preflight", model=model, instance_type="ml.g6.12xlarge")
    endpoint = ComponentEndpoint(stack, "Shared", instance_type="ml.g6.12xlarge", **_network(stack))
    endpoint.add_component("Chat", model=preflight.checked_model, tensor_parallel_size=1)
    (resource,) = _preflights(stack)
    assert resource["Properties"]["Subnets"] == SUBNETS


def test_without_a_vpc_or_without_a_preflight_nothing_is_added():
    stack, model = _stack()
    preflight = DeploymentPreflight(stack, "Preflight", model=model, instance_type="ml.g6.xlarge")
    GpuEndpoint(stack, "Chat", model=preflight.checked_model, instance_type="ml.g6.xlarge")
    (resource,) = _preflights(stack)
    assert "Subnets" not in resource["Properties"] and _network_statements(stack) == []
    other, model = _stack()
    GpuEndpoint(other, "Chat", model=model, instance_type="ml.g6.xlarge", **_network(other))
    assert _preflights(other) == []


def test_an_explicit_call_with_the_same_placement_adds_nothing_twice():
    stack, model = _stack()
    preflight = DeploymentPreflight(stack, "Preflight", model=model, instance_type="ml.g6.xlarge")
    endpoint = GpuEndpoint(
        stack, "Chat", model=preflight.checked_model, instance_type="ml.g6.xlarge", **_network(stack)
    )
    preflight.check_network(endpoint.placement)  # as an app written before the constructs wired it does
    assert len(_network_statements(stack)) == 1


def test_one_preflight_served_on_two_networks_is_refused():
    stack, model = _stack()
    preflight = DeploymentPreflight(stack, "Preflight", model=model, instance_type="ml.g6.xlarge")
    GpuEndpoint(stack, "A", model=preflight.checked_model, instance_type="ml.g6.xlarge", **_network(stack))
    other = _network(stack, subnets=["subnet-0123456789abcdef2"], group="sg-0123456789abcdef1", tag="b")
    with pytest.raises(Refusal, match="served on two networks"):
        GpuEndpoint(stack, "B", model=preflight.checked_model, instance_type="ml.g6.xlarge", **other)


def test_two_endpoints_on_the_same_subnets_and_groups_share_one_preflight():
    stack, model = _stack()
    preflight = DeploymentPreflight(stack, "Preflight", model=model, instance_type="ml.g6.xlarge")
    GpuEndpoint(stack, "A", model=preflight.checked_model, instance_type="ml.g6.xlarge", **_network(stack))
    GpuEndpoint(stack, "B", model=preflight.checked_model, instance_type="ml.g6.xlarge", **_network(stack, tag="b"))
    assert len(_network_statements(stack)) == 1
