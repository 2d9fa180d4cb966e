"""Each role our constructs define has exactly the actions its calls need: nothing more, nothing less.

``test_iam_calls`` proves every boto3 call in our code has a grant. This file closes the other gaps: an
action the *service* uses on the role's behalf (SageMaker pulling an image, writing logs, a job's metrics)
that no call of ours names, and a grant nobody needs. A role without ``s3:AbortMultipartUpload`` cannot
clean up a failed upload, and nothing else notices until incomplete uploads cost storage for days.
The CDK Provider framework's own roles are CDK's code, not ours, and are left out.
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

DECRYPT = {"kms:Decrypt": "read SSE-KMS objects of the given bucket (KMS docs: GetObject needs Decrypt)"}
WITH_BUCKET_KEY = {
    # Writing SSE-KMS objects, multipart included, needs GenerateDataKey and Decrypt (S3 SSE-KMS docs).
    "CheckpointJobRole": {**DECRYPT, "kms:GenerateDataKey": "write SSE-KMS objects"},
    "StagedCheckpointProviderRole": DECRYPT,
    "StagingSignalRole": DECRYPT,
    "DeploymentPreflightProviderRole": DECRYPT,
    "EndpointRole": DECRYPT,
}

VARIANTS = {
    "default": ({}, {}),
    "token-secret": ({"hf_token_secret_arn": SECRET_ARN}, WITH_SECRET),
    "component-scale-to-zero": ({"deployment_mode": "inference-component", "scale_to_zero": True}, COMPONENT_MODE),
    "given-bucket-with-key": ({"model_bucket": "my-models-bucket", "model_kms_key_arn": KEY_ARN}, WITH_BUCKET_KEY),
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
    return request.param, role_actions(template), extra


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_role_has_exactly_the_actions_its_calls_need(variant, role: str) -> None:
    _name, found, extra = variant
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
