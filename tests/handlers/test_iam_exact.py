"""Each role our constructs define has exactly the actions its calls need: nothing more, nothing less.

``test_iam_calls`` proves every boto3 call in our code has a grant. This file closes the other gaps: an
action the *service* uses on the role's behalf (SageMaker pulling an image, writing logs, a job's metrics)
that no call of ours names, and a grant nobody needs. A role without ``s3:AbortMultipartUpload`` cannot
clean up a failed upload, and nothing else notices until incomplete uploads cost storage for days.
The CDK Provider framework's own roles are CDK's code, not ours, and are left out of the action checks; the
trust checks at the end cover every role in the template (who may assume it, and under which conditions).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import stack_template

SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"

PULL_IMAGE = {  # SageMaker pulls the container image with the execution role (SageMaker execution-role docs)
    "ecr:BatchGetImage": "pull the image",
    "ecr:GetDownloadUrlForLayer": "pull the image",
    "ecr:BatchCheckLayerAvailability": "pull the image",
    "ecr:GetAuthorizationToken": "log in to ECR",
}
SAGEMAKER_LOGS = {  # CloudWatch section of the SageMaker execution-role policy (SageMaker roles docs)
    "logs:CreateLogGroup": "the job's or endpoint's log group",
    "logs:CreateLogStream": "its log streams",
    "logs:PutLogEvents": "its log lines",
    "logs:DescribeLogStreams": "in the documented policy",
    "cloudwatch:PutMetricData": "the instance metrics SageMaker publishes for the job or endpoint",
}
HANDLER_LOGS = {"logs:CreateLogStream": "the function's log", "logs:PutLogEvents": "the function's log"}
READ_PREFIX = {"s3:GetObject": "read the staged revision", "s3:ListBucket": "list the staged revision prefix"}
ROLLBACK = {"cloudformation:DescribeStacks": "tell a rollback's Update from a user's (stack status)"}

ROLES: dict[str, dict[str, str]] = {
    "CheckpointJobRole": {
        "s3:PutObject": "PutObject, CreateMultipartUpload, UploadPart, CompleteMultipartUpload",
        "s3:GetObject": "HeadObject/GetObject of staged objects and the manifest; the worker's code object",
        "s3:AbortMultipartUpload": "abort a failed file's upload and the stale uploads of a killed run",
        "s3:ListMultipartUploadParts": "ListParts: resume a killed run's upload inside a file",
        "s3:ListBucket": "ListObjectsV2 under the repository prefix (skip what is staged)",
        "s3:ListBucketMultipartUploads": "ListMultipartUploads: find uploads a killed run left open",
        **PULL_IMAGE,
        **SAGEMAKER_LOGS,
    },
    "StagedCheckpointProviderRole": {
        "sagemaker:CreateProcessingJob": "start the staging job",
        "sagemaker:AddTags": "tags on CreateProcessingJob",
        "sagemaker:DescribeProcessingJob": "follow the job",
        "sagemaker:ListProcessingJobs": "find this resource's jobs on delete and rollback",
        "sagemaker:StopProcessingJob": "stop a job on delete, failure or rollback",
        "iam:PassRole": "hand the job role to SageMaker",
        "servicequotas:ListServiceQuotas": "the applied '<type> for processing job usage' quota",
        "servicequotas:ListAWSDefaultServiceQuotas": "its default when none is applied",
        **READ_PREFIX,
        **ROLLBACK,
        **HANDLER_LOGS,
    },
    "StagingSignalRole": {
        "sagemaker:DescribeProcessingJob": "the finished job's reason",
        "lambda:InvokeFunction": "Lambda invokes the on-failure destination with this role (Lambda destinations)",
        **READ_PREFIX,
        **HANDLER_LOGS,
    },
    "DeploymentPreflightProviderRole": {
        "servicequotas:ListServiceQuotas": "the applied endpoint quota",
        "servicequotas:ListAWSDefaultServiceQuotas": "the default when none is applied",
        **READ_PREFIX,
        **ROLLBACK,
        **HANDLER_LOGS,
    },
    "EndpointRole": {
        "cloudwatch:DescribeAlarms": "auto-rollback of a deployment reads its alarms",
        **READ_PREFIX,
        **PULL_IMAGE,
        **SAGEMAKER_LOGS,
    },
    "EndpointSmokeTestProviderRole": {
        "sagemaker:DescribeEndpoint": "InService on this deploy's config",
        "sagemaker:InvokeEndpoint": "the chat call",
        "sagemaker:InvokeEndpointWithResponseStream": "the streamed call",
        **ROLLBACK,
        **HANDLER_LOGS,
    },
}
WITH_SECRET = {
    "CheckpointJobRole": {"secretsmanager:GetSecretValue": "read the token by ARN at run time"},
    "StagedCheckpointProviderRole": {"secretsmanager:GetSecretValue": "open the smallest file: gated fails fast"},
}
COMPONENT_MODE = {
    "EndpointSmokeTestProviderRole": {"sagemaker:DescribeInferenceComponent": "the component runs this model"},
}
# The smoke test's load gate publishes its figures (lambda/endpoint_smoke_test/smoke_load.py), in one namespace only.
LOAD_GATE = {"EndpointSmokeTestProviderRole": {"cloudwatch:PutMetricData": "the load gate's figures, one namespace"}}

DECRYPT = {"kms:Decrypt": "read SSE-KMS objects of the given bucket (KMS docs: GetObject needs Decrypt)"}
WITH_BUCKET_KEY = {
    # Writing SSE-KMS objects, multipart included, needs GenerateDataKey and Decrypt (S3 SSE-KMS docs).
    "CheckpointJobRole": {**DECRYPT, "kms:GenerateDataKey": "write SSE-KMS objects"},
    "StagedCheckpointProviderRole": DECRYPT,
    "StagingSignalRole": DECRYPT,
    "DeploymentPreflightProviderRole": DECRYPT,
    "EndpointRole": DECRYPT,
}

# SageMaker creates the VpcConfig's network interfaces with the execution role (SageMaker roles docs: CreateModel and
# CreateProcessingJob execution role permissions, the ec2 statement; constructs_lib/network.py).
NETWORK_INTERFACES = {
    "ec2:CreateNetworkInterface": "the model's or job's interfaces, in the given subnets",
    "ec2:CreateNetworkInterfacePermission": "let SageMaker attach them",
    "ec2:DeleteNetworkInterface": "remove them",
    "ec2:DeleteNetworkInterfacePermission": "remove the attach permission",
    "ec2:DescribeDhcpOptions": "read the VPC's network",
    "ec2:DescribeNetworkInterfaces": "read the VPC's network",
    "ec2:DescribeSecurityGroups": "read the VPC's network",
    "ec2:DescribeSubnets": "read the VPC's network",
    "ec2:DescribeVpcs": "read the VPC's network",
}
VOLUME_KEY = {
    a: "encrypt the ML storage volume (constructs_lib/keys.py VOLUME)"
    for a in (
        "kms:CreateGrant",
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:Encrypt",
        "kms:GenerateDataKey",
        "kms:GenerateDataKeyWithoutPlaintext",
        "kms:ReEncryptFrom",
        "kms:ReEncryptTo",
    )
}
# Lambda attaches a function to the VPC with its execution role (Lambda developer guide, "Giving Lambda functions
# access to resources in an Amazon VPC"): every function role of a private deployment.
FUNCTION_IN_VPC = {
    "ec2:CreateNetworkInterface": "Lambda: the function's network interface",
    "ec2:DeleteNetworkInterface": "Lambda: remove it",
    "ec2:AssignPrivateIpAddresses": "Lambda: its addresses",
    "ec2:UnassignPrivateIpAddresses": "Lambda: its addresses",
    "ec2:DescribeNetworkInterfaces": "Lambda: find it",
    "ec2:DescribeSubnets": "Lambda: the subnets",
}
PRIVATE_NETWORK = {
    "CheckpointJobRole": {**NETWORK_INTERFACES, **VOLUME_KEY, **WITH_BUCKET_KEY["CheckpointJobRole"]},
    "EndpointRole": {**NETWORK_INTERFACES, **VOLUME_KEY, **DECRYPT},
    **{role: {**DECRYPT, **FUNCTION_IN_VPC} for role in ("StagedCheckpointProviderRole", "StagingSignalRole")},
    "EndpointSmokeTestProviderRole": FUNCTION_IN_VPC,
    # preflight/network.py: the subnets, their groups, route tables and S3 endpoints.
    "DeploymentPreflightProviderRole": {
        **DECRYPT,
        **FUNCTION_IN_VPC,
        **{
            f"ec2:Describe{n}": "the network check"
            for n in ("RouteTables", "SecurityGroups", "Subnets", "VpcEndpoints")
        },
    },
}

VARIANTS = {
    "default": ({}, {}),
    "token-secret": ({"hf_token_secret_arn": SECRET_ARN}, WITH_SECRET),
    "component-scale-to-zero": ({"deployment_mode": "inference-component", "scale_to_zero": True}, COMPONENT_MODE),
    "load-gate": ({"slo_ttft_p95_ms": "500", "slo_itl_p95_ms": "50"}, LOAD_GATE),
    "given-bucket-with-key": ({"model_bucket": "my-models-bucket", "model_kms_key_arn": KEY_ARN}, WITH_BUCKET_KEY),
    "private-network-with-keys": (
        {
            "vpc_subnet_ids": '["subnet-0123456789abcdef0", "subnet-89abcdef"]',
            "vpc_id": "vpc-0123456789abcdef0",
            "bucket_kms_key_arn": KEY_ARN,
            "volume_kms_key_arn": KEY_ARN.replace("1234abcd", "9876abcd"),
            "instance_type": "ml.p3.2xlarge",
            "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11.0-gpu-py312-cu128-ubuntu22.04-sagemaker",
        },
        PRIVATE_NETWORK,
    ),
}


def role_actions(template) -> dict[str, set[str]]:
    """Role (logical ID without its hash) -> every action in its policies."""
    found: dict[str, set[str]] = {}
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for role in policy["Properties"].get("Roles", []):
            name = re.sub(r"[0-9A-F]{8}$", "", role["Ref"])
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                assert statement["Effect"] == "Allow", statement
                action = statement["Action"]
                found.setdefault(name, set()).update(action if isinstance(action, list) else [action])
    return found


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request) -> tuple[str, dict[str, set[str]], dict[str, dict[str, str]]]:
    overrides, extra = VARIANTS[request.param]
    template = stack_template(**overrides)
    return request.param, role_actions(template), extra, template


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_has_exactly_the_actions_its_calls_need(variant, role: str) -> None:
    _name, found, extra, _template = variant
    expected = set(ROLES[role]) | set(extra.get(role, {}))
    assert found.get(role, set()) == expected, {
        "missing": sorted(expected - found.get(role, set())),
        "unexpected": sorted(found.get(role, set()) - expected),
    }


def test_each_job_write_action_is_scoped_to_the_repository_prefix() -> None:
    template = stack_template()
    statements = [
        s
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if "CheckpointJobRole" in json.dumps(policy["Properties"]["Roles"])
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    for action in ("s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"):
        (granting,) = [s for s in statements if action in json.dumps(s["Action"])]
        assert re.search(r'/models/Qwen--Qwen3-4B-Instruct-2507/\*"\]\]\}$', json.dumps(granting["Resource"])), (
            action,
            granting["Resource"],
        )


# --- who may assume each role (confused deputy) -------------------------------------------------------------

PARTITION_REGION_ACCOUNT = "arn:<AWS::Partition>:{service}:<AWS::Region>:<AWS::AccountId>:"
# The conditions each service documents for its role's trust policy (the constructs cite the pages). Roles trusted by
# lambda.amazonaws.com carry none: Lambda documents none for an execution role (constructs_lib/provider.py).
TRUST = {
    "CheckpointJobRole": {
        "ArnLike": {"aws:SourceArn": PARTITION_REGION_ACCOUNT.format(service="sagemaker") + "processing-job/{family}*"}
    },
    "EndpointRole": {"ArnLike": {"aws:SourceArn": PARTITION_REGION_ACCOUNT.format(service="sagemaker") + "*"}},
    **{
        f"{provider}ProviderwaiterstatemachineRole": {
            "ArnLike": {"aws:SourceArn": PARTITION_REGION_ACCOUNT.format(service="states") + "stateMachine:*"},
            "StringEquals": {"aws:SourceAccount": "<AWS::AccountId>"},
        }
        for provider in ("StagedCheckpoint", "EndpointSmokeTest")
    },
}


def flat(value):
    """A policy value with its intrinsics written out: {"Ref": "AWS::Region"} is "<AWS::Region>"."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(flat(part) for part in parts)
    if isinstance(value, dict):
        return {key: flat(item) for key, item in value.items()}
    if isinstance(value, list):
        return [flat(item) for item in value]
    return value


