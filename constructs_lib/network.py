"""Private networking for what runs: the subnets and security groups SageMaker attaches its network interfaces to.

SageMaker puts a model's (or a Processing job's) network interfaces in the subnets and security groups of a
``VpcConfig`` and creates them with the execution role ("Give SageMaker AI hosted endpoints access to resources in
your Amazon VPC", sagemaker/latest/dg/host-vpc.html; "Give SageMaker AI Processing jobs access to resources in your
Amazon VPC", sagemaker/latest/dg/process-vpc.html). ``vpc_placement`` turns the construct props (``vpc``,
``vpc_subnets``, ``security_groups``, the shapes aws-cdk-lib's own constructs take) into one ``VpcPlacement``,
creating a security group without inbound rules when none is given; ``grant_network_interfaces`` gives the role the
EC2 actions SageMaker documents for it, scoped to those subnets where the IAM reference allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IConstruct

from .nag import acknowledge_wildcard
from .names import MAX_SECURITY_GROUPS, MAX_SUBNETS, SECURITY_GROUP_ID, SUBNET_ID, matches
from .problems import refuse

# What the SageMaker execution role needs for a VpcConfig (SageMaker developer guide, "SageMaker AI Roles":
# CreateModel API and CreateProcessingJob API execution role permissions, the ec2 statement).
NETWORK_INTERFACE_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
)
# No resource-level permissions (Service Authorization Reference, Amazon EC2: resource type "*" only).
NETWORK_DESCRIBE_ACTIONS = (
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
)


UNSCOPED_REASON = (
    "ec2:Describe* (DhcpOptions, NetworkInterfaces, SecurityGroups, Subnets, Vpcs) have no resource-level "
    "permissions; SageMaker reads the VpcConfig's network with them."
)


@dataclass(frozen=True)
class VpcPlacement:
    """Subnets and security groups of one VPC, as SageMaker's ``VpcConfig`` takes them."""

    subnets: tuple[ec2.ISubnet, ...]
    security_groups: tuple[ec2.ISecurityGroup, ...]

    @property
    def subnet_ids(self) -> list[str]:
        return [s.subnet_id for s in self.subnets]

    @property
    def security_group_ids(self) -> list[str]:
        return [g.security_group_id for g in self.security_groups]

    def model_vpc_config(self) -> sagemaker.CfnModel.VpcConfigProperty:
        return sagemaker.CfnModel.VpcConfigProperty(subnets=self.subnet_ids, security_group_ids=self.security_group_ids)

    def endpoint_config_vpc_config(self) -> sagemaker.CfnEndpointConfig.VpcConfigProperty:
        return sagemaker.CfnEndpointConfig.VpcConfigProperty(
            subnets=self.subnet_ids, security_group_ids=self.security_group_ids
        )


def placement_problems(subnet_ids: Sequence[str], security_group_ids: Sequence[str]) -> list[str]:
    """What CreateModel/CreateProcessingJob would refuse in these ids (literal ones only; tokens are skipped)."""
    problems = []
    if not 1 <= len(subnet_ids) <= MAX_SUBNETS:
        problems.append(f"{len(subnet_ids)} subnets; allowed: 1-{MAX_SUBNETS} (SageMaker VpcConfig Subnets)")
    if len(security_group_ids) > MAX_SECURITY_GROUPS:
        problems.append(
            f"{len(security_group_ids)} security groups; allowed: 1-{MAX_SECURITY_GROUPS} (VpcConfig SecurityGroupIds)"
        )
    for kind, ids, rule in (
        ("subnet", subnet_ids, SUBNET_ID),
        ("security group", security_group_ids, SECURITY_GROUP_ID),
    ):
        for value in ids:
            if not cdk.Token.is_unresolved(value) and not matches(rule, value):
                problems.append(f"{value!r} is not a {kind} id; expected {rule.pattern}")
        literal = [v for v in ids if not cdk.Token.is_unresolved(v)]
        if len(set(literal)) < len(literal):
            problems.append(f"a {kind} id is given twice: {sorted({v for v in literal if literal.count(v) > 1})}")
    return problems


