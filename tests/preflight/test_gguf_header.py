"""GGUF headers (preflight/gguf.py) read from files the ``gguf`` package writes, locally and by S3 range GETs;
the llama.cpp memory fit, ``python -m llmops.plan --gguf`` and the deploy-time preflight on a GGUF prefix."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from llmops.plan import main as plan_main
from preflight import format_table
from preflight.gguf import (
    FIRST_READ,
    GgufError,
    GgufHeader,
    describe,
    estimate_gguf_fit,
    file_reader,
    gguf_config,
    read_header,
    read_s3_gguf,
    s3_reader,
    select_gguf,
)
from tests.fakes.fixtures import BUCKET, s3  # noqa: F401
from tests.harness.aws import Faults

GIB = 1 << 30
# The seed article's file: Qwen3.6-35B-A3B Q4_K_M, 21.2 GB, on one 24 GB A10G at 16,384 tokens.
SEED_BYTES = 21_200_000_000


def write_gguf(path: Path, arch: str = "llama", *, big_endian: bool = False, tensor_mib: int = 0, **kv) -> Path:
    """A small GGUF with the metadata llama.cpp reads, written by the ``gguf`` package."""
    endian = gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE
    writer = gguf.GGUFWriter(str(path), arch, endianess=endian)
    writer.add_name("Tiny test model")
    writer.add_file_type(kv.pop("file_type", 15))
    writer.add_block_count(kv.pop("block_count", 8))
    writer.add_context_length(kv.pop("context_length", 32768))
    writer.add_embedding_length(kv.pop("embedding_length", 2048))
    writer.add_head_count(kv.pop("head_count", 16))
    head_count_kv = kv.pop("head_count_kv", 4)
    if isinstance(head_count_kv, list):
        writer.add_array(f"{arch}.attention.head_count_kv", head_count_kv)
    else:
        writer.add_head_count_kv(head_count_kv)
    for key, value in kv.items():
        name = f"{arch}.{key}"
        if isinstance(value, list):
            writer.add_array(name, value)
        elif isinstance(value, bool):
            writer.add_bool(name, value)
        else:
            writer.add_uint32(name, value)
    # A vocabulary long enough that the reader must skip it, as real tokenizers make it.
    writer.add_token_list([f"token-{i}" for i in range(20_000)])
    writer.add_tensor("token_embd.weight", np.zeros((64, 128), dtype=np.float16))
    if tensor_mib:
        writer.add_tensor("blk.0.ffn.weight", np.zeros((tensor_mib, 1 << 19), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class CountingReader:
    def __init__(self, path: Path) -> None:
        self.read_at, self.calls, self.bytes = file_reader(str(path)), [], 0

    def __call__(self, offset: int, length: int) -> bytes:
        data = self.read_at(offset, length)
        self.calls.append((offset, length))
        self.bytes += len(data)
        return data


# --- the reader ---------------------------------------------------------------------------------------


def test_reads_version_counts_metadata_and_parameters(tmp_path):
    path = write_gguf(tmp_path / "m.gguf")
    header = read_header(file_reader(str(path)))
    assert header.version == 3 and header.tensor_count == 1
    assert header.architecture == "llama" and header.file_type == "Q4_K_M"
    assert header.arch_value("block_count") == 8 and header.arch_value("attention.head_count_kv") == 4
    assert header.metadata["general.name"] == "Tiny test model"
    assert len(header.metadata["tokenizer.ggml.tokens"]) == 20_000  # skipped, its length kept
    assert header.parameter_count == 64 * 128


def test_reads_only_the_header_in_growing_ranges_never_the_tensor_data(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", tensor_mib=8)
    reader = CountingReader(path)
    header = read_header(reader, first_read=64 << 10)
    size = path.stat().st_size
    assert size > 8 << 20
    assert len(reader.calls) > 1  # the 20,000-token vocabulary is past the first 64 KiB
    assert reader.bytes < 1 << 20 and header.header_bytes <= reader.bytes
    assert header.parameter_count == 64 * 128 + 8 * (1 << 19)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"NOPE" + b"\0" * 60, "does not start with the bytes 'GGUF'"),
        (b"GGUF" + (1).to_bytes(4, "little") + b"\0" * 16, "GGUF version 1 is not supported"),
        (b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little"), "ends inside its header"),
    ],
    ids=["magic", "version", "truncated"],
)
def test_bad_headers_say_why(data, reason):
    with pytest.raises(GgufError, match=reason):
        read_header(lambda offset, length: data[offset : offset + length])


def test_big_endian_files_are_refused_by_name(tmp_path):
    path = write_gguf(tmp_path / "be.gguf", big_endian=True)
    with pytest.raises(GgufError, match="big-endian file: not supported"):
        read_header(file_reader(str(path)))


def test_select_gguf_picks_the_named_model_and_all_its_parts():
    paths = [
        "README.md",
        "m-Q8_0.gguf",
        "Q4/m-Q4_K_M-00002-of-00002.gguf",
        "Q4/m-Q4_K_M-00001-of-00002.gguf",
    ]
    assert select_gguf(paths, "m-Q4_K_M.gguf") == (
        "Q4/m-Q4_K_M-00001-of-00002.gguf",
        ["Q4/m-Q4_K_M-00001-of-00002.gguf", "Q4/m-Q4_K_M-00002-of-00002.gguf"],
    )
    assert select_gguf(paths, "*Q8_0*") == ("m-Q8_0.gguf", ["m-Q8_0.gguf"])
    assert select_gguf(["config.json"]) == (None, [])


# --- metadata -> the settings the estimate reads -------------------------------------------------------


def test_dense_gqa_model(tmp_path):
    config = gguf_config(
        read_header(file_reader(str(write_gguf(tmp_path / "m.gguf", **{"attention.key_length": 128}))))
    )
    assert config["num_hidden_layers"] == 8
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (16, 4, 128)
    assert config["max_position_embeddings"] == 32768 and config["torch_dtype"] == "float16"


def test_per_layer_kv_heads_mark_the_layers_without_attention(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", "lfm2", head_count_kv=[0, 0, 8, 0, 0, 8, 0, 0])
    config = gguf_config(read_header(file_reader(str(path))))
    assert config["num_key_value_heads"] == 8
    assert config["layer_types"].count("full_attention") == 2


def test_sliding_windows_and_hybrid_intervals(tmp_path):
    swa = write_gguf(
        tmp_path / "swa.gguf",
        "gemma3n",
        **{"attention.sliding_window": 512, "attention.sliding_window_pattern": [True, True, True, False] * 2},
    )
    config = gguf_config(read_header(file_reader(str(swa))))
    assert config["sliding_window"] == 512
    assert config["layer_types"].count("sliding_attention") == 6
    hybrid = write_gguf(tmp_path / "hybrid.gguf", "qwen35moe", full_attention_interval=4, expert_count=256)
    config = gguf_config(read_header(file_reader(str(hybrid))))
    assert config["full_attention_interval"] == 4 and config["num_experts"] == 256


def test_latent_attention_and_unequal_key_value_widths(tmp_path):
    path = write_gguf(
        tmp_path / "mla.gguf",
        "deepseek2",
        **{
            "attention.kv_lora_rank": 512,
            "rope.dimension_count": 64,
            "attention.key_length": 192,
            "attention.value_length": 128,
        },
    )
    config = gguf_config(read_header(file_reader(str(path))))
    assert (config["kv_lora_rank"], config["qk_rope_head_dim"], config["head_dim"]) == (512, 64, 160)


# --- llama.cpp's memory fit ----------------------------------------------------------------------------


def qwen36_like(tmp_path: Path) -> Path:
    """Qwen3.6-35B-A3B's attention as its GGUF states it: 40 layers, every 4th full attention, 2 KV heads x 256."""
    return write_gguf(
        tmp_path / "Qwen3.6-35B-A3B-Q4_K_M.gguf",
        "qwen35moe",
        block_count=40,
        head_count=16,
        head_count_kv=2,
        context_length=262144,
        full_attention_interval=4,
        expert_count=256,
        expert_used_count=8,
        **{"attention.key_length": 256, "attention.value_length": 256},
    )


