"""Chat completions through an asynchronous endpoint: submit (``InvokeEndpointAsync``), then wait for the answer in S3.

``submit_chat`` sends the request inline (``Body``, at most 128,000 bytes: botocore's sagemaker-runtime model,
``InvokeEndpointAsyncInput.Body``, "Body and InputLocation are mutually exclusive") or, for a larger request, from
an S3 object the caller uploads first (``InputLocation``). SageMaker answers 202 at once with the ``InferenceId``,
the ``OutputLocation`` its answer will be written to and the ``FailureLocation`` of an error (the response headers
``X-Amzn-SageMaker-OutputLocation`` / ``-FailureLocation``, same model). ``wait_for_answer`` polls both objects
until one exists, trying a read S3 failed for a transient reason again at the next poll: the output object holds
the container's ``/invocations`` response as it wrote it (a chat completion, read with the same parser as
``invoke_chat``), the failure object SageMaker's reason. ``remove`` deletes both, so a smoke test leaves nothing
behind.

Per request: ``InvocationTimeoutSeconds`` (1-3600, default 900) bounds the container's processing, and
``RequestTTLSeconds`` (60-21600, default 21600) the time it may wait in the queue (botocore, same shapes).

Standard library and boto3 only (bundled into the smoke-test Lambda).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .chat import excerpt, parse_completion
from .errors import BODY_EXCERPT_BYTES, ErrorInfo, InvocationError, classify
from .runtime import CONTENT_TYPE, InvocationResult, read_capped
from .sse import MAX_ANSWER_BYTES

# InvokeEndpointAsyncInput (botocore sagemaker-runtime service-2.json): Body max 128000; InvocationTimeoutSeconds
# 1-3600; RequestTTLSeconds 60-21600; InferenceId 1-64 printable characters.
MAX_INLINE_BODY_BYTES = 128_000
INVOCATION_TIMEOUT_RANGE = (1, 3600)
REQUEST_TTL_RANGE = (60, 21600)
DEFAULT_INVOCATION_TIMEOUT_S = 900
DEFAULT_REQUEST_TTL_S = 21600
MAX_INFERENCE_ID = 64
# How often the objects are looked for: the first answers of a warm endpoint come in seconds, long ones in minutes.
FIRST_POLL_S = 0.5
MAX_POLL_S = 5.0
FAILED = "AsyncInferenceFailed"  # our code for an answer that came as a failure object
EXPIRED = "AsyncAnswerTimedOut"  # no object within the caller's wait


@dataclass(frozen=True)
class Submitted:
    """An accepted request: where its answer (or its failure) will be, and when it was sent."""

    inference_id: str
    output_location: str
    failure_location: str | None
    submitted_at: float


def s3_location(uri: str) -> tuple[str, str]:
    """``s3://bucket/key``, or an S3 ``https://`` address (virtual-hosted ``bucket.s3.<region>.amazonaws.com/key`` or
    path-style ``s3.<region>.amazonaws.com/bucket/key``, as DestinationS3Uri's pattern allows) -> (bucket, key);
    ValueError otherwise."""
    bucket = key = ""
    if uri.startswith("s3://"):
        bucket, _, key = uri[5:].partition("/")
    elif uri.startswith("https://"):
        host, _, path = uri[8:].partition("/")
        if host.startswith(("s3.", "s3-")):  # path-style: the bucket is the first segment
            bucket, _, key = path.partition("/")
        elif ".s3." in host or ".s3-" in host:  # virtual-hosted: the bucket is the host up to its last .s3
            bucket = host.rsplit(".s3.", 1)[0] if ".s3." in host else host.rsplit(".s3-", 1)[0]
            key = path
    if not bucket or not key:
        raise ValueError(f"{uri!r} is not an S3 object location (s3://<bucket>/<key>)")
    return bucket, key


def new_inference_id(prefix: str = "") -> str:
    """A unique ``InferenceId`` starting with ``prefix`` (at most 64 characters: botocore's bound)."""
    identifier = f"{prefix}{uuid.uuid4().hex}"
    if len(identifier) > MAX_INFERENCE_ID:
        raise ValueError(f"inference id prefix {prefix!r} leaves no room for a unique part (64 characters in all)")
    return identifier


def _in_range(name: str, value: int | None, bounds: tuple[int, int]) -> None:
    if value is None:
        return
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name}={value!r} must be a whole number of seconds, {low}-{high}")


