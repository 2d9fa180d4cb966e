"""The smoke test's load gate: a burst of streamed requests, its figures, and the targets they must meet.

After the answer check passes (index.py), ``run_burst`` sends ``LoadRequests`` streamed chat completions with at
most ``LoadConcurrency`` in flight (a closed loop, as ``llmops bench`` runs one level), through the same client
(``endpoint_client.stream_chat``), and ``figures`` computes what ``llmops bench`` reports, with the one percentile
function both use (``endpoint_client.load``). First, one uncounted warm-up request per worker (one output token)
opens the connections, so that no counted TTFT includes a TCP and TLS handshake (``llmops bench --warmup`` does the
same); its time comes out of the window. The endpoint serves the burst at its own scale: nothing here asks for
instances or copies. A request fails as bench counts failures: an invocation error, an empty answer, a stream that
did not end; and here also one the window (``LoadWindowSeconds``) cut off or never started.

``missed`` lists each figure that misses its target beside the target; ``failure_reason`` puts them and every
figure in a reason under 3 KB (CloudFormation's limit is 4 KB). Standard library and boto3 only.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from smoke_settings import Settings

from endpoint_client import InvocationError, build_chat_request, short_reason, stream_chat
from endpoint_client.load import inter_token_latency_s, mean_in_flight, percentile
from handler_kit.resources import LOAD_FIGURES, SMOKE_METRIC_DIMENSION, SMOKE_METRIC_NAMESPACE

WINDOW_KIND = "window"  # cut off by the burst's window, or never started within it
MESSAGE_CHARS = 300  # of the first failure's message, in the reason
NOT_MEASURED = "n/a"
RATE_PAIR = ("LoadOutputTokensPerSecondP5", "LoadOutputTokensPerSecondP50")


class _WindowEnded(Exception):
    """Raised from a stream's callback once the burst's window has passed: the request is abandoned."""


@dataclass
class Request:
    """One request of the burst: seconds since the burst started, and how it went (no text)."""

    start_s: float
    end_s: float | None = None
    e2e_s: float | None = None
    ttft_s: float | None = None
    tokens: int = 0
    error: str | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.e2e_s is not None

    @property
    def itl_s(self) -> float | None:
        """AIPerf's inter-token latency, as ``llmops bench`` computes it (endpoint_client.load)."""
        if self.error is not None or self.e2e_s is None:  # not ``ok``, spelled out so that e2e_s is a float below
            return None
        return inter_token_latency_s(self.e2e_s, self.ttft_s, self.tokens)


@dataclass
class Burst:
    requests: list[Request]
    planned: int
    concurrency: int
    duration_s: float


def request_body(settings: Settings, index: int, *, max_tokens: int | None = None) -> dict[str, Any]:
    """The smoke prompt, numbered, so that an engine's prefix cache cannot serve every request from the first."""
    prompt = f"Request {index + 1}. {settings.prompt}"
    tokens = max_tokens or settings.load_max_tokens
    return build_chat_request(prompt, max_tokens=tokens, extra=settings.extra_body, stream=True)


