"""``StagedCheckpoint(pack=True)``: a Hub adapter packed into one .tar.gz; the property, the scope, the archive URI."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from constructs_lib import StagedCheckpoint
from constructs_lib.problems import Refusal
from tests.constructs.test_staged_checkpoint import feature_flags

SHA = "0123456789abcdef0123456789abcdef01234567"


def synth(**props) -> tuple[cdk.Stack, StagedCheckpoint, Template]:
    app = cdk.App(context=feature_flags())
    stack = cdk.Stack(app, "Staging")
    checkpoint = StagedCheckpoint(stack, "Checkpoint", **{"repo_id": "org/sql-lora", **props})
    role = iam.Role(stack, "Reader", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    if checkpoint.pack:
        checkpoint.grant_read_archive(role)
    return stack, checkpoint, Template.from_stack(stack)


def test_pack_is_a_property_only_when_set() -> None:
    _, _, t = synth(pack=True)
    t.has_resource_properties("Custom::StagedCheckpoint", {"Pack": "true"})
    _, _, plain = synth()
    (resource,) = plain.find_resources("Custom::StagedCheckpoint").values()
    assert "Pack" not in resource["Properties"]  # templates without pack keep their properties (and hash)


def test_a_pinned_revision_is_written_and_read_under_its_packed_prefix() -> None:
    _, _, t = synth(pack=True, revision=SHA)
    text = json.dumps(t.to_json())
    assert f"org--sql-lora/{SHA}-packed/*" in text and f"org--sql-lora/{SHA}/*" not in text


def test_the_archive_uri_and_its_one_object_grant() -> None:
    stack, checkpoint, t = synth(pack=True)
    assert stack.resolve(checkpoint.archive_uri) == {
        "Fn::Join": ["", [{"Fn::GetAtt": ["CheckpointE4CA7131", "S3Uri"]}, "model.tar.gz"]]
    }
    (policy,) = [p for k, p in t.find_resources("AWS::IAM::Policy").items() if k.startswith("ReaderDefaultPolicy")]
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "s3:GetObject"
    assert statement["Resource"]["Fn::Join"][1][-2:] == [
        {"Fn::GetAtt": ["CheckpointE4CA7131", "Prefix"]},
        "model.tar.gz",
    ]
    with pytest.raises(ValueError, match="pack=True"):
        _ = synth()[1].archive_uri


def test_pack_with_an_s3_archive_is_refused() -> None:
    with pytest.raises(Refusal, match="pack=True with source_s3_uri"):
        synth(repo_id=None, source_s3_uri="s3://b/job/output/model.tar.gz", pack=True)


def test_the_adapter_check_is_written_only_with_a_rank_and_needs_pack() -> None:
    _, _, t = synth(pack=True, max_lora_rank=32, adapter_base_model_id="Qwen/Qwen3-0.6B")
    t.has_resource_properties("Custom::StagedCheckpoint", {"MaxLoraRank": "32", "AdapterBase": "Qwen/Qwen3-0.6B"})
    _, _, unchecked = synth(pack=True, adapter_base_model_id="Qwen/Qwen3-0.6B")
    (resource,) = unchecked.find_resources("Custom::StagedCheckpoint").values()
    assert "MaxLoraRank" not in resource["Properties"] and "AdapterBase" not in resource["Properties"]
    with pytest.raises(Refusal, match="max_lora_rank=16: needs pack=True"):
        synth(max_lora_rank=16)
    with pytest.raises(Refusal, match="max_lora_rank=0: needs pack=True and a whole number of at least 1"):
        synth(pack=True, max_lora_rank=0)
