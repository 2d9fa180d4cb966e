"""endpoint_client's own behaviour, branch by branch: what a user reads when a call fails, how engine payloads
are read, and how a stream is consumed (values sent to SageMaker, when reading stops, what is closed).

The HTTP paths (boto3 against the fake SageMaker) are in test_invoke_integration.py and
test_jsonlines_stream.py; here a client is either botocore's Stubber (which checks every parameter against
the sagemaker-runtime service model) or, for streams, a stand-in for botocore's ``EventStream`` (an iterable
of event dicts with ``close()``), which also lets a stream carry failure events that botocore would raise
itself.
"""

from __future__ import annotations

import io
import json

import pytest
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from botocore.response import StreamingBody
from botocore.stub import Stubber

from endpoint_client import (
    Completion,
    Delta,
    ErrorInfo,
    InvocationError,
    InvocationResult,
    JsonLinesDecoder,
    MalformedResponse,
    SseDecoder,
    build_chat_request,
    classify,
    excerpt,
    invoke_chat,
    iter_events,
    parse_completion,
    parse_delta,
    short_reason,
    stream_chat,
)
from tests.fakes.fake_runtime import client

ENDPOINT = "llm-endpoint"
COMPONENT = "llm-component"
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def sse(*chunks: dict, done: bool = True) -> bytes:
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def chunk(content: str | None = None, *, reasoning: str | None = None, finish: str | None = None, usage=None):
    delta = {k: v for k, v in (("content", content), ("reasoning_content", reasoning)) if v is not None}
    payload: dict = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        payload["usage"] = usage
    return payload


class Clock:
    """Returns the given times in turn, then the last one forever."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]


class EventStream:
    """What botocore's ``EventStream`` gives ``stream_chat``: event dicts, one at a time, and ``close()``."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events
        self.read = 0
        self.closed = False

    def __iter__(self):
        for event in self.events:
            self.read += 1
            yield event

    def close(self) -> None:
        self.closed = True


class StreamingClient:
    """A sagemaker-runtime client whose InvokeEndpointWithResponseStream returns ``stream`` (or raises)."""

    def __init__(self, stream: EventStream | None = None, error: Exception | None = None) -> None:
        self.stream, self.error = stream, error
        self.calls: list[dict] = []

    def invoke_endpoint_with_response_stream(self, **kwargs):
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        return {"Body": self.stream, "ContentType": "text/event-stream"}


def parts(data: bytes, *sizes: int) -> list[dict]:
    """``data`` as PayloadPart events of the given sizes (the rest in one last part)."""
    events, start = [], 0
    for size in sizes:
        events.append({"PayloadPart": {"Bytes": data[start : start + size]}})
        start += size
    events.append({"PayloadPart": {"Bytes": data[start:]}})
    return events


def client_error(code="Some", message="m", status=400, **members):
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}, **members}
    return ClientError(response, "InvokeEndpoint")


# --- a stream that fails mid-answer, as the user sees it ---------------------------------------------


@pytest.mark.parametrize("code", ["ModelStreamError", "InternalStreamFailure"])
def test_a_failure_event_mid_stream_is_a_transient_error_naming_the_failure(code):
    data = sse(chunk("Buckets "), chunk("hold"), done=False)
    failure = {code: {"Message": "Model stream broke mid-answer.", "ErrorCode": "StreamBroken"}}
    stream = EventStream([*parts(data, 7), failure, *parts(sse(chunk(" never")))])
    seen: list[str] = []
    with pytest.raises(InvocationError) as info:
        stream_chat(StreamingClient(stream), ENDPOINT, BODY, on_delta=lambda d: seen.append(d.content))
    assert str(info.value) == f"{code}: Model stream broke mid-answer."
    assert info.value.transient is True
    assert info.value.info == ErrorInfo(code, "Model stream broke mid-answer.", True)
    assert seen == ["Buckets ", "hold"]  # what arrived before the failure was shown
    assert stream.read == 3 and stream.closed  # nothing read after the failure, and the stream is closed


def test_a_failure_event_without_a_message_still_names_the_failure():
    stream = EventStream([{"ModelStreamError": "not a structure"}])
    with pytest.raises(InvocationError) as info:
        stream_chat(StreamingClient(stream), ENDPOINT, BODY)
    assert str(info.value) == "ModelStreamError" and info.value.transient
    stream = EventStream([{"InternalStreamFailure": {}}])
    with pytest.raises(InvocationError, match=r"^InternalStreamFailure$"):
        stream_chat(StreamingClient(stream), ENDPOINT, BODY)


def test_a_failed_stream_through_llmops_invoke_is_one_line_saying_try_again():
    from llmops.invoke import main

    stream = EventStream([*parts(sse(chunk("Buckets"), done=False)), {"ModelStreamError": {"Message": "boom"}}])
    out, err = io.StringIO(), io.StringIO()
    code = main(["--endpoint", ENDPOINT, "hi"], runtime_client=StreamingClient(stream), stdout=out, stderr=err)
    assert code == 1
    assert err.getvalue().strip().splitlines()[-1] == (
        f"error: invoking {ENDPOINT} failed: ModelStreamError: boom (transient: try again)"
    )


def test_an_unknown_event_type_is_skipped_and_reading_goes_on():
    first = sse(chunk("a"), done=False)
    head, tail = parts(first + sse(chunk("b")), len(first))
    stream = EventStream([head, {"SomethingNew": {"x": 1}}, {"PayloadPart": {}}, tail])  # a part without bytes
    result = stream_chat(StreamingClient(stream), ENDPOINT, BODY)
    assert result.content == "ab" and result.done


def test_reading_stops_at_done_and_the_stream_is_closed():
    data = sse(chunk("a"))
    stream = EventStream([*parts(data, 5, 20), *parts(sse(chunk("after")))])
    result = stream_chat(StreamingClient(stream), ENDPOINT, BODY)
    assert result.content == "a" and result.done
    assert stream.read == 3 and stream.closed  # the part after [DONE] was never read


def test_the_stream_is_closed_when_the_callback_is_interrupted():
    stream = EventStream(parts(sse(chunk("a"), chunk("b"))))

    def interrupt(delta: Delta) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stream_chat(StreamingClient(stream), ENDPOINT, BODY, on_delta=interrupt)
    assert stream.closed


def test_a_malformed_event_is_a_permanent_error_with_the_start_of_the_event():
    stream = EventStream(parts(b'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: <html>oops\n\n'))
    with pytest.raises(InvocationError) as info:
        stream_chat(StreamingClient(stream), ENDPOINT, BODY)
    assert str(info.value) == "MalformedResponse: a stream event is not JSON (Expecting value); body: <html>oops"
    assert info.value.transient is False and stream.closed


def test_a_refused_call_is_classified_and_nothing_is_closed():
    error = client_error("ValidationError", "Endpoint llm-endpoint of account 1 not found.", 400)
    with pytest.raises(InvocationError) as info:
        stream_chat(StreamingClient(error=error), ENDPOINT, BODY)
    assert str(info.value) == "HTTP 400 from SageMaker (ValidationError): Endpoint llm-endpoint of account 1 not found."
    assert info.value.transient is False and info.value.__cause__ is error


def test_stream_chat_sends_the_endpoint_component_and_json_body():
    runtime = StreamingClient(EventStream(parts(sse(chunk("a")))))
    stream_chat(runtime, ENDPOINT, BODY)
    stream_chat(runtime, ENDPOINT, BODY, inference_component_name=COMPONENT)
    plain, component = runtime.calls
    assert plain == {"EndpointName": ENDPOINT, "ContentType": "application/json", "Body": json.dumps(BODY).encode()}
    assert component == {**plain, "InferenceComponentName": COMPONENT}


# --- what a stream adds up to --------------------------------------------------------------------------


