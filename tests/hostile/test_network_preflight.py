"""Hostile network shapes for the network preflight: endpoint policies and security group rules from anywhere.

A VPC endpoint's ``PolicyDocument`` and a group's ``IpPermissionsEgress`` are whatever the account holds: any JSON,
odd types, wildcards, conditions. The checks must never crash on them, never let an unconditional Deny of
everything pass, and never refuse on a statement they cannot evaluate (a Condition makes a note). Generated inputs
are bounded (``max_examples``); ``TALLY`` counts them (``pytest -s``).
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preflight.egress import egress_problems, opens
from preflight.endpoint_policy import ModelObjects, policy_findings
from tests.hostile.tally import Tally, report_fixture

TALLY = Tally()
_report = report_fixture(TALLY)
BOUNDED = settings(max_examples=120, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
MODEL = ModelObjects("model-bucket", "models/org--name/0123abc/")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
patterns = st.sampled_from(
    ["*", "s3:*", "s3:Get*", "s3:GetObject", "s3:List*", "S3:LISTBUCKET", "s3:?etObject", "ec2:*", "s3:Put*"]
)
resources = st.sampled_from(
    [
        "*",
        "arn:aws:s3:::model-bucket",
        "arn:aws:s3:::model-bucket/*",
        "arn:aws:s3:::model-bucket/models/*",
        "arn:aws:s3:::other/*",
        "arn:aws:s3:::model-bucket/${aws:username}/*",
        "arn:aws:s3:::*",
    ]
)


@st.composite
def statements(draw) -> dict:
    statement = {
        "Effect": draw(st.sampled_from(["Allow", "Deny", "allow", 3])),
        draw(st.sampled_from(["Action", "NotAction"])): draw(st.one_of(patterns, st.lists(patterns, max_size=3))),
        draw(st.sampled_from(["Resource", "NotResource"])): draw(st.one_of(resources, st.lists(resources, max_size=3))),
    }
    if draw(st.booleans()):
        statement["Principal"] = draw(st.sampled_from(["*", {"AWS": "*"}, {"AWS": "arn:aws:iam::123456789012:root"}]))
    if draw(st.booleans()):
        statement["Condition"] = {"StringEquals": {"aws:PrincipalAccount": "123456789012"}}
    if draw(st.booleans()):
        statement["Sid"] = draw(st.text(max_size=10))
    return statement


DENY_ALL = {"Effect": "Deny", "Principal": "*", "Action": "*", "Resource": "*"}


def _endpoint(document) -> dict:
    return {"VpcEndpointId": "vpce-0123456789abcdef0", "VpcEndpointType": "Gateway", "PolicyDocument": document}


@BOUNDED
@given(json_values)
def test_any_json_as_a_policy_never_crashes(document):
    problems, notes = policy_findings(_endpoint(json.dumps(document)), MODEL)
    TALLY.record("policy json", bool(problems))
    assert all(isinstance(p, str) and "vpce-0123456789abcdef0" in p for p in problems + notes)


@BOUNDED
@given(st.lists(statements(), max_size=5), st.integers(min_value=0, max_value=5))
def test_an_unconditional_deny_of_everything_is_always_refused(others, where):
    listed = [*others]
    listed.insert(min(where, len(listed)), DENY_ALL)
    problems, _ = policy_findings(_endpoint(json.dumps({"Statement": listed})), MODEL)
    TALLY.record("deny all", bool(problems))
    assert len(problems) == 2 and all("denies" in p for p in problems)


@BOUNDED
@given(st.lists(statements(), min_size=1, max_size=5))
def test_conditions_alone_never_refuse(listed):
    # Every statement conditional: none can be evaluated, so the verdict is a note or nothing, never a refusal
    # on a Deny; a refusal can only be for a missing Allow, and then no statement applies unconditionally.
    conditional = [{**s, "Condition": {"Bool": {"aws:SecureTransport": "true"}}} for s in listed]
    problems, _ = policy_findings(_endpoint(json.dumps({"Statement": conditional})), MODEL)
    TALLY.record("conditional", bool(problems))
    assert not any("denies" in p for p in problems)


ports = st.integers(min_value=-1, max_value=65535)
rules = st.fixed_dictionaries(
    {"IpProtocol": st.sampled_from(["tcp", "udp", "icmp", "-1", "6", "17", "TCP"])},
    optional={
        "FromPort": ports,
        "ToPort": ports,
        "IpRanges": st.lists(
            st.fixed_dictionaries({"CidrIp": st.sampled_from(["0.0.0.0/0", "10.0.0.0/8", "52.0.0.0/8", "bad"])}),
            max_size=2,
        ),
        "Ipv6Ranges": st.lists(st.fixed_dictionaries({"CidrIpv6": st.just("::/0")}), max_size=1),
        "PrefixListIds": st.lists(
            st.fixed_dictionaries({"PrefixListId": st.sampled_from(["pl-63a5400a", "pl-0000000000000000f"])}),
            max_size=2,
        ),
        "UserIdGroupPairs": st.lists(st.fixed_dictionaries({"GroupId": st.just("sg-0000000000000000e")}), max_size=1),
    },
)


@BOUNDED
@given(st.lists(rules, max_size=6))
def test_any_egress_rules_never_crash_and_refuse_only_without_443(listed):
    group = {"GroupId": "sg-0123456789abcdef0", "IpPermissionsEgress": listed}
    gateway = {"VpcEndpointId": "vpce-1", "VpcEndpointType": "Gateway"}
    problems, notes = egress_problems([group], [gateway], {"pl-63a5400a"})
    TALLY.record("egress", bool(problems))
    assert not (problems and notes)
    if not any(opens(r) for r in listed):
        assert len(problems) == 1 and "sg-0123456789abcdef0" in problems[0]
    surely = any(
        opens(r)
        and (
            any(x["CidrIp"] == "0.0.0.0/0" for x in r.get("IpRanges", []))
            or any(x["PrefixListId"] == "pl-63a5400a" for x in r.get("PrefixListIds", []))
        )
        for r in listed
    )
    if surely:
        assert (problems, notes) == ([], [])
