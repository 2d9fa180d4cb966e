"""The checksums S3 verifies: the algorithm chosen, values combined without a second pass, the whole object's checksum
S3 computes itself (moto with awscrt), the part buffer written once, ranges that cut parts evenly, and the awscrt the
staging code asset carries, loaded from the zip without a byte on disk."""

from __future__ import annotations

import importlib.machinery
import io
import itertools
import os
import subprocess
import sys
import threading
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from botocore.stub import ANY
from hypothesis import given, settings
from hypothesis import strategies as st

from hfstage import checksum
from hfstage.checksum import CRC32, FULL_OBJECT, Running, crc32_combine
from hfstage.events import EventLog, Progress
from hfstage.hub import HubClient
from hfstage.transfer import BufferPool, FileStager, Settings, StreamedObject, decode_sums, encode_sums, range_plan
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import S3Env, fake_hub, s3, s3_stub  # noqa: F401

MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[2]
CRC64 = checksum.best()


def test_awscrt_is_chosen_when_installed_and_computes_the_reference_values() -> None:
    algorithm, why = checksum.choose()
    assert (algorithm.name, algorithm.width, algorithm.field, why) == ("CRC64NVME", 8, "ChecksumCRC64NVME", None)
    # The CRC-64/NVME and CRC-32 check values (of b"123456789"), base64 of the big-endian bytes as S3 carries them.
    assert algorithm.compute(b"123456789", 0) == 0xAE8B14860A799888
    assert CRC32.compute(b"123456789", 0) == 0xCBF43926
    assert CRC32.of(b"123456789") == "y/Q5Jg=="
    assert algorithm.decode(algorithm.of(b"x")) == algorithm.compute(b"x", 0)


@pytest.mark.parametrize("text", ["AAAAAA==", "AAAAAAAAAAAAAAAAAA==", "not base64!"])
def test_a_listed_checksum_of_another_width_or_not_base64_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        CRC64.decode(text)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_crc32_of_two_pieces_combines_to_the_crc32_of_both(first: bytes, second: bytes) -> None:
    assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == zlib.crc32(first + second)


@pytest.mark.parametrize("algorithm", [CRC32, CRC64], ids=lambda a: a.name)
@pytest.mark.parametrize("cuts", [[], [1], [5 * MiB - 1], [3, 1000, 4 * MiB + 7]])
def test_running_checksums_fed_in_chunks_or_pieces_equal_one_pass(algorithm, cuts: list[int]) -> None:
    data = os.urandom(5 * MiB + 3)
    edges = [0, *cuts, len(data)]
    fed, joined = Running(algorithm), Running(algorithm)
    for start, end in itertools.pairwise(edges):
        fed.update(memoryview(data)[start:end])
        joined.append(algorithm.compute(data[start:end], 0), end - start)
    assert fed.value == joined.value == algorithm.compute(data, 0)
    assert fed.length == joined.length == len(data)
    assert fed.encoded() == algorithm.of(data)


def test_a_checkpoint_s_checksum_field_round_trips_and_refuses_another_algorithm_or_form() -> None:
    assert encode_sums(CRC64, 0xAB) == "crc64nvme00000000000000ab"
    assert decode_sums(CRC64, "crc64nvme00000000000000ab") == 0xAB
    assert decode_sums(CRC32, encode_sums(CRC32, 0xFFFFFFFF)) == 0xFFFFFFFF
    for bad in ["", "crc320000000a", "crc64nvme00ab", "crc64nvme0x000000000000ab", "crc64nvme00000000000000AB"]:
        with pytest.raises(ValueError, match="carries no CRC64NVME checksum of its parts"):
            decode_sums(CRC64, bad)


