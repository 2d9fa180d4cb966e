"""A fake Hugging Face Hub: two real HTTP servers (the Hub, and an LFS "CDN" on another origin).

The Hub server answers the surface the staging worker and ``huggingface_hub`` use:

- ``GET /api/models/{repo}[/revision/{rev}]`` (``?blobs=true`` adds sizes, blob ids and LFS hashes; ``listing``
  answers less, as a mirror may),
- ``GET /api/models/{repo}/tree/{rev}[/{path}]`` (``?recursive=true``), paginated with a ``Link`` header,
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: ``X-Repo-Commit`` always; small files are served with an
  ``ETag`` (their git blob SHA-1); LFS files answer ``302`` to the CDN server with ``X-Linked-Etag``
  (SHA-256) and ``X-Linked-Size``. ``Range`` gets ``206``. Errors carry ``X-Error-Code`` like the Hub's.

Like a signed CDN URL, the CDN server rejects a request that also carries an ``Authorization`` header
(and records it), so a client that leaks the token to another origin fails loudly.

Faults can be injected per file path: wrong bytes, HTTP errors for the first N requests, a connection
dropped after K bytes, a slow stream, a redirect to any ``Location`` (``file:``, ``data:``, an http
downgrade). Hub-wide, ``connection_bytes_per_s`` paces every connection (a CDN edge's per-connection rate)
and ``ignore_range`` answers ranged requests with the whole file. Every request is recorded, and the
content bytes sent per file are counted (``bytes_sent``). Big files can be synthetic: generated from a seed
and an offset, never held in memory. File names are served as given, hostile ones included (``../x``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import random
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.local_server import LocalServer

TEST_TOKEN = "hf_fAkEtOkEn0123456789abcdefSECRET"
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.gguf", "*.pt", "*.pth", "*.h5", "*.onnx")
CHUNK = 1024 * 1024


class Synthetic:
    """``size`` deterministic pseudo-random bytes from ``seed``: a 1 MiB + 4099-byte block, repeated."""

    BLOCK = CHUNK + 4099

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size = size
        self.seed = seed
        block = random.Random(seed).randbytes(self.BLOCK)
        self._double = memoryview(block + block)

    def read(self, offset: int, n: int) -> memoryview:
        """Up to ``min(n, BLOCK)`` bytes at ``offset`` (callers loop)."""
        n = max(0, min(n, self.size - offset, self.BLOCK))
        start = offset % self.BLOCK
        return self._double[start : start + n]

    def chunks(self, start: int = 0, end: int | None = None, chunk: int = CHUNK):
        end = self.size if end is None else end
        offset = start
        while offset < end:
            data = self.read(offset, min(chunk, end - offset))
            yield data
            offset += len(data)

    def to_bytes(self) -> bytes:
        return b"".join(bytes(c) for c in self.chunks())


class Blob:
    """In-memory content."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.size = len(self.data)
        self._view = memoryview(self.data)

    def chunks(self, start: int = 0, end: int | None = None, chunk: int = CHUNK):
        end = self.size if end is None else end
        for offset in range(start, end, chunk):
            yield self._view[offset : min(offset + chunk, end)]

    def to_bytes(self) -> bytes:
        return self.data


class Declared:
    """A file that only has a size: listed with it (model info, tree), never served. For metadata-only
    clients (``plan --model-id``) of checkpoints far too big to generate; its hashes are derived from the size."""

    seed = -1

    def __init__(self, size: int) -> None:
        self.size = size

    def chunks(self, start: int = 0, end: int | None = None, chunk: int = CHUNK):
        raise AssertionError("a Declared file has no content: only its size may be read")

    def to_bytes(self) -> bytes:
        raise AssertionError("a Declared file has no content: only its size may be read")


_HASH_CACHE: dict[tuple[int, int, str], str] = {}
_HASH_LOCK = threading.Lock()


