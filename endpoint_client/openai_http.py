"""Chat completions over an endpoint's OpenAI-compatible path, with a bearer token, over stdlib HTTP.

SageMaker serves ``POST <base>/chat/completions`` on every real-time endpoint and inference component, the
base being ``https://runtime.sagemaker.<region>.amazonaws.com/endpoints/<endpoint>[/inference-components/
<component>]/openai/v1``; requests and answers, streamed too, pass to and from the container unchanged, and
a request is authenticated by a short-lived bearer token (up to 12 hours) that the SageMaker Python SDK
makes from AWS credentials (``sagemaker.core.token_generator.generate_token``); the caller needs
``sagemaker:CallWithBearerToken`` and ``sagemaker:InvokeEndpoint``
(https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-openai-compatible.html). The token goes
where an OpenAI client puts its API key: ``Authorization: Bearer <token>``.

:class:`OpenAiEndpoint` sends the same bodies as :mod:`endpoint_client.runtime` and reads the stream with
the same decoders and caps, so timings and token counts mean the same over both paths. The token is never
part of an error message or ``repr``, and it goes to the base URL's origin only: the opener follows no
redirect (a 3xx is refused with a clear error, never resent elsewhere with the token, nor downgraded from
https to http) and opens http(s) URLs only, as the Hub client (hfstage/hub.py) and the wait-handle signal do.

Connections are kept and reused (:class:`ConnectionPool`): one request at a time on each, as many open as
requests were ever in flight at once (more only when the server closed some, or an answer left midway or slow
to end made one unusable, or one stayed idle past KEEPALIVE_EXPIRY_S), all to the base URL's origin and to
no other. A request on a kept connection pays no TCP or TLS handshake, so its time to first token is the
endpoint's.
"""

from __future__ import annotations

import http.client
import json
import select
import selectors
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit
from urllib.request import getproxies, proxy_bypass

from .chat import Delta, MalformedResponse, excerpt, parse_completion
from .errors import BODY_EXCERPT_BYTES, ErrorInfo, InvocationError, StreamLimitExceeded
from .runtime import ByteBudget, InvocationResult, _Accumulator, read_capped
from .sse import MAX_ANSWER_BYTES, MAX_EVENT_BYTES, MAX_LINE_BYTES, MAX_STREAM_BYTES
from .streams import new_decoder

READ_BYTES = 65536
ERROR_BODY_BYTES = 4096  # of an error answer, read at most (its excerpt is shorter still)
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_SCHEMES = ("http", "https")
# What is read of an answer the caller stopped reading (a stream after its [DONE], an error body past its excerpt)
# so that its connection can carry the next request; more than that, or slower, and the connection is closed.
DRAIN_BYTES = 65536
DRAIN_TIMEOUT_S = 0.25  # in all, not per read
# An idle connection older than this is closed rather than reused: a server that closes it at its own idle
# timeout may do so just after the check that it is still open, and the request sent on it would then fail
# after it was sent (not resendable). 5 s is both httpx's default keepalive_expiry (httpx/_config.py,
# DEFAULT_LIMITS = Limits(..., keepalive_expiry=5.0)) and uvicorn's default --timeout-keep-alive (5 s,
# uvicorn/config.py), which vLLM's and SGLang's OpenAI servers run under; a conservative bound for others.
KEEPALIVE_EXPIRY_S = 5.0
MAX_IDLE_CONNECTIONS = 256
USER_AGENT = "llmops-endpoint-client"