def test_stream_timing_tokens_and_deltas_from_the_engine_usage():
    data = sse(
        chunk(""),  # the role-only first chunk vLLM sends: no token yet
        chunk(reasoning="think "),
        chunk("Buck"),
        chunk("ets", finish="stop"),
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}},
        {"choices": [], "usage": {"completion_tokens": "many"}},  # not a count: the last good one stands
    )
    seen: list[Delta] = []
    clock = Clock(100.0, 100.25, 101.0, 102.0)
    result = stream_chat(
        StreamingClient(EventStream(parts(data, 3, 50))), ENDPOINT, BODY, on_delta=seen.append, clock=clock
    )
    assert result == InvocationResult(
        content="Buckets",
        reasoning="think ",
        streamed=True,
        latency_s=1.0,
        time_to_first_token_s=0.25,
        tokens=9,
        token_source="usage",
        done=True,
        finish_reason="stop",
        deltas=3,
        prompt_tokens=3,  # the input's tokens, as the engine counted them (kept by a later usage without them)
    )
    assert [(d.content, d.reasoning) for d in seen] == [("", "think "), ("Buck", ""), ("ets", "")]


def test_without_usage_the_deltas_are_counted():
    data = sse(chunk("a"), chunk("b"), {"choices": [], "usage": {"completion_tokens": -1}}, done=False)
    result = stream_chat(StreamingClient(EventStream(parts(data, 4))), ENDPOINT, BODY, clock=Clock(5.0, 6.0, 8.0))
    assert (result.tokens, result.token_source, result.deltas) == (2, "deltas", 2)
    assert (result.done, result.finish_reason, result.time_to_first_token_s, result.latency_s) == (
        False,
        None,
        1.0,
        3.0,
    )


def test_zero_completion_tokens_is_a_count():
    data = sse({"choices": [], "usage": {"completion_tokens": 0}})
    result = stream_chat(StreamingClient(EventStream(parts(data))), ENDPOINT, BODY)
    assert (result.tokens, result.token_source, result.time_to_first_token_s) == (0, "usage", None)
    data = sse(chunk("a"), {"choices": [], "usage": {"completion_tokens": True}})
    result = stream_chat(StreamingClient(EventStream(parts(data))), ENDPOINT, BODY)
    assert (result.tokens, result.token_source) == (1, "deltas")


def test_a_jsonlines_stream_ends_at_its_last_line():
    lines = "".join(json.dumps(c) + "\n" for c in (chunk("a"), chunk("b", finish="length"))).encode()
    stream = EventStream(parts(lines, 10))
    result = stream_chat(StreamingClient(stream), ENDPOINT, BODY, stream_format="jsonlines")
    assert (result.content, result.done, result.finish_reason) == ("ab", True, "length")
    # The last line without its newline still counts, at close.
    stream = EventStream(parts(lines.rstrip(b"\n")))
    assert stream_chat(StreamingClient(stream), ENDPOINT, BODY, stream_format="jsonlines").content == "ab"


def test_an_unknown_stream_format_is_refused_before_any_call():
    runtime = StreamingClient(EventStream([]))
    with pytest.raises(ValueError, match="stream format 'ndjson' is not one of sse, jsonlines"):
        stream_chat(runtime, ENDPOINT, BODY, stream_format="ndjson")
    assert runtime.calls == []


@pytest.mark.parametrize(
    ("result", "speed"),
    [
        (dict(streamed=True, latency_s=2.5, time_to_first_token_s=0.5, tokens=5), 2.0),  # after the first token
        (dict(streamed=True, latency_s=2.0, time_to_first_token_s=0.5, tokens=1), 0.5),  # one token: the whole call
        (dict(streamed=True, latency_s=0.5, time_to_first_token_s=0.5, tokens=3), 6.0),  # no time after the first
        (dict(streamed=True, latency_s=2.0, time_to_first_token_s=None, tokens=4), 2.0),
        (dict(streamed=False, latency_s=2.0, time_to_first_token_s=1.0, tokens=4), 2.0),
        (dict(streamed=False, latency_s=0.0, time_to_first_token_s=None, tokens=4), 0.0),
    ],
)
def test_tokens_per_second(result, speed):
    full = InvocationResult(content="", reasoning="", token_source="usage", **result)
    assert full.tokens_per_second == pytest.approx(speed)


