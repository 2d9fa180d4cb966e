"""Stream one Hub file into one S3 object, verifying its hash on the way, with bounded memory.

Memory: every byte in flight sits in a buffer taken from one ``BufferPool`` shared by all files, so a
run holds at most ``parts_in_flight`` part buffers whatever the number and size of files; a reader
waits for a free buffer before it reads more from the Hub.

Integrity: the content is hashed while it streams (SHA-256 for LFS files, the git blob SHA-1 for the
others) and its length checked. A multipart upload is completed only after the whole file hashed to
the expected value; on a mismatch the upload is aborted, so no object appears, and the file is
retried. Each part carries a checksum that S3 checks on arrival, and the completion the whole object's
(``hfstage.checksum``: CRC64NVME, or CRC32 without awscrt), computed as the bytes arrive. A read that is cut midway
continues from its last byte over a new request (the bytes before stay in the buffer and in the hash); a
transfer that fails otherwise resumes, in the same run, from the last part boundary before which every
part is uploaded: the hash state at each part boundary is kept, so the hash still covers every byte.
A failure counts against a file's attempts only when nothing new of the file was read since the one before
(``Retries``); a file that keeps failing for ``retry_window_s`` stops, progress or not.

Speed: a multipart file is fetched as several part-sized byte ranges at once (HTTP Range on the URL the
Hub redirects to, RFC 9110 section 14), each uploaded as it arrives; the hash is fed strictly in part
order from the parts waiting in the buffer pool (the reorder window), so memory stays part size x parts
in flight. A server that ignores Range (a 200 with the whole file) gets one stream, as before.

Resume across runs: after each uploaded part the hash state at the highest boundary below which every
part is in S3 is saved as a checkpoint (see ``hashstate`` and ``checkpoint_key``). A later run that
finds the file's open upload and its checkpoint lists the uploaded parts (ListParts), restores the hash
and fetches only the rest; nothing completes until the whole file hashes to the Hub's value.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from hfstage import hashstate
from hfstage.checksum import FULL_OBJECT, Algorithm, Running
from hfstage.checksum import best as best_checksum
from hfstage.events import EventLog, Progress
from hfstage.hub import HubClient, HubError, HubFile, HubUnavailable, RangeIgnored, UnsafeRedirect
from hfstage.manifest import object_metadata

MiB = 1024 * 1024
MIN_PART = 5 * MiB
MAX_PART = 5 * 1024 * MiB
MAX_PARTS = 10_000
READ_CHUNK = 1024 * 1024  # the stop flag is checked between reads: keep a read short on a slow link
# Checkpoints of a file's hash state: keys of multipart uploads that are never completed, so they are no
# objects (nothing an endpoint downloads or a listing shows); the bucket's abort-incomplete rule and the
# worker abort them. Their key carries the state: ListMultipartUploads gives keys, not metadata.
CHECKPOINT_DIR = ".hfstage-resume/"
MAX_KEY_BYTES = 1024  # S3 object key names are at most 1,024 bytes of UTF-8 (S3 User Guide, object-keys.html)
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


def range_plan(size: int, part_size: int, first_part: int, range_size: int) -> list[tuple[int, int, int]]:
    """The byte ranges that fetch parts ``first_part``.. of a ``size``-byte file, in file order: (part, offset
    in the part, length). Each part is cut into equal ranges of at most ``range_size`` bytes (at least one)."""
    plan = []
    total_parts = -(-size // part_size)
    for part in range(first_part, total_parts + 1):
        n = min(part_size, size - (part - 1) * part_size)
        count = max(1, -(-n // max(1, range_size)))
        step = -(-n // count)
        plan += [(part, within, min(step, n - within)) for within in range(0, n, step)]
    return plan


class Cancelled(Exception):
    """The run is stopping (a signal, or a permanent error elsewhere)."""


class IntegrityError(Exception):
    """The bytes did not hash to the expected value, or their count differs: restart the file."""


class TransientError(Exception):
    """A broken connection or a retryable error: resume the file from its last complete part."""

    retry_after: float | None = None  # no S3 error path sets one; only the Hub's HubUnavailable carries Retry-After


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

    def acquire(self, n: int, stop: threading.Event | None = None, block: bool = True) -> bytearray | None:
        """A buffer of ``n`` bytes; None at once when ``block`` is False and no slot is free."""
        slots = self._slots(n)
        with self._cond:
            while self._in_use + slots > self.count:
                if not block:
                    return None
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

    def __init__(self, file: HubFile, state: Any = None, resumable: bool = False) -> None:
        self.file = file
        if state is not None:
            self._hash = state
        elif resumable and hashstate.available():
            self._hash = hashstate.ResumableHash(self.algorithm_name(file))
            if not file.sha256:
                self._hash.update(b"blob %d\0" % file.size)
        elif file.sha256:
            self._hash = hashlib.sha256()
        else:
            self._hash = hashlib.sha1(b"blob %d\0" % file.size, usedforsecurity=False)

    @staticmethod
    def algorithm_name(file: HubFile) -> str:
        return "sha256" if file.sha256 else "sha1"

    @classmethod
    def restore(cls, file: HubFile, state: bytes) -> Verifier:
        """The hash state saved by ``saved_state``; ValueError when it cannot be restored here."""
        if not hashstate.available():
            raise ValueError("resumable hashing is not available")
        return cls(file, hashstate.ResumableHash(cls.algorithm_name(file), state))

    def saved_state(self) -> bytes | None:
        return self._hash.state() if isinstance(self._hash, hashstate.ResumableHash) else None

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


class StreamedObject:
    """One S3 object written from a stream of unknown chunking (a tar being packed, a tar member being unpacked): a
    file-like sink whose bytes fill one part buffer of ``part_size``, each full buffer one UploadPart with its
    checksum (S3 verifies it, ``checksum``). ``finish`` writes one PutObject when no part filled, else the last part
    (S3's last part may be under 5 MiB, S3 User Guide qfacts.html) and Complete with the whole object's checksum,
    combined from the parts'; ``abort`` drops an unfinished upload. ``sha256`` and ``size`` cover every byte
    written. ``call(action, fn, **kwargs)`` makes each S3 call (the caller's error wording); ``stop`` set makes the
    next write raise Cancelled.

    Each byte is copied once, from ``write``'s argument into the part buffer, and hashed and checksummed there while
    it is in the CPU's cache; the buffer is sent as it is and refilled in place (it grows to ``part_size`` only for
    an object that reaches it)."""

    def __init__(
        self,
        s3: Any,
        bucket: str,
        key: str,
        part_size: int,
        metadata: dict[str, str],
        content_type: str,
        *,
        stop: Any = None,
        call: Any = None,
        checksum: Algorithm | None = None,
    ) -> None:
        self.s3, self.bucket, self.key, self.part_size = s3, bucket, key, part_size
        self.metadata, self.content_type, self.stop = metadata, content_type, stop
        self.call = call or (lambda action, fn, **kwargs: fn(**kwargs))
        self.checksum = checksum or best_checksum()
        self.buffer = bytearray()
        self.filled = 0  # bytes of the current part in ``buffer``
        self.part_sum = Running(self.checksum)
        self.object_sum = Running(self.checksum)
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []
        self.sha256 = hashlib.sha256()
        self.size = 0

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def write(self, data: Any) -> int:
        if self.stop is not None and self.stop.is_set():
            raise Cancelled()
        view = memoryview(data).cast("B")
        written = view.nbytes
        while view.nbytes:
            take = view[: self.part_size - self.filled]
            end = self.filled + take.nbytes
            if end > len(self.buffer):  # growing (the first part of this object): append
                self.buffer += take
            else:
                self.buffer[self.filled : end] = take
            self.sha256.update(take)
            self.part_sum.update(take)
            self.filled = end
            view = view[take.nbytes :]
            if self.filled == self.part_size:
                self._part(self.buffer)
        self.size += written
        return written

    def _part(self, body: Any) -> None:
        if self.upload_id is None:
            self.upload_id = self.call(
                f"starting {self.where}",
                self.s3.create_multipart_upload,
                Bucket=self.bucket,
                Key=self.key,
                ContentType=self.content_type,
                Metadata=self.metadata,
                ChecksumAlgorithm=self.checksum.name,
                ChecksumType=FULL_OBJECT,
            )["UploadId"]
        number = len(self.parts) + 1
        value = self.part_sum.encoded()
        answer = self.call(
            f"writing part {number} of {self.where}",
            self.s3.upload_part,
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=body,
            ChecksumAlgorithm=self.checksum.name,
            **{self.checksum.field: value},
        )
        self.parts.append({"PartNumber": number, "ETag": answer["ETag"], self.checksum.field: value})
        self.object_sum.append(self.part_sum.value, self.part_sum.length)
        self.part_sum = Running(self.checksum)
        self.filled = 0

    def finish(self) -> None:
        if self.upload_id is None:
            self.call(
                f"writing {self.where}",
                self.s3.put_object,
                Bucket=self.bucket,
                Key=self.key,
                Body=self.buffer[: self.filled] if self.filled < len(self.buffer) else self.buffer,
                ContentType=self.content_type,
                Metadata=self.metadata,
                ChecksumAlgorithm=self.checksum.name,
                **{self.checksum.field: self.part_sum.encoded()},
            )
            return
        if self.filled:
            self._part(self.buffer[: self.filled])
        self.call(
            f"completing {self.where}",
            self.s3.complete_multipart_upload,
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": self.parts},
            **full_object_checksum(self.checksum, self.object_sum.value, self.size),
        )
        self.upload_id = None

    def abort(self) -> None:
        if self.upload_id is None:
            return
        with contextlib.suppress(Exception):  # what a failed abort leaves, the bucket's abort-incomplete rule removes
            self.s3.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)
        self.upload_id = None


def full_object_checksum(algorithm: Algorithm, value: int, size: int) -> dict[str, Any]:
    """CompleteMultipartUpload's arguments that make S3 check the whole object: its checksum (combined from the
    parts'), the type the upload was created with, and its size (botocore's s3 model: a wrong checksum type is
    BadDigest, a wrong ``MpuObjectSize`` an HTTP 400)."""
    return {algorithm.field: algorithm.encode(value), "ChecksumType": FULL_OBJECT, "MpuObjectSize": size}


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
    ranges_per_file: int = 8  # byte ranges of one file fetched at once; 1: one stream per file
    # The size of each such range: a part is fetched as ranges of at most this many bytes, so that the ranges in
    # flight cover a part or two (see FileStager._parallel_parts). Each is one request; over a reused connection or
    # not, 16 MiB keeps a request's round trip and TLS set-up to a few percent of its transfer time.
    range_size: int = 16 * MiB
    max_attempts: int = 5  # failures in a row, of one file, with no new byte read in between
    retry_base_s: float = 1.0
    retry_cap_s: float = 30.0
    retry_window_s: float = 1800.0  # a file failing for this long stops, even when each attempt progressed


class Retries:
    """One file's retry budget, shared by the threads reading its ranges.

    A failure after which the file's bytes read in order went further than ever before, or a cut read that
    had received bytes, starts the count again: only ``max_attempts`` failures in a row with nothing new make
    the file fail. A source that drips (a little, then a cut, again and again) is stopped by the window:
    once the file has been failing for ``window_s`` (from its first failure; ``window_s`` without one
    starts a new window), the next failure is its last.
    """

    def __init__(self, max_attempts: int, window_s: float) -> None:
        self.max_attempts = max_attempts
        self.window_s = window_s
        self.attempts = 0  # failures of this file in all
        self.misses = 0  # failures in a row without progress; the backoff grows with it
        self._best = 0  # the furthest byte of the file any attempt read in order
        self._fresh = False  # ``_best`` grew since the last failure
        self._window_start = 0.0
        self._last_failure: float | None = None
        self._lock = threading.Lock()

    def reached(self, position: int) -> None:
        """The file's bytes up to ``position`` were read in order (and hashed)."""
        with self._lock:
            if position > self._best:
                self._best, self._fresh = position, True

    def failed(self, progressed: bool = False, now: float | None = None) -> str | None:
        """Count one failure (``progressed``: the failing read had received new bytes); the reason the file
        stops here, or None to retry."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self.attempts += 1
            self.misses = 1 if progressed or self._fresh else self.misses + 1
            self._fresh = False
            if self._last_failure is None or now - self._last_failure >= self.window_s:
                self._window_start = now
            self._last_failure = now
            failing = now - self._window_start
            if self.misses >= self.max_attempts:
                if self.misses == self.attempts:
                    return f"gave up after {self.attempts} attempts"
                return f"gave up after {self.attempts} attempts, the last {self.misses} without a new byte"
            if failing >= self.window_s:
                return (
                    f"gave up after {self.attempts} attempts in {failing:.0f} s of failures "
                    f"(the retry window is {self.window_s:g} s)"
                )
            return None


@dataclass
class _Upload:
    """What survives between attempts of one multipart file: the upload, its parts, hash states at boundaries."""

    upload_id: str | None = None
    parts: dict[int, dict[str, Any]] = field(default_factory=dict)
    hashes: dict[int, Verifier] = field(default_factory=dict)  # part k -> hash of bytes before part k+1
    # part k -> the ETag S3 gave part k once it held exactly the bytes hashed into ``hashes`` as part k (S3
    # checked their checksum, computed from the hashed buffer): what a checkpoint covers. A part that ListParts
    # shows but this chain has not hashed is not in it.
    etags: dict[int, str] = field(default_factory=dict)
    sums: dict[int, int] = field(default_factory=dict)  # part k -> its checksum's value (for the object's)
    prefix: tuple[int, int] = (0, 0)  # (parts, checksum of parts 1..parts joined) restored from a checkpoint
    completed: bool = False
    failed: BaseException | None = None  # set by a part upload that failed: stop reading
    checkpoint: int = 0  # the part boundary whose hash state is saved in S3 (0: none)
    checkpoint_key: str | None = None  # its marker upload's key ...
    checkpoint_upload: str | None = None  # ... and id
    no_checkpoints: bool = False  # a checkpoint cannot be saved (key too long, access denied): stop trying
    single_stream: bool = False  # the server ignored a Range request: one stream for this file
    file: HubFile | None = None
    total_parts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)  # one checkpoint writer at a time


@dataclass(frozen=True)
class ResumePoint:
    """An open upload of a file, left by an earlier run, with the hash state after part ``part``."""

    upload_id: str
    part: int
    state: bytes
    checkpoint_key: str
    checkpoint_upload: str
    parts_digest: str = ""  # of the ETags of parts 1..part as hashed (``parts_digest``)
    sums: str = ""  # the checksum of parts 1..part joined (``encode_sums``)


def _short_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def checkpoint_prefix(prefix: str, path: str) -> str:
    """Where the checkpoints of ``path``'s uploads live: below the revision prefix, one folder per file."""
    return f"{prefix}{CHECKPOINT_DIR}{_short_digest(path)}/"


