"""Incremental Server-Sent Events decoding, for payload parts that split the stream anywhere.

SageMaker hands a streamed response over in ``PayloadPart`` chunks whose boundaries have nothing to do
with the events inside: a part may end in the middle of an event, between the ``\\r`` and ``\\n`` of a
line end, or inside a multi-byte UTF-8 character. :class:`SseDecoder` keeps the bytes of the line it
cannot finish yet and decodes each line once it is whole, never part by part: a line end is an ASCII byte,
which never occurs inside a UTF-8 sequence, so decoding line by line gives the text the whole stream would.

Each part is scanned once: only the new bytes are searched for a line end, and the unfinished line and the
event's data are each kept in one ``bytearray``, so decoding is linear in the stream's length and memory is
about the bytes held (not a Python object per part: 2-byte parts once cost ~22x) however the parts fall. A
line or an event over its cap (``max_line_bytes``, ``max_event_bytes``) is refused with
:class:`~endpoint_client.errors.StreamLimitExceeded` as soon as the bytes received pass the cap, never
after buffering the rest; ``stream_chat`` also caps a whole streamed answer (``MAX_STREAM_BYTES``, 64 MiB)
and ``invoke_chat`` a whole non-streamed one (``MAX_ANSWER_BYTES``, 6 MiB), for the reasons given by them.
The line and event defaults, 16 MiB each, hold a plausible whole answer many times over: the
largest legitimate event is an engine sending a whole long answer as one chunk (131 072 tokens, the
playground's highest ``max_tokens``, at up to ~16 bytes a token once JSON-escaped is about 2 MiB), while a
token-by-token stream sends events of a few hundred bytes (a few KiB with ``top_logprobs``). Buffering 16
MiB costs the smoke-test Lambda (256 MB) well under its memory.

It follows the WHATWG event-stream rules: ``\\n``, ``\\r\\n`` and ``\\r`` end a line; a blank line
dispatches the event; ``:`` starts a comment (a keep-alive); ``data`` lines are joined with ``\\n``;
``event`` and ``id`` set the type and the last event id (which persists across events). The OpenAI
``data: [DONE]`` sentinel ends the stream: it is not returned as an event, :attr:`SseDecoder.done` says
it was seen, and anything after it is ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .errors import StreamLimitExceeded

DONE = "[DONE]"
_BOM = "\ufeff"
MAX_LINE_BYTES = 16 * 2**20
MAX_EVENT_BYTES = 16 * 2**20
# All the bytes of one streamed answer. A 131 072-token answer (the playground's highest max_tokens) streamed a
# chunk per token, at ~300 bytes per vLLM ``chat.completion.chunk`` (id, model, created, choices, usage), is
# ~38 MiB; the text kept from a stream is at most the bytes read, so 64 MiB also keeps a hostile stream's
# answer well inside the smoke-test Lambda's 256 MB. No service bound exists for a response stream.
MAX_STREAM_BYTES = 64 * 2**20
# A whole non-streamed answer: InvokeEndpoint's response Body is a BodyBlob of at most 6291456 bytes
# (botocore data/sagemaker-runtime/2017-05-13/service-2.json); the OpenAI-compatible path gets the same cap.
MAX_ANSWER_BYTES = 6 * 2**20


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive whole number of bytes, not {value!r}")
    return value


def _line_ends(chunk: bytes, start: int) -> Iterator[tuple[int, int]]:
    """(where a line's text ends, where the next line starts) for each line end in ``chunk[start:]``.

    WHATWG HTML, server-sent events, "Parsing an event stream": end-of-line = ( cr lf / cr / lf ).
    ``bytes.find`` for each kind, each searched again only past the one consumed: one pass, in C.
    """
    lf, cr = chunk.find(b"\n", start), chunk.find(b"\r", start)
    while lf != -1 or cr != -1:
        if cr == -1 or (lf != -1 and lf < cr):
            yield lf, lf + 1
            lf = chunk.find(b"\n", lf + 1)
            continue
        after = cr + 2 if lf == cr + 1 else cr + 1
        yield cr, after
        if after == cr + 2:
            lf = chunk.find(b"\n", after)
        cr = chunk.find(b"\r", after)


class _PendingLine:
    """The bytes of a line whose end has not arrived, in one ``bytearray``: memory is the bytes held.

    A list of the parts as they came would cost a bytes object (33 bytes of header) and a list slot (8) per
    part: about 22x the bytes held when a server sends 2-byte parts, so a 16 MiB cap would cost ~350 MB. A
    ``bytearray`` grows in place, over-allocating about 1/8 (CPython ``bytearray_resize``), and appending is
    amortised linear.
    """

    def __init__(self, limit: int, parameter: str = "max_line_bytes") -> None:
        self.limit = limit
        self.parameter = parameter
        self.buffer = bytearray()

    @property
    def size(self) -> int:
        return len(self.buffer)

    def check(self, more: int) -> None:
        if len(self.buffer) + more > self.limit:
            self.clear()
            raise StreamLimitExceeded("line", self.limit, self.parameter)

    def add(self, part: bytes) -> None:
        self.check(len(part))
        self.buffer += part

    def finish(self, last: bytes) -> bytes | bytearray:
        """The whole line, ending with ``last``; the buffer is empty afterwards (the line is not copied)."""
        self.check(len(last))
        if not self.buffer:
            return last
        line = self.buffer
        line += last
        self.buffer = bytearray()
        return line

    def clear(self) -> None:
        self.buffer = bytearray()


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

    ``max_line_bytes`` caps one line as received (its end not counted) and ``max_event_bytes`` the data
    of one event (its ``data`` values and the ``\\n`` joining them, in UTF-8); passing either raises
    :class:`~endpoint_client.errors.StreamLimitExceeded` from the ``feed`` that crossed it, and every
    later ``feed`` raises it again.
    """

    def __init__(self, *, max_line_bytes: int = MAX_LINE_BYTES, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_line_bytes = _positive("max_line_bytes", max_line_bytes)
        self.max_event_bytes = _positive("max_event_bytes", max_event_bytes)
        self._pending = _PendingLine(self.max_line_bytes)
        self._skip_lf = False  # the previous part ended with "\r": a leading "\n" belongs to it
        self._at_start = True  # a byte order mark is allowed only at the start of the first line
        # The event's data as UTF-8, its values joined by "\n", in one buffer (a list of str values would cost
        # ~50 bytes per 1-byte "data: x" line); ``_has_data`` tells "data" with an empty value from no data line.
        self._data = bytearray()
        self._has_data = False
        self._event = ""
        self._last_id = ""
        self._closed = False
        self._failed: StreamLimitExceeded | None = None
        self.done = False
        self.truncated = False
        self.events_seen = 0
        self.comments_seen = 0

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self._closed:
            raise ValueError("feed() after close()")
        if self._failed is not None:
            raise self._failed
        if self.done:
            return []
        try:
            return self._consume(bytes(chunk))
        except StreamLimitExceeded as e:
            self._failed = e
            self._clear_data()
            raise

    def close(self) -> list[SseEvent]:
        """End of stream: dispatch a complete last event."""
        if self._closed:
            return []
        self._closed = True
        if self.done or self._failed is not None:
            return []
        events: list[SseEvent] = []
        if self._pending.size:
            # Cut off mid-line: the event it belongs to is incomplete, whatever lines it already has.
            self.truncated = True
            self._pending.clear()
            self._clear_data()
        if self._has_data:
            dispatched = self._dispatch()
            if dispatched is not None:
                events.append(dispatched)
        return events

    def _consume(self, chunk: bytes) -> list[SseEvent]:
        if not chunk:
            return []
        line_start = 0
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                line_start = 1
        events: list[SseEvent] = []
        # Only this part is searched: the pending line holds no line end, so none can start before it.
        for text_end, next_start in _line_ends(chunk, line_start):
            line = self._pending.finish(chunk[line_start:text_end])
            line_start = next_start
            if next_start == text_end + 1 == len(chunk) and chunk[text_end] == 0x0D:
                # A bare "\r" ends the part: the "\n" of a "\r\n" may come with the next one. (A "\r\n" whole
                # in this part is done: a "\n" opening the next part is a blank line of its own.)
                self._skip_lf = True
            event = self._line(line)
            if event is not None:
                events.append(event)
            if self.done:
                self._pending.clear()
                return events
        self._pending.add(chunk[line_start:])
        return events

    def _clear_data(self) -> None:
        self._data = bytearray()
        self._has_data = False

    def _line(self, raw: bytes | bytearray) -> SseEvent | None:
        # WHATWG "Interpreting an event stream": UTF-8 decode (bad bytes become U+FFFD, one leading BOM goes).
        line = raw.decode("utf-8", errors="replace")
        if self._at_start:
            self._at_start = False
            line = line.removeprefix(_BOM)
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            self.comments_seen += 1
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            # The event's data in UTF-8 bytes: its values and the "\n"s that join them.
            encoded = value.encode("utf-8")
            if len(self._data) + len(encoded) + self._has_data > self.max_event_bytes:
                raise StreamLimitExceeded("event", self.max_event_bytes, "max_event_bytes")
            if self._has_data:
                self._data += b"\n"
            self._data += encoded
            self._has_data = True
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._last_id = value
        # "retry" and unknown fields are ignored, as the standard says.
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._has_data:
            self._event = ""
            return None
        data = self._data.decode("utf-8")  # encoded from str above: always valid
        self._clear_data()
        event = SseEvent(data=data, event=self._event or "message", id=self._last_id)
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
