"""hashstate's loader and self-test, called afresh: ``available()`` runs them once per process and caches
the answer, so a wrong loader would otherwise only show as "no resume inside a file" on a real job."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import sys

import pytest

from hfstage import hashstate


def test_libcrypto_is_found_where_hashlib_loaded_it() -> None:
    paths = hashstate._candidates()
    loaded = [p for p in paths if os.path.isabs(p)]
    assert loaded, paths
    assert all("libcrypto" in os.path.basename(p) and os.path.isfile(p) for p in loaded), paths
    assert len(set(loaded)) == len(loaded), paths  # each mapped library once, not once per mapping


def test_the_loader_returns_a_library_that_hashes_like_hashlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hashstate, "_lib", None)  # as in a new process: nothing loaded yet
    lib = hashstate._load()
    assert lib is not None
    for name, reference in (("sha256", hashlib.sha256), ("sha1", hashlib.sha1)):
        h = hashstate.ResumableHash(name, _lib_override=lib)
        h.update(b"abc" * 50_000)
        assert h.hexdigest() == reference(b"abc" * 50_000).hexdigest()


def test_the_loader_skips_a_candidate_that_cannot_be_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    real = hashstate._candidates()
    monkeypatch.setattr(hashstate, "_candidates", lambda: ["/nonexistent/libcrypto.so.3", *real])
    assert hashstate._load() is not None
    monkeypatch.setattr(hashstate, "_candidates", lambda: ["/nonexistent/libcrypto.so.3"])
    assert hashstate._load() is None


def test_the_loader_skips_a_library_without_the_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library that loads but lacks SHA256_Init (not libcrypto) is passed over for the next candidate."""
    libc = ctypes.util.find_library("c")
    assert libc
    real = hashstate._candidates()
    monkeypatch.setattr(hashstate, "_candidates", lambda: [libc, *real])
    lib = hashstate._load()
    assert lib is not None and lib._name != libc
    monkeypatch.setattr(hashstate, "_candidates", lambda: [libc])
    assert hashstate._load() is None


def test_without_ctypes_there_is_no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hashstate, "ctypes", None)
    assert hashstate._load() is None


