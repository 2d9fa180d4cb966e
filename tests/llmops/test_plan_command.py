"""``python -m llmops.plan``: from a local config.json, and from a staged checkpoint on a moto S3 server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from llmops.plan import MANIFEST, main, split_s3_uri
from preflight import select_weight_files

ROOT = Path(__file__).resolve().parents[2]

# Qwen/Qwen3-8B config.json (the fields that matter): 147,456 KV bytes per token (2 x 36 x 8 x 128 x 2).
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 4096,
    "head_dim": 128,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 40960,
    "use_sliding_window": False,
    "torch_dtype": "bfloat16",
}
QWEN3_8B_BYTES = 16_400_000_000


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_8B))
    return path


def plan(*args: str, s3_client=None) -> int:
    return main(list(args), s3_client=s3_client)


def plan_local(config_file, instance_type: str, *extra: str, max_model_len: str = "32768") -> int:
    return plan(
        "--config",
        str(config_file),
        "--weights-bytes",
        str(QWEN3_8B_BYTES),
        "--instance-type",
        instance_type,
        "--max-model-len",
        max_model_len,
        *extra,
    )


def test_fits_exits_0_with_the_numbers(config_file, capsys):
    rc = plan_local(config_file, "ml.g6e.12xlarge")

    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert out.startswith("ml.g6e.12xlarge (4 x NVIDIA L40S, 48 GB): 4 GPU(s), tensor parallel 4")
    for expected in (
        "44.70 GiB",  # 48 GB per GPU
        "40.23 GiB",  # x 0.90
        "3.82 GiB",  # 16.4e9 / 4 of weights
        "36.0 KiB (whole model 144.0 KiB)",  # 2 KV heads per GPU
        "1.12 GiB",  # one 32,768-token sequence per GPU
        "1,051,201 tokens",  # largest context
        "FITS",
    ):
        assert expected in out
    assert "instance types that fit" not in out


def test_does_not_fit_exits_1_with_what_to_change(config_file, capsys):
    rc = plan_local(config_file, "ml.g6.xlarge")

    out, _ = capsys.readouterr()
    assert rc == 1
    assert "DOES NOT FIT" in out
    assert "Set max_model_len to at most 25,811" in out
    assert "an fp8 KV cache (kv-cache-dtype fp8" in out
    # Types that fit, one per GPU model and count, smallest first; the 1 x L40S type is its smallest size.
    (suggestions,) = [line for line in out.splitlines() if line.startswith("instance types that fit")]
    assert "ml.g6e.xlarge (1 x NVIDIA L40S)" in suggestions
    assert "ml.g6e.2xlarge" not in suggestions


def test_flags_change_the_estimate(config_file, capsys):
    # fp8 KV cache on the L4: 73,728 bytes per token; 32,768 tokens = 2.25 GiB < 3.54 GiB budget.
    assert plan_local(config_file, "ml.g6.xlarge", "--kv-cache-dtype", "fp8") == 0
    out = capsys.readouterr().out
    assert "72.0 KiB" in out and "fp8" in out
    # A shorter context fits as it is.
    assert plan_local(config_file, "ml.g6.xlarge", max_model_len="16384") == 0
    capsys.readouterr()
    # 33 full-length sequences on 4 x L40S is one too many (32 fit).
    assert plan_local(config_file, "ml.g6e.12xlarge", "--max-num-seqs", "33") == 1
    assert "enough for 32" in capsys.readouterr().out
    # TP 2 on a 4-GPU instance: 4 KV heads per GPU, and a warning about the idle GPUs.
    assert plan_local(config_file, "ml.g6e.12xlarge", "--tensor-parallel-size", "2") == 0
    out = capsys.readouterr().out
    assert "72.0 KiB (whole model 144.0 KiB)" in out
    assert "uses 2 of the instance's 4 GPUs" in out
    # A lower utilization leaves less: 0.5 x 22.35 GiB cannot hold the weights.
    assert plan_local(config_file, "ml.g6.xlarge", "--gpu-memory-utilization", "0.5") == 1
    assert "weights do not fit" in capsys.readouterr().out


def test_a_longer_profiling_pass_leaves_less_kv_cache(config_file, capsys):
    # 24,000 tokens x 144 KiB = 3.30 GiB of KV cache fits the L4's 3.54 GiB budget at vLLM's 2048-token default;
    # 32,768 batched tokens add 30,720 x 2 x 4096 16-bit activations (0.47 GiB), and then it does not.
    assert plan_local(config_file, "ml.g6.xlarge", max_model_len="24000") == 0
    capsys.readouterr()
    assert plan_local(config_file, "ml.g6.xlarge", "--max-num-batched-tokens", "32768", max_model_len="24000") == 1
    assert "0.47 GiB of activations for max_num_batched_tokens 32,768 (above 2,048)" in capsys.readouterr().out


def test_instance_types_outside_the_catalog_take_explicit_gpu_facts(config_file, capsys):
    rc = plan_local(config_file, "ml.g99.xlarge", "--gpu-count", "2", "--gpu-memory-gib", "80")

    out = capsys.readouterr().out
    assert rc == 0
    assert "ml.g99.xlarge (2 x unknown, 80 GB): 2 GPU(s), tensor parallel 2" in out
    assert "74.51 GiB" in out  # 80e9 bytes
    # Neither the shipped table nor the Price List lookup knows a type outside the catalog: "?" alone.
    assert "on-demand price in us-east-1: USD ? per hour (ml.g99.xlarge is not in the catalog)" in out
    assert "llmops.price_list" not in out


def test_tp_that_does_not_divide_the_heads_does_not_fit(tmp_path, capsys):
    config = tmp_path / "config.json"
    # Qwen/Qwen2.5-7B-Instruct-AWQ: 28 attention heads, 4 KV heads; ml.g6.48xlarge has 8 L4s.
    config.write_text(
        json.dumps(
            {
                "hidden_size": 3584,
                "num_hidden_layers": 28,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "quantization_config": {"bits": 4, "quant_method": "awq"},
                "torch_dtype": "float16",
            }
        )
    )
    rc = plan("--config", str(config), "--weights-bytes", "5580000000", "--instance-type", "ml.g6.48xlarge")
    assert rc == 2  # --max-model-len is required
    capsys.readouterr()

    args = ["--config", str(config), "--weights-bytes", "5580000000", "--max-model-len", "32768"]
    rc = plan(*args, "--instance-type", "ml.g6.48xlarge")
    out = capsys.readouterr().out
    assert rc == 1
    assert "tensor_parallel_size=8 does not divide num_attention_heads=28" in out
    assert "Allowed: 1, 2, 4;" in out
    assert plan(*args, "--instance-type", "ml.g6.48xlarge", "--tensor-parallel-size", "4") == 0


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--max-model-len", "0"], "argument --max-model-len: invalid value '0': must be at least 1"),
        (["--max-model-len", "lots"], "argument --max-model-len: invalid value 'lots': must be a whole number"),
        (["--kv-cache-dtype", "int4"], "argument --kv-cache-dtype: invalid choice: 'int4'"),
        (["--gpu-memory-utilization", "1.5"], "argument --gpu-memory-utilization: invalid value '1.5'"),
        (["--gpu-memory-utilization", "0"], "argument --gpu-memory-utilization: invalid value '0'"),
        (["--max-num-seqs", "-3"], "argument --max-num-seqs: invalid value '-3'"),
        (["--max-num-batched-tokens", "0"], "argument --max-num-batched-tokens: invalid value '0'"),
        (["--tensor-parallel-size", "2"], "argument --tensor-parallel-size: invalid value 2: ml.g6.xlarge has 1 GPU"),
        (["--instance-type", "ml.g9.xlarge"], "argument --instance-type ml.g9.xlarge: instance_type='ml.g9.xlarge'"),
        (["--gpu-count", "2"], "gpu_count=2 contradicts the catalog"),
        (["--weights-bytes", "0"], "argument --weights-bytes: invalid value '0'"),
        (["--model-s3-uri", "s3://b/p/"], "argument --model-s3-uri: not allowed with argument --config"),
    ],
)
def test_bad_flags_exit_2_naming_flag_and_value(config_file, capsys, args, named):
    rc = plan_local(config_file, "ml.g6.xlarge", *args)

    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert named in err


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (None, "argument --config"),  # no such file
        ("{not json", "cannot read it as JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"hidden_size": 4096, "num_attention_heads": 32}), "config.json has no num_hidden_layers"),
    ],
)
def test_unusable_config_file_exits_2(tmp_path, capsys, content, named):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)

    rc = plan_local(path, "ml.g6.xlarge")

    err = capsys.readouterr().err
    assert rc == 2
    assert f"argument --config {path}" in err
    assert named in err


def test_weights_bytes_is_required_with_config(config_file, capsys):
    rc = plan("--config", str(config_file), "--instance-type", "ml.g6.xlarge", "--max-model-len", "1024")
    assert rc == 2
    assert "argument --weights-bytes: required with --config" in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert plan("--help") == 0
    assert "--model-s3-uri" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://bucket/models/Qwen--Qwen3-8B/abc/", ("bucket", "models/Qwen--Qwen3-8B/abc/")),
        ("s3://bucket/models/x", ("bucket", "models/x/")),
        ("s3://bucket", ("bucket", "")),
        ("s3://bucket/", ("bucket", "")),
        ("https://bucket.s3.amazonaws.com/x/", None),
        ("s3://", None),
        ("s3://UPPER/x/", None),
    ],
)
def test_split_s3_uri(uri, expected):
    assert split_s3_uri(uri) == expected


# Weight files the command counts.


def test_safetensors_win_over_bin_and_subfolders():
    sizes = {
        "model-00001-of-00002.safetensors": 10,
        "model-00002-of-00002.safetensors": 5,
        "pytorch_model.bin": 15,
        "original/consolidated.00.pth": 15,
        "original/model.safetensors": 15,
        "tokenizer.json": 7,
    }
    weights = select_weight_files(sizes)
    assert weights.total_bytes == 15
    assert weights.files == ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    assert len(weights.notes) == 2


def test_the_safetensors_index_drops_consolidated_copies():
    sizes = {
        "consolidated.safetensors": 20,
        "model-00001-of-00002.safetensors": 12,
        "model-00002-of-00002.safetensors": 8,
    }
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    weights = select_weight_files(sizes, index)
    assert weights.total_bytes == 20
    assert "consolidated.safetensors" in weights.notes[0]
    two = select_weight_files({**sizes, "extra.safetensors": 1}, index)
    assert two.notes == (
        "not in model.safetensors.index.json, not counted: consolidated.safetensors, extra.safetensors",
    )
    assert select_weight_files(sizes).total_bytes == 40  # without the index all are counted


def test_bin_only_gguf_only_and_nested_only_checkpoints():
    assert select_weight_files({"pytorch_model.bin": 9, "config.json": 1}).total_bytes == 9
    gguf = select_weight_files({"Qwen3-8B-Q4_K_M.gguf": 5, "Qwen3-8B-Q8_0.gguf": 9})
    assert gguf.total_bytes == 14 and "stage one quantization" in gguf.notes[0]
    nested = select_weight_files({"Q4_K_M/model-00001-of-00002.gguf": 3, "Q4_K_M/model-00002-of-00002.gguf": 2})
    assert nested.total_bytes == 5 and "subfolders" in nested.notes[0]
    assert select_weight_files({"README.md": 3}).files == ()


# --model-s3-uri against a moto S3 server.


@pytest.fixture(scope="module")
def moto_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(moto_endpoint, monkeypatch):
    """A plain S3 client for arranging objects and a fresh bucket; boto3 in this process reaches only moto."""
    import boto3

    for name, value in {
        "AWS_ENDPOINT_URL_S3": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
        monkeypatch.delenv(name, raising=False)
    client = boto3.client("s3")
    bucket = f"plan-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket


PREFIX = "models/Qwen--Qwen3-8B/9c925d64d72725edaf899c6cb9c377fd0709d9c5/"


def put(s3, key: str, body: bytes | str) -> None:
    client, bucket = s3
    client.put_object(Bucket=bucket, Key=PREFIX + key, Body=body.encode() if isinstance(body, str) else body)


def manifest(files: dict[str, int]) -> str:
    entries = [{"path": p, "size": s, "blob_id": f"{n:040x}"} for n, (p, s) in enumerate(sorted(files.items()))]
    return json.dumps(
        {
            "schema_version": 1,
            "source": "huggingface",
            "repo_id": "Qwen/Qwen3-8B",
            "revision": "9c925d64d72725edaf899c6cb9c377fd0709d9c5",
            "files": entries,
            "total_bytes": sum(files.values()),
            "completed_at": "2026-01-01T00:00:00Z",
        }
    )


def uri(s3) -> str:
    return f"s3://{s3[1]}/{PREFIX}"


def plan_s3(s3, instance_type: str, *extra: str) -> int:
    return plan("--model-s3-uri", uri(s3), "--instance-type", instance_type, "--max-model-len", "32768", *extra)


def test_s3_checkpoint_with_manifest(s3, capsys):
    put(s3, "config.json", json.dumps(QWEN3_8B))
    files = {
        "config.json": 700,
        "model-00001-of-00002.safetensors": 10_000_000_000,
        "model-00002-of-00002.safetensors": 6_400_000_000,
        "model.safetensors.index.json": 30_000,
        "tokenizer.json": 11_000_000,
    }
    put(s3, MANIFEST, manifest(files))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    put(s3, "model.safetensors.index.json", json.dumps(index))

    rc = plan_s3(s3, "ml.g6e.12xlarge")

    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert out.splitlines()[0] == (
        f"weights: 16,400,000,000 bytes in 2 file(s) listed in {MANIFEST} "
        "(total_bytes 16,411,030,700, incl. tokenizer and config files)"
    )
    assert "1,051,201 tokens" in out  # the same figures as from the local config.json
    assert plan_s3(s3, "ml.g6.xlarge") == 1
    assert "25,811" in capsys.readouterr().out


def test_s3_checkpoint_without_manifest_sums_the_listed_weights(s3, capsys):
    put(s3, "config.json", json.dumps(QWEN3_8B))
    put(s3, "model-00001-of-00002.safetensors", b"x" * 3000)
    put(s3, "model-00002-of-00002.safetensors", b"x" * 2000)
    put(s3, "pytorch_model.bin", b"x" * 5000)  # the same weights again, in the older format
    put(s3, "original/consolidated.safetensors", b"x" * 5000)
    put(s3, "tokenizer.json", b"{}")

    rc = plan_s3(s3, "ml.g6.xlarge")

    out, err = capsys.readouterr()
    assert rc == 0, out + err
    lines = out.splitlines()
    assert lines[0] == (
        f"weights: 5,000 bytes in 2 file(s) listed under the prefix: no {MANIFEST} there, so the sizes are not verified"
    )
    assert any("subfolders" in line for line in lines[1:3])
    assert any("non-safetensors" in line for line in lines[1:3])


def test_s3_weights_bytes_overrides_the_listing(s3, capsys):
    put(s3, "config.json", json.dumps(QWEN3_8B))
    put(s3, "model.safetensors", b"x" * 100)

    rc = plan_s3(s3, "ml.g6.xlarge", "--weights-bytes", str(QWEN3_8B_BYTES))

    out = capsys.readouterr().out
    assert rc == 1
    assert "16,400,000,000 bytes as given by --weights-bytes" in out


def test_manifest_with_only_total_bytes(s3, capsys):
    put(s3, "config.json", json.dumps(QWEN3_8B))
    put(s3, MANIFEST, json.dumps({"schema_version": 1, "total_bytes": QWEN3_8B_BYTES}))

    assert plan_s3(s3, "ml.g6e.12xlarge") == 0
    assert f"weights: total_bytes 16,400,000,000 of {uri(s3)}{MANIFEST}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("objects", "named"),
    [
        ({}, "no config.json under s3://"),
        ({"config.json": "{nope"}, "config.json is not valid JSON"),
        ({"config.json": "[]"}, "config.json is not a JSON object"),
        ({"config.json": json.dumps(QWEN3_8B), "tokenizer.json": "{}"}, "no weight files"),
        ({"config.json": json.dumps(QWEN3_8B), MANIFEST: "{"}, f"{MANIFEST} is not valid JSON"),
        ({"config.json": json.dumps(QWEN3_8B), MANIFEST: '{"files": [{"path": "a"}]}'}, "without path and size"),
        ({"config.json": json.dumps(QWEN3_8B), MANIFEST: '{"files": []}'}, "lists no files and no total_bytes"),
    ],
)
def test_unreadable_checkpoint_exits_3(s3, capsys, objects, named):
    for key, body in objects.items():
        put(s3, key, body)

    rc = plan_s3(s3, "ml.g6.xlarge")

    out, err = capsys.readouterr()
    assert rc == 3
    assert out == ""
    assert named in err


def test_missing_bucket_and_missing_credentials_exit_3(s3, monkeypatch, capsys):
    rc = plan(
        "--model-s3-uri", "s3://no-such-bucket-here/x/", "--instance-type", "ml.g6.xlarge", "--max-model-len", "8"
    )
    assert rc == 3
    assert "could not read s3://no-such-bucket-here/x/config.json: NoSuchBucket" in capsys.readouterr().err

    put(s3, "config.json", json.dumps(QWEN3_8B))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert plan_s3(s3, "ml.g6.xlarge") == 3
    assert "Unable to locate credentials" in capsys.readouterr().err


def test_bad_s3_uri_exits_2_without_calling_s3(capsys):
    rc = plan("--model-s3-uri", "bucket/prefix", "--instance-type", "ml.g6.xlarge", "--max-model-len", "8")
    assert rc == 2
    assert "argument --model-s3-uri: invalid value 'bucket/prefix'" in capsys.readouterr().err


def test_runs_as_a_module(config_file):
    result = subprocess.run(
        [
            *(sys.executable, "-m", "llmops.plan", "--config", str(config_file)),
            *("--weights-bytes", str(QWEN3_8B_BYTES), "--instance-type", "ml.g6.xlarge", "--max-model-len", "32768"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "DOES NOT FIT" in result.stdout
    assert result.stderr == ""


def test_weight_notes_say_what_was_left_out_and_nothing_when_nothing_was():
    nested = select_weight_files({"original/model.safetensors": 15, "config.json": 1})
    assert nested.notes == ("no weight file at the checkpoint root; counted the ones in subfolders",)
    mixed = select_weight_files({"a.safetensors": 10, "b.safetensors": 5, "pytorch_model.bin": 15})
    assert mixed.total_bytes == 15
    assert mixed.notes == ("1 non-safetensors weight file(s) not counted: *.safetensors win",)
    # An index that names every file, or none of those present (a stale index), drops nothing.
    sizes = {"a.safetensors": 10, "b.safetensors": 5}
    assert select_weight_files(sizes, {"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}).notes == ()
    stale = select_weight_files(sizes, {"weight_map": {"x": "model-00001-of-00002.safetensors"}})
    assert (stale.total_bytes, stale.notes) == (15, ())
    # One GGUF file is the model, not a warning.
    assert select_weight_files({"m-Q4_K_M.gguf": 100}).notes == ()
