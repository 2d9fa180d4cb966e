"""The app as `cdk synth` builds it: default deployment, each engine, model sources, lint and nag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk.assertions import Match, Template

from tests.conftest import build

KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
VARIANTS = {
    "default": {},
    "sglang": {"engine": "sglang", "instance_type": "ml.g6e.2xlarge"},
    "vllm-multi-gpu": {"instance_type": "ml.p5.48xlarge", "engine_env": '{"SM_VLLM_ENABLE_PREFIX_CACHING": true}'},
    "given-prefix": {"model_s3_uri": "s3://my-models/custom/qwen/"},
    "given-bucket": {
        "model_bucket": "my-models",
        "revision": "0123abcd",
        "model_kms_key_arn": KEY_ARN,
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
    template = load(synthesized["default"])
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::SageMaker::EndpointConfig":
            resource["Properties"]["ProductionVariants"][0]["ModelDataDownloadTimeoutInSeconds"] = 7200
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
                            "SM_VLLM_TENSOR_PARALLEL_SIZE": "1",
                            "SM_VLLM_MAX_MODEL_LEN": "32768",
                        }
                    ),
                    "ModelDataSource": {
                        "S3DataSource": {
                            "S3Uri": {
                                "Fn::Join": [
                                    "",
                                    ["s3://", {"Ref": Match.any_value()}, "/models/Qwen--Qwen3-4B-Instruct-2507/main/"],
                                ]
                            },
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
    assert set(t.find_outputs("*")) == {"EndpointName", "Region", "ModelDataUri", "ImageUri", "InvokeCommand"}
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


def test_given_prefix_creates_no_bucket(synthesized):
    t = Template.from_json(load(synthesized["given-prefix"]))
    t.resource_count_is("AWS::S3::Bucket", 0)
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
        "AWS::SageMaker::Model",
        {
            "PrimaryContainer": Match.object_like(
                {
                    "ModelDataSource": {
                        "S3DataSource": Match.object_like(
                            {"S3Uri": "s3://my-models/models/Qwen--Qwen3-4B-Instruct-2507/0123abcd/"}
                        )
                    }
                }
            )
        },
    )


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
            timeout = resource["Properties"].get("ServiceTimeout")
            assert isinstance(timeout, int) and 1 <= timeout <= 900, (name, logical_id)


def test_summary_reports_what_was_synthesized(synthesized, capsys):
    from llmops.summary import main

    assert main([str(synthesized["sglang"])]) == 0
    out = capsys.readouterr().out
    assert "AwsSolutions: success, 0 findings" in out
    assert "env SM_SGLANG_TP_SIZE='1'" in out
    assert "variant AllTraffic: 1 x ml.g6e.2xlarge, AMI al2023-ami-sagemaker-inference-gpu-4-1" in out
