"""``Custom::StagedCheckpoint``: a Hugging Face revision staged into S3 by a SageMaker Processing job.

Three entry points share this file (one asset):

- ``on_event`` resolves the ref to a commit SHA, compares the plan with S3 (manifest and object
  metadata) and starts a Processing job only when something is missing. When nothing is missing it
  signals the deployment's wait condition itself.
- ``is_complete`` follows the job for a while: a job that finishes in that window (most checkpoints)
  is verified and signalled here; a longer one is handed to the wait condition, which CloudFormation
  lets wait up to 12 hours, instead of holding this resource against its one-hour ceiling.
- ``on_job_state_change`` receives the job's EventBridge state change, verifies the manifest and
  signals success, or failure with the job's reason. When it fails every attempt Lambda makes,
  ``on_signal_failure`` (its on-failure destination) signals failure with its error.

The physical ID is the revision prefix ``s3://<bucket>/<prefix><org>--<name>/<sha>/``: a new revision
is a replacement, an unchanged one a no-op. Delete stops this resource's running job and keeps the
objects. The Hugging Face token is read from Secrets Manager here and never logged or returned.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

import handler_kit
from handler_kit import update_rolling_back
from handler_kit.resources import StagedCheckpointProperties
from hfstage.hub import HubClient, HubError, HubFile, select_files
from hfstage.manifest import MANIFEST_NAME, manifest_matches, missing_files, read_manifest, revision_prefix
from hfstage.names import refuse_unsafe
from hfstage.tarball import ArchiveUnreadable, archive_state
from hfstage.worker import parse_token

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

REASON_LIMIT = 1000  # bytes; CloudFormation shows at most 4 KB and a wait-condition reason should be short
# A failure's message, at most: CloudFormation takes a 4,096-byte response, and the Provider framework wraps
# the message in "Error: ...", the log group and its stack frames (about 1 KB with the event's IDs), and
# sends on_event's Data with a failure in is_complete (aws-cdk-lib provider-framework runtime: framework.js,
# cfn-response.js). So 3,000 bytes, less the Data that travels with it.
FAILURE_LIMIT = 3000
CODE_DIR = "/opt/ml/processing/input/code"
RUNNING = ("InProgress", "Stopping")
# How long is_complete follows a job before handing the wait to the wait condition. Must stay well
# inside the Provider's total timeout (set by the construct), so that a slow job never fails here.


class StagingError(Exception):
    """A reason a person can act on; it becomes the CloudFormation failure message."""


_clients: dict[str, Any] = {}


def client(name: str, region: str | None = None) -> Any:
    """One boto3 client per service (and region, when not the function's) for the life of the environment."""
    return handler_kit.cached_client(_clients, name, region=region, retries={"mode": "standard", "max_attempts": 8})


def arn_region(arn: str | None) -> str | None:
    """The region an ARN names (a token secret may live in another region than the stack)."""
    parts = (arn or "").split(":")
    return parts[3] if parts[0] == "arn" and len(parts) > 3 and parts[3] else None


def short(text: str, limit: int = REASON_LIMIT) -> str:
    return handler_kit.shorten(text, limit)


def log(event: str, **fields: Any) -> None:
    LOG.info(handler_kit.log_line(event, **fields))


# The resource's properties, typed, with their defaults: the class the construct writes them with.
Settings = StagedCheckpointProperties


@dataclass(frozen=True)
class Plan:
    sha: str
    files: tuple
    missing: tuple
    prefix: str
    manifest_ok: bool

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def missing_bytes(self) -> int:
        return sum(f.size for f in self.missing)

    @property
    def complete(self) -> bool:
        return self.manifest_ok and not self.missing


def hub_token(settings: Settings, secrets: Any) -> str | None:
    if not settings.token_secret_arn:
        return None
    where = f"the Hugging Face token secret {settings.token_secret_arn}"
    try:
        value = secrets.get_secret_value(SecretId=settings.token_secret_arn).get("SecretString") or ""
    except ClientError as e:
        raise StagingError(f"could not read {where} ({e.response['Error']['Code']})") from None
    try:
        return parse_token(value)
    except ValueError as e:
        raise StagingError(f"{where} is unusable: {e}") from None


def make_plan(settings: Settings, hub: HubClient, s3: Any) -> Plan:
    """What the revision holds, and what of it is not yet (verified) in S3."""
    if settings.source_s3_uri:
        return archive_plan(settings, s3)
    try:
        revision = hub.revision_info(settings.repo_id, settings.revision)
    except HubError as e:
        raise StagingError(str(e)) from e
    files = tuple(select_files(revision.files, settings.include, settings.exclude))
    if not files:
        raise StagingError(
            f"no file of {settings.repo_id}@{revision.sha} matches include={list(settings.include)} "
            f"exclude={list(settings.exclude)} ({len(revision.files)} files in the revision)"
        )
    # Metadata of a gated repository is public; its files are not. Open the smallest file now, so that a
    # missing token or unaccepted conditions fail the deployment here rather than in the job.
    try:
        hub.open_file(settings.repo_id, revision.sha, min(files, key=lambda f: f.size).path).close()
    except HubError as e:
        raise StagingError(str(e)) from e
    prefix = revision_prefix(settings.prefix, settings.repo_id, revision.sha)
    # The worker refuses the same names before its first upload; here the deploy fails before any job starts.
    try:
        refuse_unsafe(files, prefix)
    except HubError as e:
        raise StagingError(str(e)) from e
    try:
        try:
            manifest = read_manifest(s3, settings.bucket, prefix)
        except ValueError:
            manifest = None  # unreadable: the job rewrites it
        missing = tuple(missing_files(s3, settings.bucket, prefix, settings.repo_id, revision.sha, files))
    except ClientError as e:
        raise StagingError(s3_problem(e, settings.bucket, prefix, "the staging handler's role")) from None
    return Plan(
        sha=revision.sha,
        files=files,
        missing=missing,
        prefix=prefix,
        manifest_ok=manifest_matches(manifest, settings.repo_id, revision.sha, files),
    )


def archive_plan(settings: Settings, s3: Any) -> Plan:
    """A model.tar.gz: its ETag is the revision; until its prefix is staged, the archive is what is missing."""
    try:
        state = archive_state(
            s3, settings.source_s3_uri or "", settings.bucket, settings.prefix, settings.include, settings.exclude
        )
    except ArchiveUnreadable as e:
        raise StagingError(
            f"{e}: check model_s3_uri; the staging handler's role needs s3:GetObject on it (and kms:Decrypt for "
            "SSE-KMS, model_kms_key_arn)"
        ) from None
    except ClientError as e:
        raise StagingError(s3_problem(e, settings.bucket, settings.prefix, "the staging handler's role")) from None
    except ValueError as e:  # an ETag that is no S3 ETag
        raise StagingError(f"{settings.source_s3_uri}: {e}") from None
    archive = HubFile(path="model.tar.gz", size=state.size, blob_id=state.etag)
    return Plan(
        sha=state.etag,
        files=state.staged_files or (archive,),
        missing=() if state.staged_files else (archive,),
        prefix=state.prefix,
        manifest_ok=bool(state.staged_files),
    )


def s3_problem(error: ClientError, bucket: str, prefix: str, who: str) -> str:
    """An S3 error as a reason naming the place and the permission, not just botocore's wording."""
    code = error.response["Error"].get("Code", "error")
    operation = getattr(error, "operation_name", "an S3 call")
    hint = (
        f"; {who} needs s3:ListBucket (prefix {prefix}) and s3:GetObject on it, and kms:Decrypt for an SSE-KMS bucket"
        if code in ("AccessDenied", "403", "Forbidden", "AllAccessDisabled")
        else ""
    )
    return short(f"could not read s3://{bucket}/{prefix} ({code} on {operation}){hint}")


def instances_for(plan: Plan, settings: Settings) -> int:
    """Enough instances that each copies about ``bytes_per_instance``, within the allowed maximum."""
    wanted = -(-plan.missing_bytes // max(1, settings.bytes_per_instance))
    return max(1, min(settings.max_instances, wanted, len(plan.missing) or 1))


def job_name(settings: Settings, request_id: str) -> str:
    """Unique per request, identical for a retried request (which then resumes the same job)."""
    return f"{settings.job_name_prefix}{hashlib.sha256(request_id.encode()).hexdigest()[:10]}"[:63]


def worker_arguments(settings: Settings, sha: str) -> list[str]:
    if settings.source_s3_uri:  # hfstage.tarball: the archive pinned to the ETag planned with
        args = ["--source-s3-uri", settings.source_s3_uri, "--source-etag", sha]
        args += ["--destination", f"s3://{settings.bucket}/{settings.prefix}"]
        return (
            args
            + [a for p in settings.include for a in ("--include", p)]
            + [a for p in settings.exclude for a in ("--exclude", p)]
        )
    args = [
        "--repo-id",
        settings.repo_id,
        "--revision",
        sha,
        "--destination",
        f"s3://{settings.bucket}/{settings.prefix}",
    ]
    # One flag per pattern: SageMaker allows 256 characters per container argument, not per list.
    for pattern in settings.include:
        args += ["--include", pattern]
    for pattern in settings.exclude:
        args += ["--exclude", pattern]
    if settings.token_secret_arn:
        args += ["--token-secret-arn", settings.token_secret_arn]
    # The leader of a multi-instance job waits for the other hosts' files at most as long as the job may run.
    args += ["--leader-wait-s", str(settings.max_runtime_s)]
    return args


def job_request(settings: Settings, plan: Plan, name: str) -> dict[str, Any]:
    code_file = settings.code_uri.rsplit("/", 1)[-1]
    environment = {"PYTHONUNBUFFERED": "1", "HFSTAGE_TARGET": f"s3://{settings.bucket}/{plan.prefix}"}
    if settings.hub_endpoint:
        environment["HF_ENDPOINT"] = settings.hub_endpoint
    return {
        "ProcessingJobName": name,
        "RoleArn": settings.role_arn,
        "AppSpecification": {
            "ImageUri": settings.image_uri,
            "ContainerEntrypoint": ["python3", f"{CODE_DIR}/{code_file}"],
            "ContainerArguments": worker_arguments(settings, plan.sha),
        },
        "ProcessingInputs": [
            {
                "InputName": "code",
                "S3Input": {
                    "S3Uri": settings.code_uri,
                    "LocalPath": CODE_DIR,
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                    "S3DataDistributionType": "FullyReplicated",
                },
            }
        ],
        "ProcessingResources": {
            "ClusterConfig": {
                "InstanceCount": instances_for(plan, settings),
                "InstanceType": settings.instance_type,
                "VolumeSizeInGB": settings.volume_size_gb,
            }
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": settings.max_runtime_s},
        "Environment": environment,
        "Tags": [
            {"Key": "hf-repo-id", "Value": settings.source[:256]},
            {"Key": "hf-revision", "Value": plan.sha},
        ],
    }


# Service Quotas names SageMaker's Processing limits per instance type (as it names "<type> for endpoint
# usage" for endpoints): the most instances of the type that running Processing jobs may hold. The name is
# the one CreateProcessingJob's ResourceLimitExceeded quotes ("The account-level service limit
# 'ml.m5.large for processing job usage' is 0 Instances").
QUOTA_NAME = "{} for processing job usage"


def processing_quota(instance_type: str) -> tuple[float, str] | None:
    """(value, quota code) of ``<instance type> for processing job usage``: applied, else AWS default.

    None when Service Quotas cannot tell (no such quota, throttled, denied): CreateProcessingJob then
    answers for itself (ResourceLimitExceeded).
    """
    name = QUOTA_NAME.format(instance_type)
    quotas = client("service-quotas")
    for operation in ("list_service_quotas", "list_aws_default_service_quotas"):
        try:
            for page in quotas.get_paginator(operation).paginate(ServiceCode="sagemaker"):
                for quota in page.get("Quotas", []):
                    if quota.get("QuotaName") == name:
                        return float(quota.get("Value", 0)), str(quota.get("QuotaCode", ""))
        except ClientError as e:
            if e.response["Error"].get("Code") == "NoSuchResourceException":
                continue  # no applied values for SageMaker: the defaults apply
            log("quota-unread", quota=name.replace(" ", "_"), error=e.response["Error"].get("Code"))
            return None
        except BotoCoreError as e:
            log("quota-unread", quota=name.replace(" ", "_"), error=type(e).__name__)
            return None
    return None


def within_quota(settings: Settings, wanted: int) -> int:
    """``wanted`` instances, fewer when the account's Processing quota for the type is lower; 0 fails now."""
    found = processing_quota(settings.instance_type)
    if found is None:
        return wanted
    value, code = found
    name = QUOTA_NAME.format(settings.instance_type)
    if value < 1:
        raise StagingError(
            f"the Service Quotas quota '{name}' ({code}) is {value:g} in this account and region, so the staging "
            f"job cannot start. Request an increase (quota code {code}) or choose another staging_instance_type"
        )
    if wanted > int(value):
        log("quota-clamp", wanted=wanted, instances=int(value), quota_code=code)
        return int(value)
    return wanted


def start_job(sagemaker: Any, request: dict[str, Any]) -> None:
    try:
        sagemaker.create_processing_job(**request)
    except ClientError as e:
        error = e.response["Error"]
        if error["Code"] == "ResourceInUse" or "already exists" in error.get("Message", ""):
            log("job-resumed", job=request["ProcessingJobName"])  # a retried request: follow the same job
            return
        name = request["ProcessingJobName"]
        message = error.get("Message", "")
        hint = ""
        if error["Code"] == "ResourceLimitExceeded":  # other jobs hold the instances the quota allows
            kind = request["ProcessingResources"]["ClusterConfig"]["InstanceType"]
            hint = f" (Service Quotas: '{QUOTA_NAME.format(kind)}')"
        raise StagingError(
            short(f"could not start the staging job {name}: {error['Code']}{hint}: {message}", REASON_LIMIT)
        ) from e
    log("job-started", job=request["ProcessingJobName"])


def stop_jobs(sagemaker: Any, prefix: str, target: str | None) -> list[str]:
    """Stop running jobs named ``prefix*`` that stage ``target`` (all of them when target is None)."""
    stopped = []
    for page in sagemaker.get_paginator("list_processing_jobs").paginate(NameContains=prefix):
        for summary in page["ProcessingJobSummaries"]:
            name = summary["ProcessingJobName"]
            if not name.startswith(prefix) or summary["ProcessingJobStatus"] not in RUNNING:
                continue
            if target is not None:
                environment = sagemaker.describe_processing_job(ProcessingJobName=name).get("Environment", {})
                if environment.get("HFSTAGE_TARGET") != target:
                    continue  # another revision's job, started by a replacement of this resource
            try:
                sagemaker.stop_processing_job(ProcessingJobName=name)
            except ClientError as e:
                if e.response["Error"]["Code"] != "ValidationException":  # already stopping or finished
                    raise
            log("job-stopped", job=name)
            stopped.append(name)
    return stopped


# What a WaitHandle may be: the presigned URL a Ref of AWS::CloudFormation::WaitConditionHandle returns, a PUT
# into CloudFormation's bucket cloudformation-waitcondition-<region>, dashes kept (CloudFormation User Guide:
# "Create wait conditions in a CloudFormation template", using-cfn-waitcondition.html, whose example is
# https://cloudformation-waitcondition-<...>.s3.amazonaws.com/arn%3Aaws%3Acloudformation%3A...?...Signature=...;
# "Access CloudFormation using an interface endpoint", vpc-interface-endpoints.html, for the bucket per region).
# Handles in use come in S3's virtual-hosted global (s3.), regional (s3.<region>.) and legacy (s3-<region>.) forms
# (S3 User Guide, "Virtual hosting of buckets"); China's endpoint domain is amazonaws.com.cn with regional
# endpoints only (docs.amazonaws.cn, "Beijing Region Endpoints"). Dual-stack, FIPS, access-point, website and
# path-style hosts are neither documented nor seen for a handle, so they are refused.
_REGION = r"[a-z]{2}(?:-[a-z]+)+-[0-9]{1,2}"
WAIT_HANDLE_HOST = re.compile(
    rf"cloudformation-waitcondition-(?P<region>{_REGION})\.s3(?:[.-](?P<endpoint>{_REGION}))?\.amazonaws\.com(?P<cn>\.cn)?"
)
WAIT_HANDLE_HOST_FORM = "cloudformation-waitcondition-<region>.s3[.<region>].amazonaws.com[.cn]"
# Presigned with Signature Version 4 (S3 API Reference, "Authenticating Requests: Using Query Parameters") or, in
# older handles and the user guide's example, version 2 (AWSAccessKeyId, Expires, Signature).
SIGV4_PARAMETERS = frozenset(
    {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"}
)
SIGV2_PARAMETERS = frozenset({"AWSAccessKeyId", "Expires", "Signature"})
# RFC 3986's characters, nothing else: no space, control character, backslash or non-ASCII letter on which two
# URL parsers could disagree (urlsplit drops tabs and newlines, urllib's Request unquotes the host).
_URL_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
WAIT_HANDLE_MAX = 8192


def wait_handle_problem(url: Any) -> str | None:
    """Why ``url`` is not a CloudFormation wait-condition handle URL; None when it is one."""
    if not isinstance(url, str) or not url:
        return "is empty" if url in (None, "") else f"is a {type(url).__name__}, not a URL"
    if len(url) > WAIT_HANDLE_MAX:
        return f"is {len(url)} characters long (at most {WAIT_HANDLE_MAX})"
    if not _URL_CHARACTERS.fullmatch(url):
        return "holds characters a URL may not (space, control, backslash or non-ASCII)"
    if not url.startswith("https://"):
        return f"does not start with https:// (it starts {url.split(':', 1)[0][:20]!r}); only https is allowed"
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        return "carries user information before its host"
    host, colon, port = parts.netloc.partition(":")
    if colon and port != "443":
        return f"names the port {port[:10]!r}; only the default port 443 is allowed"
    match = WAIT_HANDLE_HOST.fullmatch(host)
    if match is None:
        return f"has the host {host[:100]!r}, not {WAIT_HANDLE_HOST_FORM}"
    region, endpoint = match["region"], match["endpoint"]
    if endpoint is not None and endpoint != region:
        return f"has the host {host!r}: the bucket's region {region} is not the endpoint's {endpoint}"
    if bool(match["cn"]) != region.startswith("cn-"):
        where = (
            "a China region, whose hosts end in .amazonaws.com.cn" if region.startswith("cn-") else "no China region"
        )
        return f"has the host {host!r}: {region} is {where}"
    if match["cn"] and not host.endswith(f".s3.{region}.amazonaws.com.cn"):
        return f"has the host {host!r}: China's S3 hosts are regional, <bucket>.s3.{region}.amazonaws.com.cn"
    if parts.fragment or "#" in url:
        return "has a fragment"
    if len(parts.path) < 2:
        return "has no object key"
    try:
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return "has a malformed query"
    names = [name for name, _ in query]
    values = dict(query)
    for required in (SIGV4_PARAMETERS, SIGV2_PARAMETERS):
        if required <= values.keys():
            break
    else:
        return "is not presigned (no X-Amz-Signature with its X-Amz-* parameters, nor a version 2 Signature)"
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        return f"repeats the query parameter {repeated[0][:40]!r}"
    if any(not values[name] for name in required):
        return "has an empty signature parameter"
    if required is SIGV4_PARAMETERS and values["X-Amz-Algorithm"] != "AWS4-HMAC-SHA256":
        return f"is signed with {values['X-Amz-Algorithm'][:40]!r}, not AWS4-HMAC-SHA256"
    return None


def require_wait_handle(url: Any) -> str:
    """``url`` when it is a wait-condition handle URL, else StagingError saying why (never its signature)."""
    problem = wait_handle_problem(url)
    if problem is not None:
        raise StagingError(
            f"refusing to signal the wait condition: the WaitHandle {problem}. It must be the presigned URL that "
            f"CloudFormation returns for an AWS::CloudFormation::WaitConditionHandle: https://{WAIT_HANDLE_HOST_FORM}/"
            "<key>?X-Amz-Signature=..."
        )
    return url


def signal_opener(https: urllib.request.HTTPSHandler | None = None) -> urllib.request.OpenerDirector:
    """An opener with https only and no redirect handler: a 3xx fails as an HTTPError, never goes elsewhere.

    ``urlopen``'s default opener also holds file:, ftp:, data: and http: handlers and follows redirects.
    """
    opener = urllib.request.OpenerDirector()
    for handler in (
        https or urllib.request.HTTPSHandler(),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


SIGNAL_OPENER = signal_opener()


def signal(url: str | None, *, success: bool, reason: str, unique_id: str, data: str = "") -> None:
    """Send a wait-condition signal (a PUT of JSON to the handle's presigned URL).

    Nothing is sent to a URL that is not a wait-condition handle's, and no redirect is followed.
    """
    if not url:
        return
    require_wait_handle(url)
    body = json.dumps(
        {
            "Status": "SUCCESS" if success else "FAILURE",
            "Reason": short(reason),
            "UniqueId": unique_id[:64],
            "Data": short(data),
        }
    ).encode()
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": ""})
    if request.type != "https" or request.host != urllib.parse.urlsplit(url).netloc:
        raise StagingError("refusing to signal the wait condition: urllib reads its WaitHandle URL differently")
    for attempt in range(5):
        try:
            with SIGNAL_OPENER.open(request, timeout=20) as response:
                response.read()
            log("signalled", success=success, unique_id=unique_id[:64])
            return
        except urllib.error.HTTPError as e:
            e.close()
            if 300 <= e.code < 400:
                raise StagingError(
                    f"could not signal the wait condition: it answered {e.code} (a redirect, which a signal never "
                    "follows)"
                ) from None
            if attempt == 4:
                raise StagingError(f"could not signal the wait condition: HTTP {e.code}") from None
        except OSError as e:
            if attempt == 4:
                raise StagingError(f"could not signal the wait condition: {type(e).__name__}") from e
        time.sleep(2**attempt)


def verify_staged(s3: Any, bucket: str, prefix: str, repo_id: str, sha: str) -> int:
    """Re-read the manifest and check every file it lists; the number of files, or StagingError."""
    where = f"s3://{bucket}/{prefix}{MANIFEST_NAME}"
    try:
        manifest = read_manifest(s3, bucket, prefix)
    except ValueError as e:
        raise StagingError(f"the manifest {where} is unreadable: {e}") from e
    except ClientError as e:
        raise StagingError(s3_problem(e, bucket, prefix, "the staging handler's role")) from None
    if manifest is None:
        raise StagingError(f"the staging job ended but wrote no manifest at {where}")
    if manifest.get("repo_id") != repo_id or manifest.get("revision") != sha:
        raise StagingError(
            f"the manifest {where} is for {manifest.get('repo_id')}@{manifest.get('revision')}, not {repo_id}@{sha}"
        )
    files = [
        HubFile(path=f["path"], size=int(f["size"]), blob_id=f["blob_id"], sha256=f.get("sha256"))
        for f in manifest.get("files", [])
    ]
    if not files:
        raise StagingError(f"the manifest {where} lists no files")
    try:
        missing = missing_files(s3, bucket, prefix, repo_id, sha, files)
    except ClientError as e:
        raise StagingError(s3_problem(e, bucket, prefix, "the staging handler's role")) from None
    if missing:
        shown = ", ".join(f.path for f in missing[:5])
        raise StagingError(f"{len(missing)} file(s) of the manifest {where} are missing or differ in S3: {shown}")
    return len(files)


def result(plan: Plan, settings: Settings, job: str) -> dict[str, Any]:
    uri = f"s3://{settings.bucket}/{plan.prefix}"
    return {
        "PhysicalResourceId": uri,
        "Data": {
            "Revision": plan.sha,
            "S3Uri": uri,
            "Prefix": plan.prefix,
            "ManifestUri": uri + MANIFEST_NAME,
            "Files": str(len(plan.files)),
            "TotalBytes": str(plan.total_bytes),
            "JobName": job,
            "StartedAt": str(int(time.time())),
        },
    }


def rolling_back(stack_id: str) -> bool:
    """Whether the stack is rolling an update back (the only Update that must not plan anew)."""
    return update_rolling_back(stack_id, client("cloudformation"), log)


def restored(physical: str) -> dict[str, Any]:
    """The response for a revision prefix that was staged before: everything follows from its name."""
    _, _, prefix = physical.removeprefix("s3://").partition("/")
    sha = prefix.rstrip("/").rsplit("/", 1)[-1]
    data = {
        "Revision": sha,
        "S3Uri": physical,
        "Prefix": prefix,
        "ManifestUri": physical + MANIFEST_NAME,
        "Files": "",
        "TotalBytes": "",
        "JobName": "",
        "StartedAt": str(int(time.time())),
    }
    return {"PhysicalResourceId": physical, "Data": data}


def stop_rolled_back_job(event: dict[str, Any], settings: Settings, physical: str) -> None:
    """Stop the job the failed update started: it would copy on for hours, under the live prefix.

    In the rollback's Update, ``OldResourceProperties`` are the failed update's, so its ``JobNamePrefix``
    names that job (a new prefix per change of properties); a job of the restored properties is spared.
    Nothing here fails the rollback: a job that cannot be stopped is logged.
    """
    failed_prefix = (event.get("OldResourceProperties") or {}).get("JobNamePrefix") or ""
    if not failed_prefix or failed_prefix == settings.job_name_prefix:
        return
    try:
        stop_jobs(client("sagemaker"), failed_prefix, physical)
    except (ClientError, BotoCoreError) as e:
        log("stop-failed", job_prefix=failed_prefix, error=type(e).__name__)


# What is staged: a change of anything else (worker code, image, instance type, limits) re-stages nothing.
STAGED_BY = ("repo_id", "revision", "bucket", "prefix", "include", "exclude", "source_s3_uri")


def unchanged_answer(event: dict[str, Any], settings: Settings, physical: str) -> dict[str, Any] | None:
    """The answer to an update that changes nothing staged, from the physical ID and S3 alone; else None.

    Without the Hub, a branch such as ``main`` is not resolved again, so an unrelated change cannot move
    the served commit. The prefix is verified against its manifest first (S3 only): when that fails, the
    update plans and stages as usual. The update's new wait condition is signalled here.
    """
    try:
        old = Settings.from_properties(event.get("OldResourceProperties") or {})
    except (KeyError, TypeError, ValueError):
        return None
    if any(getattr(old, key) != getattr(settings, key) for key in STAGED_BY):
        return None
    answer = restored(physical)
    data = answer["Data"]
    if not physical.startswith(f"s3://{settings.bucket}/"):
        return None
    try:
        files = verify_staged(client("s3"), settings.bucket, data["Prefix"], settings.source, data["Revision"])
        manifest = read_manifest(client("s3"), settings.bucket, data["Prefix"]) or {}
    except (StagingError, ClientError, BotoCoreError, ValueError) as e:
        log("unchanged-but-unverified", physical=physical, error=type(e).__name__)
        return None
    data.update(Files=str(files), TotalBytes=str(manifest.get("total_bytes", "")))
    log("unchanged", physical=physical, files=files)
    signal(
        settings.wait_handle,
        success=True,
        reason=f"{settings.source}@{data['Revision']} is already staged; nothing staged changed",
        unique_id=data["Revision"],
        data=data["Revision"],
    )
    return answer


def bounded_failures(entry: Any) -> Any:
    """Whatever ``entry`` raises reaches CloudFormation in at most FAILURE_LIMIT bytes (a botocore error can
    quote a whole request: a ValidationException echoes every container argument)."""

    @functools.wraps(entry)
    def run(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
        try:
            return entry(event, context)
        except Exception as e:
            data = json.dumps(event.get("Data") or {}, ensure_ascii=False).encode()
            limit = max(500, FAILURE_LIMIT - len(data))
            if len(str(e).encode()) <= limit:
                raise
            text = str(e) if isinstance(e, StagingError) else f"{type(e).__name__}: {e}"
            raise StagingError(short(text, limit)) from None

    return run


@bounded_failures
def on_event(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    request = event["RequestType"]
    settings = Settings.from_properties(event["ResourceProperties"])
    log("request", type=request, repo=settings.source, revision=settings.revision)
    if request == "Delete":
        # The objects stay: they are the next deployment's checkpoint. Only compute is removed.
        target = event.get("PhysicalResourceId", "")
        stop_jobs(client("sagemaker"), settings.job_name_prefix, target if target.startswith("s3://") else None)
        return {"PhysicalResourceId": event.get("PhysicalResourceId")}

    physical = event.get("PhysicalResourceId", "")
    if request == "Update" and physical.startswith("s3://") and rolling_back(event.get("StackId", "")):
        # CloudFormation restores the previous properties: that revision was staged and its wait condition
        # satisfied. Answer from the physical ID, without the Hub (it may be what failed) and without a job.
        log("rollback", physical=physical)
        stop_rolled_back_job(event, settings, physical)
        return restored(physical)
    if settings.wait_handle:
        # Refused before the Hub, S3 or a job is asked anything: a job whose end cannot be signalled only costs.
        # (After the rollback branch, which signals nothing: a rollback never fails on it.)
        require_wait_handle(settings.wait_handle)
    if request == "Update" and physical.startswith("s3://"):
        unchanged = unchanged_answer(event, settings, physical)
        if unchanged is not None:
            return unchanged
    hub = HubClient(
        endpoint=settings.hub_endpoint,
        token=hub_token(settings, client("secretsmanager", arn_region(settings.token_secret_arn))),
    )
    plan = make_plan(settings, hub, client("s3"))
    log("plan", sha=plan.sha, files=len(plan.files), missing=len(plan.missing), manifest_ok=plan.manifest_ok)
    if plan.complete:
        signal(
            settings.wait_handle,
            success=True,
            reason=f"{settings.source}@{plan.sha} is already staged",
            unique_id=plan.sha,
            data=plan.sha,
        )
        return result(plan, settings, job="")
    name = job_name(settings, event["RequestId"])
    request = job_request(settings, plan, name)
    cluster = request["ProcessingResources"]["ClusterConfig"]
    cluster["InstanceCount"] = within_quota(settings, cluster["InstanceCount"])
    start_job(client("sagemaker"), request)
    return result(plan, settings, job=name)


def _job_failure(description: dict[str, Any]) -> str:
    name = description["ProcessingJobName"]
    status = description["ProcessingJobStatus"]
    # The worker's own reason is /opt/ml/output/message, which SageMaker returns as ExitMessage (up to 1 KB);
    # FailureReason is SageMaker's (botocore sagemaker model, DescribeProcessingJobResponse). Ours first.
    exit_message = (description.get("ExitMessage") or "").strip()
    failure = (description.get("FailureReason") or "").strip()
    reasons = [exit_message] + ([failure] if failure and failure not in exit_message else [])
    why = " | SageMaker: ".join(r for r in reasons if r) or "no reason given"
    return short(
        f"staging job {name} {status}: {why} (logs: CloudWatch log group /aws/sagemaker/ProcessingJobs, "
        f"streams {name}/*)"
    )


@bounded_failures
def is_complete(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    data = event.get("Data") or {}
    name = data.get("JobName")
    if not name:
        return {"IsComplete": True}
    settings = Settings.from_properties(event["ResourceProperties"])
    try:
        return _follow_job(settings, data, name)
    except StagingError:
        raise  # the job itself ended (failed, or finished without a valid manifest): nothing left running
    except Exception:
        # A failed create gets no delete from the Provider framework: leave no job running behind it.
        try:
            stop_jobs(client("sagemaker"), name, None)
        except ClientError as e:
            log("stop-failed", job=name, error=e.response["Error"]["Code"])
        raise


# Worth asking again: throttling and server errors (botocore's standard retry mode treats these as
# transient too) and a connection that failed.
TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
    }
)


def _transient(error: Exception) -> bool:
    if isinstance(error, BotoCoreError):
        return True
    assert isinstance(error, ClientError)
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    return error.response["Error"].get("Code") in TRANSIENT_CODES or status >= 500


def _not_found(error: Exception) -> bool:
    """SageMaker's answer for an unknown job, which a job it has just created can briefly get."""
    if not isinstance(error, ClientError):
        return False
    details = error.response["Error"]
    return details.get("Code") == "ValidationException" and "Could not find" in details.get("Message", "")


def _follow_job(settings: Settings, data: dict[str, Any], name: str) -> dict[str, Any]:
    waited = time.time() - int(data.get("StartedAt", "0"))
    try:
        description = client("sagemaker").describe_processing_job(ProcessingJobName=name)
    except (ClientError, BotoCoreError) as e:
        if not (_transient(e) or _not_found(e)):
            raise  # a permanent error (access denied, say): is_complete stops the job and fails
        what = e.response["Error"].get("Code") if isinstance(e, ClientError) else type(e).__name__
        if waited < settings.handoff_s:
            log("describe-retry", job=name, error=what, waited_s=int(waited))  # the waiter asks again
            return {"IsComplete": False}
        if _not_found(e):
            message = short(e.response["Error"].get("Message", ""), 300)
            raise StagingError(
                f"the staging job {name} is still unknown to DescribeProcessingJob {int(waited)} s after it was "
                f"started ({what}: {message})"
            ) from None
        # The job exists but cannot be watched from here: the wait condition still gets its EventBridge signal.
        log("handoff", job=name, waited_s=int(waited), unobserved=what)
        return {"IsComplete": True}
    status = description["ProcessingJobStatus"]
    if status in RUNNING:
        if waited < settings.handoff_s:
            return {"IsComplete": False}
        log("handoff", job=name, waited_s=int(waited))  # the wait condition now waits for the job's signal
        return {"IsComplete": True}
    if status != "Completed":
        reason = _job_failure(description)
        signal(settings.wait_handle, success=False, reason=reason, unique_id=name)
        raise StagingError(reason)
    files = verify_staged(client("s3"), settings.bucket, data["Prefix"], settings.source, data["Revision"])
    signal(settings.wait_handle, success=True, reason=f"staged {files} files", unique_id=name, data=data["Revision"])
    return {"IsComplete": True}


def _argument(arguments: list[str], flag: str) -> str | None:
    return arguments[arguments.index(flag) + 1] if flag in arguments[:-1] else None


def on_job_state_change(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """EventBridge target: ``{"WaitHandle": url, "JobNamePrefix": p, "Event": <state change>}``."""
    handle = require_wait_handle(event.get("WaitHandle"))  # before any request: nothing is asked for a bad handle
    detail = event["Event"]["detail"]
    name = detail["ProcessingJobName"]
    if not name.startswith(event["JobNamePrefix"]):
        return {"signalled": False}
    description = client("sagemaker").describe_processing_job(ProcessingJobName=name)
    status = description["ProcessingJobStatus"]
    if status in RUNNING:
        return {"signalled": False}
    if status != "Completed":
        signal(handle, success=False, reason=_job_failure(description), unique_id=name)
        return {"signalled": True, "success": False}
    arguments = description["AppSpecification"].get("ContainerArguments", [])
    target = description.get("Environment", {}).get("HFSTAGE_TARGET", "")
    bucket, _, prefix = target.removeprefix("s3://").partition("/")
    repo_id = _argument(arguments, "--repo-id") or _argument(arguments, "--source-s3-uri")
    sha = _argument(arguments, "--revision") or _argument(arguments, "--source-etag")
    try:
        files = verify_staged(client("s3"), bucket, prefix, repo_id or "", sha or "")
    except StagingError as e:
        signal(handle, success=False, reason=str(e), unique_id=name)
        return {"signalled": True, "success": False}
    signal(handle, success=True, reason=f"staged {files} files", unique_id=name, data=sha or "")
    return {"signalled": True, "success": True}


def on_signal_failure(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """On-failure destination of ``on_job_state_change``: Lambda's record of an event that failed every attempt.

    EventBridge retries only the delivery to Lambda; Lambda retries a function error twice, then sends this
    record (``requestPayload``, ``responsePayload``, ``requestContext``) here (Lambda developer guide,
    "Capturing records of Lambda asynchronous invocations"). Without this, the wait condition would wait
    hours for a signal that never comes; now it fails with the signal function's own error.
    """
    payload = event.get("requestPayload") or {}
    handle, prefix = payload.get("WaitHandle"), payload.get("JobNamePrefix") or ""
    name = ((payload.get("Event") or {}).get("detail") or {}).get("ProcessingJobName") or ""
    if not handle or not name.startswith(prefix):
        return {"signalled": False}
    error = event.get("responsePayload") or {}
    context_ = event.get("requestContext") or {}
    why = f"{error.get('errorType', 'error')}: {error.get('errorMessage', 'no message')}"
    attempts = int(context_.get("approximateInvokeCount") or 0)
    reason = (
        f"the staging signal function failed on job {name} ({context_.get('condition', 'failed')}, "
        f"{attempts} attempt(s)): {why}. The job's own state: aws sagemaker describe-processing-job "
        f"--processing-job-name {name}"
    )
    signal(handle, success=False, reason=reason, unique_id=name)
    return {"signalled": True, "success": False}


if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
    logging.getLogger("botocore").setLevel(logging.WARNING)
