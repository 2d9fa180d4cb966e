"""The OpenAI-compatible client keeps its connections (issue 39, item 6): counted at real local servers.

Before, every request opened a connection of its own (urllib's ``Connection: close``), so each time to first
token over https carried a TCP and a TLS handshake. Now N requests at concurrency C open at most C connections,
an idle connection the server dropped is replaced before anything is sent on it, a request whose sending failed
on a reused connection is sent once more, and a request the server may have received is never sent twice.
"""

from __future__ import annotations

import http.client
import http.server
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from endpoint_client import InvocationError, OpenAiEndpoint, build_chat_request
from endpoint_client.openai_http import ConnectionPool, OriginRefused
from tests.fakes.fake_runtime import BEARER_TOKEN, FakeSageMaker, Reply
from tests.fakes.serve_runtime import answer_text

TOKEN = "pool-test-token"
STREAM = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSageMaker]:
    with FakeSageMaker() as server:
        yield server


def _stream_all(endpoint: OpenAiEndpoint, requests: int, concurrency: int) -> list[str]:
    """``requests`` streamed chats from ``concurrency`` threads at once; the answers."""
    bodies = iter(range(requests))
    lock, answers = threading.Lock(), []

    def worker() -> None:
        while True:
            with lock:
                if next(bodies, None) is None:
                    return
            result = endpoint.stream_chat(build_chat_request("hi", max_tokens=8, stream=True))
            with lock:
                answers.append(result.content)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return answers


@pytest.fixture
def patient_drain(monkeypatch):
    """A loaded machine may keep the fake from ending a stream within the 0.25 s drain budget (then a connection
    is given up, by design): these tests count reuse, not that budget."""
    from endpoint_client import openai_http

    monkeypatch.setattr(openai_http, "DRAIN_TIMEOUT_S", 5.0)


@pytest.mark.parametrize(("requests", "concurrency"), [(1, 1), (12, 1), (12, 3), (16, 8)])
def test_n_requests_at_concurrency_c_open_at_most_c_connections(fake, patient_drain, requests, concurrency):
    fake.add_endpoint("pool", default=Reply(content=answer_text(5), token_delay_s=0.002))
    endpoint = OpenAiEndpoint(f"{fake.url}/endpoints/pool/openai/v1", BEARER_TOKEN, timeout_s=10)
    before = fake.connections
    answers = _stream_all(endpoint, requests, concurrency)
    assert len(answers) == requests and all(a == answer_text(5) for a in answers)
    opened = fake.connections - before
    assert 1 <= opened <= concurrency, opened  # one per request (12, 16) before
    assert endpoint.connections_opened == opened
    endpoint.close()


def test_whole_answers_and_error_answers_reuse_the_connection_too(fake, patient_drain):
    fake.add_endpoint("mixed", Reply(), Reply.service_error("ThrottlingException"), Reply(), default=Reply())
    endpoint = OpenAiEndpoint(f"{fake.url}/endpoints/mixed/openai/v1", BEARER_TOKEN, timeout_s=10)
    before = fake.connections
    endpoint.invoke_chat(build_chat_request("hi", stream=False))
    with pytest.raises(InvocationError):  # a 400 whose body is read to its end: the connection stays usable
        endpoint.invoke_chat(build_chat_request("hi", stream=False))
    endpoint.stream_chat(build_chat_request("hi", stream=True))
    endpoint.invoke_chat(build_chat_request("hi", stream=False))
    assert fake.connections - before == 1


# ---- a keep-alive server scripted per request -------------------------------------------------------


class KeepAlive(http.server.ThreadingHTTPServer):
    """HTTP/1.1 with kept-alive connections; ``script`` says, per request, what to do after reading it:
    ``"ok"`` answer a stream, ``"ok-then-drop"`` answer and close without saying so (an idle timeout),
    ``"drop"`` close without answering, ``"redirect"`` a 307 with a body."""

    daemon_threads = True

    def __init__(self, script: list[str], tls=None) -> None:
        self.script, self.requests, self.connections = list(script), [], 0
        self.closed = threading.Semaphore(0)  # released each time the server has closed a connection
        super().__init__(("127.0.0.1", 0), _KeepAliveHandler)
        self.scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.socket = context.wrap_socket(self.socket, server_side=True)
            self.scheme = "https"
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def process_request(self, request, client_address) -> None:
        self.connections += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        super().shutdown_request(request)
        self.closed.release()

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> KeepAlive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _KeepAliveHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: KeepAlive

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append(dict(self.headers))
        action = self.server.script.pop(0) if self.server.script else "ok"
        if action == "drop":
            self.close_connection = True
            return
        if action == "redirect":
            body = b"moved, with a body that must be drained"
            self.send_response(307)
            self.send_header("Location", "https://elsewhere.example/x")
        else:
            body = STREAM
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        if action == "ok-then-drop":
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


