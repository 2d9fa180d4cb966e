"""ComponentEndpoint and InferenceComponent: template shape, scaling, scale-to-zero, teardown order,
guards, and cfn-lint and cdk-nag on small synthesized apps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks

from constructs_lib import GpuEndpoint, ModelBucket, Refusal, S3ModelData, ServingImage, UpdatePolicy, get_engine
from constructs_lib.inference_component import ComponentEndpoint, InferenceComponent
from tests.conftest import default_context

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
CU129 = "0.10.2-gpu-py312-cu129-ubuntu22.04-sagemaker"
SLR = (
    ":role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)


def make(endpoint_props: dict | None = None, **component_props):
    """A fresh app and stack with an imported bucket, one ComponentEndpoint and one component."""
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", **(endpoint_props or {}))
    component = endpoint.add_component("Chat", model=S3ModelData(bucket, "models/org--m/abc123"), **component_props)
    return stack, endpoint, component


def template(endpoint_props: dict | None = None, **component_props) -> dict:
    stack, _, _ = make(endpoint_props, **component_props)
    return Template.from_stack(stack).to_json()


def of_type(t: dict, type_: str) -> dict[str, dict]:
    return {k: r for k, r in t["Resources"].items() if r["Type"] == type_}


def one(t: dict, type_: str) -> tuple[str, dict]:
    (item,) = of_type(t, type_).items()
    return item


def referenced(value) -> set[str]:
    """Logical ids that ``value`` reaches through Ref or Fn::GetAtt."""
    found: set[str] = set()
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            found.add(value["Ref"])
        elif set(value) == {"Fn::GetAtt"}:
            found.add(value["Fn::GetAtt"][0])
        else:
            for v in value.values():
                found |= referenced(v)
    elif isinstance(value, list):
        for v in value:
            found |= referenced(v)
    return found


def depends(t: dict, a: str, b: str) -> bool:
    """Whether CloudFormation creates ``b`` before ``a`` (and deletes ``a`` first): DependsOn or a reference."""
    resource = t["Resources"][a]
    return b in resource.get("DependsOn", []) or b in referenced(resource.get("Properties", {}))


# --- endpoint and component shape ---


def test_endpoint_config_hosts_components():
    t = template()
    _, config = one(t, "AWS::SageMaker::EndpointConfig")
    props = config["Properties"]
    role_id, _ = next((k, r) for k, r in of_type(t, "AWS::IAM::Role").items() if k.startswith("EndpointRole"))
    assert props["ExecutionRoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert "EndpointConfigName" not in props and "KmsKeyId" not in props
    (variant,) = props["ProductionVariants"]
    assert variant == {
        "VariantName": "AllTraffic",
        "InstanceType": "ml.g6.xlarge",
        "InitialInstanceCount": 1,
        # Room for one update batch beside the copy (issue 28): (1 copy + 1) x 1 GPU on 1-GPU instances.
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 2},
        "InferenceAmiVersion": "al2023-ami-sagemaker-inference-gpu-4-1",
    }  # no ModelName, no timeouts (they belong to the component), no RoutingConfig unless asked


def test_component_specification_and_model():
    t = template()
    model_id, model = one(t, "AWS::SageMaker::Model")
    endpoint_id, endpoint = one(t, "AWS::SageMaker::Endpoint")
    _, component = one(t, "AWS::SageMaker::InferenceComponent")
    props = component["Properties"]
    assert props["EndpointName"] == {"Fn::GetAtt": [endpoint_id, "EndpointName"]}
    assert props["VariantName"] == "AllTraffic"
    assert props["InferenceComponentName"].startswith("Test-Endpoint-Chat-")
    assert props["Specification"] == {
        "ModelName": {"Fn::GetAtt": [model_id, "ModelName"]},
        "ComputeResourceRequirements": {"NumberOfAcceleratorDevicesRequired": 1, "MinMemoryRequiredInMb": 1024},
        "StartupParameters": {
            "ModelDataDownloadTimeoutInSeconds": 1200,
            "ContainerStartupHealthCheckTimeoutInSeconds": 1200,
        },
    }
    assert props["RuntimeConfig"] == {"CopyCount": 1}
    container = model["Properties"]["PrimaryContainer"]
    assert model["Properties"]["EnableNetworkIsolation"] is True
    assert container["ModelDataSource"] == {
        "S3DataSource": {
            "S3Uri": "s3://model-bucket/models/org--m/abc123/",
            "S3DataType": "S3Prefix",
            "CompressionType": "None",
        }
    }
    assert container["Environment"] == {
        "SM_VLLM_MODEL": "/opt/ml/model",
        "SM_VLLM_TENSOR_PARALLEL_SIZE": "1",
        **get_engine("vllm").fixed_environment(),
    }
    # A fixed copy count: nothing registered with Application Auto Scaling, no alarm.
    for type_ in ("AWS::ApplicationAutoScaling::ScalableTarget", "AWS::CloudWatch::Alarm"):
        assert of_type(t, type_) == {}
    assert endpoint["Properties"]["EndpointName"].startswith("Test-Endpoint-")


def test_names_are_stable_across_apps():
    first = template()
    again = template()
    for type_, key in (
        ("AWS::SageMaker::Endpoint", "EndpointName"),
        ("AWS::SageMaker::InferenceComponent", "InferenceComponentName"),
    ):
        assert one(first, type_)[1]["Properties"][key] == one(again, type_)[1]["Properties"][key]


def test_endpoint_options():
    t = template(
        {
            "instance_type": "ml.g6e.12xlarge",
            "initial_instances": 2,
            "min_instances": 1,
            "max_instances": 3,
            "routing_strategy": "LEAST_OUTSTANDING_REQUESTS",
            "capacity_reservation_arn": "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p1",
            "capacity_reservation_instances": 2,
            "endpoint_name": "my-llm",
        },
        tensor_parallel_size=2,
        component_name="chat-a",
        min_memory_mb=4096,
        startup_timeout=cdk.Duration.minutes(30),
        download_timeout=cdk.Duration.seconds(900),
        max_model_len=32768,
    )
    _, config = one(t, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InitialInstanceCount"] == 2
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 3}
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert variant["CapacityReservationConfig"] == {
        "CapacityReservationPreference": "capacity-reservations-only",
        "MlReservationArn": "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p1",
    }
    _, component = one(t, "AWS::SageMaker::InferenceComponent")
    spec = component["Properties"]["Specification"]
    assert component["Properties"]["InferenceComponentName"] == "chat-a"
    assert spec["ComputeResourceRequirements"] == {
        "NumberOfAcceleratorDevicesRequired": 2,
        "MinMemoryRequiredInMb": 4096,
    }
    assert spec["StartupParameters"] == {
        "ModelDataDownloadTimeoutInSeconds": 900,
        "ContainerStartupHealthCheckTimeoutInSeconds": 1800,
    }
    _, model = one(t, "AWS::SageMaker::Model")
    assert model["Properties"]["PrimaryContainer"]["Environment"] == {
        "SM_VLLM_MODEL": "/opt/ml/model",
        **get_engine("vllm").fixed_environment(),
        "SM_VLLM_TENSOR_PARALLEL_SIZE": "2",
        "SM_VLLM_MAX_MODEL_LEN": "32768",
    }
    Template.from_json(t).has_resource_properties(
        "Custom::LogRetention", {"LogGroupName": "/aws/sagemaker/InferenceComponents/chat-a"}
    )
    Template.from_json(t).has_resource_properties(
        "Custom::LogRetention", {"LogGroupName": "/aws/sagemaker/Endpoints/my-llm"}
    )


@pytest.mark.parametrize(
    ("instances", "message"),
    [
        (None, r"capacity_reservation_arn: the endpoint runs on reserved capacity only.*need 2 instances"),
        (1, r"capacity_reservation_instances=1: .*need 2 instances, so every update would wait for room"),
    ],
)
def test_a_component_on_a_reservation_too_small_for_an_update_batch_is_refused(instances, message):
    """On reserved capacity only the update's new copy must fit in the reservation beside the serving one."""
    with pytest.raises(Refusal, match=message):
        make(
            {
                "capacity_reservation_arn": "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p1",
                "capacity_reservation_instances": instances,
            }
        )


