#!/usr/bin/env python3
"""CDK entry point: the only place that reads context (see stacks/config.py for the keys)."""

import os
import sys

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# Warnings without their construct's creation stack trace (a bare "program.js:1:NNNN" line otherwise).
os.environ.setdefault("CDK_DISABLE_STACK_TRACE", "1")

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from constructs_lib import Refusal
from stacks.config import DeploymentConfig
from stacks.llm_endpoint_stack import LlmEndpointStack


def build_app(app: cdk.App) -> cdk.App:
    config = DeploymentConfig.from_context(app.node.get_all_context())
    LlmEndpointStack(app, config.stack_name, config=config)
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