# -- ranges ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "part", "first", "range_size", "expected"),
    [
        # 64 MiB parts in 16 MiB ranges; the 10 MiB last part in one.
        (138 * MiB, 64 * MiB, 1, 16 * MiB, [4, 4, 1]),
        # A part that does not divide evenly: 3 ranges of 7, 7 and 6 bytes, never one of 1.
        (20, 20, 1, 7, [3]),
        (21, 20, 1, 7, [3, 1]),
        # A range as large as the part, or larger: one range per part.
        (40, 20, 1, 20, [1, 1]),
        (40, 20, 1, 999, [1, 1]),
        # From a resumed part on.
        (60, 20, 2, 10, [2, 2]),
        # A range size of 0 is taken as 1 byte.
        (3, 3, 1, 0, [3]),
    ],
)
def test_ranges_cut_each_part_evenly_and_cover_every_byte_once(size, part, first, range_size, expected) -> None:
    plan = range_plan(size, part, first, range_size)
    counts = [sum(1 for p, _, _ in plan if p == n) for n in range(first, -(-size // part) + 1)]
    assert counts == expected
    # Every byte once, in order: each range starts where the one before ended (a list of 138 Mi offsets took 48 s).
    ends = (first - 1) * part
    for p, within, n in plan:
        assert (p - 1) * part + within == ends and within + n <= part
        ends += n
    assert ends == size
    assert all(0 < n <= max(range_size, 1) or n == min(part, size) for _, _, n in plan)


def test_a_part_that_does_not_divide_evenly_gets_ranges_of_nearly_equal_length() -> None:
    assert range_plan(20, 20, 1, 7) == [(1, 0, 7), (1, 7, 7), (1, 14, 6)]
    assert range_plan(21, 20, 1, 7) == [(1, 0, 7), (1, 7, 7), (1, 14, 6), (2, 0, 1)]


# -- the part buffer of a streamed object ---------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [[1] * 7, [5 * MiB], [5 * MiB - 1, 2], [3 * MiB, 3 * MiB, 5 * MiB, 1]])
def test_a_streamed_object_sends_each_full_buffer_and_the_whole_objects_checksum(s3_stub, chunks) -> None:  # noqa: F811
    client, stub = s3_stub
    data = os.urandom(sum(chunks))
    part = 5 * MiB
    pieces = [data[i : i + part] for i in range(0, len(data), part)]
    if len(data) < part:
        stub.add_response(
            "put_object",
            {"ETag": '"e"'},
            {
                "Bucket": "bkt",
                "Key": "k",
                "Body": ANY,
                "ContentType": "t",
                "Metadata": {},
                "ChecksumAlgorithm": CRC64.name,
                CRC64.field: CRC64.of(data),
            },
        )
    else:
        stub.add_response(
            "create_multipart_upload",
            {"UploadId": "u"},
            {
                "Bucket": "bkt",
                "Key": "k",
                "ContentType": "t",
                "Metadata": {},
                "ChecksumAlgorithm": CRC64.name,
                "ChecksumType": FULL_OBJECT,
            },
        )
        for n, piece in enumerate(pieces, start=1):
            stub.add_response(
                "upload_part",
                {"ETag": f'"e{n}"'},
                {
                    "Bucket": "bkt",
                    "Key": "k",
                    "UploadId": "u",
                    "PartNumber": n,
                    "Body": ANY,
                    "ChecksumAlgorithm": CRC64.name,
                    CRC64.field: CRC64.of(piece),
                },
            )
        listed = [{"PartNumber": n, "ETag": f'"e{n}"', CRC64.field: CRC64.of(p)} for n, p in enumerate(pieces, 1)]
        stub.add_response(
            "complete_multipart_upload",
            {},
            {
                "Bucket": "bkt",
                "Key": "k",
                "UploadId": "u",
                "MultipartUpload": {"Parts": listed},
                CRC64.field: CRC64.of(data),
                "ChecksumType": FULL_OBJECT,
                "MpuObjectSize": len(data),
            },
        )
    sent: list[bytes] = []
    buffers: set[int] = set()

    def record(params, **_):
        if "Body" in params and isinstance(params["Body"], bytearray):
            buffers.add(id(params["Body"]))
        sent.append(bytes(params["Body"]))

    client.meta.events.register("provide-client-params.s3.UploadPart", record)
    client.meta.events.register("provide-client-params.s3.PutObject", record)
    sink = StreamedObject(client, "bkt", "k", part, {}, "t", checksum=CRC64)
    offset = 0
    for n in chunks:
        sink.write(memoryview(data)[offset : offset + n])
        offset += n
    sink.finish()
    stub.assert_no_pending_responses()
    assert b"".join(sent) == data and sink.size == len(data)
    assert sink.sha256.hexdigest() == __import__("hashlib").sha256(data).hexdigest()
    full = len(data) // part
    assert len(buffers) <= 1 + (len(data) % part != 0)  # every full part sent from the one buffer, refilled in place
    assert full == 0 or len(sent) == len(pieces)


def test_a_full_object_checksum_is_what_s3_computes_for_the_object(s3: S3Env) -> None:  # noqa: F811
    """moto (with awscrt) computes a FULL_OBJECT upload's CRC64NVME over the joined parts: the stored checksum is
    that of the bytes, and the one the writer sent was accepted (moto does not check it; the stub test above does)."""
    data = os.urandom(11 * MiB + 5)
    sink = StreamedObject(s3.client, s3.bucket, "obj", 5 * MiB, {}, "application/octet-stream", checksum=CRC64)
    for start in range(0, len(data), 3 * MiB + 1):
        sink.write(data[start : start + 3 * MiB + 1])
    sink.finish()
    attributes = s3.client.get_object_attributes(Bucket=s3.bucket, Key="obj", ObjectAttributes=["Checksum"])
    assert attributes["Checksum"]["ChecksumType"] == FULL_OBJECT
    assert attributes["Checksum"][CRC64.field] == CRC64.of(data)
    assert s3.body("obj") == data


def test_a_file_fetched_in_ranges_smaller_than_its_parts_lands_whole_with_s3s_own_checksum(
    fake_hub: FakeHub,  # noqa: F811
    s3: S3Env,  # noqa: F811
) -> None:
    """Parts of 5 MiB, each fetched as ranges of at most 2 MiB (3 per part, the last 1 MiB part in one), 4 in
    flight: every range fetched once, the object equal to the source and its checksum the one S3 computes."""
    repo = fake_hub.add_repo("Org/Model", {"w.gguf": Synthetic(11 * MiB, seed=5)})
    data = repo.files["w.gguf"].content.to_bytes()
    config = Settings(part_size=5 * MiB, parts_in_flight=4, ranges_per_file=4, range_size=2 * MiB, retry_base_s=0)
    with ThreadPoolExecutor(4) as uploads, ThreadPoolExecutor(4) as ranges:
        stager = FileStager(
            hub=HubClient(fake_hub.endpoint),
            s3=s3.client,
            bucket=s3.bucket,
            prefix="m/",
            repo_id="Org/Model",
            sha=repo.sha,
            settings=config,
            pool=BufferPool(config.part_size, config.parts_in_flight),
            uploads=uploads,
            progress=Progress(1, len(data)),
            log=EventLog(io.StringIO()),
            stop=threading.Event(),
            ranges=ranges,
        )
        stager.stage(HubClient(fake_hub.endpoint).revision_info("Org/Model", "main").files[0])
    fetched = [r.range for r in fake_hub.requests_for("w.gguf") if r.server == "cdn"]
    starts = [0, 1747627, 3495254, 5 * MiB, 5 * MiB + 1747627, 5 * MiB + 3495254, 10 * MiB]
    assert len(fetched) == 7 and sorted(int(r[6:].split("-")[0]) for r in fetched) == starts
    assert s3.body("m/w.gguf") == data
    attributes = s3.client.get_object_attributes(Bucket=s3.bucket, Key="m/w.gguf", ObjectAttributes=["Checksum"])
    assert attributes["Checksum"][CRC64.field] == CRC64.of(data)
    assert s3.open_uploads() == []


# -- awscrt in the code asset ---------------------------------------------------------------------------------


def _asset_zip(tmp_path: Path, *, crt: bool) -> Path:
    """The staging code asset as the construct bundles it, zipped (as CDK uploads it)."""
    from constructs_lib.runtime_code import _CopyBundler, crt_files
    from constructs_lib.staged_checkpoint import PACKAGES

    files = crt_files()
    assert files is not None  # this machine is Linux x86-64 with awscrt installed (requirements.txt)
    out = tmp_path / "asset"
    _CopyBundler(None, PACKAGES, "hfstage.worker:main", files if crt else None).try_bundle(str(out))
    archive = tmp_path / "asset.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in sorted(out.rglob("*")):
            if path.is_file():
                bundle.write(path, path.relative_to(out).as_posix())
    return archive


# hfstage/checksum.py from the zip by zipimport, as the worker imports it (without the package, whose other modules
# need botocore: -S leaves out site-packages, so that the only awscrt is the asset's, as in the staging image).
PROBE = (
    "import importlib.util, sys, zipimport; spec = zipimport.zipimporter(sys.argv[1] + '/hfstage')"
    ".find_spec('checksum'); checksum = sys.modules['checksum'] = importlib.util.module_from_spec(spec); "
    "spec.loader.exec_module(checksum); "
    "a, why = checksum.choose(); m = sys.modules.get('_awscrt'); "
    "print(a.name, why, getattr(m, '__file__', None), sep='|')"
)


def test_the_asset_s_awscrt_loads_from_the_zip_through_an_in_memory_file(tmp_path: Path) -> None:
    archive = _asset_zip(tmp_path, crt=True)
    with zipfile.ZipFile(archive) as bundle:
        names = bundle.namelist()
    assert "_vendor/_awscrt.abi3.so" in names and "_vendor/awscrt/checksums.py" in names
    run = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, str(archive)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    name, why, origin = run.stdout.strip().split("|")
    assert (name, why) == ("CRC64NVME", "None") and origin.startswith("/proc/self/fd/")


def test_an_asset_without_awscrt_falls_back_to_crc32_and_says_why(tmp_path: Path) -> None:
    archive = _asset_zip(tmp_path, crt=False)
    run = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, str(archive)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (
        "CRC32|the code asset carries no awscrt (synthesized where awscrt for Linux x86-64 was not installed)|None"
    )


def test_only_a_linux_x86_64_abi3_build_of_awscrt_is_bundled(tmp_path: Path, monkeypatch) -> None:
    from constructs_lib import runtime_code

    package, extension = runtime_code.crt_files()
    assert extension.name == "_awscrt.abi3.so" and (package / "checksums.py").is_file()
    fake = tmp_path / "_awscrt.abi3.so"
    header = bytearray(extension.read_bytes()[:64])
    header[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    fake.write_bytes(bytes(header))
    real = runtime_code.importlib.metadata.distribution("awscrt")

    class Elsewhere:  # the installed distribution, its extension swapped for ``fake``
        files = real.files

        def locate_file(self, name):
            return fake if name.parts == ("_awscrt.abi3.so",) else real.locate_file(name)

    monkeypatch.setattr(runtime_code.importlib.metadata, "distribution", lambda name: Elsewhere())
    assert runtime_code.crt_files() is None
    fake.write_bytes(b"#!/bin/sh\n" + bytes(54))
    assert runtime_code.crt_files() is None


def test_the_installed_awscrt_is_found_after_a_vendored_one_was_loaded(monkeypatch) -> None:
    # A process that loaded the asset's extension through memfd has that _awscrt in sys.modules; the bundler still
    # copies the installed build (it used find_spec, which answered with the loaded one: make test flaked on it).
    import types

    from constructs_lib import runtime_code

    loaded = types.ModuleType("_awscrt")
    loaded.__spec__ = importlib.machinery.ModuleSpec("_awscrt", None, origin="/proc/self/fd/7")
    monkeypatch.setitem(sys.modules, "_awscrt", loaded)
    package, extension = runtime_code.crt_files()
    assert extension.name == "_awscrt.abi3.so" and extension.is_file() and (package / "checksums.py").is_file()


def test_the_worker_keeps_botocore_s_own_signer() -> None:
    """botocore signs with awscrt when it imports it, copying each body once more (hfstage/__init__.py)."""
    env = {k: v for k, v in os.environ.items() if k != "BOTO_DISABLE_CRT"}
    probe = "import hfstage, botocore.compat as c; print(c.HAS_CRT)"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.stdout.strip() == "False", run.stderr
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**env, "BOTO_DISABLE_CRT": "false"},
        cwd=ROOT,
    )
    assert run.stdout.strip() == "True", run.stderr  # a user's own choice stands


# -- in-process: how the algorithm is chosen, what the asset carries ------------------------------------------


def test_a_checksum_s3_listed_with_characters_outside_base64_is_refused_not_skipped() -> None:
    assert CRC64.decode("AAAAAAAAAAA=") == 0
    with pytest.raises(ValueError):
        CRC64.decode("AAAAAAAA!AAA=")  # without validation the "!" would be dropped and 8 bytes decoded
    with pytest.raises(ValueError, match="a CRC64NVME checksum has 8 bytes, not 4"):
        CRC64.decode("AAAAAA==")


def test_crc32_combine_is_right_when_the_shift_is_computed_afresh() -> None:
    """The shift per length is cached: computed anew here, so a wrong square shows."""
    checksum._crc32_shift.cache_clear()
    for first, second in [(b"abc", b"defgh"), (os.urandom(100), os.urandom(4097)), (b"", b"x")]:
        assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == zlib.crc32(first + second)
    assert crc32_combine(0x1234, 0, 0) == 0x1234


class _FakeChecksums:
    def __init__(self, check: int, combine: bool = True) -> None:
        self._check = check
        if combine:
            self.combine_crc64nvme = lambda a, b, n: a ^ b

    def crc64nvme(self, data, previous=0):
        return self._check if bytes(data) == b"123456789" else 0


@pytest.mark.parametrize(
    ("module", "chosen"),
    [
        (None, None),  # no awscrt: an ImportError
        (_FakeChecksums(0xAE8B14860A799888), "CRC64NVME"),
        (_FakeChecksums(0xAE8B14860A799889), None),  # a build that computes something else
        (_FakeChecksums(0xAE8B14860A799888, combine=False), None),  # one without combine_crc64nvme
    ],
)
def test_awscrt_is_used_only_when_it_imports_computes_the_check_value_and_combines(monkeypatch, module, chosen):
    import types

    package = types.ModuleType("awscrt")
    if module is not None:
        package.checksums = module
        monkeypatch.setitem(sys.modules, "awscrt.checksums", module)
    else:
        monkeypatch.setitem(sys.modules, "awscrt.checksums", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "awscrt", package)
    found = checksum._crt()
    assert (found.name if found else None) == chosen
    if found:
        assert (found.width, found.combine(6, 3, 1), found.compute(b"123456789", 0)) == (8, 5, module._check)


@pytest.mark.parametrize(
    ("crt", "why", "expected"),
    [(True, None, None), (False, None, "awscrt is not installed"), (False, "no room", "no room")],
)
def test_the_choice_is_made_once_and_says_why_crc32(monkeypatch, crt, why, expected) -> None:
    calls = []
    monkeypatch.setattr(checksum, "_chosen", None)
    monkeypatch.setattr(checksum, "load_vendored", lambda: calls.append(1) or why)
    monkeypatch.setattr(checksum, "_crt", lambda: CRC64 if crt else None)
    first = checksum.choose()
    assert first == ((CRC64, None) if crt else (CRC32, expected))
    assert checksum.choose() is first and checksum.best() is first[0] and calls == [1]


def _zip(path: Path, members: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    return str(path)


def test_the_extension_is_read_from_the_asset_only_where_it_can_load(tmp_path: Path, monkeypatch) -> None:
    name = "_vendor/_awscrt.abi3.so"
    assert checksum.vendored_extension(_zip(tmp_path / "a.zip", {name: b"ELF"})) == (b"ELF", None)
    assert checksum.vendored_extension(_zip(tmp_path / "b.zip", {"hfstage/x.py": b""})) == (
        None,
        "the code asset carries no awscrt (synthesized where awscrt for Linux x86-64 was not installed)",
    )
    (tmp_path / "c.zip").write_bytes(b"not a zip")
    assert checksum.vendored_extension(str(tmp_path / "c.zip")) == (None, "the code asset cannot be read (BadZipFile)")
    assert checksum.vendored_extension(str(tmp_path / "none.zip")) == (
        None,
        "the code asset cannot be read (FileNotFoundError)",
    )
    monkeypatch.setattr(checksum.platform, "machine", lambda: "aarch64")
    assert checksum.vendored_extension(_zip(tmp_path / "d.zip", {name: b"ELF"})) == (
        None,
        "the code asset's awscrt is built for x86-64, this host is aarch64",
    )


def test_loading_the_vendored_extension_says_why_it_did_not(tmp_path: Path, monkeypatch) -> None:
    archive = _zip(tmp_path / "a.zip", {"_vendor/_awscrt.abi3.so": b"not an ELF object"})
    assert checksum.load_vendored(archive) is None  # the test process imported awscrt already: nothing to do
    monkeypatch.delitem(sys.modules, "_awscrt")
    path = list(sys.path)
    why = checksum.load_vendored(archive)
    assert why.startswith("the awscrt extension could not be loaded (ImportError: ") and len(why) <= 300
    assert "_awscrt" not in sys.modules and sys.path == path  # nothing half done
    assert checksum.load_vendored(_zip(tmp_path / "b.zip", {})).startswith("the code asset carries no awscrt")
    # Not from a zip (tests, a checkout): nothing to load, awscrt is an ordinary import.
    assert checksum.load_vendored() is None


def test_an_extension_written_in_pieces_is_whole_in_memory(monkeypatch) -> None:
    """os.write may take fewer bytes than given: the rest is written until all are."""
    seen = []
    real_write = os.write

    def short_write(fd, data):
        seen.append(len(data))
        return real_write(fd, bytes(data)[:3])

    monkeypatch.setattr(checksum.os, "write", short_write)
    with pytest.raises(ImportError):
        checksum._load_from_memory(b"0123456789")  # not an ELF object: written whole, then refused by the loader
    assert seen == [10, 7, 4, 1]


def test_the_asset_is_the_zip_this_module_was_imported_from(tmp_path: Path, monkeypatch) -> None:
    """In the job hfstage is imported by zipimport, whose loader names the archive (zipimporter.archive)."""
    import types

    archive = _zip(tmp_path / "asset.zip", {"hfstage/checksum.py": b""})
    monkeypatch.delitem(sys.modules, "_awscrt")
    monkeypatch.setattr(checksum, "__loader__", types.SimpleNamespace(archive=archive))
    assert checksum.load_vendored() == (
        "the code asset carries no awscrt (synthesized where awscrt for Linux x86-64 was not installed)"
    )


def test_windows_names_x86_64_amd64(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(checksum.platform, "machine", lambda: "AMD64")
    archive = _zip(tmp_path / "a.zip", {"_vendor/_awscrt.abi3.so": b"ELF"})
    assert checksum.vendored_extension(archive) == (b"ELF", None)
