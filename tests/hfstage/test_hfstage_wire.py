"""The exact S3 calls FileStager makes for one file, in order, checked by botocore's Stubber: what each part
carries (its number, its checksum for S3 to check), the metadata on the object, the hash checkpoints created
and dropped, and the completion that lists every part and gives the whole object's checksum. One upload thread
and one part buffer make the order fixed: part n's checkpoint is written before part n+1 is sent.
"""

from __future__ import annotations

import io
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.stub import ANY

from hfstage import checksum, hashstate
from hfstage.events import EventLog
from hfstage.hub import HubClient
from hfstage.transfer import (
    FileFailed,
    FileStager,
    ResumePoint,
    Retries,
    checkpoint_key,
    encode_sums,
    parts_digest,
)
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import boto_session, fake_hub  # noqa: F401
from tests.hfstage.test_hfstage_transfer import stager_for

MiB = 1024 * 1024
ALG = checksum.best()  # CRC64NVME with awscrt (requirements.txt), else CRC32
FIELD = ALG.field
REPO = "Org/Model"
BIG = "w.safetensors"
SIZE = 11 * MiB  # parts of 5, 5 and 1 MiB


@pytest.fixture
def repo(fake_hub: FakeHub):  # noqa: F811
    return fake_hub.add_repo(REPO, {BIG: Synthetic(SIZE, seed=7), "config.json": b'{"a": 1}'})


def stager(hub: FakeHub, s3, uploads: ThreadPoolExecutor, log: io.StringIO, **settings) -> FileStager:
    return stager_for(hub, s3, uploads, log=log, total=SIZE, **settings)


def file_of(hub: FakeHub, path: str):
    return next(f for f in HubClient(hub.endpoint).revision_info(REPO, "main").files if f.path == path)


def metadata(hub: FakeHub, path: str) -> dict[str, str]:
    f = hub.repos[REPO].files[path]
    meta = {"hf-repo-id": REPO, "hf-revision": hub.repos[REPO].sha, "hf-blob-id": f.blob_id}
    if f.lfs:
        meta["hf-sha256"] = f.sha256
    return meta


def sums(data: bytes, parts: int) -> str:
    """A checkpoint's checksum field after ``parts`` parts of 5 MiB."""
    return encode_sums(ALG, ALG.compute(data[: parts * 5 * MiB], 0))


def parts_of(data: bytes) -> list[bytes]:
    return [data[i : i + 5 * MiB] for i in range(0, len(data), 5 * MiB)]


def states_after(data: bytes) -> list[bytes]:
    """The SHA-256 state after each part (what a checkpoint key carries)."""
    assert hashstate.available()
    h = hashstate.ResumableHash("sha256")
    states = []
    for part in parts_of(data):
        h.update(part)
        states.append(h.state())
    return states


