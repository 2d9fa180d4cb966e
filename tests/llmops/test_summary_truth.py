"""llmops summary tells the truth: one block per Model with its repository and revision (pinned or not), the token
secret by name, engine, image, mode, instance and count, network isolation read from the resource that carries it,
and cost; ``--help`` works."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from constructs_lib import ComponentEndpoint, GpuEndpoint, S3ModelData, StagedCheckpoint
from llmops.summary import describe, main
from tests.conftest import stack_template


def blocks(lines: list[str]) -> dict[str, list[str]]:
    """The lines of each model block, by its header."""
    found: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith("  model ") and line.endswith("):"):
            current = found.setdefault(line, [])
        elif current is not None and line.startswith("    "):
            current.append(line.strip())
        else:
            current = None
    return found


def test_the_default_summary_has_one_block_with_the_model_revision_mode_engine_secret_and_instance():
    (block,) = blocks(describe(stack_template().to_json())).items()
    header, lines = block
    assert header.endswith(" (standard):")
    assert lines[0].startswith("model: Qwen/Qwen3-4B-Instruct-2507 at main (not pinned")
    assert "token secret: none (a public repository)" in lines
    assert "engine: vllm" in lines and "network isolation: True" in lines
    assert any(line.startswith("variant AllTraffic: 1 x ml.g6.xlarge, AMI ") for line in lines)
    assert any(line.startswith("cost in us-east-1: 1 x ml.g6.xlarge") for line in lines)


def test_a_pinned_revision_and_a_token_secret_by_name_only():
    sha = "0123456789abcdef0123456789abcdef01234567"
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
    ((_, lines),) = blocks(describe(stack_template(revision=sha, hf_token_secret_arn=arn).to_json())).items()
    assert f"model: Qwen/Qwen3-4B-Instruct-2507 at {sha} (pinned)" in lines
    # The secret is named hf-token: Secrets Manager adds '-' and six random characters to its ARN only.
    assert "token secret: hf-token" in lines and "AbCdEf" not in "\n".join(lines)


@pytest.mark.parametrize(
    ("name", "shown"),
    [("hf-token", "hf-token"), ("team/hf-token-prod", "team/hf-token-prod"), ("tok", "tok"), ("a-b-c", "a-b-c")],
)
def test_the_token_secret_is_shown_by_its_name_without_the_arns_random_suffix(name, shown):
    from llmops.summary import secret_name_of

    assert secret_name_of(f"arn:aws:secretsmanager:eu-west-1:123456789012:secret:{name}-Xy12Zw") == shown


def test_isolation_is_read_from_the_config_that_serves_each_model_and_each_has_its_mode():
    """A standard endpoint's config has no isolation flag (the Model carries it); a component endpoint's config
    must carry it too. With both in one stack, every Model is isolated and the summary says so, per model."""
    stack = cdk.Stack(cdk.App(), "Both")
    model = S3ModelData.from_s3_uri(stack, "Weights", "s3://my-models/models/q/")
    GpuEndpoint(stack, "Standard", model=model, instance_type="ml.g6.2xlarge")
    shared = ComponentEndpoint(stack, "Shared", instance_type="ml.g6e.12xlarge")
    shared.add_component("Chat", model=model, tensor_parallel_size=1)
    found = blocks(describe(Template.from_stack(stack).to_json()))
    standard = next(lines for head, lines in found.items() if head.endswith("(standard):"))
    component = next(lines for head, lines in found.items() if head.endswith("(inference-component):"))
    assert len(found) == 2
    for lines in (standard, component):
        assert "network isolation: True" in lines and "model: s3://my-models/models/q/ (given, not staged)" in lines
    assert any(line.startswith("variant AllTraffic: 1 x ml.g6.2xlarge") for line in standard)
    assert any(
        line.startswith("variant AllTraffic: 1 x ml.g6e.12xlarge") and "copy count 1" in line for line in component
    )


def test_two_checkpoints_each_block_names_its_own_repository():
    stack = cdk.Stack(cdk.App(), "Two")
    for name, repo in (("A", "Qwen/Qwen3-8B"), ("B", "Qwen/Qwen3-4B")):
        checkpoint = StagedCheckpoint(stack, f"Checkpoint{name}", repo_id=repo)
        GpuEndpoint(stack, f"Endpoint{name}", model=checkpoint)
    found = blocks(describe(Template.from_stack(stack).to_json()))
    repos = sorted(lines[0].split(" at ")[0] for lines in found.values())
    assert repos == ["model: Qwen/Qwen3-4B", "model: Qwen/Qwen3-8B"]


def test_help_prints_usage_and_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "usage: llmops summary" in capsys.readouterr().out


def test_an_async_endpoint_says_so_with_its_queue_its_range_and_no_customer_key_for_its_topics():
    lines = describe(stack_template(deployment_mode="async", max_instances=2).to_json())
    ((header, block),) = blocks(lines).items()
    assert header.endswith(" (async):")
    (queue,) = [line for line in block if line.startswith("queue: InvokeEndpointAsync; answers to ")]
    assert "output" in queue and "failures to " in queue
    assert "scales on the backlog: 0 to 2 instances" in block
    (cost,) = [line for line in block if line.startswith("cost in us-east-1: ")]
    assert cost.startswith("cost in us-east-1: USD 0.00/h idle (0 x ml.g6.xlarge), USD 2.25/h at full scale (2 x)")
    assert "730 h always on" not in cost
    (idle,) = [line for line in block if line.startswith("scale-to-zero: no instance (USD 0/h) while idle")]
    assert idle.endswith("and queued requests wait until it is in service")
    keys = next(line for line in lines if "customer keys:" in line)
    assert keys.strip().startswith("customer keys: alarm topic") and "(x" not in keys  # only the alarms' own key


def test_an_async_endpoint_with_a_floor_has_no_idle_line():
    lines = describe(stack_template(deployment_mode="async", min_instances=1, max_instances=3).to_json())
    ((_, block),) = blocks(lines).items()
    assert "scales on the backlog: 1 to 3 instances" in block
    assert any(
        line.startswith("cost in us-east-1: USD 1.13/h idle (1 x ml.g6.xlarge), USD 3.38/h at full") for line in block
    )
    assert not [line for line in block if line.startswith("scale-to-zero:")]


def test_an_async_endpoint_without_autoscaling_costs_its_instances_always_on():
    lines = describe(stack_template(deployment_mode="async", min_instances=1).to_json())
    ((_, block),) = blocks(lines).items()
    assert any("730 h always on" in line for line in block)
    assert not [line for line in block if line.startswith("scales on the backlog")]