def _digest(content: Blob | Synthetic | Declared, algorithm: str) -> str:
    if isinstance(content, Declared):
        return hashlib.sha256(f"declared {content.size} {algorithm}".encode()).hexdigest()[
            : 64 if algorithm == "sha256" else 40
        ]
    key = (content.size, content.seed, algorithm) if isinstance(content, Synthetic) else None
    if key is not None:
        with _HASH_LOCK:
            if key in _HASH_CACHE:
                return _HASH_CACHE[key]
    h = hashlib.sha256() if algorithm == "sha256" else hashlib.sha1(b"blob %d\0" % content.size)
    for chunk in content.chunks():
        h.update(chunk)
    if key is not None:
        with _HASH_LOCK:
            _HASH_CACHE[key] = h.hexdigest()
    return h.hexdigest()


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass
class FakeFile:
    path: str
    content: Blob | Synthetic | Declared
    lfs: bool
    sha256: str = ""
    blob_id: str = ""
    pointer: bytes = b""

    def __post_init__(self) -> None:
        if self.lfs:
            self.sha256 = _digest(self.content, "sha256")
            self.pointer = lfs_pointer(self.sha256, self.content.size)
            self.blob_id = git_blob_sha1(self.pointer)
        else:
            self.blob_id = _digest(self.content, "git-sha1")

    @property
    def size(self) -> int:
        return self.content.size


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, FakeFile]
    sha: str
    refs: dict[str, str]
    gated: bool = False
    private: bool = False
    tags: tuple[str, ...] = ()
    downloads: int = 0


@dataclass
class Fault:
    kind: str  # "status", "cdn_status", "corrupt", "drop", "slow", "whole", "wrong_range", "redirect", "cdn_redirect"
    times: int | None  # None: every request
    status: int = 500
    retry_after: float | None = None
    after_bytes: int = 0
    bytes_per_s: float = 0.0
    methods: tuple[str, ...] = ("GET",)
    range: str | None = None  # only requests with this Range header (None: any)
    location: str = ""  # where a redirect fault sends the client
    every: int = 1  # only every N-th matching request (the N-th, 2N-th, ...): a flaky source, not a broken one
    seen: int = 0  # matching requests so far


@dataclass
class Recorded:
    server: str  # "hub" or "cdn"
    method: str
    path: str  # the URL path, decoded
    file: str | None  # the repository file it served, if any
    status: int
    range: str | None
    authorization: bool
    finished: float = 0.0  # time.monotonic() when the body was sent (0: not yet, or no body)
    started: float = field(default_factory=time.monotonic)  # when the request arrived


