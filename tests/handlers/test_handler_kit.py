"""handler_kit: what every custom-resource handler shares (request type, rollback detection, log line, reasons)."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

import handler_kit
from tests.conftest import load_lambda

STACK = "arn:aws:cloudformation:us-east-1:123456789012:stack/LlmEndpoint/1"


@pytest.mark.parametrize("kind", ["Create", "Update", "Delete"])
def test_the_three_request_types_are_read(kind):
    assert handler_kit.request_type({"RequestType": kind}) == kind


@pytest.mark.parametrize("kind", [None, "create", "Replace", ""])
def test_anything_else_is_refused_naming_it(kind):
    with pytest.raises(ValueError, match="is not one of Create, Update, Delete"):
        handler_kit.request_type({"RequestType": kind})


def test_one_log_line_quotes_what_would_break_it_and_drops_none():
    line = handler_kit.log_line("job-started", job="hfstage-1", reason="a b", empty="", eq="k=v", skipped=None)
    assert line == 'event=job-started job=hfstage-1 reason="a b" empty="" eq="k=v"'


@pytest.mark.parametrize("limit", [10, 11, 12, 13, 3000])
def test_reasons_are_cut_in_bytes_never_inside_a_character(limit):
    text = "é" * 4000  # two bytes each
    cut = handler_kit.shorten(text, limit)
    assert len(cut.encode()) <= limit and cut.endswith(handler_kit.ELLIPSIS)
    cut.encode().decode()  # valid UTF-8
    assert handler_kit.shorten("short", limit) == "short"


def test_the_default_reason_limit_leaves_room_within_cloudformations_4_kb():
    assert handler_kit.REASON_LIMIT_BYTES < handler_kit.RESPONSE_LIMIT_BYTES
    assert len(handler_kit.shorten("x" * 10_000).encode()) <= handler_kit.REASON_LIMIT_BYTES


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("UPDATE_ROLLBACK_IN_PROGRESS", True),
        ("UPDATE_IN_PROGRESS", False),
        ("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", False),  # cleanup deletes, it sends no Update
        ("ROLLBACK_IN_PROGRESS", False),
    ],
)
def test_an_update_rollback_is_told_by_the_stack_status(status, expected):
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    with Stubber(cloudformation) as stub:
        stub.add_response(
            "describe_stacks",
            {"Stacks": [{"StackName": "s", "StackStatus": status, "CreationTime": "2026-12-01T00:00:00Z"}]},
            {"StackName": STACK},
        )
        assert handler_kit.update_rolling_back(STACK, cloudformation, lambda *a, **k: None) is expected


def test_a_stack_that_cannot_be_described_is_not_rolling_back_and_says_so():
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    logged = []
    with Stubber(cloudformation) as stub:
        stub.add_client_error("describe_stacks", "Throttling", "Rate exceeded")
        assert handler_kit.update_rolling_back(STACK, cloudformation, lambda e, **f: logged.append((e, f))) is False
    assert logged == [("describe-stack-failed", {"error": "ClientError"})]


def test_clients_are_made_once_per_service_and_region():
    cache: dict = {}
    first = handler_kit.cached_client(cache, "s3", region="us-east-1", retries={"mode": "standard"})
    assert handler_kit.cached_client(cache, "s3", region="us-east-1") is first
    assert handler_kit.cached_client(cache, "s3", region="eu-west-1") is not first
    assert set(cache) == {"s3@us-east-1", "s3@eu-west-1"}


@pytest.mark.parametrize("name", ["staged_checkpoint", "deployment_preflight", "endpoint_smoke_test"])
def test_every_handler_uses_the_kit(name, monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)  # no client is made at import: each when first used
    module = load_lambda(name)
    assert module.handler_kit is handler_kit and module.update_rolling_back is handler_kit.update_rolling_back
    assert module._clients == {}
    source = (load_lambda.__globals__["ROOT"] / "lambda" / name / "index.py").read_text()
    assert "StackStatus" not in source and "_NEEDS_QUOTES" not in source  # no copy of their own
    assert "handler_kit.cached_client(" in source and "boto3.client(" not in source  # clients through the kit


# --- one typed properties class per custom resource ---------------------------------------------------


def test_the_staged_checkpoint_writes_what_its_handler_reads_back():
    """The construct's properties, as synthesized, parse into the class it wrote them with."""
    import dataclasses

    from handler_kit.resources import StagedCheckpointProperties
    from tests.conftest import stack_template

    (resource,) = stack_template().find_resources("Custom::StagedCheckpoint").values()
    # CloudFormation resolves the intrinsics (Ref, Fn::GetAtt, Fn::Join) to strings before the handler runs.
    props = {
        k: f"<{k}>" if isinstance(v, dict) else v
        for k, v in resource["Properties"].items()
        if k not in ("ServiceToken", "ServiceTimeout")
    }
    parsed = StagedCheckpointProperties.from_properties(props)
    assert parsed.repo_id == "Qwen/Qwen3-4B-Instruct-2507" and parsed.exclude[0] == "original/*"
    assert parsed.max_instances == 4 and parsed.max_runtime_s == 21600 and parsed.token_secret_arn is None
    # The VPC, tags and volume key are left out when not given, so a template without them keeps its hash;
    # SourceS3Uri is written only for a model.tar.gz source (a Hub checkpoint's template does not change).
    names = StagedCheckpointProperties.names()
    written = {names[f.name] for f in dataclasses.fields(parsed) if not f.metadata["omit_empty"]} - {"SourceS3Uri"}
    assert set(props) == written
    assert parsed.to_properties() == props  # a round trip changes nothing


