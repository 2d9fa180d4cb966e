"""One file through FileStager with S3 answers scripted by botocore's Stubber (moto cannot fail on cue)."""

from __future__ import annotations

import io
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from hfstage.events import EventLog, Progress
from hfstage.hub import HubClient
from hfstage.transfer import BufferPool, FileFailed, FileStager, PermanentError, Settings
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import boto_session, fake_hub  # noqa: F401

MiB = 1024 * 1024
REPO = "Org/Model"


def stager_for(
    hub: FakeHub, s3, uploads: ThreadPoolExecutor, log: io.StringIO | None = None, total: int = 0, **settings
) -> FileStager:
    """One file's stager over ``hub`` into bucket ``bkt``: 5 MiB parts, one in flight, no retry wait."""
    config = Settings(part_size=5 * MiB, parts_in_flight=1, retry_base_s=0.0, **settings)
    return FileStager(
        hub=HubClient(hub.endpoint),
        s3=s3,
        bucket="bkt",
        prefix="models/",
        repo_id=REPO,
        sha=hub.repos[REPO].sha,
        settings=config,
        pool=BufferPool(config.part_size, config.parts_in_flight),
        uploads=uploads,
        progress=Progress(1, total),
        log=EventLog(log if log is not None else io.StringIO()),
        stop=threading.Event(),
    )


def test_a_failed_completion_is_retried_without_downloading_again(fake_hub: FakeHub, s3_stub) -> None:  # noqa: F811
    client, stubber = s3_stub
    fake_hub.add_repo(REPO, {"w.safetensors": Synthetic(11 * MiB, seed=7)})
    stubber.add_response("create_multipart_upload", {"UploadId": "u1"})
    for _ in range(3):
        stubber.add_response("upload_part", {"ETag": '"e"'})
    stubber.add_client_error("complete_multipart_upload", service_error_code="InternalError", http_status_code=500)
    stubber.add_response("complete_multipart_upload", {"ETag": '"x-3"'})
    file = HubClient(fake_hub.endpoint).revision_info(REPO, "main").files[0]
    with ThreadPoolExecutor(1) as uploads:
        stager_for(fake_hub, client, uploads).stage(file)
    assert len(fake_hub.requests_for("w.safetensors")) == 2  # one redirect + one download: no second read


def test_a_permanent_s3_error_aborts_the_upload_and_stops(fake_hub: FakeHub, s3_stub) -> None:  # noqa: F811
    client, stubber = s3_stub
    fake_hub.add_repo(REPO, {"w.safetensors": Synthetic(11 * MiB, seed=7)})
    stubber.add_response("create_multipart_upload", {"UploadId": "u1"})
    stubber.add_client_error("upload_part", service_error_code="AccessDenied", http_status_code=403)
    # With one part buffer, the reader sees the failure before reading part 2: no more parts are sent.
    stubber.add_response(
        "abort_multipart_upload", {}, {"Bucket": "bkt", "Key": "models/w.safetensors", "UploadId": "u1"}
    )
    file = HubClient(fake_hub.endpoint).revision_info(REPO, "main").files[0]
    with ThreadPoolExecutor(1) as uploads, pytest.raises(PermanentError, match="UploadPart 1 of s3://bkt/models/"):
        stager_for(fake_hub, client, uploads).stage(file)


def test_transient_s3_errors_exhaust_the_attempts(fake_hub: FakeHub, s3_stub) -> None:  # noqa: F811
    client, stubber = s3_stub
    fake_hub.add_repo(REPO, {"config.json": b"{}"})
    for _ in range(2):
        stubber.add_client_error("put_object", service_error_code="SlowDown", http_status_code=503)
    file = HubClient(fake_hub.endpoint).revision_info(REPO, "main").files[0]
    with ThreadPoolExecutor(1) as uploads, pytest.raises(FileFailed, match=r"SlowDown.*gave up after 2 attempts"):
        stager_for(fake_hub, client, uploads, max_attempts=2).stage(file)