def warm_up(settings: Settings, runtime: Any, workers: int, *, deadline: Callable[[], bool]) -> int:
    """One one-token request per worker, at once, not counted: the connections the burst then reuses. Returns how
    many failed (a failure here is not the burst's: its own requests will say)."""
    failed = [0]
    lock = threading.Lock()

    def one(worker: int) -> None:
        if deadline():
            return
        try:
            stream_chat(
                runtime,
                settings.endpoint_name,
                request_body(settings, -1 - worker, max_tokens=1),
                inference_component_name=settings.inference_component_name,
                stream_format=settings.stream_format,
            )
        except InvocationError:
            with lock:
                failed[0] += 1

    threads = [threading.Thread(target=one, args=(w,), daemon=True, name=f"warm-{w}") for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return failed[0]


def run_burst(
    settings: Settings, runtime: Any, *, window_s: float, clock: Callable[[], float] = time.monotonic
) -> Burst:
    """Send the burst and wait for it; requests still running when ``window_s`` ends are abandoned (and fail)."""
    planned = int(settings.load_requests or 0)
    concurrency = max(1, min(int(settings.load_concurrency or 1), planned or 1))
    opened = clock()
    warm_up(settings, runtime, concurrency, deadline=lambda: clock() - opened > window_s)
    window_s -= clock() - opened  # the warm-up's time comes out of the window
    started = clock()
    lock = threading.Lock()
    indexes = iter(range(planned))
    done: list[Request] = []

    def elapsed() -> float:
        return clock() - started

    def one(index: int) -> Request:
        request = Request(start_s=elapsed())

        def on_delta(_delta: Any) -> None:
            if elapsed() > window_s:
                raise _WindowEnded

        try:
            result = stream_chat(
                runtime,
                settings.endpoint_name,
                request_body(settings, index),
                inference_component_name=settings.inference_component_name,
                on_delta=on_delta,
                clock=clock,
                stream_format=settings.stream_format,
            )
        except InvocationError as e:
            request.end_s = elapsed()
            if request.end_s > window_s:
                request.error, request.message = WINDOW_KIND, f"cut off at the end of the {window_s:.0f} s window"
            else:
                request.error, request.message = e.info.code or type(e).__name__, e.info.describe()
            return request
        request.end_s = elapsed()
        request.e2e_s, request.ttft_s, request.tokens = result.latency_s, result.time_to_first_token_s, result.tokens
        if not result.content and not result.reasoning:
            request.error, request.message = "EmptyAnswer", "the stream carried no content or reasoning"
        elif not result.done:
            request.error, request.message = "StreamWithoutDone", "the stream ended before its last event"
        return request

    def worker() -> None:
        while True:
            with lock:
                index = next(indexes, None)
            if index is None or elapsed() >= window_s:
                return
            request = one(index)
            with lock:
                done.append(request)

    threads = [threading.Thread(target=worker, daemon=True, name=f"load-{i}") for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, window_s + 5 - elapsed()))
    duration = elapsed()
    with lock:
        finished = sorted(done, key=lambda r: r.start_s)
    return Burst(requests=finished, planned=planned, concurrency=concurrency, duration_s=duration)


# --- figures (the same definitions and percentile function as llmops bench) -------------------------------------


def figures(burst: Burst) -> dict[str, float | None]:
    """Each figure of ``LOAD_FIGURES`` as a number (``None``: nothing to measure it on)."""
    ok = [r for r in burst.requests if r.ok]
    ttft = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
    itl = [t * 1000 for r in ok if (t := r.itl_s) is not None]
    e2e = [r.e2e_s * 1000 for r in ok if r.e2e_s is not None]
    per_request = [1000 / t for t in itl if t > 0]  # AIPerf's output token throughput per user: 1 / ITL
    failed = burst.planned - len(ok)

    def pct(values: list[float], q: float) -> float | None:
        return percentile(values, q) if values else None

    spans = [(r.start_s, r.end_s) for r in burst.requests if r.end_s is not None]
    return {
        "LoadTtftP50Ms": pct(ttft, 50),
        "LoadTtftP95Ms": pct(ttft, 95),
        "LoadItlP50Ms": pct(itl, 50),
        "LoadItlP95Ms": pct(itl, 95),
        "LoadE2eP50Ms": pct(e2e, 50),
        "LoadE2eP95Ms": pct(e2e, 95),
        "LoadOutputTokensPerSecondP5": pct(per_request, 5),
        "LoadOutputTokensPerSecondP50": pct(per_request, 50),
        "LoadErrorRate": failed / burst.planned if burst.planned else 0.0,
        "LoadRequests": float(burst.planned),
        "LoadEffectiveConcurrency": mean_in_flight(spans, 0.0, burst.duration_s),
        "LoadDurationSeconds": burst.duration_s,
    }


def attributes(measured: Mapping[str, float | None]) -> dict[str, str]:
    """The resource's attributes, as text (CloudFormation's Data values)."""
    out = {}
    for name in LOAD_FIGURES:
        value = measured.get(name)
        if value is None or not math.isfinite(value):
            out[name] = NOT_MEASURED
        elif name == "LoadRequests":
            out[name] = str(int(value))
        elif name == "LoadErrorRate":
            out[name] = f"{value:.4f}"
        else:
            out[name] = f"{value:.1f}"
    return out