def submit_chat(
    client: Any,
    endpoint_name: str,
    body: Mapping[str, Any],
    *,
    inference_id: str | None = None,
    input_location: str | None = None,
    invocation_timeout_s: int | None = None,
    request_ttl_s: int | None = None,
    output_path_extension: str | None = None,
    clock: Callable[[], float] = time.time,
) -> Submitted:
    """Queue one chat completion (``body`` from ``build_chat_request``, not streamed: async answers are whole).

    The body goes inline unless ``input_location`` names an S3 object holding it (a body over 128,000 bytes must:
    it is refused here, before any call). ``output_path_extension`` (``S3OutputPathExtension``, "appended to the
    Amazon S3 output path where the inference response payload is stored") puts the answer below a path of its own.
    The object's name is SageMaker's (a UUID, not the inference id, in AWS's own notification samples): read the
    returned locations, never build them. Raises :class:`InvocationError` with the failure classified.
    """
    _in_range("invocation_timeout_s", invocation_timeout_s, INVOCATION_TIMEOUT_RANGE)
    _in_range("request_ttl_s", request_ttl_s, REQUEST_TTL_RANGE)
    if body.get("stream"):
        raise ValueError("an asynchronous endpoint writes one whole answer: send the request without stream=true")
    request: dict[str, Any] = {
        "EndpointName": endpoint_name,
        "ContentType": CONTENT_TYPE,
        "Accept": CONTENT_TYPE,
        "InferenceId": inference_id or new_inference_id(),
    }
    if input_location:
        s3_location(input_location)
        request["InputLocation"] = input_location
    else:
        raw = json.dumps(body).encode("utf-8")
        if len(raw) > MAX_INLINE_BODY_BYTES:
            raise ValueError(
                f"the request is {len(raw)} bytes; an inline body is at most {MAX_INLINE_BODY_BYTES} bytes "
                "(InvokeEndpointAsync Body): upload it to S3 and pass its location (input_location)"
            )
        request["Body"] = raw
    if invocation_timeout_s is not None:
        request["InvocationTimeoutSeconds"] = invocation_timeout_s
    if request_ttl_s is not None:
        request["RequestTTLSeconds"] = request_ttl_s
    if output_path_extension:
        request["S3OutputPathExtension"] = output_path_extension
    sent = clock()
    try:
        response = client.invoke_endpoint_async(**request)
    except Exception as e:
        raise InvocationError(classify(e)) from e
    output = response.get("OutputLocation")
    if not output:
        message = "InvokeEndpointAsync returned no OutputLocation"
        raise InvocationError(ErrorInfo(code="MalformedResponse", message=message, transient=False))
    return Submitted(
        inference_id=str(response.get("InferenceId") or request["InferenceId"]),
        output_location=output,
        failure_location=response.get("FailureLocation"),
        submitted_at=sent,
    )


