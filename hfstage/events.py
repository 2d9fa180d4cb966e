"""Structured log lines (``key=value``) with secrets redacted, and the periodic progress report."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

REDACTED = "***"


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        value = f"{value:.1f}"
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\r\t'):
        return json.dumps(text)
    return text


class EventLog:
    """Writes ``ts=... event=NAME key=value ...`` lines; any registered secret is replaced by ``***``."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._secrets: list[str] = []
        self._lock = threading.Lock()

    def add_secret(self, secret: str | None) -> None:
        if secret and secret not in self._secrets:
            self._secrets.append(secret)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def emit(self, event: str, **fields: Any) -> None:
        parts = [f"ts={time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}", f"event={event}"]
        parts += [f"{k}={_format_value(v)}" for k, v in fields.items() if v is not None]
        line = self.redact(" ".join(parts))
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(line + "\n")
            stream.flush()


class Progress:
    """Thread-safe counters of one run: files done, bytes uploaded (done), bytes read from the Hub."""

    def __init__(self, files_total: int, bytes_total: int) -> None:
        self.files_total = files_total
        self.bytes_total = bytes_total
        self.files_done = 0
        self.bytes_read = 0  # every byte read from the Hub, retries included
        self._bytes_completed = 0  # bytes of finished files
        self._uploaded: dict[str, int] = {}  # bytes already in S3 of each file in flight
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def read(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n

    def uploaded(self, path: str, n: int) -> None:
        with self._lock:
            self._uploaded[path] = self._uploaded.get(path, 0) + n

    def position(self, path: str, offset: int) -> None:
        """The file's bytes in S3 are (again) ``offset``: after a restart (0) or before a resume."""
        with self._lock:
            self._uploaded[path] = offset

    def finished(self, path: str, size: int) -> None:
        with self._lock:
            self._uploaded.pop(path, None)
            self.files_done += 1
            self._bytes_completed += size

    def abandoned(self, path: str) -> None:
        with self._lock:
            self._uploaded.pop(path, None)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            done = self._bytes_completed + sum(self._uploaded.values())
            elapsed = max(time.monotonic() - self.started, 1e-9)
            rate = done / elapsed
            remaining = max(self.bytes_total - done, 0)
            return {
                "files_done": f"{self.files_done}/{self.files_total}",
                "bytes_done": done,
                "bytes_total": self.bytes_total,
                "pct": 100.0 * done / self.bytes_total if self.bytes_total else 100.0,
                "mb_per_s": rate / 1e6,
                "eta_s": int(remaining / rate) if rate > 0 else "unknown",
                "bytes_read": self.bytes_read,
            }


class ProgressReporter:
    """Emits ``event=progress`` every ``interval_s`` seconds until stopped (not at all when interval_s <= 0)."""

    def __init__(self, log: EventLog, progress: Progress, interval_s: float) -> None:
        self._log = log
        self._progress = progress
        self._interval = interval_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)

    def __enter__(self) -> ProgressReporter:
        if self._interval > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._interval):
            self._log.emit("progress", **self._progress.snapshot())
