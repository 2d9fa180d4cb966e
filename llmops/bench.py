"""Load-test a deployed endpoint: streamed chat requests at each concurrency, closed or open loop, with percentiles.

    python -m llmops.bench --endpoint NAME [--ic COMPONENT] --concurrency 1,4,16 --requests 64 \\
        --input-tokens 512 --output-tokens 256 [--json out.json] [--plot out.png]
    python -m llmops.bench --openai-base-url URL [--bearer-token-env OPENAI_API_KEY] --concurrency 1,4,16
    python -m llmops.bench --async --endpoint NAME --concurrency 4 --requests 64 [--invocation-timeout-s S]

The first calls InvokeEndpointWithResponseStream (SigV4); the second POSTs the same streamed chat requests
to ``URL/chat/completions`` (the stack's OpenAiBaseUrl output) with the bearer token in that environment
variable, and reports the same figures.

At each concurrency C, C workers each send a request, wait for the whole streamed answer, and send the
next one at once (a closed loop), until ``--requests`` requests have been sent at that level (or
``--duration`` seconds have passed; ``--duration`` alone bounds a level by time only, up to 1,000,000
requests). With ``--request-rate R`` requests arrive instead at R per second (Poisson arrivals by default,
``--arrival constant`` for even spacing: an open loop) and C caps how many are in flight; arrivals due before
``--duration`` ended that never got a slot are reported as not started. ``--warmup N`` sends N requests
first, at the highest concurrency, that are not counted. Per level it reports time to first
token, inter-token latency (AIPerf's: decode time over the output tokens after the first), inter-chunk
latency and end-to-end latency (p50, p90, p99), output tokens/s per request and in total, requests/s, input
tokens per request, errors by kind with a message, and the client's own figures: requests in flight on
average (effective concurrency), the wait before a request starts, and the client's CPU, with a warning
when the client looks like the bottleneck. Metric definitions follow AIPerf's (endpoint_client/load.py,
the README). Exit status: 0 ran (errors are counted in the report), 1 no request succeeded, 2 bad
arguments, 130 interrupted with Ctrl-C (the report covers what finished). Prompts and answers are never
printed or written.

``--async`` measures an asynchronous endpoint instead (llmops/async_bench.py): C requests are kept queued
(InvokeEndpointAsync with an inline body), each followed by a look for its answer object in S3 every
``--poll-interval`` seconds; it reports queue-to-answer latency (p50, p90, p95, p99), requests/s and output
tokens/s (usage.completion_tokens), and errors with the failure object's text, then deletes the answer and failure
objects it made. There is no TTFT or ITL: nothing streams, the answer is written whole.
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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

import safejson
from endpoint_client import Delta, InvocationError, OpenAiEndpoint, build_chat_request, stream_chat, token_from_env
from endpoint_client.async_invocations import INVOCATION_TIMEOUT_RANGE, REQUEST_TTL_RANGE
from endpoint_client.load import PERCENTILES, distribution, mean_in_flight, percentile
from llmops.bench_parts import (
    DEFAULT_POLL_INTERVAL_S,
    TIMEOUT_KIND,
    Sample,
    _fmt,
    _message_texts,
    _Stopped,
    _triple,
    aligned,
    error_kind,
    error_message,
    estimate_input_tokens,
    level_notes,
)
from llmops.engine_streams import engine_option, stream_formats
from llmops.fleet_target import TargetError, add_fleet_options, apply_target

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
__all__ = ["PERCENTILES", "distribution", "main", "percentile"]  # the shared figures, re-exported
# The client looks like the bottleneck past these: most of one core busy in this process (Python threads share
# one interpreter lock, so one core is the ceiling), or requests starting well after they were due.
CLIENT_CPU_WARNING = 0.8
QUEUE_WAIT_WARNING_MS = 10.0
ARRIVALS = ("poisson", "constant")
DEFAULT_REQUESTS = 64  # per level, without --duration
# With --duration and no --requests a level is bounded by its duration only, and by this (a safety cap).
DURATION_REQUESTS_CAP = 1_000_000
MAX_CONCURRENCY = 1024
# Prompt words in flight at once (the highest --concurrency x --input-tokens): about 100 MB of prompt text.
MAX_WORDS_IN_FLIGHT = 16_000_000
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


def _input_token_source(samples: Sequence[Sample]) -> str | None:
    sources = sorted({s.input_token_source for s in samples if s.input_tokens is not None})
    return " and ".join(sources) or None


def summarize(
    concurrency: int,
    samples: Sequence[Sample],
    duration_s: float,
    *,
    interrupted: bool = False,
    cpu_s: float | None = None,
    open_loop: bool = False,
    not_started_waits_s: Sequence[float] = (),
) -> dict:
    """One level's figures from its requests (definitions in endpoint_client/load.py and the README).

    ``not_started_waits_s``: open loop with a duration, for each arrival due before the duration ended that
    never got a slot, how long it had waited by then; they count as ``not_started`` and in the queue wait."""
    ok = [s for s in samples if s.ok]
    output_tokens = sum(s.tokens for s in ok)
    errors = Counter(s.error for s in samples if s.error)
    messages: dict[str, str] = {}
    for s in samples:
        if s.error and s.error_message and s.error not in messages:
            messages[s.error] = s.error_message
    inter_chunk = distribution([g for s in ok for g in s.gaps_s], 1000)
    itl = distribution([t for s in ok if (t := s.itl_s) is not None], 1000)
    spans = [(s.start_s, s.end_s) for s in samples if s.end_s is not None]
    level = {
        "concurrency": concurrency,
        "requests": len(samples),
        "completed": len(ok),
        "errors": dict(sorted(errors.items())),
        "error_messages": dict(sorted(messages.items())),
        "interrupted": interrupted,
        "duration_s": duration_s,
        "ttft_ms": distribution([s.ttft_s for s in ok if s.ttft_s is not None], 1000),
        "inter_token_latency_ms": itl,  # AIPerf's ITL
        "inter_chunk_latency_ms": inter_chunk,  # AIPerf's ICL
        "itl_ms": inter_chunk,  # deprecated: the inter-chunk latency, under the name it had before
        "tpot_ms": itl,  # vLLM's name for AIPerf's ITL
        "e2e_ms": distribution([s.e2e_s for s in ok], 1000),
        "output_tokens_per_s_per_request": distribution([t for s in ok if (t := s.tokens_per_s) is not None]),
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / duration_s if duration_s > 0 else 0.0,
        "requests_per_s": len(ok) / duration_s if duration_s > 0 else 0.0,
        "input_tokens": distribution([s.input_tokens for s in ok if s.input_tokens is not None]),
        "input_token_source": _input_token_source(ok),
        "effective_concurrency": mean_in_flight(spans, 0.0, duration_s),
        "not_started": len(not_started_waits_s),
        "queue_wait_ms": distribution(
            [w for s in samples if (w := s.wait_s) is not None] + [max(0.0, w) for w in not_started_waits_s], 1000
        ),
        "client_cpu_s": cpu_s,
        "client_cpu_per_wall_s": cpu_s / duration_s if cpu_s is not None and duration_s > 0 else None,
    }
    level["warnings"] = client_warnings(level, open_loop=open_loop)
    return level


def client_warnings(level: Mapping[str, Any], *, open_loop: bool = False) -> list[str]:
    """Why the client, not the endpoint, may have set this level's figures (nothing when it did not)."""
    warnings = []
    concurrency = level["concurrency"]
    not_started = level.get("not_started") or 0
    if not_started:
        warnings.append(
            f"{not_started} requests due before --duration ended never started at concurrency {concurrency} (every "
            "slot was busy): the endpoint did not keep up with --request-rate; their waits up to the end are in "
            "the wait before start"
        )
    cpu = level.get("client_cpu_per_wall_s")
    if cpu is not None and cpu > CLIENT_CPU_WARNING:
        warnings.append(
            f"the client used {cpu:.0%} of one CPU core at concurrency {concurrency} (over "
            f"{CLIENT_CPU_WARNING:.0%}): it may be the bottleneck; run fewer requests per process, or several processes"
        )
    wait = (level.get("queue_wait_ms") or {}).get("p95")
    if wait is not None and wait > QUEUE_WAIT_WARNING_MS:
        if open_loop:
            why = (
                f"all {concurrency} slots were busy or the client fell behind: raise --concurrency or lower "
                "--request-rate"
            )
        else:
            why = "the client was slow to send the next request (CPU, or the interpreter lock)"
        warnings.append(
            f"requests waited {wait:.1f} ms (p95) after they were due before they started at concurrency "
            f"{concurrency} (over {QUEUE_WAIT_WARNING_MS:g} ms): {why}"
        )
    return warnings


