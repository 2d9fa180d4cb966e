"""How fast does the client reassemble a streamed answer? JSON Lines (LMI) against SSE (vLLM, SGLang).

    .venv/bin/python benchmarks/stream_decode.py [--tokens 20000] [--runs 5]

The same answer (chat.completion.chunk per token, multi-byte text included) is framed both ways,
cut into PayloadPart-sized pieces of 1-64 bytes (boundaries anywhere, as SageMaker delivers them),
and decoded and parsed into deltas. Baseline: the SSE decoder on its framing, in the same process.
Figures are medians of --runs runs after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from endpoint_client import new_decoder, parse_delta

WORDS = ["Buckets ", "hold ", "the ", "sky ", "🪣 ", "漢字 ", "objects ", "drift "]


def bodies(tokens: int) -> dict[str, bytes]:
    chunks = [
        json.dumps(
            {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": WORDS[i % 8]}}]},
            ensure_ascii=False,
        )
        for i in range(tokens)
    ]
    return {
        "sse": "".join(f"data: {c}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n",
        "jsonlines": "".join(f"{c}\n" for c in chunks).encode() + b"\n",
    }


def parts(body: bytes, seed: int = 7) -> list[bytes]:
    rng, out, position = random.Random(seed), [], 0
    while position < len(body):
        size = rng.randint(1, 64)
        out.append(body[position : position + size])
        position += size
    return out


def decode(stream_format: str, pieces: list[bytes]) -> int:
    decoder = new_decoder(stream_format)
    deltas = 0
    for piece in pieces:
        for event in decoder.feed(piece):
            deltas += bool(parse_delta(event.data).content)
    for event in decoder.close():
        deltas += bool(parse_delta(event.data).content)
    return deltas


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results = {}
    for name, body in bodies(args.tokens).items():
        pieces = parts(body)
        assert decode(name, pieces) == args.tokens
        samples = []
        for _ in range(args.runs):
            start = time.perf_counter()
            decode(name, pieces)
            samples.append(time.perf_counter() - start)
        results[name] = (statistics.median(samples), len(body), len(pieces))
    base = results["sse"][0]
    for name, (seconds, size, count) in results.items():
        print(
            f"{name:9} {args.tokens} deltas, {size / 1e6:.2f} MB in {count} parts: {seconds * 1000:.0f} ms "
            f"({args.tokens / seconds:,.0f} deltas/s, {seconds / base:.2f}x the SSE baseline)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
