"""Where the serving container's weights come from: an uncompressed S3 prefix."""

from __future__ import annotations

import re
from typing import Protocol

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .keys import READ, grant_bucket_key
from .problems import refuse

S3_URI = re.compile(r"s3://(?P<bucket>[^/]+)/(?P<prefix>.*)", re.ASCII)
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", re.ASCII)
IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}", re.ASCII)
BUCKET_RULE = "3-63 lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit"
# IAM reads these in a resource ARN or an s3:prefix condition as patterns or variables: a prefix holding
# them would widen the role's read access beyond the model.
PREFIX_FORBIDDEN = ("*", "?", "${")


def bucket_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid S3 bucket name, or None."""
    if not BUCKET_NAME.fullmatch(name) or ".." in name or ".-" in name or "-." in name or IPV4.fullmatch(name):
        return f"{name!r} is not a valid S3 bucket name ({BUCKET_RULE}; not an IP address)"
    return None


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` cannot be a model prefix, or None."""
    if prefix.strip("/") == "":
        return "the prefix is empty; the model must live under a prefix, not the bucket root"
    bad = [c for c in PREFIX_FORBIDDEN if c in prefix]
    if bad:
        return f"the prefix {prefix!r} contains {', '.join(bad)}, which IAM would read as a wildcard or variable"
    return None


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


def is_model_archive(uri: str | None) -> bool:
    """Whether a model URI names a gzip-compressed tar (SageMaker Training's ``model.tar.gz``), to be unpacked
    into a verified prefix by the staging job, rather than a prefix served as it is."""
    return bool(uri) and str(uri).endswith(".tar.gz")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ("bucket", "some/prefix/"); ValueError naming what is wrong."""
    m = S3_URI.fullmatch(uri)
    problem = (
        "expected s3://<bucket>/<prefix>/"
        if not m
        else bucket_name_problem(m.group("bucket")) or prefix_problem(m.group("prefix"))
    )
    if problem:
        raise ValueError(f"model_s3_uri={uri!r} is not a usable S3 model prefix: {problem}.")
    return m.group("bucket"), m.group("prefix").rstrip("/") + "/"


class S3ModelData:
    """Model files (config.json, weights, tokenizer) stored uncompressed under ``prefix`` in ``bucket``.

    ``grant_read`` gives exactly what SageMaker needs to download an S3Prefix model: list the
    bucket under the prefix and get objects below it (and decrypt, for a KMS-encrypted bucket).
    """

    def __init__(self, bucket: s3.IBucket, prefix: str, *, owner_account: str | None = None) -> None:
        """
        :param bucket: the bucket that holds the weights (``s3.Bucket.from_bucket_name`` for one you have).
        :param prefix: the key prefix of the checkpoint's files (``config.json`` and the weights directly below
            it), such as ``models/qwen3-8b/``; a trailing ``/`` is added.
        :param owner_account: the account that must own the bucket; every grant then carries an
            ``s3:ResourceAccount`` condition, so a bucket someone else created under the same name is never
            read (what ExpectedBucketOwner does per call, enforced once in IAM). Default: no condition.
        """
        problem = prefix_problem(prefix)
        if problem:
            refuse("S3ModelData", [f"prefix={prefix!r}: {problem}"])
        self.bucket = bucket
        self.prefix = prefix.rstrip("/") + "/"
        self.owner_account = owner_account

    def owner_condition(self) -> dict[str, dict[str, str]]:
        """The ``s3:ResourceAccount`` condition of every grant on this bucket ({} without an owner)."""
        return {"StringEquals": {"s3:ResourceAccount": self.owner_account}} if self.owner_account else {}

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
            conditions={"StringLike": {"s3:prefix": [self.prefix, f"{self.prefix}*"]}, **self.owner_condition()},
        )
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:GetObject"],
            resource_arns=[self.object_arn_pattern],
            conditions=self.owner_condition() or None,
        )
        if self.bucket.encryption_key is not None:
            grant_bucket_key(grantee, self.bucket.encryption_key, scope=self.bucket, actions=READ)
        return grant
