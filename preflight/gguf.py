"""GGUF headers: what a llama.cpp model file says about its layers, heads, windows and quantization.

Standard library only (the preflight Lambda bundles this package). Only the header is read, through a
``read_at(offset, length)`` callable, so a range GET of the first megabytes of an S3 object is enough;
the tensor data, gigabytes after it, is never touched.

The layout (ggml's docs/gguf.md, "File Structure"): the magic ``GGUF``, a uint32 version (2 or 3: 64-bit
counts), a uint64 tensor count, a uint64 metadata count, then that many ``key, uint32 value type, value``
entries, strings being a uint64 length and UTF-8 bytes, arrays a uint32 element type, a uint64 count and
the elements; then one ``name, uint32 n_dims, uint64 dims..., uint32 ggml type, uint64 offset`` entry per
tensor. Everything is little-endian (big-endian files exist for s390x only; they are refused).

:func:`gguf_config` turns the metadata into the config.json keys :func:`preflight.estimate_memory_fit`
reads (``<arch>.block_count`` -> ``num_hidden_layers`` ...), so a GGUF file gets the same estimate and the
same report as a safetensors checkpoint, with llama.cpp's own figures (:func:`estimate_gguf_fit`).
"""

from __future__ import annotations

import fnmatch
import math
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from .memory_fit import GIB, MemoryFit, Overhead, estimate_memory_fit

MAGIC = b"GGUF"
FIRST_READ = 4 << 20  # a header with a large vocabulary is a few MB; read more only when needed
MAX_HEADER_BYTES = 256 << 20
# Arrays are skipped, not kept (only their element type and length are): vocabularies, merges, scores, and any
# other array a header may hold, since a list costs ~9x the bytes of 1-byte elements (an 8-byte slot each) and
# the metadata is written into model-facts.json. Kept: the per-layer arrays gguf_config reads (one element a
# layer), up to this many layers.
MAX_KEPT_ARRAY = 4096
KEPT_ARRAY_SUFFIXES = (".attention.head_count", ".attention.head_count_kv", ".attention.sliding_window_pattern")
SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")

# ggml's gguf_type: scalar formats by type id; 8 is a string, 9 an array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# llama_ftype in llama.cpp's include/llama.h: general.file_type -> the quantization's name.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
}  # fmt: skip

# llama.cpp's memory beyond weights and KV cache, per GPU: the CUDA context (about 0.3-0.5 GiB) and the
# compute buffers, sized by the micro-batch (512 tokens by default) and the vocabulary (the logits), not by
# the weights: so a fixed allowance and no share of the weights. llama.cpp takes no fixed share of GPU
# memory (there is no gpu_memory_utilization): it allocates what it needs, so the whole GPU is the budget.
LLAMACPP_OVERHEAD = Overhead(fixed_bytes_per_gpu=GIB, activation_fraction=0.0)
LLAMACPP_GPU_MEMORY_UTILIZATION = 1.0


class GgufError(ValueError):
    """The bytes are not a GGUF header this reader understands; the message says why."""


class ArrayInfo:
    """A long metadata array that was skipped: its element type and length only."""

    def __init__(self, element_type: int, length: int) -> None:
        self.element_type, self.length = element_type, length

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"ArrayInfo(type={self.element_type}, length={self.length})"


@dataclass(frozen=True)
class GgufHeader:
    version: int
    tensor_count: int
    metadata: dict[str, Any]
    header_bytes: int  # up to the end of the tensor infos (or the metadata, when they were not read)
    parameter_count: int | None  # elements of every tensor in this file; None when tensor infos were not read

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture") or "")

    def arch_value(self, key: str) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}")

    @property
    def file_type(self) -> str | None:
        raw = self.metadata.get("general.file_type")
        return FILE_TYPES.get(raw, f"file_type {raw}") if isinstance(raw, int) else None

    @property
    def split_count(self) -> int:
        count = self.metadata.get("split.count")
        return count if isinstance(count, int) and count > 0 else 1


