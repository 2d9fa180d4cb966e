"""What ``llmops bench`` and its asynchronous mode (async_bench.py) share: one request's sample, how its error is
named and kept (never echoing the prompt or a secret), and the table's cells. Below both, so neither imports the
other."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from endpoint_client import InvocationError
from endpoint_client.async_invocations import EXPIRED
from endpoint_client.load import inter_token_latency_s

TABLE_PERCENTILES = (50, 90, 99)

ERROR_MESSAGE_CHARS = 200  # of an error's message kept per request and shown beside its kind

TIMEOUT_KIND = "timeout"

# A request's time ran out: ours (--request-timeout over the whole answer) or a socket's (each read).
# An asynchronous request's answer object not found in time (EXPIRED) is the same kind.
TIMEOUT_CODES = frozenset({"RequestTimedOut", "TimeoutError", "ReadTimeoutError", "ConnectTimeoutError", EXPIRED})

# An error message is withheld when it holds this many characters in a row of any message's text.
ECHO_WINDOW_CHARS = 24


@dataclass
class Sample:
    """One request: when it was due and started (seconds since its level started) and how it went. No text."""

    concurrency: int
    start_s: float
    e2e_s: float | None = None
    ttft_s: float | None = None
    tokens: int = 0
    token_source: str = ""
    gaps_s: list[float] = field(default_factory=list)  # between successive streamed deltas
    error: str | None = None
    error_message: str | None = None  # at most ERROR_MESSAGE_CHARS, no token, signature or prompt
    due_s: float | None = None  # when it should have started: its arrival (open loop) or its worker freed
    end_s: float | None = None  # when it ended, failed or not
    input_tokens: int | None = None
    input_token_source: str = ""  # "usage" (the engine's prompt_tokens) or "estimate" (words of the prompt)

    @property
    def ok(self) -> bool:
        return self.error is None and self.e2e_s is not None

    @property
    def wait_s(self) -> float | None:
        """The wait before it started: from when it was due to when it was sent."""
        return None if self.due_s is None else max(0.0, self.start_s - self.due_s)

    @property
    def itl_s(self) -> float | None:
        """AIPerf's inter-token latency (vLLM's TPOT): decode time over the tokens after the first."""
        if not self.ok:
            return None
        return inter_token_latency_s(self.e2e_s, self.ttft_s, self.tokens)

    tpot_s = itl_s  # the name this figure had (vLLM's)

    @property
    def tokens_per_s(self) -> float | None:
        """AIPerf's output token throughput per user: 1 / ITL."""
        itl = self.itl_s
        return 1 / itl if itl else None


class _Stopped(Exception):
    """Raised from the delta callback to abandon a request when the run is interrupted."""


def error_kind(error: InvocationError) -> str:
    info = error.info
    if info.code in TIMEOUT_CODES:
        return TIMEOUT_KIND
    return f"{info.code}:{info.status}" if info.code == "ModelError" and info.status else info.code


_SECRET_PATTERNS = (
    # A credential after "Bearer" (RFC 6750's b64token characters), not the words "bearer token" of a message.
    (re.compile(r"\b(Bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1[redacted]"),
    (re.compile(r"(?i)(X-Amz-(?:Signature|Security-Token|Credential)=)[^&\s]+"), r"\1[redacted]"),
)

_JSON_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')


def _json_unescaped(text: str) -> str:
    return _JSON_ESCAPE.sub(lambda m: json.loads(f'"{m.group(0)}"'), text)


def quotes_prompt(text: str, prompts: str | Sequence[str]) -> bool:
    """Whether ``text`` holds ECHO_WINDOW_CHARS (24) characters in a row of any of ``prompts`` (whitespace
    runs as one space), as it is or with JSON string escapes undone (up to three levels: a container's JSON
    error inside SageMaker's JSON message). A prompt shorter than that counts when quoted whole (16 or more)."""
    candidates = [" ".join(text.split())]
    for _ in range(3):
        unescaped = " ".join(_json_unescaped(candidates[-1]).split())
        if unescaped == candidates[-1]:
            break
        candidates.append(unescaped)
    width = ECHO_WINDOW_CHARS
    windows = {c[i : i + width] for c in candidates for i in range(max(0, len(c) - width + 1))}
    for prompt in [prompts] if isinstance(prompts, str) else prompts:
        flat = " ".join(prompt.split())
        if len(flat) < width:
            if len(flat) >= 16 and any(flat in c for c in candidates):
                return True
            continue
        if any(flat[i : i + width] in windows for i in range(len(flat) - width + 1)):
            return True
    return False


def error_message(text: str, *, secrets: Sequence[str] = (), prompt: str | Sequence[str] = "") -> str:
    """An error's message as kept in the report: one line, at most ERROR_MESSAGE_CHARS characters, with any
    of ``secrets`` (the bearer token), a bearer token or a URL signature replaced, and withheld if it quotes
    the prompt (a server may echo what it was sent): ``prompt`` is the text of each message, see
    :func:`quotes_prompt`."""
    text = " ".join(text.split())
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    if quotes_prompt(text, prompt):
        text = "(message withheld: it quotes the prompt)"
    return text if len(text) <= ERROR_MESSAGE_CHARS else text[: ERROR_MESSAGE_CHARS - 1] + "…"


def _message_texts(body: Mapping[str, Any]) -> list[str]:
    """The text of each message: a string content, or the ``text`` of each part of a list content."""
    texts = []
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return texts


def _prompt_text(body: Mapping[str, Any]) -> str:
    return " ".join(_message_texts(body))


def estimate_input_tokens(body: Mapping[str, Any]) -> int:
    """Words of the prompt's messages: the synthetic prompts' words are about one token each (an estimate)."""
    return len(_prompt_text(body).split())


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _triple(dist: Mapping[str, float | None], digits: int = 0, percentiles: Sequence[int] = TABLE_PERCENTILES) -> str:
    return "/".join(_fmt(dist[f"p{q}"], digits) for q in percentiles)


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """The rows right-aligned in columns, a rule under the first (the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def level_notes(levels: Sequence[Mapping[str, Any]]) -> list[str]:
    """Under a table, per level: the client's own figures, its errors with a message, its warnings."""
    lines = []
    for level in levels:
        lines.append(client_line(level))
        if level["errors"]:
            messages = level.get("error_messages") or {}
            kinds = ", ".join(
                f"{kind} {count}" + (f" ({messages[kind]})" if messages.get(kind) else "")
                for kind, count in level["errors"].items()
            )
            lines.append(f"errors at concurrency {level['concurrency']}: {kinds}")
        lines.extend(f"warning: {warning}" for warning in level.get("warnings") or ())
    return lines


def client_line(level: Mapping[str, Any]) -> str:
    """The client's side of a level: requests in flight, the wait before starting, its CPU, input tokens."""
    wait = level["queue_wait_ms"]
    cpu = level.get("client_cpu_per_wall_s")
    source = level.get("input_token_source")
    label = {"usage": "from usage", "estimate": "estimated: words of the prompt"}.get(source or "", source)
    inputs = f"input tokens p50 {_fmt(level['input_tokens']['p50'])} ({label})" if source else "input tokens -"
    return (
        f"client at concurrency {level['concurrency']}: {_fmt(level['effective_concurrency'], 2)} in flight on "
        f"average, wait before start p50/p95 {_fmt(wait['p50'], 1)}/{_fmt(wait['p95'], 1)} ms, "
        f"CPU {'-' if cpu is None else f'{cpu:.0%}'} of one core, {inputs}, "
        f"not started {level.get('not_started') or 0}"
    )


DEFAULT_POLL_INTERVAL_S = 0.25
