"""Ask a deployed model something and watch the answer arrive, with its time to first token and speed.

    python -m llmops.invoke --endpoint NAME "Write a haiku about S3"
    python -m llmops.invoke --endpoint NAME --engine lmi "Write a haiku about S3"
    echo "Write a haiku about S3" | python -m llmops.invoke --endpoint NAME --no-stream -
    python -m llmops.invoke --openai-base-url URL [--bearer-token-env OPENAI_API_KEY] "Write a haiku about S3"
    python -m llmops.invoke --async --endpoint NAME [--wait-s 900 | --no-wait] "Summarize this report: ..."

The answer goes to stdout as it streams; reasoning (if the model emits any) and the timing line go to
stderr, so ``> answer.txt`` keeps only the answer. Exit status: 0 answered, 1 the invocation failed
(one line says why), 2 bad arguments, 130 interrupted with Ctrl-C.

``--async`` asks an asynchronous endpoint: the request is queued (InvokeEndpointAsync, the body inline up to
128,000 bytes; with ``--input-s3-uri`` it is uploaded there first and sent as its InputLocation, as a larger one
must be), then its answer object is looked for in S3 until ``--wait-s`` (default 900 s, the default invocation
timeout, or ``--invocation-timeout-s`` when longer) and printed as a whole answer is, with the queue-to-answer
time and the inference id on the timing line. A failure object ends it with exit 1 and its text. ``--no-wait``
prints ``inference_id=``, ``output_location=`` and ``failure_location=`` lines (and ``input_location=`` for an
uploaded request) and exits 0. The answer object is the user's and stays where SageMaker wrote it unless
``--delete-output``; an uploaded request is deleted once it was answered. Needs sagemaker:InvokeEndpointAsync,
s3:GetObject on the output and failure prefixes and s3:ListBucket on their bucket (without it S3 answers 403, not
404, for an answer not written yet: S3 API reference, GetObject), s3:PutObject under ``--input-s3-uri`` and
s3:DeleteObject for what it deletes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

import safejson
from endpoint_client import (
    Delta,
    InvocationError,
    InvocationResult,
    OpenAiEndpoint,
    build_chat_request,
    classify,
    invoke_chat,
    stream_chat,
)
from endpoint_client.async_invocations import (
    DEFAULT_INVOCATION_TIMEOUT_S,
    EXPIRED,
    FAILED,
    INVOCATION_TIMEOUT_RANGE,
    MAX_INLINE_BODY_BYTES,
    REQUEST_TTL_RANGE,
    Submitted,
    new_inference_id,
    remove,
    s3_location,
    submit_chat,
    wait_for_answer,
)
from llmops.bench import (
    ASYNC_REQUEST_RANGES,
    add_async_request_options,
    add_openai_options,
    openai_endpoint,
    range_problems,
    s3_client_like,
)
from llmops.engine_streams import engine_option, stream_formats
from llmops.fleet_target import TargetError, add_fleet_options, apply_target

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# Past a request's longest queue wait and longest processing (RequestTTLSeconds and InvocationTimeoutSeconds at
# their maximum: botocore's sagemaker-runtime model) SageMaker has answered or given up.
MAX_WAIT_S = REQUEST_TTL_RANGE[1] + INVOCATION_TIMEOUT_RANGE[1]
WAIT_RANGES = {"wait_s": (0, False, MAX_WAIT_S, "seconds")}
ASYNC_ONLY = ("wait_s", "no_wait", "input_s3_uri", "output_objects", *ASYNC_REQUEST_RANGES)


class _Printer:
    """Writes each delta the moment it arrives: answer text to ``out``, reasoning to ``err``."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self.wrote_answer = False
        self.wrote_reasoning = False

    def __call__(self, delta: Delta) -> None:
        if delta.reasoning:
            self.err.write(delta.reasoning)
            self.err.flush()
            self.wrote_reasoning = True
        if delta.content:
            self.out.write(delta.content)
            self.out.flush()
            self.wrote_answer = True


