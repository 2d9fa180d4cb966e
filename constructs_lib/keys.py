"""Grants on customer-managed KMS keys, each limited to the account and, where the calling service is documented,
to that service (``kms:ViaService``).

An imported key (``kms.Key.from_key_arn``) cannot take a key-policy statement, so every grant here is on the role;
the key's own policy must still allow the account to delegate (the default key policy does: KMS developer guide,
"Default key policy": "Allows access to the AWS account and enables IAM policies").
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

# What S3 asks KMS for on the caller's behalf: Decrypt to read an SSE-KMS object, GenerateDataKey (and Decrypt, for
# the parts of a multipart upload) to write one (S3 user guide, "Using server-side encryption with AWS KMS keys":
# permissions). The request reaches KMS through S3, so kms:ViaService is s3.<region>.amazonaws.com (KMS developer
# guide, "kms:ViaService": services that support it include Amazon S3).
READ = ("kms:Decrypt",)
WRITE = ("kms:Decrypt", "kms:GenerateDataKey")
# An ML storage volume key: the actions the CreateEndpointConfig KmsKeyId and ProcessingClusterConfig VolumeKmsKeyId
# keys are used with by SageMaker for the role (SageMaker developer guide, "Protect data at rest using encryption":
# the key policy must let the execution role use the key; EBS volume encryption creates a grant for the volume,
# kms:GrantIsForAWSResource). Which service's endpoint carries SageMaker's requests for a volume in its own account
# is not documented, so these are limited to the account only.
VOLUME = (
    "kms:Decrypt",
    "kms:DescribeKey",
    "kms:Encrypt",
    "kms:GenerateDataKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
)


def grant_bucket_key(grantee: iam.IGrantable, key: kms.IKey, *, scope: Construct, actions: Sequence[str]) -> iam.Grant:
    """``actions`` on ``key`` for requests S3 makes for ``grantee`` in this account and region only."""
    stack = cdk.Stack.of(scope)
    return iam.Grant.add_to_principal(
        grantee=grantee,
        actions=sorted(set(actions)),
        resource_arns=[key.key_arn],
        conditions={
            "StringEquals": {
                "kms:ViaService": f"s3.{stack.region}.{stack.url_suffix}",
                "kms:CallerAccount": stack.account,
            }
        },
    )


def grant_volume_key(grantee: iam.IGrantable, key: kms.IKey, *, scope: Construct) -> None:
    """What SageMaker needs of ``grantee`` to encrypt an ML storage volume with ``key``, in this account only."""
    account = cdk.Stack.of(scope).account
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=list(VOLUME),
        resource_arns=[key.key_arn],
        conditions={"StringEquals": {"kms:CallerAccount": account}},
    )
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["kms:CreateGrant"],
        resource_arns=[key.key_arn],
        conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}, "StringEquals": {"kms:CallerAccount": account}},
    )
