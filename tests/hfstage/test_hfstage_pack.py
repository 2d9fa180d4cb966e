"""``--pack-as-tarball``: a Hub adapter packed into one gzip tar object, the fake Hub over HTTP into moto's S3."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from hfstage import pack
from hfstage.manifest import MANIFEST_NAME
from hfstage.pack import ARCHIVE_NAME, members_id, pack_prefix
from tests.fakes.fake_hub import FakeHub, Synthetic
from tests.fakes.fixtures import S3Env, boto_session, fake_hub, s3  # noqa: F401
from tests.hfstage.test_hfstage_worker import Result

MiB = 1024 * 1024
ADAPTER = "Org/Adapter"
CONFIG = b'{"peft_type": "LORA", "r": 16, "base_model_name_or_path": "Org/Base", "target_modules": ["q_proj"]}\n'
FILES = {
    "adapter_config.json": CONFIG,
    "adapter_model.safetensors": Synthetic(7 * MiB, seed=5),  # LFS; the archive spans two 5 MiB parts
    "README.md": b"# an adapter\n",
}
INCLUDE = '["adapter_config.json", "adapter_model.safetensors"]'


@pytest.fixture
def hub(fake_hub: FakeHub) -> FakeHub:  # noqa: F811
    fake_hub.add_repo(ADAPTER, FILES)
    fake_hub.add_repo("Org/Small", {"adapter_config.json": CONFIG, "adapter_model.safetensors": b"\0" * 4096})
    return fake_hub


@pytest.fixture
def stage(s3: S3Env, hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # noqa: F811
    from hfstage.worker import main

    def run(*extra: str, repo: str = ADAPTER) -> Result:
        client, counter = s3.worker_client()
        message_file = tmp_path / "message"
        message_file.unlink(missing_ok=True)
        capsys.readouterr()
        argv = [
            f"--repo-id={repo}",
            f"--destination=s3://{s3.bucket}/models/",
            "--part-size-mib=5",
            "--retry-base-s=0.01",
            "--progress-interval-s=0",
            f"--failure-file={message_file}",
            f"--resource-config={tmp_path / 'absent.json'}",
            "--pack-as-tarball",
            *extra,
        ]
        code = main(argv, s3_client=client)
        captured = capsys.readouterr()
        message = message_file.read_text() if message_file.exists() else None
        return Result(code, captured.out, captured.err, message, counter.calls)

    return run


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_packs_the_selected_files_into_one_verified_archive_with_a_manifest(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    result = stage(f"--include={INCLUDE}")
    assert result.code == 0, result.err
    repo = hub.repos[ADAPTER]
    prefix = pack_prefix("models/", ADAPTER, repo.sha)
    assert prefix == f"models/Org--Adapter/{repo.sha}-packed/"
    assert s3.list_keys("models/") == [prefix + MANIFEST_NAME, prefix + ARCHIVE_NAME]  # nothing unpacked
    data = s3.body(prefix + ARCHIVE_NAME)
    assert data[:2] == b"\x1f\x8b"  # gzip
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        infos = tar.getmembers()
        assert [m.name for m in infos] == ["adapter_config.json", "adapter_model.safetensors"]
        assert all(m.isreg() and m.mode == 0o644 and m.uid == 0 for m in infos)
        for m in infos:
            assert tar.extractfile(m).read() == repo.files[m.name].content.to_bytes()  # type: ignore[union-attr]
    head = s3.client.head_object(Bucket=s3.bucket, Key=prefix + ARCHIVE_NAME)
    blob_id = members_id(_hub_files(hub, ["adapter_config.json", "adapter_model.safetensors"]))
    assert head["Metadata"] == {"hf-repo-id": ADAPTER, "hf-revision": repo.sha, "hf-blob-id": blob_id}
    assert head["ContentType"] == "application/gzip" and head["ContentLength"] == len(data)
    assert result.calls["CompleteMultipartUpload"] == 1 and result.calls["UploadPart"] == 2  # 7 MiB barely compresses

    manifest = json.loads(s3.body(prefix + MANIFEST_NAME))
    archive = {"path": ARCHIVE_NAME, "size": len(data), "blob_id": blob_id}
    assert manifest["files"] == [archive] and manifest["total_bytes"] == len(data)
    assert manifest["archive"] == {**archive, "sha256": hashlib.sha256(data).hexdigest()}
    assert manifest["members"] == [
        {
            "path": p,
            "size": repo.files[p].size,
            "blob_id": repo.files[p].blob_id,
            "sha256": hashlib.sha256(repo.files[p].content.to_bytes()).hexdigest(),
        }
        for p in ("adapter_config.json", "adapter_model.safetensors")
    ]
    assert manifest["include"] == ["adapter_config.json", "adapter_model.safetensors"] and manifest["exclude"] == []
    assert manifest["repo_id"] == ADAPTER and manifest["revision"] == repo.sha
    assert s3.open_uploads() == []


def _hub_files(hub: FakeHub, paths: list[str]):
    from hfstage.hub import HubFile

    repo = hub.repos[ADAPTER]
    return [
        HubFile(p, repo.files[p].size, repo.files[p].blob_id, repo.files[p].sha256 if repo.files[p].lfs else None)
        for p in paths
    ]


def test_a_small_archive_is_one_put(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    result = stage(repo="Org/Small")
    assert result.code == 0, result.err
    assert result.calls["CreateMultipartUpload"] == 0 and result.calls["PutObject"] == 2  # archive + manifest
    prefix = pack_prefix("models/", "Org/Small", hub.repos["Org/Small"].sha)
    assert set(members(s3.body(prefix + ARCHIVE_NAME))) == {"adapter_config.json", "adapter_model.safetensors"}


def test_a_rerun_skips_and_other_patterns_or_a_lost_archive_pack_again(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    assert stage(f"--include={INCLUDE}").code == 0
    fetched = len(hub.requests_for("adapter_model.safetensors"))
    again = stage(f"--include={INCLUDE}")
    assert again.code == 0 and again.events("up_to_date")
    assert again.calls["PutObject"] == 0 and again.calls["CreateMultipartUpload"] == 0
    assert len(hub.requests_for("adapter_model.safetensors")) == fetched  # nothing downloaded again

    wider = stage()  # all files: another archive, packed again
    assert wider.code == 0 and not wider.events("up_to_date")
    prefix = pack_prefix("models/", ADAPTER, hub.repos[ADAPTER].sha)
    assert set(members(s3.body(prefix + ARCHIVE_NAME))) == set(FILES)

    s3.client.delete_object(Bucket=s3.bucket, Key=prefix + ARCHIVE_NAME)
    lost = stage()
    assert lost.code == 0 and not lost.events("up_to_date") and lost.calls["CompleteMultipartUpload"] == 1


@pytest.mark.parametrize(
    "name",
    ["../escape.json", "/etc/passwd", "a/../../b", "sub\\win.json", "bad\x1bname", MANIFEST_NAME, "a//b"],
)
def test_hostile_names_are_refused_before_anything_is_written(stage, s3: S3Env, hub: FakeHub, name: str) -> None:  # noqa: F811
    hub.add_repo("Org/Hostile", {"adapter_config.json": CONFIG, name: b"x"})
    result = stage(repo="Org/Hostile")
    assert result.code == 3, result.err
    assert "refused before any upload: 1 of the 2 files to stage" in (result.message or "")
    assert s3.list_keys("models/") == [] and result.calls["PutObject"] == 0


def test_a_corrupt_member_is_retried_a_persistent_one_fails_leaving_nothing(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    hub.corrupt("adapter_model.safetensors", times=1)
    once = stage(f"--include={INCLUDE}")
    assert once.code == 0, once.err
    assert once.events("retry")

    hub.add_repo("Org/Broken", {"adapter_config.json": CONFIG, "adapter_model.safetensors": Synthetic(MiB, seed=9)})
    hub.corrupt("adapter_model.safetensors")
    broken = stage("--max-attempts=2", repo="Org/Broken")
    assert broken.code == 1
    assert "does not match the Hub's" in (broken.message or "")
    assert not [k for k in s3.list_keys("models/") if k.startswith("models/Org--Broken/")]
    assert s3.open_uploads() == []


def test_more_than_the_limit_is_refused_before_any_download(stage, s3: S3Env, hub: FakeHub, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setattr(pack, "MAX_PACK_BYTES", 4 * MiB)
    result = stage(f"--include={INCLUDE}")
    assert result.code == 2
    assert "over the 4194304 an adapter archive may pack" in (result.message or "")
    assert hub.requests_for("adapter_model.safetensors") == [] and s3.list_keys("models/") == []


def test_only_the_leader_of_a_larger_job_packs(stage, s3: S3Env, hub: FakeHub, tmp_path: Path) -> None:  # noqa: F811
    config = tmp_path / "resourceconfig.json"
    config.write_text(json.dumps({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}))
    other = stage(f"--resource-config={config}")
    assert other.code == 0 and other.events("skip")
    assert s3.list_keys("models/") == [] and hub.requests_for("adapter_model.safetensors") == []
    config.write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]}))
    assert stage(f"--resource-config={config}").code == 0
    assert len(s3.list_keys("models/")) == 2
