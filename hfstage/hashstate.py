"""SHA-256 and SHA-1 whose running state can be saved and restored, for resuming a file in another run.

``hashlib`` cannot export a hash's running state, and S3 cannot give back the bytes of the parts of a
multipart upload that is not completed (GetObject reads objects; ListParts returns each part's number,
size, ETag and checksum, not its bytes). So a run that was killed could only rebuild the hash of a
file's first parts by downloading them again. Instead, the hash runs through libcrypto's low-level
``SHA256_*``/``SHA1_*`` functions, whose context is a plain C struct (``SHA256_CTX``: eight 32-bit words
of state, the bit count, the pending block; OpenSSL's include/openssl/sha.h): its bytes are the state,
saved after each uploaded part and restored by the next run. These functions are deprecated in
OpenSSL 3 but still exported; libcrypto is the library Python's own ``_hashlib`` loads.

``available()`` is True only after a self-test: hash a message in two halves with a context copied by
its bytes in between, and compare with hashlib. Without it the worker uses hashlib and a killed file
starts again from byte 0. A wrong restored state cannot pass unnoticed: the file's final digest is
compared with the Hub's.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from types import ModuleType
from typing import Any

ctypes: ModuleType | None  # None on a Python built without _ctypes (libffi): hashlib only, no resume inside a file
try:
    import ctypes
    import ctypes.util
except ImportError:
    ctypes = None

# sizeof(SHA256_CTX) = 8 + 2 + 16 + 2 words of 4 bytes; sizeof(SHA_CTX) = 5 + 2 + 16 + 1 words (sha.h).
_CTX_SIZE = {"sha256": 112, "sha1": 96}
_GUARD = 64  # spare bytes after the struct, checked untouched by the self-test
_FUNCTIONS = {
    "sha256": ("SHA256_Init", "SHA256_Update", "SHA256_Final", 32),
    "sha1": ("SHA1_Init", "SHA1_Update", "SHA1_Final", 20),
}

_lock = threading.Lock()
_lib: Any = None
_checked = False


def _candidates() -> list[str]:
    """libcrypto as already loaded by ``_hashlib`` (from /proc/self/maps), then the linker's idea of it."""
    import _hashlib  # noqa: F401  (loads libcrypto into the process)

    paths: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if "libcrypto" in path and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    found = ctypes.util.find_library("crypto") if ctypes is not None else None
    if found:
        paths.append(found)
    return paths


def _load() -> Any:
    if ctypes is None:
        return None
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)  # CDLL releases the GIL during each call
            for init, update, final, _ in _FUNCTIONS.values():
                getattr(lib, init).argtypes = [ctypes.c_void_p]
                getattr(lib, update).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
                getattr(lib, final).argtypes = [ctypes.c_char_p, ctypes.c_void_p]
            if _self_test(lib):
                return lib
        except (OSError, AttributeError):
            continue
    return None


def available() -> bool:
    global _lib, _checked
    with _lock:
        if not _checked:
            _checked = True
            try:
                _lib = _load()
            except Exception:  # any surprise means: no resumable hashing
                _lib = None
        return _lib is not None


class ResumableHash:
    """``update``/``copy``/``hexdigest`` like hashlib, plus ``state()`` bytes and ``ResumableHash(alg, state)``."""

    def __init__(self, algorithm: str, state: bytes | None = None, *, _lib_override: Any = None) -> None:
        lib = _lib_override if _lib_override is not None else _lib
        if lib is None or ctypes is None or algorithm not in _FUNCTIONS:
            raise ValueError("resumable hashing is not available")
        self._ctypes = ctypes
        self.algorithm = algorithm
        self._lib = lib
        init, update, final, self._digest_size = _FUNCTIONS[algorithm]
        self._update = getattr(lib, update)
        self._final = getattr(lib, final)
        self._size = _CTX_SIZE[algorithm]
        self._ctx = self._ctypes.create_string_buffer(self._size + _GUARD)
        if state is None:
            if getattr(lib, init)(self._ctx) != 1:
                raise ValueError(f"{init} failed")
        else:
            if len(state) != self._size:
                raise ValueError(f"a saved {algorithm} state has {self._size} bytes, not {len(state)}")
            self._ctypes.memmove(self._ctx, state, self._size)

    def update(self, data: Any) -> None:
        if isinstance(data, bytes):
            self._update(self._ctx, data, len(data))
            return
        view = memoryview(data).cast("B")
        n = view.nbytes
        if not n:
            return
        if view.readonly:
            self._update(self._ctx, bytes(view), n)
            return
        holder = (self._ctypes.c_char * n).from_buffer(view)
        try:
            self._update(self._ctx, holder, n)
        finally:
            del holder

    def state(self) -> bytes:
        return self._ctx.raw[: self._size]

    def copy(self) -> ResumableHash:
        return ResumableHash(self.algorithm, self.state(), _lib_override=self._lib)

    def digest(self) -> bytes:
        ctx = self._ctypes.create_string_buffer(self.state(), self._size + _GUARD)  # Final clears its context
        out = self._ctypes.create_string_buffer(self._digest_size)
        self._final(out, ctx)
        return out.raw

    def hexdigest(self) -> str:
        return self.digest().hex()


# Offset of the 64-bit message length in bits (two 32-bit words, Nl then Nh) in each context (sha.h).
_LENGTH_AT = {"sha256": 32, "sha1": 20}


def hashed_bytes(algorithm: str, state: bytes) -> int:
    """How many bytes a saved state has hashed (the context's ``Nl``/``Nh`` bit count, native byte order)."""
    at = _LENGTH_AT[algorithm]
    low = int.from_bytes(state[at : at + 4], sys.byteorder)
    high = int.from_bytes(state[at + 4 : at + 8], sys.byteorder)
    return ((high << 32) | low) // 8


def _self_test(lib: Any) -> bool:
    message = bytes(range(256)) * 1000 + b"tail"
    for algorithm, reference in (("sha256", hashlib.sha256), ("sha1", hashlib.sha1)):
        first = ResumableHash(algorithm, _lib_override=lib)
        first.update(message[:100_003])
        if first._ctx.raw[first._size :] != b"\0" * _GUARD:
            return False
        if hashed_bytes(algorithm, first.state()) != 100_003:  # the layout read by ``hashed_bytes``
            return False
        second = ResumableHash(algorithm, first.state(), _lib_override=lib)
        second.update(bytearray(message[100_003:]))
        if second.hexdigest() != reference(message).hexdigest():
            return False
    return True


__all__ = ["ResumableHash", "available", "hashed_bytes"]
