"""``llmops bench`` as a measuring client (issue 39, item 6): figures named as AIPerf names them, errors with
their message, the client's own figures (in flight, wait before start, CPU) with warnings, the new options
(warm-up, open loop, duration, request timeout, input tokens) and their ranges, and connection reuse on both paths.

Runs against the fake SageMaker over real HTTP (both the SigV4 runtime path and the OpenAI-compatible one).
"""

from __future__ import annotations

import ast
import io
import itertools
import json
import sys
from pathlib import Path

import pytest

from endpoint_client import load
from llmops import bench
from tests.fakes.fake_runtime import BEARER_TOKEN, FakeSageMaker, Reply, client
from tests.fakes.serve_runtime import answer_text

ROOT = Path(__file__).resolve().parents[2]
ENV = {"OPENAI_API_KEY": BEARER_TOKEN}


@pytest.fixture(scope="module")
def fake():
    with FakeSageMaker() as server:
        yield server


def run(
    fake, tmp_path, endpoint: str, *extra: str, openai: bool = False, code: int = 0, own_client: bool = False
) -> tuple[dict, str, str]:
    """``bench.main`` against ``endpoint`` of the fake; the JSON report, stdout and stderr. ``own_client``: the
    runtime client is the one bench makes (pointed at the fake through the environment, see ``own_runtime``)."""
    path = tmp_path / f"{endpoint}-{'openai' if openai else 'sigv4'}.json"
    args = ["--input-tokens", "16", "--output-tokens", "16", "--json", str(path), "--no-progress", *extra]
    args += ["--openai-base-url", f"{fake.url}/endpoints/{endpoint}/openai/v1"] if openai else ["--endpoint", endpoint]
    out, err = io.StringIO(), io.StringIO()
    runtime = None if own_client else client("sagemaker-runtime", fake.url, max_pool_connections=50)
    assert bench.main(args, runtime_client=runtime, stdout=out, stderr=err, environ=ENV) == code, err.getvalue()
    return json.loads(path.read_text()), out.getvalue(), err.getvalue()


@pytest.fixture
def own_runtime(fake, monkeypatch):
    """The environment that points the runtime client bench makes itself at the fake."""
    from tests.fakes.fake_runtime import CREDENTIALS, REGION

    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", fake.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS["aws_secret_access_key"])
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


# --- one percentile function, stdlib only ---------------------------------------------------------------


