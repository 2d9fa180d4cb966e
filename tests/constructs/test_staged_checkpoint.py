"""``StagedCheckpoint``: the custom resource, its wait condition, the job's permissions, every option."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk.assertions import Capture, Match, Template
from cdk_nag import AwsSolutionsChecks

from constructs_lib import GpuEndpoint, StagedCheckpoint
from tests.conftest import default_context

SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SHA = "0123456789abcdef0123456789abcdef01234567"
CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")


def feature_flags() -> dict:
    return {k: v for k, v in default_context().items() if k.startswith("@")}


def synth(outdir: str | None = None, **props) -> tuple[cdk.App, cdk.Stack, StagedCheckpoint]:
    app = cdk.App(context=feature_flags(), outdir=outdir)
    stack = cdk.Stack(app, "Staging")
    if props.pop("with_secret", False):
        props["hf_token_secret"] = secretsmanager.Secret.from_secret_complete_arn(stack, "Token", SECRET_ARN)
    checkpoint = StagedCheckpoint(stack, "Checkpoint", **{"repo_id": "Qwen/Qwen3-8B", **props})
    return app, stack, checkpoint


def template(**props) -> Template:
    _, stack, _ = synth(**props)
    return Template.from_stack(stack)


def policy_statements(t: Template, role_prefix: str) -> list[dict]:
    statements = []
    for _logical_id, policy in t.find_resources("AWS::IAM::Policy").items():
        roles = json.dumps(policy["Properties"].get("Roles", []))
        if role_prefix in roles:
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def test_custom_resource_properties_and_service_timeout():
    t = template(with_secret=True, include=["*.json", "*.safetensors"], exclude=["original/*"])
    t.has_resource_properties(
        "Custom::StagedCheckpoint",
        {
            "RepoId": "Qwen/Qwen3-8B",
            "Revision": "main",
            "Prefix": "models/",
            "Include": ["*.json", "*.safetensors"],
            "Exclude": ["original/*", "requirements.txt", "model.py", "code/*", "serving.properties"],
            "TokenSecretArn": SECRET_ARN,
            "InstanceType": "ml.m5.2xlarge",
            "MaxInstances": "4",
            "MaxRuntimeSeconds": "21600",
            "ServiceTimeout": "1500",  # hand-off (600 s) plus 15 minutes, far below CloudFormation's hour
            "JobNamePrefix": Match.string_like_regexp(r"^hfstage-[0-9a-f]{8}-[0-9a-f]{10}-$"),
            "WaitHandle": {"Ref": Match.string_like_regexp("^CheckpointWaitHandle")},
            "CodeUri": Match.any_value(),
            "ImageUri": {
                "Fn::Join": [
                    "",
                    Match.array_with(["/pytorch:2.13.0-cpu-amzn2023-sagemaker"]),
                ]
            },
        },
    )


def test_the_token_is_never_in_the_template_only_the_secret_arn():
    text = json.dumps(template(with_secret=True).to_json())
    assert SECRET_ARN in text
    assert "HF_TOKEN" not in text and "SecretString" not in text


def test_wait_condition_waits_for_the_job_signal_beyond_one_hour():
    t = template(max_runtime=cdk.Duration.hours(11))
    handle = Capture()
    t.has_resource(
        "AWS::CloudFormation::WaitCondition",
        {
            "Properties": {"Count": 1, "Handle": {"Ref": handle}, "Timeout": "40500"},
            "DependsOn": [Match.string_like_regexp("^Checkpoint")],
        },
    )
    assert handle.as_string().startswith("CheckpointWaitHandle")
    t.resource_count_is("AWS::CloudFormation::WaitConditionHandle", 1)


def test_job_state_change_rule_signals_this_checkpoints_jobs_with_the_handle():
    t = template()
    prefix = Capture()
    t.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": {
                "source": ["aws.sagemaker"],
                "detail-type": ["SageMaker Processing Job State Change"],
                "detail": {
                    "ProcessingJobName": [{"prefix": prefix}],
                    "ProcessingJobStatus": ["Completed", "Failed", "Stopped"],
                },
            },
            "Targets": [
                Match.object_like(
                    {
                        "InputTransformer": {
                            "InputPathsMap": {"f1": "$"},
                            "InputTemplate": {
                                "Fn::Join": [
                                    "",
                                    Match.array_with([{"Ref": Match.string_like_regexp("^CheckpointWaitHandle")}]),
                                ]
                            },
                        },
                        "RetryPolicy": {"MaximumRetryAttempts": 20, "MaximumEventAgeInSeconds": 7200},
                    }
                )
            ],
        },
    )
    t.has_resource_properties("Custom::StagedCheckpoint", {"JobNamePrefix": prefix.as_string()})
    # The rule exists before any job can start, so no completion event is missed.
    (resource,) = t.find_resources("Custom::StagedCheckpoint").values()
    (rule_id,) = t.find_resources("AWS::Events::Rule")
    assert rule_id in resource["DependsOn"]


def test_a_new_revision_gets_a_new_wait_condition_and_handle():
    def ids(revision: str) -> set[str]:
        t = template(revision=revision)
        return set(t.find_resources("AWS::CloudFormation::WaitCondition")) | set(
            t.find_resources("AWS::CloudFormation::WaitConditionHandle")
        )

    assert ids("main") == ids("main")
    assert ids("main").isdisjoint(ids("v2.0"))


@pytest.mark.parametrize(
    "change",
    [
        {"max_runtime": cdk.Duration.hours(8)},  # the wait condition's Timeout cannot be updated
        {"instance_type": "ml.c5.4xlarge"},  # any update may start a job that needs a fresh handle
        {"include": ["*.gguf"]},
    ],
)
def test_any_change_of_the_resource_gets_a_new_handle_and_wait_condition(change):
    def ids(**props) -> set[str]:
        t = template(**props)
        return set(t.find_resources("AWS::CloudFormation::WaitCondition")) | set(
            t.find_resources("AWS::CloudFormation::WaitConditionHandle")
        )

    assert ids().isdisjoint(ids(**change))


def test_job_role_writes_only_under_the_repository_prefix():
    t = template()
    statements = policy_statements(t, "CheckpointJobRole")
    writes = [s for s in statements if "s3:PutObject" in json.dumps(s["Action"])]
    assert len(writes) == 1
    assert json.dumps(writes[0]["Resource"]).endswith('/models/Qwen--Qwen3-8B/*"]]}')
    for statement in statements:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert not any(a in ("s3:*", "s3:DeleteObject", "*") for a in actions)
    # To abort uploads a killed run left open. No s3:prefix condition: S3 does not supply that key for
    # ListBucketMultipartUploads, so the condition would always deny (the worker filters by key itself).
    (uploads,) = [s for s in statements if s["Action"] == "s3:ListBucketMultipartUploads"]
    assert "s3:prefix" not in json.dumps(uploads.get("Condition", {})) and "models/" not in json.dumps(
        uploads["Resource"]
    )


def test_pinned_sha_narrows_every_grant_to_the_revision_prefix():
    t = template(revision=SHA)
    text = json.dumps(t.find_resources("AWS::IAM::Policy"))
    assert f"models/Qwen--Qwen3-8B/{SHA}/*" in text
    assert "models/Qwen--Qwen3-8B/*" not in text


def test_job_role_reads_only_the_given_secret_and_provider_passes_only_the_job_role():
    t = template(with_secret=True)
    secret_reads = [
        s for s in policy_statements(t, "CheckpointJobRole") if "secretsmanager:GetSecretValue" in json.dumps(s)
    ]
    assert [s["Resource"] for s in secret_reads] == [SECRET_ARN]
    provider = policy_statements(t, "StagedCheckpointProviderRole")
    (pass_role,) = [s for s in provider if s["Action"] == "iam:PassRole"]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    (role_arn,) = pass_role["Resource"]["Fn::GetAtt"][:1]
    assert role_arn.startswith("CheckpointJobRole")
    jobs = [s for s in provider if "sagemaker:CreateProcessingJob" in json.dumps(s["Action"])]
    # Every job this construct ever starts (an update's cleanup stops the previous revision's job).
    assert re.search(r"processing-job/hfstage-[0-9a-f]{8}-\*", json.dumps(jobs[0]["Resource"]))


def test_without_a_secret_no_role_can_read_secrets():
    assert "secretsmanager" not in json.dumps(template().find_resources("AWS::IAM::Policy"))


def test_default_bucket_is_created_retained_and_aborts_incomplete_uploads():
    t = template()
    t.resource_count_is("AWS::S3::Bucket", 2)  # the model bucket and its access logs
    t.has_resource(
        "AWS::S3::Bucket",
        {
            "DeletionPolicy": "Retain",
            "Properties": Match.object_like(
                {
                    "LifecycleConfiguration": {
                        "Rules": [Match.object_like({"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 3}})]
                    }
                }
            ),
        },
    )


def test_given_bucket_with_a_kms_key_is_used_and_the_job_may_encrypt():
    app = cdk.App(context=feature_flags())
    stack = cdk.Stack(app, "Staging")
    key = kms.Key.from_key_arn(stack, "Key", KEY_ARN)
    bucket = s3.Bucket.from_bucket_attributes(stack, "Bucket", bucket_name="my-models", encryption_key=key)
    StagedCheckpoint(stack, "Checkpoint", repo_id="Qwen/Qwen3-8B", bucket=bucket)
    t = Template.from_stack(stack)
    t.resource_count_is("AWS::S3::Bucket", 0)
    t.has_resource_properties("Custom::StagedCheckpoint", {"Bucket": "my-models"})
    kms_statements = [s for s in policy_statements(t, "CheckpointJobRole") if "kms:" in json.dumps(s)]
    assert sorted(kms_statements[0]["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]


def test_options_reach_the_properties():
    t = template(
        instance_type="ml.c5.4xlarge",
        max_instances=12,
        bytes_per_instance=50 * 2**30,
        volume_size_gb=50,
        hub_endpoint="https://hf-mirror.example.com",
        handoff_after=cdk.Duration.minutes(5),
        prefix="checkpoints/",
    )
    t.has_resource_properties(
        "Custom::StagedCheckpoint",
        {
            "InstanceType": "ml.c5.4xlarge",
            "MaxInstances": "12",
            "BytesPerInstance": str(50 * 2**30),
            "VolumeSizeGb": "50",
            "HubEndpoint": "https://hf-mirror.example.com",
            "HandoffSeconds": "300",
            "ServiceTimeout": "1200",
            "Prefix": "checkpoints/",
        },
    )


def test_two_checkpoints_share_one_provider_and_one_signal_function():
    app = cdk.App(context=feature_flags())
    stack = cdk.Stack(app, "Staging")
    StagedCheckpoint(stack, "A", repo_id="Qwen/Qwen3-8B")
    StagedCheckpoint(stack, "B", repo_id="Qwen/Qwen3-4B-Instruct-2507")
    t = Template.from_stack(stack)
    t.resource_count_is("Custom::StagedCheckpoint", 2)
    t.resource_count_is("AWS::StepFunctions::StateMachine", 1)
    handlers = [
        f["Properties"]["Handler"]
        for f in t.find_resources("AWS::Lambda::Function").values()
        if "Handler" in f["Properties"]
    ]
    assert handlers.count("index.on_event") == 1
    assert handlers.count("index.on_job_state_change") == 1


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"repo_id": "not a repo"}, r"repo_id='not a repo' is not a Hugging Face repository id"),
        ({"revision": "a b"}, r"revision='a b'"),
        ({"prefix": "models"}, r"prefix='models' must end with '/'"),
        ({"prefix": "mo*dels/"}, r"wildcard"),
        ({"max_instances": 0}, r"max_instances=0 is out of range; allowed: 1-100"),
        ({"max_runtime": cdk.Duration.hours(12)}, r"max_runtime=43200 s is out of range; allowed: 60-42300 s"),
        ({"handoff_after": cdk.Duration.hours(1)}, r"handoff_after=3600 s is out of range"),
        ({"instance_type": "m5.large"}, r"instance_type='m5.large' is not a SageMaker instance type"),
    ],
)
def test_bad_props_fail_with_what_is_allowed(props, message):
    with pytest.raises(ValueError, match=message):
        synth(**props)


def test_several_bad_props_are_reported_together():
    with pytest.raises(ValueError) as error:
        synth(repo_id="x", max_instances=0, volume_size_gb=0)
    assert str(error.value).count(";") >= 2


def test_worker_asset_runs_as_a_zip_and_holds_only_the_worker(tmp_path):
    app, stack, _checkpoint = synth(outdir=str(tmp_path))
    app.synth()
    uri = Template.from_stack(stack).find_resources("Custom::StagedCheckpoint")
    (resource,) = uri.values()
    asset_name = json.dumps(resource["Properties"]["CodeUri"]).split("/")[-1].split('"')[0]
    staged = next(p for p in tmp_path.iterdir() if p.name == f"asset.{asset_name.removesuffix('.zip')}")
    names = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
    assert "__main__.py" in names and "hfstage/worker.py" in names
    assert not any("__pycache__" in n or n.startswith(("tests", "constructs_lib")) for n in names)
    # awscrt for the checksums (this machine synthesizes on Linux x86-64 with it installed): its package and extension.
    assert "_vendor/_awscrt.abi3.so" in names and "_vendor/awscrt/checksums.py" in names
    archive = tmp_path / "worker.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in names:
            z.write(staged / name, name)
    # Exactly how the Processing job starts it: python3 <asset>.zip <args>.
    result = subprocess.run([sys.executable, str(archive), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "--repo-id" in result.stdout


def test_gpu_endpoint_serves_the_staged_revision_after_the_wait_condition():
    app = cdk.App(context=feature_flags())
    stack = cdk.Stack(app, "Staging")
    checkpoint = StagedCheckpoint(stack, "Checkpoint", repo_id="Qwen/Qwen3-8B")
    GpuEndpoint(stack, "Endpoint", model=checkpoint)
    t = Template.from_stack(stack)
    (model,) = t.find_resources("AWS::SageMaker::Model").values()
    (resource_id,) = t.find_resources("Custom::StagedCheckpoint")
    assert model["Properties"]["PrimaryContainer"]["ModelDataSource"]["S3DataSource"]["S3Uri"] == {
        "Fn::GetAtt": [resource_id, "S3Uri"]
    }
    (wait_id,) = t.find_resources("AWS::CloudFormation::WaitCondition")
    assert wait_id in model.get("DependsOn", [])


def test_nag_and_cfn_lint_are_clean(tmp_path):
    app, _, _ = synth(outdir=str(tmp_path), with_secret=True)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    for finding in plugin["suppressedViolations"]:
        assert len(finding["reason"]) > 40
    result = subprocess.run(
        [CFN_LINT, "--ignore-checks", "W3005", "--", str(tmp_path / "Staging.template.json")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout


def test_grant_read_gives_a_role_read_access_to_the_prefix():
    app = cdk.App(context=feature_flags())
    stack = cdk.Stack(app, "Staging")
    checkpoint = StagedCheckpoint(stack, "Checkpoint", repo_id="Qwen/Qwen3-8B", revision=SHA)
    role = iam.Role(stack, "Reader", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    checkpoint.grant_read(role)
    statements = policy_statements(Template.from_stack(stack), "Reader")
    (get,) = [s for s in statements if s["Action"] == "s3:GetObject"]
    # The resolved revision prefix (GetAtt Prefix), never the repository's other revisions.
    assert '"Prefix"]' in json.dumps(get["Resource"]) and "Fn::GetAtt" in json.dumps(get["Resource"])
    (listing,) = [s for s in statements if s["Action"] == "s3:ListBucket"]
    assert "Fn::GetAtt" in json.dumps(listing["Condition"])
    assert checkpoint.object_arn_pattern and cdk.Token.is_unresolved(checkpoint.s3_uri)
    assert cdk.Token.is_unresolved(checkpoint.revision) and cdk.Token.is_unresolved(checkpoint.manifest_uri)


def test_the_pinned_staging_image_is_in_patch_support_and_warns_after_it():
    import datetime

    from constructs_lib.staged_checkpoint import staging_defaults, staging_image_past_end_of_patch

    image = staging_defaults()["image"]
    assert image["repository"] == "pytorch" and image["tag"].startswith("2.13.0-cpu-")
    end = datetime.date.fromisoformat(image["eop"])
    assert staging_image_past_end_of_patch(end) is None
    warning = staging_image_past_end_of_patch(end + datetime.timedelta(days=1))
    assert warning.startswith(f"the staging image pytorch:{image['tag']} reached End of Patch on {end}")


def test_a_floating_revision_warns_as_a_floating_image_tag_does_and_a_sha_does_not():
    from aws_cdk.assertions import Annotations

    _, stack, _ = synth()  # revision defaults to main
    Annotations.from_stack(stack).has_warning(
        "/Staging/Checkpoint", Match.string_like_regexp("revision='main' is a branch or tag: a redeploy after a new")
    )
    _, pinned, _ = synth(revision=SHA)
    assert not Annotations.from_stack(pinned).find_warning("/Staging/Checkpoint", Match.string_like_regexp("revision="))


def test_without_awscrt_for_linux_x86_64_the_asset_has_none_and_synth_says_what_that_costs(monkeypatch):
    from aws_cdk.assertions import Annotations

    import constructs_lib.staged_checkpoint as module

    _, with_crt, _ = synth()
    assert not Annotations.from_stack(with_crt).find_info("/Staging/Checkpoint", Match.string_like_regexp("awscrt"))
    monkeypatch.setattr(module, "crt_files", lambda: None)
    _, stack, _ = synth()
    Annotations.from_stack(stack).has_info(
        "/Staging/Checkpoint",
        Match.string_like_regexp("carries no awscrt .* writes CRC32 checksums with zlib, at about 0.2 CPU-s per GB"),
    )
