"""The worker's tarball mode end to end: a model.tar.gz in moto's S3 (over HTTP) unpacked into a verified prefix.

Archives are built here with tarfile, hostile ones included; nothing in the worker is patched: its boto3
client is handed in only so that a ``before-call`` hook can count the S3 operations it makes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from hfstage.manifest import MANIFEST_NAME
from hfstage.tarball import tarball_prefix
from tests.fakes.fixtures import S3Env, boto_session, s3  # noqa: F401

MiB = 1024 * 1024
SOURCE_KEY = "job-1/output/model.tar.gz"
WEIGHTS = random.Random(7).randbytes(12 * MiB + 123)  # three 5 MiB parts
FILES = {
    "config.json": b'{"architectures": ["DemoForCausalLM"], "num_hidden_layers": 2}\n',
    "tokenizer.json": b'{"model": {}}\n',
    "model.safetensors": WEIGHTS,
    "extra/notes.txt": b"fine-tuned\n",
}


@dataclass
class Result:
    code: int
    out: str
    message: str | None
    calls: Counter[str]


def member(
    name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, **extra: object
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
    for key, value in extra.items():
        setattr(info, key, value)
    return info, data


def _tar(members: list[tuple[tarfile.TarInfo, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def archive(members: list[tuple[tarfile.TarInfo, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    return gzip.compress(_tar(members, fmt))


def files(names: dict[str, bytes], top: str = "") -> list[tuple[tarfile.TarInfo, bytes]]:
    out = [member(top.rstrip("/"), kind=tarfile.DIRTYPE)] if top else []
    return out + [member(top + name, data) for name, data in names.items()]


@pytest.fixture
def unpack(s3: S3Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # noqa: F811
    from hfstage.worker import main

    def run(data: bytes | None, *extra: str, key: str = SOURCE_KEY) -> Result:
        if data is not None:
            s3.client.put_object(Bucket=s3.bucket, Key=key, Body=data)
        client, counter = s3.worker_client()
        message_file = tmp_path / "message"
        message_file.unlink(missing_ok=True)
        capsys.readouterr()
        argv = [
            f"--source-s3-uri=s3://{s3.bucket}/{key}",
            f"--destination=s3://{s3.bucket}/models/",
            "--part-size-mib=5",
            "--retry-base-s=0.01",
            f"--failure-file={message_file}",
            *extra,
        ]
        code = main(argv, s3_client=client)
        message = message_file.read_text() if message_file.exists() else None
        return Result(code, capsys.readouterr().out, message, counter.calls)

    return run


def staged_prefix(s3: S3Env, key: str = SOURCE_KEY) -> str:  # noqa: F811
    etag = s3.client.head_object(Bucket=s3.bucket, Key=key)["ETag"]
    return tarball_prefix("models/", f"s3://{s3.bucket}/{key}", etag)


def written(s3: S3Env) -> list[str]:  # noqa: F811
    return s3.list_keys("models/")


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(files(FILES), id="files-at-root"),
        pytest.param(files(FILES, top="model/"), id="one-top-folder"),
        pytest.param(files(FILES, top="./"), id="dot-slash"),
    ],
)
def test_a_good_archive_becomes_a_verified_prefix(unpack, s3: S3Env, layout) -> None:  # noqa: F811
    result = unpack(archive(layout))
    assert result.code == 0, result.message
    prefix = staged_prefix(s3)
    assert written(s3) == sorted([prefix + MANIFEST_NAME, *(prefix + name for name in FILES)])
    for name, data in FILES.items():
        assert s3.body(prefix + name) == data
    manifest = json.loads(s3.body(prefix + MANIFEST_NAME))
    assert manifest["repo_id"] == f"s3://{s3.bucket}/{SOURCE_KEY}"
    assert {e["path"]: (e["size"], e["sha256"]) for e in manifest["files"]} == {
        name: (len(data), hashlib.sha256(data).hexdigest()) for name, data in FILES.items()
    }
    assert manifest["total_bytes"] == sum(len(d) for d in FILES.values())
    assert result.calls["CreateMultipartUpload"] == 1  # the weights; the small files are single PUTs
    assert result.calls["UploadPart"] == 3
    assert s3.open_uploads() == []
    # Both passes read the archive, each as one stream pinned to the ETag.
    assert result.calls["GetObject"] >= 2


def test_a_rerun_reads_neither_the_archive_nor_writes(unpack, s3: S3Env) -> None:  # noqa: F811
    assert unpack(archive(files(FILES))).code == 0
    again = unpack(None)
    assert again.code == 0
    assert "event=up_to_date" in again.out
    assert again.calls["PutObject"] == again.calls["CreateMultipartUpload"] == 0
    assert again.calls["GetObject"] == 1  # the manifest only


def test_a_rerun_after_a_lost_object_writes_only_that_one(unpack, s3: S3Env) -> None:  # noqa: F811
    assert unpack(archive(files(FILES))).code == 0
    prefix = staged_prefix(s3)
    s3.client.delete_object(Bucket=s3.bucket, Key=prefix + "tokenizer.json")
    again = unpack(None)
    assert again.code == 0, again.message
    assert again.calls["PutObject"] == 2  # tokenizer.json and the manifest
    assert again.calls["CreateMultipartUpload"] == 0
    assert s3.body(prefix + "tokenizer.json") == FILES["tokenizer.json"]


def test_a_new_archive_under_the_same_key_goes_to_a_new_prefix(unpack, s3: S3Env) -> None:  # noqa: F811
    assert unpack(archive(files(FILES))).code == 0
    first = staged_prefix(s3)
    assert unpack(archive(files({**FILES, "config.json": b"{}"}))).code == 0
    assert staged_prefix(s3) != first
    assert s3.body(staged_prefix(s3) + "config.json") == b"{}"


CONFIG = member("config.json", b"{}")
HOSTILE = {
    "absolute": ([member("/etc/config.json", b"x")], "an absolute path"),
    "dot-dot": ([CONFIG, member("../escape.bin", b"x")], "'..' segment"),
    "backslash": ([CONFIG, member("a\\b.bin", b"x")], "a backslash"),
    "non-printable": ([CONFIG, member("a\x1b[2Jb.bin", b"x")], "non-printable"),
    "symlink": (
        [CONFIG, member("w.bin", kind=tarfile.SYMTYPE, linkname="/etc/passwd")],
        "a symbolic link",
    ),
    "hardlink": (
        [CONFIG, member("w.bin", kind=tarfile.LNKTYPE, linkname="config.json")],
        "a hard link",
    ),
    "device": ([CONFIG, member("dev", kind=tarfile.CHRTYPE, devmajor=1, devminor=3)], "a device"),
    "fifo": ([CONFIG, member("pipe", kind=tarfile.FIFOTYPE)], "a FIFO"),
    "duplicate": ([CONFIG, member("config.json", b"{ }")], "listed twice"),
    "file-and-folder": ([CONFIG, member("w", b"x"), member("w/a.bin", b"y")], "both a file and"),
    "file-and-folder-entry": (
        [CONFIG, member("w", b"x"), member("w", kind=tarfile.DIRTYPE)],
        "both a file and",
    ),
    "manifest-name": ([CONFIG, member(MANIFEST_NAME, b"{}")], "the worker's manifest"),
    "resume-area": ([CONFIG, member(".hfstage-resume/x", b"{}")], "resume area"),
    "no-files": ([member("only", kind=tarfile.DIRTYPE)], "no regular file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_an_unsafe_member_is_refused_before_any_write(unpack, s3: S3Env, case: str) -> None:  # noqa: F811
    members, reason = HOSTILE[case]
    result = unpack(archive(members))
    assert result.code == 3, result.out
    assert result.message and reason in result.message
    assert "refused before any upload" in result.message
    assert written(s3) == []
    assert result.calls["PutObject"] == result.calls["CreateMultipartUpload"] == 0


def test_bounds_on_members_and_bytes(unpack, s3: S3Env) -> None:  # noqa: F811
    data = archive(files({f"f{i}.txt": b"x" for i in range(5)}))
    many = unpack(data, "--max-members=4")
    assert many.code == 3 and "more than 4 members" in (many.message or "")
    tar_bytes = len(gzip.decompress(data))  # --max-total-bytes bounds the tar read, headers and padding too
    big = unpack(data, f"--max-total-bytes={tar_bytes - 1}")
    assert big.code == 3 and f"more than {tar_bytes - 1:,} bytes of tar" in (big.message or "")
    assert written(s3) == []
    assert unpack(data, "--max-members=5", f"--max-total-bytes={tar_bytes}").code == 0


def test_a_huge_header_extension_is_refused_unread(unpack, s3: S3Env) -> None:  # noqa: F811
    info, data = member("config.json", b"{}")
    info.pax_headers = {"comment": "x" * (2 * MiB)}
    result = unpack(archive([(info, data)]))
    assert result.code == 3
    assert "header extension" in (result.message or "")
    assert written(s3) == []


def test_not_a_gzip_tar(unpack, s3: S3Env) -> None:  # noqa: F811
    result = unpack(b"PK\x03\x04 not a tarball" * 100)
    assert result.code == 3
    assert "not a readable gzip-compressed tar" in (result.message or "")
    assert written(s3) == []


def test_a_replaced_archive_is_refused_by_its_etag(unpack, s3: S3Env) -> None:  # noqa: F811
    result = unpack(archive(files(FILES)), '--source-etag="0123456789abcdef0123456789abcdef"')
    assert result.code == 3
    assert "not the planned 0123456789abcdef0123456789abcdef" in (result.message or "")
    assert written(s3) == []


def test_a_missing_archive_names_it(unpack, s3: S3Env) -> None:  # noqa: F811
    result = unpack(None, key="absent/model.tar.gz")
    assert result.code == 3
    assert f"s3://{s3.bucket}/absent/model.tar.gz" in (result.message or "")


@pytest.mark.parametrize(
    "uri",
    ["s3://b/model.tar", "s3://Bad_Bucket/m.tar.gz", "s3://bucket/a*/m.tar.gz", "s3://bucket/a\u00e9/m.tar.gz"],
)
def test_bad_source_uris_are_usage_errors(unpack, uri: str) -> None:
    from hfstage.worker import main

    assert main([f"--source-s3-uri={uri}", "--destination=s3://bucket/models/"]) == 2


def test_the_staged_prefix_passes_the_preflight_s3_check(unpack, s3: S3Env) -> None:  # noqa: F811
    from tests.fakes.handlers import load_handler

    assert unpack(archive(files(FILES, top="model/"))).code == 0
    preflight = load_handler("deployment_preflight")
    checkpoint = preflight.read_checkpoint(boto_session().client("s3"), s3.bucket, staged_prefix(s3))
    assert preflight.check_s3(checkpoint, allow_unverified=False) == []


def test_an_archive_replaced_between_the_two_reads_is_refused(s3: S3Env, tmp_path: Path) -> None:  # noqa: F811
    """Every GET carries If-Match with the planned ETag: a replaced archive fails the run, it is not mixed in."""
    from hfstage.worker import main

    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files(FILES)))
    client, _ = s3.worker_client()
    gets: list[str] = []

    def replace_before_the_second_read(params: dict, **_: object) -> None:
        if params.get("Key") == SOURCE_KEY:
            gets.append(params.get("IfMatch", ""))
            if len(gets) == 2:
                s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files({"config.json": b"{}"})))

    client.meta.events.register("before-parameter-build.s3.GetObject", replace_before_the_second_read)
    message = tmp_path / "message"
    argv = [f"--source-s3-uri=s3://{s3.bucket}/{SOURCE_KEY}", f"--destination=s3://{s3.bucket}/models/"]
    code = main([*argv, "--part-size-mib=5", f"--failure-file={message}"], s3_client=client)
    assert code == 3
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    assert message.read_text() == (
        f"unpacking {uri} failed: {uri} changed between the two reads (If-Match failed); rerun to stage it again\n"
    )
    assert all(tag.startswith('"') and len(tag) == 34 for tag in gets)  # the quoted ETag, on every GET
    assert not [k for k in written(s3) if k.endswith(MANIFEST_NAME)]  # never a manifest for a mixed prefix


class _DroppingBody:
    def __init__(self, data: bytes, drop_after: int | None) -> None:
        self.data, self.drop_after, self.offset = data, drop_after, 0

    def read(self, n: int) -> bytes:
        if self.drop_after is not None and self.offset >= self.drop_after:
            raise ConnectionResetError("connection reset by peer")
        chunk = self.data[self.offset : self.offset + n]
        self.offset += len(chunk)
        return chunk

    def close(self) -> None:
        pass


def test_a_dropped_stream_resumes_with_a_ranged_get() -> None:
    import threading
    from types import SimpleNamespace

    from hfstage.events import EventLog
    from hfstage.tarball import SourceReader

    data = bytes(range(256)) * 4096  # 1 MiB
    requests: list[dict] = []

    class Client:
        def get_object(self, **request: object) -> dict:
            requests.append(request)
            start = int(str(request.get("Range", "bytes=0-"))[6:-1])
            return {"Body": _DroppingBody(data[start:], 300_000 if len(requests) == 1 else None)}

    run = SimpleNamespace(
        s3=Client(),
        source_bucket="b",
        source_key="k.tar.gz",
        source_uri="s3://b/k.tar.gz",
        etag="0" * 32,
        source_size=len(data),
        max_attempts=3,
        retry_base_s=0.0,
        stop=threading.Event(),
        log=EventLog(io.StringIO()),
    )
    reader = SourceReader(run)  # type: ignore[arg-type]
    out = bytearray()
    while chunk := reader.read(100_000):
        out += chunk
    assert bytes(out) == data
    assert [r.get("Range") for r in requests] == [None, "bytes=300000-"]
    assert all(r["IfMatch"] == '"' + "0" * 32 + '"' for r in requests)


def test_exclude_leaves_files_out_and_other_patterns_are_not_up_to_date(unpack, s3: S3Env) -> None:  # noqa: F811
    assert unpack(archive(files(FILES))).code == 0
    again = unpack(None, "--exclude=tokenizer.json", '--exclude=["extra/*"]')
    assert again.code == 0 and "event=up_to_date" not in again.out
    manifest = json.loads(s3.body(staged_prefix(s3) + MANIFEST_NAME))
    assert sorted(e["path"] for e in manifest["files"]) == ["config.json", "model.safetensors"]
    assert manifest["archive"]["exclude"] == ["tokenizer.json", "extra/*"]
    assert again.calls["PutObject"] == 1  # only the manifest: the selected files were there already


# ---- what the staging handler plans with (archive_state), and how S3 errors are read ----------------------


def test_archive_state_gives_the_etag_size_prefix_and_the_staged_files_only_when_all_are_there(
    unpack,
    s3: S3Env,  # noqa: F811
) -> None:
    from hfstage.manifest import read_manifest
    from hfstage.tarball import archive_state, normal_etag

    data = archive(files(FILES))
    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=data)
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    etag = s3.client.head_object(Bucket=s3.bucket, Key=SOURCE_KEY)["ETag"]
    before = archive_state(s3.client, uri, s3.bucket, "models/")
    assert (before.etag, before.size, before.prefix) == (normal_etag(etag), len(data), staged_prefix(s3))
    assert before.etag == etag.strip('"') and before.staged_files == ()

    assert unpack(None).code == 0
    after = archive_state(s3.client, uri, s3.bucket, "models/")
    recorded = read_manifest(s3.client, s3.bucket, after.prefix)
    assert [(f.path, f.size, f.sha256) for f in after.staged_files] == [
        (e["path"], e["size"], e["sha256"]) for e in recorded["files"]
    ]
    assert sorted(f.path for f in after.staged_files) == sorted(FILES)
    # Unpacked with other patterns: the handler cannot tell which files they select.
    assert archive_state(s3.client, uri, s3.bucket, "models/", exclude=["tokenizer.json"]).staged_files == ()
    assert archive_state(s3.client, uri, s3.bucket, "models/", include=["*.json"]).staged_files == ()
    # One object gone: not staged.
    s3.client.delete_object(Bucket=s3.bucket, Key=after.prefix + "tokenizer.json")
    assert archive_state(s3.client, uri, s3.bucket, "models/").staged_files == ()
    # An unreadable manifest: not staged, and no error (the job rewrites it).
    s3.client.put_object(Bucket=s3.bucket, Key=after.prefix + MANIFEST_NAME, Body=b"[not json")
    unreadable = archive_state(s3.client, uri, s3.bucket, "models/")
    assert unreadable.staged_files == () and unreadable.prefix == after.prefix


def test_archive_state_names_an_archive_it_cannot_head(s3: S3Env) -> None:  # noqa: F811
    from hfstage.tarball import ArchiveUnreadable, archive_state

    uri = f"s3://{s3.bucket}/absent/model.tar.gz"
    with pytest.raises(ArchiveUnreadable) as refused:
        archive_state(s3.client, uri, s3.bucket, "models/")
    assert str(refused.value) == f"cannot read the archive {uri}: 404"


class _S3Error(Exception):
    def __init__(self, response: object) -> None:
        super().__init__("s3 error")
        self.response = response


@pytest.mark.parametrize(
    ("response", "status", "described"),
    [
        (
            {"Error": {"Code": "PreconditionFailed"}, "ResponseMetadata": {"HTTPStatusCode": 400}},
            412,
            "PreconditionFailed",
        ),
        ({"Error": {"Code": "NoSuchKey"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, 404, "NoSuchKey"),
        ({"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": "403"}}, 403, "AccessDenied"),
        ({"ResponseMetadata": {"HTTPStatusCode": 503}}, 503, "503"),
        ({"Error": {"Code": ""}, "ResponseMetadata": {"HTTPStatusCode": 500}}, 500, "500"),
        ({"Error": {"Code": "SlowDown"}}, None, "SlowDown"),
        ({"Error": {}, "ResponseMetadata": {"HTTPStatusCode": 0}}, None, "0"),
        ({}, None, "None"),
        ("not a dict", None, "_S3Error: s3 error"),
    ],
)
def test_s3_errors_are_read_by_their_code_then_their_status(response, status, described) -> None:
    from hfstage.tarball import _describe, _status

    error = _S3Error(response)
    assert _status(error) == status
    assert _describe(error) == described


def test_errors_without_a_response_are_named_by_their_type() -> None:
    from hfstage.tarball import _describe, _status

    assert _status(ConnectionResetError("reset")) is None
    assert _describe(ConnectionResetError("reset")) == "ConnectionResetError: reset"
    assert _describe(ConnectionResetError()) == "ConnectionResetError"
    assert _describe(TimeoutError("read timed out\n  at offset 7" + "x" * 300)) == "TimeoutError: read timed out"
    assert len(_describe(OSError("y" * 500))) == len("OSError: ") + 200


# ---- pax records, one by one -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "records"),
    [
        (b"12 path=abc\n", {"path": "abc"}),
        (b"5 a=\n", {"a": ""}),  # the shortest record: an empty value
        (b"14 path=a=b=c\n", {"path": "a=b=c"}),  # the first '=' ends the key
        (b"12 path=abc\n" + b"\0" * 500, {"path": "abc"}),  # tarfile's NUL padding of the last block
        (b"12 path=abc\n13 size=1234\n", {"path": "abc", "size": "1234"}),
        (b"12 path=abc\n12 path=xyz\n", {"path": "xyz"}),  # a later record wins, as in tarfile
        (b"", {}),
    ],
)
def test_pax_records_are_read_exactly(data: bytes, records: dict[str, str]) -> None:
    from hfstage.tarball import _pax_records

    assert _pax_records(data) == records


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"04 a=\n", "a pax header record at byte 0 has no valid length"),  # under the shortest possible
        (b"13 path=abc\n", "a pax header record at byte 0 has no valid length"),  # one byte past the data
        (b"12 path=abc\n" + b"x path=a\n", "a pax header record at byte 12 has no valid length"),
        (b"12 path=abc\n   ", "a pax header record at byte 12 has no valid length"),  # spaces are no padding
        (b" 5 a=\n", "a pax header record at byte 0 has no valid length"),
        (b"12 path=abcd", "a pax header record at byte 0 is not 'key=value'"),  # no line end
        (b"11 pathabc\n", "a pax header record at byte 0 is not 'key=value'"),
        (b"6 =ab\n", "a pax header record at byte 0 is not 'key=value'"),
        (b"12 path=abc\n6 =ab\n", "a pax header record at byte 12 is not 'key=value'"),
        (b"7 \xff\xfe=a\n", "a pax key b'\\xff\\xfe' is not UTF-8"),
        (b"7 k=\xff\xfe\n", "a pax value b'\\xff\\xfe' is not UTF-8"),
    ],
)
def test_malformed_pax_records_are_refused_naming_the_byte(data: bytes, why: str) -> None:
    from hfstage.tarball import _pax_records, _Refused

    with pytest.raises(_Refused) as refused:
        _pax_records(data)
    assert str(refused.value) == why


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"12 path=abc\nXX", "a pax header record at byte 12 has no valid length"),  # only NULs are padding
        (b"000006x", "a pax header record at byte 0 has no valid length"),  # no space at all: no length
        # a length field of 20 digits: longer than any record could need (19 digits hold 2**63)
        (b"00000000000000000027 a=bcd\n", "a pax header record at byte 0 has no valid length"),
    ],
)
def test_pax_lengths_and_padding_at_their_edges(data: bytes, why: str) -> None:
    from hfstage.tarball import _pax_records, _Refused

    with pytest.raises(_Refused) as refused:
        _pax_records(data)
    assert str(refused.value) == why
    assert _pax_records(b"0000000000000000026 a=bcd\n") == {"a": "bcd"}  # 19 digits: read


# ---- the layout of an archive's members under the prefix ---------------------------------------------------


def _layout(*members: tuple[str, str], prefix: str = "models/x/"):
    from hfstage.tarball import Member, plan_layout

    return plan_layout([Member(name, kind, size=len(name), sha256=f"s-{name}") for name, kind in members], prefix)


def test_one_top_folder_is_unpacked_from_inside() -> None:
    layout = _layout(("model", "folder"), ("model/a.json", "file"), ("model/sub", "folder"), ("model/sub/b", "file"))
    assert layout.stripped == "model"
    assert [f.path for f in layout.files] == ["a.json", "sub/b"]
    assert layout.source_names == {"model/a.json": "a.json", "model/sub/b": "sub/b"}
    assert [(f.size, f.sha256, f.blob_id) for f in layout.files] == [
        (12, "s-model/a.json", "s-model/a.json"),
        (11, "s-model/sub/b", "s-model/sub/b"),
    ]


@pytest.mark.parametrize(
    "members",
    [
        (("model", "folder"), ("model/a.json", "file"), ("README.md", "file")),  # a file beside the folder
        (("model/a.json", "file"), ("other/b.json", "file")),  # two top folders
    ],
)
def test_names_are_kept_whole_without_a_single_top_folder(members) -> None:
    layout = _layout(*members)
    assert layout.stripped is None
    assert [f.path for f in layout.files] == [name for name, kind in members if kind == "file"]


def test_a_file_that_is_also_a_folder_and_an_empty_archive_are_refused() -> None:
    from hfstage.tarball import _Refused

    with pytest.raises(_Refused) as refused:
        _layout(("a", "file"), ("a", "folder"), ("b", "file"), ("c", "folder"))
    assert str(refused.value) == (
        "1 of the 4 members has a name that cannot be staged safely: 'a' (both a file and a folder); "
        "repack the archive without them"
    )
    with pytest.raises(_Refused) as refused:
        _layout(("model", "folder"), ("model/empty", "folder"))
    assert str(refused.value) == "the archive holds no regular file"


def test_a_member_too_long_for_a_key_under_the_prefix_is_refused() -> None:
    from hfstage.names import MAX_KEY_BYTES
    from hfstage.tarball import _Refused

    prefix = "models/" + "/".join(["p" * 100] * 8) + "/"  # 815 bytes of folders, each under 255
    fits = "f" * (MAX_KEY_BYTES - len(prefix))
    assert [f.path for f in _layout((fits, "file"), prefix=prefix).files] == [fits]
    with pytest.raises(_Refused) as refused:
        _layout((fits + "g", "file"), ("ok", "file"), prefix=prefix)
    assert str(refused.value).startswith("1 of the 2 members has a name that cannot be staged safely: ")
    assert str(refused.value).endswith("; repack the archive without them")


def test_unsafe_kinds_are_counted_among_all_members() -> None:
    from hfstage.tarball import _Refused

    with pytest.raises(_Refused) as refused:
        _layout(("a", "file"), ("l", "a symbolic link"), ("d", "a device"))
    assert str(refused.value) == (
        "2 of the 3 members have names that cannot be staged safely: 'l' (a symbolic link), 'd' (a device); "
        "repack the archive without them"
    )


def test_member_bytes_are_read_to_the_last_one_and_a_stop_is_a_transfer_failure() -> None:
    import threading

    from hfstage.tarball import _bytes, _Refused
    from hfstage.worker import EXIT_TRANSFER, Failure

    assert list(_bytes(io.BytesIO(b"x"), 1, threading.Event())) == [b"x"]  # a one-byte member
    assert list(_bytes(io.BytesIO(b""), 0, threading.Event())) == []
    stop = threading.Event()
    stop.set()
    with pytest.raises(Failure) as failed:
        list(_bytes(io.BytesIO(b"xy"), 2, stop))
    assert failed.value.code == EXIT_TRANSFER and str(failed.value) == "stopped before the archive was read"
    with pytest.raises(_Refused) as short:
        list(_bytes(io.BytesIO(b"x"), 2, threading.Event()))  # the stream ends one byte early
    assert str(short.value) == "it ends inside a member"


def test_each_file_written_is_logged_with_its_size_and_time(unpack, s3: S3Env) -> None:  # noqa: F811
    result = unpack(archive(files(FILES)))
    assert result.code == 0, result.message
    done = [
        dict(part.split("=", 1) for part in line.split(" "))
        for line in result.out.splitlines()
        if " event=done " in line
    ]
    assert sorted((e["path"], int(e["size"])) for e in done) == sorted((n, len(d)) for n, d in FILES.items())
    assert all(0 <= float(e["seconds"]) < 120 for e in done)


def test_a_part_s3_refuses_fails_the_run_naming_the_part_and_leaves_no_upload(
    s3: S3Env,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A member is streamed once per pass, so a part is not written again by the worker (botocore's standard
    retries answer a 5xx response); an error raised before any answer ends the run, named, with nothing left."""
    from botocore.exceptions import ClientError

    from hfstage.worker import EXIT_TRANSFER, main

    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files(FILES)))
    client, _ = s3.worker_client()

    def fail_part_2(params: dict, **_: object) -> None:
        if params.get("PartNumber") == 2:
            raise ClientError(
                {"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "UploadPart"
            )

    client.meta.events.register("before-parameter-build.s3.UploadPart", fail_part_2)
    message = tmp_path / "message"
    argv = [f"--source-s3-uri=s3://{s3.bucket}/{SOURCE_KEY}", f"--destination=s3://{s3.bucket}/models/"]
    code = main([*argv, "--part-size-mib=5", "--retry-base-s=0.01", f"--failure-file={message}"], s3_client=client)
    assert code == EXIT_TRANSFER
    where = f"s3://{s3.bucket}/{staged_prefix(s3)}model.safetensors"
    assert message.read_text() == (
        f"unpacking s3://{s3.bucket}/{SOURCE_KEY} failed: writing part 2 of {where}: InternalError\n"
    )
    assert s3.open_uploads() == [] and not [k for k in written(s3) if k.endswith(MANIFEST_NAME)]


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([("a.bin", 5)], "a.bin: 5 bytes on the second read, 4 on the first"),
        ([("a.bin", 4), ("a.bin", 4)], "a.bin: 4 bytes on the second read, 4 on the first"),  # listed twice now
        ([("b.bin", 4)], "1 of its files were not in it on the second read"),
    ],
)
def test_a_second_read_that_disagrees_with_the_first_writes_nothing_more(
    monkeypatch: pytest.MonkeyPatch, entries, why
) -> None:
    """Every GET is pinned to the ETag, so S3 serves the same bytes; should a second read still differ (a store
    that ignored If-Match), nothing past the first disagreement is written and the run says which file."""
    from hfstage.tarball import EXIT_SOURCE, Entry, HubFile, Layout, TarballRun
    from hfstage.worker import Failure

    run = object.__new__(TarballRun)
    run.source_uri = "s3://b/model.tar.gz"
    uploaded: list[str] = []
    monkeypatch.setattr(
        run, "_entries", lambda reader: (None, iter(Entry(n, "file", s) for n, s in entries)), raising=False
    )
    monkeypatch.setattr(run, "_upload", lambda stream, file, prefix: uploaded.append(file.path), raising=False)
    layout = Layout(
        files=[HubFile(path="a.bin", size=4, blob_id="x", sha256="x")],
        source_names={"a.bin": "a.bin", "b.bin": "b.bin"},
    )
    with pytest.raises(Failure) as failed:
        run._write(layout, "models/p/", {"a.bin"})
    assert failed.value.code == EXIT_SOURCE
    assert str(failed.value) == f"s3://b/model.tar.gz changed between the two reads ({why}); rerun to stage it again"
    assert uploaded == (["a.bin"] if len(entries) == 2 else [])


