"""Fault injection and small fakes on a handler's own boto3 clients, through botocore's ``before-send`` event.

A ``before-send`` hook answers in place of the HTTP request, so everything else is real: the request is
serialized, the answer parsed by the service's protocol, and errors retried by the client's own retry
configuration (install a :class:`~tests.harness.cloudformation.Clock` in ``botocore.endpoint`` so the
back-off runs on the clock). Nothing of the handler is patched.

- :class:`Faults`: errors for chosen operations (throttling, access denied, gone...), a given number of
  times; every other call goes where it would have gone (a moto server, a fake over HTTP).
- :class:`FakeService`: a service answered entirely here; subclasses implement ``handle``.
  :class:`ProcessingJobs` (SageMaker Processing, with scripted job lives) and :class:`ServiceQuotas`.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from botocore.awsrequest import AWSResponse

ACCOUNT = "123456789012"
REGION = "us-east-1"
DEFAULT_STATUS = {
    "ThrottlingException": 400,
    "TooManyRequestsException": 400,
    "Throttling": 400,
    "SlowDown": 503,
    "AccessDeniedException": 400,
    "AccessDenied": 403,
    "ValidationException": 400,
    "ResourceNotFound": 400,
    "NoSuchResourceException": 400,
    "NoSuchKey": 404,
    "InternalFailure": 500,
    "ServiceUnavailable": 503,
}


class AwsError(Exception):
    """Raised by a fake's ``handle`` to answer with a service error."""

    def __init__(self, code: str, message: str = "", status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message or code
        self.status = status or DEFAULT_STATUS.get(code, 400)


class _Raw:
    """The part of a urllib3 response botocore reads."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, *args: Any, **kwargs: Any):
        yield self._body

    def read(self, *args: Any, **kwargs: Any) -> bytes:
        body, self._body = self._body, b""
        return body


@dataclass
class _Fault:
    operation: str
    error: AwsError
    times: int | None  # None: every call from now on


class Faults:
    """Errors injected into ``client``'s calls. ``calls`` records every operation attempted (retries included)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()  # handlers may call one client from several threads
        self.protocol = client.meta.service_model.protocol
        service = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register_first(f"before-send.{service}", self._before_send)

    def inject(self, operation: str, code: str, message: str = "", *, status: int | None = None, times: int | None = 1):
        """The next ``times`` calls of ``operation`` (a name like ``DescribeProcessingJob``, or ``*``) fail."""
        self._faults.append(_Fault(operation, AwsError(code, message, status), times))
        return self

    def throttle(self, operation: str, times: int | None = None):
        return self.inject(operation, "ThrottlingException", "Rate exceeded", times=times)

    def deny(self, operation: str, times: int | None = None):
        if self.protocol == "rest-xml":  # S3 says no more than this
            return self.inject(operation, "AccessDenied", "Access Denied", times=times)
        action = f"{self.client.meta.service_model.signing_name}:{operation}"
        message = f"User: arn:aws:sts::{ACCOUNT}:assumed-role/handler is not authorized to perform: {action}"
        return self.inject(operation, "AccessDeniedException", message, times=times)

    def attempts(self, operation: str) -> int:
        return sum(1 for name, _ in self.calls if name == operation)

    def clear(self) -> None:
        self._faults.clear()

    def _before_send(self, request: Any, event_name: str, **kwargs: Any) -> AWSResponse | None:
        operation = event_name.rsplit(".", 1)[-1]
        params = _params(request, self.protocol)
        with self._lock:
            self.calls.append((operation, params))
            fault = next(
                (f for f in self._faults if f.times != 0 and fnmatch.fnmatchcase(operation, f.operation)), None
            )
            if fault is not None and fault.times is not None:
                fault.times -= 1
        if fault is not None:
            return self._error(request, fault.error)
        try:
            answer = self.answer(operation, params)
        except AwsError as e:
            return self._error(request, e)
        if answer is None:
            return None
        body = json.dumps(answer, default=_json_default).encode()
        return AWSResponse(request.url, 200, {"content-type": "application/x-amz-json-1.1"}, _Raw(body))

    def answer(self, operation: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """A successful answer, or None to send the request on (only faults are injected here)."""
        return None

    def _error(self, request: Any, error: AwsError) -> AWSResponse:
        headers = {"x-amzn-requestid": "00000000-0000-0000-0000-000000000000"}
        if self.protocol in ("json", "rest-json"):
            headers["content-type"] = "application/x-amz-json-1.1"
            headers["x-amzn-errortype"] = error.code
            body = json.dumps({"__type": error.code, "message": error.message}).encode()
        else:
            headers["content-type"] = "application/xml"
            inner = f"<Code>{escape(error.code)}</Code><Message>{escape(error.message)}</Message>"
            body = (
                f"<ErrorResponse><Error>{inner}</Error></ErrorResponse>"
                if self.protocol == "query"
                else f'<?xml version="1.0" encoding="UTF-8"?><Error>{inner}</Error>'
            ).encode()
        return AWSResponse(request.url, error.status, headers, _Raw(body))


def _params(request: Any, protocol: str) -> dict[str, Any]:
    if protocol in ("json", "rest-json") and request.body:
        body = request.body.decode() if isinstance(request.body, bytes) else request.body
        try:
            return json.loads(body)
        except ValueError:
            return {}
    return {}


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    raise TypeError(f"cannot serialize {value!r}")


class FakeService(Faults):
    """A service answered entirely by ``op_<Operation>`` methods (no request leaves the process).

    Faults apply first. Then, like the service and unlike botocore (which checks only minimums), the
    request is checked against the model's maximum lengths and sizes: a ValidationException in the
    service's words when one is exceeded.
    """

    def answer(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        handler = getattr(self, f"op_{operation}", None)
        if handler is None:
            raise AwsError("UnknownOperationException", f"the fake does not implement {operation}")
        shape = self.client.meta.service_model.operation_model(operation).input_shape
        violations = _too_long(shape, params, "")
        if violations:
            details = "; ".join(violations)
            raise AwsError("ValidationException", f"{len(violations)} validation error(s) detected: {details}")
        return handler(params)


def _too_long(shape: Any, value: Any, path: str) -> list[str]:
    """Where ``value`` exceeds a ``max`` of ``shape`` (strings, lists, maps), in AWS's wording."""
    if shape is None or value is None:
        return []
    found = []
    limit = shape.metadata.get("max")
    if limit is not None and shape.type_name in ("string", "list", "map") and len(value) > limit:
        found.append(
            f"Value '{value}' at '{path.lstrip('.')}' failed to satisfy constraint: Member must have "
            f"{'length' if shape.type_name == 'string' else 'size'} less than or equal to {limit}"
        )
    if shape.type_name == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            found += _too_long(member, value.get(name), f"{path}.{name[:1].lower()}{name[1:]}")
    elif shape.type_name == "list" and isinstance(value, list):
        for i, item in enumerate(value, 1):
            found += _too_long(shape.member, item, f"{path}.{i}.member")
    elif shape.type_name == "map" and isinstance(value, dict):
        for key, item in value.items():
            found += _too_long(shape.value, item, f"{path}.{key}")
    return found


# --- SageMaker Processing ---------------------------------------------------------------------------

RUNNING = ("InProgress", "Stopping")


@dataclass
class Job:
    name: str
    request: dict[str, Any]
    status: str = "InProgress"
    describes: int = 0
    failure_reason: str = ""
    exit_message: str = ""  # the container's /opt/ml/output/message (first 1 KB)

    @property
    def arn(self) -> str:
        return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:processing-job/{self.name}"


# A job's life: called on every DescribeProcessingJob (after ``describes`` is counted) to move it on.
Script = Callable[[Job], None]


def completes_after(describes: int, then: Callable[[Job], None] | None = None) -> Script:
    """InProgress for ``describes - 1`` describes, then Completed (``then`` runs first: write the files)."""

    def script(job: Job) -> None:
        if job.status == "InProgress" and job.describes >= describes:
            if then is not None:
                then(job)
            job.status = "Completed"

    return script


def fails_after(describes: int, reason: str, exit_message: str = "") -> Script:
    """Failed after ``describes``: SageMaker's ``reason``, and the container's message (its first 1 KB)."""

    def script(job: Job) -> None:
        if job.status == "InProgress" and job.describes >= describes:
            job.status, job.failure_reason = "Failed", reason
            job.exit_message = exit_message.encode()[:1024].decode(errors="ignore")

    return script


def stuck(job: Job) -> None:
    """Never ends by itself."""


class ProcessingJobs(FakeService):
    """CreateProcessingJob, DescribeProcessingJob, ListProcessingJobs and StopProcessingJob, in memory."""

    def __init__(self, client: Any, script: Script = stuck) -> None:
        super().__init__(client)
        self.jobs: dict[str, Job] = {}
        self.script = script

    @property
    def running(self) -> list[str]:
        return [job.name for job in self.jobs.values() if job.status in RUNNING]

    @property
    def created(self) -> int:
        return sum(1 for name, _ in self.calls if name == "CreateProcessingJob")

    @property
    def stopped(self) -> list[str]:
        """The jobs a StopProcessingJob was sent for, in order (retries and refused stops included)."""
        return [params.get("ProcessingJobName", "") for name, params in self.calls if name == "StopProcessingJob"]

    def forget(self, name: str) -> None:
        """The job is gone (SageMaker forgets nothing, but a test can pretend)."""
        self.jobs.pop(name, None)

    def _job(self, name: str) -> Job:
        if name not in self.jobs:
            raise AwsError("ValidationException", f"Could not find requested job with name {name}")
        return self.jobs[name]

    def op_CreateProcessingJob(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["ProcessingJobName"]
        if name in self.jobs:
            raise AwsError(
                "ValidationException",
                "Job name must be unique within an AWS account and region, and a job with this name already exists "
                f"({self.jobs[name].arn})",
            )
        self.jobs[name] = Job(name, params)
        return {"ProcessingJobArn": self.jobs[name].arn}

    def op_DescribeProcessingJob(self, params: dict[str, Any]) -> dict[str, Any]:
        job = self._job(params["ProcessingJobName"])
        job.describes += 1
        self.script(job)
        description = {
            "ProcessingJobName": job.name,
            "ProcessingJobArn": job.arn,
            "ProcessingJobStatus": job.status,
            "AppSpecification": job.request.get("AppSpecification", {}),
            "Environment": job.request.get("Environment", {}),
            "ProcessingResources": job.request.get("ProcessingResources", {}),
            "RoleArn": job.request.get("RoleArn", ""),
            "CreationTime": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        }
        if job.failure_reason:
            description["FailureReason"] = job.failure_reason
        if job.exit_message:
            description["ExitMessage"] = job.exit_message
        return description

    def op_ListProcessingJobs(self, params: dict[str, Any]) -> dict[str, Any]:
        contains = params.get("NameContains", "")
        return {
            "ProcessingJobSummaries": [
                {
                    "ProcessingJobName": job.name,
                    "ProcessingJobArn": job.arn,
                    "ProcessingJobStatus": job.status,
                    "CreationTime": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                }
                for job in self.jobs.values()
                if contains in job.name
            ]
        }

    def op_StopProcessingJob(self, params: dict[str, Any]) -> dict[str, Any]:
        job = self._job(params["ProcessingJobName"])
        if job.status != "InProgress":
            raise AwsError("ValidationException", f"The job {job.name} is not in a stoppable state ({job.status})")
        job.status = "Stopped"
        return {}


# --- Service Quotas ---------------------------------------------------------------------------------


class ServiceQuotas(FakeService):
    """SageMaker's quotas: ``applied`` values (ListServiceQuotas) and AWS ``defaults``, by quota name."""

    def __init__(
        self, client: Any, *, applied: dict[str, float] | None = None, defaults: dict[str, float] | None = None
    ) -> None:
        super().__init__(client)
        self.applied = dict(applied or {})
        self.defaults = dict(defaults or {})

    def _page(self, quotas: dict[str, float], params: dict[str, Any]) -> dict[str, Any]:
        if params.get("ServiceCode") != "sagemaker":
            return {"Quotas": []}
        return {
            "Quotas": [
                {
                    "ServiceCode": "sagemaker",
                    "QuotaName": name,
                    "QuotaCode": f"L-{zlib.crc32(name.encode()):08X}",
                    "Value": value,
                    "Adjustable": True,
                }
                for name, value in quotas.items()
            ]
        }

    def op_ListServiceQuotas(self, params: dict[str, Any]) -> dict[str, Any]:
        if not self.applied:
            raise AwsError("NoSuchResourceException", "No applied quotas for sagemaker")
        return self._page(self.applied, params)

    def op_ListAWSDefaultServiceQuotas(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._page(self.defaults, params)


class Stacks:
    """Stands in for the CloudFormation client (query protocol, which the JSON fakes do not speak): answers
    DescribeStacks with ``status``, which every handler reads to tell a rollback from an update. The
    harness's :class:`~tests.harness.cloudformation.CloudFormation` keeps ``status`` current when given it."""

    def __init__(self, status: str = "UPDATE_IN_PROGRESS") -> None:
        self.status = status
        self.calls = 0

    def describe_stacks(self, StackName: str) -> dict[str, Any]:
        self.calls += 1
        return {"Stacks": [{"StackName": StackName, "StackStatus": self.status}]}
