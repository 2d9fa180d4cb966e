"""Updates that fail and roll back, played with the harness for each custom resource (issue 11).

CloudFormation rolls a failed update back in reverse dependency order: the smoke test (which depends on
the endpoint) gets its rollback Update while the endpoint still runs the new config, and only then is
the endpoint put back (aws-cdk #17040; CloudFormation's custom resource request docs). The stack ends
``UPDATE_ROLLBACK_COMPLETE`` only if every rollback answer succeeds with every attribute it had.
"""

from __future__ import annotations

import re

import pytest

from tests.fakes.fake_runtime import Reply
from tests.fakes.fixtures import BUCKET, fake_hub, s3  # noqa: F401 - fixtures the drivers use
from tests.handlers import test_failure_paths as paths
from tests.handlers.test_failure_paths import (
    FILES,
    REPO,
    SMOKE_ENDPOINT,
    ImageCheckDriver,
    PreflightDriver,
    SmokeDriver,
    StagingDriver,
    assert_well_behaved,
)
from tests.harness import RESPONSE_LIMIT, Stacks, fails_after, stuck

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

    driver.module._clients["cloudformation"] = Denied()
    cfn = driver.cloudformation()
    assert cfn.create(driver.properties()).ok
    updated = cfn.update(driver.properties(MaxTokens="16"))
    assert updated.ok and updated.data["LatencyMs"].isdigit()


@pytest.mark.parametrize("driver", [pytest.param(PreflightDriver, id="deployment_preflight")], indirect=True)
def test_preflight_rollback_succeeds_with_its_data_when_quotas_are_throttled(driver):
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    updated = cfn.update(driver.properties(MaxModelLen="99999999"))  # past the engine's limit: the update fails
    assert not updated.ok and "[context]" in updated.message
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


@pytest.mark.parametrize("driver", [pytest.param(PreflightDriver, id="deployment_preflight")], indirect=True)
def test_preflight_checkpoint_code_sequence_update_refused_rollback_delete_redeploy_opted_in(driver):
    """Issue 23: an LMI settings file appearing in the prefix fails the update; the rollback (old properties, the
    file still there) answers from the old state; delete; a redeploy that opts in deploys it with a note."""
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    driver.s3.client.put_object(
        Bucket=BUCKET, Key=paths.PREFLIGHT_PREFIX + "serving.properties", Body=b"option.entryPoint=handler.py\n"
    )
    updated = cfn.update(driver.changed_properties())
    assert not updated.ok and "[checkpoint-code]" in updated.message and "serving.properties" in updated.message
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE" and rolled_back.physical_id == created.physical_id
    assert "rollback: 1 problem(s) not enforced (checkpoint-code)" in rolled_back.data["Notes"]
    assert cfn.delete().ok
    again = driver.cloudformation().create(driver.properties(AllowCheckpointCode="true"))
    assert again.ok, again.reason
    assert "holds serving.properties, which the serving container may run" in again.data["Notes"]


@pytest.mark.parametrize("driver", [pytest.param(PreflightDriver, id="deployment_preflight")], indirect=True)
def test_preflight_context_past_the_engine_limit_update_refused_rollback_delete_redeploy_at_the_default(driver):
    """Issue 26: a max_model_len the memory allows but the engine refuses (past config.json's 32,768 positions, no
    rope scaling) fails the update before any GPU starts, where it was a note; the rollback answers from the old
    state; delete; a redeploy without max_model_len gets the engine's own limit."""
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(MaxModelLen="32768"))
    assert created.ok, created.reason
    updated = cfn.update(driver.properties(MaxModelLen="65536"))
    # Its own check (memory fits at the longest context the engine accepts): one problem, named context.
    assert not updated.ok and "1 problem(s)" in updated.message and "[context]" in updated.message
    assert "[memory]" not in updated.message
    assert "max_model_len=65536: above the longest context the engine accepts for this model, 32,768" in updated.message
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE" and rolled_back.physical_id == created.physical_id
    assert rolled_back.data["MaxModelLen"] == "32768"
    assert cfn.delete().ok
    again = driver.cloudformation().create(driver.properties(MaxModelLen=""))
    assert again.ok, again.reason
    assert again.data["MaxModelLen"] == "32768"


