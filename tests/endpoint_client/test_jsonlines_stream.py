"""LMI's streamed format: JSON Lines reassembled from payload parts cut anywhere, end to end.

Unit level: any chunks, any cut points, "\\n" or "\\r\\n", multi-byte characters split across parts.
Integration: the fake SageMaker streams LMI's framing (one chat.completion.chunk a line, an empty last
line, no [DONE]) in real AWS event-stream messages split across HTTP chunks; botocore parses them, then
``stream_chat``, the smoke-test handler and ``python -m llmops.invoke --engine lmi`` read the answer.
"""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint_client import JsonLinesDecoder, MalformedResponse, SseDecoder, new_decoder, parse_delta, stream_chat
from llmops.invoke import main
from tests.endpoint_client.test_invoke_integration import ENDPOINT, PROMPT, deploy
from tests.endpoint_client.test_invoke_integration import env as env
from tests.endpoint_client.test_invoke_integration import handler as handler
from tests.fakes.fake_runtime import DEFAULT_ANSWER, FakeSageMaker, Reply, client

SPECIAL = '🪣🚀👩‍💻漢字かな한국어éñ\u0301 "\\{}[]:\u2028\ufeff'
texts = st.text(alphabet=st.one_of(st.sampled_from(SPECIAL), st.characters(blacklist_categories=("Cs",))), max_size=20)


def chunk(text: str) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def decode(parts: list[bytes]) -> tuple[list[str], JsonLinesDecoder]:
    decoder = JsonLinesDecoder()
    lines = [e.data for part in parts for e in decoder.feed(part)]
    lines += [e.data for e in decoder.close()]
    return lines, decoder


@settings(max_examples=150, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6), st.sampled_from(["\n", "\r\n"]), st.lists(st.integers(0, 10**6)))
def test_any_chunks_cut_anywhere_decode_to_the_originals(contents, line_end, cuts):
    body = "".join(json.dumps(chunk(t), ensure_ascii=False) + line_end for t in contents) + line_end
    lines, decoder = decode(cut(body.encode("utf-8"), cuts))
    assert [parse_delta(line).content for line in lines] == contents
    assert decoder.done and not decoder.truncated and decoder.events_seen == len(contents)


@settings(max_examples=100, deadline=None)
@given(st.lists(texts, min_size=1, max_size=4), st.lists(st.integers(0, 10**6)), st.data())
def test_a_stream_cut_inside_its_last_line_is_truncated_not_done(contents, cuts, data):
    body = "".join(json.dumps(chunk(t), ensure_ascii=False) + "\n" for t in contents).encode("utf-8")
    last = json.dumps(chunk("tail")).encode("utf-8")
    keep = data.draw(st.integers(1, len(last) - 1))
    lines, decoder = decode(cut(body + last[:keep], cuts))
    assert [parse_delta(line).content for line in lines] == contents
    assert decoder.truncated and not decoder.done


def test_a_last_line_without_its_newline_still_counts():
    lines, decoder = decode([b'{"a": 1}\n{"b":', b" 2}"])
    assert lines == ['{"a": 1}', '{"b": 2}'] and decoder.done


def test_an_error_after_the_stream_started_is_its_last_line_without_a_newline():
    # DJL Serving's Request.addResponse appends {"code":...,"error":...} as the final content.
    body = json.dumps(chunk("Buckets")).encode() + b"\n" + b'{"code":424,"error":"engine died"}'
    lines, decoder = decode(cut(body, [5, 60, 90]))
    assert parse_delta(lines[0]).content == "Buckets" and decoder.done
    with pytest.raises(MalformedResponse, match="the stream carried an error event") as info:
        parse_delta(lines[1])
    assert "engine died" in info.value.excerpt


def test_an_emoji_cut_into_single_bytes_and_a_byte_order_mark():
    body = ("\ufeff" + json.dumps(chunk("🪣"), ensure_ascii=False) + "\n").encode("utf-8")
    lines, _ = decode([bytes([b]) for b in body])
    assert parse_delta(lines[0]).content == "🪣"


def test_sse_text_is_not_json_lines_and_the_other_way_round():
    # The framing is the engine's data, not guessed: each decoder reads only its own format.
    sse = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n'
    lines, _ = decode([sse])
    assert lines[0].startswith("data: ")
    assert SseDecoder().feed(b'{"choices": []}\n\n') == []


def test_new_decoder_by_format_name():
    assert isinstance(new_decoder("jsonlines"), JsonLinesDecoder)
    assert isinstance(new_decoder(), SseDecoder)
    with pytest.raises(ValueError, match="stream format 'ndjson' is not one of sse, jsonlines"):
        new_decoder("ndjson")
    with pytest.raises(ValueError, match="after close"):
        decoder = JsonLinesDecoder()
        decoder.close()
        decoder.feed(b"{}")


# --- through real event-stream framing -------------------------------------------------------------


