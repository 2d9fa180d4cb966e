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
import json
import logging
import os
import time
import urllib.error
import urllib.request
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

# The handler by concern (one asset, modules beside this one): shared basics, the plan, the job, the wait handle.
# Names tests and the IAM call graph reach through this module are imported here too.
from staging_base import (
    FAILURE_LIMIT,
    REASON_LIMIT,  # noqa: F401 - part of the handler's surface
    Settings,
    StagingError,
    arn_region,
    log,
    short,
)
from staging_job import (
    RUNNING,
    instances_for,  # noqa: F401 - part of the handler's surface
    job_name,
    job_request,
    start_job,
    stop_jobs,
    within_quota,
    worker_arguments,  # noqa: F401 - part of the handler's surface
)
from staging_plan import Plan, hub_token, make_plan, verify_staged
from staging_signal import require_wait_handle, signal_opener, wait_handle_problem  # noqa: F401

import handler_kit
from handler_kit import stack_status, update_rolling_back
from hfstage.hub import HubClient, HubFile  # noqa: F401 - part of the handler's surface
from hfstage.manifest import MANIFEST_NAME, read_manifest
from hfstage.pack import PACK_SUFFIX

_clients: dict[str, Any] = {}


def client(name: str, region: str | None = None) -> Any:
    """One boto3 client per service (and region, when not the function's) for the life of the environment."""
    return handler_kit.cached_client(_clients, name, region=region, retries={"mode": "standard", "max_attempts": 8})


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


# Stack statuses in which no staging job of a Create may run: the stack is undoing a failed create or being deleted
# (CloudFormation User Guide, "Stack status codes"). CloudFormation cancels a Create still in progress when another
# resource fails and sends its Delete at once (aws-cdk #26139): a job that Create starts after the Delete, or that
# the Delete could not stop yet, has nothing else to stop it.
ABANDONED = (
    "ROLLBACK_IN_PROGRESS",
    "ROLLBACK_COMPLETE",
    "ROLLBACK_FAILED",
    "DELETE_IN_PROGRESS",
    "DELETE_COMPLETE",
    "DELETE_FAILED",
)


class CreateCancelled(Exception):
    """The stack undoes this Create (another resource failed) or is being deleted: its job must not run."""


def abandoned(stack_id: str) -> str | None:
    """The stack's status when it is one of ``ABANDONED``; None otherwise, or when it cannot be read."""
    status = stack_status(stack_id, client("cloudformation"), log)
    return status if status in ABANDONED else None


def restored(physical: str) -> dict[str, Any]:
    """The response for a revision prefix that was staged before: everything follows from its name."""
    _, _, prefix = physical.removeprefix("s3://").partition("/")
    sha = prefix.rstrip("/").rsplit("/", 1)[-1].removesuffix(PACK_SUFFIX.rstrip("/"))  # <sha>-packed/: an archive
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
STAGED_BY = ("repo_id", "revision", "bucket", "prefix", "include", "exclude", "source_s3_uri", "pack")
# ... and what a packed adapter is checked against: a change re-checks it (an unchanged archive starts no job).
CHECKED_BY = ("adapter_base", "max_lora_rank")


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
    if any(getattr(old, key) != getattr(settings, key) for key in (*STAGED_BY, *CHECKED_BY)):
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
    cluster["InstanceCount"] = within_quota(settings, cluster["InstanceCount"], lambda: client("service-quotas"))
    if event["RequestType"] == "Create" and (status := abandoned(event.get("StackId", ""))):
        raise CreateCancelled(f"the stack is {status}: this Create was cancelled, so no staging job is started")
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
        if event["RequestType"] == "Create" and (status := abandoned(event.get("StackId", ""))):
            raise CreateCancelled(f"the stack is {status}: this Create was cancelled")  # its job stopped below
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
