"""``llmops bench --async``: requests kept queued on an asynchronous endpoint, their answers awaited in S3.

Each of the ``--concurrency`` workers of a level submits a request (``InvokeEndpointAsync``, the body inline: at
most 128,000 bytes), looks for its answer every ``--poll-interval`` seconds (GetObject on the output location,
then on the failure location SageMaker named) and submits its next request once the answer is there: C requests
are in flight, queued or being processed, all the time (the closed loop of llmops/bench.py, same workers).

Figures per level: queue-to-answer latency, from the call to the poll that found the answer object (queue and
processing time together, what an asynchronous caller waits; at most one poll interval late), at p50/p90/p95/p99;
requests/s and output tokens/s (``usage.completion_tokens``, else the answer's words, labelled); errors by kind
with a message: a failure object is kind ``AsyncInferenceFailed`` with its text, no object within
``--request-timeout`` (default 900 s, the default invocation timeout, or ``--invocation-timeout-s`` when longer)
kind ``timeout``. There is no time to first token and no inter-token latency: an asynchronous endpoint writes
its answer whole and nothing streams, so those columns and keys are left out rather than shown empty.

Afterwards every answer and failure object the run made is deleted, the warm-up's too (benchmark garbage), with
DeleteObjects, up to 1,000 keys a call (S3 API reference, DeleteObjects). A request that timed out, or was in
flight when Ctrl-C stopped the run, may still be answered after that, into an object made later: the report says
how many there were.

IAM for whoever runs it: ``sagemaker:InvokeEndpointAsync`` on the endpoint; ``s3:GetObject`` and
``s3:DeleteObject`` on the output and failure prefixes; ``s3:ListBucket`` on their bucket, without which S3 answers
403 instead of 404 for an answer not written yet (S3 API reference, GetObject: the error for a missing object
"depends on whether you also have the s3:ListBucket permission").
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from endpoint_client import InvocationError
from endpoint_client.async_invocations import (
    DEFAULT_INVOCATION_TIMEOUT_S,
    EXPIRED,
    FAILED,
    MAX_INLINE_BODY_BYTES,
    Submitted,
    new_inference_id,
    s3_location,
    submit_chat,
    wait_for_answer,
)
from endpoint_client.load import PERCENTILES
from llmops.bench_parts import (
    DEFAULT_POLL_INTERVAL_S,
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

# A request's answer is waited for as long as the container may take by default, unless --request-timeout says.
DEFAULT_WAIT_S = float(DEFAULT_INVOCATION_TIMEOUT_S)
INFERENCE_ID_PREFIX = "llmops-bench-"
DELETE_BATCH = 1000  # keys per DeleteObjects call (S3 API reference)
# What a level summary (llmops/bench.py summarize) holds that only a stream has: left out of an async level.
STREAM_ONLY = (
    "ttft_ms",
    "inter_token_latency_ms",
    "inter_chunk_latency_ms",
    "itl_ms",
    "tpot_ms",
    "output_tokens_per_s_per_request",
)
# Options that need a stream, an open loop or a real-time endpoint, with why each is refused with --async.
REFUSED = {
    # An asynchronous endpoint "can only receive asynchronous invocations" (SageMaker developer guide, async-inference).
    "openai_base_url": "an asynchronous endpoint takes only InvokeEndpointAsync",
    "inference_component": "InvokeEndpointAsync takes no inference component (botocore's sagemaker-runtime model)",
    "adapter": "an adapter is an inference component, and InvokeEndpointAsync takes none",
    "request_rate": "it measures a closed loop: --concurrency requests kept queued",
    "duration": "it sends --requests requests per level",
    "suggest_slo": "the load gate's targets are TTFT and ITL, which an asynchronous endpoint does not have",
    "plot": "the chart shows TTFT and ITL, which an asynchronous endpoint does not have",
}


def refused_with_async(args: argparse.Namespace) -> list[str]:
    """Each option given that does not go with ``--async``, and why."""
    return [
        f"--{name.replace('_', '-')} does not go with --async: {why}"
        for name, why in REFUSED.items()
        if getattr(args, name, None) is not None
    ]


def inline_body_problem(body: Mapping[str, Any], what: str) -> str | None:
    """Why ``body`` cannot go inline (``what`` names it), or None."""
    size = len(json.dumps(body).encode("utf-8"))  # as submit_chat encodes it
    if size <= MAX_INLINE_BODY_BYTES:
        return None
    return (
        f"{what} is {size:,} bytes; an inline body is at most {MAX_INLINE_BODY_BYTES:,} bytes (InvokeEndpointAsync "
        "Body), and bench --async sends inline bodies only: lower --input-tokens or shorten the prompts"
    )


class AsyncRequests:
    """Makes each request of a level (bench's ``run_level(send=...)``): submit, wait for the answer object, fill the
    sample; keeps every request submitted so that its objects can be deleted afterwards (:meth:`delete_objects`)."""

    def __init__(
        self,
        runtime: Any,
        s3: Any,
        endpoint: str,
        stop: threading.Event,
        *,
        wait_s: float = DEFAULT_WAIT_S,
        poll_s: float = DEFAULT_POLL_INTERVAL_S,
        invocation_timeout_s: int | None = None,
        request_ttl_s: int | None = None,
    ) -> None:
        self.runtime, self.s3, self.endpoint, self.stop = runtime, s3, endpoint, stop
        self.wait_s, self.poll_s = wait_s, poll_s
        self.invocation_timeout_s, self.request_ttl_s = invocation_timeout_s, request_ttl_s
        self.submitted: list[Submitted] = []
        self.timed_out = 0  # no answer within wait_s: it may still come
        self.abandoned = 0  # in flight when the run was stopped: its answer may still come
        self._lock = threading.Lock()

    def _sleep(self, wanted_s: float) -> None:
        """wait_for_answer's pause: every poll interval (not its back-off to 5 s, which would put seconds on a
        latency), cut short by a stop."""
        if self.stop.wait(min(wanted_s, self.poll_s)):
            raise _Stopped

    def __call__(self, body: Mapping[str, Any], sample: Sample) -> Sample | None:
        prompt = _message_texts(body)
        try:
            submitted = submit_chat(
                self.runtime,
                self.endpoint,
                body,
                inference_id=new_inference_id(INFERENCE_ID_PREFIX),
                invocation_timeout_s=self.invocation_timeout_s,
                request_ttl_s=self.request_ttl_s,
            )
        except ValueError as e:  # a body over the inline limit
            sample.error, sample.error_message = "RequestTooLarge", error_message(str(e), prompt=prompt)
            return sample
        except InvocationError as e:
            sample.error, sample.error_message = error_kind(e), error_message(str(e), prompt=prompt)
            return sample
        with self._lock:
            self.submitted.append(submitted)
        try:
            result = wait_for_answer(self.s3, submitted, deadline=time.time() + self.wait_s, sleep=self._sleep)
        except _Stopped:
            with self._lock:
                self.abandoned += 1
            return None
        except InvocationError as e:
            sample.error = error_kind(e)
            if e.info.code == EXPIRED:
                with self._lock:
                    self.timed_out += 1
                sample.error_message = (
                    f"no answer or failure object within --request-timeout {self.wait_s:g} s (or every read denied: "
                    "s3:GetObject and s3:ListBucket are needed)"
                )
            elif e.info.code == FAILED:
                # The failure object's text is the reason; its location (an id) would make every message differ.
                sample.error_message = error_message(e.info.body or str(e), prompt=prompt)
            else:
                sample.error_message = error_message(str(e), prompt=prompt)
            return sample
        sample.e2e_s = result.latency_s
        sample.end_s = sample.start_s + result.latency_s
        sample.tokens, sample.token_source = result.tokens, result.token_source
        if result.prompt_tokens is not None:
            sample.input_tokens, sample.input_token_source = result.prompt_tokens, "usage"
        else:
            sample.input_tokens, sample.input_token_source = estimate_input_tokens(body), "estimate"
        if not result.content and not result.reasoning:
            sample.error, sample.error_message = "EmptyAnswer", "the answer object carried no content or reasoning"
        return sample

    def delete_objects(self) -> dict[str, Any]:
        """Delete the output and failure objects of every request submitted (both keys: S3 deletes a missing key
        without an error). ``{"requests": submitted, "keys_deleted": n, "failed": [messages], "timed_out": n,
        "abandoned": n}``: the last two are requests whose answer may still come, after the delete."""
        by_bucket: dict[str, list[str]] = {}
        for submitted in self.submitted:
            for location in (submitted.output_location, submitted.failure_location):
                if location:
                    bucket, key = s3_location(location)
                    by_bucket.setdefault(bucket, []).append(key)
        deleted, failed = 0, []
        for bucket, keys in sorted(by_bucket.items()):
            for start in range(0, len(keys), DELETE_BATCH):
                batch = keys[start : start + DELETE_BATCH]
                objects = [{"Key": key} for key in batch]
                try:
                    answer = self.s3.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
                except Exception as e:  # botocore ClientError, connection errors: reported, the figures stand
                    code = getattr(e, "response", {}).get("Error", {}).get("Code") or type(e).__name__
                    failed.append(f"DeleteObjects on {bucket}: {code} ({len(batch)} keys left)")
                    continue
                errors = answer.get("Errors") or []
                deleted += len(batch) - len(errors)
                if errors:
                    failed.append(f"DeleteObjects on {bucket}: {errors[0].get('Code')} ({len(errors)} keys left)")
        return {
            "requests": len(self.submitted),
            "keys_deleted": deleted,
            "failed": failed,
            "timed_out": self.timed_out,
            "abandoned": self.abandoned,
        }


def async_level(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A level summary (bench's ``summarize``) for an asynchronous endpoint: no streamed figures, and its latency
    named for what it is, submission to answer."""
    level = {key: value for key, value in summary.items() if key not in STREAM_ONLY}
    level["queue_to_answer_ms"] = level.pop("e2e_ms")
    return level


def table(levels: Sequence[Mapping[str, Any]], poll_s: float) -> str:
    """bench's table for an asynchronous endpoint: throughput and queue-to-answer percentiles, then the same notes."""
    header = ("concurrency", "ok/sent", "req/s", "out tok/s", "queue-to-answer s p50/p90/p95/p99")
    rows = [header]
    for level in levels:
        seconds = {k: (v / 1000 if v is not None else None) for k, v in level["queue_to_answer_ms"].items()}
        rows.append(
            (
                f"{level['concurrency']}{' (stopped)' if level['interrupted'] else ''}",
                f"{level['completed']}/{level['requests']}",
                _fmt(level["requests_per_s"], 2),
                _fmt(level["output_tokens_per_s"], 1),
                _triple(seconds, 2, PERCENTILES),
            )
        )
    lines = aligned(rows)
    lines.append(
        f"queue-to-answer: from InvokeEndpointAsync to the poll that found the answer object, queue included (a poll "
        f"every {poll_s:g} s: each is up to that late); no TTFT or ITL: an asynchronous endpoint streams nothing"
    )
    lines.extend(level_notes(levels))
    return "\n".join(lines)
