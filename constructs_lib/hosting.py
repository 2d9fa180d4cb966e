"""What every SageMaker hosting construct here shares: the execution role's grants, the Model, the
log groups that outlive a failed deploy, and the role Application Auto Scaling acts with.

``GpuEndpoint`` (one model on whole instances) and ``ComponentEndpoint``/``InferenceComponent``
(models as components of an endpoint) build from these, so a fix to a grant or to the Model lands
in both modes at once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IConstruct, IDependable

from .image_check import ServingImageCheck, cpu_architecture
from .images import ServingImage
from .model_data import ModelSource
from .nag import acknowledge, acknowledge_wildcard
from .network import VpcPlacement, grant_network_interfaces, vpc_placement
from .serving_features import PREFIX_AWARE

# The Lambda behind every LogRetention in a stack is one singleton with this construct id.
LOG_RETENTION_FUNCTION_ID = "LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8a"
LOG_RETENTION_SERVICE_TIMEOUT_S = 300
# Application Auto Scaling's service-linked role for SageMaker targets; naming it in RoleARN makes
# Application Auto Scaling create it when the account lacks it (AWS::ApplicationAutoScaling::ScalableTarget,
# RoleARN). Without it, aws-cdk-lib creates a role with no permissions for every target.
SAGEMAKER_SCALING_ROLE = (
    "aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)


def retained_log_group(
    scope: Construct, id: str, *, log_group_name: str, retention: logs.RetentionDays
) -> logs.LogRetention:
    """Create or adopt ``log_group_name``, set its retention and keep it when the stack goes.

    SageMaker writes to its log groups whether or not they exist. A LogGroup resource would be
    deleted by the rollback of a failed first deploy, taking the only explanation of the failure
    with it, and a retained one blocks the next deploy ("already exists").
    """
    retention_resource = logs.LogRetention(scope, id, log_group_name=log_group_name, retention=retention)
    harden_log_retention(retention_resource)
    return retention_resource


def harden_log_retention(retention: logs.LogRetention) -> None:
    """Fail in minutes rather than an hour, and acknowledge what cdk-nag finds in CDK's own handler."""
    resource = retention.node.default_child
    resource.add_property_override("ServiceTimeout", LOG_RETENTION_SERVICE_TIMEOUT_S)
    function = cdk.Stack.of(retention).node.try_find_child(LOG_RETENTION_FUNCTION_ID)
    if function is None:  # pragma: no cover - CDK renamed its singleton; nag will then say so loudly
        return
    acknowledge(
        function,
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        "aws-cdk-lib's LogRetention handler: the basic execution policy only lets it write its own logs.",
    )
    acknowledge_wildcard(
        function,
        resource="*",
        reason="aws-cdk-lib's LogRetention handler sets retention on log groups named at deploy time "
        "(logs:PutRetentionPolicy/DeleteRetentionPolicy); CDK scopes it this way for every stack.",
    )


def execution_role(scope: Construct, id: str, *, description: str) -> iam.Role:
    """A role SageMaker assumes for this account's resources in this region only; it gets its permissions from
    the ``grant_*`` functions below."""
    # Exactly this form, not an endpoint's ARN (SageMaker guide, "Cross-service confused deputy prevention": Inference)
    source = cdk.Stack.of(scope).format_arn(service="sagemaker", resource="*")
    principal = iam.ServicePrincipal("sagemaker.amazonaws.com", conditions={"ArnLike": {"aws:SourceArn": source}})
    return iam.Role(scope, id, assumed_by=principal, description=description)