def test_endpoint_ami_follows_its_image_and_components_are_checked_against_it():
    cu12 = ServingImage.from_dlc(get_engine("vllm"), CU129)
    t = template({"image": cu12}, image=cu12)
    _, config = one(t, "AWS::SageMaker::EndpointConfig")
    assert config["Properties"]["ProductionVariants"][0]["InferenceAmiVersion"] == "al2-ami-sagemaker-inference-gpu-3-1"
    # A CUDA 13 component on that endpoint would need a newer driver than the AMI ships.
    with pytest.raises(ValueError, match=r"ships CUDA 12\.\d but the default image of engine vllm .* CUDA 13"):
        make({"image": cu12})


# --- scaling ---


def test_copy_autoscaling_tracks_concurrent_requests_per_copy():
    t = template(
        {"instance_type": "ml.g6e.12xlarge", "max_instances": 3},  # (4 copies + a batch) x 2 GPUs
        tensor_parallel_size=2,
        max_copies=4,
        target_concurrency=8,
        scale_in_cooldown=cdk.Duration.minutes(10),
        scale_out_cooldown=cdk.Duration.seconds(60),
    )
    _, component = one(t, "AWS::SageMaker::InferenceComponent")
    name = component["Properties"]["InferenceComponentName"]
    _, target = one(t, "AWS::ApplicationAutoScaling::ScalableTarget")
    props = target["Properties"]
    assert props["ServiceNamespace"] == "sagemaker"
    assert props["ResourceId"] == f"inference-component/{name}"
    assert props["ScalableDimension"] == "sagemaker:inference-component:DesiredCopyCount"
    assert (props["MinCapacity"], props["MaxCapacity"]) == (1, 4)
    assert props["RoleARN"]["Fn::Join"][1][-1] == SLR  # the service-linked role, not a new empty role
    assert [k for k in of_type(t, "AWS::IAM::Role") if "Scaling" in k] == []
    (policy,) = of_type(t, "AWS::ApplicationAutoScaling::ScalingPolicy").values()
    assert policy["Properties"]["PolicyType"] == "TargetTrackingScaling"
    assert policy["Properties"]["TargetTrackingScalingPolicyConfiguration"] == {
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
        },
        "TargetValue": 8,
        "ScaleInCooldown": 600,
        "ScaleOutCooldown": 60,
    }
    assert of_type(t, "AWS::CloudWatch::Alarm") == {}  # no wake-up without scale-to-zero