# --- a whole answer: InvokeEndpoint ------------------------------------------------------------------------


@pytest.fixture
def runtime():
    sagemaker_runtime = client("sagemaker-runtime", "http://127.0.0.1:9")
    with Stubber(sagemaker_runtime) as stubber:
        sagemaker_runtime.stubber = stubber
        yield sagemaker_runtime
        stubber.assert_no_pending_responses()


def answer(runtime, payload, component=None):
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    expected = {"EndpointName": ENDPOINT, "ContentType": "application/json", "Accept": "application/json"}
    expected["Body"] = json.dumps(BODY).encode()
    if component:
        expected["InferenceComponentName"] = component
    runtime.stubber.add_response("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(raw), len(raw))}, expected)


def test_invoke_chat_sends_json_accepts_json_and_times_the_call(runtime):
    payload = {
        "choices": [{"message": {"content": "Buckets", "reasoning_content": "hmm"}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 7},
    }
    answer(runtime, payload, COMPONENT)
    result = invoke_chat(runtime, ENDPOINT, BODY, inference_component_name=COMPONENT, clock=Clock(10.0, 12.5))
    assert result == InvocationResult(
        content="Buckets",
        reasoning="hmm",
        streamed=False,
        latency_s=2.5,
        time_to_first_token_s=None,
        tokens=7,
        token_source="usage",
        finish_reason="stop",
    )


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ({"content": "one two  three"}, 3),
        ({"content": "one two", "reasoning_content": "think"}, 3),
        ({"content": "", "reasoning": "just thinking"}, 2),
    ],
)
def test_invoke_chat_without_usage_counts_words(runtime, message, words):
    answer(runtime, {"choices": [{"message": message}], "usage": None})
    result = invoke_chat(runtime, ENDPOINT, BODY)
    assert (result.tokens, result.token_source, result.finish_reason) == (words, "words", None)


def test_invoke_chat_reports_a_body_that_is_not_a_completion(runtime):
    answer(runtime, b"<html>502 Bad Gateway</html>")
    with pytest.raises(InvocationError) as info:
        invoke_chat(runtime, ENDPOINT, BODY)
    assert str(info.value) == (
        "MalformedResponse: the response is not JSON (Expecting value); body: <html>502 Bad Gateway</html>"
    )
    assert not info.value.transient


def test_invoke_chat_reports_a_container_error(runtime):
    runtime.stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message="Received server error (503)",
        http_status_code=424,
        modeled_fields={"OriginalStatusCode": 503, "OriginalMessage": "overloaded"},
    )
    with pytest.raises(InvocationError) as info:
        invoke_chat(runtime, ENDPOINT, BODY)
    assert str(info.value) == "HTTP 503 from the model container (ModelError): body: overloaded"
    assert info.value.transient


