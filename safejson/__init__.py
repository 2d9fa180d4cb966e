"""JSON from outside, read with a depth and a size limit: one clear error naming the source, never a traceback.

``json.loads`` recurses once per nested bracket (python/cpython Modules/_json.c: the scanner enters
``_Py_EnterRecursiveCall`` for each array or object), so 100,000 ``[`` raise ``RecursionError`` from deep inside
the decoder. ``loads`` counts the nesting first, iteratively
(brackets outside strings), and refuses more than ``max_depth`` levels or ``max_size`` characters before
``json.loads`` sees the text; a ``RecursionError`` that still happens (a caller already deep in its stack) is
converted too. Otherwise the answer is exactly ``json.loads``'s. Standard library only: it is bundled into every
handler and the staging worker (constructs_lib/runtime_code.py, constructs_lib/staged_checkpoint.py).

    from safejson import JsonError, loads
    config = loads(body, source="s3://bucket/prefix/config.json")
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_SIZE", "JsonError", "depth", "loads"]

MAX_DEPTH = 512  # far beyond any config.json, listing or record we read (a few levels); below the default
# recursion limit of 1000 (sys.getrecursionlimit), so json.loads answers whatever passes the scan
MAX_SIZE = 64 * 1024 * 1024  # characters (bytes for bytes): the largest JSON we read is a Hub tree page, a few MiB

# A JSON string (escapes included; the unrolled loop is linear), and anything but a bracket: what the depth scan
# drops before it counts, so that brackets inside strings do not count.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JsonError(json.JSONDecodeError):
    """The text from ``source`` is not JSON this reader takes; the message names the source and why.

    A ``json.JSONDecodeError`` (and so a ``ValueError``), so that a caller's existing ``except`` still holds."""

    def __init__(self, source: str, why: str, doc: str = "", pos: int = 0, msg: str | None = None) -> None:
        ValueError.__init__(self, f"{source}: {why}")
        self.source, self.why = source, why  # why: the reason without the source
        self.msg, self.doc, self.pos = msg or why, doc, pos  # msg: json's own words for a syntax error
        self.lineno = doc.count("\n", 0, pos) + 1
        self.colno = pos - doc.rfind("\n", 0, pos)

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__class__, (self.source, self.why, self.doc, self.pos, self.msg)


def depth(text: str) -> int:
    """The deepest nesting of brackets outside strings in ``text``, counted without recursion and in linear time:
    the strings and everything but brackets dropped (re, in C), then a running sum of +1/-1 (itertools)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads(
    text: str | bytes | bytearray,
    *,
    source: str,
    max_depth: int = MAX_DEPTH,
    max_size: int = MAX_SIZE,
    **options: Any,
) -> Any:
    """``json.loads(text, **options)`` for text from ``source`` (a file, URL, key or flag, as a person names it).

    JsonError: more than ``max_size`` characters (bytes), nesting deeper than ``max_depth``, not UTF-8/16/32
    (bytes), or not JSON (json's own reason and position; an integer over Python's digit limit). A ValueError a
    hook in ``options`` raises passes through unchanged."""
    if len(text) > max_size:
        raise JsonError(
            source,
            f"{len(text):,} {'bytes' if not isinstance(text, str) else 'characters'} of JSON, "
            f"more than the {max_size:,} allowed",
        )
    if not isinstance(text, str):
        try:  # as json.loads decodes bytes
            text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
        except UnicodeDecodeError as e:
            raise JsonError(
                source, f"not JSON text in UTF-8, UTF-16 or UTF-32 ({e.reason} at byte {e.start})"
            ) from None
    # Text cannot nest deeper than it has opening brackets: most documents need no scan at all.
    if text.count("[") + text.count("{") > max_depth and depth(text) > max_depth:
        raise JsonError(source, f"JSON nested more than {max_depth} levels deep (brackets), more than allowed")
    try:
        return json.loads(text, **options)
    except json.JSONDecodeError as e:
        if isinstance(e, JsonError):  # raised by a hook the caller passed: already names its source
            raise
        why = f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        raise JsonError(source, why, e.doc, e.pos, e.msg) from None
    except RecursionError:
        raise JsonError(source, "JSON nested too deep for this process to read") from None
    except ValueError as e:  # an integer over int's digit limit (Python docs, stdtypes "Integer string conversion
        if options:  # length limitation"); a hook's own ValueError is the caller's message: let it through
            raise
        raise JsonError(source, f"not valid JSON ({e})") from None
