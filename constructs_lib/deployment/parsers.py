"""One parser per kind of context value: ``(raw) -> value``, raising ValueError with what is allowed.

CLI context (``-c key=value``) always arrives as text, so numbers, booleans and JSON objects are accepted both
as JSON values (from cdk.json) and as their text form. The registry (``context_keys.py``) binds each key to one
of these; every parser carries a description (its ``__doc__``), which the error and the key table show.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable
from typing import Any

import safejson
from constructs_lib.names import INSTANCE_TYPE, matches
from constructs_lib.rules import BUCKET_RULE, bucket_name_problem, tag_problems

NONE_WORDS = {"", "null", "none"}


# --- one parser per kind of value: (raw) -> value, raising ValueError with what is allowed ---


def _text(raw: Any) -> str:
    """text"""
    if isinstance(raw, str):
        return raw
    raise ValueError("expected text")


def _bound(parse: Callable[..., Any], doc: str, *settings: Any) -> Callable[[Any], Any]:
    """``parse`` with its settings bound, described by ``doc`` (what the error and the key table say).

    The parsers are module-level functions with their settings as arguments, not closures: a test (and a
    mutation tool) then reaches the code that runs on a value, not a factory that ran once at import.
    The factories run only at import, before mutmut forks a mutant, so no mutant of them could ever run:
    their lines say ``pragma: no mutate``; the bounds are checked by tests/stacks/test_config_limits.py (integers) and
    tests/stacks/test_config_rules.py (numbers) instead.
    """
    bound = functools.partial(parse, *settings)  # pragma: no mutate
    bound.__doc__ = doc  # pragma: no mutate
    return bound


def _parse_optional(parse: Callable[[Any], Any], raw: Any) -> Any:
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in NONE_WORDS):
        return None
    return parse(raw)


def _optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return _bound(_parse_optional, f"{parse.__doc__ or ''}, or null", parse)  # pragma: no mutate


def _parse_optional_choice(parse: Callable[[Any], Any], raw: Any) -> Any:
    # A choice named "none" is a value, not the null that _optional reads the word as.
    if isinstance(raw, str) and raw.strip() == "none":
        return parse("none")
    return _parse_optional(parse, raw)


def _optional_choice(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``_optional`` for a choice list that has ``none`` among its values (update_policy)."""
    return _bound(_parse_optional_choice, f"{parse.__doc__ or ''}, or null", parse)  # pragma: no mutate


def _parse_pattern(regex: re.Pattern[str], what: str, raw: Any) -> str:
    value = _text(raw)
    if not matches(regex, value):
        # An instance type written without its "ml." (g5.2xlarge), as EC2 spells it.
        hint = f"; did you mean {'ml.' + value!r}?" if matches(regex, f"ml.{value}") else ""
        raise ValueError(f"expected {what}{hint}")
    return value


def _pattern(regex: re.Pattern[str], what: str) -> Callable[[Any], str]:
    return _bound(_parse_pattern, what, regex, what)  # pragma: no mutate


def _parse_checked(problem: Callable[[str], str | None], raw: Any) -> str:
    value = _text(raw)
    if (why := problem(value)) is not None:
        raise ValueError(why)
    return value


def _checked(problem: Callable[[str], str | None], what: str) -> Callable[[Any], str]:
    """A text value checked by one of constructs_lib.names' rules, the same the constructs apply."""
    return _bound(_parse_checked, what, problem)  # pragma: no mutate


def _prompt(raw: Any) -> str:
    """a non-empty prompt"""
    value = _text(raw)
    if not value.strip():
        raise ValueError("expected a non-empty prompt")
    if "\x00" in value:
        raise ValueError("expected a prompt without NUL characters")
    return value


def _parse_integer(low: int, high: int, raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"expected an integer from {low} to {high}")
    if isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw):
        raw = int(raw)
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if not isinstance(raw, int):
        raise ValueError(f"expected an integer from {low} to {high}")
    if not low <= raw <= high:
        raise ValueError(f"out of range; allowed: {low} to {high}")
    return raw


