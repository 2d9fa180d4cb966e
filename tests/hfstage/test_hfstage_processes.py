"""The staging worker as separate processes: killed midway and resumed, stopped by SIGTERM, three hosts.

Each worker is ``python -m hfstage`` with its own environment, talking to the fake Hub and moto over
HTTP, exactly as in a Processing job. Processes are started by the tests and ended by their PID.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hfstage.manifest import MANIFEST_NAME, revision_prefix
from hfstage.transfer import CHECKPOINT_DIR, parse_checkpoint_key
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import PYTHON, ROOT, S3Env, fake_hub, s3, subprocess_env  # noqa: F401
from tests.hfstage import test_hfstage_ranges as ranges

MiB = 1024 * 1024
REPO = "Org/Model"


class Worker:
    """A worker subprocess whose output goes to a file (a pipe could fill up and block it)."""

    def __init__(self, s3: S3Env, hub: FakeHub, tmp_path: Path, name: str, *extra: str) -> None:  # noqa: F811
        self.log = tmp_path / f"{name}.log"
        self.message = tmp_path / f"{name}.message"
        argv = [
            PYTHON,
            "-m",
            "hfstage",
            f"--repo-id={REPO}",
            f"--destination=s3://{s3.bucket}/models/",
            "--part-size-mib=5",
            "--retry-base-s=0.05",
            "--progress-interval-s=0.5",
            f"--failure-file={self.message}",
            *extra,
        ]
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                argv, cwd=ROOT, env=subprocess_env(s3, hub), stdout=out, stderr=subprocess.STDOUT
            )

    def output(self) -> str:
        return self.log.read_text()

    def done_paths(self) -> list[str]:
        return [
            part.split("=", 1)[1]
            for line in self.output().splitlines()
            if " event=done " in line
            for part in line.split()
            if part.startswith("path=")
        ]

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def workers():
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def until(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def uploaded_parts(s3: S3Env, key: str) -> int:  # noqa: F811
    for upload in s3.open_uploads():
        if upload["Key"] == key:
            parts = s3.client.list_parts(Bucket=s3.bucket, Key=key, UploadId=upload["UploadId"])
            return len(parts.get("Parts", []))
    return 0


def test_a_killed_run_resumes_uploading_only_what_is_missing(
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    tmp_path: Path,
    workers: list[Worker],
    capsys: pytest.CaptureFixture[str],
) -> None:
    big = "model-00001-of-00002.safetensors"
    files = {
        "config.json": b"{}",
        "tokenizer.json": b"t" * 50_000,
        big: Synthetic(12 * MiB, seed=1),
        "model-00002-of-00002.safetensors": Synthetic(6 * MiB, seed=2),
    }
    repo = fake_hub.add_repo(REPO, files)
    prefix = revision_prefix("models/", REPO, repo.sha)
    fake_hub.slow(big, bytes_per_s=MiB, after_bytes=6 * MiB)  # a first part, then a crawl
    worker = Worker(s3, fake_hub, tmp_path, "killed", "--ranges-per-file=1")  # one stream (test_hfstage_ranges: many)
    workers.append(worker)
    until(lambda: uploaded_parts(s3, prefix + big) >= 1, what="a first part of the big file")
    until(lambda: len(worker.done_paths()) == 3, what="the three other files")
    # The part's hash checkpoint follows the part: on a loaded machine it may lag, so wait for it too.
    until(lambda: len(s3.open_uploads()) == 2, what="the first part's hash checkpoint")
    worker.process.send_signal(signal.SIGKILL)
    worker.wait()
    keys = s3.list_keys()
    assert prefix + big not in keys and prefix + MANIFEST_NAME not in keys
    open_keys = sorted(u["Key"] for u in s3.open_uploads())  # kill -9 cannot clean up
    assert open_keys[-1] == prefix + big and len(open_keys) == 2  # the upload and its hash checkpoint
    saved = parse_checkpoint_key(prefix, open_keys[0])[2]

    fake_hub.clear_faults()
    from hfstage.worker import main

    client, counter = s3.worker_client()
    capsys.readouterr()
    code = main([f"--repo-id={REPO}", f"--destination=s3://{s3.bucket}/models/", "--part-size-mib=5"], s3_client=client)
    out = capsys.readouterr().out
    assert code == 0
    # The killed run's upload continues after its checkpoint: no new upload, only the missing parts.
    assert "event=resume_upload" in out and "event=abort_stale" not in out
    # New checkpoints only, each aborted in turn, and the killed run's checkpoint too.
    assert counter.calls["CreateMultipartUpload"] + 1 == counter.calls["AbortMultipartUpload"]
    assert counter.calls["UploadPart"] == 3 - saved
    assert counter.calls["PutObject"] == 1  # the manifest
    assert out.count(" event=skip ") == 3
    assert s3.open_uploads() == [] and prefix + MANIFEST_NAME in s3.list_keys()
    assert s3.body(prefix + big) == files[big].to_bytes()


def test_sigterm_keeps_a_resumable_upload_and_reports(
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    tmp_path: Path,
    workers: list[Worker],
) -> None:
    big = "model.safetensors"
    repo = fake_hub.add_repo(REPO, {"config.json": b"{}", big: Synthetic(11 * MiB, seed=5)})
    prefix = revision_prefix("models/", REPO, repo.sha)
    fake_hub.slow(big, bytes_per_s=MiB, after_bytes=6 * MiB)
    worker = Worker(s3, fake_hub, tmp_path, "stopped", "--ranges-per-file=1")
    workers.append(worker)
    until(lambda: len(s3.open_uploads()) == 2, what="a first part and its checkpoint")
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 1
    # A stopped job's upload stays for the next run to resume (the bucket aborts it after some days otherwise).
    assert sorted(u["Key"] for u in s3.open_uploads())[-1] == prefix + big and len(s3.open_uploads()) == 2
    assert prefix + big not in s3.list_keys()
    message = worker.message.read_text().strip()
    assert message == f"staging {REPO}@main failed: stopped by SIGTERM before every file was copied; a rerun resumes"
    assert message in worker.output()


def test_three_hosts_copy_each_file_once_and_the_leader_writes_the_manifest_last(
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    tmp_path: Path,
    workers: list[Worker],
) -> None:
    files: dict[str, bytes | Synthetic] = {
        f"model-{i:05d}.safetensors": Synthetic((3 + i) * MiB, seed=i) for i in range(4)
    }
    files.update({"config.json": b"{}", "tokenizer.json": b"t" * 10_000, "README.md": b"# demo\n"})
    repo = fake_hub.add_repo(REPO, files)
    prefix = revision_prefix("models/", REPO, repo.sha)
    hosts = ["algo-1", "algo-2", "algo-3"]
    configs = {}
    for host in hosts:
        configs[host] = tmp_path / f"{host}.json"
        configs[host].write_text(json.dumps({"current_host": host, "hosts": hosts}))

    def start(host: str) -> Worker:
        worker = Worker(s3, fake_hub, tmp_path, host, f"--resource-config={configs[host]}", "--leader-poll-s=0.3")
        workers.append(worker)
        return worker

    leader = start("algo-1")
    until(lambda: " event=waiting " in leader.output(), what="the leader to finish its share and wait")
    assert leader.process.poll() is None  # still waiting for the others
    assert prefix + MANIFEST_NAME not in s3.list_keys()
    others = [start("algo-2"), start("algo-3")]
    assert [w.wait() for w in others] == [0, 0]
    assert leader.wait() == 0

    shares = [sorted(w.done_paths()) for w in [leader, *others]]
    assert all(shares) and sorted(p for share in shares for p in share) == sorted(files)  # each file once
    assert " event=manifest " in leader.output()
    assert all(" event=manifest " not in w.output() and "left to the leader" in w.output() for w in others)
    manifest = json.loads(s3.body(prefix + MANIFEST_NAME))
    assert sorted(f["path"] for f in manifest["files"]) == sorted(files)
    assert s3.list_keys(prefix) == sorted([prefix + MANIFEST_NAME] + [prefix + p for p in files])


# A killed run resumed inside its file (here rather than in test_hfstage_ranges: a subprocess run takes seconds,
# which every surviving mutant of the mutation suite would pay; test_hfstage_hosts covers the in-process resume).
BIG = ranges.BIG


def test_a_killed_run_resumes_inside_the_file_fetching_only_the_missing_parts(
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    size = 30 * MiB  # six parts
    repo = fake_hub.add_repo(ranges.REPO, {"config.json": b"{}", BIG: Synthetic(size, seed=23)})
    prefix = revision_prefix("models/", ranges.REPO, repo.sha)
    fake_hub.connection_bytes_per_s = 5 * MiB  # each part takes about a second
    argv = [f"--repo-id={ranges.REPO}", f"--destination=s3://{s3.bucket}/models/", "--part-size-mib=5"]
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
        until(lambda: max(ranges.checkpoints(s3, prefix), default=0) >= 2, timeout=60, what="a checkpoint after part 2")
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    # One checkpoint per upload, each replacing the one before; two when the kill fell between writing the
    # new one and aborting the old (the next run keeps the later).
    saved = max(ranges.checkpoints(s3, prefix))
    assert len(ranges.checkpoints(s3, prefix)) in (1, 2)
    assert prefix + BIG not in s3.list_keys()
    assert [u["Key"] for u in s3.open_uploads() if CHECKPOINT_DIR not in u["Key"]] == [prefix + BIG]
    fetched_before = fake_hub.bytes_sent(BIG)
    fake_hub.connection_bytes_per_s = 0

    from hfstage.worker import main

    client, counter = s3.worker_client()
    capsys.readouterr()
    assert main(argv, s3_client=client) == 0
    out = capsys.readouterr().out
    assert "event=resume_upload" in out and f"checkpoint={saved}" in out, out
    assert fake_hub.bytes_sent(BIG) - fetched_before == size - saved * 5 * MiB  # only the parts after it
    assert counter.calls["ListParts"] == 1 and counter.calls["UploadPart"] <= 6 - saved
    assert s3.body(prefix + BIG) == repo.files[BIG].content.to_bytes()
    assert s3.open_uploads() == [] and prefix + MANIFEST_NAME in s3.list_keys()
