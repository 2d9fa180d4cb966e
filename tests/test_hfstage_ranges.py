"""One large file fetched as parallel byte ranges, hashed in order; resumable hash state; resume across runs.

The worker runs in this process against the fake Hub and moto's S3 over HTTP (as in test_hfstage_worker);
the killed run is a separate process, ended with SIGKILL, so that it cleans nothing up.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
from pathlib import Path

import pytest

from hfstage import hashstate
from hfstage.manifest import MANIFEST_NAME, revision_prefix
from hfstage.transfer import CHECKPOINT_DIR, parse_checkpoint_key
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import PYTHON, ROOT, S3Env, fake_hub, s3, subprocess_env  # noqa: F401

MiB = 1024 * 1024
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
        code = main(
            [
                f"--repo-id={REPO}",
                f"--destination=s3://{s3.bucket}/models/",
                "--part-size-mib=5",
                "--retry-base-s=0.01",
                f"--failure-file={tmp_path / 'message'}",
                f"--resource-config={tmp_path / 'absent.json'}",
                *extra,
            ],
            s3_client=client,
        )
        return code, capsys.readouterr().out, counter.calls

    return run


def cdn_ranges(hub: FakeHub) -> list[str | None]:
    return [r.range for r in hub.requests_for(BIG) if r.server == "cdn"]


def test_ranges_arriving_out_of_order_hash_and_upload_in_order(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    fake_hub.slow(BIG, bytes_per_s=4 * MiB, range=ranges_of(0))  # the first part arrives last
    code, out, calls = stage()
    assert code == 0, out
    by_range = {r.range: r for r in fake_hub.requests_for(BIG) if r.server == "cdn"}
    assert sorted(by_range) == sorted(ranges_of(n * 5 * MiB) for n in range(3))
    assert by_range[ranges_of(0)].finished > max(by_range[ranges_of(n * 5 * MiB)].finished for n in (1, 2))
    assert s3.body(revision_prefix("models/", REPO, repo.sha) + BIG) == repo.files[BIG].content.to_bytes()
    assert fake_hub.bytes_sent(BIG) == SIZE and calls["UploadPart"] == 3
    assert s3.open_uploads() == []  # the checkpoints are gone with the completed upload


def test_a_range_failing_midway_refetches_that_range_only(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    fake_hub.drop_after(BIG, after_bytes=MiB, range=ranges_of(10 * MiB))
    fake_hub.slow(BIG, bytes_per_s=2 * MiB, range=ranges_of(10 * MiB))  # parts 1-2 are uploaded before it breaks
    code, out, calls = stage()
    assert code == 0, out
    assert "event=retry" in out and f"offset={10 * MiB}" in out  # the retry resumed at the third part
    assert sorted(cdn_ranges(fake_hub)) == sorted([ranges_of(0), ranges_of(5 * MiB), *[ranges_of(10 * MiB)] * 2])
    assert calls["UploadPart"] == 3
    assert s3.body(revision_prefix("models/", REPO, repo.sha) + BIG) == repo.files[BIG].content.to_bytes()


def test_a_server_ignoring_range_gets_one_stream(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    fake_hub.ignore_range = True
    code, out, _ = stage()
    assert code == 0, out
    assert cdn_ranges(fake_hub) == [ranges_of(0)]  # answered with the whole file: read as the one stream
    assert "event=single_stream" in out and fake_hub.bytes_sent(BIG) == SIZE
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


def test_a_killed_run_resumes_inside_the_file_fetching_only_the_missing_parts(
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    size = 30 * MiB  # six parts
    repo = fake_hub.add_repo(REPO, {"config.json": b"{}", BIG: Synthetic(size, seed=23)})
    prefix = revision_prefix("models/", REPO, repo.sha)
    fake_hub.connection_bytes_per_s = 5 * MiB  # each part takes about a second
    argv = [f"--repo-id={REPO}", f"--destination=s3://{s3.bucket}/models/", "--part-size-mib=5"]
    log = tmp_path / "killed.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [PYTHON, "-m", "hfstage", *argv, "--parts-in-flight=2", "--ranges-per-file=2"],
            cwd=ROOT,
            env=subprocess_env(s3, fake_hub),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        from tests.test_hfstage_processes import until

        until(lambda: max(checkpoints(s3, prefix), default=0) >= 2, timeout=60, what="a checkpoint after part 2")
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    (saved,) = checkpoints(s3, prefix)  # one checkpoint per upload: each replaces the one before
    assert prefix + BIG not in s3.list_keys() and len(s3.open_uploads()) == 2  # the upload and its checkpoint
    fetched_before = fake_hub.bytes_sent(BIG)
    fake_hub.connection_bytes_per_s = 0

    from hfstage.worker import main

    client, counter = s3.worker_client()
    capsys.readouterr()
    assert main(argv, s3_client=client) == 0
    out = capsys.readouterr().out
    assert "event=resume_upload" in out and f"checkpoint={saved}" in out
    assert fake_hub.bytes_sent(BIG) - fetched_before == size - saved * 5 * MiB  # only the parts after it
    assert counter.calls["ListParts"] == 1 and counter.calls["UploadPart"] <= 6 - saved
    assert s3.body(prefix + BIG) == repo.files[BIG].content.to_bytes()
    assert s3.open_uploads() == [] and prefix + MANIFEST_NAME in s3.list_keys()


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
