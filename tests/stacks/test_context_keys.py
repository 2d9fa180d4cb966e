"""The context-key registry is the one source: cdk.json's defaults and docs/context-keys.md come from it."""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path

from constructs_lib.deployment.config import DeploymentConfig, is_cdk_key
from constructs_lib.deployment.context_keys import FIELDS, KEYS, SECTIONS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import context_docs  # noqa: E402


def test_cdk_json_and_the_key_table_are_generated_from_the_registry():
    assert context_docs.main(["--check"]) == 0, "run: .venv/bin/python tools/context_docs.py"


def test_every_key_is_declared_once_with_a_doc_a_section_and_a_described_parser():
    names = [key.name for key in KEYS]
    assert len(names) == len(set(names))
    for key in KEYS:
        assert key.doc.strip() and key.section in SECTIONS and key.allowed not in ("", "None"), key.name


def test_every_default_in_the_registry_parses_with_its_own_parser():
    for key in KEYS:
        if key.default is not None:
            key.parse(key.default)


def test_the_config_has_a_field_for_every_key_and_no_other_context_field():
    derived = {"serving_image", "image_source"}
    fields = {f.name for f in dataclasses.fields(DeploymentConfig)} - derived
    assert fields == set(FIELDS)


def test_cdk_json_holds_exactly_the_registry_keys_besides_cdks_own():
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    ours = [k for k in context if not is_cdk_key(k)]
    assert ours == [key.name for key in KEYS]


def test_the_config_modules_do_not_import_each_other():
    """observability.py may name DeploymentConfig for type checking only; config.py imports it."""
    tree = ast.parse((ROOT / "constructs_lib" / "deployment" / "observability.py").read_text())
    runtime_imports = [
        node.module
        for node in tree.body  # module level only: the TYPE_CHECKING block is an If, not an import
        if isinstance(node, ast.ImportFrom)
    ]
    assert "config" not in runtime_imports and "constructs_lib.deployment.config" not in runtime_imports
