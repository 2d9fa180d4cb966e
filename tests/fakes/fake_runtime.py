"""A local SageMaker that the real boto3 clients talk to over HTTP: runtime invocations and two describes.

``sagemaker-runtime`` (``endpoint_url=server.url``):

- ``POST /endpoints/{name}/invocations``: an OpenAI chat completion, or a scripted error.
- ``POST /endpoints/{name}/invocations-response-stream``: the answer as Server-Sent Events, cut into
  ``PayloadPart`` messages at awkward places (inside a multi-byte character, between ``\\r`` and
  ``\\n``), each message encoded here in the AWS event-stream binary format (prelude with lengths and
  CRC32, headers, payload, message CRC32) and sent with chunked transfer encoding, the messages
  themselves split across HTTP chunks, so that botocore's own event-stream parser does the reading.

The OpenAI-compatible path (``POST /endpoints/{name}[/inference-components/{ic}]/openai/v1/chat/completions``,
SageMaker developer guide ``realtime-endpoints-openai-compatible``): the same replies and delays, the SSE
(or JSON Lines) body sent as the container wrote it in plain HTTP chunks, after checking
``Authorization: Bearer <fake.bearer_token>`` (missing: 401, another token: 403; the statuses this fake
chooses, since the guide names none).

``POST /endpoints/{name}/async-invocations`` (``InvokeEndpointAsync``, an endpoint added with ``async_output``):
202 at once with the ``InferenceId`` and the ``X-Amzn-SageMaker-OutputLocation`` / ``-FailureLocation`` headers
(botocore's sagemaker-runtime model), then, on a thread after the reply's ``delay_s``, the answer written to S3
(``FakeSageMaker(s3_url=...)``, moto): ``<async_output>[/<S3OutputPathExtension>]/<uuid>.out`` holds the chat
completion, or for a scripted error ``<async_failure>/<uuid>-error.out`` holds its message, and the endpoint's
``async_success_topic`` or ``async_error_topic`` (moto SNS) gets the notification (the failure object's
name and that the extension does not apply to it are this fake's choice: no AWS source names them). The body
comes inline or from ``InputLocation``.

``sagemaker`` (JSON 1.1, ``X-Amz-Target``): ``DescribeEndpoint`` and ``DescribeInferenceComponent``.

Behaviour is per endpoint: a queue of :class:`Reply` objects (one per invocation, then ``default``),
endpoint and component status, the deployed config name, an inference component whose name must come
in the ``X-Amzn-SageMaker-Inference-Component`` header, and a scale-to-zero component that answers
"no capacity" until it has been asked a few times. Every request is recorded.
"""

from __future__ import annotations

import json
import random
import re
import struct
import sys
import threading
import time
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from tests.fakes.handlers import load_handler  # noqa: F401  (the one loader; callers import it from here)
from tests.fakes.local_server import LocalServer

ACCOUNT = "123456789012"
REGION = "us-east-1"
COMPONENT_HEADER = "x-amzn-sagemaker-inference-component"
DEFAULT_ANSWER = "Buckets hold the sky / objects drift in quiet rows / durable as stone 🪣"
_TOKENS = re.compile(r"\S+\s*|\s+")
_INVOKE_PATH = re.compile(
    r"^/endpoints/(?P<name>[^/]+)/(?P<kind>invocations|invocations-response-stream|async-invocations)$"
)
ASYNC_KIND = "async-invocations"
_OPENAI_PATH = re.compile(
    r"^/endpoints/(?P<name>[^/]+)(?:/inference-components/(?P<component>[^/]+))?/openai/v1/chat/completions$"
)
OPENAI_KIND = "openai-chat-completions"
BEARER_TOKEN = "fake-bearer-token"


# --- AWS event-stream encoding ---------------------------------------------------------------------

_STRING_HEADER = 7


