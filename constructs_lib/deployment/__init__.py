"""Whole deployments and fleets from settings, in any CDK app: what this project's ``cdk deploy`` builds.

The settings are the context keys of docs/context-keys.md (the registry, ``context_keys.py``), given as a mapping
(values may be text, as ``-c key=value`` gives them); a key left out takes the registry's default. A fleet is the
``deployments`` map of docs/guide/fleets.md, inline or as a JSON file::

    app = cdk.App()
    facts = FactsSource("model-facts.json", lookup=hub_lookup)  # hub_lookup: from llmops.facts
    build_fleet_stacks(app, "fleet.json", settings={"stack_name": "Chat"}, facts=facts)
    app.synth()

Each deployment's model is checked at synth against its recorded Hub facts (``FactsSource``: a
``model-facts.json``, and the lookup that fills it when a model is missing, such as ``llmops.facts.hub_lookup``;
``None``: the deploy preflight checks it), and every problem is refused at once (``ConfigError``, a ``Refusal``)
naming ``deployments.<name>.<key>``. This project's own app.py is these two calls; cdk-nag is the host app's
choice (docs/constructs/README.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from constructs_lib.model_facts import METADATA_KEY, RECORD, FactsLookup, FactsSource, FactsUnavailable, ModelFacts

from .config import ConfigError, DeploymentConfig
from .context_keys import KEYS, ContextKey
from .fleet import FLEET_KEYS, Fleet, deployments_of, fleet_from_context
from .fleet_stacks import build_fleet
from .llm_endpoint_stack import LlmEndpointStack
from .model_checks import check_deployment, check_fleet, check_settings, facts_of, fleet_metadata

__all__ = [
    "KEYS",
    "RECORD",
    "ConfigError",
    "ContextKey",
    "DeploymentConfig",
    "FactsLookup",
    "FactsSource",
    "FactsUnavailable",
    "Fleet",
    "LlmEndpointStack",
    "ModelFacts",
    "build_deployment_stack",
    "build_fleet_stacks",
    "check_settings",
    "deployments_of",
    "fleet_from_context",
    "settings_with_defaults",
]


def settings_with_defaults(settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``settings`` over every registry default (what cdk.json holds in this project), CDK's own keys kept."""
    defaults = {key.name: key.default for key in KEYS if key.default is not None}
    return {**defaults, **(settings or {})}


def build_deployment_stack(
    scope: cdk.App, settings: Mapping[str, Any] | None = None, *, facts: FactsSource | None = None
) -> LlmEndpointStack:
    """One deployment's stack, named ``stack_name``, from ``settings``; refused with ``ConfigError`` (every
    problem, each naming its key) before any construct exists."""
    given = sorted(set(settings or {}) & set(FLEET_KEYS))
    if given:  # a fleet is build_fleet_stacks's: here it would be ignored
        raise ConfigError([f"{key}: a fleet's map; give it to build_fleet_stacks, not in one deployment's settings"
                           for key in given])  # fmt: skip
    config = DeploymentConfig.from_context(settings_with_defaults(settings))
    # The lookup is a step of the app, like CDK's own context lookups: the record when it has the model, the
    # source's lookup (then recorded) when not; the checks then refuse what cannot run.
    config, status, problems = check_deployment(config, facts_of(config, facts))
    if problems:
        raise ConfigError(problems)
    return LlmEndpointStack(scope, config.stack_name, config=config, model_facts=status)


def build_fleet_stacks(
    scope: cdk.App,
    deployments: Mapping[str, Any] | str | Path,
    *,
    settings: Mapping[str, Any] | None = None,
    facts: FactsSource | None = None,
) -> list[cdk.Stack]:
    """A fleet's stacks: the app's model bucket stack when some deployment stages, then one stack per endpoint
    (``<stack_name>-<endpoint>``). ``deployments``: the map itself, or the path of a JSON file holding it (read
    as UTF-8, duplicate keys refused); ``settings``: the top-level keys every deployment inherits."""
    given = sorted(set(settings or {}) & set(FLEET_KEYS))
    if given:  # the map is the deployments argument; a second one in settings would be ignored
        raise ConfigError([f"settings.{key}: give the fleet's map as the deployments argument only" for key in given])
    context = settings_with_defaults(settings)
    if isinstance(deployments, (str, Path)):
        path = str(deployments)
        found = deployments_of({"deployments_file": path}, read_text=lambda p: Path(p).read_text(encoding="utf-8"))
    else:
        found = deployments_of({"deployments": dict(deployments)}, read_text=str)
    # Each deployment's model is looked up and checked as a single deployment's is, with its merged keys.
    fleet, statuses, problems = check_fleet(fleet_from_context(context, found or {}), facts)
    if problems:
        raise ConfigError(problems)
    stacks = build_fleet(scope, fleet)
    by_name = {stack.node.id: stack for stack in stacks}
    for endpoint in fleet.endpoints:
        # Template-level Metadata holds arbitrary JSON (CloudFormation template anatomy, "Metadata" section);
        # CDK writes Stack.templateOptions.metadata there when it synthesizes the stack (aws-cdk-lib Stack).
        options = by_name[endpoint.stack_name].template_options
        options.metadata = {**(options.metadata or {}), METADATA_KEY: fleet_metadata(endpoint, statuses)}
    return stacks
