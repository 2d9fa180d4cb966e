"""Memory proportional to the bytes held, and a total cap on every answer (issue 34, item 10: streams).

The decoders keep an unfinished line and an event's data in one ``bytearray`` each: measured with tracemalloc,
2-byte parts (distinct objects, as a socket gives them) of an endless line or 2-byte ``data:`` values of an
endless event cost about the bytes held, where a list of parts cost ~22x (a 16 MiB cap, ~350 MB). A whole
answer has a cap too, over both paths: 64 MiB streamed (``max_stream_bytes``), 6 MiB not streamed
(``max_bytes``, InvokeEndpoint's own response bound): exactly the cap passes, one byte more is one permanent
``StreamLimitExceeded`` error.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

from endpoint_client import (
    MAX_ANSWER_BYTES,
    MAX_STREAM_BYTES,
    InvocationError,
    OpenAiEndpoint,
    StreamLimitExceeded,
    build_chat_request,
    invoke_chat,
    new_decoder,
    stream_chat,
)
from endpoint_client.runtime import ByteBudget
from tests.fakes.fake_runtime import BEARER_TOKEN, FakeSageMaker, Reply, client
from tests.hostile.tally import Tally, report_fixture

MiB = 2**20
CAP = 256 * 1024
TALLY = Tally()
_report_tally = report_fixture(TALLY)


def _two_bytes(i: int, template: bytes = b"%c%c") -> bytes:
    return template % (97 + i % 26, 97 + (i // 26) % 26)  # a new object each time, never a cached one


@pytest.mark.parametrize(
    ("stream_format", "head", "template", "step"),
    [
        ("sse", b"data: ", b"%c%c", 2),  # one endless line
        ("jsonlines", b"", b"%c%c", 2),
        ("sse", b"", b"data: %c%c\n", 3),  # one endless event: 2 data bytes and the joining "\n"
    ],
    ids=["sse-line", "jsonlines-line", "sse-event"],
)
def test_tiny_parts_cost_about_the_bytes_held(stream_format, head, template, step):
    decoder = new_decoder(stream_format, max_line_bytes=CAP, max_event_bytes=CAP)
    held = 0
    tracemalloc.start()
    try:
        decoder.feed(head)
        for i in range((CAP - 64) // step):
            decoder.feed(_two_bytes(i, template))
            held += step
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # bytearray over-allocates ~1/8; a list of 2-byte parts measured 22x, of 2-char data values 20x.
    assert peak < 1.5 * held + 64 * 1024, f"{peak} bytes traced for {held} held ({peak / held:.1f}x)"
    with pytest.raises(StreamLimitExceeded):
        for i in range(64):
            decoder.feed(_two_bytes(i, template))
    TALLY.record("tiny parts", True)


def test_the_byte_budget_passes_exactly_the_cap_and_refuses_one_more():
    budget = ByteBudget(10)
    budget.take(4)
    budget.take(6)
    with pytest.raises(StreamLimitExceeded, match=r"streamed answer passed 10 bytes in total \(max_stream_bytes=10"):
        budget.take(1)
    with pytest.raises(ValueError, match="max_stream_bytes must be a positive whole number"):
        ByteBudget(0)


def _exact_stream(size: int) -> bytes:
    """A valid stream of exactly ``size`` bytes: events, then a comment padding it out, then [DONE]."""
    done = b"data: [DONE]\n\n"
    event = b'data: {"choices":[{"delta":{"content":"tok "}}]}\n\n'
    count = (size - len(done) - 4) // len(event)
    body = event * count
    pad = size - len(done) - len(body) - 2  # ":" + pad + "\n"
    return body + b":" + b"x" * pad + b"\n" + done


def _exact_completion(size: int) -> bytes:
    head = b'{"choices":[{"message":{"content":"'
    tail = b'"},"finish_reason":"stop"}]}'
    return head + b"w" * (size - len(head) - len(tail)) + tail


@pytest.fixture(scope="module")
def fake():
    with FakeSageMaker() as server:
        yield server


@pytest.mark.parametrize("path", ["sigv4", "openai"])
def test_a_streamed_answer_over_its_total_cap_is_refused(fake, path):
    cap = 64 * 1024
    fake.reset()
    fake.add_endpoint("exact", default=Reply(raw_stream=_exact_stream(cap)))
    fake.add_endpoint("over", default=Reply(raw_stream=_exact_stream(cap + 1)))
    runtime = client("sagemaker-runtime", fake.url)

    def call(name: str):
        body = build_chat_request("hi", stream=True)
        if path == "sigv4":
            return stream_chat(runtime, name, body, max_stream_bytes=cap)
        return OpenAiEndpoint(f"{fake.url}/endpoints/{name}/openai/v1", BEARER_TOKEN).stream_chat(
            body, max_stream_bytes=cap
        )

    result = call("exact")
    assert result.done and result.content.startswith("tok tok ")
    with pytest.raises(InvocationError) as refused:
        call("over")
    assert refused.value.info.code == "StreamLimitExceeded" and not refused.value.transient
    assert f"the streamed answer passed {cap} bytes in total (max_stream_bytes={cap})" in str(refused.value)
    TALLY.record("stream total", True)


@pytest.mark.parametrize("path", ["sigv4", "openai"])
def test_a_whole_answer_over_6_mib_is_refused_and_exactly_6_mib_passes(fake, path):
    fake.reset()
    fake.add_endpoint("exact", default=Reply(raw_body=_exact_completion(MAX_ANSWER_BYTES)))
    fake.add_endpoint("over", default=Reply(raw_body=_exact_completion(MAX_ANSWER_BYTES + 1)))
    runtime = client("sagemaker-runtime", fake.url)

    def call(name: str):
        body = build_chat_request("hi", stream=False)
        if path == "sigv4":
            return invoke_chat(runtime, name, body)
        return OpenAiEndpoint(f"{fake.url}/endpoints/{name}/openai/v1", BEARER_TOKEN).invoke_chat(body)

    assert len(call("exact").content) == MAX_ANSWER_BYTES - 63
    with pytest.raises(InvocationError) as refused:
        call("over")
    assert refused.value.info.code == "StreamLimitExceeded" and not refused.value.transient
    assert "the non-streamed answer passed 6 MiB in total (max_bytes=6291456)" in str(refused.value)
    TALLY.record("answer total", True)


def test_the_defaults_are_the_documented_bounds():
    assert MAX_ANSWER_BYTES == 6291456  # botocore sagemaker-runtime BodyBlob "max"
    assert 64 * MiB == MAX_STREAM_BYTES
    assert json.loads(_exact_completion(100))["choices"][0]["message"]["content"] == "w" * 37
    assert len(_exact_stream(5000)) == 5000
