"""The load gate in a fleet (issue 39, item 4): each deployment's own ``slo_*`` targets, its adapters gated with
them, and one metric dimension per deployment."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from tests.conftest import ROOT, build

pytestmark = pytest.mark.integration  # a whole fleet synthesized

FLEET = json.loads((ROOT / "tests" / "data" / "fleet.json").read_text())


def smoke_tests(app: cdk.App) -> dict[str, list[dict]]:
    stacks = {c.stack_name: c for c in app.node.children if isinstance(c, cdk.Stack)}
    return {
        name: [r["Properties"] for r in Template.from_stack(stack).find_resources("Custom::EndpointSmokeTest").values()]
        for name, stack in stacks.items()
    }


def test_each_deployment_has_its_own_targets_and_dimension_and_its_adapter_shares_them():
    fleet = {**FLEET, "small": {**FLEET["small"], "slo_ttft_p95_ms": 800, "slo_concurrency": 2, "slo_requests": 8}}
    found = smoke_tests(build(deployments=json.dumps(fleet), slo_itl_p95_ms="50"))
    shared = found["LlmEndpoint-shared"]
    assert len(shared) == 3  # small, its adapter, medium
    gated = [p for p in shared if p.get("TargetTtftP95Ms") == "800"]
    assert len(gated) == 2 and {p["LoadConcurrency"] for p in gated} == {"2"}  # small and its adapter
    (medium,) = [p for p in shared if p not in gated]
    assert "TargetTtftP95Ms" not in medium and medium["TargetItlP95Ms"] == "50"  # the top level's target only
    dimensions = [p["MetricDeployment"] for p in shared]
    assert len(set(dimensions)) == 3 and all(d.startswith("LlmEndpoint-shared/") for d in dimensions)
    assert {p["TargetItlP95Ms"] for props in found.values() for p in props} == {"50"}  # inherited everywhere


def test_a_fleet_without_slo_keys_has_no_gate():
    found = smoke_tests(build(deployments=json.dumps(FLEET)))
    assert not [k for props in found.values() for p in props for k in p if k.startswith(("Load", "Target"))]


def _with_adapter_slo(**slo) -> dict:
    small = FLEET["small"]
    adapters = {"sql": {**small["adapters"]["sql"], **slo}}
    return {
        **FLEET,
        "small": {**small, "slo_ttft_p95_ms": 800, "slo_concurrency": 2, "slo_requests": 8, "adapters": adapters},
    }


def test_an_adapter_may_have_its_own_targets_over_its_deployments():
    found = smoke_tests(build(deployments=json.dumps(_with_adapter_slo(slo_ttft_p95_ms=1500, slo_itl_p95_ms=60))))
    shared = found["LlmEndpoint-shared"]
    (adapter,) = [p for p in shared if p.get("TargetTtftP95Ms") == "1500"]
    assert adapter["TargetItlP95Ms"] == "60" and adapter["LoadConcurrency"] == "2"  # its own, then its deployment's
    (small,) = [p for p in shared if p.get("TargetTtftP95Ms") == "800"]
    assert "TargetItlP95Ms" not in small  # the adapter's targets stay the adapter's


@pytest.mark.parametrize(
    ("slo", "said"),
    [
        ({"slo_ttft_p95_ms": 0}, "deployments.small.adapters.sql.slo_ttft_p95_ms=0: "),
        ({"slo_concurrency": 65}, "deployments.small.adapters.sql.slo_concurrency=65: "),
        ({"slo_requests": 1}, "deployments.small.adapters.sql.slo_requests=1 is below slo_concurrency=2"),
        ({"slo_latency": 5}, "deployments.small.adapters.sql.slo_latency: unknown adapter key"),
    ],
)
def test_a_bad_adapter_target_is_refused_naming_it(slo, said):
    from constructs_lib.deployment.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        build(deployments=json.dumps(_with_adapter_slo(**slo)))
    assert any(p.startswith(said) for p in refused.value.problems), refused.value.problems


def test_adapter_targets_without_a_smoke_test_are_refused():
    from constructs_lib.deployment.config import ConfigError

    fleet = _with_adapter_slo(slo_itl_p95_ms=60)
    small = {k: v for k, v in fleet["small"].items() if not k.startswith("slo_")}
    with pytest.raises(ConfigError) as refused:
        build(deployments=json.dumps({**fleet, "small": {**small, "smoke_test": False}}))
    assert (
        "deployments.small.adapters.sql: slo_* keys gate the adapter's smoke test, and smoke_test=false leaves it out"
        in refused.value.problems
    )
