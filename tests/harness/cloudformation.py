"""CloudFormation and the CDK Provider framework, played for one custom resource handler on a fake clock.

The rules are aws-cdk-lib 2.275's ``custom-resources/lib/provider-framework/runtime`` (framework.js,
cfn-response.js, waiter-state-machine.js) and CloudFormation's own:

- ``on_event`` gets the request; a missing ``PhysicalResourceId`` defaults to the RequestId (Create) or
  the current one (Update, Delete); a Delete may not change it.
- With ``is_complete``, the waiter calls it at once, then every ``query_interval`` while it answers
  ``IsComplete: false`` (which may not carry ``Data``), at most ``total_timeout / query_interval``
  more times; then the resource fails with "Operation timed out". Final ``Data`` = on_event's merged
  with is_complete's.
- A handler's exception fails the resource; the reason is the JS error's stack: ``Error: <message>``,
  the log group line, then the framework's stack frames. A Create that fails before it has a physical
  ID is answered with a marker ID, and the Delete CloudFormation sends for it on rollback is answered
  SUCCESS without calling the handler ("a failed Create gets no Delete"). A Create that fails in
  ``is_complete`` has its physical ID, so the rollback Delete does reach the handler.
- CloudFormation fails the resource when no answer comes within its ``ServiceTimeout``, and rejects
  a response body over 4,096 bytes.
- An Update that returns another physical ID is a replacement: after the update, CloudFormation deletes
  the old resource, with the old properties.
- A failed Update is rolled back with another Update carrying the old properties while the stack is
  ``UPDATE_ROLLBACK_IN_PROGRESS`` (aws-cdk #17040; CloudFormation's custom resource request docs); the
  stack ends ``UPDATE_ROLLBACK_COMPLETE`` only when that answer succeeds and still carries every attribute
  the resource had (a ``Fn::GetAtt`` of a missing key fails: "Vendor response doesn't contain ...").
  Handlers read the stack's status with DescribeStacks: pass ``stack`` (anything with a ``status``,
  :class:`tests.harness.aws.Stacks`) and this class keeps it current.

Time is a :class:`Clock`. Nothing sleeps for real: the waiter's intervals advance the clock, and so
do the handler's own sleeps and botocore's retry back-off when the clock is installed in their modules
(:meth:`Clock.installed`). A Lambda invocation that used more clock time than its timeout fails with
"Task timed out", as Lambda would fail it.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time as real_time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

CREATE_FAILED_MARKER = "AWSCDK::CustomResourceProviderFramework::CREATE_FAILED"
RESPONSE_LIMIT = 4096  # bytes of the whole response body CloudFormation accepts
STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/LlmEndpoint/6f0c5c20-0000-0000-0000-000000000000"
# A user function's physical name is at most 64 characters; the framework names it in the reason.
FUNCTION_NAME = "LlmEndpoint-ProviderOnEventHandler0123456789ABCDEF-AbCdEfGhIjKl"[:64]
# What a JS Error's stack adds after the message (framework.js, bundled): four frames.
FRAMEWORK_FRAMES = (
    "    at invokeUserFunction (/var/task/framework.js:1:2832)\n"
    "    at process.processTicksAndRejections (node:internal/process/task_queues:105:5)\n"
    "    at async onEvent (/var/task/framework.js:1:1004)\n"
    "    at async Runtime.handler (/var/task/cfn-response.js:1:1826)"
)
SERVICE_TIMEOUT_REASON = (
    "CloudFormation did not receive a response from your Custom Resource. Please check your logs for requestId "
    "[{request_id}]. If you are using the Python cfn-response module, you may need to update your Lambda function "
    "code so that CloudFormation can attach the updated version."
)


# --- time -------------------------------------------------------------------------------------------


class Clock:
    """Seconds since the epoch that move only when something sleeps or the waiter waits."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self._lock = threading.Lock()  # botocore may back off in several threads (parallel HeadObject)

    def __call__(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"sleep length must be non-negative, not {seconds}")
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds

    advance = sleep

    @contextlib.contextmanager
    def installed(self, *modules: ModuleType) -> Iterator[Clock]:
        """Give each module this clock as its ``time`` (the rest of the ``time`` module stays real).

        For a handler module that does ``import time`` and for ``botocore.endpoint``, whose retry
        back-off sleeps with ``time.sleep``.
        """
        saved = [(m, m.__dict__.get("time")) for m in modules]
        shim = _TimeShim(self)
        try:
            for module in modules:
                module.time = shim
            yield self
        finally:
            for module, original in saved:
                module.time = original


