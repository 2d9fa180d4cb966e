"""The AWS Price List path of llmops.price_list: GetProducts (botocore Stubber), the dated cache, the fallbacks."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from llmops import price_list
from llmops.summary import cost_lines

BOTOCORE = Path(boto3.__file__).resolve().parent.parent / "botocore" / "data" / "pricing" / "2017-10-15"


def hosting_item(instance_type: str, usd: str, *, usage_prefix: str = "USE1-Host", unit: str = "Hrs") -> str:
    """A SageMaker product in the documented aws_v1 PriceList format (botocore's GetProducts example's shape)."""
    sku = f"SKU{abs(hash((instance_type, usage_prefix))) % 10**8:08d}"
    return json.dumps(
        {
            "product": {
                "productFamily": "ML Instance",
                "attributes": {
                    "servicecode": "AmazonSageMaker",
                    "location": "US East (N. Virginia)",
                    "regionCode": "us-east-1",
                    "component": "Hosting",
                    "instanceName": instance_type,
                    "usagetype": f"{usage_prefix}:{instance_type}",
                    "operation": "RunInstance",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonSageMaker",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": unit,
                                "endRange": "Inf",
                                "description": f"${usd} per Hosting {instance_type} hour in US East (N. Virginia)",
                                "appliesTo": [],
                                "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                }
            },
            "version": "20261120000000",
            "publicationDate": "2026-11-20T00:00:00Z",
        }
    )


def test_the_documented_example_item_is_read_and_is_not_a_hosting_instance():
    # botocore's own GetProducts example: an EBS storage product, in the format every PriceList item has.
    example = json.loads((BOTOCORE / "examples-1.json").read_text())["examples"]["GetProducts"][0]["output"]
    (item,) = example["PriceList"]
    assert json.loads(item)["terms"]["OnDemand"]  # the structure parse_price_item walks
    assert price_list.parse_price_item(item, read_on="2026-12-01") is None


def test_only_hourly_hosting_rows_count():
    entry = price_list.parse_price_item(hosting_item("ml.g6.xlarge", "1.1267000000"), read_on="2026-12-01")
    assert entry is not None
    instance_type, row = entry
    assert instance_type == "ml.g6.xlarge" and row["usd_per_hour"] == 1.1267 and row["date"] == "2026-11-20"
    assert row["source"].startswith("AWS Price List API GetProducts read 2026-12-01, usage type USE1-Host:ml.g6.xlarge")
    for other in (
        hosting_item("ml.g6.xlarge", "1.1267", usage_prefix="USE1-AsyncInf"),  # asynchronous inference
        hosting_item("ml.g6.xlarge", "1.1267", usage_prefix="USE1-Train"),
        hosting_item("ml.g6.xlarge", "0.0000000000"),
        hosting_item("ml.g6.xlarge", "1.1267", unit="GB-Mo"),
        json.dumps({"product": {"attributes": {}}, "terms": {}}),
    ):
        assert price_list.parse_price_item(other, read_on="2026-12-01") is None


def stubbed_client(pages: list[dict], region: str = "us-east-1"):
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    token = None
    for page in pages:
        expected = {
            "ServiceCode": "AmazonSageMaker",
            "Filters": [
                {"Type": "TERM_MATCH", "Field": "component", "Value": "Hosting"},
                {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
            ],
            "FormatVersion": "aws_v1",
            "MaxResults": 100,
        }
        if token:
            expected["NextToken"] = token
        stubber.add_response("get_products", page, expected)
        token = page.get("NextToken")
    stubber.activate()
    return client, stubber


def test_get_products_is_paginated_and_keeps_catalog_types_only():
    pages = [
        {
            "FormatVersion": "aws_v1",
            "PriceList": [hosting_item("ml.g6.xlarge", "1.1267000000"), hosting_item("ml.m5.xlarge", "0.2300")],
            "NextToken": "page-2",
        },
        {"FormatVersion": "aws_v1", "PriceList": [hosting_item("ml.g6e.xlarge", "2.6100000000")]},
    ]
    client, stubber = stubbed_client(pages)
    found = price_list.fetch_hosting_prices("us-east-1", client=client, today="2026-12-01")
    stubber.assert_no_pending_responses()
    assert {t: e["usd_per_hour"] for t, e in found.items()} == {"ml.g6.xlarge": 1.1267, "ml.g6e.xlarge": 2.61}


@pytest.fixture
def auto_mode(monkeypatch, tmp_path):
    """Prices in 'auto' mode with the cache in tmp_path; live_table's memo cleared around the test."""
    monkeypatch.setenv("LLMOPS_PRICES", "auto")
    monkeypatch.setenv("LLMOPS_CACHE_DIR", str(tmp_path))
    price_list.live_table.cache_clear()
    yield tmp_path
    price_list.live_table.cache_clear()


