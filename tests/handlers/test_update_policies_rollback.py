"""Updates guarded by alarms, played with the harness (issue 16): what the stack sees when SageMaker rolls an
update back by itself, and the quota a blue/green update needs.

When an alarm fires during a blue/green baking period (standard mode) or a rolling batch (component mode),
SageMaker moves traffic back to the old fleet or copies (deployment-guardrails-configuration). The endpoint
(component) is then InService on the *old* config (model). If CloudFormation reports the endpoint updated,
the smoke test that follows must catch it, fail the update, and then answer the stack's rollback without
running its checks, so the stack ends UPDATE_ROLLBACK_COMPLETE on the configuration that last passed.
"""

from __future__ import annotations

import pytest

from tests.fakes.fixtures import fake_hub, s3  # noqa: F401 - fixtures the drivers use
from tests.handlers import test_failure_paths as paths
from tests.handlers.test_failure_paths import SMOKE_ENDPOINT, PreflightDriver, SmokeDriver, assert_well_behaved

clock, deployed, driver, fake_sagemaker = paths.clock, paths.deployed, paths.driver, paths.fake_sagemaker

COMPONENT = "llm-component"
SMOKE = pytest.param(SmokeDriver, id="endpoint_smoke_test")
PREFLIGHT = pytest.param(PreflightDriver, id="deployment_preflight")


def _rolled_back_by_sagemaker(driver, *, component: bool) -> None:
    endpoint = driver.fake.endpoint(SMOKE_ENDPOINT)
    endpoint.config_name = "config-1"
    extra = {}
    if component:
        endpoint.component, endpoint.component_model = COMPONENT, "model-1"
        extra = {"InferenceComponentName": COMPONENT}
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(EndpointConfigName="config-1", **extra, **_model(component, "model-1")))
    assert created.ok, created.reason

    # The update: SageMaker starts the new config (model), an alarm fires while it bakes, and SageMaker puts
    # the old one back. The endpoint (component) is InService again, on the old config (model).
    new = {"EndpointConfigName": "config-1" if component else "config-2", **_model(component, "model-2")}
    calls = len(driver.fake.invocations())
    updated = cfn.update(driver.properties(**new, **extra))
    assert not updated.ok
    if component:
        assert "inference component model: the component runs model model-1, but this deployment created model-2" in (
            updated.message
        )
    else:
        assert "endpoint config: the endpoint runs endpoint config config-1, but this deployment created config-2" in (
            updated.message
        )
    assert "SageMaker rolled the update back" in updated.message
    assert not [c for c in driver.fake.invocations()[calls:] if c.kind.startswith("invocations")]  # no model call
    assert cfn.status == "UPDATE_ROLLBACK_IN_PROGRESS"

    # CloudFormation's rollback Update (old properties) reaches the smoke test: it answers without checks.
    calls = len(driver.fake.invocations())
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"
    assert rolled_back.physical_id == created.physical_id
    assert set(created.data) <= set(rolled_back.data)
    assert len(driver.fake.invocations()) == calls
    assert_well_behaved(cfn, created, updated, rolled_back)


def _model(component: bool, name: str) -> dict[str, str]:
    return {"ModelName": name} if component else {}


@pytest.mark.parametrize("driver", [SMOKE], indirect=True)
def test_blue_green_update_rolled_back_by_an_alarm_fails_the_smoke_test_and_the_stack_rolls_back(driver):
    _rolled_back_by_sagemaker(driver, component=False)


@pytest.mark.parametrize("driver", [SMOKE], indirect=True)
def test_rolling_component_update_rolled_back_by_an_alarm_fails_the_smoke_test_and_the_stack_rolls_back(driver):
    _rolled_back_by_sagemaker(driver, component=True)


