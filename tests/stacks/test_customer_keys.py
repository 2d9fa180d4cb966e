"""Customer-managed keys for the log groups and the Lambda functions' environment (issue 27, item 3): every
AWS::Logs::LogGroup and AWS::Lambda::Function of both deployment modes carries the given key, none without one, each
function's role decrypts only through Lambda in this account, cfn-lint and cdk-nag stay clean."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs

from constructs_lib import Refusal, encrypt_logs_and_functions, logs_key_policy_statement
from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from tests.conftest import build, context_with

# Whole apps in many variants: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

LOGS_KEY = "arn:aws:kms:us-east-1:123456789012:key/1111abcd-12ab-34cd-56ef-1234567890ab"
LAMBDA_KEY = "arn:aws:kms:us-east-1:123456789012:key/2222abcd-12ab-34cd-56ef-1234567890ab"
KEYS = {"logs_kms_key_arn": LOGS_KEY, "lambda_kms_key_arn": LAMBDA_KEY}
MODES = {"standard": {}, "component": {"deployment_mode": "inference-component"}}
CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, dict]:
    out = {}
    for mode, overrides in MODES.items():
        for keyed in (True, False):
            outdir = tmp_path_factory.mktemp(f"{mode}-{keyed}")
            build(outdir=str(outdir), **overrides, **(KEYS if keyed else {})).synth()  # raises on a nag finding
            path = outdir / "LlmEndpoint.template.json"
            out[(mode, keyed)] = {
                "template": json.loads(path.read_text()),
                "path": path,
                "report": json.loads((outdir / "validation-report.json").read_text()),
            }
    return out


def of_type(template: dict, kind: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_log_group_and_function_carries_the_given_keys(synthesized, mode):
    template = synthesized[(mode, True)]["template"]
    groups = of_type(template, "AWS::Logs::LogGroup")
    functions = of_type(template, "AWS::Lambda::Function")
    assert groups and functions  # the handlers' groups, the waiter's, CDK's own functions
    assert {k: g["Properties"].get("KmsKeyId") for k, g in groups.items()} == dict.fromkeys(groups, LOGS_KEY)
    assert {k: f["Properties"].get("KmsKeyArn") for k, f in functions.items()} == dict.fromkeys(functions, LAMBDA_KEY)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_without_keys_nothing_carries_one(synthesized, mode):
    template = synthesized[(mode, False)]["template"]
    assert all("KmsKeyId" not in g["Properties"] for g in of_type(template, "AWS::Logs::LogGroup").values())
    assert all("KmsKeyArn" not in f["Properties"] for f in of_type(template, "AWS::Lambda::Function").values())
    assert LAMBDA_KEY not in json.dumps(template) and LOGS_KEY not in json.dumps(template)


def decrypt_statements(template: dict, role: str) -> list[dict]:
    found = []
    for policy in of_type(template, "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            found += [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s.get("Resource") == LAMBDA_KEY]
    return found


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_function_role_decrypts_the_environment_key_through_lambda_in_this_account_only(synthesized, mode):
    template = synthesized[(mode, True)]["template"]
    functions = of_type(template, "AWS::Lambda::Function")
    roles = {f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values()}
    for role in roles:
        assert decrypt_statements(template, role) == [
            {
                "Action": "kms:Decrypt",
                "Condition": {
                    "StringEquals": {
                        "kms:ViaService": {
                            "Fn::Join": ["", ["lambda.", {"Ref": "AWS::Region"}, ".", {"Ref": "AWS::URLSuffix"}]]
                        },
                        "kms:CallerAccount": {"Ref": "AWS::AccountId"},
                    }
                },
                "Effect": "Allow",
                "Resource": LAMBDA_KEY,
            }
        ], role
    # The grant exists before each function is created or updated onto the key (create and update alike).
    for name, function in functions.items():
        role = function["Properties"]["Role"]["Fn::GetAtt"][0]
        granting = {
            k
            for k, p in of_type(template, "AWS::IAM::Policy").items()
            if {"Ref": role} in p["Properties"]["Roles"] and LAMBDA_KEY in json.dumps(p)
        }
        assert granting and granting <= set(function.get("DependsOn", [])), name
    # Nothing else in the template may use either key (log groups need no IAM grant: the key policy decides).
    others = [
        s
        for p in of_type(template, "AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if LOGS_KEY in json.dumps(s)
    ]
    assert others == []


def test_keyed_templates_pass_cfn_lint_and_cdk_nag(synthesized):
    paths = [str(v["path"]) for (_, keyed), v in synthesized.items() if keyed]
    result = subprocess.run([CFN_LINT, "--ignore-checks", "W3005", "--", *paths], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for (mode, keyed), synth in synthesized.items():
        (plugin,) = synth["report"]["pluginReports"]
        assert plugin["conclusion"] == "success" and plugin["violations"] == [], (mode, keyed)


@pytest.mark.parametrize("key", sorted(KEYS))
@pytest.mark.parametrize(
    "value",
    [
        "arn:aws:kms:us-east-1:123456789012:alias/logs",  # an alias: neither KmsKeyId nor KmsKeyArn takes one
        "1111abcd-12ab-34cd-56ef-1234567890ab",  # a bare key id
        "arn:aws:s3:::bucket",
    ],
)
def test_a_key_that_is_not_a_key_arn_is_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError) as refused:
        DeploymentConfig.from_context(context_with(**{key: value}))
    assert f"{key}={value!r}" in str(refused.value) and "key/" in str(refused.value)


def test_the_construct_function_refuses_an_alias_it_is_given():
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region="us-east-1"))
    alias = kms.Key.from_key_arn(stack, "Alias", "arn:aws:kms:us-east-1:123456789012:alias/logs")
    with pytest.raises(Refusal, match=r"logs_key='arn:aws:kms:us-east-1:123456789012:alias/logs': allowed"):
        encrypt_logs_and_functions(stack, logs_key=alias)


def test_a_key_created_in_the_app_is_accepted_and_reaches_a_library_users_log_group():
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region="us-east-1"))
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    logs.LogGroup(stack, "Logs")
    encrypt_logs_and_functions(stack, logs_key=key)
    template = cdk.assertions.Template.from_stack(stack)
    template.has_resource_properties("AWS::Logs::LogGroup", {"KmsKeyId": {"Fn::GetAtt": ["Key961B73FD", "Arn"]}})


def test_the_documented_logs_key_statement_is_the_guides():
    statement = logs_key_policy_statement(region="us-east-1", account="123456789012")
    guide = (Path(__file__).parents[2] / "docs/guide/private-network.md").read_text()
    # The guide shows the same statement, for the user to add to the key policy of the key they give.
    block = guide.split("```json\n", 1)[1].split("```", 1)[0]
    expected = json.loads(block.replace("<region>", "us-east-1").replace("<account>", "123456789012"))
    assert statement == expected
    assert statement["Principal"] == {"Service": "logs.us-east-1.amazonaws.com"}
    arn_like = statement["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    assert arn_like == "arn:aws:logs:us-east-1:123456789012:log-group:*"


def test_a_fleet_keys_every_stack_and_the_packed_deployments_added_after_the_stack(tmp_path):
    # Packed deployments and adapters are added to an endpoint stack after it is built
    # (constructs_lib/deployment/fleet_stacks.py):
    # the aspect reaches them too.
    outdir = tmp_path / "fleet"
    build(outdir=str(outdir), deployments_file="tests/data/fleet.json", **KEYS).synth()
    seen = 0
    for path in sorted(outdir.glob("*.template.json")):
        template = json.loads(path.read_text())
        for group in of_type(template, "AWS::Logs::LogGroup").values():
            assert group["Properties"].get("KmsKeyId") == LOGS_KEY, path.name
            seen += 1
        for function in of_type(template, "AWS::Lambda::Function").values():
            assert function["Properties"].get("KmsKeyArn") == LAMBDA_KEY, path.name
            seen += 1
    assert seen


def test_a_function_whose_role_is_not_a_construct_role_is_refused_by_name():
    # aws-cdk-lib's CustomResourceProvider (here auto_delete_objects) makes a raw role with inline policies: the
    # grant cannot be added, so synth stops naming the function rather than leave it unable to start.
    from aws_cdk import aws_s3 as s3

    app = cdk.App()
    stack = cdk.Stack(app, "S")
    s3.Bucket(stack, "Bucket", auto_delete_objects=True, removal_policy=cdk.RemovalPolicy.DESTROY)
    encrypt_logs_and_functions(stack, environment_key=kms.Key.from_key_arn(stack, "Key", LAMBDA_KEY))
    with pytest.raises(RuntimeError, match=r"Lambda function S/Custom::S3AutoDeleteObjects.*/Handler: its execution"):
        app.synth()


# -- the S3 and volume key grants, statement by statement (conditions too): a dropped condition is a defect ------


def _grant_statements(grant) -> list[dict]:
    """The role's policy statements after ``grant(stack, role, key)``, in a bare app (no cdk.json flags)."""
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Template

    app = cdk.App()
    stack = cdk.Stack(app, "Keys", env=cdk.Environment(account="123456789012", region="eu-west-3"))
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    key = kms.Key.from_key_arn(stack, "Key", LOGS_KEY)
    grant(stack, role, key)
    (policy,) = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_a_bucket_key_grant_is_through_s3_in_this_region_and_account_only():
    from constructs_lib.keys import grant_bucket_key

    actions = ("kms:GenerateDataKey", "kms:Decrypt", "kms:GenerateDataKey")  # unsorted, repeated: one of each
    statements = _grant_statements(lambda stack, role, key: grant_bucket_key(role, key, scope=stack, actions=actions))
    assert statements == [
        {
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Condition": {
                "StringEquals": {
                    "kms:ViaService": {"Fn::Join": ["", ["s3.eu-west-3.", {"Ref": "AWS::URLSuffix"}]]},
                    "kms:CallerAccount": "123456789012",
                }
            },
            "Effect": "Allow",
            "Resource": LOGS_KEY,
        }
    ]


