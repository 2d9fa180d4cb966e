"""``llmops bench --async`` against the fake SageMaker runtime and a moto S3 server, both over real HTTP.

The fake writes each answer into moto ``delay_s`` after the request was accepted, so the queue-to-answer latency
the benchmark reports can be checked against what was configured (plus at most one poll interval).
"""

from __future__ import annotations

import io
import json
import threading

import pytest

from llmops import async_bench, bench
from tests.fakes import fixtures
from tests.fakes.fake_runtime import Reply, client
from tests.fakes.serve_runtime import answer_text

BUCKET = "bench-async-answers"
DELAY_S = 0.3
POLL_S = 0.05
TOKENS = 6  # answer_text(6): six words, and the fake's usage.completion_tokens counts them


# The shared fixtures: the session's moto server and the fake runtime answering into it.
moto_url, async_fake = fixtures.moto_url, fixtures.async_fake


@pytest.fixture(scope="module")
def fake(async_fake):
    return async_fake


@pytest.fixture
def s3(moto_url):
    s3 = client("s3", moto_url)
    s3.create_bucket(Bucket=BUCKET)
    return s3


@pytest.fixture
def endpoint(fake, s3, request) -> str:
    fake.reset()
    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    fake.add_endpoint(
        name,
        default=Reply(content=answer_text(TOKENS), delay_s=DELAY_S),
        async_output=f"s3://{BUCKET}/{name}/out",
        async_failure=f"s3://{BUCKET}/{name}/fail",
    )
    return name


def keys(s3, prefix: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def run(fake, moto_url, tmp_path, endpoint: str, *extra: str, code: int = 0) -> tuple[dict, str, str]:
    path = tmp_path / "report.json"
    args = ["--async", "--endpoint", endpoint, "--input-tokens", "16", "--output-tokens", "16", "--no-progress"]
    args += ["--poll-interval", str(POLL_S), "--json", str(path), *extra]
    out, err = io.StringIO(), io.StringIO()
    runtime = client("sagemaker-runtime", fake.url, max_pool_connections=20)
    s3 = client("s3", moto_url, max_pool_connections=20)
    assert bench.main(args, runtime_client=runtime, s3_client=s3, stdout=out, stderr=err) == code, err.getvalue()
    return (json.loads(path.read_text()) if path.exists() else {}), out.getvalue(), err.getvalue()


def test_eight_requests_at_concurrency_4_report_queue_to_answer_latency_and_throughput(
    fake, moto_url, s3, tmp_path, endpoint
):
    report, out, err = run(fake, moto_url, tmp_path, endpoint, "--concurrency", "4", "--requests", "8", "--warmup", "2")
    (level,) = report["levels"]
    assert (level["requests"], level["completed"], level["errors"]) == (8, 8, {})
    latency = level["queue_to_answer_ms"]
    # Each answer is written DELAY_S after it was accepted and found by a poll every POLL_S (plus HTTP to moto).
    # The upper bound leaves a loaded machine (2 cores, xdist) a second; without the poll interval the back-off alone
    # would add up to 5 s.
    assert DELAY_S * 1000 <= latency["p50"] <= (DELAY_S + POLL_S) * 1000 + 1000
    assert latency["p50"] <= latency["p90"] <= latency["p95"] <= latency["p99"]
    # Two rounds of four: 8 requests in about 2 x the latency.
    assert 4 / (latency["p99"] / 1000) * 0.5 <= level["requests_per_s"] <= 4 / DELAY_S
    assert level["output_tokens"] == 8 * TOKENS
    assert level["output_tokens_per_s"] == pytest.approx(level["requests_per_s"] * TOKENS)
    assert level["input_token_source"] == "usage"
    assert 2.5 <= level["effective_concurrency"] <= 4.0
    # No streamed figure is reported, as an empty column or a key.
    assert not set(async_bench.STREAM_ONLY) & set(level) and "e2e_ms" not in level
    header = out.splitlines()[0]
    assert "queue-to-answer s p50/p90/p95/p99" in header and "TTFT" not in header and "ITL" not in header
    assert "no TTFT or ITL" in out
    assert report["settings"]["asynchronous"] is True and report["settings"]["poll_interval_s"] == POLL_S
    # Every request went out whole (not streamed), and every object made, the warm-up's too, is gone.
    assert len(fake.requests) == 10 and all("stream" not in r.body for r in fake.requests)
    assert report["objects"] == {"requests": 10, "keys_deleted": 20, "failed": [], "timed_out": 0, "abandoned": 0}
    assert "deleted the answer and failure objects of the 10 requests submitted" in err
    assert keys(s3, endpoint) == []


def test_a_failure_object_is_an_error_with_its_text(fake, moto_url, s3, tmp_path, endpoint):
    fake.endpoint(endpoint).replies.append(Reply.model_error(500, "CUDA out of memory: tried to allocate 2 GiB"))
    report, out, _ = run(fake, moto_url, tmp_path, endpoint, "--concurrency", "2", "--requests", "4")
    (level,) = report["levels"]
    assert level["completed"] == 3 and level["errors"] == {"AsyncInferenceFailed": 1}
    assert level["error_messages"]["AsyncInferenceFailed"] == "CUDA out of memory: tried to allocate 2 GiB"
    assert "errors at concurrency 2: AsyncInferenceFailed 1 (CUDA out of memory: tried to allocate 2 GiB)" in out
    assert keys(s3, endpoint) == []  # the failure object too


def test_an_answer_not_found_in_time_is_an_error_of_kind_timeout(fake, moto_url, s3, tmp_path, endpoint):
    fake.endpoint(endpoint).default = Reply(delay_s=1.0)
    extra = ("--concurrency", "2", "--requests", "2", "--request-timeout", "0.2")
    report, _, err = run(fake, moto_url, tmp_path, endpoint, *extra, code=bench.EXIT_FAILED)
    (level,) = report["levels"]
    assert level["errors"] == {"timeout": 2}
    assert level["error_messages"]["timeout"].startswith("no answer or failure object within --request-timeout 0.2 s")
    assert report["objects"]["timed_out"] == 2
    assert "; 2 requests had no answer in time and may still be answered" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--async", "--openai-base-url", "http://127.0.0.1:9/v1"], "--openai-base-url does not go with --async"),
        (["--async", "--ic", "component"], "--inference-component does not go with --async"),
        (["--async", "--request-rate", "5"], "--request-rate does not go with --async"),
        (["--async", "--duration", "5"], "--duration does not go with --async"),
        (["--async", "--suggest-slo"], "--suggest-slo does not go with --async"),
        (["--async", "--plot", "chart.png"], "--plot does not go with --async"),
        (["--poll-interval", "1"], "--poll-interval needs --async"),
        (["--request-ttl-s", "60"], "--request-ttl-s needs --async"),
        (["--async", "--poll-interval", "0.04"], "--poll-interval 0.04 must be at least 0.05"),
        (["--async", "--invocation-timeout-s", "0"], "--invocation-timeout-s 0 must be at least 1"),
        (["--async", "--invocation-timeout-s", "3601"], "--invocation-timeout-s 3601 must be at most 3600"),
        (["--async", "--request-ttl-s", "59"], "--request-ttl-s 59 must be at least 60"),
        (["--async", "--request-ttl-s", "21601"], "--request-ttl-s 21601 must be at most 21600"),
        (["--async", "--input-tokens", "30000"], "an inline body is at most 128,000 bytes"),
    ],
)
def test_what_an_asynchronous_run_cannot_do_exits_2(fake, endpoint, argv, said):
    out, err = io.StringIO(), io.StringIO()
    args = ["--endpoint", endpoint, "--concurrency", "1", "--requests", "1", *argv]
    assert bench.main(args, runtime_client=client("sagemaker-runtime", fake.url), stdout=out, stderr=err) == 2
    assert said in err.getvalue()
    assert fake.requests == []