def test_the_self_test_passes_the_real_library(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = hashstate._load()
    monkeypatch.setattr(hashstate, "_lib", None)  # the self-test must use the library it is given
    assert hashstate._self_test(lib) is True


def test_the_self_test_refuses_a_library_whose_digest_differs() -> None:
    """Every byte counted, the layout as assumed, but other bytes hashed: only the digest shows it."""
    lib = hashstate._load()

    class Blind:
        SHA256_Init, SHA256_Final = lib.SHA256_Init, lib.SHA256_Final
        SHA1_Init, SHA1_Final = lib.SHA1_Init, lib.SHA1_Final

        @staticmethod
        def SHA256_Update(ctx, data, n):
            return lib.SHA256_Update(ctx, bytes(n), n)

        @staticmethod
        def SHA1_Update(ctx, data, n):
            return lib.SHA1_Update(ctx, bytes(n), n)

    assert hashstate._self_test(Blind()) is False


@pytest.mark.parametrize("algorithm", ["sha256", "sha1"])
def test_the_self_test_refuses_a_context_larger_than_assumed(monkeypatch: pytest.MonkeyPatch, algorithm: str) -> None:
    """Another struct layout (an OpenSSL whose context is larger than sha.h's) writes past the saved bytes: a
    state saved from it would be cut short, so resumable hashing must be off."""
    lib = hashstate._load()
    monkeypatch.setitem(hashstate._CTX_SIZE, algorithm, hashstate._CTX_SIZE[algorithm] - 8)
    assert hashstate._self_test(lib) is False


@pytest.mark.parametrize("algorithm", ["sha256", "sha1"])
def test_the_self_test_refuses_a_byte_count_where_it_is_not_read(
    monkeypatch: pytest.MonkeyPatch, algorithm: str
) -> None:
    """``hashed_bytes`` reads the bit count at a fixed offset; a layout with it elsewhere must turn resume off
    (the resume check compares that count with the parts before the checkpoint)."""
    lib = hashstate._load()
    monkeypatch.setitem(hashstate._LENGTH_AT, algorithm, hashstate._LENGTH_AT[algorithm] + 4)
    assert hashstate._self_test(lib) is False


def test_the_self_test_refuses_a_library_that_hashes_wrongly() -> None:
    """A library whose functions run but whose digest differs from hashlib's (SHA-1 functions under the SHA-256
    names): the state layout may look right, the digests do not."""
    lib = hashstate._load()

    class Swapped:
        SHA256_Init, SHA256_Update, SHA256_Final = lib.SHA1_Init, lib.SHA1_Update, lib.SHA1_Final
        SHA1_Init, SHA1_Update, SHA1_Final = lib.SHA1_Init, lib.SHA1_Update, lib.SHA1_Final

    assert hashstate._self_test(Swapped()) is False


def test_available_caches_the_first_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(hashstate, "_checked", False)
    monkeypatch.setattr(hashstate, "_lib", None)
    monkeypatch.setattr(hashstate, "_load", lambda: calls.append(1) or "lib")
    assert hashstate.available() and hashstate.available() and calls == [1]


def test_a_loader_that_fails_unexpectedly_means_no_resumable_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("surprise")

    monkeypatch.setattr(hashstate, "_checked", False)
    monkeypatch.setattr(hashstate, "_lib", "stale")
    monkeypatch.setattr(hashstate, "_load", broken)
    assert hashstate.available() is False and hashstate._lib is None


def test_hashed_bytes_reads_the_bit_count_of_a_state() -> None:
    assert hashstate.available()
    for name, count in (("sha256", 0), ("sha256", 100_003), ("sha1", 64 * 3 + 5)):
        h = hashstate.ResumableHash(name)
        h.update(b"x" * count)
        assert hashstate.hashed_bytes(name, h.state()) == count
    assert sys.byteorder in ("little", "big")


def test_hashed_bytes_counts_past_four_gibibytes() -> None:
    """The count is 64 bits in two 32-bit words (Nl, Nh): a file over 512 MiB needs the high word."""
    assert hashstate.available()
    state = bytearray(hashstate.ResumableHash("sha256").state())
    at = hashstate._LENGTH_AT["sha256"]
    bits = 6 * 2**30 * 8 + 8 * 12345  # 6 GiB + 12,345 bytes
    state[at : at + 4] = (bits & 0xFFFFFFFF).to_bytes(4, sys.byteorder)
    state[at + 4 : at + 8] = (bits >> 32).to_bytes(4, sys.byteorder)
    assert hashstate.hashed_bytes("sha256", bytes(state)) == 6 * 2**30 + 12345


def test_an_unknown_algorithm_or_no_library_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert hashstate.available()
    with pytest.raises(ValueError, match="not available"):
        hashstate.ResumableHash("md5")
    monkeypatch.setattr(hashstate, "_lib", None)
    with pytest.raises(ValueError, match="not available"):
        hashstate.ResumableHash("sha256")


def test_updates_of_every_buffer_kind_hash_the_same() -> None:
    assert hashstate.available()
    data = bytes(range(256)) * 300
    expected = hashlib.sha256(data + data + data + data).hexdigest()
    h = hashstate.ResumableHash("sha256")
    h.update(data)
    h.update(bytearray(data))
    h.update(memoryview(data))  # read-only
    h.update(memoryview(bytearray(data)).cast("I"))  # writable, items of 4 bytes
    h.update(b"")
    h.update(bytearray())
    assert h.hexdigest() == expected
    assert h.hexdigest() == expected  # the digest leaves the running state alone
    copy = h.copy()
    h.update(b"more")
    assert copy.hexdigest() == expected and copy.digest() == bytes.fromhex(expected)


def test_without_proc_the_linker_finds_libcrypto(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where /proc/self/maps cannot be read (another OS, a locked-down sandbox), the linker's answer is used."""
    import builtins

    real_open = builtins.open

    def no_proc(path, *args, **kwargs):
        if str(path) == "/proc/self/maps":
            raise PermissionError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_proc)
    found = ctypes.util.find_library("crypto")
    assert found and "crypto" in found
    assert hashstate._candidates() == [found]
    assert hashstate._load() is not None


# -- found by the review of the equivalents list ------------------------------------------------------------


def test_a_mapped_file_whose_name_is_not_utf8_does_not_hide_libcrypto(tmp_path) -> None:
    # /proc/self/maps shows each mapped file's name as bytes; a staged model file need not be UTF-8.
    # Read strictly (or with an unknown error handler), one such line would make resumable hashing
    # unavailable on every host that maps one.
    import mmap

    name = os.fsencode(tmp_path) + b"/\xff-weights.bin"
    with open(name, "wb") as f:
        f.write(b"\0" * mmap.PAGESIZE)
    with open(name, "rb") as f, mmap.mmap(f.fileno(), mmap.PAGESIZE, access=mmap.ACCESS_READ):
        with open("/proc/self/maps", "rb") as maps:
            assert b"\xff-weights.bin" in maps.read()  # the line is really there
        paths = hashstate._candidates()
    assert any("libcrypto" in p for p in paths)


def test_the_hashed_length_goes_to_libcrypto_as_a_size_t() -> None:
    # Without a declared size_t, ctypes passes a Python int as a C int: a part of 2 GiB or more
    # (--part-size-mib allows 5120) would reach SHA*_Update as a negative length.
    lib = hashstate._load()
    if lib is None:
        pytest.skip("no libcrypto with the SHA functions in this process")
    for _, update, _, _ in hashstate._FUNCTIONS.values():
        assert getattr(lib, update).argtypes[2] is ctypes.c_size_t


def test_a_copy_hashes_with_the_same_library_as_its_original(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hash built on a given library copies onto that library, not onto whatever the module loaded (here: none)."""
    lib = hashstate._load()
    monkeypatch.setattr(hashstate, "_lib", None)
    h = hashstate.ResumableHash("sha256", _lib_override=lib)
    h.update(b"abc")
    twin = h.copy()
    twin.update(b"def")
    assert (h.hexdigest(), twin.hexdigest()) == (
        hashlib.sha256(b"abc").hexdigest(),
        hashlib.sha256(b"abcdef").hexdigest(),
    )