def trust_statements(template) -> dict[str, list[dict]]:
    """Role (logical ID without its hash) -> the statements of its trust policy, intrinsics written out."""
    return {
        re.sub(r"[0-9A-F]{8}$", "", logical_id): flat(role["Properties"]["AssumeRolePolicyDocument"]["Statement"])
        for logical_id, role in template.find_resources("AWS::IAM::Role").items()
    }


def test_each_service_role_trusts_its_service_only_under_the_documented_conditions(variant) -> None:
    _name, _found, _extra, template = variant
    (prefix,) = {r["Properties"]["JobNamePrefix"] for r in template.find_resources("Custom::StagedCheckpoint").values()}
    family = re.fullmatch(r"(hfstage-[0-9a-f]{8}-)[0-9a-f]{10}-", prefix)[1]
    roles = trust_statements(template)
    assert set(TRUST) <= set(roles), sorted(set(TRUST) - set(roles))
    for role, statements in roles.items():
        (statement,) = statements
        assert statement["Action"] == "sts:AssumeRole" and statement["Effect"] == "Allow", (role, statement)
        (service,) = [statement["Principal"]["Service"]]
        if service == "lambda.amazonaws.com":
            assert "Condition" not in statement, (role, statement)
        else:
            expected = json.loads(json.dumps(TRUST[role]).replace("{family}", family))
            assert statement.get("Condition") == expected, (role, service, statement.get("Condition"))


