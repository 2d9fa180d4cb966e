"""The stream decoder for an engine's framing: ``sse`` (vLLM, SGLang) or ``jsonlines`` (LMI).

Which one an engine uses is data (``stream_format`` in constructs_lib/data/engines.json), passed to
the smoke test as a resource property and to ``python -m llmops.invoke`` by ``--engine``.
"""

from __future__ import annotations

from .jsonlines import JsonLinesDecoder
from .sse import SseDecoder

DECODERS = {"sse": SseDecoder, "jsonlines": JsonLinesDecoder}
STREAM_FORMATS = tuple(DECODERS)


def new_decoder(stream_format: str = "sse") -> SseDecoder | JsonLinesDecoder:
    try:
        return DECODERS[stream_format]()
    except KeyError:
        raise ValueError(f"stream format {stream_format!r} is not one of {', '.join(STREAM_FORMATS)}") from None