@pytest.fixture(scope="module")
def fake():
    with FakeSageMaker() as server:
        yield server


@pytest.mark.parametrize("seed", [1, 2, 3, 7, 11])
@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_stream_chat_reads_lmis_jsonlines_through_event_stream_framing(fake, seed, line_end):
    fake.reset()
    fake.add_endpoint(
        ENDPOINT, default=Reply(stream_format="jsonlines", reasoning="Think first.", seed=seed, line_end=line_end)
    )
    runtime = client("sagemaker-runtime", fake.url)
    body = {"messages": [{"role": "user", "content": PROMPT}], "stream": True}
    result = stream_chat(runtime, ENDPOINT, body, stream_format="jsonlines")
    assert result.content == DEFAULT_ANSWER and result.reasoning == "Think first."
    assert result.done and result.token_source == "usage" and result.tokens == result.deltas == 17
    # Read as SSE, the same bytes carry no event at all: the engine's stream_format matters.
    sse = stream_chat(runtime, ENDPOINT, body)
    assert sse.deltas == 0 and not sse.done


def test_a_truncated_lmi_stream_is_not_done(fake):
    fake.reset()
    fake.add_endpoint(ENDPOINT, default=Reply(stream_format="jsonlines", done=False))
    result = stream_chat(client("sagemaker-runtime", fake.url), ENDPOINT, {"messages": []}, stream_format="jsonlines")
    assert result.content == DEFAULT_ANSWER and not result.done
    assert result.token_source == "deltas"  # the usage line was the one cut off


def test_smoke_handler_passes_an_lmi_endpoint_with_stream_format_jsonlines(handler, fake):
    fake.add_endpoint(ENDPOINT, default=Reply(stream_format="jsonlines", line_end="\r\n", seed=5))
    _, result = deploy(handler, StreamFormat="jsonlines")
    assert result["IsComplete"] is True and result["Data"]["StreamEndedWithDone"] == "true"
    # Without the property the handler reads SSE, finds no delta and fails the stack.
    with pytest.raises(handler.SmokeTestFailed, match="before a single content delta"):
        deploy(handler)
    with pytest.raises(handler.SettingsError, match="StreamFormat='ndjson' is not allowed; allowed: sse, jsonlines"):
        deploy(handler, StreamFormat="ndjson")


def test_invoke_with_engine_lmi_streams_the_answer(fake):
    fake.reset()
    fake.add_endpoint(ENDPOINT, default=Reply(stream_format="jsonlines", token_delay_s=0.01))
    out, err = io.StringIO(), io.StringIO()
    runtime = client("sagemaker-runtime", fake.url)
    code = main(["--endpoint", ENDPOINT, "--engine", "lmi", PROMPT], runtime_client=runtime, stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    assert out.getvalue() == DEFAULT_ANSWER + "\n"
    assert "| 15 tokens |" in err.getvalue() and "without [DONE]" not in err.getvalue()
    # The default engine (vLLM) reads SSE: LMI's lines give it nothing to print.
    code = main(["--endpoint", ENDPOINT, PROMPT], runtime_client=runtime, stdout=io.StringIO(), stderr=err)
    assert code == 1 and "answered with empty content" in err.getvalue()


def test_bench_with_engine_lmi_reads_the_jsonlines_stream(fake):
    from llmops import bench

    fake.reset()
    fake.add_endpoint(ENDPOINT, default=Reply(stream_format="jsonlines"))
    args = ["--endpoint", ENDPOINT, "--engine", "lmi", "--concurrency", "2", "--requests", "4"]
    args += ["--input-tokens", "4", "--no-progress", "--output-tokens", "16"]
    out = io.StringIO()
    code = bench.main(args, runtime_client=client("sagemaker-runtime", fake.url), stdout=out, stderr=io.StringIO())
    assert code == 0, out.getvalue()
    assert "4/4" in out.getvalue() and "errors" not in out.getvalue()


def test_playground_relays_an_lmi_stream(fake):
    import http.client

    from llmops.playground import TOKEN_HEADER, Playground

    fake.reset()
    fake.add_endpoint(ENDPOINT, default=Reply(stream_format="jsonlines"))
    runtime = client("sagemaker-runtime", fake.url)
    with Playground(runtime, ENDPOINT, port=0, log=io.StringIO(), stream_format="jsonlines") as server:
        body = json.dumps({"id": "l1", "messages": [{"role": "user", "content": PROMPT}]}).encode()
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request(
            "POST",
            "/api/chat",
            body,
            {"Content-Type": "application/json", TOKEN_HEADER: server.secret, "Host": f"127.0.0.1:{server.port}"},
        )
        stream = connection.getresponse().read().decode()
        connection.close()
    events = [json.loads(line[6:]) for line in stream.split("\n\n") if line.startswith("data: ")]
    assert "".join(e["content"] for e in events if e["type"] == "delta") == DEFAULT_ANSWER
    assert events[-1]["type"] == "done"
