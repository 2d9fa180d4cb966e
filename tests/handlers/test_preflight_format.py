"""The deploy-time format check: the preflight reads config.json's dtype and quantization against the GPU."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3_lib
from aws_cdk.assertions import Template

from constructs_lib.model_data import S3ModelData
from constructs_lib.preflight_check import RESOURCE_TYPE, DeploymentPreflight
from tests.conftest import default_context
from tests.fakes.fixtures import s3  # noqa: F401
from tests.handlers.test_preflight_handler import CONFIG, applied, event, handler, properties, quota, refused, stage  # noqa: F401

T4 = {"InstanceType": "ml.g4dn.xlarge", "GpuMemoryGib": "16", "Engine": "vllm", "ComputeCapability": "7.5"}
T4_QUOTA = "ml.g4dn.xlarge for endpoint usage"


@pytest.mark.parametrize(("instance_type", "capability"), [("ml.g4dn.xlarge", "7.5"), ("ml.p3.2xlarge", "7.0")])
def test_bfloat16_asked_for_on_a_t4_or_v100_is_refused_with_the_nearest_instance(
    handler,  # noqa: F811
    s3,  # noqa: F811
    instance_type,
    capability,
):
    stage(s3)  # config.json says torch_dtype bfloat16
    applied(handler, quota(f"{instance_type} for endpoint usage"))
    gpu = {"InstanceType": instance_type, "GpuMemoryGib": "16", "Engine": "vllm", "ComputeCapability": capability}
    alternatives = json.dumps({"8.0": "ml.g6.xlarge"})
    message = refused(handler, properties(**gpu, Dtype="bfloat16", FormatAlternatives=alternatives))
    assert "[format] bfloat16 weights and compute need compute capability 8.0 or newer with vllm" in message
    assert f"{instance_type} (compute capability {capability})" in message
    assert "the nearest instance type that can: ml.g6.xlarge" in message
    assert "[memory]" not in message and "[quota]" not in message


def test_a_bfloat16_checkpoint_without_a_dtype_flag_starts_in_float16_on_a_t4_with_a_note(handler, s3):  # noqa: F811
    # vLLM resolves dtype auto to float16 on a GPU without bfloat16 (_resolve_auto_dtype): not a refusal.
    stage(s3)
    applied(handler, quota(T4_QUOTA))
    result = handler.on_event(event(props=properties(**T4)))
    assert "format" in result["Data"]["ChecksRun"]
    assert "serves this bfloat16 checkpoint in float16" in result["Data"]["Notes"]


def test_the_engine_dtype_flag_wins_and_float16_passes(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler, quota(T4_QUOTA))
    result = handler.on_event(event(props=properties(**T4, Dtype="float16")))
    assert "format" in result["Data"]["ChecksRun"]


def test_fp8_on_a10g_passes_with_a_note_and_an_unknown_engine_is_not_checked(handler, s3):  # noqa: F811
    stage(s3, config={**CONFIG, "quantization_config": {"quant_method": "fp8"}})
    applied(handler, quota("ml.g5.xlarge for endpoint usage"))
    a10g = {"InstanceType": "ml.g5.xlarge", "Engine": "vllm", "ComputeCapability": "8.6"}
    result = handler.on_event(event(props=properties(**a10g)))
    assert result["PhysicalResourceId"].startswith("preflight-")
    assert "Marlin" in result["Data"]["Notes"] and "weight-only" in result["Data"]["Notes"]  # the note it promises
    # Without an engine (a construct used on its own), nothing is refused for the format.
    applied(handler, quota(T4_QUOTA))
    handler.on_event(event(props=properties(InstanceType="ml.g4dn.xlarge", GpuMemoryGib="16")))


def test_skipping_the_format_check(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler, quota(T4_QUOTA))
    result = handler.on_event(event(props=properties(**T4, SkipChecks=["format"])))
    assert result["Data"]["ChecksSkipped"] == "format"


# --- the construct passes what the check needs ---------------------------------------------------------


def preflight_properties(**kwargs) -> dict:
    app = cdk.App(context=default_context())
    stack = cdk.Stack(app, "FormatTest")
    bucket = s3_lib.Bucket.from_bucket_name(stack, "Models", "my-models")
    DeploymentPreflight(stack, "Preflight", model=S3ModelData(bucket, "models/x/"), **kwargs)
    (resource,) = Template.from_stack(stack).find_resources(RESOURCE_TYPE).values()
    return resource["Properties"]


def test_the_construct_passes_capability_engine_flags_and_nearest_instances():
    props = preflight_properties(instance_type="ml.g4dn.xlarge", engine="vllm", dtype="bfloat16")
    assert props["Engine"] == "vllm" and props["ComputeCapability"] == "7.5" and props["Dtype"] == "bfloat16"
    assert json.loads(props["FormatAlternatives"]) == {"8.0": "ml.g6.xlarge"}  # cheapest sourced 8.0+ price
    without = preflight_properties(instance_type="ml.g6.xlarge")
    assert "Engine" not in without and "ComputeCapability" not in without
