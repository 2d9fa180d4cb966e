"""Hostile ``model.tar.gz`` archives (issue 34, items 2, 6 and 12) against the staging worker's tarball mode.

Unit level: the streaming gunzip and tar header reader (hfstage.tarball._Gunzip, read_tar) over raw bytes
built here block by block, so that each field can be made hostile. Memory: a small archive of pax global
headers, 100,000 tiny members or a chain of GNU long names keeps tracemalloc's peak under a few MiB and is
refused naming the limit. Members: a negative (base-256) size, a bad gzip CRC-32 or length, a missing
trailer, an unknown-type or sparse member (refused at its header, its data never decompressed), data after
the end-of-archive block. End to end (moto's S3 over HTTP): each is refused with no object, no manifest and
no open multipart upload, and a store that serves other bytes under the same ETag on the second read is
refused before the changed object is completed.
"""

from __future__ import annotations

import gzip
import io
import random
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from hfstage.manifest import MANIFEST_NAME
from hfstage.tarball import (
    DEFAULT_MAX_HEADER_BYTES,
    MAX_HEADER_EXTENSION,
    Entry,
    _Gunzip,
    _Refused,
    read_tar,
)
from tests.fakes.fixtures import S3Env, s3  # noqa: F401

MiB = 1024 * 1024
SOURCE_KEY = "job-1/output/model.tar.gz"


def header(name: bytes = b"f", kind: bytes = b"0", size: int = 0, size_field: bytes | None = None) -> bytes:
    """One ustar header block with a valid checksum."""
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = block[116:124] = b"0000000\0"
    block[124:136] = size_field if size_field is not None else b"%011o\0" % size
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + len(str(len(body)))
    length = len(body) + len(str(length))
    return str(length).encode() + body


def extension(kind: bytes, data: bytes) -> bytes:
    return header(b"././@PaxHeader", kind, len(data)) + padded(data)


def regular(name: bytes, data: bytes) -> bytes:
    return header(name, b"0", len(data)) + padded(data)


END = b"\0" * 1024


def gz(*parts: bytes, level: int = 6) -> bytes:
    return gzip.compress(b"".join(parts) + END, compresslevel=level)


def scan(data: bytes, members: int = 10_000, total: int = 2**40, headers: int = DEFAULT_MAX_HEADER_BYTES) -> Any:
    """Read every member as the worker's first pass does; (entries with their data, bytes decompressed)."""
    stream = _Gunzip(io.BytesIO(data), total, threading.Event())
    out: list[tuple[Entry, bytes]] = []
    for entry in read_tar(stream, members, headers):
        out.append((entry, stream.read(entry.size) if entry.kind == "file" else b""))
    return out, stream.count


def refused(data: bytes, **limits: int) -> tuple[str, int]:
    stream = _Gunzip(io.BytesIO(data), limits.get("total", 2**40), threading.Event())
    with pytest.raises(_Refused) as caught:
        for entry in read_tar(stream, limits.get("members", 10_000), limits.get("headers", DEFAULT_MAX_HEADER_BYTES)):
            if entry.kind == "file":
                stream.read(entry.size)
    return str(caught.value), stream.count


