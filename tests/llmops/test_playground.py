"""``python -m llmops.playground``: its guards over real HTTP, and the page in headless Chromium.

The browser test drives Debian's ``chromium`` and ``chromium-driver`` with selenium against the fake
SageMaker runtime. Where they are missing it is skipped on a laptop and FAILS in CI (``CI=true``), which
installs them (``.ci/run``). Screenshots go to ``tests/artifacts/``; ``UPDATE_SCREENSHOTS=1`` also writes
the README's ``docs/playground.png``.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from llmops.playground import TOKEN_HEADER, Playground, Refused, chat_body, main
from tests.fakes.fake_runtime import FakeSageMaker, Reply, client
from tests.fakes.serve_runtime import answer_text

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
ENDPOINT = "llm-endpoint"
USER = [{"role": "user", "content": "Write a haiku about S3"}]


@pytest.fixture(scope="module")
def fake():
    with FakeSageMaker() as server:
        yield server


@pytest.fixture
def playground(fake):
    fake.reset()
    log = io.StringIO()
    with Playground(client("sagemaker-runtime", fake.url), ENDPOINT, port=0, log=log) as server:
        server.test_log = log
        yield server


def call(server: Playground, method: str, path: str, body: object = None, **headers: str):
    """One request with the page's headers unless overridden (a header given as "" is left out)."""
    defaults = {
        "Host": f"127.0.0.1:{server.port}",
        "Origin": f"http://127.0.0.1:{server.port}",
        "Content-Type": "application/json",
        TOKEN_HEADER: server.secret,
    }
    merged = {k: v for k, v in {**defaults, **{k.replace("_", "-"): v for k, v in headers.items()}}.items() if v}
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    data = json.dumps(body).encode() if body is not None else None
    connection.putrequest(method, path, skip_host=True)
    for key, value in merged.items():
        connection.putheader(key, value)
    connection.putheader("Content-Length", str(len(data or b"")))
    connection.endheaders(data)
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    return response.status, payload


# --- the request body -----------------------------------------------------------------------------


def test_chat_body_carries_history_system_prompt_and_settings():
    history = [*USER, {"role": "assistant", "content": "Buckets..."}, {"role": "user", "content": "Another"}]
    body = chat_body({"messages": history, "system": "Be brief.", "temperature": 0.2, "max_tokens": 64})
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1:] == history
    assert body["temperature"] == 0.2 and body["max_tokens"] == 64 and body["stream"] is True
    assert "system" not in json.dumps(chat_body({"messages": USER, "system": "  "})["messages"])


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ({"messages": []}, "non-empty list"),
        ({"messages": [{"role": "system", "content": "x"}]}, "role"),
        ({"messages": [*USER, {"role": "assistant", "content": "x"}]}, "last message"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER, "max_tokens": True}, "max_tokens"),
        ({"messages": USER, "temperature": 3}, "temperature"),
        ({"messages": USER, "temperature": "hot"}, "temperature"),
    ],
)
def test_chat_body_refuses_bad_input(request_body, message):
    with pytest.raises(Refused, match=message):
        chat_body(request_body)


# --- the guards, over HTTP ------------------------------------------------------------------------


def test_the_page_needs_the_secret(playground):
    assert call(playground, "GET", "/")[0] == 403
    assert call(playground, "GET", "/?token=wrong")[0] == 403
    status, page = call(playground, "GET", f"/?token={playground.secret}")
    assert status == 200 and b"/static/app.js" in page


def test_the_secret_is_compared_in_constant_time_and_nowhere_else():
    """A ``==`` (or ``startswith``, ``in``) on the secret returns as soon as a character differs, so the time
    it takes tells an attacker how much of a guess is right; ``hmac.compare_digest`` does not (Python docs,
    hmac.compare_digest: "designed to prevent timing analysis")."""
    import ast

    import llmops.playground as module

    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))

    def mentions_secret(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr == "secret" for n in ast.walk(node))

    compares = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare) and mentions_secret(n)]
    assert compares == [], f"the secret is compared with an operator: {compares}"
    methods = {
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and mentions_secret(n.func.value)
    }
    assert methods <= {"encode"}, f"a method that compares or slices the secret: {methods - {'encode'}}"
    check = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_check_secret")
    digests = [
        n
        for n in ast.walk(check)
        if isinstance(n, ast.Call) and ast.unparse(n.func) in ("hmac.compare_digest", "secrets.compare_digest")
    ]
    assert len(digests) == 1 and mentions_secret(digests[0]), ast.unparse(check)
    # Every secret check goes through _check_secret: the page's token and the API header.
    callers = {
        ast.unparse(n.args[0])
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "self._check_secret"
    }
    assert callers == {"parse_qs(url.query).get('token', [''])[0]", "self.headers.get(TOKEN_HEADER, '')"}