# ---- the archive reader's retries, each rule at its edge -----------------------------------------------------


def _reader(answers: list[object], *, size: int = 10, max_attempts: int = 3, stopped: bool = False):
    """A SourceReader over a client whose GETs answer ``answers`` in turn (bytes: a body; an exception: raised)."""
    import threading
    from types import SimpleNamespace

    from hfstage.events import EventLog
    from hfstage.tarball import SourceReader

    asked: list[dict] = []

    class Client:
        def get_object(self, **request: object) -> dict:
            asked.append(request)
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return {"Body": io.BytesIO(answer)}

    stop = threading.Event()
    if stopped:
        stop.set()
    run = SimpleNamespace(
        s3=Client(),
        source_bucket="b",
        source_key="k.tar.gz",
        source_uri="s3://b/k.tar.gz",
        etag="e" * 32,
        source_size=size,
        max_attempts=max_attempts,
        retry_base_s=0.0,
        stop=stop,
        log=EventLog(io.StringIO()),
    )
    return SourceReader(run), asked  # type: ignore[arg-type]


def _s3_error(status: int, code: str = "Error"):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


def test_a_read_of_no_size_reads_a_chunk_and_of_zero_reads_nothing() -> None:
    reader, asked = _reader([b"0123456789"])
    assert reader.read(0) == b"" and asked == []
    assert reader.read(None) == b"0123456789"  # type: ignore[arg-type]
    assert asked == [{"Bucket": "b", "Key": "k.tar.gz", "IfMatch": '"' + "e" * 32 + '"'}]
    assert reader.read(-1) == b""  # at the end: nothing more, nothing asked
    assert len(asked) == 1


