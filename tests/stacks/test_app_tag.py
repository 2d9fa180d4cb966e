"""The app's own tag (constructs_lib/deployment/parsers.py APP_TAG) on the stack and every SageMaker resource:
``llmops status``."""

from __future__ import annotations

import pytest

from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.deployment.parsers import APP_TAG
from tests.conftest import build, context_with


@pytest.mark.parametrize("mode", ["standard", "inference-component"])
def test_the_stack_and_every_sagemaker_resource_carry_the_app_tag(tmp_path, mode: str) -> None:
    from llmops.status import APP_TAG as STATUS_TAG

    assert STATUS_TAG == APP_TAG
    app = build(outdir=str(tmp_path), stack_name="MyApp", deployment_mode=mode, tags={"team": "ml"})
    artifact = app.synth().get_stack_by_name("MyApp")
    assert artifact.tags == {"team": "ml", APP_TAG: "MyApp"}  # CloudFormation stack tags (DescribeStacks Tags)
    kinds = []
    for resource in artifact.template["Resources"].values():
        if resource["Type"].startswith("AWS::SageMaker::"):
            kinds.append(resource["Type"])
            assert {"Key": APP_TAG, "Value": "MyApp"} in resource["Properties"]["Tags"], resource["Type"]
    assert "AWS::SageMaker::Endpoint" in kinds and "AWS::SageMaker::Model" in kinds


@pytest.mark.parametrize("key", [APP_TAG, APP_TAG.upper()])
def test_the_app_tag_key_is_refused_in_tags(key: str) -> None:
    with pytest.raises(ConfigError, match=f"tags.*'{key}': set by the app itself"):
        DeploymentConfig.from_context(context_with(tags={key: "x"}))