def test_seed_article_setup_fits_one_a10g_at_16k(tmp_path):
    header = read_header(file_reader(str(qwen36_like(tmp_path))))
    fit = estimate_gguf_fit(header, weight_bytes=SEED_BYTES, gpu_count=1, gpu_memory_gib=24, max_model_len=16384)
    assert fit.fits, fit.problems
    # 10 full-attention layers x 2 (K, V) x 2 heads x 256 x 2 bytes = 20 KiB per token.
    assert fit.kv_bytes_per_token == 20 * 1024
    assert fit.overhead_bytes_per_gpu == GIB and fit.gpu_memory_utilization == 1.0
    table = format_table(fit, title="ml.g5.2xlarge")
    assert "verdict" in table and "FITS" in table
    assert "quantization Q4_K_M" in table and "architecture qwen35moe" in table


def test_too_big_a_file_does_not_fit_and_says_why(tmp_path):
    header = read_header(file_reader(str(qwen36_like(tmp_path))))
    fit = estimate_gguf_fit(header, weight_bytes=40_000_000_000, gpu_count=1, gpu_memory_gib=24, max_model_len=16384)
    assert not fit.fits
    (problem,) = fit.problems
    assert problem.startswith("weights do not fit:")


def test_layers_split_over_gpus_need_no_head_divisibility(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", head_count=12, head_count_kv=4, embedding_length=1536)
    header = read_header(file_reader(str(path)))
    fit = estimate_gguf_fit(header, weight_bytes=10**9, gpu_count=8, gpu_memory_gib=24, max_model_len=4096)
    assert fit.fits and fit.problems == []


def test_past_the_trained_context_is_a_llama_cpp_warning(tmp_path):
    header = read_header(file_reader(str(write_gguf(tmp_path / "m.gguf", context_length=4096))))
    fit = estimate_gguf_fit(header, weight_bytes=10**9, gpu_count=1, gpu_memory_gib=24, max_model_len=8192)
    (warning,) = fit.warnings
    assert "llama.cpp runs it" in warning and "LLAMA_ARG_ROPE_SCALING_TYPE" in warning


# --- the plan command ----------------------------------------------------------------------------------


def test_plan_gguf_local_file_fits(tmp_path, capsys):
    path = qwen36_like(tmp_path)
    rc = plan_main(
        [
            "--gguf",
            str(path),
            "--weights-bytes",
            str(SEED_BYTES),
            "--instance-type",
            "ml.g5.2xlarge",
            "--max-model-len",
            "16384",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "ml.g5.2xlarge (1 x NVIDIA A10G, 24 GB), llama.cpp" in out and "FITS" in out


def test_plan_gguf_that_does_not_fit_suggests_instances(tmp_path, capsys):
    path = qwen36_like(tmp_path)
    rc = plan_main(
        [
            "--gguf",
            str(path),
            "--weights-bytes",
            "60000000000",
            "--instance-type",
            "ml.g5.2xlarge",
            "--max-model-len",
            "16384",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1
    assert "DOES NOT FIT" in out and "instance types that fit these settings with llama.cpp:" in out


def test_plan_gguf_sums_the_parts_of_a_split_file(tmp_path, capsys):
    # gguf-split writes split.count (a general key) into the first part, which holds all the metadata.
    writer_path = tmp_path / "s-00001-of-00002.gguf"
    writer = gguf.GGUFWriter(str(writer_path), "llama")
    writer.add_uint16("split.count", 2)
    writer.add_block_count(4)
    writer.add_head_count(8)
    writer.add_head_count_kv(8)
    writer.add_embedding_length(512)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (tmp_path / "s-00002-of-00002.gguf").write_bytes(b"\0" * 5000)
    rc = plan_main(["--gguf", str(writer_path), "--instance-type", "ml.g6.xlarge", "--max-model-len", "4096"])
    out = capsys.readouterr().out
    total = writer_path.stat().st_size + 5000
    assert rc == 0, out
    assert f"weights: {total:,} bytes in 2 file(s)" in out


def test_plan_gguf_reads_the_header_from_s3(tmp_path, s3, capsys):  # noqa: F811
    path = qwen36_like(tmp_path)
    s3.client.put_object(Bucket=BUCKET, Key="ggufs/" + path.name, Body=path.read_bytes())
    uri = f"s3://{BUCKET}/ggufs/{path.name}"
    rc = plan_main(["--gguf", uri, "--instance-type", "ml.g5.2xlarge", "--max-model-len", "16384"], s3_client=s3.client)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"weights: {path.stat().st_size:,} bytes in 1 object(s) under s3://{BUCKET}/ggufs/" in out


def test_plan_gguf_bad_file_is_exit_2_with_the_reason(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    rc = plan_main(["--gguf", str(bad), "--instance-type", "ml.g5.2xlarge", "--max-model-len", "4096"])
    assert rc == 2
    assert "does not start with the bytes 'GGUF'" in capsys.readouterr().err


# --- S3 range reads, as the preflight does them ---------------------------------------------------------


def test_read_s3_gguf_uses_range_gets(tmp_path, s3):  # noqa: F811
    path = write_gguf(tmp_path / "m-Q4_K_M.gguf", tensor_mib=6)
    s3.client.put_object(Bucket=BUCKET, Key="p/m-Q4_K_M.gguf", Body=path.read_bytes())
    ranges = []
    s3.client.meta.events.register(
        "before-call.s3.GetObject", lambda params, **kw: ranges.append(params["headers"].get("Range"))
    )
    found = read_s3_gguf(s3.client, BUCKET, "p/", ["m-Q4_K_M.gguf", "README.md"], "m-Q4_K_M.gguf")
    assert found.error is None and found.config["num_hidden_layers"] == 8
    # One range GET of the first 4 MiB: the 6 MiB of tensor data past it are never fetched.
    assert ranges == ["bytes=0-4194303"]
    assert found.files == ("m-Q4_K_M.gguf",)


def test_read_s3_gguf_says_when_the_object_is_not_gguf(s3):  # noqa: F811
    s3.client.put_object(Bucket=BUCKET, Key="p/x.gguf", Body=b"<html>not a model</html>")
    found = read_s3_gguf(s3.client, BUCKET, "p/", ["x.gguf"])
    assert found.error.startswith("is not a GGUF file llama.cpp can load: not a GGUF file")
    assert found.name == "x.gguf" and found.files == ("x.gguf",)


def test_the_header_sizes_match_what_the_estimate_reports(tmp_path):
    header = read_header(file_reader(str(qwen36_like(tmp_path))))
    assert json.dumps(gguf_config(header))  # plain JSON values: the Lambda's data stays serialisable


# --- what the metadata turns into, key by key ------------------------------------------------------------


def header_of(metadata: dict, parameter_count: int | None = None) -> GgufHeader:
    return GgufHeader(3, 0, metadata, 1 << 20, parameter_count)


def test_per_layer_head_counts_become_the_config_json_the_estimate_reads():
    # A hybrid (LFM2-like) file: head counts per layer, 0 KV heads where a layer has no attention.
    header = header_of(
        {
            "general.architecture": "lfm2",
            "lfm2.block_count": 4,
            "lfm2.attention.head_count": [32, 32, 32, 32],
            "lfm2.attention.head_count_kv": [0, 8, 0, 8],
            "lfm2.embedding_length": 2048,
            "lfm2.context_length": 128000,
            "lfm2.expert_count": 16,
            "lfm2.expert_used_count": 1,  # top-1 routing, as Llama 4 Scout
        }
    )
    assert gguf_config(header) == {
        "model_type": "lfm2",
        "num_hidden_layers": 4,
        "torch_dtype": "float16",
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
        "hidden_size": 2048,
        "max_position_embeddings": 128000,
        "num_experts": 16,
        "num_experts_per_tok": 1,
    }
    fit = estimate_gguf_fit(header, weight_bytes=10**9, gpu_count=1, gpu_memory_gib=24, max_model_len=4096)
    # Only the 2 attention layers keep a cache: 2 x 2 (K, V) x 8 heads x 64 x 2 bytes = 4 KiB per token.
    assert fit.attention.full_layers == 2 and fit.kv_bytes_per_token == 4096
    assert "MoE: all 16 experts resident in GPU memory, 1 active per token" in fit.assumptions


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ({"llama.block_count": 8}, "^the GGUF metadata has no general.architecture$"),
        ({"general.architecture": "llama"}, "^the GGUF metadata has no llama.block_count: cannot size the KV cache$"),
        ({"general.architecture": "llama", "llama.block_count": 0}, "no llama.block_count"),
        ({"general.architecture": "llama", "llama.block_count": True}, "no llama.block_count"),
    ],
)
def test_metadata_that_cannot_size_the_cache_says_which_key_is_missing(metadata, reason):
    with pytest.raises(GgufError, match=reason):
        gguf_config(header_of(metadata))


def test_a_one_layer_file_is_sized():
    config = gguf_config(header_of({"general.architecture": "llama", "llama.block_count": 1}))
    assert config["num_hidden_layers"] == 1


def test_the_report_names_the_model_and_its_bits_per_weight_and_not_vllms_overhead():
    header = header_of(
        {
            "general.architecture": "llama",
            "general.name": "Tiny test model",
            "general.file_type": 15,
            "llama.block_count": 8,
            "llama.attention.head_count": 16,
            "llama.embedding_length": 2048,
        },
        parameter_count=8_000_000_000,
    )
    fit = estimate_gguf_fit(header, weight_bytes=4_900_000_000, gpu_count=1, gpu_memory_gib=24, max_model_len=4096)
    assert fit.assumptions[0] == (
        "GGUF v3, architecture llama, model 'Tiny test model', quantization Q4_K_M "
        "(1.0 MiB of header read, no tensor data)"
    )
    assert fit.assumptions[1] == "8.00 B parameters at 4.90 bits per weight on average"
    # llama.cpp's own overhead is stated; vLLM's calibrated share and gpu_memory_utilization are not.
    assert not [a for a in fit.assumptions if a.startswith(("overhead:", "engine budget"))]


def test_a_range_past_the_end_of_the_object_is_the_end_of_the_file(tmp_path, s3):  # noqa: F811
    # S3 answers a range that starts at or past the object's end with InvalidRange; the reader takes it as
    # end of file, so a header cut at exactly the first read's length is reported as truncated.
    data = write_gguf(tmp_path / "m.gguf").read_bytes()[:4096]
    s3.client.put_object(Bucket=BUCKET, Key="p/m.gguf", Body=data)
    read_at = s3_reader(s3.client, BUCKET, "p/m.gguf")
    assert read_at(4096, 100) == b""
    with pytest.raises(GgufError, match=r"the file ends inside its header \(at byte 4,096\)"):
        read_header(read_at, first_read=4096)


def test_an_unreadable_gguf_still_names_its_files(s3):  # noqa: F811
    # Listed, but gone (or denied) by the time the header is read: the model's files still scope the weights.
    found = read_s3_gguf(s3.client, BUCKET, "p/", ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"])
    assert found.error == "could not be read: NoSuchKey"
    assert found.files == ("m-00001-of-00002.gguf", "m-00002-of-00002.gguf")


def test_a_sliding_window_pattern_as_a_number_or_beside_per_layer_kv_heads():
    # gguf's add_sliding_window_pattern writes a uint32 (every n-th layer is global) or one bool per layer.
    base = {"general.architecture": "gemma3", "gemma3.block_count": 6, "gemma3.attention.sliding_window": 1024}
    every_sixth = gguf_config(header_of({**base, "gemma3.attention.sliding_window_pattern": 6}))
    assert every_sixth["sliding_window_pattern"] == 6 and "layer_types" not in every_sixth
    # Per-layer KV heads already say which layers have attention: the window pattern does not replace them.
    both = gguf_config(
        header_of(
            {
                **base,
                "gemma3.attention.head_count_kv": [0, 4, 4, 0, 4, 4],
                "gemma3.attention.sliding_window_pattern": [True] * 6,
            }
        )
    )
    assert both["layer_types"].count("linear_attention") == 2 and both["sliding_window"] == 1024


def gguf_bytes(version: int, *metadata: bytes, kv_count: int | None = None) -> bytes:
    """A header by hand: magic, version, no tensors, the metadata entries as given."""
    count = len(metadata) if kv_count is None else kv_count
    return b"GGUF" + struct.pack("<IQQ", version, 0, count) + b"".join(metadata)


def gguf_key(key: str, kind: int, value: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", kind) + value


def reader_of(data: bytes):
    return lambda offset, length: data[offset : offset + length]


def test_version_2_files_and_a_header_that_ends_with_the_file_are_read():
    header = read_header(reader_of(gguf_bytes(2)))  # exactly 24 bytes, nothing after them
    assert (header.version, header.tensor_count, header.metadata) == (2, 0, {})
    # A name that is not valid UTF-8 is kept with a replacement character, not a crash.
    name = gguf_key("general.name", 8, struct.pack("<Q", 3) + b"a\xffb")
    assert read_header(reader_of(gguf_bytes(3, name))).metadata["general.name"] == "a\ufffdb"


def test_corrupt_headers_say_what_is_wrong():
    huge_string = gguf_key("general.name", 8, struct.pack("<Q", 2**64 - 1))
    with pytest.raises(GgufError, match=r"^a string of 18,446,744,073,709,551,615 bytes at byte \d+.*corrupt$"):
        read_header(reader_of(gguf_bytes(3, huge_string)))
    odd_type = gguf_key("general.x", 13, b"")
    with pytest.raises(GgufError, match=r"^unknown metadata value type 13 at byte 45$"):
        read_header(reader_of(gguf_bytes(3, odd_type)))
    # A 3 MiB array of bytes in the metadata: past the reader's 1 MiB limit, it stops and says so.
    big_array = gguf_key("general.blob", 9, struct.pack("<IQ", 0, 3 << 20) + b"\0" * (3 << 20))
    with pytest.raises(GgufError, match=r"^the header is larger than 1 MiB; not a GGUF file this reader reads$"):
        read_header(reader_of(gguf_bytes(3, big_array)), first_read=64 << 10, limit=1 << 20)


# --- corrupt, truncated and unusual headers, byte by byte (ggml's docs/gguf.md: version, type ids, counts
# and dims are unsigned little-endian integers) --------------------------------------------------------------


def refusal(data: bytes, **kwargs) -> str:
    with pytest.raises(GgufError) as raised:
        read_header(reader_of(data), **kwargs)
    return str(raised.value)


def test_an_unsupported_version_names_a_big_endian_file_only_when_it_is_one():
    assert refusal(b"GGUF" + struct.pack("<I", 1) + b"\0" * 16) == "GGUF version 1 is not supported; allowed: 2, 3"
    for version in (2, 3):  # a big-endian v2 or v3 file reads as 2 or 3 << 24 in little-endian
        assert refusal(b"GGUF" + struct.pack(">I", version) + b"\0" * 16) == (
            f"GGUF version {version << 24} is not supported; allowed: 2, 3 (a big-endian file: not supported)"
        )
    # Random bytes after the magic: the version is unsigned, and the answer a refusal, never a crash.
    assert refusal(b"GGUF\xff\xff\xff\xff" + b"\0" * 16) == "GGUF version 4294967295 is not supported; allowed: 2, 3"


def test_corrupt_counts_are_unsigned_and_run_into_the_end_of_the_file():
    huge = 2**64 - 1
    one_tensor = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + b"t"
    for data in (
        b"GGUF" + struct.pack("<IQQ", 3, huge, 0),  # tensor count
        b"GGUF" + struct.pack("<IQQ", 3, 0, huge),  # metadata count
        one_tensor + struct.pack("<I", 2**32 - 1) + b"\0" * 12,  # a tensor's dimension count
    ):
        assert refusal(data) == f"the file ends inside its header (at byte {len(data):,})"
    # A type id past the known ones is named as the file states it.
    assert refusal(gguf_bytes(3, gguf_key("general.x", 2**32 - 1, b""))) == (
        "unknown metadata value type 4294967295 at byte 45"
    )
    # Arrays of arrays, or of an unknown type, are refused by the element type (after its type and count).
    for element in (9, 13):
        nested = gguf_key("general.x", 9, struct.pack("<IQ", element, 1))
        assert refusal(gguf_bytes(3, nested)) == f"an array of unsupported element type {element} at byte 57"


def test_tensor_dimensions_are_unsigned_and_parameters_summed_over_tensors():
    tensors = b"".join(
        struct.pack("<Q", len(name))
        + name
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        # ggml type and data offset
        + struct.pack("<IQ", 0, 0)
        for name, dims in ((b"a", (4096, 32000)), (b"b", (2**63,)))
    )
    data = b"GGUF" + struct.pack("<IQQ", 3, 2, 0) + tensors
    header = read_header(reader_of(data))
    assert header.parameter_count == 4096 * 32000 + 2**63 and header.header_bytes == len(data)
    # Without the tensor infos, the parameter count is unknown (None), the header read up to the metadata.
    header = read_header(reader_of(data), tensors=False)
    assert (header.tensor_count, header.parameter_count, header.header_bytes) == (2, None, 24)


def test_a_long_numeric_array_is_skipped_by_its_byte_size_and_the_keys_after_it_are_read():
    # Tokenizers store one float score per token: 5,000 of them are past the kept length and skipped whole.
    scores = gguf_key("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 5000) + struct.pack("<5000f", *range(5000)))
    name = gguf_key("general.name", 8, struct.pack("<Q", 4) + b"tiny")
    data = gguf_bytes(3, scores, name)
    header = read_header(reader_of(data))
    assert header.metadata["general.name"] == "tiny" and header.header_bytes == len(data)
    skipped = header.metadata["tokenizer.ggml.scores"]
    assert (skipped.element_type, len(skipped)) == (6, 5000)
    assert repr(skipped) == "ArrayInfo(type=6, length=5000)"


class Reads:
    """A file in memory that records each (offset, length) the reader asks for."""

    def __init__(self, data: bytes) -> None:
        self.data, self.calls = data, []

    def __call__(self, offset: int, length: int) -> bytes:
        self.calls.append((offset, length))
        return self.data[offset : offset + length]


def test_reads_are_as_large_as_the_header_needs_and_stop_at_the_limit():
    # A short file is known to end at the first read: no further request (an S3 GET past the end) is made.
    truncated = Reads(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 12))
    with pytest.raises(GgufError, match=r"^the file ends inside its header \(at byte 32\)$"):
        read_header(truncated)
    assert truncated.calls == [(0, FIRST_READ)]
    # A value longer than what was read is fetched in one request of the bytes it still needs.
    long_name = Reads(gguf_bytes(3, gguf_key("general.name", 8, struct.pack("<Q", 1000) + b"n" * 1000)))
    assert read_header(long_name, first_read=64).metadata["general.name"] == "n" * 1000
    assert long_name.calls == [(0, 64), (64, 1056 - 64)]
    # A 3 MiB array with a 1 MiB limit: the reads stop at exactly 1 MiB, never past it.
    big = Reads(gguf_bytes(3, gguf_key("general.blob", 9, struct.pack("<IQ", 0, 3 << 20) + b"\0" * (3 << 20))))
    with pytest.raises(GgufError, match="larger than 1 MiB"):
        read_header(big, first_read=64 << 10, limit=1 << 20)
    assert big.calls == [(0, 64 << 10), (64 << 10, (1 << 20) - (64 << 10))]


def test_a_split_part_named_by_its_own_file_name_in_a_folder_brings_all_its_parts():
    # The serving adapter matches gguf_file against each file's bare name too (containers/llamacpp/serve.py), and
    # llama.cpp loads every part from the first: the weights are all of them.
    parts = ["Q4/m-00001-of-00002.gguf", "Q4/m-00002-of-00002.gguf"]
    assert select_gguf(parts, "m-00001-of-00002.gguf") == ("Q4/m-00001-of-00002.gguf", parts)


def test_layer_types_from_a_window_pattern_and_no_interval_beside_per_layer_heads():
    base = {"general.architecture": "gemma3", "gemma3.block_count": 3, "gemma3.attention.sliding_window": 1024}
    config = gguf_config(header_of({**base, "gemma3.attention.sliding_window_pattern": [True, True, False]}))
    assert config["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"]
    # Per-layer KV heads already say which layers keep a cache: a full_attention_interval is not added.
    hybrid = {
        "general.architecture": "qwen35moe",
        "qwen35moe.block_count": 4,
        "qwen35moe.attention.head_count_kv": [0, 0, 0, 2],
        "qwen35moe.full_attention_interval": 4,
    }
    assert "full_attention_interval" not in gguf_config(header_of(hybrid))


def test_bits_per_weight_from_one_bit_and_parameters_rounded_to_hundredths():
    meta = {"general.architecture": "llama", "llama.block_count": 8}
    one_bit = describe(header_of(meta, parameter_count=8_000_000_000), weight_bytes=1_000_000_000)
    assert one_bit[1] == "8.00 B parameters at 1.00 bits per weight on average"
    rounded = describe(header_of(meta, parameter_count=8_035_000_000), weight_bytes=4_017_500_000)
    assert rounded[1] == "8.04 B parameters at 4.00 bits per weight on average"


def test_a_measured_gpu_size_is_the_budget_and_llama_cpps_overhead_is_stated(tmp_path):
    header = read_header(file_reader(str(qwen36_like(tmp_path))))
    settings = {"weight_bytes": SEED_BYTES, "gpu_count": 1, "gpu_memory_gib": 24, "max_model_len": 16384}
    assert estimate_gguf_fit(header, **settings).fits
    measured = estimate_gguf_fit(header, **settings, usable_gpu_memory_bytes=20 * GIB)
    assert measured.usable_bytes_per_gpu == 20 * GIB and not measured.fits
    assert (
        "llama.cpp: KV cache in f16 (its default --cache-type-k/v), no fixed share of GPU memory, 1.00 GiB per "
        "GPU for the CUDA context and compute buffers; layers split evenly over the GPUs (--split-mode layer)"
    ) in measured.assumptions


def test_a_denied_header_read_names_the_error_code(tmp_path, s3):  # noqa: F811
    path = write_gguf(tmp_path / "m.gguf")
    s3.client.put_object(Bucket=BUCKET, Key="p/m.gguf", Body=path.read_bytes())
    Faults(s3.client).deny("GetObject")  # S3's 403 AccessDenied, as a role without s3:GetObject gets it
    found = read_s3_gguf(s3.client, BUCKET, "p/", ["m.gguf"])
    assert found.error == "could not be read: AccessDenied" and found.files == ("m.gguf",)


def test_several_models_matching_gguf_file_name_five_and_keep_the_first_as_the_model():
    # No read at all: the adapter would refuse to start, so the preflight says so before any GET.
    paths = [f"m{i}-Q4_K_M.gguf" for i in range(6)] + ["README.md"]
    found = read_s3_gguf(None, BUCKET, "p/", paths, "*Q4_K_M*")
    assert found.error == (
        "is one of 6 GGUF models matching gguf_file='*Q4_K_M*' (m0-Q4_K_M.gguf, m1-Q4_K_M.gguf, m2-Q4_K_M.gguf, "
        "m3-Q4_K_M.gguf, m4-Q4_K_M.gguf): the serving adapter refuses to choose, so the endpoint would never "
        "start; set gguf_file to one of them"
    )
    assert found.name == "m0-Q4_K_M.gguf" and found.files == ("m0-Q4_K_M.gguf",) and found.header is None


def test_an_s3_error_code_botocore_has_no_class_for_is_named(tmp_path, s3):  # noqa: F811
    # S3's 403 AllAccessDisabled (S3 API reference, "List of error codes") is not in botocore's S3 model, so the
    # exception is a plain ClientError: the message must take the code from the response, not the class name.
    s3.client.put_object(Bucket=BUCKET, Key="p/m.gguf", Body=write_gguf(tmp_path / "m.gguf").read_bytes())
    Faults(s3.client).inject(
        "GetObject", "AllAccessDisabled", "All access to this object has been disabled", status=403
    )
    found = read_s3_gguf(s3.client, BUCKET, "p/", ["m.gguf"])
    assert found.error == "could not be read: AllAccessDisabled" and found.name == "m.gguf"


def test_a_header_read_without_credentials_names_the_exception(tmp_path, s3, monkeypatch):  # noqa: F811
    import boto3

    s3.client.put_object(Bucket=BUCKET, Key="p/m.gguf", Body=write_gguf(tmp_path / "m.gguf").read_bytes())
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = boto3.session.Session().client("s3", endpoint_url=s3.endpoint)
    # botocore's NoCredentialsError carries no response: the class name is all there is to say.
    found = read_s3_gguf(client, BUCKET, "p/", ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"])
    assert found.error == "could not be read: NoCredentialsError"
    assert found.name == "m-00001-of-00002.gguf"
    assert found.files == ("m-00001-of-00002.gguf", "m-00002-of-00002.gguf")


def test_array_counts_and_element_types_are_unsigned_and_4096_per_layer_elements_are_kept():
    # ggml's docs/gguf.md: an array's element type is a uint32 and its length a uint64.
    odd = gguf_key("general.x", 9, struct.pack("<IQ", 2**32 - 1, 1))
    assert refusal(gguf_bytes(3, odd)) == "an array of unsupported element type 4294967295 at byte 57"
    huge = gguf_bytes(3, gguf_key("general.x", 9, struct.pack("<IQ", 0, 2**63)))
    assert refusal(huge) == f"the file ends inside its header (at byte {len(huge):,})"
    long_string = gguf_key("general.x", 9, struct.pack("<IQ", 8, 4097) + struct.pack("<Q", 2**63))
    data = gguf_bytes(3, long_string)
    assert refusal(data) == f"the file ends inside its header (at byte {len(data):,})"
    # Only a per-layer array gguf_config reads is kept, up to 4096 layers; any other array is skipped (issue 34).
    values = struct.pack("<IQ", 4, 4096) + struct.pack("<4096I", *range(4096))
    kept = read_header(reader_of(gguf_bytes(3, gguf_key("llama.attention.head_count_kv", 9, values)))).metadata
    assert kept["llama.attention.head_count_kv"] == list(range(4096))
    over = struct.pack("<IQ", 4, 4097) + struct.pack("<4097I", *range(4097))
    skipped = read_header(reader_of(gguf_bytes(3, gguf_key("llama.attention.head_count_kv", 9, over)))).metadata
    assert repr(skipped["llama.attention.head_count_kv"]) == "ArrayInfo(type=4, length=4097)"
    other = read_header(reader_of(gguf_bytes(3, gguf_key("general.x", 9, values)))).metadata["general.x"]
    assert repr(other) == "ArrayInfo(type=4, length=4096)"


def test_a_string_exactly_as_long_as_the_limit_is_read_to_the_end_of_the_file():
    data = gguf_bytes(3, gguf_key("general.name", 8, struct.pack("<Q", 1 << 20)))
    assert refusal(data, limit=1 << 20) == f"the file ends inside its header (at byte {len(data):,})"


def test_a_split_part_two_folders_deep_is_named_by_its_own_or_its_unsplit_bare_name():
    parts = ["unsloth/Q4/m-00001-of-00002.gguf", "unsloth/Q4/m-00002-of-00002.gguf"]
    for pattern in ("m-00001-of-00002.gguf", "m.gguf"):
        assert select_gguf([*parts, "unsloth/Q8/x.gguf"], pattern) == (parts[0], parts)


def test_describe_names_an_empty_model_name_never_and_a_split_of_two_parts():
    meta = {"general.architecture": "llama", "general.name": "", "split.count": 2}
    assert describe(header_of(meta, parameter_count=10**9), weight_bytes=4 * 10**9) == [
        "GGUF v3, architecture llama (1.0 MiB of header read, no tensor data)",
        "split into 2 files; the weights are their sizes summed",
    ]


def test_bits_per_weight_are_stated_from_1_to_33_bits():
    meta = {"general.architecture": "llama"}
    f32 = describe(header_of(meta, parameter_count=10**9), weight_bytes=4 * 10**9)
    assert f32[1:] == ["1.00 B parameters at 32.00 bits per weight on average"]
    top = describe(header_of(meta, parameter_count=10**9), weight_bytes=4_125_000_000)
    assert top[1:] == ["1.00 B parameters at 33.00 bits per weight on average"]
    # Past 33 bits the sizes are not the file's own (a manifest size of something else): nothing is claimed.
    assert describe(header_of(meta, parameter_count=10**9), weight_bytes=4_187_500_000)[1:] == []


def test_the_gguf_fit_counts_one_sequence_unless_told_and_the_context_warning_in_full(tmp_path):
    header = read_header(file_reader(str(write_gguf(tmp_path / "m.gguf", context_length=4096))))
    one = estimate_gguf_fit(header, weight_bytes=10**9, gpu_count=1, gpu_memory_gib=24, max_model_len=8192)
    assert one.max_num_seqs == 1 and one.kv_bytes_needed_per_gpu == one.kv_bytes_per_sequence_per_gpu
    assert one.warnings == [
        "max_model_len=8,192 exceeds the context the model was trained for (4,096, llama.context_length): "
        "llama.cpp runs it, but answers degrade past it unless RoPE scaling is set (engine_env "
        "LLAMA_ARG_ROPE_SCALING_TYPE, LLAMA_ARG_ROPE_SCALE)"
    ]
    four = estimate_gguf_fit(
        header, weight_bytes=10**9, gpu_count=1, gpu_memory_gib=24, max_model_len=8192, max_num_seqs=4
    )
    assert four.max_num_seqs == 4 and four.kv_bytes_needed_per_gpu == 4 * one.kv_bytes_needed_per_gpu
