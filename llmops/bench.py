"""Load-test a deployed endpoint: closed-loop streamed chat requests at each concurrency, with latency percentiles.

    python -m llmops.bench --endpoint NAME [--ic COMPONENT] --concurrency 1,4,16 --requests 64 \\
        --input-tokens 512 --output-tokens 256 [--json out.json] [--plot out.png]
    python -m llmops.bench --openai-base-url URL [--bearer-token-env OPENAI_API_KEY] --concurrency 1,4,16

The first calls InvokeEndpointWithResponseStream (SigV4); the second POSTs the same streamed chat requests
to ``URL/chat/completions`` (the stack's OpenAiBaseUrl output) with the bearer token in that environment
variable, and reports the same figures.

At each concurrency C, C workers each send a request, wait for the whole streamed answer, and send the
next one at once (a closed loop), until ``--requests`` requests have been sent at that level. Per level it
reports time to first token, inter-token latency and end-to-end latency (p50, p90, p99), output tokens/s
per request and in total, requests/s and errors by kind. Metric definitions follow vLLM's serving
benchmark and NVIDIA GenAI-Perf (see the README). Exit status: 0 ran (errors are counted in the
report), 1 no request succeeded, 2 bad arguments, 130 interrupted with Ctrl-C (the report covers what
finished). Prompts and answers are never printed or written.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import safejson
from endpoint_client import Delta, InvocationError, OpenAiEndpoint, build_chat_request, stream_chat, token_from_env
from llmops.engine_streams import engine_option, stream_formats
from llmops.fleet_target import TargetError, add_fleet_options, apply_target

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
PERCENTILES = (50, 90, 99)
# Synthetic prompts: common English words, about one token each in the usual BPE vocabularies.
_VOCABULARY_TEXT = (
    "the of and to in is was for on that with as it by at from his an were are which this be or has "
    "had not but first one their its new after who they have two her she been other when there all "
    "during into school time may years more most only over city some world would where later up such "
    "used many can state about national out known university united then made team american under "
    "well between three several film including river part game second because group following season "
    "year being music early number both since county public through work village series four each "
    "member war these company"
)
_VOCABULARY = tuple(_VOCABULARY_TEXT.split())


@dataclass
class Sample:
    """One request: when it started (seconds since its level started) and how it went. No text."""

    concurrency: int
    start_s: float
    e2e_s: float | None = None
    ttft_s: float | None = None
    tokens: int = 0
    token_source: str = ""
    gaps_s: list[float] = field(default_factory=list)  # between successive streamed deltas
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.e2e_s is not None

    @property
    def tpot_s(self) -> float | None:
        """vLLM's TPOT, GenAI-Perf's inter-token latency: decode time over the tokens after the first."""
        if not self.ok or self.ttft_s is None or self.tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.tokens - 1)

    @property
    def tokens_per_s(self) -> float | None:
        """GenAI-Perf's output token throughput per user: 1 / TPOT."""
        tpot = self.tpot_s
        return 1 / tpot if tpot else None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation between closest ranks (numpy's default, as vLLM uses)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Sequence[float], scale: float = 1.0) -> dict[str, float | None]:
    if not values:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    scaled = [v * scale for v in values]
    return {"mean": sum(scaled) / len(scaled), **{f"p{q}": percentile(scaled, q) for q in PERCENTILES}}


def summarize(concurrency: int, samples: Sequence[Sample], duration_s: float, *, interrupted: bool = False) -> dict:
    """One level's figures from its requests (definitions in the README's benchmark section)."""
    ok = [s for s in samples if s.ok]
    output_tokens = sum(s.tokens for s in ok)
    return {
        "concurrency": concurrency,
        "requests": len(samples),
        "completed": len(ok),
        "errors": dict(sorted(Counter(s.error for s in samples if s.error).items())),
        "interrupted": interrupted,
        "duration_s": duration_s,
        "ttft_ms": distribution([s.ttft_s for s in ok if s.ttft_s is not None], 1000),
        "itl_ms": distribution([g for s in ok for g in s.gaps_s], 1000),
        "tpot_ms": distribution([t for s in ok if (t := s.tpot_s) is not None], 1000),
        "e2e_ms": distribution([s.e2e_s for s in ok], 1000),
        "output_tokens_per_s_per_request": distribution([t for s in ok if (t := s.tokens_per_s) is not None]),
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / duration_s if duration_s > 0 else 0.0,
        "requests_per_s": len(ok) / duration_s if duration_s > 0 else 0.0,
    }


# --- prompts ----------------------------------------------------------------------------------------


def synthetic_prompts(count: int, input_tokens: int, seed: int = 0) -> list[str]:
    """``count`` different prompts of ``input_tokens`` words each, the same for a given seed."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_VOCABULARY) for _ in range(input_tokens)) for _ in range(count)]


def load_prompts(path: Path) -> list[dict[str, Any]]:
    """JSON Lines: ``{"prompt": "..."}`` or ``{"messages": [...]}``, each with an optional ``max_tokens``."""
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = safejson.loads(line, source=f"{path}:{number}")
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not JSON ({e.msg})") from None
        if not isinstance(entry, dict) or not (
            isinstance(entry.get("prompt"), str) or isinstance(entry.get("messages"), list)
        ):
            raise ValueError(f'{path}:{number}: expected {{"prompt": "..."}} or {{"messages": [...]}}')
        entries.append(entry)
    if not entries:
        raise ValueError(f"{path}: no prompts")
    return entries


def request_body(entry: Mapping[str, Any], max_tokens: int, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    max_tokens = int(entry.get("max_tokens") or max_tokens)
    if "messages" in entry:
        body = build_chat_request("", max_tokens=max_tokens, extra=extra, stream=True)
        body["messages"] = list(entry["messages"])
        return body
    return build_chat_request(entry["prompt"], max_tokens=max_tokens, extra=extra, stream=True)


# --- load -------------------------------------------------------------------------------------------


class _Stopped(Exception):
    """Raised from the delta callback to abandon a request when the run is interrupted."""


def error_kind(error: InvocationError) -> str:
    info = error.info
    return f"{info.code}:{info.status}" if info.code == "ModelError" and info.status else info.code


class Level:
    """The requests of one concurrency level so far; ``duration_s`` runs until the level ends or stops."""

    def __init__(self, concurrency: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.concurrency = concurrency
        self.samples: list[Sample] = []
        self._clock = clock
        self._started = clock()
        self._ended: float | None = None

    def elapsed(self) -> float:
        return self._clock() - self._started

    def end(self) -> None:
        if self._ended is None:
            self._ended = self._clock()

    @property
    def duration_s(self) -> float:
        return (self._ended if self._ended is not None else self._clock()) - self._started

    def summary(self, *, interrupted: bool = False) -> dict[str, Any]:
        return summarize(
            self.concurrency, sorted(self.samples, key=lambda s: s.start_s), self.duration_s, interrupted=interrupted
        )


def run_level(
    client: Any,
    endpoint: str,
    component: str | None,
    level: Level,
    bodies: Sequence[Mapping[str, Any]],
    stop: threading.Event,
    on_done: Callable[[Sample], None] = lambda sample: None,
    stream_format: str = "sse",
) -> None:
    """Send every body with ``level.concurrency`` workers in a closed loop, filling ``level.samples``.

    ``stop`` abandons requests in flight (they are not counted) and sends no more. Called from the main
    thread, it returns when every worker has finished; a ``KeyboardInterrupt`` there sets ``stop``, waits
    a moment for the workers and propagates, leaving the finished requests in ``level``.
    """
    lock = threading.Lock()
    next_index = iter(range(len(bodies)))

    def one(body: Mapping[str, Any]) -> Sample | None:
        sample = Sample(concurrency=level.concurrency, start_s=level.elapsed())
        times: list[float] = []

        def on_delta(delta: Delta) -> None:
            if stop.is_set():
                raise _Stopped
            times.append(time.monotonic())

        try:
            if isinstance(client, OpenAiEndpoint):
                result = client.stream_chat(body, on_delta=on_delta, stream_format=stream_format)
            else:
                result = stream_chat(
                    client,
                    endpoint,
                    body,
                    inference_component_name=component,
                    on_delta=on_delta,
                    stream_format=stream_format,
                )
        except InvocationError as e:
            if stop.is_set():
                return None
            sample.error = error_kind(e)
            return sample
        if stop.is_set():
            return None
        sample.e2e_s, sample.ttft_s = result.latency_s, result.time_to_first_token_s
        sample.tokens, sample.token_source = result.tokens, result.token_source
        sample.gaps_s = [b - a for a, b in itertools.pairwise(times)]
        if not result.content and not result.reasoning:
            sample.error = "EmptyAnswer"
        elif not result.done:
            sample.error = "StreamWithoutDone"
        return sample

    def worker() -> None:
        while not stop.is_set():
            with lock:
                index = next(next_index, None)
            if index is None:
                return
            sample = one(bodies[index])
            if sample is not None and not stop.is_set():
                with lock:
                    level.samples.append(sample)
                on_done(sample)

    threads = [threading.Thread(target=worker, daemon=True, name=f"bench-{i}") for i in range(level.concurrency)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.2)
    except KeyboardInterrupt:
        level.end()
        stop.set()
        deadline = time.monotonic() + 3
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        raise
    level.end()


# --- report -----------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _triple(dist: Mapping[str, float | None], digits: int = 0) -> str:
    return "/".join(_fmt(dist[f"p{q}"], digits) for q in PERCENTILES)


def table(levels: Sequence[Mapping[str, Any]]) -> str:
    """The per-level table, then a line per level with errors."""
    header = (
        "concurrency",
        "ok/sent",
        "req/s",
        "out tok/s",
        "tok/s/req p50",
        "TTFT ms p50/p90/p99",
        "ITL ms p50/p90/p99",
        "E2E s p50/p90/p99",
    )
    rows = [header]
    for level in levels:
        e2e_s = {k: (v / 1000 if v is not None else None) for k, v in level["e2e_ms"].items()}
        rows.append(
            (
                f"{level['concurrency']}{' (stopped)' if level['interrupted'] else ''}",
                f"{level['completed']}/{level['requests']}",
                _fmt(level["requests_per_s"], 2),
                _fmt(level["output_tokens_per_s"], 1),
                _fmt(level["output_tokens_per_s_per_request"]["p50"], 1),
                _triple(level["ttft_ms"]),
                _triple(level["itl_ms"], 1),
                _triple(e2e_s, 2),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for level in levels:
        if level["errors"]:
            kinds = ", ".join(f"{kind} {count}" for kind, count in level["errors"].items())
            lines.append(f"errors at concurrency {level['concurrency']}: {kinds}")
    return "\n".join(lines)


def plot(levels: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """Latency (left) and throughput (right) against concurrency, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = [level for level in levels if level["completed"]]
    x = [level["concurrency"] for level in levels]
    figure, (latency, throughput) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    for key, label, style in (
        ("ttft_ms", "TTFT", "o-"),
        ("itl_ms", "ITL", "s-"),
        ("e2e_ms", "E2E latency", "^-"),
    ):
        p50 = [level[key]["p50"] for level in levels]
        p99 = [level[key]["p99"] for level in levels]
        (line,) = latency.plot(x, p50, style, label=f"{label} p50")
        latency.plot(x, p99, style.replace("-", "--"), color=line.get_color(), alpha=0.6, label=f"{label} p99")
    latency.set(xlabel="concurrency", ylabel="ms", yscale="log", title="Latency")
    latency.legend(fontsize="small")
    throughput.plot(x, [level["output_tokens_per_s"] for level in levels], "o-", label="output tokens/s (total)")
    per_request = [level["output_tokens_per_s_per_request"]["p50"] for level in levels]
    throughput.plot(x, per_request, "s-", label="output tokens/s per request (p50)")
    throughput.set(xlabel="concurrency", ylabel="tokens/s", title="Throughput")
    throughput.legend(fontsize="small")
    for axis in (latency, throughput):
        if len(x) > 1 and max(x) / min(x) >= 4:
            axis.set_xscale("log", base=2)
        axis.set_xticks(x, [str(c) for c in x])
        axis.grid(True, alpha=0.3)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)


