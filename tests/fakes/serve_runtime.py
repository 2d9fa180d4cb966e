"""Run the fake SageMaker runtime on its own, to try ``llmops.playground`` and ``llmops.bench`` without AWS.

    python -m tests.fakes.serve_runtime --port 8090 --first-token-ms 200 --token-ms 20 --answer-tokens 64
    export AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME=http://127.0.0.1:8090 AWS_DEFAULT_REGION=us-east-1 \\
           AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
    python -m llmops.bench --endpoint demo --concurrency 1,4 --requests 16

It serves one endpoint (``--endpoint``, default ``demo``; ``--ic NAME`` makes it an inference-component
endpoint) until Ctrl-C. ``--inject KIND=N`` fails every N-th invocation with KIND (repeatable):
a SageMaker error code (``ThrottlingException``), ``ModelError:500`` or ``ModelStreamError``.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import threading

from tests.fakes.fake_runtime import FakeSageMaker, Reply

_WORDS_TEXT = (
    "bucket object region prefix endpoint model token stream latency replica copy scale instance "
    "weights cache tensor batch request answer prompt shard queue signal metric alarm"
)
_WORDS = tuple(_WORDS_TEXT.split())


def answer_text(tokens: int, seed: int = 0) -> str:
    """``tokens`` words (the fake streams one word per event), the same for a given seed."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(tokens)) + "."


def _inject(value: str) -> tuple[str, int]:
    kind, _, every = value.partition("=")
    if not kind or not every.isdigit() or int(every) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected KIND=N with N >= 1, e.g. ThrottlingException=10")
    return kind, int(every)


def main(argv: list[str] | None = None, *, ready: threading.Event | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.serve_runtime", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--endpoint", default="demo")
    parser.add_argument("--ic", help="serve as an inference-component endpoint with this component")
    parser.add_argument("--first-token-ms", type=float, default=200.0)
    parser.add_argument("--token-ms", type=float, default=20.0)
    parser.add_argument("--answer-tokens", type=int, default=64)
    parser.add_argument("--inject", type=_inject, action="append", default=[], metavar="KIND=N")
    args = parser.parse_args(argv)
    reply = Reply(
        content=answer_text(args.answer_tokens),
        first_token_delay_s=args.first_token_ms / 1000,
        token_delay_s=args.token_ms / 1000,
        keep_alive=False,
    )
    fake = FakeSageMaker(port=args.port)
    fake.add_endpoint(args.endpoint, component=args.ic, default=reply, inject=dict(args.inject))
    with fake:
        print(f"fake SageMaker runtime at {fake.url}: endpoint {args.endpoint}", file=sys.stderr, flush=True)
        if ready is not None:
            ready.set()
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