def test_scale_to_zero():
    t = template({"scale_to_zero": True, "max_instances": 3}, max_copies=2)
    _, config = one(t, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InitialInstanceCount"] == 1
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 3}
    _, component = one(t, "AWS::SageMaker::InferenceComponent")
    name = component["Properties"]["InferenceComponentName"]
    assert component["Properties"]["RuntimeConfig"] == {"CopyCount": 1}
    target_id, target = one(t, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (0, 2)
    policies = {
        r["Properties"]["PolicyType"]: (k, r)
        for k, r in of_type(t, "AWS::ApplicationAutoScaling::ScalingPolicy").items()
    }
    assert set(policies) == {"TargetTrackingScaling", "StepScaling"}
    step_id, step = policies["StepScaling"]
    assert step["Properties"]["ScalingTargetId"] == {"Ref": target_id}
    assert step["Properties"]["StepScalingPolicyConfiguration"] == {
        # ChangeInCapacity +1 as AWS documents it: an exact 1 would scale a busy component in to one copy.
        "AdjustmentType": "ChangeInCapacity",
        "MetricAggregationType": "Maximum",
        "Cooldown": 60,
        "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}],
    }
    _, alarm = one(t, "AWS::CloudWatch::Alarm")
    props = alarm["Properties"]
    assert {k: v for k, v in props.items() if k != "AlarmDescription"} == {
        "Namespace": "AWS/SageMaker",
        "MetricName": "NoCapacityInvocationFailures",
        "Dimensions": [{"Name": "InferenceComponentName", "Value": name}],
        "Statistic": "Sum",
        "Period": 60,
        "EvaluationPeriods": 1,
        "DatapointsToAlarm": 1,
        "Threshold": 1,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "TreatMissingData": "notBreaching",
        "AlarmActions": [{"Ref": step_id}],
    }


def test_component_may_opt_out_of_the_endpoint_scale_to_zero_only_with_an_error():
    with pytest.raises(ValueError, match=r"min_instances=0 is allowed only with scale_to_zero=true"):
        make({"scale_to_zero": True}, scale_to_zero=False)


# --- teardown order ---


def test_dependencies_give_the_teardown_order():
    t = template({"scale_to_zero": True}, max_copies=1)
    component_id, _ = one(t, "AWS::SageMaker::InferenceComponent")
    endpoint_id, _ = one(t, "AWS::SageMaker::Endpoint")
    config_id, _ = one(t, "AWS::SageMaker::EndpointConfig")
    model_id, _ = one(t, "AWS::SageMaker::Model")
    target_id, _ = one(t, "AWS::ApplicationAutoScaling::ScalableTarget")
    alarm_id, _ = one(t, "AWS::CloudWatch::Alarm")
    policy_ids = list(of_type(t, "AWS::ApplicationAutoScaling::ScalingPolicy"))
    role_policy_id = next(k for k in of_type(t, "AWS::IAM::Policy") if k.startswith("EndpointRole"))
    component_logs = next(k for k in of_type(t, "Custom::LogRetention") if k.startswith("EndpointChat"))

    # Deleted first ... last: alarm -> policies -> target -> component -> endpoint -> config; component -> model.
    assert depends(t, target_id, component_id)
    for policy_id in policy_ids:
        assert depends(t, policy_id, target_id) and depends(t, policy_id, component_id)
    assert any(depends(t, alarm_id, p) for p in policy_ids)
    assert depends(t, component_id, endpoint_id)
    assert depends(t, component_id, model_id)
    assert depends(t, endpoint_id, config_id)
    # The role's permissions and the log group outlive what uses them.
    for user in (component_id, endpoint_id, model_id):
        assert depends(t, user, role_policy_id)
    assert depends(t, component_id, component_logs)
    # Nothing points the other way.
    assert not depends(t, endpoint_id, component_id)
    assert not depends(t, model_id, component_id)


# --- several components ---


def test_two_components_share_one_endpoint():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    # (2 + 1) x 2 GPUs for Chat and (4 + 1) x 1 for Embed, each with one update batch: 11 of 3 x 4 GPUs.
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6e.12xlarge", max_instances=3)
    chat = endpoint.add_component("Chat", model=S3ModelData(bucket, "a/"), tensor_parallel_size=2, max_copies=2)
    InferenceComponent(
        stack,
        "Embed",
        endpoint=endpoint,
        model=S3ModelData(bucket, "b/"),
        tensor_parallel_size=1,
        initial_copies=2,
        max_copies=4,
        engine="sglang",
    )
    t = Template.from_stack(stack).to_json()
    assert len(of_type(t, "AWS::SageMaker::Endpoint")) == 1
    assert len(of_type(t, "AWS::SageMaker::EndpointConfig")) == 1
    assert len(of_type(t, "AWS::SageMaker::Model")) == 2
    components = {
        r["Properties"]["InferenceComponentName"]: r["Properties"]
        for r in of_type(t, "AWS::SageMaker::InferenceComponent").values()
    }
    assert len(components) == 2
    specs = sorted(
        (
            p["Specification"]["ComputeResourceRequirements"]["NumberOfAcceleratorDevicesRequired"],
            p["RuntimeConfig"]["CopyCount"],
        )
        for p in components.values()
    )
    assert specs == [(1, 2), (2, 1)]
    targets = {
        r["Properties"]["ResourceId"]: r["Properties"]["MaxCapacity"]
        for r in of_type(t, "AWS::ApplicationAutoScaling::ScalableTarget").values()
    }
    assert targets[f"inference-component/{chat.inference_component_name}"] == 2
    assert sorted(targets.values()) == [2, 4]
    # One execution role, reading both prefixes and writing both components' log groups.
    (policy,) = [r for k, r in of_type(t, "AWS::IAM::Policy").items() if k.startswith("EndpointRole")]
    text = json.dumps(policy)
    for fragment in (
        "model-bucket/a/*",
        "model-bucket/b/*",
        "/vllm",
        "/sglang",
        "InferenceComponents/Test-Endpoint-Chat-",
        "InferenceComponents/Test-Embed-",
    ):
        assert fragment in text, fragment


def test_default_max_instances_holds_every_component_and_an_update_batch_of_each():
    """Issue 28: unless max_instances is given, MaxInstanceCount is sized at synth from the components added."""
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6e.12xlarge")
    endpoint.add_component("A", model=S3ModelData(bucket, "a/"), tensor_parallel_size=2, max_copies=2)
    b = endpoint.add_component("B", model=S3ModelData(bucket, "b/"), tensor_parallel_size=1, max_copies=1)
    b.apply_update_policy(UpdatePolicy("rolling"))
    # (2 + 1) x 2 + (1 + 1) x 1 = 8 GPUs: 2 instances of 4 (the 5 serving GPUs already need 2).
    assert (endpoint.max_instance_count, endpoint.update_instance_count) == (2, 0)
    (config,) = of_type(Template.from_stack(stack).to_json(), "AWS::SageMaker::EndpointConfig").values()
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["ManagedInstanceScaling"]["MaxInstanceCount"] == 2


def test_a_given_max_instances_must_leave_room_for_each_components_update_batch():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6e.12xlarge", max_instances=2)
    endpoint.add_component("A", model=S3ModelData(bucket, "a/"), tensor_parallel_size=2, max_copies=2)
    endpoint.add_component("B", model=S3ModelData(bucket, "b/"), tensor_parallel_size=2, max_copies=1)
    with pytest.raises(RuntimeError, match=r"max_copies plus one update batch each need 10 GPUs, but max_instances=2"):
        app.synth()


def test_components_must_fit_the_endpoint_together():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6e.12xlarge", max_instances=1)
    endpoint.add_component("A", model=S3ModelData(bucket, "a/"), tensor_parallel_size=2, max_copies=1)
    endpoint.add_component("B", model=S3ModelData(bucket, "b/"), tensor_parallel_size=1, max_copies=3)
    with pytest.raises(
        RuntimeError, match=r"max_copies need A 1 x 2 \+ B 3 x 1 = 5 GPUs together, but max_instances=1 x 4"
    ):
        app.synth()


# --- roles and grants ---


def statements(t: dict, role_prefix: str = "EndpointRole") -> list[dict]:
    return [
        s
        for k, p in of_type(t, "AWS::IAM::Policy").items()
        if k.startswith(role_prefix)
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_execution_role_is_scoped_to_the_model_and_the_log_groups():
    t = template()
    by_action = {str(s["Action"]): s for s in statements(t)}
    assert by_action["s3:ListBucket"]["Condition"] == {
        "StringLike": {"s3:prefix": ["models/org--m/abc123/", "models/org--m/abc123/*"]}
    }
    wildcard = {s["Action"] for s in statements(t) if s["Resource"] == "*"}
    assert wildcard == {"ecr:GetAuthorizationToken", "cloudwatch:PutMetricData"}
    log_groups = [json.dumps(s["Resource"]) for s in statements(t) if s["Action"][0] == "logs:CreateLogStream"]
    assert len(log_groups) == 2
    assert any("/aws/sagemaker/Endpoints/Test-Endpoint-" in g for g in log_groups)
    assert any("/aws/sagemaker/InferenceComponents/Test-Endpoint-Chat-" in g for g in log_groups)
    roles = [k for k in of_type(t, "AWS::IAM::Role") if not k.startswith(("LogRetention", "ServingImageCheckProvider"))]
    assert len(roles) == 1


def test_given_role_is_used_everywhere():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    role = iam.Role.from_role_arn(stack, "Given", "arn:aws:iam::123456789012:role/mine", mutable=False)
    endpoint = ComponentEndpoint(stack, "Endpoint", role=role)
    endpoint.add_component("Chat", model=S3ModelData(s3.Bucket.from_bucket_name(stack, "B", "bkt"), "m/"))
    t = Template.from_stack(stack).to_json()
    assert [
        k for k in of_type(t, "AWS::IAM::Role") if not k.startswith(("LogRetention", "ServingImageCheckProvider"))
    ] == []
    assert one(t, "AWS::SageMaker::EndpointConfig")[1]["Properties"]["ExecutionRoleArn"] == role.role_arn
    assert one(t, "AWS::SageMaker::Model")[1]["Properties"]["ExecutionRoleArn"] == role.role_arn


def test_volume_key_is_granted_and_set():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    key = kms.Key(stack, "Key")
    ComponentEndpoint(
        stack,
        "Endpoint",
        instance_type="ml.p3.2xlarge",
        image=ServingImage.from_dlc(get_engine("vllm"), CU129),
        volume_kms_key=key,
    )
    t = Template.from_stack(stack).to_json()
    key_id = next(iter(of_type(t, "AWS::KMS::Key")))
    assert one(t, "AWS::SageMaker::EndpointConfig")[1]["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}


class StagedModel(S3ModelData):
    """A model source whose data a construct (a staging step) must produce first."""

    def __init__(self, bucket: s3.IBucket, prefix: str, dependable: cdk.CfnResource) -> None:
        super().__init__(bucket, prefix)
        self.dependable = dependable


def test_model_waits_for_the_model_source_dependable():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    staging = cdk.CfnWaitConditionHandle(stack, "Staged")
    model = StagedModel(s3.Bucket.from_bucket_name(stack, "B", "bkt"), "m/", staging)
    ComponentEndpoint(stack, "Endpoint").add_component("Chat", model=model)
    t = Template.from_stack(stack).to_json()
    _, cfn_model = one(t, "AWS::SageMaker::Model")
    assert "Staged" in cfn_model["DependsOn"]


def test_grant_invoke_and_metrics():
    stack, endpoint, component = make()
    fn = lambda_.Function(
        stack,
        "Client",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(e, c): pass"),
    )
    component.grant_invoke(fn)
    t = Template.from_stack(stack)
    endpoint_id = next(iter(t.find_resources("AWS::SageMaker::Endpoint")))
    component_id = next(iter(t.find_resources("AWS::SageMaker::InferenceComponent")))
    # Both resource types of InvokeEndpoint in the IAM service authorization reference: this component only.
    t.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
                        "Effect": "Allow",
                        "Resource": [
                            {"Fn::GetAtt": [endpoint_id, "EndpointArn"]},
                            {"Fn::GetAtt": [component_id, "InferenceComponentArn"]},
                        ],
                    }
                ]
            },
            "Roles": [Match.any_value()],
        },
    )
    assert stack.resolve(component.inference_component_arn)["Fn::GetAtt"][1] == "InferenceComponentArn"
    for metric, name, statistic in [
        (component.metric_invocations(), "Invocations", "Sum"),
        (component.metric_model_latency(), "ModelLatency", "p90"),
        (component.metric_no_capacity_invocation_failures(), "NoCapacityInvocationFailures", "Sum"),
    ]:
        assert (metric.namespace, metric.metric_name, metric.statistic) == ("AWS/SageMaker", name, statistic)
        assert metric.dimensions == {"InferenceComponentName": component.inference_component_name}
    dims = stack.resolve(endpoint.metric_invocations().dimensions)
    assert dims["VariantName"] == "AllTraffic" and dims["EndpointName"]["Fn::GetAtt"][1] == "EndpointName"