def test_a_multipart_file_on_the_wire(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    client, stub = s3_stub
    data = repo.files[BIG].content.to_bytes()
    parts, states = parts_of(data), states_after(data)
    key = "models/" + BIG
    etags = ['"e1"', '"e2"', '"e3"']
    ckpt = [
        checkpoint_key("models/", BIG, "u1", n, states[n - 1], parts_digest(etags[:n]), sums(data, n)) for n in (1, 2)
    ]
    stub.add_response(
        "create_multipart_upload",
        {"UploadId": "u1"},
        {
            "Bucket": "bkt",
            "Key": key,
            "ContentType": "application/octet-stream",
            "Metadata": metadata(fake_hub, BIG),
            "ChecksumAlgorithm": ALG.name,
            "ChecksumType": "FULL_OBJECT",
        },
    )

    def part(n: int) -> None:
        stub.add_response(
            "upload_part",
            {"ETag": etags[n - 1]},
            {
                "Bucket": "bkt",
                "Key": key,
                "UploadId": "u1",
                "PartNumber": n,
                "Body": ANY,
                "ChecksumAlgorithm": ALG.name,
                FIELD: ALG.of(parts[n - 1]),
            },
        )

    def marker(n: int) -> None:
        stub.add_response(
            "create_multipart_upload",
            {"UploadId": f"c{n}"},
            {"Bucket": "bkt", "Key": ckpt[n - 1], "ContentType": "application/octet-stream"},
        )

    def drop(n: int) -> None:
        stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": ckpt[n - 1], "UploadId": f"c{n}"})

    part(1), marker(1)
    part(2), marker(2), drop(1)  # the newer checkpoint replaces the older
    part(3)  # the last boundary gets none: the upload is completed next
    expect_complete(stub, key, parts, etags, {"ETag": '"x-3"'})
    drop(2)  # a completed file keeps no checkpoint
    log = io.StringIO()
    with ThreadPoolExecutor(1) as uploads:
        worker = stager(fake_hub, client, uploads, log)
        worker.stage(file_of(fake_hub, BIG))
    assert worker.progress.files_done == 1 and worker.progress.bytes_read == SIZE
    lines = log.getvalue().splitlines()
    assert " event=start path=w.safetensors size=11534336 parts=3 hash=sha256" in lines[0]
    assert " event=done path=w.safetensors size=11534336 " in lines[-1]


def test_a_small_file_is_one_put_with_its_checksum_and_metadata(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    client, stub = s3_stub
    body = b'{"a": 1}'
    stub.add_response(
        "put_object",
        {"ETag": '"e"'},
        {
            "Bucket": "bkt",
            "Key": "models/config.json",
            "Body": ANY,
            "ContentType": "application/octet-stream",
            "Metadata": metadata(fake_hub, "config.json"),
            "ChecksumAlgorithm": ALG.name,
            FIELD: ALG.of(body),
        },
    )
    with ThreadPoolExecutor(1) as uploads:
        worker = stager(fake_hub, client, uploads, io.StringIO())
        worker.stage(file_of(fake_hub, "config.json"))
    assert worker.progress.snapshot()["bytes_done"] == len(body)


def test_a_resumed_upload_sends_only_the_parts_after_its_checkpoint(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    """ListParts shows parts 1-2, the checkpoint covers part 1: part 2's bytes are fetched again to be hashed,
    but with the same checksum not sent again; part 3 is sent; the completion lists S3's ETags and checksums."""
    client, stub = s3_stub
    data = repo.files[BIG].content.to_bytes()
    parts, states = parts_of(data), states_after(data)
    key = "models/" + BIG
    listed = [
        {"PartNumber": 1, "Size": 5 * MiB, "ETag": '"s1"', FIELD: ALG.of(parts[0])},
        {"PartNumber": 2, "Size": 5 * MiB, "ETag": '"s2"', FIELD: ALG.of(parts[1])},
        {"PartNumber": 9, "Size": 5 * MiB, "ETag": '"s9"'},  # beyond the file: another part size, ignored
    ]
    old = checkpoint_key("models/", BIG, "u1", 1, states[0], parts_digest(['"s1"']), sums(data, 1))
    resume = ResumePoint("u1", 1, states[0], old, "c1", parts_digest(['"s1"']), sums(data, 1))
    stub.add_response("list_parts", {"Parts": listed}, {"Bucket": "bkt", "Key": key, "UploadId": "u1"})
    # Part 2 is in S3 with this checksum: not uploaded; its checkpoint replaces the old one.
    new = checkpoint_key("models/", BIG, "u1", 2, states[1], parts_digest(['"s1"', '"s2"']), sums(data, 2))
    stub.add_response("create_multipart_upload", {"UploadId": "c2"}, {"Bucket": "bkt", "Key": new, "ContentType": ANY})
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": old, "UploadId": "c1"})
    stub.add_response(
        "upload_part",
        {"ETag": '"e3"'},
        {
            "Bucket": "bkt",
            "Key": key,
            "UploadId": "u1",
            "PartNumber": 3,
            "Body": ANY,
            "ChecksumAlgorithm": ALG.name,
            FIELD: ALG.of(parts[2]),
        },
    )
    expect_complete(stub, key, parts, ['"s1"', '"s2"', '"e3"'])
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": new, "UploadId": "c2"})
    log = io.StringIO()
    with ThreadPoolExecutor(1) as uploads:
        stager(fake_hub, client, uploads, log).stage(file_of(fake_hub, BIG), resume)
    ranges = [r.range for r in fake_hub.requests_for(BIG) if r.server == "cdn"]
    assert ranges == [f"bytes={5 * MiB}-"]  # from the checkpoint on: part 1 is never fetched
    text = log.getvalue()
    assert "event=resume_upload path=w.safetensors parts_in_s3=2 checkpoint=1" in text
    assert f"event=resume path=w.safetensors offset={5 * MiB} part=2" in text


@pytest.mark.parametrize("listed", ["other bytes' checksum", "no checksum"])
def test_a_part_past_the_checkpoint_with_the_right_size_but_not_the_hashed_bytes_is_sent_again(
    fake_hub: FakeHub,  # noqa: F811
    repo,
    s3_stub,
    listed: str,
) -> None:
    """ListParts shows parts 1-3 of the right sizes; the checkpoint covers part 1. Part 2 in S3 is other bytes
    (its checksum is theirs) or S3 lists no checksum for it: it is uploaded again, from the bytes just hashed. Part 3
    has the checksum of the bytes hashed: kept. Kept on its size alone, part 2 would complete the file wrong while
    the hash (of the Hub's bytes) matched."""
    client, stub = s3_stub
    data = repo.files[BIG].content.to_bytes()
    parts, states = parts_of(data), states_after(data)
    key = "models/" + BIG
    wrong = {"other bytes' checksum": {FIELD: ALG.of(bytes(5 * MiB))}, "no checksum": {}}[listed]
    stub.add_response(
        "list_parts",
        {
            "Parts": [
                {"PartNumber": 1, "Size": 5 * MiB, "ETag": '"s1"', FIELD: ALG.of(parts[0])},
                {"PartNumber": 2, "Size": 5 * MiB, "ETag": '"s2"', **wrong},
                {"PartNumber": 3, "Size": 1 * MiB, "ETag": '"s3"', FIELD: ALG.of(parts[2])},
            ]
        },
        {"Bucket": "bkt", "Key": key, "UploadId": "u1"},
    )
    old = checkpoint_key("models/", BIG, "u1", 1, states[0], parts_digest(['"s1"']), sums(data, 1))
    expect_parts(stub, parts, [2], ['"s1"', '"e2"', '"s3"'])
    new = checkpoint_key("models/", BIG, "u1", 2, states[1], parts_digest(['"s1"', '"e2"']), sums(data, 2))
    stub.add_response("create_multipart_upload", {"UploadId": "c2"}, {"Bucket": "bkt", "Key": new, "ContentType": ANY})
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": old, "UploadId": "c1"})
    expect_complete(stub, key, parts, ['"s1"', '"e2"', '"s3"'])  # part 3 as listed: not sent again
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": new, "UploadId": "c2"})
    resume = ResumePoint("u1", 1, states[0], old, "c1", parts_digest(['"s1"']), sums(data, 1))
    with ThreadPoolExecutor(1) as uploads:
        stager(fake_hub, client, uploads, io.StringIO()).stage(file_of(fake_hub, BIG), resume)


@pytest.mark.parametrize(
    ("listed_sizes", "state_part", "reason"),
    [
        ({2: 5 * MiB}, 1, "part 1 before the checkpoint is not in S3"),
        ({1: 4 * MiB, 2: 5 * MiB}, 1, "part 1 before the checkpoint is not in S3"),  # another part size
        ({1: 5 * MiB, 2: 5 * MiB}, 2, "the saved hash state does not cover the 1 parts before the checkpoint"),
    ],
)
def test_a_checkpoint_that_does_not_match_s3_is_discarded_and_the_file_starts_over(
    fake_hub: FakeHub,  # noqa: F811
    repo,
    s3_stub,
    listed_sizes: dict[int, int],
    state_part: int,
    reason: str,
) -> None:
    client, stub = s3_stub
    data = repo.files[BIG].content.to_bytes()
    states = states_after(data)
    key = "models/" + BIG
    listed = [{"PartNumber": n, "Size": size, "ETag": f'"s{n}"'} for n, size in listed_sizes.items()]
    resume = ResumePoint("u1", 1, states[state_part - 1], "models/ck", "c1", parts_digest(['"s1"']))
    stub.add_response("list_parts", {"Parts": listed}, {"Bucket": "bkt", "Key": key, "UploadId": "u1"})
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": "models/ck", "UploadId": "c1"})
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": key, "UploadId": "u1"})
    log = io.StringIO()
    with ThreadPoolExecutor(1) as uploads:
        worker = stager(fake_hub, client, uploads, log)
        state = worker._resumed(file_of(fake_hub, BIG), key, 5 * MiB, resume)
    assert state.upload_id is None and state.parts == {} and state.checkpoint == 0
    assert f'event=resume_discarded path=w.safetensors reason="{reason}"' in log.getvalue()


def test_a_wrong_hash_names_both_digests_and_nothing_is_put(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    client, _ = s3_stub  # no S3 call at all: the hash is checked before PutObject
    fake_hub.corrupt("config.json")
    expected = fake_hub.repos[REPO].files["config.json"].blob_id
    with ThreadPoolExecutor(1) as uploads:
        worker = stager(fake_hub, client, uploads, io.StringIO(), max_attempts=1)
        with pytest.raises(FileFailed) as failed:
            worker.stage(file_of(fake_hub, "config.json"))
    assert re.fullmatch(
        rf"config\.json: content git-sha1 [0-9a-f]{{40}} does not match the Hub's {expected} "
        r"\(gave up after 1 attempts\)",
        str(failed.value),
    )


# -- what a rerun finds open -------------------------------------------------------------------------------

PREFIX = "models/Org--Model/" + "a" * 40 + "/"


def open_uploads(state2: bytes, state3: bytes) -> tuple[list[dict], dict[str, tuple[str, str]]]:
    """The open uploads a killed run leaves: (listing, name -> (key, upload id))."""
    from hfstage.transfer import CHECKPOINT_DIR

    named = {
        "a": (PREFIX + "a.gguf", "u-a"),
        "a-0": (checkpoint_key(PREFIX, "a.gguf", "u-a", 0, state3, "d0"), "m0"),  # no part before it: useless
        "a-2": (checkpoint_key(PREFIX, "a.gguf", "u-a", 2, state2, "d2"), "m2"),
        "a-3": (checkpoint_key(PREFIX, "a.gguf", "u-a", 3, state3, "d3"), "m3"),
        "a-other": (checkpoint_key(PREFIX, "a.gguf", "u-gone", 4, state3, "d4"), "m4"),  # an upload since aborted
        "b": (PREFIX + "b.gguf", "u-b"),  # no checkpoint: nothing to resume from
        "c": (PREFIX + "c.gguf", "u-c"),  # another host's file
        "c-1": (checkpoint_key(PREFIX, "c.gguf", "u-c", 1, state2, "d1"), "m-c"),
        "junk": (PREFIX + CHECKPOINT_DIR + "not/a/checkpoint/key", "u-j"),  # not ours to judge: left
    }
    return [{"Key": key, "UploadId": upload} for key, upload in named.values()], named


def reclaim(client, log: io.StringIO, **kwargs):
    from hfstage.transfer import reclaim_uploads

    return reclaim_uploads(client, "bkt", PREFIX, {PREFIX + "a.gguf", PREFIX + "b.gguf"}, EventLog(log), **kwargs)


def test_a_rerun_keeps_each_own_files_latest_checkpointed_upload_and_aborts_the_rest(s3_stub) -> None:
    client, stub = s3_stub
    assert hashstate.available()
    state2, state3 = states_after(bytes(20 * MiB))[1:3]
    listing, named = open_uploads(state2, state3)
    stub.add_response("list_multipart_uploads", {"Uploads": listing}, {"Bucket": "bkt", "Prefix": PREFIX})
    for name in ("b", "a-0", "a-2", "a-other"):  # uploads first, then checkpoints, in listing order
        key, upload = named[name]
        stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": key, "UploadId": upload})
    log = io.StringIO()
    found = reclaim(client, log)
    assert found == {PREFIX + "a.gguf": ResumePoint("u-a", 3, state3, named["a-3"][0], "m3", "d3")}
    text = log.getvalue()
    assert [line.split(" event=")[1] for line in text.splitlines()] == [
        *(f"abort_stale key={named[n][0]}" for n in ("b", "a-0", "a-2", "a-other")),
        f"resumable key={PREFIX}a.gguf checkpoint=3",
    ]


def test_without_resumable_hashing_or_when_told_every_own_upload_is_aborted(
    s3_stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, stub = s3_stub
    state2, state3 = states_after(bytes(20 * MiB))[1:3]
    listing, named = open_uploads(state2, state3)
    for _ in range(2):  # resume=False, then no resumable hashing
        stub.add_response("list_multipart_uploads", {"Uploads": listing}, {"Bucket": "bkt", "Prefix": PREFIX})
        for name in ("a", "b", "a-0", "a-2", "a-3", "a-other"):
            key, upload = named[name]
            stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": key, "UploadId": upload})
    assert reclaim(client, io.StringIO(), resume=False) == {}
    monkeypatch.setattr(hashstate, "_lib", None)
    monkeypatch.setattr(hashstate, "_checked", True)
    assert reclaim(client, io.StringIO()) == {}


def test_an_abort_or_a_listing_that_fails_is_a_warning_not_a_failure(s3_stub) -> None:
    client, stub = s3_stub
    stub.add_response(
        "list_multipart_uploads",
        {"Uploads": [{"Key": PREFIX + "b.gguf", "UploadId": "u-b"}, {"Key": PREFIX + "a.gguf", "UploadId": "u-a"}]},
    )
    stub.add_client_error("abort_multipart_upload", "AccessDenied", http_status_code=403)
    stub.add_response("abort_multipart_upload", {})
    stub.add_client_error("list_multipart_uploads", "AccessDenied", http_status_code=403)
    log = io.StringIO()
    assert reclaim(client, log) == {}
    assert reclaim(client, log) == {}
    lines = [line.split(" event=")[1] for line in log.getvalue().splitlines()]
    assert lines == [
        'warning reason="aborting an open multipart upload: AccessDenied (HTTP 403)"',
        f"abort_stale key={PREFIX}a.gguf",
        'warning reason="listing open multipart uploads: AccessDenied (HTTP 403)"',
    ]


# -- stopping ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "ranges"), [(BIG, False), (BIG, True), ("config.json", False)])
def test_a_stop_while_waiting_for_a_buffer_cancels_the_file(fake_hub: FakeHub, repo, s3_stub, path, ranges) -> None:  # noqa: F811
    """Every buffer is held (by other files): a SIGTERM must not leave the worker waiting for one forever."""
    from hfstage.transfer import Cancelled

    client, stub = s3_stub
    if path == BIG:
        stub.add_response("create_multipart_upload", {"UploadId": "u1"})
        stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": "models/" + BIG, "UploadId": "u1"})
    with ThreadPoolExecutor(1) as uploads, ThreadPoolExecutor(2) as fetches:
        worker = stager(fake_hub, client, uploads, io.StringIO(), ranges_per_file=2)
        worker.ranges = fetches if ranges else None
        held = worker.pool.acquire(5 * MiB)
        timer = threading.Timer(0.3, worker.stop.set)
        timer.start()
        try:
            with pytest.raises(Cancelled):
                worker.stage(file_of(fake_hub, path))
        finally:
            timer.cancel()
            worker.pool.release(held)
    assert worker.progress.snapshot()["bytes_done"] == 0


# -- checkpoints and aborts that fail ----------------------------------------------------------------------


def expect_complete(stub, key: str, parts: list[bytes], etags: list[str], answer: dict | None = None) -> None:
    """CompleteMultipartUpload of upload u1 listing every part with its ETag and checksum, in order, and giving the
    whole object's checksum (of the parts' bytes joined: what S3 computes), its type and its size."""
    listed = [
        {"PartNumber": n, "ETag": etag, FIELD: ALG.of(part)}
        for n, (etag, part) in enumerate(zip(etags, parts, strict=True), start=1)
    ]
    whole = b"".join(parts)
    stub.add_response(
        "complete_multipart_upload",
        answer or {},
        {
            "Bucket": "bkt",
            "Key": key,
            "UploadId": "u1",
            "MultipartUpload": {"Parts": listed},
            FIELD: ALG.of(whole),
            "ChecksumType": "FULL_OBJECT",
            "MpuObjectSize": len(whole),
        },
    )


def expect_parts(stub, parts: list[bytes], numbers: list[int], etags: list[str]) -> None:
    for n in numbers:
        stub.add_response(
            "upload_part",
            {"ETag": etags[n - 1]},
            {
                "Bucket": "bkt",
                "Key": "models/" + BIG,
                "UploadId": "u1",
                "PartNumber": n,
                "Body": ANY,
                "ChecksumAlgorithm": ALG.name,
                FIELD: ALG.of(parts[n - 1]),
            },
        )


def test_a_checkpoint_s3_refuses_is_not_tried_again_and_the_file_still_completes(
    fake_hub: FakeHub,  # noqa: F811
    repo,
    s3_stub,
) -> None:
    client, stub = s3_stub
    parts = parts_of(repo.files[BIG].content.to_bytes())
    etags = ['"e1"', '"e2"', '"e3"']
    stub.add_response("create_multipart_upload", {"UploadId": "u1"})
    expect_parts(stub, parts, [1], etags)
    stub.add_client_error("create_multipart_upload", "AccessDenied", http_status_code=403)  # the checkpoint
    expect_parts(stub, parts, [2, 3], etags)  # no second checkpoint attempt: refused is refused
    stub.add_response("complete_multipart_upload", {})
    log = io.StringIO()
    with ThreadPoolExecutor(1) as uploads:
        stager(fake_hub, client, uploads, log).stage(file_of(fake_hub, BIG))
    warnings = [line for line in log.getvalue().splitlines() if " event=warning " in line]
    assert len(warnings) == 1
    assert warnings[0].endswith(f'reason="saving a checkpoint of {BIG}: AccessDenied (HTTP 403)"')


def test_a_checkpoint_that_fails_for_now_is_tried_at_the_next_part(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    client, stub = s3_stub
    data = repo.files[BIG].content.to_bytes()
    parts, states = parts_of(data), states_after(data)
    etags = ['"e1"', '"e2"', '"e3"']
    stub.add_response("create_multipart_upload", {"UploadId": "u1"})
    expect_parts(stub, parts, [1], etags)
    stub.add_client_error("create_multipart_upload", "SlowDown", http_status_code=503)
    expect_parts(stub, parts, [2], etags)
    key = checkpoint_key("models/", BIG, "u1", 2, states[1], parts_digest(etags[:2]), sums(data, 2))
    stub.add_response("create_multipart_upload", {"UploadId": "c2"}, {"Bucket": "bkt", "Key": key, "ContentType": ANY})
    expect_parts(stub, parts, [3], etags)
    stub.add_response("complete_multipart_upload", {})
    # Dropping the checkpoint after completion fails: said, not fatal (the bucket's lifecycle rule removes it).
    stub.add_client_error("abort_multipart_upload", "InternalError", http_status_code=500)
    log = io.StringIO()
    with ThreadPoolExecutor(1) as uploads:
        stager(fake_hub, client, uploads, log).stage(file_of(fake_hub, BIG))
    lines = log.getvalue().splitlines()
    assert any(line.endswith(f'reason="saving a checkpoint of {BIG}: SlowDown (HTTP 503)"') for line in lines)
    assert any(
        f" event=abort_failed key={key} " in line
        and line.endswith('reason="AbortMultipartUpload: InternalError (HTTP 500)"')
        for line in lines
    ), lines


def test_an_upload_that_cannot_be_aborted_is_said_and_the_error_kept(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    from hfstage.transfer import PermanentError

    client, stub = s3_stub
    stub.add_response("create_multipart_upload", {"UploadId": "u1"})
    stub.add_client_error("upload_part", "AccessDenied", http_status_code=403)
    stub.add_client_error("abort_multipart_upload", "AccessDenied", http_status_code=403)
    log = io.StringIO()
    with ThreadPoolExecutor(1) as uploads, pytest.raises(PermanentError) as failed:
        stager(fake_hub, client, uploads, log).stage(file_of(fake_hub, BIG))
    assert str(failed.value) == f"UploadPart 1 of s3://bkt/models/{BIG}: AccessDenied (HTTP 403)"
    assert (
        log.getvalue()
        .splitlines()[-1]
        .endswith(f' event=abort_failed key=models/{BIG} reason="AbortMultipartUpload: AccessDenied (HTTP 403)"')
    )


@pytest.mark.parametrize(("after", "event"), [(3, "resume_read"), (0, "retry")])
def test_a_broken_download_says_where_it_broke(fake_hub: FakeHub, repo, s3_stub, after: int, event: str) -> None:  # noqa: F811
    """Cut after 3 bytes: read on from byte 3 (no attempt spent); cut before any: the attempt fails, retried."""
    client, stub = s3_stub
    fake_hub.drop_after("config.json", after_bytes=after)
    stub.add_response("put_object", {})
    log = io.StringIO()
    with ThreadPoolExecutor(1) as uploads:
        stager(fake_hub, client, uploads, log).stage(file_of(fake_hub, "config.json"))
    (line,) = [line for line in log.getvalue().splitlines() if f" event={event} " in line]
    assert (" offset=3 " if after else " attempt=2 ") in line
    assert re.search(rf'reason="config\.json: the download (stopped|broke) after {after} of 8 bytes', line), line
    asked = [r.range for r in fake_hub.requests_for("config.json")]
    assert asked == ([None, "bytes=3-"] if after else [None, None])


# -- one range ---------------------------------------------------------------------------------------------


def cdn_url(hub: FakeHub, path: str) -> str:
    return f"{hub.cdn_endpoint}/lfs/{hub.repos[REPO].files[path].sha256}?X-Amz-Signature=fake"


def test_a_refused_signed_url_is_resolved_again_once(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    client, _ = s3_stub
    fake_hub.cdn_status(BIG, status=403, times=1)
    log = io.StringIO()
    worker = stager(fake_hub, client, ThreadPoolExecutor(1), log)
    link = [cdn_url(fake_hub, BIG) + "&expired=1"]
    response = worker._open_range(file_of(fake_hub, BIG), link, 5 * MiB, 10)
    try:
        assert response.status == 206 and response.read() == repo.files[BIG].content.to_bytes()[5 * MiB : 5 * MiB + 10]
    finally:
        response.close()
    assert link[0].startswith(fake_hub.cdn_endpoint) and "expired" not in link[0]  # later ranges use the new URL
    assert log.getvalue().splitlines()[-1].endswith(f" event=resolve_again path={BIG} offset={5 * MiB}")


def test_a_refused_range_on_the_resolve_url_itself_is_a_transient_error(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    from hfstage.transfer import TransientError

    client, _ = s3_stub
    fake_hub.fail(BIG, status=404, times=1)
    worker = stager(fake_hub, client, ThreadPoolExecutor(1), io.StringIO())
    resolve = worker.hub.file_url(REPO, fake_hub.repos[REPO].sha, BIG)
    with pytest.raises(TransientError) as raised:
        worker._open_range(file_of(fake_hub, BIG), [resolve], 10, 5)
    assert str(raised.value) == (
        f"{BIG}: range 10-14: {REPO} was not found on {fake_hub.endpoint}: check the repository id"
    )


def test_a_refused_url_whose_resolution_fails_too_is_a_transient_error(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    from hfstage.transfer import TransientError

    client, _ = s3_stub
    fake_hub.cdn_status(BIG, status=403, times=1)
    fake_hub.fail(BIG, status=404, times=1)
    worker = stager(fake_hub, client, ThreadPoolExecutor(1), io.StringIO())
    with pytest.raises(TransientError, match=rf"^{BIG}: range 0-9: {REPO} was not found on "):
        worker._open_range(file_of(fake_hub, BIG), [cdn_url(fake_hub, BIG)], 0, 10)


@pytest.mark.parametrize("where", ["first", "again"])
def test_a_busy_hub_during_a_range_is_retried_later_not_resolved(fake_hub: FakeHub, repo, s3_stub, where) -> None:  # noqa: F811
    from hfstage.hub import HubUnavailable

    client, _ = s3_stub
    worker = stager(fake_hub, client, ThreadPoolExecutor(1), io.StringIO())
    if where == "first":
        link = ["http://127.0.0.1:9/lfs/x"]  # nothing listens: a connection error, not a refusal
    else:
        fake_hub.cdn_status(BIG, status=403, times=1)
        fake_hub.fail(BIG, status=503, times=1)
        link = [cdn_url(fake_hub, BIG)]
    with pytest.raises(HubUnavailable):
        worker._open_range(file_of(fake_hub, BIG), link, 0, 10)
    resolved = [r.status for r in fake_hub.requests_for(BIG) if r.server == "hub"]
    assert resolved == ([] if where == "first" else [503])  # not resolved again after a connection error


def test_a_range_of_another_file_length_is_an_integrity_error(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    """Content-Range names the file's total length: another total means the CDN serves another file."""
    from hfstage.hub import HubFile
    from hfstage.transfer import IntegrityError

    client, _ = s3_stub
    worker = stager(fake_hub, client, ThreadPoolExecutor(1), io.StringIO())
    real = file_of(fake_hub, BIG)
    listed = HubFile(real.path, real.size + 1, real.blob_id, real.sha256)
    with pytest.raises(IntegrityError) as raised:
        link = [cdn_url(fake_hub, BIG)]
        worker._fetch_range(listed, link, None, bytearray(10), 0, 10, threading.Event(), Retries(5, 60))
    assert str(raised.value) == f"{BIG}: the Hub sends {SIZE} bytes, the revision lists {SIZE + 1}"


def test_a_resumed_file_whose_last_part_is_in_s3_sends_no_part(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    """Every part is in S3 (the last one shorter), the checkpoint covers two: the third is fetched to be hashed,
    matches S3's checksum, and the upload is completed with S3's ETags; no part is sent."""
    client, stub = s3_stub
    data = repo.files[BIG].content.to_bytes()
    parts, states = parts_of(data), states_after(data)
    key = "models/" + BIG
    sizes = [5 * MiB, 5 * MiB, MiB]
    listed = [
        {"PartNumber": n, "Size": sizes[n - 1], "ETag": f'"s{n}"', FIELD: ALG.of(parts[n - 1])} for n in (1, 2, 3)
    ]
    digest = parts_digest(['"s1"', '"s2"'])
    resume = ResumePoint("u1", 2, states[1], "models/ck", "c1", digest, sums(data, 2))
    stub.add_response("list_parts", {"Parts": listed}, {"Bucket": "bkt", "Key": key, "UploadId": "u1"})
    expect_complete(stub, key, parts, ['"s1"', '"s2"', '"s3"'])
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": "models/ck", "UploadId": "c1"})
    log = io.StringIO()
    with ThreadPoolExecutor(1) as uploads:
        stager(fake_hub, client, uploads, log).stage(file_of(fake_hub, BIG), resume)
    assert [r.range for r in fake_hub.requests_for(BIG) if r.server == "cdn"] == [f"bytes={10 * MiB}-"]
    assert "event=resume_upload path=w.safetensors parts_in_s3=3 checkpoint=2" in log.getvalue()


def test_a_resumed_file_stopped_again_keeps_its_upload_and_checkpoint(fake_hub: FakeHub, repo, s3_stub) -> None:  # noqa: F811
    client, stub = s3_stub
    data = repo.files[BIG].content.to_bytes()
    states = states_after(data)
    key = "models/" + BIG
    listed = [{"PartNumber": 1, "Size": 5 * MiB, "ETag": '"s1"'}]
    resume = ResumePoint("u1", 1, states[0], "models/ck", "c1", parts_digest(['"s1"']), sums(data, 1))
    stub.add_response("list_parts", {"Parts": listed}, {"Bucket": "bkt", "Key": key, "UploadId": "u1"})
    # Nothing else: no abort of the upload or of its checkpoint, so the next run resumes from the same point.
    from hfstage.transfer import Cancelled

    log = io.StringIO()
    with ThreadPoolExecutor(1) as uploads:
        worker = stager(fake_hub, client, uploads, log)
        worker.stop.set()
        with pytest.raises(Cancelled):
            worker.stage(file_of(fake_hub, BIG), resume)
    assert "abort" not in log.getvalue()  # (an unexpected abort would be a Stubber error, logged as abort_failed)


def test_a_part_of_another_size_in_s3_is_sent_again_and_the_parts_after_it_kept(
    fake_hub: FakeHub,  # noqa: F811
    repo,
    s3_stub,
) -> None:
    """Part 2 in S3 has another size (a run with another part size): it is uploaded again; part 3, listed after
    it with the right size and checksum, is still recognised and not sent."""
    client, stub = s3_stub
    data = repo.files[BIG].content.to_bytes()
    parts, states = parts_of(data), states_after(data)
    key = "models/" + BIG
    crc = [ALG.of(p) for p in parts]
    listed = [
        {"PartNumber": 1, "Size": 5 * MiB, "ETag": '"s1"', FIELD: crc[0]},
        {"PartNumber": 2, "Size": 4 * MiB, "ETag": '"s2"', FIELD: "AAAAAA=="},
        {"PartNumber": 3, "Size": MiB, "ETag": '"s3"', FIELD: crc[2]},
    ]
    resume = ResumePoint("u1", 1, states[0], "models/ck", "c1", parts_digest(['"s1"']), sums(data, 1))
    stub.add_response("list_parts", {"Parts": listed}, {"Bucket": "bkt", "Key": key, "UploadId": "u1"})
    expect_parts(stub, parts, [2], ["", '"e2"'])
    new = checkpoint_key("models/", BIG, "u1", 2, states[1], parts_digest(['"s1"', '"e2"']), sums(data, 2))
    stub.add_response("create_multipart_upload", {"UploadId": "c2"}, {"Bucket": "bkt", "Key": new, "ContentType": ANY})
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": "models/ck", "UploadId": "c1"})
    stub.add_response(
        "complete_multipart_upload",
        {},
        {
            "Bucket": "bkt",
            "Key": key,
            "UploadId": "u1",
            "MultipartUpload": {
                "Parts": [
                    {"PartNumber": 1, "ETag": '"s1"', FIELD: crc[0]},
                    {"PartNumber": 2, "ETag": '"e2"', FIELD: crc[1]},
                    {"PartNumber": 3, "ETag": '"s3"', FIELD: crc[2]},
                ]
            },
            FIELD: ALG.of(data),
            "ChecksumType": "FULL_OBJECT",
            "MpuObjectSize": len(data),
        },
    )
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": new, "UploadId": "c2"})
    with ThreadPoolExecutor(1) as uploads:
        stager(fake_hub, client, uploads, io.StringIO()).stage(file_of(fake_hub, BIG), resume)


@pytest.mark.parametrize("what", ["a state of another length", "ListParts refused"])
def test_a_checkpoint_that_cannot_be_used_says_why_and_the_file_starts_over(
    fake_hub: FakeHub,  # noqa: F811
    repo,
    s3_stub,
    what: str,
) -> None:
    client, stub = s3_stub
    key = "models/" + BIG
    states = states_after(repo.files[BIG].content.to_bytes())
    state = b"short" if what == "a state of another length" else states[0]
    resume = ResumePoint("u1", 1, state, "models/ck", "c1", parts_digest(['"s1"']))
    if what == "ListParts refused":
        stub.add_client_error("list_parts", "NoSuchUpload", http_status_code=404)
        reason = "ListParts: NoSuchUpload (HTTP 404)"
    else:
        reason = "a saved sha256 state has 112 bytes, not 5"
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": "models/ck", "UploadId": "c1"})
    stub.add_response("abort_multipart_upload", {}, {"Bucket": "bkt", "Key": key, "UploadId": "u1"})
    log = io.StringIO()
    state_after = stager(fake_hub, client, ThreadPoolExecutor(1), log)._resumed(
        file_of(fake_hub, BIG), key, 5 * MiB, resume
    )
    assert state_after.upload_id is None and state_after.checkpoint == 0
    assert f'event=resume_discarded path={BIG} reason="{reason}"' in log.getvalue()


def test_a_checkpoint_of_a_git_file_counts_its_blob_header(fake_hub: FakeHub, s3_stub) -> None:  # noqa: F811
    """A large file kept in git (not LFS) is checked by its blob SHA-1, whose hash starts with a
    ``blob <size>\\0`` header: the saved state covers the header and the parts, and is resumed."""
    client, stub = s3_stub
    assert hashstate.available()
    fake_hub.lfs_threshold = 64 * MiB
    repo = fake_hub.add_repo(REPO, {"vocab.txt": Synthetic(11 * MiB, seed=3)})
    data = repo.files["vocab.txt"].content.to_bytes()
    assert not repo.files["vocab.txt"].lfs
    hashed = hashstate.ResumableHash("sha1")
    hashed.update(b"blob %d\0" % len(data) + data[: 5 * MiB])
    resume = ResumePoint("u1", 1, hashed.state(), "models/ck", "c1", parts_digest(['"s1"']), sums(data, 1))
    listed = [{"PartNumber": 1, "Size": 5 * MiB, "ETag": '"s1"'}]
    stub.add_response("list_parts", {"Parts": listed}, {"Bucket": "bkt", "Key": "models/vocab.txt", "UploadId": "u1"})
    log = io.StringIO()
    worker = stager(fake_hub, client, ThreadPoolExecutor(1), log)
    state = worker._resumed(file_of(fake_hub, "vocab.txt"), "models/vocab.txt", 5 * MiB, resume)
    assert state.upload_id == "u1" and state.checkpoint == 1 and "resume_discarded" not in log.getvalue()