class _Cursor:
    """Sequential reads over ``read_at``, fetching more of the file only when the header runs past it."""

    def __init__(self, read_at: Callable[[int, int], bytes], first_read: int, limit: int) -> None:
        self.read_at, self.limit = read_at, limit
        self.buffer = read_at(0, first_read)
        self.exhausted = len(self.buffer) < first_read
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        while end > len(self.buffer):
            if self.exhausted:
                raise GgufError(f"the file ends inside its header (at byte {len(self.buffer):,})")
            if len(self.buffer) >= self.limit:
                raise GgufError(f"the header is larger than {self.limit >> 20} MiB; not a GGUF file this reader reads")
            want = min(max(len(self.buffer), end - len(self.buffer)), self.limit - len(self.buffer))
            more = self.read_at(len(self.buffer), want)
            self.exhausted = len(more) < want
            self.buffer += more
        data = self.buffer[self.pos : end]
        self.pos = end
        return data

    def skip(self, n: int) -> None:
        """Move past ``n`` bytes (fetched like ``take``, never copied out)."""
        end = self.pos + n
        if end > len(self.buffer):
            self.take(n)
        else:
            self.pos = end

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        length = self.unpack("<Q")
        if length > self.limit:
            raise GgufError(f"a string of {length:,} bytes at byte {self.pos:,}: the header is corrupt")
        return self.take(length).decode("utf-8", errors="replace")

    def value(self, kind: int, keep_array: bool = False) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            element, count = self.unpack("<I"), self.unpack("<Q")
            if element == _ARRAY or (element not in _SCALARS and element != _STRING):
                raise GgufError(f"an array of unsupported element type {element} at byte {self.pos:,}")
            if keep_array and count <= MAX_KEPT_ARRAY:
                if element == _STRING:
                    return [self.string() for _ in range(count)]
                fmt = _SCALARS[element]
                return list(struct.unpack(f"<{count}{fmt[1:]}", self.take(count * struct.calcsize(fmt))))
            if element == _STRING:
                for _ in range(count):
                    self.skip(self.unpack("<Q"))
            else:
                self.skip(count * struct.calcsize(_SCALARS[element]))
            return ArrayInfo(element, count)
        raise GgufError(f"unknown metadata value type {kind} at byte {self.pos:,}")


def read_header(
    read_at: Callable[[int, int], bytes],
    *,
    tensors: bool = True,
    first_read: int = FIRST_READ,
    limit: int = MAX_HEADER_BYTES,
) -> GgufHeader:
    """Parse a GGUF header from ``read_at(offset, length)`` (which may return fewer bytes at the end)."""
    cursor = _Cursor(read_at, first_read, limit)
    if cursor.take(4) != MAGIC:
        raise GgufError("not a GGUF file (it does not start with the bytes 'GGUF')")
    version = cursor.unpack("<I")
    if version not in (2, 3):
        swapped = struct.unpack(">I", struct.pack("<I", version))[0]
        hint = " (a big-endian file: not supported)" if swapped in (2, 3) else ""
        raise GgufError(f"GGUF version {version} is not supported; allowed: 2, 3{hint}")
    tensor_count, kv_count = cursor.unpack("<Q"), cursor.unpack("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.unpack("<I"), keep_array=key.endswith(KEPT_ARRAY_SUFFIXES))
    parameters = None
    if tensors:
        parameters = 0
        for _ in range(tensor_count):
            cursor.string()
            dims = [cursor.unpack("<Q") for _ in range(cursor.unpack("<I"))]
            cursor.take(4 + 8)  # ggml type, data offset
            parameters += math.prod(dims)
    return GgufHeader(version, tensor_count, metadata, cursor.pos, parameters)


def file_reader(path: str) -> Callable[[int, int], bytes]:
    def read_at(offset: int, length: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)

    return read_at


def s3_reader(s3: Any, bucket: str, key: str) -> Callable[[int, int], bytes]:
    """Range GETs of one object (s3:GetObject; an HTTP Range request, as S3's GetObject documents)."""

    def read_at(offset: int, length: int) -> bytes:
        try:
            return s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}")["Body"].read()
        except Exception as e:  # InvalidRange past the end of the object: nothing more to read
            if getattr(e, "response", {}).get("Error", {}).get("Code") == "InvalidRange":
                return b""
            raise

    return read_at


def _matches(path: str, pattern: str) -> bool:
    """``pattern`` (gguf_file) names ``path``: by its path or bare name, a split part by its unsplit name."""
    unsplit = SPLIT_PART.sub(".gguf", path)
    names = (path, path.rsplit("/", 1)[-1], unsplit, unsplit.rsplit("/", 1)[-1])
    return any(fnmatch.fnmatchcase(name, pattern) for name in names)


def gguf_models(ggufs: Iterable[str]) -> list[str]:
    """The models among ``.gguf`` paths: a split file counts once, by its first part."""
    return sorted(p for p in ggufs if not (m := SPLIT_PART.search(p)) or m.group(1) == "00001")