def vpc_placement(
    scope: Construct,
    *,
    vpc: ec2.IVpc | None,
    vpc_subnets: ec2.SubnetSelection | None,
    security_groups: Sequence[ec2.ISecurityGroup] | None,
    description: str,
    egress_ports: Sequence[int] = (443,),
) -> VpcPlacement | None:
    """The placement the props ask for, or None when they ask for none (SageMaker's own network then).

    ``vpc_subnets`` alone (``SubnetSelection(subnets=[...])``) or ``vpc`` with a selection (default: the subnets
    aws-cdk-lib selects by default: private, else isolated). Without ``security_groups`` a group is created under
    ``scope`` (``SecurityGroup``) in ``vpc``: no inbound rule, outbound TCP to ``egress_ports`` only (HTTPS to S3,
    ECR and the Hub or its mirror; the Amazon DNS server is not filtered by security groups, VPC user guide
    "Security group rules"). Raises ``ValueError`` naming each problem.
    """
    if vpc is None and vpc_subnets is None and not security_groups:
        return None
    problems = []
    subnets: list[ec2.ISubnet] = []
    if vpc_subnets is not None and vpc_subnets.subnets:
        subnets = list(vpc_subnets.subnets)  # as given (a selection by type or group needs the vpc)
    elif vpc is not None:
        selection = vpc_subnets or ec2.SubnetSelection()
        subnets = list(
            vpc.select_subnets(
                subnet_type=selection.subnet_type,
                subnet_group_name=selection.subnet_group_name,
                availability_zones=selection.availability_zones,
                one_per_az=selection.one_per_az,
                subnet_filters=selection.subnet_filters,
            ).subnets
        )
    else:
        problems.append(
            "security_groups or a subnet selection without subnets needs the subnets: give vpc_subnets="
            "SubnetSelection(subnets=[...]) or a vpc"
        )
    groups = list(security_groups or [])
    if not groups:
        if vpc is None:
            problems.append(
                "no security_groups and no vpc: give the security groups, or the vpc to create one without inbound "
                "rules in"
            )
        else:
            group = ec2.SecurityGroup(
                scope, "SecurityGroup", vpc=vpc, description=description, allow_all_outbound=False
            )
            for port in sorted(set(egress_ports)):
                group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(port), f"HTTPS out on {port}")
            groups = [group]
    if subnets:
        problems += placement_problems([s.subnet_id for s in subnets], [g.security_group_id for g in groups])
    refuse(f"{type(scope).__name__} {scope.node.path} (network)", problems)
    if len(subnets) < 2:
        # "You must create at least two subnets in different availability zones" (host-vpc.html); the preflight
        # checks the zones at deploy time.
        cdk.Annotations.of(scope).add_warning_v2(
            "llm:one-subnet",
            "one subnet given: SageMaker asks for at least two subnets in different Availability Zones (host-vpc.html)",
        )
    return VpcPlacement(subnets=tuple(subnets), security_groups=tuple(groups))