def _integer(low: int, high: int) -> Callable[[Any], int]:
    return _bound(_parse_integer, f"integer {low}-{high}", low, high)  # pragma: no mutate


def _as_number(low: float, high: float, raw: Any) -> float:
    """``raw`` as a float (text as ``-c`` gives it too); never a bool."""
    try:
        value = float(raw) if not isinstance(raw, bool) else None
    except (TypeError, ValueError):
        value = None
    if value is None:
        raise ValueError(f"expected a number from {low} to {high}")
    return value


def _parse_number(low: float, high: float, raw: Any) -> float:
    value = _as_number(low, high, raw)
    if not low < value <= high:
        raise ValueError(f"out of range; allowed: more than {low}, at most {high}")
    return value


def _number(low: float, high: float) -> Callable[[Any], float]:
    return _bound(_parse_number, f"number {low}-{high}", low, high)  # pragma: no mutate


def _parse_share(low: float, high: float, raw: Any) -> float:
    value = _as_number(low, high, raw)
    if value != value:  # NaN is no share
        raise ValueError(f"expected a number from {low} to {high}")
    if not low <= value <= high:
        raise ValueError(f"out of range; allowed: {low} to {high}")
    return value


def _share(low: float, high: float) -> Callable[[Any], float]:
    """A number closed at both ends (a share such as an error rate, where 0 means none)."""
    return _bound(_parse_share, f"number {low}-{high} (both included)", low, high)  # pragma: no mutate


def _boolean(raw: Any) -> bool:
    """true | false"""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ValueError("expected true or false")


def _bucket(raw: Any) -> str:
    """an existing S3 bucket name"""
    value = _text(raw)
    if bucket_name_problem(value):
        raise ValueError(f"expected an existing S3 bucket name ({BUCKET_RULE}; not an IP address)")
    return value


def _did_you_mean(value: Any, allowed: list[str]) -> str:
    """``; did you mean 'x'?`` for a value that differs from an allowed one by case or a few letters."""
    if not isinstance(value, str):
        return ""
    by_case = [a for a in allowed if a.lower() == value.strip().lower()]
    near = by_case or difflib.get_close_matches(value.strip().lower(), allowed, n=1, cutoff=0.75)
    return f"; did you mean {near[0]!r}?" if near else ""


def _parse_choice(allowed: list[str], raw: Any) -> str:
    if raw not in allowed:
        raise ValueError(f"not allowed; allowed: {', '.join(allowed)}{_did_you_mean(raw, allowed)}")
    return raw


def _choice(allowed: list[str]) -> Callable[[Any], str]:
    return _bound(_parse_choice, " | ".join(allowed), allowed)  # pragma: no mutate


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"the key(s) {', '.join(duplicates)} appear more than once; give each once")
    return dict(pairs)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows; give a finite number")


def _decode(raw: str, expected: str, **options: Any) -> Any:
    """``raw`` as JSON (safejson: depth and size limits), or a ValueError the config layer names the key in."""
    try:
        return safejson.loads(raw, source="the value", **options)
    except safejson.JsonError as e:
        where = f"{e.msg} at character {e.pos}" if e.msg != e.why else e.why  # a syntax error, or a limit
        raise ValueError(f"not valid JSON ({where}); {expected}") from None


