"""A local chat page for a deployed endpoint: history, system prompt, temperature, max tokens, stop, timings.

    python -m llmops.playground --endpoint NAME [--ic COMPONENT] [--port 8765]

It prints a URL with a secret for this run; open it in a browser. The page talks only to this local
server, which calls ``InvokeEndpointWithResponseStream`` with your AWS credentials (they never reach the
browser) and relays the answer through ``endpoint_client``'s SSE decoder. The stop button cancels the
request here too: the SageMaker stream is shut down, not just hidden.

Security: it listens on 127.0.0.1 only; every API call needs the run's secret (``secrets.token_urlsafe``)
in a header, a matching ``Origin`` when the browser sends one, a ``Host`` naming this server (against DNS
rebinding) and a JSON content type (so a cross-site form cannot post). Another web site open in the same
browser therefore cannot spend your GPU hours. A request body must come with a plain ``Content-Length``
(no ``Transfer-Encoding``), parse as JSON within Python's limits, and a connection silent for
``timeout_s`` (30 s) is dropped; a request's line, headers and body must arrive within ``request_deadline_s``
(30 s) however slowly they drip, and at most ``max_connections`` (32) are served at once (another gets 503).
Prompts and answers are never logged. Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hmac
import io
import json
import re
import secrets
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

import safejson
from endpoint_client import Delta, InvocationError, InvocationResult, stream_chat
from llmops.engine_streams import engine_option, stream_formats
from llmops.fleet_target import TargetError, add_fleet_options, apply_target

STATIC = Path(__file__).resolve().parent / "playground_static"
TOKEN_HEADER = "X-Playground-Token"
MAX_BODY_BYTES = 1_000_000
MAX_TOKENS_LIMIT = 131_072
# A connection that sends or reads nothing for this long is dropped: the request socket's timeout
# (StreamRequestHandler.timeout, Python docs socketserver); the answer is relayed while SageMaker is read.
CLIENT_TIMEOUT_S = 30.0
# The line, headers and body of one request, however slowly they drip: the per-read timeout alone lets a
# client hold a connection and its thread for ever with one byte inside each timeout.
REQUEST_DEADLINE_S = 30.0
# Connections (a thread each) served at once; more are refused with 503. One person's browser uses a few.
MAX_CONNECTIONS = 32
_BUSY = json.dumps({"error": "too many connections; try again"}).encode()
# RFC 9112 section 6.2: Content-Length = 1*DIGIT. ASCII only: int() also takes "+1", "1_0", Arabic-Indic digits.
_DIGITS = re.compile(r"[0-9]+")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8", ".js": "text/javascript"}
# The page loads only its own files and talks only to this server; the secret in the URL never leaves in a
# Referer header.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class _ClientGone(Exception):
    """The browser closed the connection (its stop button aborted the fetch, or the tab closed)."""


@dataclass
class Answer:
    """One chat request in flight; ``stop()`` may come from another thread."""

    id: str
    cancelled: threading.Event = field(default_factory=threading.Event)
    body: Any = None  # botocore's EventStream once the response headers arrived
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, body: Any) -> None:
        with self.lock:
            self.body = body
        if self.cancelled.is_set():
            self._shut()

    def stop(self) -> None:
        self.cancelled.set()
        self._shut()

    def _shut(self) -> None:
        with self.lock:
            body = self.body
        if body is None:
            return
        # urllib3 2.3+ HTTPResponse.shutdown() ends a read blocked in another thread (urllib3 changelog,
        # "Added HTTPResponse.shutdown()"); close() alone would wait for the next byte from SageMaker.
        raw = getattr(body, "_raw_stream", None)
        with contextlib.suppress(Exception):
            raw.shutdown()
        with contextlib.suppress(Exception):
            body.close()


class _TrackingClient:
    """The runtime client, handing each response stream to its :class:`Answer` so a stop can close it."""

    def __init__(self, client: Any, answer: Answer) -> None:
        self._client, self._answer = client, answer

    def invoke_endpoint_with_response_stream(self, **request: Any) -> Any:
        if self._answer.cancelled.is_set():
            raise _ClientGone("stopped before the request was sent")
        response = self._client.invoke_endpoint_with_response_stream(**request)
        self._answer.attach(response["Body"])
        return response


def body_length(headers: Message, limit: int) -> int:
    """The request body's length from its framing headers, or :class:`Refused`.

    The same rules as containers/llamacpp/serve.py ``body_length`` (which ships alone in its image, so the
    two cannot share a module; tests/hostile/test_http_servers.py runs one table against both). RFC 9112
    section 6.1: 501 for a transfer coding the server does not implement; section 6.3 rule 3: Transfer-Encoding
    with Content-Length ought to be an error; rule 5: an invalid Content-Length is a 400. RFC 9110 section
    15.5.12: 411 Length Required; section 15.5.14: 413 Content Too Large.
    """
    lengths = headers.get_all("Content-Length") or []
    if headers.get_all("Transfer-Encoding"):
        if lengths:
            raise Refused(400, "Transfer-Encoding and Content-Length together are refused (RFC 9112 section 6.3)")
        raise Refused(501, "Transfer-Encoding is not supported: send the body with a Content-Length")
    if not lengths:
        raise Refused(411, "a Content-Length is required")
    if len(lengths) > 1:
        raise Refused(400, "more than one Content-Length")
    value = lengths[0].strip(" \t")
    if not _DIGITS.fullmatch(value):
        raise Refused(400, "bad Content-Length: it must be a decimal number of bytes")
    # Compared as text first: a value of thousands of digits is over any limit, and int() would refuse it.
    if len(value.lstrip("0")) > len(str(limit)) or int(value) > limit:
        raise Refused(413, f"the body must be 1 to {limit} bytes")
    return int(value)


def chat_body(request: Mapping[str, Any]) -> dict[str, Any]:
    """The SageMaker request body from the page's JSON, or :class:`Refused` (400) naming what is wrong."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused(400, "messages must be a non-empty list")
    conversation: list[dict[str, str]] = []
    for message in messages:
        if (
            not isinstance(message, dict)
            or message.get("role") not in ("user", "assistant")
            or not isinstance(message.get("content"), str)
        ):
            raise Refused(400, 'each message must be {"role": "user" or "assistant", "content": "..."}')
        conversation.append({"role": message["role"], "content": message["content"]})
    if conversation[-1]["role"] != "user":
        raise Refused(400, "the last message must be the user's")
    system = request.get("system") or ""
    if not isinstance(system, str):
        raise Refused(400, "system must be text")
    max_tokens = request.get("max_tokens", 512)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise Refused(400, f"max_tokens must be a whole number from 1 to {MAX_TOKENS_LIMIT}")
    temperature = request.get("temperature")
    body: dict[str, Any] = {
        "messages": ([{"role": "system", "content": system}] if system.strip() else []) + conversation,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
            raise Refused(400, "temperature must be a number from 0 to 2")
        body["temperature"] = float(temperature)
    return body


def timing(result: InvocationResult) -> dict[str, Any]:
    return {
        "ttft_ms": None if result.time_to_first_token_s is None else round(result.time_to_first_token_s * 1000),
        "latency_s": round(result.latency_s, 3),
        "tokens": result.tokens,
        "token_source": result.token_source,
        "tokens_per_s": round(result.tokens_per_second, 1),
        "finish_reason": result.finish_reason,
    }


class Playground:
    """The local server. ``port=0`` picks a free port; ``url`` carries the secret."""

    def __init__(
        self,
        runtime_client: Any,
        endpoint: str,
        component: str | None = None,
        *,
        port: int = 8765,
        log: TextIO | None = None,
        stream_format: str = "sse",
        timeout_s: float = CLIENT_TIMEOUT_S,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.client = runtime_client
        self.endpoint = endpoint
        self.component = component
        self.stream_format = stream_format  # the engine's framing (engines.json stream_format)
        self.secret = secrets.token_urlsafe(32)
        self.log = log or sys.stderr
        self.answers: dict[str, Answer] = {}
        self.lock = threading.Lock()
        playground = self

        class Handler(_Handler):
            owner = playground
            timeout = timeout_s  # every read and write on the browser's socket
            deadline_s = request_deadline_s

        self.server = _Server(("127.0.0.1", port), Handler, max_connections)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def origins(self) -> tuple[str, ...]:
        return (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.secret}"

    def in_flight(self) -> int:
        with self.lock:
            return len(self.answers)

    def start(self) -> Playground:
        # stop() waits for serve_forever to notice the shutdown: poll often, not every 0.5 s (the default).
        serve = functools.partial(self.server.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, name="playground", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.lock:
            answers = list(self.answers.values())
        for answer in answers:
            answer.stop()
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Playground:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def note(self, **fields: Any) -> None:
        """One structured log line: never a prompt, an answer or the secret."""
        line = " ".join(f"{key}={value}" for key, value in fields.items())
        with contextlib.suppress(OSError, ValueError):
            print(f"playground {line}", file=self.log, flush=True)


class _DeadlineReader(io.RawIOBase):
    """The request socket, each read waiting at most what is left of the handler's request deadline."""

    def __init__(self, sock: Any, handler: _Handler) -> None:
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, max_connections: int) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            _refuse_busy(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # its thread releases the slot
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the browser went away
        super().handle_error(request, client_address)


def _refuse_busy(request: Any) -> None:
    """A 503 written straight on the accepted socket by the accepting thread, which never waits long on it."""
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        f"Content-Length: {len(_BUSY)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        request.settimeout(1.0)
        request.sendall(head.encode() + _BUSY)
        request.setblocking(False)  # read what the client sent, so that closing does not reset before it reads
        with contextlib.suppress(OSError):
            while request.recv(65536):
                pass


class _Handler(BaseHTTPRequestHandler):
    owner: Playground
    server_version = "llmops-playground"
    sys_version = ""
    deadline_s = REQUEST_DEADLINE_S
    request_deadline: float | None = None

    def setup(self) -> None:
        super().setup()
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self))

    def handle_one_request(self) -> None:
        self.request_deadline = time.monotonic() + self.deadline_s
        super().handle_one_request()

    def _request_read(self) -> None:
        """The request has arrived: the answer's writes get the plain socket timeout again."""
        self.request_deadline = None
        self.connection.settimeout(self.timeout)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the default line carries the URL with the secret; see Playground.note

    # routing

    def do_GET(self) -> None:
        self._request_read()
        url = urlsplit(self.path)
        try:
            self._check_host()
            if url.path in ("/", "/index.html"):
                self._check_secret(parse_qs(url.query).get("token", [""])[0])
                self._file("index.html")
            elif url.path.startswith("/static/"):
                self._file(url.path.removeprefix("/static/"))
            elif url.path == "/api/info":
                self._check_api()
                info = {"endpoint": self.owner.endpoint, "inference_component": self.owner.component}
                self._json(200, info)
            else:
                raise Refused(404, "not found")
        except Refused as e:
            self._refuse(e)

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        try:
            try:
                self._check_host()
                self._check_api()
                request = self._read_json()
            finally:
                self._request_read()
            if path == "/api/chat":
                self._chat(request)
            elif path == "/api/stop":
                self._stop(request)
            else:
                raise Refused(404, "not found")
        except Refused as e:
            self._refuse(e)

    # checks

    def _check_host(self) -> None:
        host = self.headers.get("Host", "")
        if host not in {origin.removeprefix("http://") for origin in self.owner.origins}:
            raise Refused(403, "wrong Host header")

    def _check_secret(self, given: str) -> None:
        if not given or not hmac.compare_digest(given.encode(), self.owner.secret.encode()):
            raise Refused(403, "missing or wrong secret: open the URL the playground printed")

    def _check_api(self) -> None:
        origin = self.headers.get("Origin")
        if origin is not None and origin not in self.owner.origins:
            raise Refused(403, "requests from another origin are refused")
        self._check_secret(self.headers.get(TOKEN_HEADER, ""))

    def _read_json(self) -> dict[str, Any]:
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            raise Refused(415, "the body must be application/json")
        length = body_length(self.headers, MAX_BODY_BYTES)
        try:
            data = self.rfile.read(length)
        except TimeoutError:
            data = b""
        if len(data) < length:
            raise Refused(408, "the body did not arrive in time")
        try:
            request = safejson.loads(data, source="the body")
        except safejson.JsonError:  # not JSON, not UTF-8, too deep or too large, an integer over the digit limit
            raise Refused(400, "the body is not JSON") from None
        if not isinstance(request, dict):
            raise Refused(400, "the body must be a JSON object")
        return request

    # API

    def _chat(self, request: dict[str, Any]) -> None:
        body = chat_body(request)
        answer_id = request.get("id")
        if not isinstance(answer_id, str) or not _REQUEST_ID.match(answer_id):
            raise Refused(400, "id must be 1-64 letters, digits or dashes")
        answer = Answer(answer_id)
        with self.owner.lock:
            if answer_id in self.owner.answers:
                raise Refused(409, "an answer with this id is in flight")
            self.owner.answers[answer_id] = answer
        try:
            self._relay(answer, body)
        finally:
            with self.owner.lock:
                self.owner.answers.pop(answer_id, None)

    def _relay(self, answer: Answer, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        started = time.monotonic()

        def send(event: dict[str, Any]) -> None:
            try:
                self.wfile.write(f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode())
                self.wfile.flush()
            except (OSError, ValueError) as e:
                answer.cancelled.set()
                raise _ClientGone from e

        def on_delta(delta: Delta) -> None:
            if answer.cancelled.is_set():
                raise _ClientGone
            send({"type": "delta", "content": delta.content, "reasoning": delta.reasoning})

        client = _TrackingClient(self.owner.client, answer)
        try:
            result = stream_chat(
                client,
                self.owner.endpoint,
                body,
                inference_component_name=self.owner.component,
                on_delta=on_delta,
                stream_format=self.owner.stream_format,
            )
        except InvocationError as e:
            if answer.cancelled.is_set():
                self.owner.note(event="chat", outcome="stopped", seconds=f"{time.monotonic() - started:.2f}")
                with contextlib.suppress(_ClientGone):
                    send({"type": "stopped"})
                return
            self.owner.note(event="chat", outcome="error", code=e.info.code, transient=e.transient)
            with contextlib.suppress(_ClientGone):
                send({"type": "error", "message": str(e), "transient": e.transient})
            return
        if answer.cancelled.is_set():
            self.owner.note(event="chat", outcome="stopped", seconds=f"{time.monotonic() - started:.2f}")
            with contextlib.suppress(_ClientGone):
                send({"type": "stopped"})
            return
        figures = timing(result)
        self.owner.note(event="chat", outcome="ok", **{k: v for k, v in figures.items() if v is not None})
        with contextlib.suppress(_ClientGone):
            send({"type": "done", **figures, "ended_without_done": not result.done})

    def _stop(self, request: dict[str, Any]) -> None:
        with self.owner.lock:
            answer = self.owner.answers.get(str(request.get("id")))
        if answer is not None:
            answer.stop()
        self._json(200, {"stopped": answer is not None})

    # responses

    def _file(self, name: str) -> None:
        files = {p.name: p for p in STATIC.iterdir() if p.is_file()}
        if name not in files:
            raise Refused(404, "not found")
        data = files[name].read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", _TYPES.get(files[name].suffix, "application/octet-stream"))
        self.send_header("Content-Length", str(len(data)))
        for key, value in _PAGE_HEADERS.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self, refused: Refused) -> None:
        self.owner.note(event="refused", status=refused.status, path=urlsplit(self.path).path, why=f'"{refused}"')
        with contextlib.suppress(OSError):
            self._json(refused.status, {"error": str(refused)})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llmops.playground", description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", help="SageMaker endpoint name (the stack's EndpointName output)")
    parser.add_argument("--ic", "--inference-component", dest="inference_component", help="inference component")
    parser.add_argument("--port", type=int, default=8765, help="local port (default: 8765; 0 picks a free one)")
    parser.add_argument("--region", help="AWS region (default: the AWS CLI's configuration)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")
    engine_option(parser)
    add_fleet_options(parser)
    return parser


