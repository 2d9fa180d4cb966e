"""Incremental JSON Lines decoding, for streams that frame each chunk as one line of JSON.

SageMaker LMI (DJL Serving) streams a chat completion as ``application/jsonlines``: every
``chat.completion.chunk`` object on a line of its own, with no ``data:`` prefix and no ``[DONE]``
sentinel; the stream ends when the response does, after an empty line
(deepjavalibrary/djl-serving, engines/python/setup/djl_python/async_utils.py ``_create_output`` and
``lmi_vllm/request_response_utils.py`` ``vllm_stream_output_formatter``; serving/docs/lmi/user_guides/
chat_input_output_schema.md). An error after the stream started arrives as a last line
``{"code": 424, "error": "..."}`` without a newline (engines/python/src/main/java/ai/djl/python/engine/
Request.java ``addResponse``), which the chat layer reports as an error event. Payload parts split the
stream anywhere, as with SSE, so lines are reassembled across parts, each part is searched for a line end
only once (linear time), a line is decoded from UTF-8 once it is whole, and a line over ``max_line_bytes``
(16 MiB by default, as for SSE: see :mod:`endpoint_client.sse` for why) is refused with
:class:`~endpoint_client.errors.StreamLimitExceeded` as soon as the bytes received pass it.

:class:`JsonLinesDecoder` has the interface of :class:`~endpoint_client.sse.SseDecoder` (``feed``,
``close``, ``done``, ``truncated``, ``events_seen``), returning each non-blank line as an
:class:`~endpoint_client.sse.SseEvent` whose ``data`` is the line, so the chat layer reads both alike.
"""

from __future__ import annotations

import json

from .errors import StreamLimitExceeded
from .sse import _BOM, MAX_EVENT_BYTES, MAX_LINE_BYTES, SseEvent, _PendingLine, _positive


class JsonLinesDecoder:
    """Feed it bytes as they arrive; it returns the lines each feed completes.

    ``done`` turns true at ``close()`` when the stream ended at a line boundary: JSON Lines has no
    end sentinel, so a complete last line is the end. A last line without its newline is still
    returned (a server may omit the final newline) if it parses as a whole JSON value; anything else
    left over was cut off, and :attr:`truncated` says so.

    A line is an event here, so the smaller of ``max_line_bytes`` and ``max_event_bytes`` caps it (both
    are accepted so that either decoder takes the same arguments); passing it raises
    :class:`~endpoint_client.errors.StreamLimitExceeded`, and so does every later ``feed``.
    """

    def __init__(self, *, max_line_bytes: int = MAX_LINE_BYTES, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_line_bytes = _positive("max_line_bytes", max_line_bytes)
        self.max_event_bytes = _positive("max_event_bytes", max_event_bytes)
        self._pending = _PendingLine(min(self.max_line_bytes, self.max_event_bytes))
        if self.max_event_bytes < self.max_line_bytes:
            self._pending.parameter = "max_event_bytes"
        self._at_start = True
        self._closed = False
        self._failed: StreamLimitExceeded | None = None
        self.done = False
        self.truncated = False
        self.events_seen = 0

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self._closed:
            raise ValueError("feed() after close()")
        if self._failed is not None:
            raise self._failed
        try:
            return self._consume(bytes(chunk))
        except StreamLimitExceeded as e:
            self._failed = e
            raise

    def close(self) -> list[SseEvent]:
        """End of stream: a complete last line without its newline still counts."""
        if self._closed:
            return []
        self._closed = True
        if self._failed is not None:
            return []
        rest = self._text(self._pending.finish(b"")).strip()
        if rest:
            try:
                json.loads(rest)
            except json.JSONDecodeError:
                self.truncated = True
                return []
            except (ValueError, RecursionError):
                pass  # whole, but not for Python (too deep, too many digits): parse_delta says so
            self.done = True
            return [self._event(rest)]
        self.done = True
        return []

    def _consume(self, chunk: bytes) -> list[SseEvent]:
        events: list[SseEvent] = []
        start = 0
        # Only this part is searched: the pending line holds no "\n", so no line can end before it.
        while (end := chunk.find(b"\n", start)) != -1:
            line = self._text(self._pending.finish(chunk[start:end])).strip()
            start = end + 1
            if line:
                events.append(self._event(line))
        self._pending.add(chunk[start:])
        return events

    def _text(self, raw: bytes) -> str:
        text = raw.decode("utf-8", errors="replace")
        if self._at_start:
            self._at_start = False
            text = text.removeprefix(_BOM)
        return text

    def _event(self, line: str) -> SseEvent:
        self.events_seen += 1
        return SseEvent(data=line)