@dataclass
class FakeHub:
    """Start with ``with FakeHub() as hub:`` (or ``start()``/``stop()``); ``hub.endpoint`` is HF_ENDPOINT."""

    token: str = TEST_TOKEN
    lfs_threshold: int = 1024 * 1024
    lfs_patterns: tuple[str, ...] = LFS_PATTERNS
    page_size: int = 50
    cdn_rejects_authorization: bool = True
    # Like a CDN edge: each connection's body streams at about this many bytes per second (0: unlimited).
    connection_bytes_per_s: float = 0.0
    # A server that answers every ``Range`` request with the whole file (200), as RFC 9110 section 14.2 allows.
    ignore_range: bool = False
    # What the revision listing holds under ``blobs=true``, as a mirror may answer less: "full" (the Hub's),
    # "sizes" (sizes, no blobId or lfs) or "names" (rfilename only, as without ``blobs``).
    listing: str = "full"
    # Headers the Hub server leaves out of its resolve answers (a mirror that drops X-Linked-Etag, ETag, ...).
    resolve_drops: tuple[str, ...] = ()
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._faults: dict[str, list[Fault]] = {}
        self._lock = threading.Lock()
        self._by_sha256: dict[str, FakeFile] = {}
        self._servers: list[LocalServer] = []
        self._threads: list[threading.Thread] = []
        self.endpoint = ""
        self.cdn_endpoint = ""
        self.body_bytes_sent: dict[str, int] = {}  # path -> content bytes written to clients (GET bodies)

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> FakeHub:
        hub = _server(self, "hub")
        cdn = _server(self, "cdn")
        self._servers = [hub, cdn]
        self.endpoint = f"http://127.0.0.1:{hub.server_address[1]}"
        self.cdn_endpoint = f"http://127.0.0.1:{cdn.server_address[1]}"
        for server in self._servers:
            # A short poll: stop() waits for it, once per test (mutation testing runs each test thousands of times).
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        stopping = [threading.Thread(target=server.shutdown) for server in self._servers]  # both at once
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join(timeout=5)
        for server in self._servers:
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers, self._threads = [], []

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- repositories --------------------------------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes | Synthetic | Declared],
        *,
        gated: bool = False,
        private: bool = False,
        branches: tuple[str, ...] = ("main",),
        tags: tuple[str, ...] = (),
        model_tags: tuple[str, ...] = (),
        downloads: int = 0,
    ) -> FakeRepo:
        """``tags`` are git tags (refs); ``model_tags`` are the Hub's model tags (``GET /api/models?filter=``)."""
        fake_files = {}
        for path, content in sorted(files.items()):
            body = content if isinstance(content, (Synthetic, Declared)) else Blob(content)
            lfs = body.size >= self.lfs_threshold or any(fnmatch.fnmatch(path, p) for p in self.lfs_patterns)
            fake_files[path] = FakeFile(path, body, lfs)
        listing = "\n".join(f"{f.path} {f.blob_id}" for f in fake_files.values())
        # surrogatepass: a hostile name may hold a lone surrogate (JSON's "\ud800"), which plain UTF-8 refuses.
        sha = hashlib.sha1(f"{repo_id}\n{listing}".encode("utf-8", "surrogatepass")).hexdigest()
        refs = {name: sha for name in (*branches, *tags)}
        repo = FakeRepo(
            repo_id, fake_files, sha, refs, gated=gated, private=private, tags=model_tags, downloads=downloads
        )
        with self._lock:
            self.repos[repo_id] = repo
            for f in fake_files.values():
                if f.lfs:
                    self._by_sha256.setdefault(f.sha256, f)
        return repo

    # -- faults --------------------------------------------------------------------------------------

    def fail(
        self,
        path: str,
        status: int = 500,
        times: int | None = 1,
        retry_after: float | None = None,
        methods: tuple[str, ...] = ("GET",),
    ) -> None:
        """Answer the next ``times`` requests for ``path`` (on the Hub's resolve URL) with ``status``."""
        self._add_fault(path, Fault("status", times, status=status, retry_after=retry_after, methods=methods))

    def corrupt(self, path: str, times: int | None = None) -> None:
        """Serve ``path`` with one byte flipped (same length) ``times`` times (None: always)."""
        self._add_fault(path, Fault("corrupt", times))

    def cdn_status(
        self, path: str, status: int, times: int | None = 1, range: str | None = None, every: int = 1
    ) -> None:
        """Answer ``status`` from the CDN for ``path`` ``times`` times (None: always; only for the Range header
        ``range``, when given; only every ``every``-th such request), as for a signed URL that expired."""
        self._add_fault(path, Fault("cdn_status", times, status=status, range=range, every=every))

    def drop_after(
        self, path: str, after_bytes: int, times: int | None = 1, range: str | None = None, every: int = 1
    ) -> None:
        """Close the connection after ``after_bytes`` bytes of the body, ``times`` times (None: always; only for
        requests with the Range header ``range``, when given; only every ``every``-th such request)."""
        self._add_fault(path, Fault("drop", times, after_bytes=after_bytes, range=range, every=every))

    def whole_file(self, path: str, range: str, times: int = 1) -> None:
        """Answer the request for ``path`` with the Range header ``range`` with the whole file (200), as a server
        that ignores Range may (RFC 9110 section 14.2), ``times`` times."""
        self._add_fault(path, Fault("whole", times, range=range))

    def wrong_range(self, path: str, range: str, times: int = 1) -> None:
        """Answer the request for ``path`` with the Range header ``range`` with as many bytes from offset 0 (a 206
        whose Content-Range is not the one asked for), ``times`` times."""
        self._add_fault(path, Fault("wrong_range", times, range=range))

    def slow(
        self, path: str, bytes_per_s: float, after_bytes: int = 0, times: int | None = None, range: str | None = None
    ) -> None:
        """Stream ``path`` at full speed for ``after_bytes`` bytes, then at about ``bytes_per_s``."""
        self._add_fault(path, Fault("slow", times, bytes_per_s=bytes_per_s, after_bytes=after_bytes, range=range))

    def redirect(
        self, path: str, location: str, times: int | None = None, cdn: bool = False, range: str | None = None
    ) -> None:
        """Answer requests for ``path`` with ``302 Location: location``: on the Hub's resolve URL, or on the CDN
        (``cdn=True``), only those with the Range header ``range`` when given, ``times`` times (None: always)."""
        kind = "cdn_redirect" if cdn else "redirect"
        self._add_fault(path, Fault(kind, times, status=302, location=location, range=range, methods=("GET", "HEAD")))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _add_fault(self, path: str, fault: Fault) -> None:
        with self._lock:
            self._faults.setdefault(path, []).append(fault)

    def _take_fault(self, path: str, kinds: tuple[str, ...], method: str, range: str | None = None) -> Fault | None:
        with self._lock:
            for fault in self._faults.get(path, []):
                if fault.range is not None and fault.range != range:
                    continue
                if fault.kind in kinds and method in fault.methods and (fault.times is None or fault.times > 0):
                    fault.seen += 1
                    if fault.seen % fault.every:
                        continue
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    # -- request log ---------------------------------------------------------------------------------

    def record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)

    def requests_for(self, file: str, method: str = "GET") -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.file == file and r.method == method]

    def bytes_sent(self, file: str) -> int:
        with self._lock:
            return self.body_bytes_sent.get(file, 0)

    def _count_sent(self, file: str, n: int) -> None:
        with self._lock:
            self.body_bytes_sent[file] = self.body_bytes_sent.get(file, 0) + n

    def authorization_reached_cdn(self) -> bool:
        with self._lock:
            return any(r.server == "cdn" and r.authorization for r in self.requests)