def _chat(endpoint: OpenAiEndpoint):
    return endpoint.stream_chat(build_chat_request("hi", stream=True))


def _wait_until_idle_connections_read_eof(endpoint: OpenAiEndpoint, timeout_s: float = 10.0) -> None:
    """Until every idle connection of ``endpoint`` reads as closed by the server (its FIN has arrived)."""
    from endpoint_client.openai_http import _readable

    deadline = time.monotonic() + timeout_s
    for connection, _ in endpoint._pool._idle:
        while not _readable(connection.sock):
            assert time.monotonic() < deadline, "the server's FIN never reached the client"
            time.sleep(0.005)


def test_an_idle_connection_the_server_closed_is_replaced_before_anything_is_sent():
    with KeepAlive(["ok-then-drop", "ok-then-drop", "ok"]) as server:
        endpoint = OpenAiEndpoint(server.base_url, TOKEN, timeout_s=10)
        for number in range(3):
            assert _chat(endpoint).content == "hi"
            if number < 2:  # the server closes the connection while it is idle: wait until the client sees it
                assert server.closed.acquire(timeout=10)
                _wait_until_idle_connections_read_eof(endpoint)
        assert len(server.requests) == 3 and server.connections == 3
        assert endpoint._pool.reconnects == 0  # noticed before sending: nothing was sent twice


def test_over_https_one_tls_handshake_serves_every_request(tmp_path, monkeypatch):
    from tests.hostile.test_staging_names import _self_signed

    cert, key = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # OpenSSL's default verify paths read it
    with KeepAlive([], tls=(cert, key)) as server:
        endpoint = OpenAiEndpoint(server.base_url, TOKEN, timeout_s=10)
        assert [_chat(endpoint).content for _ in range(5)] == ["hi"] * 5
        assert server.connections == 1 and len(server.requests) == 5  # one handshake, not five


def test_a_request_the_server_may_have_received_is_never_sent_again():
    with KeepAlive(["ok", "drop"]) as server:
        endpoint = OpenAiEndpoint(server.base_url, TOKEN, timeout_s=10)
        _chat(endpoint)
        with pytest.raises(InvocationError) as caught:
            _chat(endpoint)  # sent on the reused connection, which closed without an answer
        assert caught.value.transient
        assert len(server.requests) == 2 and server.connections == 1  # the second request once, not resent
        assert _chat(endpoint).content == "hi" and server.connections == 2


class _FailingSend(http.client.HTTPConnection):
    fail_next = False

    def request(self, *args, **kwargs):
        if self.fail_next:
            self.fail_next = False
            raise BrokenPipeError("the server closed it")
        return super().request(*args, **kwargs)


def _failing_factory(made: list[_FailingSend]):
    def factory(scheme, host, port, timeout):
        made.append(_FailingSend(host, port, timeout=timeout))
        return made[-1]

    return factory


def test_a_send_that_fails_on_a_reused_connection_is_sent_once_more_on_a_new_one():
    made: list[_FailingSend] = []
    with KeepAlive([]) as server:
        endpoint = OpenAiEndpoint(server.base_url, TOKEN, timeout_s=10)
        endpoint._pool = endpoint._opener = ConnectionPool(endpoint.base_url, connection_factory=_failing_factory(made))
        _chat(endpoint)
        made[0].fail_next = True
        assert _chat(endpoint).content == "hi"
        assert len(made) == 2 and endpoint._pool.reconnects == 1
        assert len(server.requests) == 2  # the failed send never reached it


