"""One snapshot of the default template, as a tripwire for changes nobody meant to make.

Regenerate after an intended change with `UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/stacks/test_snapshot.py`
and review the diff of tests/snapshots/default.template.json like code.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from aws_cdk.assertions import Template

from tests.conftest import stack_template

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "default.template.json"


def normalized(template: Template) -> dict:
    """The template without what changes on every CDK release or worker edit: asset hashes, CDK metadata."""
    data = template.to_json()
    data.pop("Rules", None)
    data.pop("Parameters", None)
    data["Resources"] = {k: v for k, v in data["Resources"].items() if v["Type"] != "AWS::CDK::Metadata"}
    text = json.dumps(data, indent=2, sort_keys=True)
    text = re.sub(r"[0-9a-f]{64}\.zip", "<asset>.zip", text)
    # The staging wait condition, its handle and job names carry a hash of the staging properties, the
    # worker's asset among them: a change to the worker's code is not a change of the template's shape.
    text = re.sub(r"(CheckpointWait(?:Handle)?)[0-9a-f]{10}[0-9A-F]{8}", r"\1<token>", text)
    return json.loads(re.sub(r"(hfstage-[0-9a-f]{8}-)[0-9a-f]{10}-", r"\1<token>-", text))


def test_default_template_matches_the_snapshot():
    current = normalized(stack_template())
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    expected = json.loads(SNAPSHOT.read_text())
    assert current == expected, "default template changed; if intended, regenerate (see module docstring)"