def test_the_network_tags_and_volume_key_reach_the_handler():
    from handler_kit.resources import StagedCheckpointProperties, processing_network
    from tests.conftest import stack_template

    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    template = stack_template(
        vpc_subnet_ids='["subnet-0123456789abcdef0", "subnet-89abcdef"]',
        vpc_security_group_ids='["sg-0123456789abcdef0"]',
        tags='{"cost-center": "ml 42", "team": "platform"}',
        volume_kms_key_arn=key,
        instance_type="ml.p3.2xlarge",
        image="763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11.0-gpu-py312-cu128-ubuntu22.04-sagemaker",
    )
    (resource,) = template.find_resources("Custom::StagedCheckpoint").values()
    props = {k: f"<{k}>" if isinstance(v, dict) else v for k, v in resource["Properties"].items()}
    parsed = StagedCheckpointProperties.from_properties(props)
    assert parsed.subnets == ("subnet-0123456789abcdef0", "subnet-89abcdef")
    assert parsed.security_group_ids == ("sg-0123456789abcdef0",)
    assert parsed.tags == (("cost-center", "ml 42"), ("team", "platform"))
    assert parsed.volume_kms_key_arn == key
    assert processing_network(parsed) == {
        "NetworkConfig": {
            "VpcConfig": {
                "Subnets": ["subnet-0123456789abcdef0", "subnet-89abcdef"],
                "SecurityGroupIds": ["sg-0123456789abcdef0"],
            }
        }
    }
    assert processing_network(dataclasses_replace(parsed, subnets=(), security_group_ids=())) == {}


def dataclasses_replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


def test_a_default_is_defined_once_for_the_construct_and_its_handler():
    """MaxInstances was 4 in the construct and 1 in the handler; now both read the class's default."""
    from handler_kit.resources import StagedCheckpointProperties

    minimal = {
        "RepoId": "org/name",
        "Bucket": "b",
        "ImageUri": "img",
        "RoleArn": "arn:aws:iam::123456789012:role/r",
        "CodeUri": "s3://b/code.zip",
        "MaxRuntimeSeconds": "3600",
        "JobNamePrefix": "hfstage-0-",
    }
    parsed = StagedCheckpointProperties.from_properties(minimal)
    assert (parsed.max_instances, parsed.volume_size_gb, parsed.handoff_s, parsed.revision) == (4, 30, 600, "main")
    assert load_lambda("staged_checkpoint").Settings is StagedCheckpointProperties
    with pytest.raises(KeyError, match="JobNamePrefix"):
        StagedCheckpointProperties.from_properties({k: v for k, v in minimal.items() if k != "JobNamePrefix"})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["*.py", "Model.PY", "*.py", " "], ("*.py", "Model.PY")),
        ('["a", "b"]', ("a", "b")),
        ("serving.properties", ("serving.properties",)),
        ("", ()),
        (None, ()),
        (7, ()),
    ],
)
def test_list_properties_keep_order_and_case_and_drop_repeats(raw, expected):
    assert handler_kit.string_list(raw) == expected


# --- typed properties (handler_kit/resources.py) -----------------------------------------------------------


def test_smoke_test_properties_round_trip_through_the_template_text():
    from handler_kit.resources import EndpointSmokeTestProperties as Props

    written = Props(
        endpoint_name="e",
        endpoint_config_name="c",
        prompt="p",
        max_tokens=7,
        extra_body={"temperature": 0},
        budget_s=90,
        stream=False,
        stream_format="jsonlines",
    )
    text = written.to_properties()
    assert text == {
        "EndpointName": "e",
        "EndpointConfigName": "c",
        "Prompt": "p",
        "MaxTokens": "7",
        "ExtraBody": '{"temperature":0}',
        "BudgetSeconds": "90",
        "Stream": "false",
        "StreamFormat": "jsonlines",
    }
    assert all(isinstance(v, str) for v in text.values())  # CloudFormation passes scalars as strings
    read = Props.from_properties(text)
    assert (read.max_tokens, read.budget_s, read.stream, read.extra_body) == (7, 90.0, False, {"temperature": 0})