def bearer_opener() -> urllib.request.OpenerDirector:
    """An opener for requests that carry the bearer token: http(s) only, and no redirect handler at all.

    ``urlopen``'s default opener follows 301/302/303/307/308 and resends the ``Authorization`` header to the new
    URL, whatever its host or scheme (urllib.request.HTTPRedirectHandler.redirect_request copies the request's
    headers); without the handler a 3xx reaches HTTPDefaultErrorHandler and comes back as an HTTPError.
    Proxies still come from the environment (HTTPS_PROXY), for http and https only.
    """
    opener = urllib.request.OpenerDirector()
    proxies = {k: v for k, v in urllib.request.getproxies().items() if k in _SCHEMES}
    for handler in (
        urllib.request.ProxyHandler(proxies),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


class OriginRefused(ValueError):
    """A request for another origin than the pool's: never sent (the token goes to the base URL's origin only)."""


class _PooledResponse:
    """An ``http.client.HTTPResponse`` whose ``close`` hands its connection back to the pool when it can carry
    another request (the answer was read to its end, and the server did not say it would close)."""

    def __init__(self, response: http.client.HTTPResponse, connection: http.client.HTTPConnection, pool: Any):
        self._response, self._connection, self._pool = response, connection, pool
        self.status = self.code = response.status
        self.headers = response.headers
        self._released = False

    def read1(self, size: int = -1) -> bytes:
        return self._response.read1(size)

    def read(self, size: int | None = None) -> bytes:
        return self._response.read(size)

    def getcode(self) -> int:
        return self.status

    @property
    def closed(self) -> bool:  # urllib.response.addbase (an HTTPError's body) asks
        return self._released

    def info(self) -> Any:
        return self.headers

    def close(self) -> None:
        """Done with the answer: its connection goes back to the pool if the rest of the answer (an SSE stream's
        last chunk after [DONE], an error body past its excerpt) comes within DRAIN_BYTES and DRAIN_TIMEOUT_S."""
        if self._released:
            return
        self._released = True
        response, connection = self._response, self._connection
        reusable = not response.will_close and connection.sock is not None
        if reusable and not response.isclosed():
            reusable = _drain(response, connection.sock)
        response.close()
        if reusable and connection.sock is not None:
            self._pool.release(connection)
        else:
            connection.close()

    def abandon(self) -> None:
        """Done with the answer before its end (an error, a timeout, a stop): close the connection, unread."""
        if not self._released:
            self._released = True
            self._response.close()
            self._connection.close()

    def __enter__(self) -> _PooledResponse:
        return self

    def set_read_timeout(self, seconds: float) -> None:
        """The socket timeout of the reads still to come (a request's deadline may be nearer than the timeout)."""
        sock = self._connection.sock
        if sock is not None:
            sock.settimeout(max(seconds, 0.001))

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # Left by an exception (an answer over its cap, an interrupted read): the rest is not waited for.
        (self.close if exc_type is None else self.abandon)()


class ConnectionPool:
    """Persistent HTTP/1.1 connections to one origin, each carrying one request at a time.

    ``open(request, timeout)`` answers as ``bearer_opener().open`` does (an ``HTTPError`` for any status outside
    2xx, a 3xx included: no redirect is followed), so :class:`OpenAiEndpoint` reads both the same way. It refuses
    a request for any other origin than the pool's (:class:`OriginRefused`), before anything is sent.

    An idle connection the server has closed (its idle timeout) is noticed before it is used (it reads as
    ready, EOF) and replaced. A request whose sending fails on a reused connection is sent once more on a new
    one: the server closed that connection, so it never got the request whole. A request already sent whose
    answer never came (``RemoteDisconnected``) is not sent again: a POST is not idempotent and the server may
    have started on it (the rule urllib3 applies to POST: retry connection errors, not read errors).

    Through an http(s) proxy from the environment the pool steps aside: each request goes through ``fallback``
    (``bearer_opener()``, one connection per request), as before.
    """

    def __init__(
        self,
        base_url: str,
        *,
        fallback: urllib.request.OpenerDirector | None = None,
        connection_factory: Callable[[str, str, int | None, float], http.client.HTTPConnection] | None = None,
        max_idle: int = MAX_IDLE_CONNECTIONS,
        keepalive_expiry_s: float = KEEPALIVE_EXPIRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urlsplit(base_url)
        self.scheme, self.host, self.port = parts.scheme, parts.hostname or "", parts.port
        self._fallback = fallback
        self._factory = connection_factory or self._new_connection
        self._tls: ssl.SSLContext | None = None  # made with the first https connection (loading CAs costs ms)
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []  # and when each went idle
        self._lock = threading.Lock()
        self._max_idle = max_idle
        self._keepalive_expiry_s = keepalive_expiry_s
        self._clock = clock
        # Read once, as urllib's ProxyHandler reads the environment once when the opener is built.
        self._proxied = fallback is not None and self.scheme in getproxies() and not proxy_bypass(self.host)
        self.opened = 0  # connections made, over the pool's life
        self.reconnects = 0  # requests sent again on a new connection after the reused one had been closed

    def _origin_of(self, url: str) -> tuple[str, str, int | None]:
        parts = urlsplit(url)
        return parts.scheme, parts.hostname or "", parts.port

    def _take(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection still open (``True``: reused), else a new one, not yet connected."""
        while True:
            with self._lock:
                connection, idle_since = self._idle.pop() if self._idle else (None, 0.0)
            if connection is None:
                break
            fresh = self._clock() - idle_since < self._keepalive_expiry_s
            if fresh and _still_open(connection):
                connection.timeout = timeout
                connection.sock.settimeout(timeout)
                return connection, True
            connection.close()
        with self._lock:
            self.opened += 1
        return self._factory(self.scheme, self.host, self.port, timeout), False

    def release(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append((connection, self._clock()))
                return
        connection.close()

    def close(self) -> None:
        """Close every idle connection (one in use closes when its answer is closed)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection, _ in idle:
            connection.close()

    def open(self, request: urllib.request.Request, timeout: float) -> Any:
        if self._origin_of(request.full_url) != (self.scheme, self.host, self.port):
            raise OriginRefused(f"{_origin(request.full_url)} is not the base URL's origin {_origin(self.url)}")
        if self._proxied:
            return self._fallback.open(request, timeout=timeout)
        headers = {"User-Agent": USER_AGENT, **dict(request.header_items())}
        for attempt in (1, 2):
            connection, reused = self._take(timeout)
            try:
                if connection.sock is None:
                    connection.connect()
            except BaseException:
                connection.close()
                raise
            try:
                connection.request(request.get_method(), request.selector, body=request.data, headers=headers)
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                connection.close()
                if reused and attempt == 1:
                    with self._lock:
                        self.reconnects += 1
                    continue
                raise
            except BaseException:
                connection.close()
                raise
            break
        try:
            response = connection.getresponse()
        except BaseException:
            connection.close()
            raise
        answer = _PooledResponse(response, connection, self)
        if not 200 <= response.status < 300:
            raise urllib.error.HTTPError(request.full_url, response.status, response.reason, response.headers, answer)
        return answer

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}" + (f":{self.port}" if self.port else "")

    def _new_connection(self, scheme: str, host: str, port: int | None, timeout: float) -> http.client.HTTPConnection:
        if scheme == "https":
            # The context urllib's HTTPSHandler uses by default: system CAs (and SSL_CERT_FILE), hostname checked.
            with self._lock:
                if self._tls is None:
                    self._tls = ssl.create_default_context()
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=self._tls)
        return http.client.HTTPConnection(host, port, timeout=timeout)


def _drain(response: http.client.HTTPResponse, sock: Any) -> bool:
    """Read what is left of ``response`` within the drain budget; whether it ended (its connection is reusable)."""
    deadline, left = time.monotonic() + DRAIN_TIMEOUT_S, DRAIN_BYTES
    try:
        while not response.isclosed():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or left <= 0:
                return False
            sock.settimeout(remaining)
            if response.chunked:  # what has come, up to the last chunk, whose reading closes the response
                chunk = response.read1(min(left, READ_BYTES))
            elif response.length is not None and response.length <= left:  # exactly the rest, then closed
                chunk = response.read(response.length)
            else:
                return False
            if not chunk and not response.isclosed():
                return False
            left -= len(chunk)
    except (OSError, http.client.HTTPException, ValueError):
        return False
    return True


def _still_open(connection: http.client.HTTPConnection) -> bool:
    """An idle connection is usable when nothing is waiting to be read: a server that closed it (its idle
    timeout) makes it readable (EOF), and one that sent something unasked has broken the exchange."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable = _readable(sock)
    except (OSError, ValueError):
        return False
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    return not readable


def _readable(sock: Any) -> bool:
    """Whether ``sock`` has something to read (or EOF, or an error) now. ``select.select`` refuses a file
    descriptor of 1024 or more (FD_SETSIZE: ValueError), which a process with many files open reaches; poll
    has no such limit (Python docs, library/select)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(0))


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (never its path or query, which may hold a signature), for a message."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return excerpt(f"{parts.scheme or '?'}://{host}{port}", 200)


