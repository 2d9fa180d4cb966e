"""A hostile Price List cache and region: no traceback, no wrong figure, no escape on the terminal, no stale or
future cache kept forever, no file outside the cache folder; and a throttled or unavailable API retried.

Sources: botocore/data/partitions.json (``regionRegex`` per partition); botocore/retries/standard.py (429 and
500/502/503/504 are retryable); Python ``json`` docs (``NaN`` and ``Infinity`` are read by default).
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from hypothesis import given
from hypothesis import strategies as st

from llmops import price_list

NOW = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.UTC)
GOOD = {"usd_per_hour": 2.61, "date": "2026-11-20", "source": "AWS Price List API GetProducts"}


@pytest.fixture
def cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMOPS_PRICES", "auto")
    monkeypatch.setenv("LLMOPS_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    price_list.live_table.cache_clear()
    yield tmp_path / "cache"
    price_list.live_table.cache_clear()


def write(directory, prices=None, *, fetched=None, region="us-east-1", raw=None):
    data = {"region": region, "fetched": fetched or NOW.isoformat(), "source": "x", "prices": prices or {}}
    path = directory / f"sagemaker-prices-{region}.json"
    path.write_text(raw if raw is not None else json.dumps(data))
    return path


@pytest.mark.parametrize("raw", ["[]", '"text"', "3", "null", '{"region": "us-east-1", "prices": []}', "\xff"])
def test_a_cache_that_is_not_an_object_is_refused_without_a_traceback(cache_dir, raw):
    write(cache_dir, raw=raw)
    assert price_list.read_cache("us-east-1", now=NOW) is None


@pytest.mark.parametrize(
    "entry, says",
    [
        ("2.61", "not an object"),
        ({"usd_per_hour": "2.61"}, "usd_per_hour '2.61' is not a finite number"),
        ({"usd_per_hour": -1.0}, "usd_per_hour -1.0"),
        ({"usd_per_hour": 0}, "usd_per_hour 0"),
        ({"usd_per_hour": float("nan")}, "usd_per_hour nan"),
        ({"usd_per_hour": float("inf")}, "usd_per_hour inf"),
        ({"usd_per_hour": True}, "usd_per_hour True"),
        ({**GOOD, "source": "AWS \x1b[2J\x1b]0;owned\x07"}, "source is not printable text"),
        ({**GOOD, "date": "2026-11-20\r"}, "date is not printable text"),
        ({**GOOD, "source": 7}, "source is not printable text"),
    ],
)
def test_a_bad_entry_is_ignored_with_one_warning_line(cache_dir, capsys, entry, says):
    write(cache_dir, {"ml.g6.xlarge": entry, "ml.g6e.xlarge": GOOD})
    cached = price_list.read_cache("us-east-1", now=NOW)
    assert cached["prices"] == {"ml.g6e.xlarge": GOOD}
    (line,) = capsys.readouterr().err.splitlines()
    assert "entry 'ml.g6.xlarge' ignored" in line and says in line and "\x1b" not in line


def test_an_escape_in_a_source_never_reaches_the_terminal(cache_dir, monkeypatch, capsys):
    write(cache_dir, {"ml.g6.xlarge": {**GOOD, "source": "\x1b[31mred"}}, fetched=dt.datetime.now(dt.UTC).isoformat())
    monkeypatch.setattr(price_list, "_has_credentials", lambda: False)
    assert price_list.main(["--region", "us-east-1"]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    assert "USD     1.13/h" in out.split("ml.g6.xlarge")[1].splitlines()[0]  # the shipped figure, not the bad one


def test_the_max_age_at_its_boundary():
    fresh = {"fetched": (NOW - price_list.MAX_AGE).isoformat()}
    assert price_list._fresh(fresh, NOW)  # exactly the max age: still used
    over = {"fetched": (NOW - price_list.MAX_AGE - dt.timedelta(seconds=1)).isoformat()}
    assert not price_list._fresh(over, NOW)  # one second over: refreshed
    assert price_list._fresh({"fetched": NOW.isoformat()}, NOW)  # age 0
    assert not price_list._fresh({"fetched": (NOW + dt.timedelta(seconds=1)).isoformat()}, NOW)
    # A date alone (caches written before) is its midnight UTC.
    assert price_list._fresh({"fetched": "2026-11-02"}, dt.datetime(2026, 12, 2, tzinfo=dt.UTC))
    assert not price_list._fresh({"fetched": "2026-11-02"}, dt.datetime(2026, 12, 2, 0, 0, 1, tzinfo=dt.UTC))


@pytest.mark.parametrize("ahead", [dt.timedelta(seconds=1), dt.timedelta(days=3650)])
def test_a_cache_from_the_future_is_refused_and_refetched(cache_dir, monkeypatch, capsys, ahead):
    write(cache_dir, {"ml.g6e.xlarge": {**GOOD, "usd_per_hour": 0.01}}, fetched=(NOW + ahead).isoformat())
    assert price_list.read_cache("us-east-1", now=NOW) is None
    assert "is not a past time; the cache is refused" in capsys.readouterr().err
    assert price_list.read_cache("us-east-1", now=NOW + ahead) is not None  # at exactly its time it is read
    # Through price(): refused, so the API is asked again (before, a future date was fresh for ever).
    write(cache_dir, {"ml.g6e.xlarge": {**GOOD, "usd_per_hour": 0.01}}, fetched="9999-12-31")
    calls = []
    monkeypatch.setattr(price_list, "_has_credentials", lambda: True)
    monkeypatch.setattr(price_list, "refresh", lambda region: calls.append(region) or {"prices": {}})
    assert price_list.price("ml.g6e.xlarge", "us-east-1").usd_per_hour != 0.01 and calls == ["us-east-1"]


@pytest.mark.parametrize("fetched", ["yesterday", 20261201, None, "2026-13-01"])
def test_an_unreadable_fetched_time_refuses_the_cache(cache_dir, fetched):
    path = write(cache_dir, {"ml.g6e.xlarge": GOOD})
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "fetched": fetched}))
    assert price_list.read_cache("us-east-1", now=NOW) is None


@pytest.mark.parametrize("region", ["../../x", "us-east-1/../../x", "us-east-1\n", "US-EAST-1", "us-east-\u0661", ""])
def test_a_region_that_is_not_one_names_no_file(cache_dir, capsys, monkeypatch, region):
    with pytest.raises(ValueError, match="not an AWS region name"):
        price_list.cache_path(region)
    monkeypatch.setattr(price_list, "fetch_hosting_prices", lambda *a, **k: pytest.fail("refused before any call"))
    with pytest.raises(ValueError):
        price_list.refresh(region)
    assert price_list.main(["--region", region, "--refresh"]) == 2
    assert "not an AWS region name" in capsys.readouterr().err
    assert price_list.live_table(region) == {} and not price_list.price("ml.g6.xlarge", region).known
    assert sorted(p.name for p in cache_dir.parent.rglob("*")) == ["cache"]  # nothing written anywhere


@pytest.mark.parametrize("region", ["us-east-1", "us-gov-west-1", "cn-north-1", "us-iso-east-1", "eu-isoe-west-1"])
def test_every_partitions_region_names_its_cache_file(region):
    assert price_list.region_problem(region) is None


@given(st.text(max_size=24))
def test_any_accepted_region_stays_in_the_cache_folder(region):
    directory = Path("/nonexistent/cache")  # only the path is built
    if price_list.region_problem(region):
        with pytest.raises(ValueError):
            price_list.cache_path(region, directory)
    else:
        assert price_list.cache_path(region, directory).parent == directory


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Answers GetProducts with the statuses in ``script`` in turn, then 200 with one page."""

    script: list[int] = []
    seen: list[int] = []

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status = self.script.pop(0) if self.script else 200
        self.seen.append(status)
        body = json.dumps({"FormatVersion": "aws_v1", "PriceList": []} if status == 200 else {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky_api(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # A service-specific endpoint (boto3 docs, "Service-specific endpoints": AWS_ENDPOINT_URL_<SERVICE>).
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_RETRY_MODE", "legacy")  # the client sets its own mode whatever the caller's
    _Flaky.seen = []
    yield _Flaky
    server.shutdown()
    server.server_close()


def test_a_throttled_then_unavailable_api_is_retried(flaky_api):
    flaky_api.script = [429, 503]
    assert price_list.fetch_hosting_prices("us-east-1", client=price_list.pricing_client()) == {}
    assert flaky_api.seen == [429, 503, 200]


def test_retries_stop_after_three_attempts(flaky_api):
    flaky_api.script = [503, 429, 503, 503]
    with pytest.raises(ClientError):
        price_list.fetch_hosting_prices("us-east-1", client=price_list.pricing_client())
    assert flaky_api.seen == [503, 429, 503]
