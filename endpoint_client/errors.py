"""What went wrong with an invocation, whether trying again can help, and a reason short enough to show.

SageMaker reports a container's own non-2xx answer as ``ModelError`` (HTTP 424) carrying the
container's status (``OriginalStatusCode``) and body (``OriginalMessage``); its own refusals come as
``ValidationError`` (400), ``ModelNotReadyException`` (429), ``ThrottlingException``,
``InternalFailure`` (500), ``ServiceUnavailable`` (503); a failure in the middle of a stream arrives as
a ``ModelStreamError`` or ``InternalStreamFailure`` event.

Transient, worth another try: model not ready, throttling, SageMaker's 5xx, the container's 5xx or 429,
stream failures, connection errors and timeouts, and an inference component with no copy to serve the
request (scale-to-zero: the first request fails with ``ValidationError ... no capacity`` and, with a
scaling policy on ``NoCapacityInvocationFailures``, a copy starts within minutes). Permanent: the
container's 4xx (a bad request stays bad), any other ``ValidationError`` (no such endpoint or component),
access denied, a response that is not a chat completion, and a stream with a line or an event over
the decoder's cap (:class:`StreamLimitExceeded`: the same request would stream the same oversized answer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .chat import MalformedResponse, excerpt

# CloudFormation rejects a response over 4 KB, and the Provider framework adds its own text and the
# log stream to our reason: stay well below.
REASON_LIMIT_BYTES = 3000
BODY_EXCERPT_BYTES = 500

TRANSIENT_CODES = frozenset(
    {
        "ModelNotReadyException",
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalFailure",
        "InternalServerError",
        "InternalDependencyException",
        "InternalStreamFailure",
        "ModelStreamError",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
_NO_CAPACITY = re.compile(r"no\s+capacity|NoCapacity", re.IGNORECASE)


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size} bytes"


class StreamLimitExceeded(MalformedResponse):
    """An answer passed one of the client's caps, refused as soon as the bytes received pass it, never buffered whole.

    ``what`` is ``"line"`` or ``"event"`` (a stream decoder's caps), ``"stream"`` (all the bytes of a streamed
    answer) or ``"answer"`` (a whole non-streamed answer); ``limit`` is the cap in bytes and ``parameter`` the
    argument that sets it (``max_line_bytes``, ``max_event_bytes``, ``max_stream_bytes``, ``max_bytes``).
    """

    def __init__(self, what: str, limit: int, parameter: str) -> None:
        if what in ("stream", "answer"):
            head = f"the {'streamed' if what == 'stream' else 'non-streamed'} answer passed {_mib(limit)} in total"
        else:
            head = f"the stream sent a {what} over {_mib(limit)}"
        super().__init__(
            f"{head} ({parameter}={limit}); refused rather than buffered: "
            "a chat answer is far smaller, so the container's framing is broken or hostile"
        )
        self.what = what
        self.limit = limit
        self.parameter = parameter


@dataclass(frozen=True)
class ErrorInfo:
    """One failed call, classified. ``status`` is the container's status for a ``ModelError``."""

    code: str
    message: str
    transient: bool
    status: int | None = None
    body: str = ""  # first bytes of the error body, one line
    from_container: bool = False

    def describe(self) -> str:
        """One line: who answered what, and the start of the body."""
        if self.status is not None:
            source = "the model container" if self.from_container else "SageMaker"
            head = f"HTTP {self.status} from {source} ({self.code})"
            detail = f"body: {self.body}" if self.body else self.message
        else:
            head = self.code
            detail = "; ".join(p for p in (self.message, f"body: {self.body}" if self.body else "") if p)
        return f"{head}: {detail}" if detail else head


class InvocationError(Exception):
    """A failed invocation with its classification in ``info``."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.describe())
        self.info = info

    @property
    def transient(self) -> bool:
        return self.info.transient


def classify(error: BaseException) -> ErrorInfo:
    """Classify a botocore error (or our :class:`MalformedResponse`) for a retry decision."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectionError,
        HTTPClientError,
        ReadTimeoutError,
        ResponseStreamingError,
    )

    if isinstance(error, InvocationError):
        return error.info
    if isinstance(error, StreamLimitExceeded):
        return ErrorInfo(code="StreamLimitExceeded", message=str(error), transient=False)
    if isinstance(error, MalformedResponse):
        return ErrorInfo(code="MalformedResponse", message=str(error), transient=False, body=error.excerpt)
    if isinstance(error, ClientError):
        return _classify_client_error(error.response)
    if isinstance(error, ConnectionError | HTTPClientError | ReadTimeoutError | ResponseStreamingError):
        return ErrorInfo(code=type(error).__name__, message=excerpt(str(error)), transient=True)
    if isinstance(error, BotoCoreError):
        return ErrorInfo(code=type(error).__name__, message=excerpt(str(error)), transient=False)
    return ErrorInfo(code=type(error).__name__, message=excerpt(str(error)), transient=False)


def _classify_client_error(response: dict[str, Any]) -> ErrorInfo:
    error = response.get("Error") or {}
    code = str(error.get("Code") or "Unknown")
    message = str(error.get("Message") or "")
    http = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    if code == "ModelError":
        original = response.get("OriginalStatusCode")
        original = original if isinstance(original, int) else None
        body = excerpt(str(response.get("OriginalMessage") or message), BODY_EXCERPT_BYTES)
        transient = original is None or original >= 500 or original == 429
        return ErrorInfo(code, excerpt(message), transient, original, body, from_container=original is not None)
    if code in TRANSIENT_CODES:
        transient = True
    elif code == "ValidationError":
        transient = bool(_NO_CAPACITY.search(message))
    else:
        transient = isinstance(http, int) and (http >= 500 or http == 429)
    return ErrorInfo(code, excerpt(message, BODY_EXCERPT_BYTES), transient, http if isinstance(http, int) else None)


def short_reason(reason: str, limit: int = REASON_LIMIT_BYTES, *, suffix: str = "") -> str:
    """``reason`` + ``suffix`` in at most ``limit`` bytes of UTF-8; ``reason`` is cut, never ``suffix``.

    The cut falls on a character boundary and is marked with ``…``. A suffix longer than the limit on
    its own is cut too.
    """
    marker = "…"
    encoded_suffix = suffix.encode("utf-8")
    if len(encoded_suffix) > limit:
        return _cut(suffix, limit, marker)
    room = limit - len(encoded_suffix)
    return _cut(reason, room, marker) + suffix


def _cut(text: str, limit: int, marker: str) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    keep = max(limit - len(marker.encode("utf-8")), 0)
    head = encoded[:keep].decode("utf-8", errors="ignore")
    return (head + marker) if len((head + marker).encode("utf-8")) <= limit else head