def grant_model_and_image(
    role: iam.IRole, *, scope: Construct, model: ModelSource, image: ServingImage, acknowledged: bool
) -> None:
    """Read only the model prefix and pull only the image's repository."""
    model.grant_read(role)
    iam.Grant.add_to_principal(
        grantee=role,
        actions=["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
        resource_arns=[image.repository_arn(scope)],
    )
    if acknowledged:
        acknowledge_wildcard(
            role,
            resource=model.object_arn_pattern,
            reason="SageMaker downloads every object below the model prefix (S3Prefix model data); "
            "the wildcard stops at that prefix.",
        )


# Namespaces SageMaker publishes a hosted container's metrics under: endpoint instances, and per inference
# component in component mode (SageMaker developer guide, "Amazon SageMaker AI enhanced metrics for inference
# endpoints": utilization metrics of inference components are in /aws/sagemaker/InferenceComponents).
ENDPOINT_METRIC_NAMESPACES = ("/aws/sagemaker/Endpoints", "/aws/sagemaker/InferenceComponents")


# What the endpoint role's "*" statements hold besides a VPC's ec2:Describe* (one acknowledgement names them all).
UNSCOPED_ALSO = (
    "ecr:GetAuthorizationToken and cloudwatch:PutMetricData have none either: image pulls are limited to the image's "
    "repository and metrics to SageMaker's endpoint namespaces by condition."
)


def endpoint_placement(
    scope: Construct, role: iam.IRole, *, name: str, network: Mapping[str, Any], acknowledged: bool
) -> VpcPlacement | None:
    """The endpoint's VPC placement (``network``: the ``vpc``, ``vpc_subnets`` and ``security_groups`` props), with
    the network-interface permissions its execution role needs there; None on SageMaker's own network."""
    placement = vpc_placement(scope, **network, description=f"SageMaker endpoint {name}: no inbound, HTTPS out")
    if placement is not None:
        grant_network_interfaces(
            role, scope=scope, placement=placement, acknowledged=acknowledged, also_unscoped=UNSCOPED_ALSO
        )
    return placement


def grant_registry_login_and_metrics(
    role: iam.IRole, *, acknowledged: bool, namespaces: tuple[str, ...] = ENDPOINT_METRIC_NAMESPACES[:1]
) -> None:
    """The two actions without resource-level permissions, the metrics one limited by namespace."""
    iam.Grant.add_to_principal(grantee=role, actions=["ecr:GetAuthorizationToken"], resource_arns=["*"])
    iam.Grant.add_to_principal(
        grantee=role,
        actions=["cloudwatch:PutMetricData"],
        resource_arns=["*"],
        conditions={
            "StringEquals": {"cloudwatch:namespace": list(namespaces) if len(namespaces) > 1 else namespaces[0]}
        },
    )
    if acknowledged:
        acknowledge_wildcard(
            role,
            resource="*",
            reason="ecr:GetAuthorizationToken and cloudwatch:PutMetricData have no resource-level "
            "permissions; image pulls are limited to the serving image's repository and metrics to SageMaker's "
            "endpoint (and inference component) namespaces by condition.",
        )


def grant_log_streams(role: iam.IRole, *, scope: Construct, log_group_name: str, acknowledged: bool) -> str:
    """Write streams of ``log_group_name`` only; returns the streams' ARN pattern."""
    log_streams_arn = cdk.Stack.of(scope).format_arn(
        service="logs",
        resource="log-group",
        resource_name=f"{log_group_name}:*",
        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
    )
    iam.Grant.add_to_principal(
        grantee=role,
        actions=["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
        resource_arns=[log_streams_arn],
    )
    # In SageMaker's documented execution-role policy (CreateModel API: Execution Role Permissions); the group
    # normally exists already (retained_log_group), so this matters only if it was deleted meanwhile.
    iam.Grant.add_to_principal(
        grantee=role,
        actions=["logs:CreateLogGroup"],
        resource_arns=[
            cdk.Stack.of(scope).format_arn(
                service="logs",
                resource="log-group",
                resource_name=log_group_name,
                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
            )
        ],
    )
    if acknowledged:
        acknowledge_wildcard(
            role,
            resource=log_streams_arn,
            reason="Log streams of this endpoint's own log group; SageMaker names a stream per "
            "variant and instance at run time.",
        )
    return log_streams_arn


def serving_model(
    scope: Construct,
    id: str,
    *,
    role: iam.IRole,
    model: ModelSource,
    image: ServingImage,
    environment: Mapping[str, str],
    vpc_config: sagemaker.CfnModel.VpcConfigProperty | None = None,
    instance_types: Sequence[str] = (),
) -> sagemaker.CfnModel:
    """The SageMaker Model: weights from an uncompressed S3 prefix, network isolation on.

    It waits for the role's policy (SageMaker checks its access when the model is created), for the model
    source's ``dependable``, when the source has one (a staging step that must finish first), and for a
    ``ServingImageCheck`` of ``image`` (``<id>ImageCheck`` beside it) on the CPU of ``instance_types``, which
    runs as the stack starts; a model source that is a construct (a staged checkpoint, itself or behind a
    preflight) waits for that check too.
    """
    cfn_model = sagemaker.CfnModel(
        scope,
        id,
        execution_role_arn=role.role_arn,
        enable_network_isolation=True,
        # The model's network interfaces in the given subnets (host-vpc.html; AWS::SageMaker::Model VpcConfig).
        vpc_config=vpc_config,
        primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
            image=image.image_uri(scope),
            environment=dict(environment),
            model_data_source=sagemaker.CfnModel.ModelDataSourceProperty(
                s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                    s3_uri=model.s3_uri, s3_data_type="S3Prefix", compression_type="None"
                )
            ),
        ),
    )
    cfn_model.node.add_dependency(role)
    check = ServingImageCheck(scope, f"{id}ImageCheck", image=image, architecture=cpu_architecture(instance_types))
    cfn_model.node.add_dependency(check)
    # The weights are staged only once the image is known to be there (ServingImageCheck.precedes).
    upstream = getattr(model, "source", model)
    if isinstance(upstream, Construct):
        check.precedes(upstream)
    dependable: IDependable | None = getattr(model, "dependable", None)
    if dependable is not None:
        cfn_model.node.add_dependency(dependable)
    return cfn_model