def timing_line(result: InvocationResult) -> str:
    parts = []
    if result.time_to_first_token_s is not None:
        parts.append(f"time to first token {result.time_to_first_token_s * 1000:.0f} ms")
    parts.append(f"total {result.latency_s:.2f} s")
    counted = "" if result.token_source == "usage" else f" (counted {result.token_source})"
    parts.append(f"{result.tokens} tokens{counted}")
    parts.append(f"{result.tokens_per_second:.1f} tokens/s")
    if result.streamed and not result.done:
        parts.append("stream ended without [DONE]")
    return " | ".join(parts)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llmops.invoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", help="the user message, or - to read it from stdin")
    parser.add_argument("--endpoint", help="SageMaker endpoint name (the stack's EndpointName output)")
    parser.add_argument(
        "--inference-component", "--ic", help="inference component to invoke on that endpoint (short: --ic)"
    )
    parser.add_argument(
        "--stream", action=argparse.BooleanOptionalAction, help="stream tokens (default: yes; not with --async)"
    )
    parser.add_argument("--max-tokens", type=int, default=512, help="most tokens to generate (default: 512)")
    parser.add_argument("--system", help="a system message before the prompt")
    parser.add_argument("--extra", help="JSON object merged into the request body, e.g. '{\"temperature\": 0.2}'")
    parser.add_argument("--region", help="AWS region (default: the AWS CLI's configuration)")
    add_openai_options(parser)
    engine_option(parser)
    add_fleet_options(parser)
    group = parser.add_argument_group("asynchronous endpoints (--async)")
    group.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="queue the request on an asynchronous endpoint (InvokeEndpointAsync) and wait for its answer in S3",
    )
    group.add_argument(
        "--wait-s",
        type=float,
        metavar="S",
        help=f"how long to wait for the answer (default: {DEFAULT_INVOCATION_TIMEOUT_S}, the default invocation "
        f"timeout, or --invocation-timeout-s when longer; at most {MAX_WAIT_S:,}: the longest queue wait and "
        "processing together)",
    )
    group.add_argument(
        "--no-wait",
        action="store_true",
        help="print the inference id and the answer's and failure's locations, one per line, and exit",
    )
    group.add_argument(
        "--input-s3-uri",
        metavar="S3_URI",
        help=f"s3://bucket/prefix/ to upload the request to and send as InputLocation (needed over "
        f"{MAX_INLINE_BODY_BYTES:,} bytes, the inline limit); deleted once answered",
    )
    outputs = group.add_mutually_exclusive_group()
    outputs.add_argument(
        "--keep-output",
        dest="output_objects",
        action="store_const",
        const="keep",
        help="leave the answer (or failure) object where SageMaker wrote it (the default)",
    )
    outputs.add_argument(
        "--delete-output",
        dest="output_objects",
        action="store_const",
        const="delete",
        help="delete the answer and failure objects once the answer is printed",
    )
    add_async_request_options(group)
    return parser


def _async_problems(args: argparse.Namespace) -> list[str]:
    """Every async option out of its range or without ``--async``, every option that does not go with it."""
    problems = range_problems(args, {**WAIT_RANGES, **ASYNC_REQUEST_RANGES})
    if not args.asynchronous:
        given = [name for name in ASYNC_ONLY if getattr(args, name) not in (None, False)]
        # --keep-output and --delete-output both set output_objects: the flag is named by its value.
        flags = [
            f"--{args.output_objects}-output" if n == "output_objects" else f"--{n.replace('_', '-')}" for n in given
        ]
        return problems + [f"{flag} needs --async" for flag in flags]
    if args.openai_base_url:
        # "The presence of an asynchronous inference configuration ... implies that the endpoint can only receive
        # asynchronous invocations" (SageMaker developer guide, async-inference.html).
        problems.append(
            "--openai-base-url does not go with --async: an asynchronous endpoint takes only InvokeEndpointAsync"
        )
    if args.stream:
        problems.append("--stream does not go with --async: an asynchronous endpoint writes its answer whole")
    if args.inference_component or args.adapter:
        option = "--ic" if args.inference_component else "--adapter"
        problems.append(f"{option} does not go with --async: InvokeEndpointAsync takes no inference component")
    if args.no_wait:
        problems.extend(
            f"--{name} does not go with --no-wait: nothing is waited for"
            for name, given in (("wait-s", args.wait_s is not None), ("delete-output", args.output_objects == "delete"))
            if given
        )
    if args.input_s3_uri:
        try:
            input_prefix(args.input_s3_uri)
        except ValueError as e:
            problems.append(f"--input-s3-uri: {e}")
    return problems


def input_prefix(uri: str) -> tuple[str, str]:
    """``s3://bucket[/prefix]`` -> (bucket, prefix ending in ``/`` or empty); ValueError otherwise."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/") if uri.startswith("s3://") else ("", "", "")
    if not bucket or any(c.isspace() for c in uri):
        raise ValueError(f"{uri!r} is not an S3 prefix (s3://<bucket>/<prefix>/)")
    return bucket, (prefix if not prefix or prefix.endswith("/") else f"{prefix}/")


def async_timing_line(result: InvocationResult, submitted: Submitted) -> str:
    """The timing line of an asynchronous answer: no tokens/s, since the time includes the queue's."""
    counted = "" if result.token_source == "usage" else f" (counted {result.token_source})"
    queued = f"queue to answer {result.latency_s:.2f} s"
    return f"{queued} | {result.tokens} tokens{counted} | inference id {submitted.inference_id}"