def _redirect_info(status: int, base_url: str, location: str | None) -> ErrorInfo:
    target = _origin(urljoin(base_url + "/", location)) if location else "no Location"
    message = (
        f"the endpoint answered with a redirect to {target} (base URL origin {_origin(base_url)}); refused, not "
        "followed: the bearer token is only sent to the base URL's origin, over https. Pass the stack's "
        "OpenAiBaseUrl output as it is"
    )
    return ErrorInfo(code=f"HTTP{status}", message=message, transient=False)


def check_base_url(url: str) -> str:
    """``url`` without a trailing ``/``; ``ValueError`` unless it is https (or http to this machine).

    A bearer token sent over plain HTTP could be read on the way: only a local test server gets one that way.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL (expected the stack's OpenAiBaseUrl output)")
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
        raise ValueError(f"{url!r}: the bearer token is only sent over https (http only to 127.0.0.1/localhost)")
    # An empty query or fragment ("…/v1?") parses as none (urlsplit), yet "/chat/completions" appended would go
    # after the "?": the marks themselves are refused.
    if parts.query or parts.fragment or parts.username or parts.password or "?" in url or "#" in url:
        raise ValueError(f"{url!r}: a base URL has no query, fragment or user info")
    return url.rstrip("/")


def _http_error_info(status: int, body: bytes) -> ErrorInfo:
    """An HTTP error answer, classified as :func:`endpoint_client.errors.classify` does SageMaker's."""
    text = excerpt(body, BODY_EXCERPT_BYTES)
    if status in (401, 403):
        message = (
            "the bearer token was refused: it is missing, expired (12 hours at most) or lacks "
            "sagemaker:CallWithBearerToken / sagemaker:InvokeEndpoint"
        )
        return ErrorInfo(code=f"HTTP{status}", message=message, transient=False, body=text)
    # No ``status``: on this path an error may be SageMaker's or the container's (passed through as it is).
    transient = status >= 500 or status == 429
    return ErrorInfo(code=f"HTTP{status}", message="", transient=transient, body=text)


