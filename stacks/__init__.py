"""The app's stacks: its context translated into the library's calls (constructs_lib.deployment), nothing more.

The keys, their parsers, scopes and defaults are the library's registry (constructs_lib/deployment/context_keys.py),
so a fleet file or settings mapping means the same in any CDK app as in this one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from constructs_lib.deployment import FactsSource, build_deployment_stack, build_fleet_stacks, deployments_of


def build_stacks(app: cdk.App, context: Mapping[str, Any], *, facts: FactsSource | None) -> list[cdk.Stack]:
    """A fleet's stacks when the context gives ``deployments`` or ``deployments_file`` (read here, relative to the
    working folder: the project's, under ``cdk``), else the one deployment's stack."""
    deployments = deployments_of(context, read_text=lambda path: Path(path).read_text(encoding="utf-8"))
    if deployments is not None:
        top = {key: value for key, value in context.items() if key not in ("deployments", "deployments_file")}
        return build_fleet_stacks(app, deployments, settings=top, facts=facts)
    return [build_deployment_stack(app, context, facts=facts)]