def _invoke_async(
    args: argparse.Namespace, body: Mapping[str, Any], runtime: Any, s3: Any, out: TextIO, err: TextIO
) -> int:
    """``--async``: upload (with ``--input-s3-uri``), submit, then print the locations (``--no-wait``) or wait for
    the answer and print it; exit status as ``main``'s."""

    def fail(code: int, message: str) -> int:
        print(f"error: {message}", file=err)
        return code

    def cleanup(submitted: Submitted | None) -> None:
        """Our upload once SageMaker answered (or refused) it; the output objects only with --delete-output."""
        try:
            if input_location:
                bucket, key = s3_location(input_location)
                s3.delete_object(Bucket=bucket, Key=key)
            if submitted is not None and args.output_objects == "delete":
                remove(s3, submitted)
        except Exception as e:  # the answer was given: a leftover object is a warning, not a failure
            print(f"warning: could not delete what this request left in S3: {classify(e).describe()}", file=err)

    inference_id = new_inference_id()
    raw = json.dumps(body).encode("utf-8")  # as submit_chat encodes it
    input_location = None
    if args.input_s3_uri:
        bucket, prefix = input_prefix(args.input_s3_uri)
        key = f"{prefix}{inference_id}.json"
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=raw, ContentType="application/json")
        except Exception as e:  # botocore ClientError, connection errors
            return fail(EXIT_FAILED, f"uploading the request to s3://{bucket}/{key} failed: {classify(e).describe()}")
        input_location = f"s3://{bucket}/{key}"
    elif len(raw) > MAX_INLINE_BODY_BYTES:
        return fail(
            EXIT_USAGE,
            f"the request is {len(raw):,} bytes; an inline body is at most {MAX_INLINE_BODY_BYTES:,} bytes "
            "(InvokeEndpointAsync Body): pass --input-s3-uri s3://<bucket>/<prefix>/ to upload it first",
        )
    try:
        submitted = submit_chat(
            runtime,
            args.endpoint,
            body,
            inference_id=inference_id,
            input_location=input_location,
            invocation_timeout_s=args.invocation_timeout_s,
            request_ttl_s=args.request_ttl_s,
        )
    except InvocationError as e:
        cleanup(None)
        hint = " (transient: try again)" if e.transient else ""
        return fail(EXIT_FAILED, f"invoking {args.endpoint} asynchronously failed: {e}{hint}")
    if args.no_wait:
        lines = {
            "inference_id": submitted.inference_id,
            "output_location": submitted.output_location,
            "failure_location": submitted.failure_location,
            "input_location": input_location,
        }
        out.write("".join(f"{name}={value}\n" for name, value in lines.items() if value))
        out.flush()
        return 0
    # Unless told, as long as the container may take (the queue's time comes on top: --wait-s for a long queue).
    wait_s = max(DEFAULT_INVOCATION_TIMEOUT_S, args.invocation_timeout_s or 0) if args.wait_s is None else args.wait_s
    try:
        result = wait_for_answer(s3, submitted, deadline=time.time() + wait_s)
    except KeyboardInterrupt:
        print(
            f"interrupted: request {submitted.inference_id} stays queued; its answer will be at "
            f"{submitted.output_location}",
            file=err,
        )
        return EXIT_INTERRUPTED
    except InvocationError as e:
        if e.info.code == EXPIRED:
            return fail(
                EXIT_FAILED,
                f"no answer from {args.endpoint} within --wait-s {wait_s:g} s; request {submitted.inference_id} may "
                f"still be queued or running: its answer will be at {submitted.output_location} (reads denied for "
                "want of s3:GetObject or s3:ListBucket on it look the same: S3 answers AccessDenied for a missing "
                "object to a reader without ListBucket)",
            )
        cleanup(submitted if e.info.code == FAILED else None)
        return fail(EXIT_FAILED, f"invoking {args.endpoint} asynchronously failed: {e}")
    printer = _Printer(out, err)
    printer(Delta(content=result.content, reasoning=result.reasoning))
    if not result.content and not result.reasoning:
        cleanup(submitted)
        return fail(EXIT_FAILED, f"{args.endpoint} answered with empty content")
    out.write("\n")
    out.flush()
    if printer.wrote_reasoning:
        err.write("\n")
    print(async_timing_line(result, submitted), file=err)
    cleanup(submitted)
    if args.output_objects != "delete":
        print(f"answer kept at {submitted.output_location} (--delete-output deletes it)", file=err)
    return 0


