"""Container images: tag parsing, ECR URIs, the DLC registry table, AMI pairing and URIs in a stack."""

from __future__ import annotations

import re

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template
from aws_cdk.region_info import RegionInfo

from constructs_lib.engines import get_engine
from constructs_lib.images import (
    MAPPING_ID,
    SEMANTIC_TAG,
    ServingImage,
    ami_cuda,
    cuda_of_tag,
    default_ami_for_cuda,
    dlc_account,
    dlc_regions,
    known_ami_versions,
    parse_cuda,
    recorded_tag_key,
    version_key,
)

DEFAULT_DLC_ACCOUNT = "763104351884"
VLLM_TAG = "0.27.1-gpu-py312-cu130-ubuntu22.04-sagemaker"
POST_TAG = "0.10.1.post1-gpu-py312-cu129-ubuntu22.04-sagemaker"
FLOATING_TAG = "server-sagemaker-cuda-v2.3"
DIGEST = "sha256:" + "0123456789abcdef" * 4

# --- tags ---


@pytest.mark.parametrize(
    ("tag", "version", "python", "cuda", "ubuntu"),
    [
        (VLLM_TAG, "0.27.1", "312", "130", "22.04"),
        (POST_TAG, "0.10.1.post1", "312", "129", "22.04"),
        ("0.5.17-gpu-py312-cu130-ubuntu24.04-sagemaker", "0.5.17", "312", "130", "24.04"),
        ("1.2.3-gpu-py312-cu1210-ubuntu22.04-sagemaker", "1.2.3", "312", "1210", "22.04"),
    ],
)
def test_semantic_tag_groups(tag, version, python, cuda, ubuntu):
    m = SEMANTIC_TAG.match(tag)
    assert m is not None
    assert m.group("version", "python", "cuda", "ubuntu") == (version, python, cuda, ubuntu)


@pytest.mark.parametrize(
    "tag",
    [
        FLOATING_TAG,
        "0.9.2-gpu-py312-cu128-ubuntu22.04-sagemaker-v1.0",
        "0.9.2-gpu-py312-cu128-ubuntu22.04-sagemaker-v1",
        "0.9.2-gpu-py312-cu128-ubuntu22.04-ec2",
        "0.9.2-cpu-py312-ubuntu22.04-sagemaker",
        "0.9-gpu-py312-cu128-ubuntu22.04-sagemaker",
        "latest",
        DIGEST,
    ],
)
def test_non_semantic_tags_do_not_match(tag):
    assert SEMANTIC_TAG.match(tag) is None
    assert version_key(tag) is None


@pytest.mark.parametrize(
    ("text", "cuda"),
    [("130", (13, 0)), ("129", (12, 9)), ("121", (12, 1)), ("118", (11, 8)), ("1210", (12, 10))],
)
def test_parse_cuda(text, cuda):
    assert parse_cuda(text) == cuda


@pytest.mark.parametrize(
    ("tag", "cuda"),
    [
        (VLLM_TAG, (13, 0)),
        (POST_TAG, (12, 9)),
        ("0.9.2-gpu-py312-cu128-ubuntu22.04-sagemaker-v1.0", (12, 8)),
        ("2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker-v1", (12, 1)),
        (FLOATING_TAG, None),
        ("latest", None),
        (DIGEST, None),
        ("", None),
        (None, None),
    ],
)
def test_cuda_of_tag(tag, cuda):
    assert cuda_of_tag(tag) == cuda


def test_version_key_of_semantic_tags():
    assert version_key(VLLM_TAG) == (0, 27, 1, 0)
    assert version_key(POST_TAG) == (0, 10, 1, 1)


def test_version_ordering_is_numeric_and_counts_post_releases():
    tags = [
        "0.10.1-gpu-py312-cu129-ubuntu22.04-sagemaker",
        "0.9.2-gpu-py312-cu128-ubuntu22.04-sagemaker",
        "0.10.1.post2-gpu-py312-cu129-ubuntu22.04-sagemaker",
        "0.10.10-gpu-py312-cu129-ubuntu22.04-sagemaker",
        POST_TAG,
        "0.10.2-gpu-py312-cu129-ubuntu22.04-sagemaker",
    ]
    ordered = [SEMANTIC_TAG.match(t).group("version") for t in sorted(tags, key=version_key)]
    assert ordered == ["0.9.2", "0.10.1", "0.10.1.post1", "0.10.1.post2", "0.10.2", "0.10.10"]


def test_recorded_tag_key_names_engine_and_instance_type():
    assert recorded_tag_key("vllm", "ml.g6.xlarge") == "dlc-image-tag:engine=vllm:instance-type=ml.g6.xlarge"
    assert recorded_tag_key("vllm", "ml.g6.xlarge") != recorded_tag_key("sglang", "ml.g6.xlarge")


# --- ServingImage.from_uri ---


