"""On-demand SageMaker hosting prices from the AWS Price List API, cached on disk, else the shipped table.

    python -m llmops.price_list [--region us-east-1] [--refresh] [--json]

``plan`` and ``summary`` look a price up here: a cached Price List answer for the region (at most ``CACHE_DAYS``
old), else one ``pricing:GetProducts`` query with the caller's own credentials (written to the cache
with its date), else ``constructs_lib/data/sagemaker_prices.json``. Without credentials, offline, or with
``LLMOPS_PRICES=offline`` the shipped table is used and nothing is called. Every price carries its source and
date; a type neither source prices is unknown (``?``), never borrowed from another region.

The query (one per region, paginated): ServiceCode ``AmazonSageMaker``, ``component=Hosting`` (real-time
inference; awslabs/llmeter looks hosting prices up with the same filter,
llmeter/callbacks/cost/providers/sagemaker.py) and ``regionCode``; a product counts when its usage type ends
in ``Host:<instance type>`` and its OnDemand term has one ``Hrs`` dimension priced in USD.

The cache is checked as it is read: a file that is not an object for its region, or whose ``fetched`` time is
unreadable or in the future, or that is not JSON, is refused whole with a one-line warning (as if absent:
refetched when credentials allow); one entry that is
not an object with a finite positive ``usd_per_hour`` and printable ``date`` and ``source`` text is ignored with a
one-line warning on stderr (the shipped table answers for that type). A region names a file, so it must be an AWS
region name (botocore's partition ``regionRegex``), else it is refused before any path is built.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

import safejson
from constructs_lib.rules import Price, known_instance_types, known_regions
from constructs_lib.rules import price as shipped_price

SERVICE_CODE = "AmazonSageMaker"
# The Price List Query API has two endpoints, api.pricing.us-east-1 and api.pricing.ap-south-1; either answers for
# every region (https://docs.rs/aws-sdk-pricing/0.24.0/aws_sdk_pricing/, "Service Endpoint", from the API model).
PRICING_REGION = "us-east-1"
CACHE_DAYS = 30
MAX_AGE = dt.timedelta(days=CACHE_DAYS)  # a cache exactly this old is still used; one second older is refreshed
API_SOURCE = "AWS Price List API GetProducts"
ENV_MODE = "LLMOPS_PRICES"  # "auto" (default) or "offline"


def cache_dir() -> Path:
    """``$LLMOPS_CACHE_DIR``, else ``$XDG_CACHE_HOME/llmops``, else ``~/.cache/llmops``."""
    if os.environ.get("LLMOPS_CACHE_DIR"):
        return Path(os.environ["LLMOPS_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmops"


@cache
def _region_patterns() -> tuple[re.Pattern, ...]:
    """Every partition's ``regionRegex`` (botocore/data/partitions.json: aws ``^(us|eu|ap|...)\\-\\w+\\-\\d+$``,
    aws-cn, aws-us-gov, aws-iso...), ASCII-only and matched whole (``\\w`` is Unicode and ``$`` matches before a
    final newline otherwise, Python ``re`` docs)."""
    from importlib.resources import files

    partitions = json.loads((files("botocore") / "data" / "partitions.json").read_text())["partitions"]
    return tuple(re.compile(p["regionRegex"].removeprefix("^").removesuffix("$"), re.ASCII) for p in partitions)


def region_problem(region: object) -> str | None:
    """Why ``region`` is not an AWS region name (it names a cache file, so nothing else may reach a path)."""
    if isinstance(region, str) and any(p.fullmatch(region) for p in _region_patterns()):
        return None
    return f"region {region!a}: not an AWS region name such as us-east-1 (botocore's partition regionRegex)"


def cache_path(region: str, directory: Path | None = None) -> Path:
    problem = region_problem(region)
    if problem:
        raise ValueError(problem)
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
        # standard mode retries 429 and 500/502/503/504 as transient (botocore/retries/standard.py), whatever
        # AWS_RETRY_MODE says; total_max_attempts counts the first call.
        config=Config(connect_timeout=5, read_timeout=20, retries={"mode": "standard", "total_max_attempts": 3}),
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


def _warn(message: str) -> None:
    print(f"price list: {message}", file=sys.stderr)


def _printable(value: object) -> bool:
    return isinstance(value, str) and value.isprintable()


def _entry_problem(entry: object) -> str | None:
    if not isinstance(entry, dict):
        return "not an object"
    usd = entry.get("usd_per_hour")
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd) or usd <= 0:
        return f"usd_per_hour {usd!a} is not a finite number above 0"
    for key in ("date", "source"):
        if key in entry and entry[key] is not None and not _printable(entry[key]):
            return f"{key} is not printable text"
    return None


def fetched_at(data: dict) -> dt.datetime | None:
    """The cache's ``fetched`` time (UTC; a date alone is its midnight), None when unreadable."""
    value = data.get("fetched")
    if not isinstance(value, str):
        return None
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def read_cache(region: str, directory: Path | None = None, *, now: dt.datetime | None = None) -> dict | None:
    """The cache for ``region`` with its bad entries dropped (one warning line each); None when absent or refused."""
    path = cache_path(region, directory)
    try:
        raw = path.read_bytes()
    except OSError:  # absent (or unreadable): as if never fetched
        return None
    try:
        data = safejson.loads(raw, source=str(path))
    except ValueError as e:  # damaged: refused whole, and said once (safejson's message names the file)
        _warn(f"{e}; the cache is refused")
        return None
    if not isinstance(data, dict) or data.get("region") != region or not isinstance(data.get("prices"), dict):
        return None
    when = fetched_at(data)
    if when is None or when > (now or dt.datetime.now(dt.UTC)):
        _warn(f"{path}: fetched {data.get('fetched')!a} is not a past time; the cache is refused")
        return None
    prices = {}
    for instance_type, entry in data["prices"].items():
        problem = _entry_problem(entry)
        if problem:
            _warn(f"{path}: entry {instance_type!a} ignored: {problem}")
        else:
            prices[instance_type] = entry
    return {**data, "prices": prices}


def _fresh(data: dict, now: dt.datetime) -> bool:
    when = fetched_at(data)
    return when is not None and dt.timedelta(0) <= now - when <= MAX_AGE


def refresh(
    region: str,
    *,
    client: Any = None,
    directory: Path | None = None,
    today: str | None = None,
    now: dt.datetime | None = None,
) -> dict:
    """Query the API for ``region`` and write the cache; returns what was written."""
    path = cache_path(region, directory)  # refuses a region that is not one before any call
    prices = fetch_hosting_prices(region, client=client, today=today)
    fetched = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).isoformat(timespec="seconds")
    data = {"region": region, "fetched": fetched, "source": API_SOURCE, "prices": prices}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)
    return data


@cache
def live_table(region: str) -> dict[str, dict]:
    """The Price List prices for ``region`` (cached on disk), or {} when they cannot be had."""
    if os.environ.get(ENV_MODE, "auto").lower() == "offline" or region_problem(region):
        return {}
    cached = read_cache(region)
    if cached and _fresh(cached, dt.datetime.now(dt.UTC)):
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
    bad = [p for p in map(region_problem, regions) if p]
    if bad:
        print(f"price list: {'; '.join(bad)}", file=sys.stderr)
        return 2
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