def _runtime_client(region: str | None) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=10, read_timeout=300, retries={"mode": "standard", "total_max_attempts": 2})
    return boto3.client("sagemaker-runtime", region_name=region, config=config)


def main(
    argv: list[str] | None = None,
    *,
    runtime_client: Any = None,
    cloudformation_client: Any = None,
    stderr: TextIO | None = None,
) -> int:
    stderr = stderr or sys.stderr
    try:
        with contextlib.redirect_stderr(stderr):
            args = _parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        apply_target(args, cloudformation_client)
    except TargetError as e:
        print(f"error: {e}", file=stderr)
        return 2
    if runtime_client is None:
        from botocore.exceptions import NoRegionError

        try:
            runtime_client = _runtime_client(args.region)
        except NoRegionError:
            print("error: no AWS region: pass --region or set AWS_REGION", file=stderr)
            return 2
    try:
        playground = Playground(
            runtime_client,
            args.endpoint,
            args.inference_component,
            port=args.port,
            log=stderr,
            stream_format=stream_formats()[args.engine],
        )
    except OSError as e:
        print(f"error: cannot listen on 127.0.0.1:{args.port} ({e.strerror}); try --port 0", file=stderr)
        return 2
    target = args.endpoint + (f" / {args.inference_component}" if args.inference_component else "")
    print(f"Playground for {target}: open {playground.url}", file=stderr, flush=True)
    print("(the link carries this run's secret; Ctrl-C stops the server)", file=stderr, flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(playground.url)
    try:
        playground.server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=stderr)
    finally:
        playground.server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