def metric_data(measured: Mapping[str, float | None], deployment: str) -> list[dict[str, Any]]:
    """PutMetricData's MetricData: one datum per measured figure (CloudWatch takes no NaN or infinity)."""
    dimensions = [{"Name": SMOKE_METRIC_DIMENSION, "Value": deployment[:255] or "unnamed"}]
    return [
        {"MetricName": name, "Dimensions": dimensions, "Value": float(value), "Unit": unit}
        for name, unit in LOAD_FIGURES.items()
        if (value := measured.get(name)) is not None and math.isfinite(value)
    ]


def publish(cloudwatch: Any, measured: Mapping[str, float | None], deployment: str, log: Callable[..., None]) -> bool:
    """One PutMetricData call (at most 1,000 metrics a call: PutMetricData API reference). A failure to publish is
    logged, not raised: the figures are still the resource's attributes, and the gate is about the endpoint."""
    data = metric_data(measured, deployment)
    if not data:
        return False
    try:
        cloudwatch.put_metric_data(Namespace=SMOKE_METRIC_NAMESPACE, MetricData=data)
    except Exception as e:  # botocore's ClientError, BotoCoreError: the deploy's verdict does not depend on it
        log("note", note="metrics_not_published", error=type(e).__name__)
        return False
    return True


# --- targets ----------------------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.1f} ms"


def _rate(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.1f} tokens/s"


def missed(settings: Settings, measured: Mapping[str, float | None]) -> list[str]:
    """Each target the figures miss, the figure beside its target; empty when every target is met."""
    misses = []
    for label, name, target, most, show in (
        ("TTFT p95", "LoadTtftP95Ms", settings.target_ttft_p95_ms, True, _ms),
        ("ITL p95", "LoadItlP95Ms", settings.target_itl_p95_ms, True, _ms),
        (
            "output tokens/s per request p5",
            "LoadOutputTokensPerSecondP5",
            settings.target_min_output_tokens_per_s,
            False,
            _rate,
        ),
    ):
        if target is None:
            continue
        value = measured.get(name)
        if value is None or (value > target if most else value < target):
            misses.append(f"{label} {show(value)}, target {'at most' if most else 'at least'} {show(target)}")
    rate = measured.get("LoadErrorRate") or 0.0
    allowed = settings.target_max_error_rate or 0.0
    if rate > allowed:
        misses.append(f"error rate {rate:.1%}, target at most {allowed:.1%}")
    return misses


def summary(burst: Burst, measured: Mapping[str, float | None]) -> str:
    """Every figure on one line, for the reason and the log."""
    failures = Counter(r.error for r in burst.requests if r.error)
    never = burst.planned - len(burst.requests)
    if never:
        failures[WINDOW_KIND] += never
    first = next((r for r in burst.requests if r.error and r.message), None)
    errors = ", ".join(f"{kind} x{count}" for kind, count in sorted(failures.items())) or "none"
    if first is not None:
        errors += f" (first: {first.error}: {first.message[:MESSAGE_CHARS]})"

    def pair(low: str, high: str, show: Callable[[float | None], str]) -> str:
        return f"{show(measured.get(low)).removesuffix(' ms').removesuffix(' tokens/s')}/{show(measured.get(high))}"

    return (
        f"{burst.planned} requests at concurrency {burst.concurrency} in {burst.duration_s:.1f} s: "
        f"TTFT p50/p95 {pair('LoadTtftP50Ms', 'LoadTtftP95Ms', _ms)}, "
        f"ITL p50/p95 {pair('LoadItlP50Ms', 'LoadItlP95Ms', _ms)}, "
        f"end-to-end p50/p95 {pair('LoadE2eP50Ms', 'LoadE2eP95Ms', _ms)}, "
        f"output tokens/s per request p5/p50 {pair(*RATE_PAIR, _rate)}, "
        f"errors {errors}"
    )


def failure_reason(settings: Settings, burst: Burst, measured: Mapping[str, float | None], misses: list[str]) -> str:
    head = f"Load gate of {settings.subject} failed: {'; '.join(misses)}. Measured over {summary(burst, measured)}."
    groups = " and ".join(settings.log_groups)
    noun = "groups" if len(settings.log_groups) > 1 else "group"
    return short_reason(head, suffix=f" See CloudWatch log {noun} {groups}.")