@pytest.mark.parametrize("driver", [pytest.param(PreflightDriver, id="deployment_preflight")], indirect=True)
def test_preflight_long_context_opt_in_update_then_refused_update_rollback_delete_redeploy(driver):
    """LongContext (VLLM_ALLOW_LONG_MAX_MODEL_LEN in container_env, vLLM's own opt-in) across a deploy sequence: an
    update that sets it passes past the model's 32,768 positions; the next update drops it and is refused; the
    rollback answers from the state that had it; delete; a redeploy with it passes again."""
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(MaxModelLen="32768"))
    assert created.ok, created.reason
    opted_in = cfn.update(driver.properties(MaxModelLen="65536", LongContext="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"))
    assert opted_in.ok, opted_in.reason
    assert opted_in.data["MaxModelLen"] == "65536"
    dropped = cfn.update(driver.properties(MaxModelLen="65536"))
    assert not dropped.ok and "[context]" in dropped.message
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE" and rolled_back.data["MaxModelLen"] == "65536"
    assert cfn.delete().ok
    again = driver.cloudformation().create(
        driver.properties(MaxModelLen="65536", LongContext="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    )
    assert again.ok, again.reason


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


def _job_name_prefix(**props) -> str:
    """The job-name prefix StagedCheckpoint gives the construct ``Handlers/Checkpoint`` with ``props``."""
    import aws_cdk as cdk

    from constructs_lib.staged_checkpoint import StagedCheckpoint
    from tests.conftest import default_context

    stack = cdk.Stack(cdk.App(context=default_context()), "Handlers")
    return StagedCheckpoint(stack, "Checkpoint", repo_id=REPO, **props).job_name_prefix


@pytest.fixture(scope="module")
def sibling_prefixes() -> dict[str, str]:
    """The prefixes one construct gets for its properties before and after a change, as the construct makes them:
    ``hfstage-<8 hex of the construct's path>-<10 hex of its properties>-``, so neither extends the other."""
    prefixes = {
        "created": _job_name_prefix(),
        "more-instances": _job_name_prefix(max_instances=8),
        "new-revision": _job_name_prefix(revision="0123456789abcdef0123456789abcdef01234567"),
    }
    assert len(set(prefixes.values())) == 3 and len({len(p) for p in prefixes.values()}) == 1
    assert len({p[: len("hfstage-01234567-")] for p in prefixes.values()}) == 1  # one construct: one family
    return prefixes


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_a_rolled_back_update_leaves_no_job_running(driver, sibling_prefixes):
    """New patterns, same revision (same prefix): the update's job copies under the live prefix until stopped."""
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(JobNamePrefix=sibling_prefixes["created"]))
    assert created.ok, created.reason
    driver.jobs.script = stuck
    patterns = ["original/*", "tokenizer.json"]  # another selection: the manifest no longer matches
    updated = cfn.update(driver.properties(Exclude=patterns, JobNamePrefix=sibling_prefixes["more-instances"]))
    assert updated.ok and updated.physical_id == created.physical_id
    assert driver.running() == [updated.data["JobName"]]  # handed to the wait condition
    rolled_back = cfn.rollback()  # a later resource failed
    assert rolled_back.ok and cfn.status == "UPDATE_ROLLBACK_COMPLETE", rolled_back.reason
    assert driver.running() == []
    assert_well_behaved(cfn, created, updated, rolled_back)


# Both jobs running at rollback, under sibling prefixes: the restored properties' job and the failed update's.
# Which of the two is restored must not matter (a prefix test that matched its sibling would stop the wrong one).
ORDERS = [("created", "more-instances"), ("more-instances", "created")]


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
@pytest.mark.parametrize(("restored", "failed"), ORDERS, ids=["restore-first", "restore-second"])
def test_staging_rollback_stops_exactly_the_failed_updates_job(driver, sibling_prefixes, restored, failed):
    driver.jobs.script = stuck
    cfn = driver.cloudformation()
    restored_props = driver.properties(MaxInstances="4", JobNamePrefix=sibling_prefixes[restored])
    failed_props = driver.properties(MaxInstances="8", JobNamePrefix=sibling_prefixes[failed])
    created = cfn.create(restored_props)  # still copying, handed to its wait condition
    updated = cfn.update(failed_props)  # an in-place change: nothing staged yet, so a second job
    assert created.ok and updated.ok and updated.physical_id == created.physical_id, updated.reason
    restored_job, failed_job = created.data["JobName"], updated.data["JobName"]
    assert restored_job.startswith(sibling_prefixes[restored]) and failed_job.startswith(sibling_prefixes[failed])
    assert sorted(driver.running()) == sorted([restored_job, failed_job])

    rolled_back = cfn.rollback()  # a later resource failed
    assert rolled_back.ok and cfn.status == "UPDATE_ROLLBACK_COMPLETE", rolled_back.reason
    assert driver.jobs.stopped == [failed_job]
    assert driver.running() == [restored_job]
    assert_well_behaved(cfn, created, updated, rolled_back)


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
@pytest.mark.parametrize(("replaced", "new"), [("created", "new-revision"), ("new-revision", "created")])
def test_staging_cleanup_of_a_replaced_revision_stops_only_its_own_job(driver, sibling_prefixes, replaced, new):
    """A new revision replaces the resource; CloudFormation's Delete of the old one stops the old job alone."""
    driver.jobs.script = stuck
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(JobNamePrefix=sibling_prefixes[replaced]))
    driver.hub.add_repo(REPO, {**FILES, "README.md": b"# another commit"})
    sha = driver.hub.repos[REPO].sha
    updated = cfn.update(driver.properties(Revision=sha, JobNamePrefix=sibling_prefixes[new]))
    assert created.ok and updated.ok and updated.physical_id != created.physical_id, updated.reason
    assert updated.cleanup is not None and updated.cleanup.ok, updated.cleanup
    assert driver.jobs.stopped == [created.data["JobName"]]
    assert driver.running() == [updated.data["JobName"]]


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_rollback_spares_the_restored_properties_job(driver):
    driver.jobs.script = stuck
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())  # still copying, handed to its wait condition
    assert created.ok
    assert not cfn.update(driver.properties(RepoId="acme/not-there")).ok  # fails in on_event: no job
    assert cfn.rollback().ok
    assert driver.running() == [created.data["JobName"]]


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_an_unrelated_change_restages_nothing_and_needs_no_hub(driver):
    """A new worker image or instance type: the branch is not resolved again, the served commit stays."""
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    driver.hub.add_repo(REPO, {**FILES, "README.md": b"# main moved on"})  # main now names another commit
    jobs = driver.jobs.created
    updated = cfn.update(driver.properties(InstanceType="ml.m5.4xlarge", ImageUri="example.com/staging:2"))
    assert updated.ok, updated.reason
    assert updated.physical_id == created.physical_id and updated.cleanup is None
    assert updated.data["Revision"] == created.data["Revision"]
    assert updated.data["Files"] == created.data["Files"] and updated.data["TotalBytes"] == created.data["TotalBytes"]
    assert driver.jobs.created == jobs  # no job
    assert_well_behaved(cfn, created, updated)


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_new_patterns_still_stage(driver):
    cfn = driver.cloudformation()
    assert cfn.create(driver.properties()).ok
    jobs = driver.jobs.created
    updated = cfn.update(driver.properties(Exclude=["original/*", "tokenizer.json"]))
    assert updated.ok and driver.jobs.created == jobs + 1, updated.reason


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_an_unrelated_change_restages_what_s3_lost(driver):
    """The prefix no longer matches its manifest: the update plans with the Hub and copies again."""
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok
    prefix = created.data["Prefix"]
    driver.s3.client.delete_object(Bucket=BUCKET, Key=prefix + "config.json")
    jobs = driver.jobs.created
    updated = cfn.update(driver.properties(InstanceType="ml.m5.4xlarge"))
    assert updated.ok and driver.jobs.created == jobs + 1, updated.reason


