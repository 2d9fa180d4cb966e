"""The app as `cdk synth` builds it: default deployment, each engine, model sources, lint and nag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk.assertions import Match, Template

from constructs_lib.engines import get_engine
from tests.conftest import build

SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
VARIANTS = {
    "default": {},
    "sglang": {"engine": "sglang", "instance_type": "ml.g6e.2xlarge"},
    "vllm-multi-gpu": {"instance_type": "ml.p5.48xlarge", "engine_env": '{"SM_VLLM_ENABLE_PREFIX_CACHING": true}'},
    "given-prefix": {"model_s3_uri": "s3://my-models/custom/qwen/"},
    "model-tarball": {"model_s3_uri": "s3://my-training/job-7/output/model.tar.gz", "model_kms_key_arn": KEY_ARN},
    "component-scale-to-zero": {"deployment_mode": "inference-component", "scale_to_zero": "true"},
    "component-packed": {
        "deployment_mode": "inference-component",
        "instance_type": "ml.g6e.12xlarge",
        "accelerators_per_copy": "2",
        "max_copies": "2",
        "routing_strategy": "LEAST_OUTSTANDING_REQUESTS",
    },
    "standard-autoscaling": {"max_instances": "3", "target_invocations_per_instance": "30"},
    "gated-subset": {
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "hf_token_secret_arn": SECRET_ARN,
        "hf_token_kms_key_arn": KEY_ARN,
        "include": '["*.json", "*.safetensors"]',
        "staging_max_instances": "8",
    },
    "given-bucket": {
        "model_bucket": "my-models",
        "revision": "0123abcd",
        "model_kms_key_arn": KEY_ARN,
    },
    # The LMI engine in component mode: cfn-lint and cdk-nag over its template too.
    "lmi-component": {
        "engine": "lmi",
        "instance_type": "ml.g6e.12xlarge",
        "max_model_len": "16384",
        "deployment_mode": "inference-component",
    },
    "llamacpp": {
        "engine": "llamacpp",
        "model_id": "lmstudio-community/Qwen3.6-35B-A3B-GGUF",
        "gguf_file": "Qwen3.6-35B-A3B-Q4_K_M.gguf",
        "instance_type": "ml.g5.2xlarge",
        "max_model_len": "16384",
    },
    "llamacpp-component": {
        "engine": "llamacpp",
        "model_id": "lmstudio-community/Qwen3.6-35B-A3B-GGUF",
        "gguf_file": "*Q4_K_M*.gguf",
        "instance_type": "ml.g5.2xlarge",
        "deployment_mode": "inference-component",
    },
}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, Path]:
    """Each variant synthesized to its own cloud assembly, with cdk-nag run as `cdk synth` runs it."""
    out = {}
    for name, overrides in VARIANTS.items():
        outdir = tmp_path_factory.mktemp(name)
        build(outdir=str(outdir), **overrides).synth()  # raises if any cdk-nag finding is unacknowledged
        out[name] = outdir
    return out


def load(outdir: Path) -> dict:
    return json.loads((outdir / "LlmEndpoint.template.json").read_text())


@pytest.mark.integration  # cfn-lint over every variant (tens of seconds): `make test-integration`
def test_cfn_lint_passes_on_every_variant(synthesized):
    templates = [str(d / "LlmEndpoint.template.json") for d in synthesized.values()]
    result = subprocess.run(
        [CFN_LINT, "--ignore-checks", "W3005", "--", *templates],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cfn_lint_catches_a_bad_template(tmp_path, synthesized):
    """Guard against a lint step that passes everything: an out-of-range timeout must be caught."""
    # Only the endpoint config, with its properties as synthesized: linting the whole template costs seconds.
    full = load(synthesized["default"])
    name, config = next((k, r) for k, r in full["Resources"].items() if r["Type"] == "AWS::SageMaker::EndpointConfig")
    config = json.loads(json.dumps(config).replace('{"Ref": "AWS::Region"}', '"us-east-1"'))
    config["Properties"]["ProductionVariants"][0]["ModelDataDownloadTimeoutInSeconds"] = 7200
    config.pop("DependsOn", None)
    template = {"Resources": {name: config}}
    bad = tmp_path / "bad.template.json"
    bad.write_text(json.dumps(template))
    result = subprocess.run([CFN_LINT, "--ignore-checks", "W3005", "--", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "7200 is greater than the maximum of 3600" in result.stdout


def test_cdk_nag_is_clean_and_every_acknowledgement_has_a_reason(synthesized):
    for name, outdir in synthesized.items():
        report = json.loads((outdir / "validation-report.json").read_text())
        (plugin,) = report["pluginReports"]
        assert plugin["pluginName"] == "AwsSolutions"
        assert plugin["conclusion"] == "success", name
        assert plugin["violations"] == []
        for finding in plugin["suppressedViolations"]:
            assert len(finding["reason"]) > 40, finding
            # Acknowledged on the resource or its owning construct, not app-wide.
            for construct in finding["violatingConstructs"]:
                assert construct["constructPath"].startswith(finding["acknowledgedAt"]), finding


def test_default_deployment(synthesized):
    t = Template.from_json(load(synthesized["default"]))
    t.resource_count_is("AWS::SageMaker::Model", 1)
    t.resource_count_is("AWS::SageMaker::EndpointConfig", 1)
    t.resource_count_is("AWS::SageMaker::Endpoint", 1)
    t.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "EnableNetworkIsolation": True,
            "PrimaryContainer": Match.object_like(
                {
                    "Environment": Match.exact(
                        {
                            "SM_VLLM_MODEL": "/opt/ml/model",
                            **get_engine("vllm").fixed_environment(),
                            "SM_VLLM_TENSOR_PARALLEL_SIZE": "1",
                            "SM_VLLM_MAX_MODEL_LEN": "32768",
                        }
                    ),
                    "ModelDataSource": {
                        "S3DataSource": {
                            "S3Uri": {"Fn::GetAtt": [Match.string_like_regexp("^Checkpoint"), "S3Uri"]},
                            "S3DataType": "S3Prefix",
                            "CompressionType": "None",
                        }
                    },
                }
            ),
        },
    )
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {"ProductionVariants": [Match.object_like({"InstanceType": "ml.g6.xlarge", "InitialInstanceCount": 1})]},
    )
    assert set(t.find_outputs("*")) == {
        "EndpointName",
        "Region",
        "AppName",  # llmops finds the app's stacks by it (llmops/fleet_target.py)
        "ModelDataUri",
        "OpenAiBaseUrl",
        "ModelRevision",
        "ImageUri",
        "ImageDigest",  # the serving image check's: what the tag named at this deploy
        "InvokeCommand",
        "SmokeTimeToFirstTokenMs",
        "SmokeLatencyMs",
        "DashboardUrl",
        "AlarmTopicArn",
    }
    # The default deployment stages the model from the Hub into the bucket it creates.
    t.has_resource_properties(
        "Custom::StagedCheckpoint",
        {"RepoId": "Qwen/Qwen3-4B-Instruct-2507", "Revision": "main", "Bucket": {"Ref": Match.any_value()}},
    )
    (digest,) = t.find_outputs("ImageDigest").values()
    (check_id,) = t.find_resources("Custom::ServingImageCheck")
    assert digest["Value"] == {"Fn::GetAtt": [check_id, "ImageDigest"]}
    invoke = json.dumps(t.find_outputs("InvokeCommand"))
    assert "aws sagemaker-runtime invoke-endpoint" in invoke and '\\"messages\\"' in invoke


def test_default_model_bucket_is_retained_encrypted_ssl_only_and_private(synthesized):
    t = Template.from_json(load(synthesized["default"]))
    buckets = t.find_resources("AWS::S3::Bucket")
    assert len(buckets) == 2  # the model bucket and its access-log bucket
    for bucket in buckets.values():
        assert bucket["DeletionPolicy"] == "Retain"
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "AES256"
        }
    t.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "LifecycleConfiguration": {
                "Rules": [Match.object_like({"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 3}})]
            },
            "LoggingConfiguration": Match.object_like({"LogFilePrefix": "model-bucket/"}),
        },
    )
    policies = t.find_resources("AWS::S3::BucketPolicy")
    assert len(policies) == 2
    for policy in policies.values():
        assert {
            "Action": "s3:*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
        }.items() <= policy["Properties"]["PolicyDocument"]["Statement"][0].items()


def test_sglang_variant(synthesized):
    t = Template.from_json(load(synthesized["sglang"]))
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
                            "SM_SGLANG_CONTEXT_LENGTH": "32768",
                        }
                    ),
                    "Image": {"Fn::Join": ["", Match.array_with([Match.string_like_regexp(r"^/sglang:")])]},
                }
            )
        },
    )


def test_multi_gpu_variant_uses_every_gpu(synthesized):
    t = Template.from_json(load(synthesized["vllm-multi-gpu"]))
    t.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "PrimaryContainer": Match.object_like(
                {
                    "Environment": Match.object_like(
                        {"SM_VLLM_TENSOR_PARALLEL_SIZE": "8", "SM_VLLM_ENABLE_PREFIX_CACHING": ""}
                    )
                }
            )
        },
    )


def test_given_prefix_creates_no_bucket_and_stages_nothing(synthesized):
    t = Template.from_json(load(synthesized["given-prefix"]))
    t.resource_count_is("AWS::S3::Bucket", 0)
    t.resource_count_is("Custom::StagedCheckpoint", 0)
    t.resource_count_is("AWS::CloudFormation::WaitCondition", 0)
    t.has_resource_properties(
        "AWS::SageMaker::Model",
        {
            "PrimaryContainer": Match.object_like(
                {"ModelDataSource": {"S3DataSource": Match.object_like({"S3Uri": "s3://my-models/custom/qwen/"})}}
            )
        },
    )


def test_given_bucket_uses_the_conventional_prefix(synthesized):
    t = Template.from_json(load(synthesized["given-bucket"]))
    t.resource_count_is("AWS::S3::Bucket", 0)
    t.has_resource_properties(
        "Custom::StagedCheckpoint",
        {"Bucket": "my-models", "Prefix": "models/", "RepoId": "Qwen/Qwen3-4B-Instruct-2507", "Revision": "0123abcd"},
    )
    # Reads are scoped to the repository's prefix (the SHA is known only at deploy time for a ref).
    policies = json.dumps(t.find_resources("AWS::IAM::Policy"))
    assert "my-models/models/Qwen--Qwen3-4B-Instruct-2507/*" in policies


def test_every_region_in_the_dlc_table_is_in_the_template_mapping(synthesized):
    from constructs_lib.images import dlc_regions

    mapping = load(synthesized["default"])["Mappings"]["DlcRegistryAccounts"]
    assert {region: v["account"] for region, v in mapping.items()} == dlc_regions()


def test_given_bucket_with_kms_key_lets_the_role_decrypt(synthesized):
    t = Template.from_json(load(synthesized["given-bucket"]))
    t.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": "kms:Decrypt",
                                "Resource": KEY_ARN,
                            }
                        )
                    ]
                )
            }
        },
    )


def test_every_custom_resource_has_a_service_timeout(synthesized):
    for name, outdir in synthesized.items():
        custom = {k: r for k, r in load(outdir)["Resources"].items() if r["Type"].startswith("Custom::")}
        assert custom, name
        for logical_id, resource in custom.items():
            # A number, or its text (cdk.CustomResource renders text; CloudFormation accepts both).
            timeout = int(resource["Properties"]["ServiceTimeout"])
            assert 1 <= timeout < 3600, (name, logical_id)


def test_summary_reports_what_was_synthesized(synthesized, capsys):
    from llmops.summary import main

    assert main([str(synthesized["sglang"])]) == 0
    out = capsys.readouterr().out
    assert "AwsSolutions: success, 0 findings" in out
    assert "env SM_SGLANG_TP_SIZE='1'" in out
    assert "variant AllTraffic: 1 x ml.g6e.2xlarge, AMI al2023-ami-sagemaker-inference-gpu-4-1" in out


def test_gated_model_stages_a_subset_with_the_token_secret(synthesized):
    t = Template.from_json(load(synthesized["gated-subset"]))
    t.has_resource_properties(
        "Custom::StagedCheckpoint",
        {
            "RepoId": "meta-llama/Llama-3.1-8B-Instruct",
            "TokenSecretArn": SECRET_ARN,
            "Include": ["*.json", "*.safetensors"],
            "Exclude": ["original/*", "requirements.txt", "model.py", "code/*", "serving.properties"],
            "MaxInstances": "8",
        },
    )
    secret_reads = [
        s
        for policy in t.find_resources("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in json.dumps(s["Action"])
    ]
    assert secret_reads and all(s["Resource"] == SECRET_ARN for s in secret_reads)
    # A customer-managed key: each role that reads the secret may decrypt it, with that key only.
    decrypts = [
        s
        for policy in t.find_resources("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s["Resource"] == KEY_ARN
    ]
    assert len(decrypts) == len(secret_reads)
    for statement in decrypts:
        assert statement["Action"] == "kms:Decrypt"
        assert "secretsmanager." in json.dumps(statement["Condition"]["StringEquals"]["kms:ViaService"])


def test_component_mode_with_scale_to_zero(synthesized):
    t = Template.from_json(load(synthesized["component-scale-to-zero"]))
    t.resource_count_is("AWS::SageMaker::InferenceComponent", 1)
    (config,) = t.find_resources("AWS::SageMaker::EndpointConfig").values()
    (variant,) = config["Properties"]["ProductionVariants"]
    assert "ModelName" not in variant and "ExecutionRoleArn" in config["Properties"]
    # Room for an update batch beside the copy (issue 28).
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 2}
    t.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {"ScalableDimension": "sagemaker:inference-component:DesiredCopyCount", "MinCapacity": 0},
    )
    t.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {"MetricName": "NoCapacityInvocationFailures", "ComparisonOperator": "GreaterThanOrEqualToThreshold"},
    )
    outputs = t.find_outputs("*")
    assert "InferenceComponentName" in outputs
    assert "--inference-component-name" in json.dumps(outputs["InvokeCommand"])


def test_component_mode_packs_copies_of_a_share_of_the_gpus(synthesized):
    t = Template.from_json(load(synthesized["component-packed"]))
    t.has_resource_properties(
        "AWS::SageMaker::InferenceComponent",
        {
            "Specification": Match.object_like(
                {"ComputeResourceRequirements": Match.object_like({"NumberOfAcceleratorDevicesRequired": 2})}
            ),
            "RuntimeConfig": {"CopyCount": 1},
        },
    )
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "ProductionVariants": [
                Match.object_like({"RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}})
            ]
        },
    )


def test_standard_mode_scales_instances_when_a_maximum_is_given(synthesized):
    t = Template.from_json(load(synthesized["standard-autoscaling"]))
    t.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {"ScalableDimension": "sagemaker:variant:DesiredInstanceCount", "MinCapacity": 1, "MaxCapacity": 3},
    )
    t.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "TargetTrackingScalingPolicyConfiguration": Match.object_like(
                {
                    "TargetValue": 30,
                    "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
                }
            )
        },
    )
    Template.from_json(load(synthesized["default"])).resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 0)


def test_every_deployment_ends_with_a_smoke_test_of_what_it_deployed(synthesized):
    for name in ("default", "component-scale-to-zero"):
        t = Template.from_json(load(synthesized[name]))
        (smoke_id,) = t.find_resources("Custom::EndpointSmokeTest")
        smoke = t.find_resources("Custom::EndpointSmokeTest")[smoke_id]
        (endpoint_id,) = t.find_resources("AWS::SageMaker::Endpoint")
        assert endpoint_id in smoke["DependsOn"], name
        props = smoke["Properties"]
        assert props["EndpointConfigName"] == {
            "Fn::GetAtt": [next(iter(t.find_resources("AWS::SageMaker::EndpointConfig"))), "EndpointConfigName"]
        }
        assert int(props["ServiceTimeout"]) < 3600
        if name == "component-scale-to-zero":
            (component_id,) = t.find_resources("AWS::SageMaker::InferenceComponent")
            component = t.find_resources("AWS::SageMaker::InferenceComponent")[component_id]
            assert props["InferenceComponentName"] == component["Properties"]["InferenceComponentName"]
            assert component_id in smoke["DependsOn"]
        else:
            assert "InferenceComponentName" not in props


def test_smoke_test_can_be_switched_off_and_takes_its_inputs_from_context():
    from tests.conftest import stack_template

    assert stack_template(smoke_test="false").find_resources("Custom::EndpointSmokeTest") == {}
    t = stack_template(
        smoke_inputs='{"chat_template_kwargs": {"enable_thinking": false}}',
        smoke_expected_pattern="(?i)storage",
        smoke_max_tokens="32",
    )
    t.has_resource_properties(
        "Custom::EndpointSmokeTest",
        {"ExpectedPattern": "(?i)storage", "MaxTokens": Match.any_value(), "ExtraBody": Match.any_value()},
    )
    (smoke,) = t.find_resources("Custom::EndpointSmokeTest").values()
    assert json.loads(smoke["Properties"]["ExtraBody"]) == {"chat_template_kwargs": {"enable_thinking": False}}
    assert str(smoke["Properties"]["MaxTokens"]) == "32"


def test_preflight_runs_after_staging_and_before_the_model(synthesized):
    for name in ("default", "component-scale-to-zero"):
        t = Template.from_json(load(synthesized[name]))
        (preflight_id,) = t.find_resources("Custom::DeploymentPreflight")
        preflight = t.find_resources("Custom::DeploymentPreflight")[preflight_id]
        (wait_id,) = t.find_resources("AWS::CloudFormation::WaitCondition")
        assert wait_id in preflight["DependsOn"], name
        (model,) = t.find_resources("AWS::SageMaker::Model").values()
        assert preflight_id in model["DependsOn"], name
    component = Template.from_json(load(synthesized["component-packed"]))
    component.has_resource_properties(
        "Custom::DeploymentPreflight",
        {"InstanceType": "ml.g6e.12xlarge", "TensorParallelSize": "2", "InstancesNeeded": "1"},
    )
    scaled = Template.from_json(load(synthesized["standard-autoscaling"]))
    scaled.has_resource_properties("Custom::DeploymentPreflight", {"InstancesNeeded": "3"})


def test_preflight_reads_engine_memory_flags_and_context_skips():
    from tests.conftest import stack_template

    t = stack_template(
        engine_env='{"SM_VLLM_KV_CACHE_DTYPE": "fp8", "SM_VLLM_GPU_MEMORY_UTILIZATION": 0.85, '
        '"SM_VLLM_MAX_NUM_BATCHED_TOKENS": "8192"}',
        preflight_skip='["quota"]',
        allow_unverified_s3="true",
        preflight_sequences="4",
    )
    (props,) = [r["Properties"] for r in t.find_resources("Custom::DeploymentPreflight").values()]
    assert props["KvCacheDtype"] == "fp8" and str(props["GpuMemoryUtilization"]) == "0.85"
    assert props["AllowUnverifiedS3"] in ("true", True) and str(props["MaxNumSeqs"]) == "4"
    assert "quota" in json.dumps(props["SkipChecks"])
    assert str(props["MaxNumBatchedTokens"]) == "8192"  # text in engine_env, a whole number for the estimate


def test_no_gpu_endpoint_starts_before_staging_and_preflight_end(synthesized):
    """Endpoint instances are billed from creation: in both modes they wait for the preflight."""
    for name in ("default", "component-scale-to-zero"):
        t = Template.from_json(load(synthesized[name]))
        (endpoint,) = t.find_resources("AWS::SageMaker::Endpoint").values()
        (preflight_id,) = t.find_resources("Custom::DeploymentPreflight")
        depends = set(endpoint.get("DependsOn", []))
        if name == "default":  # Endpoint -> Config -> Model -> Preflight
            (config_id,) = t.find_resources("AWS::SageMaker::EndpointConfig")
            assert config_id in json.dumps(endpoint["Properties"]), name
        else:
            assert preflight_id in depends, name


def test_a_model_tarball_is_staged_into_a_verified_prefix_and_served_from_it(synthesized):
    """A model.tar.gz (SageMaker Training's output) is unpacked by the staging job, not served as a prefix."""
    t = Template.from_json(load(synthesized["model-tarball"]))
    t.has_resource_properties(
        "Custom::StagedCheckpoint",
        {"RepoId": "", "SourceS3Uri": "s3://my-training/job-7/output/model.tar.gz", "Prefix": "models/"},
    )
    t.resource_count_is("AWS::CloudFormation::WaitCondition", 1)
    t.resource_count_is("AWS::S3::Bucket", 2)  # the app's model bucket and its access-log bucket
    # The endpoint serves the staged prefix (a token of the checkpoint), never the archive itself.
    (model,) = t.find_resources("AWS::SageMaker::Model").values()
    uri = model["Properties"]["PrimaryContainer"]["ModelDataSource"]["S3DataSource"]["S3Uri"]
    logical_id, attribute = uri["Fn::GetAtt"]
    assert attribute == "S3Uri"
    assert load(synthesized["model-tarball"])["Resources"][logical_id]["Type"] == "Custom::StagedCheckpoint"
    # The preflight checks the manifest: no opt-out.
    (preflight,) = t.find_resources("Custom::DeploymentPreflight").values()
    assert preflight["Properties"].get("AllowUnverifiedS3", "false") == "false"
    # Exactly the archive object may be read from the training bucket (the handler HEADs it, the job streams it),
    # and its key decrypted; nothing else of that bucket is granted.
    archive = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::my-training/job-7/output/model.tar.gz"]]}
    statements = [
        (name, statement)
        for name, policy in t.find_resources("AWS::IAM::Policy").items()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]

    def names_archive(statement: dict) -> bool:
        resource = statement["Resource"]
        return resource == archive or (isinstance(resource, list) and archive in resource)

    readers = {name for name, st in statements if names_archive(st)}
    assert len(readers) == 2  # the staging job's role and the staging handler's
    on_archive = [st for _, st in statements if names_archive(st)]
    assert all(st["Action"] == "s3:GetObject" for st in on_archive)
    elsewhere = [
        st
        for _, st in statements
        if "my-training" in json.dumps(st["Resource"]) and "job-7/output/model.tar.gz" not in json.dumps(st["Resource"])
    ]
    assert elsewhere == []
    decrypt = {name for name, st in statements if st["Action"] == "kms:Decrypt" and st["Resource"] == KEY_ARN}
    assert decrypt == readers


def test_a_bad_model_tarball_uri_fails_synth_naming_the_key():
    from constructs_lib.deployment.config import ConfigError

    with pytest.raises(
        ConfigError, match=r"model_s3_uri: 's3://b/job/output/model.tar.gz' is not s3://<bucket>/<key>\.tar\.gz"
    ):
        build(model_s3_uri="s3://b/job/output/model.tar.gz")
    with pytest.raises(ConfigError, match="hf_token_secret_arn"):
        build(model_s3_uri="s3://my-training/job/output/model.tar.gz", hf_token_secret_arn=SECRET_ARN)
