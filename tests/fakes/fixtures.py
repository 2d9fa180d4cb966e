"""Fixtures for the staging tests: a moto S3/Secrets Manager server and the fake Hub, both over real HTTP.

Import them explicitly in a test module (``from tests.fakes.fixtures import fake_hub, s3  # noqa: F401``).
One moto server serves the whole session (it starts in about a second); each test gets a reset state,
a fresh bucket and environment variables pointing boto3 at the server.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.fake_hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "staging-test-bucket"
REGION = "us-east-1"

_moto: Any = None
_moto_pid = 0
_moto_lock = threading.Lock()
_session: Any = None


def boto_session() -> Any:
    """One boto3 session for the tests' clients: a new session costs about 0.3 s, a client from it 15 ms."""
    global _session
    if _session is None:
        import boto3

        _session = boto3.session.Session()
    return _session


def moto_endpoint() -> str:
    """The URL of the session's moto server, started on first use and stopped at exit."""
    global _moto, _moto_pid
    with _moto_lock:
        # A forked process (mutmut runs each mutant in a fork of the process that ran the tests once) does not
        # inherit the server's thread: it would share the parent's server, and tests in two forks would reset
        # each other's buckets. Each process gets its own.
        if _moto is None or _moto_pid != os.getpid():
            import logging

            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise

            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            atexit.register(server.stop)
            _moto, _moto_pid = server, os.getpid()
        host, port = _moto.get_host_and_port()
    return f"http://{host}:{port}"


def aws_env(endpoint: str) -> dict[str, str]:
    """Environment for boto3 (in this process or a subprocess) to reach only the local server."""
    return {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


class CallCounter:
    """Counts S3 operations a boto3 client makes (a ``before-call`` event hook; nothing is patched)."""

    def __init__(self, client: Any) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        client.meta.events.register("before-call.s3.*", self._count)

    def _count(self, model: Any, **kwargs: Any) -> None:
        with self._lock:
            self.calls[model.name] += 1

    @property
    def uploads_started(self) -> int:
        return self.calls["CreateMultipartUpload"] + self.calls["PutObject"]


@dataclass
class S3Env:
    endpoint: str
    bucket: str
    client: Any  # a plain boto3 S3 client for assertions
    env: dict[str, str]

    def worker_client(self) -> tuple[Any, CallCounter]:
        """An S3 client configured like the worker's, with a call counter, to pass to ``main(s3_client=...)``."""
        from hfstage.transfer import Settings
        from hfstage.worker import make_s3_client

        client = make_s3_client(Settings(), session=boto_session())
        return client, CallCounter(client)

    def list_keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def body(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def open_uploads(self) -> list[dict[str, Any]]:
        return self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> S3Env:
    """A reset moto server with one bucket; boto3 in this process points at it."""
    endpoint = moto_endpoint()
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30).read()
    env = aws_env(endpoint)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "HF_TOKEN", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
        monkeypatch.delenv(name, raising=False)
    client = boto_session().client("s3")
    client.create_bucket(Bucket=BUCKET)
    return S3Env(endpoint=endpoint, bucket=BUCKET, client=client, env=env)


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch):
    """A running fake Hub; HF_ENDPOINT points at it."""
    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        yield hub


def subprocess_env(s3: S3Env, hub: FakeHub, **extra: str) -> dict[str, str]:
    """The environment for a worker subprocess: the servers, the repository on PYTHONPATH, nothing else of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HF_", "HFSTAGE_"))}
    env.update(s3.env)
    env["HF_ENDPOINT"] = hub.endpoint
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


PYTHON = sys.executable


@pytest.fixture
def s3_stub():
    """An S3 client under botocore's Stubber: each test states the exact calls and their answers."""
    from botocore.stub import Stubber

    client = boto_session().client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def worker_argv(repo: str, bucket: str, failure_file: Path, resource_config: Path, *extra: str) -> list[str]:
    """The staging worker's arguments for ``repo`` on the fake Hub into ``bucket``: 5 MiB parts, fast retries."""
    return [
        f"--repo-id={repo}",
        f"--destination=s3://{bucket}/models/",
        "--part-size-mib=5",
        "--progress-interval-s=0",
        "--retry-base-s=0.01",
        f"--failure-file={failure_file}",
        f"--resource-config={resource_config}",
        *extra,
    ]


@pytest.fixture(scope="module")
def moto_url() -> str:
    """The session's moto server (S3, SNS, SQS...), for a module's clients and the fake runtime's answers."""
    return moto_endpoint()


@pytest.fixture(scope="module")
def async_fake(moto_url):
    """The fake SageMaker (tests/fakes/fake_runtime.py) whose asynchronous answers go to the session's moto S3."""
    from tests.fakes.fake_runtime import FakeSageMaker

    with FakeSageMaker(s3_url=moto_url) as server:
        yield server
