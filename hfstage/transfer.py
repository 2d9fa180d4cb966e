"""Stream one Hub file into one S3 object, verifying its hash on the way, with bounded memory.

Memory: every byte in flight sits in a buffer taken from one ``BufferPool`` shared by all files, so a
run holds at most ``parts_in_flight`` part buffers whatever the number and size of files; a reader
waits for a free buffer before it reads more from the Hub.

Integrity: the content is hashed while it streams (SHA-256 for LFS files, the git blob SHA-1 for the
others) and its length checked. A multipart upload is completed only after the whole file hashed to
the expected value; on a mismatch the upload is aborted, so no object appears, and the file is
retried. Each part carries a CRC32 checksum that S3 checks on arrival. A transfer that breaks
midway resumes, in the same run, from the last part boundary before which every part is uploaded:
the hash state at each part boundary is kept, so the hash still covers every byte.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import random
import threading
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from hfstage.events import EventLog, Progress
from hfstage.hub import HubClient, HubError, HubFile, HubUnavailable, RangeIgnored
from hfstage.manifest import object_metadata

MiB = 1024 * 1024
MIN_PART = 5 * MiB
MAX_PART = 5 * 1024 * MiB
MAX_PARTS = 10_000
READ_CHUNK = 256 * 1024  # the stop flag is checked between reads: keep a read short on a slow link
CONTENT_TYPE = "application/octet-stream"
_TRANSIENT_S3_CODES = {
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "Throttling",
    "ThrottlingException",
    "BadDigest",
    "InvalidPart",
}


def part_size_for(size: int, preferred: int) -> int:
    """The part size for a ``size``-byte object: ``preferred`` within S3's 5 MiB-5 GiB, grown (in whole MiB)
    so that the object needs at most 10,000 parts. ValueError for objects S3 cannot hold in 10,000 parts."""
    part = min(max(int(preferred), MIN_PART), MAX_PART)
    if size > part * MAX_PARTS:
        needed = -(-size // MAX_PARTS)
        part = -(-needed // MiB) * MiB
        if part > MAX_PART:
            raise ValueError(f"{size} bytes do not fit in {MAX_PARTS} parts of at most 5 GiB")
    return part


class Cancelled(Exception):
    """The run is stopping (a signal, or a permanent error elsewhere)."""


class IntegrityError(Exception):
    """The bytes did not hash to the expected value, or their count differs: restart the file."""


class TransientError(Exception):
    """A broken connection or a retryable error: resume the file from its last complete part."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(Exception):
    """An error that retrying will not fix (access denied, no such bucket): stop the run."""


class FileFailed(Exception):
    """A file failed every attempt."""


