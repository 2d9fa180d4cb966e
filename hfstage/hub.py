"""A small Hugging Face Hub client: resolve a revision to a commit and its files, open a file's bytes.

Standard library only. The token is sent only to the Hub's own origin: a redirect to another origin (the
LFS/Xet CDN, with a signed URL) is followed without the ``Authorization`` header. Only http and https URLs
are opened (the endpoint and every redirect), and a redirect from https to http is refused: the opener has
no handler for any other scheme. Error messages are written for a person reading a failed deployment and
never contain the token.
"""

from __future__ import annotations

import fnmatch
import hashlib
import http.client
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import safejson

DEFAULT_ENDPOINT = "https://huggingface.co"
USER_AGENT = "hfstage/1"
MAX_REDIRECTS = 10
# Error bodies are read only to be discarded; never read much of them.
_ERROR_BODY_LIMIT = 64 * 1024
TOKEN_HINT = "give a token with access through hf_token_secret_arn"
# A listing without hashes (a mirror that does not answer ``blobs=true``) is completed by one HEAD per file,
# this many at a time.
HEADS_IN_FLIGHT = 8


class HubError(Exception):
    """A Hub request failed. ``str(error)`` is user-facing, under 1 KB, and never contains the token."""

    retryable = False


class RepoNotFound(HubError):
    pass


class RevisionNotFound(HubError):
    pass


class GatedRepo(HubError):
    pass


class EntryNotFound(HubError):
    """A file listed in the revision is not served by the Hub."""


class HubUnavailable(HubError):
    """A transient failure (connection error, timeout, 5xx, 429): worth retrying after ``retry_after`` seconds."""

    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UnsafeRedirect(HubError):
    """A URL the client will not open: another scheme than http(s), https downgraded to http, credentials in it."""


class RangeIgnored(HubUnavailable):
    """The server answered a ranged request with the whole file: restart the file from byte 0."""


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    blob_id: str
    sha256: str | None = None  # LFS files only: the SHA-256 of the content

    @property
    def is_lfs(self) -> bool:
        return self.sha256 is not None


@dataclass(frozen=True)
class RepoRevision:
    repo_id: str
    sha: str
    files: tuple[HubFile, ...]


def default_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def select_files(files: Iterable[HubFile], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[HubFile]:
    """Files whose path matches any ``include`` pattern (all when none) and no ``exclude`` pattern.

    Patterns are shell globs matched against the whole path with ``fnmatch`` (so ``*`` also crosses
    ``/``: ``original/*`` excludes everything below ``original/``).
    """
    chosen = []
    for f in files:
        if include and not any(fnmatch.fnmatchcase(f.path, p) for p in include):
            continue
        if any(fnmatch.fnmatchcase(f.path, p) for p in exclude):
            continue
        chosen.append(f)
    return chosen


def _origin(url: str) -> tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme, 0)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Hand 3xx answers back to us: we follow redirects ourselves to control the headers sent."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


ALLOWED_SCHEMES = ("http", "https")


