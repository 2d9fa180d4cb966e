"""The network a VpcConfig names, checked before the endpoint is created: EC2 Describe calls only, standard library.

Without a route to S3 the model download from the subnets hangs until ``ModelDataDownloadTimeoutInSeconds`` (up to
an hour) and the deploy fails late; a security group of another VPC fails CreateModel, and one Availability Zone
is against SageMaker's guidance. Checked here:

- every subnet exists, and all are in one VPC (VpcConfig: "the security groups for the VPC that is specified in the
  Subnets field", botocore sagemaker service-2.json VpcConfig);
- they span at least two Availability Zones ("You must create at least two subnets in different availability
  zones", SageMaker developer guide host-vpc.html): a note when they do not, not a refusal;
- every security group exists and belongs to that VPC;
- S3 is reachable from each subnet: its route table (its own association, else the VPC's main table: Amazon VPC
  user guide, "Route tables": a subnet without an explicit association uses the main route table) is one of an S3
  gateway endpoint's route tables, or the VPC has an S3 interface endpoint, or the table sends 0.0.0.0/0 to a NAT
  gateway, a transit gateway or a network interface (a NAT instance or firewall). A route to an internet gateway
  does not count: SageMaker's network interfaces get no public IP address ("Give SageMaker AI hosted endpoints
  access to resources in your Amazon VPC": a VPC without NAT needs the S3 VPC endpoint);
- the security groups let HTTPS out to S3 (preflight/egress.py): a group without such an outbound rule drops the
  download as surely as a missing route;
- the policy of the S3 endpoint the subnets use allows s3:GetObject and s3:ListBucket on the model's prefix
  (preflight/endpoint_policy.py): an endpoint policy denies through the endpoint what it does not allow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from preflight.egress import egress_problems
from preflight.endpoint_policy import ModelObjects, policy_findings

GUIDE = "docs/guide/private-network.md"
EGRESS_TARGETS = ("NatGatewayId", "TransitGatewayId", "NetworkInterfaceId")


@dataclass
class NetworkReport:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    vpc_id: str = ""
    zones: tuple[str, ...] = ()


def _ids(raw: Any) -> list[str]:
    """A list property (CloudFormation sends lists as lists), blanks dropped, order kept."""
    if not isinstance(raw, list):
        return []
    return list(dict.fromkeys(str(v) for v in raw if str(v).strip()))


def properties_of(props: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The subnets and security groups of the preflight resource's ``Subnets``/``SecurityGroupIds``."""
    return _ids(props.get("Subnets")), _ids(props.get("SecurityGroupIds"))


def _error_code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", type(error).__name__))