# --- payloads of the engines ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        # vLLM and SGLang: reasoning_content (the reasoning parser's field)
        ({"choices": [{"delta": {"reasoning_content": "r", "content": None}}]}, Delta(reasoning="r")),
        # newer vLLM: "reasoning"; an empty reasoning_content does not hide it
        ({"choices": [{"delta": {"reasoning": "r2"}}]}, Delta(reasoning="r2")),
        ({"choices": [{"delta": {"reasoning_content": "", "reasoning": "r3"}}]}, Delta(reasoning="r3")),
        ({"choices": [{"delta": {"reasoning_content": "r4", "reasoning": "other"}}]}, Delta(reasoning="r4")),
        ({"choices": [{"delta": {"content": 5, "reasoning": ["x"]}, "finish_reason": 1}]}, Delta()),
        (
            {"choices": [{"delta": {"content": "x"}, "finish_reason": "length"}], "usage": {"completion_tokens": 4}},
            Delta(content="x", finish_reason="length", usage={"completion_tokens": 4}),
        ),
        # the last chunk with include_usage: no choices, usage only (or choices null)
        ({"choices": None, "usage": {"completion_tokens": 2}}, Delta(usage={"completion_tokens": 2})),
        ({"usage": "n/a"}, Delta()),
        ({"choices": [], "usage": [1]}, Delta()),
        # odd shapes of a choice: nothing to add, not an error
        ({"choices": ["text"]}, Delta()),
        ({"choices": [{"delta": "text", "finish_reason": "stop"}]}, Delta(finish_reason="stop")),
        # a chunk that carries choices is a chunk, even with an error member
        ({"error": None, "choices": [{"delta": {"content": "y"}}]}, Delta(content="y")),
    ],
)
def test_parse_delta_reads_what_engines_send(payload, expected):
    assert parse_delta(json.dumps(payload)) == expected


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "a stream event is not JSON (Expecting property name enclosed in double quotes)"),
        ('["a"]', "a stream event is not a JSON object"),
        ('{"error": {"message": "boom"}}', "the stream carried an error event"),
        ('{"code": 424, "error": "engine died"}', "the stream carried an error event"),
        ('{"choices": {"0": {}}}', "'choices' is not a list"),
    ],
)
def test_parse_delta_refuses_what_is_not_a_chunk_with_the_event_itself(data, message):
    with pytest.raises(MalformedResponse) as info:
        parse_delta(data)
    assert str(info.value) == message and info.value.excerpt == data


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (
            {"choices": [{"message": {"content": "ok", "reasoning": "r"}, "finish_reason": "length"}], "usage": {}},
            Completion("ok", "r", "length", {}),
        ),
        (
            {"choices": [{"message": {"content": None, "reasoning_content": "", "reasoning": "r"}}], "usage": 3},
            Completion("", "r", None, {}),
        ),
        (
            {"choices": [{"message": {"content": ["x"], "reasoning_content": 1}, "finish_reason": 0}]},
            Completion("", "", None, {}),
        ),
        (
            {"choices": [{"message": {"content": "a", "reasoning_content": "b", "reasoning": "c"}}]},
            Completion("a", "b", None, {}),
        ),
    ],
)
def test_parse_completion_reads_what_engines_send(payload, expected):
    assert parse_completion(json.dumps(payload).encode()) == expected


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        ({"completion_tokens": 0}, 0),
        ({"completion_tokens": 12}, 12),
        ({"completion_tokens": -1}, None),
        ({"completion_tokens": True}, None),
        ({"completion_tokens": "12"}, None),
        ({}, None),
    ],
)
def test_completion_tokens_only_from_a_count(usage, tokens):
    payload = {"choices": [{"message": {"content": "a"}}], "usage": usage}
    assert parse_completion(json.dumps(payload).encode()).completion_tokens == tokens


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>502</html>", "the response is not JSON (Expecting value)"),
        (b"ok \x80", "the response is not JSON (not UTF-8)"),
        (b"[1]", "the response has no choices[0]"),
        (b'{"choices": "x"}', "the response has no choices[0]"),
        (b'{"choices": []}', "the response has no choices[0]"),
        (b'{"choices": ["x"]}', "the response has no choices[0]"),
        (b'{"choices": [{"text": "a completion, not a chat"}]}', "the response has no choices[0].message"),
        (b'{"choices": [{"message": "a"}]}', "the response has no choices[0].message"),
    ],
)
def test_parse_completion_refuses_what_is_not_a_chat_completion(body, message):
    with pytest.raises(MalformedResponse) as info:
        parse_completion(body)
    assert str(info.value) == message
    assert info.value.excerpt == body.decode("utf-8", errors="replace")


def test_excerpt_is_one_line_of_at_most_the_limit_in_bytes():
    assert excerpt(b"a\r\n  b\tc\n") == "a b c"
    assert excerpt(b"ok \xff") == "ok \ufffd"
    assert excerpt("x" * 300) == "x" * 300
    assert excerpt("x" * 301) == "x" * 300 + "…"
    assert excerpt("é" * 3, 5) == "éé…"  # never half a character
    assert excerpt("abcdef", 6) == "abcdef" and excerpt("abcdef", 5) == "abcde…"