def parts_digest(etags: list[str]) -> str:
    """Binds a checkpoint's hash state to the parts it covers: a digest of their ETags in order (as UploadPart
    returned them), compared on resume with those ListParts reports, so a part uploaded again since is noticed."""
    return _short_digest("\n".join(etag.strip('"') for etag in etags))  # quoted or not, as a client gives it


def checkpoint_key(
    prefix: str, path: str, upload_id: str, part: int, state: bytes, digest: str = "", sums: str = ""
) -> str:
    """``<prefix>.hfstage-resume/<file>/<upload>/<part>-<parts digest>-<hash state, hex>[-<parts' checksum>]``:
    about 330 bytes plus the revision prefix, of S3's 1,024 (longer keys are not written: ``MAX_KEY_BYTES``).
    ``sums`` (``encode_sums``): the checksum of parts 1..part joined, which the whole object's continues."""
    tail = f"-{sums}" if sums else ""
    return f"{checkpoint_prefix(prefix, path)}{_short_digest(upload_id)}/{part:05d}-{digest}-{state.hex()}{tail}"


def encode_sums(algorithm: Algorithm, value: int) -> str:
    """A checkpoint's checksum field: the algorithm's name, lower case, then the value in hex (``crc64nvme0a1b...``)."""
    return f"{algorithm.name.lower()}{value:0{2 * algorithm.width}x}"


