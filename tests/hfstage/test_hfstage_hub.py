"""The fake Hub behaves like the real one for ``huggingface_hub``; our HubClient reads it correctly."""

from __future__ import annotations

import hashlib
import http.server
import threading
import urllib.parse
from pathlib import Path

import pytest

from hfstage.hub import (
    MAX_REDIRECTS,
    GatedRepo,
    HubClient,
    HubError,
    HubUnavailable,
    RepoNotFound,
    RevisionNotFound,
)
from tests.fakes.fake_hub import TEST_TOKEN, FakeHub, Synthetic
from tests.fakes.fixtures import fake_hub  # noqa: F401

MiB = 1024 * 1024
FILES = {
    "config.json": b'{"architectures": ["Demo"]}',
    "model.safetensors": Synthetic(3 * MiB, seed=1),
    "sub/dir/notes.txt": b"x" * 100,
}


@pytest.fixture
def hub(fake_hub: FakeHub) -> FakeHub:  # noqa: F811
    fake_hub.page_size = 2
    fake_hub.add_repo("Org/Model", FILES, branches=("main",), tags=("v1.0",))
    fake_hub.add_repo("Org/Gated", {"config.json": b"{}", "w.safetensors": b"abc"}, gated=True)
    fake_hub.add_repo("Org/Private", {"config.json": b"{}"}, private=True)
    return fake_hub


# -- the fake against the real client ------------------------------------------------------------------


def test_model_info_with_file_metadata(hub: FakeHub) -> None:
    from huggingface_hub import HfApi

    info = HfApi(endpoint=hub.endpoint).model_info("Org/Model", revision="main", files_metadata=True)
    repo = hub.repos["Org/Model"]
    assert info.sha == repo.sha
    siblings = {s.rfilename: s for s in info.siblings}
    assert set(siblings) == set(FILES)
    weights = siblings["model.safetensors"]
    assert weights.size == 3 * MiB and weights.lfs is not None
    assert weights.lfs.sha256 == hashlib.sha256(FILES["model.safetensors"].to_bytes()).hexdigest()
    config = siblings["config.json"]
    data = FILES["config.json"]
    assert config.lfs is None and config.blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_list_repo_tree_follows_link_pagination(hub: FakeHub) -> None:
    from huggingface_hub import HfApi

    entries = list(HfApi(endpoint=hub.endpoint).list_repo_tree("Org/Model", recursive=True))
    assert [e.path for e in entries] == ["config.json", "model.safetensors", "sub", "sub/dir", "sub/dir/notes.txt"]
    pages = [r for r in hub.requests if r.path.startswith("/api/models/Org/Model/tree/")]
    assert len(pages) == 3  # two entries a page


def test_hf_hub_download_small_and_lfs_files(hub: FakeHub, tmp_path) -> None:
    from huggingface_hub import hf_hub_download

    lfs = hf_hub_download("Org/Model", "model.safetensors", revision="v1.0", cache_dir=tmp_path, endpoint=hub.endpoint)
    small = hf_hub_download("Org/Model", "config.json", cache_dir=tmp_path, endpoint=hub.endpoint)
    assert Path(lfs).read_bytes() == FILES["model.safetensors"].to_bytes()
    assert Path(small).read_bytes() == FILES["config.json"]
    redirect = [r for r in hub.requests if r.file == "model.safetensors" and r.server == "hub"]
    assert redirect and all(r.status == 302 for r in redirect)  # LFS content comes from the other origin
    assert hub.requests_for("model.safetensors")[0].server == "cdn"


def test_errors_map_to_huggingface_hub_exceptions(hub: FakeHub, tmp_path) -> None:
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    api = HfApi(endpoint=hub.endpoint)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("Org/Nope")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("Org/Private")
    with pytest.raises(RevisionNotFoundError):
        api.model_info("Org/Model", revision="nope")
    with pytest.raises(GatedRepoError):
        hf_hub_download("Org/Gated", "w.safetensors", cache_dir=tmp_path, endpoint=hub.endpoint)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("Org/Model", "absent.bin", cache_dir=tmp_path, endpoint=hub.endpoint)
    path = hf_hub_download("Org/Gated", "w.safetensors", cache_dir=tmp_path, endpoint=hub.endpoint, token=TEST_TOKEN)
    assert Path(path).read_bytes() == b"abc"
    assert not hub.authorization_reached_cdn()


# -- our client ----------------------------------------------------------------------------------------


