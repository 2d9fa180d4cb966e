"""The fleet total of the synth summary (llmops/fleet_summary.py): always-on instances of every endpoint, summed."""

from __future__ import annotations

from constructs_lib.prices import lookup_hint
from llmops.fleet_summary import always_on_instances, fleet_total_lines
from llmops.price_list import price


def config(instance_type: str, count: int, scaling: dict | None = None) -> dict:
    variant = {"InstanceType": instance_type, "InitialInstanceCount": count}
    if scaling:
        variant["ManagedInstanceScaling"] = scaling
    return {
        "Resources": {
            "Config": {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [variant]}}
        }
    }


def test_managed_scaling_counts_its_minimum_and_zero_is_free():
    t = config("ml.g6.12xlarge", 1, {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 2})
    assert always_on_instances(t) == [("ml.g6.12xlarge", 0)]
    assert always_on_instances(config("ml.g6.xlarge", 2)) == [("ml.g6.xlarge", 2)]


def test_the_total_sums_every_endpoint_and_one_endpoint_has_no_fleet_line():
    a, b = config("ml.g6.xlarge", 1), config("ml.g6.2xlarge", 2)
    expected = price("ml.g6.xlarge", "us-east-1").usd_per_hour + 2 * price("ml.g6.2xlarge", "us-east-1").usd_per_hour
    (line,) = fleet_total_lines([a, b], "us-east-1")
    assert line.startswith("fleet: 2 endpoints (1 x ml.g6.xlarge, 2 x ml.g6.2xlarge)")
    assert f"USD {expected:,.2f}/h always on in us-east-1" in line
    assert fleet_total_lines([a], "us-east-1") == []


def test_an_unpriced_type_makes_the_total_unknown_and_says_which():
    (line,) = fleet_total_lines([config("ml.g6.xlarge", 1), config("ml.x9.unknown", 1)], "us-east-1")
    assert "USD ?/h" in line and "no sourced price for ml.x9.unknown" in line


def test_an_unpriced_catalog_type_gives_the_priced_part_and_the_price_list_command():
    (line,) = fleet_total_lines([config("ml.g6.xlarge", 1), config("ml.g7e.2xlarge", 1)], "us-east-1")
    g6 = price("ml.g6.xlarge", "us-east-1").usd_per_hour
    assert line.endswith(f"USD {g6:,.2f}/h always on in us-east-1 without ml.g7e.2xlarge: {lookup_hint('us-east-1')}")
    assert "?" not in line


def pooled(primary: str, *fallbacks: str) -> dict:
    """A variant with instance pools, which replace InstanceType (realtime-endpoints-heterogeneous); shuffled
    priorities, as a template may list them in any order."""
    pools = [{"InstanceType": t, "Priority": i} for i, t in enumerate([primary, *fallbacks], 1)]
    variant = {"InstancePools": list(reversed(pools)), "InitialInstanceCount": 1}
    return {
        "Resources": {"C": {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [variant]}}}
    }


def test_a_pooled_variant_counts_as_its_priority_one_type_and_the_summary_names_the_fallbacks():
    from llmops.summary import _variant_lines

    a, b = pooled("ml.g6.xlarge", "ml.g6e.xlarge"), config("ml.g6.2xlarge", 1)
    assert always_on_instances(a) == [("ml.g6.xlarge", 1)]
    (line,) = fleet_total_lines([a, b], "us-east-1")
    assert line.startswith("fleet: 2 endpoints (1 x ml.g6.xlarge, 1 x ml.g6.2xlarge)") and "None" not in line
    (variant,) = a["Resources"]["C"]["Properties"]["ProductionVariants"]
    head, *cost = _variant_lines({**variant, "VariantName": "AllTraffic"}, "us-east-1")
    assert "1 x ml.g6.xlarge (falls back to ml.g6e.xlarge), AMI" in head
    assert cost and "ml.g6.xlarge" in cost[0]
