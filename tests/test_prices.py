"""On-demand prices (constructs_lib/data/sagemaker_prices.json) and the synth summary's cost lines."""

from __future__ import annotations

import json

from constructs_lib.catalog import DATA_DIR, known_instance_types
from constructs_lib.prices import UNKNOWN, hours_per_month, known_regions, price
from llmops.summary import cost_lines, main

DATA = json.loads((DATA_DIR / "sagemaker_prices.json").read_text())


def test_every_figure_has_a_date_and_a_source_and_names_a_catalog_type():
    assert {"us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"} <= set(known_regions())
    for region, prices in DATA["regions"].items():
        for instance_type, entry in prices.items():
            assert instance_type in known_instance_types(), (region, instance_type)
            assert entry["usd_per_hour"] > 0 and entry["date"] and entry["source"].startswith("AWS Price List"), (
                region,
                instance_type,
            )


def test_known_and_unknown_prices():
    g6 = price("ml.g6.xlarge", "us-east-1")
    assert g6.usd_per_hour == 1.1267 and g6.hourly_text(2) == "2.25" and g6.monthly_text() == "822"
    assert hours_per_month() == 730
    for unknown in (price("ml.g6.xlarge", "eu-west-1"), price("ml.p5.48xlarge", "us-east-1"), price("x", "mars-1")):
        assert not unknown.known and unknown.usd_per_month is None
        assert unknown.hourly_text() == UNKNOWN and unknown.monthly_text() == UNKNOWN


def test_cost_of_an_always_on_variant():
    (line,) = cost_lines({"InstanceType": "ml.g6e.2xlarge", "InitialInstanceCount": 2}, "us-east-1")
    assert line.startswith("  cost in us-east-1: 2 x ml.g6e.2xlarge = USD 5.61/h, USD 4,092/month (730 h always on)")
    assert "price of 2026-10-05, sourced in constructs_lib/data/sagemaker_prices.json" in line
    (unknown,) = cost_lines({"InstanceType": "ml.g6e.2xlarge", "InitialInstanceCount": 1}, "eu-west-1")
    assert "USD ?/h, USD ?/month" in unknown and "no sourced price" in unknown


def test_cost_with_managed_scaling_and_scale_to_zero():
    variant = {
        "InstanceType": "ml.g6.xlarge",
        "InitialInstanceCount": 1,
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 3},
    }
    cost, note = cost_lines(variant, "us-east-1")
    assert "USD 0.00/h idle (0 x ml.g6.xlarge), USD 3.38/h at full scale (3 x)" in cost
    assert note.startswith("  scale-to-zero: no instance (USD 0/h) while idle; a cold start")
    variant["ManagedInstanceScaling"]["MinInstanceCount"] = 1
    (cost,) = cost_lines(variant, "us-east-1")
    assert "always-on minimum USD 822/month" in cost
    (token,) = cost_lines({"InstanceType": {"Ref": "Type"}}, "us-east-1")
    assert "not a literal" in token


def test_summary_prints_the_cost_for_the_region_asked(tmp_path, capsys):
    template = {
        "Resources": {
            "Config": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ProductionVariants": [
                        {"VariantName": "AllTraffic", "InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1}
                    ]
                },
            }
        }
    }
    (tmp_path / "Stack.template.json").write_text(json.dumps(template))
    assert main([str(tmp_path), "--region", "us-east-1"]) == 0
    assert "cost in us-east-1: 1 x ml.g6.xlarge = USD 1.13/h, USD 822/month" in capsys.readouterr().out
    assert main([str(tmp_path), "--region"]) == 2
