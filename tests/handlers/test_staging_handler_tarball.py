"""``Custom::StagedCheckpoint`` with ``SourceS3Uri``: a model.tar.gz planned, staged and verified like a Hub revision.

The same fixtures as test_staging_handler: moto's S3 over HTTP, a Stubber for SageMaker, a local wait-handle
receiver. The archive is unpacked by the worker itself (hfstage.tarball), run in this process.
"""

from __future__ import annotations

import io
import tarfile

import pytest
from botocore.stub import ANY

from hfstage.manifest import MANIFEST_NAME
from hfstage.tarball import tarball_prefix
from hfstage.worker import main as stage
from tests.fakes.fixtures import BUCKET, fake_hub, s3  # noqa: F401
from tests.handlers.test_staging_handler import (  # noqa: F401
    EXPECTED_JOB_KEYS,
    PREFIX,
    event,
    handler,
    properties,
    receiver,
    state_change,
)

ARCHIVE_KEY = "training/job-7/output/model.tar.gz"
ARCHIVE = f"s3://{BUCKET}/{ARCHIVE_KEY}"
FILES = {"config.json": b'{"model_type": "llama", "num_hidden_layers": 2}', "model.safetensors": b"w" * 4096}


def put_archive(s3_env, files: dict[str, bytes] = FILES) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    s3_env.client.put_object(Bucket=BUCKET, Key=ARCHIVE_KEY, Body=buffer.getvalue())
    etag = s3_env.client.head_object(Bucket=BUCKET, Key=ARCHIVE_KEY)["ETag"].strip('"')
    return etag


def tar_properties(receiver=None, **overrides) -> dict:  # noqa: F811
    return properties(receiver, **{"RepoId": "", "SourceS3Uri": ARCHIVE, "Exclude": ["model.py"], **overrides})


def unpack_by_hand(s3_env) -> None:
    client, _ = s3_env.worker_client()
    argv = ["--source-s3-uri", ARCHIVE, "--destination", f"s3://{BUCKET}/models/", "--exclude", "model.py"]
    assert stage(argv, s3_client=client) == 0


def job(name: str, status: str, target: str, etag: str) -> dict:
    return {
        "ProcessingJobName": name,
        "ProcessingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:processing-job/{name}",
        "ProcessingJobStatus": status,
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.2xlarge", "VolumeSizeInGB": 30}
        },
        "AppSpecification": {
            "ImageUri": "img",
            "ContainerArguments": [
                "--source-s3-uri",
                ARCHIVE,
                "--source-etag",
                etag,
                "--destination",
                f"s3://{BUCKET}/models/",
            ],
        },
        "Environment": {"HFSTAGE_TARGET": target},
        "CreationTime": "2026-11-29T00:00:00Z",
    }


