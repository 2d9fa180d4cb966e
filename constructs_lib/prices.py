"""On-demand SageMaker real-time inference prices (``data/sagemaker_prices.json``) and the cost of a deployment.

Prices are data with a date and a source per figure; a type without one is unknown, never guessed from another
region or from EC2 prices: a catalog type shows the command that reads its price from the AWS Price List
(``lookup_hint``; ``LOOKUP`` in a table cell), a type outside the catalog ``?``. A figure read second-hand (an offer
file row quoted by a public report) says so: its ``via`` names who quoted it, and every citation carries it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from .catalog import DATA_DIR

UNKNOWN = "?"
# A table cell for a catalog type with no shipped price: its price is one Price List lookup away (lookup_hint).
LOOKUP = "lookup"


@cache
def _prices() -> dict:
    return json.loads((DATA_DIR / "sagemaker_prices.json").read_text())


def hours_per_month() -> int:
    return int(_prices()["hours_per_month"])


def known_regions() -> list[str]:
    return sorted(_prices()["regions"])


@dataclass(frozen=True)
class Price:
    instance_type: str
    region: str
    usd_per_hour: float | None  # None: unknown
    date: str | None = None
    source: str | None = None
    via: str | None = None  # who quoted the source, when the figure was not read from it here

    @property
    def known(self) -> bool:
        return self.usd_per_hour is not None

    @property
    def usd_per_month(self) -> float | None:
        return None if self.usd_per_hour is None else self.usd_per_hour * hours_per_month()

    @property
    def citation(self) -> str:
        """``<date>, <source>`` in a few words: the source's URL or name, without the explanation after it."""
        if self.usd_per_hour is None:
            return "no sourced price"
        short = (self.source or "source not recorded").split(" (")[0].split(", ")[0]
        quoted = f", as quoted by {self.via} (not re-read here)" if self.via else ""
        return f"{self.date or 'undated'}, {short}{quoted}"

    def hourly_text(self, count: int = 1) -> str:
        return UNKNOWN if self.usd_per_hour is None else f"{self.usd_per_hour * count:,.2f}"

    def monthly_text(self, count: int = 1) -> str:
        return UNKNOWN if self.usd_per_month is None else f"{self.usd_per_month * count:,.0f}"


def lookup_hint(region: str) -> str:
    """What to run for a catalog type the shipped table has no public price for (no public source was found).

    The AWS Price List is the authority for SageMaker hosting prices (offer AmazonSageMaker, usage type
    ``<REGION-PREFIX>-Host:<instance type>``); ``llmops.price_list`` queries it with ``pricing:GetProducts``
    and the caller's own credentials, and plan and summary use its cached answer when there is one.
    """
    return (
        f"no public price in the shipped table; `python -m llmops.price_list --region {region} --refresh` "
        "reads it from the AWS Price List (pricing:GetProducts, your credentials)"
    )


def price(instance_type: str, region: str) -> Price:
    """The on-demand hourly price of ``instance_type`` in ``region``; ``usd_per_hour`` None when unknown."""
    entry = _prices()["regions"].get(region, {}).get(instance_type)
    if entry is None:
        return Price(instance_type, region, None)
    return Price(
        instance_type, region, float(entry["usd_per_hour"]), entry.get("date"), entry.get("source"), entry.get("via")
    )