def test_bench_uses_the_one_percentile_function_that_the_smoke_test_can_import():
    assert bench.percentile is load.percentile and bench.distribution is load.distribution
    assert bench.PERCENTILES == load.PERCENTILES and 95 in load.PERCENTILES  # the smoke test's targets are p95
    tree = ast.parse((ROOT / "endpoint_client" / "load.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_percentile_edges():
    assert load.percentile([], 50) != load.percentile([], 50)  # NaN
    assert load.percentile([7.0], 0) == load.percentile([7.0], 100) == 7.0
    assert load.percentile([1, 2, 3, 4], 0) == 1 and load.percentile([1, 2, 3, 4], 100) == 4
    assert load.percentile([4, 1, 3, 2], 95) == pytest.approx(3.85)
    assert load.distribution([]) == {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None}
    assert load.distribution([0.1, 0.3], 1000) == pytest.approx(
        {"mean": 200.0, "p50": 200.0, "p90": 280.0, "p95": 290.0, "p99": 298.0}
    )


# --- figures named as AIPerf names them -------------------------------------------------------------------


def test_itl_is_aiperfs_decode_time_over_the_tokens_after_the_first():
    assert load.inter_token_latency_s(1.2, 0.2, 11) == pytest.approx(0.1)
    assert load.inter_token_latency_s(1.2, 0.2, 2) == pytest.approx(1.0)  # the fewest tokens with an ITL
    assert load.inter_token_latency_s(1.2, 0.2, 1) is None and load.inter_token_latency_s(1.2, 0.2, 0) is None
    assert load.inter_token_latency_s(1.2, None, 11) is None


def test_the_tables_itl_is_aiperfs_and_inter_chunk_latency_has_its_own_column():
    # 11 tokens in 6 chunks: ITL 100 ms ((1.2 - 0.2) / 10), chunks 200 ms apart: the two figures differ.
    sample = bench.Sample(1, 0.0, e2e_s=1.2, ttft_s=0.2, tokens=11, gaps_s=[0.2] * 5, end_s=1.2, due_s=0.0)
    level = bench.summarize(1, [sample], duration_s=1.2)
    assert level["inter_token_latency_ms"]["p50"] == pytest.approx(100.0) == level["tpot_ms"]["p50"]
    assert level["inter_chunk_latency_ms"]["p50"] == pytest.approx(200.0) == level["itl_ms"]["p50"]  # kept key
    header, _, row, *rest = bench.table([level]).splitlines()
    cells = row.split()
    assert header.index("ITL ms") < header.index("inter-chunk ms") < header.index("E2E s")
    assert cells[5:8] == ["200/200/200", "100.0/100.0/100.0", "200.0/200.0/200.0"]  # TTFT, ITL, inter-chunk
    assert any("AIPerf's inter token latency" in line for line in rest)


# --- errors keep their message ------------------------------------------------------------------------------


@pytest.mark.parametrize(("length", "kept"), [(199, 199), (200, 200), (201, 200)])
def test_an_error_message_is_kept_up_to_200_characters(length, kept):
    message = bench.error_message("x" * length)
    assert len(message) == kept and message.endswith("…" if length > 200 else "x")


@pytest.mark.parametrize(
    ("text", "secret", "gone"),
    [
        ("token abc123tok refused", "abc123tok", "abc123tok"),
        ("got Authorization: Bearer sk-live-1 back", "", "sk-live-1"),
        ("see https://h/x?X-Amz-Signature=deadbeef&X-Amz-Security-Token=s3cr3t", "", "deadbeef"),
        ("see https://h/x?X-Amz-Signature=deadbeef&X-Amz-Security-Token=s3cr3t", "", "s3cr3t"),
    ],
)
def test_an_error_message_never_carries_a_token_or_signature(text, secret, gone):
    message = bench.error_message(text, secrets=(secret,))
    assert gone not in message and "[redacted]" in message


def test_a_message_about_the_bearer_token_is_kept_whole():
    from endpoint_client.openai_http import _http_error_info

    message = _http_error_info(403, b"").describe()
    assert bench.error_message(message) == message and "bearer token was refused" in message


def test_an_error_message_that_quotes_the_prompt_is_withheld():
    prompt = "the of and to in is was for on that with as it by at from his"
    assert bench.error_message(f"bad request: {prompt}", prompt=prompt) == "(message withheld: it quotes the prompt)"
    assert bench.error_message("bad request: too long", prompt=prompt) == "bad request: too long"


@pytest.mark.parametrize("openai", [False, True])
def test_errors_are_counted_by_kind_and_shown_with_their_message(fake, tmp_path, openai):
    fake.reset()
    # The third answer echoes the token (a server quoting the request's headers): as "Bearer <token>", and on
    # the OpenAI path, where bench knows the token, bare too.
    echo = f"echo: Authorization: Bearer {BEARER_TOKEN}" + (f" token={BEARER_TOKEN}" if openai else "")
    echoing = Reply.service_error("ValidationError", message=echo)
    answer = Reply(content=answer_text(4))
    fake.add_endpoint("errs", answer, echoing, default=answer, inject={"ThrottlingException": 2})
    report, out, _ = run(fake, tmp_path, "errs", "--concurrency", "1", "--requests", "4", openai=openai)
    (level,) = report["levels"]
    kind = "HTTP400" if openai else "ThrottlingException"
    assert level["errors"] == ({kind: 3} if openai else {kind: 2, "ValidationError": 1})
    assert "[redacted]" in json.dumps(report)
    assert "ThrottlingException (injected)" in level["error_messages"][kind]
    assert f"errors at concurrency 1: {kind} {level['errors'][kind]} (" in out
    assert "ThrottlingException (injected)" in out
    failed = [s for s in report["samples"] if s["error"]]
    assert len(failed) == 3 and all(s["error_message"] for s in failed)
    assert BEARER_TOKEN not in json.dumps(report) + out


# --- the client's own figures -------------------------------------------------------------------------------


def test_mean_in_flight_is_busy_time_inside_the_window_over_its_length():
    assert load.mean_in_flight([(0, 1), (0, 1)], 0, 1) == 2.0
    assert load.mean_in_flight([(0, 1), (0.5, 1)], 0, 1) == 1.5
    assert load.mean_in_flight([(-1, 0.5), (0.5, 9)], 0, 1) == 1.0  # clipped to the window
    assert load.mean_in_flight([(0, 1)], 0, 0) == 0.0 and load.mean_in_flight([], 0, 1) == 0.0


def _level(cpu_s: float | None = None, waits=(0.0,), *, open_loop: bool = False) -> dict:
    samples = [bench.Sample(2, 0.0 + w, e2e_s=1.0, ttft_s=0.1, tokens=5, due_s=0.0, end_s=1.0) for w in waits]
    return bench.summarize(2, samples, duration_s=1.0, cpu_s=cpu_s, open_loop=open_loop)


@pytest.mark.parametrize(("cpu_s", "warned"), [(0.0, False), (0.8, False), (0.81, True), (2.0, True)])
def test_a_client_using_over_80_percent_of_a_core_is_warned_about(cpu_s, warned):
    level = _level(cpu_s)
    assert level["client_cpu_per_wall_s"] == pytest.approx(cpu_s)
    assert any("of one CPU core" in w for w in level["warnings"]) is warned


@pytest.mark.parametrize(("wait_s", "warned"), [(0.0, False), (0.010, False), (0.0101, True)])
def test_requests_waiting_over_10_ms_to_start_are_warned_about(wait_s, warned):
    level = _level(waits=(wait_s,) * 3)
    assert level["queue_wait_ms"]["p95"] == pytest.approx(wait_s * 1000)
    assert any("(p95) after they were due" in w for w in level["warnings"]) is warned
    if warned:
        assert "slow to send" in level["warnings"][0]
        assert "lower --request-rate" in _level(waits=(wait_s,) * 3, open_loop=True)["warnings"][0]


def test_a_closed_loop_reports_its_requests_in_flight_wait_and_cpu(fake, tmp_path):
    fake.reset()
    fake.add_endpoint("loop", default=Reply(content=answer_text(6), first_token_delay_s=0.05, token_delay_s=0.01))
    report, out, _ = run(fake, tmp_path, "loop", "--concurrency", "1,3", "--requests", "9")
    one, three = report["levels"]
    assert 0.8 <= one["effective_concurrency"] <= 1.0 and 2.0 <= three["effective_concurrency"] <= 3.0
    for level in (one, three):  # a wait of bookkeeping only (a loaded 2-core machine can stall a thread a little)
        assert level["queue_wait_ms"]["p95"] < 50 and 0 <= level["client_cpu_per_wall_s"] < 2
    assert "client at concurrency 3: " in out and " in flight on average, wait before start p50/p95 " in out


# --- options and their ranges -------------------------------------------------------------------------------

EDGES = [
    ("--warmup", "0", None),
    ("--warmup", "10000", None),
    ("--warmup", "-1", "--warmup -1 must be at least 0 (allowed: 0 to 10000 requests)"),
    ("--warmup", "10001", "--warmup 10001 must be at most 10000 (allowed: 0 to 10000 requests)"),
    ("--request-rate", "0.001", None),
    ("--request-rate", "10000", None),
    ("--request-rate", "0", "--request-rate 0 must be more than 0 (allowed: more than 0 to 10000 requests per second)"),
    ("--request-rate", "10000.5", "--request-rate 10000.5 must be at most 10000"),
    ("--request-rate", "nan", "--request-rate nan must be a finite number"),
    ("--request-rate", "inf", "--request-rate inf must be a finite number"),
    ("--duration", "0.01", None),
    ("--duration", "86400", None),
    ("--duration", "0", "--duration 0 must be more than 0 (allowed: more than 0 to 86400 seconds)"),
    ("--duration", "86401", "--duration 86401 must be at most 86400"),
    ("--request-timeout", "0.01", None),
    ("--request-timeout", "3600", None),
    ("--request-timeout", "-1", "--request-timeout -1 must be more than 0 (allowed: more than 0 to 3600 seconds)"),
    ("--request-timeout", "3601", "--request-timeout 3601 must be at most 3600"),
    ("--requests", "1000000", None),
    ("--requests", "1000001", "--requests 1000001 must be at most 1000000"),
    ("--input-tokens", "0", "--input-tokens 0 must be at least 1 (allowed: 1 to 1000000 words)"),
    ("--output-tokens", "1000001", "--output-tokens 1000001 must be at most 1000000 (allowed: 1 to 1000000 tokens)"),
    ("--concurrency", "1,1024", None),
    ("--concurrency", "1,1025", "--concurrency 1025 must be at most 1024 (allowed: 1 to 1024 requests in flight)"),
    ("--concurrency", "2000,1025", "--concurrency 2000 must be at most 1024"),  # named once, not per level
]


@pytest.mark.parametrize(("option", "value", "problem"), EDGES)
def test_each_option_is_checked_at_its_edges(option, value, problem):
    args = bench._parser().parse_args(["--endpoint", "x", option, value])
    problems = bench.option_problems(args)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_every_bad_option_is_named_at_once_and_the_run_exits_2():
    err = io.StringIO()
    args = ["--endpoint", "x", "--warmup", "-1", "--duration", "0", "--arrival", "constant"]
    assert bench.main(args, stdout=io.StringIO(), stderr=err) == 2
    message = err.getvalue()
    assert "--warmup -1 must be at least 0" in message and "--duration 0 must be more than 0" in message
    assert "--arrival constant needs --request-rate" in message


def test_warmup_requests_go_first_and_are_not_counted(fake, tmp_path):
    fake.reset()
    fake.add_endpoint("warm", default=Reply(content=answer_text(3)))
    report, _, err = run(fake, tmp_path, "warm", "--concurrency", "2", "--requests", "4", "--warmup", "3")
    assert len(fake.invocations("warm")) == 7
    (level,) = report["levels"]
    assert level["requests"] == 4 and report["warmup"]["requests"] == 3 and report["warmup"]["completed"] == 3
    assert "warm-up: 3/3 requests, not counted" in err
    prompts = [r.body["messages"][0]["content"] for r in fake.invocations("warm")]
    assert set(prompts[3:]) == set(bench.synthetic_prompts(4, 16, seed=0))  # the measured prompts stay the seed's


def test_arrival_times_are_poisson_by_default_or_constant():
    constant = bench.arrival_times(5, 4.0, "constant")
    assert constant == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    poisson = bench.arrival_times(4000, 10.0, seed=3)
    assert poisson == bench.arrival_times(4000, 10.0, seed=3) != bench.arrival_times(4000, 10.0, seed=4)
    gaps = [b - a for a, b in itertools.pairwise(poisson)]
    assert poisson[0] == 0.0 and sum(gaps) / len(gaps) == pytest.approx(0.1, rel=0.05)
    assert load.percentile(gaps, 50) == pytest.approx(0.1 * 0.6931, rel=0.1)  # exponential: median ln 2 / rate


def test_an_open_loop_sends_at_the_rate_and_its_cap_makes_requests_wait(fake, tmp_path):
    fake.reset()
    fake.add_endpoint("open", default=Reply(content=answer_text(3), first_token_delay_s=0.15))
    args = ("--concurrency", "1,8", "--requests", "6", "--request-rate", "20", "--arrival", "constant")
    report, out, _ = run(fake, tmp_path, "open", *args)
    capped, free = report["levels"]
    assert report["settings"]["arrival"] == "constant" and report["settings"]["request_rate"] == 20
    starts = [s for s in report["samples"] if s["concurrency"] == 8]
    assert [s["due_s"] for s in starts] == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2, 0.25])
    assert all(s["start_s"] >= s["due_s"] for s in report["samples"])
    assert free["queue_wait_ms"]["p95"] < 50 and free["effective_concurrency"] > 1.5
    # One slot for requests arriving every 50 ms that take 150 ms: they queue, and the report says so.
    assert capped["queue_wait_ms"]["p95"] > 200 and capped["effective_concurrency"] > 0.8
    assert "raise --concurrency or lower --request-rate" in out


