"""What every mode of the worker shares: exit statuses, the ``Failure`` that carries one, the argument parser and
the checks of the flags all modes take, the guarded run that turns every ending into a status and a failure
file, and the S3 client.

The bottom of the worker: the Hub run (hfstage.worker), the archive run (hfstage.tarball) and packing
(hfstage.pack) import from here, never from each other's internals.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import safejson
from hfstage.events import EventLog
from hfstage.transfer import MAX_PART, MIN_PART, Cancelled, MiB, Settings, describe_client_error
from hfstage.uris import parse_destination

EXIT_OK = 0
EXIT_TRANSFER = 1
EXIT_USAGE = 2
EXIT_HUB = 3
DEFAULT_FAILURE_FILE = "/opt/ml/output/message"
FAILURE_FILE_ENV = "HFSTAGE_FAILURE_FILE"
FAILURE_FILE_HELP = f"where the failure reason goes (default ${FAILURE_FILE_ENV} or {DEFAULT_FAILURE_FILE})"
MESSAGE_LIMIT = 1000  # bytes: SageMaker's FailureReason and CloudFormation reasons are short


class Failure(Exception):
    """Ends the run with ``code`` and a one-line, user-facing ``message``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose refusal is a ``Failure`` (exit 2, reported like any other), not a bare exit."""

    def error(self, message: str) -> NoReturn:
        raise Failure(EXIT_USAGE, f"bad arguments: {message}")


def patterns(values: list[str] | None) -> list[str]:
    """Repeated ``--include x`` values, any of which may be a JSON array of patterns."""
    found: list[str] = []
    for value in values or []:
        text = value.strip()
        if text.startswith("["):
            try:
                items = safejson.loads(text, source="--include/--exclude")
            except ValueError:
                raise Failure(EXIT_USAGE, f"bad arguments: {text[:200]!r} is not a JSON array of patterns") from None
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise Failure(EXIT_USAGE, f"bad arguments: {text[:200]!r} is not a JSON array of strings")
            found.extend(items)
        elif text:
            found.append(text)
    return found


def parse_arguments(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    own_problems: Callable[[argparse.Namespace], list[str]],
    *,
    counts: Sequence[str],
    durations: Sequence[str],
    nonzero: Sequence[str] = (),
) -> argparse.Namespace:
    """``argv`` parsed and checked: the mode's ``own_problems`` first, then what every mode takes (--destination,
    read into ``args.bucket`` and ``args.prefix``; --part-size-mib; --include and --exclude, read as patterns),
    the ``counts`` (at least 1) and the ``durations`` (not negative; not zero either when in ``nonzero``).
    One Failure(EXIT_USAGE) names every problem."""
    args = parser.parse_args(argv)
    problems = own_problems(args)
    try:
        args.bucket, args.prefix = parse_destination(args.destination)
    except ValueError as error:
        problems.append(f"--destination {error}")
    if not MIN_PART <= args.part_size_mib * MiB <= MAX_PART:
        problems.append(f"--part-size-mib {args.part_size_mib} is outside 5-5120")
    for name in counts:
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1")
    for name in durations:
        if getattr(args, name) < 0 or (name in nonzero and getattr(args, name) == 0):
            problems.append(f"--{name.replace('_', '-')} must be positive")
    args.include = patterns(args.include)
    args.exclude = patterns(args.exclude)
    if problems:
        raise Failure(EXIT_USAGE, "bad arguments: " + "; ".join(problems))
    return args


def make_s3_client(settings: Settings, session: Any = None) -> Any:
    """An S3 client (AWS_ENDPOINT_URL_S3 and the usual AWS_* settings apply) with a connection per thread."""
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": "standard", "max_attempts": 5},
        max_pool_connections=settings.parts_in_flight + settings.files_in_flight + 16,
        connect_timeout=10,
        read_timeout=120,
        tcp_keepalive=True,
        # Every part and object carries our own CRC32 checksum, which S3 verifies; SigV4 signing of the
        # body would hash each byte once more (botocore skips it on HTTPS already; this skips it on HTTP).
        s3={"payload_signing_enabled": False},
    )
    return (session or boto3.session.Session()).client("s3", config=config)


def call_s3(action: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; an S3 error (or any unexpected one) becomes a Failure that names ``action``."""
    try:
        return fn(*args, **kwargs)
    except (Failure, Cancelled, ValueError):
        raise
    except Exception as error:  # botocore's ClientError, connection errors, missing credentials, ...
        raise Failure(EXIT_TRANSFER, describe_client_error(error, action)) from None


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = " ".join(text.split())
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


def report_failure(message: str, failure_file: str, log: EventLog) -> None:
    message = one_line(log.redact(message))
    log.emit("fail", reason=message)
    print(message, file=sys.stderr, flush=True)
    # A Processing container need not have /opt/ml/output; SageMaker reads the file into ExitMessage.
    try:
        os.makedirs(os.path.dirname(os.path.abspath(failure_file)), exist_ok=True)
        with open(failure_file, "w", encoding="utf-8") as handle:
            handle.write(message + "\n")
    except OSError as error:
        log.emit("warning", reason=f"cannot write {failure_file}: {type(error).__name__}")


class Guard:
    """What a worker mode's body shares with ``guarded_run``: the log, the stop event set by SIGTERM/SIGINT, the
    failure file (the body may override it from its arguments) and the label failures are reported under."""

    def __init__(self, label: str) -> None:
        self.log = EventLog()
        self.stop = threading.Event()
        self.signals: list[str] = []
        self.failure_file = os.environ.get(FAILURE_FILE_ENV) or DEFAULT_FAILURE_FILE
        self.label = label
        self.started = time.monotonic()

    def on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signal.Signals(signum).name)
        self.stop.set()

    def done(self, summary: dict[str, Any]) -> int:
        """Log the run's summary (with its time and throughput) and return EXIT_OK."""
        seconds = time.monotonic() - self.started
        mb_per_s = summary["bytes_uploaded"] / 1e6 / max(seconds, 1e-9)
        self.log.emit("summary", status="ok", seconds=seconds, mb_per_s=mb_per_s, **summary)
        return EXIT_OK


# What an expected exception means for the run: the failure's text (after "<label> failed: ") and exit status.
Explain = Callable[[BaseException, Guard], tuple[str, int]]


def guarded_run(label: str, body: Callable[[Guard], int], explain: dict[type[BaseException], Explain]) -> int:
    """Run a worker mode's ``body`` with SIGTERM/SIGINT setting its stop event (restored after), and turn every
    way it can end into an exit status: ``--help``, a ``Failure``, the exceptions ``explain`` knows, anything else
    as an internal error. Each failure goes to the log, stderr and the failure file in one redacted line."""
    guard = Guard(label)
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, guard.on_signal)
    try:
        return body(guard)
    except SystemExit as exit_:  # --help
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else EXIT_USAGE
    except Failure as failure:
        report_failure(f"{guard.label} failed: {failure.message}", guard.failure_file, guard.log)
        return failure.code
    except Exception as error:
        known = next((how for kind, how in explain.items() if isinstance(error, kind)), None)
        why, code = known(error, guard) if known else (f"internal error {type(error).__name__}: {error}", EXIT_TRANSFER)
        report_failure(f"{guard.label} failed: {why}", guard.failure_file, guard.log)
        return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