def test_a_send_that_fails_on_a_new_connection_is_not_tried_again():
    made: list[_FailingSend] = []

    def factory(scheme, host, port, timeout):
        connection = _failing_factory(made)(scheme, host, port, timeout)
        connection.fail_next = True
        return connection

    with KeepAlive([]) as server:
        endpoint = OpenAiEndpoint(server.base_url, TOKEN, timeout_s=10)
        endpoint._pool = endpoint._opener = ConnectionPool(endpoint.base_url, connection_factory=factory)
        with pytest.raises(InvocationError) as caught:
            _chat(endpoint)
        assert caught.value.info.code == "ConnectionError" and "closed it" in str(caught.value)
        assert len(made) == 1 and server.requests == []


def test_a_redirect_is_refused_over_a_kept_connection_which_then_carries_the_next_request(patient_drain):
    with KeepAlive(["redirect", "ok"]) as server:
        endpoint = OpenAiEndpoint(server.base_url, TOKEN, timeout_s=10)
        with pytest.raises(InvocationError, match=r"redirect to https://elsewhere\.example .*refused, not followed"):
            _chat(endpoint)
        assert _chat(endpoint).content == "hi"
        assert server.connections == 1 and len(server.requests) == 2
        assert all(r["Authorization"] == f"Bearer {TOKEN}" for r in server.requests)
        assert all(r.get("Connection") != "close" for r in server.requests)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:1/v1/chat/completions",  # another port
        "https://127.0.0.1:{port}/v1/chat/completions",  # another scheme
        "http://localhost:{port}/v1/chat/completions",  # another host name for the same address
    ],
)
def test_the_pool_sends_nothing_to_another_origin(url):
    with KeepAlive([]) as server:
        pool = ConnectionPool(server.base_url)
        request = urllib.request.Request(url.format(port=server.server_address[1]), data=b"{}", method="POST")
        request.add_header("Authorization", f"Bearer {TOKEN}")
        with pytest.raises(OriginRefused, match="is not the base URL's origin"):
            pool.open(request, timeout=5)
        assert pool.opened == 0 and server.connections == 0


def test_a_connection_with_unread_bytes_is_not_reused():
    from endpoint_client.openai_http import _still_open

    left, right = socket.socketpair()
    connection = http.client.HTTPConnection("127.0.0.1", 1)
    connection.sock = left
    assert _still_open(connection)
    right.sendall(b"HTTP/1.1 200 OK\r\n")  # something unasked: the exchange is broken
    assert not _still_open(connection)
    connection.sock = None
    assert not _still_open(connection)
    left.close(), right.close()


def test_a_stream_left_midway_closes_its_connection_at_once_and_the_next_request_opens_another(fake, patient_drain):
    fake.add_endpoint("slow", default=Reply(content=answer_text(40), token_delay_s=0.05))
    endpoint = OpenAiEndpoint(f"{fake.url}/endpoints/slow/openai/v1", BEARER_TOKEN, timeout_s=10)

    def give_up(delta):
        raise RuntimeError("enough")

    before = fake.connections
    started = time.monotonic()
    with pytest.raises(InvocationError, match="enough"):
        endpoint.stream_chat(build_chat_request("hi", stream=True), on_delta=give_up)
    assert time.monotonic() - started < 1.0  # not drained through the 2 s the answer still had to go
    fake.add_endpoint("slow", default=Reply(content=answer_text(2)))
    endpoint.stream_chat(build_chat_request("hi", stream=True))
    assert fake.connections - before == 2 and endpoint._pool._idle  # the second one is kept


def test_a_stream_that_goes_on_after_its_end_is_not_waited_for():
    """[DONE], then more: the rest is read for at most DRAIN_TIMEOUT_S, then the connection is given up."""
    from endpoint_client import openai_http

    class Trailing(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (STREAM, *[b": still here\n\n"] * 20):
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trailing)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = OpenAiEndpoint(f"http://127.0.0.1:{server.server_address[1]}/v1", TOKEN, timeout_s=10)
        started = time.monotonic()
        assert _chat(endpoint).content == "hi"
        assert time.monotonic() - started < 0.05 * 2 + openai_http.DRAIN_TIMEOUT_S + 0.3
        assert endpoint._pool._idle == []  # given up, not kept half-read
    finally:
        server.shutdown()
        server.server_close()