def _read(s3: Any, location: str, max_bytes: int, *, cut: bool = False) -> bytes | None:
    """The object's bytes (at most ``max_bytes``: more is refused, or with ``cut`` its first ``max_bytes``), or None
    while it does not exist.

    Without ``s3:ListBucket`` on the bucket, S3 answers a missing key with 403 AccessDenied instead of 404 NoSuchKey
    (S3 API reference, GetObject "Permissions"); the grants here give GetObject on the answer prefixes only, so an
    AccessDenied counts as "not there yet" and the wait's deadline ends it (its message says so).
    """
    bucket, key = s3_location(location)
    try:
        response = s3.get_object(Bucket=bucket, Key=key)
    except Exception as e:
        # A ClientError's response is a dict; botocore's ReadTimeoutError has one too, None (requests' exception).
        response = getattr(e, "response", None)
        error = response.get("Error", {}) if isinstance(response, dict) else {}
        code, message = str(error.get("Code", "")), str(error.get("Message", ""))
        # A denied decryption is a real denial, not a missing object: S3 relays KMS's "not authorized to perform
        # kms:Decrypt" (re:Post knowledge center decrypt-kms-encrypted-objects-s3; the message format is not an API
        # contract, so a denial not naming kms reads as missing until the deadline, whose message says so).
        if code in ("NoSuchKey", "404", "NotFound") or (
            code in ("AccessDenied", "403") and "kms" not in message.lower()
        ):
            return None
        raise InvocationError(classify(e)) from e
    body = response["Body"]
    try:
        return body.read(max_bytes) if cut else read_capped(body, max_bytes)
    except Exception as e:
        raise InvocationError(classify(e)) from e
    finally:
        body.close()


def wait_for_answer(
    s3: Any,
    submitted: Submitted,
    *,
    deadline: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> InvocationResult:
    """The answer of ``submitted``, once its output object exists; ``latency_s`` is from submission to the poll
    that found it (queue time included: what an async caller waits).

    A failure object ends the wait with :class:`InvocationError` code ``AsyncInferenceFailed`` (permanent) and
    the object's first bytes; no object by ``deadline`` (a time on ``clock``) with code ``AsyncAnswerTimedOut``
    (transient: the request may still be queued). A read that fails for a transient reason (S3's ``SlowDown`` or
    another 5xx, a connection error or timeout) is tried again at the next poll until ``deadline``, and the
    timeout's message names the last such failure; a permanent one (a denied KMS decryption, an answer over
    ``max_bytes`` or not a chat completion) raises at once.
    """
    delay = FIRST_POLL_S
    unread: list[ErrorInfo] = []  # the transient read failures so far, each tried again at the next poll
    while True:
        raw = _read_again_later(unread, s3, submitted.output_location, max_bytes)
        if raw is not None:
            try:
                completion = parse_completion(raw)
            except Exception as e:
                raise InvocationError(classify(e)) from e
            return InvocationResult.of_completion(completion, clock() - submitted.submitted_at)
        if submitted.failure_location:
            failure = _read_again_later(unread, s3, submitted.failure_location, BODY_EXCERPT_BYTES, cut=True)
            if failure is not None:
                text = excerpt(failure, BODY_EXCERPT_BYTES)
                where = f"SageMaker wrote the failure object {submitted.failure_location}"
                info = ErrorInfo(code=FAILED, message=where, transient=False, body=text)
                raise InvocationError(info)
        left = deadline - clock()
        if left <= 0:
            waited = clock() - submitted.submitted_at
            message = (
                f"no answer or failure object {waited:.0f} s after submission ({submitted.output_location}; S3 "
                "answers AccessDenied for a missing object to a reader without s3:ListBucket, so a denied read "
                "looks the same)"
            )
            if unread:
                last = unread[-1]
                status = f", HTTP {last.status}" if last.status is not None else ""
                message += f"; {len(unread)} reads failed and were tried again, the last with {last.code}{status}"
            raise InvocationError(ErrorInfo(code=EXPIRED, message=message, transient=True))
        sleep(min(delay, left))
        delay = min(delay * 2, MAX_POLL_S)


def _read_again_later(
    unread: list[ErrorInfo], s3: Any, location: str, max_bytes: int, *, cut: bool = False
) -> bytes | None:
    """:func:`_read`, with a transient failure counted in ``unread`` and answered as "not there yet"."""
    try:
        return _read(s3, location, max_bytes, cut=cut)
    except InvocationError as e:
        if not e.info.transient:
            raise
        unread.append(e.info)
        return None


def remove(s3: Any, submitted: Submitted) -> None:
    """Delete the request's output and failure objects (absent ones too: DeleteObject answers 204 either way)."""
    for location in (submitted.output_location, submitted.failure_location):
        if location:
            bucket, key = s3_location(location)
            s3.delete_object(Bucket=bucket, Key=key)