# --- prompts ----------------------------------------------------------------------------------------


def synthetic_prompt(index: int, input_tokens: int, seed: int = 0) -> str:
    """Prompt ``index`` of the seed: ``input_tokens`` words, made on its own (no earlier prompt needed)."""
    rng = random.Random(f"{seed}:{index}")
    return " ".join(rng.choice(_VOCABULARY) for _ in range(input_tokens))


def synthetic_prompts(count: int, input_tokens: int, seed: int = 0) -> list[str]:
    """``count`` different prompts of ``input_tokens`` words each, the same for a given seed."""
    return [synthetic_prompt(i, input_tokens, seed) for i in range(count)]


class Bodies(Sequence):
    """``count`` request bodies made when asked for (``make(start + i)``), so that a long run (a duration and no
    request count) holds no more prompts than it has in flight."""

    def __init__(self, make: Callable[[int], dict[str, Any]], count: int, start: int = 0) -> None:
        self._make, self._count, self._start = make, count, start

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(index)
        return self._make(self._start + index % self._count)


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


def request_body(
    entry: Mapping[str, Any], max_tokens: int, extra: Mapping[str, Any] | None, *, stream: bool = True
) -> dict[str, Any]:
    """One request's body; ``stream=False`` for an asynchronous endpoint, which writes its answer whole."""
    max_tokens = int(entry.get("max_tokens") or max_tokens)
    if "messages" in entry:
        body = build_chat_request("", max_tokens=max_tokens, extra=extra, stream=stream)
        body["messages"] = list(entry["messages"])
        return body
    return build_chat_request(entry["prompt"], max_tokens=max_tokens, extra=extra, stream=stream)