def decode_sums(algorithm: Algorithm, text: str) -> int:
    """The value of a checkpoint's checksum field; ValueError when it is absent or another algorithm's."""
    tag = algorithm.name.lower()
    digits = text[len(tag) :]
    if not text.startswith(tag) or len(digits) != 2 * algorithm.width or digits.strip("0123456789abcdef"):
        raise ValueError(f"the checkpoint carries no {algorithm.name} checksum of its parts (an earlier worker's)")
    return int(digits, 16)


def parse_checkpoint_key(prefix: str, key: str) -> tuple[str, str, int, bytes, str, str] | None:
    """(file digest, upload digest, part, state, parts digest, parts' checksum) of a checkpoint key, or None for
    any other key."""
    head = prefix + CHECKPOINT_DIR
    if not key.startswith(head):
        return None
    fields = key[len(head) :].split("/")
    if len(fields) != 3:
        return None
    part, _, rest = fields[2].partition("-")
    digest, _, state = rest.partition("-")
    state, _, sums = state.partition("-")
    try:
        return fields[0], fields[1], int(part), bytes.fromhex(state), digest, sums
    except ValueError:
        return None


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
        ranges: ThreadPoolExecutor | None = None,
        checksum: Algorithm | None = None,
    ) -> None:
        """``ranges`` runs the parallel range reads of a file; without it each file streams over one connection.
        ``checksum``: the algorithm of the checksums S3 verifies. Default: ``checksum.best()``."""
        self.ranges = ranges
        self.checksum = checksum or best_checksum()
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

    def stage(self, file: HubFile, resume: ResumePoint | None = None) -> None:
        """Upload ``file`` verified, or raise FileFailed / PermanentError / HubError / Cancelled.

        ``resume``: an open upload of this file left by an earlier run, continued after its checkpoint.
        """
        key = self.prefix + file.path
        part_size = part_size_for(file.size, self.settings.part_size)
        multipart = file.size > part_size
        state = _Upload()
        retries = Retries(self.settings.max_attempts, self.settings.retry_window_s)
        started = time.monotonic()
        if resume is not None and multipart:
            state = self._resumed(file, key, part_size, resume)
        self.log.emit(
            "start",
            path=file.path,
            size=file.size,
            parts=-(-file.size // part_size) if multipart else 1,
            hash="sha256" if file.sha256 else "git-sha1",
        )
        try:
            while True:
                if self.stop.is_set():
                    raise Cancelled()
                try:
                    if multipart:
                        self._multipart_attempt(file, key, part_size, state, retries)
                    else:
                        self._single_attempt(file, key, retries)
                    break
                except IntegrityError as error:
                    reason, retry_after = str(error), None
                    self._abort(key, state)
                    state = _Upload()
                    self.progress.position(file.path, 0)
                except RangeIgnored as error:
                    reason, retry_after = str(error), None
                    self._drop_checkpoint(state)  # the file starts again from byte 0, in the same upload
                    state.parts.clear()
                    state.etags.clear()
                    state.sums.clear()
                    state.prefix = (0, 0)
                    state.hashes = {0: Verifier(file, resumable=True)}
                    state.single_stream = True
                    self.progress.position(file.path, 0)
                except (TransientError, HubUnavailable) as error:
                    reason, retry_after = str(error), error.retry_after
                verdict = retries.failed()
                if verdict is not None:
                    named = reason if reason.startswith(f"{file.path}: ") else f"{file.path}: {reason}"
                    raise FileFailed(f"{named} ({verdict})")
                settings = self.settings
                delay = backoff_delay(retries.misses, settings.retry_base_s, settings.retry_cap_s, retry_after)
                self.log.emit("retry", path=file.path, attempt=retries.attempts + 1, wait_s=delay, reason=reason)
                if self.stop.wait(delay):
                    raise Cancelled()
        except Cancelled:
            self.progress.abandoned(file.path)
            if state.checkpoint == 0:  # nothing a later run could resume from
                self._abort(key, state)
            raise
        except BaseException:
            self.progress.abandoned(file.path)
            self._abort(key, state)
            raise
        finally:
            if state.completed:
                self._drop_checkpoint(state)
        seconds = time.monotonic() - started
        self.progress.finished(file.path, file.size)
        self.log.emit("done", path=file.path, size=file.size, seconds=seconds, mb_per_s=file.size / 1e6 / seconds)

    # -- small files: read, verify, then one PutObject ---------------------------------------------------

    def _single_attempt(self, file: HubFile, key: str, retries: Retries) -> None:
        buffer = self.pool.acquire(file.size, self.stop)
        try:
            verifier = Verifier(file)
            running = Running(self.checksum)
            self.progress.position(file.path, 0)
            response = self.hub.open_file(self.repo_id, self.sha, file.path)
            try:
                self._check_length(response, file, 0)
                response = self._fill(
                    response,
                    buffer,
                    0,
                    file.size,
                    verifier,
                    file,
                    retries=retries,
                    reopen=self._reopener(file),
                    sums=running,
                )
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
                    ChecksumAlgorithm=self.checksum.name,
                    **{self.checksum.field: running.encoded()},
                )
            except (ClientError, BotoCoreError) as error:
                raise s3_error(error, f"PutObject s3://{self.bucket}/{key}") from None
            self.progress.uploaded(file.path, file.size)
        finally:
            self.pool.release(buffer)

    # -- large files: stream parts into a multipart upload -----------------------------------------------

    def _multipart_attempt(self, file: HubFile, key: str, part_size: int, state: _Upload, retries: Retries) -> None:
        if state.upload_id is None:
            try:
                created = self.s3.create_multipart_upload(
                    Bucket=self.bucket,
                    Key=key,
                    ContentType=CONTENT_TYPE,
                    Metadata=object_metadata(file, self.repo_id, self.sha),
                    ChecksumAlgorithm=self.checksum.name,
                    ChecksumType=FULL_OBJECT,
                )
            except (ClientError, BotoCoreError) as error:
                raise s3_error(error, f"CreateMultipartUpload s3://{self.bucket}/{key}") from None
            state.upload_id = created["UploadId"]
            state.parts.clear()
            state.etags.clear()
            state.sums.clear()
            state.prefix = (0, 0)
            state.hashes = {0: Verifier(file, resumable=True)}
        total_parts = -(-file.size // part_size)
        state.file, state.total_parts = file, total_parts
        uploaded = 0  # leading parts in S3
        while uploaded < total_parts and uploaded + 1 in state.parts:
            uploaded += 1
        done = max(n for n in state.hashes if n <= uploaded)  # the attempt resumes after part ``done``
        # Hash states past ``done`` come from an earlier attempt's bytes, and this attempt uploads those parts
        # again: keeping them could pair a hash of the earlier bytes with different bytes in S3.
        for stale in [n for n in state.hashes if n > done]:
            del state.hashes[stale]
        for stale in [n for n in state.etags if n > done]:
            del state.etags[stale]
        verifier = state.hashes[done].copy()
        offset = done * part_size
        self.progress.position(file.path, offset)
        if offset:
            self.log.emit("resume", path=file.path, offset=offset, part=done + 1)
        if done < total_parts:  # else every part is in S3 already: an earlier completion failed
            if self.ranges is None or self.settings.ranges_per_file < 2 or state.single_stream:
                self._stream_parts(file, key, part_size, state, verifier, done + 1, retries)
            else:
                self._parallel_parts(file, key, part_size, state, verifier, done + 1, retries)
        verifier.check()
        whole = self._joined(state, total_parts)
        try:
            self.s3.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=state.upload_id,
                MultipartUpload={"Parts": [state.parts[n] for n in range(1, total_parts + 1)]},
                **full_object_checksum(self.checksum, whole, file.size),
            )
        except (ClientError, BotoCoreError) as error:
            raise s3_error(error, f"CompleteMultipartUpload s3://{self.bucket}/{key}") from None
        state.completed = True

    def _stream_parts(
        self,
        file: HubFile,
        key: str,
        part_size: int,
        state: _Upload,
        verifier: Verifier,
        first_part: int,
        retries: Retries,
        response: Any = None,
    ) -> None:
        """Read the file from ``first_part`` on over one connection (``response``, if open already), hashing
        it, and upload each part as soon as it is read."""
        offset = (first_part - 1) * part_size
        state.failed = None
        futures: dict[int, Future[dict[str, Any]]] = {}
        if response is None:
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
                running = Running(self.checksum)
                try:
                    response = self._fill(
                        response,
                        buffer,
                        offset,
                        n,
                        verifier,
                        file,
                        retries=retries,
                        reopen=self._reopener(file),
                        sums=running,
                    )
                except BaseException:
                    self.pool.release(buffer)
                    raise
                offset += n
                state.hashes[part_number] = verifier.copy()
                futures[part_number] = self.uploads.submit(
                    self._upload_part, key, state, part_number, buffer, running.value
                )
                part_number += 1
            else:
                self._expect_end(response, file)
        finally:
            response.close()
            self._collect(futures, state)
        errors = [f.exception() for f in futures.values() if f.exception() is not None]
        if errors:
            raise errors[0]

    def _parallel_parts(
        self,
        file: HubFile,
        key: str,
        part_size: int,
        state: _Upload,
        verifier: Verifier,
        first_part: int,
        retries: Retries,
    ) -> None:
        """Fetch parts ``first_part``.. as byte ranges, several at once; hash them in order, upload each.

        Each part is fetched as ranges of about ``range_size`` bytes (``range_plan``), all in flight taken in file
        order, so the connections work on the next part or two rather than on a part each: parts complete in
        order, soon after one another, and little fetched waits unhashed for the parts before it (what a kill
        loses: the bytes after the last saved hash state). A part's ranges fill its one pool buffer; buffers are
        taken in part order and, while this file has ranges in flight, only when one is free at once, so the
        part the hash waits for always has its buffer: no deadlock, whatever other files hold.
        """
        state.failed = None
        window = max(1, self.settings.ranges_per_file)
        plan = range_plan(file.size, part_size, first_part, self.settings.range_size)
        abort = threading.Event()  # ends the other reads of this attempt when one fails
        fetching: dict[int, Future[int]] = {}  # index in ``plan`` -> its read (the range's checksum)
        buffers: dict[int, bytearray] = {}  # part -> its buffer, until handed to its upload
        sums: dict[int, Running] = {}  # part -> the checksum of its ranges collected so far
        uploading: dict[int, Future[dict[str, Any]]] = {}
        url = self.hub.file_url(self.repo_id, self.sha, file.path)
        resolved = False  # ``url`` is the one that answered the first range (the CDN's, after the redirect)
        link = [url]  # the URL later ranges ask; a range that finds it expired puts a fresh one here
        next_fetch = next_collect = 0
        try:
            while next_collect < len(plan):
                if state.failed is not None:
                    raise state.failed
                while next_fetch < len(plan) and len(fetching) < window:
                    part, within, n = plan[next_fetch]
                    start = (part - 1) * part_size + within
                    if part not in buffers:
                        size = min(part_size, file.size - (part - 1) * part_size)
                        buffer = self.pool.acquire(size, self.stop, block=not fetching)
                        if buffer is None:
                            break
                        buffers[part], sums[part] = buffer, Running(self.checksum)
                    response = None
                    if not resolved:
                        try:
                            response = self.hub.open_range(self.repo_id, file.path, url, start, start + n)
                        except BaseException:
                            self.pool.release(buffers.pop(part))
                            raise
                        url, resolved = response.url, True
                        link[0] = url
                        if response.status != 206 and start == 0:
                            # RFC 9110 14.2: a server may ignore Range; this answer is the whole file.
                            self.pool.release(buffers.pop(part))
                            self.log.emit("single_stream", path=file.path, reason="the server ignored Range")
                            state.single_stream = True
                            self._stream_parts(file, key, part_size, state, verifier, 1, retries, response=response)
                            return
                    target = memoryview(buffers[part])[within : within + n]
                    fetching[next_fetch] = self.ranges.submit(
                        self._fetch_range, file, link, response, target, start, n, abort, retries
                    )
                    next_fetch += 1
                future = fetching[next_collect]
                if not wait([future], timeout=0.2).done:
                    if self.stop.is_set():
                        raise Cancelled()
                    continue  # look for a free buffer again
                del fetching[next_collect]
                part, within, n = plan[next_collect]
                sums[part].append(future.result(), n)
                verifier.update(memoryview(buffers[part])[within : within + n])
                next_collect += 1
                start = (part - 1) * part_size + within
                retries.reached(start + n)
                if next_collect == len(plan) or plan[next_collect][0] != part:  # the part's last range
                    state.hashes[part] = verifier.copy()
                    buffer, value = buffers.pop(part), sums.pop(part).value
                    uploading[part] = self.uploads.submit(self._upload_part, key, state, part, buffer, value)
        finally:
            abort.set()
            for future in fetching.values():
                if not future.cancel():
                    wait([future])  # a read in progress sees ``abort`` within one chunk
            for buffer in buffers.values():
                self.pool.release(buffer)
            self._collect(uploading, state)
        errors = [f.exception() for f in uploading.values() if f.exception() is not None]
        if errors:
            raise errors[0]

    def _fetch_range(
        self,
        file: HubFile,
        link: list[str],
        response: Any,
        target: memoryview,
        start: int,
        n: int,
        abort: threading.Event,
        retries: Retries,
    ) -> int:
        """Fill ``target`` with bytes ``start``..``start + n - 1`` of ``file`` (a 206 answer, checked); a cut
        read continues with a request for the bytes it still lacks. Returns the bytes' checksum, computed as
        they arrive."""
        end = start + n

        def reopen(at: int) -> Any:
            return self._checked_range(file, link, None, at, end - at)

        running = Running(self.checksum)
        try:
            response = self._checked_range(file, link, response, start, n)
            response = self._fill(
                response, target, start, n, None, file, abort, retries=retries, reopen=reopen, sums=running
            )
        finally:
            if response is not None:
                response.close()
        return running.value

    def _checked_range(self, file: HubFile, link: list[str], response: Any, start: int, n: int) -> Any:
        """``response`` (opened here when None) after checking it is the 206 for bytes ``start``.. ``start + n
        - 1``; closed when it is not."""
        if response is None:
            response = self._open_range(file, link, start, n)
        try:
            if response.status != 206:
                raise RangeIgnored(f"downloading {file.path}: the server ignored the Range request")
            expected = f"bytes {start}-{start + n - 1}/{file.size}"
            answered = (response.headers.get("Content-Range") or "").strip()
            if answered != expected:
                total = answered.rpartition("/")[2]
                if total.isdigit() and int(total) != file.size:
                    raise IntegrityError(f"{file.path}: the Hub sends {total} bytes, the revision lists {file.size}")
                raise TransientError(f"{file.path}: asked for {expected}, the server sent {answered or 'no range'}")
        except BaseException:
            response.close()
            raise
        return response

    def _reopener(self, file: HubFile) -> Any:
        """For a stream of ``file`` that is cut: open it again from byte ``at`` (a 206, its length checked)."""

        def reopen(at: int) -> Any:
            response = self.hub.open_file(self.repo_id, self.sha, file.path, start=at)
            try:
                self._check_length(response, file, at)
            except BaseException:
                response.close()
                raise
            return response

        return reopen

    def _open_range(self, file: HubFile, link: list[str], start: int, n: int) -> Any:
        """Open bytes ``start``.. of ``file`` at ``link[0]``; when that (signed CDN) URL is refused, resolve the
        file again at the Hub once: such URLs expire (huggingface.js refetches expired presigned URLs, its
        issue #1277; the lifetime is not documented), and a long transfer must not spend an attempt on each."""
        url = link[0]
        resolve = self.hub.file_url(self.repo_id, self.sha, file.path)
        try:
            return self.hub.open_range(self.repo_id, file.path, url, start, start + n)
        except (HubUnavailable, UnsafeRedirect):  # a redirect to file: or http: is no expired URL: stop the run
            raise
        except HubError as error:
            if url == resolve:
                raise TransientError(f"{file.path}: range {start}-{start + n - 1}: {error}") from None
        self.log.emit("resolve_again", path=file.path, offset=start)
        try:
            response = self.hub.open_range(self.repo_id, file.path, resolve, start, start + n)
        except (HubUnavailable, UnsafeRedirect):
            raise
        except HubError as error:
            raise TransientError(f"{file.path}: range {start}-{start + n - 1}: {error}") from None
        link[0] = response.url
        return response

    def _resumed(self, file: HubFile, key: str, part_size: int, resume: ResumePoint) -> _Upload:
        """The upload state of ``resume`` after checking its parts in S3; a fresh state when it cannot be used."""
        state = _Upload(
            upload_id=resume.upload_id,
            checkpoint=resume.part,
            checkpoint_key=resume.checkpoint_key,
            checkpoint_upload=resume.checkpoint_upload,
        )
        total_parts = -(-file.size // part_size)
        problem = None
        try:
            verifier = Verifier.restore(file, resume.state)
            # ListParts: number, size, ETag and checksum of each uploaded part (S3 API reference, ListParts).
            pages = self.s3.get_paginator("list_parts").paginate(Bucket=self.bucket, Key=key, UploadId=resume.upload_id)
            field_name = self.checksum.field
            for page in pages:
                # ListParts gives the upload's algorithm and type (botocore's s3 model, ListPartsOutput): parts
                # written with another cannot be completed with this worker's, nor their checksums combined.
                for given, wanted in (
                    (page.get("ChecksumAlgorithm"), self.checksum.name),
                    (page.get("ChecksumType"), FULL_OBJECT),
                ):
                    if given and given != wanted:
                        raise ValueError(f"the open upload has {given} checksums, this worker writes {wanted}")
                for part in page.get("Parts") or []:
                    number = int(part["PartNumber"])
                    size = min(part_size, file.size - (number - 1) * part_size)
                    if number > total_parts or int(part["Size"]) != size:
                        continue  # another part size (another --part-size-mib): fetched and uploaded again
                    # S3 checked each part's checksum on arrival, computed by the killed run from the bytes it
                    # hashed; CompleteMultipartUpload needs it again, and the object's is combined from them.
                    # ListParts lists them for an upload created with an algorithm (ListParts API reference).
                    state.parts[number] = {"PartNumber": number, "ETag": part["ETag"]}
                    if part.get(field_name):
                        state.parts[number][field_name] = part[field_name]
            missing = [n for n in range(1, resume.part + 1) if n not in state.parts]
            covered = resume.part * part_size + (0 if file.sha256 else len(b"blob %d\0" % file.size))
            if missing:
                problem = f"part {missing[0]} before the checkpoint is not in S3"
            elif hashstate.hashed_bytes(Verifier.algorithm_name(file), resume.state) != covered:
                problem = f"the saved hash state does not cover the {resume.part} parts before the checkpoint"
            else:
                # ListParts's ETag is the "entity tag returned when the part was uploaded" (botocore's s3 model).
                etags = [str(state.parts[n]["ETag"]) for n in range(1, resume.part + 1)]
                # The parts in S3 must be the bytes the saved state hashed (a part uploaded again since, by a
                # run whose hash was not saved, would otherwise complete the file unhashed).
                if parts_digest(etags) != resume.parts_digest:
                    problem = "the parts in S3 are not the ones the checkpoint hashed"
                else:
                    # The checkpoint, not ListParts, gives the parts' joined checksum: S3 lists part checksums,
                    # but not every S3-compatible store does, and this one was computed from the hashed bytes.
                    state.prefix = (resume.part, decode_sums(self.checksum, resume.sums))
                    state.etags = dict(enumerate(etags, start=1))
        except ValueError as error:
            problem = str(error)
        except (ClientError, BotoCoreError) as error:
            problem = describe_client_error(error, "ListParts")
        if problem is not None:
            self.log.emit("resume_discarded", path=file.path, reason=problem)
            self._abort(key, state)
            return _Upload()
        state.hashes = {resume.part: verifier}
        self.log.emit("resume_upload", path=file.path, parts_in_s3=len(state.parts), checkpoint=resume.part)
        return state

    def _checkpoint(self, state: _Upload) -> None:
        """Save the hash state at the highest part boundary below which every part is in S3 (not the last
        one: the upload is completed next). Called by each part's upload once the part is in S3."""
        with state.lock:
            boundary = state.checkpoint
            while boundary + 1 in state.etags and boundary + 1 in state.hashes:
                boundary += 1
            if boundary in (state.checkpoint, state.total_parts) or state.upload_id is None or state.file is None:
                return
            saved = state.hashes[boundary].saved_state()
            if saved is None or state.no_checkpoints:
                return
            digest = parts_digest([state.etags[n] for n in range(1, boundary + 1)])
            sums = encode_sums(self.checksum, self._joined(state, boundary))
            key = checkpoint_key(self.prefix, state.file.path, state.upload_id, boundary, saved, digest, sums)
            if len(key.encode()) > MAX_KEY_BYTES:
                state.no_checkpoints = True
                reason = f"{state.file.path}: no resume checkpoints, their key would exceed {MAX_KEY_BYTES} bytes"
                self.log.emit("warning", reason=reason + " (shorten the destination prefix)")
                return
            try:
                marker = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key, ContentType=CONTENT_TYPE)
            except (ClientError, BotoCoreError) as error:
                reason = describe_client_error(error, f"saving a checkpoint of {state.file.path}")
                state.no_checkpoints = isinstance(s3_error(error, reason), PermanentError)  # else: next part
                self.log.emit("warning", reason=reason)
                return
            self._drop_checkpoint(state)
            state.checkpoint, state.checkpoint_key, state.checkpoint_upload = boundary, key, marker["UploadId"]

    def _joined(self, state: _Upload, parts: int) -> int:
        """The checksum of parts 1..``parts`` joined: a checkpoint's for the parts before it, then each part's."""
        assert state.file is not None
        part_size = part_size_for(state.file.size, self.settings.part_size)
        first, value = state.prefix
        joined = Running(self.checksum)
        if first:
            joined.append(value, first * part_size)
        for n in range(first + 1, parts + 1):
            joined.append(state.sums[n], min(part_size, state.file.size - (n - 1) * part_size))
        return joined.value

    def _drop_checkpoint(self, state: _Upload) -> None:
        if state.checkpoint_key is None:
            return
        try:
            self.s3.abort_multipart_upload(
                Bucket=self.bucket, Key=state.checkpoint_key, UploadId=state.checkpoint_upload
            )
        except (ClientError, BotoCoreError) as error:
            self.log.emit(
                "abort_failed", key=state.checkpoint_key, reason=describe_client_error(error, "AbortMultipartUpload")
            )
        state.checkpoint, state.checkpoint_key, state.checkpoint_upload = 0, None, None

    def _upload_part(self, key: str, state: _Upload, part_number: int, buffer: bytearray, value: int) -> dict[str, Any]:
        """Upload ``buffer`` as part ``part_number``; ``value``: its checksum, computed as its bytes arrived."""
        upload_id = state.upload_id
        field_name = self.checksum.field
        try:
            checksum = self.checksum.encode(value)
            # Before the ETag below: another part's upload may checkpoint as soon as it sees this part's ETag, and
            # the checkpoint joins the checksums of every part before it.
            state.sums[part_number] = value
            known = state.parts.get(part_number)
            if known is not None and known.get(field_name) == checksum:
                # Already in S3 with this checksum (uploaded past a resumed run's checkpoint): not sent again.
                self.progress.uploaded(key[len(self.prefix) :], len(buffer))
                state.etags[part_number] = known["ETag"]
                part = known
            else:
                answer = self.s3.upload_part(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=part_number,
                    Body=buffer,
                    ChecksumAlgorithm=self.checksum.name,
                    **{field_name: checksum},
                )
                self.progress.uploaded(key[len(self.prefix) :], len(buffer))
                part = {"PartNumber": part_number, "ETag": answer["ETag"], field_name: checksum}
                state.parts[part_number] = part
                state.etags[part_number] = answer["ETag"]
        except (ClientError, BotoCoreError) as error:
            state.failed = s3_error(error, f"UploadPart {part_number} of s3://{self.bucket}/{key}")
            raise state.failed from None
        except BaseException as error:
            state.failed = error
            raise
        finally:  # after state.failed is set, so that the reader sees the failure when it gets this buffer
            self.pool.release(buffer)
        self._checkpoint(state)
        return part

    @staticmethod
    def _collect(futures: dict[int, Future[dict[str, Any]]], state: _Upload) -> None:
        """Wait for every part in flight; keep those that arrived (a resume starts after them)."""
        wait(futures.values())
        for number, future in futures.items():
            if future.exception() is None:
                state.parts[number] = future.result()
            else:
                state.parts.pop(number, None)
                state.etags.pop(number, None)
                state.sums.pop(number, None)

    def _abort(self, key: str, state: _Upload) -> None:
        self._drop_checkpoint(state)
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

    def _fill(
        self,
        response: Any,
        buffer: bytearray,
        offset: int,
        n: int,
        verifier: Verifier | None,
        file: HubFile,
        abort: threading.Event | None = None,
        *,
        retries: Retries | None = None,
        reopen: Any = None,
        sums: Running | None = None,
    ) -> Any:
        """Read exactly ``n`` bytes into ``buffer``, hashing them (with ``verifier``); returns the response the
        bytes after them come from: ``response``, or the one ``reopen(offset)`` opened after a cut. A cut (the
        stream ends early or breaks) that came after new bytes is counted in ``retries`` and continued with
        ``reopen`` from the first missing byte; a cut with nothing new, or the budget spent, raises
        TransientError (FileFailed when ``retries`` says stop). Cancelled when the run stops or ``abort`` is set.
        ``sums``: the running checksum the bytes are added to, each chunk while it is in the CPU's cache."""
        view = memoryview(buffer)
        got = 0
        since = 0  # ``got`` when the current response was opened (or this call began)
        current = response
        try:
            while got < n:
                if self.stop.is_set() or (abort is not None and abort.is_set()):
                    raise Cancelled()
                where = f"after {offset + got} of {file.size} bytes"
                try:
                    count = current.readinto(view[got : min(n, got + READ_CHUNK)])
                    cut = None if count else f"{file.path}: the download stopped {where}"
                except (OSError, http.client.HTTPException) as error:
                    count, cut = 0, f"{file.path}: the download broke {where} ({type(error).__name__})"
                if cut is not None:
                    if verifier is not None and retries is not None:
                        retries.reached(offset + got)  # before the count: these bytes are this cut's progress
                    if reopen is None or retries is None or got == since:
                        raise TransientError(cut)
                    verdict = retries.failed(progressed=True)
                    if verdict is not None:
                        raise FileFailed(f"{cut} ({verdict})")
                    self.log.emit("resume_read", path=file.path, offset=offset + got, reason=cut)
                    current.close()  # ``response`` included: the caller's later close() of it does nothing
                    current, since = None, got
                    current = self._reopen_after_cut(file, reopen, offset + got, retries, abort)
                    continue
                if verifier is not None:
                    verifier.update(view[got : got + count])
                if sums is not None:
                    sums.update(view[got : got + count])
                got += count
                self.progress.read(count)
        except BaseException:
            if current is not None and current is not response:
                current.close()
            raise
        finally:
            view.release()
            if verifier is not None and retries is not None:
                retries.reached(offset + got)
        return current

    def _reopen_after_cut(
        self, file: HubFile, reopen: Any, at: int, retries: Retries, abort: threading.Event | None
    ) -> Any:
        """``reopen(at)``, its transient failures (a 503, a refused connection) retried here, each counted in
        ``retries`` with the attempt's backoff, so that the bytes read before the cut stay where they are."""
        while True:
            try:
                return reopen(at)
            except (TransientError, HubUnavailable) as error:
                verdict = retries.failed()
                if verdict is not None:
                    raise FileFailed(f"{error} ({verdict})") from None
                settings = self.settings
                delay = backoff_delay(retries.misses, settings.retry_base_s, settings.retry_cap_s, error.retry_after)
                self.log.emit("retry", path=file.path, attempt=retries.attempts + 1, wait_s=delay, reason=str(error))
            deadline = time.monotonic() + delay
            while (left := deadline - time.monotonic()) > 0:  # in short waits, to see ``abort`` too
                if self.stop.wait(min(left, 0.2)) or (abort is not None and abort.is_set()):
                    raise Cancelled()
            if abort is not None and abort.is_set():
                raise Cancelled()

    @staticmethod
    def _expect_end(response: Any, file: HubFile) -> None:
        try:
            extra = response.read(1)
        except (OSError, http.client.HTTPException):
            return
        if extra:
            raise IntegrityError(f"{file.path}: the Hub sends more than the {file.size} bytes the revision lists")