def test_duration_stops_issuing_requests(fake, tmp_path):
    fake.reset()
    fake.add_endpoint("timed", default=Reply(content=answer_text(3), first_token_delay_s=0.1))
    report, _, _ = run(fake, tmp_path, "timed", "--concurrency", "1", "--requests", "100", "--duration", "0.35")
    (level,) = report["levels"]
    assert 1 <= level["requests"] <= 5 and level["requests"] == level["completed"]  # not 100
    assert all(s["start_s"] < 0.35 for s in report["samples"])
    assert len(fake.invocations("timed")) == level["requests"]


@pytest.mark.parametrize("openai", [False, True])
@pytest.mark.parametrize(
    "reply",
    [
        Reply(content=answer_text(3), first_token_delay_s=1.0),  # no byte within the timeout
        Reply(content=answer_text(12), token_delay_s=0.05),  # bytes keep coming, the whole answer is late
    ],
    ids=["stalled", "slow"],
)
def test_a_request_past_its_timeout_is_an_error_of_kind_timeout(fake, tmp_path, own_runtime, openai, reply):
    fake.reset()
    fake.add_endpoint("late", default=reply)
    args = ("--concurrency", "1", "--requests", "2", "--request-timeout", "0.3")
    report, out, _ = run(fake, tmp_path, "late", *args, openai=openai, code=1, own_client=True)
    (level,) = report["levels"]
    assert level["errors"] == {"timeout": 2} and level["completed"] == 0
    assert "errors at concurrency 1: timeout 2 (" in out
    assert all(s["end_s"] - s["start_s"] < 0.3 + 0.5 for s in report["samples"])


