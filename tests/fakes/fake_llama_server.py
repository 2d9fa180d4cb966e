"""A stand-in for llama.cpp's ``llama-server``, run as a child process the way the adapter runs the real one.

It takes the same command line the adapter gives (``--model``, ``--host``, ``--port``) and behaves like
llama-server on the surface the adapter uses (tools/server/README.md and server-common.cpp):

- ``GET /health``: 503 ``{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}``
  while "loading", then 200 ``{"status": "ok"}``.
- ``POST /v1/chat/completions``: with ``"stream": true``, Server-Sent Events in chunked transfer encoding, one
  ``data: <json>\\n\\n`` event per token (the first delta carries the role, the last the finish reason), then
  ``data: [DONE]\\n\\n``; otherwise one ``chat.completion`` object. Ids and timestamps are fixed, so two
  calls give the same bytes.

Knobs (environment): ``FAKE_LLAMA_LOAD_S`` (seconds of loading), ``FAKE_LLAMA_EXIT_AFTER_S`` (crash with
code 3 after that long), ``FAKE_LLAMA_PREFILL_S`` (pause before the first event, as prompt processing),
``FAKE_LLAMA_TOKEN_DELAY_S`` (pause between tokens), ``FAKE_LLAMA_TOKENS`` (how many
tokens per answer), ``FAKE_LLAMA_RECORD`` (a file that gets the argv and ``LLAMA_ARG_*`` variables at start,
and ``"sigterm"`` when SIGTERM arrives).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ["Buckets ", "hold ", "objects, ", "durable ", "as ", "stone ", "🪣"]
MODEL_NAME = "fake.gguf"
CREATED = 1_780_000_000


def answer_tokens(count: int) -> list[str]:
    return [WORDS[i % len(WORDS)] for i in range(count)]


def chunk_event(delta: dict, finish_reason: str | None) -> bytes:
    event = {
        "choices": [{"finish_reason": finish_reason, "index": 0, "delta": delta}],
        "created": CREATED,
        "id": "chatcmpl-fake",
        "model": MODEL_NAME,
        "system_fingerprint": "b0000-fake",
        "object": "chat.completion.chunk",
    }
    return b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ready_at = 0.0
    prefill = 0.0
    token_delay = 0.0
    tokens = len(WORDS)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path != "/health":
            self._json(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})
        elif time.monotonic() < self.ready_at:
            self._json(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
        else:
            self._json(200, {"status": "ok"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})
            return
        count = int(body.get("max_tokens") or self.tokens)
        tokens = answer_tokens(min(count, self.tokens))
        if not body.get("stream"):
            self._json(
                200,
                {
                    "choices": [
                        {
                            "finish_reason": "stop",
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(tokens)},
                        }
                    ],
                    "created": CREATED,
                    "model": MODEL_NAME,
                    "object": "chat.completion",
                    "usage": {"completion_tokens": len(tokens), "prompt_tokens": 7, "total_tokens": 7 + len(tokens)},
                    "id": "chatcmpl-fake",
                },
            )
            return
        if self.prefill:
            time.sleep(self.prefill)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [chunk_event({"role": "assistant", "content": None}, None)]
        events += [chunk_event({"content": token}, None) for token in tokens]
        events += [chunk_event({}, "stop"), b"data: [DONE]\n\n"]
        for event in events:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            if self.token_delay:
                time.sleep(self.token_delay)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    env = os.environ
    record = env.get("FAKE_LLAMA_RECORD")
    if record:
        settings = {k: v for k, v in env.items() if k.startswith("LLAMA_ARG_")}
        with open(record, "w") as f:
            f.write(json.dumps({"argv": argv, "env": settings}) + "\n")

    def on_term(signum: int, frame: object) -> None:
        if record:
            with open(record, "a") as f:
                f.write('"sigterm"\n')
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    Handler.ready_at = time.monotonic() + float(env.get("FAKE_LLAMA_LOAD_S", "0"))
    Handler.token_delay = float(env.get("FAKE_LLAMA_TOKEN_DELAY_S", "0"))
    Handler.prefill = float(env.get("FAKE_LLAMA_PREFILL_S", "0"))
    Handler.tokens = int(env.get("FAKE_LLAMA_TOKENS", str(len(WORDS))))
    exit_after = env.get("FAKE_LLAMA_EXIT_AFTER_S")
    if exit_after:
        threading.Timer(float(exit_after), lambda: os._exit(3)).start()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
