"""Commands users run from the repository root: ``python -m llmops.<command>``."""

import os

# The commands import aws-cdk-lib (through constructs_lib); keep jsii's Node.js banner out of their output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