def encode_event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (total and header lengths, their CRC), headers, payload, CRC."""
    encoded_headers = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode("utf-8"), value.encode("utf-8")
        encoded_headers += struct.pack("!B", len(raw_name)) + raw_name
        encoded_headers += struct.pack("!BH", _STRING_HEADER, len(raw_value)) + raw_value
    total = 4 + 4 + 4 + len(encoded_headers) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded_headers))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    message = prelude + encoded_headers + payload
    return message + struct.pack("!I", zlib.crc32(message))


def payload_part(data: bytes) -> bytes:
    return encode_event_message(
        {":event-type": "PayloadPart", ":content-type": "application/octet-stream", ":message-type": "event"},
        data,
    )


def exception_event(code: str, message: str, error_code: str = "StreamBroken") -> bytes:
    body = json.dumps({"Message": message, "ErrorCode": error_code}).encode("utf-8")
    return encode_event_message(
        {":exception-type": code, ":content-type": "application/json", ":message-type": "exception"}, body
    )


# --- scripted behaviour -----------------------------------------------------------------------------


@dataclass
class Reply:
    """How the endpoint answers one invocation."""

    content: str = DEFAULT_ANSWER
    reasoning: str = ""
    error: str | None = None  # SageMaker error code, e.g. ModelError, ValidationError, ThrottlingException
    status: int = 200  # HTTP status of an error
    message: str = ""  # SageMaker's message of an error
    original_status: int | None = None  # ModelError: the container's status
    original_body: str = ""  # ModelError: the container's body
    raw_body: bytes | None = None  # a 200 whose body is exactly this (not a chat completion)
    done: bool = True  # streamed: end with data: [DONE]
    usage: bool = True  # report usage.completion_tokens
    line_end: str = "\n"  # streamed: "\n", "\r\n" or "\r"
    keep_alive: bool = True  # streamed: comment lines between events
    stream_error: str | None = None  # streamed: an exception event (ModelStreamError) after the content
    delay_s: float = 0.0  # before answering
    token_delay_s: float = 0.0  # streamed: before each token
    first_token_delay_s: float | None = None  # streamed: after the headers, before the first token (else token_delay_s)
    seed: int = 7  # where the stream is cut into parts
    stream_format: str = "sse"  # streamed: "sse" (vLLM, SGLang) or "jsonlines" (LMI: one chunk a line, no [DONE])
    raw_stream: bytes | None = None  # streamed: exactly these bytes as the body (hostile framing)

    @classmethod
    def model_error(cls, original_status: int, body: str) -> Reply:
        """The container answered ``original_status``: SageMaker's ModelError (424) around its body."""
        kind = "client" if original_status < 500 else "server"
        message = (
            f'Received {kind} error ({original_status}) from primary with message "{body}". See '
            f"https://{REGION}.console.aws.amazon.com/cloudwatch/home?region={REGION}#logEventViewer:"
            f"group=/aws/sagemaker/Endpoints/x in account {ACCOUNT} for more information."
        )
        return cls(error="ModelError", status=424, message=message, original_status=original_status, original_body=body)

    @classmethod
    def service_error(cls, code: str, message: str = "", status: int | None = None) -> Reply:
        statuses = {
            "ValidationError": 400,
            "ModelNotReadyException": 429,
            "ThrottlingException": 400,
            "InternalFailure": 500,
            "ServiceUnavailable": 503,
        }
        return cls(error=code, status=status or statuses.get(code, 400), message=message or code)