@pytest.mark.parametrize("attempts", [1, 3])
def test_errors_are_retried_up_to_the_attempts_and_the_last_one_named(attempts: int) -> None:
    from hfstage.worker import EXIT_TRANSFER, Failure

    reader, asked = _reader([_s3_error(500, "InternalError")] * attempts, max_attempts=attempts)
    with pytest.raises(Failure) as failed:
        reader.read(4)
    assert failed.value.code == EXIT_TRANSFER
    assert str(failed.value) == "reading s3://b/k.tar.gz at byte 0: InternalError"
    assert len(asked) == attempts
    reader, asked = _reader([*[_s3_error(503, "SlowDown")] * (attempts - 1), b"0123"], max_attempts=attempts)
    assert reader.read(4) == b"0123" and len(asked) == attempts  # the last attempt may still succeed


@pytest.mark.parametrize(("status", "retried"), [(403, False), (404, False), (405, True), (500, True)])
def test_access_denied_and_not_found_are_not_retried(status: int, retried: bool) -> None:
    from hfstage.worker import Failure

    reader, asked = _reader([_s3_error(status, "X"), b"0123"])
    if retried:
        assert reader.read(4) == b"0123" and len(asked) == 2
    else:
        with pytest.raises(Failure, match=r"^reading s3://b/k.tar.gz at byte 0: X$"):
            reader.read(4)
        assert len(asked) == 1


