"""Boundary tests generated from the context-key registry: every key with a range or a choice, at its edges.

Nothing here is hand-kept: each key's parser in ``constructs_lib/deployment/context_keys.py`` carries its bounds or
its choices
(``functools.partial`` of ``_parse_integer``, ``_parse_number``, ``_parse_choice``...), and each case below is
derived from them. A new ranged key is tested the moment it is registered; a bound written ``<`` for ``<=`` in a
parser, or a key wired to the wrong parser in the config, fails here. What is checked, through the whole context
layer (``DeploymentConfig.from_context``), as a user meets it:

- integers: the minimum and the maximum are accepted (also as ``-c`` text), one below and one above are refused
  with a message that names the key, the value and the range;
- numbers (an open floor, a closed ceiling): just above the floor and the ceiling itself are accepted; the floor
  and one step above the ceiling are refused, naming the key;
- shares (closed at both ends, ``_share``: an error rate where 0 means none): both ends are accepted, one step
  below the floor and one above the ceiling are refused, naming the key;
- choices: every allowed value is accepted; a value one letter off is refused, naming the key and the choices;
- id lists (subnets, security groups): the most ids allowed is accepted, one more is refused.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import pytest

from constructs_lib.deployment import parsers
from constructs_lib.deployment.config import ConfigError
from constructs_lib.deployment.context_keys import KEYS, ContextKey
from tests.stacks.test_config import load

# Other settings a value needs to be valid at all (a cross-key rule, not the key's own range): by key, then value.
# Each entry says which rule it satisfies; the value's own refusal is still checked without them.
SCALE_TO_ZERO = {"deployment_mode": "inference-component", "scale_to_zero": True}
COMPONENT = {"deployment_mode": "inference-component"}
COMPANIONS: dict[str, Callable[[Any], dict[str, Any]]] = {
    # min_instances 0 is scale-to-zero, which only components allow; above 1 the maximum must keep up
    "min_instances": lambda v: SCALE_TO_ZERO if v == 0 else {"max_instances": max(v, 1), "instance_count": max(v, 1)},
    # the maximum must cover the starting count
    "instance_count": lambda v: {"max_instances": v} if isinstance(v, int) and v > 1 else {},
    # copies are a component-mode setting, ordered min <= initial <= max
    "min_copies": lambda v: (
        {**SCALE_TO_ZERO, "max_copies": max(v, 1), "initial_copies": max(v, 1)}
        if v == 0
        else {**COMPONENT, "max_copies": v, "initial_copies": v}
    ),
    "initial_copies": lambda v: {**COMPONENT, "max_copies": max(v, 1)},
    "max_copies": lambda v: {**COMPONENT, "initial_copies": 1 if v >= 1 else 0},
    "accelerators_per_copy": lambda v: COMPONENT,
    "min_memory_mb": lambda v: COMPONENT,
    # the load gate's burst needs at least as many requests as it keeps in flight
    "slo_requests": lambda v: {"slo_concurrency": 1},
}


def _unwrap(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The parser under ``_optional`` / ``_optional_choice``."""
    while isinstance(parse, functools.partial) and parse.func in (
        parsers._parse_optional,
        parsers._parse_optional_choice,
    ):
        parse = parse.args[0]
    return parse


def _kind(key: ContextKey) -> tuple[str, tuple[Any, ...]] | None:
    inner = _unwrap(key.parse)
    if not isinstance(inner, functools.partial):
        return None
    kinds = {
        parsers._parse_integer: "integer",
        parsers._parse_number: "number",
        parsers._parse_share: "share",
        parsers._parse_choice: "choice",
        parsers._parse_ids: "ids",
    }
    kind = kinds.get(inner.func)
    return (kind, inner.args) if kind else None


RANGED = {key.name: kind for key in KEYS if (kind := _kind(key)) is not None}
INTEGERS = sorted(name for name, (kind, _) in RANGED.items() if kind == "integer")
NUMBERS = sorted(name for name, (kind, _) in RANGED.items() if kind == "number")
SHARES = sorted(name for name, (kind, _) in RANGED.items() if kind == "share")
CHOICES = sorted(name for name, (kind, _) in RANGED.items() if kind == "choice")
ID_LISTS = sorted(name for name, (kind, _) in RANGED.items() if kind == "ids")
# What the parsers say when they refuse a value (constructs_lib/deployment/parsers.py); a cross-key rule says
# something else.
OWN_REFUSAL = ("out of range", "expected", "not allowed", "not valid JSON")