@dataclass
class Recorded:
    kind: str  # invocations | invocations-response-stream | DescribeEndpoint | DescribeInferenceComponent
    endpoint: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeEndpoint:
    name: str
    config_name: str = "config-1"
    status: str = "InService"
    failure_reason: str = ""
    component: str | None = None
    component_status: str = "InService"
    component_model: str | None = None  # DescribeInferenceComponent's Specification.ModelName
    copies: int = 1
    no_capacity_answers: int = 0  # scale-to-zero: "no capacity" this many times, then a copy is up
    # Injected failures by kind: {kind: n} fails every n-th invocation (1-based) with that kind; see injected_reply.
    inject: dict[str, int] = field(default_factory=dict)
    invocations: int = 0
    # Asynchronous inference: the endpoint config's S3OutputPath and S3FailurePath (s3://bucket/prefix), None for a
    # real-time endpoint (which refuses InvokeEndpointAsync).
    async_output: str | None = None
    async_failure: str | None = None
    # Its NotificationConfig: topic ARNs (in moto, beside the bucket) told of each answer and each failure.
    async_success_topic: str | None = None
    async_error_topic: str | None = None
    default: Reply = field(default_factory=Reply)
    replies: deque[Reply] = field(default_factory=deque)

    @property
    def arn(self) -> str:
        return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/{self.name.lower()}"

    @property
    def component_arn(self) -> str:
        return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:inference-component/{self.component}"

    def next_reply(self) -> Reply:
        self.invocations += 1
        for kind, every in self.inject.items():
            if every > 0 and self.invocations % every == 0:
                return injected_reply(kind, self.default)
        return self.replies.popleft() if self.replies else self.default


def injected_reply(kind: str, base: Reply) -> Reply:
    """A failure of one kind: ``ModelError:<status>`` (the container's status), ``ModelStreamError`` or
    ``InternalStreamFailure`` (after the content, mid-stream), else a SageMaker error code."""
    if kind.startswith("ModelError"):
        status = int(kind.partition(":")[2] or 500)
        return Reply.model_error(status, '{"error": "injected"}')
    if kind in ("ModelStreamError", "InternalStreamFailure"):
        return replace(base, stream_error=kind, done=False)
    return Reply.service_error(kind, f"{kind} (injected)")


class FakeSageMaker:
    """Start with ``with FakeSageMaker() as fake:``; point clients at ``fake.url``."""

    def __init__(self, port: int = 0, bearer_token: str = BEARER_TOKEN, s3_url: str | None = None) -> None:
        self.endpoints: dict[str, FakeEndpoint] = {}
        self.s3_url = s3_url  # where asynchronous answers are written (a moto server)
        self.async_threads: list[threading.Thread] = []
        self.bearer_token = bearer_token  # what the OpenAI-compatible path accepts
        self.requests: list[Recorded] = []
        self.cut_streams = 0  # streams whose client went away before the end
        self._lock = threading.Lock()
        fake = self

        class Handler(_Handler):
            owner = fake

        self._server = _Server(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-sagemaker", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeSageMaker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeSageMaker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def connections(self) -> int:
        """TCP connections accepted so far (not reset by :meth:`reset`: compare before and after)."""
        return self._server.connections

    def reset(self) -> None:
        with self._lock:
            self.endpoints.clear()
            self.requests.clear()
            self.cut_streams = 0

    def add_endpoint(self, name: str, *replies: Reply, **settings: Any) -> FakeEndpoint:
        endpoint = FakeEndpoint(name=name, **settings)
        endpoint.replies.extend(replies)
        with self._lock:
            self.endpoints[name] = endpoint
        return endpoint

    def invocations(self, endpoint: str | None = None) -> list[Recorded]:
        return [
            r
            for r in self.requests
            if (r.kind.startswith("invocations") or r.kind == OPENAI_KIND)
            and (endpoint is None or r.endpoint == endpoint)
        ]

    def record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)

    def answer_async(
        self,
        reply: Reply,
        output: str,
        failure: str,
        inference_id: str = "",
        request: dict[str, Any] | None = None,
        topics: tuple[str | None, str | None] = (None, None),
    ) -> None:
        """Write one asynchronous answer after ``reply.delay_s``: the completion, or the error's message; then tell
        the success or error topic, in the message AWS documents ("Check prediction results", SageMaker developer
        guide async-inference-check-predictions.html; its failure form, which AWS does not document, as AWS Labs'
        osml-model-runner reads it: ``invocationStatus`` Failed with a ``failureReason``)."""
        received = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        if reply.delay_s:
            time.sleep(reply.delay_s)
        message: dict[str, Any] = {
            "awsRegion": REGION,
            "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "receivedTime": received,
            "requestParameters": request or {},
            "inferenceId": inference_id,
            "eventVersion": "1.0",
            "eventSource": "aws:sagemaker",
            "eventName": "InferenceResult",
        }
        if reply.error:
            location, topic = failure, topics[1]
            text = reply.original_body if reply.error == "ModelError" and reply.original_body else reply.message
            data = (text or reply.error).encode("utf-8")
            message |= {"invocationStatus": "Failed", "failureReason": f"ClientError: {text or reply.error}"}
        else:
            location, topic = output, topics[0]
            data = reply.raw_body if reply.raw_body is not None else json.dumps(completion_payload(reply)).encode()
            message |= {
                "invocationStatus": "Completed",
                "responseParameters": {"contentType": "application/json", "outputLocation": output},
            }
        bucket, _, key = location.removeprefix("s3://").partition("/")
        client("s3", self.s3_url).put_object(Bucket=bucket, Key=key, Body=data)
        if topic:
            client("sns", self.s3_url).publish(TopicArn=topic, Message=json.dumps(message))

    def settle(self, timeout_s: float = 10.0) -> None:
        """Wait until every asynchronous answer so far has been written."""
        for worker in list(self.async_threads):
            worker.join(timeout_s)

    def endpoint(self, name: str) -> FakeEndpoint | None:
        with self._lock:
            return self.endpoints.get(name)