@pytest.mark.parametrize(
    ("uri", "account", "region", "repository", "tag", "digest"),
    [
        (
            f"763104351884.dkr.ecr.us-west-2.amazonaws.com/vllm:{VLLM_TAG}",
            "763104351884",
            "us-west-2",
            "vllm",
            VLLM_TAG,
            None,
        ),
        (
            f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/my-vllm@{DIGEST}",
            "123456789012",
            "eu-west-1",
            "team/my-vllm",
            None,
            DIGEST,
        ),
        (
            "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/sglang:0.5.17-gpu-py312-cu130-ubuntu24.04-sagemaker",
            "727897471807",
            "cn-north-1",
            "sglang",
            "0.5.17-gpu-py312-cu130-ubuntu24.04-sagemaker",
            None,
        ),
    ],
)
def test_from_uri_parses_ecr_uris(uri, account, region, repository, tag, digest):
    image = ServingImage.from_uri(uri)
    assert (image.account, image.region, image.repository, image.tag, image.digest) == (
        account,
        region,
        repository,
        tag,
        digest,
    )
    assert image.source_uri == uri


@pytest.mark.parametrize(
    "uri",
    [
        "vllm/vllm-openai:latest",
        "docker.io/vllm/vllm-openai:v0.10.1",
        "public.ecr.aws/deep-learning-containers/vllm:latest",
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/vllm",
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/vllm:",
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/vllm@sha256:abc",
        "76310435188.dkr.ecr.us-west-2.amazonaws.com/vllm:latest",
        "",
    ],
)
def test_from_uri_rejects_non_ecr_uris(uri):
    with pytest.raises(ValueError, match=r"^image=.*is not an ECR image URI"):
        ServingImage.from_uri(uri)


def test_from_uri_error_quotes_the_given_value():
    with pytest.raises(ValueError, match=re.escape("image='vllm/vllm-openai:latest'")):
        ServingImage.from_uri("vllm/vllm-openai:latest")


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        (ServingImage(repository="vllm", tag=VLLM_TAG), True),
        (ServingImage(repository="vllm", tag=POST_TAG), True),
        (ServingImage(repository="vllm", digest=DIGEST), True),
        (ServingImage(repository="vllm", tag=FLOATING_TAG), False),
        (ServingImage(repository="vllm", tag="0.9.2-gpu-py312-cu128-ubuntu22.04-sagemaker-v1.0"), False),
        (ServingImage(repository="vllm", tag="latest"), False),
        (ServingImage(repository="vllm"), False),
    ],
)
def test_is_pinned(image, pinned):
    assert image.is_pinned is pinned


def test_is_pinned_and_cuda_of_from_uri_images():
    by_digest = ServingImage.from_uri(f"123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm@{DIGEST}")
    assert by_digest.is_pinned
    assert by_digest.cuda is None
    by_floating = ServingImage.from_uri(f"123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm:{FLOATING_TAG}")
    assert not by_floating.is_pinned


def test_from_dlc_uses_the_engine_default_tag_unless_given():
    engine = get_engine("vllm")
    assert ServingImage.from_dlc(engine) == ServingImage(repository="vllm", tag=engine.default_tag)
    assert ServingImage.from_dlc(engine, POST_TAG).tag == POST_TAG
    assert ServingImage.from_dlc(engine).is_pinned
    assert ServingImage.from_dlc(get_engine("sglang")).repository == "sglang"


# --- DLC registry table ---


def test_registry_accounts_are_twelve_digits():
    regions = dlc_regions()
    assert regions
    bad = {r: a for r, a in regions.items() if not re.fullmatch(r"\d{12}", a)}
    assert bad == {}
    assert all(re.fullmatch(r"[a-z]{2,4}(-[a-z]+)+-\d", r) for r in regions)


@pytest.mark.parametrize("region", ["us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"])
def test_default_account_regions(region):
    assert dlc_account(region) == DEFAULT_DLC_ACCOUNT


@pytest.mark.parametrize(
    ("region", "account"),
    [
        ("me-south-1", "217643126080"),
        ("af-south-1", "626614931356"),
        ("ap-east-1", "871362719292"),
        ("cn-north-1", "727897471807"),
    ],
)
def test_regions_with_their_own_registry(region, account):
    assert dlc_account(region) == account
    assert account != DEFAULT_DLC_ACCOUNT


def test_unknown_region_has_no_account():
    assert dlc_account("xx-nowhere-1") is None


def test_dlc_regions_is_a_copy():
    dlc_regions()["us-east-1"] = "000000000000"
    assert dlc_account("us-east-1") == DEFAULT_DLC_ACCOUNT


def test_registry_agrees_with_aws_cdk_fact_table():
    ours = dlc_regions()
    compared = {}
    for region in sorted(ours):
        cdk_account = RegionInfo.get(region).dlc_repository_account
        if cdk_account is None:
            continue  # CDK's fact table does not cover this region
        compared[region] = (ours[region], cdk_account)
    disagreements = {r: pair for r, pair in compared.items() if pair[0] != pair[1]}
    assert disagreements == {}
    # Most regions are covered by both; guard against the comparison silently shrinking to nothing.
    assert len(compared) >= 30
    assert "me-south-1" in compared


def test_regions_cdk_knows_are_in_our_table():
    missing = sorted(r.name for r in RegionInfo.regions if r.dlc_repository_account and dlc_account(r.name) is None)
    assert missing == []