# --- load -------------------------------------------------------------------------------------------


class RequestTimedOut(Exception):
    """Raised from the delta callback when a request runs past ``--request-timeout``."""


def arrival_times(count: int, rate: float, arrival: str = "poisson", seed: int = 0) -> list[float]:
    """When each of ``count`` requests is due (seconds from the start, the first at 0) at ``rate`` per second:
    Poisson arrivals (exponential gaps of mean 1/rate, seeded) or ``constant`` gaps of 1/rate."""
    return list(itertools.islice(iter_arrival_times(rate, arrival, seed), count))


def iter_arrival_times(rate: float, arrival: str = "poisson", seed: int = 0) -> Iterator[float]:
    """:func:`arrival_times` without an end, made as they are needed."""
    rng = random.Random(seed)
    now = 0.0
    while True:
        yield now
        now += rng.expovariate(rate) if arrival == "poisson" else 1 / rate


class Level:
    """The requests of one concurrency level so far; ``duration_s`` runs until the level ends or stops."""

    def __init__(
        self,
        concurrency: int,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
        *,
        open_loop: bool = False,
    ) -> None:
        self.concurrency = concurrency
        self.samples: list[Sample] = []
        self.open_loop = open_loop
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._started = clock()
        self._cpu_started = cpu_clock()
        self._ended: float | None = None
        self._cpu_s: float | None = None
        self.not_started_waits_s: list[float] = []  # open loop with a duration: arrivals that never got a slot

    def elapsed(self) -> float:
        return self._clock() - self._started

    def end(self) -> None:
        if self._ended is None:
            self._ended = self._clock()
            self._cpu_s = self._cpu_clock() - self._cpu_started  # this process, all threads

    @property
    def duration_s(self) -> float:
        return (self._ended if self._ended is not None else self._clock()) - self._started

    def summary(self, *, interrupted: bool = False) -> dict[str, Any]:
        return summarize(
            self.concurrency,
            sorted(self.samples, key=lambda s: s.start_s),
            self.duration_s,
            interrupted=interrupted,
            cpu_s=self._cpu_s,
            open_loop=self.open_loop,
            not_started_waits_s=self.not_started_waits_s,
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
    *,
    arrivals: Iterable[float] | None = None,
    duration_s: float | None = None,
    request_timeout_s: float | None = None,
    secrets: Sequence[str] = (),
    send: Callable[[Mapping[str, Any], Sample], Sample | None] | None = None,
) -> None:
    """Send every body with ``level.concurrency`` workers, filling ``level.samples``.

    Closed loop (``arrivals`` None): a worker sends its next request as soon as its last answer was complete,
    which is when that request was due (reading the rest of the last answer off its connection counts as the
    wait). Open loop: body ``i`` is due ``arrivals[i]`` seconds after the level started (``arrivals`` may be
    an endless iterator) and goes to the next free worker; when every worker is busy it waits (its queue
    wait). No request starts after ``duration_s``; those in flight then finish and are counted, and arrivals
    due before it that never got a worker go to ``level.not_started_waits_s`` (their wait up to
    ``duration_s``). A request not finished within ``request_timeout_s`` is an error of kind ``timeout``: its
    deadline goes into the stream call, which checks it after every event and read.

    ``stop`` abandons requests in flight (they are not counted) and sends no more. Called from the main
    thread, it returns when every worker has finished; a ``KeyboardInterrupt`` there sets ``stop``, waits
    a moment for the workers and propagates, leaving the finished requests in ``level``.

    ``send(body, sample)``, when given, makes each request instead of a streamed call (``--async``): it fills the
    sample (its ``end_s`` too, else the time it returned is taken) or returns None for a request abandoned on stop.
    """
    lock = threading.Lock()
    next_index = iter(range(len(bodies)))
    due_times = iter(arrivals) if arrivals is not None else None

    def one(body: Mapping[str, Any], due_s: float) -> Sample | None:
        sample = Sample(concurrency=level.concurrency, start_s=level.elapsed(), due_s=due_s)
        if send is not None:
            done = send(body, sample)
            if done is not None and done.end_s is None:
                done.end_s = level.elapsed()
            return None if stop.is_set() else done
        times: list[float] = []
        deadline = time.monotonic() + request_timeout_s if request_timeout_s else None

        def on_delta(delta: Delta) -> None:
            if stop.is_set():
                raise _Stopped
            now = time.monotonic()
            if deadline is not None and now > deadline:
                raise RequestTimedOut(f"no complete answer within --request-timeout {request_timeout_s:g} s")
            times.append(now)

        try:
            if isinstance(client, OpenAiEndpoint):
                result = client.stream_chat(body, on_delta=on_delta, stream_format=stream_format, deadline=deadline)
            else:
                result = stream_chat(
                    client,
                    endpoint,
                    body,
                    inference_component_name=component,
                    on_delta=on_delta,
                    stream_format=stream_format,
                    deadline=deadline,
                )
        except InvocationError as e:
            sample.end_s = level.elapsed()
            if stop.is_set():
                return None
            sample.error = error_kind(e)
            if e.info.code == "RequestTimedOut" and request_timeout_s:
                sample.error_message = f"no complete answer within --request-timeout {request_timeout_s:g} s"
            else:
                sample.error_message = error_message(str(e), secrets=secrets, prompt=_message_texts(body))
            return sample
        # In flight until the answer was complete: reading the rest off the connection afterwards is not.
        sample.end_s = min(level.elapsed(), sample.start_s + result.latency_s)
        if stop.is_set():
            return None
        sample.e2e_s, sample.ttft_s = result.latency_s, result.time_to_first_token_s
        sample.tokens, sample.token_source = result.tokens, result.token_source
        sample.gaps_s = [b - a for a, b in itertools.pairwise(times)]
        if result.prompt_tokens is not None:
            sample.input_tokens, sample.input_token_source = result.prompt_tokens, "usage"
        else:
            sample.input_tokens, sample.input_token_source = estimate_input_tokens(body), "estimate"
        if request_timeout_s and result.latency_s > request_timeout_s:
            sample.error = TIMEOUT_KIND
            sample.error_message = (
                f"answered in {result.latency_s:.3f} s, past --request-timeout {request_timeout_s:g} s"
            )
        elif not result.content and not result.reasoning:
            sample.error, sample.error_message = "EmptyAnswer", "the stream carried no content or reasoning"
        elif not result.done:
            sample.error, sample.error_message = "StreamWithoutDone", "the stream ended before its last event"
        return sample

    def not_started(due: float) -> None:
        with lock:
            level.not_started_waits_s.append(duration_s - due)

    def worker() -> None:
        free_at = level.elapsed()
        while not stop.is_set():
            with lock:
                index = next(next_index, None)
                due = next(due_times, None) if due_times is not None and index is not None else None
            if index is None:
                return
            if due_times is not None:
                if due is None or (duration_s is not None and due >= duration_s):
                    return
                delay = due - level.elapsed()
                if delay > 0 and stop.wait(delay):
                    return
            else:
                due = free_at
            if duration_s is not None and level.elapsed() >= duration_s:
                if due_times is not None and not stop.is_set():
                    not_started(due)
                return
            sample = one(bodies[index], due)
            free_at = level.elapsed() if sample is None or sample.end_s is None else sample.end_s
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
    if due_times is not None and duration_s is not None and not stop.is_set():
        # Arrivals due before the end that no worker ever took: they waited from their arrival to the end.
        for _ in next_index:
            due = next(due_times, None)
            if due is None or due >= duration_s:
                break
            not_started(due)


