"""The real CDK CLI, as a user runs it: `cdk synth` fails fast on bad context and names every bad key."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

CDK = ROOT / "node_modules" / ".bin" / "cdk"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,  # the real CDK CLI: `make test-integration` (CI runs it)
    pytest.mark.skipif(not CDK.exists() or shutil.which("node") is None, reason="run `make setup` for the CDK CLI"),
]


def cdk_synth(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "CDK_DISABLE_VERSION_CHECK": "1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_STACK_TRACE": "1",
        # No Hub lookup from a test: app.py would otherwise record the model in the repository's model-facts.json.
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [str(CDK), "synth", "--quiet", "--output", str(tmp_path / "cdk.out"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_bad_context_fails_synth_with_one_message_naming_each_key(tmp_path):
    result = cdk_synth(
        tmp_path, "-c", "engine=foo", "-c", "instance_type=ml.g6e.12xlarge", "-c", "tensor_parallel_size=3"
    )
    assert result.returncode != 0
    err = result.stderr
    assert "context (fix with -c key=value or in cdk.json): 2 problems:" in err
    assert "engine='foo': not allowed; allowed: llamacpp, lmi, sglang, vllm" in err
    assert "tensor_parallel_size=3 does not match instance_type='ml.g6e.12xlarge'" in err
    assert "allowed: 4" in err
    assert "Traceback" not in err
    assert not (tmp_path / "cdk.out" / "LlmEndpoint.template.json").exists()


def test_sglang_synth_through_the_cli(tmp_path):
    result = cdk_synth(tmp_path, "-c", "engine=sglang", "-c", "instance_type=ml.g6e.2xlarge")
    assert result.returncode == 0, result.stderr
    template = (tmp_path / "cdk.out" / "LlmEndpoint.template.json").read_text()
    assert "SM_SGLANG_TP_SIZE" in template and "/sglang:" in template