def test_a_bucket_key_grant_returns_its_grant():
    from constructs_lib.keys import grant_bucket_key

    grants = []
    _grant_statements(lambda s, r, k: grants.append(grant_bucket_key(r, k, scope=s, actions=("kms:Decrypt",))))
    (grant,) = grants
    assert grant.success


def test_a_volume_key_grant_is_this_accounts_and_its_grants_are_for_aws_resources_only():
    from constructs_lib.keys import VOLUME, grant_volume_key

    statements = _grant_statements(lambda stack, role, key: grant_volume_key(role, key, scope=stack))
    assert statements == [
        {
            "Action": list(VOLUME),  # the action list itself: test_iam_exact.py
            "Condition": {"StringEquals": {"kms:CallerAccount": "123456789012"}},
            "Effect": "Allow",
            "Resource": LOGS_KEY,
        },
        {
            "Action": "kms:CreateGrant",
            "Condition": {
                "Bool": {"kms:GrantIsForAWSResource": "true"},
                "StringEquals": {"kms:CallerAccount": "123456789012"},
            },
            "Effect": "Allow",
            "Resource": LOGS_KEY,
        },
    ]


def test_the_logs_key_statement_goes_into_a_key_created_in_the_app_as_the_page_says():
    """docs/constructs/CustomerKeys.md: the dict is the statement's JSON, made a statement with from_json."""
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Template

    app = cdk.App()
    stack = cdk.Stack(app, "Keys", env=cdk.Environment(account="123456789012", region="us-east-1"))
    key = kms.Key(stack, "LogsKey")
    statement = logs_key_policy_statement(region=stack.region, account=stack.account)
    assert key.add_to_resource_policy(iam.PolicyStatement.from_json(statement)).statement_added
    policy = Template.from_stack(stack).find_resources("AWS::KMS::Key")
    (resource,) = policy.values()
    added = [s for s in resource["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == statement["Sid"]]
    assert added == [statement]
    page = (Path(__file__).parents[2] / "docs/constructs/CustomerKeys.md").read_text()
    assert "iam.PolicyStatement.from_json(logs_key_policy_statement(" in " ".join(page.split())
