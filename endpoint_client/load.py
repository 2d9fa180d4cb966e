"""The figures of a load run, computed once for ``llmops bench`` and the smoke test's load step (stdlib only).

Definitions follow AIPerf's (ai-dynamo/aiperf ``src/aiperf/metrics/types/``):

- **time to first token** (TTFT): from sending the request to the first content or reasoning delta.
- **inter-token latency** (ITL), per request: ``(request latency - TTFT) / (output tokens - 1)``, defined for
  requests with at least 2 output tokens (``inter_token_latency_metric.py``: "Inter Token Latency = (Request
  Latency - Time to First Token) / (Output Sequence Length - First Content Chunk Tokens)", the first chunk counted
  as one token unless the server reports per-chunk usage). vLLM's serving benchmark calls this TPOT.
- **inter-chunk latency** (ICL): every gap between two successive content deltas of a request, pooled over
  the requests (``inter_chunk_latency_metric.py``). vLLM's serving benchmark calls this ITL, which is why the
  two names get mixed up; with one token per chunk the two agree on average but not in their tails.
- percentiles interpolate linearly between closest ranks, as numpy's default (and so vLLM and AIPerf) do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

# p95 is the smoke test's target percentile (slo_*_p95_*); the bench table shows p50/p90/p99.
PERCENTILES = (50, 90, 95, 99)


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between closest ranks; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(
    values: Sequence[float], scale: float = 1.0, percentiles: Sequence[int] = PERCENTILES
) -> dict[str, float | None]:
    """``{"mean", "p50", ...}`` of ``values`` times ``scale`` (1000 for seconds to ms); ``None`` each when empty."""
    if not values:
        return {"mean": None, **{f"p{q}": None for q in percentiles}}
    scaled = [v * scale for v in values]
    return {"mean": sum(scaled) / len(scaled), **{f"p{q}": percentile(scaled, q) for q in percentiles}}


def inter_token_latency_s(latency_s: float, ttft_s: float | None, output_tokens: int) -> float | None:
    """AIPerf's ITL of one request: decode time over the tokens after the first; ``None`` below 2 tokens."""
    if ttft_s is None or output_tokens < 2:
        return None
    return (latency_s - ttft_s) / (output_tokens - 1)


def mean_in_flight(intervals: Iterable[tuple[float, float]], window_start: float, window_end: float) -> float:
    """The effective concurrency: requests in flight averaged over the window (the time each ``(start, end)``
    spends inside it, summed, over the window's length); 0 for an empty window."""
    length = window_end - window_start
    if length <= 0:
        return 0.0
    busy = sum(max(0.0, min(end, window_end) - max(start, window_start)) for start, end in intervals)
    return busy / length
