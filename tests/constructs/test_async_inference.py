"""Asynchronous endpoints (issue 38): AsyncInferenceConfig, the topics, the grants, scaling on the queue, the rules.

IAM statements are asserted whole (actions, resources, conditions); each range at its minimum, maximum and one step
outside; the stack's context keys both sides of each rule.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Match, Template

from constructs_lib import AsyncInference, EndpointSmokeTest, GpuEndpoint, LoadGate, S3ModelData, get_engine
from constructs_lib.async_inference import concurrency_of, engine_timeout_problems
from tests.conftest import stack_template
from tests.stacks.test_config import load, problems_of

ENV = cdk.Environment(account="123456789012", region="us-east-1")
NAME = "async-llm"
BUCKET = "my-model-bucket"
PREFIX = f"async-inference/{NAME}/"


def arn(path: str) -> dict[str, Any]:
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":s3:::{BUCKET}/{path}"]]}


def build(
    settings: AsyncInference | None = None, *, scale: dict[str, Any] | None = None, **props: Any
) -> tuple[cdk.Stack, GpuEndpoint]:
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=ENV)
    bucket = s3.Bucket.from_bucket_name(stack, "B", BUCKET)
    endpoint = GpuEndpoint(
        stack,
        "E",
        model=S3ModelData(bucket, "models/x/"),
        endpoint_name=NAME,
        async_inference=settings if settings is not None else AsyncInference(),
        **props,
    )
    if scale is not None:
        endpoint.autoscale_instances(**scale)
    return stack, endpoint


def template(settings: AsyncInference | None = None, **kwargs: Any) -> Template:
    stack, _ = build(settings, **kwargs)
    return Template.from_stack(stack)


def refusal(settings: AsyncInference | None = None, **kwargs: Any) -> str:
    with pytest.raises(ValueError) as info:
        build(settings, **kwargs)
    return str(info.value)


def statements(t: Template, policy_prefix: str) -> list[dict[str, Any]]:
    policies = t.find_resources("AWS::IAM::Policy")
    (found,) = [p for k, p in policies.items() if k.startswith(policy_prefix)]
    return found["Properties"]["PolicyDocument"]["Statement"]


# --- the endpoint config -------------------------------------------------------------------------------------------


def test_the_config_names_both_paths_both_topics_and_the_concurrency_from_max_num_seqs():
    t = template(max_num_seqs=48)
    topics = t.find_resources("AWS::SNS::Topic")
    success = next(k for k in topics if "Success" in k)
    error = next(k for k in topics if "Error" in k)
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "AsyncInferenceConfig": {
                "ClientConfig": {"MaxConcurrentInvocationsPerInstance": 48},
                "OutputConfig": {
                    "S3OutputPath": f"s3://{BUCKET}/{PREFIX}output",
                    "S3FailurePath": f"s3://{BUCKET}/{PREFIX}failure",
                    "NotificationConfig": {"SuccessTopic": {"Ref": success}, "ErrorTopic": {"Ref": error}},
                },
            }
        },
    )
    for key in (success, error):
        assert topics[key]["Properties"]["KmsMasterKeyId"] == {
            "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":kms:us-east-1:123456789012:alias/aws/sns"]]
        }
    # enforce_ssl: each topic's policy denies non-TLS publishing (cdk-nag AwsSolutions-SNS3).
    policies = t.find_resources("AWS::SNS::TopicPolicy")
    assert len(policies) == 2
    for policy in policies.values():
        (deny,) = policy["Properties"]["PolicyDocument"]["Statement"]
        assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_without_a_batch_size_sagemaker_chooses_the_concurrency_and_a_given_one_wins():
    t = template()
    config = next(iter(t.find_resources("AWS::SageMaker::EndpointConfig").values()))
    assert "ClientConfig" not in config["Properties"]["AsyncInferenceConfig"]
    template(AsyncInference(max_concurrent_invocations_per_instance=3), max_num_seqs=48).has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {"AsyncInferenceConfig": {"ClientConfig": {"MaxConcurrentInvocationsPerInstance": 3}}},
    )


def test_given_bucket_prefix_topics_key_and_responses_in_notifications():
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=ENV)
    model_bucket = s3.Bucket.from_bucket_name(stack, "B", BUCKET)
    answers = s3.Bucket.from_bucket_name(stack, "Answers", "answers-bucket")
    ok = sns.Topic.from_topic_arn(stack, "Ok", "arn:aws:sns:us-east-1:123456789012:ok")
    bad = sns.Topic.from_topic_arn(stack, "Bad", "arn:aws:sns:us-east-1:123456789012:bad")
    key = kms.Key.from_key_arn(stack, "K", "arn:aws:kms:us-east-1:123456789012:key/1234")
    GpuEndpoint(
        stack,
        "E",
        model=S3ModelData(model_bucket, "models/x/"),
        endpoint_name=NAME,
        async_inference=AsyncInference(
            bucket=answers,
            prefix="llm/",
            success_topic=ok,
            error_topic=bad,
            output_key=key,
            include_response_in=("SUCCESS_NOTIFICATION_TOPIC",),
        ),
    )
    t = Template.from_stack(stack)
    t.resource_count_is("AWS::SNS::Topic", 0)
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "AsyncInferenceConfig": {
                "OutputConfig": {
                    "S3OutputPath": "s3://answers-bucket/llm/output",
                    "S3FailurePath": "s3://answers-bucket/llm/failure",
                    "KmsKeyId": "arn:aws:kms:us-east-1:123456789012:key/1234",
                    "NotificationConfig": {
                        "SuccessTopic": "arn:aws:sns:us-east-1:123456789012:ok",
                        "ErrorTopic": "arn:aws:sns:us-east-1:123456789012:bad",
                        "IncludeInferenceResponseIn": ["SUCCESS_NOTIFICATION_TOPIC"],
                    },
                }
            }
        },
    )
    role = statements(t, "ERoleDefaultPolicy")
    assert {
        "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
        "Condition": {
            "StringEquals": {
                "kms:ViaService": {"Fn::Join": ["", ["s3.us-east-1.", {"Ref": "AWS::URLSuffix"}]]},
                "kms:CallerAccount": "123456789012",
            }
        },
        "Effect": "Allow",
        "Resource": "arn:aws:kms:us-east-1:123456789012:key/1234",
    } in role


# --- IAM, whole -----------------------------------------------------------------------------------------------------


def test_the_role_writes_only_the_two_prefixes_reads_only_the_input_and_publishes_only_to_its_topics():
    t = template()
    topics = sorted(t.find_resources("AWS::SNS::Topic"))
    role = statements(t, "ERoleDefaultPolicy")
    assert {
        "Action": ["s3:AbortMultipartUpload", "s3:PutObject"],
        "Effect": "Allow",
        "Resource": [arn(f"{PREFIX}output/*"), arn(f"{PREFIX}failure/*")],
    } in role
    assert {"Action": "s3:GetObject", "Effect": "Allow", "Resource": arn(f"{PREFIX}input/*")} in role
    success = next(k for k in topics if "Success" in k)
    error = next(k for k in topics if "Error" in k)
    assert {"Action": "sns:Publish", "Effect": "Allow", "Resource": [{"Ref": success}, {"Ref": error}]} in role
    # Nothing else touches the async prefix or any topic.
    async_statements = [s for s in role if "sns:" in str(s["Action"]) or "async-inference" in str(s["Resource"])]
    assert len(async_statements) == 3


def test_grant_invoke_async_submits_reads_answers_and_uploads_inputs_only():
    stack, endpoint = build()
    caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    endpoint.grant_invoke_async(caller)
    t = Template.from_stack(stack)
    assert statements(t, "CallerDefaultPolicy") == [
        {
            "Action": "sagemaker:InvokeEndpointAsync",
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [stack.get_logical_id(endpoint.endpoint), "EndpointArn"]},
        },
        {
            "Action": "s3:GetObject",
            "Effect": "Allow",
            "Resource": [arn(f"{PREFIX}output/*"), arn(f"{PREFIX}failure/*")],
        },
        {"Action": "s3:PutObject", "Effect": "Allow", "Resource": arn(f"{PREFIX}input/*")},
    ]


def test_grant_invoke_async_on_a_real_time_endpoint_is_refused():
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=ENV)
    endpoint = GpuEndpoint(stack, "E", model=S3ModelData(s3.Bucket.from_bucket_name(stack, "B", BUCKET), "m/"))
    with pytest.raises(ValueError, match="real-time endpoint: use grant_invoke"):
        endpoint.grant_invoke_async(iam.Role(stack, "C", assumed_by=iam.AccountRootPrincipal()))
    assert not endpoint.asynchronous


def test_the_smoke_test_submits_asynchronously_and_reads_and_deletes_only_its_own_answers_and_failures():
    stack, endpoint = build()
    EndpointSmokeTest.for_endpoint(stack, "Smoke", endpoint)
    t = Template.from_stack(stack)
    endpoint_arn = {"Fn::GetAtt": [stack.get_logical_id(endpoint.endpoint), "EndpointArn"]}
    role = statements(t, "EndpointSmokeTestProviderRoleDefaultPolicy")
    assert {"Action": "sagemaker:DescribeEndpoint", "Effect": "Allow", "Resource": endpoint_arn} in role
    assert {"Action": "sagemaker:InvokeEndpointAsync", "Effect": "Allow", "Resource": endpoint_arn} in role
    assert {
        "Action": ["s3:DeleteObject", "s3:GetObject"],
        "Effect": "Allow",
        "Resource": [arn(f"{PREFIX}output/smoke-test/*"), arn(f"{PREFIX}failure/*")],
    } in role
    assert not [s for s in role if "sagemaker:InvokeEndpoint" in [s["Action"], *s["Action"]]]  # no real-time invoke
    functions = t.find_resources("AWS::Lambda::Function")
    assert [f["Properties"]["Timeout"] for k, f in functions.items() if "SmokeTestProviderIsComplete" in k] == [900]
    t.has_resource_properties(
        "Custom::EndpointSmokeTest",
        {
            "Stream": "false",
            "AsyncOutputPath": f"s3://{BUCKET}/{PREFIX}output",
            "AsyncFailurePath": f"s3://{BUCKET}/{PREFIX}failure",
            "InvocationTimeoutSeconds": "900",
        },
    )


def test_a_real_time_smoke_test_has_no_async_property():
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=ENV)
    endpoint = GpuEndpoint(stack, "E", model=S3ModelData(s3.Bucket.from_bucket_name(stack, "B", BUCKET), "m/"))
    EndpointSmokeTest.for_endpoint(stack, "Smoke", endpoint)
    (smoke,) = Template.from_stack(stack).find_resources("Custom::EndpointSmokeTest").values()
    assert not {"AsyncOutputPath", "AsyncFailurePath", "InvocationTimeoutSeconds"} & set(smoke["Properties"])


def test_a_load_gate_on_an_asynchronous_endpoint_is_refused():
    stack, endpoint = build()
    with pytest.raises(ValueError, match="load: the load gate streams its requests"):
        EndpointSmokeTest.for_endpoint(stack, "Smoke", endpoint, load=LoadGate(ttft_p95_ms=500))


# --- scaling on the queue ------------------------------------------------------------------------------------------


def test_scaling_to_zero_tracks_the_backlog_and_a_step_policy_wakes_it():
    t = template(scale={"min_capacity": 0, "max_capacity": 3})
    t.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {"MinCapacity": 0, "MaxCapacity": 3, "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"},
    )
    t.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": {
                "TargetValue": 5,
                "CustomizedMetricSpecification": {
                    "MetricName": "ApproximateBacklogSizePerInstance",
                    "Namespace": "AWS/SageMaker",
                    "Dimensions": [{"Name": "EndpointName", "Value": NAME}],
                    "Statistic": "Average",
                },
            },
        },
    )
    t.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "PolicyType": "StepScaling",
            "StepScalingPolicyConfiguration": {
                # Exactly one instance: a cold start longer than the cooldown adds no second one for one request.
                "AdjustmentType": "ExactCapacity",
                "Cooldown": 300,
                "MetricAggregationType": "Average",
                "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}],
            },
        },
    )
    t.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "HasBacklogWithoutCapacity",
            "Namespace": "AWS/SageMaker",
            "Dimensions": [{"Name": "EndpointName", "Value": NAME}],
            "Statistic": "Average",
            "Period": 60,
            "EvaluationPeriods": 2,
            "DatapointsToAlarm": 2,
            "Threshold": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "missing",
            "AlarmActions": [Match.any_value()],
        },
    )


def test_a_floor_of_one_instance_needs_no_wake_up_and_the_target_is_the_users():
    t = template(scale={"min_capacity": 1, "max_capacity": 2, "target_backlog_per_instance": 2})
    policies = t.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy")
    assert [p["Properties"]["PolicyType"] for p in policies.values()] == ["TargetTrackingScaling"]
    (policy,) = policies.values()
    assert policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 2
    assert not [a for a in t.find_resources("AWS::CloudWatch::Alarm").values() if "Backlog" in str(a)]


def test_invocations_per_instance_is_refused_on_the_queue_and_the_backlog_target_on_a_real_time_endpoint():
    assert "target_invocations_per_instance=10 applies only with deployment_mode='standard'" in refusal(
        scale={"max_capacity": 2, "target_invocations_per_instance": 10}
    )
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=ENV)
    endpoint = GpuEndpoint(stack, "E", model=S3ModelData(s3.Bucket.from_bucket_name(stack, "B", BUCKET), "m/"))
    with pytest.raises(ValueError, match="target_backlog_per_instance=2 applies only with deployment_mode='async'"):
        endpoint.autoscale_instances(max_capacity=2, target_backlog_per_instance=2)
    with pytest.raises(ValueError, match="min_instances=0 is allowed only with scale_to_zero"):
        endpoint.autoscale_instances(min_capacity=0, max_capacity=2)


# --- ranges, each at its edges --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "ok"), [(0, False), (1, True), (1000, True), (1001, False)])
def test_max_concurrent_invocations_per_instance_is_1_to_1000(value, ok):
    settings = AsyncInference(max_concurrent_invocations_per_instance=value)
    if ok:
        build(settings)
    else:
        assert f"async_inference.max_concurrent_invocations_per_instance={value}: allowed: a whole number 1-1000" in (
            refusal(settings)
        )


@pytest.mark.parametrize(("seconds", "ok"), [(0, False), (1, True), (3600, True), (3601, False)])
def test_the_invocation_timeout_is_1_to_3600_seconds(seconds, ok):
    settings = AsyncInference(invocation_timeout=cdk.Duration.seconds(seconds))
    if ok:
        build(settings)
    else:
        assert f"async_inference.invocation_timeout={seconds} s: allowed: 1-3600 whole seconds" in refusal(settings)


@pytest.mark.parametrize("prefix", ["no-slash", "/leading/", "a//b/", "sp ace/"])
def test_a_prefix_that_is_not_a_key_prefix_is_refused(prefix):
    assert f"async_inference.prefix={prefix!r}" in refusal(AsyncInference(prefix=prefix))


def test_an_unknown_notification_type_and_a_routing_strategy_are_refused_together():
    message = refusal(AsyncInference(include_response_in=("ALL",)), routing_strategy="RANDOM")
    assert (
        "async_inference.include_response_in=['ALL']: allowed: SUCCESS_NOTIFICATION_TOPIC, ERROR_NOTIFICATION_TOPIC"
        in (message)
    )
    assert "routing_strategy='RANDOM': an asynchronous endpoint's instances take requests from its queue" in message


# --- the engine's own request timeout -------------------------------------------------------------------------------


def test_lmi_cuts_a_non_streamed_answer_at_its_chunked_read_timeout_unless_raised():
    lmi = get_engine("lmi")
    (problem,) = engine_timeout_problems(lmi, {}, {}, 900)
    assert problem.startswith(
        "invocation_timeout=900 s is longer than engine='lmi''s own request timeout, SERVING_CHUNKED_READ_TIMEOUT "
        "unset (its default, 120 s)"
    )
    assert engine_timeout_problems(lmi, {}, {}, 120) == []
    assert engine_timeout_problems(lmi, {}, {}, 121)
    assert engine_timeout_problems(lmi, {}, {"SERVING_CHUNKED_READ_TIMEOUT": "900"}, 900) == []
    (short,) = engine_timeout_problems(lmi, {}, {"SERVING_CHUNKED_READ_TIMEOUT": "899"}, 900)
    assert "SERVING_CHUNKED_READ_TIMEOUT=899" in short
    assert engine_timeout_problems(lmi, {}, {"SERVING_CHUNKED_READ_TIMEOUT": "soon"}, 900) == [
        "SERVING_CHUNKED_READ_TIMEOUT='soon': allowed: a number of seconds (the engine's request timeout)"
    ]


def test_sglangs_running_timeout_is_off_unless_set_and_vllm_has_none():
    sglang = get_engine("sglang")
    assert engine_timeout_problems(sglang, {}, {}, 3600) == []
    assert engine_timeout_problems(sglang, {}, {"SGLANG_REQ_RUNNING_TIMEOUT": "-1"}, 3600) == []
    assert engine_timeout_problems(sglang, {}, {"SGLANG_REQ_RUNNING_TIMEOUT": "0"}, 3600) == []
    assert engine_timeout_problems(sglang, {}, {"SGLANG_REQ_RUNNING_TIMEOUT": "600"}, 601)
    assert engine_timeout_problems(sglang, {}, {"SGLANG_REQ_RUNNING_TIMEOUT": "600"}, 600) == []
    assert engine_timeout_problems(get_engine("vllm"), {}, {}, 3600) == []


def test_an_lmi_async_endpoint_with_the_default_timeout_is_refused_at_synth():
    message = refusal(engine="lmi")
    assert "async_inference.invocation_timeout=900 s is longer than engine='lmi''s own request timeout" in message


@pytest.mark.parametrize(
    ("max_num_seqs", "env", "expected"),
    [
        (None, {}, None),
        (32, {}, 32),
        (None, {"SM_VLLM_MAX_NUM_SEQS": "16"}, 16),
        (None, {"SM_VLLM_MAX_NUM_SEQS": 1001}, 1000),
        (None, {"SM_VLLM_MAX_NUM_SEQS": "many"}, None),
        (0, {}, None),
    ],
)
def test_the_concurrency_follows_the_engines_batch_size_within_the_apis_range(max_num_seqs, env, expected):
    assert concurrency_of(get_engine("vllm"), max_num_seqs, env) == expected


# --- monitoring -----------------------------------------------------------------------------------------------------


def test_alarms_watch_failed_requests_and_a_queue_without_instances_not_latency():
    stack, endpoint = build(scale={"min_capacity": 0, "max_capacity": 2})
    endpoint.add_alarms()
    endpoint.add_dashboard()
    t = Template.from_stack(stack)
    alarms = {k: a["Properties"] for k, a in t.find_resources("AWS::CloudWatch::Alarm").items() if "Alarms" in k}
    by_id = {next(i for i in ("AsyncFailures", "NoCapacity", "Errors5xx", "GpuMemory", "LatencyP99") if i in k): a
             for k, a in alarms.items()}  # fmt: skip
    assert set(by_id) == {"AsyncFailures", "NoCapacity", "Errors5xx", "GpuMemory"}
    assert by_id["AsyncFailures"]["MetricName"] == "InvocationFailures"
    assert by_id["AsyncFailures"]["Statistic"] == "Sum" and by_id["AsyncFailures"]["Period"] == 300
    assert by_id["AsyncFailures"]["Threshold"] == 1
    assert by_id["NoCapacity"]["MetricName"] == "HasBacklogWithoutCapacity"
    # Longer than an instance takes to serve from zero: (2400 + 300) s in 5-minute periods.
    assert by_id["NoCapacity"]["EvaluationPeriods"] == 9 and by_id["NoCapacity"]["TreatMissingData"] == "notBreaching"
    body = str(t.find_resources("AWS::CloudWatch::Dashboard"))
    for shown in (
        "ApproximateBacklogSize",
        "ApproximateAgeOfOldestRequest",
        "ExpiredRequests",
        "NumberOfMessagesPublished",
    ):
        assert shown in body


# --- the app: deployment_mode=async and its keys --------------------------------------------------------------------


@pytest.fixture(scope="module")
def async_stack() -> Template:
    return stack_template(deployment_mode="async", min_instances=0, max_instances=2)


def test_cdk_synth_with_deployment_mode_async_gives_the_queue_the_policies_and_the_smoke_test(async_stack):
    async_stack.has_resource_properties(
        "AWS::SageMaker::EndpointConfig", {"AsyncInferenceConfig": {"OutputConfig": Match.object_like({})}}
    )
    async_stack.resource_count_is("AWS::SNS::Topic", 3)  # the two of the queue, the alarms' one
    async_stack.has_resource_properties("AWS::ApplicationAutoScaling::ScalableTarget", {"MinCapacity": 0})
    kinds = [
        p["Properties"]["PolicyType"]
        for p in async_stack.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
    ]
    assert sorted(kinds) == ["StepScaling", "TargetTrackingScaling"]
    async_stack.has_resource_properties("Custom::EndpointSmokeTest", {"AsyncOutputPath": Match.any_value()})
    outputs = async_stack.to_json()["Outputs"]
    assert {"AsyncOutputPath", "AsyncFailurePath", "AsyncSuccessTopicArn", "AsyncErrorTopicArn"} <= set(outputs)
    assert "OpenAiBaseUrl" not in outputs  # no OpenAI-compatible path on a queue
    assert "invoke --async" in str(outputs["InvokeCommand"])


def test_async_keys_outside_async_mode_are_refused_naming_each():
    problems = problems_of(async_max_concurrent_invocations=8, async_invocation_timeout_s=600)
    assert "async_max_concurrent_invocations=8 applies only with deployment_mode=async" in problems[0]
    assert "async_invocation_timeout_s=600 applies only with deployment_mode=async" in problems[1]


def test_async_mode_refuses_the_load_gate_and_an_engine_timeout_it_would_pass():
    (problem,) = problems_of(deployment_mode="async", slo_ttft_p95_ms=500)
    assert problem.startswith("slo_ttft_p95_ms: the load gate streams its requests")
    (problem,) = problems_of(deployment_mode="async", engine="lmi")
    assert problem.startswith("async_invocation_timeout_s=900 s is longer than engine='lmi''s own request timeout")
    config = load(deployment_mode="async", engine="lmi", async_invocation_timeout_s=120)
    assert config.async_invocation_timeout_s == 120


@pytest.mark.parametrize(
    ("key", "low", "high"), [("async_max_concurrent_invocations", 1, 1000), ("async_invocation_timeout_s", 1, 3600)]
)
def test_the_async_ranges_at_their_edges(key, low, high):
    for value in (low, high):
        assert getattr(load(deployment_mode="async", **{key: value}), key) == value
    for value in (low - 1, high + 1):
        (problem,) = problems_of(deployment_mode="async", **{key: value})
        assert problem.startswith(f"{key}={value}")


def test_min_instances_zero_is_allowed_in_async_mode_only():
    assert load(deployment_mode="async", min_instances=0, max_instances=1).min_instances == 0
    assert any(
        "min_instances=0 is allowed only with scale_to_zero" in p for p in problems_of(min_instances=0, max_instances=1)
    )


def test_a_short_cold_start_keeps_awss_cooldown_and_a_15_minute_capacity_alarm():
    quick = {"download_timeout": cdk.Duration.seconds(60), "startup_timeout": cdk.Duration.seconds(60)}
    stack, endpoint = build(scale={"min_capacity": 0, "max_capacity": 2}, **quick)
    endpoint.add_alarms()
    t = Template.from_stack(stack)
    t.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {"StepScalingPolicyConfiguration": Match.object_like({"Cooldown": 300})},
    )
    t.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"MetricName": "HasBacklogWithoutCapacity", "EvaluationPeriods": 3, "Period": 300}
    )


def test_with_a_floor_of_one_instance_the_capacity_alarm_counts_instances():
    stack, endpoint = build(scale={"min_capacity": 1, "max_capacity": 2})
    endpoint.add_alarms()
    alarms = Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm")
    (capacity,) = [a["Properties"] for k, a in alarms.items() if "NoCapacity" in k]
    assert capacity["TreatMissingData"] == "breaching"  # no instance reporting is the signal
    assert "HasBacklogWithoutCapacity" not in str(capacity)


def test_a_failed_queued_request_does_not_roll_an_update_back():
    from constructs_lib import UpdatePolicy

    stack, endpoint = build()
    endpoint.add_alarms()
    endpoint.apply_update_policy(UpdatePolicy("all-at-once"))
    (resource,) = Template.from_stack(stack).find_resources("AWS::SageMaker::Endpoint").values()
    named = str(resource["Properties"]["DeploymentConfig"]["AutoRollbackConfiguration"])
    assert "Errors5xx" in named and "AsyncFailures" not in named


def test_the_smoke_tests_leftovers_expire_on_a_bucket_the_app_creates():
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=ENV)
    bucket = s3.Bucket(stack, "Owned", enforce_ssl=True)
    endpoint = GpuEndpoint(
        stack, "E", model=S3ModelData(bucket, "m/"), endpoint_name=NAME, async_inference=AsyncInference()
    )
    EndpointSmokeTest.for_endpoint(stack, "Smoke", endpoint)
    EndpointSmokeTest.for_endpoint(stack, "Smoke2", endpoint)  # one rule per prefix
    (owned,) = Template.from_stack(stack).find_resources("AWS::S3::Bucket").values()
    (rule,) = owned["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule == {
        "ExpirationInDays": 1,
        "Id": f"expire-{PREFIX}output/smoke-test/",
        "Prefix": f"{PREFIX}output/smoke-test/",
        "Status": "Enabled",
    }


def test_an_async_deployment_that_idles_at_zero_gets_a_smoke_budget_for_a_cold_start():
    woken = stack_template(deployment_mode="async", min_instances=0, max_instances=1)
    woken.has_resource_properties("Custom::EndpointSmokeTest", {"BudgetSeconds": "2700"})
    floor = stack_template(deployment_mode="async", min_instances=1, max_instances=2)
    floor.has_resource_properties("Custom::EndpointSmokeTest", {"BudgetSeconds": "600"})
    quick = stack_template(
        deployment_mode="async", min_instances=0, max_instances=1, download_timeout_s=300, startup_timeout_s=300
    )
    quick.has_resource_properties("Custom::EndpointSmokeTest", {"BudgetSeconds": "900"})


def test_a_given_budget_too_short_for_a_cold_start_is_kept_with_a_warning():
    from aws_cdk.assertions import Annotations

    from tests.conftest import build as build_app

    app = build_app(deployment_mode="async", min_instances=0, max_instances=1, smoke_budget_s=1200)
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    Template.from_stack(stack).has_resource_properties("Custom::EndpointSmokeTest", {"BudgetSeconds": "1200"})
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("budget of 1200 s"))
    assert len(warnings) == 1 and "Allowed: a budget of 2700 s or more" in str(warnings[0].entry.data)


def test_the_model_errors_alarm_key_is_refused_on_a_queue():
    (problem,) = problems_of(deployment_mode="async", alarm_model_errors_percent=5)
    assert problem.startswith(
        "alarm_model_errors_percent=5.0: an asynchronous endpoint publishes no InvocationModelErrors"
    )


def test_given_keys_for_answers_and_topics_are_granted():
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    t = stack_template(
        deployment_mode="async",
        async_output_kms_key_arn=key,
        async_topic_kms_key_arn=key,
        async_success_topic_arn="arn:aws:sns:us-east-1:123456789012:ok",
        async_error_topic_arn="arn:aws:sns:us-east-1:123456789012:bad",
        async_output_s3_uri="s3://answers-bucket/llm/",
    )
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "AsyncInferenceConfig": {
                "OutputConfig": Match.object_like({"KmsKeyId": key, "S3OutputPath": "s3://answers-bucket/llm/output"})
            }
        },
    )
    (policy,) = [
        p for k, p in t.find_resources("AWS::IAM::Policy").items() if k.startswith("EndpointRoleDefaultPolicy")
    ]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert {
        "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
        "Condition": {
            "StringEquals": {
                "kms:ViaService": {"Fn::Join": ["", ["sns.", {"Ref": "AWS::Region"}, ".", {"Ref": "AWS::URLSuffix"}]]},
                "kms:CallerAccount": {"Ref": "AWS::AccountId"},
            }
        },
        "Effect": "Allow",
        "Resource": key,
    } in statements
    publish = [s for s in statements if s["Action"] == "sns:Publish"]
    assert publish == [
        {
            "Action": "sns:Publish",
            "Effect": "Allow",
            "Resource": ["arn:aws:sns:us-east-1:123456789012:bad", "arn:aws:sns:us-east-1:123456789012:ok"],
        }
    ]  # (the app minimizes policies: statements merged, resources sorted)


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("s3://answers-bucket", "is not s3://<bucket>/<prefix>/"),
        ("s3://answers-bucket/", "is not s3://<bucket>/<prefix>/"),
        ("s3://answers-bucket/llm", "is not s3://<bucket>/<prefix>/"),
        ("s3://Bad_Bucket/llm/", "valid S3 bucket name"),
        ("s3://answers-bucket/a b/", "is not a key prefix"),
        ("s3://answers-bucket/a//b/", "is not a key prefix"),
        ("s3://answers-bucket/" + "p" * 485 + "/", "too long"),
    ],
)
def test_a_bad_async_output_uri_is_refused_naming_the_key(uri, problem):
    (message,) = problems_of(deployment_mode="async", async_output_s3_uri=uri)
    assert message.startswith("async_output_s3_uri=") and problem in message


def test_the_longest_async_output_uri_is_accepted():
    uri = "s3://answers-bucket/" + "p" * 484 + "/"
    assert len(uri) + len("failure") == 512
    assert load(deployment_mode="async", async_output_s3_uri=uri).async_output_s3_uri == uri


def test_deployment_mode_async_alone_scales_zero_to_one_on_the_queue():
    t = stack_template(deployment_mode="async")
    t.has_resource_properties("AWS::ApplicationAutoScaling::ScalableTarget", {"MinCapacity": 0, "MaxCapacity": 1})
    kinds = sorted(
        p["Properties"]["PolicyType"] for p in t.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
    )
    assert kinds == ["StepScaling", "TargetTrackingScaling"]
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig", {"ProductionVariants": [Match.object_like({"InitialInstanceCount": 1})]}
    )


def test_a_given_floor_keeps_instances_warm_and_nothing_scales_without_room():
    t = stack_template(deployment_mode="async", min_instances=1)
    t.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 0)
    assert load(deployment_mode="async", min_instances=1).min_instances == 1


def test_autoscaling_an_async_endpoint_after_its_alarms_is_refused():
    _stack, endpoint = build()
    endpoint.add_alarms()
    with pytest.raises(ValueError, match="autoscale_instances after add_alarms"):
        endpoint.autoscale_instances(min_capacity=0, max_capacity=2)


def test_alarms_given_for_rollback_are_kept_even_the_failed_requests_one():
    from constructs_lib import UpdatePolicy

    stack, endpoint = build()
    endpoint.add_alarms()
    failures = endpoint.monitor.alarm("AsyncFailures")
    assert failures is not None
    endpoint.apply_update_policy(UpdatePolicy("all-at-once"), rollback_on=[failures])
    (resource,) = Template.from_stack(stack).find_resources("AWS::SageMaker::Endpoint").values()
    assert "AsyncFailures" in str(resource["Properties"]["DeploymentConfig"]["AutoRollbackConfiguration"])


def test_a_provision_timeout_enters_the_cold_start_and_a_budget_below_it_is_warned_about():
    from aws_cdk.assertions import Annotations

    from tests.conftest import build as build_app

    app = build_app(deployment_mode="async", provision_timeout_s=600)
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    Template.from_stack(stack).has_resource_properties("Custom::EndpointSmokeTest", {"BudgetSeconds": "2700"})
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("budget of 2700 s"))
    assert len(warnings) == 1
    assert "(3000 s)" in str(warnings[0].entry.data) and "a budget of 3300 s or more" in str(warnings[0].entry.data)


def test_the_apps_model_bucket_keeps_its_own_rules_and_gains_the_expiry_only_in_async_mode():
    def rules(template: Template) -> list[dict]:
        buckets = template.find_resources("AWS::S3::Bucket")
        (bucket,) = [b for k, b in buckets.items() if k.startswith("ModelBucket") and "AccessLogs" not in k]
        return bucket["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])

    real_time, queued = rules(stack_template()), rules(stack_template(deployment_mode="async"))
    assert real_time and all(rule in queued for rule in real_time)  # the bucket's own rules stay as they were
    (added,) = [rule for rule in queued if rule not in real_time]
    assert added["ExpirationInDays"] == 1 and added["Prefix"].endswith("/output/smoke-test/")
    assert added["Prefix"].startswith("async-inference/")


def test_a_library_users_smoke_test_of_a_queue_idling_at_zero_gets_the_cold_start_budget():
    quick = {"download_timeout": cdk.Duration.seconds(300), "startup_timeout": cdk.Duration.seconds(301)}
    stack, idle = build(scale={"min_capacity": 0, "max_capacity": 1}, **quick)
    EndpointSmokeTest.for_endpoint(stack, "Smoke", idle)
    # 300 + 301 + the wake's 300 s: a count that is not a whole number of minutes.
    Template.from_stack(stack).has_resource_properties("Custom::EndpointSmokeTest", {"BudgetSeconds": "901"})
    stack, warm = build(scale={"min_capacity": 1, "max_capacity": 2}, **quick)
    EndpointSmokeTest.for_endpoint(stack, "Smoke", warm)
    Template.from_stack(stack).has_resource_properties("Custom::EndpointSmokeTest", {"BudgetSeconds": "600"})
    fast = {"download_timeout": cdk.Duration.seconds(60), "startup_timeout": cdk.Duration.seconds(60)}
    stack, small = build(scale={"min_capacity": 0, "max_capacity": 1}, **fast)
    EndpointSmokeTest.for_endpoint(stack, "Smoke", small)  # never below the default 600 s
    Template.from_stack(stack).has_resource_properties("Custom::EndpointSmokeTest", {"BudgetSeconds": "600"})


def test_a_model_errors_threshold_on_a_queue_is_refused_not_ignored():
    from constructs_lib import AlarmThresholds

    _stack, endpoint = build()
    with pytest.raises(ValueError, match=r"thresholds.model_errors_percent=5: an asynchronous endpoint publishes no"):
        endpoint.add_alarms(AlarmThresholds(model_errors_percent=5))


def test_the_capacity_alarm_rounds_a_cold_start_up_to_whole_periods():
    # 1200 + 1201 s and the wake's 300 s: 2701 s is 9 periods of 300 s and one second, so 10.
    uneven = {"download_timeout": cdk.Duration.seconds(1200), "startup_timeout": cdk.Duration.seconds(1201)}
    stack, endpoint = build(scale={"min_capacity": 0, "max_capacity": 2}, **uneven)
    endpoint.add_alarms()
    Template.from_stack(stack).has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "HasBacklogWithoutCapacity", "EvaluationPeriods": 10, "DatapointsToAlarm": 10, "Period": 300},
    )
