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


# ---- each way a call can fail, as the caller reads it (no server: an opener that hands out a scripted answer) ----

from endpoint_client import openai_http  # noqa: E402
from endpoint_client.chat import excerpt  # noqa: E402


class _Answer:
    """A response handing out ``parts`` one read at a time, then raising ``fail`` (or ending)."""

    def __init__(self, parts: list[bytes], fail: BaseException | None = None) -> None:
        self.parts, self.fail, self.closed = list(parts), fail, False

    def read1(self, size: int = -1) -> bytes:
        if self.parts:
            return self.parts.pop(0)
        if self.fail is not None:
            raise self.fail
        return b""

    def read(self, size: int = -1) -> bytes:
        if self.fail is not None and not self.parts:
            raise self.fail
        data, self.parts = b"".join(self.parts), []
        if self.fail is not None:
            raise self.fail
        return data

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> _Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Opener:
    def __init__(self, answer: _Answer) -> None:
        self.answer, self.requests = answer, []

    def open(self, request, timeout=None):
        self.requests.append(request)
        self.timeouts = [*getattr(self, "timeouts", []), timeout]
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def _answering(answer: _Answer) -> tuple[OpenAiEndpoint, _Opener]:
    endpoint = OpenAiEndpoint("https://runtime.example/endpoints/e/openai/v1", TOKEN)
    endpoint._opener = opener = _Opener(answer)  # type: ignore[assignment]
    return endpoint, opener


def _clock(*ticks: float):
    values = iter(ticks)
    return lambda: next(values)


def test_each_call_asks_for_its_own_media_type_and_latency_is_end_minus_start():
    endpoint, opener = _answering(_Answer([STREAM]))
    streamed = endpoint.stream_chat(build_chat_request("hi", stream=True), clock=_clock(10.0, 10.5, 12.5))
    assert opener.requests[-1].get_header("Accept") == "text/event-stream"
    assert streamed.content == "stolen" and streamed.done and streamed.latency_s == 2.5
    endpoint, opener = _answering(_Answer([COMPLETION]))
    whole = endpoint.invoke_chat(build_chat_request("hi", stream=False), clock=_clock(10.0, 12.5))
    assert opener.requests[-1].get_header("Accept") == "application/json"
    assert whole.content == "stolen" and whole.latency_s == 2.5


def test_a_stream_in_json_lines_is_read_with_that_decoder_its_last_line_at_the_end():
    lines = b'{"choices":[{"delta":{"content":"a"}}]}\n{"choices":[{"delta":{"content":"b"}}]}'
    endpoint, _ = _answering(_Answer([lines]))
    result = endpoint.stream_chat(build_chat_request("hi", stream=True), stream_format="jsonlines")
    assert result.content == "ab"  # the last line, without its line end, comes from the decoder's close()


def test_a_stream_that_ends_without_done_keeps_what_came_and_says_so():
    endpoint, opener = _answering(_Answer([b'data: {"choices":[{"delta":{"content":"part"}}]}\n\n']))
    result = endpoint.stream_chat(build_chat_request("hi", stream=True))
    assert result is not None and result.content == "part" and result.done is False
    assert opener.answer.closed


def test_a_stream_over_its_cap_is_a_permanent_stream_limit_error():
    endpoint, opener = _answering(_Answer([STREAM]))
    with pytest.raises(InvocationError) as caught:
        endpoint.stream_chat(build_chat_request("hi", stream=True), max_stream_bytes=10)
    assert caught.value.info.code == "StreamLimitExceeded" and caught.value.info.transient is False
    assert opener.answer.closed


def test_a_malformed_stream_is_a_permanent_error_with_the_body_excerpt():
    endpoint, _ = _answering(_Answer([b"data: {not json\n\n"]))
    with pytest.raises(InvocationError) as caught:
        endpoint.stream_chat(build_chat_request("hi", stream=True))
    info = caught.value.info
    assert info.code == "MalformedResponse" and info.transient is False
    assert info.message and info.message != "None" and "{not json" in info.body


