"""OpenAI-style chat requests and responses, as vLLM and SGLang serve them behind SageMaker."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Keys the request builder owns: the conversation and the streaming switch.
RESERVED_KEYS = ("messages", "stream")


class MalformedResponse(ValueError):
    """The container answered, but not with a chat completion; ``excerpt`` is the start of the body."""

    def __init__(self, message: str, excerpt: str = "") -> None:
        super().__init__(message)
        self.excerpt = excerpt


def build_chat_request(
    prompt: str,
    *,
    max_tokens: int = 512,
    system: str | None = None,
    extra: Mapping[str, Any] | None = None,
    stream: bool = False,
) -> dict[str, Any]:
    """``{"messages": [...], "max_tokens": N}`` merged with ``extra``.

    ``extra`` may override ``max_tokens`` or anything else except ``messages`` and ``stream``; a key
    given as ``None`` removes a default (``{"stream_options": None}`` for a container that rejects it).
    A streamed request asks for usage in the last chunk (``stream_options.include_usage``), so that
    token counts come from the engine rather than from counting deltas.
    """
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens}
    if stream:
        body["stream_options"] = {"include_usage": True}
    for key, value in (extra or {}).items():
        if key in RESERVED_KEYS:
            raise ValueError(f"extra must not set {key!r}: the client sets it")
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    if stream:
        body["stream"] = True
    return body


@dataclass(frozen=True)
class Delta:
    """What one streamed chunk adds: answer text, reasoning text, and usage when the chunk carries it."""

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Completion:
    """A whole (non-streamed) chat completion."""

    content: str
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)

    @property
    def completion_tokens(self) -> int | None:
        return _completion_tokens(self.usage)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _completion_tokens(usage: Mapping[str, Any] | None) -> int | None:
    value = (usage or {}).get("completion_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def excerpt(data: bytes | str, limit: int = 300) -> str:
    """The start of ``data`` on one line, at most ``limit`` bytes of UTF-8 (never a broken character)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    text = " ".join(text.split())
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", errors="ignore") + "…"


def _json_problem(error: ValueError | RecursionError) -> str:
    """Why ``json.loads`` refused a body, in a few words.

    Besides ``JSONDecodeError`` it raises ``RecursionError`` on deep nesting and a plain ``ValueError`` on
    an integer over ``sys.get_int_max_str_digits()`` digits (Python docs, stdtypes "Integer string conversion
    length limitation"; library/json: "Be cautious when parsing JSON data from untrusted sources").
    """
    if isinstance(error, json.JSONDecodeError):
        return error.msg
    if isinstance(error, RecursionError):
        return "nested too deeply"
    return "a number with too many digits" if "integer string conversion" in str(error) else str(error)


def parse_delta(data: str) -> Delta:
    """The delta in one ``data:`` payload of a streamed chat completion."""
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise MalformedResponse(f"a stream event is not JSON ({_json_problem(e)})", excerpt(data)) from None
    if not isinstance(payload, dict):
        raise MalformedResponse("a stream event is not a JSON object", excerpt(data))
    if "error" in payload and "choices" not in payload:
        # vLLM reports an error met after the stream started as an event of its own.
        raise MalformedResponse("the stream carried an error event", excerpt(data))
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else None
    choices = payload.get("choices") or []
    if not isinstance(choices, list):
        raise MalformedResponse("'choices' is not a list", excerpt(data))
    if not choices:
        return Delta(usage=usage)  # the usage-only chunk that ends a stream with include_usage
    choice = choices[0] if isinstance(choices[0], dict) else {}
    delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
    return Delta(
        content=_text(delta.get("content")),
        reasoning=_text(delta.get("reasoning_content")) or _text(delta.get("reasoning")),
        finish_reason=choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None,
        usage=usage,
    )


def parse_completion(body: bytes) -> Completion:
    """``choices[0].message`` of a chat completion body; :class:`MalformedResponse` if there is none."""
    try:
        payload = json.loads(body)
    except UnicodeDecodeError:
        raise MalformedResponse("the response is not JSON (not UTF-8)", excerpt(body)) from None
    except (ValueError, RecursionError) as e:
        raise MalformedResponse(f"the response is not JSON ({_json_problem(e)})", excerpt(body)) from None
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse("the response has no choices[0]", excerpt(body))
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise MalformedResponse("the response has no choices[0].message", excerpt(body))
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    finish = choices[0].get("finish_reason")
    return Completion(
        content=_text(message.get("content")),
        reasoning=_text(message.get("reasoning_content")) or _text(message.get("reasoning")),
        finish_reason=finish if isinstance(finish, str) else None,
        usage=usage,
    )