def test_an_unstaged_archive_starts_one_job_pinned_to_its_etag(handler, s3, receiver):  # noqa: F811
    etag = put_archive(s3)
    uri = f"s3://{BUCKET}/{tarball_prefix('models/', ARCHIVE, etag)}"
    captured = {}
    handler.test_stubber.add_response(
        "create_processing_job", {"ProcessingJobArn": "arn:job"}, {k: ANY for k in EXPECTED_JOB_KEYS}
    )
    handler.test_stubber.client.meta.events.register_first(
        "provide-client-params.sagemaker.CreateProcessingJob", lambda params, **_: captured.update(params)
    )
    result = handler.on_event(event("Create", tar_properties(receiver)))
    assert result["PhysicalResourceId"] == uri
    assert result["Data"]["Revision"] == etag
    assert captured["AppSpecification"]["ContainerArguments"] == [
        "--source-s3-uri",
        ARCHIVE,
        "--source-etag",
        etag,
        "--destination",
        f"s3://{BUCKET}/models/",
        "--exclude",
        "model.py",
    ]
    assert captured["Environment"]["HFSTAGE_TARGET"] == uri
    assert captured["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 1  # one stream, one host
    assert {"Key": "hf-repo-id", "Value": ARCHIVE} in captured["Tags"]
    assert receiver.signals == []


def test_a_staged_archive_starts_no_job_and_signals(handler, s3, receiver):  # noqa: F811
    etag = put_archive(s3)
    unpack_by_hand(s3)
    result = handler.on_event(event("Create", tar_properties(receiver)))  # the stubber refuses any job
    prefix = tarball_prefix("models/", ARCHIVE, etag)
    assert result["PhysicalResourceId"] == f"s3://{BUCKET}/{prefix}"
    assert result["Data"]["JobName"] == "" and result["Data"]["Files"] == "2"
    assert result["Data"]["ManifestUri"] == f"s3://{BUCKET}/{prefix}{MANIFEST_NAME}"
    assert [s["Status"] for s in receiver.signals] == ["SUCCESS"]
    assert ARCHIVE in receiver.signals[0]["Reason"]


def test_a_completed_job_is_verified_then_signalled(handler, s3, receiver):  # noqa: F811
    etag = put_archive(s3)
    unpack_by_hand(s3)
    prefix = tarball_prefix("models/", ARCHIVE, etag)
    uri = f"s3://{BUCKET}/{prefix}"
    handler.test_stubber.add_response("describe_processing_job", job(f"{PREFIX}abc", "Completed", uri, etag))
    data = {"Revision": etag, "S3Uri": uri, "Prefix": prefix, "JobName": f"{PREFIX}abc", "StartedAt": "0"}
    created = event("Create", tar_properties(receiver), PhysicalResourceId=uri, Data=data)
    assert handler.is_complete(created) == {"IsComplete": True}
    assert [(s["Status"], s["Data"]) for s in receiver.signals] == [("SUCCESS", etag)]
    # The EventBridge path reads the archive and ETag from the job's own arguments.
    handler.test_stubber.add_response("describe_processing_job", job(f"{PREFIX}abc", "Completed", uri, etag))
    assert handler.on_job_state_change(state_change(receiver, f"{PREFIX}abc")) == {"signalled": True, "success": True}


def test_a_state_change_for_another_etag_signals_failure(handler, s3, receiver):  # noqa: F811
    etag = put_archive(s3)
    unpack_by_hand(s3)
    uri = f"s3://{BUCKET}/{tarball_prefix('models/', ARCHIVE, etag)}"
    other = "0" * 32
    handler.test_stubber.add_response("describe_processing_job", job(f"{PREFIX}abc", "Completed", uri, other))
    assert handler.on_job_state_change(state_change(receiver, f"{PREFIX}abc")) == {"signalled": True, "success": False}
    assert f"not {ARCHIVE}@{other}" in receiver.signals[0]["Reason"]


def test_an_archive_unpacked_with_other_patterns_is_staged_again(handler, s3, receiver):  # noqa: F811
    put_archive(s3)
    unpack_by_hand(s3)  # with --exclude model.py
    handler.test_stubber.add_response("create_processing_job", {"ProcessingJobArn": "arn:job"})
    result = handler.on_event(event("Create", tar_properties(receiver, Exclude=["model.py", "*.md"])))
    assert result["Data"]["JobName"].startswith(PREFIX)


def test_a_missing_archive_fails_the_deploy_naming_it(handler, s3, receiver):  # noqa: F811
    with pytest.raises(handler.StagingError, match=rf"cannot read the archive {ARCHIVE}: 404: check model_s3_uri"):
        handler.on_event(event("Create", tar_properties(receiver)))


def test_the_hub_checkpoints_properties_do_not_change() -> None:
    from handler_kit.resources import StagedCheckpointProperties

    hub = StagedCheckpointProperties.from_properties(properties())
    assert "SourceS3Uri" not in hub.to_properties()
    assert hub.source == hub.repo_id
    archive = StagedCheckpointProperties.from_properties(tar_properties())
    assert archive.to_properties()["SourceS3Uri"] == ARCHIVE and archive.source == ARCHIVE