@pytest.mark.parametrize("fail", [ConnectionResetError("reset by peer"), TimeoutError("read timed out")])
def test_a_stream_dropped_midway_is_transient_named_by_its_error(fail):
    endpoint, _ = _answering(_Answer([b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'], fail))
    with pytest.raises(InvocationError) as caught:
        endpoint.stream_chat(build_chat_request("hi", stream=True))
    assert caught.value.info == openai_http.ErrorInfo(
        code=type(fail).__name__, message=excerpt(str(fail)), transient=True
    )


def test_a_stream_dropped_by_http_is_transient_too():
    fail = http.client.IncompleteRead(b"abc", 10)
    endpoint, _ = _answering(_Answer([], fail))
    with pytest.raises(InvocationError) as caught:
        endpoint.stream_chat(build_chat_request("hi", stream=True))
    assert caught.value.info == openai_http.ErrorInfo(code="IncompleteRead", message=excerpt(str(fail)), transient=True)


def test_a_whole_answer_over_its_cap_is_a_permanent_stream_limit_error():
    endpoint, _ = _answering(_Answer([COMPLETION]))
    with pytest.raises(InvocationError) as caught:
        endpoint.invoke_chat(build_chat_request("hi", stream=False), max_bytes=10)
    assert caught.value.info.code == "StreamLimitExceeded" and caught.value.info.transient is False


def test_a_whole_answer_that_is_no_completion_is_a_permanent_error_with_the_body_excerpt():
    endpoint, _ = _answering(_Answer([b'{"no": "choices"}']))
    with pytest.raises(InvocationError) as caught:
        endpoint.invoke_chat(build_chat_request("hi", stream=False))
    from endpoint_client.chat import MalformedResponse, parse_completion

    with pytest.raises(MalformedResponse) as direct:
        parse_completion(b'{"no": "choices"}')
    assert caught.value.info == openai_http.ErrorInfo(
        code="MalformedResponse", message=str(direct.value), transient=False, body=direct.value.excerpt
    )
    assert direct.value.excerpt


@pytest.mark.parametrize("fail", [ConnectionResetError("reset by peer"), http.client.IncompleteRead(b"ab", 5)])
def test_a_whole_answer_cut_off_is_transient_named_by_its_error(fail):
    endpoint, _ = _answering(_Answer([], fail))
    with pytest.raises(InvocationError) as caught:
        endpoint.invoke_chat(build_chat_request("hi", stream=False))
    assert caught.value.info == openai_http.ErrorInfo(
        code=type(fail).__name__, message=excerpt(str(fail)), transient=True
    )


# ---- the messages themselves ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://h.example:8443/openai/v1?X-Amz-Signature=s", "https://h.example:8443"),
        ("https://h.example/openai/v1", "https://h.example"),
        ("https://h.example:99999/x", "https://h.example"),  # a port urllib cannot read is left out
        ("/relative/only", "?://?"),
        ("https://" + "a" * 300 + "/x", excerpt("https://" + "a" * 300, 200)),
    ],
)
def test_an_origin_is_scheme_host_and_port_only(url, origin):
    assert openai_http._origin(url) == origin
    assert len(openai_http._origin(url).encode()) <= 200 + len("…".encode())


def test_a_redirect_is_refused_with_both_origins_named():
    info = openai_http._redirect_info(302, "https://h.example/openai/v1", "https://evil.example:444/x?sig=1")
    assert info == openai_http.ErrorInfo(
        code="HTTP302",
        message=(
            "the endpoint answered with a redirect to https://evil.example:444 (base URL origin https://h.example); "
            "refused, not followed: the bearer token is only sent to the base URL's origin, over https. Pass the "
            "stack's OpenAiBaseUrl output as it is"
        ),
        transient=False,
    )
    assert openai_http._redirect_info(307, "https://h.example/v1", None).message.startswith(
        "the endpoint answered with a redirect to no Location (base URL origin https://h.example)"
    )


TOKEN_REFUSED = (
    "the bearer token was refused: it is missing, expired (12 hours at most) or lacks "
    "sagemaker:CallWithBearerToken / sagemaker:InvokeEndpoint"
)


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_token_is_permanent_and_says_why(status):
    body = b"x" * 400 + b"y" * 400
    info = openai_http._http_error_info(status, body)
    assert info == openai_http.ErrorInfo(
        code=f"HTTP{status}", message=TOKEN_REFUSED, transient=False, body=excerpt(body, 500)
    )


@pytest.mark.parametrize(
    ("status", "transient"),
    [
        (400, False),
        (402, False),
        (404, False),
        (428, False),
        (429, True),
        (499, False),
        (500, True),
        (501, True),
        (503, True),
    ],
)
def test_other_error_statuses_pass_the_body_through_transient_from_429_and_500(status, transient):
    body = b"z" * 800
    info = openai_http._http_error_info(status, body)
    assert info == openai_http.ErrorInfo(code=f"HTTP{status}", message="", transient=transient, body=excerpt(body, 500))


@pytest.mark.parametrize("bad", ["tok\ren", "tok\nen", "tok\0en", "tokén"])
def test_a_token_with_a_line_break_nul_or_non_ascii_is_refused(bad):
    from endpoint_client import token_from_env

    with pytest.raises(ValueError, match="holds characters a bearer token cannot have"):
        token_from_env({"T": bad}, "T")


@pytest.mark.parametrize("fine", ["XX", "tokXXen", "a.b-c_d~e+f/g="])
def test_a_token_of_other_printable_ascii_is_taken(fine):
    from endpoint_client import token_from_env

    assert token_from_env({"T": f"  {fine} "}, "T") == fine


def test_the_request_is_a_json_post_with_the_token_and_the_endpoints_timeout():
    with Recorder(_target_reply) as origin:
        OpenAiEndpoint(f"{origin.origin}/openai/v1/", TOKEN).invoke_chat(build_chat_request("hi", stream=False))
        (sent,) = origin.requests
    assert sent["path"] == "/openai/v1/chat/completions"
    assert (sent["content-type"], sent["accept"], sent["authorization"]) == (
        "application/json",
        "application/json",
        f"Bearer {TOKEN}",
    )
    endpoint, opener = _answering(_Answer([COMPLETION]))
    assert endpoint.timeout_s == 300.0
    endpoint.invoke_chat(build_chat_request("hi", stream=False))
    assert opener.requests[-1].get_method() == "POST" and opener.timeouts == [300.0]
    endpoint.timeout_s = 7.5
    opener.answer = _Answer([STREAM])
    endpoint.stream_chat(build_chat_request("hi", stream=True))
    assert opener.timeouts == [300.0, 7.5]


@pytest.mark.parametrize("status", [300, 399])
def test_every_3xx_is_a_refused_redirect(status):
    with Recorder(lambda path: (status, {"Location": "https://elsewhere.example/x"}, b"")) as origin:
        endpoint = OpenAiEndpoint(f"{origin.origin}/openai/v1", TOKEN, timeout_s=10)
        with pytest.raises(InvocationError) as caught:
            endpoint.invoke_chat(build_chat_request("hi", stream=False))
    assert caught.value.info.code == f"HTTP{status}"
    assert "redirect to https://elsewhere.example (base URL origin" in caught.value.info.message


@pytest.mark.parametrize("status", [400, 404])
def test_a_4xx_is_an_error_answer_with_its_body_not_a_redirect(status):
    body = b" " * 5000 + b"the tail"  # past the 4,096 bytes read of an error body: never read
    with Recorder(lambda path: (status, {"Location": "https://elsewhere.example/x"}, body)) as origin:
        endpoint = OpenAiEndpoint(f"{origin.origin}/openai/v1", TOKEN, timeout_s=10)
        with pytest.raises(InvocationError) as caught:
            endpoint.invoke_chat(build_chat_request("hi", stream=False))
    assert caught.value.info == openai_http.ErrorInfo(code=f"HTTP{status}", message="", transient=False, body="")


def test_an_error_answer_without_a_body_has_an_empty_excerpt():
    import email.message
    import urllib.error

    error = urllib.error.HTTPError("https://runtime.example/x", 502, "Bad Gateway", email.message.Message(), None)
    endpoint, _ = _answering(error)  # type: ignore[arg-type]
    with pytest.raises(InvocationError) as caught:
        endpoint.invoke_chat(build_chat_request("hi", stream=False))
    assert caught.value.info == openai_http.ErrorInfo(code="HTTP502", message="", transient=True, body="")


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (__import__("urllib.error").error.URLError("no route to host"), "no route to host"),
        (ConnectionRefusedError("connection refused"), "connection refused"),
    ],
)
def test_a_connection_that_never_opens_is_transient_with_its_reason(error, message):
    endpoint, _ = _answering(error)  # type: ignore[arg-type]
    for call in (endpoint.invoke_chat, endpoint.stream_chat):
        with pytest.raises(InvocationError) as caught:
            call(build_chat_request("hi", stream=call == endpoint.stream_chat))
        assert caught.value.info == openai_http.ErrorInfo(code="ConnectionError", message=message, transient=True)


