"""Every ``Custom::`` resource in every template of the cloud assembly has a ``ServiceTimeout``.

Without one, CloudFormation waits an hour for a custom resource whose handler crashed (aws-cdk #24974,
PRODUCT.md section 8). This reads every ``*.template.json`` the app writes (nested stacks included) for
a few deployments, so a custom resource added anywhere, by any construct, is covered.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import build

# CloudFormation's limits for ServiceTimeout, in seconds.
SERVICE_TIMEOUT_RANGE = (1, 3600)
VARIANTS = {
    "default": {},
    "sglang": {"engine": "sglang", "instance_type": "ml.g6e.2xlarge"},
    "given-prefix": {"model_s3_uri": "s3://my-models/custom/qwen/"},
    "multi-gpu": {"instance_type": "ml.g6.12xlarge", "max_model_len": 16384},
}


@pytest.fixture(scope="module")
def assemblies(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name, overrides in VARIANTS.items():
        outdir = tmp_path_factory.mktemp(name)
        build(outdir=str(outdir), **overrides).synth()
        out[name] = outdir
    return out


def custom_resources(outdir: Path) -> dict[str, dict]:
    """``<template file>:<logical id>`` -> resource, for every Custom:: resource in the assembly."""
    found = {}
    templates = sorted(outdir.rglob("*.template.json"))
    assert templates, f"no template in {outdir}"
    for path in templates:
        for logical_id, resource in json.loads(path.read_text()).get("Resources", {}).items():
            if resource["Type"].startswith("Custom::") or resource["Type"] == "AWS::CloudFormation::CustomResource":
                found[f"{path.relative_to(outdir)}:{logical_id}"] = resource
    return found


def service_timeout(resource: dict) -> float | None:
    value = resource.get("Properties", {}).get("ServiceTimeout")
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_custom_resource_has_a_service_timeout(assemblies, variant):
    resources = custom_resources(assemblies[variant])
    assert resources, f"{variant}: no custom resource at all (the staged checkpoint or preflight should be there)"
    missing = {
        where: resource.get("Properties", {}).get("ServiceTimeout")
        for where, resource in resources.items()
        if (seconds := service_timeout(resource)) is None
        or not SERVICE_TIMEOUT_RANGE[0] <= seconds <= SERVICE_TIMEOUT_RANGE[1]
    }
    assert missing == {}, f"{variant}: custom resources without a ServiceTimeout in {SERVICE_TIMEOUT_RANGE} s"


def test_the_reader_sees_nested_templates_and_refuses_a_missing_timeout(tmp_path):
    """Guard against a check that passes everything: a nested template without ServiceTimeout is caught."""
    nested = {"Resources": {"Thing": {"Type": "Custom::Thing", "Properties": {"ServiceToken": "arn"}}}}
    parent = {"Resources": {"Ok": {"Type": "Custom::Ok", "Properties": {"ServiceToken": "a", "ServiceTimeout": "300"}}}}
    (tmp_path / "Parent.template.json").write_text(json.dumps(parent))
    (tmp_path / "assembly-Stage").mkdir()
    (tmp_path / "assembly-Stage" / "ParentNested1A2B3C.nested.template.json").write_text(json.dumps(nested))
    resources = custom_resources(tmp_path)
    assert set(resources) == {"Parent.template.json:Ok", "assembly-Stage/ParentNested1A2B3C.nested.template.json:Thing"}
    assert [w for w, r in resources.items() if service_timeout(r) is None] == [
        "assembly-Stage/ParentNested1A2B3C.nested.template.json:Thing"
    ]
