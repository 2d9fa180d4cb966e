"""The staging worker's small contracts, each stated exactly: the manifest object as S3 stores it, the time it
records, checkpoint keys and their parts digest, and the one-line failure message's length limit.

These are what other code reads back (the handler reads the manifest and its metadata; a resumed run parses the
checkpoint keys an earlier run wrote), so a change in any of them is a change of format, not of wording.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import time

import pytest
from botocore.exceptions import ClientError

from hfstage.manifest import MANIFEST_NAME, build_manifest, utc_now, write_manifest
from hfstage.transfer import CHECKPOINT_DIR, checkpoint_key, parse_checkpoint_key, parts_digest
from hfstage.worker import one_line
from tests.fakes.fixtures import S3Env, s3  # noqa: F401


def short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_the_manifest_is_stored_as_indented_json_in_its_own_key_order_with_its_identity_as_metadata(
    s3: S3Env,  # noqa: F811
) -> None:
    manifest = build_manifest("org/model", "a" * 40, [], completed_at="2026-01-02T03:04:05Z", source="https://h.test")
    write_manifest(s3.client, s3.bucket, "models/x/", manifest)
    stored = s3.client.get_object(Bucket=s3.bucket, Key="models/x/" + MANIFEST_NAME)
    assert stored["ContentType"] == "application/json"
    assert stored["Metadata"] == {"hf-repo-id": "org/model", "hf-revision": "a" * 40}
    body = stored["Body"].read().decode()
    assert body == json.dumps(manifest, indent=2) + "\n"
    assert list(json.loads(body)) == [
        "schema_version",
        "source",
        "repo_id",
        "revision",
        "files",
        "total_bytes",
        "completed_at",
    ]
    assert body.startswith('{\n  "schema_version": ')


def test_the_manifest_source_has_no_trailing_slash():
    assert build_manifest("o/m", "s", [], completed_at="t", source="https://hub.test/")["source"] == "https://hub.test"
    assert build_manifest("o/m", "s", [], completed_at="t", source="https://hub.test")["source"] == "https://hub.test"


def test_completed_at_is_utc_to_the_second_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # 9 hours from UTC, no daylight saving
    time.tzset()
    try:
        before, stamp, after = int(time.time()), utc_now(), int(time.time())
    finally:
        monkeypatch.undo()
        time.tzset()
    assert len(stamp) == 20 and stamp[4] == "-" and stamp[10] == "T" and stamp.endswith("Z")
    assert before <= calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) <= after
    assert build_manifest("o/m", "s", [], source="x")["completed_at"][:4] == stamp[:4]


def test_a_checkpoint_key_lays_out_file_upload_part_digest_and_state():
    key = checkpoint_key("p/", "dir/w.safetensors", "upload-1", 7, b"\x00\xff", "d" * 16)
    assert key == f"p/{CHECKPOINT_DIR}{short('dir/w.safetensors')}/{short('upload-1')}/00007-{'d' * 16}-00ff"
    assert parse_checkpoint_key("p/", key) == (short("dir/w.safetensors"), short("upload-1"), 7, b"\x00\xff", "d" * 16)
    # Without a parts digest the field is empty, not a placeholder.
    assert checkpoint_key("p/", "f", "u", 2, b"\x01").endswith("/00002--01")


def test_the_parts_digest_covers_the_etags_in_order_quoted_or_not():
    assert parts_digest(['"e1"', "e2"]) == short("e1\ne2") == parts_digest(["e1", '"e2"'])
    assert parts_digest(["e2", "e1"]) != parts_digest(["e1", "e2"])
    assert parts_digest(["e1e2"]) != parts_digest(["e1", "e2"])


def test_a_message_at_the_limit_is_kept_and_one_byte_over_is_cut_to_the_limit():
    assert one_line("a" * 10, limit=10) == "a" * 10
    assert one_line("a" * 11, limit=10) == "a" * 7 + "..."
    # A character is never split: 4 two-byte characters are 8 bytes; 7 bytes leave 3 whole ones.
    assert one_line("é" * 6, limit=10) == "é" * 3 + "..."


def test_backoff_jitter_spans_the_upper_half_of_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """ "Equal jitter": a delay between half the ceiling and the ceiling, so retries never bunch near zero."""
    import hfstage.transfer as transfer

    monkeypatch.setattr(transfer.random, "uniform", lambda low, high: (low, high))
    assert transfer.backoff_delay(3, 1.0, 30.0) == (2.0, 4.0)
    assert transfer.backoff_delay(9, 1.0, 30.0) == (15.0, 30.0)


def client_error(code: str | None, status: int | None) -> ClientError:
    response: dict = {}
    if code is not None:
        response["Error"] = {"Code": code, "Message": "m"}
    if status is not None:
        response["ResponseMetadata"] = {"HTTPStatusCode": status}
    return ClientError(response, "HeadObject")


@pytest.mark.parametrize(
    ("code", "status", "not_found"),
    [
        ("NoSuchKey", None, True),  # GetObject's code, whatever the status says
        ("NotFound", None, True),
        ("404", None, True),  # HeadObject has no body: botocore makes the status the code
        (None, 404, True),  # a status alone
        ("Weird", 404, True),
        ("AccessDenied", 403, False),
        ("SlowDown", 503, False),
        (None, None, False),  # an error without either
    ],
)
def test_not_found_is_read_from_the_code_or_the_status(code, status, not_found) -> None:
    from hfstage.manifest import _is_not_found

    assert _is_not_found(client_error(code, status)) is not_found


def test_an_object_listed_but_gone_by_its_head_is_missing_and_other_errors_are_raised(s3_stub) -> None:
    from hfstage.hub import HubFile
    from hfstage.manifest import missing_files

    client, stubber = s3_stub
    files = [HubFile("a.bin", 3, "blob")]
    listing = {"Contents": [{"Key": "p/a.bin", "Size": 3}], "KeyCount": 1, "IsTruncated": False}
    stubber.add_response("list_objects_v2", listing, {"Bucket": "b", "Prefix": "p/"})
    stubber.add_client_error("head_object", "404", "Not Found", 404, expected_params={"Bucket": "b", "Key": "p/a.bin"})
    assert missing_files(client, "b", "p/", "o/m", "sha", files) == files
    stubber.add_response("list_objects_v2", listing, {"Bucket": "b", "Prefix": "p/"})
    stubber.add_client_error("head_object", "403", "Forbidden", 403, expected_params={"Bucket": "b", "Key": "p/a.bin"})
    with pytest.raises(ClientError):
        missing_files(client, "b", "p/", "o/m", "sha", files)