def _pages(ec2: Any, operation: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in ec2.get_paginator(operation).paginate(**kwargs):
        items += page.get(key, [])
    return items


def route_table_of(subnet_id: str, tables: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The subnet's own route table, else its VPC's main one."""
    main = None
    for table in tables:
        for association in table.get("Associations", []):
            if association.get("SubnetId") == subnet_id:
                return table
            if association.get("Main"):
                main = table
    return main


def egress_route(table: Mapping[str, Any]) -> str | None:
    """The target of an active default route that leaves the VPC without a public IP (NAT, transit gateway, ENI)."""
    for route in table.get("Routes", []):
        if route.get("DestinationCidrBlock") != "0.0.0.0/0" or route.get("State", "active") != "active":
            continue
        for target in EGRESS_TARGETS:
            if route.get(target):
                return str(route[target])
    return None


def _internet_gateway_only(table: Mapping[str, Any]) -> bool:
    return any(
        r.get("DestinationCidrBlock") == "0.0.0.0/0" and str(r.get("GatewayId", "")).startswith("igw-")
        for r in table.get("Routes", [])
    )


def check_network(
    ec2: Any, subnet_ids: Sequence[str], security_group_ids: Sequence[str], model: ModelObjects | None = None
) -> NetworkReport:
    """Every problem with the subnets and groups (``ec2`` is a boto3 EC2 client of the endpoint's region).

    ``model`` (the checkpoint's bucket and prefix) is what the S3 endpoint's policy must let through; None skips
    the policy check."""
    report = NetworkReport()
    if not subnet_ids:
        return report
    try:
        subnets = _pages(ec2, "describe_subnets", "Subnets", SubnetIds=list(subnet_ids))
    except Exception as e:  # botocore ClientError; the handler's client is created by the caller
        code = _error_code(e)
        if code == "InvalidSubnetID.NotFound":
            report.problems.append(
                f"a subnet of {', '.join(subnet_ids)} does not exist in this account and region ({code}: "
                f"{getattr(e, 'response', {}).get('Error', {}).get('Message', '')[:200]})"
            )
        else:
            report.problems.append(f"cannot read the subnets {', '.join(subnet_ids)} ({code}): ec2:DescribeSubnets")
        return report
    found = {s["SubnetId"]: s for s in subnets}
    missing = [s for s in subnet_ids if s not in found]
    if missing:
        report.problems.append(f"subnet(s) {', '.join(missing)} not found in this account and region")
    vpcs = sorted({s["VpcId"] for s in subnets})
    if len(vpcs) > 1:
        by_vpc = "; ".join(f"{v}: {', '.join(i for i, s in found.items() if s['VpcId'] == v)}" for v in vpcs)
        report.problems.append(f"the subnets are in {len(vpcs)} VPCs ({by_vpc}); a VpcConfig takes subnets of one VPC")
        return report
    if not vpcs:
        return report
    vpc = report.vpc_id = vpcs[0]
    report.zones = tuple(sorted({s.get("AvailabilityZone", "") for s in subnets}))
    if len(report.zones) < 2:
        zone = report.zones[0] if report.zones else "one Availability Zone"
        report.notes.append(
            f"the subnets are all in {zone}: SageMaker asks for at least two subnets in different Availability "
            "Zones, so that instances can be placed when one zone has no capacity"
        )
    groups, problems = _groups(ec2, vpc, security_group_ids)
    report.problems += problems
    path = _s3_path(ec2, vpc, subnet_ids, found)
    report.problems += path.problems
    if groups and not path.problems:
        problems, notes = egress_problems(groups, path.endpoints, path.prefix_lists)
        report.problems += problems
        report.notes += notes
    if model is not None:
        partition = getattr(getattr(ec2, "meta", None), "partition", None)  # botocore ClientMeta: "aws", "aws-cn"
        model = dataclasses.replace(model, partition=partition if isinstance(partition, str) else "aws")
        for endpoint in path.endpoints:
            problems, notes = policy_findings(endpoint, model)
            report.problems += problems
            report.notes += notes
    return report


def _groups(ec2: Any, vpc: str, group_ids: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The groups as DescribeSecurityGroups gives them (empty when any is wrong), and the problems."""
    if not group_ids:
        return [], []
    try:
        groups = _pages(ec2, "describe_security_groups", "SecurityGroups", GroupIds=list(group_ids))
    except Exception as e:
        code = _error_code(e)
        if code in ("InvalidGroup.NotFound", "InvalidGroupId.Malformed"):
            return [], [
                f"a security group of {', '.join(group_ids)} does not exist in this account and region ({code})"
            ]
        return [], [f"cannot read the security groups {', '.join(group_ids)} ({code}): ec2:DescribeSecurityGroups"]
    other = [f"{g['GroupId']} ({g.get('VpcId', 'no VPC')})" for g in groups if g.get("VpcId") != vpc]
    if other:
        return [], [f"security group(s) {', '.join(other)} are not in the subnets' VPC {vpc}"]
    return groups, []


@dataclass
class S3Path:
    """How the subnets reach S3: the endpoints their traffic goes through, the S3 prefix lists, the problems."""

    problems: list[str] = field(default_factory=list)
    endpoints: list[dict[str, Any]] = field(default_factory=list)
    prefix_lists: set[str] = field(default_factory=set)


def _s3_path(ec2: Any, vpc: str, subnet_ids: Sequence[str], found: Mapping[str, Any]) -> S3Path:
    region = getattr(getattr(ec2, "meta", None), "region_name", None) or ""
    service = f"com.amazonaws.{region}.s3"
    try:
        tables = _pages(ec2, "describe_route_tables", "RouteTables", Filters=[{"Name": "vpc-id", "Values": [vpc]}])
        endpoints = _pages(
            ec2,
            "describe_vpc_endpoints",
            "VpcEndpoints",
            Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "service-name", "Values": [service]}],
        )
    except Exception as e:
        return S3Path(
            problems=[
                f"cannot read the route tables or VPC endpoints of {vpc} ({_error_code(e)}): ec2:DescribeRouteTables, "
                "ec2:DescribeVpcEndpoints"
            ]
        )
    live = [e for e in endpoints if str(e.get("State", "")).lower() == "available"]
    interfaces = [e for e in live if e.get("VpcEndpointType") == "Interface"]
    if interfaces:
        return S3Path(endpoints=interfaces)  # an S3 interface endpoint serves every subnet of the VPC
    gateways = [e for e in live if e.get("VpcEndpointType") == "Gateway"]
    gateway_tables = {t for e in gateways for t in e.get("RouteTableIds", [])}
    path = S3Path()
    problems = path.problems
    for subnet in subnet_ids:
        if subnet not in found:
            continue
        table = route_table_of(subnet, tables)
        if table is None:
            problems.append(f"subnet {subnet} has no route table")
            continue
        if table["RouteTableId"] in gateway_tables:
            # The gateway endpoint's route is more specific than a NAT default route, so S3 traffic takes it, and
            # its destination is the S3 prefix list (VPC user guide, "Gateway endpoints": routing).
            for endpoint in gateways:
                if table["RouteTableId"] in endpoint.get("RouteTableIds", []) and endpoint not in path.endpoints:
                    path.endpoints.append(endpoint)
            path.prefix_lists |= s3_prefix_lists(table, gateways)
            continue
        if egress_route(table):
            continue
        why = (
            "its only default route is to an internet gateway, which SageMaker's network interfaces cannot use "
            "(they get no public IP)"
            if _internet_gateway_only(table)
            else "no S3 gateway endpoint is on it and no default route goes to a NAT gateway"
        )
        problems.append(
            f"subnet {subnet} cannot reach S3: route table {table['RouteTableId']}: {why}. Add the S3 gateway "
            f"endpoint ({service}, no charge) to that route table, or a NAT route ({GUIDE})"
        )
    return path


def s3_prefix_lists(table: Mapping[str, Any], gateways: Sequence[Mapping[str, Any]]) -> set[str]:
    """The prefix lists the table routes to an S3 gateway endpoint (a route ``DestinationPrefixListId`` ->
    ``GatewayId: vpce-...``, added by the endpoint to each of its route tables: VPC user guide, "Gateway endpoints")."""
    ids = {str(e.get("VpcEndpointId")) for e in gateways}
    return {
        str(r["DestinationPrefixListId"])
        for r in table.get("Routes", [])
        if r.get("DestinationPrefixListId") and r.get("GatewayId") in ids
    }


def network_check(props: Mapping[str, Any], ec2: Callable[[], Any], model: ModelObjects | None = None) -> NetworkReport:
    """The check for the preflight resource's properties; no EC2 call when it names no subnets."""
    subnets, groups = properties_of(props)
    return check_network(ec2(), subnets, groups, model) if subnets else NetworkReport()