# --- classification: retry or not, and the line a user reads ----------------------------------------------


def test_classify_passes_an_invocation_error_through():
    info = ErrorInfo("ModelStreamError", "m", True)
    assert classify(InvocationError(info)) is info


def test_classify_a_malformed_response():
    error = MalformedResponse("the response is not JSON (Expecting value)", "<html>")
    info = classify(error)
    assert info == ErrorInfo("MalformedResponse", "the response is not JSON (Expecting value)", False, body="<html>")
    assert info.describe() == "MalformedResponse: the response is not JSON (Expecting value); body: <html>"


@pytest.mark.parametrize(
    ("error", "code", "transient"),
    [
        (EndpointConnectionError(endpoint_url="https://runtime"), "EndpointConnectionError", True),
        (ReadTimeoutError(endpoint_url="https://runtime"), "ReadTimeoutError", True),
        (HTTPClientError(error="reset by peer"), "HTTPClientError", True),
        (ResponseStreamingError(error="connection broken"), "ResponseStreamingError", True),
        (NoCredentialsError(), "NoCredentialsError", False),
        (KeyError("Body"), "KeyError", False),
    ],
)
def test_classify_errors_that_are_not_answers(error, code, transient):
    info = classify(error)
    assert info == ErrorInfo(code, str(error), transient)
    assert info.describe() == f"{code}: {error}"


def test_classify_cuts_a_long_message_to_one_excerpt():
    info = classify(RuntimeError("x\n" * 400))
    assert info.message == "x " * 150 + "…" and info.describe() == "RuntimeError: " + info.message
    assert classify(RuntimeError()).describe() == "RuntimeError"


@pytest.mark.parametrize(
    ("original", "transient"),
    [(400, False), (404, False), (428, False), (429, True), (430, False), (499, False), (500, True), (502, True)],
)
def test_a_container_error_is_transient_for_its_5xx_and_429(original, transient):
    error = client_error("ModelError", "Received error", 424, OriginalStatusCode=original, OriginalMessage="body")
    info = classify(error)
    assert info == ErrorInfo("ModelError", "Received error", transient, original, "body", from_container=True)
    assert info.describe() == f"HTTP {original} from the model container (ModelError): body: body"


def test_a_container_error_without_its_status_is_worth_another_try():
    info = classify(client_error("ModelError", "Received error", 424, OriginalStatusCode="500"))
    assert info == ErrorInfo("ModelError", "Received error", True, None, "Received error", from_container=False)
    assert info.describe() == "ModelError: Received error; body: Received error"


def test_a_container_error_keeps_more_of_its_body_than_of_the_message():
    info = classify(client_error("ModelError", "m" * 600, 424, OriginalStatusCode=400, OriginalMessage="b" * 600))
    assert info.body == "b" * 500 + "…" and info.message == "m" * 300 + "…"


@pytest.mark.parametrize(
    ("code", "message", "status", "transient"),
    [
        ("ModelNotReadyException", "not ready", 429, True),
        ("ThrottlingException", "slow down", 400, True),
        ("Throttling", "slow down", 400, True),
        ("TooManyRequestsException", "slow down", 400, True),
        ("ServiceUnavailableException", "later", 400, True),
        ("InternalServerError", "oops", 400, True),
        ("InternalStreamFailure", "oops", 400, True),
        ("RequestTimeout", "late", 400, True),
        ("RequestTimeoutException", "late", 400, True),
        ("ValidationError", "Inference Component has no capacity to process this request.", 400, True),
        ("ValidationError", "NoCapacity", 400, True),
        ("ValidationError", "Endpoint x of account 1 not found.", 400, False),
        ("ValidationError", "capacity is fine", 500, False),  # a ValidationError is about the request
        ("AccessDeniedException", "no", 403, False),
        ("SomethingNew", "hm", 499, False),
        ("SomethingNew", "hm", 500, True),
        ("SomethingNew", "hm", 429, True),
        ("SomethingNew", "hm", 428, False),
    ],
)
def test_a_sagemaker_error_is_transient_by_code_then_by_status(code, message, status, transient):
    info = classify(client_error(code, message, status))
    assert info == ErrorInfo(code, message, transient, status)
    assert info.describe() == f"HTTP {status} from SageMaker ({code}): {message}"