def test_revision_info_resolves_refs_to_the_commit(hub: FakeHub) -> None:
    client = HubClient(hub.endpoint)
    repo = hub.repos["Org/Model"]
    for ref in ("main", "v1.0", repo.sha):
        revision = client.revision_info("Org/Model", ref)
        assert revision.sha == repo.sha
    assert [(f.path, f.size, f.blob_id, f.sha256) for f in revision.files] == [
        (f.path, f.size, f.blob_id, f.sha256 or None) for f in repo.files.values()
    ]
    assert revision.files[1].is_lfs and not revision.files[0].is_lfs


def test_refs_with_slashes_are_quoted(hub: FakeHub) -> None:
    hub.add_repo("Org/Pr", {"a.txt": b"a"}, branches=("main", "refs/pr/1"))
    assert HubClient(hub.endpoint).revision_info("Org/Pr", "refs/pr/1").sha == hub.repos["Org/Pr"].sha
    assert any(r.path == "/api/models/Org/Pr/revision/refs/pr/1" for r in hub.requests)


def test_open_file_ranges_and_redirects_without_the_token(hub: FakeHub) -> None:
    client = HubClient(hub.endpoint, token=TEST_TOKEN)
    sha = hub.repos["Org/Model"].sha
    whole = FILES["model.safetensors"].to_bytes()
    response = client.open_file("Org/Model", sha, "model.safetensors", start=MiB + 5)
    try:
        assert response.status == 206 and response.read() == whole[MiB + 5 :]
    finally:
        response.close()
    assert hub.requests[-1].server == "cdn" and hub.requests[-1].range == f"bytes={MiB + 5}-"
    assert not hub.authorization_reached_cdn()  # the CDN would have answered 400
    assert any(r.server == "hub" and r.authorization for r in hub.requests)  # the Hub itself got the token
    response = client.open_file("Org/Model", sha, "sub/dir/notes.txt")
    assert response.read() == b"x" * 100
    response.close()


@pytest.mark.parametrize(
    ("repo_id", "revision", "token", "error", "message"),
    [
        ("Org/Nope", "main", None, RepoNotFound, "Org/Nope was not found on http://127.0.0.1"),
        ("Org/Nope", "main", TEST_TOKEN, RepoNotFound, "check the repository id"),
        ("Org/Private", "main", None, RepoNotFound, "or it is gated or private: check the repository id, or give a"),
        (
            "Org/Model",
            "no-such-branch",
            None,
            RevisionNotFound,
            "no such revision (branch, tag or commit) in Org/Model",
        ),
    ],
)
def test_revision_info_errors(hub: FakeHub, repo_id, revision, token, error, message) -> None:
    with pytest.raises(error) as caught:
        HubClient(hub.endpoint, token=token).revision_info(repo_id, revision)
    assert message in str(caught.value)
    assert TEST_TOKEN not in str(caught.value) and len(str(caught.value)) < 1024


def test_gated_files_need_a_token_with_access(hub: FakeHub) -> None:
    revision = HubClient(hub.endpoint).revision_info("Org/Gated", "main")  # metadata is public, like the Hub's
    with pytest.raises(GatedRepo, match="Org/Gated is gated or private: give a token with access through hf_token"):
        HubClient(hub.endpoint).open_file("Org/Gated", revision.sha, "w.safetensors")
    with pytest.raises(GatedRepo, match="the given token has no access") as caught:
        HubClient(hub.endpoint, token="hf_wrong_token").open_file("Org/Gated", revision.sha, "w.safetensors")
    assert "hf_wrong_token" not in str(caught.value)
    response = HubClient(hub.endpoint, token=TEST_TOKEN).open_file("Org/Gated", revision.sha, "w.safetensors")
    assert response.read() == b"abc"
    response.close()


def test_server_errors_are_retryable(hub: FakeHub) -> None:
    sha = hub.repos["Org/Model"].sha
    hub.fail("config.json", status=503, retry_after=2)
    with pytest.raises(HubUnavailable) as caught:
        HubClient(hub.endpoint).open_file("Org/Model", sha, "config.json")
    assert caught.value.retryable and caught.value.retry_after == 2.0
    response = HubClient(hub.endpoint).open_file("Org/Model", sha, "config.json")  # the fault was one-off
    assert response.read() == FILES["config.json"]
    response.close()