class _TimeShim:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def time(self) -> float:
        return self._clock.now

    def monotonic(self) -> float:
        return self._clock.now

    def perf_counter(self) -> float:
        return self._clock.now

    def sleep(self, seconds: float) -> None:
        self._clock.sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(real_time, name)


class LambdaContext:
    """What a Lambda handler gets as ``context``: the remaining time runs on the clock."""

    def __init__(self, clock: Clock, timeout_s: float, function_name: str = FUNCTION_NAME) -> None:
        self._clock = clock
        self.deadline = clock.now + timeout_s
        self.function_name = function_name
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.memory_limit_in_mb = "256"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - self._clock.now) * 1000))


# --- what is under test -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timeouts:
    """The limits a deployed resource runs under (from the synthesized template: :meth:`from_template`)."""

    handler_s: float  # one Lambda invocation of the user function
    service_timeout_s: float  # the resource's ServiceTimeout: CloudFormation's own limit
    query_interval_s: float = 30.0  # the waiter's, with is_complete
    total_timeout_s: float = 1800.0  # the waiter's, with is_complete

    @property
    def max_polls(self) -> int:
        """is_complete calls after the first (the waiter's MaxAttempts)."""
        return round(self.total_timeout_s / self.query_interval_s)

    @classmethod
    def from_template(cls, template: Mapping[str, Any], resource_type: str) -> Timeouts:
        """The limits of the first ``resource_type`` resource, read back from its Provider's resources."""
        resources = template["Resources"]
        resource = next(r for r in resources.values() if r["Type"] == resource_type)
        properties = resource["Properties"]
        framework = resources[properties["ServiceToken"]["Fn::GetAtt"][0]]
        variables = framework["Properties"]["Environment"]["Variables"]
        user_function = resources[variables["USER_ON_EVENT_FUNCTION_ARN"]["Fn::GetAtt"][0]]
        limits = cls(
            handler_s=float(user_function["Properties"]["Timeout"]),
            service_timeout_s=float(properties["ServiceTimeout"]),
        )
        waiter = variables.get("WAITER_STATE_MACHINE_ARN")
        if waiter is None:
            return limits
        definition = json.dumps(resources[waiter["Ref"]]["Properties"]["DefinitionString"])
        interval = float(re.search(r'IntervalSeconds\\?":(\d+)', definition)[1])
        attempts = int(re.search(r'MaxAttempts\\?":(\d+)', definition)[1])
        return replace(limits, query_interval_s=interval, total_timeout_s=interval * attempts)


@dataclass
class HandlerUnderTest:
    """A Provider-served handler: its entry points (``(event, context) -> dict``) and its limits."""

    name: str
    resource_type: str
    on_event: Callable[[dict[str, Any], Any], dict[str, Any] | None]
    timeouts: Timeouts
    is_complete: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None

    @classmethod
    def from_module(cls, module: ModuleType, *, resource_type: str, timeouts: Timeouts) -> HandlerUnderTest:
        return cls(
            name=module.__name__,
            resource_type=resource_type,
            on_event=module.on_event,
            is_complete=getattr(module, "is_complete", None),
            timeouts=timeouts,
        )


# --- what CloudFormation sees -----------------------------------------------------------------------


