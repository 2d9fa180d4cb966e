"""Hostile streams (issue 23, item 5): what a broken or hostile container can send the stream decoders.

Unit level, property-based: any bytes cut anywhere decode the same as in one piece (boundaries inside a
UTF-8 sequence, between ``\\r`` and ``\\n``); a line or event over its cap is refused exactly when a
whole-stream reference says so, whatever the chunking. Timing and memory: a 2 MB line in 1 KiB parts decodes
in linear time, and an endless line is refused once the cap is passed, with memory bounded by the cap.

End to end, over real HTTP: a local SageMaker runtime (real AWS event-stream framing, read by botocore) sends
an endless line or hostile JSON to ``stream_chat``, ``python -m llmops.invoke``, ``python -m llmops.bench``,
the playground and the smoke-test handler; each reports one clean error (the smoke test as a failure reason
under 3000 bytes), never a traceback, and stops reading. Generated inputs are bounded (``max_examples``);
``TALLY`` counts the hostile inputs tried and refused per area (printed at the end with ``pytest -s``).
"""

from __future__ import annotations

import http.client
import io
import itertools
import json
import re
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from endpoint_client import (
    MAX_EVENT_BYTES,
    MAX_LINE_BYTES,
    InvocationError,
    JsonLinesDecoder,
    SseDecoder,
    SseEvent,
    StreamLimitExceeded,
    new_decoder,
    stream_chat,
)
from tests.fakes.fake_runtime import client, load_handler, payload_part
from tests.hostile.tally import Tally, report_fixture

ENDPOINT = "llm-endpoint-hostile"
MiB = 2**20
PART = 64 * 1024  # PayloadPart size the hostile runtime sends
TALLY = Tally()  # "<area> tried" / "<area> refused"


_report_tally = report_fixture(TALLY)


def tally(area: str, refused: bool) -> None:
    TALLY.record(area, refused)


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in itertools.pairwise([0, *points, len(data)])]


def outcome(decoder: SseDecoder | JsonLinesDecoder, parts: list[bytes]) -> tuple:
    """(events, done, truncated, refused); events are not compared once refused (the feed that failed lost its own)."""
    events: list[SseEvent] = []
    try:
        for part in parts:
            events += decoder.feed(part)
        events += decoder.close()
    except StreamLimitExceeded:
        return (None, None, None, True)
    return (events, decoder.done, decoder.truncated, False)


# --- property-based: caps against a whole-stream reference ------------------------------------------


def sse_reference(data: bytes, max_line: int, max_event: int) -> tuple:
    """The WHATWG event-stream rules applied to the whole stream at once, with the caps (valid UTF-8 only)."""
    pieces = re.split(r"\r\n|\r|\n", data.decode("utf-8"))
    complete, rest = pieces[:-1], pieces[-1]
    events, values, size, kind, last_id = [], [], 0, "", ""
    for number, line in enumerate(complete):
        if len(line.encode()) > max_line:
            return (None, None, None, True)
        line = line.removeprefix("\ufeff") if number == 0 else line
        if not line:
            if values:
                text = "\n".join(values)
                if text == "[DONE]":
                    return (events, True, False, False)
                events.append(SseEvent(text, kind or "message", last_id))
            values, size, kind = [], 0, ""
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        value = value[1:] if colon and value.startswith(" ") else value
        if name == "data":
            size += len(value.encode()) + (1 if values else 0)
            if size > max_event:
                return (None, None, None, True)
            values.append(value)
        elif name == "event":
            kind = value
        elif name == "id" and "\0" not in value:
            last_id = value
    if len(rest.encode()) > max_line:
        return (None, None, None, True)
    if rest:
        return (events, False, True, False)
    if values and "\n".join(values) != "[DONE]":
        events.append(SseEvent("\n".join(values), kind or "message", last_id))
    elif values:
        return (events, True, False, False)
    return (events, False, False, False)