def test_a_sagemaker_error_without_code_message_or_status():
    info = classify(ClientError({}, "InvokeEndpoint"))
    assert info == ErrorInfo("Unknown", "", False, None)
    assert info.describe() == "Unknown"
    info = classify(ClientError({"Error": {"Code": "X", "Message": "y" * 600}, "ResponseMetadata": {}}, "Op"))
    assert info == ErrorInfo("X", "y" * 500 + "…", False, None)


def test_an_invocation_error_reads_as_its_description():
    error = InvocationError(ErrorInfo("ThrottlingException", "slow down", True, 400))
    assert str(error) == "HTTP 400 from SageMaker (ThrottlingException): slow down" and error.transient
    assert not InvocationError(ErrorInfo("X", "", False, 400)).transient
    assert str(InvocationError(ErrorInfo("X", "", False, 400))) == "HTTP 400 from SageMaker (X)"


# --- reasons short enough for CloudFormation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "limit", "suffix", "expected"),
    [
        ("abcdef", 6, "", "abcdef"),
        ("abcdef", 5, "", "ab…"),
        ("ééé", 5, "", "é…"),
        ("abcdef", 8, " See X.", " See X."),  # no room for even the marker: the reason goes
        ("abcdef", 8, "XYZ", "ab…XYZ"),
        ("abcdef", 2, "", ""),
        ("abc", 4, "suffix!", "s…"),  # a suffix over the limit is cut itself
        ("a" * 4000, 3000, "", "a" * 2997 + "…"),
    ],
)
def test_short_reason(reason, limit, suffix, expected):
    assert short_reason(reason, limit, suffix=suffix) == expected
    assert len(expected.encode()) <= limit


def test_short_reason_default_limit_is_3000_bytes():
    assert short_reason("a" * 3000) == "a" * 3000
    assert short_reason("a" * 3001) == "a" * 2997 + "…"


def test_a_malformed_response_without_a_body_is_described_without_one():
    assert classify(MalformedResponse("the answer is empty")).describe() == "MalformedResponse: the answer is empty"


def test_a_status_that_is_not_a_number_is_not_shown_as_one():
    response = {"Error": {"Code": "X", "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": "503"}}
    assert classify(ClientError(response, "InvokeEndpoint")) == ErrorInfo("X", "m", False, None)


def test_extra_none_removes_a_default_and_ignores_a_key_never_set():
    assert build_chat_request("hi", extra={"max_tokens": None, "temperature": None}) == {
        "messages": [{"role": "user", "content": "hi"}]
    }


# --- stream decoders: what they report before and after the end ------------------------------------


@pytest.mark.parametrize("decoder_class", [JsonLinesDecoder, SseDecoder])
def test_bytes_that_are_not_utf8_become_replacement_characters(decoder_class):
    decoder = decoder_class()
    prefix = b"data: " if decoder_class is SseDecoder else b""
    events = decoder.feed(prefix + b'{"a": "\xff\xfe"}\n\n') + decoder.close()
    assert [e.data for e in events] == ['{"a": "\ufffd\ufffd"}']


@pytest.mark.parametrize("decoder_class", [JsonLinesDecoder, SseDecoder])
def test_a_decoder_is_neither_done_nor_truncated_until_it_is(decoder_class):
    decoder = decoder_class()
    assert (decoder.done, decoder.truncated, decoder.events_seen) == (False, False, 0)
    decoder.feed(b"")
    assert (decoder.done, decoder.truncated) == (False, False)


