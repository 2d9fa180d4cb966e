"""The deploy-time preflight on a GGUF prefix (engine=llamacpp): the header stands in for config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.fixtures import s3  # noqa: F401
from tests.handlers.test_preflight_handler import URI, applied, event, handler, properties, quota, refused, stage  # noqa: F401
from tests.preflight.test_gguf_header import qwen36_like, write_gguf

SEED_BYTES = 21_200_000_000


@pytest.fixture
def gguf_bytes(tmp_path) -> bytes:
    return Path(qwen36_like(tmp_path)).read_bytes()


def stage_gguf(s3_env, body: bytes, *, name="Qwen3.6-35B-A3B-Q4_K_M.gguf", listed_size=None, extra=None) -> None:
    """A GGUF repository as staging leaves it: the chosen file, no config.json, the manifest."""
    sizes = {name: listed_size} if listed_size else None
    stage(s3_env, config=None, weights={}, extra={name: body, **(extra or {})}, manifest_sizes=sizes)


def test_a_gguf_prefix_passes_every_check_without_config_json(handler, s3, gguf_bytes):  # noqa: F811
    stage_gguf(s3, gguf_bytes, listed_size=len(gguf_bytes))
    applied(handler, quota("ml.g5.2xlarge for endpoint usage"))
    props = properties(InstanceType="ml.g5.2xlarge", MaxModelLen="16384", GgufFile="Qwen3.6-35B-A3B-Q4_K_M.gguf")
    data = handler.on_event(event(props=props))["Data"]
    assert data["WeightsBytes"] == str(len(gguf_bytes))
    assert data["MaxModelLen"] == "16384" and data["OverheadGiBPerGpu"] == "1.00"
    # 10 full-attention layers of 2 KV heads x 256: 20 KiB per token, 0.31 GiB for 16,384 tokens.
    assert data["KvCacheGiBPerSequence"] == "0.31"


def test_the_seed_articles_file_size_fits_an_a10g(handler, s3, gguf_bytes):  # noqa: F811
    stage_gguf(s3, gguf_bytes, listed_size=len(gguf_bytes))
    applied(handler, quota("ml.g5.2xlarge for endpoint usage"))
    props = properties(InstanceType="ml.g5.2xlarge", MaxModelLen="16384", AllowUnverifiedS3="true", SkipChecks=["s3"])
    # The manifest says 21.2 GB: the estimate takes the manifest's size, as staging verified it.
    s3.client.put_object(
        Bucket=s3.bucket,
        Key=URI.split(s3.bucket + "/", 1)[1] + ".hf-model-manifest.json",
        Body=json.dumps(
            {"schema_version": 1, "files": [{"path": "Qwen3.6-35B-A3B-Q4_K_M.gguf", "size": SEED_BYTES}]}
        ).encode(),
    )
    data = handler.on_event(event(props=props))["Data"]
    assert data["WeightsBytes"] == str(SEED_BYTES)
    assert int(data["MaxModelLenThatFits"]) > 16384


def test_a_gguf_too_big_for_the_gpu_is_refused_with_numbers(handler, s3, gguf_bytes):  # noqa: F811
    stage_gguf(s3, gguf_bytes, listed_size=None)
    s3.client.put_object(
        Bucket=s3.bucket,
        Key=URI.split(s3.bucket + "/", 1)[1] + ".hf-model-manifest.json",
        Body=b'{"schema_version": 1, "files": [{"path": "Qwen3.6-35B-A3B-Q4_K_M.gguf", "size": 40000000000}]}',
    )
    applied(handler, quota("ml.g5.2xlarge for endpoint usage"))
    props = properties(InstanceType="ml.g5.2xlarge", MaxModelLen="16384", SkipChecks=["s3"])
    message = refused(handler, props)
    assert "[memory] ml.g5.2xlarge" in message and "weights do not fit" in message
    assert "[tensor-parallel]" not in message


def test_only_the_named_model_counts_when_the_prefix_holds_several(handler, s3, tmp_path, gguf_bytes):  # noqa: F811
    other = write_gguf(tmp_path / "other.gguf").read_bytes()
    stage_gguf(s3, gguf_bytes, extra={"A-first-alphabetically-Q8_0.gguf": other})
    applied(handler, quota("ml.g5.2xlarge for endpoint usage"))
    props = properties(InstanceType="ml.g5.2xlarge", MaxModelLen="16384", GgufFile="*Q4_K_M*")
    data = handler.on_event(event(props=props))["Data"]
    assert data["WeightsBytes"] == str(len(gguf_bytes))


def test_a_file_that_is_not_gguf_is_named_with_the_reason(handler, s3):  # noqa: F811
    stage_gguf(s3, b"<html>an error page saved as a model</html>")
    applied(handler, quota("ml.g5.2xlarge for endpoint usage"))
    message = refused(handler, properties(InstanceType="ml.g5.2xlarge", MaxModelLen="16384"))
    assert f"[s3] {URI}Qwen3.6-35B-A3B-Q4_K_M.gguf is not a GGUF file llama.cpp can load" in message
    assert "[memory] cannot estimate GPU memory: " in message and "no config.json" not in message


def test_the_weight_format_table_is_not_applied_to_a_gguf(handler, s3, gguf_bytes):  # noqa: F811
    stage_gguf(s3, gguf_bytes, listed_size=len(gguf_bytes))
    applied(handler, quota("ml.g5.2xlarge for endpoint usage"))
    props = properties(
        InstanceType="ml.g5.2xlarge", MaxModelLen="16384", Engine="llamacpp", ComputeCapability="8.6", GgufFile="*.gguf"
    )
    data = handler.on_event(event(props=props))["Data"]
    assert "format table" not in data.get("Notes", "")


def test_a_gguf_file_pattern_matching_several_models_is_refused_as_the_adapter_would(
    handler,  # noqa: F811
    s3,  # noqa: F811
    tmp_path,
    gguf_bytes,
):
    other = write_gguf(tmp_path / "other.gguf").read_bytes()
    stage_gguf(s3, gguf_bytes, extra={"Qwen3.6-35B-A3B-Q4_K_L.gguf": other})
    applied(handler, quota("ml.g5.2xlarge for endpoint usage"))
    message = refused(handler, properties(InstanceType="ml.g5.2xlarge", MaxModelLen="16384", GgufFile="*Q4_K*"))
    assert "is one of 2 GGUF models matching gguf_file='*Q4_K*'" in message and "set gguf_file to one" in message
