"""The app's model bucket: a fixed name per account, region and app, found again after `cdk destroy`."""

from __future__ import annotations

import json

import pytest

from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from tests.conftest import context_with, stack_template

NAME = {"Fn::Join": ["", ["llmendpoint-models-", {"Ref": "AWS::AccountId"}, "-", {"Ref": "AWS::Region"}]]}


def buckets(template) -> dict:
    return template.find_resources("AWS::S3::Bucket")


def test_the_created_bucket_has_the_app_name_and_is_retained():
    template = stack_template()
    named = [r for r in buckets(template).values() if r["Properties"].get("BucketName") == NAME]
    assert len(named) == 1 and named[0]["DeletionPolicy"] == "Retain"


def test_reuse_creates_no_bucket_and_uses_the_same_name_with_owner_checks():
    template = stack_template(reuse_model_bucket="true")
    assert buckets(template) == {}
    (checkpoint,) = template.find_resources("Custom::StagedCheckpoint").values()
    assert checkpoint["Properties"]["Bucket"] == NAME
    # Every S3 grant on the app bucket requires this account as its owner: a bucket someone else created under
    # the name is never read or written (the IAM form of ExpectedBucketOwner).
    statements = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if any(a.startswith("s3:") for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]))
        and "llmendpoint-models-" in json.dumps(s["Resource"])
    ]
    assert statements
    for s in statements:
        assert s["Condition"]["StringEquals"]["s3:ResourceAccount"] == {"Ref": "AWS::AccountId"}, s


def test_reuse_goes_alone():
    with pytest.raises(ConfigError) as info:
        DeploymentConfig.from_context(context_with(reuse_model_bucket="true", model_bucket="my-models"))
    assert any(p.startswith("reuse_model_bucket=true: reuses the bucket") for p in info.value.problems)


def test_long_app_names_fit_63_characters_in_every_region_and_stay_apart():
    from constructs_lib.model_bucket import app_bucket_name

    longest_region, account = "us-isof-south-1", "123456789012"

    def resolved(app: str) -> str:
        return (
            app_bucket_name(app).replace(cdk_token("AccountId"), account).replace(cdk_token("Region"), longest_region)
        )

    a = resolved("LlmEndpoint-Qwen3-Coder-30B-A3B")
    b = resolved("LlmEndpoint-Qwen3-Coder-30B-A3B-FP8")
    assert len(a) <= 63 and len(b) <= 63
    assert a != b  # the same first 28 characters once gave both apps one bucket
    assert resolved("LlmEndpoint") == f"llmendpoint-models-{account}-{longest_region}"  # short names unchanged


def cdk_token(name: str) -> str:
    import aws_cdk as cdk

    return {"AccountId": cdk.Aws.ACCOUNT_ID, "Region": cdk.Aws.REGION}[name]