@pytest.mark.parametrize("driver", [SMOKE], indirect=True)
def test_a_component_on_the_model_this_deploy_created_passes(driver):
    endpoint = driver.fake.endpoint(SMOKE_ENDPOINT)
    endpoint.component, endpoint.component_model = COMPONENT, "model-2"
    created = driver.cloudformation().create(driver.properties(InferenceComponentName=COMPONENT, ModelName="model-2"))
    assert created.ok, created.reason


@pytest.mark.parametrize("driver", [PREFLIGHT], indirect=True)
def test_quota_counts_a_blue_green_updates_second_fleet_and_its_rollback_succeeds(driver):
    """Quota 3 of ml.g6.xlarge: 1 instance (+1 during an update) fits; 2 instances (+2) do not."""
    driver.quotas.applied["ml.g6.xlarge for endpoint usage"] = 3
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(InstancesNeeded="1", UpdateInstances="1"))
    assert created.ok, created.reason
    updated = cfn.update(driver.properties(InstancesNeeded="2", UpdateInstances="2"))
    assert not updated.ok
    assert (
        "needs 4 instance(s) (2 serving + 2 for an update's new instances: a blue/green fleet or a rolling batch)"
        in updated.message
    )
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"
    assert_well_behaved(cfn, created, updated, rolled_back)