def test_api_calls_without_the_secret_or_from_another_origin_are_refused(playground, fake):
    chat = {"id": "a1", "messages": USER}
    assert call(playground, "POST", "/api/chat", chat, X_Playground_Token="")[0] == 403
    assert call(playground, "POST", "/api/chat", chat, X_Playground_Token="not-the-secret")[0] == 403
    assert call(playground, "POST", "/api/chat", chat, Origin="https://evil.example")[0] == 403
    assert call(playground, "POST", "/api/chat", chat, Origin="null")[0] == 403
    # DNS rebinding: a page from evil.example resolved to 127.0.0.1 sends its own Host.
    assert call(playground, "POST", "/api/chat", chat, Host=f"evil.example:{playground.port}")[0] == 403
    # A form post (no JSON content type) never gets past the checks either.
    assert call(playground, "POST", "/api/chat", chat, Content_Type="text/plain")[0] == 415
    assert call(playground, "GET", "/api/info", X_Playground_Token="")[0] == 403
    assert fake.invocations() == []
    log = playground.test_log.getvalue()
    assert "event=refused status=403" in log and playground.secret not in log


def test_a_streamed_answer_is_relayed_with_timing_and_nothing_is_logged(playground, fake):
    fake.add_endpoint(ENDPOINT, default=Reply(reasoning="Think.", first_token_delay_s=0.05))
    request = {"id": "a2", "messages": USER, "system": "Be brief.", "temperature": 0.1, "max_tokens": 40}
    status, stream = call(playground, "POST", "/api/chat", request, Origin="")  # no Origin: not a browser
    assert status == 200
    events = [json.loads(line[6:]) for line in stream.decode().split("\n\n") if line.startswith("data: ")]
    assert "".join(e["content"] for e in events if e["type"] == "delta").startswith("Buckets hold the sky")
    assert [e["reasoning"] for e in events if e["type"] == "delta" and e["reasoning"]] == ["Think."]
    done = events[-1]
    assert done["type"] == "done" and done["ttft_ms"] >= 50 and done["tokens"] == 16 and done["tokens_per_s"] > 0
    (sent,) = fake.invocations(ENDPOINT)
    assert sent.body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent.body["temperature"] == 0.1 and sent.body["max_tokens"] == 40
    log = playground.test_log.getvalue()
    assert "outcome=ok" in log and "haiku" not in log and "Buckets" not in log and "Be brief" not in log


def test_an_error_reaches_the_page_as_an_event(playground, fake):
    fake.add_endpoint(ENDPOINT, Reply.model_error(400, '{"error": "max_tokens is too large"}'))
    status, stream = call(playground, "POST", "/api/chat", {"id": "a3", "messages": USER})
    (event,) = [json.loads(line[6:]) for line in stream.decode().split("\n\n") if line.startswith("data: ")]
    assert status == 200 and event["type"] == "error" and "HTTP 400 from the model container" in event["message"]
    assert event["transient"] is False
    assert "outcome=error code=ModelError" in playground.test_log.getvalue()


def test_stop_during_the_wait_for_the_first_token_shuts_the_sagemaker_stream(playground, fake):
    import threading

    fake.add_endpoint(ENDPOINT, default=Reply(first_token_delay_s=5.0))
    answer: dict[str, object] = {}
    chat = threading.Thread(
        target=lambda: answer.update(
            zip(
                ("status", "stream"), call(playground, "POST", "/api/chat", {"id": "a4", "messages": USER}), strict=True
            )
        )
    )
    chat.start()
    # The response headers are in: the server is blocked reading the stream for the first token.
    wait_for(lambda: any(a.body is not None for a in list(playground.answers.values())), timeout=5)
    stopped_at = time.monotonic()
    assert call(playground, "POST", "/api/stop", {"id": "a4"}) == (200, b'{"stopped": true}')
    chat.join(timeout=3)
    assert not chat.is_alive() and time.monotonic() - stopped_at < 2.0  # not the 5 s until the first token
    assert answer["stream"].decode().strip() == 'data: {"type": "stopped"}'
    assert playground.in_flight() == 0 and "outcome=stopped" in playground.test_log.getvalue()
    assert call(playground, "POST", "/api/stop", {"id": "a4"}) == (200, b'{"stopped": false}')


def test_the_urllib3_the_stop_relies_on_is_pinned():
    import urllib3.response

    # Answer._shut() calls HTTPResponse.shutdown() (urllib3 2.3+); with an older urllib3 it is skipped silently and
    # a stop waits for SageMaker's next byte. botocore allows 1.x, so requirements.txt pins a version that has it.
    pins = dict(line.split("==", 1) for line in (ROOT / "requirements.txt").read_text().splitlines() if "==" in line)
    assert tuple(int(part) for part in pins["urllib3"].split(".")[:2]) >= (2, 3)
    assert callable(getattr(urllib3.response.HTTPResponse, "shutdown", None))


