"""preflight/network.py: the VpcConfig's subnets and groups checked with EC2 Describe calls, before the endpoint.

The EC2 client is a botocore Stubber, so every request and response is validated against the EC2 service model
(the real response shapes); the responses follow the EC2 API reference examples.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from preflight import CHECKS
from preflight.network import check_network, network_check
from tests.fakes.fixtures import s3  # noqa: F401
from tests.handlers.test_preflight_handler import event, handler, properties  # noqa: F401

VPC = "vpc-0123456789abcdef0"
A, B = "subnet-0123456789abcdef0", "subnet-0123456789abcdef1"
GROUP = "sg-0123456789abcdef0"
PRIVATE_TABLE = "rtb-0123456789abcdef0"
MAIN_TABLE = "rtb-0123456789abcdef9"
S3_SERVICE = "com.amazonaws.us-east-1.s3"


def subnet(subnet_id: str, zone: str, vpc: str = VPC) -> dict:
    return {
        "SubnetId": subnet_id,
        "VpcId": vpc,
        "AvailabilityZone": zone,
        "AvailabilityZoneId": "use1-az1",
        "AvailableIpAddressCount": 250,
        "CidrBlock": "10.0.1.0/24",
        "State": "available",
    }


def table(table_id: str, routes: list[dict], subnets: tuple[str, ...] = (), main: bool = False) -> dict:
    associations = [{"Main": False, "SubnetId": s, "RouteTableId": table_id} for s in subnets]
    if main:
        associations.append({"Main": True, "RouteTableId": table_id})
    return {"RouteTableId": table_id, "VpcId": VPC, "Associations": associations, "Routes": routes}


LOCAL = {"DestinationCidrBlock": "10.0.0.0/16", "GatewayId": "local", "State": "active", "Origin": "CreateRouteTable"}
NAT = {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": "nat-0123456789abcdef0", "State": "active"}
IGW = {"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "igw-0123456789abcdef0", "State": "active"}


def gateway_endpoint(*tables: str) -> dict:
    return {
        "VpcEndpointId": "vpce-0123456789abcdef0",
        "VpcEndpointType": "Gateway",
        "VpcId": VPC,
        "ServiceName": S3_SERVICE,
        "State": "available",
        "RouteTableIds": list(tables),
    }


@pytest.fixture
def ec2():
    client = boto3.client("ec2", region_name="us-east-1")
    with Stubber(client) as stubber:
        client.stubber = stubber
        yield client
        stubber.assert_no_pending_responses()


def answer(
    ec2,
    *,
    subnets: list[dict],
    groups: list[dict] | None = None,
    tables: list[dict] | None = None,
    endpoints: list[dict] | None = None,
    subnet_ids=(A, B),
    group_ids=(GROUP,),
) -> None:
    ec2.stubber.add_response("describe_subnets", {"Subnets": subnets}, {"SubnetIds": list(subnet_ids)})
    if groups is not None:
        ec2.stubber.add_response("describe_security_groups", {"SecurityGroups": groups}, {"GroupIds": list(group_ids)})
    if tables is not None:
        ec2.stubber.add_response(
            "describe_route_tables", {"RouteTables": tables}, {"Filters": [{"Name": "vpc-id", "Values": [VPC]}]}
        )
        ec2.stubber.add_response(
            "describe_vpc_endpoints",
            {"VpcEndpoints": endpoints or []},
            {"Filters": [{"Name": "vpc-id", "Values": [VPC]}, {"Name": "service-name", "Values": [S3_SERVICE]}]},
        )


# A new group's default outbound rule: all traffic to 0.0.0.0/0 (VPC user guide, "Security group rules").
ALL_OUT = {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
GROUPS = [
    {
        "GroupId": GROUP,
        "GroupName": "llm",
        "VpcId": VPC,
        "Description": "d",
        "OwnerId": "123456789012",
        "IpPermissionsEgress": [ALL_OUT],
    }
]


def test_two_zones_a_group_of_the_vpc_and_an_s3_gateway_endpoint_pass(ec2):
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=GROUPS,
        tables=[table(PRIVATE_TABLE, [LOCAL], (A, B)), table(MAIN_TABLE, [LOCAL], main=True)],
        endpoints=[gateway_endpoint(PRIVATE_TABLE)],
    )
    report = check_network(ec2, [A, B], [GROUP])
    assert report.problems == [] and report.notes == [] and report.zones == ("us-east-1a", "us-east-1b")


def test_subnets_without_a_route_to_s3_are_refused_naming_the_table(ec2):
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=GROUPS,
        tables=[table(PRIVATE_TABLE, [LOCAL], (A,)), table(MAIN_TABLE, [LOCAL, NAT], (B,))],
        endpoints=[gateway_endpoint(MAIN_TABLE)],  # B's table has the endpoint; A's has neither it nor a NAT
    )
    (problem,) = check_network(ec2, [A, B], [GROUP]).problems
    assert f"subnet {A} cannot reach S3: route table {PRIVATE_TABLE}" in problem and "S3 gateway endpoint" in problem


def test_a_nat_route_reaches_s3_and_an_internet_gateway_does_not(ec2):
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=GROUPS,
        tables=[table(PRIVATE_TABLE, [LOCAL, NAT], (A,)), table("rtb-0000000000000000a", [LOCAL, IGW], (B,))],
    )
    (problem,) = check_network(ec2, [A, B], [GROUP]).problems
    assert f"subnet {B}" in problem and "internet gateway" in problem and "no public IP" in problem


def test_a_subnet_without_its_own_table_uses_the_main_one(ec2):
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=GROUPS,
        tables=[table(MAIN_TABLE, [LOCAL], main=True)],
        endpoints=[gateway_endpoint(MAIN_TABLE)],
    )
    assert check_network(ec2, [A, B], [GROUP]).problems == []


def test_an_s3_interface_endpoint_serves_every_subnet(ec2):
    interface = {**gateway_endpoint(), "VpcEndpointType": "Interface", "SubnetIds": [A]}
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=GROUPS,
        tables=[table(MAIN_TABLE, [LOCAL], main=True)],
        endpoints=[interface],
    )
    assert check_network(ec2, [A, B], [GROUP]).problems == []


def test_an_endpoint_that_is_not_available_does_not_count(ec2):
    pending = {**gateway_endpoint(MAIN_TABLE), "State": "pending"}
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=GROUPS,
        tables=[table(MAIN_TABLE, [LOCAL], main=True)],
        endpoints=[pending],
    )
    assert len(check_network(ec2, [A, B], [GROUP]).problems) == 2


def test_a_security_group_of_another_vpc_is_refused(ec2):
    other = [{**GROUPS[0], "VpcId": "vpc-0fedcba9876543210"}]
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=other,
        tables=[table(MAIN_TABLE, [LOCAL, NAT], main=True)],
    )
    (problem,) = check_network(ec2, [A, B], [GROUP]).problems
    assert f"{GROUP} (vpc-0fedcba9876543210) are not in the subnets' VPC {VPC}" in problem


def test_subnets_of_two_vpcs_are_refused_before_anything_else(ec2):
    answer(ec2, subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b", vpc="vpc-0fedcba9876543210")])
    (problem,) = check_network(ec2, [A, B], [GROUP]).problems
    assert "in 2 VPCs" in problem and A in problem and B in problem


def test_one_zone_is_a_note_not_a_refusal(ec2):
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1a")],
        groups=GROUPS,
        tables=[table(MAIN_TABLE, [LOCAL, NAT], main=True)],
    )
    report = check_network(ec2, [A, B], [GROUP])
    assert report.problems == [] and "all in us-east-1a" in report.notes[0]


def test_a_subnet_that_does_not_exist_is_named(ec2):
    ec2.stubber.add_client_error(
        "describe_subnets",
        service_error_code="InvalidSubnetID.NotFound",
        service_message=f"The subnet ID '{B}' does not exist",
        http_status_code=400,
        expected_params={"SubnetIds": [A, B]},
    )
    (problem,) = check_network(ec2, [A, B], [GROUP]).problems
    assert "does not exist" in problem and B in problem


def test_a_group_that_does_not_exist_is_named(ec2):
    ec2.stubber.add_response(
        "describe_subnets", {"Subnets": [subnet(A, "us-east-1a"), subnet(B, "us-east-1b")]}, {"SubnetIds": [A, B]}
    )
    ec2.stubber.add_client_error(
        "describe_security_groups", service_error_code="InvalidGroup.NotFound", http_status_code=400
    )
    ec2.stubber.add_response("describe_route_tables", {"RouteTables": [table(MAIN_TABLE, [LOCAL, NAT], main=True)]})
    ec2.stubber.add_response("describe_vpc_endpoints", {"VpcEndpoints": []})
    (problem,) = check_network(ec2, [A, B], [GROUP]).problems
    assert "does not exist" in problem and GROUP in problem


def test_no_subnets_make_no_call():
    def no_client():
        raise AssertionError("no EC2 call without subnets")

    report = network_check({"InstanceType": "ml.g6.xlarge"}, no_client)
    assert report.problems == [] and report.notes == []


def test_network_is_a_check_the_preflight_can_skip():
    assert "network" in CHECKS


def test_the_handler_refuses_a_subnet_set_without_s3_and_names_the_check(handler, ec2):  # noqa: F811
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=GROUPS,
        tables=[table(MAIN_TABLE, [LOCAL], main=True)],
    )
    handler._clients["ec2"] = ec2
    others = [c for c in CHECKS if c != "network"]
    props = properties(SkipChecks=others, Subnets=[A, B], SecurityGroupIds=[GROUP])
    with pytest.raises(handler.PreflightFailed, match=r"network.*cannot reach S3"):
        handler.on_event(event(props=props))


def test_the_handler_passes_a_reachable_network_with_its_note(handler, ec2):  # noqa: F811
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1a")],
        groups=GROUPS,
        tables=[table(MAIN_TABLE, [LOCAL], main=True)],
        endpoints=[gateway_endpoint(MAIN_TABLE)],
    )
    handler._clients["ec2"] = ec2
    others = [c for c in CHECKS if c != "network"]
    props = properties(SkipChecks=others, Subnets=[A, B], SecurityGroupIds=[GROUP])
    result = handler.on_event(event(props=props))
    assert "us-east-1a" in result["Data"]["Notes"]


S3_LIST = "pl-63a5400a"
# The route a gateway endpoint adds to each of its route tables (VPC user guide, "Gateway endpoints").
TO_ENDPOINT = {"DestinationPrefixListId": S3_LIST, "GatewayId": "vpce-0123456789abcdef0", "State": "active"}


def _network_props(**more) -> dict:
    return properties(
        SkipChecks=[c for c in CHECKS if c != "network"], Subnets=[A, B], SecurityGroupIds=[GROUP], **more
    )


def test_the_handler_refuses_a_group_without_outbound_rules(handler, ec2):  # noqa: F811
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=[{**GROUPS[0], "IpPermissionsEgress": []}],
        tables=[table(MAIN_TABLE, [LOCAL, TO_ENDPOINT], main=True)],
        endpoints=[gateway_endpoint(MAIN_TABLE)],
    )
    handler._clients["ec2"] = ec2
    with pytest.raises(
        handler.PreflightFailed, match=rf"\[network\] security group\(s\) {GROUP} let no HTTPS.*{S3_LIST}"
    ):
        handler.on_event(event(props=_network_props()))


def test_the_handler_passes_443_to_the_s3_prefix_list(handler, ec2):  # noqa: F811
    rule = {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "PrefixListIds": [{"PrefixListId": S3_LIST}]}
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=[{**GROUPS[0], "IpPermissionsEgress": [rule]}],
        tables=[table(MAIN_TABLE, [LOCAL, TO_ENDPOINT], main=True)],
        endpoints=[gateway_endpoint(MAIN_TABLE)],
    )
    handler._clients["ec2"] = ec2
    assert handler.on_event(event(props=_network_props()))["Data"]["Notes"] == ""


def test_the_handler_refuses_a_gateway_endpoint_whose_policy_denies_everything(handler, ec2):  # noqa: F811
    import json

    policy = {"Statement": [{"Sid": "NoS3", "Effect": "Deny", "Principal": "*", "Action": "*", "Resource": "*"}]}
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=GROUPS,
        tables=[table(MAIN_TABLE, [LOCAL, TO_ENDPOINT], main=True)],
        endpoints=[{**gateway_endpoint(MAIN_TABLE), "PolicyDocument": json.dumps(policy)}],
    )
    handler._clients["ec2"] = ec2
    with pytest.raises(handler.PreflightFailed) as failed:
        handler.on_event(event(props=_network_props()))
    reason = str(failed.value)
    assert "denies s3:GetObject" in reason and "denies s3:ListBucket" in reason and "Sid 'NoS3'" in reason
    assert "arn:aws:s3:::" in reason  # the model bucket's ARN, from ModelS3Uri


def test_a_policy_of_an_endpoint_the_subnets_do_not_use_is_not_read(ec2):
    # A's and B's table reaches S3 through a NAT; the denying endpoint sits on another table.
    import json

    deny_all = json.dumps({"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "*", "Resource": "*"}]})
    answer(
        ec2,
        subnets=[subnet(A, "us-east-1a"), subnet(B, "us-east-1b")],
        groups=GROUPS,
        tables=[table(MAIN_TABLE, [LOCAL, NAT], main=True), table("rtb-00000000000000077", [LOCAL])],
        endpoints=[{**gateway_endpoint("rtb-00000000000000077"), "PolicyDocument": deny_all}],
    )
    from preflight.endpoint_policy import ModelObjects

    assert check_network(ec2, [A, B], [GROUP], ModelObjects("b", "p/")).problems == []
