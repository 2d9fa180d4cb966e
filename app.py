#!/usr/bin/env python3
"""CDK entry point: the only place that reads context (see stacks/config.py for the keys)."""

import os
import sys
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# Warnings without their construct's creation stack trace (a bare "program.js:1:NNNN" line otherwise).
os.environ.setdefault("CDK_DISABLE_STACK_TRACE", "1")

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from constructs_lib import Refusal
from llmops.facts import METADATA_KEY, RECORD, FactsSource
from stacks.config import ConfigError, DeploymentConfig
from stacks.fleet import deployments_of, fleet_from_context
from stacks.fleet_stacks import build_fleet
from stacks.llm_endpoint_stack import LlmEndpointStack
from stacks.model_checks import check_deployment, check_fleet, fleet_metadata

# The recorded Hub lookups, beside cdk.json (as cdk.context.json is): llmops/facts.py.
FACTS = Path(__file__).resolve().parent / RECORD


def build_app(app: cdk.App, *, facts: FactsSource | None = None) -> cdk.App:
    """facts: where the model's Hub facts are recorded (and looked up when missing). Default: none, so the
    model checks wait for the deploy preflight (the tests' default: no network)."""
    context = app.node.get_all_context()
    deployments = deployments_of(context, read_text=lambda path: Path(path).read_text(encoding="utf-8"))
    if deployments is not None:  # a fleet: one stack per endpoint and the app's bucket (docs/guide/fleets.md)
        # Each deployment's model is looked up and checked as a single deployment's is, with its merged keys.
        fleet, statuses, problems = check_fleet(fleet_from_context(context, deployments), facts)
        if problems:
            raise ConfigError(problems)
        stacks = {stack.node.id: stack for stack in build_fleet(app, fleet)}
        for endpoint in fleet.endpoints:
            # Template-level Metadata holds arbitrary JSON (CloudFormation template anatomy, "Metadata" section);
            # CDK writes Stack.templateOptions.metadata there when it synthesizes the stack (aws-cdk-lib Stack).
            options = stacks[endpoint.stack_name].template_options
            options.metadata = {**(options.metadata or {}), METADATA_KEY: fleet_metadata(endpoint, statuses)}
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        return app
    config = DeploymentConfig.from_context(context)
    # The lookup is a step of the app, like CDK's own context lookups: the facts come from the record when
    # it has them, from the Hub (then recorded) when not; the checks then refuse what cannot run.
    config, status, problems = check_deployment(config, facts)
    if problems:
        raise ConfigError(problems)
    LlmEndpointStack(app, config.stack_name, config=config, model_facts=status)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def main() -> int:
    app = cdk.App()
    try:
        build_app(app, facts=FactsSource(FACTS))
    except Refusal as e:  # the context's keys (ConfigError) or a construct's props: one format
        print(e, file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"Invalid settings: {e}", file=sys.stderr)
        return 2
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
