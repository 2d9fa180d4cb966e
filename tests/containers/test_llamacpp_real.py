"""The adapter in front of a real llama-server (a CPU build), serving a tiny GGUF written by the gguf package.

Runs when LLAMACPP_REAL_SERVER names a llama-server binary: `make test-llamacpp` builds one from the llama.cpp
sources in the llama-cpp-python sdist (cached) and runs this file with it; CI runs that target. Without the
variable the file is skipped (`make test` stays fast); with it set to a missing file, it fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.containers.test_llamacpp_adapter import Adapter, chat, get, post
from tests.fakes.tiny_gguf import write_tiny_llama

SERVER = os.environ.get("LLAMACPP_REAL_SERVER")
pytestmark = pytest.mark.skipif(not SERVER, reason="LLAMACPP_REAL_SERVER is not set (make test-llamacpp sets it)")


@pytest.fixture
def real_adapter(tmp_path):
    assert SERVER and Path(SERVER).is_file(), f"LLAMACPP_REAL_SERVER={SERVER!r} is not a file"
    (tmp_path / "model").mkdir()
    model = write_tiny_llama(tmp_path / "model" / "tiny-llama-F32.gguf")
    adapter = Adapter(
        tmp_path,
        LLAMACPP_SERVER_BIN=SERVER,
        LLAMA_ARG_MODEL=str(tmp_path / "model" / "*F32*"),
        LLAMA_ARG_CTX_SIZE="512",
        LLAMA_ARG_N_PARALLEL="2",
        LLAMA_ARG_N_GPU_LAYERS="0",
        LLAMA_ARG_THREADS="2",
        LLAMA_ARG_OFFLINE="true",
        LLAMA_ARG_KV_UNIFIED="true",  # as engines.json sets it
        LLAMA_ARG_UI="false",
    )
    assert model.is_file()
    yield adapter
    if adapter.process.poll() is None:
        adapter.stop()


def test_ping_turns_200_once_the_real_server_has_loaded_the_model(real_adapter):
    real_adapter.wait_ping(200, timeout=60)


def test_real_stream_is_openai_sse_ending_in_done(real_adapter):
    real_adapter.wait_ping(200, timeout=60)
    status, headers, body = post(real_adapter.port, "/invocations", chat(True, max_tokens=8, ignore_eos=True))
    assert status == 200, body[:500]
    assert headers["content-type"].startswith("text/event-stream")
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert any(c["choices"] and c["choices"][0].get("finish_reason") == "length" for c in chunks)


def test_real_non_streamed_answer_counts_the_tokens(real_adapter):
    real_adapter.wait_ping(200, timeout=60)
    status, _, body = post(real_adapter.port, "/invocations", chat(False, max_tokens=8, ignore_eos=True))
    assert status == 200, body[:500]
    answer = json.loads(body)
    assert answer["object"] == "chat.completion"
    assert answer["usage"]["completion_tokens"] == 8
    assert answer["choices"][0]["message"]["role"] == "assistant"


def test_real_server_settings_come_from_llama_arg_variables(real_adapter):
    real_adapter.wait_ping(200, timeout=60)
    # llama-server's /props reports its context and slots; the adapter does not expose it, the child does.
    status, body = get(real_adapter.child_port, "/props")
    assert status == 200
    props = json.loads(body)
    assert props["total_slots"] == 2
    # One KV cache shared by the slots: each request may use the whole context, not 512 / 2.
    assert props["default_generation_settings"]["n_ctx"] == 512


def test_sigterm_stops_the_real_server(real_adapter):
    real_adapter.wait_ping(200, timeout=60)
    assert real_adapter.stop() == 0
    with pytest.raises(OSError):
        get(real_adapter.child_port, "/health")
    assert "llama_server_stopped code=0" in real_adapter.log.read_text()