def jsonlines_reference(data: bytes, max_line: int) -> tuple:
    *complete, rest = data.split(b"\n")
    if any(len(line) > max_line for line in [*complete, rest]):
        return (None, None, None, True)
    text = [line.decode().removeprefix("\ufeff") if i == 0 else line.decode() for i, line in enumerate(complete)]
    events = [SseEvent(line.strip()) for line in text if line.strip()]
    rest_text = rest.decode().removeprefix("\ufeff") if not complete else rest.decode()
    if rest_text.strip():
        try:
            json.loads(rest_text.strip())
        except json.JSONDecodeError:
            return (events, False, True, False)
        events.append(SseEvent(rest_text.strip()))
    return (events, True, False, False)


# Lines of every length around the caps drawn below, multi-byte characters included.
sse_lines = st.one_of(
    st.builds(lambda v: f"data: {v}", st.text(alphabet="ab漢🪣 :", max_size=40)),
    st.builds(lambda v: f"data:{v}", st.text(alphabet="x漢", max_size=40)),
    st.sampled_from(["", "", ": keep-alive", "event: delta", "id: 7", "retry: 5", "data: [DONE]", "\ufeffdata: b"]),
    st.text(alphabet="xy:🪣", max_size=40),
)
line_ends = st.sampled_from(["\n", "\r\n", "\r"])
cuts = st.lists(st.integers(0, 10_000), max_size=30)
caps = st.integers(1, 48)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(sse_lines, line_ends), max_size=12), cuts, caps, caps)
def test_sse_caps_refuse_exactly_what_the_reference_refuses_however_the_stream_is_cut(lines, cuts, max_line, max_event):
    text = ""
    for line, end in lines:
        if text.endswith("\r") and end == "\n":
            end = "\r\n"  # "\r" then "\n" reads as one line end
        text += line + end
    data = text.encode()
    expected = sse_reference(data, max_line, max_event)
    decoder = SseDecoder(max_line_bytes=max_line, max_event_bytes=max_event)
    assert outcome(decoder, cut(data, cuts)) == expected
    tally("sse streams vs reference", expected[3])


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet='{}"a漢🪣 \r\ufeff', max_size=40), st.just("\n")), max_size=8), cuts, caps)
def test_jsonlines_cap_refuses_exactly_what_the_reference_refuses(lines, cuts, max_line):
    data = "".join(line + end for line, end in lines).encode()
    expected = jsonlines_reference(data, max_line)
    assert outcome(JsonLinesDecoder(max_line_bytes=max_line), cut(data, cuts)) == expected
    tally("jsonlines streams vs reference", expected[3])


# Bytes a hostile stream is made of: line ends alone and paired, broken and whole UTF-8, BOM pieces, NUL.
HOSTILE_PIECES = [b"\r", b"\n", b"\r\n", b"data:", b"data: ", b" ", b":", b"x", b"[DONE]", b"id:\0", b"event:e"]
HOSTILE_PIECES += [b"{}", b"\xef", b"\xbb\xbf", b"\xef\xbb\xbf", b"\xf0\x9f", b"\xaa\xa3"]
HOSTILE_PIECES += [b"\x80", b"\xff", b"\xc3", b"\xa9", b"\0"]
hostile_bytes = st.lists(st.sampled_from(HOSTILE_PIECES), max_size=40).map(b"".join)


@settings(max_examples=200, deadline=None)
@given(hostile_bytes, cuts, st.sampled_from(["sse", "jsonlines"]), st.integers(1, 24))
def test_any_bytes_cut_anywhere_decode_as_in_one_piece(data, cuts, stream_format, cap):
    whole = outcome(new_decoder(stream_format, max_line_bytes=cap, max_event_bytes=cap), [data])
    parts = outcome(new_decoder(stream_format, max_line_bytes=cap, max_event_bytes=cap), cut(data, cuts))
    assert parts == whole
    tally(f"{stream_format} arbitrary bytes", whole[3])


def test_a_line_of_exactly_the_cap_passes_and_one_byte_more_is_refused():
    for make in (SseDecoder, JsonLinesDecoder):
        assert len(outcome(make(max_line_bytes=10), [b"data:", b"12345\n\n"])[0]) == 1
        assert outcome(make(max_line_bytes=10), [b"data:", b"123456\n\n"])[3]
    # An event's data: values and the "\n" joining them, not the "data: " prefixes.
    assert outcome(SseDecoder(max_event_bytes=7), [b"data: abc\ndata: def\n\n"])[0] == [SseEvent("abc\ndef")]
    assert outcome(SseDecoder(max_event_bytes=6), [b"data: abc\ndata: def\n\n"])[3]


