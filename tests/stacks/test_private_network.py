"""Private networks, customer keys and tags (issue 27): the context keys, what the template carries, what the
staging handler asks SageMaker for, and the refusals, in both deployment modes with cfn-lint and cdk-nag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match, Template

from constructs_lib import GpuEndpoint, S3ModelData, StagedCheckpoint
from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.names import hub_endpoint_problem
from tests.conftest import build, context_with, stack_template

# Whole apps in many variants: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

SUBNETS = ["subnet-0123456789abcdef0", "subnet-89abcdef"]
GROUP = "sg-0123456789abcdef0"
VPC = "vpc-0123456789abcdef0"
BUCKET_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
VOLUME_KEY = "arn:aws:kms:us-east-1:123456789012:key/9876abcd-12ab-34cd-56ef-1234567890ab"
TAGS = {"cost-center": "ml 42", "team": "platform/llm"}
# The volume key needs an instance type without local NVMe (only the p3 family in the catalog), and p3's V100 a
# CUDA 12 image.
CUDA12_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11.0-gpu-py312-cu128-ubuntu22.04-sagemaker"
GOVERNED = {
    "vpc_subnet_ids": json.dumps(SUBNETS),
    "bucket_kms_key_arn": BUCKET_KEY,
    "volume_kms_key_arn": VOLUME_KEY,
    # Log groups and functions (tests/stacks/test_customer_keys.py has their own checks), with everything else.
    "logs_kms_key_arn": "arn:aws:kms:us-east-1:123456789012:key/1111abcd-12ab-34cd-56ef-1234567890ab",
    "lambda_kms_key_arn": "arn:aws:kms:us-east-1:123456789012:key/2222abcd-12ab-34cd-56ef-1234567890ab",
    "tags": json.dumps(TAGS),
    "instance_type": "ml.p3.2xlarge",
    "image": CUDA12_IMAGE,
}
VARIANTS = {
    # Given security groups (nothing created), standard mode.
    "standard": {**GOVERNED, "vpc_security_group_ids": json.dumps([GROUP])},
    # A VPC id and no group: one is created per construct; component mode; a mirror on its own port.
    "component": {
        **GOVERNED,
        "vpc_id": VPC,
        "deployment_mode": "inference-component",
        "hf_endpoint": "https://nexus.example.internal:8443/repository/hf-remote",
    },
}
CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, dict]:
    out = {}
    for name, overrides in VARIANTS.items():
        outdir = tmp_path_factory.mktemp(name)
        build(outdir=str(outdir), **overrides).synth()  # raises on an unacknowledged cdk-nag finding
        out[name] = {
            "template": json.loads((outdir / "LlmEndpoint.template.json").read_text()),
            "path": outdir / "LlmEndpoint.template.json",
            "report": json.loads((outdir / "validation-report.json").read_text()),
        }
    return out


def resources(template: dict, kind: str) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def test_both_modes_pass_cfn_lint_and_cdk_nag(synthesized):
    result = subprocess.run(
        [CFN_LINT, "--ignore-checks", "W3005", "--", *(str(v["path"]) for v in synthesized.values())],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name, synth in synthesized.items():
        (plugin,) = synth["report"]["pluginReports"]
        assert plugin["conclusion"] == "success" and plugin["violations"] == [], name


def test_standard_mode_puts_the_model_in_the_given_subnets_and_groups(synthesized):
    template = synthesized["standard"]["template"]
    (model,) = resources(template, "AWS::SageMaker::Model")
    assert model["VpcConfig"] == {"Subnets": SUBNETS, "SecurityGroupIds": [GROUP]}
    assert model["EnableNetworkIsolation"] is True
    assert resources(template, "AWS::EC2::SecurityGroup") == []  # given groups: none created
    (config,) = resources(template, "AWS::SageMaker::EndpointConfig")
    assert "VpcConfig" not in config  # a model on the variant carries its own (the config's is for components)
    assert config["KmsKeyId"] == VOLUME_KEY
    (staging,) = resources(template, "Custom::StagedCheckpoint")
    assert staging["Subnets"] == SUBNETS and staging["SecurityGroupIds"] == [GROUP]
    assert staging["VolumeKmsKeyId"] == VOLUME_KEY


def test_component_mode_puts_the_config_and_the_model_in_the_vpc_with_a_created_group(synthesized):
    template = synthesized["component"]["template"]
    groups = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::EC2::SecurityGroup"}
    assert len(groups) == 3  # the endpoint's, the staging job's and the stack's functions'
    for group in groups.values():
        properties = group["Properties"]
        assert properties["VpcId"] == VPC and "SecurityGroupIngress" not in properties
    endpoint_group = next(k for k in groups if k.startswith("Endpoint"))
    staging_group = next(k for k in groups if k.startswith("Checkpoint"))
    assert [e["FromPort"] for e in groups[endpoint_group]["Properties"]["SecurityGroupEgress"]] == [443]
    # The mirror's own port is open too, for the staging job and the functions (the staging handler asks it).
    functions_group = next(k for k in groups if k.startswith("FunctionsNetwork"))
    for group in (staging_group, functions_group):
        assert sorted(e["FromPort"] for e in groups[group]["Properties"]["SecurityGroupEgress"]) == [443, 8443]
    expected = {"Subnets": SUBNETS, "SecurityGroupIds": [{"Fn::GetAtt": [endpoint_group, "GroupId"]}]}
    (config,) = resources(template, "AWS::SageMaker::EndpointConfig")
    assert config["VpcConfig"] == expected and config["EnableNetworkIsolation"] is True
    (model,) = resources(template, "AWS::SageMaker::Model")
    assert model["VpcConfig"] == expected
    (staging,) = resources(template, "Custom::StagedCheckpoint")
    assert staging["HubEndpoint"] == VARIANTS["component"]["hf_endpoint"]


@pytest.mark.parametrize("mode", sorted(VARIANTS))
def test_every_function_of_the_template_is_in_the_deployments_subnets(synthesized, mode):
    """Over all functions, so a new one without VpcConfig fails: an SCP on lambda:VpcIds / lambda:SubnetIds refuses
    any CreateFunction without them (Service Authorization Reference, AWS Lambda condition keys)."""
    template = synthesized[mode]["template"]
    functions = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::Lambda::Function"}
    assert len(functions) >= 10  # three handlers and their framework functions, the signals, LogRetention
    created = [k for k in template["Resources"] if k.startswith("FunctionsNetwork")]
    groups = [GROUP] if mode == "standard" else [{"Fn::GetAtt": [created[0], "GroupId"]}]
    expected = {"SubnetIds": SUBNETS, "SecurityGroupIds": groups}
    outside = [k for k, r in functions.items() if r["Properties"].get("VpcConfig") != expected]
    assert not outside, f"functions without the deployment's VpcConfig: {outside}"


@pytest.mark.parametrize("mode", sorted(VARIANTS))
def test_every_sagemaker_resource_and_the_staging_jobs_carry_the_tags(synthesized, mode):
    template = synthesized[mode]["template"]
    kinds = ["AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Endpoint", "AWS::S3::Bucket"]
    if mode == "component":
        kinds.append("AWS::SageMaker::InferenceComponent")
    for kind in kinds:
        for properties in resources(template, kind):
            tags = {t["Key"]: t["Value"] for t in properties.get("Tags", [])}
            assert tags.items() >= TAGS.items(), (kind, tags)
    (staging,) = resources(template, "Custom::StagedCheckpoint")
    assert staging["Tags"] == [{"Key": k, "Value": v} for k, v in TAGS.items()]


def test_the_created_bucket_uses_the_key_with_a_bucket_key_and_grants_go_through_s3(synthesized):
    template = synthesized["standard"]["template"]
    encrypted = [
        b["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
        for b in resources(template, "AWS::S3::Bucket")
        if "KMSMasterKeyID" in json.dumps(b["BucketEncryption"])
    ]
    assert encrypted == [
        {
            "BucketKeyEnabled": True,
            "ServerSideEncryptionByDefault": {"KMSMasterKeyID": BUCKET_KEY, "SSEAlgorithm": "aws:kms"},
        }
    ]
    key_statements = [
        s
        for policy in resources(template, "AWS::IAM::Policy")
        for s in policy["PolicyDocument"]["Statement"]
        if s["Resource"] == BUCKET_KEY
    ]
    assert key_statements
    for statement in key_statements:
        assert statement["Condition"]["StringEquals"]["kms:ViaService"] == {
            "Fn::Join": ["", ["s3.", {"Ref": "AWS::Region"}, ".", {"Ref": "AWS::URLSuffix"}]]
        }
        assert statement["Condition"]["StringEquals"]["kms:CallerAccount"] == {"Ref": "AWS::AccountId"}


def test_the_execution_roles_create_interfaces_only_in_the_given_subnets(synthesized):
    template = Template.from_json(synthesized["standard"]["template"])
    subnet_arn = Match.object_like({"Fn::Join": ["", Match.array_with([Match.string_like_regexp(":subnet/")])]})
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": [
                                    "ec2:CreateNetworkInterface",
                                    "ec2:CreateNetworkInterfacePermission",
                                    "ec2:DeleteNetworkInterface",
                                    "ec2:DeleteNetworkInterfacePermission",
                                ],
                                "Condition": {"ArnEquals": {"ec2:Subnet": [subnet_arn, subnet_arn]}},
                            }
                        )
                    ]
                )
            }
        },
    )
    statements = [
        s
        for policy in resources(synthesized["standard"]["template"], "AWS::IAM::Policy")
        for s in policy["PolicyDocument"]["Statement"]
        if s["Action"] == "ec2:CreateNetworkInterface"
    ]
    # The endpoint's role and the staging job's, and one VpcAccess policy per function role (15 roles).
    assert len(statements) == 2 + 15
    for statement in statements:
        text = json.dumps(statement["Resource"])
        assert text.count(":subnet/") == 2 and text.count(":security-group/") == 1 and '"*"' not in text


# --- refusals at synth ------------------------------------------------------------------------------------------


def problems(**overrides) -> str:
    with pytest.raises(ConfigError) as caught:
        DeploymentConfig.from_context(context_with(**overrides))
    return str(caught.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"vpc_subnet_ids": '["subnet-123"]', "vpc_id": VPC}, "vpc_subnet_ids="),
        ({"vpc_subnet_ids": "[subnet-123]", "vpc_id": VPC}, "not subnet ids: 'subnet-123'"),
        ({"vpc_subnet_ids": '{"a": 1}', "vpc_id": VPC}, "expected a JSON array of subnet ids"),
        ({"vpc_subnet_ids": '["sg-0123456789abcdef0"]', "vpc_id": VPC}, "not subnet ids"),
        ({"vpc_subnet_ids": json.dumps(SUBNETS)}, "give vpc_security_group_ids, or vpc_id"),
        ({"vpc_security_group_ids": json.dumps([GROUP])}, "only with vpc_subnet_ids"),
        ({"vpc_id": VPC}, "vpc_id='vpc-0123456789abcdef0': only with vpc_subnet_ids"),
        ({"vpc_subnet_ids": json.dumps(SUBNETS * 2), "vpc_id": VPC}, "an id is given twice"),
        ({"vpc_subnet_ids": json.dumps([f"subnet-{i:08x}" for i in range(17)]), "vpc_id": VPC}, "at most 16"),
        ({"tags": '{"aws:owner": "x"}'}, "reserved for AWS"),
        ({"tags": json.dumps({"k" * 129: "v"})}, "1-128"),
        ({"tags": json.dumps({"k": "v" * 257})}, "0-256"),
        ({"tags": '{"k": "a;b"}'}, "0-256 letters"),
        ({"tags": '{"k": 5}'}, "must be text"),
        ({"tags": json.dumps({f"k{i}": "v" for i in range(49)})}, "at most 48"),
        ({"hf_endpoint": "http://mirror.internal"}, "allowed: https"),
        ({"hf_endpoint": "https://user:pw@mirror.internal"}, "hf_endpoint="),
        ({"bucket_kms_key_arn": BUCKET_KEY, "model_bucket": "my-models"}, "a given bucket's key is model_kms_key_arn"),
        ({"volume_kms_key_arn": VOLUME_KEY}, "local NVMe"),
        ({"hf_endpoint": "https://mirror.internal", "model_s3_uri": "s3://b/p/"}, "not with model_s3_uri"),
        (
            {**GOVERNED, "vpc_id": VPC, "staging_instance_type": "ml.m5d.2xlarge"},
            "staging_instance_type='ml.m5d.2xlarge'",
        ),
    ],
)
def test_a_wrong_setting_fails_synth_naming_the_key(overrides, message):
    assert message in problems(**overrides)


def test_the_bucket_key_also_names_the_retained_bucket_s_key():
    """With reuse_model_bucket the key is the retained bucket's: every reader may decrypt through S3 only."""
    template = stack_template(reuse_model_bucket="true", bucket_kms_key_arn=BUCKET_KEY).to_json()
    statements = [
        s
        for policy in resources(template, "AWS::IAM::Policy")
        for s in policy["PolicyDocument"]["Statement"]
        if s["Resource"] == BUCKET_KEY
    ]
    assert len(statements) >= 4  # the staging job, its handler, the signal function, the preflight, the endpoint
    for statement in statements:
        assert "kms:Decrypt" in statement["Action"]
        assert "kms:ViaService" in statement["Condition"]["StringEquals"]


