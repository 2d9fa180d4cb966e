"""The staging handler with a VPC, tags and a volume key: the CreateProcessingJob request as botocore validates it
(Stubber checks every parameter against the SageMaker service model), and the update that adds them to a deployed
stack, which stages nothing again."""

from __future__ import annotations

from tests.fakes.fixtures import fake_hub, s3  # noqa: F401
from tests.handlers.test_staging_handler import event, handler, properties, receiver, revision_uri, stage_by_hand  # noqa: F401

SUBNETS = ["subnet-0123456789abcdef0", "subnet-89abcdef"]
GROUP = "sg-0123456789abcdef0"
KEY = "arn:aws:kms:us-east-1:123456789012:key/9876abcd-12ab-34cd-56ef-1234567890ab"
GOVERNED = {
    "Subnets": SUBNETS,
    "SecurityGroupIds": [GROUP],
    "Tags": [{"Key": "cost-center", "Value": "ml 42"}],
    "VolumeKmsKeyId": KEY,
}


def test_a_create_in_a_vpc_starts_the_job_in_its_subnets_with_the_key_and_tags(handler, receiver):  # noqa: F811
    captured = {}
    handler.test_stubber.add_response("create_processing_job", {"ProcessingJobArn": "arn:job"})
    handler.test_stubber.client.meta.events.register_first(
        "provide-client-params.sagemaker.CreateProcessingJob", lambda params, **_: captured.update(params)
    )
    handler.on_event(event("Create", properties(receiver, **GOVERNED)))
    assert captured["NetworkConfig"] == {"VpcConfig": {"Subnets": SUBNETS, "SecurityGroupIds": [GROUP]}}
    assert captured["ProcessingResources"]["ClusterConfig"]["VolumeKmsKeyId"] == KEY
    assert {"Key": "cost-center", "Value": "ml 42"} in captured["Tags"]
    assert captured["Environment"]["HFSTAGE_PROBE_TIMEOUT_S"] == "10"


def test_an_update_that_adds_the_vpc_to_a_staged_revision_starts_no_job(handler, s3, fake_hub, receiver):  # noqa: F811
    """The network, tags and key decide where a job runs, not what is staged: nothing is staged again."""
    stage_by_hand(s3, fake_hub)
    _, uri = revision_uri(fake_hub)
    result = handler.on_event(  # the Stubber has no CreateProcessingJob answer: a job would fail this test
        event(
            "Update",
            properties(receiver, **GOVERNED),
            PhysicalResourceId=uri,
            OldResourceProperties=properties(receiver),
        )
    )
    assert result["PhysicalResourceId"] == uri
    assert receiver.signals and receiver.signals[-1]["Status"] == "SUCCESS"
