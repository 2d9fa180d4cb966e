#!/usr/bin/env python3
"""A user's own CDK app that builds a fleet from a file with the installed library (tests/package synthesizes it
outside the repo, beside ``fleet.json`` and ``settings.json``).

The fleet file is this project's format (docs/guide/fleets.md); the settings are the top-level keys every
deployment inherits (docs/context-keys.md): here the user's private subnets and security group, their key for
logs and function environments, and their tags. cdk-nag is the app's own choice, as in any CDK app.
"""

import json
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from constructs_lib.deployment import build_fleet_stacks

HERE = Path(__file__).resolve().parent

app = cdk.App()
settings = json.loads((HERE / "settings.json").read_text())
build_fleet_stacks(app, HERE / "fleet.json", settings=settings)
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