def test_the_accepted_settings_parse_to_typed_values():
    config = DeploymentConfig.from_context(context_with(**VARIANTS["component"]))
    assert config.vpc_subnet_ids == tuple(SUBNETS) and config.vpc_security_group_ids == ()
    assert config.tags == TAGS and config.vpc_id == VPC
    # The JSON values of cdk.json work as well as the CLI's text.
    config = DeploymentConfig.from_context(context_with(vpc_subnet_ids=SUBNETS, vpc_security_group_ids=[GROUP]))
    assert config.vpc_security_group_ids == (GROUP,)
    # ... and the ids as a shell leaves them without their quotes (make synth ARGS=...), or comma-separated.
    bare = DeploymentConfig.from_context(
        context_with(vpc_subnet_ids=f"[{SUBNETS[0]},{SUBNETS[1]}]", vpc_security_group_ids=GROUP)
    )
    assert bare.vpc_subnet_ids == tuple(SUBNETS) and bare.vpc_security_group_ids == (GROUP,)


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://huggingface.co", True),
        ("https://artifactory.example.com/api/huggingfaceml/hf-remote", True),
        ("https://mirror:8443", True),
        ("http://mirror", False),
        ("ftp://mirror", False),
        ("file:///etc/passwd", False),
        ("https://mirror?x=1", False),
        ("https://mirror#f", False),
        ("https://a@mirror", False),
        ("https://mirror:99999", False),
        ("https://mir ror", False),
        ("https://mirror\n", False),
        ("https://", False),
    ],
)
def test_the_hub_endpoint_rule(url, ok):
    assert (hub_endpoint_problem(url) is None) is ok
    if url == "http://mirror":
        assert hub_endpoint_problem(url, allow_http=True) is None


