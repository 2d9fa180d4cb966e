"""Rules for the identifiers users give: one definition, used by the constructs and by the context check.

Every rule is a whole-string, ASCII-only match. ``re.match`` with a ``$``-anchored pattern accepts a
trailing newline (``$`` matches before a final ``\\n``, Python ``re`` docs) and ``\\w`` accepts any Unicode
letter or digit unless ``re.ASCII`` is set, so a value such as ``"Qwen/Qwen3-4B\\n"`` or one with Arabic-Indic
digits would pass and land in IAM ARNs, tags and S3 keys. ``matches`` is the only way these patterns are used.
"""

from __future__ import annotations

import re
import urllib.parse

# SageMaker instance types: botocore's ProductionVariantInstanceType and ProcessingInstanceType enums hold
# families with hyphens (ml.p6-b200.48xlarge, ml.m7i-flex.large).
INSTANCE_TYPE = re.compile(r"ml\.[a-z0-9]+(?:-[a-z0-9]+)*\.[a-z0-9]+", re.ASCII)
INSTANCE_TYPE_RULE = "ml.<family>.<size>, such as ml.g6.xlarge"

# Hub repository ids: huggingface_hub utils/_validators.py validate_repo_id (letters, digits, '-', '_', '.';
# at most 96 characters a part; no '--' or '..'; not ending in '.git'). The staged layout writes <org>--<name>,
# so a '--' inside a part would make two repositories share a prefix: refused, as the Hub refuses it.
_REPO_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
REPO_ID = re.compile(rf"{_REPO_PART}/{_REPO_PART}", re.ASCII)
REPO_ID_RULE = (
    "a Hugging Face repository id <org>/<name>, such as Qwen/Qwen3-4B-Instruct-2507 (letters, digits, '-', '_', '.'; "
    "no '--' or '..')"
)

# A commit SHA as the Hub returns it (api/models/{repo}/revision/{rev} "sha").
SHA = re.compile(r"[0-9a-f]{40}", re.ASCII)

# Branch and tag names, per git check-ref-format(1): no '..', no component starting with '.' or ending in
# '.lock', no '//', not ending in '/' or '.', no '@{', no control characters, space, ~ ^ : ? * [ \\. The Hub's
# revisions are git refs (also refs/pr/<n> for pull requests), put into URLs and the S3 layout.
_REF_CHARS = re.compile(r"[A-Za-z0-9._/+=@,-]{1,255}", re.ASCII)
REVISION_RULE = (
    "a branch, tag or commit SHA as git allows it (letters, digits and . _ / + = @ , -; no '..', no '//', "
    "no part starting with '.' or ending in '.lock', not ending in '/' or '.'; at most 255 characters)"
)

# Secrets Manager ARNs end in '-' and six random characters (Secrets Manager user guide, "Secret ARN
# format"); CDK's Secret.fromSecretAttributes(secretCompleteArn=...) needs that suffix.
SECRET_ARN = re.compile(
    r"arn:aws(?:-[a-z]+)*:secretsmanager:[a-z]{2}(?:-[a-z]+)+-\d:\d{12}:secret:[A-Za-z0-9/_+=.@-]{1,512}-[A-Za-z0-9]{6}",
    re.ASCII,
)
SECRET_ARN_RULE = (
    "the ARN of a Secrets Manager secret, complete with its six-character suffix "
    "(arn:aws:secretsmanager:<region>:<account>:secret:<name>-AbCdEf), never the token"
)
KMS_KEY_ARN = re.compile(r"arn:aws(?:-[a-z]+)*:kms:[a-z]{2}(?:-[a-z]+)+-\d:\d{12}:key/[A-Za-z0-9-]{1,128}", re.ASCII)

# SnsTopicArn of AsyncInferenceNotificationConfig (botocore sagemaker model).
SNS_TOPIC_ARN = re.compile(r"arn:aws[a-z\-]*:sns:[a-z0-9\-]*:[0-9]{12}:[a-zA-Z0-9_.-]+", re.ASCII)