# --- command ----------------------------------------------------------------------------------------


def _concurrencies(value: str) -> list[int]:
    try:
        levels = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or any(level < 1 for level in levels):
        raise argparse.ArgumentTypeError(f"{value!r}: expected positive integers separated by commas, e.g. 1,4,16")
    return levels


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llmops.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", help="SageMaker endpoint name (the stack's EndpointName output)")
    parser.add_argument("--ic", "--inference-component", dest="inference_component", help="inference component")
    parser.add_argument("--concurrency", type=_concurrencies, default=[1, 4, 16], help="levels, e.g. 1,4,16")
    parser.add_argument("--requests", type=int, default=64, help="requests at each level (default: 64)")
    parser.add_argument("--input-tokens", type=int, default=512, help="words per synthetic prompt (default: 512)")
    parser.add_argument("--output-tokens", type=int, default=256, help="max_tokens of each request (default: 256)")
    parser.add_argument("--prompts", type=Path, help='JSON Lines file of {"prompt": ...} or {"messages": [...]}')
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic prompts (default: 0)")
    parser.add_argument("--extra", help="JSON merged into every request body, e.g. '{\"ignore_eos\": true}'")
    parser.add_argument("--json", type=Path, help="write the figures and per-request timings to this file")
    parser.add_argument("--plot", type=Path, help="write a latency and throughput chart to this PNG")
    parser.add_argument("--region", help="AWS region (default: the AWS CLI's configuration)")
    add_openai_options(parser)
    engine_option(parser)
    add_fleet_options(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def add_openai_options(parser: argparse.ArgumentParser) -> None:
    """``--openai-base-url`` and ``--bearer-token-env``, shared with ``llmops.invoke``."""
    parser.add_argument(
        "--openai-base-url",
        metavar="URL",
        help="call URL/chat/completions (the stack's OpenAiBaseUrl output) with a bearer token instead of SigV4",
    )
    parser.add_argument(
        "--bearer-token-env",
        metavar="NAME",
        default="OPENAI_API_KEY",
        help="with --openai-base-url: the environment variable holding the token (default: OPENAI_API_KEY)",
    )


def openai_endpoint(args: argparse.Namespace, environ: Mapping[str, str]) -> OpenAiEndpoint:
    """The OpenAI-path client of ``--openai-base-url``; ``ValueError`` for a bad URL, a missing token or a
    conflicting target (the URL names the endpoint and component already)."""
    if args.endpoint or args.inference_component or args.deployment:
        raise ValueError(
            "--openai-base-url names the endpoint (and component) itself: not with --endpoint, --ic or --deployment"
        )
    return OpenAiEndpoint(args.openai_base_url, token_from_env(environ, args.bearer_token_env))


def _runtime_client(region: str | None, pool: int) -> Any:
    import boto3
    from botocore.config import Config

    # One attempt per request: a retried throttle would hide the error and inflate the latency.
    config = Config(
        connect_timeout=10,
        read_timeout=300,
        retries={"mode": "standard", "total_max_attempts": 1},
        max_pool_connections=pool,
    )
    return boto3.client("sagemaker-runtime", region_name=region, config=config)


def main(
    argv: list[str] | None = None,
    *,
    runtime_client: Any = None,
    cloudformation_client: Any = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
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

    for name in ("requests", "input_tokens", "output_tokens"):
        if getattr(args, name) < 1:
            return fail(EXIT_USAGE, f"--{name.replace('_', '-')} {getattr(args, name)} must be at least 1")
    try:
        extra = safejson.loads(args.extra, source="--extra") if args.extra else None
    except json.JSONDecodeError as e:
        return fail(EXIT_USAGE, f"--extra is not JSON ({e.msg} at column {e.colno})")
    if extra is not None and not isinstance(extra, dict):
        return fail(EXIT_USAGE, "--extra must be a JSON object")
    try:
        # Each level gets prompts of its own: a prompt sent again at the next level would hit the engine's
        # prefix cache (on by default in vLLM V1) and understate that level's time to first token.
        sent = args.requests * len(args.concurrency)
        if args.prompts:
            entries = load_prompts(args.prompts)
        else:
            entries = [{"prompt": p} for p in synthetic_prompts(sent, args.input_tokens, args.seed)]
        bodies = [request_body(entries[i % len(entries)], args.output_tokens, extra) for i in range(sent)]
    except (OSError, ValueError) as e:
        return fail(EXIT_USAGE, str(e))
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return fail(EXIT_USAGE, "--plot needs matplotlib (pip install -r requirements-dev.txt)")

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
    if runtime_client is None:
        from botocore.exceptions import NoRegionError

        try:
            runtime_client = _runtime_client(args.region, max(args.concurrency) + 2)
        except NoRegionError:
            return fail(EXIT_USAGE, "no AWS region: pass --region or set AWS_REGION")

    stop = threading.Event()
    levels: list[dict[str, Any]] = []
    samples: list[Sample] = []
    interrupted = False
    for number, concurrency in enumerate(args.concurrency):
        level = Level(concurrency)
        level_bodies = bodies[number * args.requests : (number + 1) * args.requests]
        bar = _progress(args.requests, concurrency, stderr, disabled=args.no_progress)
        failed: Counter[str] = Counter()

        def on_done(sample: Sample, bar: Any = bar, failed: Counter[str] = failed) -> None:
            if sample.error:
                failed[sample.error] += 1
                bar.set_postfix(errors=sum(failed.values()), refresh=False)
            bar.update(1)

        try:
            run_level(
                runtime_client,
                args.endpoint,
                args.inference_component,
                level,
                level_bodies,
                stop,
                on_done,
                stream_format=stream_formats()[args.engine],
            )
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
        if level.samples or not interrupted:
            levels.append(level.summary(interrupted=interrupted))
            samples.extend(sorted(level.samples, key=lambda s: s.start_s))
        if interrupted:
            print("interrupted: the report covers the requests that finished", file=stderr)
            break

    report = {
        "endpoint": args.endpoint,
        "openai_base_url": args.openai_base_url,
        "inference_component": args.inference_component,
        "settings": {
            "concurrency": args.concurrency,
            "requests": args.requests,
            "input_tokens": None if args.prompts else args.input_tokens,
            "output_tokens": args.output_tokens,
            "prompts": str(args.prompts) if args.prompts else f"synthetic, seed {args.seed}",
            "extra": extra,
        },
        "interrupted": interrupted,
        "levels": levels,
        "samples": [asdict(sample) for sample in samples],
    }
    print(table(levels), file=stdout)
    stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"figures: {args.json}", file=stderr)
    if args.plot and levels:
        component = f" / {args.inference_component}" if args.inference_component else ""
        plot(levels, args.plot, args.openai_base_url or f"{args.endpoint}{component}")
        print(f"chart: {args.plot}", file=stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return 0 if any(level["completed"] for level in levels) else EXIT_FAILED


def _progress(total: int, concurrency: int, stream: TextIO, *, disabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=f"concurrency {concurrency}", unit="req", file=stream, disable=disabled, leave=True)


if __name__ == "__main__":
    sys.exit(main())
