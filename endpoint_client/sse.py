"""Incremental Server-Sent Events decoding, for payload parts that split the stream anywhere.

SageMaker hands a streamed response over in ``PayloadPart`` chunks whose boundaries have nothing to do
with the events inside: a part may end in the middle of an event, between the ``\\r`` and ``\\n`` of a
line end, or inside a multi-byte UTF-8 character. :class:`SseDecoder` keeps what it cannot finish yet
and decodes bytes with one incremental UTF-8 decoder for the whole stream, never part by part.

It follows the WHATWG event-stream rules: ``\\n``, ``\\r\\n`` and ``\\r`` end a line; a blank line
dispatches the event; ``:`` starts a comment (a keep-alive); ``data`` lines are joined with ``\\n``;
``event`` and ``id`` set the type and the last event id (which persists across events). The OpenAI
``data: [DONE]`` sentinel ends the stream: it is not returned as an event, :attr:`SseDecoder.done` says
it was seen, and anything after it is ignored.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

DONE = "[DONE]"
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event: its data (lines joined with ``\\n``), type and the last event id."""

    data: str
    event: str = "message"
    id: str = ""


class SseDecoder:
    """Feed it bytes as they arrive; it returns the events each feed completes.

    ``close()`` ends the stream. An event whose lines all arrived but whose closing blank line did not
    is still dispatched (a server that stopped without the final blank line said everything it meant
    to); an event cut off in the middle of a line is incomplete and dropped, and :attr:`truncated`
    says so.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # text after the last line end
        self._skip_lf = False  # the previous text ended with "\r": a leading "\n" belongs to it
        self._at_start = True  # a byte order mark is allowed only here
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._closed = False
        self.done = False
        self.truncated = False
        self.events_seen = 0
        self.comments_seen = 0

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self._closed:
            raise ValueError("feed() after close()")
        if self.done:
            return []
        return self._consume(self._decoder.decode(chunk))

    def close(self) -> list[SseEvent]:
        """End of stream: decode what is left and dispatch a complete last event."""
        if self._closed:
            return []
        events = [] if self.done else self._consume(self._decoder.decode(b"", final=True))
        self._closed = True
        if self.done:
            return events
        if self._pending:
            # Cut off mid-line: the event it belongs to is incomplete, whatever lines it already has.
            self.truncated = True
            self._pending = ""
            self._data = []
        if self._data:
            dispatched = self._dispatch()
            if dispatched is not None:
                events.append(dispatched)
        return events

    def _consume(self, text: str) -> list[SseEvent]:
        if not text:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if text.startswith("\n"):
                text = text[1:]
        if self._at_start and text:
            self._at_start = False
            text = text.removeprefix("\ufeff")
        buffer = self._pending + text
        events: list[SseEvent] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            line = buffer[start : match.start()]
            start = match.end()
            if match.group() == "\r" and start == len(buffer):
                self._skip_lf = True  # the "\n" of this "\r\n" may come with the next part
            event = self._line(line)
            if event is not None:
                events.append(event)
            if self.done:
                self._pending = ""
                return events
        self._pending = buffer[start:]
        return events

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            self.comments_seen += 1
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._last_id = value
        # "retry" and unknown fields are ignored, as the standard says.
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._event = ""
            return None
        data = "\n".join(self._data)
        event = SseEvent(data=data, event=self._event or "message", id=self._last_id)
        self._data = []
        self._event = ""
        if data == DONE:
            self.done = True
            return None
        self.events_seen += 1
        return event


def iter_events(parts: Iterable[bytes], decoder: SseDecoder | None = None) -> Iterator[SseEvent]:
    """The events of a stream given as byte parts; pass ``decoder`` to read ``done`` afterwards."""
    decoder = decoder or SseDecoder()
    for part in parts:
        yield from decoder.feed(part)
        if decoder.done:
            break
    yield from decoder.close()
