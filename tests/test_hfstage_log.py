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
from tests.fakes.fixtures import S3Env, boto_session, fake_hub, s3  # noqa: F401

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
        argv = [
            f"--repo-id={REPO}",
            f"--destination=s3://{s3.bucket}/models/",
            "--part-size-mib=5",
            "--progress-interval-s=0",
            "--retry-base-s=0.01",
            f"--failure-file={tmp_path / 'message'}",
            f"--resource-config={tmp_path / 'absent.json'}",
            *extra,
        ]
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
        "start",
        "start",
        "done",
        "done",
        "progress",
        "manifest",
        "summary",
    ]
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
    # Largest first; each with its size, part count and the hash it is checked against.
    assert [f for e, f in log if e == "start"] == [
        {"path": BIG, "size": str(BIG_SIZE), "parts": "2", "hash": "sha256"},
        {"path": "config.json", "size": "2", "parts": "1", "hash": "git-sha1"},
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
