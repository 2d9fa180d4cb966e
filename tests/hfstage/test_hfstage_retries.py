"""A file's retry budget counts only failures with nothing new read; a cut read continues from its last byte;
a source that keeps failing stops at the retry window (issue 40, item 4).

The flaky-source runs use the worker in this process against the fake Hub and moto's S3 over HTTP, as in
test_hfstage_ranges.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hfstage.manifest import MANIFEST_NAME, revision_prefix
from hfstage.transfer import Retries
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import S3Env, fake_hub, s3, worker_argv  # noqa: F401

MiB = 1024 * 1024
REPO = "Org/Flaky"
BIG = "model.safetensors"
SMALL = "adapter.safetensors"
SIZE = 47 * MiB + 17  # ten parts: nine of 5 MiB, the last 2 MiB and 17 bytes
SMALL_SIZE = 4 * MiB  # below the part size: one PutObject


# -- the budget ------------------------------------------------------------------------------------------


def test_failures_with_nothing_new_give_up_at_max_attempts_and_not_one_before() -> None:
    retries = Retries(max_attempts=3, window_s=60)
    assert retries.failed(now=0) is None and retries.failed(now=1) is None
    assert retries.misses == 2
    assert retries.failed(now=2) == "gave up after 3 attempts"


def test_one_attempt_allowed_gives_up_at_the_first_failure_even_with_progress() -> None:
    retries = Retries(max_attempts=1, window_s=60)
    retries.reached(10)
    assert retries.failed(now=0) == "gave up after 1 attempts"


def test_new_bytes_start_the_count_again() -> None:
    retries = Retries(max_attempts=3, window_s=60)
    assert retries.failed(now=0) is None and retries.failed(now=1) is None  # two misses
    retries.reached(5 * MiB)  # the next attempt read further than any before
    assert retries.failed(now=2) is None and retries.misses == 1
    assert retries.failed(now=3) is None and retries.misses == 2
    assert retries.failed(now=4) == "gave up after 5 attempts, the last 3 without a new byte"


def test_bytes_read_again_are_not_new() -> None:
    retries = Retries(max_attempts=2, window_s=60)
    retries.reached(10 * MiB)
    assert retries.failed(now=0) is None  # progress: the count starts again at 1
    retries.reached(10 * MiB)  # a restarted attempt reached the same byte, no further
    retries.reached(MiB)
    assert retries.failed(now=1) == "gave up after 2 attempts"


def test_a_cut_read_that_had_received_bytes_counts_as_progress() -> None:
    retries = Retries(max_attempts=2, window_s=60)
    assert retries.failed(now=0) is None
    assert retries.failed(progressed=True, now=1) is None and retries.misses == 1
    assert retries.failed(now=2) == "gave up after 3 attempts, the last 2 without a new byte"


def test_the_window_stops_a_file_that_progresses_but_keeps_failing() -> None:
    retries = Retries(max_attempts=3, window_s=10)
    for now in (0.0, 4.0, 9.999):
        assert retries.failed(progressed=True, now=now) is None
    assert retries.failed(progressed=True, now=10.0) == (
        "gave up after 4 attempts in 10 s of failures (the retry window is 10 s)"
    )


def test_a_failure_a_whole_window_after_the_last_one_starts_a_new_window() -> None:
    retries = Retries(max_attempts=3, window_s=10)
    assert retries.failed(progressed=True, now=0) is None
    assert retries.failed(progressed=True, now=10.0) is None  # 10 s without a failure: a new window from 10
    assert retries.failed(progressed=True, now=19.9) is None
    assert retries.failed(progressed=True, now=20.0) is not None


def test_failures_within_the_window_join_it() -> None:
    retries = Retries(max_attempts=9, window_s=10)
    assert retries.failed(progressed=True, now=0) is None
    assert retries.failed(progressed=True, now=9.9) is None
    verdict = retries.failed(progressed=True, now=19.8)  # 9.9 s after the last one: the window from 0 goes on
    assert verdict == "gave up after 3 attempts in 20 s of failures (the retry window is 10 s)"


# -- against a flaky source ------------------------------------------------------------------------------


@pytest.fixture
def repo(fake_hub: FakeHub):  # noqa: F811
    files = {"config.json": b"{}", BIG: Synthetic(SIZE, seed=41), SMALL: Synthetic(SMALL_SIZE, seed=43)}
    return fake_hub.add_repo(REPO, files)


@pytest.fixture
def stage(s3: S3Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # noqa: F811
    from hfstage.worker import main

    def run(*extra: str):
        client, counter = s3.worker_client()
        capsys.readouterr()
        argv = worker_argv(REPO, s3.bucket, tmp_path / "message", tmp_path / "absent.json", *extra)
        code = main(argv, s3_client=client)
        message = (tmp_path / "message").read_text() if (tmp_path / "message").exists() else ""
        return code, capsys.readouterr().out, counter.calls, message

    return run


@pytest.mark.parametrize(
    ("ranges", "cut_every", "refuse_every"),
    [("8", 3, 7), ("8", 2, 7), ("1", 1, 4)],
    ids=[
        "parallel ranges: every 3rd GET cut, every 7th refused",
        "parallel ranges: every 2nd GET cut, every 7th refused",
        "one stream: every GET cut, every 4th refused",
    ],
)
def test_a_flaky_source_still_stages_every_byte(
    stage,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
    repo,
    ranges: str,
    cut_every: int,
    refuse_every: int,
) -> None:
    """The issue's flaky source (with one stream a file makes one GET unless cut, so there every GET is cut):
    each cut used to cost an attempt, and five cuts failed the file although every attempt had made progress;
    now a cut continues from its last byte and a refused request is retried."""
    for path in (BIG, SMALL):
        fake_hub.drop_after(path, after_bytes=MiB, times=None, every=cut_every)
        fake_hub.cdn_status(path, status=503, times=None, every=refuse_every)
    code, out, _, message = stage(f"--ranges-per-file={ranges}")
    assert code == 0, message or out
    prefix = revision_prefix("models/", REPO, repo.sha)
    for path in (BIG, SMALL):
        assert s3.body(prefix + path) == repo.files[path].content.to_bytes(), path
    assert prefix + MANIFEST_NAME in s3.list_keys() and s3.open_uploads() == []
    assert out.count("event=resume_read") >= 3 and " 503" in out
    # Each byte comes once, but for parts in flight when a 503 ended an attempt (at most the window of ranges)
    assert fake_hub.bytes_sent(BIG) <= SIZE + int(ranges) * 5 * MiB
    assert fake_hub.bytes_sent(SMALL) <= 2 * SMALL_SIZE


def test_a_source_that_drips_stops_at_the_retry_window(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    """Every GET ends after one byte: each read makes progress, so only the window stops it, in about its length,
    with no object, no manifest and no open upload left."""
    fake_hub.drop_after(SMALL, after_bytes=1, times=None)
    began = time.monotonic()
    code, _, _, message = stage(f"--include={SMALL}", "--retry-window-s=0.5")
    took = time.monotonic() - began
    assert code == 1
    assert "(the retry window is 0.5 s)" in message and f"{SMALL}: the download" in message, message
    assert took < 10  # the window, plus the run's start and end
    assert len(fake_hub.requests_for(SMALL)) > 5  # more reads than attempts: each cut made progress
    prefix = revision_prefix("models/", REPO, repo.sha)
    assert prefix + SMALL not in s3.list_keys() and prefix + MANIFEST_NAME not in s3.list_keys()
    assert s3.open_uploads() == []


def test_a_file_that_never_progresses_fails_after_max_attempts(stage, s3: S3Env, fake_hub: FakeHub, repo) -> None:  # noqa: F811
    fake_hub.drop_after(SMALL, after_bytes=0, times=None)  # headers, then nothing
    code, out, _, message = stage(f"--include={SMALL}", "--max-attempts=3")
    assert code == 1 and "(gave up after 3 attempts)" in message, message
    assert [r.status for r in fake_hub.requests_for(SMALL) if r.server == "cdn"] == [200] * 3  # one per attempt
    assert out.count("event=resume_read") == 0


@pytest.mark.parametrize(
    ("flag", "value", "problem"),
    [
        ("--retry-window-s", "0", "--retry-window-s must be positive"),
        ("--retry-window-s", "-1", "--retry-window-s must be positive"),
        ("--max-attempts", "0", "--max-attempts must be at least 1"),
    ],
)
def test_a_window_or_budget_that_allows_nothing_is_refused(flag: str, value: str, problem: str) -> None:
    from hfstage.worker import Failure, parse_args

    with pytest.raises(Failure, match=problem):
        parse_args(["--repo-id=Org/Name", "--destination=s3://bkt/p/", f"{flag}={value}"])


def test_the_smallest_window_and_budget_are_accepted() -> None:
    from hfstage.worker import parse_args

    args = parse_args(["--repo-id=Org/Name", "--destination=s3://bkt/p/", "--retry-window-s=0.001", "--max-attempts=1"])
    assert (args.retry_window_s, args.max_attempts) == (0.001, 1)


# -- reopening after a cut, on its own -------------------------------------------------------------------


def _stager(log, **settings):
    """A FileStager whose Hub is never asked (``reopen`` is given to it), with no wait between retries."""
    import io as io_module
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from hfstage.events import EventLog, Progress
    from hfstage.hub import HubClient
    from hfstage.transfer import BufferPool, FileStager, Settings

    config = Settings(**{"part_size": 5 * MiB, "parts_in_flight": 1, "retry_base_s": 0.0, **settings})
    return FileStager(
        hub=HubClient("http://127.0.0.1:9"),
        s3=None,
        bucket="bkt",
        prefix="models/",
        repo_id=REPO,
        sha="a" * 40,
        settings=config,
        pool=BufferPool(config.part_size, 1),
        uploads=ThreadPoolExecutor(1),
        progress=Progress(1, 0),
        log=EventLog(log if log is not None else io_module.StringIO()),
        stop=threading.Event(),
    )


def _file():
    from hfstage.hub import HubFile

    return HubFile("w.safetensors", 100, "b" * 40, "c" * 64)


def test_a_refused_reopening_is_retried_in_place_and_each_refusal_counted() -> None:
    import io as io_module

    from hfstage.hub import HubUnavailable
    from hfstage.transfer import TransientError

    log = io_module.StringIO()
    worker = _stager(log)
    answers: list[object] = [HubUnavailable("the Hub answered HTTP 503"), TransientError("reset"), "opened"]
    asked: list[int] = []

    def reopen(at: int) -> object:
        asked.append(at)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    retries = Retries(max_attempts=3, window_s=60)
    assert worker._reopen_after_cut(_file(), reopen, 40, retries, None) == "opened"
    assert asked == [40, 40, 40] and retries.attempts == 2 and retries.misses == 2
    lines = [line.split(" ", 2)[2] for line in log.getvalue().splitlines()]
    assert lines == [
        'path=w.safetensors attempt=2 wait_s=0.0 reason="the Hub answered HTTP 503"',
        "path=w.safetensors attempt=3 wait_s=0.0 reason=reset",
    ]


def test_reopening_stops_when_the_budget_is_spent_naming_the_last_refusal() -> None:
    from hfstage.transfer import FileFailed, TransientError

    worker = _stager(None)

    def reopen(at: int) -> object:
        raise TransientError("w.safetensors: range 40-99: connection refused")

    with pytest.raises(FileFailed) as failed:
        worker._reopen_after_cut(_file(), reopen, 40, Retries(max_attempts=2, window_s=60), None)
    assert str(failed.value) == "w.safetensors: range 40-99: connection refused (gave up after 2 attempts)"


def test_reopening_ends_at_once_when_the_run_stops_or_the_attempt_is_aborted() -> None:
    import threading

    from hfstage.transfer import Cancelled, TransientError

    def reopen(at: int) -> object:
        raise TransientError("refused")

    worker = _stager(None, retry_base_s=60.0)  # a long wait, cut short
    abort = threading.Event()
    threading.Timer(0.1, abort.set).start()
    began = time.monotonic()
    with pytest.raises(Cancelled):
        worker._reopen_after_cut(_file(), reopen, 0, Retries(max_attempts=5, window_s=600), abort)
    assert time.monotonic() - began < 5
    worker = _stager(None, retry_base_s=60.0)
    threading.Timer(0.1, worker.stop.set).start()
    began = time.monotonic()
    with pytest.raises(Cancelled):
        worker._reopen_after_cut(_file(), reopen, 0, Retries(max_attempts=5, window_s=600), None)
    assert time.monotonic() - began < 5