@pytest.mark.parametrize("openai", [False, True])
def test_input_tokens_come_from_usage_or_are_an_estimate_labelled_as_such(fake, tmp_path, openai):
    fake.reset()
    fake.add_endpoint("usage", default=Reply(content=answer_text(3)))  # prompt_tokens 12
    fake.add_endpoint("nousage", default=Reply(content=answer_text(3), usage=False))
    report, out, _ = run(fake, tmp_path, "usage", "--concurrency", "1", "--requests", "2", openai=openai)
    (level,) = report["levels"]
    assert level["input_tokens"]["p50"] == 12 and level["input_token_source"] == "usage"
    assert "input tokens p50 12 (from usage)" in out
    report, out, _ = run(fake, tmp_path, "nousage", "--concurrency", "1", "--requests", "2", openai=openai)
    (level,) = report["levels"]
    assert level["input_tokens"]["p50"] == 16 and level["input_token_source"] == "estimate"
    assert "input tokens p50 16 (estimated: words of the prompt)" in out


# --- connections ------------------------------------------------------------------------------------------


def test_the_openai_path_reuses_its_connections_across_levels(fake, tmp_path, monkeypatch):
    from endpoint_client import openai_http

    monkeypatch.setattr(openai_http, "DRAIN_TIMEOUT_S", 5.0)  # a loaded machine must not make this count vary
    fake.reset()
    fake.add_endpoint("reuse", default=Reply(content=answer_text(4), token_delay_s=0.002))
    before = fake.connections
    report, _, _ = run(fake, tmp_path, "reuse", "--concurrency", "1,2", "--requests", "8", "--warmup", "2", openai=True)
    assert sum(level["completed"] for level in report["levels"]) == 16
    assert 1 <= fake.connections - before <= 2 and report["connections_opened"] == fake.connections - before