# --- report -----------------------------------------------------------------------------------------


def table(levels: Sequence[Mapping[str, Any]]) -> str:
    """The per-level table, then per level the client's own figures, its errors and its warnings."""
    header = (
        "concurrency",
        "ok/sent",
        "req/s",
        "out tok/s",
        "tok/s/req p50",
        "TTFT ms p50/p90/p99",
        "ITL ms p50/p90/p99",
        "inter-chunk ms p50/p90/p99",
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
                _triple(level["inter_token_latency_ms"], 1),
                _triple(level["inter_chunk_latency_ms"], 1),
                _triple(e2e_s, 2),
            )
        )
    lines = aligned(rows)
    lines.append(
        "ITL: (E2E - TTFT) / (output tokens - 1) per request, as AIPerf's inter token latency; "
        "inter-chunk: every gap between streamed chunks (AIPerf's ICL)"
    )
    lines.extend(level_notes(levels))
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
        ("inter_token_latency_ms", "ITL", "s-"),
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
    parser.add_argument(
        "--concurrency", type=_concurrencies, default=[1, 4, 16], help="levels, e.g. 1,4,16 (each 1 to 1024)"
    )
    parser.add_argument(
        "--requests",
        type=int,
        help=f"requests at each level, at most (default: {DEFAULT_REQUESTS}; with --duration: as many as the duration "
        f"allows, at most {DURATION_REQUESTS_CAP:,})",
    )
    parser.add_argument(
        "--warmup", type=int, default=0, metavar="N", help="requests sent first and not counted (default: 0)"
    )
    parser.add_argument(
        "--request-rate",
        type=float,
        metavar="R",
        help="open loop: requests arrive at R per second (Poisson, see --arrival); --concurrency caps those in flight",
    )
    parser.add_argument(
        "--arrival", choices=ARRIVALS, help="with --request-rate: poisson (default, seeded) or constant gaps of 1/R"
    )
    parser.add_argument(
        "--duration", type=float, metavar="S", help="stop issuing requests S seconds into each level (default: none)"
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        metavar="S",
        help="a request not answered whole within S seconds is an error of kind timeout (default: 300 s per read; "
        "with --async, 900 s or --invocation-timeout-s for its answer object)",
    )
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
    parser.add_argument(
        "--suggest-slo",
        type=float,
        nargs="?",
        const=SLO_HEADROOM,
        metavar="HEADROOM",
        help=f"after the run, print load-gate context keys (slo_*) from the most concurrent level, its latencies "
        f"times HEADROOM (default {SLO_HEADROOM:g}, 1 to 10)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    group = parser.add_argument_group("asynchronous endpoints (--async)")
    group.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="measure an asynchronous endpoint: queue-to-answer latency and throughput with --concurrency requests "
        "queued; the answer and failure objects made are deleted afterwards",
    )
    group.add_argument(
        "--poll-interval",
        type=float,
        metavar="S",
        help=f"with --async: look for each answer object every S seconds, which bounds how late a latency can be "
        f"(default: {DEFAULT_POLL_INTERVAL_S:g}; two S3 GETs per request in flight each time)",
    )
    add_async_request_options(group)
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