def test_through_a_proxy_from_the_environment_each_request_goes_through_the_old_opener(monkeypatch):
    from endpoint_client import openai_http

    class Opener:
        def __init__(self):
            self.urls = []

        def open(self, request, timeout=None):
            self.urls.append(request.full_url)
            raise OSError("proxy unreachable")

    monkeypatch.setattr(openai_http, "getproxies", lambda: {"https": "http://proxy:3128"})
    monkeypatch.setattr(openai_http, "proxy_bypass", lambda host: host == "bypassed.example")
    opener = Opener()
    pool = ConnectionPool("https://runtime.example/v1", fallback=opener)
    request = urllib.request.Request("https://runtime.example/v1/chat/completions", data=b"{}", method="POST")
    with pytest.raises(OSError, match="proxy unreachable"):
        pool.open(request, timeout=5)
    assert opener.urls == ["https://runtime.example/v1/chat/completions"] and pool.opened == 0
    assert not ConnectionPool("https://bypassed.example/v1", fallback=opener)._proxied  # no_proxy: pooled
    assert not ConnectionPool("http://127.0.0.1:9/v1", fallback=opener)._proxied  # no http proxy set
    assert not ConnectionPool("https://runtime.example/v1")._proxied  # no fallback: always pooled


# ---- review of 42bb138..3072d4d ----------------------------------------------------------------------


def test_an_idle_connection_past_the_keepalive_expiry_is_closed_not_reused():
    """A server closing at its idle timeout just after the is-it-open check would fail the request after it was
    sent: a connection idle for KEEPALIVE_EXPIRY_S (5 s) or more is never used again. A fake clock, no sleep."""
    from endpoint_client import openai_http

    now = [100.0]
    with KeepAlive([]) as server:
        endpoint = OpenAiEndpoint(server.base_url, TOKEN, timeout_s=10)
        endpoint._pool = endpoint._opener = ConnectionPool(endpoint.base_url, clock=lambda: now[0])
        _chat(endpoint)
        ((kept, _),) = endpoint._pool._idle
        now[0] += openai_http.KEEPALIVE_EXPIRY_S - 0.01  # still fresh: reused
        _chat(endpoint)
        assert server.connections == 1 and endpoint._pool.opened == 1
        now[0] += openai_http.KEEPALIVE_EXPIRY_S  # idle that long: the server may be closing it now
        _chat(endpoint)
        assert server.connections == 2 and endpoint._pool.opened == 2 and endpoint._pool.reconnects == 0
        assert kept.sock is None  # closed by us, not left open
    assert openai_http.KEEPALIVE_EXPIRY_S == 5.0


def test_a_connection_on_a_file_descriptor_past_1024_is_still_checked(monkeypatch):
    """select.select refuses fd >= 1024 (ValueError), which silently made every such connection look closed."""
    import os
    import resource

    from endpoint_client.openai_http import _still_open

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1600:
        if hard != resource.RLIM_INFINITY and hard < 1600:
            pytest.skip("cannot open a file descriptor past 1024 here")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1600, hard))
    left, right = socket.socketpair()
    high = socket.socket(fileno=os.dup2(left.fileno(), 1500))
    try:
        connection = http.client.HTTPConnection("127.0.0.1", 1)
        connection.sock = high
        assert high.fileno() >= 1024 and _still_open(connection)
        right.sendall(b"x")
        assert not _still_open(connection)
    finally:
        connection.sock = None
        high.close(), left.close(), right.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_answer_left_by_an_exception_is_abandoned_not_drained(fake, patient_drain):
    """``with pool.open(...)`` left by an exception (an answer over its cap) closes the connection at once: the
    rest of a slow answer (2 s here) is not read, with a drain budget of 5 s that would allow it."""
    from endpoint_client.errors import StreamLimitExceeded

    fake.add_endpoint("slowexit", default=Reply(content=answer_text(40), token_delay_s=0.05))
    endpoint = OpenAiEndpoint(f"{fake.url}/endpoints/slowexit/openai/v1", BEARER_TOKEN, timeout_s=10)
    request = urllib.request.Request(
        endpoint.url,
        data=b'{"messages": [{"role": "user", "content": "hi"}], "stream": true}',
        method="POST",
        headers={"Authorization": f"Bearer {BEARER_TOKEN}", "Content-Type": "application/json"},
    )
    started = time.monotonic()
    with pytest.raises(StreamLimitExceeded), endpoint._pool.open(request, timeout=10) as response:
        response.read1(10)
        raise StreamLimitExceeded("answer", 10, "max_bytes")
    assert time.monotonic() - started < 1.0 and endpoint._pool._idle == []


