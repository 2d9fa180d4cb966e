"""Hostile requests (issue 23, item 6) to the two HTTP servers we ship: the llama.cpp adapter and the playground.

The adapter runs as SageMaker runs it (``serve.py`` in its own process, the fake llama-server as its child);
the playground in-process. Both get the same raw bytes over a socket: broken ``Content-Length`` values, a
missing one, ``Transfer-Encoding``, bodies Python's JSON parser refuses (too deep, an integer over the
digit limit), and connections that stop sending. Each must get an HTTP answer with the right status (never a
dropped connection), and a silent connection must be closed within the server's timeout. The playground's
caller checks follow: an ``Origin`` or ``Host`` that only starts with the allowed one, and wrong secrets.
``TALLY`` counts the hostile inputs tried and refused per area (printed at the end with ``pytest -s``).
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass

import pytest

from llmops.playground import MAX_BODY_BYTES as PLAYGROUND_MAX
from llmops.playground import TOKEN_HEADER, Playground
from tests.containers.test_llamacpp_adapter import Adapter, serve

TIMEOUT_S = 1.0  # the servers' socket timeout in these tests
CHAT = json.dumps({"messages": [{"role": "user", "content": "Write a haiku about S3"}]}).encode()
TALLY: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_tally():
    yield
    print("\nhostile inputs: " + ", ".join(f"{k}={v}" for k, v in sorted(TALLY.items())))


@dataclass
class Server:
    name: str
    port: int
    path: str
    headers: list[tuple[str, str]]  # what every request carries (the playground's caller checks)
    valid_body: bytes  # a body that passes: the control
    limit: int


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    running = Adapter(tmp_path_factory.mktemp("adapter"), LLAMACPP_CLIENT_TIMEOUT_S=str(TIMEOUT_S))
    try:
        running.wait_ping(200)
        yield running
    finally:
        running.stop()


class _NoRuntime:
    def __getattr__(self, name: str):
        raise AssertionError(f"a hostile request reached SageMaker ({name})")


@pytest.fixture(scope="module")
def playground():
    log = io.StringIO()
    with Playground(_NoRuntime(), "llm-endpoint", port=0, log=log, timeout_s=TIMEOUT_S) as server:
        server.test_log = log
        yield server


@pytest.fixture(params=["adapter", "playground"])
def server(request) -> Server:
    if request.param == "adapter":
        a = request.getfixturevalue("adapter")
        return Server(
            "adapter", a.port, "/invocations", [("Content-Type", "application/json")], CHAT, serve.MAX_BODY_BYTES
        )
    p = request.getfixturevalue("playground")
    headers = [
        ("Host", f"127.0.0.1:{p.port}"),
        ("Content-Type", "application/json"),
        (TOKEN_HEADER, p.secret),
    ]
    return Server("playground", p.port, "/api/stop", headers, b'{"id": "h1"}', PLAYGROUND_MAX)


def raw(server: Server, framing: list[tuple[str, str]], body: bytes = b"") -> bytes:
    lines = [f"POST {server.path} HTTP/1.1", *(f"{k}: {v}" for k, v in [*server.headers, *framing])]
    if not any(k.lower() == "host" for k, _ in [*server.headers, *framing]):
        lines.insert(1, f"Host: 127.0.0.1:{server.port}")
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body


def exchange(server: Server, data: bytes, *, wait_s: float = 10) -> tuple[int | None, bytes, bool]:
    """(status or None when the connection dropped without an answer, body, closed after the answer)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait_s) as sock:
        sock.sendall(data)
        response = http.client.HTTPResponse(sock)
        try:
            response.begin()
        except (http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine):
            return None, b"", True
        body = response.read()
        return response.status, body, response.will_close or response.getheader("Connection") == "close"


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def framing_cases(body: bytes) -> dict[str, tuple[list[tuple[str, str]], bytes, int]]:
    """name -> (framing headers, what follows them, expected status), around a body that would pass.

    Where a lenient parser (int(), the first of two headers) reads a length, it reads the right one, so only
    strict parsing refuses: the old servers answered 200 to several of these, or nothing at all.
    """
    n = len(body)
    return {
        "negative length": ([("Content-Length", "-1")], body, 400),
        "letters": ([("Content-Length", "abc")], body, 400),
        "plus sign": ([("Content-Length", f"+{n}")], body, 400),
        "underscore": ([("Content-Length", "_".join(str(n)))], body, 400),
        "hex": ([("Content-Length", hex(n))], body, 400),
        "float": ([("Content-Length", f"{n}.0")], body, 400),
        "list": ([("Content-Length", f"{n}, {n}")], body, 400),
        "non-ASCII digit": ([("Content-Length", "\xd9\xa3")], body, 400),
        "two equal lengths": ([("Content-Length", str(n)), ("Content-Length", str(n))], body, 400),
        "two lengths": ([("Content-Length", str(n)), ("Content-Length", "1")], body, 400),
        "empty length": ([("Content-Length", "")], body, 400),
        "twenty digits": ([("Content-Length", "9" * 20)], body, 413),
        "5000 digits": ([("Content-Length", "9" * 5000)], body, 413),  # int() would refuse it
        "missing": ([], body, 411),
        "chunked": ([("Transfer-Encoding", "chunked")], chunked(body), 501),
        "gzip, chunked": ([("Transfer-Encoding", "gzip, chunked")], chunked(body), 501),
        "chunked and a length": ([("Transfer-Encoding", "chunked"), ("Content-Length", str(n))], chunked(body), 400),
    }