def test_floating_image_warns_on_the_component():
    stack, _, _ = make(image=ServingImage.from_dlc(get_engine("vllm"), "server-sagemaker-cuda-v2.3"))
    Annotations.from_stack(stack).has_warning("/Test/Endpoint/Chat", Match.string_like_regexp("floating tag"))


# --- guards ---


@pytest.mark.parametrize(
    ("endpoint_props", "component_props", "message"),
    [
        ({"min_instances": 0}, {}, r"^ComponentEndpoint Test/Endpoint: min_instances=0 is allowed only"),
        ({"routing_strategy": "ROUND_ROBIN"}, {}, r"routing_strategy='ROUND_ROBIN' is not a routing strategy"),
        ({"initial_instances": 0}, {}, r"initial_instances=0 must be at least 1"),
        ({"max_instances": 1, "initial_instances": 2}, {}, r"initial_instances=2 is outside"),
        ({"endpoint_name": "-bad"}, {}, r"endpoint_name='-bad' is not a valid"),
        ({"instance_type": "ml.m5.xlarge"}, {}, r"instance_type='ml.m5.xlarge' is not in the GPU instance catalog"),
        ({}, {"tensor_parallel_size": 2}, r"InferenceComponent Test/Endpoint/Chat: .*tensor_parallel_size=2 is more"),
        ({}, {"min_copies": 0}, r"min_copies=0 is allowed only with scale_to_zero=true"),
        ({"max_instances": 1}, {"initial_copies": 2}, r"initial_copies=2 copies x 1 GPU\(s\) per copy need 2 GPUs"),
        ({"max_instances": 1}, {}, r"max_instances=1 x 1 GPU\(s\) per instance give 1 GPUs, and an update places"),
        ({}, {"target_concurrency": 0}, r"target_concurrency=0 must be a number above 0"),
        ({}, {"min_memory_mb": 100}, r"min_memory_mb=100 must be a whole number of MB, 128 or more"),
        ({}, {"startup_timeout": cdk.Duration.seconds(30)}, r"startup_timeout_s=30 is outside"),
        ({}, {"download_timeout": cdk.Duration.hours(2)}, r"download_timeout_s=7200 is outside"),
        ({}, {"component_name": "bad_name"}, r"component_name='bad_name' is not a valid inference component name"),
        ({}, {"engine_env": {"SM_VLLM_TP": 2}}, r"engine_env key 'SM_VLLM_TP' would override"),
        (
            {"instance_type": "ml.g7e.2xlarge"},
            {"image": ServingImage.from_dlc(get_engine("vllm"), CU129)},
            r"needs a CUDA 13 \(cu130\) image",
        ),
    ],
)
def test_guards_fail_synth(endpoint_props, component_props, message):
    with pytest.raises(ValueError, match=f"(?s){message}"):  # several problems are one per line
        make(endpoint_props, **component_props)