def test_command_refuses_a_port_in_use(playground):
    err = io.StringIO()
    code = main(["--endpoint", ENDPOINT, "--port", str(playground.port)], runtime_client=object(), stderr=err)
    assert code == 2 and "cannot listen on 127.0.0.1" in err.getvalue()


# --- the page in a real browser ------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        webdriver = None
    if not (chromium and driver_path and webdriver):
        missing = "chromium, chromium-driver (apt) and selenium (requirements-dev.txt)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test needs {missing}; .ci/run installs them")
        pytest.skip(f"needs {missing}")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="playground-chromium-")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=900,760",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(condition, timeout: float = 10.0, every: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s")


def last_answer(driver) -> tuple[str, str]:
    return tuple(
        driver.execute_script(
            "const n = [...document.querySelectorAll('.msg.assistant')].pop();"
            "return n ? [n.querySelector('.text').textContent, (n.querySelector('.meta') || {}).textContent || '']"
            " : ['', ''];"
        )
    )


def ask(driver, text: str) -> None:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "prompt")
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()


def test_the_page_streams_an_answer_shows_its_timing_and_stop_cancels_on_the_server(browser, playground, fake):
    from selenium.webdriver.common.by import By

    answer = "S3 keeps your objects in buckets: eleven nines of durability, and it scales without limits."
    fake.add_endpoint(
        ENDPOINT,
        Reply(content=answer, first_token_delay_s=0.2, token_delay_s=0.06, keep_alive=False),
        default=Reply(content=answer_text(200, seed=1), first_token_delay_s=0.1, token_delay_s=0.1),
    )
    browser.get(playground.url)
    wait_for(lambda: ENDPOINT in browser.find_element(By.ID, "target").text)
    browser.find_element(By.ID, "settings").click()
    browser.find_element(By.ID, "system").send_keys("Answer in one short paragraph.")
    ask(browser, "Describe S3 in a dozen words")

    seen: list[str] = []

    def finished() -> bool:
        text, meta = last_answer(browser)
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        return "TTFT" in meta

    wait_for(finished)
    text, meta = last_answer(browser)
    assert text == answer
    assert len(seen) >= 4 and all(answer.startswith(piece) for piece in seen)  # it arrived in pieces
    assert meta.startswith("TTFT ") and f" ms · {len(answer.split())} tokens · " in meta and "tokens/s" in meta
    ttft_ms = int(meta.split()[1])
    assert 200 <= ttft_ms < 1000
    (first,) = fake.invocations(ENDPOINT)
    assert first.body["messages"][0] == {"role": "system", "content": "Answer in one short paragraph."}
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "playground.png"))
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copy(ARTIFACTS / "playground.png", ROOT / "docs" / "playground.png")

    # A long answer, stopped after a few tokens: the server shuts the SageMaker stream.
    ask(browser, "Now a long story about buckets")
    wait_for(lambda: len(last_answer(browser)[0].split()) >= 3)
    assert playground.in_flight() == 1
    # The first answer's stream may count as cut too: the client closes it at [DONE], sometimes before the fake
    # wrote its closing chunk, and that cut may register after cut_before is read. So: at least one more cut than
    # before the click (the long answer's stream still in flight is what in_flight() == 0 proves ended).
    cut_before = fake.cut_streams
    browser.find_element(By.ID, "stop").click()
    stopped_at = time.monotonic()
    try:
        wait_for(lambda: playground.in_flight() == 0 and fake.cut_streams >= cut_before + 1, timeout=5)
    except AssertionError:
        state = f"in flight {playground.in_flight()}, streams cut {fake.cut_streams} (before {cut_before})"
        raise AssertionError(f"stop did not end the request: {state}, page {last_answer(browser)[1]!r}") from None
    assert time.monotonic() - stopped_at < 2.5  # far before the 20 s this answer would take
    wait_for(lambda: "stopped after" in last_answer(browser)[1], timeout=3)
    assert len(last_answer(browser)[0].split()) < 50
    assert browser.find_element(By.ID, "send").is_displayed()
    second = fake.invocations(ENDPOINT)[1]
    assert [m["role"] for m in second.body["messages"]] == ["system", "user", "assistant", "user"]  # history

    # Readable on a phone: nothing wider than the window.
    browser.set_window_size(390, 800)
    width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1]
    browser.save_screenshot(str(ARTIFACTS / "playground-phone.png"))
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        shutil.copy(ARTIFACTS / "playground-phone.png", ROOT / "docs" / "playground-phone.png")
    browser.set_window_size(900, 760)