def select_gguf(paths: Iterable[str], pattern: str | None = None) -> tuple[str | None, list[str]]:
    """(the file whose header holds the metadata, every file of that model) among ``paths``.

    The model is the one ``pattern`` names (as the serving adapter chooses it), else the sorted first; its
    first part holds the metadata (gguf-split writes it there), and all its parts hold the weights.
    """
    every = sorted(p for p in paths if p.endswith(".gguf"))
    ggufs = [p for p in every if pattern is None or _matches(p, pattern)]
    firsts = gguf_models(ggufs)
    if not firsts:
        return None, []
    first = firsts[0]
    stem = SPLIT_PART.sub("", first)  # unchanged when ``first`` is not a split part
    # Every part, also when ``pattern`` names the first part only: llama.cpp loads them all from it.
    return first, [p for p in every if p == first or (SPLIT_PART.search(p) and SPLIT_PART.sub("", p) == stem)]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def gguf_config(header: GgufHeader) -> dict[str, Any]:
    """The config.json keys :func:`preflight.estimate_memory_fit` reads, from the GGUF metadata.

    Keys are llama.cpp's (src/llama-arch.cpp LLM_KV_NAMES): ``<arch>.block_count``, ``.attention.head_count``,
    ``.attention.head_count_kv`` (a number, or one per layer, 0 for a layer without attention),
    ``.attention.key_length`` / ``.value_length``, ``.attention.sliding_window`` (+ ``_pattern``),
    ``.attention.kv_lora_rank`` and ``.rope.dimension_count`` (latent attention), ``.full_attention_interval``
    (hybrid linear attention), ``.context_length``, ``.expert_count`` / ``.expert_used_count``.
    """
    arch = header.architecture
    if not arch:
        raise GgufError("the GGUF metadata has no general.architecture")
    get = header.arch_value
    layers = _int(get("block_count"))
    if layers is None:
        raise GgufError(f"the GGUF metadata has no {arch}.block_count: cannot size the KV cache")
    config: dict[str, Any] = {"model_type": arch, "num_hidden_layers": layers, "torch_dtype": "float16"}

    heads = get("attention.head_count")
    config["num_attention_heads"] = max(heads) if isinstance(heads, list) and heads else heads
    kv = get("attention.head_count_kv")
    if isinstance(kv, list) and kv:
        config["num_key_value_heads"] = max(kv)
        config["layer_types"] = ["full_attention" if n else "linear_attention" for n in kv]
    elif kv is not None:
        config["num_key_value_heads"] = kv
    key_len, value_len = _int(get("attention.key_length")), _int(get("attention.value_length"))
    if key_len and value_len:
        # K and V rows of different widths: the cache holds both, so their mean counts twice.
        config["head_dim"] = math.ceil((key_len + value_len) / 2)
    elif key_len:
        config["head_dim"] = key_len
    if get("embedding_length") is not None:
        config["hidden_size"] = get("embedding_length")
    rank = _int(get("attention.kv_lora_rank"))
    if rank:
        config["kv_lora_rank"] = rank
        config["qk_rope_head_dim"] = get("rope.dimension_count")
    window = _int(get("attention.sliding_window"))
    if window:
        config["sliding_window"] = window
        pattern = get("attention.sliding_window_pattern")
        if isinstance(pattern, list) and pattern and "layer_types" not in config:
            config["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
        elif _int(pattern):
            config["sliding_window_pattern"] = pattern
    interval = _int(get("full_attention_interval"))
    if interval and "layer_types" not in config:
        config["full_attention_interval"] = interval
    if _int(get("context_length")):
        config["max_position_embeddings"] = get("context_length")
    if _int(get("expert_count")):
        config["num_experts"] = get("expert_count")
        if _int(get("expert_used_count")):
            config["num_experts_per_tok"] = get("expert_used_count")
    return config


def describe(header: GgufHeader, weight_bytes: int | None = None) -> list[str]:
    """What the header says, for the report's assumptions."""
    name = header.metadata.get("general.name")
    parts = [f"GGUF v{header.version}, architecture {header.architecture}"]
    if isinstance(name, str) and name:
        parts.append(f"model {name!r}")
    if header.file_type:
        parts.append(f"quantization {header.file_type}")
    lines = [", ".join(parts) + f" ({header.header_bytes / (1 << 20):.1f} MiB of header read, no tensor data)"]
    if header.split_count > 1:
        lines.append(f"split into {header.split_count} files; the weights are their sizes summed")
    elif header.parameter_count and weight_bytes and 1 <= weight_bytes * 8 / header.parameter_count <= 33:
        bits = weight_bytes * 8 / header.parameter_count  # out of that range the sizes are not the file's own
        lines.append(f"{header.parameter_count / 1e9:.2f} B parameters at {bits:.2f} bits per weight on average")
    return lines


def estimate_gguf_fit(
    header: GgufHeader,
    *,
    weight_bytes: int,
    gpu_count: int,
    gpu_memory_gib: float,
    max_model_len: int,
    max_num_seqs: int = 1,
    usable_gpu_memory_bytes: int | None = None,
) -> MemoryFit:
    """Will llama.cpp fit this GGUF: weights + f16 KV cache + llama.cpp overhead against the GPUs.

    llama.cpp splits layers (not heads) over several GPUs (``--split-mode layer``, its default), so the
    head-count rule of tensor parallelism does not apply; weights and KV cache are counted evenly per GPU.
    """
    config = gguf_config(header)
    fit = estimate_memory_fit(
        config,
        weight_bytes=weight_bytes,
        gpu_count=gpu_count,
        gpu_memory_gib=gpu_memory_gib,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        gpu_memory_utilization=LLAMACPP_GPU_MEMORY_UTILIZATION,
        overhead=LLAMACPP_OVERHEAD,
        usable_gpu_memory_bytes=usable_gpu_memory_bytes,
        refuse_beyond_context=False,  # llama.cpp runs past the trained context (the warning below)
    )
    problems = [p for p in fit.problems if not p.startswith("tensor_parallel_size=")]
    warnings = [
        f"max_model_len={max_model_len:,} exceeds the context the model was trained for ({fit.context_limit:,}, "
        f"{header.architecture}.context_length): llama.cpp runs it, but answers degrade past it unless RoPE "
        "scaling is set (engine_env LLAMA_ARG_ROPE_SCALING_TYPE, LLAMA_ARG_ROPE_SCALE)"
        if w.startswith("max_model_len=") and fit.context_limit
        else w
        for w in fit.warnings
    ]
    assumptions = [
        *describe(header, weight_bytes),
        "llama.cpp: KV cache in f16 (its default --cache-type-k/v), no fixed share of GPU memory, 1.00 GiB per "
        "GPU for the CUDA context and compute buffers; layers split evenly over the GPUs (--split-mode layer)",
        *(a for a in fit.assumptions if not a.startswith(("engine budget", "overhead:"))),
    ]
    return replace(fit, fits=not problems, problems=problems, warnings=warnings, assumptions=assumptions)


@dataclass(frozen=True)
class S3Gguf:
    """The GGUF model under an S3 prefix, as the preflight reads it: None fields when there is none."""

    name: str | None = None  # the file holding the metadata, relative to the prefix
    files: tuple[str, ...] = ()  # every part of the model
    header: GgufHeader | None = None
    config: dict[str, Any] | None = None
    error: str | None = None  # why the header could not be read or used


def read_s3_gguf(s3: Any, bucket: str, prefix: str, paths: Iterable[str], pattern: str | None = None) -> S3Gguf:
    """Find the GGUF model among ``paths`` (keys relative to ``prefix``) and read its header by range GETs."""
    paths = list(paths)
    name, files = select_gguf(paths, pattern)
    if name is None:
        return S3Gguf()
    matching = gguf_models(p for p in paths if p.endswith(".gguf") and pattern is not None and _matches(p, pattern))
    if len(matching) > 1:
        # The adapter refuses to choose among several (containers/llamacpp/serve.py find_model): the endpoint
        # would fail its health check after the whole wait, so say it now.
        shown = ", ".join(matching[:5])
        return S3Gguf(
            name,
            tuple(files),
            error=f"is one of {len(matching)} GGUF models matching gguf_file={pattern!r} ({shown}): the serving "
            "adapter refuses to choose, so the endpoint would never start; set gguf_file to one of them",
        )
    try:
        header = read_header(s3_reader(s3, bucket, prefix + name))
        return S3Gguf(name, tuple(files), header, gguf_config(header))
    except GgufError as e:
        return S3Gguf(name, tuple(files), error=f"is not a GGUF file llama.cpp can load: {e}")
    except Exception as e:  # botocore's ClientError / BotoCoreError: the code, never the object's content
        code = getattr(e, "response", {}).get("Error", {}).get("Code") or type(e).__name__
        return S3Gguf(name, tuple(files), error=f"could not be read: {code}")
