"""SageMaker serving adapter for llama.cpp's ``llama-server`` (standard library only).

SageMaker talks to a hosting container on port 8080: ``GET /ping`` for health and ``POST /invocations``
for requests ("Use your own inference code with hosting services", SageMaker developer guide). llama-server
speaks OpenAI's API on its own port; this program starts it as a child on 127.0.0.1 and sits in front:

- ``/ping`` is 200 only once llama-server's ``GET /health`` is 200 (it answers 503 "Loading model" until
  the model is loaded: tools/server/README.md, "GET /health"), and 503 while loading or after the child died.
- ``/invocations`` takes the OpenAI chat body, checks that it is a JSON object with ``messages``, and
  forwards the same bytes to ``/v1/chat/completions``. A streamed answer (``"stream": true``) is relayed
  chunk by chunk as llama-server writes it (``data: {...}\\n\\n`` events, then ``data: [DONE]``:
  format_oai_sse in tools/server/server-common.cpp); nothing is parsed or re-encoded on the way.
- Request framing is read strictly, since SageMaker always sends ``Content-Length``: digits only (411 when it
  is missing, 400 when malformed, 413 over the cap), ``Transfer-Encoding`` refused (501, or 400 alongside a
  ``Content-Length``), a body Python's JSON parser cannot take (too deep, an integer over its digit limit) is
  a 400 like any other bad body, and every socket operation times out (``LLAMACPP_CLIENT_TIMEOUT_S``, default
  60 s) so a half-open connection is dropped. A request's line, headers and body must all arrive within
  ``LLAMACPP_REQUEST_DEADLINE_S`` (default 60 s) however the client drips them, and at most
  ``LLAMACPP_MAX_CONNECTIONS`` (default 128) connections are served at once: another is answered 503 with
  ``Retry-After`` and closed, without a thread.
- Prompts and answers are never logged: one ``key=value`` line per request (path, status, bytes, time).
- SIGTERM (how SageMaker stops a container) stops the child with SIGTERM, then SIGKILL after a grace period.

Every llama-server setting comes from ``LLAMA_ARG_*`` environment variables, which llama-server reads
itself (tools/server/README.md: "(env: LLAMA_ARG_...)", and "If both command line argument and environment
variable are both set for the same param, the argument will take precedence"). The adapter passes only what
it owns on the command line: host, port and the resolved model file.
"""

from __future__ import annotations

import contextlib
import fnmatch
import http.client
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL_DIR = "/opt/ml/model"
SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
# Bodies above this are refused before reading: a chat request is text, far below it.
MAX_BODY_BYTES = 64 * 1024 * 1024
RELAY_CHUNK = 64 * 1024
# A client connection that sends or reads nothing for this long is dropped (StreamRequestHandler.timeout is
# the request socket's timeout: Python docs, socketserver). Closing idle keep-alive connections is usual for
# SageMaker containers: amazon-sagemaker-examples scikit_bring_your_own nginx.conf has keepalive_timeout 5.
CLIENT_TIMEOUT_S = 60.0
# The per-read timeout alone lets a client hold a connection and its thread for ever by sending one byte inside
# each timeout: the request line, headers and body must all arrive within this, counted from when the server
# starts waiting for the request (a 64 MiB body in 60 s needs ~1.1 MB/s, far below what SageMaker sends).
REQUEST_DEADLINE_S = 60.0
# Connections served at once (a thread each); another is refused with 503 at once. SageMaker retries a
# container's 503 as a ModelError the caller sees as transient; llama-server queues what its slots cannot take.
MAX_CONNECTIONS = 128
# RFC 9112 section 6.2: Content-Length = 1*DIGIT. ASCII only: int() also takes "+1", "1_0", Arabic-Indic digits.
_DIGITS = re.compile(r"[0-9]+")


def log(**fields: object) -> None:
    """One structured line on stderr (CloudWatch keeps it); callers never pass request or answer text."""
    print(" ".join(f"{k}={v}" for k, v in fields.items()), file=sys.stderr, flush=True)


class ModelNotFound(Exception):
    pass


