"""``LoadGate``: the smoke test's latency and throughput targets, and the burst that measures them.

With a gate, ``EndpointSmokeTest`` sends a burst of streamed chat requests after its answer check, on every create
and update, through the client ``llmops bench`` uses (endpoint_client), and fails the deployment when a figure
misses its target (an update then rolls back). Figures follow AIPerf's definitions (endpoint_client/load.py): time
to first token (TTFT), inter-token latency (ITL: (end-to-end - TTFT) / (output tokens - 1)) and a request's output
tokens per second (1 / ITL).

The budget rule (one place: :func:`load_gate_problems`; the docs quote it). The burst's window is

    W = 2 x ceil(requests / concurrency) x (TTFT + (max_tokens - 1) x ITL)

with TTFT and ITL the targets (a request that just meets them), or, for a target not given, 10 s for TTFT and
1000 / min_output_tokens_per_s (else 100) ms for ITL; the 2 is headroom for the requests slower than the p95. The
checks' one attempt (200 s) and W must fit in one run of the handler (15 minutes, less one for its start and the
report: 200 + W <= 840 s), and the smoke test's budget, one more poll and W in CloudFormation's hour for a custom
resource (``budget + 480 + W <= 3600`` s: the resource's ServiceTimeout is that sum). The handler stops the burst
at W: what has not finished then counts as an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import aws_cdk as cdk

# The burst (items 1 and 7 of issue 39): requests and tokens capped, concurrency within one Lambda's threads.
CONCURRENCY_RANGE = (1, 64)
REQUESTS_RANGE = (1, 1000)
MAX_TOKENS_RANGE = (2, 4096)  # ITL needs two output tokens
# Targets: an open floor (more than), a closed ceiling.
TTFT_P95_RANGE_MS = (0, 600_000)
ITL_P95_RANGE_MS = (0, 10_000)
OUTPUT_TOKENS_PER_S_RANGE = (0, 100_000)
ERROR_RATE_RANGE = (0, 1)  # closed at both ends: 0 allows no failed request
DEFAULT_CONCURRENCY = 4
DEFAULT_REQUESTS = 40
DEFAULT_MAX_TOKENS = 128
# Stand-ins for a target not given, in the window only.
STAND_IN_TTFT_MS = 10_000
STAND_IN_ITL_MS = 100
HEADROOM = 2
# One run of the smoke test's is_complete handler with a gate: Lambda's longest timeout (Lambda quotas: 900 s).
GATE_HANDLER_TIMEOUT = cdk.Duration.minutes(15)
# What of that run the checks' one attempt takes (lambda/endpoint_smoke_test/index.py ATTEMPT_RESERVE_S) and what
# is left for starting and reporting.
CHECKS_ATTEMPT_S = 200
HANDLER_SLACK_S = 60
# CloudFormation waits at most an hour for a custom resource (ServiceTimeout: 1-3600 s, AWS::CloudFormation::
# CustomResource), and the smoke test's ServiceTimeout is budget + this margin (+ the window with a gate).
SERVICE_TIMEOUT_MAX_S = 3600
SERVICE_TIMEOUT_MARGIN_S = 480

# prop name -> context key, for refusals that name what the user wrote.
PROP_NAMES = {
    "concurrency": "concurrency",
    "requests": "requests",
    "max_tokens": "max_tokens",
    "ttft_p95_ms": "ttft_p95_ms",
    "itl_p95_ms": "itl_p95_ms",
    "min_output_tokens_per_s": "min_output_tokens_per_s",
    "max_error_rate": "max_error_rate",
    "budget": "budget",
}
CONTEXT_KEYS = {**{name: f"slo_{name}" for name in PROP_NAMES}, "budget": "smoke_budget_s"}


@dataclass(frozen=True)
class LoadGate:
    """A burst of streamed requests after the smoke test's answer check, and the targets it must meet.

    :param concurrency: requests in flight at once, 1 to 64. The endpoint serves them at its own scale: the burst
        never asks for more instances or copies. Default: 4.
    :param requests: requests in the burst, 1 to 1000, at least ``concurrency``. Default: 40.
    :param max_tokens: most output tokens per request, 2 to 4096. Default: 128.
    :param ttft_p95_ms: most milliseconds to the first token for 95 % of the requests. Default: not checked.
    :param itl_p95_ms: most milliseconds between tokens (AIPerf's ITL) for 95 % of the requests. Default: not
        checked.
    :param min_output_tokens_per_s: fewest output tokens per second of one request (1 / ITL) for 95 % of the
        requests (the 5th percentile). Default: not checked.
    :param max_error_rate: the share of requests that may fail (an error, an empty answer, a stream that did not
        end, a request the window cut off), 0 to 1. Default: 0, none.
    """

    concurrency: int = DEFAULT_CONCURRENCY
    requests: int = DEFAULT_REQUESTS
    max_tokens: int = DEFAULT_MAX_TOKENS
    ttft_p95_ms: float | None = None
    itl_p95_ms: float | None = None
    min_output_tokens_per_s: float | None = None
    max_error_rate: float | None = None

    @property
    def window_s(self) -> float:
        """How long the burst may take (the module docstring's W), in whole seconds."""
        return burst_window_s(self)


def burst_window_s(gate: LoadGate) -> float:
    ttft_s = (gate.ttft_p95_ms or STAND_IN_TTFT_MS) / 1000
    if gate.itl_p95_ms:
        itl_s = gate.itl_p95_ms / 1000
    elif gate.min_output_tokens_per_s:
        itl_s = 1 / gate.min_output_tokens_per_s
    else:
        itl_s = STAND_IN_ITL_MS / 1000
    waves = math.ceil(gate.requests / max(gate.concurrency, 1))
    window = HEADROOM * waves * (ttft_s + (gate.max_tokens - 1) * itl_s)
    # Rounded first: 16 x 11.000000000000002 s is 176 s, not 177. 1 / a tiny rate is infinite: no burst fits.
    return float(math.ceil(round(window, 6))) if math.isfinite(window) else math.inf


def _range_problem(name: str, value: object, low: float, high: float, *, whole: bool, open_floor: bool) -> str | None:
    # A NaN or an infinity cannot cross into jsii (JSON has neither): refused before Token.is_unresolved sees it.
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name}={value!r}: expected a number from {low} to {high}"
    if cdk.Token.is_unresolved(value):
        return None
    kind_ok = isinstance(value, int) if whole else isinstance(value, int | float)
    if isinstance(value, bool) or not kind_ok or not isinstance(value, int | float):
        return f"{name}={value!r}: expected {'a whole number' if whole else 'a number'} from {low} to {high}"
    inside = (low < value <= high) if open_floor else (low <= value <= high)
    if not inside:
        floor = f"more than {low}" if open_floor else f"{low}"
        return f"{name}={value!r}: out of range; allowed: {floor} to {high}"
    return None


def load_gate_problems(
    gate: LoadGate, budget_s: float, *, names: Mapping[str, str] = PROP_NAMES, own_ranges: bool = True
) -> list[str]:
    """What is wrong with ``gate`` under a smoke-test budget of ``budget_s``, each problem named by ``names``
    (the construct's props, or the context keys: :data:`CONTEXT_KEYS`). ``own_ranges=False`` leaves out the
    ranges (the context layer's parsers check those already, naming the key)."""
    problems: list[str] = []
    if own_ranges:
        for field, (low, high), whole, open_floor in (
            ("concurrency", CONCURRENCY_RANGE, True, False),
            ("requests", REQUESTS_RANGE, True, False),
            ("max_tokens", MAX_TOKENS_RANGE, True, False),
            ("ttft_p95_ms", TTFT_P95_RANGE_MS, False, True),
            ("itl_p95_ms", ITL_P95_RANGE_MS, False, True),
            ("min_output_tokens_per_s", OUTPUT_TOKENS_PER_S_RANGE, False, True),
            ("max_error_rate", ERROR_RATE_RANGE, False, False),
        ):
            value = getattr(gate, field)
            if value is None and field not in ("concurrency", "requests", "max_tokens"):
                continue
            if (why := _range_problem(names[field], value, low, high, whole=whole, open_floor=open_floor)) is not None:
                problems.append(why)
    if problems:
        return problems  # the window of out-of-range values means nothing
    if gate.requests < gate.concurrency:
        problems.append(
            f"{names['requests']}={gate.requests} is below {names['concurrency']}={gate.concurrency}: the burst "
            f"would never have {gate.concurrency} requests in flight; allowed: at least {gate.concurrency}"
        )
        return problems
    window = burst_window_s(gate)
    waves = math.ceil(gate.requests / gate.concurrency)
    burst = f"{waves} waves of {gate.concurrency} ({names['requests']}={gate.requests}, {names['concurrency']}=" + (
        f"{gate.concurrency}) x {HEADROOM} x (TTFT + ({names['max_tokens']}={gate.max_tokens} - 1) x ITL)"
    )
    handler_room = GATE_HANDLER_TIMEOUT.to_seconds() - HANDLER_SLACK_S
    if CHECKS_ATTEMPT_S + window > handler_room:
        problems.append(
            f"the load burst does not fit one run of the smoke-test handler: {CHECKS_ATTEMPT_S} s for the checks + "
            f"a window of {window:.0f} s ({burst}, TTFT and ITL from {names['ttft_p95_ms']}, {names['itl_p95_ms']} "
            f"or {names['min_output_tokens_per_s']}) = {CHECKS_ATTEMPT_S + window:.0f} s > {handler_room:.0f} s "
            f"(Lambda's 15 minutes less one); send fewer requests, more at once, fewer tokens, or tighter targets"
        )
    total = budget_s + SERVICE_TIMEOUT_MARGIN_S + window
    if total > SERVICE_TIMEOUT_MAX_S:
        problems.append(
            f"the smoke test with its load burst does not fit CloudFormation's hour for a custom resource: "
            f"{names['budget']}={budget_s:.0f} s + {SERVICE_TIMEOUT_MARGIN_S} s + a window of {window:.0f} s "
            f"({burst}) = {total:.0f} s > {SERVICE_TIMEOUT_MAX_S} s; lower {names['budget']} or shorten the burst"
        )
    return problems