def grant_network_interfaces(
    role: iam.IRole, *, scope: Construct, placement: VpcPlacement, acknowledged: bool, also_unscoped: str = ""
) -> None:
    """The EC2 actions SageMaker uses with ``role`` to put network interfaces into ``placement``'s subnets.

    CreateNetworkInterface names the subnet and security group resources (limited to ``placement``'s) and the new
    interface, whose ``ec2:Subnet`` condition key limits it to those subnets; the permission and delete actions take
    the interface only, with the same condition (Service Authorization Reference, Amazon EC2: network-interface
    resource, condition keys ec2:Subnet and ec2:Vpc). The Describe actions have no resource-level permissions.
    """
    stack = cdk.Stack.of(scope)
    subnet_arns = [stack.format_arn(service="ec2", resource="subnet", resource_name=i) for i in placement.subnet_ids]
    group_arns = [
        stack.format_arn(service="ec2", resource="security-group", resource_name=i)
        for i in placement.security_group_ids
    ]
    interfaces = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
    iam.Grant.add_to_principal(
        grantee=role, actions=["ec2:CreateNetworkInterface"], resource_arns=[*subnet_arns, *group_arns]
    )
    iam.Grant.add_to_principal(
        grantee=role,
        actions=list(NETWORK_INTERFACE_ACTIONS),
        resource_arns=[interfaces],
        conditions={"ArnEquals": {"ec2:Subnet": subnet_arns}},
    )
    iam.Grant.add_to_principal(grantee=role, actions=list(NETWORK_DESCRIBE_ACTIONS), resource_arns=["*"])
    if acknowledged:
        acknowledge_wildcard(
            role,
            resource=interfaces,
            reason="SageMaker names the network interfaces it creates for the VpcConfig at run time; the ec2:Subnet "
            "condition limits them to the given subnets.",
        )
        acknowledge_wildcard(
            role,
            resource="*",
            # One acknowledgement per finding id and construct (the last one given counts): it names every action
            # of the policy's "*" statements, the caller's too.
            reason=UNSCOPED_REASON + (f" {also_unscoped}" if also_unscoped else ""),
        )


# --- the stack's own Lambda functions in the VPC ----------------------------------------------------------------

LAMBDA_FUNCTION = "AWS::Lambda::Function"
# What Lambda does with a function's execution role to attach it to a VPC (Lambda developer guide, "Giving Lambda
# functions access to resources in an Amazon VPC", execution role permissions; the AWS managed policy
# AWSLambdaVPCAccessExecutionRole has these and logs:*, all on "*"). Here the interface actions name this account's
# and region's network interfaces, and CreateNetworkInterface the placement's subnets and groups.
LAMBDA_INTERFACE_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)
# DescribeNetworkInterfaces "only works if it's allowed on all resources" (same guide); DescribeSubnets has no
# resource-level permissions (Service Authorization Reference, Amazon EC2).
LAMBDA_DESCRIBE_ACTIONS = ("ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets")

# The interface VPC endpoints (com.amazonaws.<region>.<name>) the stack's functions need when the subnets have no
# NAT, by the boto3 service each handler calls (tests/data/iam_calls.json finds the calls; a test checks this covers
# them), plus what aws-cdk-lib's own functions call: the Provider framework invokes the handler (lambda) and, for
# asynchronous resources, starts its waiter state machine (states); the LogRetention function calls CloudWatch Logs.
FUNCTION_ENDPOINTS = {
    "s3": "s3 (gateway endpoint; also carries the CloudFormation response and wait-condition URLs, S3 presigned URLs)",
    "sagemaker": "sagemaker.api",
    "sagemaker-runtime": "sagemaker.runtime",
    "secretsmanager": "secretsmanager",
    "service-quotas": "servicequotas",
    "cloudformation": "cloudformation",
    "ec2": "ec2",
    "lambda": "lambda",
    "states": "states",
    "logs": "logs",
    "cloudwatch": "monitoring",  # PutMetricData: com.amazonaws.<region>.monitoring (CloudWatch VPC endpoints)
    # BatchGetImage, GetDownloadUrlForLayer: com.amazonaws.<region>.ecr.api ("Amazon ECR interface VPC endpoints");
    # the layer URL it returns is S3's, through the s3 gateway endpoint.
    "ecr": "ecr.api",
}