class _Trickle(http.server.BaseHTTPRequestHandler):
    """A 200 stream of events that carry no content (role-only, usage-only, comments) every 0.25 s for 2 s, or
    (path /silent) headers and then nothing for 2 s."""

    protocol_version = "HTTP/1.1"
    EVENTS = (b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n', b": comment\n\n", b'data: {"usage":{}}\n\n')

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            for number in range(8):
                time.sleep(0.25)
                if not self.path.endswith("/silent/chat/completions"):
                    piece = self.EVENTS[number % 3]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def trickle() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("path", "timeout_s"), [("/v1", 0.3), ("/silent/v1", 10.0)], ids=["no-content", "silent"])
def test_a_deadline_bounds_the_whole_answer_over_the_openai_path(trickle, path, timeout_s):
    """Events without content every 0.25 s (each within the socket timeout) or a silence under a long socket
    timeout: the request still ends at its deadline (0.3 s) plus about one read, not after the 2 s stream."""
    endpoint = OpenAiEndpoint(trickle + path, TOKEN, timeout_s=timeout_s)
    started = time.monotonic()
    with pytest.raises(InvocationError) as caught:
        endpoint.stream_chat(build_chat_request("hi", stream=True), deadline=started + 0.3)
    assert caught.value.info.code == "RequestTimedOut" and caught.value.transient
    assert time.monotonic() - started < 0.3 + 0.25 + 0.3, time.monotonic() - started
    assert endpoint._pool._idle == []  # left midway: closed


class _SlowStream:
    """A boto3 EventStream stand-in: one event every ``every_s`` seconds; closing it takes ``close_s``."""

    def __init__(self, events: list[bytes], every_s: float = 0.0, close_s: float = 0.0) -> None:
        self.events, self.every_s, self.close_s, self.closed = events, every_s, close_s, False

    def __iter__(self):
        for event in self.events:
            time.sleep(self.every_s)
            yield {"PayloadPart": {"Bytes": event}}

    def close(self) -> None:
        time.sleep(self.close_s)
        self.closed = True


class _StreamingClient:
    def __init__(self, stream: _SlowStream) -> None:
        self.stream = stream

    def invoke_endpoint_with_response_stream(self, **request):
        return {"Body": self.stream}