# --- the constructs, used as a library --------------------------------------------------------------------------


def _stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="123456789012", region="us-east-1"))


def test_a_construct_given_a_vpc_creates_a_group_in_it_and_selects_its_private_subnets():
    stack = _stack()
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    model = S3ModelData.from_s3_uri(stack, "Data", "s3://my-models/m/")
    GpuEndpoint(stack, "Endpoint", model=model, vpc=vpc)
    template = Template.from_stack(stack)
    (config,) = template.find_resources("AWS::SageMaker::Model").values()
    subnets = config["Properties"]["VpcConfig"]["Subnets"]
    private = [{"Ref": k} for k, r in template.find_resources("AWS::EC2::Subnet").items() if "Private" in k]
    assert sorted(map(json.dumps, subnets)) == sorted(map(json.dumps, private)) and len(private) == 2
    template.has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {
            "SecurityGroupEgress": [Match.object_like({"FromPort": 443, "ToPort": 443})],
            "VpcId": {"Ref": Match.any_value()},
        },
    )


def test_a_construct_refuses_groups_without_subnets_and_warns_on_one_subnet():
    stack = _stack()
    model = S3ModelData.from_s3_uri(stack, "Data", "s3://my-models/m/")
    group = ec2.SecurityGroup.from_security_group_id(stack, "G", GROUP, mutable=False)
    with pytest.raises(ValueError, match="needs the subnets"):
        GpuEndpoint(stack, "Endpoint", model=model, security_groups=[group])
    subnet = ec2.Subnet.from_subnet_id(stack, "One", SUBNETS[0])
    endpoint = GpuEndpoint(
        stack, "Endpoint2", model=model, vpc_subnets=ec2.SubnetSelection(subnets=[subnet]), security_groups=[group]
    )
    warnings = [m.data for m in endpoint.node.metadata if m.type == "aws:cdk:warning"]
    assert any("at least two subnets" in str(w) for w in warnings)
    with pytest.raises(ValueError, match="no security_groups and no vpc"):
        GpuEndpoint(stack, "Endpoint3", model=model, vpc_subnets=ec2.SubnetSelection(subnets=[subnet]))