def peak_mib(data: bytes, **limits: int) -> tuple[str, float]:
    tracemalloc.start()
    try:
        message, _ = refused(data, **limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return message, peak / MiB


# ---- the reader accepts what it should ------------------------------------------------------------------


def test_a_plain_archive_reads_back_with_pax_names_and_base256_sizes() -> None:
    long_name = "folder/" + "n" * 300 + ".bin"
    data = gz(
        extension(b"g", record("comment", "git archive commit")),
        regular(b"config.json", b"{}"),
        extension(b"x", record("path", long_name)),
        regular(b"ignored", b"abc"),
        extension(b"L", long_name.replace("n", "m").encode() + b"\0"),
        regular(b"also-ignored", b""),
        header(b"five", b"0", size_field=b"\x80" + (5).to_bytes(11, "big")) + padded(b"12345"),
        header(b"dir/", b"5"),
        regular("modèle.bin".encode(), b"\xc3"),  # bytes over 127 in the header's checksum
    )
    entries, count = scan(data)
    assert [(e.name, e.kind, e.size, d) for e, d in entries] == [
        ("config.json", "file", 2, b"{}"),
        (long_name, "file", 3, b"abc"),
        (long_name.replace("n", "m"), "file", 0, b""),
        ("five", "file", 5, b"12345"),
        ("dir", "folder", 0, b""),
        ("modèle.bin", "file", 1, b"\xc3"),
    ]
    assert count == len(gzip.decompress(data))  # every byte read, to the trailer


def test_concatenated_gzip_members_are_one_stream() -> None:
    raw = regular(b"a", b"x" * 700) + END
    data = gzip.compress(raw[:600]) + gzip.compress(raw[600:])  # RFC 1952 2.2: a series of members
    entries, _ = scan(data)
    assert [(e.name, d) for e, d in entries] == [("a", b"x" * 700)]


# ---- item 2: headers cannot exhaust memory ---------------------------------------------------------------


def test_many_pax_global_headers_stay_small_and_are_refused_by_the_header_cap() -> None:
    one = extension(b"g", record("comment", "c" * 16_000))  # 16 KiB each
    count = DEFAULT_MAX_HEADER_BYTES // len(one) + 1
    data = gzip.compress(one * count + regular(b"config.json", b"{}") + END, compresslevel=1)
    assert len(data) < MiB  # a small archive
    message, peak = peak_mib(data)
    assert f"more than {DEFAULT_MAX_HEADER_BYTES:,} bytes in all" in message
    assert "pax extended and global headers, GNU long names" in message
    assert peak < 6, peak  # tarfile copied each global header onto every member and kept them all


def test_exactly_the_header_cap_is_read() -> None:
    one = extension(b"g", record("comment", "c" * 400))
    cap = 10 * len(one)
    entries, _ = scan(gz(one * 10, regular(b"a", b"1")), headers=cap)
    assert [e.name for e, _ in entries] == ["a"]
    message, _ = refused(gz(one * 11, regular(b"a", b"1")), headers=cap)
    assert f"more than {cap:,} bytes" in message


def test_100k_tiny_members_stay_small_and_are_refused_by_the_member_cap() -> None:
    data = gzip.compress(regular(b"tiny", b"x") * 100_000 + END, compresslevel=1)
    assert len(data) < MiB
    message, peak = peak_mib(data)
    assert "more than 10,000 members (--max-members)" in message
    assert peak < 6, peak


def test_a_chain_of_gnu_long_names_stays_small_and_is_refused() -> None:
    link = extension(b"L", b"a" * (MAX_HEADER_EXTENSION - 1) + b"\0")  # the largest one record may be
    count = DEFAULT_MAX_HEADER_BYTES // len(link) + 1
    data = gzip.compress(link * count + regular(b"x", b"") + END, compresslevel=1)
    assert len(data) < MiB
    message, peak = peak_mib(data)
    assert f"more than {DEFAULT_MAX_HEADER_BYTES:,} bytes in all" in message
    assert peak < 8, peak  # one record (1 MiB) and one chunk in and out at a time


def test_one_extension_record_over_1_mib_is_refused_unread() -> None:
    message, count = refused(gz(header(b"././@LongLink", b"L", MAX_HEADER_EXTENSION + 1)))
    assert f"over {MAX_HEADER_EXTENSION:,}" in message
    assert count < 2048  # its data was never asked for


def test_a_member_name_over_s3s_key_limit_is_refused_at_its_header() -> None:
    message, _ = refused(gz(extension(b"x", record("path", "a" * 1025)), regular(b"a", b"")))
    assert "a member name of 1,025 bytes (S3 keys hold 1,024)" in message


def test_a_global_header_that_renames_every_member_is_refused() -> None:
    message, _ = refused(gz(extension(b"g", record("path", "x.bin")), regular(b"a", b"1")))
    assert "a pax global header sets path" in message


@pytest.mark.parametrize(
    "bad",
    [b"7 path\n", b"99 path=a\n", b"x path=a\n", b"6 =ab\n"],
)
def test_malformed_pax_records_are_refused(bad: bytes) -> None:
    message, _ = refused(gz(extension(b"x", bad), regular(b"a", b"")))
    assert "pax header record at byte 0" in message


# ---- item 6: members -------------------------------------------------------------------------------------


NEGATIVE = header(b"neg.bin", b"0", size_field=b"\xff" * 12)  # base-256 -1


def test_a_negative_base256_size_is_refused() -> None:
    message, _ = refused(gz(regular(b"config.json", b"{}"), NEGATIVE))
    assert "a negative size (base-256)" in message


def test_a_negative_pax_size_is_refused() -> None:
    message, _ = refused(gz(extension(b"x", record("size", "-5")), regular(b"a", b"")))
    assert "its pax size '-5' is not a number" in message


def test_a_bad_gzip_crc_is_refused() -> None:
    data = bytearray(gz(regular(b"config.json", b"{}")))
    data[-8] ^= 1  # the CRC-32 (RFC 1952: CRC32, then ISIZE, little-endian)
    message, _ = refused(bytes(data))
    assert "gzip CRC-32 does not match" in message


def test_a_bad_gzip_length_is_refused() -> None:
    data = bytearray(gz(regular(b"config.json", b"{}")))
    data[-4] ^= 1
    message, _ = refused(bytes(data))
    assert "gzip trailer's length does not match" in message


@pytest.mark.parametrize("cut", [1, 4, 8])
def test_a_missing_gzip_trailer_is_refused(cut: int) -> None:
    message, _ = refused(gz(regular(b"config.json", b"{}"))[:-cut])
    assert "without the 8-byte trailer" in message


@pytest.mark.parametrize(
    ("kind", "reason"),
    [(b"V", "an unknown member type b'V'"), (b"D", "an unknown member type b'D'"), (b"S", "a sparse file")],
)
def test_unknown_and_sparse_members_are_refused_before_their_data(kind: bytes, reason: str) -> None:
    data = gz(header(b"m", kind, 50 * MiB), random.Random(1).randbytes(4 * MiB), level=1)
    message, count = refused(data)
    assert reason in message and "'m'" in message
    assert count < 2 * MiB  # one chunk of readahead at most: the 4 MiB that follow were never decompressed


def test_a_pax_sparse_member_is_refused() -> None:
    message, _ = refused(gz(extension(b"x", record("GNU.sparse.major", "1")), regular(b"m", b"1")))
    assert "'m' is a sparse file" in message


def test_a_link_with_data_is_refused() -> None:
    message, _ = refused(gz(header(b"l", b"2", 10), padded(b"0123456789")))
    assert "'l' is a symbolic link with 10 bytes" in message


def test_data_after_the_end_of_archive_is_refused() -> None:
    message, _ = refused(gz(regular(b"a", b""), END, regular(b"hidden", b"x")))
    assert message == "it has data after the tar end-of-archive block"


def test_max_total_bytes_counts_headers_padding_and_skipped_members() -> None:
    data = gz(extension(b"g", record("comment", "x")), header(b"l", b"2"), regular(b"a", b"1"))
    tar_bytes = len(gzip.decompress(data))
    assert scan(data, total=tar_bytes)[1] == tar_bytes
    message, _ = refused(data, total=tar_bytes - 1)
    assert f"more than {tar_bytes - 1:,} bytes of tar" in message


def test_a_member_larger_than_what_is_left_is_refused_before_its_data() -> None:
    data = gz(header(b"big", b"0", 100 * MiB), level=1)  # the 100 MiB never exist
    message, count = refused(data, total=10 * MiB)
    assert "'big' holds 104,857,600 bytes" in message and "--max-total-bytes" in message
    assert count < 2048  # the header and the end blocks: the 100 MiB were never asked for


# ---- end to end: refused before anything is completed ------------------------------------------------------


def run_worker(s3: S3Env, tmp_path: Path, data: bytes, *extra: str, client: Any = None) -> tuple[int, str]:  # noqa: F811
    from hfstage.worker import main

    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=data)
    message = tmp_path / "message"
    message.unlink(missing_ok=True)
    argv = [
        f"--source-s3-uri=s3://{s3.bucket}/{SOURCE_KEY}",
        f"--destination=s3://{s3.bucket}/models/",
        "--part-size-mib=5",
        "--retry-base-s=0.01",
        f"--failure-file={message}",
        *extra,
    ]
    code = main(argv, s3_client=client if client is not None else s3.worker_client()[0])
    return code, message.read_text() if message.exists() else ""


