"""The fleet's line of the synth summary: what all its endpoints cost per hour together (llmops.summary)."""

from __future__ import annotations

from typing import SupportsIndex, SupportsInt

from constructs_lib.rules import known_instance_types, lookup_hint
from llmops.price_list import price


def variant_types(variant: dict) -> list[object]:
    """The variant's instance types, in priority order: its ``InstanceType``, or with instance pools (which replace
    it, realtime-endpoints-heterogeneous) each ``InstancePools`` entry by ``Priority``."""
    if variant.get("InstanceType") is not None or not variant.get("InstancePools"):
        return [variant.get("InstanceType")]
    pools = sorted(variant["InstancePools"], key=lambda p: p.get("Priority", 0))
    return [p.get("InstanceType") for p in pools]


def _count(value: object) -> int | None:
    """``value`` as int() reads it (a template's number or its text), or None when it cannot."""
    if not isinstance(value, str | bytes | bytearray | SupportsInt | SupportsIndex):  # what int() takes
        return None
    try:
        return int(value)
    except (TypeError, ValueError):  # TypeError: an __int__ that returns no int
        return None


def always_on_instances(template: dict) -> list[tuple[str, int]]:
    """(instance type, instances that run even when idle) for each variant of the template's endpoint configs:
    the managed-scaling minimum when it is enabled, else the initial count."""
    found = []
    for res in template.get("Resources", {}).values():
        if res.get("Type") != "AWS::SageMaker::EndpointConfig":
            continue
        for variant in res.get("Properties", {}).get("ProductionVariants", []):
            scaling = variant.get("ManagedInstanceScaling") or {}
            low = _count(scaling.get("MinInstanceCount")) if scaling.get("Status") == "ENABLED" else None
            count = low if low is not None else (_count(variant.get("InitialInstanceCount")) or 1)
            found.append((str(variant_types(variant)[0]), count))  # priority 1 while it has capacity
    return found


def fleet_total_lines(templates: list[dict], region: str) -> list[str]:
    """One line when the assembly holds several endpoints: their always-on cost per hour, summed; for a catalog
    type with no known price, the priced part and the Price List command; ``?`` for a type outside the catalog."""
    instances = [i for t in templates for i in always_on_instances(t)]
    if len(instances) < 2:
        return []
    total, unknown = 0.0, []
    for instance_type, count in instances:
        cost = price(instance_type, region)
        if cost.usd_per_hour is None:
            unknown.append(instance_type)
        else:
            total += cost.usd_per_hour * count
    shown = ", ".join(f"{c} x {t}" for t, c in instances)
    names = ", ".join(sorted(set(unknown)))
    if unknown and set(unknown) <= set(known_instance_types()):  # catalog types: where to read their price
        return [
            f"fleet: {len(instances)} endpoints ({shown}), USD {total:,.2f}/h always on in {region} without "
            f"{names}: {lookup_hint(region)}"
        ]
    amount = "?" if unknown else f"{total:,.2f}"
    missing = f"; no sourced price for {names}" if unknown else ""
    return [f"fleet: {len(instances)} endpoints ({shown}), USD {amount}/h always on in {region}{missing}"]
