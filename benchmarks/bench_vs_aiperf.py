"""Do ``llmops bench`` and NVIDIA AIPerf report the same figures for the same endpoint? Side by side, over the
OpenAI-compatible path of the fake runtime, at each concurrency.

    python3 -m venv /tmp/aiperf && /tmp/aiperf/bin/pip install aiperf==0.13.0     # once, apart from .venv
    .venv/bin/python benchmarks/bench_vs_aiperf.py --aiperf /tmp/aiperf/bin/aiperf [--concurrency 1,8,32]

The fake (tests/fakes/serve_runtime.py, its own process) waits ``--first-token-ms`` before the first token and
``--token-ms`` before each next one. Both tools send streamed chat requests with a warm-up, count output tokens
from the server's usage (AIPerf ``--use-server-token-count``, bench always when usage comes) and use the same
definitions: TTFT, ITL = (request latency - TTFT) / (output tokens - 1) (AIPerf's ``inter_token_latency``), E2E
(AIPerf's ``request_latency``), request and output-token throughput. AIPerf needs a tokenizer to build its
prompts; with no network, a word-level one is written into a private HF_HOME here (AIPerf's offline mode reads
a tokenizer from the hub cache's layout only). Prints one row per figure with both values and bench's
difference from AIPerf, and bench's own client figures (connections opened, CPU, requests in flight).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "fake-bearer-token"  # tests/fakes/fake_runtime.py BEARER_TOKEN
TOKENIZER = "local/wordlevel"
_TOKENIZER_SCRIPT = """
import re, sys
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = sorted({w for w in Path(sys.argv[2]).read_text().split() if re.fullmatch("[A-Za-z]+", w)})
vocab = {"[UNK]": 0, "[PAD]": 1, **{w: i + 2 for i, w in enumerate(words)}}
tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(sys.argv[1])
"""
# (figure, AIPerf's tag in profile_export_aiperf.json, bench's key in --json levels)
FIGURES = (
    ("TTFT ms", "time_to_first_token", "ttft_ms"),
    ("ITL ms", "inter_token_latency", "inter_token_latency_ms"),
    ("E2E ms", "request_latency", "e2e_ms"),
)
THROUGHPUTS = (
    ("req/s", "request_throughput", "requests_per_s"),
    ("out tok/s", "output_token_throughput", "output_tokens_per_s"),
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hf_home(aiperf_python: Path, where: Path) -> Path:
    """A hub cache holding one word-level tokenizer, ``local/wordlevel``, as a snapshot of revision ``main``."""
    revision = "0" * 40
    repo = where / "hub" / "models--local--wordlevel"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    subprocess.run([aiperf_python, "-c", _TOKENIZER_SCRIPT, snapshot, ROOT / "llmops" / "bench.py"], check=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--aiperf", type=Path, required=True, help="the aiperf command (its venv's bin/aiperf)")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--requests-per-slot", type=int, default=4, help="requests at each level: this x concurrency")
    parser.add_argument("--first-token-ms", type=float, default=200.0)
    parser.add_argument("--token-ms", type=float, default=20.0)
    parser.add_argument("--answer-tokens", type=int, default=64)
    parser.add_argument(
        "--warmup",
        type=int,
        help="warm-up requests of both tools before each level (default: twice the concurrency, at least 4, so "
        "that every connection is open before the measured requests: AIPerf's TTFT tail at 32 was its own "
        "connection set-up inside the measured burst)",
    )
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    port = _free_port()
    fake = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.serve_runtime", "--port", str(port), "--first-token-ms",
         str(args.first_token_ms), "--token-ms", str(args.token_ms), "--answer-tokens", str(args.answer_tokens)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(2)
        with tempfile.TemporaryDirectory() as scratch:
            work = Path(scratch)
            env = {
                **os.environ,
                "HF_HOME": str(_hf_home(args.aiperf.parent / "python", work / "hf")),
                "HF_HUB_OFFLINE": "1",
            }
            url = f"http://127.0.0.1:{port}"
            for concurrency in levels:
                requests = args.requests_per_slot * max(concurrency, 3)
                warmup = args.warmup if args.warmup is not None else max(4, 2 * concurrency)
                artifacts = work / f"aiperf-{concurrency}"
                aiperf = [
                    args.aiperf, "profile", "--url", url, "--endpoint", "/endpoints/demo/openai/v1/chat/completions",
                    "--endpoint-type", "chat", "--streaming", "--api-key", TOKEN, "--model", "/opt/ml/model",
                    "--tokenizer", TOKENIZER, "--use-server-token-count", "--concurrency", str(concurrency),
                    "--request-count", str(requests), "--warmup-request-count", str(warmup),
                    "--synthetic-input-tokens-mean", "64", "--output-tokens-mean", str(args.answer_tokens),
                    "--ui-type", "none", "--artifact-dir", artifacts,
                ]  # fmt: skip
                subprocess.run(aiperf, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                report = work / f"bench-{concurrency}.json"
                bench = [
                    sys.executable, "-m", "llmops.bench", "--openai-base-url", f"{url}/endpoints/demo/openai/v1",
                    "--concurrency", str(concurrency), "--requests", str(requests), "--warmup", str(warmup),
                    "--input-tokens", "64", "--output-tokens", str(args.answer_tokens), "--no-progress",
                    "--json", report,
                ]  # fmt: skip
                subprocess.run(bench, cwd=ROOT, env={**os.environ, "OPENAI_API_KEY": TOKEN}, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
                theirs = json.loads((artifacts / "profile_export_aiperf.json").read_text())
                whole = json.loads(report.read_text())
                (ours,) = whole["levels"]
                rows = [(f, q, theirs[tag][q], ours[key][q]) for f, tag, key in FIGURES for q in ("p50", "p90")]
                rows += [(f, "", theirs[tag]["avg"], ours[key]) for f, tag, key in THROUGHPUTS]
                print(f"concurrency {concurrency}, {requests} requests after {warmup} warm-up requests")
                for figure, q, aiperf_value, bench_value in rows:
                    diff = (bench_value - aiperf_value) / aiperf_value * 100
                    print(f"  {figure:10} {q:3}  AIPerf {aiperf_value:9.2f}  bench {bench_value:9.2f}  {diff:+6.1f} %")
                cpu = ours["client_cpu_per_wall_s"]
                print(
                    f"  bench: {whole['connections_opened']} connections, {ours['effective_concurrency']:.2f} in "
                    f"flight on average, CPU {cpu:.0%} of one core, wait p95 {ours['queue_wait_ms']['p95']:.2f} ms"
                )
    finally:
        fake.terminate()
        fake.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
