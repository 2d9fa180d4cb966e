"""Unpack a ``model.tar.gz`` in S3 into a verified, uncompressed prefix, streamed, with no local copy.

    python3 hfstage.zip --source-s3-uri s3://bucket/job/output/model.tar.gz --destination s3://bucket/models/

SageMaker Training uploads what a job leaves in ``/opt/ml/model`` as one gzip-compressed tar,
``s3://bucket/<prefix>/<job>/output/model.tar.gz``, with the files at the archive's root (config.json
beside the weights), and hosting extracts such an archive into ``/opt/ml/model``
(https://docs.aws.amazon.com/sagemaker/latest/dg/API_ModelArtifacts.html,
https://docs.aws.amazon.com/sagemaker/latest/dg/large-model-inference-uncompressed.html). Serving large
models from an uncompressed ``S3Prefix`` skips that extraction on every instance start; this module turns the
archive into such a prefix, with the same manifest as a Hub revision, so the preflight verifies it and a rerun
skips it the same way.

The run reads the archive twice, both times as one stream (a ranged GET resumes a dropped connection, pinned to
the object's ETag with ``If-Match``), gunzipped and read header by header here (not with tarfile, which keeps
every member, copies pax global headers onto each and never checks the gzip trailer): the first pass reads only
what it needs to check every member (name, type, size, count, SHA-256 of each file) and writes nothing; the
second uploads each regular file, one part at a time, and completes an object only once its SHA-256 matches the
first pass. Nothing lands on the job's disk: memory holds one part, one READ_CHUNK in and out, one header
extension and one short record per member. An archive with one top-level folder and no file beside it (``tar
czf model.tar.gz model/``) is unpacked from inside that folder; a leading ``./`` (``tar czf - -C model .``) is
dropped.

Refused before any write (exit 3): absolute names, ``..``/``.`` or empty segments, backslashes, non-printable
characters, names the worker owns (the manifest, the resume area), symbolic and hard links, devices, FIFOs,
names given twice, a name that is both a file and a folder, more than ``--max-members`` members. At its header,
before its data is read: sparse and unknown-type members, links or folders with data, negative or malformed
sizes, names over S3's key length, a pax global header setting a member's path or size, one header extension
over 1 MiB or more than ``--max-header-bytes`` of them, a member that would pass ``--max-total-bytes`` (every
byte of tar read: headers, padding, skipped members). At the end: a bad gzip CRC-32 or length, a missing
trailer, data after the end-of-archive block.
Exit status and failure file as for the Hub worker (both in hfstage.base).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hfstage.base import (
    EXIT_HUB,
    EXIT_OK,
    EXIT_TRANSFER,
    EXIT_USAGE,
    FAILURE_FILE_HELP,
    Failure,
    Guard,
    UsageParser,
    guarded_run,
    make_s3_client,
    parse_arguments,
)
from hfstage.hub import HubFile, select_files
from hfstage.manifest import (
    build_manifest,
    missing_files,
    object_metadata,
    read_manifest,
    write_manifest,
)
from hfstage.names import MAX_KEY_BYTES, format_refusal, path_problem, unsafe_paths
from hfstage.shard import leader, read_hosts
from hfstage.transfer import (
    CONTENT_TYPE,
    READ_CHUNK,
    MiB,
    Settings,
    StreamedObject,
    backoff_delay,
    part_size_for,
)
from hfstage.uris import archive_prefix, parse_source

EXIT_SOURCE = EXIT_HUB  # the source will not give, or cannot safely give, what to stage
FLAG = "--source-s3-uri"
# An S3 ETag is the hex MD5 of a single-part object, or "<hex>-<parts>" for a multipart one (S3 API, Object).
ETAG = re.compile(r'"?(?P<etag>[0-9a-f]{32}(?:-[0-9]{1,5})?)"?', re.ASCII)
DEFAULT_MAX_MEMBERS = 10_000
DEFAULT_MAX_TOTAL_BYTES = 2 * 1024**4  # 2 TiB of files: beyond any checkpoint one endpoint instance holds
MAX_HEADER_EXTENSION = MiB  # one pax / GNU long-name record: read whole into memory
DEFAULT_MAX_HEADER_BYTES = 32 * MiB  # all extension records: a pax path per member of 10,000 is about 15 MB
META_ARCHIVE_ETAG = "archive-etag"


class SourceChanged(Exception):
    """The archive is no longer the object the run started with (another ETag, or other content)."""


def is_tarball_run(argv: list[str]) -> bool:
    return any(a == FLAG or a.startswith(FLAG + "=") for a in argv)


def normal_etag(etag: str) -> str:
    """S3's ETag without its quotes; a value that is no S3 ETag is refused (it names the staged prefix)."""
    match = ETAG.fullmatch(etag.strip())
    if not match:
        raise ValueError(f"ETag {etag[:80]!r} is not an S3 ETag")
    return match.group("etag")