def test_unreachable_hub_is_retryable() -> None:
    with pytest.raises(HubUnavailable, match="connection to the Hub failed"):
        HubClient("http://127.0.0.1:9", timeout=2).revision_info("Org/Model", "main")


def test_a_failed_range_names_the_file_it_was_downloading(hub: FakeHub) -> None:
    sha = hub.repos["Org/Model"].sha
    client = HubClient(hub.endpoint)
    hub.fail("config.json", status=503)
    with pytest.raises(HubUnavailable) as caught:
        client.open_range("Org/Model", "config.json", client.file_url("Org/Model", sha, "config.json"), 0, 2)
    assert str(caught.value) == "downloading config.json: the Hub answered HTTP 503"
    response = client.open_range("Org/Model", "config.json", client.file_url("Org/Model", sha, "config.json"), 0, 2)
    assert (response.status, response.headers["Content-Range"], response.read()) == (
        206,
        f"bytes 0-1/{len(FILES['config.json'])}",
        FILES["config.json"][:2],
    )
    response.close()


# -- the client's own HTTP handling, against a minimal server that records what it was sent ---------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    """GET /hop/N answers 302 to the relative /hop/N-1 (N > 0), /hop/0 answers 200; /status/CODE answers CODE,
    with a Location when asked (?to=/hop/0). Every request's headers are kept in ``seen``."""

    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        type(self).seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        path, _, query = self.path.partition("?")
        if path.startswith("/hop/"):
            left = int(path.rsplit("/", 1)[1])
            if left:
                self._answer(302, {"Location": f"/hop/{left - 1}"})
            else:
                self._answer(200, {}, b"ok")
        else:
            to = urllib.parse.parse_qs(query).get("to", [None])[0]
            self._answer(int(path.rsplit("/", 1)[1]), {"Location": to} if to else {})

    def _answer(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder():
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_relative_redirects_are_followed_up_to_ten_and_the_eleventh_is_refused(recorder: str) -> None:
    client = HubClient(recorder)
    response = client.open_range("o/m", "f", f"{recorder}/hop/{MAX_REDIRECTS}", 0, 2)
    assert response.read() == b"ok"
    response.close()
    assert [s["path"] for s in _Recorder.seen][-1] == "/hop/0"
    with pytest.raises(HubError) as refused:
        client.open_range("o/m", "f", f"{recorder}/hop/{MAX_REDIRECTS + 1}", 0, 2)
    assert str(refused.value) == f"downloading f: more than {MAX_REDIRECTS} redirects"


@pytest.mark.parametrize(("status", "followed"), [(300, True), (308, True), (400, False)])
def test_only_a_3xx_with_a_location_is_followed(recorder: str, status: int, followed: bool) -> None:
    client = HubClient(recorder)
    if followed:
        assert client.open_range("o/m", "f", f"{recorder}/status/{status}?to=/hop/0", 0, 2).read() == b"ok"
    else:
        with pytest.raises(HubError):
            client.open_range("o/m", "f", f"{recorder}/status/{status}?to=/hop/0", 0, 2)
        assert [s["path"] for s in _Recorder.seen] == [f"/status/{status}?to=/hop/0"]
    _Recorder.seen.clear()
    with pytest.raises(HubError):  # a redirect without a Location has nowhere to go
        client.open_range("o/m", "f", f"{recorder}/status/302", 0, 2)
    assert len(_Recorder.seen) == 1


def test_every_request_says_who_it_is_and_asks_for_unencoded_bytes(recorder: str) -> None:
    HubClient(recorder, token=TEST_TOKEN).open_range("o/m", "f", f"{recorder}/hop/1", 3, 10).close()
    for sent in _Recorder.seen:
        assert (sent["user-agent"], sent["accept-encoding"], sent["range"]) == ("hfstage/1", "identity", "bytes=3-9")
        assert sent["authorization"] == f"Bearer {TEST_TOKEN}"  # the Hub's own origin: the token goes along


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("HTTPS://Hub.Example/a", ("https", "hub.example", 443)),
        ("http://hub.example/a", ("http", "hub.example", 80)),
        ("https://hub.example:8443/a", ("https", "hub.example", 8443)),
        ("ftp://hub.example/a", ("ftp", "hub.example", 0)),
        ("/relative", ("", "", 0)),
    ],
)
def test_an_origin_is_scheme_host_and_port_with_the_default_ports_filled_in(url: str, origin: tuple) -> None:
    from hfstage.hub import _origin

    assert _origin(url) == origin