FRAMING = list(framing_cases(b""))

DEEP = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
BODIES = {
    "nested arrays": (DEEP, 400),  # RecursionError in json.loads
    "nested objects": (b'{"a": ' * 50_000 + b"1" + b"}" * 50_000, 400),
    "huge integer": (b'{"id": "h1", "messages": [], "max_tokens": ' + b"9" * 5000 + b"}", 400),  # int-digit limit
    "not UTF-8": (b'{"id": "\xff\xfe"}', 400),
    "not JSON": (b"<html>", 400),
    "empty": (b"", 400),
}


@pytest.mark.parametrize("case", FRAMING)
def test_bad_framing_gets_an_answer_and_a_closed_connection(server, case):
    framing, body, expected = framing_cases(server.valid_body)[case]
    status, answer, closed = exchange(server, raw(server, framing, body))
    assert status == expected, (server.name, case, status, answer)
    assert closed, "the body's length is unknown: the connection must not be reused (RFC 9112 section 6.3)"
    TALLY[f"{server.name} framing tried"] += 1
    TALLY[f"{server.name} framing refused"] += status == expected


def test_a_body_over_the_cap_is_refused_before_it_is_read(server):
    status, _, closed = exchange(server, raw(server, [("Content-Length", str(server.limit + 1))]))
    assert (status, closed) == (413, True)
    TALLY[f"{server.name} framing tried"] += 1
    TALLY[f"{server.name} framing refused"] += 1


@pytest.mark.parametrize("case", list(BODIES))
def test_bodies_json_cannot_take_are_400_not_a_dropped_connection(server, case):
    body, expected = BODIES[case]
    status, answer, _ = exchange(server, raw(server, [("Content-Length", str(len(body)))], body))
    assert status == expected, (server.name, case, status, answer)
    assert b"JSON" in answer
    TALLY[f"{server.name} bodies tried"] += 1
    TALLY[f"{server.name} bodies refused"] += status == expected


def test_good_requests_still_pass_with_leading_zeros_and_on_a_kept_connection(server):
    ok = raw(server, [("Content-Length", str(len(server.valid_body)))], server.valid_body)
    padded = raw(server, [("Content-Length", f"000{len(server.valid_body)}")], server.valid_body)  # 1*DIGIT
    assert exchange(server, ok)[0] == 200
    assert exchange(server, padded)[0] == 200
    if server.name == "adapter":  # HTTP/1.1 keep-alive: two requests on one connection
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            for _ in range(2):
                sock.sendall(ok)
                response = http.client.HTTPResponse(sock)
                response.begin()
                assert response.status == 200
                response.read()


