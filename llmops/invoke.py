"""Ask a deployed model something and watch the answer arrive, with its time to first token and speed.

    python -m llmops.invoke --endpoint NAME "Write a haiku about S3"
    python -m llmops.invoke --endpoint NAME --engine lmi "Write a haiku about S3"
    echo "Write a haiku about S3" | python -m llmops.invoke --endpoint NAME --no-stream -
    python -m llmops.invoke --openai-base-url URL [--bearer-token-env OPENAI_API_KEY] "Write a haiku about S3"

The answer goes to stdout as it streams; reasoning (if the model emits any) and the timing line go to
stderr, so ``> answer.txt`` keeps only the answer. Exit status: 0 answered, 1 the invocation failed
(one line says why), 2 bad arguments, 130 interrupted with Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import safejson
from endpoint_client import (
    Delta,
    InvocationError,
    InvocationResult,
    OpenAiEndpoint,
    build_chat_request,
    invoke_chat,
    stream_chat,
)
from llmops.bench import add_openai_options, openai_endpoint
from llmops.engine_streams import engine_option, stream_formats
from llmops.fleet_target import TargetError, add_fleet_options, apply_target

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


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
        "--stream", action=argparse.BooleanOptionalAction, default=True, help="stream tokens (default: yes)"
    )
    parser.add_argument("--max-tokens", type=int, default=512, help="most tokens to generate (default: 512)")
    parser.add_argument("--system", help="a system message before the prompt")
    parser.add_argument("--extra", help="JSON object merged into the request body, e.g. '{\"temperature\": 0.2}'")
    parser.add_argument("--region", help="AWS region (default: the AWS CLI's configuration)")
    add_openai_options(parser)
    engine_option(parser)
    add_fleet_options(parser)
    return parser


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
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
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
        try:
            extra = safejson.loads(args.extra, source="--extra") if args.extra else None
        except json.JSONDecodeError as e:
            return fail(EXIT_USAGE, f"--extra is not JSON ({e.msg} at column {e.colno})")
        if extra is not None and not isinstance(extra, dict):
            return fail(EXIT_USAGE, "--extra must be a JSON object")
        try:
            body = build_chat_request(
                prompt, max_tokens=args.max_tokens, system=args.system, extra=extra, stream=args.stream
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
        target = args.openai_base_url or args.endpoint
        if runtime_client is None:
            from botocore.exceptions import NoRegionError

            try:
                runtime_client = _runtime_client(args.region)
            except NoRegionError:
                return fail(EXIT_USAGE, "no AWS region: pass --region or set AWS_REGION")

        printer = _Printer(stdout, stderr)
        try:
            if isinstance(runtime_client, OpenAiEndpoint) and args.stream:
                result = runtime_client.stream_chat(body, on_delta=printer, stream_format=stream_formats()[args.engine])
            elif isinstance(runtime_client, OpenAiEndpoint):
                result = runtime_client.invoke_chat(body)
                printer(Delta(content=result.content, reasoning=result.reasoning))
            elif args.stream:
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
