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