def test_silent_and_half_sent_requests_are_dropped_after_the_timeout(server):
    """Three connections at once: one says nothing, one stops inside its headers, one inside its body."""
    half_body = raw(server, [("Content-Length", str(len(server.valid_body)))], server.valid_body[:5])
    openings = {"silent": b"", "half headers": raw(server, [])[:20], "half body": half_body}
    sockets = {}
    started = time.monotonic()
    for name, data in openings.items():
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT_S * 8)
        sock.sendall(data)
        sockets[name] = sock
    try:
        for name, sock in sockets.items():
            received = b""
            while chunk := sock.recv(65536):  # until the server closes
                received += chunk
            if name == "half body":
                assert received.startswith(b"HTTP/1.") and b" 408 " in received.split(b"\r\n")[0], received[:80]
            TALLY[f"{server.name} stalled connections tried"] += 1
            TALLY[f"{server.name} stalled connections refused"] += 1
    finally:
        for sock in sockets.values():
            sock.close()
    # Dropped after about the timeout, not held: each blocking read waits at most TIMEOUT_S.
    assert time.monotonic() - started < TIMEOUT_S * 6


def test_a_connection_reset_mid_request_is_one_log_line_not_a_traceback(adapter):
    before = adapter.log.read_text().count("event=connection_reset")
    with socket.create_connection(("127.0.0.1", adapter.port), timeout=5) as sock:
        sock.sendall(b"POST /invocations HTTP/1.1\r\nContent-Le")
        time.sleep(0.1)  # the server is reading the headers
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
    deadline = time.monotonic() + 5
    while adapter.log.read_text().count("event=connection_reset") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert adapter.log.read_text().count("event=connection_reset") == before + 1
    TALLY["adapter stalled connections tried"] += 1
    TALLY["adapter stalled connections refused"] += 1


def test_the_servers_survive_it_all(adapter, playground):
    assert b"Traceback" not in adapter.log.read_bytes()
    assert adapter.process.poll() is None
    assert "Traceback" not in playground.test_log.getvalue()


# --- the playground's caller checks -------------------------------------------------------------------


def call(p: Playground, **headers: str) -> int:
    body = b'{"id": "h1"}'
    base = {
        "Host": f"127.0.0.1:{p.port}",
        "Origin": f"http://127.0.0.1:{p.port}",
        "Content-Type": "application/json",
        TOKEN_HEADER: p.secret,
        "Content-Length": str(len(body)),
    }
    base.update({k.replace("_", "-"): v for k, v in headers.items()})
    connection = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
    connection.putrequest("POST", "/api/stop", skip_host=True, skip_accept_encoding=True)
    for key, value in base.items():
        connection.putheader(key, value)
    connection.endheaders(body)
    status = connection.getresponse().status
    connection.close()
    return status


def test_an_origin_or_host_that_only_starts_like_the_allowed_one_is_refused(playground):
    port = playground.port
    assert call(playground) == 200 and call(playground, Origin=f"http://localhost:{port}") == 200
    origins = [
        f"http://127.0.0.1:{port}.evil.com",
        f"http://127.0.0.1:{port}1",
        f"http://127.0.0.1:{port}0",
        f"http://127.0.0.1:{port}/",
        f"http://127.0.0.1:{port}@evil.com",
        f"http://localhost:{port}.evil.com",
        f"https://127.0.0.1:{port}",
        f"http://127.0.0.1:{port} http://evil.com",
        f"http://127.0.0.1:{str(port)[:-1]}",  # the allowed one starts with this
        "http://127.0.0.1",
        "null",
    ]
    for origin in origins:
        assert call(playground, Origin=origin) == 403, origin
    hosts = [f"127.0.0.1:{port}.evil.com", f"127.0.0.1:{port}1", f"localhost:{port}.evil.com", "127.0.0.1"]
    for host in hosts:
        assert call(playground, Host=host) == 403, host
    TALLY["playground origins and hosts tried"] += len(origins) + len(hosts)
    TALLY["playground origins and hosts refused"] += len(origins) + len(hosts)


def test_a_wrong_secret_is_refused_however_close_to_the_right_one(playground):
    secret = playground.secret
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    wrong = ["", secret[:-1], secret + "x", flipped, secret.upper() if secret.upper() != secret else secret + "Z"]
    wrong += ["é" * len(secret), secret[::-1]]
    for given in wrong:
        assert call(playground, **{TOKEN_HEADER.replace("-", "_"): given}) == 403, given
    assert call(playground) == 200
    TALLY["playground secrets tried"] += len(wrong)
    TALLY["playground secrets refused"] += len(wrong)