class BufferPool:
    """At most ``count`` buffers of ``buffer_size`` bytes in use at once, shared by every file of a run.

    ``acquire(n)`` blocks until a slot is free and returns a bytearray of exactly ``n`` bytes: a reused
    one when ``n == buffer_size``, a new one otherwise (a file's last part, a small file). A request
    larger than ``buffer_size`` (a part grown for a huge file) takes as many slots as it covers.
    """

    def __init__(self, buffer_size: int, count: int) -> None:
        self.buffer_size = buffer_size
        self.count = max(1, count)
        self._in_use = 0
        self._free: list[bytearray] = []
        self._cond = threading.Condition()
        self.peak_in_use = 0

    def _slots(self, n: int) -> int:
        return min(self.count, max(1, -(-n // self.buffer_size)))

    def acquire(self, n: int, stop: threading.Event | None = None) -> bytearray:
        slots = self._slots(n)
        with self._cond:
            while self._in_use + slots > self.count:
                if stop is not None and stop.is_set():
                    raise Cancelled()
                self._cond.wait(0.25)
            self._in_use += slots
            self.peak_in_use = max(self.peak_in_use, self._in_use)
            reused = self._free.pop() if n == self.buffer_size and self._free else None
            # Cached buffers count against the bound too: drop them rather than hold more than count in memory.
            while self._free and len(self._free) + self._in_use > self.count:
                self._free.pop()
        return reused if reused is not None else bytearray(n)

    def release(self, buffer: bytearray) -> None:
        with self._cond:
            self._in_use -= self._slots(len(buffer))
            if len(buffer) == self.buffer_size and len(self._free) + self._in_use < self.count:
                self._free.append(buffer)
            self._cond.notify_all()


class Verifier:
    """The running hash of a file's content: SHA-256 for LFS files, else the git blob SHA-1."""

    def __init__(self, file: HubFile, state: Any = None) -> None:
        self.file = file
        if state is not None:
            self._hash = state
        elif file.sha256:
            self._hash = hashlib.sha256()
        else:
            self._hash = hashlib.sha1(b"blob %d\0" % file.size, usedforsecurity=False)

    def update(self, data: Any) -> None:
        self._hash.update(data)

    def copy(self) -> Verifier:
        return Verifier(self.file, self._hash.copy())

    @property
    def expected(self) -> str:
        return self.file.sha256 or self.file.blob_id

    @property
    def algorithm(self) -> str:
        return "sha256" if self.file.sha256 else "git-sha1"

    def check(self) -> None:
        actual = self._hash.hexdigest()
        if actual != self.expected.lower():
            raise IntegrityError(
                f"{self.file.path}: content {self.algorithm} {actual} does not match the Hub's {self.expected}"
            )


def crc32_b64(data: Any) -> str:
    return base64.b64encode((zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode()


def describe_client_error(error: Exception, action: str) -> str:
    if isinstance(error, ClientError):
        err = error.response.get("Error", {})
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = err.get("Code") or status or "error"
        return f"{action}: {code}" + (f" (HTTP {status})" if status and str(status) != str(code) else "")
    return f"{action}: {type(error).__name__}"


def s3_error(error: Exception, action: str) -> Exception:
    """A botocore error as TransientError (worth retrying) or PermanentError."""
    message = describe_client_error(error, action)
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code == "NoSuchUpload":
            return IntegrityError(message + " (the multipart upload was aborted elsewhere)")
        if status >= 500 or status == 429 or code in _TRANSIENT_S3_CODES:
            return TransientError(message)
        return PermanentError(message)
    return TransientError(message)  # connection errors, timeouts


def backoff_delay(attempt: int, base: float, cap: float, retry_after: float | None = None) -> float:
    """Exponential backoff with jitter for the retry after failed attempt number ``attempt`` (1-based)."""
    ceiling = min(cap, base * (2 ** (attempt - 1)))
    delay = random.uniform(ceiling / 2, ceiling)
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap))
    return delay


@dataclass
class Settings:
    part_size: int = 64 * MiB
    parts_in_flight: int = 8
    files_in_flight: int = 4
    max_attempts: int = 5
    retry_base_s: float = 1.0
    retry_cap_s: float = 30.0


@dataclass
class _Upload:
    """What survives between attempts of one multipart file: the upload, its parts, hash states at boundaries."""

    upload_id: str | None = None
    parts: dict[int, dict[str, Any]] = field(default_factory=dict)
    hashes: dict[int, Verifier] = field(default_factory=dict)  # part k -> hash of bytes before part k+1
    completed: bool = False
    failed: BaseException | None = None  # set by a part upload that failed: stop reading


class FileStager:
    """Copies files of one revision from the Hub to ``s3://bucket/prefix/``; one instance serves every file."""

    def __init__(
        self,
        *,
        hub: HubClient,
        s3: Any,
        bucket: str,
        prefix: str,
        repo_id: str,
        sha: str,
        settings: Settings,
        pool: BufferPool,
        uploads: ThreadPoolExecutor,
        progress: Progress,
        log: EventLog,
        stop: threading.Event,
    ) -> None:
        self.hub = hub
        self.s3 = s3
        self.bucket = bucket
        self.prefix = prefix
        self.repo_id = repo_id
        self.sha = sha
        self.settings = settings
        self.pool = pool
        self.uploads = uploads
        self.progress = progress
        self.log = log
        self.stop = stop

    # -- one file, all attempts --------------------------------------------------------------------------

    def stage(self, file: HubFile) -> None:
        """Upload ``file`` verified, or raise FileFailed / PermanentError / HubError / Cancelled."""
        key = self.prefix + file.path
        part_size = part_size_for(file.size, self.settings.part_size)
        multipart = file.size > part_size
        state = _Upload()
        started = time.monotonic()
        self.log.emit(
            "start",
            path=file.path,
            size=file.size,
            parts=-(-file.size // part_size) if multipart else 1,
            hash="sha256" if file.sha256 else "git-sha1",
        )
        try:
            for attempt in range(1, self.settings.max_attempts + 1):
                if self.stop.is_set():
                    raise Cancelled()
                try:
                    if multipart:
                        self._multipart_attempt(file, key, part_size, state)
                    else:
                        self._single_attempt(file, key)
                    break
                except IntegrityError as error:
                    reason, retry_after = str(error), None
                    self._abort(key, state)
                    state = _Upload()
                    self.progress.position(file.path, 0)
                except RangeIgnored as error:
                    reason, retry_after = str(error), None
                    state.parts.clear()
                    state.hashes = {0: Verifier(file)}
                    self.progress.position(file.path, 0)
                except (TransientError, HubUnavailable) as error:
                    reason, retry_after = str(error), error.retry_after
                if attempt == self.settings.max_attempts:
                    raise FileFailed(f"{file.path}: {reason} (gave up after {attempt} attempts)")
                delay = backoff_delay(attempt, self.settings.retry_base_s, self.settings.retry_cap_s, retry_after)
                self.log.emit("retry", path=file.path, attempt=attempt + 1, wait_s=delay, reason=reason)
                if self.stop.wait(delay):
                    raise Cancelled()
        except BaseException:
            self.progress.abandoned(file.path)
            raise
        finally:
            if not state.completed:
                self._abort(key, state)
        seconds = time.monotonic() - started
        self.progress.finished(file.path, file.size)
        self.log.emit("done", path=file.path, size=file.size, seconds=seconds, mb_per_s=file.size / 1e6 / seconds)

    # -- small files: read, verify, then one PutObject ---------------------------------------------------

    def _single_attempt(self, file: HubFile, key: str) -> None:
        buffer = self.pool.acquire(file.size, self.stop)
        try:
            verifier = Verifier(file)
            self.progress.position(file.path, 0)
            response = self.hub.open_file(self.repo_id, self.sha, file.path)
            try:
                self._check_length(response, file, 0)
                self._fill(response, buffer, 0, file.size, verifier, file)
                self._expect_end(response, file)
            finally:
                response.close()
            verifier.check()
            try:
                self.s3.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=buffer,
                    ContentType=CONTENT_TYPE,
                    Metadata=object_metadata(file, self.repo_id, self.sha),
                    ChecksumAlgorithm="CRC32",
                    ChecksumCRC32=crc32_b64(buffer),
                )
            except (ClientError, BotoCoreError) as error:
                raise s3_error(error, f"PutObject s3://{self.bucket}/{key}") from None
            self.progress.uploaded(file.path, file.size)
        finally:
            self.pool.release(buffer)

    # -- large files: stream parts into a multipart upload -----------------------------------------------

    def _multipart_attempt(self, file: HubFile, key: str, part_size: int, state: _Upload) -> None:
        if state.upload_id is None:
            try:
                created = self.s3.create_multipart_upload(
                    Bucket=self.bucket,
                    Key=key,
                    ContentType=CONTENT_TYPE,
                    Metadata=object_metadata(file, self.repo_id, self.sha),
                    ChecksumAlgorithm="CRC32",
                )
            except (ClientError, BotoCoreError) as error:
                raise s3_error(error, f"CreateMultipartUpload s3://{self.bucket}/{key}") from None
            state.upload_id = created["UploadId"]
            state.parts.clear()
            state.hashes = {0: Verifier(file)}
        total_parts = -(-file.size // part_size)
        done = 0  # leading parts uploaded: the attempt resumes after them
        while done < total_parts and done + 1 in state.parts and done + 1 in state.hashes:
            done += 1
        verifier = state.hashes[done].copy()
        offset = done * part_size
        self.progress.position(file.path, offset)
        if offset:
            self.log.emit("resume", path=file.path, offset=offset, part=done + 1)
        if done < total_parts:  # else every part is in S3 already: an earlier completion failed
            self._stream_parts(file, key, part_size, state, verifier, done + 1)
        verifier.check()
        try:
            self.s3.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=state.upload_id,
                MultipartUpload={"Parts": [state.parts[n] for n in range(1, total_parts + 1)]},
            )
        except (ClientError, BotoCoreError) as error:
            raise s3_error(error, f"CompleteMultipartUpload s3://{self.bucket}/{key}") from None
        state.completed = True

    def _stream_parts(
        self, file: HubFile, key: str, part_size: int, state: _Upload, verifier: Verifier, first_part: int
    ) -> None:
        """Read the file from ``first_part`` on, hashing it, and upload each part as soon as it is read."""
        offset = (first_part - 1) * part_size
        state.failed = None
        futures: dict[int, Future[dict[str, Any]]] = {}
        response = self.hub.open_file(self.repo_id, self.sha, file.path, start=offset)
        try:
            self._check_length(response, file, offset)
            part_number = first_part
            while offset < file.size:
                n = min(part_size, file.size - offset)
                buffer = self.pool.acquire(n, self.stop)
                if state.failed is not None:  # no use reading on: this attempt fails anyway
                    self.pool.release(buffer)
                    break
                try:
                    self._fill(response, buffer, offset, n, verifier, file)
                except BaseException:
                    self.pool.release(buffer)
                    raise
                offset += n
                state.hashes[part_number] = verifier.copy()
                futures[part_number] = self.uploads.submit(self._upload_part, key, state, part_number, buffer)
                part_number += 1
            else:
                self._expect_end(response, file)
        finally:
            response.close()
            self._collect(futures, state)
        errors = [f.exception() for f in futures.values() if f.exception() is not None]
        if errors:
            raise errors[0]

    def _upload_part(self, key: str, state: _Upload, part_number: int, buffer: bytearray) -> dict[str, Any]:
        upload_id = state.upload_id
        try:
            checksum = crc32_b64(buffer)
            answer = self.s3.upload_part(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=part_number,
                Body=buffer,
                ChecksumAlgorithm="CRC32",
                ChecksumCRC32=checksum,
            )
            self.progress.uploaded(key[len(self.prefix) :], len(buffer))
            return {"PartNumber": part_number, "ETag": answer["ETag"], "ChecksumCRC32": checksum}
        except (ClientError, BotoCoreError) as error:
            state.failed = s3_error(error, f"UploadPart {part_number} of s3://{self.bucket}/{key}")
            raise state.failed from None
        except BaseException as error:
            state.failed = error
            raise
        finally:  # after state.failed is set, so that the reader sees the failure when it gets this buffer
            self.pool.release(buffer)

    @staticmethod
    def _collect(futures: dict[int, Future[dict[str, Any]]], state: _Upload) -> None:
        """Wait for every part in flight; keep those that arrived (a resume starts after them)."""
        wait(futures.values())
        for number, future in futures.items():
            if future.exception() is None:
                state.parts[number] = future.result()
            else:
                state.parts.pop(number, None)

    def _abort(self, key: str, state: _Upload) -> None:
        if state.upload_id is None or state.completed:
            return
        try:
            self.s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=state.upload_id)
        except (ClientError, BotoCoreError) as error:
            self.log.emit("abort_failed", key=key, reason=describe_client_error(error, "AbortMultipartUpload"))
        state.upload_id = None

    # -- reading -----------------------------------------------------------------------------------------

    def _check_length(self, response: Any, file: HubFile, offset: int) -> None:
        header = response.headers.get("Content-Length") if getattr(response, "headers", None) else None
        if header is not None and header.isdigit() and int(header) != file.size - offset:
            raise IntegrityError(
                f"{file.path}: the Hub sends {int(header) + offset} bytes, the revision lists {file.size}"
            )

    def _fill(self, response: Any, buffer: bytearray, offset: int, n: int, verifier: Verifier, file: HubFile) -> None:
        """Read exactly ``n`` bytes into ``buffer``, hashing them; TransientError when the stream ends early."""
        view = memoryview(buffer)
        got = 0
        try:
            while got < n:
                if self.stop.is_set():
                    raise Cancelled()
                count = response.readinto(view[got : min(n, got + READ_CHUNK)])
                if not count:
                    raise TransientError(f"{file.path}: the download stopped after {offset + got} of {file.size} bytes")
                verifier.update(view[got : got + count])
                got += count
                self.progress.read(count)
        except (OSError, http.client.HTTPException) as error:
            raise TransientError(
                f"{file.path}: the download broke after {offset + got} of {file.size} bytes ({type(error).__name__})"
            ) from None
        finally:
            view.release()

    @staticmethod
    def _expect_end(response: Any, file: HubFile) -> None:
        try:
            extra = response.read(1)
        except (OSError, http.client.HTTPException):
            return
        if extra:
            raise IntegrityError(f"{file.path}: the Hub sends more than the {file.size} bytes the revision lists")


def abort_stale_uploads(s3: Any, bucket: str, prefix: str, keys: set[str], log: EventLog) -> int:
    """Abort multipart uploads left open under ``prefix`` for ``keys`` (a killed earlier run); how many."""
    aborted = 0
    try:
        for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix):
            for upload in page.get("Uploads") or []:
                if upload.get("Key") in keys:
                    s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                    log.emit("abort_stale", key=upload["Key"])
                    aborted += 1
    except (ClientError, BotoCoreError) as error:
        log.emit("warning", reason=describe_client_error(error, "cleaning up open multipart uploads"))
    return aborted


__all__ = [
    "MAX_PART",
    "MAX_PARTS",
    "MIN_PART",
    "BufferPool",
    "Cancelled",
    "FileFailed",
    "FileStager",
    "HubError",
    "IntegrityError",
    "PermanentError",
    "Settings",
    "TransientError",
    "abort_stale_uploads",
    "part_size_for",
]
