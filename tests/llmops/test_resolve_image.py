"""llmops.resolve_image against a real boto3 ECR client whose answers come from botocore's Stubber."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from constructs_lib.deployment.config import DeploymentConfig
from constructs_lib.images import ServingImage, dlc_account, recorded_tag_key
from llmops.resolve_image import main
from tests.conftest import context_with

REGION = "us-west-2"


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


def semantic(version: str, cuda: str, ubuntu: str = "22.04") -> str:
    return f"{version}-gpu-py312-cu{cuda}-ubuntu{ubuntu}-sagemaker"


NEWEST_CU130 = semantic("0.11.0", "130")
NEWEST_CU129 = semantic("0.10.2.post1", "129")
OLDER_CU129 = semantic("0.10.2", "129")
NEWEST_CU128 = semantic("0.11.0", "128")  # same version as NEWEST_CU130, lower CUDA

# Two pages as the DLC registry returns them: floating tags, junk from other repos' conventions,
# untagged images (no imageTags at all) and images carrying several tags.
PAGE_1 = [
    ["server-sagemaker-cuda-v2.3", "0.10-gpu-py312-cu129-ubuntu22.04-sagemaker-v1"],
    [OLDER_CU129],
    [],
    ["0.12.0-gpu-py312-cu130-ubuntu22.04-ec2", "0.12.0-gpu-py312-cu130-ubuntu22.04-sagemaker-v1.0"],
    [semantic("0.9.2", "128")],
]
PAGE_2 = [
    [NEWEST_CU129, "0.10.2.post1-gpu-py312-cu129-ubuntu22.04-sagemaker-v1.2"],
    None,  # untagged: DescribeImages leaves imageTags out
    [NEWEST_CU130],
    [NEWEST_CU128],
    ["latest", "2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker-v1", semantic("0.10.1", "130")],
]


@pytest.fixture
def ecr(monkeypatch, tmp_path):
    """A real ECR client with dummy credentials and no way to reach AWS."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    client = boto3.client("ecr", region_name=REGION)
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def expected_params(repository: str, next_token: str | None = None) -> dict:
    params = {"registryId": dlc_account(REGION), "repositoryName": repository, "filter": {"tagStatus": "TAGGED"}}
    if next_token:
        params["nextToken"] = next_token
    return params


def page(repository: str, images: list[list[str] | None], next_token: str | None = None) -> dict:
    details = []
    for n, tags in enumerate(images):
        detail = {"registryId": dlc_account(REGION), "repositoryName": repository, "imageDigest": digest(n)}
        if tags is not None:
            detail["imageTags"] = tags
        details.append(detail)
    response = {"imageDetails": details}
    if next_token:
        response["nextToken"] = next_token
    return response


def stub_two_pages(stubber: Stubber, repository: str = "vllm", first=PAGE_1, second=PAGE_2) -> None:
    stubber.add_response("describe_images", page(repository, first, "page-2"), expected_params(repository))
    stubber.add_response("describe_images", page(repository, second), expected_params(repository, "page-2"))


def run(client, *args: str) -> int:
    return main(list(args), ecr_client=client)


def resolve(client, instance_type: str, context_file, *extra: str, engine: str = "vllm", region: str = REGION) -> int:
    args = [
        "--engine",
        engine,
        "--instance-type",
        instance_type,
        "--region",
        region,
        "--context-file",
        str(context_file),
    ]
    return run(client, *args, *extra)


def test_prints_newest_compatible_tag_and_records_it(ecr, tmp_path, capsys):
    client, stubber = ecr
    stub_two_pages(stubber)
    context_file = tmp_path / "cdk.context.json"
    context_file.write_text(json.dumps({"other-lookup:account=1:region=us-west-2": ["x"], "zzz": 1}))

    rc = resolve(client, "ml.g6e.xlarge", str(context_file))

    out, err = capsys.readouterr()
    assert rc == 0
    # 0.11.0 is newest; of its two builds the Ada GPU takes the higher CUDA level.
    assert out == f"{NEWEST_CU130}\n"
    assert f"763104351884.dkr.ecr.us-west-2.amazonaws.com/vllm:{NEWEST_CU130}" in err
    assert json.loads(context_file.read_text()) == {
        "other-lookup:account=1:region=us-west-2": ["x"],
        "zzz": 1,
        recorded_tag_key("vllm", "ml.g6e.xlarge"): NEWEST_CU130,
    }


def test_records_into_a_new_context_file(ecr, tmp_path, capsys):
    client, stubber = ecr
    stub_two_pages(stubber, "sglang")
    context_file = tmp_path / "cdk.context.json"

    rc = resolve(client, "ml.g5.xlarge", str(context_file), engine="sglang")

    assert rc == 0
    assert capsys.readouterr().out == f"{NEWEST_CU130}\n"
    assert json.loads(context_file.read_text()) == {recorded_tag_key("sglang", "ml.g5.xlarge"): NEWEST_CU130}


def test_no_record_prints_only(ecr, tmp_path, capsys):
    client, stubber = ecr
    stub_two_pages(stubber)
    context_file = tmp_path / "cdk.context.json"

    rc = resolve(client, "ml.g6e.xlarge", str(context_file), "--no-record")

    assert rc == 0
    assert capsys.readouterr().out == f"{NEWEST_CU130}\n"
    assert not context_file.exists()