def test_the_checkpoint_refuses_an_http_mirror_unless_allowed():
    stack = _stack()
    with pytest.raises(ValueError, match=r"hub_endpoint='http://mirror\.internal'"):
        StagedCheckpoint(stack, "A", repo_id="org/name", hub_endpoint="http://mirror.internal")
    StagedCheckpoint(stack, "B", repo_id="org/name", hub_endpoint="http://mirror.internal", allow_http_hub=True)


# --- the staging handler's request -------------------------------------------------------------------------------


def test_the_staging_job_request_carries_the_vpc_the_key_and_the_tags():
    from handler_kit.resources import StagedCheckpointProperties
    from tests.conftest import load_lambda

    handler = load_lambda("staged_checkpoint")
    settings = StagedCheckpointProperties(
        repo_id="org/name",
        bucket="b",
        image_uri="img",
        role_arn="arn:aws:iam::123456789012:role/r",
        code_uri="s3://b/code/worker.zip",
        job_name_prefix="hfstage-1-",
        subnets=tuple(SUBNETS),
        security_group_ids=(GROUP,),
        tags=tuple(TAGS.items()),
        volume_kms_key_arn=VOLUME_KEY,
    )
    plan = handler.Plan(
        sha="a" * 40, files=(), missing=(), prefix="models/org--name/" + "a" * 40 + "/", manifest_ok=False
    )
    request = handler.job_request(settings, plan, "hfstage-1-x")
    assert request["NetworkConfig"] == {"VpcConfig": {"Subnets": SUBNETS, "SecurityGroupIds": [GROUP]}}
    assert request["ProcessingResources"]["ClusterConfig"]["VolumeKmsKeyId"] == VOLUME_KEY
    assert request["Tags"][2:] == [{"Key": k, "Value": v} for k, v in TAGS.items()]
    assert request["Environment"]["HFSTAGE_PROBE_TIMEOUT_S"] == "10"  # the job fails in seconds without the Hub
    # Without them the request is as before: no NetworkConfig, no key, the job's two tags.
    bare = handler.job_request(
        StagedCheckpointProperties(
            **{**settings.__dict__, "subnets": (), "security_group_ids": (), "tags": (), "volume_kms_key_arn": None}
        ),
        plan,
        "hfstage-1-x",
    )
    assert "NetworkConfig" not in bare and "VolumeKmsKeyId" not in bare["ProcessingResources"]["ClusterConfig"]
    assert [t["Key"] for t in bare["Tags"]] == ["hf-repo-id", "hf-revision"]


