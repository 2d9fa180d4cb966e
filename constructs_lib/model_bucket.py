"""``ModelBucket``: where checkpoints live; kept on ``cdk destroy`` so the next deploy reuses them."""

from __future__ import annotations

import hashlib

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .nag import acknowledge


class ModelBucket(Construct):
    """An encrypted, SSL-only, private bucket for model checkpoints, retained on stack deletion.

    Incomplete multipart uploads (an interrupted staging run) are aborted after
    ``abort_incomplete_uploads_after`` so they stop costing money; server access logs go to a
    second retained bucket.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        abort_incomplete_uploads_after: cdk.Duration | None = None,
        access_log_retention: cdk.Duration | None = None,
        bucket_name: str | None = None,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        """
        :param abort_incomplete_uploads_after: Default: 3 days.
        :param access_log_retention: how long access logs are kept. Default: 365 days.
        :param bucket_name: a fixed name (``app_bucket_name``), so a later stack can find the retained bucket.
            Default: a generated name.
        :param encryption_key: a customer-managed key: the model bucket's default encryption becomes SSE-KMS with
            it, with an S3 Bucket Key (fewer KMS requests: S3 user guide, "Reducing the cost of SSE-KMS with Amazon
            S3 Bucket Keys"). The access-log bucket keeps SSE-S3, the only default encryption a server access log
            destination supports (S3 user guide, "Enabling Amazon S3 server access logging"). Default: SSE-S3.
        """
        super().__init__(scope, id)
        common = dict(
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            lifecycle_rules=[s3.LifecycleRule(expiration=access_log_retention or cdk.Duration.days(365))],
            **common,
        )
        acknowledge(
            self.access_logs,
            "AwsSolutions-S1",
            "This bucket is the destination of the model bucket's server access logs; logging it into itself "
            "would log its own log deliveries.",
        )
        encryption = (
            dict(encryption=s3.BucketEncryption.KMS, encryption_key=encryption_key, bucket_key_enabled=True)
            if encryption_key is not None
            else {}
        )
        self.bucket = s3.Bucket(
            self,
            "Resource",
            bucket_name=bucket_name,
            lifecycle_rules=[
                s3.LifecycleRule(
                    abort_incomplete_multipart_upload_after=abort_incomplete_uploads_after or cdk.Duration.days(3)
                )
            ],
            **{**common, **encryption},
        )
        self._log_to(self.access_logs, prefix="model-bucket/")
        self.node.default_child = self.bucket.node.default_child

    def _log_to(self, target: s3.Bucket, *, prefix: str) -> None:
        """Server access logs into ``target`` through a bucket policy, whatever the host app's feature flags.

        ``server_access_logs_bucket`` grants the log delivery by an ACL on the target unless the host sets
        ``@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy``, and an ACL cannot coexist with the enforced bucket
        ownership both buckets have. The policy is the one S3 documents: the logging service principal may put
        objects under the prefix, for this source bucket and account only (S3 user guide, "Permissions for log
        delivery": logging.s3.amazonaws.com with aws:SourceArn and aws:SourceAccount).
        """
        cfn_bucket = self.bucket.node.default_child
        assert isinstance(cfn_bucket, s3.CfnBucket)
        cfn_bucket.logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
            destination_bucket_name=target.bucket_name, log_file_prefix=prefix
        )
        target.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")],
                actions=["s3:PutObject"],
                resources=[target.arn_for_objects(f"{prefix}*")],
                conditions={
                    "ArnLike": {"aws:SourceArn": self.bucket.bucket_arn},
                    "StringEquals": {"aws:SourceAccount": cdk.Stack.of(self).account},
                },
            )
        )


def app_bucket_name(app: str) -> str:
    """``<app>-models-<account>-<region>``: one model bucket per account, region and app, found again by name.

    S3 bucket names are global, lower case and at most 63 characters (S3 bucket naming rules): with
    ``-models-``, a 12-digit account and the longest region name (15, ``us-isof-south-1``), 27 are left for
    the app. A longer name keeps its first 20 characters and a hash of the whole name, so two apps that
    share a beginning never share a bucket.
    """
    part = "".join(c if c.isalnum() else "-" for c in app.lower()).strip("-") or "llm"
    if len(part) > APP_PART:
        digest = hashlib.sha256(app.encode()).hexdigest()[:6]
        part = f"{part[: APP_PART - 7].rstrip('-')}-{digest}"
    return f"{part}-models-{cdk.Aws.ACCOUNT_ID}-{cdk.Aws.REGION}"


APP_PART = 63 - len("-models-") - 12 - 1 - 15  # 27
