"""The staging worker's pure parts: part sizes, file selection, layout, manifest, sharding, tokens.

The later tests state small contracts exactly: the manifest object as S3 stores it, the time it records,
checkpoint keys and their parts digest, the one-line failure message's length limit, and how "not found" is
read. These are what other code reads back (the handler reads the manifest and its metadata; a resumed run
parses the checkpoint keys an earlier run wrote), so a change in any of them is a change of format.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from hfstage import (
    MANIFEST_NAME,
    HubFile,
    assign,
    build_manifest,
    leader,
    manifest_matches,
    object_matches,
    part_size_for,
    read_hosts,
    revision_prefix,
    select_files,
)
from hfstage.base import one_line
from hfstage.events import EventLog
from hfstage.manifest import utc_now, write_manifest
from hfstage.transfer import (
    CHECKPOINT_DIR,
    MAX_PART,
    MAX_PARTS,
    MIN_PART,
    BufferPool,
    Verifier,
    backoff_delay,
    checkpoint_key,
    parse_checkpoint_key,
    parts_digest,
)
from hfstage.worker import EXIT_USAGE, Failure, parse_args, parse_token
from tests.fakes.fixtures import S3Env, s3, s3_stub  # noqa: F401

MiB = 1024 * 1024
GiB = 1024 * MiB
ROOT = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"


def hub_file(path: str, size: int = 10, lfs: bool = False) -> HubFile:
    return HubFile(path=path, size=size, blob_id="b" * 40, sha256=("c" * 64 if lfs else None))


# -- part sizes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "preferred", "expected"),
    [
        (0, 64 * MiB, 64 * MiB),
        (12 * MiB, 1 * MiB, 5 * MiB),  # 5 MiB floor
        (12 * MiB, 5 * MiB, 5 * MiB),
        (64 * MiB * MAX_PARTS, 64 * MiB, 64 * MiB),  # exactly 10,000 parts: unchanged
        (64 * MiB * MAX_PARTS + 1, 64 * MiB, 65 * MiB),  # one byte more: next whole MiB
        (1024 * GiB, 64 * MiB, 105 * MiB),  # 1 TiB: ceil(1 TiB / 10,000) rounded up to a MiB
        (10 * GiB, 8 * GiB, MAX_PART),  # 5 GiB cap
        (MAX_PART * MAX_PARTS, 64 * MiB, MAX_PART),  # the largest object S3 can assemble
    ],
)
def test_part_size_for(size: int, preferred: int, expected: int) -> None:
    part = part_size_for(size, preferred)
    assert part == expected
    assert MIN_PART <= part <= MAX_PART
    assert -(-size // part) <= MAX_PARTS


def test_part_size_for_refuses_what_s3_cannot_hold() -> None:
    with pytest.raises(ValueError, match="10000 parts"):
        part_size_for(MAX_PART * MAX_PARTS + 1, 64 * MiB)


@given(st.integers(min_value=0, max_value=MAX_PART * MAX_PARTS), st.integers(min_value=1, max_value=6 * GiB))
def test_part_size_for_always_within_s3_limits(size: int, preferred: int) -> None:
    part = part_size_for(size, preferred)
    assert MIN_PART <= part <= MAX_PART
    assert -(-size // part) <= MAX_PARTS


# -- selection, layout, manifest -----------------------------------------------------------------------


def test_select_files_include_exclude() -> None:
    files = [hub_file(p) for p in ("config.json", "model.safetensors", "original/consolidated.pth", "q4.gguf")]
    assert [f.path for f in select_files(files)] == [f.path for f in files]
    assert [f.path for f in select_files(files, include=["*.json", "*.safetensors"])] == [
        "config.json",
        "model.safetensors",
    ]
    assert [f.path for f in select_files(files, exclude=["original/*", "*.gguf"])] == [
        "config.json",
        "model.safetensors",
    ]
    assert select_files(files, include=["*.gguf"], exclude=["q4*"]) == []


def test_revision_prefix() -> None:
    assert revision_prefix("models/", "Org/Name", SHA) == f"models/Org--Name/{SHA}/"
    assert revision_prefix("models", "Org/Name", SHA) == f"models/Org--Name/{SHA}/"
    assert revision_prefix("", "gpt2", SHA) == f"gpt2/{SHA}/"
    assert revision_prefix("/a/b/", "Org/Name", SHA) == f"a/b/Org--Name/{SHA}/"


def test_manifest_schema_and_matching() -> None:
    files = [hub_file("b.safetensors", 100, lfs=True), hub_file("a.json", 5)]
    manifest = build_manifest("Org/Name", SHA, files, "2025-01-01T00:00:00Z", source="https://hub.example")
    assert manifest == {
        "schema_version": 1,
        "source": "https://hub.example",
        "repo_id": "Org/Name",
        "revision": SHA,
        "files": [
            {"path": "a.json", "size": 5, "blob_id": "b" * 40},
            {"path": "b.safetensors", "size": 100, "blob_id": "b" * 40, "sha256": "c" * 64},
        ],
        "total_bytes": 105,
        "completed_at": "2025-01-01T00:00:00Z",
    }
    assert MANIFEST_NAME == ".hf-model-manifest.json"
    assert manifest_matches(manifest, "Org/Name", SHA, list(reversed(files)))
    assert not manifest_matches(None, "Org/Name", SHA, files)
    assert not manifest_matches(manifest, "Org/Name", "f" * 40, files)
    assert not manifest_matches(manifest, "Org/Name", SHA, files[:1])
    assert not manifest_matches({**manifest, "schema_version": 2}, "Org/Name", SHA, files)


def test_object_matches() -> None:
    f = hub_file("w.safetensors", 100, lfs=True)
    meta = {"hf-repo-id": "Org/Name", "hf-revision": SHA, "hf-blob-id": f.blob_id, "hf-sha256": f.sha256}
    assert object_matches({"ContentLength": 100, "Metadata": meta}, f, "Org/Name", SHA)
    assert object_matches(
        {"ContentLength": 100, "Metadata": {k.upper(): v for k, v in meta.items()}}, f, "Org/Name", SHA
    )
    assert not object_matches({"ContentLength": 99, "Metadata": meta}, f, "Org/Name", SHA)
    assert not object_matches({"ContentLength": 100, "Metadata": {**meta, "hf-revision": "x"}}, f, "Org/Name", SHA)
    assert not object_matches({"ContentLength": 100, "Metadata": {**meta, "hf-blob-id": "x"}}, f, "Org/Name", SHA)
    assert not object_matches({"ContentLength": 100, "Metadata": {**meta, "hf-sha256": "d" * 64}}, f, "Org/Name", SHA)
    assert not object_matches({"ContentLength": 100}, f, "Org/Name", SHA)


# -- sharding ------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=10**12), max_size=60),
    hosts=st.lists(st.sampled_from([f"algo-{i}" for i in range(1, 9)]), min_size=1, max_size=8, unique=True),
)
def test_assign_every_file_once_and_balanced(sizes: list[int], hosts: list[str]) -> None:
    files = [hub_file(f"f{i:03d}", size) for i, size in enumerate(sizes)]
    plan = assign(files, hosts)
    assert set(plan) == set(hosts)
    shares = [f.path for share in plan.values() for f in share]
    assert sorted(shares) == sorted(f.path for f in files)  # union is everything, nothing twice
    loads = [sum(f.size for f in share) for share in plan.values()]
    assert max(loads) - min(loads) <= max(sizes, default=0)
    assert assign(list(reversed(files)), list(reversed(hosts))) == plan  # same plan on every host


def test_assign_largest_first_ties_by_host_order() -> None:
    files = [hub_file("a", 10), hub_file("b", 10), hub_file("c", 5), hub_file("d", 5)]
    plan = assign(files, ["algo-2", "algo-1"])
    assert {h: [f.path for f in fs] for h, fs in plan.items()} == {"algo-1": ["a", "c"], "algo-2": ["b", "d"]}
    assert leader(["algo-2", "algo-1", "algo-3"]) == "algo-1"


def test_read_hosts(tmp_path: Path) -> None:
    assert read_hosts(str(tmp_path / "absent.json")) == ("local", ["local"])
    config = tmp_path / "resourceconfig.json"
    config.write_text('{"current_host": "algo-2", "hosts": ["algo-2", "algo-1"], "network_interface_name": "eth0"}')
    assert read_hosts(str(config)) == ("algo-2", ["algo-1", "algo-2"])
    config.write_text('{"current_host": "algo-3", "hosts": ["algo-1"]}')
    with pytest.raises(ValueError, match="not one of hosts"):
        read_hosts(str(config))
    config.write_text("not json")
    with pytest.raises(ValueError, match="cannot read"):
        read_hosts(str(config))


# -- transfer pieces -----------------------------------------------------------------------------------


def test_buffer_pool_bounds_buffers_in_use() -> None:
    pool = BufferPool(buffer_size=1024, count=2)
    a, b = pool.acquire(1024), pool.acquire(100)
    assert (len(a), len(b)) == (1024, 100)
    import threading

    got: list[bytearray] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(1024)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not got  # the third buffer waits for a release
    pool.release(a)
    waiter.join(2)
    assert got and got[0] is a  # full-size buffers are reused
    pool.release(b)
    pool.release(got[0])
    big = pool.acquire(10_000)  # larger than a slot: takes every slot
    assert len(big) == 10_000 and pool.peak_in_use == 2


def test_verifier_git_blob_and_lfs_sha256() -> None:
    import hashlib

    data = b"hello world\n"
    blob = HubFile("a.txt", len(data), hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
    v = Verifier(blob)
    v.update(data[:5])
    mid = v.copy()
    v.update(data[5:])
    v.check()
    mid.update(data[5:])
    mid.check()  # a copy at a part boundary resumes the same hash
    lfs = HubFile("w.bin", len(data), "x" * 40, hashlib.sha256(data).hexdigest())
    bad = Verifier(lfs)
    bad.update(data[:-1] + b"?")
    with pytest.raises(Exception, match="does not match"):
        bad.check()


def test_backoff_grows_with_jitter_and_honours_retry_after() -> None:
    delays = [backoff_delay(a, 1.0, 30.0) for a in (1, 2, 3, 4, 10)]
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0
    assert 15.0 <= delays[4] <= 30.0
    assert backoff_delay(1, 1.0, 30.0, retry_after=7) == 7
    assert backoff_delay(1, 1.0, 30.0, retry_after=900) == 30.0


# -- arguments, tokens, messages -----------------------------------------------------------------------


def test_parse_args_patterns_and_destination() -> None:
    args = parse_args(
        [
            "--repo-id=Org/Name",
            "--destination=s3://my-bucket/models/",
            "--include",
            '["*.json", "*.safetensors"]',
            "--include",
            "tokenizer*",
            "--exclude=original/*",
        ]
    )
    assert (args.bucket, args.prefix, args.revision) == ("my-bucket", "models/", "main")
    assert args.include == ["*.json", "*.safetensors", "tokenizer*"]
    assert args.exclude == ["original/*"]
    assert (args.part_size_mib, args.parts_in_flight, args.files_in_flight, args.max_attempts) == (64, 8, 4, 5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repo-id=Org/Name"], "--destination"),
        (["--repo-id=bad id", "--destination=s3://bkt/p/"], "is not a repository id"),
        (["--repo-id=Org/Name", "--destination=/local/dir"], "is not s3://"),
        (["--repo-id=Org/Name", "--destination=s3://bkt/p/", "--part-size-mib=4"], "outside 5-5120"),
        (["--repo-id=Org/Name", "--destination=s3://bkt/p/", "--parts-in-flight=0"], "at least 1"),
        (["--repo-id=Org/Name", "--destination=s3://bkt/p/", "--include=[1]"], "JSON array of strings"),
    ],
)
def test_parse_args_rejects(argv: list[str], message: str) -> None:
    with pytest.raises(Failure, match="bad arguments") as caught:
        parse_args(argv)
    assert caught.value.code == EXIT_USAGE and message in caught.value.message


@pytest.mark.parametrize(
    ("secret", "token"),
    [("hf_abc", "hf_abc"), (" hf_abc\n", "hf_abc"), ('{"token": "hf_x"}', "hf_x"), ('{"HF_TOKEN": "hf_y"}', "hf_y")],
)
def test_parse_token(secret: str, token: str) -> None:
    assert parse_token(secret) == token


@pytest.mark.parametrize("secret", ["", "  ", '{"other": "x"}', "{not json"])
def test_parse_token_rejects_without_echoing(secret: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_token(secret)
    assert secret.strip() == "" or secret not in str(caught.value)


def test_messages_are_one_short_line_and_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    assert one_line("a\nb   c") == "a b c"
    long = one_line("é" * 2000)
    assert len(long.encode()) <= 1000 and long.endswith("...")
    log = EventLog()
    log.add_secret("hf_secret")
    log.emit("test", url="https://x/?t=hf_secret", path="a b")
    out = capsys.readouterr().out
    assert "hf_secret" not in out and 'url="https://x/?t=***" path="a b"' in out


def test_the_s3_client_reads_its_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from hfstage.transfer import Settings
    from hfstage.worker import make_s3_client

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:4566")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", raising=False)
    client = make_s3_client(Settings(parts_in_flight=8, files_in_flight=4))
    assert client.meta.endpoint_url == "http://127.0.0.1:4566"
    assert client.meta.config.max_pool_connections >= 12


def test_buffer_pool_slots_of_each_request() -> None:
    pool = BufferPool(buffer_size=1000, count=4)
    assert [pool._slots(n) for n in (0, 1, 1000, 1001, 2000, 2001, 10**9)] == [1, 1, 1, 2, 2, 3, 4]
    assert BufferPool(buffer_size=1000, count=0).count == 1  # never a pool that can hold nothing


def test_buffer_pool_without_a_free_slot() -> None:
    import threading

    from hfstage.transfer import Cancelled

    pool = BufferPool(buffer_size=1000, count=2)
    first = pool.acquire(1500)  # two slots
    assert pool.acquire(10, block=False) is None  # none free: no wait when told not to
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        pool.acquire(10, stop)  # a stopped run does not wait for a slot
    pool.release(first)
    assert len(pool.acquire(10, block=False)) == 10 and pool.peak_in_use == 2


def test_buffer_pool_keeps_no_more_buffers_than_its_bound() -> None:
    pool = BufferPool(buffer_size=1000, count=2)
    a, b = pool.acquire(1000), pool.acquire(1000)
    pool.release(a)
    pool.release(b)
    assert len(pool._free) == 2 and pool._in_use == 0  # both cached, none in use: within the bound
    big = pool.acquire(2000)  # both slots: the cached buffers would exceed the bound, they are dropped
    assert pool._free == [] and len(big) == 2000
    pool.release(big)  # not a pool-size buffer: not cached
    assert pool._free == [] and pool._in_use == 0
    c = pool.acquire(1000)
    d = pool.acquire(999)  # not the pool's size: a new buffer
    assert len(c) == 1000 and len(d) == 999
    pool.release(d)
    assert pool._free == []
    pool.release(c)
    assert pool._free == [c] and pool.acquire(1000) is c  # reused


def test_verifier_resumable_states_continue_the_same_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    from hfstage import hashstate

    assert hashstate.available()
    data = bytes(range(256)) * 40
    blob = HubFile("t.json", len(data), hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
    lfs = HubFile("w.bin", len(data), "x" * 40, hashlib.sha256(data).hexdigest().upper())  # the Hub's case
    for f, algorithm in ((blob, "git-sha1"), (lfs, "sha256")):
        v = Verifier(f, resumable=True)
        v.update(data[:1000])
        state = v.saved_state()
        assert state is not None and v.algorithm == algorithm
        restored = Verifier.restore(f, state)
        restored.update(data[1000:])
        restored.check()  # header (git blobs) and first bytes carried by the state
        assert Verifier.algorithm_name(f) == ("sha256" if f.sha256 else "sha1")
        assert Verifier(f).saved_state() is None  # plain hashlib: nothing to save
        copy = Verifier(f, resumable=True)
        copy.update(data)
        copy.copy().check()
    monkeypatch.setattr(hashstate, "_lib", None)
    with pytest.raises(ValueError, match="resumable hashing is not available"):
        Verifier.restore(lfs, state)
    plain = Verifier(blob, resumable=True)  # falls back to hashlib
    plain.update(data)
    plain.check()
    assert plain.saved_state() is None


def test_verifier_names_the_file_the_algorithm_and_both_digests() -> None:
    import hashlib

    data = b"abc"
    f = HubFile("w.bin", 3, "x" * 40, "d" * 64)
    v = Verifier(f)
    v.update(data)
    with pytest.raises(Exception) as failed:
        v.check()
    assert (
        str(failed.value)
        == f"w.bin: content sha256 {hashlib.sha256(data).hexdigest()} does not match the Hub's {'d' * 64}"
    )
    assert type(failed.value).__name__ == "IntegrityError"


def test_small_contracts_of_the_manifest_and_the_plan() -> None:
    files = [hub_file("a.json", 5)]
    assert build_manifest("Org/Name", SHA, files, "t", source="https://hub.example/")["source"] == "https://hub.example"
    with pytest.raises(ValueError) as refused:
        assign(files, [])
    assert str(refused.value) == "no hosts to assign files to"


def test_restoring_without_resumable_hashing_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from hfstage import hashstate

    monkeypatch.setattr(hashstate, "_lib", None)
    monkeypatch.setattr(hashstate, "_checked", True)
    with pytest.raises(ValueError) as refused:
        Verifier.restore(hub_file("w.bin", 10, lfs=True), b"x" * 112)
    assert str(refused.value) == "resumable hashing is not available"


def short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_the_manifest_is_stored_as_indented_json_in_its_own_key_order_with_its_identity_as_metadata(
    s3: S3Env,  # noqa: F811
) -> None:
    manifest = build_manifest("org/model", "a" * 40, [], completed_at="2026-01-02T03:04:05Z", source="https://h.test")
    write_manifest(s3.client, s3.bucket, "models/x/", manifest)
    stored = s3.client.get_object(Bucket=s3.bucket, Key="models/x/" + MANIFEST_NAME)
    assert stored["ContentType"] == "application/json"
    assert stored["Metadata"] == {"hf-repo-id": "org/model", "hf-revision": "a" * 40}
    body = stored["Body"].read().decode()
    assert body == json.dumps(manifest, indent=2) + "\n"
    assert list(json.loads(body)) == [
        "schema_version",
        "source",
        "repo_id",
        "revision",
        "files",
        "total_bytes",
        "completed_at",
    ]
    assert body.startswith('{\n  "schema_version": ')


def test_the_manifest_source_has_no_trailing_slash():
    assert build_manifest("o/m", "s", [], completed_at="t", source="https://hub.test/")["source"] == "https://hub.test"
    assert build_manifest("o/m", "s", [], completed_at="t", source="https://hub.test")["source"] == "https://hub.test"


def test_completed_at_is_utc_to_the_second_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # 9 hours from UTC, no daylight saving
    time.tzset()
    try:
        before, stamp, after = int(time.time()), utc_now(), int(time.time())
    finally:
        monkeypatch.undo()
        time.tzset()
    assert len(stamp) == 20 and stamp[4] == "-" and stamp[10] == "T" and stamp.endswith("Z")
    assert before - 1 <= calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) <= after + 1  # not 9 h off
    assert build_manifest("o/m", "s", [], source="x")["completed_at"][:4] == stamp[:4]


def test_a_checkpoint_key_lays_out_file_upload_part_digest_and_state():
    key = checkpoint_key("p/", "dir/w.safetensors", "upload-1", 7, b"\x00\xff", "d" * 16)
    assert key == f"p/{CHECKPOINT_DIR}{short('dir/w.safetensors')}/{short('upload-1')}/00007-{'d' * 16}-00ff"
    assert parse_checkpoint_key("p/", key) == (
        short("dir/w.safetensors"),
        short("upload-1"),
        7,
        b"\x00\xff",
        "d" * 16,
        "",
    )
    # Without a parts digest the field is empty, not a placeholder.
    assert checkpoint_key("p/", "f", "u", 2, b"\x01").endswith("/00002--01")
    # The parts' joined checksum, when given, comes last.
    sums = "crc64nvme" + "0a" * 8
    with_sums = checkpoint_key("p/", "f", "u", 2, b"\x01", "d", sums)
    assert with_sums.endswith(f"/00002-d-01-{sums}")
    assert parse_checkpoint_key("p/", with_sums)[3:] == (b"\x01", "d", sums)


def test_the_parts_digest_covers_the_etags_in_order_quoted_or_not():
    assert parts_digest(['"e1"', "e2"]) == short("e1\ne2") == parts_digest(["e1", '"e2"'])
    assert parts_digest(["e2", "e1"]) != parts_digest(["e1", "e2"])
    assert parts_digest(["e1e2"]) != parts_digest(["e1", "e2"])


def test_a_message_at_the_limit_is_kept_and_one_byte_over_is_cut_to_the_limit():
    assert one_line("a" * 10, limit=10) == "a" * 10
    assert one_line("a" * 11, limit=10) == "a" * 7 + "..."
    # A character is never split: 4 two-byte characters are 8 bytes; 7 bytes leave 3 whole ones.
    assert one_line("é" * 6, limit=10) == "é" * 3 + "..."


def test_backoff_jitter_spans_the_upper_half_of_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """ "Equal jitter": a delay between half the ceiling and the ceiling, so retries never bunch near zero."""
    import hfstage.transfer as transfer

    monkeypatch.setattr(transfer.random, "uniform", lambda low, high: (low, high))
    assert transfer.backoff_delay(3, 1.0, 30.0) == (2.0, 4.0)
    assert transfer.backoff_delay(9, 1.0, 30.0) == (15.0, 30.0)


def client_error(code: str | None, status: int | None) -> ClientError:
    response: dict = {}
    if code is not None:
        response["Error"] = {"Code": code, "Message": "m"}
    if status is not None:
        response["ResponseMetadata"] = {"HTTPStatusCode": status}
    return ClientError(response, "HeadObject")


@pytest.mark.parametrize(
    ("code", "status", "not_found"),
    [
        ("NoSuchKey", None, True),  # GetObject's code, whatever the status says
        ("NotFound", None, True),
        ("404", None, True),  # HeadObject has no body: botocore makes the status the code
        (None, 404, True),  # a status alone
        ("Weird", 404, True),
        ("AccessDenied", 403, False),
        ("SlowDown", 503, False),
        (None, None, False),  # an error without either
    ],
)
def test_not_found_is_read_from_the_code_or_the_status(code, status, not_found) -> None:
    from hfstage.manifest import _is_not_found

    assert _is_not_found(client_error(code, status)) is not_found


def test_an_object_listed_but_gone_by_its_head_is_missing_and_other_errors_are_raised(s3_stub) -> None:  # noqa: F811
    from hfstage.hub import HubFile
    from hfstage.manifest import missing_files

    client, stubber = s3_stub
    files = [HubFile("a.bin", 3, "blob")]
    listing = {"Contents": [{"Key": "p/a.bin", "Size": 3}], "KeyCount": 1, "IsTruncated": False}
    stubber.add_response("list_objects_v2", listing, {"Bucket": "b", "Prefix": "p/"})
    stubber.add_client_error("head_object", "404", "Not Found", 404, expected_params={"Bucket": "b", "Key": "p/a.bin"})
    assert missing_files(client, "b", "p/", "o/m", "sha", files) == files
    stubber.add_response("list_objects_v2", listing, {"Bucket": "b", "Prefix": "p/"})
    stubber.add_client_error("head_object", "403", "Forbidden", 403, expected_params={"Bucket": "b", "Key": "p/a.bin"})
    with pytest.raises(ClientError):
        missing_files(client, "b", "p/", "o/m", "sha", files)


def test_the_hub_endpoint_from_the_environment_loses_its_trailing_slash(monkeypatch: pytest.MonkeyPatch) -> None:
    from hfstage.hub import DEFAULT_ENDPOINT, default_endpoint

    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.test/hf/")
    assert default_endpoint() == "https://mirror.test/hf"
    monkeypatch.delenv("HF_ENDPOINT")
    assert default_endpoint() == DEFAULT_ENDPOINT.rstrip("/")


def test_a_destination_prefix_keeps_every_character_but_its_slashes() -> None:
    assert revision_prefix("/XL-models/", "Org/Name", "abc") == "XL-models/Org--Name/abc/"
    assert revision_prefix("", "Org/Name", "abc") == "Org--Name/abc/"


@pytest.mark.parametrize(
    ("body", "said"),
    [(b"{not json", ": not valid JSON (Expecting property name"), (b"[1, 2]", " is not a JSON object")],
)
def test_a_manifest_that_is_not_a_json_object_is_refused_by_name(s3: S3Env, body: bytes, said: str) -> None:  # noqa: F811
    from hfstage.manifest import read_manifest

    s3.client.put_object(Bucket=s3.bucket, Key="p/" + MANIFEST_NAME, Body=body)
    with pytest.raises(ValueError) as raised:
        read_manifest(s3.client, s3.bucket, "p/")
    assert str(raised.value).startswith(f"s3://{s3.bucket}/p/{MANIFEST_NAME}{said}")
