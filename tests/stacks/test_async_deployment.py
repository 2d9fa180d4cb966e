"""``cdk synth -c deployment_mode=async`` as the app builds it, alone and as one deployment of a fleet (issue 38).

Synthesized to a cloud assembly: cfn-lint clean, cdk-nag (AwsSolutions) with no unacknowledged finding, every
acknowledgement with its reason; the queue, both topics, the two scaling policies and the smoke test are there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import build

pytestmark = pytest.mark.integration  # whole apps: `make test-integration` (CI runs it)

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
FLEET = {
    "chat": {"model_id": "Qwen/Qwen3-4B-Instruct-2507"},
    "batch": {
        "model_id": "Qwen/Qwen3-4B-Instruct-2507",
        "deployment_mode": "async",
        "min_instances": 0,
        "max_instances": 2,
        "async_invocation_timeout_s": 1800,
    },
}


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    outdir = tmp_path_factory.mktemp("async")
    build(outdir=str(outdir), deployment_mode="async", min_instances=0, max_instances=2).synth()
    return outdir


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    outdir = tmp_path_factory.mktemp("async-fleet")
    build(outdir=str(outdir), deployments=json.dumps(FLEET)).synth()
    return outdir


def resources(template: dict, kind: str) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def assert_clean(assembly: Path, stacks: list[str]) -> None:
    paths = [str(assembly / f"{s}.template.json") for s in stacks]
    result = subprocess.run([CFN_LINT, "--ignore-checks", "W3005", "--", *paths], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    (plugin,) = json.loads((assembly / "validation-report.json").read_text())["pluginReports"]
    assert plugin["conclusion"] == "success" and plugin["violations"] == []
    for finding in plugin["suppressedViolations"]:
        assert len(finding["reason"]) > 40, finding


def test_the_async_stack_has_the_queue_topics_backlog_policies_and_smoke_test_and_is_clean(single):
    template = json.loads((single / "LlmEndpoint.template.json").read_text())
    (config,) = resources(template, "AWS::SageMaker::EndpointConfig")
    output = config["AsyncInferenceConfig"]["OutputConfig"]
    assert {"S3OutputPath", "S3FailurePath", "NotificationConfig"} <= set(output)
    assert set(output["NotificationConfig"]) == {"SuccessTopic", "ErrorTopic"}
    assert len(resources(template, "AWS::SNS::Topic")) == 3  # success, error, and the alarms' topic
    (target,) = resources(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["MinCapacity"] == 0
    kinds = sorted(p["PolicyType"] for p in resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy"))
    assert kinds == ["StepScaling", "TargetTrackingScaling"]
    (smoke,) = resources(template, "Custom::EndpointSmokeTest")
    assert smoke["Stream"] == "false" and "AsyncOutputPath" in smoke
    assert_clean(single, ["LlmEndpoint"])


def test_a_fleet_deployment_can_be_async_beside_a_real_time_one(fleet):
    batch = json.loads((fleet / "LlmEndpoint-batch.template.json").read_text())
    chat = json.loads((fleet / "LlmEndpoint-chat.template.json").read_text())
    (config,) = resources(batch, "AWS::SageMaker::EndpointConfig")
    assert "AsyncInferenceConfig" in config
    assert "AsyncInferenceConfig" not in resources(chat, "AWS::SageMaker::EndpointConfig")[0]
    (smoke,) = resources(batch, "Custom::EndpointSmokeTest")
    assert smoke["InvocationTimeoutSeconds"] == "1800"
    assert "BatchOpenAiBaseUrl" not in batch["Outputs"] and "ChatOpenAiBaseUrl" in chat["Outputs"]
    assert "BatchEndpointName" in batch["Outputs"]
    assert_clean(fleet, ["LlmEndpoint-batch", "LlmEndpoint-chat", "LlmEndpoint-models"])