def tarball_prefix(destination_prefix: str, source_uri: str, etag: str) -> str:
    """``models/s3-tarball--<hash of URI>/<etag>/``: the ETag plays the commit SHA's part, so a new archive
    under the same key is staged beside the old one."""
    return f"{archive_prefix(destination_prefix, source_uri)}{normal_etag(etag)}/"


class ArchiveUnreadable(Exception):
    """HeadObject of the archive failed (absent, forbidden, throttled): the message names it and the error."""


@dataclass(frozen=True)
class ArchiveState:
    """What the staging handler plans with: the archive's ETag and size, its prefix, and whether it is staged."""

    etag: str
    size: int
    prefix: str
    staged_files: tuple[HubFile, ...]  # the manifest's files when the prefix is staged and verified, else ()


def archive_state(
    s3: Any,
    source_uri: str,
    bucket: str,
    destination_prefix: str,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> ArchiveState:
    """HEAD the archive, read the manifest of its prefix and check its files.

    ArchiveUnreadable when the archive cannot be HEADed; botocore errors of the destination are raised as they are.
    """
    source_bucket, key = parse_source(source_uri)
    try:
        head = s3.head_object(Bucket=source_bucket, Key=key)
    except Exception as error:  # botocore ClientError, connection errors
        raise ArchiveUnreadable(f"cannot read the archive {source_uri}: {_describe(error)}") from error
    etag = normal_etag(str(head.get("ETag", "")))
    prefix = tarball_prefix(destination_prefix, source_uri, etag)
    try:
        manifest = read_manifest(s3, bucket, prefix)
    except ValueError:
        manifest = None  # unreadable: the job rewrites it
    files = manifest_files(manifest, source_uri, etag, prefix, include, exclude)
    if files and missing_files(s3, bucket, prefix, source_uri, etag, files):
        files = ()
    return ArchiveState(etag=etag, size=int(head["ContentLength"]), prefix=prefix, staged_files=files)


def manifest_files(
    manifest: Any,
    source_uri: str,
    etag: str,
    prefix: str,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> tuple[HubFile, ...]:
    """The files a manifest of this archive lists; () when it is another archive's, was unpacked with other
    include/exclude patterns (the handler cannot tell which files they select without reading the archive),
    or is malformed or unsafe."""
    if not isinstance(manifest, dict) or manifest.get("repo_id") != source_uri or manifest.get("revision") != etag:
        return ()
    recorded = manifest.get("archive") if isinstance(manifest.get("archive"), dict) else {}
    if recorded.get("include", []) != list(include) or recorded.get("exclude", []) != list(exclude):
        return ()
    try:
        files = tuple(
            HubFile(path=str(e["path"]), size=int(e["size"]), blob_id=str(e["blob_id"]), sha256=str(e["sha256"]))
            for e in manifest["files"]
        )
    except (KeyError, TypeError, ValueError):
        return ()
    return () if unsafe_paths([f.path for f in files], prefix) else files


class _Refused(Exception):
    """The archive cannot be staged safely; nothing was written."""


# RFC 1952 section 2.2: "A gzip file consists of a series of members"; each ends with an 8-byte trailer (CRC-32
# and ISIZE). zlib checks both when windowBits is 16 + 8..15 and returns Z_DATA_ERROR ("incorrect data check",
# "incorrect length check") on a mismatch (zlib manual, inflateInit2); tarfile's "r|gz" reads raw deflate and
# never looks at the trailer (CPython Lib/tarfile.py, _Stream), so this module gunzips the stream itself.
GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_MEANING = {
    "incorrect data check": "its gzip CRC-32 does not match the data",
    "incorrect length check": "its gzip trailer's length does not match the data",
    "incorrect header check": "it is not a readable gzip-compressed tar (no gzip header)",
}


class _Gunzip:
    """The tar stream: the archive gunzipped as it is read, every byte counted against ``limit``.

    Holds at most one READ_CHUNK of input and one of output; ``finish`` checks the last gzip trailer.
    """

    def __init__(self, source: Any, limit: int, stop: threading.Event) -> None:
        self.source = source
        self.limit = limit
        self.stop = stop
        self.count = 0  # bytes decompressed: every one the job had to unpack
        self.position = 0  # bytes of tar handed out
        self._z = zlib.decompressobj(GZIP_WBITS)
        self._input = b""
        self._buffer = b""  # the last chunk decompressed, handed out from self._at on
        self._at = 0

    def _more(self) -> bool:
        """Replace the (used up) buffer with up to READ_CHUNK more bytes; False at the clean end of the last member."""
        while True:
            if self.stop.is_set():
                raise Failure(EXIT_TRANSFER, "stopped before the archive was read")
            if not self._input:
                self._input = self.source.read(READ_CHUNK)
                if not self._input:
                    if self._z.eof:
                        return False
                    raise _Refused("its gzip stream ends without the 8-byte trailer (CRC-32 and length)")
            if self._z.eof:  # another gzip member follows (RFC 1952 section 2.2)
                self._z = zlib.decompressobj(GZIP_WBITS)
            try:
                out = self._z.decompress(self._input, READ_CHUNK)
            except zlib.error as error:
                meaning = next((m for k, m in _ZLIB_MEANING.items() if k in str(error)), "its gzip data is corrupt")
                raise _Refused(f"{meaning} (zlib: {error})") from None
            self._input = self._z.unused_data if self._z.eof else self._z.unconsumed_tail
            if out:
                self.count += len(out)
                if self.count > self.limit:
                    raise _Refused(
                        f"it makes the job read more than {self.limit:,} bytes of tar (--max-total-bytes counts "
                        "every byte unpacked: headers, skipped and refused members, padding)"
                    )
                self._buffer, self._at = out, 0
                return True

    def read(self, size: int) -> bytes:
        """Exactly ``size`` bytes, or fewer only where the tar stream ends."""
        parts: list[bytes] = []
        want = size
        while want > 0:
            available = len(self._buffer) - self._at
            if not available:
                if not self._more():
                    break
                continue
            take = min(want, available)
            parts.append(self._buffer[self._at : self._at + take])
            self._at += take
            want -= take
        out = parts[0] if len(parts) == 1 else b"".join(parts)
        self.position += len(out)
        return out

    def skip(self, size: int) -> None:
        while size > 0:
            chunk = self.read(min(size, READ_CHUNK))
            if not chunk:
                raise _Refused("it ends inside a member")
            size -= len(chunk)

    def finish(self) -> None:
        """Read to the end: only zeros may follow the end-of-archive block, and the gzip trailer must check."""
        while True:
            chunk = self.read(READ_CHUNK)
            if not chunk:
                return
            if chunk.count(0) != len(chunk):
                raise _Refused("it has data after the tar end-of-archive block")


BLOCK = 512
# Header fields (POSIX pax, ustar Interchange Format: name 0-100, size 124-136, chksum 148-156, typeflag 156,
# magic 257-263, prefix 345-500).
_USTAR_MAGIC = b"ustar\x0000"  # POSIX; GNU's "ustar  \0" uses the prefix field for other things
_FILE_TYPES = (b"0", b"\0", b"7")  # regular, old regular, contiguous (read as regular, like tarfile)
_EXTENSION_TYPES = {b"x": "a pax extended header", b"X": "a pax extended header", b"g": "a pax global header"}
_EXTENSION_TYPES.update({b"L": "a GNU long name", b"K": "a GNU long link name"})
_NO_DATA_KINDS = {b"1": "a hard link", b"2": "a symbolic link", b"3": "a device", b"4": "a device", b"6": "a FIFO"}
# pax keys that change which member follows or how its data is laid out: honoured in an extended header, refused
# in a global one (POSIX pax: a global header applies to every following member).
_PAX_MEMBER_KEYS = ("path", "linkpath", "size")


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _number(field: bytes, what: str) -> int:
    """An octal or GNU base-256 header number (0x80 first byte: positive, 0xff: negative, as tarfile.nti)."""
    if field[:1] == b"\xff":
        raise _Refused(f"a header has a negative {what} (base-256)")
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    if not all(48 <= c <= 55 for c in text):
        raise _Refused(f"a header's {what} {text[:20]!r} is not an octal number")
    return int(text, 8)


_LOW_BYTES = bytes(range(128))


def _checksum_ok(header: bytes) -> bool:
    stored = header[148:156].split(b"\0", 1)[0].strip(b" ")
    if not stored or not all(48 <= c <= 55 for c in stored):
        return False
    blanked = header[:148] + b" " * 8 + header[156:]
    unsigned = sum(blanked)
    signed = unsigned - 256 * len(blanked.translate(None, _LOW_BYTES))  # each byte over 127 counted negative
    return int(stored, 8) in (unsigned, signed)  # unsigned, or signed as some old tars wrote it (as tarfile)


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(f"{what} {raw[:60]!r} is not UTF-8") from None


def _pax_records(data: bytes) -> dict[str, str]:
    """``"<length> <key>=<value>\\n"`` records (POSIX pax, extended header); _Refused on any malformed one."""
    records: dict[str, str] = {}
    at = 0
    while at < len(data):
        if data[at:].strip(b"\0") == b"":
            break  # tarfile pads the last block with NULs
        space = data.find(b" ", at, at + 20)
        length_text = data[at:space] if space > at else b""
        if not length_text.isdigit() or int(length_text) < 5 or at + int(length_text) > len(data):
            raise _Refused(f"a pax header record at byte {at} has no valid length")
        record = data[space + 1 : at + int(length_text)]
        key, equals, value = record.partition(b"=")
        if not equals or not record.endswith(b"\n") or not key:
            raise _Refused(f"a pax header record at byte {at} is not 'key=value'")
        records[_text(key, "a pax key")] = _text(value[:-1], "a pax value")
        at += int(length_text)
    return records


@dataclass
class Entry:
    """One archive member as its headers describe it; only a file's data is ever handed out."""

    name: str
    kind: str  # "file", "folder" or what makes it unsafe ("a symbolic link", ...)
    size: int  # bytes of data that follow the header


def read_tar(stream: _Gunzip, max_members: int, max_header_bytes: int) -> Iterator[Entry]:
    """Each member of the tar ``stream`` in order, retaining nothing; a file's data is read from ``stream`` by the
    caller before the next member is asked for (what it leaves is skipped).

    Refused as soon as its header is read: a negative, malformed or bounds-breaking size, an unknown, sparse or
    data-carrying link type, a name over S3's key length, more than ``max_members`` members, or more than
    ``max_header_bytes`` of extension records (pax extended and global headers, GNU long names) in all.
    """
    members = 0
    header_bytes = 0
    pending: dict[str, str] = {}  # what the extension records before this member set for it
    while True:
        header = stream.read(BLOCK)
        if not header or header.count(0) == BLOCK:
            stream.finish()  # end of archive (or of stream): zeros only, then a checked gzip trailer
            return
        if len(header) < BLOCK:
            raise _Refused("it ends inside a tar header")
        if not _checksum_ok(header):
            raise _Refused(
                f"it is not a readable gzip-compressed tar: the header at byte {stream.position - BLOCK:,} "
                "has a bad checksum"
            )
        kind_flag = header[156:157]
        size = _number(header[124:136], "size")
        if kind_flag in _EXTENSION_TYPES:
            what = _EXTENSION_TYPES[kind_flag]
            if size > MAX_HEADER_EXTENSION:
                raise _Refused(f"{what} (a tar header extension) of {size:,} bytes (over {MAX_HEADER_EXTENSION:,})")
            header_bytes += BLOCK + _padded(size)
            if header_bytes > max_header_bytes:
                raise _Refused(
                    f"its tar header extensions (pax extended and global headers, GNU long names) hold more than "
                    f"{max_header_bytes:,} bytes in all"
                )
            data = stream.read(_padded(size))
            if len(data) < _padded(size):
                raise _Refused("it ends inside a tar header extension")
            data = data[:size]
            if kind_flag in (b"L", b"K"):
                pending["path" if kind_flag == b"L" else "linkpath"] = _text(data.split(b"\0", 1)[0], "a long name")
                continue
            records = _pax_records(data)
            sparse = any(k.startswith("GNU.sparse.") for k in records)
            if kind_flag == b"g":
                setting = [k for k in records if k in _PAX_MEMBER_KEYS] + (["GNU.sparse.*"] if sparse else [])
                if setting:
                    raise _Refused(f"a pax global header sets {', '.join(setting)} for every member that follows")
                continue  # comment, mtime, charset...: nothing the staged files depend on
            if sparse:
                records["sparse"] = "1"
            pending.update(records)
            continue
        members += 1
        if members > max_members:
            raise _Refused(f"it has more than {max_members:,} members (--max-members)")
        raw_name = header[0:100].split(b"\0", 1)[0]
        prefix = header[345:500].split(b"\0", 1)[0] if header[257:265] == _USTAR_MAGIC else b""
        name = pending.get("path") or _text(prefix + b"/" + raw_name if prefix else raw_name, "a member name")
        if "size" in pending:
            if not pending["size"].isdigit():
                raise _Refused(f"{name[:200]!r}: its pax size {pending['size'][:40]!r} is not a number")
            size = int(pending["size"])
        sparse = "sparse" in pending
        pending = {}
        shown = repr(name[:200])
        if len(name.encode("utf-8")) > MAX_KEY_BYTES:
            raise _Refused(f"a member name of {len(name.encode('utf-8')):,} bytes (S3 keys hold {MAX_KEY_BYTES:,})")
        if stream.position + _padded(size) > stream.limit:
            raise _Refused(
                f"{shown} holds {size:,} bytes: the archive would make the job read more than "
                f"{stream.limit:,} bytes of tar (--max-total-bytes)"
            )
        if kind_flag == b"S" or sparse:
            raise _Refused(f"{shown} is a sparse file (its data is not stored as it is read back)")
        if kind_flag in _FILE_TYPES and not (kind_flag == b"\0" and name.endswith("/")):
            entry = Entry(_name(name), "file", size)
        elif kind_flag in (b"5", b"\0"):
            entry = Entry(_name(name.rstrip("/")), "folder", size)
        elif kind_flag in _NO_DATA_KINDS:
            entry = Entry(_name(name), _NO_DATA_KINDS[kind_flag], size)
        else:
            raise _Refused(f"{shown} has an unknown member type {kind_flag!r} (regular files and folders only)")
        if entry.kind != "file" and size:
            raise _Refused(f"{shown} is {'a folder' if entry.kind == 'folder' else entry.kind} with {size:,} bytes")
        before = stream.position
        yield entry
        stream.skip(_padded(size) - (stream.position - before))


class SourceReader:
    """A file-like view of the archive for tarfile: one GET stream, resumed by a ranged GET after a drop.

    Every GET carries ``If-Match: <etag>`` (S3 answers 412 PreconditionFailed once the key holds another
    object: S3 API, GetObject), so the two passes and every resumption read the same bytes.
    """

    def __init__(self, run: TarballRun) -> None:
        self.run = run
        self.position = 0
        self._body: Any = None

    def _open(self) -> None:
        run = self.run
        request: dict[str, Any] = {"Bucket": run.source_bucket, "Key": run.source_key, "IfMatch": f'"{run.etag}"'}
        if self.position:
            request["Range"] = f"bytes={self.position}-"
        self._body = run.s3.get_object(**request)["Body"]

    def read(self, size: int = -1) -> bytes:
        run = self.run
        if self.position >= run.source_size or size == 0:  # read(0) is b"", as for any file object (io docs)
            return b""
        size = READ_CHUNK if size is None or size < 0 else min(size, READ_CHUNK)
        for attempt in range(1, run.max_attempts + 1):
            if run.stop.is_set():
                raise Failure(EXIT_TRANSFER, "stopped before the archive was read")
            try:
                if self._body is None:
                    self._open()
                data = self._body.read(size)
                if not data:
                    raise ConnectionError(f"the stream ended at byte {self.position:,} of {run.source_size:,}")
                self.position += len(data)
                return data
            except Exception as error:  # botocore ClientError, urllib3 read errors, a short stream
                self.close()
                status = _status(error)
                if status == 412:
                    raise SourceChanged("If-Match failed") from None  # the caller names the archive and the read
                if status in (403, 404) or attempt == run.max_attempts:
                    raise Failure(
                        EXIT_TRANSFER, f"reading {run.source_uri} at byte {self.position:,}: {_describe(error)}"
                    ) from None
                delay = backoff_delay(attempt, run.retry_base_s, 30.0)
                run.log.emit(
                    "retry",
                    what="archive",
                    at_byte=self.position,
                    attempt=attempt + 1,
                    wait_s=delay,
                    reason=_describe(error),
                )
                run.stop.wait(delay)
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._body is not None:
            # A broken connection may fail to close; the next read opens a new one.
            with contextlib.suppress(Exception):
                self._body.close()
        self._body = None


def _status(error: Exception) -> int | None:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = str(response.get("Error", {}).get("Code", ""))
        if code == "PreconditionFailed":
            return 412
        return int(status) if status else None
    return None


def _describe(error: Exception) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
    # No S3 answer (a reset, a read timeout, a stream that ended early): its class, and its first line, cut, which
    # says where it happened ("the stream ended at byte ...").
    said = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    return f"{type(error).__name__}: {said}" if said else type(error).__name__


@dataclass
class Member:
    name: str  # as the archive names it, after a leading "./"
    kind: str  # "file", "folder" or what makes it unsafe ("a symbolic link", ...)
    size: int = 0
    sha256: str = ""


@dataclass
class Layout:
    files: list[HubFile] = field(default_factory=list)  # path relative to the prefix, size, sha256 as blob id
    source_names: dict[str, str] = field(default_factory=dict)  # archive name -> path
    stripped: str | None = None  # the single top-level folder unpacked from, if any


def _name(raw: str) -> str:
    while raw.startswith("./"):
        raw = raw[2:]
    return "" if raw == "." else raw


def _bytes(stream: Any, size: int, stop: threading.Event) -> Any:
    """Yield the ``size`` bytes of a member in chunks of at most READ_CHUNK."""
    left = size
    while left > 0:
        if stop.is_set():
            raise Failure(EXIT_TRANSFER, "stopped before the archive was read")
        chunk = stream.read(min(READ_CHUNK, left))
        if not chunk:
            raise _Refused("it ends inside a member")
        left -= len(chunk)
        yield chunk


def plan_layout(members: list[Member], prefix: str) -> Layout:
    """Where each file goes under ``prefix``; _Refused naming every member that cannot be staged."""
    problems: list[tuple[object, str]] = []
    for m in members:
        if m.kind not in ("file", "folder"):
            problems.append((m.name, m.kind))
        elif m.name:
            reason = path_problem(m.name)
            if reason:
                problems.append((m.name, reason))
    if problems:
        raise _Refused(
            format_refusal(
                f"{len(problems)} of the {len(members)} members", problems, "repack the archive without them"
            )
        )
    named = [m for m in members if m.name]
    tops = {m.name.partition("/")[0] for m in named}
    root_files = [m for m in named if m.kind == "file" and "/" not in m.name]
    layout = Layout()
    if len(tops) == 1 and not root_files:
        # One top folder and no file beside it: unpacked from inside it. Every name is then that folder ("") or
        # under it ("<top>/...").
        layout.stripped = next(iter(tops))
    folders = set()
    for m in named:
        path = m.name if layout.stripped is None else m.name[len(layout.stripped) + 1 :]
        if m.kind == "folder":
            if path:
                folders.add(path)
            continue
        layout.files.append(HubFile(path=path, size=m.size, blob_id=m.sha256, sha256=m.sha256))
        layout.source_names[m.name] = path
    paths = [f.path for f in layout.files]
    problems = unsafe_paths(paths, prefix)
    problems += [(p, "both a file and a folder") for p in paths if p in folders]
    if problems:
        raise _Refused(
            format_refusal(
                f"{len(problems)} of the {len(members)} members", problems, "repack the archive without them"
            )
        )
    if not layout.files:
        raise _Refused("the archive holds no regular file")
    return layout


class TarballRun:
    def __init__(self, args: argparse.Namespace, log: Any, stop: threading.Event, s3: Any) -> None:
        self.args = args
        self.log = log
        self.stop = stop
        self.s3 = s3
        self.source_uri = args.source_s3_uri
        self.source_bucket, self.source_key = parse_source(args.source_s3_uri)
        self.max_attempts = args.max_attempts
        self.retry_base_s = args.retry_base_s
        self.part_size = args.part_size_mib * MiB
        self.etag = ""
        self.source_size = 0

    def call(self, action: str, fn: Any, *a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except (Failure, SourceChanged, _Refused):
            raise
        except Exception as error:
            raise Failure(EXIT_TRANSFER, f"{action}: {_describe(error)}") from None

    def execute(self) -> dict[str, Any]:
        args = self.args
        try:
            head = self.s3.head_object(Bucket=self.source_bucket, Key=self.source_key)
        except Exception as error:
            status = _status(error)
            code = EXIT_SOURCE if status in (403, 404) else EXIT_TRANSFER
            hint = "; the job role needs s3:GetObject on it (and kms:Decrypt for SSE-KMS)" if status == 403 else ""
            raise Failure(code, f"cannot read {self.source_uri}: {_describe(error)}{hint}") from None
        self.etag = normal_etag(str(head.get("ETag", "")))
        self.source_size = int(head["ContentLength"])
        if args.source_etag and normal_etag(args.source_etag) != self.etag:
            raise Failure(
                EXIT_SOURCE,
                f"{self.source_uri} has ETag {self.etag}, not the planned {normal_etag(args.source_etag)}: "
                "it was replaced; redeploy to stage the new archive",
            )
        prefix = tarball_prefix(args.prefix, self.source_uri, self.etag)
        where = f"s3://{args.bucket}/{prefix}"
        self.log.emit("resolved", source=self.source_uri, etag=self.etag, bytes=self.source_size, destination=where)
        summary: dict[str, Any] = {"files": 0, "uploaded": 0, "skipped": 0, "bytes_uploaded": 0}
        if self._up_to_date(prefix, where, summary):
            return summary

        # Pass 1: every member checked, every file hashed; nothing written.
        members = self._scan()
        try:
            layout = plan_layout(members, prefix)
        except _Refused as error:
            raise Failure(EXIT_SOURCE, f"refused before any upload: {error}") from None
        selected = select_files(layout.files, args.include, args.exclude)
        if not selected:
            raise Failure(
                EXIT_USAGE,
                f"no file of {self.source_uri} matches include {args.include or ['*']} and exclude {args.exclude}",
            )
        if len(selected) < len(layout.files):
            self.log.emit("selected", files=len(selected), of=len(layout.files), exclude=args.exclude)
            layout.files = selected
        for f in layout.files:
            try:
                part_size_for(f.size, self.part_size)
            except ValueError as error:
                raise Failure(EXIT_SOURCE, f"{f.path} cannot be one S3 object: {error}") from None
        total = sum(f.size for f in layout.files)
        self.log.emit(
            "plan", destination=where, files=len(layout.files), bytes=total, unpacked_from=layout.stripped or "/"
        )
        todo = self.call(
            f"checking objects under {where}",
            missing_files,
            self.s3,
            args.bucket,
            prefix,
            self.source_uri,
            self.etag,
            layout.files,
        )
        summary.update(files=len(layout.files), skipped=len(layout.files) - len(todo))
        if todo:
            self._write(layout, prefix, {f.path for f in todo})
            summary.update(uploaded=len(todo), bytes_uploaded=sum(f.size for f in todo))
        manifest = build_manifest(self.source_uri, self.etag, layout.files, source=self.source_uri)
        manifest["archive"] = {
            "uri": self.source_uri,
            "etag": self.etag,
            "bytes": self.source_size,
            "unpacked_from": layout.stripped or "",
            "include": list(args.include),
            "exclude": list(args.exclude),
        }
        self.call(f"writing the manifest in {where}", write_manifest, self.s3, args.bucket, prefix, manifest)
        self.log.emit("manifest", destination=where, files=len(layout.files), total_bytes=manifest["total_bytes"])
        summary["manifest"] = "written"
        return summary

    def _existing_manifest(self, prefix: str) -> Any:
        """The manifest at ``prefix``; None when there is none or it is unreadable (with a warning: the run
        writes a new one). Other errors are raised, for ``call`` to name."""
        try:
            return read_manifest(self.s3, self.args.bucket, prefix)
        except ValueError as error:
            self.log.emit("warning", reason=f"existing manifest ignored: {error}")
            return None

    def _up_to_date(self, prefix: str, where: str, summary: dict[str, Any]) -> bool:
        # Read inside ``call``, whose catch-all turned an unreadable manifest into a failed run before.
        manifest = self.call(f"reading {where}", self._existing_manifest, prefix)
        args = self.args
        files = list(manifest_files(manifest, self.source_uri, self.etag, prefix, args.include, args.exclude))
        if not files:
            return False
        missing = self.call(
            f"checking objects under {where}",
            missing_files,
            self.s3,
            self.args.bucket,
            prefix,
            self.source_uri,
            self.etag,
            files,
        )
        if missing:
            return False
        self.log.emit("up_to_date", destination=where, files=len(files), reason="manifest and every object match")
        summary.update(files=len(files), skipped=len(files), manifest="unchanged")
        return True

    def _entries(self, reader: SourceReader) -> tuple[_Gunzip, Iterator[Entry]]:
        stream = _Gunzip(reader, self.args.max_total_bytes, self.stop)
        return stream, read_tar(stream, self.args.max_members, self.args.max_header_bytes)

    def _scan(self) -> list[Member]:
        members: list[Member] = []
        reader = SourceReader(self)
        try:
            if self.source_size > self.args.max_total_bytes:
                limit = self.args.max_total_bytes
                raise _Refused(f"it is {self.source_size:,} bytes, over --max-total-bytes {limit:,}")
            stream, entries = self._entries(reader)
            for entry in entries:
                member = Member(name=entry.name, kind=entry.kind, size=entry.size)
                if entry.kind == "file":
                    digest = hashlib.sha256()
                    for chunk in _bytes(stream, entry.size, self.stop):
                        digest.update(chunk)
                    member.sha256 = digest.hexdigest()
                members.append(member)
        except _Refused as error:
            raise Failure(EXIT_SOURCE, f"refused before any upload: {self.source_uri}: {error}") from None
        except SourceChanged as error:
            raise Failure(EXIT_SOURCE, f"{self.source_uri} changed while it was read ({error})") from None
        finally:
            reader.close()
        return members

    def _write(self, layout: Layout, prefix: str, todo: set[str]) -> None:
        reader = SourceReader(self)
        by_path = {f.path: f for f in layout.files}
        done: set[str] = set()
        try:
            stream, entries = self._entries(reader)
            for entry in entries:
                path = layout.source_names.get(entry.name) if entry.kind == "file" else None
                if path is None or path not in todo:
                    continue  # read_tar skips the member's data when the next member is asked for
                if entry.size != by_path[path].size or path in done:
                    first = by_path[path].size
                    raise SourceChanged(f"{path}: {entry.size:,} bytes on the second read, {first:,} on the first")
                self._upload(stream, by_path[path], prefix)
                done.add(path)
            if done != todo:
                raise SourceChanged(f"{len(todo - done)} of its files were not in it on the second read")
        except (_Refused, SourceChanged) as error:
            raise Failure(
                EXIT_SOURCE, f"{self.source_uri} changed between the two reads ({error}); rerun to stage it again"
            ) from None
        finally:
            reader.close()

    def _upload(self, stream: Any, file: HubFile, prefix: str) -> None:
        bucket, key = self.args.bucket, prefix + file.path
        metadata = object_metadata(file, self.source_uri, self.etag)
        sink = StreamedObject(
            self.s3,
            bucket,
            key,
            part_size_for(file.size, self.part_size),
            metadata,
            CONTENT_TYPE,
            call=lambda action, fn, **kwargs: self.call(action, fn, **kwargs),
        )
        started = time.monotonic()
        try:
            for data in _bytes(stream, file.size, self.stop):
                sink.write(data)
            self._check(sink.sha256, file)  # before the object is complete: a changed archive writes nothing
            sink.finish()
        except BaseException:
            sink.abort()
            raise
        self.log.emit("done", path=file.path, size=file.size, seconds=time.monotonic() - started)

    def _check(self, digest: Any, file: HubFile) -> None:
        if digest.hexdigest() != file.sha256:
            raise SourceChanged(
                f"{file.path}: SHA-256 {digest.hexdigest()} on the second read, {file.sha256} on the first"
            )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(FLAG, dest="source_s3_uri", required=True, help="s3://bucket/key.tar.gz: a gzip-compressed tar to unpack")
    add("--source-etag", help="the ETag the archive must have (the staging handler passes the one it planned with)")
    add("--destination", required=True, help="s3://bucket/prefix/: files go to <prefix>/s3-tarball--<hash>/<etag>/")
    add("--include", action="append", help="glob of archive files to unpack (repeatable, or one JSON array)")
    add("--exclude", action="append", help="glob of archive files to leave out (repeatable, or one JSON array)")
    add("--part-size-mib", type=int, default=64, help="multipart part size in MiB, 5-5120 (default 64; one in memory)")
    add(
        "--max-members",
        type=int,
        default=DEFAULT_MAX_MEMBERS,
        help=f"most archive members (default {DEFAULT_MAX_MEMBERS:,})",
    )
    add(
        "--max-total-bytes",
        type=int,
        default=DEFAULT_MAX_TOTAL_BYTES,
        help="most bytes of tar the archive unpacks to: every member's data, headers, padding (default 2 TiB)",
    )
    add(
        "--max-header-bytes",
        type=int,
        default=DEFAULT_MAX_HEADER_BYTES,
        help="most bytes of pax extended/global headers and GNU long names in all (default 32 MiB)",
    )
    add("--max-attempts", type=int, default=5, help="attempts per read of the archive before the run fails")
    add("--retry-base-s", type=float, default=1.0, help="first retry delay; doubles each attempt (default 1)")
    add("--resource-config", help="host list of a multi-instance job: hosts other than the first do nothing")
    add("--progress-interval-s", type=float, default=10.0, help="accepted for the Hub worker's flags; unused")
    add("--failure-file", help=FAILURE_FILE_HELP)


def _archive_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    try:
        parse_source(args.source_s3_uri)
    except ValueError as error:
        problems.append(f"{FLAG} {error}")
    if args.source_etag:
        try:
            normal_etag(args.source_etag)
        except ValueError as error:
            problems.append(f"--source-etag: {error}")
    return problems


def parse_args(argv: list[str], prog: str | None = None) -> argparse.Namespace:
    parser = UsageParser(prog=prog, description="Unpack a model.tar.gz in S3 into a verified prefix.")
    add_arguments(parser)
    return parse_arguments(
        parser,
        argv,
        _archive_problems,
        counts=("max_members", "max_total_bytes", "max_header_bytes", "max_attempts"),
        durations=("retry_base_s",),
    )


def main(argv: list[str], *, s3_client: Any = None, prog: str | None = None) -> int:
    """The archive mode (the command line, hfstage.worker.main, hands over when ``--source-s3-uri`` is given)."""

    def unpack(guard: Guard) -> int:
        args = parse_args(argv, prog)
        guard.failure_file = args.failure_file or guard.failure_file
        guard.label = f"unpacking {args.source_s3_uri}"
        if args.resource_config:
            try:
                current, hosts = read_hosts(args.resource_config)
            except ValueError as error:
                raise Failure(EXIT_USAGE, str(error)) from None
            if current != leader(hosts):
                # One stream cannot be shared out: the first host does the work, the others are done at once.
                guard.log.emit(
                    "summary", status="ok", host=current, reason="an archive is unpacked by the first host only"
                )
                return EXIT_OK
        s3 = s3_client if s3_client is not None else make_s3_client(Settings(parts_in_flight=2, files_in_flight=1))
        guard.log.emit(
            "begin", source=args.source_s3_uri, destination=args.destination, part_size_mib=args.part_size_mib
        )
        return guard.done(TarballRun(args, guard.log, guard.stop, s3).execute())

    def changed(error: BaseException, guard: Guard) -> tuple[str, int]:
        return f"the archive changed while it was read ({error}); rerun to stage the new archive", EXIT_SOURCE

    return guarded_run("unpacking the archive", unpack, {SourceChanged: changed})