def resolve_model(model: str) -> Path:
    """The GGUF file llama-server loads, from ``LLAMA_ARG_MODEL``.

    The stack sets it to ``/opt/ml/model/<gguf_file>``, where ``gguf_file`` is a file name or glob: the
    path itself when it is a file, else the one model below its deepest existing folder whose path
    (relative to that folder) or bare name matches the rest. A bare folder takes its only GGUF model.
    A split GGUF (``name-00001-of-00003.gguf``) is loaded from its first part, and ``name.gguf`` names
    it too; llama.cpp opens the other parts itself (the first part's ``split.count`` metadata;
    llama_split_path in include/llama.h).
    """
    path = Path(model)
    if path.is_file():
        return path
    root, pattern = path, None
    while not root.is_dir() and root.parent != root:
        root = root.parent
    if root != path:
        pattern = path.relative_to(root).as_posix()

    def matches(p: Path) -> bool:
        rel = p.relative_to(root).as_posix()
        unsplit = SPLIT_PART.sub(".gguf", rel)
        names = (rel, p.name, unsplit, unsplit.rsplit("/", 1)[-1])
        return any(fnmatch.fnmatchcase(name, pattern) for name in names)

    candidates = sorted(p for p in root.rglob("*.gguf") if p.is_file() and (pattern is None or matches(p)))
    # The first part stands for a whole split file; later parts are not separate models.
    models = [p for p in candidates if not (m := SPLIT_PART.search(p.name)) or m.group(1) == "00001"]
    if not models:
        shown = f" matching {pattern!r}" if pattern else ""
        raise ModelNotFound(f"no .gguf file{shown} below {root}")
    if len(models) > 1:
        names = ", ".join(p.relative_to(root).as_posix() for p in models[:5])
        raise ModelNotFound(f"{len(models)} GGUF models match below {root} ({names}); set gguf_file to one of them")
    return models[0]