def sagemaker_scaling_role(scope: Construct, id: str) -> iam.IRole:
    """Application Auto Scaling's service-linked role for SageMaker, referenced (never created here)."""
    arn = cdk.Stack.of(scope).format_arn(
        service="iam", region="", resource="role", resource_name=SAGEMAKER_SCALING_ROLE
    )
    return iam.Role.from_role_arn(scope, id, arn, mutable=False)


def sagemaker_metric(
    metric_name: str,
    dimensions: Mapping[str, str],
    *,
    namespace: str = "AWS/SageMaker",
    statistic: str = "Average",
    period: cdk.Duration | None = None,
) -> cloudwatch.Metric:
    """A SageMaker CloudWatch metric with one-minute periods unless told otherwise."""
    return cloudwatch.Metric(
        namespace=namespace,
        metric_name=metric_name,
        dimensions_map=dict(dimensions),
        statistic=statistic,
        period=period or cdk.Duration.minutes(1),
    )


def metrics_config(
    enhanced_metrics: bool, metric_publish_frequency_s: int | None
) -> sagemaker.CfnEndpointConfig.MetricsConfigProperty | None:
    """``MetricsConfig`` (serving_features), or None to leave SageMaker's defaults."""
    if not enhanced_metrics and metric_publish_frequency_s is None:
        return None
    return sagemaker.CfnEndpointConfig.MetricsConfigProperty(
        enable_enhanced_metrics=enhanced_metrics or None, metric_publish_frequency_in_seconds=metric_publish_frequency_s
    )


def openai_base_url(endpoint_name: str, inference_component_name: str | None = None) -> str:
    """``https://runtime.sagemaker.<region>.<suffix>/endpoints/<name>[/inference-components/<ic>]/openai/v1``.

    SageMaker real-time endpoints and inference components "expose an /openai/v1/chat/completions path that
    accepts Chat Completions requests and returns responses directly from the container, including streaming"
    (SageMaker developer guide, realtime-endpoints-openai-compatible); a component is named in the path (AWS's
    sample aws-samples/sagemaker-genai-hosting-examples 03-features/openai/sagemaker-inference-openai-api.ipynb).
    """
    parts = ["https://runtime.sagemaker.", cdk.Aws.REGION, ".", cdk.Aws.URL_SUFFIX, "/endpoints/", endpoint_name]
    if inference_component_name is not None:
        parts += ["/inference-components/", inference_component_name]
    return cdk.Fn.join("", [*parts, "/openai/v1"])


