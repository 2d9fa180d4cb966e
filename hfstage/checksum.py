"""The checksums S3 verifies on every part and object the worker writes: CRC64NVME when ``awscrt`` is there, else CRC32.

S3 checks a CRC64NVME, CRC32 or CRC32C checksum sent with each PutObject and UploadPart, and for a multipart upload
created with ``ChecksumType=FULL_OBJECT`` also the whole object's checksum given to CompleteMultipartUpload (S3 User
Guide, checking-object-integrity.html: full object checksums are offered for the CRC algorithms; CRC64NVME has
no other type; botocore's s3 model, CompleteMultipartUploadRequest.ChecksumCRC64NVME: "always a full object
checksum"). The worker computes each checksum while the bytes are in the CPU's cache (a chunk just read),
combines the chunks' and parts' values arithmetically (no second pass over the bytes), and so gives S3 both the
parts' and the object's checksum.

CRC64NVME comes from ``awscrt`` (the AWS Common Runtime, botocore's ``crt`` extra), which computes it with carry-less
multiplication instructions at about 0.01 CPU-s per GB of cached bytes; zlib's CRC32 costs about 0.2 (both measured on
the development machine, docs/guide/staging.md). ``awscrt`` is a C extension: the staging code asset carries it (see
``vendored``), and the worker falls back to zlib's CRC32 where it cannot be loaded (another architecture), which S3
verifies just as well.
"""

from __future__ import annotations

import base64
import functools
import importlib
import importlib.machinery
import importlib.util
import os
import platform
import sys
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FULL_OBJECT = "FULL_OBJECT"
_CRC32_POLY = 0xEDB88320  # reflected CRC-32 (ISO-HDLC) polynomial, the one zlib.crc32 computes


@dataclass(frozen=True)
class Algorithm:
    """One of S3's checksum algorithms: its API name, its width and how to compute and combine its values."""

    name: str  # S3's ChecksumAlgorithm value
    width: int  # bytes of the big-endian value S3 carries base64-encoded
    compute: Callable[[Any, int], int]  # (bytes-like, previous value) -> value
    combine: Callable[[int, int, int], int]  # (value of A, value of B, len(B)) -> value of A + B

    @property
    def field(self) -> str:
        """The request and response member carrying it (``ChecksumCRC64NVME``)."""
        return "Checksum" + self.name

    def encode(self, value: int) -> str:
        return base64.b64encode(value.to_bytes(self.width, "big")).decode()

    def decode(self, text: str) -> int:
        """The value of a base64 checksum S3 listed; ValueError when it is not one of this algorithm's."""
        raw = base64.b64decode(text.encode(), validate=True)
        if len(raw) != self.width:
            raise ValueError(f"a {self.name} checksum has {self.width} bytes, not {len(raw)}")
        return int.from_bytes(raw, "big")

    def of(self, data: Any) -> str:
        """The base64 checksum of ``data``."""
        return self.encode(self.compute(data, 0))


def _gf2_apply(matrix: tuple[int, ...], vector: int) -> int:
    result, row = 0, 0
    while vector:
        if vector & 1:
            result ^= matrix[row]
        vector >>= 1
        row += 1
    return result


def _gf2_square(matrix: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_gf2_apply(matrix, column) for column in matrix)


@functools.lru_cache(maxsize=64)
def _crc32_shift(length: int) -> tuple[int, ...]:
    """The linear map (over GF(2)) that appending ``length`` zero bytes applies to a CRC-32 register."""
    power = (_CRC32_POLY, *(1 << bit for bit in range(31)))  # one zero bit
    for _ in range(3):  # 2, 4, then 8 bits: one zero byte
        power = _gf2_square(power)
    shift = tuple(1 << bit for bit in range(32))  # identity
    while length:
        if length & 1:
            shift = tuple(_gf2_apply(power, column) for column in shift)
        length >>= 1
        if length:
            power = _gf2_square(power)
    return shift


def crc32_combine(first: int, second: int, second_length: int) -> int:
    """CRC-32 of A + B from CRC-32(A), CRC-32(B) and len(B): CRC is affine, so CRC(A + B) = shift(CRC(A)) ^ CRC(B),
    where shift appends len(B) zero bytes to A's register (the identity zlib's crc32_combine is built on)."""
    if second_length <= 0:
        return first
    return _gf2_apply(_crc32_shift(second_length), first) ^ second


CRC32 = Algorithm("CRC32", 4, lambda data, previous=0: zlib.crc32(data, previous), crc32_combine)


VENDOR_DIR = "_vendor"  # in the staging code asset: awscrt's package and C extension (constructs_lib/runtime_code.py)
EXTENSION = "_awscrt"


