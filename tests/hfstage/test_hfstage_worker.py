"""The staging worker end to end, in this process: the fake Hub over HTTP into moto's S3 server over HTTP.

Nothing in the transfer path is patched: the worker's own boto3 client is handed in only so that a
``before-call`` hook can count the S3 operations it makes.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from hfstage.manifest import MANIFEST_NAME, build_manifest, revision_prefix
from tests.fakes.fake_hub import TEST_TOKEN, FakeHub, Synthetic
from tests.fakes.fixtures import S3Env, boto_session, fake_hub, s3  # noqa: F401

MiB = 1024 * 1024
REPO = "Org/Model"
WEIGHTS_1 = "model-00001-of-00002.safetensors"
WEIGHTS_2 = "model-00002-of-00002.safetensors"
FILES = {
    "config.json": b'{"architectures": ["DemoForCausalLM"], "num_hidden_layers": 2}\n',
    "generation_config.json": b'{"temperature": 0.7}\n',
    "tokenizer.json": bytes(range(256)) * 800,  # 200 KiB, a plain git file
    WEIGHTS_1: Synthetic(12 * MiB, seed=1),  # three 5 MiB parts
    WEIGHTS_2: Synthetic(6 * MiB, seed=2),  # two parts
    "original/consolidated.pth": Synthetic(MiB, seed=3),
}


@dataclass
class Result:
    code: int
    out: str
    err: str
    message: str | None
    calls: Counter[str]

    def events(self, name: str) -> list[str]:
        return [line for line in self.out.splitlines() if f" event={name} " in line or line.endswith(f"event={name}")]


@pytest.fixture
def hub(fake_hub: FakeHub) -> FakeHub:  # noqa: F811
    fake_hub.add_repo(REPO, FILES)
    fake_hub.add_repo("Org/Gated", {"config.json": b"{}", "model.safetensors": Synthetic(MiB, seed=4)}, gated=True)
    return fake_hub


@pytest.fixture
def stage(s3: S3Env, hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # noqa: F811
    from hfstage.worker import main

    def run(*extra: str, repo: str = REPO) -> Result:
        client, counter = s3.worker_client()
        message_file = tmp_path / "message"
        message_file.unlink(missing_ok=True)
        capsys.readouterr()
        argv = [
            f"--repo-id={repo}",
            f"--destination=s3://{s3.bucket}/models/",
            "--part-size-mib=5",
            "--retry-base-s=0.01",
            "--progress-interval-s=0.2",
            f"--failure-file={message_file}",
            f"--resource-config={tmp_path / 'absent.json'}",
            *extra,
        ]
        code = main(argv, s3_client=client)
        captured = capsys.readouterr()
        message = message_file.read_text() if message_file.exists() else None
        return Result(code, captured.out, captured.err, message, counter.calls)

    return run


def prefix_of(hub: FakeHub, repo: str = REPO) -> str:
    return revision_prefix("models/", repo, hub.repos[repo].sha)


def test_stages_every_file_verified_with_metadata_and_manifest(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    result = stage()
    assert result.code == 0, result.err
    repo = hub.repos[REPO]
    prefix = prefix_of(hub)
    assert s3.list_keys("models/") == sorted([prefix + MANIFEST_NAME] + [prefix + p for p in FILES])
    for path, f in repo.files.items():
        head = s3.client.head_object(Bucket=s3.bucket, Key=prefix + path)
        expected = {"hf-repo-id": REPO, "hf-revision": repo.sha, "hf-blob-id": f.blob_id}
        if f.lfs:
            expected["hf-sha256"] = f.sha256
        assert head["Metadata"] == expected
        assert head["ContentLength"] == f.size and head["ContentType"] == "application/octet-stream"
        assert s3.body(prefix + path) == f.content.to_bytes()
    assert s3.client.head_object(Bucket=s3.bucket, Key=prefix + WEIGHTS_1)["ETag"].endswith('-3"')  # 3 parts
    # Two uploads, plus the hash checkpoints (uploads never completed, each aborted once superseded or done).
    assert result.calls["CreateMultipartUpload"] == 2 + result.calls["AbortMultipartUpload"]
    assert result.calls["UploadPart"] == 5
    assert result.calls["CompleteMultipartUpload"] == 2 and result.calls["PutObject"] == 4 + 1  # + the manifest

    manifest = json.loads(s3.body(prefix + MANIFEST_NAME))
    expected_files = [
        {"path": p, "size": f.size, "blob_id": f.blob_id, **({"sha256": f.sha256} if f.lfs else {})}
        for p, f in sorted(repo.files.items())
    ]
    assert manifest == {
        "schema_version": 1,
        "source": hub.endpoint,
        "repo_id": REPO,
        "revision": repo.sha,
        "files": expected_files,
        "total_bytes": sum(f.size for f in repo.files.values()),
        "completed_at": manifest["completed_at"],
    }
    assert manifest == build_manifest(REPO, repo.sha, _hub_files(hub), manifest["completed_at"], source=hub.endpoint)
    assert s3.open_uploads() == []
    # Each byte read once (multipart files as one range per part); LFS content from the other origin, which
    # never saw an Authorization header; the Hub's resolve URL asked once per file.
    assert all(hub.bytes_sent(p) == f.size for p, f in repo.files.items())
    assert all(len([r for r in hub.requests_for(p) if r.server == "hub"]) == 1 for p in repo.files)
    assert sorted(r.range for r in hub.requests_for(WEIGHTS_1) if r.server == "cdn") == sorted(
        f"bytes={start}-{min(start + 5 * MiB, 12 * MiB) - 1}" for start in (0, 5 * MiB, 10 * MiB)
    )
    assert not hub.authorization_reached_cdn()
    (summary,) = result.events("summary")
    assert "status=ok" in summary and "uploaded=6" in summary and "skipped=0" in summary
    assert result.events("manifest") and result.events("done") and result.err == "" and result.message is None


def _hub_files(hub: FakeHub, repo: str = REPO):
    from hfstage.hub import HubClient

    return HubClient(hub.endpoint).revision_info(repo, "main").files


def test_rerun_uploads_nothing(stage, hub: FakeHub) -> None:
    assert stage().code == 0
    before = len(hub.requests)
    again = stage()
    assert again.code == 0
    uploads = {"CreateMultipartUpload", "UploadPart", "PutObject", "CompleteMultipartUpload"}
    assert not uploads & set(again.calls), again.calls
    assert again.events("up_to_date") and "uploaded=0" in again.events("summary")[0]
    assert [r.path for r in hub.requests[before:]] == [f"/api/models/{REPO}/revision/main"]  # no download at all


def test_a_failed_run_leaves_no_manifest_and_the_rerun_copies_only_what_is_missing(
    stage,
    s3: S3Env,  # noqa: F811
    hub: FakeHub,
) -> None:
    hub.fail(WEIGHTS_2, status=500, times=None)
    failed = stage("--max-attempts=2")
    prefix = prefix_of(hub)
    assert failed.code == 1
    assert "1 of 6 files failed" in failed.message and WEIGHTS_2 in failed.message
    assert failed.err.strip() == failed.message.strip()
    assert prefix + MANIFEST_NAME not in s3.list_keys() and prefix + WEIGHTS_2 not in s3.list_keys()
    assert prefix + WEIGHTS_1 in s3.list_keys() and s3.open_uploads() == []

    hub.clear_faults()
    resumed = stage()
    assert resumed.code == 0
    # One data upload; a hash checkpoint (an upload created, then aborted) may or may not be saved in between.
    assert resumed.calls["CreateMultipartUpload"] == 1 + resumed.calls["AbortMultipartUpload"]
    assert resumed.calls["UploadPart"] == 2
    assert resumed.calls["PutObject"] == 1  # the manifest only
    assert len(resumed.events("skip")) == 5 and prefix + MANIFEST_NAME in s3.list_keys()


def test_corrupted_bytes_fail_the_file_with_no_object_no_manifest_no_open_upload(
    stage,
    s3: S3Env,  # noqa: F811
    hub: FakeHub,
) -> None:
    hub.corrupt(WEIGHTS_1)  # an LFS file: SHA-256 mismatch
    hub.corrupt("tokenizer.json")  # a git file: blob SHA-1 mismatch
    result = stage("--max-attempts=2")
    prefix = prefix_of(hub)
    assert result.code == 1
    assert "2 of 6 files failed" in result.message and "does not match the Hub's" in result.message
    keys = s3.list_keys()
    assert prefix + WEIGHTS_1 not in keys and prefix + "tokenizer.json" not in keys
    assert prefix + MANIFEST_NAME not in keys and prefix + WEIGHTS_2 in keys
    assert s3.open_uploads() == []
    assert result.calls["CompleteMultipartUpload"] == 1  # the intact multipart file only
    assert not [line for line in result.out.splitlines() if "event=abort_failed" in line]
    assert len(hub.requests_for(WEIGHTS_1)) == 2 * (1 + 3)  # redirect + one range per part, per attempt


def test_transient_server_errors_are_retried(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    hub.fail(WEIGHTS_1, status=500, times=2)
    hub.fail("config.json", status=429, times=1, retry_after=0)
    hub.fail("tokenizer.json", status=503, times=1)
    result = stage()
    assert result.code == 0, result.message
    assert len(result.events("retry")) == 4
    assert "HTTP 500" in " ".join(result.events("retry"))
    prefix = prefix_of(hub)
    assert s3.body(prefix + WEIGHTS_1) == FILES[WEIGHTS_1].to_bytes()


def test_a_dropped_connection_continues_from_its_last_byte(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    hub.drop_after(WEIGHTS_1, after_bytes=11 * MiB)  # inside the third 5 MiB part
    hub.drop_after("tokenizer.json", after_bytes=1000)  # a small file too
    result = stage("--ranges-per-file=1")  # one stream per file (see the parallel cases below)
    assert result.code == 0, result.message
    ranges = [r.range for r in hub.requests_for(WEIGHTS_1) if r.server == "cdn"]
    assert ranges == [None, f"bytes={11 * MiB}-"]  # not a byte fetched twice, no attempt spent
    assert [r.range for r in hub.requests_for("tokenizer.json")] == [None, "bytes=1000-"]
    assert hub.bytes_sent(WEIGHTS_1) == FILES[WEIGHTS_1].size and not result.events("retry")
    resumed = [line for line in result.out.splitlines() if "event=resume_read" in line]
    assert len(resumed) == 2 and any(f"path={WEIGHTS_1} offset={11 * MiB} " in line for line in resumed)
    assert result.calls["UploadPart"] == 5
    prefix = prefix_of(hub)
    assert s3.body(prefix + WEIGHTS_1) == FILES[WEIGHTS_1].to_bytes()
    assert s3.body(prefix + "tokenizer.json") == FILES["tokenizer.json"]


def test_a_connection_dropped_at_a_part_boundary_resumes_there(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    """The stream ends exactly after part 2: the read of part 3 gets nothing, so the attempt fails (no new byte
    to continue after) and the next one resumes at the last part boundary, the two parts not sent again."""
    hub.drop_after(WEIGHTS_1, after_bytes=10 * MiB)
    hub.drop_after("tokenizer.json", after_bytes=0)  # nothing read: a small file restarts
    result = stage("--ranges-per-file=1")
    assert result.code == 0, result.message
    ranges = [r.range for r in hub.requests_for(WEIGHTS_1) if r.server == "cdn"]
    assert ranges == [None, f"bytes={10 * MiB}-"]  # the two uploaded parts are not sent again
    assert [r.range for r in hub.requests_for("tokenizer.json")] == [None, None]
    assert len(result.events("retry")) == 2
    assert result.calls["UploadPart"] == 5
    assert result.calls["CreateMultipartUpload"] == 2 + result.calls["AbortMultipartUpload"]  # + checkpoints
    assert any("event=resume" in line and f"offset={10 * MiB}" in line for line in result.out.splitlines())
    prefix = prefix_of(hub)
    assert s3.body(prefix + WEIGHTS_1) == FILES[WEIGHTS_1].to_bytes()
    assert s3.body(prefix + "tokenizer.json") == FILES["tokenizer.json"]


def test_an_unreadable_manifest_is_replaced(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    prefix = prefix_of(hub)
    s3.client.put_object(Bucket=s3.bucket, Key=prefix + MANIFEST_NAME, Body=b"{not json")
    result = stage("--include=config.json")
    assert result.code == 0
    assert "existing manifest ignored" in result.events("warning")[0]
    assert [f["path"] for f in json.loads(s3.body(prefix + MANIFEST_NAME))["files"]] == ["config.json"]


def test_include_and_exclude_select_files(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    result = stage('--include=["*.json", "*.safetensors"]', "--exclude=generation_*")
    assert result.code == 0
    prefix = prefix_of(hub)
    staged = {k[len(prefix) :] for k in s3.list_keys(prefix)}
    assert staged == {MANIFEST_NAME, "config.json", "tokenizer.json", WEIGHTS_1, WEIGHTS_2}
    manifest = json.loads(s3.body(prefix + MANIFEST_NAME))
    assert [f["path"] for f in manifest["files"]] == ["config.json", WEIGHTS_1, WEIGHTS_2, "tokenizer.json"]
    nothing = stage("--include=*.gguf")
    assert nothing.code == 2 and "no file of Org/Model" in nothing.message


def test_gated_repo_without_token_fails_with_the_reason(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    result = stage(repo="Org/Gated")
    assert result.code == 3
    assert "Org/Gated is gated or private: give a token with access through hf_token_secret_arn" in result.message
    assert result.err.strip() == result.message.strip() and len(result.message.encode()) < 1024
    assert not [k for k in s3.list_keys() if MANIFEST_NAME in k] and s3.open_uploads() == []


def test_gated_repo_with_token_from_secrets_manager(stage, s3: S3Env, hub: FakeHub) -> None:  # noqa: F811
    secrets = boto_session().client("secretsmanager")
    wrong = secrets.create_secret(Name="wrong", SecretString="hf_not_the_right_one")["ARN"]
    denied = stage(f"--token-secret-arn={wrong}", repo="Org/Gated")
    assert denied.code == 3 and "the given token has no access" in denied.message
    assert "hf_not_the_right_one" not in denied.out + denied.err + denied.message

    arn = secrets.create_secret(Name="hf-token", SecretString=json.dumps({"token": TEST_TOKEN}))["ARN"]
    result = stage(f"--token-secret-arn={arn}", repo="Org/Gated")
    assert result.code == 0, result.message
    prefix = prefix_of(hub, "Org/Gated")
    assert s3.body(prefix + "model.safetensors") == hub.repos["Org/Gated"].files["model.safetensors"].content.to_bytes()
    assert TEST_TOKEN not in result.out + result.err
    assert "token=yes" in result.events("begin")[0]
    assert any(r.server == "hub" and r.authorization for r in hub.requests)
    assert not hub.authorization_reached_cdn()


def test_unreadable_token_secret_is_an_argument_error(stage) -> None:
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:absent-AbCdEf"
    result = stage(f"--token-secret-arn={arn}", repo="Org/Gated")
    assert result.code == 2
    assert "cannot read the Hub token secret" in result.message and "ResourceNotFoundException" in result.message


def test_hf_token_environment_variable_is_the_fallback_by_hand(
    stage,
    hub: FakeHub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    result = stage(repo="Org/Gated")
    assert result.code == 0 and TEST_TOKEN not in result.out + result.err


@pytest.mark.parametrize(
    ("repo", "revision", "message"),
    [
        ("Org/Absent", "main", "Org/Absent was not found on http://127.0.0.1:"),
        (REPO, "no-such-tag", "no such revision (branch, tag or commit) in Org/Model"),
    ],
)
def test_unknown_repo_or_revision(stage, repo: str, revision: str, message: str) -> None:
    result = stage(f"--revision={revision}", repo=repo)
    assert result.code == 3 and message in result.message
    assert result.message.startswith(f"staging {repo}@{revision} failed: ")


def test_a_permanent_s3_error_stops_the_run_with_its_reason(stage) -> None:
    result = stage("--destination=s3://no-such-bucket/models/", "--include=*.json")
    assert result.code == 1
    assert "s3://no-such-bucket/models/Org--Model/" in result.message and "NoSuchBucket" in result.message
    assert not result.events("retry")  # not worth retrying


def test_failure_file_defaults_to_the_environment_variable(
    stage,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hfstage.worker import main

    target = tmp_path / "out" / "message"
    monkeypatch.setenv("HFSTAGE_FAILURE_FILE", str(target))
    assert main(["--repo-id=Org/Model"]) == 2
    # Its folder did not exist (a Processing container need not have /opt/ml/output): it is created.
    assert "bad arguments" in target.read_text() and "--destination" in target.read_text()


def test_progress_lines_are_structured(stage, hub: FakeHub) -> None:
    result = stage("--progress-interval-s=0.05", "--include=*.safetensors")
    assert result.code == 0
    progress = result.events("progress")
    assert progress, result.out
    fields = dict(part.split("=", 1) for part in progress[0].split())
    assert {"files_done", "bytes_done", "bytes_total", "mb_per_s", "eta_s"} <= set(fields)
    assert fields["files_done"].endswith("/2")
    assert os.environ.get("AWS_ENDPOINT_URL_S3") in result.events("plan")[0]  # boto3 read the endpoint itself