def _server(hub: FakeHub, role: str) -> LocalServer:
    handler = type(f"{role.title()}Handler", (_Handler,), {"hub": hub, "role": role})
    return LocalServer(("127.0.0.1", 0), handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub
    role: str

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_GET(self) -> None:
        self._dispatch()

    # -- plumbing ------------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        self._query = urllib.parse.parse_qs(url.query)
        # Recorded before answering, so a client that has its answer always finds its request in the log.
        self._record = Recorded(
            server=self.role,
            method=self.command,
            path=urllib.parse.unquote(url.path),
            file=None,
            status=0,
            range=self.headers.get("Range"),
            authorization="Authorization" in self.headers,
        )
        self.hub.record(self._record)
        try:
            if self.role == "cdn":
                self._cdn(url.path)
            elif url.path.startswith("/api/models/"):
                self._api(url.path[len("/api/models/") :])
            elif url.path.rstrip("/") == "/api/models":
                self._list_models()
            elif "/resolve/" in url.path:
                self._resolve(url.path)
            else:
                self._error(404, "Not found", None)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self._record.status = status
        self.send_response(status)
        for name, value in self._kept(headers).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _kept(self, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` without those a mirror drops from its resolve answers (``FakeHub.resolve_drops``)."""
        if self.role != "hub" or "/resolve/" not in self.path:
            return headers
        dropped = {h.lower() for h in self.hub.resolve_drops}
        return {k: v for k, v in headers.items() if k.lower() not in dropped}

    def _error(self, status: int, message: str, code: str | None, extra: dict[str, str] | None = None) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        headers.update(extra or {})
        self._send(status, headers, json.dumps({"error": message}).encode())

    def _authorized(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {self.hub.token}"

    def _repo(self, repo_id: str, *, for_files: bool) -> FakeRepo | None:
        """The repository, or None after answering the error the Hub would give."""
        repo = self.hub.repos.get(repo_id)
        if repo is None or (repo.private and not self._authorized()):
            status = 404 if self._authorized() else 401
            self._error(status, "Repository not found", "RepoNotFound")
            return None
        if repo.gated and for_files and not self._authorized():
            status = 403 if "Authorization" in self.headers else 401
            self._error(
                status,
                f"Access to model {repo_id} is restricted. You must have access to it and be authenticated.",
                "GatedRepo",
            )
            return None
        return repo

    def _sha(self, repo: FakeRepo, revision: str) -> str | None:
        if revision in repo.refs:
            return repo.refs[revision]
        if revision == repo.sha:
            return repo.sha
        self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return None

    # -- API -----------------------------------------------------------------------------------------

    def _api(self, rest: str) -> None:
        parts = rest.split("/")
        if len(parts) < 2:
            self._error(404, "Repository not found", "RepoNotFound")
            return
        repo_id = urllib.parse.unquote("/".join(parts[:2]))
        kind = parts[2] if len(parts) > 2 else "revision"
        tail = parts[3:] if len(parts) > 2 else ["main"]
        repo = self._repo(repo_id, for_files=False)
        if repo is None:
            return
        if kind == "revision" and tail:
            sha = self._sha(repo, urllib.parse.unquote("/".join(tail)))
            if sha:
                self._send(200, {"Content-Type": "application/json"}, json.dumps(self._info(repo, sha)).encode())
        elif kind == "tree" and tail:
            sha = self._sha(repo, urllib.parse.unquote(tail[0]))
            if sha:
                self._tree(repo, urllib.parse.unquote("/".join(tail[1:])).strip("/"))
        else:
            self._error(404, "Not found", None)

    def _list_models(self) -> None:
        """``GET /api/models?filter=tag&sort=downloads&limit=N``: public repositories carrying every tag."""
        wanted = set(self._query.get("filter", []))
        limit = int(self._query.get("limit", ["1000"])[0])
        found = [r for r in self.hub.repos.values() if not r.private and wanted <= set(r.tags)]
        found.sort(key=lambda r: -r.downloads)
        body = [{"id": r.repo_id, "modelId": r.repo_id, "downloads": r.downloads, "tags": list(r.tags)} for r in found]
        self._send(200, {"Content-Type": "application/json"}, json.dumps(body[:limit]).encode())

    def _info(self, repo: FakeRepo, sha: str) -> dict[str, Any]:
        blobs = self._query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = []
        for f in repo.files.values():
            entry: dict[str, Any] = {"rfilename": f.path}
            if blobs and self.hub.listing in ("full", "sizes"):
                entry["size"] = f.size
            if blobs and self.hub.listing == "full":
                entry["blobId"] = f.blob_id
                if f.lfs:
                    entry["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": len(f.pointer)}
            siblings.append(entry)
        return {
            "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": sha,
            "lastModified": "2025-01-01T00:00:00.000Z",
            "createdAt": "2025-01-01T00:00:00.000Z",
            "private": repo.private,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": list(repo.tags),
            "library_name": "transformers",
            "siblings": siblings,
            "usedStorage": sum(f.size for f in repo.files.values()),
        }

    def _tree(self, repo: FakeRepo, under: str) -> None:
        recursive = self._query.get("recursive", ["false"])[0].lower() in ("1", "true")
        base = f"{under}/" if under else ""
        entries: dict[str, dict[str, Any]] = {}
        for f in repo.files.values():
            if not f.path.startswith(base):
                continue
            rel = f.path[len(base) :].split("/")
            for depth in range(1, len(rel)):
                directory = base + "/".join(rel[:depth])
                if recursive or depth == 1:
                    oid = hashlib.sha1(directory.encode()).hexdigest()
                    entries.setdefault(directory, {"type": "directory", "oid": oid, "size": 0, "path": directory})
            if recursive or len(rel) == 1:
                item: dict[str, Any] = {"type": "file", "oid": f.blob_id, "size": f.size, "path": f.path}
                if f.lfs:
                    item["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": len(f.pointer)}
                entries[f.path] = item
        if base and not entries:
            self._error(404, f"{under} does not exist on {repo.sha}", "EntryNotFound")
            return
        items = [entries[k] for k in sorted(entries)]
        start = int(self._query.get("cursor", ["0"])[0])
        page = items[start : start + self.hub.page_size]
        headers = {"Content-Type": "application/json"}
        if start + self.hub.page_size < len(items):
            query = {k: v[0] for k, v in self._query.items()}
            query["cursor"] = str(start + self.hub.page_size)
            next_url = f"{self.hub.endpoint}{urllib.parse.urlsplit(self.path).path}?{urllib.parse.urlencode(query)}"
            headers["Link"] = f'<{next_url}>; rel="next"'
        self._send(200, headers, json.dumps(page).encode())

    # -- files ---------------------------------------------------------------------------------------

    def _resolve(self, raw_path: str) -> None:
        head, _, rest = raw_path.lstrip("/").partition("/resolve/")
        repo_id = urllib.parse.unquote(head)
        revision, _, file_path = rest.partition("/")
        revision, file_path = urllib.parse.unquote(revision), urllib.parse.unquote(file_path)
        repo = self._repo(repo_id, for_files=True)
        if repo is None:
            return
        sha = self._sha(repo, revision)
        if sha is None:
            return
        f = repo.files.get(file_path)
        if f is None:
            self._error(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
            return
        self._record.file = f.path
        fault = self.hub._take_fault(f.path, ("status",), self.command)
        if fault is not None:
            extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            self._error(fault.status, "Injected failure", None, extra)
            return
        redirect = self.hub._take_fault(f.path, ("redirect",), self.command, self.headers.get("Range"))
        if redirect is not None:
            self._send(302, {"Location": redirect.location, "X-Repo-Commit": sha})
            return
        if f.lfs:
            location = f"{self.hub.cdn_endpoint}/lfs/{f.sha256}?X-Amz-Signature=fake&X-Amz-Expires=3600"
            self._send(
                302,
                {
                    "Location": location,
                    "X-Repo-Commit": sha,
                    "ETag": f'"{f.blob_id}"',
                    "X-Linked-Etag": f'"{f.sha256}"',
                    "X-Linked-Size": str(f.size),
                    "Content-Type": "text/plain; charset=utf-8",
                },
            )
            return
        self._content(f, {"X-Repo-Commit": sha, "ETag": f'"{f.blob_id}"'})

    def _cdn(self, path: str) -> None:
        if "Authorization" in self.headers and self.hub.cdn_rejects_authorization:
            self._error(400, "Only one auth mechanism allowed", None)
            return
        oid = path.rsplit("/", 1)[-1]
        f = self.hub._by_sha256.get(oid) if path.startswith("/lfs/") else None
        if f is None:
            self._error(404, "NoSuchKey", None)
            return
        self._record.file = f.path
        fault = self.hub._take_fault(f.path, ("cdn_status",), self.command, self.headers.get("Range"))
        if fault is not None:  # e.g. 403 for a signed URL that expired
            self._error(fault.status, "Injected CDN failure", None)
            return
        redirect = self.hub._take_fault(f.path, ("cdn_redirect",), self.command, self.headers.get("Range"))
        if redirect is not None:
            self._send(302, {"Location": redirect.location})
            return
        self._content(f, {"ETag": f'"{f.sha256}"'})

    def _content(self, f: FakeFile, headers: dict[str, str]) -> None:
        size = f.size
        start, end = 0, size
        status = 200
        asked = self.headers.get("Range")
        whole = self.hub._take_fault(f.path, ("whole",), self.command, asked) if asked else None
        wrong = self.hub._take_fault(f.path, ("wrong_range",), self.command, asked) if asked else None
        wanted = None if self.hub.ignore_range or whole else asked
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted[len("bytes=") :].partition("-")
            start = int(first) if first else 0
            end = min(size, int(last) + 1) if last else size
            if wrong is not None:
                start, end = 0, end - start
            if start >= size and size > 0:
                self._error(416, "Requested range not satisfiable", None, {"Content-Range": f"bytes */{size}"})
                return
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{size}"}
        corrupt = self.hub._take_fault(f.path, ("corrupt",), self.command) if self.command == "GET" else None
        drop = self.hub._take_fault(f.path, ("drop",), self.command, asked) if self.command == "GET" else None
        slow = self.hub._take_fault(f.path, ("slow",), self.command, asked) if self.command == "GET" else None
        self._record.status = status
        self.send_response(status)
        headers = self._kept({**headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"})
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if self.command == "HEAD":
            return
        flip_at = size // 2
        sent = 0
        rate = self.hub.connection_bytes_per_s
        chunk_size = 64 * 1024 if slow else CHUNK
        began = time.monotonic()
        for chunk in f.content.chunks(start, end, chunk_size):
            if corrupt is not None and start + sent <= flip_at < start + sent + len(chunk):
                data = bytearray(chunk)
                data[flip_at - start - sent] ^= 0xFF
                chunk = memoryview(bytes(data))
            if drop is not None and sent + len(chunk) > drop.after_bytes:
                self.wfile.write(chunk[: max(0, drop.after_bytes - sent)])
                self.hub._count_sent(f.path, max(0, drop.after_bytes - sent))
                self._drop()
                return
            self.wfile.write(chunk)
            sent += len(chunk)
            self.hub._count_sent(f.path, len(chunk))
            if slow is not None and sent > slow.after_bytes:
                time.sleep(len(chunk) / slow.bytes_per_s)
            if rate:  # paced against the connection's start, so sleep granularity does not slow it further
                ahead = began + sent / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        self._record.finished = time.monotonic()

    def _drop(self) -> None:
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


def use_fake_hub(monkeypatch, tmp_path, hub: FakeHub) -> FakeHub:
    """Point huggingface_hub at ``hub`` with a cache of the test's own and no token, offline flag or region.

    huggingface_hub reads HF_HOME once, at import (constants.py), and an earlier test may have imported it:
    without the HF_HUB_CACHE patch the fake Hub's config.json files would land in the real ~/.cache/huggingface.
    """
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    return hub
