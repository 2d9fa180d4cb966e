"""Every IAM, KMS and bucket-policy statement of the app's templates, whole: actions, resources and conditions.

``test_iam_exact`` checks each role's actions; ``test_iam_calls`` that every boto3 call has a grant. Neither sees a
statement that keeps its actions and loses a condition (``kms:ViaService``, ``aws:SecureTransport``,
``sagemaker:VpcSubnets``, an ``iam:PassedToService``): that is a wider grant with the same action list. This file
holds every statement of five variants (the default, component mode with scale-to-zero, a governed account's
private deployment in each mode: subnets, customer keys, tags, and the smoke test's load gate) against a reviewed
snapshot,
``tests/snapshots/iam-statements.json``.

After an intended change, regenerate and review the diff like code (a new condition-free statement is a finding):
    UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/stacks/test_iam_statements.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import stack_template

# Five whole apps synthesized: `make test-integration` (CI runs it), so `make test` stays under 5 minutes.
pytestmark = pytest.mark.integration

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "iam-statements.json"
KEY = "arn:aws:kms:us-east-1:123456789012:key/{n}234abcd-12ab-34cd-56ef-1234567890ab"
GOVERNED = {
    "vpc_subnet_ids": json.dumps(["subnet-0123456789abcdef0", "subnet-89abcdef"]),
    "bucket_kms_key_arn": KEY.format(n=1),
    "volume_kms_key_arn": KEY.format(n=2),
    "logs_kms_key_arn": KEY.format(n=3),
    "lambda_kms_key_arn": KEY.format(n=4),
    "hf_token_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf",
    "tags": json.dumps({"cost-center": "ml 42"}),
    # a type without local NVMe takes a volume key (CreateEndpointConfig: KmsKeyId), and p3's V100 a CUDA 12 image
    "instance_type": "ml.p3.2xlarge",
    "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11.0-gpu-py312-cu128-ubuntu22.04-sagemaker",
}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "component-scale-to-zero": {"deployment_mode": "inference-component", "scale_to_zero": True, "min_instances": 0},
    "private-standard": {**GOVERNED, "vpc_security_group_ids": json.dumps(["sg-0123456789abcdef0"])},
    "private-component": {**GOVERNED, "vpc_id": "vpc-0123456789abcdef0", "deployment_mode": "inference-component"},
    # The smoke test's load gate: one PutMetricData statement, Resource "*" scoped by cloudwatch:namespace.
    "load-gate": {"slo_ttft_p95_ms": "500", "slo_itl_p95_ms": "50"},
}
# Where statements live, by resource type: the property path to the policy documents.
DOCUMENTS = {
    "AWS::IAM::Policy": ("PolicyDocument",),
    "AWS::IAM::ManagedPolicy": ("PolicyDocument",),
    "AWS::IAM::Role": ("AssumeRolePolicyDocument", "Policies"),
    "AWS::KMS::Key": ("KeyPolicy",),
    "AWS::S3::BucketPolicy": ("PolicyDocument",),
    "AWS::SNS::TopicPolicy": ("PolicyDocument",),
}


def _documents(kind: str, properties: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in DOCUMENTS[kind]:
        value = properties.get(name)
        if name == "Policies" and value:
            for policy in value:
                out[f"Policies/{policy['PolicyName']}"] = policy["PolicyDocument"]["Statement"]
        elif value:
            out[name] = value["Statement"]
    return out


def statements(overrides: dict[str, Any]) -> dict[str, Any]:
    """logical id -> document -> its statements, as the template holds them (asset hashes masked)."""
    template = stack_template(**overrides).to_json()
    out = {
        logical_id: _documents(resource["Type"], resource.get("Properties", {}))
        for logical_id, resource in sorted(template["Resources"].items())
        if resource["Type"] in DOCUMENTS
    }
    text = re.sub(r"[0-9a-f]{64}", "<asset>", json.dumps(out, sort_keys=True))
    return json.loads(text)


@pytest.fixture(scope="module")
def current() -> dict[str, Any]:
    found = {name: statements(overrides) for name, overrides in VARIANTS.items()}
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    return found


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_statement_matches_the_reviewed_snapshot(current: dict[str, Any], variant: str) -> None:
    expected = json.loads(SNAPSHOT.read_text())[variant]
    found = current[variant]
    assert sorted(found) == sorted(expected), "policy resources added or removed; regenerate and review"
    changed = [logical_id for logical_id in found if found[logical_id] != expected[logical_id]]
    assert not changed, f"statements changed in {changed}; regenerate (module docstring) and review the diff"


def test_the_snapshot_holds_conditions_a_dropped_one_would_change() -> None:
    # The tripwire is only as good as what it holds: the conditions the product relies on are in it.
    text = SNAPSHOT.read_text()
    for condition in (
        "aws:SecureTransport",
        "kms:ViaService",
        "iam:PassedToService",
        "kms:CallerAccount",
        "cloudwatch:namespace",
    ):
        assert condition in text, condition
