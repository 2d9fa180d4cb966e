"""What every custom-resource handler needs, defined once and bundled into each handler's asset.

Standard library and boto3 only (the Lambda runtime's). ``constructs_lib.runtime_code.handler_code`` copies this
package beside every ``lambda/<name>/index.py``.

- The request and the rollback: during ``UPDATE_ROLLBACK_IN_PROGRESS`` CloudFormation sends an Update with the
  old properties to a resource that was updated in place (aws-cdk #17040; CloudFormation User Guide, "Stack
  status codes": UPDATE_ROLLBACK_IN_PROGRESS is the return of the stack to its previous working state after a
  failed update). A handler answers that Update from the old state instead of re-running its checks.
- One structured log line: ``event=<name> key=value ...``, values with spaces, ``=`` or quotes JSON-quoted,
  ``None`` left out. Never pass prompts, answers or secrets.
- One rule for reasons and data: CloudFormation shows at most 4 KB of a custom resource's reason and the
  Provider framework adds its own text to a failure (PRODUCT.md §8), so a handler keeps its reason to about
  3 KB: ``shorten`` cuts UTF-8 bytes, never inside a character.
- One refusal: ``refusal`` renders every problem at once, for a handler's reason and for synth
  (``constructs_lib.problems``, which imports it: a handler's asset bundles this package, not constructs_lib).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import safejson

CREATE, UPDATE, DELETE = "Create", "Update", "Delete"
REQUEST_TYPES = (CREATE, UPDATE, DELETE)
UPDATE_ROLLBACK_IN_PROGRESS = "UPDATE_ROLLBACK_IN_PROGRESS"
RESPONSE_LIMIT_BYTES = 4096  # CloudFormation's limit on a custom resource response
REASON_LIMIT_BYTES = 3000  # room for the Provider framework's own text around our reason
ELLIPSIS = "…"
_NEEDS_QUOTES = re.compile(r'[\s="]')


def request_type(event: Mapping[str, Any]) -> str:
    """The event's RequestType, refused when it is none of CloudFormation's three."""
    kind = event.get("RequestType")
    if kind not in REQUEST_TYPES:
        raise ValueError(f"RequestType={kind!r} is not one of {', '.join(REQUEST_TYPES)}")
    return str(kind)


def log_line(event: str, **fields: Any) -> str:
    """``event=<event> key=value ...``: one line, values with spaces, '=' or quotes JSON-quoted, None left out."""
    parts = [f"event={event}"]
    for key, value in fields.items():
        if value is None:
            continue
        text = str(value)
        parts.append(f"{key}={json.dumps(text) if not text or _NEEDS_QUOTES.search(text) else text}")
    return " ".join(parts)


def shorten(text: str, limit: int = REASON_LIMIT_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, never inside a character, marked with an ellipsis."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: max(0, limit - len(ELLIPSIS.encode()))].decode(errors="ignore") + ELLIPSIS


def refusal(subject: str, problems: Sequence[str], *, one_line: bool = True) -> str:
    """The one shape of a refusal: ``Subject: problem``, else ``Subject: N problems:`` and each problem.

    On one line, ``; `` between them, as CloudFormation shows a handler's reason; otherwise one ``  - problem``
    line each, as synth shows a construct's (constructs_lib.problems).
    """
    if len(problems) == 1:
        return f"{subject}: {problems[0]}"
    if one_line:
        return f"{subject}: {len(problems)} problems: " + "; ".join(problems)
    return f"{subject}: {len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)


def stack_status(stack_id: str, cloudformation: Any, log: Callable[..., None]) -> str | None:
    """The stack's status (DescribeStacks' StackStatus), or None when it cannot be read."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=stack_id)["Stacks"]
    except (ClientError, BotoCoreError) as e:
        log("describe-stack-failed", error=type(e).__name__)
        return None
    return str(stacks[0].get("StackStatus", "")) if stacks else None


def update_rolling_back(stack_id: str, cloudformation: Any, log: Callable[..., None]) -> bool:
    """Whether the stack is rolling an update back (DescribeStacks' StackStatus); False when it cannot be told.

    A stack that cannot be described counts as not rolling back: the handler then does what it would do anyway.
    """
    return stack_status(stack_id, cloudformation, log) == UPDATE_ROLLBACK_IN_PROGRESS


def string_list(raw: Any) -> tuple[str, ...]:
    """A list property as CloudFormation passes it (a list), or a JSON array in a string (an older template), as
    given: order and case kept, blanks and repeats dropped. A string that is no JSON array is one element."""
    if isinstance(raw, str):
        try:
            raw = safejson.loads(raw, source="a list property") if raw.strip() else []
        except safejson.JsonError:  # not JSON (or too deep, too large): one element
            raw = [raw]
    if not isinstance(raw, list):
        return ()
    return tuple(dict.fromkeys(str(p) for p in raw if str(p).strip()))


def cached_client(cache: dict[str, Any], name: str, *, region: str | None = None, **config: Any) -> Any:
    """One boto3 client per service (and region) for the life of the execution environment, kept in ``cache``.

    ``config`` goes to botocore's ``Config`` (retries, timeouts). The cache is the handler's own dict, so a test
    can put a stubbed client in it.
    """
    key = f"{name}@{region}" if region else name
    if key not in cache:
        import boto3
        from botocore.config import Config

        cache[key] = boto3.client(name, region_name=region, config=Config(**config))
    return cache[key]