@pytest.fixture
def receiver():
    from tests.handlers.test_staging_handler import SignalReceiver

    r = SignalReceiver()
    yield r
    r.close()


def _lambda_async(function, on_failure, event: dict, *, retries: int = 2) -> int:
    """Lambda's asynchronous invocation: the event, then ``retries`` more on a function error, then the
    on-failure destination's invocation record (Lambda developer guide, async error handling)."""
    for attempt in range(1, retries + 2):
        try:
            function(event, None)
            return attempt
        except Exception as e:
            error = {"errorType": type(e).__name__, "errorMessage": str(e)}
    record = {
        "version": "1.0",
        "requestContext": {"condition": "RetriesExhausted", "approximateInvokeCount": retries + 1},
        "requestPayload": event,
        "responseContext": {"statusCode": 200, "functionError": "Unhandled"},
        "responsePayload": error,
    }
    on_failure(record, None)
    return retries + 1


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_a_failing_signal_function_fails_the_wait_with_its_error(driver, receiver, sibling_prefixes):
    """The signal function throws (its role cannot describe the job): the wait ends in minutes, with why."""
    driver.jobs.script = stuck
    receiver.attach(driver.module)
    prefix = sibling_prefixes["created"]
    created = driver.cloudformation().create(driver.properties(JobNamePrefix=prefix))
    name = created.data["JobName"]
    driver.jobs.jobs[name].status = "Failed"
    driver.jobs.deny("DescribeProcessingJob", times=None)
    event = {
        "WaitHandle": receiver.url,
        "JobNamePrefix": prefix,
        "Event": {"detail": {"ProcessingJobName": name, "ProcessingJobStatus": "Failed"}},
    }
    attempts = _lambda_async(driver.module.on_job_state_change, driver.module.on_signal_failure, event)
    assert attempts == 3 and len(receiver.signals) == 1
    signal = receiver.signals[0]
    assert signal["Status"] == "FAILURE" and signal["UniqueId"] == name
    assert f"failed on job {name} (RetriesExhausted, 3 attempt(s)): ClientError" in signal["Reason"]
    assert "sagemaker:DescribeProcessingJob" in signal["Reason"]