@dataclass
class Response:
    """The Provider framework's answer to one request, and how it came about."""

    request: dict[str, Any]
    status: str  # SUCCESS or FAILED
    physical_id: str
    data: dict[str, Any]
    reason: str
    elapsed_s: float
    polls: int = 0  # is_complete calls
    handler_called: bool = True
    timed_out: str | None = None  # "ServiceTimeout", "Operation timed out" or "Lambda timeout"
    error: BaseException | None = None  # what the handler raised
    cleanup: Response | None = None  # the Delete of the replaced resource, after a replacing Update

    @property
    def ok(self) -> bool:
        return self.status == "SUCCESS"

    @property
    def request_type(self) -> str:
        return self.request["RequestType"]

    @property
    def body(self) -> bytes:
        """The response body as the framework PUTs it to CloudFormation."""
        document = {
            "Status": self.status,
            "Reason": self.reason,
            "StackId": self.request["StackId"],
            "RequestId": self.request["RequestId"],
            "PhysicalResourceId": self.physical_id,
            "LogicalResourceId": self.request["LogicalResourceId"],
            "Data": self.data or None,
        }
        # JavaScript's JSON.stringify (cfn-response.js) writes non-ASCII characters as they are: UTF-8 bytes.
        body = {k: v for k, v in document.items() if v is not None}
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    @property
    def message(self) -> str:
        """The handler's own failure message (the reason without the framework's additions)."""
        return str(self.error) if self.error is not None else self.reason

    def problems(self, *, budget_s: float) -> list[str]:
        """What a well-behaved custom resource never does; empty when this response is fine."""
        found = []
        if len(self.body) >= RESPONSE_LIMIT:
            found.append(f"response body is {len(self.body)} bytes; CloudFormation takes at most {RESPONSE_LIMIT}")
        if self.timed_out:
            found.append(f"{self.request_type} ended by {self.timed_out} after {self.elapsed_s:.0f} s, not the handler")
        if self.elapsed_s > budget_s:
            found.append(f"{self.request_type} took {self.elapsed_s:.0f} s, over the {budget_s:.0f} s budget")
        if self.cleanup is not None:
            found += [f"cleanup: {p}" for p in self.cleanup.problems(budget_s=budget_s)]
        return found