def _json_object(raw: Any) -> dict[str, Any]:
    """JSON object"""
    if isinstance(raw, str):
        if raw.strip() == "":
            return {}
        raw = _decode(raw, "expected a JSON object", object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    if not isinstance(raw, dict):
        raise ValueError('expected a JSON object such as {"KEY": "value"}')
    return raw


def _patterns(raw: Any) -> tuple[str, ...]:
    """JSON array of glob patterns such as ["*.json", "*.safetensors"]"""
    if isinstance(raw, str):
        if raw.strip() == "":
            return ()
        raw = _decode(raw, 'expected a JSON array such as ["*.json"]')
    if not isinstance(raw, list) or not all(isinstance(p, str) and p.strip() for p in raw):
        raise ValueError('expected a JSON array of non-empty glob patterns such as ["*.json", "*.safetensors"]')
    return tuple(raw)


def _instance_types(raw: Any) -> tuple[str, ...]:
    """JSON array of instance types such as ["ml.g6e.xlarge", "ml.g5.2xlarge"]"""
    try:
        values = _patterns(raw)
    except ValueError:
        raise ValueError('expected a JSON array of instance types such as ["ml.g6e.xlarge", "ml.g5.2xlarge"]') from None
    wrong = [v for v in values if not matches(INSTANCE_TYPE, v)]
    if wrong:
        raise ValueError(
            f"not SageMaker instance types: {', '.join(map(repr, wrong))}; expected names such as ml.g6e.xlarge"
        )
    return values


def _parse_choices_list(allowed: tuple[str, ...], raw: Any) -> tuple[str, ...]:
    values = _patterns(raw)
    wrong = [v for v in values if v not in allowed]
    if wrong:
        raise ValueError(f"unknown check(s) {', '.join(map(repr, wrong))}; allowed: {', '.join(allowed)}")
    return values


def _choices_list(allowed: tuple[str, ...]) -> Callable[[Any], tuple[str, ...]]:
    doc = f"JSON array of check names ({', '.join(allowed)})"  # pragma: no mutate
    return _bound(_parse_choices_list, doc, allowed)  # pragma: no mutate


# Ids written without quotes, as a shell leaves `-c vpc_subnet_ids=["subnet-a","subnet-b"]` after `make`'s
# unquoted expansion: [subnet-a,subnet-b] or subnet-a,subnet-b (an id holds no comma, quote or bracket).
BARE_IDS = re.compile(r"\[?\s*[A-Za-z0-9-]+(?:\s*,\s*[A-Za-z0-9-]+)*\s*\]?", re.ASCII)


def _parse_ids(regex: re.Pattern[str], what: str, most: int, raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str) and matches(BARE_IDS, raw.strip()):
        raw = [v.strip() for v in raw.strip().strip("[]").split(",")]
    elif isinstance(raw, str):
        raw = _decode(raw, f"expected a JSON array of {what}") if raw.strip() else []
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise ValueError(f'expected a JSON array of {what} such as ["{regex.pattern}"]')
    wrong = [v for v in raw if not matches(regex, v)]
    if wrong:
        raise ValueError(f"not {what}: {', '.join(map(repr, wrong[:5]))}; expected {regex.pattern}")
    if len(raw) > most:
        raise ValueError(f"{len(raw)} ids; allowed: at most {most}")
    if len(set(raw)) < len(raw):
        raise ValueError("an id is given twice; give each once")
    return tuple(raw)


def _ids(regex: re.Pattern[str], what: str, most: int) -> Callable[[Any], tuple[str, ...]]:
    doc = f"JSON array (or comma-separated list) of at most {most} {what} ({regex.pattern})"  # pragma: no mutate
    return _bound(_parse_ids, doc, regex, what, most)  # pragma: no mutate


# The app's own tag, ``<key>=<stack_name>``, on every taggable resource and on each of its stacks: how
# ``llmops status`` finds what the app made (a fleet's generated endpoint names carry no usable prefix, and
# CloudFormation adds no stack tag to SageMaker endpoints: cfn-lint schema, tagging.cloudFormationSystemTags false).
APP_TAG = "llm-endpoint-app"


def _tags(raw: Any) -> dict[str, str]:
    """JSON object of tags {"key": "value"} (AWS tag rules: at most 48; keys 1-128, values 0-256 characters)"""
    tags = _json_object(raw)
    # The constructs' own rule (constructs_lib/tags.py: AWS's characters and lengths, the staging job's own keys),
    # and the app's own tag, which the stacks set themselves.
    problems = tag_problems(tags)
    # In any case: llmops status reads the app's tag, and a look-alike on a resource would mislead whoever reads it.
    problems += [
        f"tag key {key!r}: set by the app itself (its stack_name, for llmops status); use another key"
        for key in tags
        if isinstance(key, str) and key.lower() == APP_TAG
    ]
    if problems:
        raise ValueError("; ".join(problems))
    return tags