def _problems(key: str, value: Any) -> list[str]:
    as_number = int(value) if isinstance(value, str) and value.strip().lstrip("-").isdigit() else value
    companions = COMPANIONS.get(key, lambda v: {})(as_number)
    try:
        load(**{**companions, key: value})
    except ConfigError as error:
        return list(error.problems)
    return []


def _own_refusals(key: str, problems: list[str]) -> list[str]:
    """The problems that are the key's own parser refusing its value (not another rule naming the key)."""
    return [p for p in problems if p.startswith(f"{key}=") and p.partition(": ")[2].startswith(OWN_REFUSAL)]


def test_the_registry_has_the_ranges_this_module_tests() -> None:
    # A change to how parsers are bound (no more functools.partial) would make every case below vanish.
    assert len(INTEGERS) >= 25 and len(NUMBERS) >= 5 and len(CHOICES) >= 5 and len(ID_LISTS) == 2
    assert SHARES == ["slo_max_error_rate"]


@pytest.mark.parametrize("key", INTEGERS)
def test_integer_key_accepts_its_minimum_and_maximum(key: str) -> None:
    low, high = RANGED[key][1]
    for value in (low, high, str(high), f" {low} "):
        assert _own_refusals(key, _problems(key, value)) == [], (key, value)


@pytest.mark.parametrize("key", INTEGERS)
def test_integer_key_refuses_one_step_outside_naming_key_value_and_range(key: str) -> None:
    low, high = RANGED[key][1]
    for value in (low - 1, high + 1, str(high + 1)):
        problems = _problems(key, value)
        expected = f"{key}={value!r}: out of range; allowed: {low} to {high}"
        assert any(p.startswith(expected) for p in problems), (expected, problems)


@pytest.mark.parametrize("key", NUMBERS)
def test_number_key_accepts_just_above_its_floor_and_its_ceiling(key: str) -> None:
    low, high = RANGED[key][1]
    above_floor = math.nextafter(float(low), math.inf)
    for value in (above_floor, high, str(high)):
        assert _own_refusals(key, _problems(key, value)) == [], (key, value)


@pytest.mark.parametrize("key", NUMBERS)
def test_number_key_refuses_its_floor_and_above_its_ceiling(key: str) -> None:
    low, high = RANGED[key][1]
    for value in (low, math.nextafter(float(high), math.inf), "nan", "inf"):
        problems = _problems(key, value)
        assert _own_refusals(key, problems), (key, value, problems)


@pytest.mark.parametrize("key", SHARES)
def test_share_key_accepts_both_ends(key: str) -> None:
    low, high = RANGED[key][1]
    for value in (low, high, str(low), str(high)):
        assert _own_refusals(key, _problems(key, value)) == [], (key, value)


@pytest.mark.parametrize("key", SHARES)
def test_share_key_refuses_one_step_outside_either_end(key: str) -> None:
    low, high = RANGED[key][1]
    for value in (math.nextafter(float(low), -math.inf), math.nextafter(float(high), math.inf), "nan"):
        problems = _problems(key, value)
        assert _own_refusals(key, problems), (key, value, problems)


@pytest.mark.parametrize("key", CHOICES)
def test_choice_key_accepts_every_allowed_value(key: str) -> None:
    (allowed,) = RANGED[key][1]
    for value in allowed:
        assert _own_refusals(key, _problems(key, value)) == [], (key, value)


@pytest.mark.parametrize("key", CHOICES)
def test_choice_key_refuses_a_near_miss_naming_the_choices(key: str) -> None:
    (allowed,) = RANGED[key][1]
    near_miss = allowed[0][:-1] + ("x" if not allowed[0].endswith("x") else "y")
    problems = _problems(key, near_miss)
    assert any(p.startswith(f"{key}={near_miss!r}: not allowed; allowed: {', '.join(allowed)}") for p in problems), (
        problems
    )


@pytest.mark.parametrize("key", ID_LISTS)
def test_id_list_accepts_its_most_ids_and_refuses_one_more(key: str) -> None:
    inner = _unwrap(next(k for k in KEYS if k.name == key).parse)
    assert isinstance(inner, functools.partial)
    _pattern, _what, most = inner.args[:3]
    prefix = "subnet-" if "subnet" in key else "sg-"
    ids = [f"{prefix}{i:017x}" for i in range(most + 1)]
    assert inner(",".join(ids[:most])) == tuple(ids[:most])
    assert _own_refusals(key, _problems(key, ",".join(ids[:most]))) == []
    assert any(p.startswith(f"{key}=") and f"allowed: at most {most}" in p for p in _problems(key, ",".join(ids)))
    with pytest.raises(ValueError, match=str(most)):
        inner(",".join(ids))
