"""The context keys ``cdk synth`` takes, for the commands: ``-c key=value`` (repeatable) and ``--context-file``.

One source of truth: the keys, their parsers and their defaults are the registry's
(constructs_lib/deployment/context_keys.py),
and the whole context is validated by ``DeploymentConfig.from_context``, exactly as app.py validates it. The
context is the registry's defaults, then ``--context-file`` (a cdk.json, whose ``context`` object is read, or a
JSON object of keys), then each ``-c`` in order: as the CDK CLI layers cdk.json and ``-c``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import safejson


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


def context_of(pairs: list[str], context_file: Path | None) -> dict[str, Any] | str:
    """The layered context, or a one-line error."""
    # The library's registry (installed with llmops): the same keys in any app that uses constructs_lib.deployment.
    from constructs_lib.deployment import KEYS

    context: dict[str, Any] = {key.name: key.default for key in KEYS if key.default is not None}
    if context_file is not None:
        try:
            raw = safejson.loads(context_file.read_bytes(), source=f"--context-file {context_file}")
        except OSError as e:
            return f"--context-file {context_file}: cannot read it as JSON: {e}"
        except safejson.JsonError as e:
            return f"{e.source}: cannot read it as JSON: {e.why}"
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


def _base(context_file: Path | None) -> Path:
    """Where relative paths in the context are read from: the context file's folder (cdk.json's: the app's, as
    cdk synth runs app.py there), else the current folder."""
    return context_file.parent if context_file is not None else Path.cwd()


def load_configs(pairs: list[str], context_file: Path | None) -> dict[str | None, Any] | int:
    """Every deployment the context describes, validated as app.py validates it: ``{None: config}`` for a single
    deployment, ``{name: config}`` for a fleet (``deployments`` or ``deployments_file``, each deployment's keys
    merged over the top-level ones by constructs_lib/deployment/fleet.py, problems named
    ``deployments.<name>.<key>``); or 2 after
    printing each problem on one line (never a traceback)."""
    context = context_of(pairs, context_file)
    if isinstance(context, str):
        print(f"error: {context}", file=sys.stderr)
        return 2
    from constructs_lib.deployment import ConfigError, DeploymentConfig, deployments_of, fleet_from_context

    base = _base(context_file)
    try:
        deployments = deployments_of(context, read_text=lambda path: (base / path).read_text(encoding="utf-8"))
        if deployments is None:
            return {None: DeploymentConfig.from_context(context)}
        fleet = fleet_from_context(context, deployments)
        return {d.name: d.config for d in fleet.deployments}
    except ConfigError as e:
        for problem in e.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def fleet_source(pairs: list[str], context_file: Path | None) -> str:
    """How the context gives its deployments map, for messages: ``deployments_file='fleet.json'`` or
    ``deployments``."""
    context = context_of(pairs, context_file)
    path = context.get("deployments_file") if isinstance(context, dict) else None
    return f"deployments_file={path!r}" if path is not None else "deployments"


def load_config(pairs: list[str], context_file: Path | None, deployment: str | None = None) -> Any:
    """The validated DeploymentConfig of the single deployment, or of the fleet's deployment ``deployment``
    names; 2 after printing each problem on one line (never a traceback): also for a fleet without
    ``deployment`` (the names listed) and for ``deployment`` without a fleet or not in it."""
    configs = load_configs(pairs, context_file)
    if isinstance(configs, int):
        return configs
    if None in configs:
        if deployment is not None:
            print(
                f"error: --deployment {deployment}: the context has no deployments map (deployments or "
                "deployments_file); without one it describes a single deployment: leave --deployment out",
                file=sys.stderr,
            )
            return 2
        return configs[None]
    names = ", ".join(str(name) for name in configs)
    source = fleet_source(pairs, context_file)
    if deployment is None:
        print(
            f"error: {source} holds {len(configs)} deployment(s) ({names}): choose one with --deployment NAME "
            "(its keys merged over the top-level ones, as cdk synth checks it)",
            file=sys.stderr,
        )
        return 2
    if deployment not in configs:
        print(f"error: --deployment {deployment}: not in {source}; allowed: {names}", file=sys.stderr)
        return 2
    return configs[deployment]