class CloudFormation:
    """One custom resource of one stack: create, update, delete, retry and roll back, in order.

    ``physical_id`` and ``properties`` are what CloudFormation has recorded for the resource.
    """

    def __init__(
        self,
        handler: HandlerUnderTest,
        *,
        clock: Clock | None = None,
        logical_id: str = "Resource",
        stack: Any = None,
    ) -> None:
        self.handler = handler
        self.clock = clock or Clock()
        self.logical_id = logical_id
        self.physical_id: str | None = None
        self.properties: dict[str, Any] | None = None
        self.attributes: dict[str, Any] = {}  # what Fn::GetAtt reads: the last successful answer's Data
        self.responses: list[Response] = []
        self.stack = stack
        self._last: dict[str, Any] | None = None

    @property
    def status(self) -> str | None:
        return getattr(self.stack, "status", None)

    def _set_status(self, status: str) -> None:
        if self.stack is not None:
            self.stack.status = status

    def problems(self, response: Response) -> list[str]:
        """``response.problems`` against this resource's budget: its ServiceTimeout."""
        return response.problems(budget_s=self.handler.timeouts.service_timeout_s)

    # -- requests ------------------------------------------------------------------------------------

    def create(self, properties: Mapping[str, Any], *, request_id: str | None = None) -> Response:
        request = self._request("Create", properties, request_id)
        self._set_status("CREATE_IN_PROGRESS")
        response = self._send(request)
        # Recorded either way: a failed Create's rollback Delete carries the ID of the FAILED response.
        self.physical_id, self.properties = response.physical_id, dict(properties)
        if response.ok:
            self.attributes = dict(response.data)
        self._set_status("CREATE_COMPLETE" if response.ok else "ROLLBACK_IN_PROGRESS")
        return response

    def update(self, properties: Mapping[str, Any], *, request_id: str | None = None) -> Response:
        assert self.physical_id is not None and self.properties is not None, "update before create"
        request = self._request(
            "Update",
            properties,
            request_id,
            PhysicalResourceId=self.physical_id,
            OldResourceProperties=dict(self.properties),
        )
        self._set_status("UPDATE_IN_PROGRESS")
        response = self._send(request)
        if response.ok:
            old_id, old_properties = self.physical_id, self.properties
            self.physical_id, self.properties = response.physical_id, dict(properties)
            self.attributes = dict(response.data)
            if response.physical_id != old_id:
                # UPDATE_COMPLETE_CLEANUP_IN_PROGRESS: the replaced resource goes, with its own properties.
                self._set_status("UPDATE_COMPLETE_CLEANUP_IN_PROGRESS")
                cleanup = self._request("Delete", old_properties, None, PhysicalResourceId=old_id)
                response.cleanup = self._send(cleanup)
            self._set_status("UPDATE_COMPLETE")
        else:
            self._set_status("UPDATE_ROLLBACK_IN_PROGRESS")
        return response

    def delete(self, *, request_id: str | None = None) -> Response:
        assert self.physical_id is not None and self.properties is not None, "delete before create"
        request = self._request("Delete", self.properties, request_id, PhysicalResourceId=self.physical_id)
        return self._send(request)

    def retry(self) -> Response:
        """The last request again, same RequestId (Lambda retrying the framework's async invocation)."""
        assert self._last is not None, "nothing to retry"
        request = self._last
        response = self._send(dict(request))
        if response.ok and request["RequestType"] != "Delete":
            self.physical_id = response.physical_id
        return response

    def rollback(self) -> Response:
        """What CloudFormation sends when the last request failed: Delete after Create, Update back after Update."""
        assert self._last is not None, "nothing to roll back"
        request = self._last
        if request["RequestType"] == "Create":
            return self.delete()
        if request["RequestType"] == "Update":
            self._set_status("UPDATE_ROLLBACK_IN_PROGRESS")
            back = self._request(
                "Update",
                request["OldResourceProperties"],
                None,
                PhysicalResourceId=request["PhysicalResourceId"],
                OldResourceProperties=request["ResourceProperties"],
            )
            response = self._send(back)
            self.properties = dict(request["OldResourceProperties"])
            missing = sorted(set(self.attributes) - set(response.data)) if response.ok else []
            if missing:
                # The restored template's Fn::GetAtt reads attributes this answer no longer has.
                response = replace(
                    response,
                    status="FAILED",
                    reason=f"CustomResource attribute error: Vendor response doesn't contain {missing[0]} attribute",
                )
            if response.ok:
                self.attributes = dict(response.data)
            self._set_status("UPDATE_ROLLBACK_COMPLETE" if response.ok else "UPDATE_ROLLBACK_FAILED")
            return response
        raise AssertionError("CloudFormation does not roll a Delete back")

    # -- the Provider framework ----------------------------------------------------------------------

    def _request(
        self, request_type: str, properties: Mapping[str, Any], request_id: str | None, **extra: Any
    ) -> dict[str, Any]:
        return {
            "RequestType": request_type,
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:framework-onEvent",
            "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/presigned",
            "StackId": STACK_ID,
            "RequestId": request_id or str(uuid.uuid4()),
            "LogicalResourceId": self.logical_id,
            "ResourceType": self.handler.resource_type,
            "ResourceProperties": {"ServiceToken": "arn:aws:lambda:::function:framework-onEvent", **properties},
            **extra,
        }

    def _send(self, request: dict[str, Any]) -> Response:
        self._last = request
        started = self.clock.now
        response = self._provider(request, started)
        limit = self.handler.timeouts.service_timeout_s
        if response.elapsed_s > limit and not response.timed_out:
            response = replace(
                response,
                status="FAILED",
                reason=SERVICE_TIMEOUT_REASON.format(request_id=request["RequestId"]),
                timed_out="ServiceTimeout",
            )
        self.responses.append(response)
        return response

    def _provider(self, request: dict[str, Any], started: float) -> Response:
        def answer(status: str, event: Mapping[str, Any], **fields: Any) -> Response:
            return Response(
                request=request,
                status=status,
                physical_id=event.get("PhysicalResourceId") or CREATE_FAILED_MARKER,
                data=dict(event.get("Data") or {}),
                reason=fields.pop("reason", status),
                elapsed_s=self.clock.now - started,
                **fields,
            )

        if request["RequestType"] == "Delete" and request.get("PhysicalResourceId") == CREATE_FAILED_MARKER:
            return answer("SUCCESS", request, handler_called=False)

        result, error, timed_out = self._invoke(self.handler.on_event, request)
        if error is not None:
            return answer("FAILED", request, reason=_reason(error), error=error, timed_out=timed_out)
        try:
            event = _response_event(request, result or {})
        except ValueError as e:
            return answer("FAILED", request, reason=_reason(e), error=e)
        if self.handler.is_complete is None:
            return answer("SUCCESS", event)

        polls = 0
        limits = self.handler.timeouts
        while True:
            polls += 1
            waiter_event = {**event, "ResponseURL": "..."}
            result, error, timed_out = self._invoke(self.handler.is_complete, waiter_event)
            if error is not None:
                return answer("FAILED", event, reason=_reason(error), error=error, timed_out=timed_out, polls=polls)
            result = result or {}
            if result.get("IsComplete"):
                merged = {**event, **result, "Data": {**(event.get("Data") or {}), **(result.get("Data") or {})}}
                merged.pop("IsComplete", None)
                return answer("SUCCESS", merged, polls=polls)
            if result.get("Data"):
                e = ValueError('"Data" is not allowed if "IsComplete" is "False"')
                return answer("FAILED", event, reason=_reason(e), error=e, polls=polls)
            if polls > limits.max_polls:
                why = "Operation timed out"
                return answer("FAILED", event, reason=why, timed_out=why, polls=polls)
            if self.clock.now - started > limits.service_timeout_s:
                return answer("FAILED", event, polls=polls)  # CloudFormation has given up; _send says so
            self.clock.sleep(limits.query_interval_s)

    def _invoke(
        self, function: Callable[[dict[str, Any], Any], Any], event: dict[str, Any]
    ) -> tuple[Any, BaseException | None, str | None]:
        """One Lambda invocation of a user function: (result, error, why it timed out)."""
        timeout = self.handler.timeouts.handler_s
        context = LambdaContext(self.clock, timeout)
        began = self.clock.now
        payload = json.loads(json.dumps(event))  # what Lambda delivers is JSON: no shared objects
        try:
            result = function(payload, context)
        except Exception as e:  # the Lambda runtime reports any exception as a function error
            error: BaseException | None = e
            result = None
        else:
            error = None
            json.dumps(result)  # a result Lambda could not serialize is a bug in the handler
        if self.clock.now - began > timeout:
            return None, TimeoutError(f"Task timed out after {timeout:.2f} seconds"), "Lambda timeout"
        return result, error, None


def _response_event(request: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
    """framework.js createResponseEvent: default and check the physical ID."""
    request_type = request["RequestType"]
    physical_id = result.get("PhysicalResourceId") or (
        request["RequestId"] if request_type == "Create" else request.get("PhysicalResourceId")
    )
    if request_type == "Delete" and physical_id != request.get("PhysicalResourceId"):
        raise ValueError(
            f'DELETE: cannot change the physical resource ID from "{request.get("PhysicalResourceId")}" to '
            f'"{result.get("PhysicalResourceId")}" during deletion'
        )
    return {**request, **result, "PhysicalResourceId": physical_id}


def _reason(error: BaseException) -> str:
    """The failure reason the framework sends: the JS error's stack around the user function's message."""
    return f"Error: {error}\n\nLogs: /aws/lambda/{FUNCTION_NAME}\n\n{FRAMEWORK_FRAMES}"
