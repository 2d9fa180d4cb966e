"""The staging Processing job: its request, the account's quota for it, starting it and stopping it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from staging_base import REASON_LIMIT, Settings, StagingError, log, short

from handler_kit.resources import JOB_TAG_KEYS, processing_network
from hfstage.reach import ENV as PROBE_ENV

if TYPE_CHECKING:
    from staging_plan import Plan


CODE_DIR = "/opt/ml/processing/input/code"


RUNNING = ("InProgress", "Stopping")


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
    if settings.pack:
        args += ["--pack-as-tarball"]
    # The leader of a multi-instance job waits for the other hosts' files at most as long as the job may run.
    args += ["--leader-wait-s", str(settings.max_runtime_s)]
    return args


def job_request(settings: Settings, plan: Plan, name: str) -> dict[str, Any]:
    code_file = settings.code_uri.rsplit("/", 1)[-1]
    environment = {"PYTHONUNBUFFERED": "1", "HFSTAGE_TARGET": f"s3://{settings.bucket}/{plan.prefix}"}
    environment[PROBE_ENV] = "10"  # the worker gives up in about 30 s when it cannot reach the Hub (hfstage/reach.py)
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
                **({"VolumeKmsKeyId": settings.volume_kms_key_arn} if settings.volume_kms_key_arn else {}),
            }
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": settings.max_runtime_s},
        "Environment": environment,
        "Tags": [
            {"Key": JOB_TAG_KEYS[0], "Value": settings.source[:256]},
            {"Key": JOB_TAG_KEYS[1], "Value": plan.sha},
            *({"Key": k, "Value": v} for k, v in settings.tags),
        ],
        **processing_network(settings),
    }


# Service Quotas names SageMaker's Processing limits per instance type (as it names "<type> for endpoint
# usage" for endpoints): the most instances of the type that running Processing jobs may hold. The name is
# the one CreateProcessingJob's ResourceLimitExceeded quotes ("The account-level service limit
# 'ml.m5.large for processing job usage' is 0 Instances").
QUOTA_NAME = "{} for processing job usage"


def processing_quota(instance_type: str, quotas: Any) -> tuple[float, str] | None:
    """(value, quota code) of ``<instance type> for processing job usage``: applied, else AWS default.

    None when Service Quotas cannot tell (no such quota, throttled, denied): CreateProcessingJob then
    answers for itself (ResourceLimitExceeded).
    """
    name = QUOTA_NAME.format(instance_type)
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


def within_quota(settings: Settings, wanted: int, quotas: Callable[[], Any]) -> int:
    """``wanted`` instances, fewer when the account's Processing quota for the type is lower; 0 fails now.

    ``quotas`` makes the Service Quotas client (only made when the quota is read).
    """
    found = processing_quota(settings.instance_type, quotas())
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