def test_a_default_is_left_out_only_where_its_field_says_so():
    from handler_kit.resources import EndpointSmokeTestProperties as Props

    text = Props(endpoint_name="e", endpoint_config_name="c", prompt="p").to_properties()
    assert "StreamFormat" not in text  # omit_default: SSE templates stayed as they were before the property
    assert text["MaxTokens"] == "64" and text["Stream"] == "true"  # the others are written, defaults included
    assert Props.from_properties({"EndpointName": "e", "EndpointConfigName": "c", "Prompt": "p"}) == Props(
        endpoint_name="e", endpoint_config_name="c", prompt="p"
    )


def test_bad_properties_are_all_named_with_their_values_in_one_line():
    from handler_kit.resources import EndpointSmokeTestProperties as Props
    from handler_kit.resources import PropertiesError

    with pytest.raises(PropertiesError) as info:
        Props.from_properties({"EndpointName": "e", "MaxTokens": "ten", "Stream": "yes", "ExtraBody": "[1]"})
    assert str(info.value) == (
        "Custom::EndpointSmokeTest properties: 5 problems: EndpointConfigName is required; Prompt is required; "
        "MaxTokens='ten' is not a whole number; ExtraBody='[1]' is not a JSON object; "
        "Stream='yes' is not a flag (true or false)"
    )
    problems: list[str] = []
    read = Props.from_properties({"MaxTokens": "ten"}, problems)  # collected, not raised: the handler adds its own
    assert read.max_tokens == Props.default("max_tokens") == 64 and len(problems) == 4


def test_the_construct_and_the_handler_share_each_default():
    import inspect

    from constructs_lib import EndpointSmokeTest
    from handler_kit.resources import EndpointSmokeTestProperties as Props

    signature = inspect.signature(EndpointSmokeTest.__init__)
    for name in ("max_tokens", "stream", "stream_format"):
        assert signature.parameters[name].default == Props.default(name)


def test_a_handler_split_by_concern_names_its_modules_after_itself():
    """A handler's modules sit beside its index.py (the asset's root, on the Lambda runtime's path), so a name
    shared by two handlers, or with the standard library or a bundled package, would import the wrong module."""
    import sys

    lambda_dir = Path(__file__).resolve().parents[2] / "lambda"
    seen: dict[str, str] = {}
    for handler in sorted(p for p in lambda_dir.iterdir() if (p / "index.py").is_file()):
        for module in sorted(handler.glob("*.py")):
            if module.name == "index.py":
                continue
            assert module.stem not in seen, f"{module.stem} is in {seen.get(module.stem)} and {handler.name}"
            assert module.stem not in sys.stdlib_module_names
            bundled = ("handler_kit", "safejson", "hfstage", "preflight", "endpoint_client", "boto3", "botocore")
            assert module.stem not in bundled
            seen[module.stem] = handler.name
    assert {"staging_job", "smoke_checks", "preflight_quota", "preflight_settings"} <= set(seen)


def test_the_preflight_construct_and_handler_share_each_default():
    import inspect

    import preflight
    from constructs_lib import DeploymentPreflight
    from handler_kit.resources import DeploymentPreflightProperties as Props

    signature = inspect.signature(DeploymentPreflight.__init__)
    for name in ("max_num_seqs", "kv_cache_dtype", "instances_needed", "update_instances", "gpu_memory_utilization"):
        assert signature.parameters[name].default == Props.default(name), name
    # The handler_kit cannot import preflight (the staging handler does not bundle it): the two stay equal here.
    assert Props.default("gpu_memory_utilization") == preflight.DEFAULT_GPU_MEMORY_UTILIZATION


def test_preflight_properties_keep_the_templates_of_earlier_releases():
    """Unset max_model_len is written as "" (what templates held before the class), an unknown engine's format
    group and an unset max_num_batched_tokens are left out: no property change, so no preflight re-run."""
    from handler_kit.resources import DeploymentPreflightProperties as Props

    unset = dict.fromkeys(("engine", "compute_capability", "dtype", "quantization", "format_alternatives"))
    written = Props(model_s3_uri="s3://b/p/", instance_type="ml.g6.xlarge", gpu_count=1, gpu_memory_gib=24.0, **unset)
    text = written.to_properties()
    assert text["MaxModelLen"] == "" and "MaxNumBatchedTokens" not in text and "Engine" not in text
    assert text["GpuMemoryGib"] == "24" and text["SkipChecks"] == [] and text["AllowCheckpointCode"] == "false"
    read = Props.from_properties(text)
    assert read.max_model_len is None and read.gpu_memory_gib == 24.0 and read.engine == ""