def test_volume_key_is_refused_on_nvme_instances():
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    with pytest.raises(ValueError, match=r"volume KMS key cannot be used with instance_type='ml.g5.2xlarge'"):
        ComponentEndpoint(stack, "Endpoint", instance_type="ml.g5.2xlarge", volume_kms_key=kms.Key(stack, "Key"))


def test_component_errors_are_collected_into_one_error():
    with pytest.raises(Refusal) as info:
        make(min_copies=0, target_concurrency=-1, component_name="-x")
    refusal = info.value
    assert len(refusal.problems) >= 3 and refusal.subject.startswith("InferenceComponent Test/Endpoint")
    assert str(refusal) == f"{refusal.subject}: {len(refusal.problems)} problems:\n" + "\n".join(
        f"  - {p}" for p in refusal.problems
    )


# --- cfn-lint and cdk-nag on synthesized apps ---


def flagged_app(outdir: Path) -> cdk.App:
    """An app with the project's CDK feature flags from cdk.json (ModelBucket relies on them)."""
    flags = {k: v for k, v in default_context().items() if k.startswith("@aws-cdk/")}
    return cdk.App(outdir=str(outdir), context=flags)


def component_app(outdir: Path, *, scale_to_zero: bool) -> cdk.App:
    app = flagged_app(outdir)
    stack = cdk.Stack(app, "Components")
    bucket = ModelBucket(stack, "Models").bucket
    endpoint = ComponentEndpoint(
        stack,
        "Endpoint",
        instance_type="ml.g6e.12xlarge",
        max_instances=3,  # (3 + 1) x 2 + (2 + 1) x 1 = 11 GPUs with an update batch each
        scale_to_zero=scale_to_zero,
        routing_strategy="LEAST_OUTSTANDING_REQUESTS",
    )
    endpoint.add_component("Chat", model=S3ModelData(bucket, "models/a/main/"), tensor_parallel_size=2, max_copies=3)
    endpoint.add_component(
        "Small", model=S3ModelData(bucket, "models/b/main/"), tensor_parallel_size=1, max_copies=2, engine="sglang"
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def standard_app(outdir: Path) -> cdk.App:
    app = flagged_app(outdir)
    stack = cdk.Stack(app, "Standard")
    endpoint = GpuEndpoint(stack, "Endpoint", model=S3ModelData(ModelBucket(stack, "Models").bucket, "models/a/main/"))
    endpoint.autoscale_instances(max_capacity=3)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, Path]:
    """Each app synthesized as `cdk synth` does it: raises if any cdk-nag finding is unacknowledged."""
    out = {}
    for name, build in {
        "components": lambda d: component_app(d, scale_to_zero=False),
        "scale-to-zero": lambda d: component_app(d, scale_to_zero=True),
        "standard-autoscaled": standard_app,
    }.items():
        outdir = tmp_path_factory.mktemp(name)
        build(outdir).synth()
        out[name] = outdir
    return out