def crc_flipped(data: bytes) -> bytes:
    out = bytearray(data)
    out[-8] ^= 1
    return bytes(out)


CONFIG = regular(b"config.json", b'{"architectures": ["X"]}')
BIG = regular(b"model.safetensors", random.Random(2).randbytes(6 * MiB))
HOSTILE_E2E = {
    "negative-size": (gz(CONFIG, NEGATIVE), "a negative size"),
    "bad-crc": (crc_flipped(gz(CONFIG, BIG)), "CRC-32 does not match"),
    "no-trailer": (gz(CONFIG, BIG)[:-8], "without the 8-byte trailer"),
    "unknown-type": (gz(CONFIG, header(b"v", b"V", 0)), "an unknown member type"),
    "sparse": (gz(CONFIG, header(b"s", b"S", 0)), "a sparse file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_E2E))
def test_each_is_refused_with_nothing_written(s3: S3Env, tmp_path: Path, case: str) -> None:  # noqa: F811
    data, reason = HOSTILE_E2E[case]
    code, message = run_worker(s3, tmp_path, data)
    assert code == 3, message
    assert reason in message and "refused before any upload" in message
    assert s3.list_keys("models/") == []
    assert s3.open_uploads() == []


def test_max_total_bytes_counts_excluded_files_end_to_end(s3: S3Env, tmp_path: Path) -> None:  # noqa: F811
    data = gz(CONFIG, BIG, level=1)
    code, message = run_worker(s3, tmp_path, data, "--exclude=model.safetensors", f"--max-total-bytes={MiB}")
    assert code == 3 and "--max-total-bytes" in message
    assert s3.list_keys("models/") == []


class _OtherBytesOnTheSecondRead:
    """A store that serves the first GET of the archive as it is and later ones from ``other``, same ETag."""

    def __init__(self, client: Any, other: bytes) -> None:
        self._client, self._other, self.gets = client, other, 0

    def get_object(self, **request: Any) -> dict[str, Any]:
        response = self._client.get_object(**request)
        if request.get("Key") == SOURCE_KEY:
            self.gets += 1
            if self.gets > 1:
                start = int(str(request.get("Range", "bytes=0-"))[6:-1])
                response["Body"].close()
                response["Body"] = io.BytesIO(self._other[start:])
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_other_bytes_under_the_same_etag_on_the_second_read_complete_nothing(
    s3: S3Env,  # noqa: F811
    tmp_path: Path,
) -> None:
    weights = random.Random(3).randbytes(12 * MiB + 5)  # a multipart upload of three parts
    changed = weights[:-1] + bytes([weights[-1] ^ 1])  # same size, last byte other
    first = gz(CONFIG, regular(b"model.safetensors", weights), level=0)
    second = gz(CONFIG, regular(b"model.safetensors", changed), level=0)
    assert len(first) == len(second)
    client = _OtherBytesOnTheSecondRead(s3.worker_client()[0], second)
    code, message = run_worker(s3, tmp_path, first, client=client)
    assert code == 3, message
    assert client.gets >= 2
    assert "model.safetensors: SHA-256" in message and "changed between the two reads" in message
    keys = s3.list_keys("models/")
    assert not [k for k in keys if k.endswith(("model.safetensors", MANIFEST_NAME))]
    assert s3.open_uploads() == []  # the changed file's upload was aborted, not left open


def test_a_file_missing_on_the_second_read_writes_no_manifest(s3: S3Env, tmp_path: Path) -> None:  # noqa: F811
    first = gz(CONFIG, regular(b"tokenizer.json", b"{}"), level=0)
    second = gz(CONFIG, regular(b"tokenizer.jsoo", b"{}"), level=0)
    client = _OtherBytesOnTheSecondRead(s3.worker_client()[0], second)
    code, message = run_worker(s3, tmp_path, first, client=client)
    assert code == 3 and "1 of its files were not in it on the second read" in message
    assert not [k for k in s3.list_keys("models/") if k.endswith(MANIFEST_NAME)]
