"""Incremental JSON Lines decoding, for streams that frame each chunk as one line of JSON.

SageMaker LMI (DJL Serving) streams a chat completion as ``application/jsonlines``: every
``chat.completion.chunk`` object on a line of its own, with no ``data:`` prefix and no ``[DONE]``
sentinel; the stream ends when the response does, after an empty line
(deepjavalibrary/djl-serving, engines/python/setup/djl_python/async_utils.py ``_create_output`` and
``lmi_vllm/request_response_utils.py`` ``vllm_stream_output_formatter``; serving/docs/lmi/user_guides/
chat_input_output_schema.md). An error after the stream started arrives as a last line
``{"code": 424, "error": "..."}`` without a newline (engines/python/src/main/java/ai/djl/python/engine/
Request.java ``addResponse``), which the chat layer reports as an error event. Payload parts split the
stream anywhere, as with SSE, so lines are reassembled across parts and bytes go through one
incremental UTF-8 decoder.

:class:`JsonLinesDecoder` has the interface of :class:`~endpoint_client.sse.SseDecoder` (``feed``,
``close``, ``done``, ``truncated``, ``events_seen``), returning each non-blank line as an
:class:`~endpoint_client.sse.SseEvent` whose ``data`` is the line, so the chat layer reads both alike.
"""

from __future__ import annotations

import codecs
import json

from .sse import SseEvent


class JsonLinesDecoder:
    """Feed it bytes as they arrive; it returns the lines each feed completes.

    ``done`` turns true at ``close()`` when the stream ended at a line boundary: JSON Lines has no
    end sentinel, so a complete last line is the end. A last line without its newline is still
    returned (a server may omit the final newline) if it parses as a whole JSON value; anything else
    left over was cut off, and :attr:`truncated` says so.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._at_start = True
        self._closed = False
        self.done = False
        self.truncated = False
        self.events_seen = 0

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self._closed:
            raise ValueError("feed() after close()")
        return self._consume(self._decoder.decode(chunk))

    def close(self) -> list[SseEvent]:
        """End of stream: decode what is left; a complete last line without its newline still counts."""
        if self._closed:
            return []
        events = self._consume(self._decoder.decode(b"", final=True))
        self._closed = True
        rest = self._pending.strip()
        self._pending = ""
        if rest:
            try:
                json.loads(rest)
            except json.JSONDecodeError:
                self.truncated = True
                return events
            events.append(self._event(rest))
        self.done = True
        return events

    def _consume(self, text: str) -> list[SseEvent]:
        if not text:
            return []
        if self._at_start:
            self._at_start = False
            text = text.removeprefix("\ufeff")
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()  # after the last newline: not complete yet
        return [self._event(line.strip()) for line in lines if line.strip()]

    def _event(self, line: str) -> SseEvent:
        self.events_seen += 1
        return SseEvent(data=line)