# CloudFormation stack names (CreateStack API reference: letters, digits, hyphens; starts with a letter; 128).
STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}", re.ASCII)
# EndpointName and InferenceComponentName patterns in botocore's SageMaker model (service-2.json shapes of those
# names; both at most 63 characters).
ENDPOINT_NAME = re.compile(r"[a-zA-Z0-9](?:-*[a-zA-Z0-9]){0,62}", re.ASCII)
COMPONENT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def matches(pattern: re.Pattern[str], value: object) -> bool:
    """Whether the whole of ``value`` (a str) matches ``pattern``: no trailing newline, nothing after it."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def repo_id_problem(repo_id: object) -> str | None:
    """Why ``repo_id`` is not a Hub repository id, or None."""
    if not isinstance(repo_id, str) or not matches(REPO_ID, repo_id):
        return f"expected {REPO_ID_RULE}"
    if "--" in repo_id or ".." in repo_id or repo_id.endswith(".git"):
        return f"expected {REPO_ID_RULE}"
    return None


def revision_problem(revision: object) -> str | None:
    """Why ``revision`` is not a git branch, tag or commit SHA, or None."""
    if not matches(_REF_CHARS, revision):
        return f"expected {REVISION_RULE}"
    assert isinstance(revision, str)
    parts = revision.split("/")
    if (
        ".." in revision
        or "@{" in revision
        or revision == "@"
        or revision.endswith((".", "/"))
        or any(part == "" or part.startswith(".") or part.endswith(".lock") for part in parts)
    ):
        return f"expected {REVISION_RULE}"
    return None


# A Hub mirror or proxy (HF_ENDPOINT): the staging job and handler send the token to this origin only
# (hfstage/hub.py), so it must be exactly an origin and path, over https unless plain http is allowed.
HUB_ENDPOINT_RULE = (
    "an https URL of a Hugging Face Hub mirror or proxy, such as https://artifactory.example.com/api/huggingfaceml/"
    "hf-remote (no user name or password, query or fragment; no spaces)"
)


def hub_endpoint_problem(url: object, *, allow_http: bool = False) -> str | None:
    """Why ``url`` cannot be the Hub endpoint, or None."""
    if not isinstance(url, str) or not url.isascii() or any(ch.isspace() or ord(ch) < 32 for ch in url):
        return f"expected {HUB_ENDPOINT_RULE}"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number or out of range
    except ValueError:
        return f"expected {HUB_ENDPOINT_RULE}"
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in schemes:
        allowed = "https (or http with allow_http)" if not allow_http else "https or http"
        return f"the scheme is {parts.scheme[:10]!r}; allowed: {allowed}"
    if not parts.hostname or "@" in parts.netloc or parts.query or parts.fragment or "\\" in url:
        return f"expected {HUB_ENDPOINT_RULE}"
    return None


# EC2 resource IDs: the type's prefix, then 8 (before 2016) or 17 hexadecimal characters (Amazon EC2 User Guide,
# "Resource IDs", AWSEC2/latest/UserGuide/resource-ids.html).
SUBNET_ID = re.compile(r"subnet-(?:[0-9a-f]{8}|[0-9a-f]{17})", re.ASCII)
SECURITY_GROUP_ID = re.compile(r"sg-(?:[0-9a-f]{8}|[0-9a-f]{17})", re.ASCII)
VPC_ID = re.compile(r"vpc-(?:[0-9a-f]{8}|[0-9a-f]{17})", re.ASCII)
# VpcConfig takes 1-16 subnets and 1-5 security groups (botocore sagemaker service-2.json: Subnets,
# VpcSecurityGroupIds).
MAX_SUBNETS = 16
MAX_SECURITY_GROUPS = 5


# EC2 instance type names: an attribute letter "d" after the generation means instance store volumes (Amazon EC2
# instance types guide, "Amazon EC2 instance type naming conventions"): ml.m5d, ml.c5d, ml.r5d.
_INSTANCE_STORE = re.compile(r"ml\.[a-z]+\d+[a-z]*d[a-z]*(?:-[a-z0-9]+)*\..+", re.ASCII)


def local_storage_problem(instance_type: str) -> str | None:
    """Why a volume key cannot go with ``instance_type`` (CreateProcessingJob VolumeKmsKeyId: "You can't request a
    VolumeKmsKeyId when using an instance type with local storage"), or None."""
    if matches(_INSTANCE_STORE, instance_type):
        return (
            "this type has instance storage, which its hardware encrypts, and SageMaker refuses a VolumeKmsKeyId "
            "for it; choose a type without 'd' (ml.m5.2xlarge) or no volume key"
        )
    return None
