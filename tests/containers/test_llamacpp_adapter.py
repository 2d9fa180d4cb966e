"""The llama.cpp serving adapter (containers/llamacpp/serve.py) over real HTTP, with a fake llama-server child."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "containers" / "llamacpp" / "serve.py"
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"
PROMPT = "secret-prompt-words"


def load_serve():
    spec = importlib.util.spec_from_file_location("llamacpp_serve", SERVE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


serve = load_serve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post(port: int, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def chat(stream: bool, **extra) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": PROMPT}], "stream": stream, **extra}).encode()


class Adapter:
    """serve.py as SageMaker runs it, in its own process, with the fake llama-server as its child."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        model_dir = tmp_path / "model"
        model_dir.mkdir(exist_ok=True)
        (model_dir / "tiny-Q4_K_M.gguf").write_bytes(b"GGUF")
        self.port, self.child_port = free_port(), free_port()
        self.record = tmp_path / "child.jsonl"
        self.log = tmp_path / "adapter.log"
        full_env = {
            **os.environ,
            "SAGEMAKER_BIND_TO_PORT": str(self.port),
            "LLAMACPP_SERVER_PORT": str(self.child_port),
            "LLAMACPP_SERVER_BIN": f"{sys.executable} {FAKE}",
            "LLAMACPP_STOP_GRACE_S": "5",
            "LLAMA_ARG_MODEL": str(model_dir),
            "FAKE_LLAMA_RECORD": str(self.record),
            **env,
        }
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen([sys.executable, str(SERVE)], env=full_env, stdout=log, stderr=log)

    def wait_ping(self, expected: int, timeout: float = 10, containing: bytes = b"") -> bytes:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                status, body = get(self.port, "/ping")
                last = (status, body)
                if status == expected and containing in body:
                    return body
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"/ping never answered {expected}; last: {last}; log: {self.log.read_text()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def child_record(self) -> list:
        return [json.loads(line) for line in self.record.read_text().splitlines()]


@pytest.fixture
def adapter(tmp_path):
    started: list[Adapter] = []

    def start(**env: str) -> Adapter:
        started.append(Adapter(tmp_path, **env))
        return started[-1]

    yield start
    for a in started:
        if a.process.poll() is None:
            a.stop()


# --- pure parts ---------------------------------------------------------------------------------------


def test_resolve_model_takes_a_file_as_it_is(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert serve.resolve_model(str(model)) == model


def test_resolve_model_finds_the_only_gguf_below_the_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m-Q4_K_M.gguf").write_bytes(b"GGUF")
    (tmp_path / "config.json").write_text("{}")
    assert serve.resolve_model(str(tmp_path)) == tmp_path / "sub" / "m-Q4_K_M.gguf"
    assert serve.resolve_model(f"{tmp_path}/m-Q4_K_M.gguf") == tmp_path / "sub" / "m-Q4_K_M.gguf"


def test_resolve_model_loads_a_split_gguf_from_its_first_part(tmp_path):
    for k in (2, 1, 3):
        (tmp_path / f"big-Q4_K_M-0000{k}-of-00003.gguf").write_bytes(b"GGUF")
    assert serve.resolve_model(f"{tmp_path}/big-Q4_K_M.gguf").name == "big-Q4_K_M-00001-of-00003.gguf"
    assert serve.resolve_model(f"{tmp_path}/*Q4_K_M*").name == "big-Q4_K_M-00001-of-00003.gguf"
    assert serve.resolve_model(str(tmp_path)).name == "big-Q4_K_M-00001-of-00003.gguf"


def test_resolve_model_picks_by_name_or_glob_among_several(tmp_path):
    for quant in ("Q4_K_M", "Q8_0"):
        (tmp_path / f"m-{quant}.gguf").write_bytes(b"GGUF")
    assert serve.resolve_model(f"{tmp_path}/*Q8_0*").name == "m-Q8_0.gguf"
    assert serve.resolve_model(f"{tmp_path}/*Q4_K_M*").name == "m-Q4_K_M.gguf"
    with pytest.raises(serve.ModelNotFound, match=r"2 GGUF models .*set gguf_file"):
        serve.resolve_model(str(tmp_path))
    with pytest.raises(serve.ModelNotFound, match=r"no \.gguf file matching 'm-Q2_K\.gguf'"):
        serve.resolve_model(f"{tmp_path}/m-Q2_K.gguf")


def test_resolve_model_says_when_nothing_matches_a_missing_folder(tmp_path):
    with pytest.raises(serve.ModelNotFound, match=rf"no \.gguf file matching 'none/x\.gguf' below {tmp_path}$"):
        serve.resolve_model(str(tmp_path / "none" / "x.gguf"))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"prompt": "hi"}', '"messages"'),
        (b'{"messages": []}', '"messages"'),
        (b'{"messages": "hi"}', '"messages"'),
    ],
)
def test_request_problem_names_what_is_wrong(body, reason):
    assert reason in serve.request_problem(body)


def test_request_problem_accepts_a_chat_request():
    assert serve.request_problem(chat(False)) is None


def test_server_command_owns_only_host_port_and_model(tmp_path):
    command = serve.server_command(["llama-server"], tmp_path / "m.gguf", 8081)
    assert command == ["llama-server", "--model", str(tmp_path / "m.gguf"), "--host", "127.0.0.1", "--port", "8081"]