def load_vendored(archive: str | None = None) -> str | None:
    """Make the ``awscrt`` inside the worker's code asset importable; why not, or None when it is.

    The asset is a zip run by ``python3 <asset> ...``: zipimport reads pure-Python modules from it but cannot load a
    C extension (Python docs, zipimport). So the extension's bytes go into an anonymous in-memory file (memfd_create,
    Linux 3.17+) loaded by its /proc/self/fd path: nothing is written to disk. ``archive``: the zip (default: the
    one this module was imported from)."""
    if EXTENSION in sys.modules:
        return None
    if archive is None:
        loader = globals().get("__loader__")
        archive = getattr(loader, "archive", None)
        if archive is None:  # not from a zip (tests, a checkout): awscrt is an ordinary import, or absent
            return None
    data, why = vendored_extension(archive)
    if data is None:
        return why
    try:
        module = _load_from_memory(data)
    except (OSError, ImportError, AttributeError) as error:  # no memfd_create (not Linux): AttributeError
        return f"the awscrt extension could not be loaded ({type(error).__name__}: {error})"[:300]
    sys.modules[EXTENSION] = module
    sys.path.append(f"{archive}/{VENDOR_DIR}")  # zipimport serves a folder inside the zip
    return None


def vendored_extension(archive: str) -> tuple[bytes | None, str | None]:
    """(the bytes of the awscrt extension the code asset ``archive`` carries, None), or (None, why there are none
    this host can load)."""
    name = f"{VENDOR_DIR}/{EXTENSION}.abi3.so"
    try:
        with zipfile.ZipFile(archive) as bundle:
            if name not in bundle.namelist():
                return (
                    None,
                    "the code asset carries no awscrt (synthesized where awscrt for Linux x86-64 was not installed)",
                )
            data = bundle.read(name)
    except (OSError, zipfile.BadZipFile) as error:
        return None, f"the code asset cannot be read ({type(error).__name__})"
    if platform.machine() not in ("x86_64", "AMD64"):
        return None, f"the code asset's awscrt is built for x86-64, this host is {platform.machine()}"
    return data, None


def _load_from_memory(data: bytes) -> Any:
    """The extension module in ``data``, loaded from an in-memory file (kept open: the library stays mapped)."""
    fd = os.memfd_create(EXTENSION)
    view = memoryview(data)
    written = 0
    while written < len(data):  # a write may take fewer bytes than given
        written += os.write(fd, view[written:])
    path = f"/proc/self/fd/{fd}"  # no .so suffix to go by: the loader is named
    loader = importlib.machinery.ExtensionFileLoader(EXTENSION, path)
    spec = importlib.util.spec_from_file_location(EXTENSION, path, loader=loader)
    if spec is None:
        raise ImportError("no module spec for the in-memory file")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _crt() -> Algorithm | None:
    try:
        checksums = importlib.import_module("awscrt.checksums")  # optional, and untyped: no stubs to find
    except ImportError:
        return None
    try:
        if checksums.crc64nvme(b"123456789") != 0xAE8B14860A799888:  # the CRC-64/NVME check value
            return None
        return Algorithm("CRC64NVME", 8, checksums.crc64nvme, checksums.combine_crc64nvme)
    except (AttributeError, TypeError):  # an awscrt without its combine functions
        return None


_chosen: tuple[Algorithm, str | None] | None = None


def choose() -> tuple[Algorithm, str | None]:
    """The algorithm the worker uses, and why it is not CRC64NVME (None when it is); decided once per process."""
    global _chosen
    if _chosen is None:
        why = load_vendored()
        crt = _crt()
        _chosen = (crt, None) if crt is not None else (CRC32, why or "awscrt is not installed")
    return _chosen


def best() -> Algorithm:
    """CRC64NVME by awscrt when it loads and computes the reference value, else zlib's CRC32."""
    return choose()[0]


class Running:
    """A checksum fed in order, chunk by chunk (``update``), or from pieces computed apart (``append``)."""

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm
        self.value = 0
        self.length = 0

    def update(self, data: Any) -> None:
        self.value = self.algorithm.compute(data, self.value)
        self.length += memoryview(data).nbytes

    def append(self, value: int, length: int) -> None:
        """Continue with a piece of ``length`` bytes whose own checksum is ``value``."""
        self.value = self.algorithm.combine(self.value, value, length) if self.length else value
        self.length += length

    def encoded(self) -> str:
        return self.algorithm.encode(self.value)


__all__ = ["CRC32", "FULL_OBJECT", "Algorithm", "Running", "best", "choose", "crc32_combine", "load_vendored"]