def server_command(binary: list[str], model: Path, port: int) -> list[str]:
    """The command line of llama-server: only what the adapter owns; everything else is LLAMA_ARG_*."""
    return [*binary, "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]


class Child:
    """llama-server as a child process, with its health as SageMaker should see it."""

    def __init__(self, command: list[str], port: int) -> None:
        self.port = port
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        self.stopping = False
        log(event="llama_server_started", pid=self.process.pid)

    def health(self) -> tuple[bool, str]:
        code = self.process.poll()
        if code is not None:
            return False, f"llama-server exited with code {code}"
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()  # closing with the body unread would reset the connection
            status = response.status
            conn.close()
        except OSError as e:
            # a dying server closes its socket a moment before it can be reaped; say why once it has exited
            try:
                code = self.process.wait(0.2)
            except subprocess.TimeoutExpired:
                return False, f"llama-server is not answering yet ({type(e).__name__})"
            return False, f"llama-server exited with code {code}"
        if status == 200:
            return True, "ready"
        return False, f"llama-server /health answered {status} (loading the model)"

    def stop(self, grace_s: float) -> int | None:
        self.stopping = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        log(event="llama_server_stopped", code=self.process.returncode)
        return self.process.returncode


class Refusal(Exception):
    """A request refused before its body is read: the connection is closed after the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def body_length(headers: Message, limit: int) -> int:
    """The request body's length from its framing headers, or :class:`Refusal`.

    RFC 9112 section 6.1: a server SHOULD answer 501 to a transfer coding it does not implement (this one
    implements none); section 6.3 rule 3: Transfer-Encoding with Content-Length "ought to be handled as an
    error" and the connection closed; rule 5: an invalid Content-Length is a 400 and a closed connection.
    RFC 9110 section 15.5.12: 411 when a Content-Length is required; section 15.5.14: 413 over the limit.
    """
    lengths = headers.get_all("Content-Length") or []
    codings = headers.get_all("Transfer-Encoding") or []
    if codings:
        if lengths:
            raise Refusal(400, "Transfer-Encoding and Content-Length together are refused (RFC 9112 section 6.3)")
        raise Refusal(501, "Transfer-Encoding is not supported: send the body with a Content-Length")
    if not lengths:
        raise Refusal(411, "a Content-Length is required")
    if len(lengths) > 1:
        raise Refusal(400, "more than one Content-Length")
    value = lengths[0].strip(" \t")
    if not _DIGITS.fullmatch(value):
        raise Refusal(400, "Content-Length must be a decimal number of bytes")
    # Compared as text first: a value of thousands of digits is over any limit, and int() would refuse it.
    if len(value.lstrip("0")) > len(str(limit)) or int(value) > limit:
        raise Refusal(413, f"the body is over {limit} bytes")
    return int(value)


def request_problem(body: bytes) -> str | None:
    """Why a request body is not an OpenAI chat request, or None when it is one."""
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"the body is not valid JSON ({getattr(e, 'msg', type(e).__name__)})"
    except RecursionError:
        return "the body is not valid JSON (nested too deeply)"
    except ValueError:
        # An integer over sys.get_int_max_str_digits() digits (Python docs, stdtypes "Integer string
        # conversion length limitation").
        return "the body is not valid JSON (a number with too many digits)"
    if not isinstance(request, dict):
        return "the body must be a JSON object (an OpenAI chat completion request)"
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return 'the body needs "messages": a non-empty list of {"role": ..., "content": ...} objects'
    return None


class DeadlineReader(io.RawIOBase):
    """The request socket, each read waiting at most what is left of the handler's request deadline.

    A ``TimeoutError`` past the deadline ends the connection as a silent client's does: BaseHTTPRequestHandler
    closes it when the request line or headers time out, ``do_POST`` answers 408 for a body.
    """

    def __init__(self, sock: Any, handler: Any) -> None:
        self._sock, self._handler = sock, handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        deadline = self._handler.request_deadline
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request did not arrive within its deadline")
            self._sock.settimeout(min(self._handler.timeout, left))
        return self._sock.recv_into(buffer)


def make_handler(
    child: Child, client_timeout_s: float = CLIENT_TIMEOUT_S, request_deadline_s: float = REQUEST_DEADLINE_S
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "llamacpp-sagemaker-adapter"
        # Every read and write on the client socket; a timeout ends the connection (handle_one_request).
        timeout = client_timeout_s
        request_deadline: float | None = None

        def setup(self) -> None:
            super().setup()
            self.rfile = io.BufferedReader(DeadlineReader(self.connection, self))

        def handle_one_request(self) -> None:
            self.request_deadline = time.monotonic() + request_deadline_s
            super().handle_one_request()

        def _request_read(self) -> None:
            """The request has arrived: the answer's writes get the plain socket timeout again."""
            self.request_deadline = None
            self.connection.settimeout(self.timeout)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the default line would carry the request line only, but we log our own fields instead

        def _send_json(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")  # RFC 9112 section 9.6: say so before closing
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._request_read()
            if self.path != "/ping":
                self._send_json(404, {"error": "not found; SageMaker calls GET /ping and POST /invocations"})
                return
            ready, reason = child.health()
            if ready:
                self._send_json(200, {"status": "ok"})
            else:
                self._send_json(503, {"status": "unavailable", "reason": reason})

        def do_POST(self) -> None:
            started = time.monotonic()
            if self.path != "/invocations":
                self._request_read()
                self.close_connection = True  # its body is not read: it must not be taken for the next request
                self._send_json(404, {"error": "not found; SageMaker calls GET /ping and POST /invocations"})
                return
            try:
                length = body_length(self.headers, MAX_BODY_BYTES)
            except Refusal as refusal:
                self._request_read()
                self.close_connection = True
                log(event="invocation", status=refusal.status, reason="bad_framing")
                self._send_json(refusal.status, {"error": {"code": refusal.status, "message": str(refusal)}})
                return
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                body = b""
            self._request_read()
            if len(body) < length:
                # The client stopped sending (or timed out) before the body it announced was complete.
                self.close_connection = True
                log(event="invocation", status=408, reason="incomplete_body", request_bytes=len(body))
                with contextlib.suppress(OSError):
                    self._send_json(408, {"error": {"code": 408, "message": "the body did not arrive in time"}})
                return
            problem = request_problem(body)
            if problem:
                log(event="invocation", status=400, reason="bad_request", request_bytes=len(body))
                self._send_json(400, {"error": {"code": 400, "type": "invalid_request_error", "message": problem}})
                return
            sent, status = self._forward(body)
            log(
                event="invocation",
                status=status,
                request_bytes=len(body),
                response_bytes=sent,
                seconds=f"{time.monotonic() - started:.3f}",
            )

        def _forward(self, body: bytes) -> tuple[int, int]:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", child.port, timeout=3600)
                conn.request(
                    "POST",
                    "/v1/chat/completions",
                    body=body,
                    headers={"Content-Type": "application/json", "Content-Length": str(len(body))},
                )
                upstream = conn.getresponse()
            except OSError as e:
                ready, reason = child.health()
                self._send_json(503, {"error": {"code": 503, "message": f"llama-server unreachable: {reason}"}})
                log(event="upstream_error", error=type(e).__name__, ready=ready)
                return 0, 503
            try:
                content_type = upstream.getheader("Content-Type", "application/json")
                if "text/event-stream" in content_type:
                    return self._relay_stream(upstream, content_type), upstream.status
                data = upstream.read()
                self.send_response(upstream.status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return len(data), upstream.status
            finally:
                conn.close()

        def _relay_stream(self, upstream: http.client.HTTPResponse, content_type: str) -> int:
            """Copy the SSE bytes as they arrive, in HTTP chunks, flushing each one."""
            self.send_response(upstream.status)
            self.send_header("Content-Type", content_type)
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            try:
                while chunk := upstream.read1(RELAY_CHUNK):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    sent += len(chunk)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                # The client went away: closing the upstream connection tells llama-server to stop the task.
                self.close_connection = True
            return sent

    return Handler


BUSY = json.dumps({"error": {"code": 503, "message": "too many connections; try again"}}).encode()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, max_connections: int = MAX_CONNECTIONS) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log(event="connection_refused", reason="too_many_connections")
            refuse_busy(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the thread that releases the slot
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: object, client_address: tuple) -> None:
        """One log line, not a traceback, for a client that reset its connection (the stdlib prints one)."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            log(event="connection_reset", error=type(error).__name__)
            return
        super().handle_error(request, client_address)


def refuse_busy(request: Any) -> None:
    """A 503 written straight on the accepted socket, on the accepting thread (so never blocking it for long)."""
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        f"Content-Length: {len(BUSY)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        request.settimeout(1.0)
        request.sendall(head.encode() + BUSY)
        # What the client already sent, read so that closing does not reset the connection before it reads the 503.
        request.setblocking(False)
        with contextlib.suppress(OSError):
            while request.recv(65536):
                pass


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    port = int(env.get("SAGEMAKER_BIND_TO_PORT", "8080"))
    child_port = int(env.get("LLAMACPP_SERVER_PORT", "8081"))
    # A command line, so tests can run a stand-in through an interpreter.
    binary = shlex.split(env.get("LLAMACPP_SERVER_BIN", "llama-server"))
    grace_s = float(env.get("LLAMACPP_STOP_GRACE_S", "20"))
    client_timeout_s = float(env.get("LLAMACPP_CLIENT_TIMEOUT_S", str(CLIENT_TIMEOUT_S)))
    request_deadline_s = float(env.get("LLAMACPP_REQUEST_DEADLINE_S", str(REQUEST_DEADLINE_S)))
    max_connections = int(env.get("LLAMACPP_MAX_CONNECTIONS", str(MAX_CONNECTIONS)))
    try:
        model = resolve_model(env.get("LLAMA_ARG_MODEL", MODEL_DIR))
    except ModelNotFound as e:
        log(event="startup_failed", reason=json.dumps(str(e)))
        return 2
    log(event="model_resolved", path=json.dumps(str(model)))
    child = Child(server_command(binary, model, child_port), child_port)
    server = Server(("0.0.0.0", port), make_handler(child, client_timeout_s, request_deadline_s), max_connections)

    def on_term(signum: int, frame: object) -> None:
        log(event="signal", signal=signal.Signals(signum).name)
        # shutdown() waits for serve_forever to return, so it cannot run on the serving thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    log(event="listening", port=port, child_port=child_port)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        child.stop(grace_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