def http_only_opener() -> urllib.request.OpenerDirector:
    """An opener that can open http and https URLs and nothing else, and follows no redirect itself.

    ``build_opener`` also adds FTPHandler, FileHandler and DataHandler (Python docs, urllib.request.build_opener),
    so a redirect to ``file:///etc/passwd`` or ``data:,...`` would be opened; here no handler exists for them
    and UnknownHandler refuses them (``_request`` checks every URL's scheme before that, too). Proxies come
    from the environment as before (HTTPS_PROXY in a VPC), for http and https only.
    """
    opener = urllib.request.OpenerDirector()
    proxies = {k: v for k, v in urllib.request.getproxies().items() if k in ALLOWED_SCHEMES}
    for handler in (
        urllib.request.ProxyHandler(proxies),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        _NoRedirect(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


def _refusal_prefix(previous: str | None) -> str:
    return "a redirect to" if previous else "the Hub endpoint is"


def _refusal(request: urllib.request.Request, previous: str | None) -> str | None:
    """Why ``request`` must not be opened (reached from a URL of scheme ``previous``, None for the first)."""
    # ``request.type`` is the scheme urllib dispatches on (``<type>_open``), after its own parsing of the URL.
    scheme = request.type.lower()
    what = _refusal_prefix(previous)
    if scheme not in ALLOWED_SCHEMES:
        return f"{what} a {scheme[:20]!r} URL; only http and https are followed"
    if previous == "https" and scheme == "http":
        return f"{what} an http URL from https; a downgrade is never followed"
    if "@" in request.host:  # user info: the host urllib connects to and the origin the token rule sees could differ
        return f"{what} a URL with user info in its host; refused"
    return None


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class HubClient:
    def __init__(self, endpoint: str | None = None, token: str | None = None, timeout: float = 30.0) -> None:
        self.endpoint = (endpoint or default_endpoint()).rstrip("/")
        self._token = token or None
        self.timeout = timeout
        self._opener = http_only_opener()
        self._hub_origin = _origin(self.endpoint)

    def __repr__(self) -> str:  # never shows the token
        return f"HubClient(endpoint={self.endpoint!r}, token={'set' if self._token else 'none'})"

    @property
    def has_token(self) -> bool:
        return self._token is not None

    # -- requests ---------------------------------------------------------------------------------------

    def _headers_for(self, url: str, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if self._token and _origin(url) == self._hub_origin:
            headers["Authorization"] = f"Bearer {self._token}"
        headers.update(extra or {})
        return headers

    def _request(
        self, url: str, what: str, repo_id: str, extra: dict[str, str] | None = None, method: str = "GET"
    ) -> Any:
        """GET ``url``, following redirects (http and https only, never https to http); the open 2xx response,
        or a HubError. A HEAD stops at a redirect off the Hub's origin and returns that answer (its headers)."""
        previous: str | None = None  # the scheme of the URL that redirected here
        for _ in range(MAX_REDIRECTS + 1):
            try:
                request = urllib.request.Request(url, headers=self._headers_for(url, extra), method=method)
            except ValueError:  # "unknown url type": no scheme at all
                request = None
            refusal = (
                _refusal(request, previous) if request is not None else f"{_refusal_prefix(previous)} an unusable URL"
            )
            if refusal is not None:
                raise UnsafeRedirect(f"{what}: {refusal}")
            try:
                return self._opener.open(request, timeout=self.timeout)
            except urllib.error.HTTPError as error:
                try:
                    if 300 <= error.code < 400 and error.headers.get("Location"):
                        target = urllib.parse.urljoin(url, error.headers["Location"])
                        if method == "HEAD" and _origin(target) != self._hub_origin:
                            # The file's metadata is on the redirect to the CDN; it is not followed
                            # (huggingface_hub utils/_http.py _httpx2_follow_hub_redirects_with_backoff).
                            return error
                        previous = request.type.lower()
                        url = target
                        continue
                    error.read(_ERROR_BODY_LIMIT)
                except OSError:
                    pass
                finally:
                    error.close()
                raise self._error_for(error.code, error.headers, what, repo_id) from None
            except http.client.InvalidURL:  # a control character or a space in the URL or its host
                raise UnsafeRedirect(f"{what}: {_refusal_prefix(previous)} an unusable URL") from None
            except (OSError, http.client.HTTPException) as error:
                # URLError is an OSError; its reason may name the host but never carries headers.
                reason = getattr(error, "reason", None) or error
                raise HubUnavailable(f"{what}: connection to the Hub failed ({type(reason).__name__})") from None
        raise HubError(f"{what}: more than {MAX_REDIRECTS} redirects")

    def _error_for(self, status: int, headers: Any, what: str, repo_id: str) -> HubError:
        code = (headers.get("X-Error-Code") or "") if headers is not None else ""
        if status == 429 or status >= 500:
            return HubUnavailable(f"{what}: the Hub answered HTTP {status}", _retry_after(headers))
        if code == "GatedRepo" or status == 403:
            if self._token:
                return GatedRepo(
                    f"{repo_id} is gated or private and the given token has no access to it (HTTP {status}): "
                    f"accept the model's conditions on the Hub with that account, or {TOKEN_HINT}"
                )
            return GatedRepo(f"{repo_id} is gated or private: {TOKEN_HINT}")
        if code == "RevisionNotFound":
            return RevisionNotFound(f"{what}: no such revision (branch, tag or commit) in {repo_id}")
        if code == "EntryNotFound":
            return EntryNotFound(f"{what}: the Hub has no such file in {repo_id}")
        if status == 401 and not self._token:
            # The Hub answers 401 both for a repository that does not exist and for a private one.
            return RepoNotFound(
                f"{repo_id} was not found on {self.endpoint}, or it is gated or private: "
                f"check the repository id, or {TOKEN_HINT}"
            )
        if status == 401:
            return GatedRepo(f"{repo_id}: the Hub rejected the token (HTTP 401): {TOKEN_HINT}")
        if status == 404 or code == "RepoNotFound":
            return RepoNotFound(f"{repo_id} was not found on {self.endpoint}: check the repository id")
        return HubError(f"{what}: the Hub answered HTTP {status}")

    # -- API --------------------------------------------------------------------------------------------

    def revision_info(self, repo_id: str, revision: str) -> RepoRevision:
        """The commit SHA a branch, tag or SHA resolves to, and every file of that commit with its hashes."""
        url = (
            f"{self.endpoint}/api/models/{urllib.parse.quote(repo_id, safe='/')}"
            f"/revision/{urllib.parse.quote(revision, safe='')}?blobs=true"
        )
        what = f"resolving {repo_id}@{revision}"
        response = self._request(url, what, repo_id, {"Accept": "application/json"})
        try:
            body = safejson.loads(response.read(safejson.MAX_SIZE + 1), source=f"{what}: the Hub's answer")
        except safejson.JsonError as error:  # not JSON, too deep or too large: names the lookup
            raise HubUnavailable(str(error)) from None
        except OSError as error:
            raise HubUnavailable(f"{what}: unreadable answer from the Hub ({type(error).__name__})") from None
        finally:
            response.close()
        sha, files, bare = parse_listing(repo_id, body)
        if bare:  # a mirror that answers less: each file's size and hash from its own HEAD
            with ThreadPoolExecutor(HEADS_IN_FLIGHT, thread_name_prefix="head") as pool:
                files += pool.map(lambda path: self.file_metadata(repo_id, sha, path), bare)
        return RepoRevision(repo_id=repo_id, sha=sha, files=tuple(sorted(files, key=lambda f: f.path)))

    def file_metadata(self, repo_id: str, sha: str, path: str) -> HubFile:
        """``path`` at commit ``sha`` as a HEAD of its resolve URL describes it (size, blob id, SHA-256)."""
        response = self._request(
            self.file_url(repo_id, sha, path), f"reading the metadata of {path}", repo_id, method="HEAD"
        )
        try:
            return file_from_headers(repo_id, sha, path, response.headers, redirected=300 <= response.status < 400)
        finally:
            response.close()

    def file_url(self, repo_id: str, sha: str, path: str) -> str:
        return (
            f"{self.endpoint}/{urllib.parse.quote(repo_id, safe='/')}/resolve/"
            f"{urllib.parse.quote(sha, safe='')}/{urllib.parse.quote(path, safe='/')}"
        )

    def open_range(self, repo_id: str, path: str, url: str, start: int, end: int) -> Any:
        """An open response for bytes ``start`` to ``end - 1`` of ``path``, requested from ``url``.

        Pass the resolve URL for the first range: redirects are followed (to the CDN for LFS files), and
        ``response.url`` is the URL that answered, to pass for the file's later ranges, so each costs one
        request. ``response.status`` is 206 with a ``Content-Range`` when the range was honoured, 200 (the
        whole file) when the server ignored it; a server may do either (RFC 9110, section 14.2).
        """
        return self._request(url, f"downloading {path}", repo_id, {"Range": f"bytes={start}-{end - 1}"})

    def open_file(self, repo_id: str, sha: str, path: str, start: int = 0) -> Any:
        """An open HTTP response streaming ``path`` at commit ``sha`` from byte ``start`` (``.read``, ``.close``).

        Raises RangeIgnored when ``start > 0`` and the server sent the whole file instead of a 206.
        """
        url = self.file_url(repo_id, sha, path)
        extra = {"Range": f"bytes={start}-"} if start > 0 else None
        response = self._request(url, f"downloading {path}", repo_id, extra)
        if start > 0 and response.status != 206:
            response.close()
            raise RangeIgnored(f"downloading {path}: the server ignored the Range request (HTTP {response.status})")
        return response


def parse_revision(repo_id: str, body: Any) -> RepoRevision:
    """``GET /api/models/{repo}/revision/{rev}?blobs=true`` as a RepoRevision; HubError when malformed or when a
    file comes without its hashes (``HubClient.revision_info`` reads those with a HEAD)."""
    sha, files, bare = parse_listing(repo_id, body)
    if bare:
        raise HubError(f"resolving {repo_id}: the Hub's answer lacks file sizes or hashes")
    return RepoRevision(repo_id=repo_id, sha=sha, files=tuple(sorted(files, key=lambda f: f.path)))


def parse_listing(repo_id: str, body: Any) -> tuple[str, list[HubFile], list[str]]:
    """(commit SHA, the files listed with their hashes, the paths listed without any: no ``blobId`` and no
    ``lfs``, as from a mirror that ignores ``blobs=true``); HubError when malformed."""
    try:
        sha = body["sha"]
        files, bare = [], []
        for sibling in body.get("siblings") or []:
            if sibling.get("blobId") is None and not sibling.get("lfs"):
                if not isinstance(sibling["rfilename"], str):
                    raise ValueError("malformed sibling")
                bare.append(sibling["rfilename"])
                continue
            lfs = sibling.get("lfs") or None
            path, size = sibling["rfilename"], int(lfs["size"] if lfs else sibling["size"])
            if not isinstance(path, str) or size < 0:  # a name is a string (hfstage.names judges it), a size >= 0
                raise ValueError("malformed sibling")
            files.append(
                HubFile(
                    path=path,
                    size=size,
                    blob_id=str(sibling["blobId"]),
                    sha256=str(lfs.get("sha256") or lfs["oid"]) if lfs else None,
                )
            )
    except (KeyError, TypeError, ValueError, AttributeError):
        raise HubError(f"resolving {repo_id}: the Hub's answer lacks file sizes or hashes") from None
    if not _is_hex(sha, 40):
        raise HubError(f"resolving {repo_id}: the Hub's answer has no commit SHA")
    return sha, files, bare


def _is_hex(value: Any, length: int) -> bool:
    return isinstance(value, str) and len(value) == length and all(c in "0123456789abcdef" for c in value)


def _etag(value: str | None) -> str | None:
    """An ETag without its quotes or weak marker, as huggingface_hub file_download.py _normalize_etag reads it."""
    return value.removeprefix("W/").strip('"') if value else None


def lfs_pointer_blob_id(sha256: str, size: int) -> str:
    """The git blob id of an LFS file's pointer, the ``blobId`` the Hub lists for it: the pointer is
    ``version``, ``oid sha256:<hex>``, ``size <n>``, one per line (git-lfs docs/spec.md, "The pointer")."""
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    return hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()


def file_from_headers(repo_id: str, sha: str, path: str, headers: Any, *, redirected: bool) -> HubFile:
    """A file from the HEAD of ``/{repo}/resolve/{sha}/{path}``, read as huggingface_hub's get_hf_file_metadata
    reads it (file_download.py): the etag is ``X-Linked-Etag`` or ``ETag``, the size ``X-Linked-Size`` or (not
    on a redirect) ``Content-Length``, the commit ``X-Repo-Commit``. "An object's ETag is its git-sha1 if stored
    in git, or its sha256 if stored in git-lfs" (hf_hub_download's docstring), so a 64-hex etag is an LFS file's
    SHA-256 and a 40-hex one a small file's git blob SHA-1. HubError naming what is missing otherwise."""
    where = f"resolving {repo_id}: the HEAD of {path} at {sha[:12]}"
    commit = headers.get("X-Repo-Commit")
    if commit != sha:
        found = f"X-Repo-Commit {commit[:64]!r}" if commit else "no X-Repo-Commit"
        raise HubError(f"{where} answered {found}; the listing said {sha}: the mirror does not serve that commit")
    etag = _etag(headers.get("X-Linked-Etag") or headers.get("ETag"))
    size_text = headers.get("X-Linked-Size") or (None if redirected else headers.get("Content-Length"))
    try:
        size = int(size_text) if size_text is not None else -1
    except ValueError:
        size = -1
    problems = []
    if not (_is_hex(etag, 64) or _is_hex(etag, 40)):
        problems.append("no X-Linked-Etag (an LFS file's SHA-256) or ETag (a file's git blob SHA-1)")
    if size < 0:
        problems.append("no X-Linked-Size or Content-Length")
    if problems:
        raise HubError(
            f"{where} has {' and '.join(problems)}, and the listing has no blobId or lfs for it either: the file "
            "cannot be verified; use a mirror that passes the Hub's listing (?blobs=true) or these headers through"
        )
    if _is_hex(etag, 64):
        return HubFile(path=path, size=size, blob_id=lfs_pointer_blob_id(etag, size), sha256=etag)
    return HubFile(path=path, size=size, blob_id=etag)