def test_a_deadline_bounds_the_whole_answer_over_the_runtime_path():
    from endpoint_client import stream_chat

    events = [b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n', b": comment\n\n"] * 4
    stream = _SlowStream(events, every_s=0.25)
    started = time.monotonic()
    with pytest.raises(InvocationError) as caught:
        stream_chat(_StreamingClient(stream), "e", build_chat_request("hi", stream=True), deadline=started + 0.3)
    assert caught.value.info.code == "RequestTimedOut" and stream.closed
    assert time.monotonic() - started < 0.3 + 0.25 + 0.3


def test_closing_the_runtime_stream_is_not_part_of_its_latency():
    from endpoint_client import stream_chat

    events = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n"]
    stream = _SlowStream(events, close_s=0.3)
    result = stream_chat(_StreamingClient(stream), "e", build_chat_request("hi", stream=True))
    assert result.content == "hi" and stream.closed and result.latency_s < 0.2


def test_the_token_is_redacted_before_the_error_excerpt_is_cut(fake):
    """A body echoing the token across the excerpt's end (500 bytes) must not leave the token's start."""
    from endpoint_client.errors import BODY_EXCERPT_BYTES

    for offset in range(BODY_EXCERPT_BYTES - 40, BODY_EXCERPT_BYTES, 2):  # the JSON around it adds a few bytes
        message = "x" * offset + BEARER_TOKEN + " tail"
        fake.add_endpoint("echo", default=Reply.service_error("ValidationError", message=message))
        endpoint = OpenAiEndpoint(f"{fake.url}/endpoints/echo/openai/v1", BEARER_TOKEN, timeout_s=10)
        with pytest.raises(InvocationError) as caught:
            endpoint.stream_chat(build_chat_request("hi", stream=True))
        text = str(caught.value) + repr(caught.value.info)
        assert BEARER_TOKEN[:6] not in text, (offset, text[-80:])


def test_redact_replaces_a_token_cut_at_the_end_of_what_was_read():
    from endpoint_client.openai_http import redact

    assert redact(b"a secret-token b", "secret-token") == b"a [redacted] b"
    assert redact(b"read up to secret-to", "secret-token") == b"read up to [redacted]"
    assert redact(b"ends in secr", "secret-token") == b"ends in [redacted]"
    assert redact(b"ends in sec", "secret-token") == b"ends in sec"  # three characters or fewer: not a token's start
    assert redact(b"nothing", "") == b"nothing"


def test_a_malformed_stream_that_echoes_the_token_does_not_carry_it_into_the_error(fake):
    """The stream's excerpt in a MalformedResponse is cut too: the token goes, whole or cut at its end."""
    seen = set()
    for offset in range(0, 320, 7):
        junk = b"data: {not json " + b"x" * offset + BEARER_TOKEN.encode() + b" tail}\n\n"
        fake.add_endpoint("junkecho", default=Reply(raw_stream=junk))
        endpoint = OpenAiEndpoint(f"{fake.url}/endpoints/junkecho/openai/v1", BEARER_TOKEN, timeout_s=10)
        with pytest.raises(InvocationError) as caught:
            endpoint.stream_chat(build_chat_request("hi", stream=True))
        seen.add(caught.value.info.code)
        text = str(caught.value) + repr(caught.value.info)
        assert BEARER_TOKEN[:6] not in text, (offset, text[-120:])
    assert seen == {"MalformedResponse"}


# -- the pool's parts at their edges (mutation testing of openai_http.py after the pool) ------------------------


class _Answer:
    """What _drain reads: an HTTPResponse's rest, as chunks (chunked) or one length, closing after the last."""

    def __init__(self, chunks: list[bytes] | None = None, *, length: int | None = None, fail: bool = False) -> None:
        self.chunked = chunks is not None
        self.chunks = list(chunks or [])
        self.length = length
        self.fail = fail
        self.closed = False

    def isclosed(self) -> bool:
        return self.closed

    def read1(self, n: int) -> bytes:
        if self.fail:
            raise ConnectionResetError("reset")
        chunk = self.chunks.pop(0) if self.chunks else b""
        assert len(chunk) <= n
        self.closed = not self.chunks
        return chunk

    def read(self, n: int | None = None) -> bytes:
        assert n == self.length
        self.closed = True
        return b"x" * (self.length or 0)


class _Sock:
    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def settimeout(self, value: float | None) -> None:
        self.timeouts.append(value)


@pytest.mark.parametrize(
    ("answer", "reusable"),
    [
        (lambda d: _Answer(length=d), True),  # exactly the most it reads: read, and reusable
        (lambda d: _Answer(length=d + 1), False),  # one byte more: given up
        (lambda d: _Answer(length=None), False),  # neither chunked nor of known length: given up
        (lambda d: _Answer([b"a" * (d - 1), b"b"]), True),  # chunks to exactly the most
        (lambda d: _Answer([b"a" * (d - 1), b"b", b"c"]), False),  # one byte more: given up
        (lambda d: _Answer([b"a" * 64] * (d // 64 + 2)), False),  # many small chunks add up
        (lambda d: _Answer([b"", b"x"]), False),  # nothing came and the answer is not over
        (lambda d: _Answer([b"x"], fail=True), False),  # the connection broke
    ],
)
def test_the_rest_of_an_answer_is_drained_within_its_bytes_or_the_connection_given_up(answer, reusable) -> None:
    from endpoint_client.openai_http import DRAIN_BYTES, DRAIN_TIMEOUT_S, _drain

    sock = _Sock()
    assert _drain(answer(DRAIN_BYTES), sock) is reusable
    assert sock.timeouts and all(t is not None and 0 < t <= DRAIN_TIMEOUT_S for t in sock.timeouts)


def test_a_finished_answer_needs_no_drain() -> None:
    from endpoint_client.openai_http import _drain

    done = _Answer(length=0)
    done.closed = True
    sock = _Sock()
    assert _drain(done, sock) is True and sock.timeouts == []


def test_the_drain_budget_is_time_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import endpoint_client.openai_http as openai_http

    monkeypatch.setattr(openai_http, "DRAIN_TIMEOUT_S", -1.0)
    assert openai_http._drain(_Answer(length=10), _Sock()) is False


@pytest.mark.parametrize("with_poll", [True, False])
def test_a_socket_is_readable_when_data_or_its_end_is_waiting(monkeypatch: pytest.MonkeyPatch, with_poll) -> None:
    import select

    from endpoint_client.openai_http import _readable

    if not with_poll:  # a platform without poll: the selectors module
        monkeypatch.delattr(select, "poll")
    left, right = socket.socketpair()
    try:
        assert _readable(left) is False
        right.sendall(b"x")
        deadline = time.monotonic() + 5
        while not _readable(left) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _readable(left) is True
        assert left.recv(1) == b"x" and _readable(left) is False
        right.close()
        while not _readable(left) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _readable(left) is True  # EOF
    finally:
        left.close()
        right.close()


def test_new_connections_carry_the_timeout_and_one_tls_context() -> None:
    pool = ConnectionPool("https://example.com")
    first = pool._new_connection("https", "example.com", None, 7.5)
    second = pool._new_connection("https", "example.com", 8443, 3.0)
    assert isinstance(first, http.client.HTTPSConnection) and first.timeout == 7.5 and second.timeout == 3.0
    assert first._context is second._context and isinstance(first._context, ssl.SSLContext)  # loaded once
    assert first._context.check_hostname and first._context.verify_mode == ssl.CERT_REQUIRED
    plain = pool._new_connection("http", "127.0.0.1", 8080, 2.0)
    assert type(plain) is http.client.HTTPConnection and plain.timeout == 2.0 and plain.port == 8080


def test_a_token_is_scrubbed_from_an_excerpt_whole_or_cut() -> None:
    endpoint = OpenAiEndpoint("http://127.0.0.1:9/v1", TOKEN)
    assert endpoint._scrub(f"denied for {TOKEN}, sorry") == "denied for [redacted], sorry"
    assert endpoint._scrub(f"denied for {TOKEN}…") == "denied for [redacted]…"  # the cut mark kept after it
    assert endpoint._scrub(f"denied for {TOKEN[:6]}…") == "denied for [redacted]…"  # a token cut at the end
    assert endpoint._scrub("nothing secret…") == "nothing secret…"
    assert endpoint._scrub("") == "" and endpoint._scrub(None) is None


class _Opener:
    def __init__(self, error: BaseException) -> None:
        self.error, self.timeouts = error, []

    def open(self, request: urllib.request.Request, timeout: float | None = None) -> object:
        self.timeouts.append(timeout)
        raise self.error


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (TimeoutError("The read operation timed out"), "The read operation timed out"),
        (TimeoutError(), "timed out"),  # no words of its own
        (urllib.error.URLError(TimeoutError("connect timed out")), "connect timed out"),  # urllib wraps it
    ],
)
def test_a_request_that_times_out_is_a_transient_timeout_error(error, message) -> None:
    endpoint = OpenAiEndpoint("http://127.0.0.1:9/v1", TOKEN, timeout_s=12.5)
    opener = _Opener(error)
    endpoint._opener = opener
    with pytest.raises(InvocationError) as failed:
        endpoint._open({"messages": []}, "application/json")
    info = failed.value.info
    assert (info.code, info.message, info.transient) == ("TimeoutError", message, True)
    with pytest.raises(InvocationError):
        endpoint._open({"messages": []}, "application/json", timeout_s=0.5)
    assert opener.timeouts == [12.5, 0.5]  # the endpoint's own, else the one asked for


def test_a_request_that_cannot_connect_is_a_transient_connection_error() -> None:
    endpoint = OpenAiEndpoint("http://127.0.0.1:9/v1", TOKEN)
    endpoint._opener = _Opener(urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")))
    with pytest.raises(InvocationError) as failed:
        endpoint._open({"messages": []}, "application/json")
    info = failed.value.info
    assert (info.code, info.message, info.transient) == ("ConnectionError", "[Errno 111] Connection refused", True)


def test_only_a_timeout_error_reads_as_a_timeout_and_the_deadline_names_its_time() -> None:
    from endpoint_client.errors import ErrorInfo
    from endpoint_client.openai_http import _deadline_info, _is_timeout

    assert _is_timeout(InvocationError(ErrorInfo(code="TimeoutError", message="timed out", transient=True)))
    assert not _is_timeout(InvocationError(ErrorInfo(code="ConnectionError", message="reset", transient=True)))
    assert not _is_timeout(TimeoutError("not wrapped")) and not _is_timeout(None)
    info = _deadline_info(1.23456)
    assert (info.code, info.message, info.transient) == (
        "RequestTimedOut",
        "no complete answer by the deadline (1.235 s)",
        True,
    )
