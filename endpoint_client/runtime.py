"""Chat completions through ``sagemaker-runtime``, whole or streamed, with their timing.

``invoke_chat`` calls ``InvokeEndpoint``; ``stream_chat`` calls ``InvokeEndpointWithResponseStream``,
feeds each ``PayloadPart`` to an :class:`~endpoint_client.sse.SseDecoder` and hands every delta to a
callback as it arrives. Both return an :class:`InvocationResult` or raise
:class:`~endpoint_client.errors.InvocationError` with the failure classified for a retry decision.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .chat import Completion, Delta, parse_completion, parse_delta
from .errors import ErrorInfo, InvocationError, StreamLimitExceeded, classify
from .sse import MAX_ANSWER_BYTES, MAX_EVENT_BYTES, MAX_LINE_BYTES, MAX_STREAM_BYTES, _positive
from .streams import new_decoder

CONTENT_TYPE = "application/json"


@dataclass(frozen=True)
class InvocationResult:
    """What came back and how fast.

    ``tokens`` is ``usage.completion_tokens`` when the engine reports it (``token_source="usage"``),
    else the number of content and reasoning deltas (``"deltas"``; one per token for vLLM and SGLang)
    or, for a non-streamed answer without usage, its whitespace-separated words (``"words"``).
    """

    content: str
    reasoning: str
    streamed: bool
    latency_s: float
    time_to_first_token_s: float | None
    tokens: int
    token_source: str
    done: bool = True  # a streamed answer ended properly: data: [DONE] (SSE), a complete last line (JSON Lines)
    finish_reason: str | None = None
    deltas: int = 0
    prompt_tokens: int | None = None  # usage.prompt_tokens when the engine reports it: the input's tokens

    @classmethod
    def of_completion(cls, completion: Completion, latency_s: float) -> InvocationResult:
        """A non-streamed answer: tokens as the engine's usage counts them, else its whitespace-separated words."""
        tokens, source = completion.completion_tokens, "usage"
        if tokens is None:
            tokens, source = len((completion.reasoning + " " + completion.content).split()), "words"
        return cls(
            content=completion.content,
            reasoning=completion.reasoning,
            streamed=False,
            latency_s=latency_s,
            time_to_first_token_s=None,
            tokens=tokens,
            token_source=source,
            finish_reason=completion.finish_reason,
            prompt_tokens=_count((completion.usage or {}).get("prompt_tokens")),
        )

    @property
    def tokens_per_second(self) -> float:
        """Decoding speed: after the first token for a stream, over the whole call otherwise."""
        if self.streamed and self.time_to_first_token_s is not None and self.tokens > 1:
            span = self.latency_s - self.time_to_first_token_s
            if span > 0:
                return (self.tokens - 1) / span
        return self.tokens / self.latency_s if self.latency_s > 0 else 0.0


def _request(endpoint_name: str, body: Mapping[str, Any], inference_component_name: str | None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "EndpointName": endpoint_name,
        "ContentType": CONTENT_TYPE,
        "Body": json.dumps(body).encode("utf-8"),
    }
    if inference_component_name:
        request["InferenceComponentName"] = inference_component_name
    return request


class ByteBudget:
    """The bytes an answer may still send: ``take(n)`` raises StreamLimitExceeded once the total passes ``limit``."""

    def __init__(self, limit: int, what: str = "stream", parameter: str = "max_stream_bytes") -> None:
        self.limit = _positive(parameter, limit)
        self.what = what
        self.parameter = parameter
        self.used = 0

    def take(self, size: int) -> None:
        self.used += size
        if self.used > self.limit:
            raise StreamLimitExceeded(self.what, self.limit, self.parameter)


def read_capped(body: Any, max_bytes: int) -> bytes:
    """A whole answer from a file-like ``body``, refused once it passes ``max_bytes`` (never read further)."""
    _positive("max_bytes", max_bytes)
    raw = body.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise StreamLimitExceeded("answer", max_bytes, "max_bytes")
    return raw


