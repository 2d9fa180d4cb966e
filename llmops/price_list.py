"""On-demand SageMaker hosting prices from the AWS Price List API, cached on disk, else the shipped table.

    python -m llmops.price_list [--region us-east-1] [--refresh] [--json]

``plan`` and ``summary`` look a price up here: a cached Price List answer for the region (younger than
``CACHE_DAYS``), else one ``pricing:GetProducts`` query with the caller's own credentials (written to the cache
with its date), else ``constructs_lib/data/sagemaker_prices.json``. Without credentials, offline, or with
``LLMOPS_PRICES=offline`` the shipped table is used and nothing is called. Every price carries its source and
date; a type neither source prices is unknown (``?``), never borrowed from another region.

The query (one per region, paginated): ServiceCode ``AmazonSageMaker``, ``component=Hosting`` (real-time
inference; awslabs/llmeter looks hosting prices up with the same filter,
llmeter/callbacks/cost/providers/sagemaker.py) and ``regionCode``; a product counts when its usage type ends
in ``Host:<instance type>`` and its OnDemand term has one ``Hrs`` dimension priced in USD.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

import safejson
from constructs_lib.catalog import known_instance_types
from constructs_lib.prices import Price, known_regions
from constructs_lib.prices import price as shipped_price

SERVICE_CODE = "AmazonSageMaker"
# The Price List Query API has two endpoints, api.pricing.us-east-1 and api.pricing.ap-south-1; either answers for
# every region (https://docs.rs/aws-sdk-pricing/0.24.0/aws_sdk_pricing/, "Service Endpoint", from the API model).
PRICING_REGION = "us-east-1"
CACHE_DAYS = 30
API_SOURCE = "AWS Price List API GetProducts"
ENV_MODE = "LLMOPS_PRICES"  # "auto" (default) or "offline"


def cache_dir() -> Path:
    """``$LLMOPS_CACHE_DIR``, else ``$XDG_CACHE_HOME/llmops``, else ``~/.cache/llmops``."""
    if os.environ.get("LLMOPS_CACHE_DIR"):
        return Path(os.environ["LLMOPS_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmops"


def cache_path(region: str, directory: Path | None = None) -> Path:
    return (directory or cache_dir()) / f"sagemaker-prices-{region}.json"


def hosting_filters(region: str) -> list[dict[str, str]]:
    # Filter shape: botocore/data/pricing/2017-10-15/service-2.json (Filter: Type, Field, Value).
    return [
        {"Type": "TERM_MATCH", "Field": "component", "Value": "Hosting"},
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
    ]


def parse_price_item(item: str | dict, *, read_on: str) -> tuple[str, dict] | None:
    """One PriceList item -> (instance type, table entry); None for anything but an hourly hosting instance.

    The item is the documented aws_v1 JSON (a string; botocore's pricing example for GetProducts):
    ``product.attributes`` (``instanceName``, ``usagetype``), ``terms.OnDemand.<term>.priceDimensions.<dim>``
    (``unit``, ``pricePerUnit.USD``) and ``publicationDate``.
    """
    data = safejson.loads(item, source="a PriceList item") if isinstance(item, str) else item
    attributes = data.get("product", {}).get("attributes", {})
    instance_type = attributes.get("instanceName") or ""
    usage_type = attributes.get("usagetype") or ""
    if not instance_type.startswith("ml.") or not usage_type.endswith(f"Host:{instance_type}"):
        return None
    terms = list(data.get("terms", {}).get("OnDemand", {}).values())
    if len(terms) != 1:
        return None
    hourly = [d for d in terms[0].get("priceDimensions", {}).values() if str(d.get("unit", "")).lower() == "hrs"]
    if len(hourly) != 1:
        return None
    try:
        usd = float(hourly[0].get("pricePerUnit", {})["USD"])
    except (KeyError, TypeError, ValueError):
        return None
    if usd <= 0:
        return None
    published = str(data.get("publicationDate") or terms[0].get("effectiveDate") or read_on)[:10]
    sku = data.get("product", {}).get("sku", "")
    source = f"{API_SOURCE} read {read_on}, usage type {usage_type}, SKU {sku}, published {published}"
    return instance_type, {"usd_per_hour": usd, "date": published, "source": source}


def pricing_client() -> Any:
    """A Price List client with short timeouts: a price is not worth a long wait in ``plan``."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "pricing",
        region_name=PRICING_REGION,
        config=Config(connect_timeout=5, read_timeout=20, retries={"max_attempts": 2}),
    )