def test_caps_must_be_positive_whole_numbers():
    for bad in (0, -1, 1.5, True, "16"):
        with pytest.raises(ValueError, match="positive whole number"):
            SseDecoder(max_line_bytes=bad)
        with pytest.raises(ValueError, match="positive whole number"):
            new_decoder("jsonlines", max_event_bytes=bad)


def test_after_a_refusal_every_feed_is_refused_again():
    decoder = SseDecoder(max_line_bytes=4)
    with pytest.raises(StreamLimitExceeded) as first:
        decoder.feed(b"data: too long")
    with pytest.raises(StreamLimitExceeded) as again:
        decoder.feed(b"\n\n")
    assert again.value is first.value and decoder.close() == []
    assert (first.value.what, first.value.limit, first.value.parameter) == ("line", 4, "max_line_bytes")


# --- time and memory --------------------------------------------------------------------------------


def feed_timed(decoder, parts: Iterator[bytes], budget_s: float) -> float:
    """CPU seconds to feed ``parts`` and close; fails once ``budget_s`` is spent (a quadratic decoder).

    This thread's CPU time, not the wall clock: on a busy machine a long measure is preempted more often
    than a short one, which would skew the ratio below.
    """
    started = time.thread_time()
    for part in parts:
        decoder.feed(part)
        if time.thread_time() - started > budget_s:
            pytest.fail(f"over {budget_s} s: the decoder rescans what it already holds")
    decoder.close()
    return time.thread_time() - started


def kib_parts(data: bytes) -> Iterator[bytes]:
    return (data[offset : offset + 1024] for offset in range(0, len(data), 1024))


@pytest.mark.parametrize(("stream_format", "prefix"), [("sse", b"data: "), ("jsonlines", b"")])
def test_a_2_mb_line_in_1_kib_parts_decodes_in_linear_time(stream_format, prefix):
    line = prefix + b'{"choices": [{"delta": {"content": "' + b"a" * 2_000_000 + b'"}}]}\n\n'
    # Before the fix this took 22 s (every part rescanned the whole pending line); now about 10 ms.
    assert feed_timed(new_decoder(stream_format), kib_parts(line), budget_s=2.0) < 2.0
    # Linear: the parts of a line 16x as long take about 16x as long to take in (a rescan: 256x). The bound
    # leaves 4x for a busy machine. The same 1 KiB object fed again and again: only the decoder's work counts.
    part = b"a" * 1024

    def best(count: int) -> float:
        limit = (count + 1) * 1024
        decoders = [new_decoder(stream_format, max_line_bytes=limit, max_event_bytes=limit) for _ in range(5)]
        return min(feed_timed(d, itertools.repeat(part, count), budget_s=4.0) for d in decoders)

    short, long = best(1024), best(16 * 1024)
    assert long / short < 64, f"{short * 1000:.1f} ms for 1 MiB, {long * 1000:.1f} ms for 16 MiB"


def endless(head: bytes, filler: bytes) -> Iterator[bytes]:
    yield head
    while True:
        yield bytes(bytearray(filler))  # a new object each time, as botocore hands them over


@pytest.mark.parametrize(
    ("stream_format", "head", "filler", "what"),
    [
        ("sse", b"data: ", b"x" * PART, "line"),  # one line that never ends
        ("sse", b"", (b"data: " + b"x" * 1018 + b"\n") * 64, "event"),  # an event of data lines that never ends
        ("jsonlines", b'{"x": "', b"x" * PART, "line"),
    ],
)
def test_an_endless_line_or_event_is_refused_at_the_cap_with_bounded_memory(stream_format, head, filler, what):
    # Before the fix a 100 MiB event took 61 s and 514 MiB; now the default 16 MiB cap stops it early.
    decoder = new_decoder(stream_format)
    fed = 0
    tracemalloc.start()
    try:
        with pytest.raises(StreamLimitExceeded) as refused:
            for part in endless(head, filler):
                decoder.feed(part)
                fed += len(part)
                if fed > 40 * MiB:
                    pytest.fail("40 MiB fed and still not refused")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.what == what
    # Refused by the part that crossed the cap (an event's cap counts its data, not the "data: " prefixes).
    framing = 1025 / 1019 if what == "event" else 1
    assert fed <= MAX_EVENT_BYTES * framing + len(filler), fed
    assert peak < 2.5 * MAX_EVENT_BYTES, f"peak {peak / MiB:.0f} MiB"
    tally("endless line or event", True)