def test_anything_else_a_stream_raises_is_a_permanent_error_named_by_its_type():
    fail = LookupError("odd    thing\nhappened")
    endpoint, _ = _answering(_Answer([], fail))
    with pytest.raises(InvocationError) as caught:
        endpoint.stream_chat(build_chat_request("hi", stream=True))
    assert caught.value.info == openai_http.ErrorInfo(code="LookupError", message="odd thing happened", transient=False)
    assert caught.value.__cause__ is fail


def test_the_opener_takes_only_http_and_https_proxies(monkeypatch):
    import urllib.request

    proxies = {"https": "http://proxy:3128", "http": "http://proxy:3128", "ftp": "ftp://x", "no": "localhost"}
    monkeypatch.setattr(urllib.request, "getproxies", lambda: dict(proxies))
    (handler,) = [h for h in openai_http.bearer_opener().handlers if isinstance(h, urllib.request.ProxyHandler)]
    assert handler.proxies == {"https": "http://proxy:3128", "http": "http://proxy:3128"}


@pytest.mark.parametrize(
    "url", ["https://h.example/v1?x=1", "https://h.example/v1#f", "https://h.example/v1?", "https://h.example/v1#"]
)
def test_a_base_url_with_a_query_or_fragment_is_refused(url):
    with pytest.raises(ValueError, match="a base URL has no query, fragment or user info"):
        check_base_url(url)


@pytest.mark.parametrize(
    ("url", "kept"),
    [("https://h/v1/", "https://h/v1"), ("https://h/v1//", "https://h/v1"), ("https://h/aXX/", "https://h/aXX")],
)
def test_trailing_slashes_are_dropped_and_nothing_else(url, kept):
    assert check_base_url(url) == kept
