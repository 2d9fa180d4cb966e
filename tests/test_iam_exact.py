"""The staging job role's exact permissions: each action with the call that needs it, nothing more, nothing less.

"Least privilege" tests elsewhere check that no grant is too wide; this one also fails when a needed grant
goes missing (the job role without ``s3:AbortMultipartUpload`` cannot clean up a failed upload, and nothing
else notices until an incomplete upload costs storage for days).
"""

from __future__ import annotations

import json

import pytest

from tests.test_staged_checkpoint import policy_statements, template

# action -> what uses it (the worker in hfstage/, or the SageMaker Processing service for the job)
JOB_ROLE_ACTIONS = {
    "s3:PutObject": "PutObject, CreateMultipartUpload, UploadPart, CompleteMultipartUpload (S3 multipart IAM docs)",
    "s3:GetObject": "HeadObject/GetObject of the staged objects and the manifest; the worker code object",
    "s3:AbortMultipartUpload": "abort a failed file's upload and stale uploads of a killed run",
    "s3:ListMultipartUploadParts": "ListParts of an open upload",
    "s3:ListBucket": "ListObjectsV2 under the repository prefix (skip what is staged)",
    "s3:ListBucketMultipartUploads": "ListMultipartUploads: find uploads a killed run left open",
    "secretsmanager:GetSecretValue": "read the Hugging Face token by ARN at run time",
    "secretsmanager:DescribeSecret": "granted with GetSecretValue by ISecret.grant_read",
    "ecr:BatchGetImage": "SageMaker pulls the staging image",
    "ecr:GetDownloadUrlForLayer": "SageMaker pulls the staging image",
    "ecr:BatchCheckLayerAvailability": "SageMaker pulls the staging image",
    "ecr:GetAuthorizationToken": "SageMaker pulls the staging image",
    "logs:CreateLogGroup": "the job's /aws/sagemaker/ProcessingJobs log group",
    "logs:CreateLogStream": "the job's log stream",
    "logs:PutLogEvents": "the job's log lines",
    "logs:DescribeLogStreams": "SageMaker's documented execution-role policy",
}


def actions_of(statements: list[dict]) -> set[str]:
    found: set[str] = set()
    for statement in statements:
        assert statement["Effect"] == "Allow"
        action = statement["Action"]
        found |= set(action if isinstance(action, list) else [action])
    return found


@pytest.fixture(scope="module")
def statements() -> list[dict]:
    return policy_statements(template(with_secret=True), "CheckpointJobRole")


def test_job_role_has_exactly_the_actions_its_calls_need(statements: list[dict]) -> None:
    assert actions_of(statements) == set(JOB_ROLE_ACTIONS)


def test_each_job_write_action_is_scoped_to_the_repository_prefix(statements: list[dict]) -> None:
    for action in ("s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"):
        (granting,) = [s for s in statements if action in json.dumps(s["Action"])]
        assert json.dumps(granting["Resource"]).endswith('/models/Qwen--Qwen3-8B/*"]]}'), (action, granting)
