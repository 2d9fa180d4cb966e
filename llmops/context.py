"""The context keys ``cdk synth`` takes, for the commands: ``-c key=value`` (repeatable) and ``--context-file``.

One source of truth: the keys, their parsers and their defaults are the registry's (stacks/context_keys.py),
and the whole context is validated by ``DeploymentConfig.from_context``, exactly as app.py validates it. The
context is the registry's defaults, then ``--context-file`` (a cdk.json, whose ``context`` object is read, or a
JSON object of keys), then each ``-c`` in order: as the CDK CLI layers cdk.json and ``-c``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_context_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a context key as cdk synth takes it (docs/context-keys.md); repeatable",
    )
    parser.add_argument(
        "--context-file",
        type=Path,
        help="a cdk.json (its context object) or a JSON object of context keys. Default: the keys' defaults",
    )


def uses_context(args: argparse.Namespace) -> bool:
    return bool(args.context) or args.context_file is not None


NO_APP = (
    "-c and --context-file read this app's context keys (stacks/context_keys.py), which the installed library "
    "does not have: run the command from the app's repository, or give the model with the flags"
)


def context_of(pairs: list[str], context_file: Path | None) -> dict[str, Any] | str:
    """The layered context, or a one-line error."""
    try:
        from stacks.context_keys import KEYS
    except ImportError:  # llmops installed as a library, outside this app
        return NO_APP

    context: dict[str, Any] = {key.name: key.default for key in KEYS if key.default is not None}
    if context_file is not None:
        try:
            raw = json.loads(context_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            return f"--context-file {context_file}: cannot read it as JSON: {e}"
        if isinstance(raw, dict) and isinstance(raw.get("context"), dict):
            raw = raw["context"]
        if not isinstance(raw, dict):
            return f"--context-file {context_file}: not a JSON object (a cdk.json, or an object of context keys)"
        context.update({k: v for k, v in raw.items() if v is not None})  # CDK drops null values
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            return f"-c {pair!r}: expected key=value, as cdk synth -c takes it"
        context[key.strip()] = value
    return context


def load_config(pairs: list[str], context_file: Path | None) -> Any:
    """The validated DeploymentConfig, or 2 after printing each problem on one line (never a traceback)."""
    context = context_of(pairs, context_file)
    if isinstance(context, str):
        print(f"error: {context}", file=sys.stderr)
        return 2
    from stacks.config import ConfigError, DeploymentConfig

    try:
        return DeploymentConfig.from_context(context)
    except ConfigError as e:
        for problem in e.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