# --- over HTTP, against the fake llama-server ---------------------------------------------------------


def test_ping_is_503_while_loading_then_200(adapter):
    a = adapter(FAKE_LLAMA_LOAD_S="1.5")
    a.wait_ping(503, containing=b"/health answered 503 (loading the model)")
    a.wait_ping(200)
    assert a.stop() == 0


def test_streamed_answer_is_llama_servers_bytes_unchanged(adapter):
    a = adapter()
    a.wait_ping(200)
    status, headers, through_adapter = post(a.port, "/invocations", chat(True))
    _, _, direct = post(a.child_port, "/v1/chat/completions", chat(True))
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    assert through_adapter == direct
    assert through_adapter.endswith(b"data: [DONE]\n\n")
    assert "🪣".encode() in through_adapter
    a.stop()


def test_stream_arrives_event_by_event_not_at_the_end(adapter):
    a = adapter(FAKE_LLAMA_TOKEN_DELAY_S="0.2", FAKE_LLAMA_TOKENS="3")
    a.wait_ping(200)
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
    started = time.monotonic()
    conn.request("POST", "/invocations", body=chat(True), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    first = response.read1(65536)
    first_at = time.monotonic() - started
    rest = response.read()
    total = time.monotonic() - started
    conn.close()
    assert first.startswith(b"data: ")
    # Six events 0.2 s apart: the first must come long before the last.
    assert first_at < 0.6 < total
    assert rest.endswith(b"data: [DONE]\n\n")
    a.stop()


def test_non_streamed_answer_is_passed_through(adapter):
    a = adapter()
    a.wait_ping(200)
    status, headers, body = post(a.port, "/invocations", chat(False, max_tokens=3))
    assert status == 200
    assert headers["content-length"] == str(len(body))
    assert json.loads(body)["choices"][0]["message"]["content"] == "Buckets hold objects, "
    a.stop()


@pytest.mark.parametrize(
    ("body", "reason"), [(b"{oops", "not valid JSON"), (b'{"input": "x"}', '"messages"')], ids=["json", "messages"]
)
def test_bad_request_is_400_with_a_reason(adapter, body, reason):
    a = adapter()
    a.wait_ping(200)
    status, _, answer = post(a.port, "/invocations", body)
    assert status == 400
    assert reason in json.loads(answer)["error"]["message"]
    a.stop()


def test_unknown_paths_are_404(adapter):
    a = adapter()
    a.wait_ping(200)
    assert get(a.port, "/health")[0] == 404
    assert post(a.port, "/v1/chat/completions", chat(False))[0] == 404
    a.stop()


def test_prompts_and_answers_never_reach_the_log(adapter):
    a = adapter()
    a.wait_ping(200)
    post(a.port, "/invocations", chat(True))
    post(a.port, "/invocations", chat(False))
    post(a.port, "/invocations", b'{"messages": "' + PROMPT.encode() + b'"}')
    a.stop()
    log = a.log.read_text()
    assert "event=invocation status=200" in log
    assert "status=400" in log
    assert PROMPT not in log
    assert "Buckets" not in log and "🪣" not in log


def test_ping_is_503_after_the_child_died_and_invocations_say_why(adapter):
    a = adapter(FAKE_LLAMA_EXIT_AFTER_S="1.0")
    a.wait_ping(200)
    # 503 may first read "not answering yet" while the child closes its socket; the reason must follow
    body = a.wait_ping(503, containing=b"exited with code 3")
    assert json.loads(body)["status"] == "unavailable"
    status, _, answer = post(a.port, "/invocations", chat(False))
    assert status == 503
    assert "exited with code 3" in json.loads(answer)["error"]["message"]
    a.stop()


def test_sigterm_stops_the_child_and_the_adapter_cleanly(adapter):
    a = adapter()
    a.wait_ping(200)
    assert a.stop() == 0
    assert a.child_record()[-1] == "sigterm"
    with pytest.raises(OSError):
        get(a.child_port, "/health")
    assert "llama_server_stopped code=0" in a.log.read_text()


def test_settings_reach_llama_server_as_llama_arg_variables(adapter, tmp_path):
    model = str(tmp_path / "model" / "*Q4_K_M*")
    a = adapter(LLAMA_ARG_CTX_SIZE="16384", LLAMA_ARG_N_PARALLEL="2", LLAMA_ARG_MODEL=model)
    a.wait_ping(200)
    a.stop()
    started = a.child_record()[0]
    assert started["env"]["LLAMA_ARG_CTX_SIZE"] == "16384"
    assert started["env"]["LLAMA_ARG_N_PARALLEL"] == "2"
    argv = started["argv"]
    assert argv[argv.index("--model") + 1].endswith("tiny-Q4_K_M.gguf")
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == str(a.child_port)


def test_a_missing_model_stops_start_up_with_the_reason(adapter, tmp_path):
    a = adapter(LLAMA_ARG_MODEL=str(tmp_path / "model" / "other.gguf"))
    assert a.process.wait(10) == 2
    assert "no .gguf file matching 'other.gguf'" in a.log.read_text()
    assert not a.record.exists()
