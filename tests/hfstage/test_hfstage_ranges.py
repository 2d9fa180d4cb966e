"""One large file fetched as parallel byte ranges, hashed in order; resumable hash state; resume across runs.

The worker runs in this process against the fake Hub and moto's S3 over HTTP (as in test_hfstage_worker);
the killed run is a separate process, ended with SIGKILL, so that it cleans nothing up.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from hfstage import checksum, hashstate
from hfstage.manifest import MANIFEST_NAME, revision_prefix
from hfstage.transfer import CHECKPOINT_DIR, encode_sums, parse_checkpoint_key
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import PYTHON, ROOT, S3Env, fake_hub, s3, subprocess_env, worker_argv  # noqa: F401

MiB = 1024 * 1024
ALG = checksum.best()
REPO = "Org/Gguf"
BIG = "model-Q4_K_M.gguf"
SIZE = 13 * MiB  # three 5 MiB parts, the last one 3 MiB


def ranges_of(start: int, size: int = SIZE) -> str:
    return f"bytes={start}-{min(start + 5 * MiB, size) - 1}"


@pytest.fixture
def repo(fake_hub: FakeHub):  # noqa: F811
    return fake_hub.add_repo(REPO, {"config.json": b"{}", BIG: Synthetic(SIZE, seed=17)})


@pytest.fixture
def stage(s3: S3Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # noqa: F811
    from hfstage.worker import main

    def run(*extra: str):
        client, counter = s3.worker_client()
        capsys.readouterr()
        argv = worker_argv(REPO, s3.bucket, tmp_path / "message", tmp_path / "absent.json", *extra)
        code = main(argv, s3_client=client)
        return code, capsys.readouterr().out, counter.calls

    return run


def cdn_ranges(hub: FakeHub) -> list[str | None]:
    return [r.range for r in hub.requests_for(BIG) if r.server == "cdn"]


def test_ranges_arriving_out_of_order_hash_and_upload_in_order(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    fake_hub.slow(BIG, bytes_per_s=8 * MiB, range=ranges_of(0))  # the first part arrives last
    code, out, calls = stage()
    assert code == 0, out
    by_range = {r.range: r for r in fake_hub.requests_for(BIG) if r.server == "cdn"}
    assert sorted(by_range) == sorted(ranges_of(n * 5 * MiB) for n in range(3))
    assert by_range[ranges_of(0)].finished > max(by_range[ranges_of(n * 5 * MiB)].finished for n in (1, 2))
    assert s3.body(revision_prefix("models/", REPO, repo.sha) + BIG) == repo.files[BIG].content.to_bytes()
    assert fake_hub.bytes_sent(BIG) == SIZE and calls["UploadPart"] == 3
    assert s3.open_uploads() == []  # the checkpoints are gone with the completed upload


def test_a_range_cut_midway_continues_from_its_last_byte(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    fake_hub.drop_after(BIG, after_bytes=MiB, range=ranges_of(10 * MiB))
    fake_hub.slow(BIG, bytes_per_s=2 * MiB, range=ranges_of(10 * MiB), times=1)  # parts 1-2 arrive first
    code, out, calls = stage()
    assert code == 0, out
    assert "event=retry" not in out and f"event=resume_read path={BIG} offset={11 * MiB} " in out
    rest = f"bytes={11 * MiB}-{SIZE - 1}"  # the range's missing bytes only
    assert sorted(cdn_ranges(fake_hub)) == sorted([ranges_of(0), ranges_of(5 * MiB), ranges_of(10 * MiB), rest])
    assert fake_hub.bytes_sent(BIG) == SIZE and calls["UploadPart"] == 3
    assert s3.body(revision_prefix("models/", REPO, repo.sha) + BIG) == repo.files[BIG].content.to_bytes()


def test_a_server_ignoring_range_gets_one_stream(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    fake_hub.ignore_range = True
    code, out, _ = stage()
    assert code == 0, out
    assert cdn_ranges(fake_hub) == [ranges_of(0)]  # answered with the whole file: read as the one stream
    assert f'event=single_stream path={BIG} reason="the server ignored Range"' in out
    assert fake_hub.bytes_sent(BIG) == SIZE
    assert s3.body(revision_prefix("models/", REPO, repo.sha) + BIG) == repo.files[BIG].content.to_bytes()


def test_a_wrong_hash_leaves_no_object_no_manifest_no_open_upload(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    fake_hub.corrupt(BIG)  # one byte flipped in the middle part
    code, out, calls = stage("--max-attempts=2")
    prefix = revision_prefix("models/", REPO, repo.sha)
    assert code == 1 and "does not match the Hub's" in out
    assert prefix + BIG not in s3.list_keys() and prefix + MANIFEST_NAME not in s3.list_keys()
    assert s3.open_uploads() == []  # neither the upload nor a checkpoint
    assert calls["CompleteMultipartUpload"] == 0


def test_without_resumable_hashing_a_file_still_stages_without_checkpoints(
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hashstate, "_lib", None)
    monkeypatch.setattr(hashstate, "_checked", True)
    code, out, calls = stage()
    assert code == 0, out
    assert calls["CreateMultipartUpload"] == 1 and calls["AbortMultipartUpload"] == 0  # no checkpoint written


def test_resumable_hash_matches_hashlib_across_a_saved_state() -> None:
    assert hashstate.available()
    data = Synthetic(3 * MiB + 17, seed=5).to_bytes()
    for name, reference in (("sha256", hashlib.sha256), ("sha1", hashlib.sha1)):
        first = hashstate.ResumableHash(name)
        first.update(bytearray(data[:MiB]))
        restored = hashstate.ResumableHash(name, first.state())
        restored.update(memoryview(data)[MiB:])
        assert restored.hexdigest() == reference(data).hexdigest()
        with pytest.raises(ValueError, match="state has"):
            hashstate.ResumableHash(name, b"short")


def checkpoints(s3: S3Env, prefix: str) -> list[int]:  # noqa: F811
    keys = [u["Key"] for u in s3.open_uploads() if u["Key"].startswith(prefix + CHECKPOINT_DIR)]
    return [parse_checkpoint_key(prefix, key)[2] for key in keys]


def test_reclaim_keeps_the_latest_checkpointed_upload_of_each_own_file_and_aborts_the_rest(s3: S3Env) -> None:  # noqa: F811
    import io

    from hfstage.events import EventLog
    from hfstage.transfer import checkpoint_key, reclaim_uploads

    prefix = "models/Org--Gguf/" + "a" * 40 + "/"
    client = s3.client

    def upload(key: str) -> str:
        return client.create_multipart_upload(Bucket=s3.bucket, Key=key)["UploadId"]

    state = hashstate.ResumableHash("sha256").state()
    kept = upload(prefix + "a.gguf")
    upload(checkpoint_key(prefix, "a.gguf", kept, 2, state))
    upload(checkpoint_key(prefix, "a.gguf", kept, 3, state))  # the later one of the same upload wins
    stale = upload(prefix + "a.gguf")  # a second upload of the same file, without a checkpoint
    bare = upload(prefix + "b.gguf")  # no checkpoint: nothing to resume from
    other_host = upload(prefix + "c.gguf")
    upload(checkpoint_key(prefix, "c.gguf", other_host, 1, state))  # another host's file: left alone
    found = reclaim_uploads(client, s3.bucket, prefix, {prefix + "a.gguf", prefix + "b.gguf"}, EventLog(io.StringIO()))
    assert list(found) == [prefix + "a.gguf"]
    assert found[prefix + "a.gguf"].upload_id == kept and found[prefix + "a.gguf"].part == 3
    left = {(u["Key"], u["UploadId"]) for u in s3.open_uploads()}
    assert (prefix + "a.gguf", kept) in left and (prefix + "a.gguf", stale) not in left
    assert (prefix + "b.gguf", bare) not in left and (prefix + "c.gguf", other_host) in left
    assert sorted(parse_checkpoint_key(prefix, k)[2] for k, _ in left if CHECKPOINT_DIR in k) == [1, 3]


def test_a_part_refetched_after_a_failed_upload_is_hashed_again_even_if_later_parts_were_hashed(
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Attempt 1 hashes every part, but part 2's upload fails; attempt 2 refetches part 2 with a flipped byte,
    uploads it, and breaks in part 3; attempt 3 finds every part in S3. It must not take attempt 1's hash of
    all four parts (made from the good part 2) as the hash of what S3 holds: the file hashes wrong, starts over."""
    import threading

    from botocore.exceptions import ClientError

    from hfstage.worker import main

    size = 18 * MiB  # four parts; the corrupt fault flips byte 9 MiB, in part 2
    repo = fake_hub.add_repo(REPO, {"config.json": b"{}", BIG: Synthetic(size, seed=29)})
    client, _ = s3.worker_client()
    part_4_sent = threading.Event()
    failed = []

    def fail_part_2_once(params: dict, **_: object) -> None:
        if params.get("PartNumber") == 4:
            part_4_sent.set()
        if params.get("PartNumber") == 2 and not failed:
            failed.append(True)
            part_4_sent.wait(30)  # attempt 1 has hashed every part by now
            fake_hub.corrupt(BIG, times=1)  # the next request (attempt 2's stream from part 2) is corrupt
            # ... and ends after part 2: part 3's read gets nothing, so attempt 2 fails (a cut after new bytes
            # would continue instead)
            fake_hub.drop_after(BIG, after_bytes=5 * MiB, range=f"bytes={5 * MiB}-")
            raise ClientError(
                {"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "UploadPart"
            )

    client.meta.events.register("before-parameter-build.s3.UploadPart", fail_part_2_once)
    argv = [f"--repo-id={REPO}", f"--destination=s3://{s3.bucket}/models/", "--part-size-mib=5", "--retry-base-s=0.01"]
    capsys.readouterr()
    code = main([*argv, "--ranges-per-file=1", f"--failure-file={tmp_path / 'message'}"], s3_client=client)
    out = capsys.readouterr().out
    assert code == 0, out
    assert failed and out.count("event=retry") >= 3, out  # the part failure, the break, the hash mismatch
    assert "does not match the Hub's" in out
    prefix = revision_prefix("models/", REPO, repo.sha)
    assert s3.body(prefix + BIG) == repo.files[BIG].content.to_bytes()


@pytest.mark.parametrize("case", ["a part replaced since", "a state of fewer bytes"])
def test_a_checkpoint_whose_parts_in_s3_are_not_what_it_hashed_is_not_resumed(
    case: str,
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
) -> None:
    """The saved hash state says "parts 1-2 hashed"; S3's part 2 is other bytes (uploaded again by a run
    whose state was never saved), or the state covers one part only. Resuming from it would complete the
    file with unhashed bytes (or hash the wrong length): the checkpoint is discarded and the file starts over."""
    from hfstage.transfer import checkpoint_key, parts_digest

    assert hashstate.available()  # loads libcrypto: run alone, no earlier test has
    content = repo.files[BIG].content.to_bytes()
    prefix = revision_prefix("models/", REPO, repo.sha)
    client = s3.client
    created = client.create_multipart_upload(
        Bucket=s3.bucket, Key=prefix + BIG, ChecksumAlgorithm=ALG.name, ChecksumType="FULL_OBJECT"
    )
    upload_id = created["UploadId"]

    def put(number: int, body: bytes) -> str:
        return client.upload_part(
            Bucket=s3.bucket, Key=prefix + BIG, UploadId=upload_id, PartNumber=number, Body=body,
            ChecksumAlgorithm=ALG.name, **{ALG.field: ALG.of(body)},
        )["ETag"]  # fmt: skip

    good = [content[: 5 * MiB], content[5 * MiB : 10 * MiB]]
    etags = [put(1, good[0]), put(2, good[1])]
    hashed = hashstate.ResumableHash("sha256")
    if case == "a part replaced since":
        hashed.update(b"".join(good))
        put(2, bytes([good[1][0] ^ 1]) + good[1][1:])
    else:
        hashed.update(good[0])
    key = checkpoint_key(prefix, BIG, upload_id, 2, hashed.state(), parts_digest(etags))
    client.create_multipart_upload(Bucket=s3.bucket, Key=key)
    code, out, _ = stage()
    assert code == 0, out
    assert "event=resume_discarded" in out and "event=resume_upload" not in out
    reason = {
        "a part replaced since": "the parts in S3 are not the ones the checkpoint hashed",
        "a state of fewer bytes": "the saved hash state does not cover the 2 parts before the checkpoint",
    }[case]
    assert f'event=resume_discarded path={BIG} reason="{reason}"' in out
    assert s3.body(prefix + BIG) == content
    assert s3.open_uploads() == []


# -- a killed run's upload whose parts are not what its checkpoint says ---------------------------------------


def left_by_a_killed_run(s3: S3Env, key: str, parts: dict[int, bytes]) -> tuple[str, list[str]]:  # noqa: F811
    """An open upload of ``key`` holding ``parts`` (number -> bytes), each sent with its checksum as the worker
    sends it: (upload id, their ETags in order)."""
    upload_id = s3.client.create_multipart_upload(
        Bucket=s3.bucket, Key=key, ChecksumAlgorithm=ALG.name, ChecksumType="FULL_OBJECT"
    )["UploadId"]
    etags = []
    for number, body in sorted(parts.items()):
        answer = s3.client.upload_part(
            Bucket=s3.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body,
            ChecksumAlgorithm=ALG.name, **{ALG.field: ALG.of(body)},
        )  # fmt: skip
        etags.append(answer["ETag"])
    return upload_id, etags


def other_bytes(part: bytes) -> bytes:
    """Same size, other content (every byte changed): what a part uploaded by another run could hold."""
    return bytes(b ^ 0x5A for b in part)


def test_parts_past_the_checkpoint_with_the_right_size_but_other_bytes_are_uploaded_again(
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
) -> None:
    """The checkpoint covers part 1 (right); S3 also holds part 2 of the right size but other bytes, and part 3
    as the Hub serves it. The resume fetches parts 2-3 to hash them and uploads again each part whose CRC32 S3
    does not list as the one of the bytes just hashed (moto lists none, so both here; test_hfstage_wire keeps a
    matching part 3). Trusting a listed part by its size would complete the file with part 2's wrong bytes while
    the hash, computed from the Hub's bytes, reads as verified."""
    from hfstage.transfer import checkpoint_key, parts_digest

    assert hashstate.available()
    content = repo.files[BIG].content.to_bytes()
    prefix = revision_prefix("models/", REPO, repo.sha)
    good = [content[: 5 * MiB], content[5 * MiB : 10 * MiB], content[10 * MiB :]]
    parts = {1: good[0], 2: other_bytes(good[1]), 3: good[2]}
    upload_id, etags = left_by_a_killed_run(s3, prefix + BIG, parts)
    hashed = hashstate.ResumableHash("sha256")
    hashed.update(good[0])
    sums = encode_sums(ALG, ALG.compute(good[0], 0))
    marker = checkpoint_key(prefix, BIG, upload_id, 1, hashed.state(), parts_digest(etags[:1]), sums)
    s3.client.create_multipart_upload(Bucket=s3.bucket, Key=marker)
    code, out, calls = stage()
    assert code == 0, out
    assert f"event=resume_upload path={BIG} parts_in_s3=3 checkpoint=1" in out and "resume_discarded" not in out
    assert sorted(cdn_ranges(fake_hub)) == sorted([ranges_of(5 * MiB), ranges_of(10 * MiB)])  # part 1: not again
    assert calls["UploadPart"] == 2  # parts 2 and 3: ListParts (moto's) shows no CRC32 to match
    assert s3.body(prefix + BIG) == content
    assert s3.open_uploads() == []


@pytest.mark.parametrize("digest", ["empty", "missing"])
def test_a_checkpoint_without_a_parts_digest_is_discarded_and_the_file_starts_over(
    digest: str,
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
) -> None:
    """A checkpoint key whose parts digest is empty (``00001--<state>``) or absent (``00001-<state>``, as an
    older layout wrote it) cannot show that S3's parts are the ones its state hashed: here S3's part 1 is other
    bytes of the right size. Resuming would keep that part and complete the file wrong; it is discarded, the
    killed run's upload aborted, and the file fetched and uploaded again from byte 0."""
    from hfstage.transfer import _short_digest, checkpoint_key, checkpoint_prefix

    assert hashstate.available()
    content = repo.files[BIG].content.to_bytes()
    prefix = revision_prefix("models/", REPO, repo.sha)
    upload_id, _ = left_by_a_killed_run(s3, prefix + BIG, {1: other_bytes(content[: 5 * MiB])})
    hashed = hashstate.ResumableHash("sha256")
    hashed.update(content[: 5 * MiB])  # the state of the right bytes: the part in S3 is not them
    if digest == "empty":
        marker = checkpoint_key(prefix, BIG, upload_id, 1, hashed.state(), "")
        reason = "the parts in S3 are not the ones the checkpoint hashed"
    else:
        marker = f"{checkpoint_prefix(prefix, BIG)}{_short_digest(upload_id)}/00001-{hashed.state().hex()}"
        reason = "a saved sha256 state has 112 bytes, not 0"
    s3.client.create_multipart_upload(Bucket=s3.bucket, Key=marker)
    code, out, calls = stage()
    assert code == 0, out
    assert f'event=resume_discarded path={BIG} reason="{reason}"' in out and "event=resume_upload" not in out
    assert ranges_of(0) in cdn_ranges(fake_hub)  # part 1 fetched again
    assert calls["UploadPart"] == 3
    assert s3.body(prefix + BIG) == content
    assert s3.open_uploads() == []  # the killed run's upload and its checkpoint are gone


def test_a_prefix_too_long_for_checkpoint_keys_stages_without_them(s3: S3Env, fake_hub: FakeHub, repo, capsys) -> None:  # noqa: F811
    """S3 keys are at most 1,024 bytes: the file's key fits, its checkpoint's (about 300 bytes more) would not."""
    from hfstage.worker import main

    long_prefix = "models/" + "p" * 700 + "/"
    # Parts arrive 0.5 s apart, so part 1 is in S3 before the last is read: a checkpoint is due (when every
    # part lands at once the upload completes next and none is taken).
    fake_hub.connection_bytes_per_s = 10 * MiB
    client, _ = s3.worker_client()
    created: list[str] = []
    client.meta.events.register(
        "before-parameter-build.s3.CreateMultipartUpload", lambda params, **_: created.append(params["Key"])
    )
    capsys.readouterr()
    argv = [f"--repo-id={REPO}", f"--destination=s3://{s3.bucket}/{long_prefix}", "--part-size-mib=5"]
    assert main([*argv, "--ranges-per-file=1"], s3_client=client) == 0
    out = capsys.readouterr().out
    prefix = revision_prefix(long_prefix, REPO, repo.sha)
    assert len((prefix + BIG).encode()) <= 1024
    assert s3.body(prefix + BIG) == repo.files[BIG].content.to_bytes()
    assert created and set(created) == {prefix + BIG}, out  # the file's upload only: no checkpoint attempted
    warning = (
        f'event=warning reason="{BIG}: no resume checkpoints, their key would exceed 1024 bytes (shorten the '
        'destination prefix)"'
    )
    assert out.count(warning) == created.count(prefix + BIG), out  # one per upload


def test_a_python_without_ctypes_still_stages_with_hashlib() -> None:
    """hashstate is optional: without ``_ctypes`` (a Python built without libffi) the worker must still import."""
    code = (
        "import sys; sys.modules['_ctypes'] = None\n"
        "from hfstage import hashstate, worker\n"
        "from hfstage.transfer import Verifier\n"
        "from hfstage.hub import HubFile\n"
        "assert not hashstate.available()\n"
        f"f = HubFile(path='a', size=3, blob_id='', sha256='{hashlib.sha256(b'abc').hexdigest()}')\n"
        "v = Verifier(f, resumable=True); v.update(b'abc'); v.check(); print('ok')\n"
    )
    done = subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_range_refused_by_the_cdn_resolves_the_file_again_without_spending_an_attempt(
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
) -> None:
    """Later ranges reuse the signed CDN URL the first one was redirected to; once it has expired (403), the
    range asks the Hub's resolve URL again rather than failing the attempt."""
    fake_hub.cdn_status(BIG, 403, range=ranges_of(10 * MiB))
    code, out, calls = stage()
    assert code == 0, out
    assert "event=resolve_again" in out and "event=retry" not in out
    resolves = [r for r in fake_hub.requests_for(BIG) if r.server == "hub"]
    assert len(resolves) == 2  # the first range's, and the refused range's
    assert s3.body(revision_prefix("models/", REPO, repo.sha) + BIG) == repo.files[BIG].content.to_bytes()
    assert calls["UploadPart"] == 3


def test_a_later_range_answered_with_the_whole_file_restarts_it_as_one_stream(
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
) -> None:
    """The first range was honoured, a later one is not (a 200 with every byte): the file starts again from byte
    0 over one connection, in the same multipart upload, and hashes right."""
    fake_hub.whole_file(BIG, range=ranges_of(5 * MiB))
    code, out, calls = stage()
    assert code == 0, out
    assert f'reason="downloading {BIG}: the server ignored the Range request"' in out
    assert cdn_ranges(fake_hub)[-1] is None  # the restart: one stream from byte 0, no Range header
    assert calls["CreateMultipartUpload"] - calls["AbortMultipartUpload"] == 1  # checkpoints aside, one upload
    assert s3.body(revision_prefix("models/", REPO, repo.sha) + BIG) == repo.files[BIG].content.to_bytes()
    assert s3.open_uploads() == []


def test_a_range_answered_with_other_bytes_is_fetched_again(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    fake_hub.wrong_range(BIG, range=ranges_of(5 * MiB))
    code, out, _ = stage()
    assert code == 0, out
    asked = f"bytes {5 * MiB}-{10 * MiB - 1}/{SIZE}"
    assert f'reason="{BIG}: asked for {asked}, the server sent bytes 0-{5 * MiB - 1}/{SIZE}"' in out
    assert sorted(cdn_ranges(fake_hub)).count(ranges_of(5 * MiB)) == 2
    assert s3.body(revision_prefix("models/", REPO, repo.sha) + BIG) == repo.files[BIG].content.to_bytes()


@pytest.mark.parametrize(("ranges_per_file", "parallel"), [("1", False), ("2", True)])
def test_two_ranges_per_file_already_fetch_in_parallel_and_one_means_one_stream(
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
    ranges_per_file: str,
    parallel: bool,
) -> None:
    code, out, _ = stage(f"--ranges-per-file={ranges_per_file}")
    assert code == 0, out
    expected = [ranges_of(n * 5 * MiB) for n in range(3)] if parallel else [None]  # None: no Range header
    assert sorted(cdn_ranges(fake_hub), key=str) == sorted(expected, key=str)
    assert s3.body(revision_prefix("models/", REPO, repo.sha) + BIG) == repo.files[BIG].content.to_bytes()


def test_no_more_ranges_of_a_file_are_in_flight_than_ranges_per_file(
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
) -> None:
    """Three 5 MiB ranges at 10 MiB/s each (0.5 s): with two allowed, the third starts when one has finished."""
    fake_hub.connection_bytes_per_s = 10 * MiB
    code, out, _ = stage("--ranges-per-file=2")
    assert code == 0, out
    seen = [r for r in fake_hub.requests_for(BIG) if r.server == "cdn"]
    assert len(seen) == 3
    # The Hub notes a range finished once its last byte is written, which can be just after the client, having
    # read it, asks for the next: 0.1 s of slack keeps that from reading as three at once.
    at_once = max(sum(1 for o in seen if o.started <= r.started < o.finished - 0.1) for r in seen)
    assert at_once == 2


@pytest.mark.parametrize(("files_in_flight", "overlap"), [("1", False), ("2", True)])
def test_files_in_flight_bounds_the_files_copied_at_once(
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
    files_in_flight: str,
    overlap: bool,
) -> None:
    """The largest file goes first (1.3 s at 10 MiB/s); config.json waits for it only with one file at a time."""
    fake_hub.connection_bytes_per_s = 10 * MiB
    code, out, _ = stage(f"--files-in-flight={files_in_flight}")
    assert code == 0, out
    big = fake_hub.requests_for(BIG)  # the Hub's redirect, then the CDN's ranges
    (small,) = [r for r in fake_hub.requests_for("config.json") if r.method == "GET"]
    # 0.1 s of slack for the Hub noting a body finished after the client has read it (see the test above).
    assert (small.started < max(r.finished for r in big) - 0.1) is overlap