def test_a_stream_that_ends_early_is_resumed_and_said_when_it_keeps_ending() -> None:
    from hfstage.worker import Failure

    reader, asked = _reader([b"0123", b"", b"456789"])
    assert reader.read(4) == b"0123"
    assert reader.read(6) == b"456789"  # the short stream was reopened from byte 4
    assert [a.get("Range") for a in asked] == [None, "bytes=4-", "bytes=4-"]
    reader, _ = _reader([b"", b"", b""])
    with pytest.raises(Failure) as failed:
        reader.read(4)
    assert str(failed.value) == "reading s3://b/k.tar.gz at byte 0: ConnectionError: the stream ended at byte 0 of 10"


def test_a_stop_ends_the_read_before_any_request() -> None:
    from hfstage.worker import EXIT_TRANSFER, Failure

    reader, asked = _reader([b"0123"], stopped=True)
    with pytest.raises(Failure) as failed:
        reader.read(4)
    assert (failed.value.code, str(failed.value)) == (EXIT_TRANSFER, "stopped before the archive was read")
    assert asked == []


def test_a_retry_of_the_archive_is_logged_whole_and_waits_at_most_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry line names the archive, the byte, the next attempt, the wait and the reason; the wait grows
    from --retry-base-s but never past 30 s (the worker's cap for every S3 and Hub retry)."""
    import random as random_module

    from hfstage.events import EventLog

    reader, _ = _reader([b"0123", _s3_error(500, "InternalError"), b"4567"], max_attempts=2)
    log = io.StringIO()
    waits: list[float] = []
    reader.run.log = EventLog(log)
    reader.run.retry_base_s = 100.0  # far past the cap
    reader.run.stop.wait = lambda delay: waits.append(delay)  # type: ignore[method-assign]
    monkeypatch.setattr(random_module, "uniform", lambda low, high: high)  # the longest wait the jitter allows
    assert reader.read(4) == b"0123"
    reader.close()  # the next read opens a new stream, which fails once
    assert reader.read(4) == b"4567"
    assert waits == [30.0]
    (line,) = log.getvalue().splitlines()
    assert line.split(" ", 1)[1] == "event=retry what=archive at_byte=4 attempt=2 wait_s=30.0 reason=InternalError"


def test_the_archive_prefix_is_the_destination_without_its_slashes_then_a_hash_of_the_uri() -> None:
    from hfstage.tarball import archive_prefix

    uri = "s3://bucket/job-1/output/model.tar.gz"
    leaf = f"s3-tarball--{hashlib.sha256(uri.encode()).hexdigest()[:16]}/"
    assert archive_prefix("models/", uri) == "models/" + leaf
    assert archive_prefix("/team/models//", uri) == "team/models/" + leaf
    assert archive_prefix("", uri) == archive_prefix("/", uri) == leaf  # the bucket's root: no leading slash
    assert archive_prefix("models/", uri + "x") != archive_prefix("models/", uri)


def _manifest(uri: str, etag: str, paths: tuple[str, ...] = ("config.json",), **archive: object) -> dict:
    entries = [{"path": p, "size": 2, "blob_id": "b" * 40, "sha256": "c" * 64} for p in paths]
    return {"repo_id": uri, "revision": etag, "files": entries, **({"archive": archive} if archive else {})}


def test_a_manifest_counts_only_for_this_archive_its_etag_and_its_patterns() -> None:
    from hfstage.tarball import manifest_files

    uri, etag, prefix = "s3://b/m.tar.gz", "e" * 32, "models/x/"
    assert [f.path for f in manifest_files(_manifest(uri, etag), uri, etag, prefix)] == ["config.json"]
    assert manifest_files(_manifest(uri, "f" * 32), uri, etag, prefix) == ()  # this archive, another ETag
    assert manifest_files(_manifest("s3://b/other.tar.gz", etag), uri, etag, prefix) == ()
    # Recorded patterns must be the ones asked for, each list on its own; none recorded means none used.
    recorded = _manifest(uri, etag, include=["*.json"], exclude=["extra/*"])
    assert len(manifest_files(recorded, uri, etag, prefix, ["*.json"], ["extra/*"])) == 1
    assert manifest_files(recorded, uri, etag, prefix, ["*.json"], []) == ()
    assert manifest_files(recorded, uri, etag, prefix, [], ["extra/*"]) == ()
    assert manifest_files(_manifest(uri, etag, include=["*.json"]), uri, etag, prefix) == ()
    assert manifest_files(_manifest(uri, etag, exclude=["extra/*"]), uri, etag, prefix) == ()
    assert len(manifest_files(_manifest(uri, etag, include=[], exclude=[]), uri, etag, prefix)) == 1
    not_a_record = {**_manifest(uri, etag), "archive": ["*.json"]}  # malformed: as if none was recorded
    assert len(manifest_files(not_a_record, uri, etag, prefix)) == 1
    assert manifest_files(not_a_record, uri, etag, prefix, ["*.json"]) == ()


def test_a_manifest_listing_a_path_unsafe_under_the_prefix_counts_for_nothing() -> None:
    from hfstage.tarball import manifest_files

    uri, etag = "s3://b/m.tar.gz", "e" * 32
    assert manifest_files(_manifest(uri, etag, ("../escape.json",)), uri, etag, "models/x/") == ()
    long_name = "/".join(["w" * 200] * 5) + ".json"  # 1,009 bytes: a key alone, over S3's 1,024 under a long prefix
    assert len(manifest_files(_manifest(uri, etag, (long_name,)), uri, etag, "m/")) == 1
    assert manifest_files(_manifest(uri, etag, (long_name,)), uri, etag, "models/" + "p" * 40 + "/") == ()


def test_a_rerun_says_it_is_up_to_date_and_counts_every_file_skipped(unpack, s3: S3Env) -> None:  # noqa: F811
    assert unpack(archive(files(FILES)), "--exclude=extra/*").code == 0
    again = unpack(None, "--exclude=extra/*")  # the same patterns: nothing to do
    assert again.code == 0, again.message
    where = f"s3://{s3.bucket}/{staged_prefix(s3)}"
    (line,) = [line for line in again.out.splitlines() if " event=up_to_date " in line]
    assert line.split(" ", 1)[1] == (
        f'event=up_to_date destination={where} files=3 reason="manifest and every object match"'
    )
    (summary,) = [line for line in again.out.splitlines() if " event=summary " in line]
    assert " files=3 uploaded=0 skipped=3 bytes_uploaded=0 manifest=unchanged" in summary, summary


def test_an_unreadable_manifest_is_ignored_with_a_warning_and_the_prefix_staged_again(unpack, s3: S3Env) -> None:  # noqa: F811
    assert unpack(archive(files(FILES))).code == 0
    prefix = staged_prefix(s3)
    s3.client.put_object(Bucket=s3.bucket, Key=prefix + MANIFEST_NAME, Body=b"[1, 2]")
    again = unpack(None)
    assert again.code == 0, again.message
    warning = f"s3://{s3.bucket}/{prefix}{MANIFEST_NAME} is not a JSON object"
    assert f'event=warning reason="existing manifest ignored: {warning}"' in again.out
    assert "event=up_to_date" not in again.out
    assert json.loads(s3.body(prefix + MANIFEST_NAME))["repo_id"] == f"s3://{s3.bucket}/{SOURCE_KEY}"


@pytest.mark.parametrize(
    ("operation", "action"),
    [("GetObject", "reading"), ("ListObjectsV2", "checking objects under")],
)
def test_an_s3_error_while_checking_a_rerun_names_what_was_being_done(
    s3: S3Env,  # noqa: F811
    tmp_path: Path,
    operation: str,
    action: str,
) -> None:
    from botocore.exceptions import ClientError

    from hfstage.worker import main

    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files(FILES)))
    argv = [f"--source-s3-uri=s3://{s3.bucket}/{SOURCE_KEY}", f"--destination=s3://{s3.bucket}/models/"]
    assert main([*argv, "--part-size-mib=5", f"--failure-file={tmp_path / 'first'}"]) == 0
    prefix = staged_prefix(s3)
    client, _ = s3.worker_client()

    def refuse(params: dict, **_: object) -> None:
        if str(params.get("Key", params.get("Prefix", ""))).startswith(prefix):
            raise ClientError(
                {"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, operation
            )

    client.meta.events.register(f"before-parameter-build.s3.{operation}", refuse)
    message = tmp_path / "message"
    assert main([*argv, "--part-size-mib=5", f"--failure-file={message}"], s3_client=client) == 1
    assert f"{action} s3://{s3.bucket}/{prefix}: AccessDenied" in message.read_text()


def test_the_header_extension_budget_is_the_one_asked_for(unpack, s3: S3Env) -> None:  # noqa: F811
    info, data = member("config.json", b"{}")
    info.pax_headers = {"comment": "x" * 1500}  # one pax record block of 1,536 bytes, plus its header
    packed = archive([(info, data)])
    small = unpack(packed, "--max-header-bytes=1024")
    assert small.code == 3 and "hold more than 1,024 bytes in all" in (small.message or ""), small.message
    assert written(s3) == []
    assert unpack(packed, "--max-header-bytes=4096").code == 0


def test_a_value_that_is_no_etag_is_refused_naming_its_first_80_characters() -> None:
    from hfstage.tarball import normal_etag

    assert normal_etag(' "0123456789abcdef0123456789abcdef" ') == "0123456789abcdef0123456789abcdef"
    bad = "z" * 79 + "yx"
    with pytest.raises(ValueError) as refused:
        normal_etag(bad)
    assert str(refused.value) == f"ETag {bad[:80]!r} is not an S3 ETag"


def test_closing_the_reader_closes_its_stream_once_even_when_that_fails() -> None:
    reader, _ = _reader([b"0123456789"])

    class Body:
        closed = 0

        def read(self, n: int) -> bytes:
            return b"x"

        def close(self) -> None:
            Body.closed += 1
            raise ConnectionResetError("a broken connection may fail to close")

    reader._body = Body()
    reader.close()  # the failure is swallowed: the next read opens a new stream
    reader.close()  # nothing left to close
    assert Body.closed == 1 and reader._body is None


def _run_with(s3: S3Env, tmp_path: Path, operation: str, hook, *extra: str) -> tuple[int, str, str, Counter]:  # noqa: F811
    """The tarball mode over the archive at SOURCE_KEY with ``hook`` before each ``operation``: exit status,
    failure message, log, S3 calls."""
    from hfstage.worker import main

    client, counter = s3.worker_client()
    client.meta.events.register(f"before-parameter-build.s3.{operation}", hook)
    message = tmp_path / "message"
    message.unlink(missing_ok=True)
    argv = [f"--source-s3-uri=s3://{s3.bucket}/{SOURCE_KEY}", f"--destination=s3://{s3.bucket}/models/"]
    import contextlib
    import io as io_module

    out = io_module.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--retry-base-s=0.01", f"--failure-file={message}", *extra], s3_client=client)
    return code, (message.read_text() if message.exists() else ""), out.getvalue(), counter.calls


def _error(code: str, status: int, operation: str):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


@pytest.mark.parametrize(
    ("status", "code", "exit_code", "said"),
    [
        (403, "AccessDenied", 3, "AccessDenied; the job role needs s3:GetObject on it (and kms:Decrypt for SSE-KMS)"),
        (404, "NoSuchKey", 3, "NoSuchKey"),
        (500, "InternalError", 1, "InternalError"),
    ],
)
def test_an_archive_that_cannot_be_headed_fails_by_its_status(
    s3: S3Env,  # noqa: F811
    tmp_path: Path,
    status: int,
    code: str,
    exit_code: int,
    said: str,
) -> None:
    """Access denied (with what the role needs) and not found are the source's fault (exit 3); anything else
    is a transfer failure (exit 1)."""
    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files(FILES)))

    def refuse(params: dict, **_: object) -> None:
        if params.get("Key") == SOURCE_KEY:
            raise _error(code, status, "HeadObject")

    exit_status, message, _, _ = _run_with(s3, tmp_path, "HeadObject", refuse)
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    assert (exit_status, message) == (exit_code, f"unpacking {uri} failed: cannot read {uri}: {said}\n")


