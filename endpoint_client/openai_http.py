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
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

from .chat import Delta, MalformedResponse, excerpt, parse_completion
from .errors import BODY_EXCERPT_BYTES, ErrorInfo, InvocationError, StreamLimitExceeded
from .runtime import ByteBudget, InvocationResult, _Accumulator, read_capped
from .sse import MAX_ANSWER_BYTES, MAX_EVENT_BYTES, MAX_LINE_BYTES, MAX_STREAM_BYTES
from .streams import new_decoder

READ_BYTES = 65536
ERROR_BODY_BYTES = 4096  # of an error answer, read at most (its excerpt is shorter still)
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_SCHEMES = ("http", "https")


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
        self._opener = bearer_opener()

    def __repr__(self) -> str:  # never the token
        return f"OpenAiEndpoint({self.base_url!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _open(self, body: Mapping[str, Any], accept: str) -> http.client.HTTPResponse:
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
            return self._opener.open(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as e:
            with e:
                if 300 <= e.code < 400:
                    raise InvocationError(_redirect_info(e.code, self.base_url, e.headers.get("Location"))) from None
                raw = e.read(ERROR_BODY_BYTES) if e.fp is not None else b""
            raise InvocationError(_http_error_info(e.code, raw)) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
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
    ) -> InvocationResult:
        """As :func:`endpoint_client.runtime.stream_chat`, over ``<base>/chat/completions`` (``stream: true``)."""
        started = clock()
        answer = _Accumulator(started, clock, on_delta)
        decoder = new_decoder(stream_format, max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes)
        budget = ByteBudget(max_stream_bytes)
        response = None
        try:
            response = self._open(body, "text/event-stream")
            while not decoder.done:
                chunk = response.read1(READ_BYTES)
                if not chunk:
                    break
                budget.take(len(chunk))
                for event in decoder.feed(chunk):
                    answer.add(event.data)
            for event in decoder.close():
                answer.add(event.data)
        except (InvocationError, KeyboardInterrupt):
            raise
        except StreamLimitExceeded as e:
            raise InvocationError(ErrorInfo(code="StreamLimitExceeded", message=str(e), transient=False)) from None
        except MalformedResponse as e:
            info = ErrorInfo(code="MalformedResponse", message=str(e), transient=False, body=e.excerpt)
            raise InvocationError(info) from None
        except (TimeoutError, OSError, http.client.HTTPException) as e:
            info = ErrorInfo(code=type(e).__name__, message=excerpt(str(e)), transient=True)
            raise InvocationError(info) from None
        except Exception as e:
            raise InvocationError(ErrorInfo(code=type(e).__name__, message=excerpt(str(e)), transient=False)) from e
        finally:
            if response is not None:
                response.close()
        return answer.result(latency_s=clock() - started, done=decoder.done)

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
            info = ErrorInfo(code="MalformedResponse", message=str(e), transient=False, body=e.excerpt)
            raise InvocationError(info) from None
        except (OSError, http.client.HTTPException) as e:
            raise InvocationError(ErrorInfo(code=type(e).__name__, message=excerpt(str(e)), transient=True)) from None
        return InvocationResult.of_completion(completion, clock() - started)


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