@pytest.mark.parametrize("decoder_class", [JsonLinesDecoder, SseDecoder])
def test_a_stream_that_ends_inside_a_character_is_truncated(decoder_class):
    decoder = decoder_class()
    prefix = b"data: " if decoder_class is SseDecoder else b""
    complete = decoder.feed(prefix + b'{"a": 1}\n\n')
    assert [e.data for e in complete] == ['{"a": 1}']
    # A line, then the first half of an emoji: the stream stopped inside a line that had begun.
    events = decoder.feed(prefix + b'{"b": 2}\n' + "🪣".encode()[:2]) + decoder.close()
    # JSON Lines: the complete line counts; SSE: its event never got its blank line, and a new line began.
    assert [e.data for e in events] == (['{"b": 2}'] if decoder_class is JsonLinesDecoder else [])
    assert (decoder.truncated, decoder.done) == (True, False)


@pytest.mark.parametrize("decoder_class", [JsonLinesDecoder, SseDecoder])
def test_a_byte_order_mark_is_dropped_only_at_the_start(decoder_class):
    decoder = decoder_class()
    prefix = b"data: " if decoder_class is SseDecoder else b""
    events = decoder.feed(b"")
    events += decoder.feed("\ufeff".encode() + prefix + b'{"a": "')
    events += decoder.feed('\ufeff"}\n\n'.encode()) + decoder.close()
    assert [e.data for e in events] == ['{"a": "\ufeff"}']


@pytest.mark.parametrize("decoder_class", [JsonLinesDecoder, SseDecoder])
def test_feed_after_close_says_so_and_close_twice_is_harmless(decoder_class):
    decoder = decoder_class()
    prefix = b"data: " if decoder_class is SseDecoder else b""
    assert [e.data for e in decoder.close()] == []
    assert decoder.close() == []
    with pytest.raises(ValueError) as info:
        decoder.feed(prefix + b"{}\n\n")
    assert str(info.value) == "feed() after close()"


@pytest.mark.parametrize("decoder_class", [JsonLinesDecoder, SseDecoder])
def test_events_seen_counts_the_events_returned(decoder_class):
    decoder = decoder_class()
    if decoder_class is SseDecoder:
        text = b"data: 1\n\n: ping\n\ndata: 2\n\ndata: 3\n\ndata: [DONE]\n\n"
    else:
        text = b'{"a": 1}\n\n{"a": 2}\n{"a": 3}\n'
    events = decoder.feed(text) + decoder.close()
    assert len(events) == decoder.events_seen == 3


def test_iter_events_closes_the_decoder_it_reads_with():
    decoder = SseDecoder()
    assert [e.data for e in iter_events([b"data: a\n\ndata: [DONE]\n\n", b"data: b\n\n"], decoder)] == ["a"]
    assert decoder.done
    with pytest.raises(ValueError, match="after close"):
        decoder.feed(b"data: c\n\n")


# -- found by the review of the equivalents list: two mutants listed as equivalent were not --------------


def test_a_byte_order_mark_after_a_leading_blank_line_is_not_at_the_start() -> None:
    # Only the very first bytes may carry a BOM (WHATWG SSE: "one leading U+FEFF is removed"); after a
    # blank line it is part of the field name, and "\ufeffdata" is not a field this decoder knows.
    assert SseDecoder().feed(b"\n\xef\xbb\xbfdata: x\n\n") == []
    decoder = SseDecoder()
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\xef\xbb\xbfdata: y\n\n") == []


class _RaisingClient:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def invoke_endpoint(self, **_: object) -> None:
        raise self.error


def test_an_invocation_error_from_below_reaches_the_caller_as_it_was_raised() -> None:
    error = InvocationError(ErrorInfo("ModelNotReadyException", "the model is still loading", True))
    with pytest.raises(InvocationError) as raised:
        invoke_chat(_RaisingClient(error), "ep", build_chat_request("hi", max_tokens=4, stream=False))
    assert raised.value is error  # not re-classified into a generic error with another code and flag