def test_the_signal_failure_record_of_another_checkpoint_is_ignored(receiver):
    from tests.conftest import load_lambda

    module = load_lambda("staged_checkpoint")
    payload = {"WaitHandle": receiver.url, "JobNamePrefix": "hfstage-aaaa-", "Event": {"detail": {}}}
    assert module.on_signal_failure({"requestPayload": payload}) == {"signalled": False}
    assert receiver.signals == []


def test_the_signal_function_retries_twice_then_signals_failure(deployed):
    from aws_cdk.assertions import Match, Template

    t = Template.from_json(deployed)
    functions = t.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": "index.on_signal_failure"}})
    (failure_id,) = functions
    t.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "MaximumRetryAttempts": 2,
            "MaximumEventAgeInSeconds": 7200,
            "DestinationConfig": {
                "OnFailure": {"Destination": {"Fn::GetAtt": [failure_id, "Arn"]}},
            },
            "FunctionName": {"Ref": Match.string_like_regexp("^StagingSignalFunction")},
        },
    )


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_clamps_the_job_to_the_processing_quota(driver):
    driver.quotas.applied["ml.m5.2xlarge for processing job usage"] = 2
    created = driver.cloudformation().create(driver.properties(MaxInstances="8", BytesPerInstance="1"))
    assert created.ok, created.reason
    (job,) = driver.jobs.jobs.values()
    assert job.request["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 2  # 4 files, quota 2


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_fails_in_seconds_naming_a_zero_processing_quota(driver):
    driver.quotas.defaults["ml.m5.2xlarge for processing job usage"] = 0
    created = driver.cloudformation().create(driver.properties())
    assert not created.ok and driver.jobs.created == 0
    assert "'ml.m5.2xlarge for processing job usage' (L-" in created.message and "is 0" in created.message
    assert created.elapsed_s < 60


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_an_unreadable_quota_leaves_the_count_to_sagemaker(driver):
    driver.quotas.deny("ListServiceQuotas", times=None)
    created = driver.cloudformation().create(driver.properties(MaxInstances="8", BytesPerInstance="1"))
    assert created.ok, created.reason
    (job,) = driver.jobs.jobs.values()
    assert job.request["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 4


# --- API limits at synth ------------------------------------------------------------------------------


def test_too_many_patterns_fail_cdk_synth_naming_the_keys_and_the_limit():
    import json

    from tests.conftest import build

    # The job's exclude list is the user's (original/*) plus the four files a container would run: 46 + 5.
    patterns = [f"shard-{i:03d}-*.safetensors" for i in range(46)]
    with pytest.raises(
        ValueError,
        match=r"include and exclude hold 51 patterns \(46 \+ 5\); allowed: at most 45 .*100 container arguments",
    ):
        build(include=json.dumps(patterns))
    # 40 + 5 fit exactly: the count is the job's, not only what the user wrote.
    build(include=json.dumps(patterns[:40]))


def test_a_pattern_or_prefix_too_long_for_the_job_fails_at_synth():
    import aws_cdk as cdk

    from constructs_lib.staged_checkpoint import StagedCheckpoint

    stack = cdk.Stack(cdk.App(), "Limits")
    with pytest.raises(ValueError, match=r"exclude pattern .* is 300 characters; allowed: at most 256"):
        StagedCheckpoint(stack, "A", repo_id="acme/tiny-llm", exclude=["x" * 300])
    with pytest.raises(ValueError, match=r"prefix=.* makes the revision's S3 URI 2\d\d characters .* at most 256"):
        StagedCheckpoint(stack, "B", repo_id="acme/tiny-llm", prefix="p" * 140 + "/")


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_the_synth_limit_is_what_create_processing_job_takes(driver):
    """45 patterns with a token secret fit the 100 arguments (the fake checks the model's maxima); 46 do not."""
    from constructs_lib.staged_checkpoint import MAX_PATTERNS

    model = driver.module.client("sagemaker").meta.service_model.shape_for("ContainerArguments")
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-AbCdEf"

    def arguments(count: int) -> list[str]:
        props = driver.properties(Include=[f"*.ext{i}" for i in range(count)], Exclude=[], TokenSecretArn=secret)
        return driver.module.worker_arguments(driver.module.Settings.from_properties(props), "0" * 40)

    assert len(arguments(MAX_PATTERNS)) <= model.metadata["max"] == 100 < len(arguments(MAX_PATTERNS + 1))


# --- response size ------------------------------------------------------------------------------------

HUGE = "User: arn:aws:sts::123456789012:assumed-role/handler is not authorized; context: " + "é" * 20_000


def _huge_fault(driver) -> str:
    """Inject an error with a huge message; what the failure's reason must say."""
    if isinstance(driver, StagingDriver):
        driver.jobs.inject("DescribeProcessingJob", "AccessDeniedException", HUGE, times=None)
    elif isinstance(driver, PreflightDriver):
        driver.quotas.inject("ListServiceQuotas", "AccessDeniedException", HUGE, times=None)
        driver.s3_faults.inject("ListObjectsV2", "AccessDenied", HUGE, times=None)
    elif isinstance(driver, ImageCheckDriver):
        # Denied is a note there (SageMaker checks again); a missing repository is what fails it.
        driver.ecr_faults.inject("BatchGetImage", "RepositoryNotFoundException", HUGE, times=None)
        return "does not exist"
    else:
        driver.sagemaker.inject("DescribeEndpoint", "AccessDeniedException", HUGE, times=None)
    return "AccessDenied"


@pytest.mark.parametrize("driver", paths.driver_params(), indirect=True)
def test_a_failure_with_a_huge_error_stays_within_the_response_limit(driver):
    """Our reason at most 3,000 bytes; with the framework's own text the whole response under 4,096."""
    expected = _huge_fault(driver)
    created = driver.cloudformation().create(driver.properties())
    assert not created.ok
    assert len(created.message.encode()) <= 3000, len(created.message.encode())
    assert len(created.body) < RESPONSE_LIMIT, len(created.body)
    assert expected in created.message
    if isinstance(driver, ImageCheckDriver):  # its reasons are its own words: ECR's message never goes in
        assert HUGE[:40] not in created.message


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_a_staging_failure_with_the_longest_prefix_stays_within_the_response_limit(driver):
    """A failure in is_complete carries on_event's Data (three S3 URIs) beside the reason."""
    _huge_fault(driver)
    created = driver.cloudformation().create(driver.properties(Prefix="p" * 140 + "/"))
    assert not created.ok and len(created.data["ManifestUri"]) > 230
    assert len(created.body) < RESPONSE_LIMIT, len(created.body)


# --- a Create that CloudFormation cancelled --------------------------------------------------------------------


class ScriptedStacks(Stacks):
    """DescribeStacks answers ``statuses`` in turn (then the last), whatever the harness sets: the stack starts
    rolling back while this resource's Create is still running (another resource failed; aws-cdk #26139)."""

    def __init__(self, *statuses: str) -> None:
        super().__init__()
        self.statuses = list(statuses)

    def describe_stacks(self, StackName: str) -> dict:
        self.calls += 1
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"Stacks": [{"StackName": StackName, "StackStatus": status}]}


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
@pytest.mark.parametrize("status", ["ROLLBACK_IN_PROGRESS", "DELETE_IN_PROGRESS"])
def test_staging_a_cancelled_create_starts_no_job(driver, status):
    driver.module._clients["cloudformation"] = ScriptedStacks(status)
    created = driver.cloudformation().create(driver.properties())
    assert not created.ok and f"the stack is {status}: this Create was cancelled" in created.reason
    assert driver.jobs.created == 0 and driver.running() == []


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_a_job_started_just_before_the_cancel_is_stopped_at_the_next_poll(driver):
    driver.module._clients["cloudformation"] = ScriptedStacks("CREATE_IN_PROGRESS", "ROLLBACK_IN_PROGRESS")
    created = driver.cloudformation().create(driver.properties())
    assert not created.ok and "the stack is ROLLBACK_IN_PROGRESS: this Create was cancelled" in created.reason
    assert driver.jobs.created == 1 and driver.running() == []  # started, then stopped by the first poll


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_an_unreadable_stack_status_does_not_stop_a_create(driver):
    """No cloudformation endpoint, or throttling: the Create goes on as before (its Delete still stops its job)."""

    class Unreadable(Stacks):
        def describe_stacks(self, StackName: str) -> dict:
            from botocore.exceptions import EndpointConnectionError

            raise EndpointConnectionError(endpoint_url="https://cloudformation.us-east-1.amazonaws.com")

    driver.module._clients["cloudformation"] = Unreadable()
    created = driver.cloudformation().create(driver.properties())
    assert created.ok, created.reason