def add_async_request_options(parser: Any) -> None:
    """``--invocation-timeout-s`` and ``--request-ttl-s`` of an asynchronous request, shared with ``llmops.invoke``."""
    parser.add_argument(
        "--invocation-timeout-s",
        type=int,
        metavar="S",
        help=f"with --async: the container's time to answer a request, {INVOCATION_TIMEOUT_RANGE[0]} to "
        f"{INVOCATION_TIMEOUT_RANGE[1]} s (InvocationTimeoutSeconds; default: 900 s)",
    )
    parser.add_argument(
        "--request-ttl-s",
        type=int,
        metavar="S",
        help=f"with --async: how long a request may wait in the queue, {REQUEST_TTL_RANGE[0]} to "
        f"{REQUEST_TTL_RANGE[1]} s (RequestTTLSeconds; default: 21600 s)",
    )


# The per-request limits of InvokeEndpointAsync (endpoint_client/async_invocations.py, from botocore's model).
ASYNC_REQUEST_RANGES: dict[str, tuple[float, bool, float, str]] = {
    "invocation_timeout_s": (INVOCATION_TIMEOUT_RANGE[0], True, INVOCATION_TIMEOUT_RANGE[1], "seconds"),
    "request_ttl_s": (REQUEST_TTL_RANGE[0], True, REQUEST_TTL_RANGE[1], "seconds"),
}

# Each numeric option's range: (lowest, whether the lowest itself is allowed, highest, unit). The highest values
# keep one run to what a person means (a day, an hour per request, 10,000 requests a second).
OPTION_RANGES: dict[str, tuple[float, bool, float, str]] = {
    "concurrency": (1, True, MAX_CONCURRENCY, "requests in flight"),  # each level of the list
    "requests": (1, True, 1_000_000, "requests"),
    "input_tokens": (1, True, 1_000_000, "words"),
    "output_tokens": (1, True, 1_000_000, "tokens"),
    "warmup": (0, True, 10_000, "requests"),
    "request_rate": (0, False, 10_000, "requests per second"),
    "duration": (0, False, 86_400, "seconds"),
    "request_timeout": (0, False, 3_600, "seconds"),
    "suggest_slo": (1, True, 10, "x the measured latencies"),
    "poll_interval": (0.05, True, 10, "seconds"),
    **ASYNC_REQUEST_RANGES,
}


def _number(value: float) -> str:
    return f"{value:.15g}"


# --suggest-slo: targets this much looser than what was measured (a p95 moves between runs: the gate should fail
# on a slower deployment, not on noise).
SLO_HEADROOM = 1.5


def _smoke_budget_s() -> int:
    """The smoke test's budget when none is given: the resource's own default (handler_kit/resources.py), which
    the construct and the smoke_budget_s context key use too."""
    from dataclasses import fields

    from handler_kit.resources import EndpointSmokeTestProperties

    return int(next(f.default for f in fields(EndpointSmokeTestProperties) if f.name == "budget_s"))