def invoke_chat(
    client: Any,
    endpoint_name: str,
    body: Mapping[str, Any],
    *,
    inference_component_name: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> InvocationResult:
    """One non-streamed chat completion (``body`` from :func:`~endpoint_client.chat.build_chat_request`).

    An answer over ``max_bytes`` (6 MiB, InvokeEndpoint's own bound, by default) is refused with a permanent
    ``StreamLimitExceeded`` after reading one byte past the cap.
    """
    started = clock()
    try:
        request = _request(endpoint_name, body, inference_component_name)
        response = client.invoke_endpoint(Accept=CONTENT_TYPE, **request)
        raw = read_capped(response["Body"], max_bytes)
        completion = parse_completion(raw)
    except Exception as e:
        raise _wrapped(e) from e
    return InvocationResult.of_completion(completion, clock() - started)


class _Accumulator:
    """The answer so far, built from the events of one stream."""

    def __init__(self, started: float, clock: Callable[[], float], on_delta: Callable[[Delta], None] | None):
        self._started = started
        self._clock = clock
        self._on_delta = on_delta
        self.first_token: float | None = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.deltas = 0
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.finish_reason: str | None = None

    def add(self, data: str) -> None:
        delta = parse_delta(data)
        if delta.usage is not None:
            self.usage_tokens = _usage_tokens(delta.usage, self.usage_tokens)
            self.prompt_tokens = _count(delta.usage.get("prompt_tokens"), self.prompt_tokens)
        if delta.finish_reason:
            self.finish_reason = delta.finish_reason
        if not (delta.content or delta.reasoning):
            return
        if self.first_token is None:
            self.first_token = self._clock() - self._started
        self.deltas += 1
        self.content.append(delta.content)
        self.reasoning.append(delta.reasoning)
        if self._on_delta is not None:
            self._on_delta(delta)

    def result(self, *, latency_s: float, done: bool) -> InvocationResult:
        """The streamed answer: tokens as the engine's usage counts them, else one per content delta."""
        tokens, source = (self.usage_tokens, "usage") if self.usage_tokens is not None else (self.deltas, "deltas")
        return InvocationResult(
            content="".join(self.content),
            reasoning="".join(self.reasoning),
            streamed=True,
            latency_s=latency_s,
            time_to_first_token_s=self.first_token,
            tokens=tokens,
            token_source=source,
            done=done,
            finish_reason=self.finish_reason,
            deltas=self.deltas,
            prompt_tokens=self.prompt_tokens,
        )


def stream_chat(
    client: Any,
    endpoint_name: str,
    body: Mapping[str, Any],
    *,
    inference_component_name: str | None = None,
    on_delta: Callable[[Delta], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    stream_format: str = "sse",
    max_line_bytes: int = MAX_LINE_BYTES,
    max_event_bytes: int = MAX_EVENT_BYTES,
    max_stream_bytes: int = MAX_STREAM_BYTES,
    deadline: float | None = None,
) -> InvocationResult:
    """One streamed chat completion; ``on_delta`` sees each content or reasoning delta as it arrives.

    ``stream_format`` is the engine's framing: ``sse`` (``data:`` events ending in ``[DONE]``) or
    ``jsonlines`` (one chunk a line, as LMI streams). A line or event over ``max_line_bytes`` /
    ``max_event_bytes`` (16 MiB each by default) ends the call with an :class:`InvocationError` whose code
    is ``StreamLimitExceeded`` (permanent), and so does a stream whose bytes pass ``max_stream_bytes`` in all
    (64 MiB by default). The stream is closed however this ends (an exception, or ``KeyboardInterrupt`` in the
    callback).

    ``deadline`` (a time on ``clock``): the whole answer is due by then, else an :class:`InvocationError` of
    code ``RequestTimedOut``. It is checked after every event-stream message and every decoded event, whatever
    it carries (usage only, a role, a comment); a read itself waits up to the client's ``read_timeout``
    (botocore Config), so the call ends within about the deadline plus one read. ``latency_s`` ends when the
    answer is complete, before the stream is closed.
    """
    started = clock()

    def check_deadline() -> None:
        if deadline is not None and clock() >= deadline:
            message = f"no complete answer by the deadline ({clock() - started:.3f} s)"
            raise InvocationError(ErrorInfo(code="RequestTimedOut", message=message, transient=True))

    answer = _Accumulator(started, clock, on_delta)
    decoder = new_decoder(stream_format, max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes)
    budget = ByteBudget(max_stream_bytes)
    stream = None
    try:
        response = client.invoke_endpoint_with_response_stream(
            **_request(endpoint_name, body, inference_component_name)
        )
        stream = response["Body"]
        for event in stream:
            if "PayloadPart" not in event:
                _raise_stream_failure(event)
                continue
            part = event["PayloadPart"].get("Bytes", b"")
            budget.take(len(part))
            for sse in decoder.feed(part):
                answer.add(sse.data)
                check_deadline()
            if decoder.done:
                break
            check_deadline()
        for sse in decoder.close():
            answer.add(sse.data)
        latency_s = clock() - started  # closing the stream (reading its end for the connection) is not latency
    except (InvocationError, KeyboardInterrupt):
        raise
    except Exception as e:
        raise _wrapped(e) from e
    finally:
        if stream is not None:
            stream.close()
    return answer.result(latency_s=latency_s, done=decoder.done)


def _raise_stream_failure(event: Mapping[str, Any]) -> None:
    """botocore raises stream errors as ``EventStreamError``; a parser that passes them on lands here."""
    for code in ("ModelStreamError", "InternalStreamFailure"):
        if code in event:
            detail = event[code] if isinstance(event[code], dict) else {}
            info = ErrorInfo(code=code, message=str(detail.get("Message", "")), transient=True)
            raise InvocationError(info)


def _usage_tokens(usage: Mapping[str, Any], previous: int | None) -> int | None:
    return _count(usage.get("completion_tokens"), previous)


def _count(value: Any, previous: int | None = None) -> int | None:
    """A usage count (a whole number, 0 or more), else ``previous``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return previous


def _wrapped(error: Exception) -> InvocationError:
    return error if isinstance(error, InvocationError) else InvocationError(classify(error))
