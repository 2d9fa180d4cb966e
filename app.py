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
from stacks.config import DeploymentConfig
from stacks.fleet import deployments_of, fleet_from_context
from stacks.fleet_stacks import build_fleet
from stacks.llm_endpoint_stack import LlmEndpointStack


def build_app(app: cdk.App) -> cdk.App:
    context = app.node.get_all_context()
    deployments = deployments_of(context, read_text=lambda path: Path(path).read_text(encoding="utf-8"))
    if deployments is None:
        config = DeploymentConfig.from_context(context)
        LlmEndpointStack(app, config.stack_name, config=config)
    else:  # a fleet: one stack per endpoint and the app's bucket (docs/guide/fleets.md)
        build_fleet(app, fleet_from_context(context, deployments))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def main() -> int:
    app = cdk.App()
    try:
        build_app(app)
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