def grant_bearer_token(grantee: iam.IGrantable) -> iam.Grant:
    """``sagemaker:CallWithBearerToken`` on ``*``: a bearer token "contains your role or user credentials and
    requires the sagemaker:CallWithBearerToken and sagemaker:InvokeEndpoint action permissions", the first on
    Resource "*" in AWS's policy (realtime-endpoints-openai-compatible; the sample notebook above). Tokens come from
    the SageMaker Python SDK's ``sagemaker.core.token_generator.generate_token`` and last up to 12 hours."""
    return iam.Grant.add_to_principal(grantee=grantee, actions=["sagemaker:CallWithBearerToken"], resource_arns=["*"])


def grant_invoke_arns(grantee: iam.IGrantable, arns: list[str], *, bearer_token: bool) -> iam.Grant:
    """``InvokeEndpoint`` and ``InvokeEndpointWithResponseStream`` on ``arns`` (an endpoint, and a component of it:
    both are resource types of the two actions in the IAM service authorization reference), plus
    ``grant_bearer_token`` for the OpenAI-compatible path when ``bearer_token``."""
    grant = iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
        resource_arns=arns,
    )
    return grant.combine(grant_bearer_token(grantee)) if bearer_token else grant


class EndpointVariantMixin:
    """``grant_invoke`` and the OpenAI-compatible URL of a construct with ``endpoint_arn`` and ``endpoint_name``
    (``GpuEndpoint``, ``ComponentEndpoint``; their metrics: ``monitoring.metrics``)."""

    endpoint_arn: str
    endpoint_name: str
    variant_name: str

    def grant_invoke(self, grantee: iam.IGrantable, *, bearer_token: bool = False) -> iam.Grant:
        """Let ``grantee`` invoke the endpoint (every component on it), with and without response streaming.

        :param bearer_token: also let it call the OpenAI-compatible path (``openai_base_url``) with a bearer
            token, which needs ``sagemaker:CallWithBearerToken`` on ``*`` beside ``sagemaker:InvokeEndpoint``
            (``grant_bearer_token``). Default: SigV4 calls only.
        """
        return grant_invoke_arns(grantee, [self.endpoint_arn], bearer_token=bearer_token)

    @property
    def openai_base_url(self) -> str:
        """The endpoint's OpenAI-compatible base URL (``.../chat/completions`` below it), for an OpenAI client."""
        return openai_base_url(self.endpoint_name)


def capacity_reservation(arn: str | None) -> sagemaker.CfnEndpointConfig.CapacityReservationConfigProperty | None:
    """A variant's capacity reservation: reserved capacity only, or None for on-demand capacity."""
    if not arn:
        return None
    return sagemaker.CfnEndpointConfig.CapacityReservationConfigProperty(
        capacity_reservation_preference="capacity-reservations-only", ml_reservation_arn=arn
    )


# ProductionVariant.VariantInstanceProvisionTimeoutInSeconds, "Valid values: 300 to 3600" (botocore, cfn-lint).
PROVISION_TIMEOUT_RANGE_S = (300, 3600)


def provision_timeout_problems(timeout: cdk.Duration | None) -> list[str]:
    """What is wrong with a variant's ``VariantInstanceProvisionTimeoutInSeconds``: "Valid values: 300 to 3600"."""
    if timeout is None or cdk.Token.is_unresolved(timeout.to_seconds()):
        return []
    seconds = timeout.to_seconds()
    low, high = PROVISION_TIMEOUT_RANGE_S
    if seconds != int(seconds) or not low <= seconds <= high:
        return [
            f"provision_timeout={seconds:g} s: allowed {low} to {high} whole seconds "
            "(VariantInstanceProvisionTimeoutInSeconds)"
        ]
    return []


def routing_config(
    strategy: str | None, prefix_length: int | None = None, concurrency_threshold: int | None = None
) -> sagemaker.CfnEndpointConfig.RoutingConfigProperty | None:
    """A variant's ``RoutingConfig``: how the endpoint routes requests "to the instances that the endpoint hosts"
    (API ProductionVariantRoutingConfig, on every production variant, both modes), with ``PrefixAwareRoutingConfig``
    for ``PREFIX_AWARE`` only ("Specify this parameter only when you set RoutingStrategy to PREFIX_AWARE"). None:
    SageMaker's default routing."""
    if not strategy:
        return None
    prefix = (
        sagemaker.CfnEndpointConfig.PrefixAwareRoutingConfigProperty(
            prefix_length=prefix_length, concurrency_threshold=concurrency_threshold
        )
        if strategy == PREFIX_AWARE
        else None
    )
    return sagemaker.CfnEndpointConfig.RoutingConfigProperty(
        routing_strategy=strategy, prefix_aware_routing_config=prefix
    )