def test_request_limits_at_their_edges_are_sent(fake, moto_url, tmp_path, endpoint):
    fake.endpoint(endpoint).default = Reply(content=answer_text(TOKENS))
    extra = ("--concurrency", "1", "--requests", "1", "--invocation-timeout-s", "3600", "--request-ttl-s", "60")
    report, _, _ = run(fake, moto_url, tmp_path, endpoint, *extra)
    (request,) = fake.requests
    assert request.headers["x-amzn-sagemaker-invocationtimeoutseconds"] == "3600"
    assert request.headers["x-amzn-sagemaker-requestttlseconds"] == "60"
    assert report["settings"]["invocation_timeout_s"] == 3600 and report["settings"]["request_ttl_s"] == 60


def test_a_stopped_run_abandons_what_is_in_flight_and_still_deletes_what_it_made(fake, moto_url, s3, endpoint):
    fake.endpoint(endpoint).default = Reply(delay_s=0.3)
    stop = threading.Event()
    requests = async_bench.AsyncRequests(
        client("sagemaker-runtime", fake.url), client("s3", moto_url), endpoint, stop, poll_s=POLL_S
    )
    threading.Timer(0.1, stop.set).start()
    body = bench.request_body({"prompt": "hello"}, 8, None, stream=False)
    assert requests(body, bench.Sample(concurrency=1, start_s=0.0)) is None  # not counted
    fake.settle()
    assert len(keys(s3, endpoint)) == 1  # the answer came after the stop
    cleaned = requests.delete_objects()
    assert (cleaned["requests"], cleaned["abandoned"], cleaned["failed"]) == (1, 1, [])
    assert keys(s3, endpoint) == []