@pytest.mark.integration  # cfn-lint over the component variants: `make test-integration`
def test_cfn_lint_passes(synthesized):
    templates = [str(p) for d in synthesized.values() for p in d.glob("*.template.json")]
    assert len(templates) == 3
    result = subprocess.run(
        [CFN_LINT, "--ignore-checks", "W3005", "--", *templates], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cdk_nag_is_clean_with_reasons(synthesized):
    for name, outdir in synthesized.items():
        report = json.loads((outdir / "validation-report.json").read_text())
        (plugin,) = report["pluginReports"]
        assert plugin["conclusion"] == "success", name
        assert plugin["violations"] == []
        for finding in plugin["suppressedViolations"]:
            assert len(finding["reason"]) > 40, finding
            for construct in finding["violatingConstructs"]:
                assert construct["constructPath"].startswith(finding["acknowledgedAt"]), finding


def test_synthesized_scale_to_zero_has_a_wake_alarm_per_component(synthesized):
    t = json.loads((synthesized["scale-to-zero"] / "Components.template.json").read_text())
    assert len(of_type(t, "AWS::CloudWatch::Alarm")) == 2
    assert len(of_type(t, "AWS::ApplicationAutoScaling::ScalableTarget")) == 2
    plain = json.loads((synthesized["components"] / "Components.template.json").read_text())
    assert of_type(plain, "AWS::CloudWatch::Alarm") == {}