def test_the_job_role_admits_every_job_the_construct_names(variant) -> None:
    """The trust condition matches the jobs the handler starts (prefix + request hash), and no other prefix."""
    from fnmatch import fnmatchcase

    _name, _found, _extra, template = variant
    (prefix,) = {r["Properties"]["JobNamePrefix"] for r in template.find_resources("Custom::StagedCheckpoint").values()}
    (pattern,) = [s["Condition"]["ArnLike"]["aws:SourceArn"] for s in trust_statements(template)["CheckpointJobRole"]]
    job_arn = "arn:<AWS::Partition>:sagemaker:<AWS::Region>:<AWS::AccountId>:processing-job/{}"
    assert fnmatchcase(job_arn.format(prefix + "0123456789"), pattern)
    assert not fnmatchcase(job_arn.format("hfstage-00000000-0123456789-0123456789"), pattern)
    assert not fnmatchcase(job_arn.format(prefix + "x").replace(":sagemaker:", ":states:"), pattern)


def test_the_alarm_topic_admits_only_this_accounts_alarms(variant) -> None:
    """The topic policy limits who publishes (aws:SourceArn of this account's alarms); the key's statement for
    CloudWatch carries no aws:Source* condition, deliberately (constructs_lib/monitoring/alarms.py says why)."""
    _name, _found, _extra, template = variant
    (key,) = template.find_resources("AWS::KMS::Key").values()
    (for_cloudwatch,) = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert sorted(for_cloudwatch["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    assert "Condition" not in for_cloudwatch
    (topic_policy,) = template.find_resources("AWS::SNS::TopicPolicy").values()
    (publish,) = [
        s
        for s in topic_policy["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert flat(publish["Condition"]) == {
        "ArnLike": {"aws:SourceArn": "arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:alarm:*"},
        "StringEquals": {"aws:SourceAccount": "<AWS::AccountId>"},
    }


def test_the_load_gate_metric_statement_is_whole_with_its_namespace_condition():
    """PutMetricData supports no resource types; the cloudwatch:namespace condition key is what scopes it (Service
    Authorization Reference, Amazon CloudWatch). Without the gate, no CloudWatch statement at all."""
    for overrides, expected in (({}, []), ({"slo_ttft_p95_ms": "500"}, [METRICS_STATEMENT])):
        template = stack_template(**overrides)
        found = [
            statement
            for policy in template.find_resources("AWS::IAM::Policy").values()
            if "EndpointSmokeTestProviderRole" in json.dumps(policy["Properties"]["Roles"])
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
            if "cloudwatch" in json.dumps(statement["Action"])
        ]
        assert found == expected, overrides


METRICS_STATEMENT = {
    "Action": "cloudwatch:PutMetricData",
    "Condition": {"StringEquals": {"cloudwatch:namespace": "LlmEndpoint/SmokeTest"}},
    "Effect": "Allow",
    "Resource": "*",
}
