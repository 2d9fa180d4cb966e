"""preflight/egress.py: a VpcConfig's security groups must let HTTPS (443) out to S3 (IpPermissionsEgress)."""

from __future__ import annotations

import pytest

from preflight.egress import egress_problems, opens

GROUP = "sg-0123456789abcdef0"
S3_LIST = "pl-63a5400a"
GATEWAY = {"VpcEndpointId": "vpce-0123456789abcdef0", "VpcEndpointType": "Gateway", "RouteTableIds": ["rtb-1"]}
INTERFACE = {
    "VpcEndpointId": "vpce-0123456789abcdef1",
    "VpcEndpointType": "Interface",
    "Groups": [{"GroupId": "sg-0000000000000000e", "GroupName": "s3-endpoint"}],
}


def group(*rules: dict) -> dict:
    return {"GroupId": GROUP, "VpcId": "vpc-1", "IpPermissionsEgress": list(rules)}


def tcp(low: int, high: int, **destination) -> dict:
    return {"IpProtocol": "tcp", "FromPort": low, "ToPort": high, **destination}


def test_a_group_without_outbound_rules_is_refused_naming_it_and_the_prefix_list():
    (problem,), notes = egress_problems([group()], [GATEWAY], {S3_LIST})
    assert GROUP in problem and "outbound rules: none" in problem and S3_LIST in problem and notes == []


@pytest.mark.parametrize(
    ("low", "high", "passes"),
    [(443, 443, True), (442, 443, True), (443, 444, True), (0, 65535, True), (442, 442, False), (444, 8443, False)],
)
def test_the_port_range_must_hold_443_at_its_edges(low, high, passes):
    problems, _ = egress_problems([group(tcp(low, high, IpRanges=[{"CidrIp": "0.0.0.0/0"}]))], [GATEWAY], {S3_LIST})
    assert (problems == []) is passes


def test_all_traffic_and_protocol_number_6_count_and_udp_does_not():
    assert opens({"IpProtocol": "-1"}) and opens({"IpProtocol": "6", "FromPort": 443, "ToPort": 443})
    assert not opens({"IpProtocol": "udp", "FromPort": 443, "ToPort": 443})
    assert not opens({"IpProtocol": "icmp", "FromPort": -1, "ToPort": -1})


def test_the_s3_prefix_list_of_the_gateway_passes():
    rule = tcp(443, 443, PrefixListIds=[{"PrefixListId": S3_LIST}])
    assert egress_problems([group(rule)], [GATEWAY], {S3_LIST}) == ([], [])


def test_another_prefix_list_is_a_note_not_a_refusal():
    rule = tcp(443, 443, PrefixListIds=[{"PrefixListId": "pl-0123456789abcdef0"}])
    problems, (note,) = egress_problems([group(rule)], [GATEWAY], {S3_LIST})
    assert problems == [] and "pl-0123456789abcdef0" in note and "cannot tell" in note


def test_443_only_to_the_vpc_range_without_an_interface_endpoint_is_refused():
    # Through a gateway endpoint or NAT the download goes to S3's public addresses, never to 10.0.0.0/16.
    rule = tcp(443, 443, IpRanges=[{"CidrIp": "10.0.0.0/16"}])
    (problem,), _ = egress_problems([group(rule)], [GATEWAY], {S3_LIST})
    assert "tcp 443-443 to 10.0.0.0/16" in problem


def test_the_vpc_range_with_an_s3_interface_endpoint_is_a_note():
    rule = tcp(443, 443, IpRanges=[{"CidrIp": "10.0.0.0/16"}])
    problems, (note,) = egress_problems([group(rule)], [INTERFACE], set())
    assert problems == [] and "interface endpoint's addresses" in note


def test_the_interface_endpoints_security_group_passes():
    rule = tcp(443, 443, UserIdGroupPairs=[{"GroupId": "sg-0000000000000000e"}])
    assert egress_problems([group(rule)], [INTERFACE], set()) == ([], [])
    (problem,), _ = egress_problems([group(rule)], [GATEWAY], {S3_LIST})  # no interface: a group reaches no S3
    assert "let no HTTPS" in problem


def test_a_public_range_and_ipv6_are_notes():
    rules = [tcp(443, 443, IpRanges=[{"CidrIp": "52.216.0.0/15"}]), tcp(443, 443, Ipv6Ranges=[{"CidrIpv6": "::/0"}])]
    problems, (note,) = egress_problems([group(*rules)], [GATEWAY], {S3_LIST})
    assert problems == [] and "52.216.0.0/15" in note and "::/0" in note


def test_a_second_group_with_the_rule_is_enough():
    other = {
        "GroupId": "sg-0123456789abcdef1",
        "IpPermissionsEgress": [tcp(443, 443, IpRanges=[{"CidrIp": "0.0.0.0/0"}])],
    }
    assert egress_problems([group(), other], [], set()) == ([], [])


def test_nat_only_refusal_asks_for_0_0_0_0():
    (problem,), _ = egress_problems([group(tcp(80, 80, IpRanges=[{"CidrIp": "0.0.0.0/0"}]))], [], set())
    assert "0.0.0.0/0" in problem and "tcp 80-80 to 0.0.0.0/0" in problem
