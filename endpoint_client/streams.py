"""The stream decoder for an engine's framing: ``sse`` (vLLM, SGLang) or ``jsonlines`` (LMI).

Which one an engine uses is data (``stream_format`` in constructs_lib/data/engines.json), passed to
the smoke test as a resource property and to ``python -m llmops.invoke`` by ``--engine``.
"""

from __future__ import annotations

from .jsonlines import JsonLinesDecoder
from .sse import MAX_EVENT_BYTES, MAX_LINE_BYTES, SseDecoder

DECODERS = {"sse": SseDecoder, "jsonlines": JsonLinesDecoder}
STREAM_FORMATS = tuple(DECODERS)


def new_decoder(
    stream_format: str = "sse", *, max_line_bytes: int = MAX_LINE_BYTES, max_event_bytes: int = MAX_EVENT_BYTES
) -> SseDecoder | JsonLinesDecoder:
    """A decoder for ``stream_format`` with these caps (:mod:`endpoint_client.sse` says why 16 MiB)."""
    try:
        decoder = DECODERS[stream_format]
    except KeyError:
        raise ValueError(f"stream format {stream_format!r} is not one of {', '.join(STREAM_FORMATS)}") from None
    return decoder(max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes)