# --- over real HTTP: a hostile SageMaker runtime ------------------------------------------------------


class HostileRuntime:
    """A local ``sagemaker-runtime``: a correct non-streamed answer, and a streamed one scripted per test.

    ``stream`` yields the bytes of the streamed body; they go out in PayloadPart event-stream messages of
    at most 64 KiB, chunked, until it ends, the client hangs up, or ``max_bytes`` are out (so a client
    that never stops reading cannot hang the test). ``sent`` counts the body bytes written.
    """

    def __init__(self) -> None:
        self.stream: Callable[[], Iterator[bytes]] = lambda: iter([b"data: [DONE]\n\n"])
        self.max_bytes = MAX_LINE_BYTES + 8 * MiB
        self.sent = 0
        self.stream_calls = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith("/invocations"):
                    answer = {"choices": [{"message": {"content": "Buckets hold the sky"}, "finish_reason": "stop"}]}
                    data = json.dumps({**answer, "usage": {"completion_tokens": 4}}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                owner.stream_calls += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.amazon.eventstream")
                self.send_header("X-Amzn-SageMaker-Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for data in owner.stream():
                        for offset in range(0, len(data), PART):
                            message = payload_part(data[offset : offset + PART])
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(message), message))
                            owner.sent += min(PART, len(data) - offset)
                        if owner.sent >= owner.max_bytes:
                            break
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what a cap is for
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def script(self, stream: Callable[[], Iterator[bytes]]) -> None:
        self.stream, self.sent, self.stream_calls = stream, 0, 0


def endless_line(prefix: bytes = b"data: ") -> Callable[[], Iterator[bytes]]:
    return lambda: endless(prefix + b'{"choices": [{"delta": {"content": "', b"x" * MiB)


@pytest.fixture(scope="module")
def hostile():
    runtime = HostileRuntime()
    runtime.thread.start()
    yield runtime
    runtime.server.shutdown()
    runtime.server.server_close()


@pytest.fixture
def runtime(hostile):
    return client("sagemaker-runtime", hostile.url)


def assert_stopped_reading(hostile: HostileRuntime) -> None:
    # The client hung up soon after the cap, not after the 24 MiB the server would send.
    assert hostile.sent < hostile.max_bytes, hostile.sent


BODY = {"messages": [{"role": "user", "content": "Write a haiku about S3"}], "stream": True}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stream_format", ["sse", "jsonlines"])
def test_stream_chat_refuses_an_endless_line_as_a_permanent_error(hostile, runtime, stream_format):
    hostile.script(endless_line(b"data: " if stream_format == "sse" else b""))
    with pytest.raises(InvocationError) as error:
        stream_chat(runtime, ENDPOINT, BODY, stream_format=stream_format)
    assert error.value.info.code == "StreamLimitExceeded" and not error.value.transient
    assert "over 16 MiB (max_line_bytes=16777216)" in str(error.value)
    assert_stopped_reading(hostile)
    tally("over HTTP", True)


