"""Where the serving container's weights come from: an uncompressed S3 prefix."""

from __future__ import annotations

import re
from typing import Protocol

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>.+)$")


class ModelSource(Protocol):
    """What ``GpuEndpoint`` needs of a model: an S3 prefix URI and a way to grant reading it.

    ``S3ModelData`` implements it; the staged checkpoint implements it too.
    """

    @property
    def s3_uri(self) -> str: ...

    @property
    def object_arn_pattern(self) -> str: ...

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant: ...


def hub_prefix(repo_id: str, revision: str) -> str:
    """The conventional prefix of a Hugging Face revision: ``models/<org>--<name>/<revision>/``."""
    return f"models/{repo_id.replace('/', '--')}/{revision.replace('/', '--')}/"


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ("bucket", "some/prefix/")."""
    m = S3_URI.match(uri)
    if not m or m.group("prefix").strip("/") == "":
        raise ValueError(
            f"model_s3_uri={uri!r} is not an S3 prefix URI; expected s3://<bucket>/<prefix>/ "
            "(a bucket name and a non-empty prefix)."
        )
    return m.group("bucket"), m.group("prefix").rstrip("/") + "/"


class S3ModelData:
    """Model files (config.json, weights, tokenizer) stored uncompressed under ``prefix`` in ``bucket``.

    ``grant_read`` gives exactly what SageMaker needs to download an S3Prefix model: list the
    bucket under the prefix and get objects below it (and decrypt, for a KMS-encrypted bucket).
    """

    def __init__(self, bucket: s3.IBucket, prefix: str) -> None:
        self.bucket = bucket
        self.prefix = prefix.rstrip("/") + "/"

    @classmethod
    def from_s3_uri(cls, scope: Construct, id: str, uri: str, *, encryption_key: kms.IKey | None = None) -> S3ModelData:
        """An existing prefix. Give ``encryption_key`` when the bucket uses SSE-KMS, so the role may decrypt."""
        bucket_name, prefix = parse_s3_uri(uri)
        return cls(
            s3.Bucket.from_bucket_attributes(scope, id, bucket_name=bucket_name, encryption_key=encryption_key), prefix
        )

    @property
    def s3_uri(self) -> str:
        return f"s3://{self.bucket.bucket_name}/{self.prefix}"

    @property
    def object_arn_pattern(self) -> str:
        """ARN pattern of every object below the prefix (what ``grant_read`` allows to get)."""
        return self.bucket.arn_for_objects(f"{self.prefix}*")

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:ListBucket"],
            resource_arns=[self.bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [self.prefix, f"{self.prefix}*"]}},
        )
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:GetObject"],
            resource_arns=[self.object_arn_pattern],
        )
        if self.bucket.encryption_key is not None:
            self.bucket.encryption_key.grant_decrypt(grantee)
        return grant
