"""EndpointSmokeTest with a load gate (issue 39): its properties, its longer handler run, its one metric grant, the
budget rule at synth (named by prop and by context key), the stack's outputs, and cdk-nag with the gate on."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from constructs_lib import LoadGate
from constructs_lib.deployment.config import ConfigError
from constructs_lib.load_gate import (
    CHECKS_ATTEMPT_S,
    CONTEXT_KEYS,
    GATE_HANDLER_TIMEOUT,
    SERVICE_TIMEOUT_MARGIN_S,
    burst_window_s,
)
from constructs_lib.rules import load_gate_problems
from constructs_lib.smoke_test import HANDLER_TIMEOUT, MAX_BUDGET, SERVICE_TIMEOUT_MARGIN
from handler_kit.resources import LOAD_FIGURES
from tests.conftest import stack_template
from tests.constructs.test_smoke_construct import handler_statements, make, smoke_resource
from tests.fakes.fake_runtime import load_handler
from tests.stacks.test_config import load

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
GATE = LoadGate(concurrency=8, requests=64, max_tokens=256, ttft_p95_ms=800, itl_p95_ms=40)
METRICS_STATEMENT = {
    "Action": "cloudwatch:PutMetricData",
    "Condition": {"StringEquals": {"cloudwatch:namespace": "LlmEndpoint/SmokeTest"}},
    "Effect": "Allow",
    "Resource": "*",
}


def functions(template: Template) -> dict[str, int]:
    return {
        props["Properties"]["Handler"]: props["Properties"]["Timeout"]
        for props in template.find_resources("AWS::Lambda::Function").values()
        if props["Properties"].get("Handler") in ("index.on_event", "index.is_complete")
    }


def test_the_window_is_the_documented_formula():
    # 2 x ceil(64 / 8) x (0.8 s + 255 x 0.04 s) = 2 x 8 x 11 = 176 s
    assert burst_window_s(GATE) == 176
    # Stand-ins: 10 s TTFT, and 1000 / min rate (else 100 ms) ITL
    assert burst_window_s(LoadGate()) == 454  # 2 x 10 x (10 + 127 x 0.1)
    assert burst_window_s(LoadGate(min_output_tokens_per_s=50)) == math.ceil(2 * 10 * (10 + 127 / 50))


def test_without_a_gate_nothing_of_it_is_in_the_template():
    stack, _, smoke = make()
    t = Template.from_stack(stack)
    properties = smoke_resource(t)["Properties"]
    assert not [k for k in properties if k.startswith(("Load", "Target", "Metric"))]
    assert functions(t) == {"index.on_event": 300, "index.is_complete": 300}
    assert not [s for s in handler_statements(t) if "cloudwatch" in json.dumps(s)]
    assert properties["ServiceTimeout"] == str(600 + int(SERVICE_TIMEOUT_MARGIN.to_seconds()))
    with pytest.raises(ValueError, match="has no load gate"):
        smoke.load_figure("LoadTtftP95Ms")


def test_with_a_gate_its_properties_a_15_minute_run_and_one_metric_statement():
    stack, _, smoke = make(load=GATE)
    t = Template.from_stack(stack)
    properties = smoke_resource(t)["Properties"]
    assert {k: v for k, v in properties.items() if k.startswith(("Load", "Target", "Metric"))} == {
        "LoadConcurrency": "8",
        "LoadRequests": "64",
        "LoadMaxTokens": "256",
        "LoadWindowSeconds": "176",
        "TargetTtftP95Ms": "800",
        "TargetItlP95Ms": "40",
        "TargetMaxErrorRate": "0",  # not given: none allowed, written out
        "MetricDeployment": "Test/SmokeTest",
    }
    # ServiceTimeout: the budget, the margin, and the window.
    assert properties["ServiceTimeout"] == str(600 + SERVICE_TIMEOUT_MARGIN_S + 176)
    assert functions(t) == {"index.on_event": 300, "index.is_complete": 900}
    assert [s for s in handler_statements(t) if "cloudwatch" in json.dumps(s)] == [METRICS_STATEMENT]
    assert smoke.metric_dimensions == {"Deployment": "Test/SmokeTest"}
    assert re.fullmatch(r"\$\{Token\[.*\]\}", smoke.load_figure("LoadTtftP95Ms"))
    with pytest.raises(ValueError, match="not a load figure"):
        smoke.load_figure("Ttft")


def test_two_gates_in_a_stack_share_the_one_statement():
    stack, endpoint, _ = make(load=GATE)
    from constructs_lib import EndpointSmokeTest

    EndpointSmokeTest.for_endpoint(stack, "Second", endpoint, load=LoadGate(ttft_p95_ms=500), metric_deployment="b")
    t = Template.from_stack(stack)
    assert [s for s in handler_statements(t) if "cloudwatch" in json.dumps(s)] == [METRICS_STATEMENT]
    t.has_resource_properties("Custom::EndpointSmokeTest", Match.object_like({"MetricDeployment": "b"}))


def test_the_timeouts_fit_the_handler(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    handler = load_handler("endpoint_smoke_test")
    assert CHECKS_ATTEMPT_S == handler.ATTEMPT_RESERVE_S
    assert SERVICE_TIMEOUT_MARGIN.to_seconds() == SERVICE_TIMEOUT_MARGIN_S
    assert GATE_HANDLER_TIMEOUT.to_seconds() == 900 > HANDLER_TIMEOUT.to_seconds()  # Lambda's longest timeout
    # The longest window the rule lets through still leaves the handler its slack.
    assert GATE_HANDLER_TIMEOUT.to_seconds() > CHECKS_ATTEMPT_S + 640 + handler.LOAD_SLACK_S
    assert MAX_BUDGET.to_seconds() + SERVICE_TIMEOUT_MARGIN_S <= 3600


# --- the budget rule ----------------------------------------------------------------------------------------------


def test_a_burst_longer_than_one_handler_run_is_refused_naming_the_props_and_the_sum():
    slow = LoadGate(concurrency=1, requests=100, max_tokens=512, ttft_p95_ms=2000, itl_p95_ms=50)
    with pytest.raises(ValueError) as info:
        make(load=slow)
    text = info.value.problems[0]
    assert text.startswith("the load burst does not fit one run of the smoke-test handler")
    assert info.value.problems[1].startswith("the smoke test with its load burst does not fit CloudFormation's hour")
    window = burst_window_s(slow)  # 2 x 100 x (2 + 511 x 0.05) = 5510 s
    assert f"200 s for the checks + a window of {window:.0f} s" in text
    assert f"= {200 + window:.0f} s > 840 s" in text
    for name in ("load.requests=100", "load.concurrency=1", "load.max_tokens=512", "load.ttft_p95_ms"):
        assert name in text, name


def test_a_burst_past_cloudformations_hour_is_refused_with_the_budget():
    gate = LoadGate(concurrency=8, requests=64, max_tokens=512, ttft_p95_ms=2000, itl_p95_ms=40)
    window = burst_window_s(gate)  # 2 x 8 x (2 + 511 x 0.04) = 360 s: fits one handler run
    assert 200 + window <= 840
    make(load=gate, budget=cdk.Duration.minutes(45))  # 2700 + 480 + 360 = 3540 s: fits the hour
    with pytest.raises(ValueError) as info:
        make(
            load=LoadGate(concurrency=8, requests=64, max_tokens=512, ttft_p95_ms=10_000, itl_p95_ms=40),
            budget=cdk.Duration.minutes(45),
        )
    (problem,) = info.value.problems
    assert problem.startswith("the smoke test with its load burst does not fit CloudFormation's hour")
    assert re.search(r"budget=2700 s \+ 480 s \+ a window of 488 s .* = 3668 s > 3600 s", problem), problem


def test_the_budget_rule_at_its_edges():
    # Just fits one run: 200 + 640 = 840.
    gate = LoadGate(concurrency=1, requests=16, max_tokens=2, ttft_p95_ms=10_000, itl_p95_ms=10_000)  # 2x16x20
    assert burst_window_s(gate) == 640 and load_gate_problems(gate, 600) == []
    over = LoadGate(concurrency=1, requests=16, max_tokens=2, ttft_p95_ms=10_001, itl_p95_ms=10_000)
    assert burst_window_s(over) == 641 and len(load_gate_problems(over, 600)) == 1
    # Just fits the hour: 2480 + 480 + 640 = 3600.
    assert load_gate_problems(gate, 2480) == [] and len(load_gate_problems(gate, 2481)) == 1


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        (LoadGate(concurrency=0), r"load.concurrency=0: out of range; allowed: 1 to 64"),
        (LoadGate(concurrency=65, requests=65), r"load.concurrency=65: out of range"),
        (LoadGate(requests=1001), r"load.requests=1001: out of range; allowed: 1 to 1000"),
        (LoadGate(max_tokens=1), r"load.max_tokens=1: out of range; allowed: 2 to 4096"),
        (LoadGate(ttft_p95_ms=0), r"load.ttft_p95_ms=0: out of range; allowed: more than 0 to 600000"),
        (LoadGate(itl_p95_ms=float("nan")), r"load.itl_p95_ms=nan: expected a number"),
        (LoadGate(max_error_rate=1.5), r"load.max_error_rate=1.5: out of range; allowed: 0 to 1"),
        (LoadGate(concurrency=8, requests=4), r"load.requests=4 is below load.concurrency=8"),
    ],
)
def test_bad_gate_props_are_refused(gate, message):
    with pytest.raises(ValueError, match=message):
        make(load=gate)


def test_edges_of_the_props_are_accepted():
    make(load=LoadGate(concurrency=1, requests=1, max_tokens=2, ttft_p95_ms=1, max_error_rate=0))
    make(load=LoadGate(concurrency=64, requests=64, max_tokens=16, ttft_p95_ms=1000, itl_p95_ms=10, max_error_rate=1))


# --- context keys ---------------------------------------------------------------------------------------------------


def test_context_keys_make_the_gate_and_none_means_no_gate():
    assert load().load_gate is None
    gate = load(slo_ttft_p95_ms="500", slo_concurrency="8", slo_requests="32").load_gate
    assert gate == LoadGate(concurrency=8, requests=32, max_tokens=128, ttft_p95_ms=500.0)
    assert load(slo_max_error_rate="0").load_gate == LoadGate(max_error_rate=0.0)


def test_synth_refuses_a_burst_that_cannot_fit_naming_the_keys_and_the_sum():
    with pytest.raises(ConfigError) as info:
        load(slo_concurrency="1", slo_requests="200", slo_max_tokens="1024", slo_itl_p95_ms="30", smoke_budget_s="600")
    problem, hour = info.value.problems  # both sums are over
    assert problem.startswith("the load burst does not fit one run of the smoke-test handler: 200 s for the checks")
    for key in ("slo_requests=200", "slo_concurrency=1", "slo_max_tokens=1024", "slo_ttft_p95_ms", "slo_itl_p95_ms"):
        assert key in problem, key
    window = burst_window_s(LoadGate(concurrency=1, requests=200, max_tokens=1024, itl_p95_ms=30))
    assert f"= {200 + window:.0f} s > 840 s" in problem
    assert f"smoke_budget_s=600 s + 480 s + a window of {window:.0f} s" in hour
    with pytest.raises(ConfigError, match=r"smoke_budget_s=2700 s \+ 480 s \+ a window of \d+ s"):
        load(
            slo_ttft_p95_ms="20000", slo_requests="40", slo_concurrency="8", slo_max_tokens="256", smoke_budget_s="2700"
        )


def test_the_gate_needs_the_smoke_test():
    with pytest.raises(
        ConfigError, match=r"slo_ttft_p95_ms: the load gate runs in the smoke test, and smoke_test=false"
    ):
        load(slo_ttft_p95_ms="500", smoke_test="false")


def test_a_bad_key_is_reported_once_by_its_parser():
    with pytest.raises(ConfigError) as info:
        load(slo_concurrency="0", slo_requests="5000")
    assert sorted(p.split("=")[0] for p in info.value.problems) == ["slo_concurrency", "slo_requests"]
    assert set(CONTEXT_KEYS.values()) == {f"slo_{n}" for n in LoadGate.__dataclass_fields__} | {"smoke_budget_s"}


def test_the_stack_outputs_the_figures_only_with_the_gate():
    plain = stack_template().to_json()["Outputs"]
    assert not [k for k in plain if "Load" in k]
    outputs = stack_template(slo_ttft_p95_ms="500").to_json()["Outputs"]
    shown = {k: v["Value"]["Fn::GetAtt"][1] for k, v in outputs.items() if k.startswith("SmokeLoad")}
    assert shown == {
        f"Smoke{f}": f
        for f in ("LoadTtftP95Ms", "LoadItlP95Ms", "LoadOutputTokensPerSecondP5", "LoadE2eP95Ms", "LoadErrorRate")
    }
    assert set(shown.values()) <= set(LOAD_FIGURES)


# --- what ships, cdk-nag, cfn-lint -----------------------------------------------------------------------------


def test_the_asset_ships_the_gate_and_the_shared_figures(tmp_path):
    app = cdk.App(outdir=str(tmp_path))
    make(app=app, load=GATE)
    app.synth()
    (handler,) = [p.parent for p in tmp_path.glob("asset.*/index.py") if (p.parent / "endpoint_client").is_dir()]
    shipped = {p.relative_to(handler).as_posix() for p in handler.rglob("*.py")}
    assert {"smoke_load.py", "endpoint_client/load.py", "handler_kit/resources.py"} <= shipped
    # stdlib + boto3 only: nothing of the commands' packages (llmops) or outside libraries.
    imported = set()
    for path in handler.rglob("*.py"):
        imported |= set(re.findall(r"^(?:from|import) ([a-z_]+)", path.read_text(), re.MULTILINE))
    assert not imported & {"llmops", "numpy", "requests", "urllib3", "aws_cdk", "tqdm"}, imported


def gated_app(outdir: Path) -> cdk.App:
    app = cdk.App(outdir=str(outdir))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    make(app=app, load=GATE)
    return app


def test_cdk_nag_is_clean_with_the_gate_and_the_wildcard_is_acknowledged_beside_the_role(tmp_path):
    gated_app(tmp_path).synth()  # raises on an unacknowledged finding
    report = json.loads((tmp_path / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    (wildcard,) = [
        f
        for f in plugin["suppressedViolations"]
        if f["ruleName"] == "AwsSolutions-IAM5[Resource::*]"
        and any("EndpointSmokeTestProvider/Role" in c["constructPath"] for c in f["violatingConstructs"])
    ]
    assert "cloudwatch:namespace" in wildcard["reason"] and "no resource types" in wildcard["reason"]


@pytest.mark.skipif(not Path(CFN_LINT).exists(), reason="cfn-lint not installed")
def test_cfn_lint_is_clean_with_the_gate(tmp_path):
    gated_app(tmp_path).synth()
    templates = [str(p) for p in tmp_path.glob("*.template.json")]
    result = subprocess.run(
        [CFN_LINT, "--ignore-checks", "W3005", "--", *templates], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr
