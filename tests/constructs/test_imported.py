"""Endpoints and components deployed elsewhere, imported by name (issue 37): grants, URLs and metrics as on the
constructs, nothing created, bad names refused at synth."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from constructs_lib import ComponentEndpoint, GpuEndpoint, InferenceComponent

ACCOUNT_REGION = cdk.Environment(account="123456789012", region="eu-west-1")


def stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "Caller", env=ACCOUNT_REGION)


def arn(resource: str) -> dict:
    """An ARN in the caller's account and region, in whatever partition the stack deploys to."""
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":sagemaker:eu-west-1:123456789012:{resource}"]]}


def statements(s: cdk.Stack) -> list[dict]:
    (policy,) = Template.from_stack(s).find_resources("AWS::IAM::Policy").values()
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_an_imported_endpoint_grants_invoke_on_its_arn_and_creates_nothing_of_sagemaker():
    s = stack()
    endpoint = GpuEndpoint.from_endpoint_name(s, "Chat", "chat-prod")
    role = iam.Role(s, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    endpoint.grant_invoke(role)
    template = Template.from_stack(s).to_json()
    assert not [r for r in template["Resources"].values() if r["Type"].startswith("AWS::SageMaker::")]
    assert statements(s) == [
        {
            "Action": ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
            "Effect": "Allow",
            "Resource": arn("endpoint/chat-prod"),
        }
    ]


def test_an_imported_endpoints_metrics_and_url_name_it():
    s = stack()
    endpoint = ComponentEndpoint.from_endpoint_name(s, "Shared", "shared")
    metric = endpoint.metric_invocations()
    assert metric.dimensions == {"EndpointName": "shared", "VariantName": "AllTraffic"}
    assert endpoint.metric_instance_count().statistic == "SampleCount"
    assert "/endpoints/shared/openai/v1" in s.resolve(endpoint.openai_base_url)["Fn::Join"][1]


def test_an_imported_component_grants_the_endpoint_and_that_component_only_with_a_bearer_token():
    s = stack()
    component = InferenceComponent.from_component_name(
        s, "Small", endpoint_name="shared", inference_component_name="small-1"
    )
    role = iam.Role(s, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    component.grant_invoke(role, bearer_token=True)
    assert statements(s) == [
        {
            "Action": ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
            "Effect": "Allow",
            "Resource": [
                arn("endpoint/shared"),
                arn("inference-component/small-1"),
            ],
        },
        {"Action": "sagemaker:CallWithBearerToken", "Effect": "Allow", "Resource": "*"},
    ]
    assert component.metric_model_latency().dimensions == {"InferenceComponentName": "small-1"}
    joined = "".join(p for p in s.resolve(component.openai_base_url)["Fn::Join"][1] if isinstance(p, str))
    assert "/endpoints/shared/inference-components/small-1/openai/v1" in joined


def test_a_token_name_is_taken_as_it_is():
    s = stack()
    name = cdk.Fn.import_value("ChatEndpointName")
    endpoint = GpuEndpoint.from_endpoint_name(s, "Chat", name)
    assert endpoint.endpoint_name == name
    assert "ChatEndpointName" in str(s.resolve(endpoint.endpoint_arn))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda s: GpuEndpoint.from_endpoint_name(s, "E", "bad_name"), "endpoint_name='bad_name': not a valid name"),
        (lambda s: GpuEndpoint.from_endpoint_name(s, "E", "x" * 64), "endpoint_name='xxx"),
        (
            lambda s: InferenceComponent.from_component_name(
                s, "C", endpoint_name="ok", inference_component_name="-dash"
            ),
            "inference_component_name='-dash': not a valid name",
        ),
    ],
)
def test_bad_names_are_refused_naming_the_prop(make, message):
    with pytest.raises(ValueError, match=message):
        make(stack())


def test_the_arn_holds_the_name_in_lower_case_and_the_metrics_keep_it():
    # SageMaker ARNs hold the name in lower case: a grant on "Chat-Prod" is denied on endpoint/chat-prod
    # (philschmid/cdk-samples#2). CloudWatch's dimensions are the name as created.
    s = stack()
    endpoint = GpuEndpoint.from_endpoint_name(s, "Chat", "LlmEndpoint-Chat-099A270C")
    component = InferenceComponent.from_component_name(
        s, "Small", endpoint_name="LlmEndpoint-Shared", inference_component_name="Shared-Small-13E7552F"
    )
    role = iam.Role(s, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    endpoint.grant_invoke(role)
    component.grant_invoke(role)
    resources = [st["Resource"] for st in statements(s)]
    assert resources == [
        arn("endpoint/llmendpoint-chat-099a270c"),
        [arn("endpoint/llmendpoint-shared"), arn("inference-component/shared-small-13e7552f")],
    ]
    assert "Chat-099A270C" not in str(resources) and "Small-13E7552F" not in str(resources)
    assert endpoint.metric_invocations().dimensions["EndpointName"] == "LlmEndpoint-Chat-099A270C"
    assert component.metric_invocations().dimensions == {"InferenceComponentName": "Shared-Small-13E7552F"}


def test_a_token_name_warns_that_its_arn_keeps_its_case():
    from aws_cdk.assertions import Annotations, Match

    s = stack()
    GpuEndpoint.from_endpoint_name(s, "Chat", cdk.Fn.import_value("ChatEndpointName"))
    Annotations.from_stack(s).has_warning("*", Match.string_like_regexp("SageMaker ARNs hold it in lower case"))


def _metric_methods(cls: type) -> set[str]:
    return {n for n in dir(cls) if n.startswith("metric")}


@pytest.mark.parametrize(
    ("construct", "imported"),
    [("GpuEndpoint", "ImportedEndpoint"), ("ComponentEndpoint", "ImportedComponentEndpoint"),
     ("InferenceComponent", "ImportedComponent")],
)  # fmt: skip
def test_an_imported_kind_has_every_metric_helper_of_its_construct(construct, imported):
    import constructs_lib

    real, stand_in = getattr(constructs_lib, construct), getattr(constructs_lib, imported)
    assert _metric_methods(real) == _metric_methods(stand_in)
    # and the same series: CPU of a component-hosting endpoint is the normalized one on both
    s = stack()
    made = {"ImportedEndpoint": lambda: GpuEndpoint.from_endpoint_name(s, "E", "e"),
            "ImportedComponentEndpoint": lambda: ComponentEndpoint.from_endpoint_name(s, "E", "e"),
            "ImportedComponent": lambda: InferenceComponent.from_component_name(
                s, "C", endpoint_name="e", inference_component_name="c")}[imported]()  # fmt: skip
    assert type(made).__name__ == imported
    expected = {"ImportedEndpoint": "CPUUtilization", "ImportedComponentEndpoint": "CPUUtilizationNormalized",
                "ImportedComponent": "CPUUtilizationNormalized"}[imported]  # fmt: skip
    assert made.metric_cpu_utilization().metric_name == expected


def test_names_at_the_length_limit_are_taken():
    s = stack()
    assert GpuEndpoint.from_endpoint_name(s, "E", "x" * 63).endpoint_name == "x" * 63