def test_a_transient_archive_error_is_retried_after_the_base_delay_and_the_part_size_is_the_one_asked(
    s3: S3Env,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import random as random_module

    monkeypatch.setattr(random_module, "uniform", lambda low, high: high)  # the jitter's longest wait
    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files(FILES)))
    failed: list[bool] = []

    def fail_once(params: dict, **_: object) -> None:
        if params.get("Key") == SOURCE_KEY and not failed:
            failed.append(True)
            raise _error("InternalError", 500, "GetObject")

    code, message, out, calls = _run_with(
        s3, tmp_path, "GetObject", fail_once, "--part-size-mib=7", "--retry-base-s=0.2"
    )
    assert code == 0, message
    (retry,) = [line for line in out.splitlines() if " event=retry " in line]
    assert retry.split(" ", 1)[1] == "event=retry what=archive at_byte=0 attempt=2 wait_s=0.2 reason=InternalError"
    assert calls["UploadPart"] == 2  # the weights, 12 MiB and 123 bytes, in parts of 7 MiB


def test_the_archive_size_bound_allows_an_archive_of_exactly_that_size(unpack, s3: S3Env) -> None:  # noqa: F811
    """Stored without compression (gzip level 0) the archive is a little larger than its tar, so the archive's
    own size is what meets the bound first: equal passes, one byte over is refused before any read."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info, data = member("config.json", b"{}")
        tar.addfile(info, io.BytesIO(data))
    packed = gzip.compress(buffer.getvalue(), compresslevel=0)
    assert len(packed) > len(buffer.getvalue())
    over = unpack(packed, f"--max-total-bytes={len(packed) - 1}")
    assert over.code == 3
    assert f"it is {len(packed):,} bytes, over --max-total-bytes {len(packed) - 1:,}" in (over.message or "")
    assert written(s3) == []
    exact = unpack(None, f"--max-total-bytes={len(packed)}")
    assert exact.code == 0, exact.message


def test_an_archive_replaced_before_the_first_read_is_refused(s3: S3Env, tmp_path: Path) -> None:  # noqa: F811
    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files(FILES)))
    replaced: list[bool] = []

    def replace_first(params: dict, **_: object) -> None:
        if params.get("Key") == SOURCE_KEY and not replaced:
            replaced.append(True)
            s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files({"config.json": b"{}"})))

    code, message, _, _ = _run_with(s3, tmp_path, "GetObject", replace_first)
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    assert (code, message) == (3, f"unpacking {uri} failed: {uri} changed while it was read (If-Match failed)\n")
    assert written(s3) == []


def _event(out: str, name: str) -> str:
    (line,) = [line for line in out.splitlines() if f" event={name} " in line]
    return line.split(" ", 1)[1]


def test_a_run_logs_what_it_resolved_selected_planned_and_wrote(unpack, s3: S3Env) -> None:  # noqa: F811
    data = archive(files(FILES, top="model/"))
    result = unpack(data, '--exclude=["extra/*"]')
    assert result.code == 0, result.message
    uri, prefix = f"s3://{s3.bucket}/{SOURCE_KEY}", staged_prefix(s3)
    etag = s3.client.head_object(Bucket=s3.bucket, Key=SOURCE_KEY)["ETag"].strip('"')
    where = f"s3://{s3.bucket}/{prefix}"
    kept = {name: body for name, body in FILES.items() if not name.startswith("extra/")}
    total = sum(len(body) for body in kept.values())
    assert _event(result.out, "resolved") == (
        f"event=resolved source={uri} etag={etag} bytes={len(data)} destination={where}"
    )
    assert _event(result.out, "selected") == "event=selected files=3 of=4 exclude=['extra/*']"
    assert _event(result.out, "plan") == f"event=plan destination={where} files=3 bytes={total} unpacked_from=model"
    assert _event(result.out, "manifest") == f"event=manifest destination={where} files=3 total_bytes={total}"
    summary = _event(result.out, "summary")
    assert f" files=3 uploaded=3 skipped=0 bytes_uploaded={total} manifest=written" in summary, summary


def test_a_run_that_selects_every_file_says_so_nowhere_and_unpacks_from_the_root(unpack, s3: S3Env) -> None:  # noqa: F811
    result = unpack(archive(files(FILES)))
    assert result.code == 0, result.message
    assert "event=selected" not in result.out
    assert _event(result.out, "plan").endswith(" unpacked_from=/")
    lost = unpack(None, "--exclude=tokenizer.json")  # another pattern: a new manifest; the files were there
    summary = _event(lost.out, "summary")
    assert " files=3 uploaded=0 skipped=3 bytes_uploaded=0 manifest=written" in summary, summary


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        (("--include=*.bin",), "include ['*.bin'] and exclude []"),
        (('--exclude=["*"]',), "include ['*'] and exclude ['*']"),
    ],
)
def test_patterns_that_select_nothing_are_a_usage_error_naming_them(unpack, s3: S3Env, flags, shown: str) -> None:  # noqa: F811
    result = unpack(archive(files(FILES)), *flags)
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    assert result.code == 2
    assert result.message == f"unpacking {uri} failed: no file of {uri} matches {shown}\n"
    assert written(s3) == []


def test_an_archive_replaced_since_the_plan_is_refused_in_words_that_say_what_to_do(unpack, s3: S3Env) -> None:  # noqa: F811
    planned = "0123456789abcdef0123456789abcdef"
    result = unpack(archive(files(FILES)), f'--source-etag="{planned}"')
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    etag = s3.client.head_object(Bucket=s3.bucket, Key=SOURCE_KEY)["ETag"].strip('"')
    assert result.message == (
        f"unpacking {uri} failed: {uri} has ETag {etag}, not the planned {planned}: "
        "it was replaced; redeploy to stage the new archive\n"
    )


def test_a_file_too_large_for_one_s3_object_is_refused_before_any_write(
    unpack,
    s3: S3Env,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S3 holds at most 10,000 parts of 5 GiB: past that (48.8 TiB, not buildable here) part_size_for refuses."""
    import hfstage.tarball as tarball

    def refuse(size: int, preferred: int) -> int:
        raise ValueError("over 10,000 parts of 5 GiB")

    monkeypatch.setattr(tarball, "part_size_for", refuse)
    result = unpack(archive(files({"config.json": b"{}"})))
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    assert (result.code, result.message) == (
        3,
        f"unpacking {uri} failed: config.json cannot be one S3 object: over 10,000 parts of 5 GiB\n",
    )
    assert written(s3) == []


