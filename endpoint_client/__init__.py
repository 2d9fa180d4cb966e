"""A small client for chat models on SageMaker endpoints: SSE reassembly, chat requests, invocations.

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
from .errors import REASON_LIMIT_BYTES, ErrorInfo, InvocationError, classify, short_reason
from .runtime import InvocationResult, invoke_chat, stream_chat
from .sse import DONE, SseDecoder, SseEvent, iter_events

__all__ = [
    "DONE",
    "REASON_LIMIT_BYTES",
    "Completion",
    "Delta",
    "ErrorInfo",
    "InvocationError",
    "InvocationResult",
    "MalformedResponse",
    "SseDecoder",
    "SseEvent",
    "build_chat_request",
    "classify",
    "excerpt",
    "invoke_chat",
    "iter_events",
    "parse_completion",
    "parse_delta",
    "short_reason",
    "stream_chat",
]