def _runtime_client(region: str | None) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=10, read_timeout=300, retries={"mode": "standard", "total_max_attempts": 3})
    return boto3.client("sagemaker-runtime", region_name=region, config=config)


def main(
    argv: list[str] | None = None,
    *,
    runtime_client: Any = None,
    cloudformation_client: Any = None,
    s3_client: Any = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """``s3_client`` (with ``--async``): where the request is uploaded and its answer read; default: one from the
    runtime client's region."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    environ = os.environ if environ is None else environ
    parser = _parser()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)

    def fail(code: int, message: str) -> int:
        print(f"error: {message}", file=stderr)
        return code

    try:
        prompt = stdin.read() if args.prompt == "-" else args.prompt
        if not prompt.strip():
            return fail(EXIT_USAGE, "the prompt is empty")
        if args.max_tokens < 1:
            return fail(EXIT_USAGE, f"--max-tokens {args.max_tokens} must be at least 1")
        problems = _async_problems(args)
        if problems:
            return fail(EXIT_USAGE, "; ".join(problems))
        stream = args.stream is not False and not args.asynchronous
        try:
            extra = safejson.loads(args.extra, source="--extra") if args.extra else None
        except json.JSONDecodeError as e:
            return fail(EXIT_USAGE, f"--extra is not JSON ({e.msg} at column {e.colno})")
        if extra is not None and not isinstance(extra, dict):
            return fail(EXIT_USAGE, "--extra must be a JSON object")
        try:
            body = build_chat_request(
                prompt, max_tokens=args.max_tokens, system=args.system, extra=extra, stream=stream
            )
        except ValueError as e:
            return fail(EXIT_USAGE, f"--extra: {e}")

        if args.openai_base_url:
            try:
                runtime_client = openai_endpoint(args, environ)
            except ValueError as e:
                return fail(EXIT_USAGE, str(e))
        else:
            try:
                apply_target(args, cloudformation_client)
            except TargetError as e:
                return fail(EXIT_USAGE, str(e))
            if args.asynchronous and args.inference_component:
                return fail(EXIT_USAGE, f"--deployment {args.deployment} is an inference component: not with --async")
        target = args.openai_base_url or args.endpoint
        if runtime_client is None:
            from botocore.exceptions import NoRegionError

            try:
                runtime_client = _runtime_client(args.region)
            except NoRegionError:
                return fail(EXIT_USAGE, "no AWS region: pass --region or set AWS_REGION")
        if args.asynchronous:
            s3_client = s3_client or s3_client_like(runtime_client, pool=2)
            return _invoke_async(args, body, runtime_client, s3_client, stdout, stderr)

        printer = _Printer(stdout, stderr)
        try:
            if isinstance(runtime_client, OpenAiEndpoint) and stream:
                result = runtime_client.stream_chat(body, on_delta=printer, stream_format=stream_formats()[args.engine])
            elif isinstance(runtime_client, OpenAiEndpoint):
                result = runtime_client.invoke_chat(body)
                printer(Delta(content=result.content, reasoning=result.reasoning))
            elif stream:
                result = stream_chat(
                    runtime_client,
                    args.endpoint,
                    body,
                    inference_component_name=args.inference_component,
                    on_delta=printer,
                    stream_format=stream_formats()[args.engine],
                )
            else:
                result = invoke_chat(
                    runtime_client, args.endpoint, body, inference_component_name=args.inference_component
                )
                printer(Delta(content=result.content, reasoning=result.reasoning))
        except InvocationError as e:
            if printer.wrote_answer:
                stdout.write("\n")
            hint = " (transient: try again)" if e.transient else ""
            return fail(EXIT_FAILED, f"invoking {target} failed: {e}{hint}")
        if not result.content and not result.reasoning:
            return fail(EXIT_FAILED, f"{target} answered with empty content")
        stdout.write("\n")
        stdout.flush()
        if printer.wrote_reasoning:
            stderr.write("\n")
        print(timing_line(result), file=stderr)
        return 0
    except KeyboardInterrupt:
        try:
            stdout.write("\n")
            stdout.flush()
            print("interrupted", file=stderr)
        except (OSError, ValueError):
            pass
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