# ---- the tarball mode's command line, as a user meets it -----------------------------------------------------

TARBALL_HELP = {
    "--source-s3-uri": "s3://bucket/key.tar.gz: a gzip-compressed tar to unpack",
    "--source-etag": "the ETag the archive must have (the staging handler passes the one it planned with)",
    "--destination": "s3://bucket/prefix/: files go to <prefix>/s3-tarball--<hash>/<etag>/",
    "--include": "glob of archive files to unpack (repeatable, or one JSON array)",
    "--exclude": "glob of archive files to leave out (repeatable, or one JSON array)",
    "--part-size-mib": "multipart part size in MiB, 5-5120 (default 64; one in memory)",
    "--max-members": "most archive members (default 10,000)",
    "--max-total-bytes": (
        "most bytes of tar the archive unpacks to: every member's data, headers, padding (default 2 TiB)"
    ),
    "--max-header-bytes": "most bytes of pax extended/global headers and GNU long names in all (default 32 MiB)",
    "--max-attempts": "attempts per read of the archive before the run fails",
    "--retry-base-s": "first retry delay; doubles each attempt (default 1)",
    "--resource-config": "host list of a multi-instance job: hosts other than the first do nothing",
    "--progress-interval-s": "accepted for the Hub worker's flags; unused",
    "--failure-file": "where the failure reason goes (default $HFSTAGE_FAILURE_FILE or /opt/ml/output/message)",
}
TARBALL_OK = ["--source-s3-uri=s3://bkt/job/model.tar.gz", "--destination=s3://bkt/models/"]


def test_the_tarball_help_documents_every_option() -> None:
    import argparse
    import re

    from hfstage.tarball import add_arguments

    parser = argparse.ArgumentParser(prog="hfstage")
    add_arguments(parser)
    text = " ".join(parser.format_help().split())
    for option, help_text in TARBALL_HELP.items():
        assert re.search(rf"{re.escape(option)}( [A-Z_0-9]+)? {re.escape(help_text)}", text), option
    assert {a.option_strings[-1] for a in parser._actions} - {"--help"} == set(TARBALL_HELP)


def test_the_tarball_defaults_are_the_ones_its_help_promises() -> None:
    from hfstage.tarball import parse_args

    args = parse_args(TARBALL_OK)
    assert (args.source_s3_uri, args.source_etag, args.bucket, args.prefix) == (
        "s3://bkt/job/model.tar.gz",
        None,
        "bkt",
        "models/",
    )
    assert (args.include, args.exclude, args.part_size_mib) == ([], [], 64)
    assert (args.max_members, args.max_total_bytes, args.max_header_bytes) == (10_000, 2 * 1024**4, 32 * MiB)
    assert (args.max_attempts, args.retry_base_s, args.progress_interval_s) == (5, 1.0, 10.0)
    assert (args.resource_config, args.failure_file) == (None, None)
    parsed = parse_args([*TARBALL_OK, "--part-size-mib=6", "--max-attempts=2", "--retry-base-s=0.5", "--include=a*"])
    assert (parsed.part_size_mib, parsed.max_attempts, parsed.retry_base_s, parsed.include) == (6, 2, 0.5, ["a*"])


@pytest.mark.parametrize("missing", ["--source-s3-uri", "--destination"])
def test_the_source_and_the_destination_are_required(missing: str) -> None:
    from hfstage.tarball import parse_args
    from hfstage.worker import EXIT_USAGE, Failure

    kept = [a for a in TARBALL_OK if not a.startswith(missing)]
    with pytest.raises(Failure) as refused:
        parse_args(kept)
    assert refused.value.code == EXIT_USAGE and missing in str(refused.value)


@pytest.mark.parametrize(
    ("argv", "tarball"),
    [
        (["--source-s3-uri=s3://b/k.tar.gz"], True),
        (["--destination=s3://b/p/", "--source-s3-uri", "s3://b/k.tar.gz"], True),
        (["--repo-id=Org/Name", "--destination=s3://b/p/"], False),
        (["--source-s3-urix=1"], False),
        ([], False),
    ],
)
def test_the_tarball_mode_is_chosen_by_its_flag_alone(argv: list[str], tarball: bool) -> None:
    from hfstage.tarball import is_tarball_run

    assert is_tarball_run(argv) is tarball


def test_the_manifest_records_the_archive_it_came_from(unpack, s3: S3Env) -> None:  # noqa: F811
    data = archive(files(FILES, top="model/"))
    assert unpack(data, "--include=*.json", "--include=*.safetensors", "--exclude=tokenizer*").code == 0
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    etag = s3.client.head_object(Bucket=s3.bucket, Key=SOURCE_KEY)["ETag"].strip('"')
    manifest = json.loads(s3.body(staged_prefix(s3) + MANIFEST_NAME))
    assert (manifest["repo_id"], manifest["revision"], manifest["source"]) == (uri, etag, uri)
    assert manifest["archive"] == {
        "uri": uri,
        "etag": etag,
        "bytes": len(data),
        "unpacked_from": "model",
        "include": ["*.json", "*.safetensors"],
        "exclude": ["tokenizer*"],
    }
    assert unpack(archive(files(FILES)), key="flat/model.tar.gz").code == 0
    flat = json.loads(s3.body(staged_prefix(s3, "flat/model.tar.gz") + MANIFEST_NAME))
    assert flat["archive"]["unpacked_from"] == ""  # no single top folder: unpacked from the root


def test_a_manifest_s3_refuses_names_the_prefix(s3: S3Env, tmp_path: Path) -> None:  # noqa: F811
    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files({"config.json": b"{}"})))

    def refuse(params: dict, **_: object) -> None:
        if str(params.get("Key", "")).endswith(MANIFEST_NAME):
            raise _error("AccessDenied", 403, "PutObject")

    code, message, _, _ = _run_with(s3, tmp_path, "PutObject", refuse)
    uri, where = f"s3://{s3.bucket}/{SOURCE_KEY}", f"s3://{s3.bucket}/{staged_prefix(s3)}"
    assert (code, message) == (1, f"unpacking {uri} failed: writing the manifest in {where}: AccessDenied\n")


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--source-etag=nope"], "--source-etag: ETag 'nope' is not an S3 ETag"),
        (["--destination=bkt/models/"], "--destination 'bkt/models/' is not s3://<bucket>/<prefix>/"),
        (["--part-size-mib=4"], "--part-size-mib 4 is outside 5-5120"),
        (["--part-size-mib=5121"], "--part-size-mib 5121 is outside 5-5120"),
        (["--max-members=0"], "--max-members must be at least 1"),
        (["--max-total-bytes=0"], "--max-total-bytes must be at least 1"),
        (["--max-header-bytes=0"], "--max-header-bytes must be at least 1"),
        (["--max-attempts=0"], "--max-attempts must be at least 1"),
        (["--retry-base-s=-0.5"], "--retry-base-s must be positive"),
    ],
)
def test_each_bad_tarball_argument_is_named(flags: list[str], problem: str) -> None:
    from hfstage.tarball import parse_args
    from hfstage.worker import EXIT_USAGE, Failure

    with pytest.raises(Failure) as refused:
        parse_args([*TARBALL_OK, *flags])
    assert (refused.value.code, str(refused.value)) == (EXIT_USAGE, f"bad arguments: {problem}")