def reclaim_uploads(
    s3: Any, bucket: str, prefix: str, keys: set[str], log: EventLog, resume: bool = True
) -> dict[str, ResumePoint]:
    """The open multipart uploads a killed earlier run left under ``prefix`` for ``keys``: each file's upload
    with the latest checkpoint is returned (key -> ResumePoint) to be continued; every other upload and
    checkpoint there is aborted. ``resume=False`` aborts them all."""
    uploads: list[dict[str, Any]] = []
    markers: list[tuple[dict[str, Any], tuple[str, str, int, bytes, str, str]]] = []
    mine = {_short_digest(key[len(prefix) :]) for key in keys}  # other hosts' checkpoints are theirs
    try:
        for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix):
            for upload in page.get("Uploads") or []:
                parsed = parse_checkpoint_key(prefix, upload.get("Key", ""))
                if parsed is not None:
                    if parsed[0] in mine:
                        markers.append((upload, parsed))
                elif upload.get("Key") in keys:
                    uploads.append(upload)
    except (ClientError, BotoCoreError) as error:
        log.emit("warning", reason=describe_client_error(error, "listing open multipart uploads"))
        return {}
    best: dict[str, ResumePoint] = {}
    if resume and hashstate.available():
        for upload in uploads:
            path = upload["Key"][len(prefix) :]
            wanted = (_short_digest(path), _short_digest(upload["UploadId"]))
            for marker, (file_digest, upload_digest, part, state, digest, sums) in markers:
                if (file_digest, upload_digest) != wanted or part < 1:
                    continue
                current = best.get(upload["Key"])
                if current is None or part > current.part:
                    best[upload["Key"]] = ResumePoint(
                        upload["UploadId"], part, state, marker["Key"], marker["UploadId"], digest, sums
                    )
    kept = {(p.upload_id, p.checkpoint_upload) for p in best.values()}
    for upload in [*uploads, *(m for m, _ in markers)]:
        if any(upload["UploadId"] in pair for pair in kept):
            continue
        try:
            s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
            log.emit("abort_stale", key=upload["Key"])
        except (ClientError, BotoCoreError) as error:
            log.emit("warning", reason=describe_client_error(error, "aborting an open multipart upload"))
    for key, point in best.items():
        log.emit("resumable", key=key, checkpoint=point.part)
    return best


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
    "part_size_for",
    "reclaim_uploads",
]