def _config_and_smoke_config(**context: str) -> tuple[str, dict]:
    """The synthesized EndpointConfig's logical ID and what the smoke test is given as its EndpointConfigName."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from tests.conftest import build

    app = build(**context)
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    resources = Template.from_stack(stack).to_json()["Resources"]
    (config,) = [k for k, r in resources.items() if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    (smoke,) = [r for r in resources.values() if r["Type"] == "Custom::EndpointSmokeTest"]
    return config, smoke["Properties"]["EndpointConfigName"]


@pytest.mark.parametrize("driver", [SMOKE], indirect=True)
def test_a_change_to_the_update_policy_alone_deploys_a_new_endpoint_config(driver):
    """Issue 28 item 4: UpdateEndpoint needs a new EndpointConfig, so a change to what only the Endpoint carries
    (here the bake, update_wait_s) gives the config a new logical ID: CloudFormation creates a new config (a new
    generated name), updates the endpoint to it, and the smoke test checks the endpoint runs it. Played:
    create -> policy-only update -> update rolled back by SageMaker's alarm -> stack rollback -> delete ->
    redeploy."""
    first, first_smoke = _config_and_smoke_config()
    second, second_smoke = _config_and_smoke_config(update_wait_s="120")
    assert first != second and first_smoke == {"Fn::GetAtt": [first, "EndpointConfigName"]}
    assert second_smoke == {"Fn::GetAtt": [second, "EndpointConfigName"]}
    assert _config_and_smoke_config(update_wait_s="120")[0] == second  # deterministic: no change, no new config

    endpoint = driver.fake.endpoint(SMOKE_ENDPOINT)
    endpoint.config_name = "config-1"
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(EndpointConfigName="config-1"))
    assert created.ok, created.reason

    # The policy-only update: the endpoint moves to the new config (SageMaker's blue/green with the new bake).
    endpoint.config_name = "config-2"
    updated = cfn.update(driver.properties(EndpointConfigName="config-2"))
    assert updated.ok, updated.reason

    # The next policy-only update is rolled back by an alarm inside SageMaker: the endpoint stays on config-2.
    failed = cfn.update(driver.properties(EndpointConfigName="config-3"))
    assert not failed.ok and "SageMaker rolled the update back" in failed.message
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"

    deleted = cfn.delete()
    assert deleted.ok, deleted.reason
    again = driver.cloudformation().create(driver.properties(EndpointConfigName="config-2"))
    assert again.ok, again.reason
    assert_well_behaved(cfn, created, updated, failed, rolled_back, deleted)


def _preflight_sizes(**context: str) -> tuple[dict[str, str], dict]:
    """What the synthesized stack gives the preflight (InstancesNeeded, UpdateInstances) and its rolling policy."""
    from tests.conftest import stack_template

    resources = stack_template(**context).to_json()["Resources"].values()
    (preflight,) = [r["Properties"] for r in resources if r["Type"] == "Custom::DeploymentPreflight"]
    (endpoint,) = [r["Properties"] for r in resources if r["Type"] == "AWS::SageMaker::Endpoint"]
    sizes = {k: preflight[k] for k in ("InstancesNeeded", "UpdateInstances")}
    return sizes, endpoint["DeploymentConfig"]["RollingUpdatePolicy"]


@pytest.mark.parametrize("driver", [PREFLIGHT], indirect=True)
def test_a_reserved_rolling_update_that_rolls_back_fits_its_batch_and_the_stack_rolls_back(driver):
    """Issue 35 item 1: 7 instances on a reservation of 10, 3 per batch. The rollback returns the old fleet 3 at a
    time (RollbackMaximumBatchSize; absent it is 100 %, 7 beside the new ones: botocore RollingUpdatePolicy), so the
    update and its rollback both need 10. Played: create -> update (fits 10) -> update with a quota of 9 refused ->
    stack rollback -> delete -> redeploy."""
    arn = "arn:aws:sagemaker:us-east-1:123456789012:ml-reservation/r1"
    sizes, rolling = _preflight_sizes(
        instance_count="7",
        update_policy="rolling",
        update_step_size="3",
        capacity_reservation_arn=arn,
        capacity_reservation_instances="10",
    )
    assert sizes == {"InstancesNeeded": "7", "UpdateInstances": "3"}
    assert rolling["RollbackMaximumBatchSize"] == {"Type": "INSTANCE_COUNT", "Value": 3}
    driver.quotas.applied["ml.g6.xlarge for endpoint usage"] = 10
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(**sizes))
    assert created.ok, created.reason
    updated = cfn.update(driver.properties(**sizes, MaxModelLen="16384"))
    assert updated.ok, updated.reason
    driver.quotas.applied["ml.g6.xlarge for endpoint usage"] = 9
    failed = cfn.update(driver.properties(**sizes, MaxModelLen="8192"))
    assert not failed.ok
    assert "needs 10 instance(s) (7 serving + 3 for an update's new instances" in failed.message
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"
    deleted = cfn.delete()
    assert deleted.ok, deleted.reason
    driver.quotas.applied["ml.g6.xlarge for endpoint usage"] = 10
    again = driver.cloudformation().create(driver.properties(**sizes))
    assert again.ok, again.reason
    assert_well_behaved(cfn, created, updated, failed, rolled_back, deleted)


@pytest.mark.parametrize("driver", [PREFLIGHT], indirect=True)
def test_an_update_that_starts_at_the_autoscaled_maximum_is_counted_and_timed_from_it(driver):
    """Issue 35 item 2: instance_count=2 max_instances=10. RetainAllVariantProperties keeps what autoscaling left, so
    an update may start at 10: its timeout covers 10 batches (past 28800 s: the API's maximum, 28800) and the quota
    10 serving + 1 new. Played at the maximum: create (quota 11) -> update with a quota of 10 refused -> rollback."""
    sizes, rolling = _preflight_sizes(instance_count="2", max_instances="10", update_policy="rolling")
    assert sizes == {"InstancesNeeded": "10", "UpdateInstances": "1"}
    assert rolling["MaximumExecutionTimeoutInSeconds"] == 28800  # 10 x (300 + 2400 + 600), at most 28800
    driver.quotas.applied["ml.g6.xlarge for endpoint usage"] = 11
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(**sizes))
    assert created.ok, created.reason
    driver.quotas.applied["ml.g6.xlarge for endpoint usage"] = 10
    failed = cfn.update(driver.properties(**sizes, MaxModelLen="16384"))
    assert not failed.ok
    assert "needs 11 instance(s) (10 serving + 1 for an update's new instances" in failed.message
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"
    assert_well_behaved(cfn, created, failed, rolled_back)
