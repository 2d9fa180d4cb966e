"""SSE reassembly: any events, any line ends, cut into parts anywhere, decode to what was sent."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from endpoint_client import (
    DONE,
    MalformedResponse,
    SseDecoder,
    SseEvent,
    build_chat_request,
    iter_events,
    parse_completion,
    parse_delta,
)

# Text a data line may hold: anything but line breaks and lone surrogates, with emoji, CJK, combining
# marks and the characters SSE gives a meaning to (":" and leading spaces) drawn often.
SPECIAL = '🪣🚀👩‍💻漢字かな한국어éñ\u0301 :  data:id:\t[]{}"\\\u00a0\ufeff\u2028'
line_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(SPECIAL),
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
    ),
    max_size=24,
)
field_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\0"), min_size=1, max_size=12
)


@dataclass(frozen=True)
class Spec:
    data_lines: tuple[str, ...]
    event: str | None
    id: str | None
    comments: tuple[tuple[int, str], ...]  # (line index to put it before, comment text)
    tight: bool  # "data:value" instead of "data: value" where that is unambiguous


@st.composite
def event_specs(draw) -> Spec:
    lines = tuple(draw(st.lists(line_text, min_size=1, max_size=4)))
    if "\n".join(lines) == DONE:
        lines = (*lines, "")
    comments = tuple(draw(st.lists(st.tuples(st.integers(0, 6), line_text), max_size=2)))
    return Spec(
        data_lines=lines,
        event=draw(st.none() | field_text.filter(lambda s: not s.startswith(" "))),
        id=draw(st.none() | field_text.filter(lambda s: not s.startswith(" "))),
        comments=comments,
        tight=draw(st.booleans()),
    )


def encode(specs: list[Spec], endings: list[str], *, done: bool, last_blank: bool = True) -> bytes:
    """The SSE text of ``specs``; each line end is drawn from ``endings`` in turn."""
    lines: list[str] = []
    for i, spec in enumerate(specs):
        body: list[str] = []
        if spec.event is not None:
            body.append(f"event: {spec.event}")
        if spec.id is not None:
            body.append(f"id: {spec.id}")
        for value in spec.data_lines:
            tight = spec.tight and not value.startswith(" ")
            body.append(f"data:{value}" if tight else f"data: {value}")
        for position, comment in sorted(spec.comments, reverse=True):
            body.insert(min(position, len(body)), f":{comment}")
        lines.extend(body)
        if last_blank or i < len(specs) - 1:
            lines.append("")
    if done:
        lines.extend(["data: [DONE]", "", "data: after the end", ""])
    out = []
    previous = ""
    for i, line in enumerate(lines):
        end = endings[i % len(endings)]
        if previous == "\r" and end == "\n":
            end = "\r\n"  # "\r" then "\n" would read as one line end
        out.append(line + end)
        previous = end
    return "".join(out).encode("utf-8")


def expected(specs: list[Spec]) -> list[SseEvent]:
    events, last_id = [], ""
    for spec in specs:
        if spec.id is not None:
            last_id = spec.id
        events.append(SseEvent(data="\n".join(spec.data_lines), event=spec.event or "message", id=last_id))
    return events


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def decode(parts: list[bytes]) -> tuple[list[SseEvent], SseDecoder]:
    decoder = SseDecoder()
    events = [e for part in parts for e in decoder.feed(part)]
    events += decoder.close()
    return events, decoder


endings = st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=1, max_size=5)
cuts = st.lists(st.integers(min_value=0, max_value=10_000), max_size=40)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(event_specs(), max_size=6), endings=endings, cuts=cuts, done=st.booleans())
def test_any_events_cut_anywhere_decode_to_the_originals(specs, endings, cuts, done):
    data = encode(specs, endings, done=done)
    events, decoder = decode(split(data, cuts))
    assert events == expected(specs)
    assert decoder.done is done
    assert not decoder.truncated


@settings(max_examples=200, deadline=None)
@given(specs=st.lists(event_specs(), min_size=1, max_size=4), endings=endings, cuts=cuts)
def test_a_stream_without_the_final_blank_line_still_yields_its_last_event(specs, endings, cuts):
    data = encode(specs, endings, done=False, last_blank=False)
    events, decoder = decode(split(data, cuts))
    assert events == expected(specs)
    assert decoder.done is False


@settings(max_examples=200, deadline=None)
@given(specs=st.lists(event_specs(), min_size=1, max_size=4), cuts=cuts, keep=st.integers(min_value=1))
def test_a_stream_cut_off_mid_line_drops_the_unfinished_event(specs, cuts, keep):
    complete = encode(specs[:-1], ["\n"], done=False)
    last = encode(specs[-1:], ["\n"], done=False)
    keep = keep % (len(last) - 1) or 1
    while last[keep - 1 : keep] == b"\n":  # end inside a line, not just after one
        keep -= 1
    events, decoder = decode(split(complete + last[:keep], cuts))
    assert events == expected(specs[:-1])
    assert decoder.truncated


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("a漢🪣é\u0301"), min_size=1, max_size=30), cuts=cuts)
def test_multibyte_characters_split_across_parts_survive(text, cuts):
    data = f"data: {text}\r\n\r\n".encode()
    events, _ = decode(split(data, cuts))
    assert [e.data for e in events] == [text]


def test_crlf_split_between_parts_is_one_line_end():
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r") == []
    assert decoder.feed(b"\n\r") == [SseEvent("a\nb")]
    assert decoder.feed(b"\n") == []  # the "\n" of "\r\n", not a second blank line
    assert decoder.feed(b"data: c\n\n") == [SseEvent("c")]


def test_an_emoji_cut_into_single_bytes():
    raw = "data: 🪣\n\n".encode()
    decoder = SseDecoder()
    events = [e for byte in raw for e in decoder.feed(bytes([byte]))]
    assert events == [SseEvent("🪣")]


def test_keep_alives_alone_yield_nothing():
    decoder = SseDecoder()
    assert decoder.feed(b": ping\n\n:\n\n: keep-alive\r\n\r\n") == []
    assert decoder.close() == []
    assert decoder.comments_seen == 3 and not decoder.done


def test_done_ends_the_stream_and_later_bytes_are_ignored():
    decoder = SseDecoder()
    assert decoder.feed(b"data: 1\n\ndata: [DONE]\n\ndata: 2\n\n") == [SseEvent("1")]
    assert decoder.done
    assert decoder.feed(b"data: 3\n\n") == []
    assert decoder.close() == []


def test_fields_and_corner_cases_of_the_standard():
    decoder = SseDecoder()
    text = (
        "\ufeffevent: delta\nid: 7\nretry: 100\nunknown: x\ndata\ndata:  two spaces\n\n"  # BOM, no-colon data
        "event: lonely\n\n"  # no data: nothing dispatched, and the type does not leak into the next event
        "id: bad\0id\ndata: x\n\n"  # an id with NUL is ignored
    )
    assert decoder.feed(text.encode()) == [
        SseEvent("\n two spaces", event="delta", id="7"),
        SseEvent("x", event="message", id="7"),
    ]


def test_feed_after_close_is_an_error():
    decoder = SseDecoder()
    decoder.close()
    with pytest.raises(ValueError, match="after close"):
        decoder.feed(b"data: x\n\n")


def test_iter_events_stops_at_done():
    decoder = SseDecoder()
    parts = iter([b"data: a\n", b"\ndata: [DO", b"NE]\n\n", b"data: never\n\n"])
    assert list(iter_events(parts, decoder)) == [SseEvent("a")]
    assert decoder.done
    assert next(parts) == b"data: never\n\n"  # not read after [DONE]


# --- chat payloads ---------------------------------------------------------------------------------


def test_build_chat_request():
    assert build_chat_request("hi") == {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 512}
    body = build_chat_request(
        "hi", max_tokens=8, system="be brief", extra={"temperature": 0.1, "max_tokens": 16}, stream=True
    )
    assert body == {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "max_tokens": 16,
        "temperature": 0.1,
        "stream_options": {"include_usage": True},
        "stream": True,
    }
    assert "stream_options" not in build_chat_request("hi", extra={"stream_options": None}, stream=True)
    for key in ("messages", "stream"):
        with pytest.raises(ValueError, match=key):
            build_chat_request("hi", extra={key: 1})


def test_parse_delta():
    chunk = {"choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]}
    assert parse_delta(json.dumps(chunk)).content == "Hi"
    reasoning = {"choices": [{"delta": {"reasoning_content": "hmm", "content": None}}]}
    assert parse_delta(json.dumps(reasoning)).reasoning == "hmm"
    usage = parse_delta(json.dumps({"choices": [], "usage": {"completion_tokens": 5}}))
    assert (usage.content, usage.usage) == ("", {"completion_tokens": 5})
    assert parse_delta(json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}]})).finish_reason == "stop"
    for bad in ("{not json", "[1]", '{"error": {"message": "boom"}}', '{"choices": 3}'):
        with pytest.raises(MalformedResponse):
            parse_delta(bad)


def test_parse_completion():
    body = {"choices": [{"message": {"content": "ok", "reasoning_content": "r"}, "finish_reason": "stop"}]}
    completion = parse_completion(json.dumps({**body, "usage": {"completion_tokens": 3}}).encode())
    assert (completion.content, completion.reasoning, completion.completion_tokens) == ("ok", "r", 3)
    assert parse_completion(json.dumps(body).encode()).completion_tokens is None
    with pytest.raises(MalformedResponse, match="not JSON") as info:
        parse_completion(b"<html>502 Bad Gateway</html>")
    assert info.value.excerpt == "<html>502 Bad Gateway</html>"
    for bad in (b"{}", b'{"choices": []}', b'{"choices": [{"text": "completion API"}]}', b"\xff\xfe"):
        with pytest.raises(MalformedResponse):
            parse_completion(bad)


def test_a_part_ending_in_a_whole_crlf_leaves_the_next_parts_lf_a_blank_line():
    """Found by the property test above: b"data: a\\r\\n" then b"\\ndata: b\\n\\n" is two events, not one."""
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\r\n") == []
    events = decoder.feed(b"\ndata: b\n\n")
    assert [e.data for e in events] == ["a", "b"]
    # A bare CR at the end of a part still pairs with the next part's LF.
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert [e.data for e in decoder.feed(b"\n\n")] == ["a"]
