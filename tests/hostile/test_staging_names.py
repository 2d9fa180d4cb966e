"""Hostile Hub answers to the staging worker: file names that are unsafe as S3 keys (and as the paths SageMaker
downloads them to) or that take a name the worker owns, and redirects to anything but http(s).

Every refusal happens before the worker makes a single S3 call: the tests count the calls of the worker's own
client (a botocore event hook) against a real moto server, and read the fake Hub over real HTTP. Generated
inputs are bounded (``max_examples``) so the module stays within a few seconds on 2 cores; ``TALLY`` counts the
hostile inputs tried and refused (printed at the end of the module with ``pytest -s``).
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import ssl
import threading
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hfstage.base import EXIT_HUB, EXIT_OK
from hfstage.hub import HubClient, HubError, UnsafeRedirect
from hfstage.manifest import MANIFEST_NAME, revision_prefix
from hfstage.names import MAX_SEGMENT_BYTES, OWNED_NAMES, path_problem, unsafe_paths
from hfstage.transfer import CHECKPOINT_DIR, MAX_KEY_BYTES
from tests.fakes.fake_hub import TEST_TOKEN, FakeHub, Synthetic
from tests.fakes.fixtures import S3Env, fake_hub, s3, worker_argv  # noqa: F401
from tests.hostile.tally import Tally, report_fixture

MiB = 1024 * 1024
PREFIX = revision_prefix("models/", "Org/Hostile", "a" * 40)
TALLY = Tally()  # "<area> tried" / "<area> refused" (or "passed" for safe inputs)
BOUNDED = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


_report_tally = report_fixture(TALLY)


def tally(area: str, refused: bool) -> None:
    TALLY.record(area, refused)


# -- names: generated ----------------------------------------------------------------------------------------

# A safe segment: printable characters (any script, the ASCII space too), no slash or backslash, not . or ..
SEGMENT = st.text(
    st.characters(codec="utf-8", exclude_categories=("C", "Z"), exclude_characters="/\\", include_characters=" "),
    min_size=1,
    max_size=30,
).filter(lambda s: s not in (".", ".."))
SAFE = st.lists(SEGMENT, min_size=1, max_size=4).map("/".join).filter(lambda p: path_problem(p, PREFIX) is None)
# Non-printable characters by Unicode category: control (NUL, \n, \x7f, C1), format (bidi overrides, zero
# width), private use, separators other than the ASCII space (U+2028, NBSP), and lone surrogates.
NON_PRINTABLE = st.characters(categories=("Cc", "Cf", "Co", "Zl", "Zp", "Zs", "Cs"), exclude_characters=" ")


def _insert(text: str, at: int, piece: str) -> str:
    at %= len(text) + 1
    return text[:at] + piece + text[at:]


def _with_segment(path: str, at: int, segment: str) -> str:
    parts = path.split("/")
    parts.insert(at % (len(parts) + 1), segment)
    return "/".join(parts)


# Each kind of defect and the reasons it may be given (an empty segment first or last is an absolute path or a
# trailing slash; a surrogate is non-printable and not UTF-8 at once).
DEFECTS = {
    "dot": ("a '.' or '..' segment",),
    "dotdot": ("a '.' or '..' segment",),
    "empty segment": ("an empty folder name (//)", "an absolute path", "a trailing slash"),
    "absolute": ("an absolute path",),
    "trailing slash": ("a trailing slash",),
    "backslash": ("a backslash (a folder separator on Windows)",),
    "non-printable": ("a control or non-printable character (U+", "not valid Unicode (a lone surrogate)"),
    "owned": ("the worker's manifest", "the worker's resume area", "inside the worker's"),
    "long segment": (f"a file or folder name over {MAX_SEGMENT_BYTES} bytes",),
    "long key": ("its S3 key would be",),
    "empty": ("an empty name",),
}


@st.composite
def unsafe_names(draw) -> tuple[str, str]:
    """(kind of defect, a safe name with that one defect)."""
    base, at = draw(SAFE), draw(st.integers(0, 200))
    kind = draw(st.sampled_from(sorted(DEFECTS)))
    if kind == "dot":
        return kind, _with_segment(base, at, ".")
    if kind == "dotdot":
        return kind, _with_segment(base, at, "..")
    if kind == "empty segment":
        return kind, _with_segment(base, at, "")
    if kind == "absolute":
        return kind, "/" + base
    if kind == "trailing slash":
        return kind, base + "/"
    if kind == "backslash":
        return kind, _insert(base, at, draw(st.sampled_from(["\\", "..\\", "\\..\\"])))
    if kind == "non-printable":
        return kind, _insert(base, at, draw(NON_PRINTABLE))
    if kind == "owned":
        owned = draw(st.sampled_from(sorted(OWNED_NAMES)))
        return kind, draw(st.sampled_from([owned, f"{owned}/{base}"]))
    if kind == "long segment":
        return kind, _with_segment(base, at, "x" * (MAX_SEGMENT_BYTES + 1 + draw(st.integers(0, 50))))
    if kind == "long key":  # every segment fits; the whole key (prefix + path) does not
        return kind, "/".join(["k" * 200] * (MAX_KEY_BYTES // 200 + 1)) + "/" + base
    return kind, ""


@BOUNDED
@given(unsafe_names())
def test_every_generated_unsafe_name_is_refused(case: tuple[str, str]) -> None:
    kind, name = case
    reason = path_problem(name, PREFIX)
    tally("names", reason is not None)
    assert reason is not None and reason.startswith(DEFECTS[kind]), (kind, name, reason)


@BOUNDED
@given(SAFE)
def test_every_generated_safe_name_passes(name: str) -> None:
    reason = path_problem(name, PREFIX)
    TALLY["safe names passed"] += reason is None
    assert reason is None, (name, reason)


@BOUNDED
@given(st.lists(SAFE, min_size=1, max_size=6, unique=True), st.data())
def test_a_name_listed_twice_or_both_file_and_folder_is_refused(names: list[str], data) -> None:
    """Two files on one key would race (the manifest listing both); a file ``a`` beside ``a/b`` cannot be
    downloaded into one folder: the set of names is refused, not just each name."""
    assert unsafe_paths(names, PREFIX) == []
    twice = data.draw(st.sampled_from(names))
    folder = data.draw(st.sampled_from(names))
    for hostile, reason in (
        ([*names, twice], "listed twice"),
        ([*names, f"{folder}/inner"], "both a file and the folder of other files"),
    ):
        found = unsafe_paths(hostile, PREFIX)
        tally("name sets", bool(found))
        assert [r for _, r in found] == [reason]


def test_names_that_differ_only_in_case_and_ordinary_odd_names_are_fine() -> None:
    names = ["Config.json", "config.json", "CONFIG.JSON", "my model/weights v2.bin", "...", ".hidden", "a..b/c.d"]
    names += ["日本語/モデル.safetensors", "-dash", "~tilde", "per%cent", "q?u#e&r=y", ".hf-model-manifest.json.bak"]
    names += [".HF-MODEL-MANIFEST.JSON", ".hfstage-resume-not", "x" * MAX_SEGMENT_BYTES]
    assert unsafe_paths(names, PREFIX) == []


# -- names: through the worker, against the fake Hub and moto's S3 ------------------------------------------

HOSTILE = {  # a name and the reason the refusal gives
    "dotdot": ("../escape.json", "a '.' or '..' segment"),
    "dotdot inside": ("sub/../../escape.json", "a '.' or '..' segment"),
    "dot": ("./config.json", "a '.' or '..' segment"),
    "absolute": ("/etc/cron.d/job", "an absolute path"),
    "empty": ("", "an empty name"),
    "double slash": ("sub//x.json", "an empty folder name (//)"),
    "trailing slash": ("sub/", "a trailing slash"),
    "backslash": ("..\\..\\escape.json", "a backslash (a folder separator on Windows)"),
    "newline": ("a\nevent=done path=x.json", "a control or non-printable character (U+000A)"),
    "NUL": ("a\x00.json", "a control or non-printable character (U+0000)"),
    "DEL": ("a\x7f.json", "a control or non-printable character (U+007F)"),
    "bidi override": ("exe.\u202enosj", "a control or non-printable character (U+202E)"),
    "line separator": ("a\u2028b.json", "a control or non-printable character (U+2028)"),
    "lone surrogate": ("a\ud800.json", "not valid Unicode (a lone surrogate)"),
    "long segment": ("x" * 256 + ".json", "a file or folder name over 255 bytes"),
    "long key": ("/".join(["k" * 250] * 4) + "/w.json", "its S3 key would be 10"),  # 10xx: the prefix
    "the manifest": (MANIFEST_NAME, "the worker's manifest"),
    "under the manifest": (MANIFEST_NAME + "/x.json", "inside the worker's manifest"),
    "the resume area": (CHECKPOINT_DIR.rstrip("/"), "the worker's resume area"),
    "a forged checkpoint": (CHECKPOINT_DIR + "0123456789abcdef/0123456789abcdef/00001-abc-00", "inside the worker's"),
    "file and folder": ("config.json/inner.json", "both a file and the folder of other files"),
}


@pytest.fixture
def run_worker(s3: S3Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # noqa: F811
    """Runs the worker in this process; (exit code, output, failure message, S3 calls it made)."""
    from hfstage.worker import main

    def run(repo: str, *extra: str) -> tuple[int, str, str, Counter[str]]:
        client, counter = s3.worker_client()
        message = tmp_path / "message"
        message.unlink(missing_ok=True)
        capsys.readouterr()
        code = main(worker_argv(repo, s3.bucket, message, tmp_path / "absent.json", *extra), s3_client=client)
        text = message.read_text(encoding="utf-8") if message.exists() else ""
        return code, capsys.readouterr().out, text, counter.calls

    return run


def test_every_hostile_name_refuses_the_run_before_any_s3_call(run_worker, s3: S3Env, fake_hub: FakeHub) -> None:  # noqa: F811
    """One repository per hostile name, beside ordinary files: exit 3, a one-line reason naming the file (its
    control characters escaped), and not one S3 call, so nothing is written (and nothing is read either)."""
    for n, (kind, (name, reason)) in enumerate(HOSTILE.items()):
        repo = f"Org/Hostile{n}"
        fake_hub.add_repo(repo, {"config.json": b"{}", "model.safetensors": b"w" * 100, name: b"hostile"})
        code, out, message, calls = run_worker(repo)
        refused = code == EXIT_HUB and not calls
        tally("names through the worker", refused)
        assert refused, (kind, code, calls, out[-2000:])
        assert message.startswith(f"staging {repo}@main failed: refused before any upload: 1 of the 3 files"), kind
        shown = "config.json" if kind == "file and folder" else name  # the file that is also a folder
        assert repr(shown)[:40] in message and f" ({reason}" in message, (kind, message)
        assert "\n" not in message.rstrip("\n"), kind
        assert len(message.encode()) <= 1000, kind
    assert s3.list_keys() == [] and s3.open_uploads() == []


def test_a_repository_file_named_like_the_manifest_never_reaches_the_manifest_key(
    run_worker,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
) -> None:
    """Before the fix the file was uploaded onto the manifest key and, a later file failing, stayed there as a
    manifest that says the revision is staged: a preflight or rerun would trust it."""
    forged = b'{"schema_version": 1, "repo_id": "Org/Forged", "files": [], "total_bytes": 0}'
    repo = fake_hub.add_repo("Org/Forged", {MANIFEST_NAME: forged, "model.safetensors": Synthetic(MiB, seed=3)})
    fake_hub.fail("model.safetensors", status=404, times=None)
    code, _, message, calls = run_worker("Org/Forged")
    assert code == EXIT_HUB and not calls
    assert f"'{MANIFEST_NAME}' (the worker's manifest)" in message
    assert revision_prefix("models/", "Org/Forged", repo.sha) + MANIFEST_NAME not in s3.list_keys()


def test_several_hostile_names_are_named_within_the_message_limit(run_worker, fake_hub: FakeHub) -> None:  # noqa: F811
    files = {"config.json": b"{}", **{f"../{'y' * 300}{i}": b"x" for i in range(40)}, "a\x00b": b"x"}
    fake_hub.add_repo("Org/Many", files)
    code, _, message, calls = run_worker("Org/Many")
    assert code == EXIT_HUB and not calls
    assert "refused before any upload: 41 of the 42 files to stage have names" in message
    assert " more; leave them out with exclude patterns, or stage another revision" in message
    assert len(message.encode()) <= 1000


def test_an_unsafe_name_left_out_by_exclude_does_not_refuse_the_run(
    run_worker,
    s3: S3Env,  # noqa: F811
    fake_hub: FakeHub,  # noqa: F811
) -> None:
    """The rule: only the files the run would stage are judged; an excluded file is never written, so its name
    is harmless, and excluding it is the way out the refusal suggests."""
    repo = fake_hub.add_repo("Org/Excluded", {"config.json": b"{}", "../escape.json": b"x", MANIFEST_NAME: b"{}"})
    code, out, _, _ = run_worker("Org/Excluded", "--exclude=../*", f"--exclude={MANIFEST_NAME}")
    assert code == EXIT_OK, out
    prefix = revision_prefix("models/", "Org/Excluded", repo.sha)
    assert s3.list_keys() == [prefix + MANIFEST_NAME, prefix + "config.json"]
    assert b'"path": "config.json"' in s3.body(prefix + MANIFEST_NAME)
    assert b"escape" not in s3.body(prefix + MANIFEST_NAME)


def test_a_hub_answer_with_a_name_that_is_not_a_string_is_refused(fake_hub: FakeHub) -> None:  # noqa: F811
    from hfstage.hub import parse_revision

    for hostile in ({"rfilename": ["../x"], "size": 1, "blobId": "b"}, {"rfilename": "a", "size": -1, "blobId": "b"}):
        with pytest.raises(HubError, match="lacks file sizes or hashes"):
            parse_revision("Org/M", {"sha": "a" * 40, "siblings": [hostile]})
        tally("malformed listings", True)


# -- redirects ------------------------------------------------------------------------------------------------

REDIRECTS = [
    "file:///etc/hostname",
    "file:/etc/passwd",
    "FILE:///etc/passwd",
    " file:///etc/passwd",
    "data:,hello",
    "data:application/octet-stream;base64,aGVsbG8=",
    "ftp://127.0.0.1/x",
    "gopher://127.0.0.1/x",
    "javascript:alert(1)",
    "jar:file:///x!/y",
    "http://127.0.0.1:9/a b",
    "http://user:pw@127.0.0.1:9/x",
]


@pytest.fixture
def hostile_hub(fake_hub: FakeHub):  # noqa: F811
    fake_hub.add_repo("Org/Redirect", {"config.json": b"{}", "model.safetensors": Synthetic(11 * MiB, seed=9)})
    return fake_hub


@pytest.mark.parametrize("location", REDIRECTS)
def test_a_redirect_to_anything_but_http_is_refused_with_a_clear_error(hostile_hub: FakeHub, location: str) -> None:
    sha = hostile_hub.repos["Org/Redirect"].sha
    hostile_hub.redirect("config.json", location)
    client = HubClient(hostile_hub.endpoint, token=TEST_TOKEN)
    with pytest.raises(UnsafeRedirect) as refused:
        client.open_file("Org/Redirect", sha, "config.json").close()
    tally("redirects", True)
    text = str(refused.value)
    assert text.startswith("downloading config.json: a redirect to ") and len(text) < 300
    assert not refused.value.retryable and "etc" not in text and "hello" not in text
    assert [r.status for r in hostile_hub.requests_for("config.json")] == [302]  # nothing else was fetched


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scheme=st.from_regex(r"[a-z][a-z0-9+.-]{0,12}", fullmatch=True).filter(lambda s: s not in ("http", "https")))
def test_a_redirect_to_any_other_scheme_is_refused(hostile_hub: FakeHub, scheme: str) -> None:
    sha = hostile_hub.repos["Org/Redirect"].sha
    hostile_hub.clear_faults()
    hostile_hub.redirect("config.json", f"{scheme}://127.0.0.1/etc/passwd", times=1)
    with pytest.raises(UnsafeRedirect, match=r"a redirect to a '.*' URL; only http and https are followed"):
        HubClient(hostile_hub.endpoint).open_file("Org/Redirect", sha, "config.json")
    tally("redirect schemes", True)


@pytest.mark.parametrize("endpoint", ["file:///etc", "data:,x", "ftp://127.0.0.1", "127.0.0.1:8080"])
def test_a_hub_endpoint_that_is_not_http_is_refused_before_any_request(endpoint: str) -> None:
    """HF_ENDPOINT builds the first URL: it is checked like every redirect."""
    with pytest.raises(UnsafeRedirect, match=r"^resolving Org/M@main: the Hub endpoint is a"):
        HubClient(endpoint).revision_info("Org/M", "main")
    tally("endpoints", True)


def test_the_opener_has_no_handler_for_file_data_or_ftp() -> None:
    """``build_opener`` would add FileHandler, DataHandler and FTPHandler (Python docs, urllib.request.build_opener)."""
    import urllib.error
    import urllib.request

    opener = HubClient("http://127.0.0.1:9")._opener
    kinds = {type(h) for h in opener.handlers}
    assert not kinds & {urllib.request.FileHandler, urllib.request.DataHandler, urllib.request.FTPHandler}
    for url in ("file:///etc/hostname", "data:,hello", "ftp://127.0.0.1/x"):
        with pytest.raises(urllib.error.URLError, match="unknown url type"):
            opener.open(url, timeout=1)


@pytest.mark.parametrize("who", ["the CDN", "the Hub, asked again"])
def test_a_redirect_to_file_in_a_later_range_stops_the_run_without_writing_the_file(
    run_worker,
    s3: S3Env,  # noqa: F811
    hostile_hub: FakeHub,
    who: str,
) -> None:
    """The first range follows the Hub's redirect to the CDN. A later range is redirected to ``file:`` by the CDN,
    or the CDN refuses it (as an expired signed URL) and the Hub, asked again, redirects it to ``file:``: the run
    stops at once with exit 3 (no retry, no second resolve: a refused scheme is no expired URL), and the upload
    is aborted."""
    second = f"bytes={5 * MiB}-{10 * MiB - 1}"
    if who == "the CDN":
        hostile_hub.redirect("model.safetensors", "file:///etc/passwd", cdn=True, range=second)
    else:
        hostile_hub.cdn_status("model.safetensors", 403, range=second)
        hostile_hub.redirect("model.safetensors", "file:///etc/passwd", range=second)
    code, out, message, calls = run_worker("Org/Redirect", "--max-attempts=3")
    assert code == EXIT_HUB, out
    assert "model.safetensors: a redirect to a 'file' URL; only http and https are followed" in message
    assert ("event=resolve_again" in out) is (who != "the CDN"), out
    assert "event=retry" not in out and calls["CompleteMultipartUpload"] == 0
    assert not any(k.endswith("model.safetensors") for k in s3.list_keys()) and s3.open_uploads() == []
    tally("redirects through the worker", True)


# -- https: a local TLS server, trusted through SSL_CERT_FILE ------------------------------------------------


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography import x509  # a dependency of moto, pinned in requirements-dev.txt
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


@pytest.fixture
def tls_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_hub: FakeHub):  # noqa: F811
    """An https origin that answers /to-http with a redirect to the (http) fake Hub, /to-https with one to itself
    and /ok with 200; the client trusts its certificate through SSL_CERT_FILE (read by OpenSSL's default paths)."""
    cert_file, key_file = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    seen: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
            targets = {"/to-http": f"{fake_hub.endpoint}/ok", "/to-https": "/ok"}
            status = 302 if self.path in targets else 200
            self.send_response(status)
            if self.path in targets:
                self.send_header("Location", targets[self.path])
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_https_is_never_downgraded_to_http(tls_hub, fake_hub: FakeHub) -> None:  # noqa: F811
    endpoint, seen = tls_hub
    client = HubClient(endpoint, token=TEST_TOKEN)
    response = client.open_range("o/m", "f", f"{endpoint}/to-https", 0, 2)  # https to https: followed
    assert response.read() == b"ok"
    response.close()
    assert [s["path"] for s in seen] == ["/to-https", "/ok"] and all("authorization" in s for s in seen)
    with pytest.raises(UnsafeRedirect) as refused:
        client.open_range("o/m", "f", f"{endpoint}/to-http", 0, 2)
    assert str(refused.value) == "downloading f: a redirect to an http URL from https; a downgrade is never followed"
    assert fake_hub.requests == []  # the http origin was never asked, so the token never went in clear
    tally("downgrades", True)