HOSTILE_JSON = [
    (b"[" * 100_000, "nested too deeply"),  # RecursionError in json.loads
    (b'{"choices": [{"delta": {"content": "x"}, "index": ' + b"9" * 5000 + b"}]}", "too many digits"),
    (b'{"choices": [{"delta": {"content": "x"}}]} trailing', "Extra data"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("event", "reason"), HOSTILE_JSON)
@pytest.mark.parametrize("stream_format", ["sse", "jsonlines"])
def test_hostile_json_in_a_stream_event_is_a_malformed_response(hostile, runtime, event, reason, stream_format):
    framed = b"data: " + event + b"\n\n" if stream_format == "sse" else event + b"\n"
    hostile.script(lambda: iter([framed]))
    with pytest.raises(InvocationError) as error:
        stream_chat(runtime, ENDPOINT, BODY, stream_format=stream_format)
    assert error.value.info.code == "MalformedResponse", error.value.info
    assert reason in str(error.value) and not error.value.transient
    tally("over HTTP", True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("engine", "prefix"), [("vllm", b"data: "), ("lmi", b"")])
def test_invoke_reports_the_cap_on_one_line(hostile, runtime, engine, prefix):
    from llmops.invoke import main

    hostile.script(endless_line(prefix))
    out, err = io.StringIO(), io.StringIO()
    code = main(["--endpoint", ENDPOINT, "--engine", engine, "hi"], runtime_client=runtime, stdout=out, stderr=err)
    assert code == 1
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "Traceback" not in err.getvalue(), err.getvalue()
    assert lines[0].startswith(f"error: invoking {ENDPOINT} failed: StreamLimitExceeded: the stream sent a line over")
    assert_stopped_reading(hostile)
    tally("over HTTP", True)


@pytest.mark.timeout(60)
def test_bench_counts_the_cap_as_an_error_kind(hostile, runtime):
    from llmops import bench

    hostile.script(endless_line())
    out, err = io.StringIO(), io.StringIO()
    args = ["--endpoint", ENDPOINT, "--concurrency", "1", "--requests", "1", "--input-tokens", "2", "--no-progress"]
    assert bench.main(args, runtime_client=runtime, stdout=out, stderr=err) == 1
    assert "errors at concurrency 1: StreamLimitExceeded 1" in out.getvalue()
    assert "Traceback" not in out.getvalue() + err.getvalue()
    assert_stopped_reading(hostile)
    tally("over HTTP", True)


@pytest.mark.timeout(60)
def test_the_playground_shows_the_cap_as_an_error_event(hostile, runtime):
    from llmops.playground import TOKEN_HEADER, Playground

    hostile.script(endless_line())
    log = io.StringIO()
    with Playground(runtime, ENDPOINT, port=0, log=log) as server:
        body = json.dumps({"id": "h1", "messages": [{"role": "user", "content": "hi"}]}).encode()
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        headers = {"Content-Type": "application/json", TOKEN_HEADER: server.secret, "Host": f"127.0.0.1:{server.port}"}
        connection.request("POST", "/api/chat", body, headers)
        stream = connection.getresponse().read().decode()
        connection.close()
    events = [json.loads(part[6:]) for part in stream.split("\n\n") if part.startswith("data: ")]
    assert events[-1]["type"] == "error" and not events[-1]["transient"]
    assert events[-1]["message"].startswith("StreamLimitExceeded: the stream sent a line over 16 MiB")
    assert "outcome=error code=StreamLimitExceeded" in log.getvalue()
    assert_stopped_reading(hostile)
    tally("over HTTP", True)


@pytest.mark.timeout(60)
def test_the_smoke_test_fails_with_a_short_reason_and_no_retry(hostile, runtime, monkeypatch):
    from botocore.stub import Stubber

    from tests.handlers.test_smoke_handler import Clock, describe, event

    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
    }.items():
        monkeypatch.setenv(name, value)
    handler = load_handler("endpoint_smoke_test")
    hostile.script(endless_line())
    sagemaker = client("sagemaker")
    clock = Clock()
    with Stubber(sagemaker) as stubber:
        sagemaker.stubber = stubber
        describe(sagemaker)
        with pytest.raises(handler.SmokeTestFailed) as failed:
            handler.complete(
                {**event(started=clock()), "RequestType": "Create"},
                sagemaker=sagemaker,
                runtime=runtime,
                clock=clock,
                sleep=clock.sleep,
                remaining_s=lambda: 900.0,
            )
    reason = str(failed.value)
    assert len(reason.encode()) <= 3000 and "\n" not in reason
    assert "streamed chat completion: StreamLimitExceeded: the stream sent a line over 16 MiB" in reason
    assert "(not retried)" in reason and hostile.stream_calls == 1 and clock.sleeps == []
    assert_stopped_reading(hostile)
    tally("over HTTP", True)
