"""On-demand prices (constructs_lib/data/sagemaker_prices.json) and the synth summary's cost lines."""

from __future__ import annotations

import json
import re

from constructs_lib.catalog import DATA_DIR, known_instance_types
from constructs_lib.prices import UNKNOWN, hours_per_month, known_regions, lookup_hint, price
from llmops.summary import cost_lines, main

DATA = json.loads((DATA_DIR / "sagemaker_prices.json").read_text())


def test_every_figure_has_a_date_and_a_source_and_names_a_catalog_type():
    assert {"us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"} <= set(known_regions())
    for region, prices in DATA["regions"].items():
        for instance_type, entry in prices.items():
            assert instance_type in known_instance_types(), (region, instance_type)
            assert entry["usd_per_hour"] > 0 and re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"]), (
                region,
                instance_type,
            )
            # Traceable: a URL, and a repository file is pinned to a commit (never a branch that moves).
            source = entry["source"]
            assert source.startswith("https://"), (region, instance_type)
            if "/blob/" in source:
                assert re.search(r"/blob/[0-9a-f]{40}/", source), (region, instance_type)


def test_known_and_unknown_prices():
    g5 = price("ml.g5.2xlarge", "us-east-1")
    assert g5.usd_per_hour == 1.515 and g5.hourly_text(2) == "3.03" and g5.monthly_text() == "1,106"
    assert g5.date == "2025-02-13" and "foundation-model-benchmarking-tool" in g5.source
    assert hours_per_month() == 730
    # No sourced figure: another region, a type no source prices, an unknown region. Never borrowed from us-east-1.
    for unknown in (price("ml.g5.2xlarge", "eu-west-1"), price("ml.g6e.xlarge", "us-east-1"), price("x", "mars-1")):
        assert not unknown.known and unknown.usd_per_month is None
        assert unknown.hourly_text() == UNKNOWN and unknown.monthly_text() == UNKNOWN


def test_cost_of_an_always_on_variant():
    (line,) = cost_lines({"InstanceType": "ml.g5.2xlarge", "InitialInstanceCount": 2}, "us-east-1")
    assert line.startswith("  cost in us-east-1: 2 x ml.g5.2xlarge = USD 3.03/h, USD 2,212/month (730 h always on)")
    assert line.endswith(
        "(price of 2025-02-13, https://github.com/aws-samples/foundation-model-benchmarking-tool/blob/"
        "6e0ed661bfe7a48d6b5039d5974bafce78293716/fmbench/configs/pricing.yml)"
    )
    # A catalog type without a public price names the Price List command instead of printing "?".
    (unknown,) = cost_lines({"InstanceType": "ml.g6e.2xlarge", "InitialInstanceCount": 1}, "eu-west-1")
    assert unknown == f"  cost in eu-west-1: 1 x ml.g6e.2xlarge: {lookup_hint('eu-west-1')}"
    assert "?" not in unknown and "python -m llmops.price_list --region eu-west-1 --refresh" in unknown
    # A type outside the catalog is still unknown, shown as "?".
    (other,) = cost_lines({"InstanceType": "ml.x9.unknown", "InitialInstanceCount": 1}, "us-east-1")
    assert "USD ?/h, USD ?/month" in other and "no sourced price" in other


def test_every_us_east_1_catalog_type_shows_a_sourced_price_or_the_price_list_command():
    # Issue 26: no catalog type in us-east-1 shows "?" in the summary; each has a dated, sourced price or the
    # command that reads its price from the AWS Price List (no public source gives one for the rest).
    priced = []
    for instance_type in known_instance_types():
        (line,) = cost_lines({"InstanceType": instance_type, "InitialInstanceCount": 1}, "us-east-1")
        assert "?" not in line, line
        if price(instance_type, "us-east-1").known:
            priced.append(instance_type)
            assert re.search(r"\(price of \d{4}-\d{2}-\d{2}, https://", line), line
        else:
            assert line.endswith(lookup_hint("us-east-1")), line
    assert len(priced) == 24 and "ml.g6.xlarge" in priced  # the default instance type has a price


def test_us_east_2_g6_prices_come_from_a_pinned_get_products_record():
    for instance_type, usd in (("ml.g6.xlarge", 1.1267), ("ml.g6.2xlarge", 1.222), ("ml.g6.4xlarge", 1.654)):
        p = price(instance_type, "us-east-2")
        assert p.usd_per_hour == usd and p.date == "2026-09-25"
        assert (
            p.source.startswith(
                "https://github.com/xbill9/sagemaker-gemma/blob/6c18089f6ab0feff3515ad899d480bb6f1891f67/"
            )
            and f"USE2-Host:{instance_type}" in p.source
        )
    # Never borrowed across regions: us-east-1's ml.g6.4xlarge has no price although us-east-2's has one.
    assert not price("ml.g6.4xlarge", "us-east-1").known


def test_the_default_instance_has_a_dated_sourced_price_in_us_east_1():
    # ml.g6.xlarge is the default instance_type (cdk.json); the summary of a default deployment prints this.
    (line,) = cost_lines({"InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1}, "us-east-1")
    assert "USD 1.13/h, USD 822/month" in line
    assert "(price of 2026-10-05, https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonSageMaker/" in line
    # The offer file was not read here: the row is quoted by a public report, and the summary says so.
    assert line.endswith(", as quoted by a public report (not re-read here))")


def test_a_second_hand_figure_names_who_quoted_it_and_a_first_hand_one_does_not():
    data = json.loads((DATA_DIR / "sagemaker_prices.json").read_text())["regions"]
    for region, table in data.items():
        for instance_type, entry in table.items():
            cited = price(instance_type, region).citation
            # A source that says it was quoted (not read) carries "via"; and only such a source.
            second_hand = "uoted" in entry["source"] and "not re-read" in entry["source"].replace(
                "Not re-read", "not re-read"
            )
            assert ("via" in entry) == second_hand, (region, instance_type)
            assert ("as quoted by" in cited) == second_hand, (region, instance_type)


def test_cost_with_managed_scaling_and_scale_to_zero():
    variant = {
        "InstanceType": "ml.g6.2xlarge",
        "InitialInstanceCount": 1,
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 3},
    }
    cost, note = cost_lines(variant, "us-east-1")
    assert "USD 0.00/h idle (0 x ml.g6.2xlarge), USD 3.67/h at full scale (3 x)" in cost
    assert note.startswith("  scale-to-zero: no instance (USD 0/h) while idle; a cold start")
    variant["ManagedInstanceScaling"]["MinInstanceCount"] = 1
    (cost,) = cost_lines(variant, "us-east-1")
    assert "always-on minimum USD 892/month" in cost
    (token,) = cost_lines({"InstanceType": {"Ref": "Type"}}, "us-east-1")
    assert "not a literal" in token


def test_summary_prints_the_cost_for_the_region_asked(tmp_path, capsys):
    template = {
        "Resources": {
            "Config": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ProductionVariants": [
                        {"VariantName": "AllTraffic", "InstanceType": "ml.g6.2xlarge", "InitialInstanceCount": 1}
                    ]
                },
            }
        }
    }
    (tmp_path / "Stack.template.json").write_text(json.dumps(template))
    stack = {"type": "aws:cloudformation:stack", "properties": {"templateFile": "Stack.template.json"}}
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {"Stack": stack}}))
    assert main([str(tmp_path), "--region", "us-east-1"]) == 0
    assert "cost in us-east-1: 1 x ml.g6.2xlarge = USD 1.22/h, USD 892/month" in capsys.readouterr().out
    assert main([str(tmp_path), "--region"]) == 2