# --- inference AMIs ---


def test_known_ami_versions():
    versions = known_ami_versions()
    assert versions == sorted(versions)
    assert "al2023-ami-sagemaker-inference-gpu-4-1" in versions
    assert "al2-ami-sagemaker-inference-gpu-3-1" in versions


def test_ami_cuda():
    assert ami_cuda("al2023-ami-sagemaker-inference-gpu-4-1") == (13, 0)
    assert ami_cuda("al2-ami-sagemaker-inference-gpu-3-1") == (12, 4)
    assert ami_cuda("no-such-ami") is None


@pytest.mark.parametrize(
    ("cuda", "ami"),
    [
        ((13, 0), "al2023-ami-sagemaker-inference-gpu-4-1"),
        ((12, 9), "al2-ami-sagemaker-inference-gpu-3-1"),
        ((12, 4), "al2-ami-sagemaker-inference-gpu-3-1"),
        (None, None),
    ],
)
def test_default_ami_for_cuda(cuda, ami):
    assert default_ami_for_cuda(cuda) == ami


def test_default_amis_are_known_and_run_their_cuda_major():
    for major in (12, 13):
        ami = default_ami_for_cuda((major, 0))
        assert ami in known_ami_versions()
        assert ami_cuda(ami)[0] == major


# --- URIs inside a stack ---


def _stack(env: cdk.Environment | None = None) -> cdk.Stack:
    return cdk.Stack(cdk.App(), "S", env=env)


def test_environment_agnostic_stack_looks_the_account_up_in_a_mapping():
    stack = _stack()
    image = ServingImage(repository="vllm", tag=VLLM_TAG)
    cdk.CfnOutput(stack, "Uri", value=image.image_uri(stack))
    cdk.CfnOutput(stack, "Arn", value=image.repository_arn(stack))  # reuses the same mapping

    template = Template.from_stack(stack)
    template.has_mapping(
        MAPPING_ID,
        {
            "us-east-1": {"account": DEFAULT_DLC_ACCOUNT},
            "me-south-1": {"account": "217643126080"},
            "cn-north-1": {"account": "727897471807"},
        },
    )
    (mapping,) = template.find_mappings("*").values()
    assert mapping == {region: {"account": account} for region, account in dlc_regions().items()}

    find_in_map = {"Fn::FindInMap": [MAPPING_ID, {"Ref": "AWS::Region"}, "account"]}
    template.has_output(
        "Uri",
        {
            "Value": {
                "Fn::Join": [
                    "",
                    [
                        find_in_map,
                        ".dkr.ecr.",
                        {"Ref": "AWS::Region"},
                        ".",
                        {"Ref": "AWS::URLSuffix"},
                        f"/vllm:{VLLM_TAG}",
                    ],
                ]
            }
        },
    )
    template.has_output(
        "Arn",
        {"Value": {"Fn::Join": ["", Match.array_with([find_in_map, ":repository/vllm"])]}},
    )


def test_digest_image_uri_uses_at_sign():
    stack = _stack(cdk.Environment(account="111111111111", region="us-west-2"))
    uri = stack.resolve(ServingImage(repository="vllm", digest=DIGEST).image_uri(stack))
    assert uri["Fn::Join"][1][-1] == f"/vllm@{DIGEST}"


def test_explicit_region_uses_the_account_literal():
    stack = _stack(cdk.Environment(account="111111111111", region="me-south-1"))
    image = ServingImage(repository="vllm", tag=VLLM_TAG)
    cdk.CfnOutput(stack, "Uri", value=image.image_uri(stack))
    cdk.CfnOutput(stack, "Arn", value=image.repository_arn(stack))

    template = Template.from_stack(stack)
    assert template.find_mappings("*") == {}
    outputs = template.find_outputs("*")
    uri_parts = outputs["Uri"]["Value"]["Fn::Join"][1]
    assert uri_parts[0] == "217643126080.dkr.ecr."
    assert uri_parts[-1] == f"/vllm:{VLLM_TAG}"
    arn_parts = outputs["Arn"]["Value"]["Fn::Join"][1]
    assert any("217643126080:repository/vllm" in p for p in arn_parts if isinstance(p, str))


def test_explicit_region_without_a_registry_raises():
    stack = _stack(cdk.Environment(account="111111111111", region="xx-nowhere-1"))
    image = ServingImage(repository="vllm", tag=VLLM_TAG)
    with pytest.raises(ValueError, match=r"region 'xx-nowhere-1' has no DLC registry account.*image="):
        image.image_uri(stack)


def test_uri_image_keeps_its_uri_and_account_in_any_stack():
    uri = f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/my-vllm:{VLLM_TAG}"
    image = ServingImage.from_uri(uri)
    stack = _stack()
    assert image.image_uri(stack) == uri
    arn = stack.resolve(image.repository_arn(stack))
    assert arn == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ecr:eu-west-1:123456789012:repository/team/my-vllm"]]
    }
    # No DLC account was needed, so no mapping was added.
    assert stack.node.try_find_child(MAPPING_ID) is None