def suggest_slo(level: Mapping[str, Any], max_tokens: int, headroom: float = SLO_HEADROOM) -> tuple[list[str], str]:
    """Load-gate context keys (``slo_*``) from one level's figures, and a line saying where they come from.

    The burst is the level's concurrency and requests (capped to the gate's ranges, constructs_lib.load_gate) and
    ``max_tokens``; TTFT and ITL p95 targets are the measured p95s times ``headroom``, rounded up to a whole ms;
    the per-request throughput target is 1 / the ITL target (the gate reads its p5, which is 1 / ITL's p95); the
    error rate allowed is the one measured, rounded up to a percent (0 when none failed). When that burst would not
    fit the gate's budget rule, the requests are lowered until it does (never below the concurrency)."""
    from constructs_lib import LoadGate
    from constructs_lib.rules import LOAD_CONCURRENCY_RANGE as CONCURRENCY_RANGE
    from constructs_lib.rules import LOAD_MAX_TOKENS_RANGE as MAX_TOKENS_RANGE
    from constructs_lib.rules import LOAD_REQUESTS_RANGE as REQUESTS_RANGE
    from constructs_lib.rules import load_gate_problems

    ttft, itl = level["ttft_ms"].get("p95"), level["inter_token_latency_ms"].get("p95")
    if ttft is None or itl is None:
        return [], f"no load-gate targets: concurrency {level['concurrency']} has no completed request of 2 tokens"
    concurrency = min(max(int(level["concurrency"]), CONCURRENCY_RANGE[0]), CONCURRENCY_RANGE[1])
    requests = min(max(int(level["requests"]), concurrency), REQUESTS_RANGE[1])
    tokens = min(max(max_tokens, MAX_TOKENS_RANGE[0]), MAX_TOKENS_RANGE[1])
    ttft_target = math.ceil(ttft * headroom)
    itl_target = max(1, math.ceil(itl * headroom))
    failed = level["requests"] - level["completed"]
    error_rate = math.ceil(100 * failed / level["requests"]) / 100 if level["requests"] and failed else 0
    gate = LoadGate(concurrency, requests, tokens, ttft_target, itl_target, round(1000 / itl_target, 2), error_rate)
    budget = _smoke_budget_s()
    while load_gate_problems(gate, budget) and gate.requests > gate.concurrency:
        gate = LoadGate(**{**asdict(gate), "requests": max(gate.concurrency, gate.requests // 2)})
    keys = [f"slo_{name}={_number(value)}" for name, value in asdict(gate).items()]
    said = (
        f"load-gate targets from concurrency {level['concurrency']} ({level['completed']} of {level['requests']} "
        f"requests completed): TTFT p95 {ttft:.0f} ms and ITL p95 {itl:.1f} ms x {headroom:g}"
    )
    if gate.requests < requests:
        said += f"; slo_requests lowered to {gate.requests} so the burst fits the smoke test's budget"
    problems = load_gate_problems(gate, budget)
    if problems:
        said += f"; even so it does not fit: {problems[0]}"
    return keys, said


def range_problems(args: argparse.Namespace, ranges: Mapping[str, tuple[float, bool, float, str]]) -> list[str]:
    """Every option of ``ranges`` outside its range, each naming the option, its value and what is allowed."""
    problems = []
    for name, (low, low_allowed, high, unit) in ranges.items():
        given = getattr(args, name)
        option = f"--{name.replace('_', '-')}"
        allowed = f"allowed: {'' if low_allowed else 'more than '}{_number(low)} to {_number(high)} {unit}"
        for value in given if isinstance(given, list) else [given]:
            if value is None:
                continue
            shown = _number(value)
            if not math.isfinite(value):
                problems.append(f"{option} {shown} must be a finite number ({allowed})")
            elif value < low or (value == low and not low_allowed):
                rule = "at least" if low_allowed else "more than"
                problems.append(f"{option} {shown} must be {rule} {_number(low)} ({allowed})")
            elif value > high:
                problems.append(f"{option} {shown} must be at most {_number(high)} ({allowed})")
                break
    return problems


def option_problems(args: argparse.Namespace) -> list[str]:
    """Every option outside its range, each naming the option, its value and what is allowed; every option that
    does not go with another (``--async`` with what only a stream or a real-time endpoint has)."""
    problems = range_problems(args, OPTION_RANGES)
    words = max(args.concurrency) * args.input_tokens
    if not args.prompts and words > MAX_WORDS_IN_FLIGHT and max(args.concurrency) <= MAX_CONCURRENCY:
        problems.append(
            f"--input-tokens {args.input_tokens} at --concurrency {max(args.concurrency)} puts {words:,} prompt words "
            f"in flight at once (allowed: at most {MAX_WORDS_IN_FLIGHT:,}): lower one of them"
        )
    if args.arrival and args.request_rate is None:
        problems.append(f"--arrival {args.arrival} needs --request-rate (the closed loop has no arrivals)")
    if args.asynchronous:
        from llmops.async_bench import refused_with_async

        problems.extend(refused_with_async(args))
    else:
        given = [name for name in ("poll_interval", *ASYNC_REQUEST_RANGES) if getattr(args, name) is not None]
        problems.extend(f"--{name.replace('_', '-')} needs --async" for name in given)
    return problems


def runtime_pool_warning(client: Any, concurrency: int) -> str | None:
    """A warning when a boto3 client keeps fewer connections than requests in flight (they would queue)."""
    config = getattr(getattr(client, "meta", None), "config", None)
    pool = getattr(config, "max_pool_connections", None)
    if isinstance(pool, int) and pool < concurrency:
        return (
            f"the runtime client keeps at most {pool} connections (botocore max_pool_connections) for concurrency "
            f"{concurrency}: requests beyond {pool} wait for a connection"
        )
    return None


def openai_endpoint(args: argparse.Namespace, environ: Mapping[str, str]) -> OpenAiEndpoint:
    """The OpenAI-path client of ``--openai-base-url``; ``ValueError`` for a bad URL, a missing token or a
    conflicting target (the URL names the endpoint and component already)."""
    if args.endpoint or args.inference_component or args.deployment:
        raise ValueError(
            "--openai-base-url names the endpoint (and component) itself: not with --endpoint, --ic or --deployment"
        )
    timeout = getattr(args, "request_timeout", None) or 300.0
    return OpenAiEndpoint(args.openai_base_url, token_from_env(environ, args.bearer_token_env), timeout_s=timeout)


def s3_client_like(runtime_client: Any, pool: int) -> Any:
    """An S3 client in the runtime client's region, from the same session (``--async`` reads its answers with it)."""
    import boto3
    from botocore.config import Config

    region = getattr(getattr(runtime_client, "meta", None), "region_name", None)
    # Standard retries: a poll S3 slowed down (503 SlowDown) is better answered late than counted as an error.
    config = Config(connect_timeout=10, read_timeout=60, retries={"mode": "standard"}, max_pool_connections=pool)
    return boto3.client("s3", region_name=region, config=config)


def _runtime_client(region: str | None, pool: int, timeout_s: float | None = None) -> Any:
    import boto3
    from botocore.config import Config

    # One attempt per request: a retried throttle would hide the error and inflate the latency.
    # max_pool_connections defaults to 10 (botocore/config.py, "the default value of 10 is used";
    # endpoint.py MAX_POOL_CONNECTIONS = 10): below the concurrency, requests would queue for a connection.
    config = Config(
        connect_timeout=min(10, timeout_s) if timeout_s else 10,
        read_timeout=timeout_s or 300,
        retries={"mode": "standard", "total_max_attempts": 1},
        max_pool_connections=pool,
    )
    return boto3.client("sagemaker-runtime", region_name=region, config=config)


def main(
    argv: list[str] | None = None,
    *,
    runtime_client: Any = None,
    cloudformation_client: Any = None,
    s3_client: Any = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """``s3_client`` (with ``--async``): where the answers are read and deleted; default: one from the runtime
    client's region."""
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

    problems = option_problems(args)
    if problems:
        return fail(EXIT_USAGE, "; ".join(problems))
    try:
        extra = safejson.loads(args.extra, source="--extra") if args.extra else None
    except json.JSONDecodeError as e:
        return fail(EXIT_USAGE, f"--extra is not JSON ({e.msg} at column {e.colno})")
    if extra is not None and not isinstance(extra, dict):
        return fail(EXIT_USAGE, "--extra must be a JSON object")
    # --duration without --requests: the duration bounds each level (and DURATION_REQUESTS_CAP, a safety cap).
    unbounded = args.requests is None and args.duration is not None
    per_level = args.requests or (DURATION_REQUESTS_CAP if unbounded else DEFAULT_REQUESTS)
    try:
        # Each level gets prompts of its own: a prompt sent again at the next level would hit the engine's
        # prefix cache (on by default in vLLM V1) and understate that level's time to first token.
        # The warm-up's prompts come after the measured ones, so the measured prompts stay those of the seed.
        # Bodies are made as they are sent: a long run holds no more prompts than it has in flight.
        sent = per_level * len(args.concurrency)
        entries = load_prompts(args.prompts) if args.prompts else None

        stream = not args.asynchronous  # an asynchronous endpoint writes its answer whole

        def make_body(index: int) -> dict[str, Any]:
            if entries is not None:
                return request_body(entries[index % len(entries)], args.output_tokens, extra, stream=stream)
            prompt = synthetic_prompt(index, args.input_tokens, args.seed)
            return request_body({"prompt": prompt}, args.output_tokens, extra, stream=stream)

        for index in range(len(entries) if entries is not None else 1):  # every entry's problems, before any request
            body = make_body(index)
            if args.asynchronous:
                from llmops.async_bench import inline_body_problem

                what = f"prompt {index + 1} of {args.prompts}" if entries is not None else "each request"
                if problem := inline_body_problem(body, what):
                    raise ValueError(problem)
        warmup_bodies = Bodies(make_body, args.warmup, start=sent)
    except (OSError, ValueError) as e:
        return fail(EXIT_USAGE, str(e))
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return fail(EXIT_USAGE, "--plot needs matplotlib (pip install -r requirements-dev.txt)")

    secrets: tuple[str, ...] = ()
    if args.openai_base_url:
        try:
            runtime_client = openai_endpoint(args, environ)
        except ValueError as e:
            return fail(EXIT_USAGE, str(e))
        secrets = (token_from_env(environ, args.bearer_token_env),)  # kept out of every error message
    else:
        try:
            apply_target(args, cloudformation_client)
        except TargetError as e:
            return fail(EXIT_USAGE, str(e))
        if args.asynchronous and args.inference_component:
            return fail(EXIT_USAGE, f"--deployment {args.deployment} is an inference component: not with --async")
    pool = max(args.concurrency) + 2
    if runtime_client is None:
        from botocore.exceptions import NoRegionError

        try:
            # An asynchronous call answers at once (202): the timeout is not the answer's.
            runtime_client = _runtime_client(args.region, pool, None if args.asynchronous else args.request_timeout)
        except NoRegionError:
            return fail(EXIT_USAGE, "no AWS region: pass --region or set AWS_REGION")
    if args.asynchronous and s3_client is None:
        s3_client = s3_client_like(runtime_client, pool)
    notes = [w for w in [runtime_pool_warning(runtime_client, max(args.concurrency))] if w]
    for note in notes:
        print(f"warning: {note}", file=stderr)

    stop = threading.Event()
    levels: list[dict[str, Any]] = []
    samples: list[Sample] = []
    interrupted = False
    stream_format = stream_formats()[args.engine]
    send = None
    if args.asynchronous:
        from llmops import async_bench

        poll_s = args.poll_interval or DEFAULT_POLL_INTERVAL_S
        send = async_bench.AsyncRequests(
            runtime_client,
            s3_client,
            args.endpoint,
            stop,
            wait_s=args.request_timeout or max(async_bench.DEFAULT_WAIT_S, args.invocation_timeout_s or 0),
            poll_s=poll_s,
            invocation_timeout_s=args.invocation_timeout_s,
            request_ttl_s=args.request_ttl_s,
        )

    def summary(level: Level, interrupted: bool) -> dict[str, Any]:
        done = level.summary(interrupted=interrupted)
        return async_bench.async_level(done) if args.asynchronous else done

    def measure(level: Level, level_bodies: Sequence[Mapping[str, Any]], desc: str = "", **load: Any) -> bool:
        """One level's requests with a progress bar; whether Ctrl-C stopped them."""
        total = None if unbounded and level_bodies is not warmup_bodies else len(level_bodies)
        bar = _progress(total, level.concurrency, stderr, disabled=args.no_progress, desc=desc)
        failed: Counter[str] = Counter()

        def on_done(sample: Sample) -> None:
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
                stream_format=stream_format,
                request_timeout_s=args.request_timeout,
                secrets=secrets,
                send=send,
                **load,
            )
        except KeyboardInterrupt:
            return True
        finally:
            bar.close()
        return False

    warmup: dict[str, Any] | None = None
    if warmup_bodies:
        # At the run's highest concurrency: every later level then finds its connections open (given at least
        # that many warm-up requests), and the endpoint has seen that many requests at once.
        level = Level(max(args.concurrency))
        interrupted = measure(level, warmup_bodies, desc="warm-up")
        done = summary(level, interrupted)
        warmup = {key: done[key] for key in ("concurrency", "requests", "completed", "errors", "error_messages")}
        print(f"warm-up: {done['completed']}/{done['requests']} requests, not counted", file=stderr)
    for number, concurrency in enumerate(args.concurrency):
        if interrupted:
            print("interrupted: the report covers the requests that finished", file=stderr)
            break
        open_loop = args.request_rate is not None
        level = Level(concurrency, open_loop=open_loop)
        level_bodies = Bodies(make_body, per_level, start=number * per_level)
        arrivals = (
            iter_arrival_times(args.request_rate, args.arrival or "poisson", args.seed + number) if open_loop else None
        )
        interrupted = measure(level, level_bodies, arrivals=arrivals, duration_s=args.duration)
        if level.samples or not interrupted:
            levels.append(summary(level, interrupted))
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
            "requests": per_level,
            "requests_bounded_by": "duration" if unbounded else "requests",
            "input_tokens": None if args.prompts else args.input_tokens,
            "output_tokens": args.output_tokens,
            "prompts": str(args.prompts) if args.prompts else f"synthetic, seed {args.seed}",
            "extra": extra,
            "warmup": args.warmup,
            "request_rate": args.request_rate,
            "arrival": (args.arrival or "poisson") if args.request_rate is not None else None,
            "duration_s": args.duration,
            "request_timeout_s": args.request_timeout,
            "asynchronous": args.asynchronous,
        },
        "interrupted": interrupted,
        "warmup": warmup,
        "warnings": notes,
        "connections_opened": getattr(runtime_client, "connections_opened", None),
        "levels": levels,
        "samples": [asdict(sample) for sample in samples],
    }
    if isinstance(runtime_client, OpenAiEndpoint):
        runtime_client.close()
    if send is not None:
        report["settings"].update(
            poll_interval_s=poll_s,
            wait_s=send.wait_s,
            invocation_timeout_s=args.invocation_timeout_s,
            request_ttl_s=args.request_ttl_s,
        )
        report["objects"] = cleaned = send.delete_objects()
        said = f"deleted the answer and failure objects of the {cleaned['requests']} requests submitted"
        late = {"had no answer in time": cleaned["timed_out"], "were stopped in flight": cleaned["abandoned"]}
        for why, count in late.items():
            if count:
                said += f"; {count} requests {why} and may still be answered, into objects made after this delete"
        print(said, file=stderr)
        for failure in cleaned["failed"]:
            print(f"warning: not deleted: {failure}", file=stderr)
        print(async_bench.table(levels, poll_s), file=stdout)
    else:
        print(table(levels), file=stdout)
    if args.suggest_slo is not None and levels:
        busiest = max(levels, key=lambda done: done["concurrency"])
        keys, said = suggest_slo(busiest, args.output_tokens, args.suggest_slo)
        print(said, file=stdout)
        if keys:
            print("  " + " ".join(f"-c {key}" for key in keys), file=stdout)
        report["suggested_slo"] = keys
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


def _progress(total: int | None, concurrency: int, stream: TextIO, *, disabled: bool, desc: str = "") -> Any:
    from tqdm import tqdm

    desc = desc or f"concurrency {concurrency}"
    return tqdm(total=total, desc=desc, unit="req", file=stream, disable=disabled, leave=True)


if __name__ == "__main__":
    sys.exit(main())
