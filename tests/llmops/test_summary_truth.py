"""llmops summary tells the truth: the model and its revision, the mode, the token secret by name, and each Model's
network isolation read from the endpoint config that serves it."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk.assertions import Template

from constructs_lib import ComponentEndpoint, GpuEndpoint, S3ModelData
from llmops.summary import describe
from tests.conftest import stack_template


def test_the_default_summary_names_the_model_its_revision_the_mode_and_the_secret():
    lines = describe(stack_template().to_json())
    assert "  mode: standard" in lines
    assert any(line.startswith("  model: Qwen/Qwen3-4B-Instruct-2507 at main (not pinned") for line in lines)
    assert "  token secret: none (a public repository)" in lines


def test_a_pinned_revision_and_a_token_secret_by_name_only():
    sha = "0123456789abcdef0123456789abcdef01234567"
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
    lines = describe(stack_template(revision=sha, hf_token_secret_arn=arn).to_json())
    assert f"  model: Qwen/Qwen3-4B-Instruct-2507 at {sha} (pinned)" in lines
    assert "  token secret: hf-token-AbCdEf" in lines


def test_isolation_is_read_from_the_config_that_serves_each_model():
    """A standard endpoint's config has no isolation flag (the Model carries it); a component endpoint's config
    must carry it too. With both in one stack, every Model is isolated and the summary says so."""
    stack = cdk.Stack(cdk.App(), "Both")
    model = S3ModelData.from_s3_uri(stack, "Weights", "s3://my-models/models/q/")
    GpuEndpoint(stack, "Standard", model=model)
    shared = ComponentEndpoint(stack, "Shared", instance_type="ml.g6e.12xlarge")
    shared.add_component("Chat", model=model, tensor_parallel_size=1)
    lines = describe(Template.from_stack(stack).to_json())
    assert "  mode: inference-component" in lines
    assert lines.count("  network isolation: True") == 2 and "  network isolation: False" not in lines