def test_every_bad_tarball_argument_is_named_at_once_and_the_edges_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hfstage.tarball import main, parse_args

    monkeypatch.setenv("HFSTAGE_FAILURE_FILE", str(tmp_path / "message"))  # --failure-file is not parsed yet
    assert main([*TARBALL_OK, "--max-attempts=0", "--retry-base-s=-1"]) == 2
    assert (tmp_path / "message").read_text() == (
        "unpacking the archive failed: bad arguments: --max-attempts must be at least 1; "
        "--retry-base-s must be positive\n"
    )
    edges = ["--part-size-mib=5", "--max-members=1", "--max-header-bytes=1", "--max-attempts=1", "--retry-base-s=0"]
    assert parse_args([*TARBALL_OK, *edges]).part_size_mib == 5
    assert parse_args([*TARBALL_OK, "--part-size-mib=5120"]).part_size_mib == 5120
    root = parse_args(["--source-s3-uri=s3://bkt/m.tar.gz", "--destination=s3://bkt/"])
    assert (root.bucket, root.prefix) == ("bkt", "")  # the bucket's root
    listed = parse_args([*TARBALL_OK, '--include=["*.json", "*.safetensors"]', "--exclude=a", "--exclude=b"])
    assert (listed.include, listed.exclude) == (["*.json", "*.safetensors"], ["a", "b"])


def test_the_tarball_help_names_the_program_and_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    from hfstage.tarball import main

    assert main(["--source-s3-uri=s3://bkt/m.tar.gz", "--help"], prog="hfstage") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: hfstage ") and "Unpack a model.tar.gz in S3 into a verified prefix." in text


def test_hosts_other_than_the_first_do_nothing_and_a_bad_host_list_is_a_usage_error(
    s3: S3Env,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hfstage.tarball import main

    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files({"config.json": b"{}"})))
    argv = [f"--source-s3-uri=s3://{s3.bucket}/{SOURCE_KEY}", f"--destination=s3://{s3.bucket}/models/"]
    config = tmp_path / "resourceconfig.json"
    config.write_text(json.dumps({"current_host": "algo-2", "hosts": ["algo-2", "algo-1"]}))
    client, counter = s3.worker_client()
    capsys.readouterr()
    assert main([*argv, f"--resource-config={config}"], s3_client=client) == 0
    out = capsys.readouterr().out
    assert (
        _event(out, "summary")
        == 'event=summary status=ok host=algo-2 reason="an archive is unpacked by the first host only"'
    )
    assert sum(counter.calls.values()) == 0 and written(s3) == []
    config.write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-2", "algo-1"]}))
    assert main([*argv, f"--resource-config={config}"], s3_client=client) == 0  # the first host unpacks
    assert written(s3) != []
    config.write_text("[]")
    message = tmp_path / "message"
    assert main([*argv, f"--resource-config={config}", f"--failure-file={message}"], s3_client=client) == 2
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    assert message.read_text() == (
        f"unpacking {uri} failed: {config} lacks current_host (a string) and hosts (a list of strings)\n"
    )


