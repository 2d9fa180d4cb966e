#!/usr/bin/env python3
"""CDK entry point: the only place that reads context (the keys: constructs_lib/deployment/context_keys.py)."""

import os
import sys
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# Warnings without their construct's creation stack trace (a bare "program.js:1:NNNN" line otherwise).
os.environ.setdefault("CDK_DISABLE_STACK_TRACE", "1")

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from constructs_lib import Refusal
from constructs_lib.deployment import RECORD, FactsSource
from llmops.facts import hub_lookup
from stacks import build_stacks

# The recorded Hub lookups, beside cdk.json (as cdk.context.json is): constructs_lib/model_facts.py.
FACTS = Path(__file__).resolve().parent / RECORD


def build_app(app: cdk.App, *, facts: FactsSource | None = None) -> cdk.App:
    """facts: where the model's Hub facts are recorded (and looked up when missing). Default: none, so the
    model checks wait for the deploy preflight (the tests' default: no network)."""
    build_stacks(app, app.node.get_all_context(), facts=facts)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def main() -> int:
    app = cdk.App()
    try:
        # A model the record lacks is looked up on the Hub (llmops/facts.py), then recorded.
        build_app(app, facts=FactsSource(FACTS, lookup=hub_lookup))
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
