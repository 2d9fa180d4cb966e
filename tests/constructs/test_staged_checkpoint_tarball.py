"""``StagedCheckpoint(source_s3_uri=...)``: a model.tar.gz unpacked by the staging job; props, grants and refusals."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template

from constructs_lib import StagedCheckpoint
from hfstage.tarball import archive_prefix
from tests.constructs.test_staged_checkpoint import KEY_ARN, feature_flags

ARCHIVE = "s3://my-training/job-7/output/model.tar.gz"
ARCHIVE_ARN = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::my-training/job-7/output/model.tar.gz"]]}


def synth(**props) -> tuple[cdk.Stack, Template]:
    app = cdk.App(context=feature_flags())
    stack = cdk.Stack(app, "Staging")
    if props.pop("with_key", False):
        props["source_encryption_key"] = kms.Key.from_key_arn(stack, "SourceKey", KEY_ARN)
    StagedCheckpoint(stack, "Checkpoint", **{"source_s3_uri": ARCHIVE, **props})
    return stack, Template.from_stack(stack)


def statements(template: Template) -> list[tuple[str, dict]]:
    return [
        (name, st)
        for name, policy in template.find_resources("AWS::IAM::Policy").items()
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def names_archive(statement: dict) -> bool:
    resource = statement["Resource"]
    return resource == ARCHIVE_ARN or (isinstance(resource, list) and ARCHIVE_ARN in resource)


def test_the_archive_is_a_property_and_the_repo_is_empty() -> None:
    _, t = synth()
    t.has_resource_properties("Custom::StagedCheckpoint", {"RepoId": "", "SourceS3Uri": ARCHIVE, "Revision": "main"})


def test_the_job_and_the_handler_may_read_exactly_the_archive() -> None:
    _, t = synth()
    readers = {name for name, st in statements(t) if names_archive(st)}
    assert len(readers) == 2 and any(n.startswith("CheckpointJobRole") for n in readers)
    assert all(st["Action"] == "s3:GetObject" for _, st in statements(t) if names_archive(st))
    # No decrypt without a key, and no listing of the training bucket.
    assert not [st for _, st in statements(t) if "kms:Decrypt" in json.dumps(st["Action"])]
    assert 'arn:aws:s3:::my-training"' not in json.dumps(t.to_json())


def test_a_kms_key_lets_both_decrypt() -> None:
    _, t = synth(with_key=True)
    decrypting = {name for name, st in statements(t) if "kms:Decrypt" in json.dumps(st["Action"])}
    assert decrypting == {name for name, st in statements(t) if names_archive(st)}


def test_reads_and_writes_are_scoped_to_the_archives_prefixes() -> None:
    _, t = synth()
    scope = archive_prefix("models/", ARCHIVE)
    assert scope.startswith("models/s3-tarball--") and scope.endswith("/")
    # The job writes and reads only under the prefix of this archive (every ETag of it), in the app's bucket.
    writes = [st for _, st in statements(t) if "s3:PutObject" in st["Action"]]
    assert [st["Resource"]["Fn::Join"][1][1] for st in writes] == [f"/{scope}*"]
    assert "s3:AbortMultipartUpload" in writes[0]["Action"]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"repo_id": "Qwen/Qwen3-8B"}, "give exactly one"),
        ({"source_s3_uri": None}, "give exactly one"),
        ({"source_s3_uri": "s3://my-training/job/output/model.tar"}, r"is not s3://<bucket>/<key>\.tar\.gz"),
        ({"source_s3_uri": "s3://my-training/${aws:username}/model.tar.gz"}, "IAM reads as a variable"),
        ({"revision": "v2"}, "does not apply to source_s3_uri"),
        ({"source_s3_uri": "s3://my-training/" + "k" * 300 + ".tar.gz"}, "at most 256"),
    ],
)
def test_bad_sources_are_refused_at_synth(props: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        synth(**props)


def test_an_unresolved_source_is_refused() -> None:
    app = cdk.App(context=feature_flags())
    stack = cdk.Stack(app, "Staging")
    uri = cdk.CfnParameter(stack, "Archive").value_as_string
    with pytest.raises(ValueError, match="must be known at synth"):
        StagedCheckpoint(stack, "Checkpoint", source_s3_uri=uri)