def test_the_runtime_client_keeps_a_connection_per_request_in_flight(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    made = bench._runtime_client("us-east-1", 18, 30.0)
    assert made.meta.config.max_pool_connections == 18 and made.meta.config.read_timeout == 30.0


@pytest.mark.parametrize(("pool", "concurrency", "warned"), [(10, 10, False), (10, 11, True), (11, 10, False)])
def test_a_runtime_client_with_fewer_connections_than_requests_in_flight_is_warned_about(pool, concurrency, warned):
    runtime = client("sagemaker-runtime", "http://127.0.0.1:9", max_pool_connections=pool)
    warning = bench.runtime_pool_warning(runtime, concurrency)
    assert (warning is not None) is warned
    if warned:
        assert f"at most {pool} connections (botocore max_pool_connections) for concurrency {concurrency}" in warning


# --- review of 42bb138..3072d4d ---------------------------------------------------------------------------


def test_an_open_loop_with_a_duration_counts_the_arrivals_that_never_started(fake, tmp_path):
    """1 slot, 0.2 s a request, 20 arriving a second for 1 s: 20 are due, about 5 start; the rest are reported
    as not started (table, JSON, a warning) and their waits up to the end are in the wait before start."""
    fake.reset()
    fake.add_endpoint("backlog", default=Reply(content=answer_text(2), first_token_delay_s=0.2))
    args = ("--concurrency", "1", "--request-rate", "20", "--arrival", "constant", "--duration", "1")
    report, out, _ = run(fake, tmp_path, "backlog", *args)
    (level,) = report["levels"]
    assert level["requests"] + level["not_started"] == 20 and level["not_started"] >= 10, level
    assert level["queue_wait_ms"]["p50"] > 200  # the not-started waits count: 50 to 700 ms each
    assert f"not started {level['not_started']}" in out
    assert f"{level['not_started']} requests due before --duration ended never started" in out


def test_a_closed_loop_has_no_not_started_requests(fake, tmp_path):
    fake.reset()
    fake.add_endpoint("closed", default=Reply(content=answer_text(2)))
    report, out, _ = run(fake, tmp_path, "closed", "--concurrency", "1", "--requests", "2", "--duration", "5")
    assert report["levels"][0]["not_started"] == 0 and "not started 0" in out


def test_duration_without_requests_is_bounded_by_the_duration_only(fake, tmp_path):
    """The README's open-loop example gives --duration alone: the default 64 requests must not cut it short."""
    fake.reset()
    fake.add_endpoint("long", default=Reply(content=answer_text(1), keep_alive=False))
    report, _, _ = run(fake, tmp_path, "long", "--concurrency", "4", "--duration", "2.5")  # about 120 a second here
    (level,) = report["levels"]
    assert level["requests"] > bench.DEFAULT_REQUESTS, level["requests"]
    assert report["settings"]["requests_bounded_by"] == "duration"
    assert report["settings"]["requests"] == bench.DURATION_REQUESTS_CAP
    report, _, _ = run(fake, tmp_path, "long", "--concurrency", "1", "--requests", "3", "--duration", "60")
    assert report["levels"][0]["requests"] == 3 and report["settings"]["requests_bounded_by"] == "requests"


def test_bodies_are_made_when_sent_not_up_front():
    made = []
    bodies = bench.Bodies(lambda i: made.append(i) or {"i": i}, 1_000_000, start=10)
    assert len(bodies) == 1_000_000 and made == []
    assert bodies[0] == {"i": 10} and bodies[-1] == {"i": 1_000_009} and made == [10, 1_000_009]
    with pytest.raises(IndexError):
        bodies[1_000_000]


def test_prompt_words_in_flight_are_capped_with_a_usage_error():
    args = bench._parser().parse_args(["--endpoint", "x", "--concurrency", "16", "--input-tokens", "1000000"])
    assert bench.option_problems(args) == []  # 16 million words: the most
    args = bench._parser().parse_args(["--endpoint", "x", "--concurrency", "17", "--input-tokens", "1000000"])
    (problem,) = bench.option_problems(args)
    assert "--input-tokens 1000000 at --concurrency 17 puts 17,000,000 prompt words in flight" in problem


class _Events:
    """A boto3 EventStream stand-in: ``events`` one every ``every_s``; closing it takes ``close_s``."""

    def __init__(self, events, every_s=0.0, close_s=0.0):
        self.events, self.every_s, self.close_s = events, every_s, close_s

    def __iter__(self):
        import time

        for event in self.events:
            time.sleep(self.every_s)
            yield {"PayloadPart": {"Bytes": event}}

    def close(self):
        import time

        time.sleep(self.close_s)


class _Runtime:
    def __init__(self, **stream):
        self.stream = stream

    def invoke_endpoint_with_response_stream(self, **request):
        return {"Body": _Events(**self.stream)}


def _bench_with(runtime, tmp_path, *args, code=0):
    path = tmp_path / "stub.json"
    argv = ["--endpoint", "stub", "--json", str(path), "--no-progress", "--input-tokens", "4", *args]
    out, err = io.StringIO(), io.StringIO()
    assert bench.main(argv, runtime_client=runtime, stdout=out, stderr=err, environ={}) == code, err.getvalue()
    return json.loads(path.read_text()), out.getvalue()


def test_request_timeout_bounds_a_stream_of_events_without_content(tmp_path):
    """Role-only and comment events every 0.25 s for 2 s: --request-timeout 0.3 ends each request at about
    0.3 s plus one event, not when the stream ends."""
    events = [b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n', b": comment\n\n"] * 4
    report, out = _bench_with(
        _Runtime(events=events, every_s=0.25),
        tmp_path,
        "--concurrency",
        "1",
        "--requests",
        "1",
        "--request-timeout",
        "0.3",
        code=1,
    )
    (level,) = report["levels"]
    assert level["errors"] == {"timeout": 1}
    assert "no complete answer within --request-timeout 0.3 s" in out
    (sample,) = report["samples"]
    assert sample["end_s"] - sample["start_s"] < 0.3 + 0.25 + 0.3


def test_a_request_is_in_flight_until_its_answer_is_complete_not_while_its_stream_closes(tmp_path):
    events = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n"]
    report, _ = _bench_with(_Runtime(events=events, close_s=0.3), tmp_path, "--concurrency", "1", "--requests", "2")
    first, second = report["samples"]
    assert first["e2e_s"] < 0.2 and first["end_s"] - first["start_s"] < 0.2  # not the 0.3 s close
    assert second["start_s"] - second["due_s"] >= 0.25  # the close delays the next request: a wait, counted


def test_an_error_that_echoes_any_part_of_the_prompt_is_withheld():
    prompt = 'say "the of and to in is" then \u00e9t\u00e9 was for on that with as it by at from his had not but'
    middle = prompt[31:55]  # 24 characters from the middle, not the start the old check compared
    assert bench.error_message(f"bad: {middle}", prompt=[prompt]) == "(message withheld: it quotes the prompt)"
    nested = json.dumps({"message": json.dumps({"error": f"cannot parse {prompt[20:60]}"})})  # escaped twice
    assert prompt[20:60] not in nested
    assert bench.error_message(nested, prompt=["short", prompt]) == "(message withheld: it quotes the prompt)"
    assert bench.error_message(f"bad:{middle[:23]}", prompt=[prompt]) == f"bad:{middle[:23]}"  # 23 in a row: kept


def test_the_warmup_runs_at_the_highest_concurrency(fake, tmp_path):
    fake.reset()
    fake.add_endpoint("warmmax", default=Reply(content=answer_text(2)))
    report, _, _ = run(fake, tmp_path, "warmmax", "--concurrency", "1,3", "--requests", "2", "--warmup", "3")
    assert report["warmup"]["concurrency"] == 3 and report["warmup"]["completed"] == 3
