"""What does the llama.cpp adapter (containers/llamacpp/serve.py) cost? TTFT and tokens/s, through it vs direct.

    .venv/bin/python benchmarks/llamacpp_adapter.py [--runs 15] [--tokens 64]
    .venv/bin/python benchmarks/llamacpp_adapter.py --server /path/to/llama-server --model tiny.gguf

One adapter process starts the server as its child, exactly as in the container; the same streamed chat
request is then sent alternately to the adapter's /invocations and straight to the child's
/v1/chat/completions (ABAB, so drift hits both alike), in the same session. Time to first token is the time
from sending the request to the first content delta; tokens/s counts content deltas between the first and the
last. Figures are medians; the overhead is (through adapter / direct) - 1, goal <= 2 %.

Without --server the child is the fake llama-server of the tests (tests/fakes/fake_llama_server.py) with a
prompt-processing pause and a per-token pause (defaults: 250 ms and 20 ms, about 50 tokens/s, what a small
model does on a few CPU cores), so the figures isolate the adapter's own cost.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVE = ROOT / "containers" / "llamacpp" / "serve.py"
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream_once(port: int, path: str, body: bytes) -> tuple[float, float, int]:
    """(seconds to the first content delta, tokens/s after it, content deltas) of one streamed request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"{path} answered {response.status}: {response.read()[:300]!r}")
    buffer, first, last, deltas, generated = b"", None, None, 0, None
    while chunk := response.read1(65536):
        buffer += chunk
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            if not event.startswith(b"data: {"):
                continue
            data = json.loads(event[6:])
            now = time.perf_counter()
            if data["choices"] and data["choices"][0].get("delta", {}).get("content"):
                first = first if first is not None else now
                last, deltas = now, deltas + 1
            elif data["choices"] and data["choices"][0].get("finish_reason"):
                last = now
            # llama-server's last chunk says how many tokens it generated (byte tokens of one character
            # arrive in one delta, so deltas can be fewer than tokens).
            generated = (data.get("timings") or {}).get("predicted_n", generated)
    conn.close()
    if first is None or last is None:
        raise RuntimeError(f"{path} streamed no content")
    tokens = generated or deltas
    rate = (tokens - 1) / (last - first) if tokens > 1 and last > first else float("nan")
    return first - started, rate, tokens


def wait_ready(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/ping")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the adapter was not ready within {timeout:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="requests each way (after one warm-up each)")
    parser.add_argument("--tokens", type=int, default=64, help="max_tokens of each request")
    parser.add_argument("--server", help="a real llama-server binary (default: the fake one)")
    parser.add_argument("--model", help="the GGUF file for --server")
    parser.add_argument("--prefill-s", type=float, default=0.25, help="fake server: pause before the first event")
    parser.add_argument("--token-delay-s", type=float, default=0.02, help="fake server: pause between tokens")
    args = parser.parse_args(argv)

    port, child_port = free_port(), free_port()
    env = {**os.environ, "SAGEMAKER_BIND_TO_PORT": str(port), "LLAMACPP_SERVER_PORT": str(child_port)}
    if args.server:
        if not args.model:
            parser.error("--model is required with --server")
        env.update(
            LLAMACPP_SERVER_BIN=args.server,
            LLAMA_ARG_MODEL=str(Path(args.model).resolve()),
            LLAMA_ARG_N_GPU_LAYERS=os.environ.get("LLAMA_ARG_N_GPU_LAYERS", "0"),
        )
        what = f"llama-server {args.server} with {Path(args.model).name}"
    else:
        model = Path(os.environ.get("TMPDIR", "/tmp")) / "llamacpp-bench-model.gguf"
        model.write_bytes(b"GGUF")
        env.update(
            LLAMACPP_SERVER_BIN=f"{sys.executable} {FAKE}",
            LLAMA_ARG_MODEL=str(model),
            FAKE_LLAMA_TOKENS=str(args.tokens),
            FAKE_LLAMA_PREFILL_S=str(args.prefill_s),
            FAKE_LLAMA_TOKEN_DELAY_S=str(args.token_delay_s),
        )
        what = f"fake llama-server ({args.prefill_s * 1000:.0f} ms prefill, {args.token_delay_s * 1000:.0f} ms/token)"
    adapter = subprocess.Popen([sys.executable, str(SERVE)], env=env, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, 600)
        body = json.dumps(
            {
                "messages": [{"role": "user", "content": "Count from one to one hundred."}],
                "max_tokens": args.tokens,
                "temperature": 0,
                "ignore_eos": True,  # llama-server: always max_tokens tokens, so every run is the same length
                "cache_prompt": False,  # llama-server: process the prompt every time, as a new conversation would
                "stream": True,
            }
        ).encode()
        ways = {"direct": (child_port, "/v1/chat/completions"), "adapter": (port, "/invocations")}
        samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in ways}
        for p, path in ways.values():
            stream_once(p, path, body)  # warm-up: caches, connections, the model's first run
        for _ in range(args.runs):
            for name, (p, path) in ways.items():
                samples[name].append(stream_once(p, path, body))
    finally:
        adapter.send_signal(signal.SIGTERM)
        adapter.wait(30)

    ttft = {n: statistics.median(s[0] for s in samples[n]) for n in ways}
    rate = {n: statistics.median(s[1] for s in samples[n]) for n in ways}
    tokens = statistics.median(s[2] for s in samples["adapter"])
    print(f"server: {what}; {args.runs} streamed requests each way, {tokens:.0f} tokens each, medians")
    print(f"  time to first token   direct {ttft['direct'] * 1000:8.1f} ms   adapter {ttft['adapter'] * 1000:8.1f} ms")
    print(f"  tokens/s              direct {rate['direct']:8.1f}      adapter {rate['adapter']:8.1f}")
    ttft_overhead = ttft["adapter"] / ttft["direct"] - 1
    rate_overhead = 1 - rate["adapter"] / rate["direct"]
    print(
        f"  adapter overhead: TTFT {ttft_overhead:+.2%} ({(ttft['adapter'] - ttft['direct']) * 1000:+.1f} ms), "
        f"tokens/s {rate_overhead:+.2%} (goal: each <= 2 %)"
    )
    return 0 if ttft_overhead <= 0.02 and rate_overhead <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
