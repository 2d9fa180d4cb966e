"""Whether the security groups of a VpcConfig let HTTPS out to S3: DescribeSecurityGroups' ``IpPermissionsEgress``.

Security groups are stateful allow lists: outbound traffic leaves only if some rule of some group on the interface
allows it, and a group without outbound rules allows none (VPC user guide, "Security group rules"). Each rule is an
``IpPermission`` (botocore ec2 service-2.json: ``IpProtocol`` ("-1" is every protocol), ``FromPort``/``ToPort``,
``IpRanges[].CidrIp``, ``Ipv6Ranges[].CidrIpv6``, ``PrefixListIds[].PrefixListId``, ``UserIdGroupPairs[].GroupId``).
The model download is HTTPS to S3: through a gateway endpoint or a NAT it goes to S3's public addresses (a gateway
endpoint's are the S3 prefix list in its route tables; VPC user guide, "Gateway endpoints"), through an interface
endpoint to its network interfaces in the VPC, whose own security groups a rule may name.

Evaluated conservatively: a rule that surely reaches S3 passes; one that may (a CIDR or prefix list we cannot
resolve without S3's address ranges, an IPv6 range) makes a note; none at all is a refusal naming the groups.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

HTTPS = 443
GUIDE = "docs/guide/private-network.md"


def opens(rule: Mapping[str, Any], port: int = HTTPS) -> bool:
    """Whether the rule allows TCP to ``port`` ("-1": every protocol and port; "6" is TCP's protocol number)."""
    protocol = str(rule.get("IpProtocol", "")).lower()
    if protocol == "-1":
        return True
    if protocol not in ("tcp", "6"):
        return False
    low, high = rule.get("FromPort"), rule.get("ToPort")
    return isinstance(low, int) and isinstance(high, int) and low <= port <= high


def _private(cidr: str) -> bool | None:
    try:
        return ipaddress.ip_network(cidr, strict=False).is_private
    except ValueError:
        return None


def _verdicts(
    rule: Mapping[str, Any], interfaces: Sequence[Mapping[str, Any]], prefix_lists: set[str]
) -> tuple[bool, list[str]]:
    """(surely reaches S3, destinations that may) for one rule that opens 443."""
    maybe = []
    for cidr in (r.get("CidrIp", "") for r in rule.get("IpRanges", [])):
        if cidr == "0.0.0.0/0":
            return True, []
        private = _private(cidr)
        if private and interfaces:
            maybe.append(f"{cidr} (it must hold the S3 interface endpoint's addresses)")
        elif private is False or private is None:
            maybe.append(f"{cidr} (S3's addresses are not checked here)")
        # A private range without an interface endpoint never holds S3's public addresses: it does not count.
    for listed in (p.get("PrefixListId", "") for p in rule.get("PrefixListIds", [])):
        if listed in prefix_lists:
            return True, []
        maybe.append(f"prefix list {listed}")
    endpoint_groups = {g.get("GroupId") for e in interfaces for g in e.get("Groups", [])}
    for pair in rule.get("UserIdGroupPairs", []):
        if pair.get("GroupId") in endpoint_groups:
            return True, []
    for cidr in (r.get("CidrIpv6", "") for r in rule.get("Ipv6Ranges", [])):
        maybe.append(f"{cidr} (IPv6: S3 over IPv6 is not checked here)")
    return False, maybe


def describe(rule: Mapping[str, Any]) -> str:
    protocol = str(rule.get("IpProtocol", ""))
    ports = "all" if protocol == "-1" else f"{protocol} {rule.get('FromPort')}-{rule.get('ToPort')}"
    to = (
        [r.get("CidrIp", "") for r in rule.get("IpRanges", [])]
        + [r.get("CidrIpv6", "") for r in rule.get("Ipv6Ranges", [])]
        + [p.get("PrefixListId", "") for p in rule.get("PrefixListIds", [])]
        + [g.get("GroupId", "") for g in rule.get("UserIdGroupPairs", [])]
    )
    return f"{ports} to {', '.join(to) or 'nothing'}"


def egress_problems(
    groups: Sequence[Mapping[str, Any]], endpoints: Sequence[Mapping[str, Any]], prefix_lists: set[str]
) -> tuple[list[str], list[str]]:
    """(problems, notes) for the outbound rules of ``groups`` (all of them apply to the same interfaces).

    ``endpoints`` are the S3 endpoints the subnets use, ``prefix_lists`` the S3 prefix lists of their gateways."""
    interfaces = [e for e in endpoints if e.get("VpcEndpointType") == "Interface"]
    rules = [rule for g in groups for rule in g.get("IpPermissionsEgress", [])]
    maybe: list[str] = []
    for rule in rules:
        if not opens(rule):
            continue
        sure, may = _verdicts(rule, interfaces, prefix_lists)
        if sure:
            return [], []
        maybe += may
    names = ", ".join(str(g.get("GroupId")) for g in groups)
    if maybe:
        return [], [
            f"security group(s) {names} let HTTPS out only to {'; '.join(dict.fromkeys(maybe))}: the preflight "
            "cannot tell whether that reaches S3; if it does not, the model download hangs until its timeout"
        ]
    gateways = [str(e.get("VpcEndpointId")) for e in endpoints if e.get("VpcEndpointType") == "Gateway"]
    to = "0.0.0.0/0 (S3's public addresses, through the NAT)"
    if prefix_lists:
        to = f"the S3 prefix list {', '.join(sorted(prefix_lists))}"
    elif gateways:
        to = f"the S3 prefix list (the destination of gateway endpoint {', '.join(gateways)}'s route)"
    if interfaces:
        to = "the S3 interface endpoint's security group or addresses"
    shown = "; ".join(describe(r) for r in rules[:6]) or "none"
    return [
        f"security group(s) {names} let no HTTPS (TCP {HTTPS}) out to S3 (outbound rules: {shown}), so the model "
        f"download would hang until ModelDataDownloadTimeoutInSeconds. Add an outbound rule for TCP {HTTPS} to {to} "
        f"({GUIDE})"
    ], []