def test_the_handler_may_tag_only_while_it_creates_a_staging_job(synthesized):
    statements = [
        s
        for policy in resources(synthesized["standard"]["template"], "AWS::IAM::Policy")
        for s in policy["PolicyDocument"]["Statement"]
        if "sagemaker:AddTags" in json.dumps(s["Action"])
    ]
    (statement,) = statements
    assert statement["Action"] == "sagemaker:AddTags"
    assert statement["Condition"] == {"StringEquals": {"sagemaker:TaggingAction": "CreateProcessingJob"}}
    assert "processing-job/hfstage-" in json.dumps(statement["Resource"])


def test_the_token_goes_to_the_mirror_only():
    from hfstage.hub import HubClient

    hub = HubClient(endpoint="https://nexus.example.internal:8443/repository/hf-remote", token="hf_secret")
    assert (
        hub._headers_for("https://nexus.example.internal:8443/repository/hf-remote/api/models/x", None)["Authorization"]
        == "Bearer hf_secret"
    )
    for elsewhere in (
        "https://huggingface.co/api/models/x",  # the public Hub
        "https://nexus.example.internal/repository/hf-remote/x",  # another port: another origin
        "http://nexus.example.internal:8443/repository/hf-remote/x",  # another scheme
        "https://cdn-lfs.hf.co/x",  # a redirect target
    ):
        assert "Authorization" not in hub._headers_for(elsewhere, None), elsewhere


