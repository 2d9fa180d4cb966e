"""The bearer token of the OpenAI-compatible client never follows a redirect (issue 34, item 1).

Real local servers: an origin that answers each redirect status (301, 302, 303, 307, 308) with a ``Location``
on another origin, a TLS origin that redirects https to http (a downgrade), and the target, which records
every request it gets. The client must refuse each redirect with one clear, permanent error naming the
target's origin (never its path, which may carry a signature), and the target must never be asked, so the
token never reaches it. 429 and 503 come back as transient errors (issue 34, item 12), for both calls.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from endpoint_client import InvocationError, OpenAiEndpoint, build_chat_request, check_base_url
from tests.hostile.tally import Tally, report_fixture
from tests.hostile.test_staging_names import _self_signed

TOKEN = "test-bearer-token-never-leaves-the-origin"
REDIRECTS = (301, 302, 303, 307, 308)
TALLY = Tally()
_report_tally = report_fixture(TALLY)


class Recorder(http.server.ThreadingHTTPServer):
    """An HTTP server that records each request (path, headers) and answers as ``reply(path)`` says."""

    daemon_threads = True

    def __init__(self, reply, *, tls: tuple[Path, Path] | None = None) -> None:
        self.requests: list[dict[str, str]] = []
        self.reply = reply
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.socket = context.wrap_socket(self.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    @property
    def origin(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Recorder

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.requests.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        status, headers, body = self.server.reply(self.path)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


COMPLETION = json.dumps({"choices": [{"message": {"content": "stolen"}, "finish_reason": "stop"}]}).encode()
STREAM = b'data: {"choices":[{"delta":{"content":"stolen"}}]}\n\ndata: [DONE]\n\n'


def _target_reply(path: str):
    return 200, {"Content-Type": "application/json"}, STREAM if b"stream" in path.encode() else COMPLETION


@pytest.fixture
def target() -> Iterator[Recorder]:
    with Recorder(_target_reply) as server:
        yield server


def _redirecting(target: Recorder):
    def reply(path: str):
        # /s<status>/openai/v1/chat/completions -> <target>/stolen?X-Amz-Signature=secret
        status = int(path.split("/")[1][1:])
        return status, {"Location": f"{target.origin}/stolen?X-Amz-Signature=secret"}, b""

    return reply


def _calls(endpoint: OpenAiEndpoint):
    yield "invoke_chat", lambda: endpoint.invoke_chat(build_chat_request("hi", stream=False))
    yield "stream_chat", lambda: endpoint.stream_chat(build_chat_request("hi", stream=True))


@pytest.mark.parametrize("status", REDIRECTS)
def test_a_redirect_to_another_origin_is_refused_and_the_target_never_sees_the_token(status, target):
    with Recorder(_redirecting(target)) as origin:
        endpoint = OpenAiEndpoint(f"{origin.origin}/s{status}/openai/v1", TOKEN, timeout_s=10)
        for name, call in _calls(endpoint):
            with pytest.raises(InvocationError) as refused:
                call()
            message = str(refused.value)
            assert refused.value.info.code == f"HTTP{status}" and not refused.value.transient, name
            assert f"redirect to {target.origin} " in message and "refused, not followed" in message, message
            assert "secret" not in message and "/stolen" not in message and TOKEN not in message
            TALLY.record("redirects", True)
        # The origin got the token (it is the base URL's), the redirect target got nothing at all.
        assert [r["authorization"] for r in origin.requests] == [f"Bearer {TOKEN}"] * 2
        assert target.requests == []


def test_a_relative_redirect_on_the_same_origin_is_not_followed_either(target):
    with Recorder(lambda path: (307, {"Location": "/elsewhere"}, b"")) as origin:
        endpoint = OpenAiEndpoint(f"{origin.origin}/openai/v1", TOKEN, timeout_s=10)
        with pytest.raises(InvocationError, match=r"redirect to http://127\.0\.0\.1:\d+ \(base URL origin"):
            endpoint.invoke_chat(build_chat_request("hi", stream=False))
        assert [r["path"] for r in origin.requests] == ["/openai/v1/chat/completions"]


def test_a_redirect_without_location_is_refused_too():
    with Recorder(lambda path: (302, {}, b"")) as origin, pytest.raises(InvocationError, match="to no Location"):
        OpenAiEndpoint(f"{origin.origin}/v1", TOKEN).invoke_chat(build_chat_request("hi", stream=False))


@pytest.mark.parametrize("status", REDIRECTS)
def test_https_redirected_to_http_is_refused_and_nothing_goes_in_clear(status, target, tmp_path, monkeypatch):
    cert, key = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # OpenSSL's default verify paths read it
    with Recorder(_redirecting(target), tls=(cert, key)) as origin:
        endpoint = OpenAiEndpoint(f"{origin.origin}/s{status}/openai/v1", TOKEN, timeout_s=10)
        for name, call in _calls(endpoint):
            with pytest.raises(InvocationError) as refused:
                call()
            assert refused.value.info.code == f"HTTP{status}", name
            assert f"redirect to {target.origin} (base URL origin {origin.origin})" in str(refused.value)
            TALLY.record("downgrades", True)
        assert len(origin.requests) == 2 and target.requests == []


@pytest.mark.parametrize("status", [429, 503])
def test_throttling_and_unavailable_are_transient_on_both_calls(status):
    body = b'{"message": "slow down"}'
    with Recorder(lambda path: (status, {"Retry-After": "1"}, body)) as origin:
        endpoint = OpenAiEndpoint(f"{origin.origin}/openai/v1", TOKEN, timeout_s=10)
        for name, call in _calls(endpoint):
            with pytest.raises(InvocationError) as caught:
                call()
            assert caught.value.info.code == f"HTTP{status}" and caught.value.transient, name
            assert "slow down" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/v1",
        "http://localhost.example.com/v1",
        "http://127.0.0.1.nip.io/v1",
        "http://[::2]/v1",
        "file:///etc/passwd",
        "https://u@example.com/v1",
    ],
)
def test_the_loopback_exception_for_http_is_narrow(url):
    with pytest.raises(ValueError):
        check_base_url(url)
    TALLY.record("base urls", True)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/v1", "http://localhost/v1", "http://[::1]:9/v1", "https://h/v1"]
)
def test_loopback_http_and_any_https_are_accepted(url):
    assert check_base_url(url) == url