def place_functions_in_vpc(
    scope: Construct,
    *,
    vpc: ec2.IVpc | None = None,
    vpc_subnets: ec2.SubnetSelection | None = None,
    security_groups: Sequence[ec2.ISecurityGroup] | None = None,
    egress_ports: Sequence[int] = (443,),
) -> VpcPlacement | None:
    """Put every Lambda function created in ``scope``, now or later, in the subnets and security groups given.

    That covers this library's handlers and aws-cdk-lib's own functions (the Provider framework's onEvent, isComplete
    and onTimeout, the LogRetention handler), so that a service control policy requiring ``lambda:VpcIds``,
    ``lambda:SubnetIds`` or ``lambda:SecurityGroupIds`` on CreateFunction (Service Authorization Reference, AWS
    Lambda: condition keys of CreateFunction and UpdateFunctionConfiguration) is met by every function of the stack.
    Each function's role gets the network-interface permissions Lambda documents, in a policy of its own that the
    function waits for (Lambda checks them when the function is created). The subnets must reach what the functions
    call: :data:`FUNCTION_ENDPOINTS`.

    :param vpc: where a security group is created when ``security_groups`` is empty. Default: none.
    :param vpc_subnets: the subnets (``SubnetSelection(subnets=[...])``), or a selection of ``vpc``'s. Default: the
        subnets aws-cdk-lib selects in ``vpc`` by default.
    :param security_groups: the functions' groups. Default: one created in ``vpc`` (``FunctionsNetwork``), no
        inbound rule, TCP out to ``egress_ports`` only.
    :param egress_ports: what the created group lets out. Default: 443 (HTTPS to the AWS APIs and the Hub).
    :returns: the placement, or None (nothing changes) when neither subnets nor a VPC is given.
    """
    placement = vpc_placement(
        Construct(scope, "FunctionsNetwork"),
        vpc=vpc,
        vpc_subnets=vpc_subnets,
        security_groups=security_groups,
        description="Custom-resource functions: no inbound, HTTPS out",
        egress_ports=egress_ports,
    )
    if placement is not None:
        cdk.Aspects.of(scope).add(_FunctionsInVpc(placement), priority=cdk.AspectPriority.MUTATING)
    return placement


@jsii.implements(cdk.IAspect)
class _FunctionsInVpc:
    def __init__(self, placement: VpcPlacement) -> None:
        self.placement = placement
        self._policies: dict[str, iam.Policy] = {}

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource) or node.cfn_resource_type != LAMBDA_FUNCTION:
            return
        # AWS::Lambda::Function VpcConfig: SubnetIds, SecurityGroupIds (CloudFormation resource schema).
        node.add_property_override(
            "VpcConfig",
            {"SubnetIds": self.placement.subnet_ids, "SecurityGroupIds": self.placement.security_group_ids},
        )
        node.node.add_dependency(self._policy_for(node))

    def _policy_for(self, function: cdk.CfnResource) -> iam.Policy:
        from .keys import _role_of  # keys imports nothing from here; the function-role lookup lives there

        role = _role_of(function)
        if role.node.path in self._policies:
            return self._policies[role.node.path]
        stack = cdk.Stack.of(role)
        subnets = [
            stack.format_arn(service="ec2", resource="subnet", resource_name=i) for i in self.placement.subnet_ids
        ]
        groups = [
            stack.format_arn(service="ec2", resource="security-group", resource_name=i)
            for i in self.placement.security_group_ids
        ]
        interfaces = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
        policy = iam.Policy(
            role,
            "VpcAccess",
            roles=[role],
            statements=[
                iam.PolicyStatement(actions=["ec2:CreateNetworkInterface"], resources=[*subnets, *groups]),
                iam.PolicyStatement(actions=list(LAMBDA_INTERFACE_ACTIONS), resources=[interfaces]),
                iam.PolicyStatement(actions=list(LAMBDA_DESCRIBE_ACTIONS), resources=["*"]),
            ],
        )
        acknowledge_wildcard(
            policy,
            resource=interfaces,
            reason="Lambda creates and deletes the function's VPC network interfaces with the execution role and "
            "names them at run time; limited to this account and region, and creation to the deployment's subnets "
            "and security groups.",
        )
        acknowledge_wildcard(
            policy,
            resource="*",
            reason="ec2:DescribeNetworkInterfaces works only on all resources (Lambda developer guide, VPC access) "
            "and ec2:DescribeSubnets has no resource-level permissions.",
        )
        self._policies[role.node.path] = policy
        return policy