class OpenAiEndpoint:
    """One endpoint's (or component's) OpenAI-compatible base URL and the bearer token to call it with."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 300.0) -> None:
        self.base_url = check_base_url(base_url)
        self._token = token
        self.timeout_s = timeout_s
        self._pool = ConnectionPool(self.base_url, fallback=bearer_opener())
        self._opener: Any = self._pool

    @property
    def connections_opened(self) -> int:
        """Connections made so far (reused ones counted once)."""
        return self._pool.opened

    def close(self) -> None:
        """Close the idle connections this endpoint keeps."""
        self._pool.close()

    def __repr__(self) -> str:  # never the token
        return f"OpenAiEndpoint({self.base_url!r})"

    def _scrub(self, text: str | None) -> str | None:
        """``text`` (an excerpt of what the server sent, perhaps cut with "…") without the token, whole or cut."""
        if not text:
            return text
        tail = "…" if text.endswith("…") else ""
        core = text[: -len(tail)] if tail else text
        return redact(core.encode("utf-8"), self._token).decode("utf-8", errors="replace") + tail

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _open(self, body: Mapping[str, Any], accept: str, timeout_s: float | None = None) -> http.client.HTTPResponse:
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode("utf-8"),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Accept": accept,
                "Authorization": f"Bearer {self._token}",
            },
        )
        try:
            return self._opener.open(request, timeout=self.timeout_s if timeout_s is None else timeout_s)
        except urllib.error.HTTPError as e:
            with e:
                if 300 <= e.code < 400:
                    raise InvocationError(_redirect_info(e.code, self.base_url, e.headers.get("Location"))) from None
                raw = e.read(ERROR_BODY_BYTES) if e.fp is not None else b""
            # The token out of the body before its excerpt is cut: a token across the cut would leave its start.
            raise InvocationError(_http_error_info(e.code, redact(raw, self._token))) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                info = ErrorInfo(code="TimeoutError", message=excerpt(str(reason) or "timed out"), transient=True)
                raise InvocationError(info) from None
            raise InvocationError(
                ErrorInfo(code="ConnectionError", message=excerpt(str(reason)), transient=True)
            ) from None

    def stream_chat(
        self,
        body: Mapping[str, Any],
        *,
        on_delta: Callable[[Delta], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        stream_format: str = "sse",
        max_line_bytes: int = MAX_LINE_BYTES,
        max_event_bytes: int = MAX_EVENT_BYTES,
        max_stream_bytes: int = MAX_STREAM_BYTES,
        deadline: float | None = None,
    ) -> InvocationResult:
        """As :func:`endpoint_client.runtime.stream_chat`, over ``<base>/chat/completions`` (``stream: true``).

        ``deadline`` (a time on ``clock``): the whole answer is due by then, else an :class:`InvocationError`
        of code ``RequestTimedOut``. It is checked after every read and every event, whatever the event (a
        usage-only, role-only or comment event counts), and each read waits at most until it (and at most
        ``timeout_s``): the call ends within about the deadline plus one event's parsing.
        """
        started = clock()
        answer = _Accumulator(started, clock, on_delta)
        decoder = new_decoder(stream_format, max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes)
        budget = ByteBudget(max_stream_bytes)
        response = None
        read_whole = False

        def time_left() -> float | None:
            """Seconds to the deadline, or None without one; RequestTimedOut once it has passed."""
            if deadline is None:
                return None
            left = deadline - clock()
            if left <= 0:
                raise _DeadlinePassed
            return left

        def read_timeout() -> float:
            left = time_left()
            return self.timeout_s if left is None else min(self.timeout_s, left)

        try:
            response = self._open(body, "text/event-stream", timeout_s=read_timeout())
            set_timeout = getattr(response, "set_read_timeout", None)
            while not decoder.done:
                if set_timeout is not None and deadline is not None:
                    set_timeout(read_timeout())
                chunk = response.read1(READ_BYTES)
                if not chunk:
                    break
                budget.take(len(chunk))
                for event in decoder.feed(chunk):
                    answer.add(event.data)
                    time_left()
                time_left()
            for event in decoder.close():
                answer.add(event.data)
            # The end of the answer, before its connection is read to the end and handed back to the pool.
            latency_s = clock() - started
            read_whole = True
        except (InvocationError, KeyboardInterrupt):
            if deadline is not None and clock() >= deadline and _is_timeout(sys.exc_info()[1]):
                raise InvocationError(_deadline_info(clock() - started)) from None
            raise
        except _DeadlinePassed:
            raise InvocationError(_deadline_info(clock() - started)) from None
        except StreamLimitExceeded as e:
            raise InvocationError(ErrorInfo(code="StreamLimitExceeded", message=str(e), transient=False)) from None
        except MalformedResponse as e:
            info = ErrorInfo(
                code="MalformedResponse",
                message=self._scrub(str(e)),
                transient=False,
                body=self._scrub(e.excerpt),
            )
            raise InvocationError(info) from None
        except (TimeoutError, OSError, http.client.HTTPException) as e:
            if deadline is not None and clock() >= deadline and isinstance(e, TimeoutError):
                raise InvocationError(_deadline_info(clock() - started)) from None
            info = ErrorInfo(code=type(e).__name__, message=excerpt(str(e)), transient=True)
            raise InvocationError(info) from None
        except Exception as e:
            info = ErrorInfo(code=type(e).__name__, message=self._scrub(excerpt(str(e))), transient=False)
            raise InvocationError(info) from e
        finally:
            if response is not None:
                # An answer left midway (an error, a timeout, a stop) may go on for long: its connection is closed.
                (response.close if read_whole else getattr(response, "abandon", response.close))()
        return answer.result(latency_s=latency_s, done=decoder.done)

    def invoke_chat(
        self, body: Mapping[str, Any], *, clock: Callable[[], float] = time.monotonic, max_bytes: int = MAX_ANSWER_BYTES
    ) -> InvocationResult:
        """One non-streamed chat completion; an answer over ``max_bytes`` (6 MiB) is refused, not buffered."""
        started = clock()
        try:
            with self._open(body, "application/json") as response:
                raw = read_capped(response, max_bytes)
            completion = parse_completion(raw)
        except InvocationError:
            raise
        except StreamLimitExceeded as e:
            raise InvocationError(ErrorInfo(code="StreamLimitExceeded", message=str(e), transient=False)) from None
        except MalformedResponse as e:
            info = ErrorInfo(
                code="MalformedResponse",
                message=self._scrub(str(e)),
                transient=False,
                body=self._scrub(e.excerpt),
            )
            raise InvocationError(info) from None
        except (OSError, http.client.HTTPException) as e:
            raise InvocationError(ErrorInfo(code=type(e).__name__, message=excerpt(str(e)), transient=True)) from None
        return InvocationResult.of_completion(completion, clock() - started)


class _DeadlinePassed(Exception):
    """A request's deadline passed while its answer was still coming."""


