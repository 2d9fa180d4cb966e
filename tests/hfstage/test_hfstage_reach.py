"""hfstage/reach.py: the staging job fails in seconds, with what to fix, when it cannot reach the Hub or its mirror."""

from __future__ import annotations

import socket
import time

import pytest

from hfstage import base, reach, worker


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_a_listening_endpoint_is_reachable():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert reach.unreachable(f"http://127.0.0.1:{port}", timeout=2) is None


def test_a_refused_connection_is_named_with_what_to_fix_after_each_attempt():
    waits = []
    port = closed_port()
    why = reach.unreachable(f"https://127.0.0.1:{port}/mirror", timeout=1, attempts=3, sleep=waits.append)
    assert why is not None and f"127.0.0.1:{port}; ConnectionRefusedError" in why and "in 3 attempts of 1 s" in why
    assert "NAT route" in why and "hf_endpoint" in why and waits == [1.0, 1.0]


def test_a_name_that_does_not_resolve_says_so():
    def dns_fails(address, timeout):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    why = reach.unreachable("https://hub.mirror.internal", timeout=1, attempts=1, connect=dns_fails)
    assert why is not None and "hub.mirror.internal:443; its name does not resolve" in why


def test_a_silent_network_gives_up_in_attempts_times_the_timeout():
    calls = []

    def hangs(address, timeout):
        calls.append((address, timeout))
        raise TimeoutError("timed out")

    why = reach.unreachable("https://huggingface.co", timeout=10, attempts=3, connect=hangs, sleep=lambda s: None)
    assert calls == [(("huggingface.co", 443), 10)] * 3 and "TimeoutError" in why


def test_the_proxy_is_probed_when_one_applies(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp.internal:3128")
    assert reach.target("https://huggingface.co") == ("proxy.corp.internal", 3128, "the https proxy for huggingface.co")
    monkeypatch.setenv("NO_PROXY", "huggingface.co")
    assert reach.target("https://huggingface.co") == ("huggingface.co", 443, "huggingface.co")


def test_the_worker_fails_fast_with_the_reason_when_the_handler_asks_for_the_probe(monkeypatch, tmp_path):
    port = closed_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv(reach.ENV, "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    failure = tmp_path / "message"
    started = time.monotonic()
    code = worker.main(
        ["--repo-id", "org/name", "--destination", "s3://my-bucket/models/", "--failure-file", str(failure)],
        s3_client=object(),
    )
    assert code == worker.EXIT_HUB and time.monotonic() - started < 10
    assert "cannot connect to 127.0.0.1" in failure.read_text() and "NAT route" in failure.read_text()


def test_without_the_setting_the_worker_does_not_probe(monkeypatch, tmp_path):
    monkeypatch.delenv(reach.ENV, raising=False)
    monkeypatch.setattr(reach, "unreachable", lambda *a, **k: pytest.fail("probed without the setting"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    code = worker.main(
        ["--repo-id", "org/name", "--destination", "s3://my-bucket/models/", "--max-attempts", "1"],
        s3_client=object(),
    )
    assert code != base.EXIT_OK  # the Hub itself is unreachable: the worker's own retries answer
