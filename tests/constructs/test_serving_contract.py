"""Network isolation in both modes and capacity kept across updates, as the SageMaker API documents them."""

from __future__ import annotations

from llmops.summary import describe
from tests.conftest import stack_template


def one(template, kind: str) -> dict:
    (resource,) = template.find_resources(kind).values()
    return resource["Properties"]


def test_component_endpoint_isolates_its_containers_and_standard_mode_leaves_the_flag_to_the_model():
    component = stack_template(deployment_mode="inference-component")
    # CreateEndpointConfig EnableNetworkIsolation: "all model containers deployed to the endpoint are isolated";
    # accepted only on inference-component endpoints (a variant with ModelName is refused).
    assert one(component, "AWS::SageMaker::EndpointConfig")["EnableNetworkIsolation"] is True
    assert one(component, "AWS::SageMaker::Model")["EnableNetworkIsolation"] is True
    standard = stack_template()
    assert "EnableNetworkIsolation" not in one(standard, "AWS::SageMaker::EndpointConfig")
    assert one(standard, "AWS::SageMaker::Model")["EnableNetworkIsolation"] is True


def test_summary_says_isolated_only_when_both_flags_hold_in_component_mode():
    template = stack_template(deployment_mode="inference-component").to_json()
    assert "    network isolation: True" in describe(template)
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::SageMaker::EndpointConfig":
            del resource["Properties"]["EnableNetworkIsolation"]
    assert "    network isolation: False" in describe(template)
    assert "    network isolation: True" in describe(stack_template().to_json())


def test_an_update_keeps_the_autoscaled_instance_count():
    fixed = one(stack_template(), "AWS::SageMaker::Endpoint")
    assert "RetainAllVariantProperties" not in fixed  # instance_count is what the user asks for
    scaled = one(stack_template(max_instances="3"), "AWS::SageMaker::Endpoint")
    assert scaled["RetainAllVariantProperties"] is True
    managed = one(stack_template(deployment_mode="inference-component"), "AWS::SageMaker::Endpoint")
    assert managed["RetainAllVariantProperties"] is True