def test_blackwell_skips_cuda12_tags(ecr, tmp_path, capsys):
    client, stubber = ecr
    newer_cu129 = semantic("0.12.1", "129")  # newest version overall, but CUDA 12
    stub_two_pages(stubber, second=[*PAGE_2, [newer_cu129]])
    context_file = tmp_path / "cdk.context.json"

    rc = resolve(client, "ml.g7e.2xlarge", str(context_file))

    assert rc == 0
    assert capsys.readouterr().out == f"{NEWEST_CU130}\n"
    assert json.loads(context_file.read_text()) == {recorded_tag_key("vllm", "ml.g7e.2xlarge"): NEWEST_CU130}


def test_volta_skips_cuda13_tags_and_picks_newest_cuda12(ecr, tmp_path, capsys):
    client, stubber = ecr
    stub_two_pages(stubber)

    rc = resolve(client, "ml.p3.2xlarge", str(tmp_path / "cdk.context.json"))

    assert rc == 0
    # 0.11.0-cu128 is the newest version the V100 can run (0.11.0-cu130 is skipped).
    assert capsys.readouterr().out == f"{NEWEST_CU128}\n"


def test_volta_picks_post_release_over_its_base_version(ecr, tmp_path, capsys):
    client, stubber = ecr
    without_cu128 = [tags for tags in PAGE_2 if tags != [NEWEST_CU128]]
    stub_two_pages(stubber, second=without_cu128)

    rc = resolve(client, "ml.p3.2xlarge", str(tmp_path / "cdk.context.json"))

    assert rc == 0
    assert capsys.readouterr().out == f"{NEWEST_CU129}\n"


def test_no_compatible_tag_exits_1(ecr, tmp_path, capsys):
    client, stubber = ecr
    only_cuda12 = [[OLDER_CU129], ["server-sagemaker-cuda-v2.3"], None]
    stubber.add_response("describe_images", page("vllm", only_cuda12), expected_params("vllm"))
    context_file = tmp_path / "cdk.context.json"

    rc = resolve(client, "ml.g7e.2xlarge", str(context_file))

    out, err = capsys.readouterr()
    assert rc == 1
    assert out == ""
    assert err.startswith("error: ")
    assert "ml.g7e.2xlarge" in err
    assert "2 tags" in err
    assert not context_file.exists()


def test_access_denied_exits_3_with_one_line(ecr, tmp_path, capsys):
    client, stubber = ecr
    stubber.add_client_error(
        "describe_images",
        service_error_code="AccessDeniedException",
        service_message="User is not authorized to perform: ecr:DescribeImages",
        http_status_code=400,
        expected_params=expected_params("vllm"),
    )
    context_file = tmp_path / "cdk.context.json"

    rc = resolve(client, "ml.g6e.xlarge", str(context_file))

    out, err = capsys.readouterr()
    assert rc == 3
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "AccessDeniedException" in err
    assert "763104351884/vllm" in err
    assert not context_file.exists()


@pytest.mark.parametrize(
    ("instance_type", "region", "named"),
    [
        ("ml.g9.xlarge", REGION, "instance_type='ml.g9.xlarge'"),
        ("ml.g6e.xlarge", "xx-nowhere-1", "region 'xx-nowhere-1'"),
    ],
)
def test_unknown_instance_type_or_region_exits_2_without_calling_ecr(
    ecr, tmp_path, capsys, instance_type, region, named
):
    client, _ = ecr  # nothing stubbed: any ECR call would fail the Stubber's pending check or exit 3
    context_file = tmp_path / "cdk.context.json"

    rc = resolve(client, instance_type, str(context_file), region=region)

    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert named in err
    assert not context_file.exists()


def test_recorded_tag_is_used_by_the_deployment_config(ecr, tmp_path, capsys):
    client, stubber = ecr
    stub_two_pages(stubber)
    context_file = tmp_path / "cdk.context.json"
    instance_type = context_with()["instance_type"]
    engine = context_with()["engine"]

    rc = resolve(client, instance_type, str(context_file), engine=engine)
    assert rc == 0
    capsys.readouterr()

    # CDK merges cdk.context.json into the app's context; do the same by hand.
    recorded = json.loads(context_file.read_text())
    config = DeploymentConfig.from_context(context_with(**recorded))

    assert config.serving_image == ServingImage(repository=engine, tag=NEWEST_CU130)
    assert config.serving_image.tag != DeploymentConfig.from_context(context_with()).serving_image.tag
    assert "recorded" in config.image_source
    assert "cdk.context.json" in config.image_source


def test_recorded_tag_for_another_instance_type_is_ignored():
    key = recorded_tag_key("vllm", "ml.g6e.xlarge")
    config = DeploymentConfig.from_context(context_with(instance_type="ml.g6.xlarge", **{key: NEWEST_CU129}))
    assert config.serving_image.tag != NEWEST_CU129
    assert "recorded" not in config.image_source


def test_an_engine_whose_image_is_built_says_so_instead_of_listing_a_registry(capsys):
    from llmops.resolve_image import main

    assert main(["--engine", "llamacpp", "--instance-type", "ml.g5.xlarge", "--region", "us-east-1"]) == 2
    err = capsys.readouterr().err
    assert "the serving image is built by cdk deploy from containers/llamacpp" in err and "-c image=" in err
