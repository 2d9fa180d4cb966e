"""A multi-instance job and a stopped job, in this process (``test_hfstage_processes`` runs the same as real
processes; mutmut can only switch mutants in this one): each host copies its share, only the leader waits
and writes the manifest, a leader that waits too long says which file is missing, a SIGTERM stops the run
with a reason that says a rerun resumes.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from hfstage.manifest import MANIFEST_NAME, revision_prefix
from hfstage.shard import assign
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import S3Env, boto_session, fake_hub, s3, worker_argv  # noqa: F401

MiB = 1024 * 1024
REPO = "Org/Model"
FILES = {
    "a.safetensors": Synthetic(3 * MiB, seed=1),
    "b.safetensors": Synthetic(2 * MiB, seed=2),
    "config.json": b"{}",
    "tokenizer.json": b"t" * 1000,
}
HOSTS = ["algo-1", "algo-2"]


@pytest.fixture
def run(s3: S3Env, fake_hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # noqa: F811
    from hfstage.worker import main

    fake_hub.add_repo(REPO, FILES)

    def go(host: str | None, *extra: str) -> tuple[int, str, str | None]:
        config = tmp_path / f"{host}.json"
        if host is not None:
            config.write_text(json.dumps({"current_host": host, "hosts": list(reversed(HOSTS))}))
        client, _ = s3.worker_client()
        message = tmp_path / "message"
        message.unlink(missing_ok=True)
        capsys.readouterr()
        argv = worker_argv(REPO, s3.bucket, message, config, *extra)
        code = main(argv, s3_client=client)
        return code, capsys.readouterr().out, message.read_text() if message.exists() else None

    return go


def shares(hub: FakeHub) -> dict[str, list[str]]:
    from hfstage.hub import HubClient

    files = HubClient(hub.endpoint).revision_info(REPO, "main").files
    return {host: [f.path for f in mine] for host, mine in assign(files, HOSTS).items()}


def test_each_host_copies_its_share_and_the_leader_writes_the_manifest(run, s3: S3Env, fake_hub: FakeHub) -> None:  # noqa: F811
    prefix = revision_prefix("models/", REPO, fake_hub.repos[REPO].sha)
    plan = shares(fake_hub)
    assert plan["algo-1"] and plan["algo-2"]

    code, out, _ = run("algo-2")
    assert code == 0, out
    assert s3.list_keys(prefix) == sorted(prefix + p for p in plan["algo-2"])  # its share only, no manifest
    assert "leader=algo-1" in out and "host=algo-2" in out and "hosts=2" in out
    assert f"files={len(plan['algo-2'])}" in out.split("event=plan ")[1].splitlines()[0]
    summary = out.split("event=summary ")[1]
    assert 'manifest="left to the leader"' in summary and "event=manifest" not in out
    assert f"uploaded={len(plan['algo-2'])}" in summary

    fetched = {p: len(fake_hub.requests_for(p)) for p in FILES}
    code, out, _ = run("algo-1", "--leader-poll-s=0.05")
    assert code == 0, out
    assert "event=waiting" not in out  # the other share was there already
    assert s3.list_keys(prefix) == sorted([prefix + MANIFEST_NAME] + [prefix + p for p in FILES])
    manifest = json.loads(s3.body(prefix + MANIFEST_NAME))
    assert [f["path"] for f in manifest["files"]] == sorted(FILES)
    assert f"uploaded={len(plan['algo-1'])}" in out and "manifest=written" in out
    # The leader fetched its own share only.
    assert [p for p in FILES if len(fake_hub.requests_for(p)) > fetched[p]] == sorted(plan["algo-1"])


def test_a_host_that_is_not_the_leader_never_reads_or_writes_the_manifest(run, s3: S3Env, fake_hub: FakeHub) -> None:  # noqa: F811
    prefix = revision_prefix("models/", REPO, fake_hub.repos[REPO].sha)
    assert run("algo-1", "--leader-wait-s=0.1", "--leader-poll-s=0.05")[0] == 1  # the other share is missing
    assert run("algo-2")[0] == 0
    s3.client.put_object(Bucket=s3.bucket, Key=prefix + MANIFEST_NAME, Body=b"{not json")
    code, out, _ = run("algo-2")
    assert code == 0 and "existing manifest ignored" not in out and "up_to_date" not in out
    assert "uploaded=0" in out and f"skipped={len(shares(fake_hub)['algo-2'])}" in out


def test_the_leader_gives_up_waiting_and_names_a_missing_file(run, s3: S3Env, fake_hub: FakeHub) -> None:  # noqa: F811
    prefix = revision_prefix("models/", REPO, fake_hub.repos[REPO].sha)
    theirs = shares(fake_hub)["algo-2"]
    code, out, message = run("algo-1", "--leader-wait-s=0.3", "--leader-poll-s=0.05")
    assert code == 1
    assert message.strip() == (
        f"staging {REPO}@main failed: {len(theirs)} of {len(FILES)} files were still missing after the leader "
        f"waited 0 s for the other hosts (first: {sorted(theirs)[0]})"
    )
    waiting = [line for line in out.splitlines() if " event=waiting " in line]
    assert 1 <= len(waiting) <= 8  # polled every 0.05 s for 0.3 s, never past the deadline
    assert f"missing={len(theirs)} of={len(FILES)}" in waiting[0]
    assert 0 <= float(waiting[0].split("waited_s=")[1].split()[0]) < 0.3
    assert 'reason="other hosts are still copying their share"' in waiting[0]
    assert prefix + MANIFEST_NAME not in s3.list_keys()


def test_the_leader_writes_the_manifest_once_the_others_arrive(run, s3: S3Env, fake_hub: FakeHub) -> None:  # noqa: F811
    prefix = revision_prefix("models/", REPO, fake_hub.repos[REPO].sha)
    done: list[int] = []

    def follower() -> None:
        from hfstage.worker import main

        # Start once the leader has uploaded its own share, so it must wait for this host's (however loaded the
        # machine is: a fixed delay let the follower finish first, and the leader never waited).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=prefix).get(
            "KeyCount"
        ):
            time.sleep(0.02)
        client, _ = s3.worker_client()
        config = Path(os.environ["HFSTAGE_TEST_TMP"]) / "follower.json"
        config.write_text(json.dumps({"current_host": "algo-2", "hosts": HOSTS}))
        done.append(
            main(
                [
                    f"--repo-id={REPO}",
                    f"--destination=s3://{s3.bucket}/models/",
                    "--part-size-mib=5",
                    "--progress-interval-s=0",
                    f"--resource-config={config}",
                ],
                s3_client=client,
            )
        )

    leader_waits = threading.Timer(0.0, follower)
    leader_waits.start()
    try:
        code, out, _ = run("algo-1", "--leader-wait-s=30", "--leader-poll-s=0.05")
    finally:
        leader_waits.join()
    assert done == [0] and code == 0, out
    assert " event=waiting " in out and " event=manifest " in out
    assert s3.list_keys(prefix) == sorted([prefix + MANIFEST_NAME] + [prefix + p for p in FILES])


@pytest.fixture(autouse=True)
def _tmp_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HFSTAGE_TEST_TMP", str(tmp_path))


def test_a_bad_resource_config_is_an_argument_error(run, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"current_host": "algo-9", "hosts": HOSTS}))
    code, _, message = run(None, f"--resource-config={tmp_path / 'bad.json'}")
    assert code == 2 and "current_host 'algo-9' is not one of hosts" in message


def test_sigterm_stops_the_run_and_says_a_rerun_resumes(run, s3: S3Env, fake_hub: FakeHub) -> None:  # noqa: F811
    fake_hub.connection_bytes_per_s = 2 * MiB  # about 1.5 s for the largest file
    # Ours while the worker does not install its own (then the run finishes: code 0, and the test fails cleanly).
    unhandled: list[int] = []
    original = signal.signal(signal.SIGTERM, lambda signum, frame: unhandled.append(signum))
    previous = signal.getsignal(signal.SIGTERM)
    stop_waiting = threading.Event()

    def terminate_once_copying() -> None:  # the worker's handler is in place before its first download
        while not stop_waiting.wait(0.02):
            if fake_hub.requests_for("a.safetensors"):
                os.kill(os.getpid(), signal.SIGTERM)
                return

    killer = threading.Thread(target=terminate_once_copying)
    killer.start()
    try:
        code, _, message = run(None)
    finally:
        stop_waiting.set()
        killer.join()
        restored = signal.signal(signal.SIGTERM, original)
    assert code == 1
    assert message.strip() == (
        f"staging {REPO}@main failed: stopped by SIGTERM before every file was copied; a rerun resumes"
    )
    assert restored is previous and not unhandled  # the worker's handler took it, and is put back after
    prefix = revision_prefix("models/", REPO, fake_hub.repos[REPO].sha)
    assert prefix + MANIFEST_NAME not in s3.list_keys()


def test_an_unexpected_error_is_reported_as_internal(run, monkeypatch: pytest.MonkeyPatch) -> None:
    from hfstage import worker

    def broken(*args, **kwargs):
        raise ValueError("a bug")

    monkeypatch.setattr(worker, "missing_files", broken)
    code, _, message = run(None)
    assert code == 1
    assert message.strip() == f"staging {REPO}@main failed: internal error ValueError: a bug"


def test_a_stopped_file_with_a_checkpoint_keeps_its_upload_for_the_rerun(
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SIGTERM after a checkpoint: the upload and its checkpoint stay open (no object, no manifest); the rerun
    resumes after the checkpoint and completes the file."""
    from hfstage.transfer import CHECKPOINT_DIR
    from hfstage.worker import main

    repo = fake_hub.add_repo("Org/Long", {"w.bin": Synthetic(15 * MiB, seed=5)})
    prefix = revision_prefix("models/", "Org/Long", repo.sha)
    fake_hub.slow("w.bin", bytes_per_s=2 * MiB, after_bytes=10 * MiB)  # the last part crawls: time to stop it
    argv = ["--repo-id=Org/Long", f"--destination=s3://{s3.bucket}/models/", "--part-size-mib=5", "--ranges-per-file=1"]
    argv += ["--progress-interval-s=0", f"--failure-file={tmp_path / 'message'}"]
    stop_waiting = threading.Event()

    def terminate_after_a_checkpoint() -> None:
        while not stop_waiting.wait(0.05):
            if any(CHECKPOINT_DIR in u["Key"] for u in s3.open_uploads()):
                os.kill(os.getpid(), signal.SIGTERM)
                return

    original = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    killer = threading.Thread(target=terminate_after_a_checkpoint)
    killer.start()
    try:
        client, _ = s3.worker_client()
        assert main(argv, s3_client=client) == 1
    finally:
        stop_waiting.set()
        killer.join()
        signal.signal(signal.SIGTERM, original)
    assert "stopped by SIGTERM" in (tmp_path / "message").read_text()
    left = sorted(u["Key"] for u in s3.open_uploads())
    assert left[-1] == prefix + "w.bin" and len(left) == 2 and CHECKPOINT_DIR in left[0]
    assert s3.list_keys() == []

    fake_hub.clear_faults()
    capsys.readouterr()
    client, calls = s3.worker_client()
    # The rest comes as parallel ranges (the stop above was on one stream).
    assert main([a for a in argv if a != "--ranges-per-file=1"], s3_client=client) == 0
    out = capsys.readouterr().out
    assert "event=resume_upload path=w.bin" in out and calls.calls["UploadPart"] <= 2
    assert s3.body(prefix + "w.bin") == repo.files["w.bin"].content.to_bytes() and s3.open_uploads() == []


def test_the_reported_reason_never_carries_the_token(
    run,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hfstage import worker

    def leaky(*args, **kwargs):
        raise ValueError("request with hf_secret_token failed")

    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    monkeypatch.setattr(worker, "missing_files", leaky)
    code, out, message = run(None)
    assert code == 1
    assert message.strip() == f"staging {REPO}@main failed: internal error ValueError: request with *** failed"
    assert "hf_secret_token" not in out and "token=yes" in out


def test_a_failure_file_that_cannot_be_written_is_a_warning(run, tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    code, out, _ = run(None, f"--failure-file={tmp_path / 'dir'}", "--include=nothing*")
    assert code == 2
    assert out.splitlines()[-1].endswith(f'event=warning reason="cannot write {tmp_path / "dir"}: IsADirectoryError"')
    assert " event=fail reason=" in out.splitlines()[-2]


def test_the_help_exits_zero_and_bad_arguments_exit_two(run, capsys: pytest.CaptureFixture[str]) -> None:
    from hfstage.worker import main

    assert main(["--help"]) == 0
    assert main(["--repo-id"]) == 2
    assert "bad arguments: argument --repo-id: expected one argument" in capsys.readouterr().err
