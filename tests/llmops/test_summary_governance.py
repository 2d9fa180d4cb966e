"""``llmops summary`` reads the stacks manifest.json lists (not a stale template left in cdk.out), and names what a
reviewer of a governed account looks for: adapters, the VPC placement, the customer keys and the tags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmops.summary import governance_lines, main
from tests.conftest import stack_template

KEY = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
SUBNETS = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]


def _assembly(folder: Path, listed: list[str], present: list[str]) -> None:
    artifacts = {
        name: {"type": "aws:cloudformation:stack", "properties": {"templateFile": f"{name}.template.json"}}
        for name in listed
    }
    artifacts["Tree"] = {"type": "cdk:tree", "properties": {"file": "tree.json"}}
    (folder / "manifest.json").write_text(json.dumps({"version": "43.0.0", "artifacts": artifacts}))
    for name in present:
        (folder / f"{name}.template.json").write_text(json.dumps({"Description": name, "Resources": {}}))


def test_only_the_stacks_of_the_manifest_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _assembly(tmp_path, listed=["App-chat"], present=["App-chat", "App-old"])  # App-old: an earlier synth's
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "App-chat.template.json") in out and "App-old" not in out


@pytest.mark.parametrize(
    ("listed", "message"), [(None, "no manifest.json in"), ([], "no stacks in")], ids=["no manifest", "no stacks"]
)
def test_an_assembly_without_stacks_is_refused(tmp_path: Path, capsys, listed, message: str) -> None:
    if listed is not None:
        _assembly(tmp_path, listed=listed, present=["Stale"])
    else:
        (tmp_path / "Stale.template.json").write_text("{}")
    assert main([str(tmp_path)]) == 1
    assert message in capsys.readouterr().err


def test_the_default_stack_names_no_vpc_its_alarm_key_and_its_tags() -> None:
    vpc, keys, tags = governance_lines(stack_template(tags={"team": "ml"}).to_json()["Resources"])
    assert vpc == "  VPC: none (SageMaker's own network; vpc_subnet_ids places it in yours)"
    assert keys.startswith("  customer keys: alarm topic <AlarmTopicKey")  # the key the stack makes for its alarms
    assert "," not in keys
    assert tags == "  tags: llm-endpoint-app=LlmEndpoint, team=ml"


def test_a_governed_stack_names_its_subnets_groups_and_keys() -> None:
    template = stack_template(vpc_subnet_ids=SUBNETS, vpc_id="vpc-0123456789abcdef0", logs_kms_key_arn=KEY)
    lines = governance_lines(template.to_json()["Resources"])
    assert any(line.startswith(f"  VPC: subnets {', '.join(SUBNETS)}; security groups <") for line in lines)
    assert any(line.startswith("  customer keys: ") and f"logs {KEY} (x" in line for line in lines)


def test_an_adapter_is_named_with_its_base_and_artifact() -> None:
    resources = {
        "Adapter": {
            "Type": "AWS::SageMaker::InferenceComponent",
            "Properties": {
                "InferenceComponentName": "App-chat-sql",
                "Specification": {
                    "BaseInferenceComponentName": "App-chat-Base",
                    "Container": {"ArtifactUrl": "s3://b/adapters/sql.tar.gz"},
                },
            },
        },
        "Config": {
            "Type": "AWS::SageMaker::EndpointConfig",
            "Properties": {"KmsKeyId": KEY, "VpcConfig": {"Subnets": SUBNETS, "SecurityGroupIds": ["sg-1"]}},
        },
    }
    assert governance_lines(resources) == [
        "  adapter App-chat-sql on App-chat-Base: s3://b/adapters/sql.tar.gz",
        f"  VPC: subnets {', '.join(SUBNETS)}; security groups sg-1",
        f"  customer keys: endpoint volumes {KEY}",
        "  tags: none",
    ]
