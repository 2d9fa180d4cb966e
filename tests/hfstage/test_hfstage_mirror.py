"""A mirror that answers less: a revision listing without ``blobId``/``lfs`` (Artifactory's or Nexus's Hugging Face
remotes document no ``blobs=true``), completed by one HEAD per file as huggingface_hub's get_hf_file_metadata
reads it; integrity checks kept; a HEAD without the headers refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfstage.hub import HubClient, HubError, file_from_headers, lfs_pointer_blob_id
from hfstage.manifest import MANIFEST_NAME, revision_prefix
from tests.fakes.fake_hub import TEST_TOKEN, FakeHub, Synthetic, git_blob_sha1, lfs_pointer
from tests.fakes.fixtures import S3Env, fake_hub, s3  # noqa: F401

MiB = 1024 * 1024
REPO = "Org/Mirrored"
FILES = {
    "config.json": b'{"architectures": ["DemoForCausalLM"]}\n',
    "tokenizer.json": bytes(range(256)) * 40,
    "model.safetensors": Synthetic(6 * MiB, seed=5),
}
SHA = "ab" * 20


@pytest.fixture
def hub(fake_hub: FakeHub) -> FakeHub:  # noqa: F811
    fake_hub.add_repo(REPO, FILES)
    fake_hub.add_repo("Org/GatedMirror", {"config.json": b"{}"}, gated=True)
    return fake_hub


def _files(hub: FakeHub, **client):
    return HubClient(hub.endpoint, **client).revision_info(REPO, "main").files


@pytest.mark.parametrize("listing", ["sizes", "names"])
def test_a_listing_without_hashes_is_completed_by_a_head_per_file(hub: FakeHub, listing: str) -> None:
    full = _files(hub)
    hub.requests.clear()
    hub.listing = listing
    mirrored = _files(hub, token=TEST_TOKEN)
    # The same sizes, blob ids and SHA-256s as the Hub's own listing: a rerun across the two skips what is staged.
    assert mirrored == full and {f.path for f in mirrored} == set(FILES)
    heads = [r for r in hub.requests if r.method == "HEAD"]
    assert sorted(r.file for r in heads) == sorted(FILES)
    assert all(r.server == "hub" for r in heads)  # the LFS file's redirect to the CDN is not followed
    assert not hub.authorization_reached_cdn()


def test_the_hubs_full_listing_costs_no_head(hub: FakeHub) -> None:
    _files(hub)
    assert [r.method for r in hub.requests] == ["GET"]


def test_the_derived_pointer_blob_id_is_the_hubs() -> None:
    sha256 = "0f" * 32
    assert lfs_pointer_blob_id(sha256, 1234) == git_blob_sha1(lfs_pointer(sha256, 1234))


@pytest.mark.parametrize(
    ("dropped", "missing"),
    [
        (("X-Linked-Etag", "ETag"), "no X-Linked-Etag (an LFS file's SHA-256) or ETag (a file's git blob SHA-1)"),
        (("X-Linked-Size",), "no X-Linked-Size or Content-Length"),
        (("X-Repo-Commit",), "answered no X-Repo-Commit"),
    ],
)
def test_a_head_without_the_headers_is_refused_by_name(hub: FakeHub, dropped, missing: str) -> None:
    hub.listing = "names"
    hub.resolve_drops = dropped
    with pytest.raises(HubError) as refused:
        _files(hub)
    text = str(refused.value)
    assert text.startswith(f"resolving {REPO}: the HEAD of ") and missing in text
    assert not refused.value.retryable and len(text) < 1024


@pytest.mark.parametrize(
    ("headers", "redirected", "expected"),
    [
        ({"X-Repo-Commit": SHA, "ETag": f'"{"1" * 40}"', "Content-Length": "7"}, False, (7, "1" * 40, None)),
        ({"X-Repo-Commit": SHA, "ETag": f'W/"{"1" * 40}"', "Content-Length": "0"}, False, (0, "1" * 40, None)),
        # A mirror serving an LFS file itself: a 64-hex ETag is the SHA-256 (huggingface_hub REGEX_SHA256).
        ({"X-Repo-Commit": SHA, "ETag": f'"{"2" * 64}"', "Content-Length": "9"}, False, (9, None, "2" * 64)),
        (
            {"X-Repo-Commit": SHA, "X-Linked-Etag": f'"{"3" * 64}"', "X-Linked-Size": "11", "Content-Length": "0"},
            True,
            (11, None, "3" * 64),
        ),
    ],
)
def test_headers_read_as_huggingface_hub_reads_them(headers, redirected: bool, expected) -> None:
    size, blob_id, sha256 = expected
    f = file_from_headers(REPO, SHA, "x", headers, redirected=redirected)
    assert (f.size, f.sha256) == (size, sha256)
    assert f.blob_id == (blob_id or lfs_pointer_blob_id(sha256, size))


@pytest.mark.parametrize(
    ("headers", "redirected"),
    [
        ({"X-Repo-Commit": SHA, "ETag": '"abc"', "Content-Length": "7"}, False),  # a mirror's own opaque ETag
        ({"X-Repo-Commit": SHA, "ETag": f'"{"1" * 40}"', "Content-Length": "0"}, True),  # a redirect's length
        ({"X-Repo-Commit": SHA, "ETag": f'"{"1" * 40}"', "Content-Length": "-1"}, False),
        ({"X-Repo-Commit": SHA, "ETag": f'"{"1" * 40}"', "X-Linked-Size": "x"}, False),
        ({"X-Repo-Commit": "cd" * 20, "ETag": f'"{"1" * 40}"', "Content-Length": "7"}, False),  # another commit
        ({"ETag": f'"{"1" * 40}"', "Content-Length": "7"}, False),
    ],
)
def test_headers_that_cannot_be_verified_are_refused(headers, redirected: bool) -> None:
    with pytest.raises(HubError, match=r"^resolving Org/Mirrored: the HEAD of x at abababababab"):
        file_from_headers(REPO, SHA, "x", headers, redirected=redirected)


def test_a_gated_file_on_a_mirror_needs_the_token(hub: FakeHub) -> None:
    hub.listing = "names"
    with pytest.raises(HubError, match="gated or private"):
        HubClient(hub.endpoint).revision_info("Org/GatedMirror", "main")
    assert HubClient(hub.endpoint, token=TEST_TOKEN).revision_info("Org/GatedMirror", "main").files


def _stage(s3: S3Env, hub: FakeHub, tmp_path: Path) -> tuple[int, str | None]:  # noqa: F811
    from hfstage.worker import main

    client, _ = s3.worker_client()
    message = tmp_path / "message"
    message.unlink(missing_ok=True)
    code = main(
        [
            f"--repo-id={REPO}",
            f"--destination=s3://{s3.bucket}/models/",
            "--part-size-mib=5",
            "--retry-base-s=0.01",
            "--max-attempts=2",
            f"--failure-file={message}",
            f"--resource-config={tmp_path / 'absent.json'}",
        ],
        s3_client=client,
    )
    return code, message.read_text() if message.exists() else None


def test_the_worker_stages_from_a_mirror_verified_and_refuses_a_corrupt_file(
    s3: S3Env,  # noqa: F811
    hub: FakeHub,
    tmp_path: Path,
) -> None:
    hub.listing = "names"
    hub.corrupt("tokenizer.json")  # a small file: checked against the ETag's git blob SHA-1
    hub.corrupt("model.safetensors")  # an LFS file: checked against the X-Linked-Etag's SHA-256
    code, message = _stage(s3, hub, tmp_path)
    prefix = revision_prefix("models/", REPO, hub.repos[REPO].sha)
    assert code != 0 and message and "does not match" in message
    assert s3.list_keys("models/") == [prefix + "config.json"]  # neither corrupt file was kept
    hub.clear_faults()
    code, message = _stage(s3, hub, tmp_path)
    assert code == 0, message
    manifest = json.loads(s3.body(prefix + MANIFEST_NAME))
    repo = hub.repos[REPO]
    assert manifest["files"] == [
        {"path": p, "size": f.size, "blob_id": f.blob_id, **({"sha256": f.sha256} if f.lfs else {})}
        for p, f in sorted(repo.files.items())
    ]
