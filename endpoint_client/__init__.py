"""A small client for chat models on SageMaker endpoints: stream reassembly (SSE, JSON Lines), chat, invocations.

Standard library and boto3 only: it is bundled into the smoke-test Lambda and used by
``python -m llmops.invoke``.
"""

from .chat import (
    Completion,
    Delta,
    MalformedResponse,
    build_chat_request,
    excerpt,
    parse_completion,
    parse_delta,
)
from .errors import REASON_LIMIT_BYTES, ErrorInfo, InvocationError, StreamLimitExceeded, classify, short_reason
from .jsonlines import JsonLinesDecoder
from .openai_http import OpenAiEndpoint, check_base_url, token_from_env
from .runtime import InvocationResult, invoke_chat, stream_chat
from .sse import (
    DONE,
    MAX_ANSWER_BYTES,
    MAX_EVENT_BYTES,
    MAX_LINE_BYTES,
    MAX_STREAM_BYTES,
    SseDecoder,
    SseEvent,
    iter_events,
)
from .streams import STREAM_FORMATS, new_decoder

__all__ = [
    "DONE",
    "MAX_ANSWER_BYTES",
    "MAX_EVENT_BYTES",
    "MAX_LINE_BYTES",
    "MAX_STREAM_BYTES",
    "REASON_LIMIT_BYTES",
    "STREAM_FORMATS",
    "Completion",
    "Delta",
    "ErrorInfo",
    "InvocationError",
    "InvocationResult",
    "JsonLinesDecoder",
    "MalformedResponse",
    "OpenAiEndpoint",
    "SseDecoder",
    "SseEvent",
    "StreamLimitExceeded",
    "build_chat_request",
    "check_base_url",
    "classify",
    "excerpt",
    "invoke_chat",
    "iter_events",
    "new_decoder",
    "parse_completion",
    "parse_delta",
    "short_reason",
    "stream_chat",
    "token_from_env",
]