def fetch_hosting_prices(region: str, *, client: Any = None, today: str | None = None) -> dict[str, dict]:
    """Every catalog type's on-demand hosting price in ``region`` from ``GetProducts`` (raises on API errors)."""
    client = client or pricing_client()
    read_on = today or dt.date.today().isoformat()
    catalog = set(known_instance_types())
    found: dict[str, dict] = {}
    kwargs: dict[str, Any] = {
        "ServiceCode": SERVICE_CODE,
        "Filters": hosting_filters(region),
        "FormatVersion": "aws_v1",
        "MaxResults": 100,  # GetProductsMaxResults: 1..100 (botocore pricing service model)
    }
    while True:
        page = client.get_products(**kwargs)
        for item in page.get("PriceList", []):
            parsed = parse_price_item(item, read_on=read_on)
            if parsed and parsed[0] in catalog:
                found[parsed[0]] = parsed[1]
        token = page.get("NextToken")
        if not token:
            return found
        kwargs["NextToken"] = token


def _has_credentials() -> bool:
    try:
        import boto3

        return boto3.Session().get_credentials() is not None
    except Exception:
        return False


def read_cache(region: str, directory: Path | None = None) -> dict | None:
    try:
        data = safejson.loads(cache_path(region, directory).read_bytes(), source=str(cache_path(region, directory)))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("region") != region or not isinstance(data.get("prices"), dict):
        return None
    return data


def _fresh(data: dict, today: dt.date) -> bool:
    try:
        return (today - dt.date.fromisoformat(str(data["fetched"]))).days < CACHE_DAYS
    except (KeyError, ValueError):
        return False


def refresh(region: str, *, client: Any = None, directory: Path | None = None, today: str | None = None) -> dict:
    """Query the API for ``region`` and write the cache; returns what was written."""
    prices = fetch_hosting_prices(region, client=client, today=today)
    data = {"region": region, "fetched": today or dt.date.today().isoformat(), "source": API_SOURCE, "prices": prices}
    path = cache_path(region, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)
    return data


@cache
def live_table(region: str) -> dict[str, dict]:
    """The Price List prices for ``region`` (cached on disk), or {} when they cannot be had."""
    if os.environ.get(ENV_MODE, "auto").lower() == "offline":
        return {}
    cached = read_cache(region)
    if cached and _fresh(cached, dt.date.today()):
        return cached["prices"]
    if _has_credentials():
        try:
            return refresh(region)["prices"]
        except Exception:
            pass
    return cached["prices"] if cached else {}


def price(instance_type: str, region: str) -> Price:
    """The Price List's price when known, else the shipped table's, else unknown."""
    entry = live_table(region).get(instance_type)
    if entry is not None:
        return Price(instance_type, region, float(entry["usd_per_hour"]), entry.get("date"), entry.get("source"))
    return shipped_price(instance_type, region)


def coverage(region: str) -> tuple[int, int]:
    """(catalog types with a price in ``region``, catalog size)."""
    types = known_instance_types()
    return sum(price(t, region).known for t in types), len(types)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmops.price_list", description=__doc__.split("\n\n")[0])
    parser.add_argument("--region", action="append", help="a region (repeatable). Default: every shipped region")
    parser.add_argument("--refresh", action="store_true", help="query the Price List API now and rewrite the cache")
    parser.add_argument("--json", action="store_true", help="print the prices as JSON")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    regions = args.region or known_regions()
    if args.refresh:
        for region in regions:
            try:
                refresh(region)
            except Exception as e:
                print(f"price list: {region}: {type(e).__name__}: {e}", file=sys.stderr)
                return 3
        live_table.cache_clear()
    report = {r: {t: price(t, r) for t in known_instance_types()} for r in regions}
    if args.json:
        print(json.dumps({r: {t: vars(p) for t, p in rows.items()} for r, rows in report.items()}, indent=1))
        return 0
    for region, rows in report.items():
        known = sum(p.known for p in rows.values())
        print(f"{region}: {known} of {len(rows)} catalog types priced")
        for instance_type, p in rows.items():
            print(f"  {instance_type:22} USD {p.hourly_text():>8}/h  ({p.citation})")  # --json: the full source
    return 0


if __name__ == "__main__":
    sys.exit(main())