def test_with_credentials_the_api_answer_is_used_and_cached_with_its_date(auto_mode, monkeypatch):
    client, _ = stubbed_client([{"FormatVersion": "aws_v1", "PriceList": [hosting_item("ml.g6.xlarge", "1.2")]}])
    monkeypatch.setattr(price_list, "_has_credentials", lambda: True)
    monkeypatch.setattr(price_list, "pricing_client", lambda: client)
    got = price_list.price("ml.g6.xlarge", "us-east-1")
    assert (
        got.usd_per_hour == 1.2 and got.citation == f"2026-11-20, AWS Price List API GetProducts read {dt.date.today()}"
    )
    cached = json.loads((auto_mode / "sagemaker-prices-us-east-1.json").read_text())
    assert cached["fetched"].startswith(dt.datetime.now(dt.UTC).date().isoformat())  # a UTC time since round two
    assert cached["prices"]["ml.g6.xlarge"]["usd_per_hour"] == 1.2
    # A type the API did not price falls back to the shipped table, with that table's source.
    shipped = price_list.price("ml.g5.2xlarge", "us-east-1")
    assert shipped.usd_per_hour == 1.515 and "foundation-model-benchmarking-tool" in shipped.source
    # The summary prints the API's figure with its source and date.
    (line,) = cost_lines({"InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1}, "us-east-1")
    assert "USD 1.20/h" in line and "AWS Price List API GetProducts read" in line and "2026-11-20" in line


def test_a_fresh_cache_is_read_without_calling(auto_mode, monkeypatch):
    cache = {"region": "us-east-1", "fetched": dt.date.today().isoformat(), "source": "x", "prices": {}}
    cache["prices"]["ml.g6e.xlarge"] = {"usd_per_hour": 2.61, "date": "2026-11-20", "source": "AWS Price List API"}
    (auto_mode / "sagemaker-prices-us-east-1.json").write_text(json.dumps(cache))
    monkeypatch.setattr(price_list, "_has_credentials", lambda: pytest.fail("a fresh cache needs no call"))
    assert price_list.price("ml.g6e.xlarge", "us-east-1").usd_per_hour == 2.61


def test_a_stale_cache_is_refreshed_and_kept_when_the_api_fails(auto_mode, monkeypatch):
    stale = (dt.date.today() - dt.timedelta(days=price_list.CACHE_DAYS + 1)).isoformat()
    cache = {"region": "us-east-1", "fetched": stale, "source": "x", "prices": {}}
    cache["prices"]["ml.g6e.xlarge"] = {"usd_per_hour": 2.5, "date": "2026-01-01", "source": "AWS Price List API"}
    (auto_mode / "sagemaker-prices-us-east-1.json").write_text(json.dumps(cache))
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stubber.add_client_error("get_products", "AccessDeniedException", "not authorized to perform pricing:GetProducts")
    stubber.activate()
    monkeypatch.setattr(price_list, "_has_credentials", lambda: True)
    monkeypatch.setattr(price_list, "pricing_client", lambda: client)
    got = price_list.price("ml.g6e.xlarge", "us-east-1")
    assert got.usd_per_hour == 2.5 and got.date == "2026-01-01"  # the older answer, still dated
    stubber.assert_no_pending_responses()


def test_without_credentials_or_offline_the_shipped_table_answers(auto_mode, monkeypatch):
    monkeypatch.setattr(price_list, "_has_credentials", lambda: False)
    monkeypatch.setattr(price_list, "pricing_client", lambda: pytest.fail("no credentials: no call"))
    default = price_list.price("ml.g6.xlarge", "us-east-1")
    assert default.usd_per_hour == 1.1267 and default.citation.startswith("2026-10-05, https://pricing.us-east-1")
    assert not price_list.price("ml.g6.xlarge", "eu-west-1").known
    # offline: even a cached answer is ignored
    cache = {"region": "us-east-1", "fetched": dt.date.today().isoformat(), "source": "x", "prices": {}}
    cache["prices"]["ml.g6.xlarge"] = {"usd_per_hour": 9.0, "date": "2026-11-20", "source": "AWS Price List API"}
    (auto_mode / "sagemaker-prices-us-east-1.json").write_text(json.dumps(cache))
    monkeypatch.setenv("LLMOPS_PRICES", "offline")
    price_list.live_table.cache_clear()
    assert price_list.price("ml.g6.xlarge", "us-east-1").usd_per_hour == 1.1267


def test_a_cache_for_another_region_or_damaged_is_ignored(auto_mode):
    path = auto_mode / "sagemaker-prices-us-east-1.json"
    path.write_text("{not json")
    assert price_list.read_cache("us-east-1") is None
    path.write_text(json.dumps({"region": "eu-west-1", "fetched": "2026-12-01", "prices": {}}))
    assert price_list.read_cache("us-east-1") is None


def test_the_command_prints_coverage_and_a_failed_refresh_in_one_line(auto_mode, monkeypatch, capsys):
    monkeypatch.setattr(price_list, "_has_credentials", lambda: False)
    assert price_list.main(["--region", "us-east-1"]) == 0
    out = capsys.readouterr().out
    known, total = price_list.coverage("us-east-1")
    assert out.startswith(f"us-east-1: {known} of {total} catalog types priced")
    assert "ml.g6.xlarge" in out and "2026-10-05" in out

    def denied(region, **_):
        raise RuntimeError("Unable to locate credentials")

    monkeypatch.setattr(price_list, "fetch_hosting_prices", denied)
    assert price_list.main(["--region", "us-east-1", "--refresh"]) == 3
    assert capsys.readouterr().err.strip() == "price list: us-east-1: RuntimeError: Unable to locate credentials"


# -- each step at its edges (mutation testing of llmops/price_list.py found these untested) --------------------


def test_the_cache_folder_follows_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("LLMOPS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert price_list.cache_dir() == tmp_path / "xdg" / "llmops"
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # set but empty: as if unset (XDG Base Directory spec)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert price_list.cache_dir() == tmp_path / "home" / ".cache" / "llmops"
    monkeypatch.setenv("LLMOPS_CACHE_DIR", str(tmp_path / "own"))
    assert price_list.cache_dir() == tmp_path / "own"


def _item(**changes) -> dict:
    """hosting_item's product as a dict, with top-level keys replaced (None: removed)."""
    data = json.loads(hosting_item("ml.g6.xlarge", "1.1267"))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def test_an_item_may_come_parsed_and_a_bad_one_names_itself():
    assert price_list.parse_price_item(_item(), read_on="2026-12-01")[0] == "ml.g6.xlarge"  # a dict, not text
    with pytest.raises(ValueError, match=r"^a PriceList item: "):
        price_list.parse_price_item("{not json", read_on="2026-12-01")


@pytest.mark.parametrize(
    "changes",
    [
        {"product": None},
        {"product": {"sku": "X"}},  # no attributes
        {"terms": None},
        {"terms": {"Reserved": {}}},  # no OnDemand term
    ],
)
def test_an_item_missing_a_level_is_skipped_not_raised(changes):
    assert price_list.parse_price_item(_item(**changes), read_on="2026-12-01") is None


def test_a_term_without_dimensions_or_a_usd_price_is_skipped():
    data = _item()
    (term,) = data["terms"]["OnDemand"].values()
    (dimension,) = term["priceDimensions"].values()
    del dimension["pricePerUnit"]
    assert price_list.parse_price_item(data, read_on="2026-12-01") is None
    del term["priceDimensions"]
    assert price_list.parse_price_item(data, read_on="2026-12-01") is None


def test_a_price_below_one_dollar_counts_and_zero_does_not():
    _, row = price_list.parse_price_item(hosting_item("ml.g6.xlarge", "0.5"), read_on="2026-12-01")
    assert row["usd_per_hour"] == 0.5
    _, row = price_list.parse_price_item(hosting_item("ml.g6.xlarge", "0.0001"), read_on="2026-12-01")
    assert row["usd_per_hour"] == 0.0001
    assert price_list.parse_price_item(hosting_item("ml.g6.xlarge", "0"), read_on="2026-12-01") is None


def test_the_date_is_the_publication_then_the_terms_then_the_day_read():
    assert price_list.parse_price_item(_item(), read_on="2026-12-01")[1]["date"] == "2026-11-20"
    _, row = price_list.parse_price_item(_item(publicationDate=None), read_on="2026-12-01")
    assert row["date"] == "2026-11-01"  # the OnDemand term's effectiveDate
    data = _item(publicationDate=None)
    (term,) = data["terms"]["OnDemand"].values()
    del term["effectiveDate"]
    assert price_list.parse_price_item(data, read_on="2026-12-01")[1]["date"] == "2026-12-01"


def test_the_source_names_the_sku_or_none():
    data = _item()
    sku = data["product"]["sku"]
    source = price_list.parse_price_item(data, read_on="2026-12-01")[1]["source"]
    assert source == (
        f"AWS Price List API GetProducts read 2026-12-01, usage type USE1-Host:ml.g6.xlarge, SKU {sku}, "
        "published 2026-11-20"
    )
    del data["product"]["sku"]
    assert ", SKU , published" in price_list.parse_price_item(data, read_on="2026-12-01")[1]["source"]


def test_the_client_waits_briefly_and_retries_three_times_in_standard_mode():
    config = price_list.pricing_client().meta.config
    assert (config.connect_timeout, config.read_timeout) == (5, 20)
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert config.region_name == "us-east-1"


def test_a_page_without_a_price_list_ends_nothing():
    client, stubber = stubbed_client([{"FormatVersion": "aws_v1"}])
    assert price_list.fetch_hosting_prices("us-east-1", client=client, today="2026-12-01") == {}
    stubber.assert_no_pending_responses()


def test_credentials_are_found_or_not_without_raising(monkeypatch, tmp_path):
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # botocore: no instance metadata lookup
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    assert price_list._has_credentials() is False
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert price_list._has_credentials() is True

    def broken():
        raise RuntimeError("a broken profile")

    monkeypatch.setattr(boto3, "Session", broken)
    assert price_list._has_credentials() is False


def test_an_entry_that_is_not_an_object_says_so_and_a_cheap_one_is_kept():
    assert price_list._entry_problem("2.61") == "not an object"
    assert price_list._entry_problem({"usd_per_hour": 0.5}) is None
    assert price_list._entry_problem({"usd_per_hour": 1}) is None


def test_the_fetched_time_is_utc_whatever_the_local_zone(monkeypatch, tmp_path):
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")  # +09:00: a local reading of a naive time would move it 9 hours
    time.tzset()
    try:
        naive = price_list.fetched_at({"fetched": "2026-12-01T10:00:00"})
        assert naive == dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC) and naive.utcoffset() == dt.timedelta(0)
        aware = price_list.fetched_at({"fetched": "2026-12-01T12:00:00+02:00"})
        assert aware.isoformat() == "2026-12-01T10:00:00+00:00"
        now = dt.datetime(2026, 12, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
        data = price_list.refresh(
            "us-east-1", client=stubbed_client([{"FormatVersion": "aws_v1"}])[0], directory=tmp_path, now=now
        )
        assert data["fetched"] == "2026-12-01T10:00:00+00:00"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_cache_is_read_from_and_written_to_the_folder_named(auto_mode, tmp_path, monkeypatch):
    named = tmp_path / "named" / "two levels"
    client, _ = stubbed_client([{"FormatVersion": "aws_v1", "PriceList": [hosting_item("ml.g6.xlarge", "1.2")]}])
    monkeypatch.setattr(price_list, "pricing_client", lambda: pytest.fail("the client given is used"))
    now = dt.datetime(2026, 12, 1, 8, 30, tzinfo=dt.UTC)
    data = price_list.refresh("us-east-1", client=client, directory=named, today="2026-11-30", now=now)
    path = named / "sagemaker-prices-us-east-1.json"
    assert path.read_text() == json.dumps(data, indent=1, sort_keys=True)  # stable, diffable
    assert sorted(data) == ["fetched", "prices", "region", "source"]
    assert data["region"] == "us-east-1" and data["source"] == "AWS Price List API GetProducts"
    assert data["fetched"] == "2026-12-01T08:30:00+00:00"
    assert data["prices"]["ml.g6.xlarge"]["source"].startswith("AWS Price List API GetProducts read 2026-11-30,")
    assert not (auto_mode / "sagemaker-prices-us-east-1.json").exists()  # not in LLMOPS_CACHE_DIR
    assert [p.name for p in named.iterdir()] == ["sagemaker-prices-us-east-1.json"]  # no temporary file left
    assert price_list.read_cache("us-east-1", named, now=now)["prices"] == data["prices"]
    assert price_list.read_cache("us-east-1", now=now) is None  # the default folder holds none


def test_refresh_reads_on_today_without_a_date(tmp_path):
    client, _ = stubbed_client([{"FormatVersion": "aws_v1", "PriceList": [hosting_item("ml.g6.xlarge", "1.2")]}])
    data = price_list.refresh("us-east-1", client=client, directory=tmp_path)
    assert f"read {dt.date.today().isoformat()}," in data["prices"]["ml.g6.xlarge"]["source"]


def test_a_damaged_or_future_cache_is_refused_with_its_name_and_value(auto_mode, capsys):
    path = auto_mode / "sagemaker-prices-us-east-1.json"
    path.write_text("{not json")
    assert price_list.read_cache("us-east-1") is None
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"price list: {path}: ") and line.endswith("; the cache is refused")
    path.write_text(json.dumps({"region": "us-east-1", "fetched": "2999-01-01", "prices": {}}))
    assert price_list.read_cache("us-east-1") is None
    assert (
        capsys.readouterr().err
        == f"price list: {path}: fetched '2999-01-01' is not a past time; the cache is refused\n"
    )
    path.unlink()
    assert price_list.read_cache("us-east-1") is None and capsys.readouterr().err == ""  # absent: nothing to say


def test_a_listed_price_names_its_type_and_region(auto_mode, monkeypatch):
    cache = {"region": "us-east-1", "fetched": dt.date.today().isoformat(), "source": "x", "prices": {}}
    cache["prices"]["ml.g6e.xlarge"] = {"usd_per_hour": 2.61, "date": "2026-11-20", "source": "AWS Price List API"}
    (auto_mode / "sagemaker-prices-us-east-1.json").write_text(json.dumps(cache))
    got = price_list.price("ml.g6e.xlarge", "us-east-1")
    assert (got.instance_type, got.region, got.date, got.source) == (
        "ml.g6e.xlarge",
        "us-east-1",
        "2026-11-20",
        "AWS Price List API",
    )


def test_the_command_says_what_each_option_does(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps at the terminal's width
    assert price_list.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m llmops.price_list ")
    flat = " ".join(out.split())
    assert (
        "On-demand SageMaker hosting prices from the AWS Price List API, cached on disk, else the shipped table."
        in flat
    )
    assert (
        "--region REGION a region (repeatable). Default: every shipped region "
        "--refresh query the Price List API now and rewrite the cache "
        "--json print the prices as JSON"
    ) in flat
    assert flat.endswith("--json print the prices as JSON")
    assert "look a price up here" not in flat  # the description is the docstring's first paragraph only
    assert price_list.main(["--no-such-option"]) == 2


def test_every_bad_region_is_named_in_one_line(capsys):
    assert price_list.main(["--region", "../x", "--region", "us-east-1", "--region", "UP"]) == 2
    assert capsys.readouterr().err == (
        "price list: region '../x': not an AWS region name such as us-east-1 (botocore's partition regionRegex); "
        "region 'UP': not an AWS region name such as us-east-1 (botocore's partition regionRegex)\n"
    )


def test_the_command_prints_json_indented_by_one(auto_mode, monkeypatch, capsys):
    monkeypatch.setattr(price_list, "_has_credentials", lambda: False)
    assert price_list.main(["--region", "us-east-1", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert list(report) == ["us-east-1"]
    row = report["us-east-1"]["ml.g6.xlarge"]
    assert row["usd_per_hour"] == 1.1267 and row["instance_type"] == "ml.g6.xlarge" and row["region"] == "us-east-1"
    assert out == json.dumps(report, indent=1) + "\n"