def config_and_endpoint(
    scope: Construct,
    *,
    variant: sagemaker.CfnEndpointConfig.ProductionVariantProperty,
    endpoint_name: str,
    log_retention: Construct,
    volume_kms_key_arn: str | None = None,
    execution_role_arn: str | None = None,
    network_isolation: bool | None = None,
    vpc_config: sagemaker.CfnEndpointConfig.VpcConfigProperty | None = None,
    metrics_config: sagemaker.CfnEndpointConfig.MetricsConfigProperty | None = None,
    async_inference_config: sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty | None = None,
) -> tuple[sagemaker.CfnEndpointConfig, sagemaker.CfnEndpoint]:
    """The endpoint config (``Config``) and endpoint (``Resource``) of one variant.

    No EndpointConfigName: configs are immutable, and a fixed name would block replacement. The endpoint
    waits for its log group, which must exist (with its retention) before SageMaker writes to it. The config's
    logical ID follows what the endpoint's update sends (``_ConfigCoversTheEndpointUpdate``).
    """
    config = sagemaker.CfnEndpointConfig(
        scope,
        "Config",
        production_variants=[variant],
        execution_role_arn=execution_role_arn,
        kms_key_id=volume_kms_key_arn,
        enable_network_isolation=network_isolation,
        vpc_config=vpc_config,
        metrics_config=metrics_config,
        async_inference_config=async_inference_config,
    )
    endpoint = sagemaker.CfnEndpoint(
        scope, "Resource", endpoint_config_name=config.attr_endpoint_config_name, endpoint_name=endpoint_name
    )
    endpoint.node.add_dependency(log_retention)
    cdk.Aspects.of(scope).add(_ConfigCoversTheEndpointUpdate(config, endpoint))
    return config, endpoint


# The Endpoint properties an UpdateEndpoint sends besides the config's name (botocore sagemaker UpdateEndpointInput).
ENDPOINT_UPDATE_PROPERTIES = (
    "deployment_config",
    "retain_all_variant_properties",
    "exclude_retained_variant_properties",
    "retain_deployment_config",
)


@jsii.implements(cdk.IAspect)
class _ConfigCoversTheEndpointUpdate:
    """A change to what the Endpoint's update sends (its DeploymentConfig, RetainAllVariantProperties...) makes a
    new EndpointConfig, so the update of the Endpoint always names a new config.

    UpdateEndpoint requires ``EndpointConfigName``, "the name of the new endpoint configuration" (botocore
    sagemaker UpdateEndpointInput), and what CloudFormation does when only the Endpoint's other properties change
    is not documented. The config's logical ID carries a hash of those properties, the way CDK's
    ``lambda.Function.currentVersion`` names a new Version: a new logical ID is a new config with a new generated
    name, then UpdateEndpoint to it, then the old config's deletion in the cleanup phase; a rollback updates the
    endpoint back to the old config, which still exists. Without any of them set the logical ID is CDK's own.
    """

    def __init__(self, config: sagemaker.CfnEndpointConfig, endpoint: sagemaker.CfnEndpoint) -> None:
        self.config, self.endpoint, self.done = config, endpoint, False

    def visit(self, node: IConstruct) -> None:
        if node is not self.endpoint or self.done:
            return
        self.done = True
        stack = cdk.Stack.of(self.endpoint)
        sent = {key: stack.resolve(getattr(self.endpoint, key, None)) for key in ENDPOINT_UPDATE_PROPERTIES}
        sent = {key: value for key, value in sent.items() if value is not None}
        if not sent:
            return
        digest = hashlib.sha256(json.dumps(sent, sort_keys=True, default=str).encode()).hexdigest()[:8].upper()
        self.config.override_logical_id(f"{stack.get_logical_id(self.config)}U{digest}")