def _deadline_info(elapsed_s: float) -> ErrorInfo:
    return ErrorInfo(
        code="RequestTimedOut", message=f"no complete answer by the deadline ({elapsed_s:.3f} s)", transient=True
    )


def _is_timeout(error: BaseException | None) -> bool:
    return isinstance(error, InvocationError) and error.info.code == "TimeoutError"


def redact(raw: bytes, secret: str) -> bytes:
    """``raw`` with every ``secret`` replaced, and with a start of it at the very end (a body read up to a
    limit may end inside it) replaced too."""
    if not secret:
        return raw
    token = secret.encode("utf-8")
    raw = raw.replace(token, b"[redacted]")
    for size in range(len(token) - 1, 3, -1):
        if raw.endswith(token[:size]):
            return raw[:-size] + b"[redacted]"
    return raw


def token_from_env(environ: Mapping[str, str], name: str) -> str:
    """The bearer token in environment variable ``name``; ``ValueError`` (naming the variable, never the value)."""
    token = environ.get(name, "").strip()
    if not token:
        raise ValueError(
            f"no bearer token in ${name}: set it to a token from the SageMaker Python SDK, e.g. "
            f"{name}=\"$(python -c 'from sagemaker.core.token_generator import generate_token; "
            f'print(generate_token(region="us-east-1"))\')"'
        )
    if any(c in token for c in "\r\n\0") or not token.isascii():
        raise ValueError(f"${name} holds characters a bearer token cannot have (a line break, NUL or non-ASCII)")
    return token
