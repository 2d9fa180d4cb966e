"""Edges of the staging worker that a mutation audit found no test stepping on.

Each test here kills one realistic bug: the length check disabled, and a rerun that trusts the
manifest without looking at the objects. Same setup as ``test_hfstage_worker``: the fake Hub over HTTP
into moto's S3 server over HTTP, nothing in the transfer path patched.
"""

from __future__ import annotations

import pytest

from hfstage.manifest import MANIFEST_NAME
from tests.fakes.fake_hub import FakeFile, FakeHub, Synthetic
from tests.fakes.fixtures import S3Env, boto_session, fake_hub, s3  # noqa: F401
from tests.hfstage.test_hfstage_worker import FILES, REPO, WEIGHTS_1, WEIGHTS_2, hub, prefix_of, stage  # noqa: F401


@pytest.mark.parametrize("ranges", ["8", "1"], ids=["ranges", "one-stream"])
@pytest.mark.parametrize("delta", [+4096, -4096], ids=["longer", "shorter"])
def test_a_file_of_another_length_than_the_revision_lists_fails_on_its_headers(
    stage,  # noqa: F811
    s3: S3Env,  # noqa: F811
    hub: FakeHub,  # noqa: F811
    delta: int,
    ranges: str,
) -> None:
    listed = hub.repos[REPO].files[WEIGHTS_2]
    # The CDN answers for the listed SHA-256 with an object of another length: a stale or wrong edge copy.
    other = FakeFile(WEIGHTS_2, Synthetic(listed.size + delta, seed=9), lfs=True)
    hub._by_sha256[listed.sha256] = other

    result = stage("--max-attempts=2", f"--ranges-per-file={ranges}")

    assert result.code == 1
    # The reason names both lengths: the user learns the Hub and the listing disagree, not "bad hash".
    assert f"the Hub sends {listed.size + delta} bytes, the revision lists {listed.size}" in result.message
    assert "does not match" not in result.message
    keys = s3.list_keys()
    prefix = prefix_of(hub)
    assert prefix + WEIGHTS_2 not in keys and prefix + MANIFEST_NAME not in keys
    assert s3.open_uploads() == []
    assert prefix + WEIGHTS_1 in keys  # the other files are staged


def test_rerun_restores_an_object_deleted_under_a_valid_manifest(
    stage,  # noqa: F811
    s3: S3Env,  # noqa: F811
    hub: FakeHub,  # noqa: F811
) -> None:
    assert stage().code == 0
    fetched_before = len(hub.requests_for(WEIGHTS_2))
    prefix = prefix_of(hub)
    s3.client.delete_object(Bucket=s3.bucket, Key=prefix + WEIGHTS_1)
    assert prefix + MANIFEST_NAME in s3.list_keys()  # the manifest alone still says "complete"

    again = stage()

    assert again.code == 0, again.message
    assert not again.events("up_to_date")
    assert s3.body(prefix + WEIGHTS_1) == FILES[WEIGHTS_1].to_bytes()
    # That file only; a hash checkpoint (an upload created, then aborted) may be saved between its parts.
    assert again.calls["CreateMultipartUpload"] == 1 + again.calls["AbortMultipartUpload"]
    assert len(again.events("skip")) == len(FILES) - 1
    assert len(hub.requests_for(WEIGHTS_2)) == fetched_before  # an intact file is not fetched again


def test_s3_refusing_the_writes_stops_the_run_with_the_transfer_exit_code_and_s3s_reason(
    s3: S3Env,  # noqa: F811
    hub: FakeHub,  # noqa: F811
    tmp_path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A permanent S3 error (a bucket policy denying the writes) is not one file's problem: the run stops, exits 1
    (a transfer failure, not 3, which means the Hub refused) and hands the user S3's own reason."""
    from botocore.awsrequest import AWSResponse

    from hfstage.worker import EXIT_TRANSFER, main

    client, _ = s3.worker_client()
    denied = {
        "Error": {"Code": "AccessDenied", "Message": "Access Denied"},
        "ResponseMetadata": {"HTTPStatusCode": 403},
    }
    for operation in ("PutObject", "CreateMultipartUpload"):
        client.meta.events.register(
            f"before-call.s3.{operation}", lambda **_: (AWSResponse("https://s3.test/", 403, {}, None), denied)
        )
    message = tmp_path / "message"
    argv = [f"--repo-id={REPO}", f"--destination=s3://{s3.bucket}/models/", "--part-size-mib=5"]
    code = main([*argv, "--retry-base-s=0.01", f"--failure-file={message}"], s3_client=client)
    out = capsys.readouterr().out
    assert code == EXIT_TRANSFER == 1, out
    assert "AccessDenied (HTTP 403)" in message.read_text(), message.read_text()
    assert s3.list_keys() == []
