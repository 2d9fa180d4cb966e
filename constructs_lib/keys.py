"""Grants on customer-managed KMS keys, each limited to the account and, where the calling service is documented,
to that service (``kms:ViaService``).

An imported key (``kms.Key.from_key_arn``) cannot take a key-policy statement, so every grant here is on the role;
the key's own policy must still allow the account to delegate (the default key policy does: KMS developer guide,
"Default key policy": "Allows access to the AWS account and enables IAM policies").
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, IConstruct

from .names import KMS_KEY_ARN
from .problems import Refusal, refuse

# AWS::Logs::LogGroup KmsKeyId and AWS::Lambda::Function KmsKeyArn both take the key's ARN (botocore logs
# CreateLogGroup kmsKeyId: "The Amazon Resource Name (ARN) of the KMS key"; lambda CreateFunction KMSKeyArn: "The ARN
# of the Key Management Service (KMS) customer managed key"); an alias ARN or a bare id is refused.
KEY_ARN_RULE = "allowed: a symmetric customer-managed key's ARN arn:aws:kms:<region>:<account>:key/<key-id> (no alias)"

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


# A function's environment encrypted with a customer-managed key: "only users in your account with access to the KMS
# key can view or manage environment variables on the function" (Lambda developer guide, "Securing Lambda environment
# variables", https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars-encryption.html); the function
# decrypts them at start-up through Lambda, so the execution role's kms:Decrypt is limited to requests Lambda makes
# (kms:ViaService lambda.<region>.amazonaws.com) in this account.
ENVIRONMENT = ("kms:Decrypt",)
LAMBDA_FUNCTION = "AWS::Lambda::Function"
LOG_GROUP = "AWS::Logs::LogGroup"


def grant_environment_key(grantee: iam.IGrantable, key_arn: str, *, scope: Construct) -> iam.Grant:
    """kms:Decrypt of ``key_arn`` for the function environment Lambda decrypts for ``grantee``, this account only."""
    stack = cdk.Stack.of(scope)
    return iam.Grant.add_to_principal(
        grantee=grantee,
        actions=list(ENVIRONMENT),
        resource_arns=[key_arn],
        conditions={
            "StringEquals": {
                "kms:ViaService": f"lambda.{stack.region}.{stack.url_suffix}",
                "kms:CallerAccount": stack.account,
            }
        },
    )


def logs_key_policy_statement(*, region: str, account: str, partition: str = "aws") -> dict:
    """The key-policy statement an imported log-group key must carry (the app cannot add it to a key it did not
    create): CloudWatch Logs' regional service principal, for this account's log groups only (CloudWatch Logs user
    guide, "Encrypt log data in CloudWatch Logs using AWS Key Management Service", step 2, key policy with the
    kms:EncryptionContext:aws:logs:arn condition: https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/
    encrypt-log-data-kms.html)."""
    return {
        "Sid": "AllowCloudWatchLogsOfThisAccount",
        "Effect": "Allow",
        "Principal": {"Service": f"logs.{region}.amazonaws.com"},
        "Action": ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
        "Resource": "*",
        "Condition": {
            "ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:{partition}:logs:{region}:{account}:log-group:*"}
        },
    }


@jsii.implements(cdk.IAspect)
class _CustomerKeys:
    """Puts ``KmsKeyId`` on every log group and ``KmsKeyArn`` on every function of the scope, CDK's own (the Provider
    framework's, the LogRetention handler's) included, and gives each function's role the Lambda-scoped decrypt."""

    def __init__(self, *, logs_key_arn: str | None, environment_key_arn: str | None) -> None:
        self.logs_key_arn = logs_key_arn
        self.environment_key_arn = environment_key_arn
        self._granted: set[str] = set()

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource):
            return
        if node.cfn_resource_type == LOG_GROUP and self.logs_key_arn:
            # AWS::Logs::LogGroup KmsKeyId: the key's ARN (CreateLogGroup kmsKeyId, botocore logs service model).
            node.add_property_override("KmsKeyId", self.logs_key_arn)
        elif node.cfn_resource_type == LAMBDA_FUNCTION and self.environment_key_arn:
            node.add_property_override("KmsKeyArn", self.environment_key_arn)
            role = _role_of(node)
            if role.node.path not in self._granted:
                self._granted.add(role.node.path)
                grant_environment_key(role, self.environment_key_arn, scope=node)


def _role_of(function: cdk.CfnResource) -> iam.IRole:
    """The execution role of a function resource: a ``lambda.Function``'s, or the ``ServiceRole`` beside the raw
    resource aws-cdk-lib's LogRetention handler is made of."""
    parent = function.node.scope
    if isinstance(parent, lambda_.Function):
        return parent.role
    role = parent.node.try_find_child("ServiceRole") if parent is not None else None
    if isinstance(role, iam.Role):
        return role
    raise Refusal(
        f"Lambda function {function.node.path}",
        ["its execution role is not known, so environment_key cannot be granted to it"],
    )


def encrypt_logs_and_functions(
    scope: Construct, *, logs_key: kms.IKey | None = None, environment_key: kms.IKey | None = None
) -> None:
    """Encrypt every log group (``logs_key``) and every Lambda function's environment (``environment_key``) created
    in ``scope``, now or later, with customer-managed keys.

    ``logs_key``'s policy must allow CloudWatch Logs (:func:`logs_key_policy_statement`); the app cannot edit the
    policy of a key it did not create. Log groups made outside the template (by SageMaker, or by LogRetention for the
    endpoint's logs) are not covered: ``aws logs associate-kms-key`` does that.

    :param logs_key: the ``KmsKeyId`` of every ``AWS::Logs::LogGroup``; a key ARN (``key/<id>``), not an alias.
        Default: none, CloudWatch Logs' own encryption.
    :param environment_key: the ``KmsKeyArn`` of every ``AWS::Lambda::Function``; each function's role gets
        ``kms:Decrypt`` on it through Lambda in this account. Default: none, Lambda's own key.
    """
    problems = [
        f"{name}={key.key_arn!r}: {KEY_ARN_RULE}"
        for name, key in (("logs_key", logs_key), ("environment_key", environment_key))
        if key is not None and not cdk.Token.is_unresolved(key.key_arn) and not KMS_KEY_ARN.fullmatch(key.key_arn)
    ]
    refuse(f"encrypt_logs_and_functions {scope.node.path}", problems)
    if logs_key is None and environment_key is None:
        return
    cdk.Aspects.of(scope).add(
        _CustomerKeys(
            logs_key_arn=logs_key.key_arn if logs_key else None,
            environment_key_arn=environment_key.key_arn if environment_key else None,
        ),
        priority=cdk.AspectPriority.MUTATING,
    )