def test_each_unscoped_acknowledgement_names_every_action_it_covers(synthesized):
    """One acknowledgement per finding and construct counts: with a VPC, the "*" one must name ec2 and ecr both."""
    for name, synth in synthesized.items():
        (plugin,) = synth["report"]["pluginReports"]
        for finding in plugin["suppressedViolations"]:
            paths = [c["constructPath"] for c in finding["violatingConstructs"]]
            if finding["ruleName"] != "AwsSolutions-IAM5[Resource::*]":
                continue
            if any(
                p.endswith(("Endpoint/Role/DefaultPolicy/Resource", "JobRole/DefaultPolicy/Resource")) for p in paths
            ):
                assert "ec2:Describe" in finding["reason"] and "ecr:GetAuthorizationToken" in finding["reason"], (
                    name,
                    paths,
                )


def test_every_packed_deployments_preflight_checks_the_endpoints_network(tmp_path):
    # A packed deployment's preflight was never given the endpoint's network (only the stack's first one was);
    # the component now wires its own preflight's check (constructs_lib.preflight_check.check_placement).
    fleet = tmp_path / "fleet.json"
    packed = {"deployment_mode": "inference-component", "instance_type": "ml.g6.12xlarge", "accelerators_per_copy": 1}
    fleet.write_text(json.dumps({"a": {**packed, "endpoint": "e"}, "b": {**packed, "endpoint": "e"}}))
    subnets = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
    app = build(
        deployments_file=str(fleet),
        vpc_subnet_ids=json.dumps(subnets),
        vpc_security_group_ids='["sg-0123456789abcdef0"]',
    )
    (stack,) = [s for s in app.node.children if isinstance(s, cdk.Stack) and s.stack_name == "LlmEndpoint-e"]
    preflights = Template.from_stack(stack).find_resources("Custom::DeploymentPreflight").values()
    assert len(preflights) == 2 and all(p["Properties"]["Subnets"] == subnets for p in preflights)


def test_a_shared_endpoints_functions_reach_every_packed_deployments_hub_mirror(tmp_path):
    # hf_endpoint is each deployment's own (its staging job's); the stack's functions, in the VPC, resolve the
    # revision through every mirror, so the created group opens each mirror's port.
    fleet = tmp_path / "fleet.json"
    packed = {"deployment_mode": "inference-component", "instance_type": "ml.g6.12xlarge", "accelerators_per_copy": 1}
    fleet.write_text(
        json.dumps(
            {
                "a": {**packed, "endpoint": "e", "hf_endpoint": "https://mirror-a.example.com:8443"},
                "b": {**packed, "endpoint": "e", "hf_endpoint": "https://mirror-b.example.com:9443"},
            }
        )
    )
    app = build(
        deployments_file=str(fleet), vpc_subnet_ids='["subnet-0123456789abcdef0"]', vpc_id="vpc-0123456789abcdef0"
    )
    (stack,) = [s for s in app.node.children if isinstance(s, cdk.Stack) and s.stack_name == "LlmEndpoint-e"]
    text = json.dumps(Template.from_stack(stack).to_json())
    assert '"FromPort": 8443' in text and '"FromPort": 9443' in text
