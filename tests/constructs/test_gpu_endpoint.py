"""GpuEndpoint construct: every option shows up in the template, every guard fails synth."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Capture, Match, Template

from constructs_lib import GpuEndpoint, Refusal, S3ModelData, ServingImage, get_engine

CU129 = "0.10.2-gpu-py312-cu129-ubuntu22.04-sagemaker"


def make(**props):
    """A fresh app and stack with an imported model bucket and one GpuEndpoint."""
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = props.pop("bucket", None) or s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "models/org--m/abc123"), **props)
    return stack, endpoint


def template(**props) -> Template:
    stack, _ = make(**props)
    return Template.from_stack(stack)


def test_default_model_is_s3_prefix_uncompressed_and_network_isolated():
    t = template()
    t.resource_count_is("AWS::SageMaker::Model", 1)
    t.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "EnableNetworkIsolation": True,
            "PrimaryContainer": {
                "ModelDataSource": {
                    "S3DataSource": {
                        "S3Uri": "s3://model-bucket/models/org--m/abc123/",
                        "S3DataType": "S3Prefix",
                        "CompressionType": "None",
                    }
                },
                "Environment": Match.exact(
                    {
                        "SM_VLLM_MODEL": "/opt/ml/model",
                        **get_engine("vllm").fixed_environment(),
                        "SM_VLLM_TENSOR_PARALLEL_SIZE": "1",
                    }
                ),
                "Image": {
                    "Fn::Join": [
                        "",
                        Match.array_with([".dkr.ecr.", f"/vllm:{get_engine('vllm').default_tag}"]),
                    ]
                },
            },
        },
    )


def test_default_endpoint_config_variant():
    t = template()
    config = t.find_resources("AWS::SageMaker::EndpointConfig")
    (props,) = [r["Properties"] for r in config.values()]
    assert "EndpointConfigName" not in props  # generated, so a changed config can replace the old one
    assert "KmsKeyId" not in props
    (variant,) = props["ProductionVariants"]
    assert variant["InstanceType"] == "ml.g6.xlarge"
    assert variant["InitialInstanceCount"] == 1
    assert variant["ModelDataDownloadTimeoutInSeconds"] == 1200
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == 1200
    assert variant["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert "CapacityReservationConfig" not in variant
    model_ref = Capture()
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {"ProductionVariants": [Match.object_like({"ModelName": {"Fn::GetAtt": [model_ref, "ModelName"]}})]},
    )
    assert model_ref.as_string() in t.find_resources("AWS::SageMaker::Model")


def endpoint_resource(stack) -> dict:
    (resource,) = Template.from_stack(stack).find_resources("AWS::SageMaker::Endpoint").values()
    return resource


def test_endpoint_has_a_stable_default_name_and_waits_for_its_log_group():
    stack, _ = make()
    resource = endpoint_resource(stack)
    name = resource["Properties"]["EndpointName"]
    assert name.startswith("Test-") and len(name) <= 63
    # The same construct path gives the same name in a new app: clients can rely on it.
    again, _ = make()
    assert endpoint_resource(again)["Properties"]["EndpointName"] == name
    t = Template.from_stack(stack)
    # Created (or adopted) before the endpoint, kept after it: a failed deploy's logs survive rollback.
    # No AWS::Logs::LogGroup of that name: the only log groups are the image check's function's.
    groups = [r["Properties"].get("LogGroupName") for r in t.find_resources("AWS::Logs::LogGroup").values()]
    assert all("/aws/sagemaker/Endpoints" not in json.dumps(g) for g in groups)
    (retention_id,) = t.find_resources("Custom::LogRetention")
    assert retention_id in resource["DependsOn"]
    t.has_resource_properties(
        "Custom::LogRetention",
        {"LogGroupName": f"/aws/sagemaker/Endpoints/{name}", "RetentionInDays": 30, "ServiceTimeout": 300},
    )


def test_log_retention_is_configurable():
    from aws_cdk import aws_logs as logs

    t = template(log_retention=logs.RetentionDays.THREE_MONTHS)
    t.has_resource_properties("Custom::LogRetention", {"RetentionInDays": 90})


def test_two_endpoints_in_one_stack_share_the_retention_handler():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    GpuEndpoint(stack, "A", model=S3ModelData(bucket, "a/"))
    GpuEndpoint(stack, "B", model=S3ModelData(bucket, "b/"), engine="sglang")
    t = Template.from_stack(stack)
    t.resource_count_is("AWS::SageMaker::Endpoint", 2)
    t.resource_count_is("Custom::LogRetention", 2)
    # One log-retention function and one image-check provider (its handler and the framework's) for both.
    t.resource_count_is("AWS::Lambda::Function", 3)
    t.resource_count_is("Custom::ServingImageCheck", 2)
    names = {r["Properties"]["EndpointName"] for r in t.find_resources("AWS::SageMaker::Endpoint").values()}
    assert len(names) == 2


def test_custom_name_options_and_timeouts():
    t = template(
        endpoint_name="my-llm",
        instance_type="ml.g6e.12xlarge",
        instance_count=2,
        max_model_len=65536,
        max_num_seqs=32,
        startup_timeout=cdk.Duration.minutes(30),
        download_timeout=cdk.Duration.seconds(900),
        capacity_reservation_arn="arn:aws:sagemaker:us-east-1:123456789012:training-plan/p1",
    )
    t.has_resource_properties("AWS::SageMaker::Endpoint", {"EndpointName": "my-llm"})
    t.has_resource_properties("Custom::LogRetention", {"LogGroupName": "/aws/sagemaker/Endpoints/my-llm"})
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "ProductionVariants": [
                Match.object_like(
                    {
                        "InstanceType": "ml.g6e.12xlarge",
                        "InitialInstanceCount": 2,
                        "ContainerStartupHealthCheckTimeoutInSeconds": 1800,
                        "ModelDataDownloadTimeoutInSeconds": 900,
                        "CapacityReservationConfig": {
                            "CapacityReservationPreference": "capacity-reservations-only",
                            "MlReservationArn": "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p1",
                        },
                    }
                )
            ]
        },
    )
    t.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "PrimaryContainer": Match.object_like(
                {
                    "Environment": Match.exact(
                        {
                            "SM_VLLM_MODEL": "/opt/ml/model",
                            **get_engine("vllm").fixed_environment(),
                            "SM_VLLM_TENSOR_PARALLEL_SIZE": "4",
                            "SM_VLLM_MAX_MODEL_LEN": "65536",
                            "SM_VLLM_MAX_NUM_SEQS": "32",
                        }
                    )
                }
            )
        },
    )


def test_sglang_engine_and_env_maps():
    t = template(
        engine="sglang",
        engine_env={"SM_SGLANG_MEM_FRACTION_STATIC": 0.85},
        container_env={"SGLANG_DISABLE_CUDNN_CHECK": 1},
    )
    t.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "PrimaryContainer": Match.object_like(
                {
                    "Environment": Match.exact(
                        {
                            "SM_SGLANG_MODEL_PATH": "/opt/ml/model",
                            **get_engine("sglang").fixed_environment(),
                            "SM_SGLANG_TP_SIZE": "1",
                            "SM_SGLANG_MEM_FRACTION_STATIC": "0.85",
                            "SGLANG_DISABLE_CUDNN_CHECK": "1",
                        }
                    ),
                    "Image": {"Fn::Join": ["", Match.array_with([Match.string_like_regexp(r"^/sglang:0\.5\.")])]},
                }
            )
        },
    )


def test_image_override_uri_and_explicit_ami():
    uri = "111122223333.dkr.ecr.eu-west-1.amazonaws.com/team/vllm:0.10.2-gpu-py312-cu129-ubuntu22.04-sagemaker"
    t = template(image=ServingImage.from_uri(uri), inference_ami_version="al2-ami-sagemaker-inference-gpu-2-1")
    t.has_resource_properties("AWS::SageMaker::Model", {"PrimaryContainer": Match.object_like({"Image": uri})})
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {"ProductionVariants": [Match.object_like({"InferenceAmiVersion": "al2-ami-sagemaker-inference-gpu-2-1"})]},
    )
    # Pull rights follow the image: its own repository, nothing else.
    t.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": [
                                    "ecr:BatchCheckLayerAvailability",
                                    "ecr:BatchGetImage",
                                    "ecr:GetDownloadUrlForLayer",
                                ],
                                "Resource": {
                                    "Fn::Join": [
                                        "",
                                        [
                                            "arn:",
                                            {"Ref": "AWS::Partition"},
                                            ":ecr:eu-west-1:111122223333:repository/team/vllm",
                                        ],
                                    ]
                                },
                            }
                        )
                    ]
                )
            }
        },
    )


def test_cuda12_image_gets_the_cuda12_ami():
    t = template(image=ServingImage.from_dlc(get_engine("vllm"), CU129))
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {"ProductionVariants": [Match.object_like({"InferenceAmiVersion": "al2-ami-sagemaker-inference-gpu-3-1"})]},
    )


def test_floating_tag_warns_and_leaves_the_ami_to_sagemaker():
    stack, _ = make(image=ServingImage.from_dlc(get_engine("vllm"), "server-sagemaker-cuda-v2.3"))
    annotations = Annotations.from_stack(stack)
    annotations.has_warning("/Test/Endpoint", Match.string_like_regexp("floating tag"))
    annotations.has_warning("/Test/Endpoint", Match.string_like_regexp("CUDA level .* is unknown"))
    config = Template.from_stack(stack).find_resources("AWS::SageMaker::EndpointConfig")
    (props,) = [r["Properties"] for r in config.values()]
    assert "InferenceAmiVersion" not in props["ProductionVariants"][0]


def statements(t: Template, role_id: str | None = None) -> list[dict]:
    """Statements of the policies attached to ``role_id`` (default: the endpoint's execution role)."""
    if role_id is None:
        role_id = next(k for k in t.find_resources("AWS::IAM::Role") if k.startswith("EndpointRole"))
    policies = t.find_resources("AWS::IAM::Policy")
    return [
        s
        for p in policies.values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_execution_role_reads_only_the_model_prefix():
    t = template()
    t.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})]
            }
        },
    )
    by_action = {str(s["Action"]): s for s in statements(t)}
    listing = by_action["s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["models/org--m/abc123/", "models/org--m/abc123/*"]}}
    get = by_action["s3:GetObject"]
    assert get["Resource"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::model-bucket/models/org--m/abc123/*"]]
    }
    # Wildcard resources only where IAM has no resource-level permissions, metrics limited by namespace.
    wildcard = {s["Action"]: s for s in statements(t) if s["Resource"] == "*"}
    assert set(wildcard) == {"ecr:GetAuthorizationToken", "cloudwatch:PutMetricData"}
    assert wildcard["cloudwatch:PutMetricData"]["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}
    }
    assert not any("*" in str(s["Action"]) for s in statements(t))
    logs = by_action[str(["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"])]
    (name,) = [r["Properties"]["EndpointName"] for r in t.find_resources("AWS::SageMaker::Endpoint").values()]
    assert logs["Resource"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":logs:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                f":log-group:/aws/sagemaker/Endpoints/{name}:*",
            ],
        ]
    }
    # SageMaker's documented execution-role policy lets it create the endpoint's own log group (no other).
    group = by_action["logs:CreateLogGroup"]
    assert group["Resource"]["Fn::Join"][1][-1] == f":log-group:/aws/sagemaker/Endpoints/{name}"
    assert len(statements(t)) == 7


def test_model_waits_for_the_role_policy():
    t = template()
    (model,) = t.find_resources("AWS::SageMaker::Model").values()
    policy_id = next(k for k in t.find_resources("AWS::IAM::Policy") if k.startswith("EndpointRole"))
    assert policy_id in model["DependsOn"]


def test_given_role_is_used_and_no_role_is_created():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    role = iam.Role.from_role_arn(stack, "Given", "arn:aws:iam::123456789012:role/mine", mutable=False)
    GpuEndpoint(stack, "Endpoint", model=S3ModelData(s3.Bucket.from_bucket_name(stack, "B", "bkt"), "m/"), role=role)
    t = Template.from_stack(stack)
    # Only the log-retention and image-check handlers' roles; no execution role.
    roles = t.find_resources("AWS::IAM::Role")
    assert [k for k in roles if not k.startswith(("LogRetention", "ServingImageCheckProvider"))] == []
    t.has_resource_properties("AWS::SageMaker::Model", {"ExecutionRoleArn": "arn:aws:iam::123456789012:role/mine"})


def test_kms_encrypted_model_bucket_grants_decrypt():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    key = kms.Key(stack, "Key")
    bucket = s3.Bucket(stack, "Models", encryption_key=key, enforce_ssl=True)
    GpuEndpoint(stack, "Endpoint", model=S3ModelData(bucket, "models/x/"))
    actions = [s["Action"] for s in statements(Template.from_stack(stack))]
    assert any("kms:Decrypt" in a for a in actions)


def test_volume_key_on_an_instance_without_local_nvme():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    key = kms.Key(stack, "Key")
    GpuEndpoint(
        stack,
        "Endpoint",
        model=S3ModelData(s3.Bucket.from_bucket_name(stack, "B", "bkt"), "m/"),
        instance_type="ml.p3.2xlarge",
        image=ServingImage.from_dlc(get_engine("vllm"), CU129),
        volume_kms_key=key,
    )
    t = Template.from_stack(stack)
    key_id = next(iter(t.find_resources("AWS::KMS::Key")))
    t.has_resource_properties("AWS::SageMaker::EndpointConfig", {"KmsKeyId": {"Fn::GetAtt": [key_id, "Arn"]}})


def test_volume_key_is_refused_on_nvme_instances():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    with pytest.raises(ValueError, match=r"volume KMS key cannot be used with instance_type='ml.g5.2xlarge'"):
        GpuEndpoint(
            stack,
            "Endpoint",
            model=S3ModelData(s3.Bucket.from_bucket_name(stack, "B", "bkt"), "m/"),
            instance_type="ml.g5.2xlarge",
            volume_kms_key=kms.Key(stack, "Key"),
        )


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"tensor_parallel_size": 2}, r"tensor_parallel_size=2 does not match instance_type='ml.g6.xlarge'"),
        ({"startup_timeout": cdk.Duration.seconds(30)}, r"startup_timeout_s=30 is outside"),
        ({"download_timeout": cdk.Duration.hours(2)}, r"download_timeout_s=7200 is outside"),
        ({"instance_type": "ml.m5.xlarge"}, r"instance_type='ml.m5.xlarge' is not in the GPU instance catalog"),
        ({"instance_type": "ml.x.y", "gpu_count": 0, "gpu_memory_gib": 16}, r"at least one GPU"),
        ({"instance_count": 0}, r"instance_count=0 must be at least 1"),
        ({"endpoint_name": "-bad"}, r"endpoint_name='-bad' is not a valid"),
        ({"engine_env": {"SM_VLLM_TP": 2}}, r"engine_env key 'SM_VLLM_TP' would override"),
        ({"inference_ami_version": "al2-ami-sagemaker-inference-gpu-2"}, r"ships CUDA 12.2"),
        ({"instance_type": "ml.g7e.2xlarge", "image": ServingImage.from_dlc(get_engine("vllm"), CU129)}, r"CUDA 13"),
    ],
)
def test_guards_fail_synth(props, message):
    with pytest.raises(ValueError, match=message):
        make(**props)


def test_guard_errors_are_collected_into_one_error():
    with pytest.raises(Refusal) as info:
        make(tensor_parallel_size=2, instance_count=0, endpoint_name="-bad")
    refusal = info.value
    assert len(refusal.problems) >= 3 and refusal.subject.endswith("/Endpoint")
    assert str(refusal) == f"{refusal.subject}: {len(refusal.problems)} problems:\n" + "\n".join(
        f"  - {p}" for p in refusal.problems
    )


def test_unknown_instance_with_explicit_gpu_facts():
    t = template(instance_type="ml.g9.2xlarge", gpu_count=2, gpu_memory_gib=64)
    t.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "PrimaryContainer": Match.object_like(
                {"Environment": Match.object_like({"SM_VLLM_TENSOR_PARALLEL_SIZE": "2"})}
            )
        },
    )


def test_grant_invoke_covers_streaming_on_this_endpoint_only():
    stack, endpoint = make()
    fn = lambda_.Function(
        stack,
        "Client",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(e, c): pass"),
    )
    endpoint.grant_invoke(fn)
    t = Template.from_stack(stack)
    endpoint_id = next(iter(t.find_resources("AWS::SageMaker::Endpoint")))
    t.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
                        "Effect": "Allow",
                        "Resource": {"Fn::GetAtt": [endpoint_id, "EndpointArn"]},
                    }
                ]
            },
            "Roles": [Match.any_value()],
        },
    )


def test_metric_helpers_use_the_endpoint_and_variant():
    stack, endpoint = make()
    for metric, namespace, name, statistic in [
        (endpoint.metric_invocations(), "AWS/SageMaker", "Invocations", "Sum"),
        (endpoint.metric_invocation_5xx_errors(), "AWS/SageMaker", "Invocation5XXErrors", "Sum"),
        (endpoint.metric_model_latency(), "AWS/SageMaker", "ModelLatency", "p90"),
        (endpoint.metric_gpu_utilization(), "/aws/sagemaker/Endpoints", "GPUUtilization", "Average"),
        (endpoint.metric_gpu_memory_utilization(), "/aws/sagemaker/Endpoints", "GPUMemoryUtilization", "Average"),
    ]:
        assert (metric.namespace, metric.metric_name, metric.statistic) == (namespace, name, statistic)
        dims = stack.resolve(metric.dimensions)
        assert dims["VariantName"] == "AllTraffic"
        assert dims["EndpointName"]["Fn::GetAtt"][1] == "EndpointName"


# --- instance autoscaling (standard mode) ---

SCALING_SLR = (
    ":role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)


def test_autoscale_instances_tracks_invocations_per_instance():
    stack, endpoint = make(instance_count=2)
    endpoint.autoscale_instances(min_capacity=1, max_capacity=4)
    t = Template.from_stack(stack)
    endpoint_id = next(iter(t.find_resources("AWS::SageMaker::Endpoint")))
    (target_id, target), *rest = t.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").items()
    assert rest == []
    props = target["Properties"]
    assert props["ServiceNamespace"] == "sagemaker"
    assert props["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    assert (props["MinCapacity"], props["MaxCapacity"]) == (1, 4)
    # endpoint/<name>/variant/AllTraffic, the name read from the endpoint: created after it, deleted before it.
    assert props["ResourceId"] == {
        "Fn::Join": ["", ["endpoint/", {"Fn::GetAtt": [endpoint_id, "EndpointName"]}, "/variant/AllTraffic"]]
    }
    assert props["RoleARN"]["Fn::Join"][1][-1] == SCALING_SLR
    assert [k for k in t.find_resources("AWS::IAM::Role") if "Scaling" in k] == []
    t.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "PolicyType": "TargetTrackingScaling",
            "ScalingTargetId": {"Ref": target_id},
            "TargetTrackingScalingPolicyConfiguration": {
                "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
                "TargetValue": 20,
            },
        },
    )


def test_autoscale_instances_options():
    stack, endpoint = make()
    endpoint.autoscale_instances(
        max_capacity=3,
        target_invocations_per_instance=45,
        scale_in_cooldown=cdk.Duration.minutes(15),
        scale_out_cooldown=cdk.Duration.minutes(2),
    )
    t = Template.from_stack(stack)
    t.has_resource_properties("AWS::ApplicationAutoScaling::ScalableTarget", {"MinCapacity": 1, "MaxCapacity": 3})
    t.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "TargetTrackingScalingPolicyConfiguration": Match.object_like(
                {"TargetValue": 45, "ScaleInCooldown": 900, "ScaleOutCooldown": 120}
            )
        },
    )


@pytest.mark.parametrize(
    ("instance_count", "scaling", "message"),
    [
        (1, {"min_capacity": 0, "max_capacity": 2}, r"min_instances=0 is allowed only with scale_to_zero=true"),
        (3, {"max_capacity": 2}, r"initial_instances=3 is outside min_instances=2 to max_instances=2"),
        (1, {"min_capacity": 3, "max_capacity": 2}, r"max_instances=2 is below min_instances=3"),
        (1, {"max_capacity": 2, "target_invocations_per_instance": 0}, r"target_invocations_per_instance=0 must be"),
    ],
)
def test_autoscale_instances_guards(instance_count, scaling, message):
    _, endpoint = make(instance_count=instance_count)
    with pytest.raises(ValueError, match=rf"^GpuEndpoint Test/Endpoint: {message}"):
        endpoint.autoscale_instances(**scaling)


def test_autoscale_instances_once():
    _, endpoint = make()
    endpoint.autoscale_instances(max_capacity=2)
    with pytest.raises(ValueError, match=r"autoscale_instances was already called"):
        endpoint.autoscale_instances(max_capacity=3)


def test_model_waits_for_the_model_source_dependable():
    class StagedModel(S3ModelData):
        def __init__(self, bucket, prefix, dependable):
            super().__init__(bucket, prefix)
            self.dependable = dependable

    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    staging = cdk.CfnWaitConditionHandle(stack, "Staged")
    GpuEndpoint(stack, "Endpoint", model=StagedModel(s3.Bucket.from_bucket_name(stack, "B", "bkt"), "m/", staging))
    (model,) = Template.from_stack(stack).find_resources("AWS::SageMaker::Model").values()
    assert "Staged" in model["DependsOn"]
