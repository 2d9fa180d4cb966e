"""The worker's log, line by line: in a Processing job it is all the user sees (CloudWatch), so each event
carries the facts a person needs: what is copied where, how big, which hash, what was skipped and why.

The fake Hub over HTTP into moto's S3 server, as in ``test_hfstage_worker``; nothing is patched.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from hfstage.manifest import revision_prefix
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import S3Env, boto_session, fake_hub, s3, worker_argv  # noqa: F401

MiB = 1024 * 1024
REPO = "Org/Model"
BIG = "w.safetensors"
BIG_SIZE = 6 * MiB  # two parts of 5 MiB and 1 MiB


def events(out: str) -> list[tuple[str, dict[str, str]]]:
    """(event, fields) of each line, in order; ``ts`` checked and dropped."""
    parsed = []
    for line in out.splitlines():
        fields = dict(part.split("=", 1) for part in shlex.split(line))
        assert fields.pop("ts").endswith("Z"), line
        parsed.append((fields.pop("event"), fields))
    return parsed


@pytest.fixture
def run(s3: S3Env, fake_hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # noqa: F811
    from hfstage.worker import main

    fake_hub.add_repo(REPO, {"config.json": b"{}", BIG: Synthetic(BIG_SIZE, seed=1)})

    def go(*extra: str) -> tuple[int, list[tuple[str, dict[str, str]]]]:
        client, _ = s3.worker_client()
        capsys.readouterr()
        argv = worker_argv(REPO, s3.bucket, tmp_path / "message", tmp_path / "absent.json", *extra)
        code = main(argv, s3_client=client)
        return code, events(capsys.readouterr().out)

    return go


def one(log: list[tuple[str, dict[str, str]]], name: str, **match: str) -> dict[str, str]:
    found = [f for e, f in log if e == name and all(f.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (name, match, log)
    return found[0]


def test_a_first_run_logs_what_it_copies_where(run, s3: S3Env, fake_hub: FakeHub) -> None:  # noqa: F811
    code, log = run()
    assert code == 0, log
    sha = fake_hub.repos[REPO].sha
    where = f"s3://{s3.bucket}/{revision_prefix('models/', REPO, sha)}"
    total = str(BIG_SIZE + 2)
    assert [e for e, _ in log] == [
        "begin",
        "resolved",
        "plan",
        "checksums",
        "start",
        "start",
        "done",
        "done",
        "progress",
        "manifest",
        "summary",
    ]
    assert one(log, "checksums") == {"algorithm": "CRC64NVME"}  # awscrt is installed (requirements.txt)
    assert one(log, "begin") == {
        "repo": REPO,
        "revision": "main",
        "destination": f"s3://{s3.bucket}/models/",
        "hub": fake_hub.endpoint,
        "token": "no",
        "part_size_mib": "5",
        "parts_in_flight": "8",
        "files_in_flight": "4",
    }
    assert one(log, "resolved") == {
        "repo": REPO,
        "revision": "main",
        "sha": sha,
        "files": "2",
        "selected": "2",
        "bytes": total,
    }
    assert one(log, "plan") == {
        "destination": where,
        "host": "local",
        "hosts": "1",
        "leader": "local",
        "files": "2",
        "bytes": total,
        "s3_endpoint": s3.endpoint,
    }
    # Each with its size, part count and the hash it is checked against. Files are submitted largest first, but
    # their start lines come from the transfer threads, so their order is not fixed (it flipped under load).
    starts = [f for e, f in log if e == "start"]
    assert sorted(starts, key=lambda f: f["path"]) == [
        {"path": "config.json", "size": "2", "parts": "1", "hash": "git-sha1"},
        {"path": BIG, "size": str(BIG_SIZE), "parts": "2", "hash": "sha256"},
    ]
    big = one(log, "done", path=BIG)
    assert big["size"] == str(BIG_SIZE) and float(big["seconds"]) >= 0
    assert float(big["mb_per_s"]) > 0
    progress = one(log, "progress")
    assert progress["files_done"] == "2/2" and progress["bytes_done"] == total == progress["bytes_total"]
    assert progress["pct"] == "100.0" and progress["eta_s"] == "0" and progress["bytes_read"] == total
    assert one(log, "manifest") == {"destination": where, "files": "2", "total_bytes": total}
    summary = one(log, "summary")
    assert float(summary["seconds"]) > 0 and float(summary["mb_per_s"]) >= 0
    del summary["seconds"], summary["mb_per_s"]
    assert summary == {
        "status": "ok",
        "files": "2",
        "uploaded": "2",
        "skipped": "0",
        "bytes_uploaded": total,
        "manifest": "written",
    }


def test_a_rerun_logs_that_everything_is_there_and_copies_nothing(run, s3: S3Env, fake_hub: FakeHub) -> None:  # noqa: F811
    assert run()[0] == 0
    code, log = run()
    assert code == 0
    where = f"s3://{s3.bucket}/{revision_prefix('models/', REPO, fake_hub.repos[REPO].sha)}"
    assert [e for e, _ in log] == ["begin", "resolved", "plan", "up_to_date", "summary"]
    assert one(log, "up_to_date") == {
        "destination": where,
        "files": "2",
        "reason": "manifest and every object match",
    }
    summary = one(log, "summary")
    assert (summary["files"], summary["uploaded"], summary["skipped"], summary["bytes_uploaded"]) == (
        "2",
        "0",
        "2",
        "0",
    )
    assert summary["manifest"] == "unchanged" and summary["mb_per_s"] == "0.0"


def test_a_partial_rerun_names_each_file_it_skips(run, s3: S3Env, fake_hub: FakeHub) -> None:  # noqa: F811
    assert run()[0] == 0
    prefix = revision_prefix("models/", REPO, fake_hub.repos[REPO].sha)
    s3.client.delete_object(Bucket=s3.bucket, Key=prefix + "config.json")
    code, log = run()
    assert code == 0
    assert one(log, "skip") == {
        "path": BIG,
        "size": str(BIG_SIZE),
        "reason": "present with the same size, revision and blob",
    }
    assert [f["path"] for e, f in log if e == "start"] == ["config.json"]
    summary = one(log, "summary")
    assert (summary["uploaded"], summary["skipped"], summary["bytes_uploaded"]) == ("1", "1", "2")


def test_a_retry_says_which_attempt_how_long_and_why(run, fake_hub: FakeHub) -> None:  # noqa: F811
    fake_hub.fail("config.json", status=503, times=1)
    code, log = run("--include=config.json")
    assert code == 0
    retry = one(log, "retry")
    assert retry["path"] == "config.json" and retry["attempt"] == "2"
    assert 0 <= float(retry["wait_s"]) <= 0.1  # --retry-base-s 0.01, first retry
    assert retry["reason"] == "downloading config.json: the Hub answered HTTP 503"


def test_a_failed_run_logs_the_reason_it_reports(run, fake_hub: FakeHub, tmp_path: Path) -> None:  # noqa: F811
    fake_hub.fail("config.json", status=503, times=None)
    code, log = run("--include=config.json", "--max-attempts=2")
    assert code == 1
    reason = (
        f"staging {REPO}@main failed: 1 of 1 files failed; the others are staged and a rerun copies only what is "
        "missing. First: config.json: downloading config.json: the Hub answered HTTP 503 (gave up after 2 attempts)"
    )
    assert one(log, "file_failed") == {
        "reason": "config.json: downloading config.json: the Hub answered HTTP 503 (gave up after 2 attempts)"
    }
    assert one(log, "fail") == {"reason": reason}
    assert (tmp_path / "message").read_text() == reason + "\n"


@pytest.fixture
def unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port


@pytest.mark.usefixtures("unreachable_hub")
def test_a_hub_that_cannot_be_reached_is_retried_then_given_up(s3: S3Env, tmp_path: Path, capsys) -> None:  # noqa: F811
    from hfstage.worker import main

    client, calls = s3.worker_client()
    capsys.readouterr()
    code = main(
        [
            f"--repo-id={REPO}",
            f"--destination=s3://{s3.bucket}/models/",
            "--max-attempts=3",
            "--retry-base-s=0.01",
            f"--failure-file={tmp_path / 'message'}",
        ],
        s3_client=client,
    )
    log = events(capsys.readouterr().out)
    assert code == 1
    reason = f"resolving {REPO}@main: connection to the Hub failed (ConnectionRefusedError)"
    assert (tmp_path / "message").read_text() == f"staging {REPO}@main failed: {reason} (gave up after 3 attempts)\n"
    retries = [f for e, f in log if e == "retry"]
    assert [(f["what"], f["attempt"], f["reason"]) for f in retries] == [
        ("revision", "2", reason),
        ("revision", "3", reason),
    ]
    assert all(0 <= float(f["wait_s"]) <= 0.1 for f in retries)  # base 0.01 s, doubling
    assert not calls.calls  # nothing asked of S3 before the revision is known


def test_a_file_s3_cannot_hold_is_refused_before_anything_is_copied(run, fake_hub: FakeHub, s3: S3Env) -> None:  # noqa: F811
    from tests.fakes.fake_hub import Declared

    fake_hub.add_repo("Org/Huge", {"config.json": b"{}", "huge.bin": Declared(5 * 1024**4 * 10 + 1)})
    code, log = run("--repo-id=Org/Huge")
    assert code == 1
    (fail,) = [f for e, f in log if e == "fail"]
    assert fail["reason"] == (
        "staging Org/Huge@main failed: huge.bin cannot be one S3 object: "
        f"{5 * 1024**4 * 10 + 1} bytes do not fit in 10000 parts of at most 5 GiB"
    )
    assert s3.list_keys() == [] and s3.open_uploads() == []


def test_a_file_the_hub_refuses_stops_the_run_as_a_hub_error(run, fake_hub: FakeHub, s3: S3Env, tmp_path) -> None:  # noqa: F811
    """A 60 GiB file needs 7 MiB parts to stay within 10,000 (said once); the Hub then refuses it (a 404 for a
    listed file: not worth retrying): exit 3, nothing left open, no manifest."""
    from tests.fakes.fake_hub import Declared

    fake_hub.add_repo("Org/Big", {"config.json": b"{}", "big.bin": Declared(60 * 1024**3)})
    fake_hub.fail("big.bin", status=404, times=None)
    code, log = run("--repo-id=Org/Big", "--include=big.bin")
    assert code == 3
    assert one(log, "note") == {"reason": "a file needs 7 MiB parts to stay within 10,000 parts"}
    assert one(log, "start", path="big.bin")["parts"] == str(-(-60 * 1024**3 // (7 * MiB)))
    assert one(log, "fail")["reason"] == (
        "staging Org/Big@main failed: Org/Big was not found on " + fake_hub.endpoint + ": check the repository id"
    )
    assert not [e for e, _ in log if e == "retry"]
    assert s3.open_uploads() == [] and s3.list_keys() == []


# -- the log's pieces --------------------------------------------------------------------------------------


def test_values_are_written_so_a_line_splits_back_into_its_fields() -> None:
    import io

    from hfstage.events import EventLog

    out = io.StringIO()
    log = EventLog(out)
    log.emit("x", plain="a", space="a b", quote='say "hi"', eq="k=v", nl="a\nb", cr="a\rb", tab="a\tb", empty="")
    log.emit("y", ratio=2 / 3, big=1234.56, whole=3, none=None, flag=True)
    first, second = out.getvalue().splitlines()
    assert first.split(" ", 1)[1] == (
        'event=x plain=a space="a b" quote="say \\"hi\\"" eq="k=v" nl="a\\nb" cr="a\\rb" tab="a\\tb" empty=""'
    )
    assert second.split(" ", 1)[1] == "event=y ratio=0.7 big=1234.6 whole=3 flag=True"  # None: left out
    assert events(out.getvalue())[0][1]["quote"] == 'say "hi"'


def test_a_secret_is_redacted_wherever_it_appears_and_registered_once() -> None:
    import io

    from hfstage.events import EventLog

    out = io.StringIO()
    log = EventLog(out)
    log.add_secret(None)
    log.add_secret("")
    log.add_secret("hf_s")
    log.add_secret("hf_s")
    log.add_secret("other")
    assert log.redact("a hf_s b other hf_s") == "a *** b *** ***"
    assert log._secrets == ["hf_s", "other"]
    log.emit("x", url="https://h/?t=hf_s")
    assert out.getvalue().endswith(' event=x url="https://h/?t=***"\n')  # "=" in the URL: quoted


def test_progress_counts_files_bytes_and_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    from hfstage import events

    now = [100.0]
    monkeypatch.setattr(events.time, "monotonic", lambda: now[0])
    progress = events.Progress(3, 1000)
    assert progress.snapshot() == {
        "files_done": "0/3",
        "bytes_done": 0,
        "bytes_total": 1000,
        "pct": 0.0,
        "mb_per_s": 0.0,
        "eta_s": "unknown",
        "bytes_read": 0,
    }
    now[0] = 102.0
    progress.read(300)
    progress.read(50)
    progress.uploaded("a", 200)
    progress.uploaded("a", 100)
    progress.uploaded("b", 100)
    assert progress.snapshot() == {
        "files_done": "0/3",
        "bytes_done": 400,
        "bytes_total": 1000,
        "pct": 40.0,
        "mb_per_s": 200 / 1e6,
        "eta_s": 3,  # 600 bytes left at 200 bytes/s
        "bytes_read": 350,
    }
    progress.position("a", 0)  # a restart: its bytes in S3 count again from 0
    progress.finished("b", 250)
    progress.abandoned("c")
    snapshot = progress.snapshot()
    assert (snapshot["files_done"], snapshot["bytes_done"]) == ("1/3", 250)
    progress.position("a", 100)
    progress.abandoned("a")
    assert progress.snapshot()["bytes_done"] == 250
    progress.finished("a", 2000)  # more than the total: nothing negative
    snapshot = progress.snapshot()
    assert snapshot["eta_s"] == 0 and snapshot["pct"] == 225.0
    assert events.Progress(0, 0).snapshot()["pct"] == 100.0


def test_the_reporter_writes_progress_every_interval_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import time

    from hfstage.events import EventLog, Progress, ProgressReporter

    out = io.StringIO()
    with ProgressReporter(EventLog(out), Progress(1, 10), 0.05) as reporter:
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert 1 <= len(lines) <= 7 and all(" event=progress files_done=0/1 " in line for line in lines)
    assert not reporter._thread.is_alive()
    time.sleep(0.1)
    assert out.getvalue().splitlines() == lines  # nothing after the end
    quiet = io.StringIO()
    with ProgressReporter(EventLog(quiet), Progress(1, 10), 0) as reporter:
        time.sleep(0.05)
    assert quiet.getvalue() == "" and not reporter._thread.is_alive()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--include=*.gguf"], "include ['*.gguf'] and exclude []"),
        (["--exclude=*"], "include ['*'] and exclude ['*']"),  # no include: every file, then all excluded
    ],
)
def test_a_selection_of_no_file_says_what_was_asked(run, fake_hub: FakeHub, argv, said) -> None:  # noqa: F811
    code, log = run(*argv)
    assert code == 2
    sha = fake_hub.repos[REPO].sha
    assert one(log, "fail")["reason"] == f"staging {REPO}@main failed: no file of {REPO} at {sha} matches {said}"
    assert one(log, "resolved")["selected"] == "0" and one(log, "resolved")["files"] == "2"
