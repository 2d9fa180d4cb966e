"""Updates that fail and roll back, played with the harness for each custom resource (issue 11).

CloudFormation rolls a failed update back in reverse dependency order: the smoke test (which depends on
the endpoint) gets its rollback Update while the endpoint still runs the new config, and only then is
the endpoint put back (aws-cdk #17040; CloudFormation's custom resource request docs). The stack ends
``UPDATE_ROLLBACK_COMPLETE`` only if every rollback answer succeeds with every attribute it had.
"""

from __future__ import annotations

import re

import pytest

from tests import test_failure_paths as paths
from tests.fakes.fake_runtime import Reply
from tests.fakes.fixtures import fake_hub, s3  # noqa: F401 - fixtures the drivers use
from tests.harness import RESPONSE_LIMIT, fails_after, stuck
from tests.test_failure_paths import SMOKE_ENDPOINT, PreflightDriver, SmokeDriver, StagingDriver, assert_well_behaved

# The harness's fixtures, shared with test_failure_paths.
clock, deployed, driver, fake_sagemaker = paths.clock, paths.deployed, paths.driver, paths.fake_sagemaker

COMPONENT = "llm-component"


def _smoke_rollback(driver, *, component: bool, scaled_to_zero: bool = False):
    endpoint = driver.fake.endpoint(SMOKE_ENDPOINT)
    endpoint.config_name = "config-1"
    if component:
        endpoint.component = COMPONENT
    extra = {"InferenceComponentName": COMPONENT} if component else {}
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(EndpointConfigName="config-1", **extra))
    assert created.ok, created.reason

    # The update: the endpoint moves to config-2, whose model answers with a client error.
    endpoint.config_name = "config-2"
    endpoint.default = Reply.model_error(400, "unsupported chat template")
    updated = cfn.update(driver.properties(EndpointConfigName="config-2", **extra))
    assert not updated.ok and "chat completion" in updated.message
    assert cfn.status == "UPDATE_ROLLBACK_IN_PROGRESS"

    # The rollback reaches the smoke test first: config-2 still runs; a component may have no copy.
    if scaled_to_zero:
        endpoint.copies, endpoint.no_capacity_answers = 0, 10_000
    calls = len(driver.fake.invocations())
    rolled_back = cfn.rollback()
    endpoint.config_name, endpoint.default, endpoint.copies = "config-1", Reply(), 1  # then the endpoint's
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"
    assert rolled_back.physical_id == created.physical_id
    assert set(created.data) <= set(rolled_back.data)  # every attribute the restored template reads
    assert len(driver.fake.invocations()) == calls  # no model call, no describe
    assert rolled_back.elapsed_s < 60
    assert driver.fake.endpoint(SMOKE_ENDPOINT).config_name == "config-1"
    assert_well_behaved(cfn, created, rolled_back)
    # A later update runs the checks again.
    again = cfn.update(driver.properties(EndpointConfigName="config-1", MaxTokens="16", **extra))
    assert again.ok and again.data["LatencyMs"].isdigit(), again.reason


@pytest.mark.parametrize("driver", [pytest.param(SmokeDriver, id="endpoint_smoke_test")], indirect=True)
def test_smoke_test_rollback_standard_mode(driver):
    _smoke_rollback(driver, component=False)


@pytest.mark.parametrize("driver", [pytest.param(SmokeDriver, id="endpoint_smoke_test")], indirect=True)
def test_smoke_test_rollback_component_mode(driver):
    _smoke_rollback(driver, component=True)


@pytest.mark.parametrize("driver", [pytest.param(SmokeDriver, id="endpoint_smoke_test")], indirect=True)
def test_smoke_test_rollback_component_scaled_to_zero(driver):
    _smoke_rollback(driver, component=True, scaled_to_zero=True)


@pytest.mark.parametrize("driver", [pytest.param(SmokeDriver, id="endpoint_smoke_test")], indirect=True)
def test_smoke_test_runs_when_the_stack_cannot_be_described(driver):
    """DescribeStacks denied: the update is treated as a user's, and the checks run as before."""

    class Denied:
        status = "UPDATE_IN_PROGRESS"

        def describe_stacks(self, StackName):
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "DescribeStacks")

    driver.module.CLOUDFORMATION = Denied()
    cfn = driver.cloudformation()
    assert cfn.create(driver.properties()).ok
    updated = cfn.update(driver.properties(MaxTokens="16"))
    assert updated.ok and updated.data["LatencyMs"].isdigit()


@pytest.mark.parametrize("driver", [pytest.param(PreflightDriver, id="deployment_preflight")], indirect=True)
def test_preflight_rollback_succeeds_with_its_data_when_quotas_are_throttled(driver):
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    updated = cfn.update(driver.properties(MaxModelLen="99999999"))  # does not fit: the update fails
    assert not updated.ok and "[memory]" in updated.message
    driver.quotas.throttle("ListServiceQuotas")  # every call from now on
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"
    assert rolled_back.physical_id == created.physical_id
    assert set(rolled_back.data) == set(created.data)
    for key in ("MaxModelLen", "WeightsGiBPerGpu", "MaxModelLenThatFits", "InstanceType"):
        assert rolled_back.data[key] == created.data[key]  # the checks' figures for the old properties
    assert "rollback: 1 problem(s) not enforced (quota)" in rolled_back.data["Notes"]
    assert_well_behaved(cfn, created, rolled_back)


@pytest.mark.parametrize("driver", [pytest.param(PreflightDriver, id="deployment_preflight")], indirect=True)
def test_preflight_plain_update_still_fails_on_throttling(driver):
    cfn = driver.cloudformation()
    assert cfn.create(driver.properties()).ok
    driver.quotas.throttle("ListServiceQuotas")
    updated = cfn.update(driver.changed_properties())
    assert not updated.ok and "[quota] Service Quotas throttled" in updated.message


# --- staging ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_failure_shows_the_workers_exit_message_first(driver):
    """SageMaker returns /opt/ml/output/message as ExitMessage; FailureReason is only its own summary."""
    worker = "3 of 4 files failed; the others are staged and a rerun copies only what is missing"
    driver.jobs.script = fails_after(2, "AlgorithmError: see job logs", exit_message=worker)
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert not created.ok
    assert re.search(r"Failed: 3 of 4 files failed.* \| SageMaker: AlgorithmError: see job logs", created.message)
    assert len(created.body) < RESPONSE_LIMIT


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_failure_with_the_same_text_twice_shows_it_once(driver):
    driver.jobs.script = fails_after(2, "ClientError: gated repository", exit_message="ClientError: gated repository")
    created = driver.cloudformation().create(driver.properties())
    assert created.message.count("gated repository") == 1


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_a_job_that_cannot_be_watched_is_handed_to_the_wait_condition(driver):
    """Throttled or 5xx for the whole window: the job runs on, and its EventBridge signal ends the wait."""
    driver.jobs.script = stuck
    driver.jobs.inject("DescribeProcessingJob", "ServiceUnavailable", "try later", times=None)
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    assert created.data["JobName"] in driver.running()
    assert driver.handoff_s <= created.elapsed_s <= driver.handoff_s + driver.timeouts.query_interval_s
    assert_well_behaved(cfn, created)


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_a_job_briefly_unknown_after_create_is_followed(driver):
    """DescribeProcessingJob right after CreateProcessingJob may not find the job yet."""
    driver.jobs.inject(
        "DescribeProcessingJob", "ValidationException", "Could not find requested job with name x", times=2
    )
    created = driver.cloudformation().create(driver.properties())
    assert created.ok and created.polls >= 3, created.reason
