"""How fast does the client reassemble a streamed answer? JSON Lines (LMI) against SSE (vLLM, SGLang).

    .venv/bin/python benchmarks/stream_decode.py [--tokens 20000] [--runs 5]

The same answer (chat.completion.chunk per token, multi-byte text included) is framed both ways,
cut into PayloadPart-sized pieces of 1-64 bytes (boundaries anywhere, as SageMaker delivers them),
and decoded and parsed into deltas. Baseline: the SSE decoder on its framing, in the same process.
Figures are medians of --runs runs after one warm-up.

Then the hostile shapes of issue 23: one 2 MB line in 1 KiB parts (22 s before the decoders scanned only
new bytes), and one 100 MiB event in 64 KiB parts, which the default 16 MiB cap refuses: the time to the
refusal, how much was fed, and the decoder's peak memory (tracemalloc; 61 s and 514 MiB before the cap).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from endpoint_client import StreamLimitExceeded, new_decoder, parse_delta

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


def long_line(stream_format: str, size: int, part: int) -> float:
    """Seconds to decode one line of ``size`` bytes fed in ``part``-byte pieces."""
    prefix = b"data: " if stream_format == "sse" else b""
    line = prefix + b'{"choices": [{"delta": {"content": "' + b"a" * size + b'"}}]}\n\n'
    decoder = new_decoder(stream_format)
    start = time.perf_counter()
    for offset in range(0, len(line), part):
        decoder.feed(line[offset : offset + part])
    decoder.close()
    return time.perf_counter() - start


def oversized_event(stream_format: str, size: int, part: int) -> tuple[float, int, int]:
    """(seconds to the refusal, bytes fed, peak traced bytes) for one event of ``size`` bytes."""
    decoder = new_decoder(stream_format)
    fed = 0
    tracemalloc.start()
    start = time.perf_counter()
    try:
        decoder.feed(b"data: " if stream_format == "sse" else b'"')
        while fed < size:
            decoder.feed(b"x" * part)  # a new object each time, as botocore hands them over
            fed += part
        decoder.close()
    except StreamLimitExceeded:
        pass
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, fed, peak


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
    for name in results:
        seconds = long_line(name, 2_000_000, 1024)
        print(f"{name:9} one 2 MB line in 1 KiB parts: {seconds * 1000:.0f} ms")
    for name in results:
        seconds, fed, peak = oversized_event(name, 100 * 2**20, 64 * 1024)
        print(
            f"{name:9} one 100 MiB event in 64 KiB parts: refused after {fed / 2**20:.0f} MiB "
            f"in {seconds * 1000:.0f} ms, peak {peak / 2**20:.0f} MiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
