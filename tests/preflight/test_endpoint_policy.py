"""preflight/endpoint_policy.py: an S3 endpoint's policy must allow s3:GetObject and s3:ListBucket on the model."""

from __future__ import annotations

import json

import pytest

from preflight.endpoint_policy import ModelObjects, applies, policy_findings

MODEL = ModelObjects("model-bucket", "models/org--name/0123abc/")
ENDPOINT_ID = "vpce-0123456789abcdef0"
DEFAULT = {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*"}]}


def endpoint(*statements: dict, raw: str | None = None) -> dict:
    document = raw if raw is not None else json.dumps({"Version": "2008-10-17", "Statement": list(statements)})
    return {"VpcEndpointId": ENDPOINT_ID, "VpcEndpointType": "Gateway", "PolicyDocument": document}


def allow(action, resource, **more) -> dict:
    return {"Effect": "Allow", "Principal": "*", "Action": action, "Resource": resource, **more}


def deny(action, resource, **more) -> dict:
    return {"Effect": "Deny", "Principal": "*", "Action": action, "Resource": resource, **more}


READ = allow(["s3:GetObject", "s3:ListBucket"], ["arn:aws:s3:::model-bucket", "arn:aws:s3:::model-bucket/*"])


def test_the_default_policy_and_no_policy_pass():
    assert policy_findings(endpoint(*DEFAULT["Statement"]), MODEL) == ([], [])
    assert policy_findings({"VpcEndpointId": ENDPOINT_ID}, MODEL) == ([], [])


def test_an_allow_of_the_bucket_passes():
    assert policy_findings(endpoint(READ), MODEL) == ([], [])


def test_deny_everything_is_refused_naming_the_statement():
    problems, _ = policy_findings(endpoint(READ, {**deny("*", "*"), "Sid": "DenyAll"}), MODEL)
    assert len(problems) == 2 and all("statement 2 (Sid 'DenyAll')" in p and ENDPOINT_ID in p for p in problems)
    assert "s3:GetObject" in problems[0] and "s3:ListBucket" in problems[1]


def test_a_deny_of_get_star_on_the_prefix_refuses_get_object_only():
    (problem,), _ = policy_findings(endpoint(READ, deny("s3:Get*", "arn:aws:s3:::model-bucket/models/*")), MODEL)
    assert "denies s3:GetObject" in problem and "statement 2" in problem


def test_a_policy_that_allows_another_bucket_only_is_refused_for_missing_allow():
    other = allow("s3:*", ["arn:aws:s3:::other-bucket", "arn:aws:s3:::other-bucket/*"])
    problems, _ = policy_findings(endpoint(other), MODEL)
    assert len(problems) == 2 and all("no statement that allows" in p for p in problems)


def test_not_action_and_not_resource():
    everything_but_put = allow("*", "*")
    everything_but_put.pop("Action")
    everything_but_put["NotAction"] = "s3:PutObject"
    assert policy_findings(endpoint(everything_but_put), MODEL) == ([], [])
    outside = deny("s3:*", "*")
    outside.pop("Resource")
    outside["NotResource"] = ["arn:aws:s3:::model-bucket", "arn:aws:s3:::model-bucket/*"]
    assert policy_findings(endpoint(READ, outside), MODEL) == ([], [])  # denies only other buckets


def test_action_wildcards_are_case_insensitive_and_resources_are_not():
    assert applies(allow("S3:getobj?ct", "*"), "s3:GetObject", "arn:aws:s3:::b/k") == "yes"
    assert applies(allow("s3:*", "arn:aws:s3:::Model-Bucket/*"), "s3:GetObject", MODEL.object_arn("k")) == "no"


def test_a_condition_on_a_deny_is_a_note_not_a_refusal():
    conditional = deny("s3:*", "*", Condition={"StringNotEquals": {"aws:PrincipalAccount": "123456789012"}})
    problems, notes = policy_findings(endpoint(READ, conditional), MODEL)
    assert problems == [] and len(notes) == 2 and all("may deny" in n for n in notes)


def test_an_allow_only_under_a_condition_is_a_note():
    conditional = allow("s3:*", "*", Condition={"StringEquals": {"aws:PrincipalAccount": "123456789012"}})
    problems, notes = policy_findings(endpoint(conditional), MODEL)
    assert problems == [] and all("only under statement 1" in n for n in notes)


def test_an_allow_of_some_objects_is_a_note_for_get_object():
    some = allow(["s3:GetObject", "s3:ListBucket"], ["arn:aws:s3:::model-bucket", "arn:aws:s3:::model-bucket/*.json"])
    problems, (note,) = policy_findings(endpoint(some), MODEL)
    assert problems == [] and "s3:GetObject" in note


@pytest.mark.parametrize("raw", ["not json", "[]", '{"Statement": 3}'])
def test_an_unreadable_policy_is_a_note(raw):
    problems, (note,) = policy_findings(endpoint(raw=raw), MODEL)
    assert problems == [] and "could not be read" in note


def test_the_partition_is_part_of_the_arn():
    china = ModelObjects("model-bucket", "models/x/", partition="aws-cn")
    cn = allow(["s3:GetObject", "s3:ListBucket"], ["arn:aws-cn:s3:::model-bucket", "arn:aws-cn:s3:::model-bucket/*"])
    assert policy_findings(endpoint(cn), china) == ([], [])
    assert len(policy_findings(endpoint(cn), MODEL)[0]) == 2