# --- HTTP -------------------------------------------------------------------------------------------


class _Server(LocalServer):
    connections = 0  # accepted TCP connections (a kept-alive one carries many requests)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.connections += 1  # serve_forever's one thread accepts: no lock needed
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client went away (Ctrl-C, or a kept-alive connection closed at exit)
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: FakeSageMaker
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY (socketserver.StreamRequestHandler): a stream's many small writes would otherwise wait for
    # the client's delayed ACK (Nagle), tens of ms at random, which is the fake's latency, not the endpoint's.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        target = headers.get("x-amz-target", "")
        if target.startswith("SageMaker."):
            self._control_plane(target.removeprefix("SageMaker."), raw, headers)
            return
        openai = _OPENAI_PATH.match(self.path.split("?", 1)[0])
        if openai:
            self._openai(unquote(openai["name"]), openai["component"], raw, headers)
            return
        match = _INVOKE_PATH.match(self.path.split("?", 1)[0])
        if not match:
            self._json(404, {"message": f"no route for {self.path}"})
            return
        name, kind = unquote(match["name"]), match["kind"]
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        self.owner.record(Recorded(kind, name, headers, body))
        if kind == ASYNC_KIND:
            self._invoke_async(name, headers)
            return
        self._invoke(name, kind, headers)

    def _openai(self, name: str, component: str | None, raw: bytes, headers: dict[str, str]) -> None:
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        self.owner.record(Recorded(OPENAI_KIND, name, headers, body))
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            self._json(401, {"message": "Missing bearer token"})
            return
        if token != self.owner.bearer_token:
            self._json(403, {"message": "The security token included in the request is invalid."})
            return
        headers = {k: v for k, v in headers.items() if k != COMPONENT_HEADER}
        if component:
            headers[COMPONENT_HEADER] = unquote(component)  # the URL names the component, as the header does
        streamed = isinstance(body, dict) and body.get("stream") is True
        self._invoke(name, "openai-stream" if streamed else "openai", headers)

    # control plane

    def _control_plane(self, operation: str, raw: bytes, headers: dict[str, str]) -> None:
        request = json.loads(raw or b"{}")
        if operation == "DescribeEndpoint":
            name = request.get("EndpointName", "")
            self.owner.record(Recorded(operation, name, headers, request))
            endpoint = self.owner.endpoint(name)
            if endpoint is None:
                self._aws_error(400, "ValidationException", f'Could not find endpoint "{name}".', json_protocol=True)
                return
            answer = {
                "EndpointName": endpoint.name,
                "EndpointArn": endpoint.arn,
                "EndpointConfigName": endpoint.config_name,
                "EndpointStatus": endpoint.status,
                "CreationTime": time.time(),
                "LastModifiedTime": time.time(),
            }
            if endpoint.failure_reason:
                answer["FailureReason"] = endpoint.failure_reason
            self._json(200, answer, content_type="application/x-amz-json-1.1")
        elif operation == "DescribeInferenceComponent":
            name = request.get("InferenceComponentName", "")
            owner = next((e for e in list(self.owner.endpoints.values()) if e.component == name), None)
            self.owner.record(Recorded(operation, owner.name if owner else "", headers, request))
            if owner is None:
                message = f"Could not find inference component {name!r}."
                self._aws_error(400, "ValidationException", message, json_protocol=True)
                return
            answer = {
                "InferenceComponentName": name,
                "InferenceComponentArn": owner.component_arn,
                "EndpointName": owner.name,
                "EndpointArn": owner.arn,
                "VariantName": "AllTraffic",
                "InferenceComponentStatus": owner.component_status,
                "RuntimeConfig": {"DesiredCopyCount": owner.copies, "CurrentCopyCount": owner.copies},
                **({"Specification": {"ModelName": owner.component_model}} if owner.component_model else {}),
                "CreationTime": time.time(),
                "LastModifiedTime": time.time(),
            }
            self._json(200, answer, content_type="application/x-amz-json-1.1")
        else:
            self._aws_error(400, "UnknownOperationException", operation, json_protocol=True)

    # runtime

    def _invoke(self, name: str, kind: str, headers: dict[str, str]) -> None:
        endpoint = self.owner.endpoint(name)
        if endpoint is None:
            self._aws_error(400, "ValidationError", f"Endpoint {name} of account {ACCOUNT} not found.")
            return
        component = headers.get(COMPONENT_HEADER)
        if endpoint.component and component != endpoint.component:
            if component is None:
                message = (
                    "Inference Component Name header is required for endpoints to which you plan to deploy "
                    "inference components. Please include Inference Component Name header or consider using "
                    "SageMaker models."
                )
            else:
                message = f"Inference Component {component} not found on endpoint {name}."
            self._aws_error(400, "ValidationError", message)
            return
        if component and not endpoint.component:
            self._aws_error(400, "ValidationError", "Inference Component Name header is not allowed for this endpoint.")
            return
        if endpoint.component and endpoint.copies == 0:
            endpoint.no_capacity_answers -= 1
            if endpoint.no_capacity_answers < 0:
                endpoint.copies = 1
            else:
                message = (
                    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be "
                    "in-progress (if configured) or try to increase the capacity by invoking "
                    "UpdateInferenceComponentRuntimeConfig API."
                )
                self._aws_error(400, "ValidationError", message)
                return
        reply = endpoint.next_reply()
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.error and kind.startswith("openai") and reply.error == "ModelError":
            # The OpenAI-compatible path returns the container's answer as it is (the guide).
            self._raw(reply.original_status or 500, reply.original_body.encode("utf-8"), "application/json")
            return
        if reply.error:
            extra: dict[str, Any] = {}
            if reply.error == "ModelError":
                extra = {
                    "OriginalStatusCode": reply.original_status,
                    "OriginalMessage": reply.original_body,
                    "LogStreamArn": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/Endpoints/{name}",
                    "ErrorCode": "CLIENT_ERROR_FROM_MODEL",
                }
            self._aws_error(reply.status, reply.error, reply.message, **extra)
            return
        if kind in ("invocations", "openai"):
            self._complete(reply)
        elif kind == "openai-stream":
            self._stream(reply, openai=True)
        else:
            self._stream(reply)

    def _invoke_async(self, name: str, headers: dict[str, str]) -> None:
        endpoint = self.owner.endpoint(name)
        if endpoint is None:
            self._aws_error(400, "ValidationError", f"Endpoint {name} of account {ACCOUNT} not found.")
            return
        if not endpoint.async_output:
            # The fake's wording: the API reference names no message for a real-time endpoint asked asynchronously.
            self._aws_error(400, "ValidationError", f"Endpoint {name} is not configured for asynchronous inference.")
            return
        identifier = headers.get("x-amzn-sagemaker-inference-id") or f"fake-{time.monotonic_ns()}"
        # SageMaker names the objects itself (a UUID in AWS's notification samples, not the inference id): so here.
        file = uuid.uuid4().hex
        extension = headers.get("x-amzn-sagemaker-s3outputpathextension")
        output_path = endpoint.async_output.rstrip("/") + (f"/{extension.strip('/')}" if extension else "")
        output = f"{output_path}/{file}.out"
        failure = f"{(endpoint.async_failure or endpoint.async_output).rstrip('/')}/{file}-error.out"
        reply = endpoint.next_reply()
        request = {
            "endpointName": name,
            "contentType": headers.get("x-amzn-sagemaker-content-type", "application/octet-stream"),
            **(
                {"inputLocation": headers["x-amzn-sagemaker-inputlocation"]}
                if "x-amzn-sagemaker-inputlocation" in headers
                else {}
            ),
        }
        topics = (endpoint.async_success_topic, endpoint.async_error_topic)
        worker = threading.Thread(
            target=self.owner.answer_async, args=(reply, output, failure, identifier, request, topics), daemon=True
        )
        self.owner.async_threads.append(worker)
        worker.start()
        location = {"X-Amzn-SageMaker-OutputLocation": output, "X-Amzn-SageMaker-FailureLocation": failure}
        self._json(202, {"InferenceId": identifier}, **location)

    def _complete(self, reply: Reply) -> None:
        if reply.raw_body is not None:
            self._raw(200, reply.raw_body, "application/json")
            return
        self._json(200, completion_payload(reply))

    def _stream(self, reply: Reply, *, openai: bool = False) -> None:
        """The streamed answer: event-stream ``PayloadPart`` messages, or (``openai``) the body itself."""
        jsonlines = reply.stream_format == "jsonlines"
        sse, starts = _jsonlines_bytes(reply) if jsonlines else _sse_bytes(reply)
        if reply.raw_stream is not None:
            sse, starts = reply.raw_stream, []
        body_type = "application/jsonlines" if jsonlines else "text/event-stream"
        self.send_response(200)
        if openai:
            self.send_header("Content-Type", body_type)
        else:
            self.send_header("Content-Type", "application/vnd.amazon.eventstream")
            self.send_header("X-Amzn-SageMaker-Content-Type", body_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        rng = random.Random(reply.seed)
        position = 0
        first = reply.token_delay_s if reply.first_token_delay_s is None else reply.first_token_delay_s
        began = time.monotonic()
        token_at = {start: index for index, start in enumerate(starts)}
        try:
            while position < len(sse):
                size = rng.choice((1, 2, 3, 5, 8, 13, 21))
                if first or reply.token_delay_s:
                    # A token's delay comes before the part that starts its event: no part reaches into the
                    # next token's event, so each token is complete when its delay begins.
                    size = min([size, *(s - position for s in starts if position < s < position + size)])
                    if position in token_at:
                        # On a clock, as an engine emits them: token i is due at first + i * token delay.
                        due = began + first + token_at[position] * reply.token_delay_s
                        time.sleep(max(0.0, due - time.monotonic()))
                part = sse[position : position + size]
                self._write_split(part if openai else payload_part(part), rng)
                position += size
            if reply.stream_error and openai:
                self.close_connection = True  # no event-stream framing to carry it: the stream just breaks
                return
            if reply.stream_error:
                self._write_split(exception_event(reply.stream_error, "Model stream broke mid-answer."), rng)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with self.owner._lock:
                self.owner.cut_streams += 1  # the client stopped reading (Ctrl-C, a stop button)

    # HTTP helpers

    def _write_split(self, message: bytes, rng: random.Random) -> None:
        """Send one event-stream message as one or two HTTP chunks (botocore must reassemble them)."""
        cut = rng.randrange(1, len(message)) if len(message) > 1 and rng.random() < 0.5 else len(message)
        for piece in (message[:cut], message[cut:]):
            if piece:
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.flush()

    def _raw(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amzn-RequestId", "00000000-0000-0000-0000-000000000000")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _json(self, status: int, payload: Any, content_type: str = "application/json", **headers: str) -> None:
        self._raw(status, json.dumps(payload).encode("utf-8"), content_type, headers)

    def _aws_error(self, status: int, code: str, message: str, *, json_protocol: bool = False, **members: Any) -> None:
        if json_protocol:
            self._json(status, {"__type": code, "message": message}, content_type="application/x-amz-json-1.1")
        else:
            body = {"message": message, **{k: v for k, v in members.items() if v is not None}}
            self._raw(status, json.dumps(body).encode("utf-8"), "application/json", {"x-amzn-ErrorType": code})


def completion_payload(reply: Reply) -> dict[str, Any]:
    """The chat completion a container writes for ``reply`` (non-streamed)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    tokens = _tokens(reply.reasoning) + _tokens(reply.content)
    answer: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "/opt/ml/model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    if reply.usage:
        answer["usage"] = {"prompt_tokens": 12, "completion_tokens": len(tokens), "total_tokens": 12 + len(tokens)}
    return answer


def _tokens(text: str) -> list[str]:
    return _TOKENS.findall(text)


def _sse_bytes(reply: Reply) -> tuple[bytes, list[int]]:
    """The whole SSE body and the offsets where each token's event starts."""
    end = reply.line_end
    out = bytearray()
    starts: list[int] = []

    def event(payload: dict[str, Any] | str, token: bool = False) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
        if token:
            starts.append(len(out))
        out.extend(f"data: {data}{end}{end}".encode())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    event(chunk({"role": "assistant", "content": ""}))
    tokens = 0
    for kind, text in (("reasoning_content", reply.reasoning), ("content", reply.content)):
        for token in _tokens(text):
            if reply.keep_alive and tokens % 4 == 3:
                out.extend(f": keep-alive{end}{end}".encode())
            event(chunk({kind: token}), token=True)
            tokens += 1
    event(chunk({}, "stop"))
    if reply.usage:
        event({"id": "chatcmpl-fake", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": tokens}})
    if reply.done:
        event("[DONE]")
    return bytes(out), starts


def _jsonlines_bytes(reply: Reply) -> tuple[bytes, list[int]]:
    """LMI's stream: each SSE event's JSON on a line of its own, then an empty line, no [DONE].

    DJL Serving strips vLLM's ``data: `` and sends each chunk with a newline; the ``[DONE]`` event
    becomes the empty last chunk (djl_python/lmi_vllm/request_response_utils.py
    ``vllm_stream_output_formatter``, djl_python/async_utils.py ``_create_output``). Offsets are the
    token lines', as for SSE. ``done=False`` cuts the stream inside its last line.
    """
    sse, sse_starts = _sse_bytes(Reply(**{**reply.__dict__, "done": False, "keep_alive": False, "line_end": "\n"}))
    token_events = set(sse_starts)
    out = bytearray()
    starts: list[int] = []
    line_start = 0
    offset = 0
    for event in sse.split(b"\n\n")[:-1]:
        if offset in token_events:
            starts.append(len(out))
        line_start = len(out)
        out.extend(event.removeprefix(b"data: ") + reply.line_end.encode())
        offset += len(event) + 2
    if reply.done:
        out.extend(reply.line_end.encode())
    else:
        del out[line_start + (len(out) - line_start) // 2 :]
    return bytes(out), starts


# --- clients and handlers for tests -----------------------------------------------------------------

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def client(service: str, url: str | None = None, **config: Any) -> Any:
    """A real boto3 client for ``service`` at ``url`` (the fake), one attempt per call unless told."""
    import boto3
    from botocore.config import Config

    settings = {"retries": {"total_max_attempts": 1}, "read_timeout": 20, **config}
    return boto3.client(service, endpoint_url=url, region_name=REGION, config=Config(**settings), **CREDENTIALS)