def test_a_run_begins_by_saying_what_it_unpacks_where_with_its_own_client(
    s3: S3Env,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a client handed in, the mode makes one sized for one file and two parts in flight."""
    import hfstage.tarball as tarball

    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files({"config.json": b"{}"})))
    asked: list[object] = []

    def client_for(settings: object) -> object:
        asked.append(settings)
        return s3.worker_client()[0]

    monkeypatch.setattr(tarball, "make_s3_client", client_for)
    argv = [f"--source-s3-uri=s3://{s3.bucket}/{SOURCE_KEY}", f"--destination=s3://{s3.bucket}/models/"]
    capsys.readouterr()
    assert tarball.main([*argv, "--part-size-mib=6"]) == 0
    assert [(s.parts_in_flight, s.files_in_flight) for s in asked] == [(2, 1)]  # type: ignore[attr-defined]
    begin = _event(capsys.readouterr().out, "begin")
    assert (
        begin == f"event=begin source={argv[0].split('=', 1)[1]} destination=s3://{s3.bucket}/models/ part_size_mib=6"
    )


def test_an_archive_replaced_during_the_second_read_says_to_rerun(s3: S3Env, tmp_path: Path) -> None:  # noqa: F811
    s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files(FILES)))
    reads: list[bool] = []

    def replace_before_the_second_read(params: dict, **_: object) -> None:
        if params.get("Key") == SOURCE_KEY:
            reads.append(True)
            if len(reads) == 2:
                s3.client.put_object(Bucket=s3.bucket, Key=SOURCE_KEY, Body=archive(files({"config.json": b"{}"})))

    code, message, _, _ = _run_with(s3, tmp_path, "GetObject", replace_before_the_second_read)
    uri = f"s3://{s3.bucket}/{SOURCE_KEY}"
    assert (code, message) == (
        3,
        f"unpacking {uri} failed: {uri} changed between the two reads (If-Match failed); rerun to stage it again\n",
    )


# ---- the tar reader's fields, at their edges -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (b"\0" * 12, 0),  # an empty field is 0
        (b"    \0", 0),
        (b" 17 \0", 15),
        (b"17\0\0\0", 15),  # NUL padding after the number
        (b"\x80" + (2**80 + 5).to_bytes(11, "big"), 2**80 + 5),  # GNU base-256: every byte after the marker
    ],
)
def test_header_numbers_are_octal_or_base_256(field: bytes, value: int) -> None:
    from hfstage.tarball import _number

    assert _number(field, "size") == value


@pytest.mark.parametrize("field", [b"\t17\0", b"X17\0", b"18\0", b"1 7\0"])
def test_a_header_number_with_anything_but_octal_digits_and_spaces_is_refused(field: bytes) -> None:
    from hfstage.tarball import _number, _Refused

    with pytest.raises(_Refused, match=r"^a header's size b'.*' is not an octal number$"):
        _number(field, "size")


def test_a_refused_header_number_is_shown_cut_to_20_bytes() -> None:
    from hfstage.tarball import _number, _Refused

    with pytest.raises(_Refused) as refused:
        _number(b"9" * 25 + b"\0", "mode")
    assert str(refused.value) == f"a header's mode {b'9' * 20!r} is not an octal number"


def _header(name: str = "config.json", size: int = 2) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.USTAR_FORMAT)[:512]


def _with_checksum(header: bytes, field: bytes) -> bytes:
    assert len(field) == 8
    return header[:148] + field + header[156:]


def _sums(header: bytes) -> tuple[int, int]:
    blanked = header[:148] + b" " * 8 + header[156:]
    return sum(blanked), sum(blanked) - 256 * sum(1 for b in blanked if b > 127)


def test_header_checksums_in_the_forms_tars_write_them_are_accepted() -> None:
    from hfstage.tarball import _checksum_ok

    header = _header()
    unsigned, _ = _sums(header)
    assert _checksum_ok(header)  # tarfile's "%06o\0 "
    assert _checksum_ok(_with_checksum(header, b"%06o\0\0" % unsigned))  # NUL-padded
    assert _checksum_ok(_with_checksum(header, (b"%o\0" % unsigned).ljust(8, b" ")))  # no leading zeros
    assert _checksum_ok(_with_checksum(header, b"%07o " % unsigned))  # 7 digits and a space, no NUL
    # Old tars summed the header as signed bytes: a byte over 127 counts 256 less.
    high = _header("cafe.json")
    high = high[:3] + b"\xe9" + high[4:]  # one byte over 127 in the name
    unsigned, signed = _sums(high)
    assert signed == unsigned - 256
    assert _checksum_ok(_with_checksum(high, b"%06o\0 " % signed)) and _checksum_ok(
        _with_checksum(high, b"%06o\0 " % unsigned)
    )
    assert not _checksum_ok(_with_checksum(high, b"%06o\0 " % (unsigned + 256)))


@pytest.mark.parametrize(
    ("field", "off"),
    [
        (b"\0" * 8, 0),
        (b" " * 8, 0),
        (b"\t%05o\0 ", 0),
        (b"X%05o\0 ", 0),
        (b"%05o8\0 ", 0),
        (b"%06o\0 ", 1),
    ],
    ids=["empty", "spaces", "a tab", "a letter", "an 8", "one off"],
)
def test_a_header_checksum_that_is_not_one_is_refused_without_an_error(field: bytes, off: int) -> None:
    from hfstage.tarball import _checksum_ok

    header = _header()
    unsigned, _ = _sums(header)
    if b"%" in field:
        field = field % (unsigned + off)
    assert not _checksum_ok(_with_checksum(header, field))


def test_names_that_are_not_utf8_are_shown_cut_to_60_bytes() -> None:
    from hfstage.tarball import _Refused, _text

    with pytest.raises(_Refused) as refused:
        _text(b"\xff" * 70, "a member name")
    shown = repr(b"\xff" * 60)
    assert str(refused.value) == f"a member name {shown} is not UTF-8"


def _entries(data: bytes, *, limit: int = 10**9, headers: int = 10**6) -> list:
    import threading

    from hfstage.tarball import _Gunzip, read_tar

    stream = _Gunzip(io.BytesIO(data), limit, threading.Event())
    found = []
    for entry in read_tar(stream, 1000, headers):
        found.append((entry.name, entry.kind, entry.size, stream.read(entry.size) if entry.kind == "file" else b""))
    return found


def _refused(data: bytes, **kw: int) -> str:
    from hfstage.tarball import _Refused

    with pytest.raises(_Refused) as refused:
        _entries(data, **kw)
    return str(refused.value)


def test_a_member_whose_padding_is_one_byte_is_followed_by_the_next_member() -> None:
    data = random.Random(3).randbytes(511)
    found = _entries(gzip.compress(_tar([member("a.bin", data), member("b.json", b"{}")])))
    assert found == [("a.bin", "file", 511, data), ("b.json", "file", 2, b"{}")]


def test_a_tar_cut_inside_a_header_or_an_extension_or_a_member_says_where() -> None:
    whole = _tar([member("a.bin", b"x" * 600), member("b.json", b"{}")])
    assert _refused(gzip.compress(whole[:700])) == "it ends inside a member"
    assert _refused(gzip.compress(whole[: 512 + 1024 + 100])) == "it ends inside a tar header"
    info, body = member("c.json", b"{}")
    info.pax_headers = {"comment": "y" * 900}
    extended = _tar([(info, body)])
    assert _refused(gzip.compress(extended[: 512 + 600])) == "it ends inside a tar header extension"


def test_a_bad_header_checksum_names_the_header_by_its_byte() -> None:
    whole = bytearray(_tar([member("a.bin", b"x" * 10), member("b.json", b"{}")], fmt=tarfile.USTAR_FORMAT))
    whole[1024 + 148 : 1024 + 156] = b"0000000\0"  # the second header, 512 + 512 bytes in
    assert _refused(gzip.compress(bytes(whole))) == (
        "it is not a readable gzip-compressed tar: the header at byte 1,024 has a bad checksum"
    )


def test_an_oversized_extension_is_named_by_its_kind() -> None:
    from hfstage.tarball import MAX_HEADER_EXTENSION

    info, body = member("c.json", b"{}")
    info.pax_headers = {"comment": "y" * (MAX_HEADER_EXTENSION + 10)}
    said = _refused(gzip.compress(_tar([(info, body)])), headers=10**9)
    assert said.startswith("a pax extended header (a tar header extension) of ")
    assert said.endswith(f" bytes (over {MAX_HEADER_EXTENSION:,})")


def test_a_gnu_long_link_name_is_the_links_target_not_its_name() -> None:
    link = tarfile.TarInfo("short-link")
    link.type = tarfile.SYMTYPE
    link.linkname = "t" * 150  # over ustar's 100 bytes: GNU writes a K record
    found = _entries(gzip.compress(_tar([(link, b"")], fmt=tarfile.GNU_FORMAT)))
    assert found == [("short-link", "a symbolic link", 0, b"")]
    named = tarfile.TarInfo("n" * 150 + ".json")  # a GNU L record: the member's own name
    named.size = 2
    assert _entries(gzip.compress(_tar([(named, b"{}")], fmt=tarfile.GNU_FORMAT))) == [
        ("n" * 150 + ".json", "file", 2, b"{}")
    ]


def test_a_root_entry_is_no_folder_of_its_own() -> None:
    """``tar -C dir .`` writes "." first: it is the archive's root, so one folder under it is still the only top
    folder, unpacked from inside."""
    from hfstage.tarball import Member, plan_layout

    members = [
        Member(".", "folder"),
        Member("model", "folder"),
        Member("model/config.json", "file", 2, "a" * 64),
    ]
    names = [entry[0] for entry in _entries(gzip.compress(_tar([member(".", kind=tarfile.DIRTYPE)])))]
    assert names == [""]
    layout = plan_layout([Member("", "folder"), *members[1:]], "models/x/")
    assert (layout.stripped, [f.path for f in layout.files]) == ("model", ["config.json"])


def test_the_gunzip_reads_its_source_a_chunk_at_a_time_and_counts_every_byte() -> None:
    import threading

    from hfstage.tarball import READ_CHUNK, _Gunzip, _Refused

    asked: list[int] = []
    body = io.BytesIO(gzip.compress(b"\0" * (3 * READ_CHUNK)))

    class Source:
        def read(self, n: int) -> bytes:
            asked.append(n)
            return body.read(n)

    stream = _Gunzip(Source(), 3 * READ_CHUNK, threading.Event())
    assert len(stream.read(3 * READ_CHUNK)) == 3 * READ_CHUNK and set(asked) == {READ_CHUNK}
    over = _Gunzip(io.BytesIO(gzip.compress(b"\0" * (2 * READ_CHUNK))), READ_CHUNK + READ_CHUNK // 2, threading.Event())
    with pytest.raises(_Refused) as refused:
        over.read(2 * READ_CHUNK)  # no chunk alone is over the bound; the two together are
    assert str(refused.value) == (
        f"it makes the job read more than {READ_CHUNK + READ_CHUNK // 2:,} bytes of tar (--max-total-bytes counts "
        "every byte unpacked: headers, skipped and refused members, padding)"
    )


def test_the_gunzip_names_a_missing_trailer_corrupt_data_and_a_stop() -> None:
    import threading

    from hfstage.tarball import _Gunzip, _Refused
    from hfstage.worker import EXIT_TRANSFER, Failure

    packed = gzip.compress(b"x" * 1000)
    with pytest.raises(_Refused) as cut:
        _Gunzip(io.BytesIO(packed[:-8]), 10**6, threading.Event()).read(2000)
    assert str(cut.value) == "its gzip stream ends without the 8-byte trailer (CRC-32 and length)"
    garbage = packed[:10] + b"\xff" * 50  # a gzip header, then no deflate block zlib knows
    with pytest.raises(_Refused) as corrupt:
        _Gunzip(io.BytesIO(garbage), 10**6, threading.Event()).read(2000)
    assert str(corrupt.value).startswith("its gzip data is corrupt (zlib: Error -3 while decompressing data: ")
    stop = threading.Event()
    stop.set()
    with pytest.raises(Failure) as stopped:
        _Gunzip(io.BytesIO(packed), 10**6, stop).read(10)
    assert (stopped.value.code, str(stopped.value)) == (EXIT_TRANSFER, "stopped before the archive was read")
    with pytest.raises(_Refused) as short:
        _Gunzip(io.BytesIO(gzip.compress(b"x" * 10)), 10**6, threading.Event()).skip(20)
    assert str(short.value) == "it ends inside a member"


@pytest.mark.parametrize(
    "uri",
    ["s3://bkt/a//model.tar.gz", "s3://bkt/model.tar.gz?versionId=1", "s3://bkt/*.tar.gz"],
)
def test_an_archive_uri_with_an_empty_segment_a_query_or_a_wildcard_is_refused(uri: str) -> None:
    from hfstage.tarball import parse_source

    with pytest.raises(ValueError) as refused:
        parse_source(uri)
    assert str(refused.value) == (
        f"{uri!r} is not s3://<bucket>/<key>.tar.gz (printable ASCII, no '*', '?' or '//', the key ending in .tar.gz)"
    )


def test_a_refused_archive_uri_is_shown_cut_to_200_characters() -> None:
    from hfstage.tarball import parse_source

    uri = "s3://bkt/" + "k" * 300 + ".zip"
    with pytest.raises(ValueError) as refused:
        parse_source(uri)
    assert str(refused.value).startswith(f"{uri[:200]!r} is not ")


def test_a_ustar_name_split_over_prefix_and_name_is_joined_with_a_slash() -> None:
    """ustar keeps a path over 100 bytes as prefix (bytes 345-500) + "/" + name (0-100), only when the magic at 257
    says ustar: a GNU header's prefix field holds other things."""
    long_path = "a" * 120 + "/config.json"
    info, body = member(long_path, b"{}")
    found = _entries(gzip.compress(_tar([(info, body)], fmt=tarfile.USTAR_FORMAT)))
    assert found == [(long_path, "file", 2, b"{}")]
    header = bytearray(_tar([member("x.json", b"{}")], fmt=tarfile.GNU_FORMAT)[:512])
    assert header[257:265] != b"ustar\x0000"
    header[345:350] = b"other"  # GNU's prefix bytes are not a path
    header[148:156] = b"%06o\0 " % _sums(bytes(header))[0]
    packed = bytes(header) + b"{}".ljust(512, b"\0") + b"\0" * 1024
    assert _entries(gzip.compress(packed)) == [("x.json", "file", 2, b"{}")]


def test_an_old_regular_file_type_with_a_trailing_slash_is_a_folder() -> None:
    """Type NUL (pre-POSIX regular file) with a name ending in "/" is how old tars wrote folders (as tarfile)."""
    header = bytearray(_tar([member("old/", kind=tarfile.DIRTYPE)], fmt=tarfile.USTAR_FORMAT)[:512])
    header[156:157] = b"\0"
    header[148:156] = b"%06o\0 " % _sums(bytes(header))[0]
    assert _entries(gzip.compress(bytes(header) + b"\0" * 1024)) == [("old", "folder", 0, b"")]
    plain = bytearray(_tar([member("new.json", b"{}")], fmt=tarfile.USTAR_FORMAT)[:512])
    plain[156:157] = b"\0"
    plain[148:156] = b"%06o\0 " % _sums(bytes(plain))[0]
    assert _entries(gzip.compress(bytes(plain) + b"{}".ljust(512, b"\0") + b"\0" * 1024)) == [
        ("new.json", "file", 2, b"{}")
    ]


def test_a_folder_with_bytes_and_a_pax_size_that_is_no_number_are_refused_naming_them() -> None:
    header = bytearray(_tar([member("w", kind=tarfile.DIRTYPE)], fmt=tarfile.USTAR_FORMAT)[:512])
    header[124:136] = b"%011o\0" % 512
    header[148:156] = b"%06o\0 " % _sums(bytes(header))[0]
    assert _refused(gzip.compress(bytes(header) + b"\0" * 512 + b"\0" * 1024)) == "'w/' is a folder with 512 bytes"
    info, body = member("s.json", b"{}")
    info.pax_headers = {"size": "2x" + "9" * 50}
    said = f"'s.json': its pax size {('2x' + '9' * 50)[:40]!r} is not a number"
    assert _refused(gzip.compress(_tar([(info, body)]))) == said


def test_a_member_name_of_exactly_the_key_limit_is_read_and_one_byte_more_is_refused() -> None:
    from hfstage.names import MAX_KEY_BYTES

    for length, refused in ((MAX_KEY_BYTES, False), (MAX_KEY_BYTES + 1, True)):
        name = ("d" * 200 + "/") * 5
        name = name + "f" * (length - len(name))
        info, body = member(name, b"{}")
        packed = gzip.compress(_tar([(info, body)]))
        if refused:
            assert _refused(packed) == f"a member name of {length:,} bytes (S3 keys hold {MAX_KEY_BYTES:,})"
        else:
            assert _entries(packed)[0][0] == name
