"""Will a checkpoint, at a given context length, fit the GPUs of an instance? A pure estimate.

Per GPU, the check is (PRODUCT.md section 6)::

    weights / TP  +  runtime overhead  +  KV cache of max_num_seqs sequences of max_model_len tokens
        <=  usable GPU memory  x  gpu_memory_utilization

**Usable GPU memory.** The instance catalog lists nominal per-GPU sizes (an L4 "24 GB", an L40S "48 GB").
They are read as GB (10^9 bytes), not GiB: an L40S then has 44.70 GiB (EC2 reports about 44.7 GiB, the
driver 45.0 GiB), an L4 or A10G 22.35 GiB (the driver: 22.49 GiB). For HBM parts (A100, H100, H200,
B200) the driver reports up to about 7 % more than this, so the estimate errs on the safe side there. Give
``usable_gpu_memory_bytes`` (for example the total ``nvidia-smi`` reports) to use a measured figure.

**gpu_memory_utilization** (default 0.90, vLLM's default) is the share of that memory the engine may
use for everything: weights, activations, CUDA graphs and the KV cache. The rest is headroom.

**Weights** are the on-disk bytes of the weight files: a quantized checkpoint (AWQ, GPTQ, FP8,
compressed-tensors) is already small on disk, so quantization is never re-derived from the parameter
count. They are split evenly over the tensor-parallel ranks; replicated pieces (norms, KV projections
when TP exceeds the KV heads) are small and ignored. An MoE checkpoint keeps every expert resident, so
its weights count in full although only a few experts run per token.

**Runtime overhead** per GPU = ``Overhead.fixed_bytes_per_gpu`` (default 0) + ``Overhead.activation_fraction``
(default 8.5 %) of the weights on that GPU *as if they were 16-bit*. It stands for what vLLM subtracts besides
the weights before sizing the KV cache: the activation peak of its profiling forward pass (``max_num_batched_tokens``
tokens, logits included), non-torch memory (CUDA context, NCCL) and CUDA graphs. Quantized models still compute
in 16-bit, so a 4-bit checkpoint's weights count 4 times (16/4) and an FP8 one twice. The two values are
*calibrated*, not guessed: ``tests/data/vllm_startup_logs.json`` holds published vLLM V1 start-up logs (the
weights vLLM loaded, the KV-cache memory it reported, the GPU, flags), and with these defaults the estimate
predicts every case's KV-cache token capacity within 15 %
(``tests/preflight/test_calibration.py``; table in the README).
A fixed term above about 0.1 GiB pushes the two tightest cases (Qwen2-7B at 25 % of an A100, Qwen3-32B on one
H100) out of that band, so the whole overhead is proportional. That fraction holds for a profiling pass of up to
``PROFILED_TOKENS`` (2048, vLLM's serving default below 70 GiB); a longer pass (``max_num_batched_tokens``, or
``max_model_len`` with chunked prefill off) adds ``Overhead.batched_token_activation`` x (hidden_size +
intermediate_size / TP) 16-bit values per extra token, which on a 24 GB GPU is the difference between fitting and
not (two RTX 3090 logs of vllm-project/vllm#10517 in the calibration set). Production estimates read GPU memory from the
catalog's nominal GB (below what the driver reports), which adds a margin the calibration does not need.

**Small GPUs** (24 GB L4, A10G, RTX 3090) are in the set too (issue 26 item 6), and needed no change to the model:
three L4 logs on vLLM 0.27.1 (the release the vLLM DLC ships; since v0.21 it also sets aside its CUDA-graph estimate
before sizing the KV cache), Qwen3-8B in bf16, with ``--quantization fp8`` and with an fp8 KV cache, land at
+4.3 %, -0.2 % and -0.2 %; a V1 RTX 3090 log (Llama-3.1-8B architecture, utilization 0.85) at 0.0 %. On the bf16 L4
case vLLM held 1.43 GiB besides the weights and KV cache, the model 1.30 GiB. The often-quoted A10G case (a 7B bf16
model at 32k with room for 16,816 tokens, BatsResearch/bonito#7) is vLLM 0.3, whose profiling pass ran all 32,768
tokens: with that pass the estimate also refuses 32k (27,607 tokens, +64 %; the log gives neither weights, GPU total
nor version, so it is held to that verdict, not to 15 %). Under V1 the pass is 2,048 tokens and the estimate has such
a model fit.

**KV cache per token**, per attention layer: 2 (K and V) x KV heads x head_dim x bytes per element.
KV heads are ``num_key_value_heads`` (grouped-query attention), else ``num_attention_heads``;
head_dim is ``head_dim``, else hidden_size / num_attention_heads. Under tensor parallelism each rank
holds ceil(KV heads / TP) heads; when TP exceeds the KV heads they are replicated (one per rank).
Latent attention (DeepSeek MLA, ``kv_lora_rank``) caches one compressed vector per layer and token:
(kv_lora_rank + qk_rope_head_dim) x bytes, with no factor 2; vLLM replicates that latent cache on every
TP rank, so it is not divided by TP. Bytes per element: the engine's KV-cache dtype; ``auto`` means
the model's 16-bit compute dtype (a float32 checkpoint is served in 16-bit), also for FP8 checkpoints,
unless ``kv_cache_dtype=fp8`` is given.

**Layers that do not keep every token.** Sliding-window layers (``layer_types`` entries
``sliding_attention``, or ``sliding_window`` + ``sliding_window_pattern`` as in Gemma 2/3) hold at
most ``sliding_window`` tokens per sequence, as in engines that free tokens leaving the window (vLLM's
hybrid KV-cache manager). When config.json gives a ``sliding_window`` but not which layers use it
(Mistral 7B v0.1, older Gemma 2 files), every layer is counted at full length: an over-estimate.
Chunked local attention (Llama 4) is counted at full length too (engines do not always bound it).
Linear-attention and Mamba layers (``layer_types`` ``linear_attention``, ``full_attention_interval``
as in Qwen3-Next, ``hybrid_override_pattern`` as in Nemotron-H) keep a fixed-size state per sequence,
not a per-token cache: only the attention layers are counted, and that state is left out.
The per-token figures (``kv_bytes_per_token*``) are full-attention equivalents (every attention layer
at every token); the sequence and budget figures apply the windows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .context import beyond_context_warning, context_problem, engine_context_limit

GIB = 1 << 30
GB = 10**9
DEFAULT_GPU_MEMORY_UTILIZATION = 0.90

KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2, "float32": 4}
KV_CACHE_DTYPES = ("auto", *KV_DTYPE_BYTES)
# How a user asks for an fp8 KV cache, whichever way the estimate was reached (deployment or plan command).
FP8_KV_HINT = (
    "an fp8 KV cache (kv-cache-dtype fp8: engine_env SM_<ENGINE>_KV_CACHE_DTYPE, or plan --kv-cache-dtype; "
    "halves the KV cache: "
)

# Keys under which multimodal configs nest their language model (Llama 4, Gemma 3, Mistral 3: text_config).
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config")

FULL_ATTENTION_TYPES = frozenset({"full_attention", "attention", "global_attention"})
SLIDING_ATTENTION_TYPES = frozenset({"sliding_attention", "local_attention"})
CHUNKED_ATTENTION_TYPES = frozenset({"chunked_attention"})
STATE_LAYER_TYPES = frozenset({"linear_attention", "mamba", "mamba2", "conv", "short_conv"})

# Tensor-parallel sizes offered when the given one does not divide the heads.
TP_CANDIDATES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Overhead:
    """Per-GPU memory outside weights and KV cache (see the module docstring for the reasoning).

    fixed_bytes_per_gpu: CUDA context, CUDA graphs, NCCL buffers, allocator slack. Default: 0 (see the calibration).
    activation_fraction: everything else vLLM reserves, as a share of the weights on a GPU counted as 16-bit.
        Default: 0.085, calibrated against published vLLM start-up logs (tests/data/vllm_startup_logs.json).
    """

    fixed_bytes_per_gpu: int = 0
    activation_fraction: float = 0.085
    # 16-bit elements of activation per batched token, in units of (hidden_size + intermediate_size / TP), for the
    # tokens a profiling pass runs beyond PROFILED_TOKENS (the fraction above already covers those). 2 = the MLP's
    # gate and up outputs plus two hidden-size tensors; fit to vllm-project/vllm#10517
    # (tests/data/vllm_startup_logs.json).
    batched_token_activation: float = 2.0


# The tokens of vLLM's profiling forward pass that activation_fraction was calibrated with: its serving default
# max_num_batched_tokens on GPUs under 70 GiB (and on A100s), with chunked prefill (vllm/engine/arg_utils.py,
# EngineArgs.get_batch_defaults: OPENAI_API_SERVER 2048; 8192 on >= 70 GiB GPUs other than A100).
PROFILED_TOKENS = 2048


@dataclass(frozen=True)
class AttentionLayout:
    """The parts of a config.json that size the KV cache."""

    kind: str  # "mha", "gqa", "mqa" or "mla"
    num_layers: int
    full_layers: int  # attention layers that keep every token
    window_layers: int  # sliding-window layers: keep at most ``window`` tokens
    window: int | None
    num_attention_heads: int
    kv_heads: int  # 0 for MLA
    head_dim: int  # for MLA: the latent width, kv_lora_rank + qk_rope_head_dim
    notes: tuple[str, ...] = ()

    @property
    def attention_layers(self) -> int:
        return self.full_layers + self.window_layers

    def kv_heads_per_rank(self, tp: int) -> int:
        return math.ceil(self.kv_heads / tp)  # 0 for MLA (kv_heads is 0); its callers handle MLA first

    def elements_per_token_per_layer(self, tp: int = 1) -> int:
        """Cached elements for one token in one attention layer on one of ``tp`` ranks."""
        if self.kind == "mla":
            return self.head_dim  # one latent vector, replicated on every rank
        return 2 * self.kv_heads_per_rank(tp) * self.head_dim

    def sequence_elements(self, tokens: int, tp: int = 1) -> int:
        """Cached elements for one sequence of ``tokens`` tokens on one rank, windows applied."""
        windowed = tokens if self.window is None else min(self.window, tokens)
        return self.elements_per_token_per_layer(tp) * (self.full_layers * tokens + self.window_layers * windowed)


@dataclass(frozen=True)
class MemoryFit:
    """The estimate for one checkpoint on one instance. Byte figures are per GPU unless named otherwise.

    ``fits`` is False whenever ``problems`` is not empty: memory short, or a tensor-parallel size the
    heads do not allow. ``warnings`` do not change the verdict.
    """

    fits: bool
    weight_bytes: int  # whole checkpoint
    weights_bytes_per_gpu: int
    kv_bytes_per_token: int  # whole model (one copy), full-attention equivalent
    kv_bytes_per_token_per_gpu: int  # one rank, full-attention equivalent
    kv_bytes_per_sequence_per_gpu: int  # one max_model_len sequence, windows applied
    kv_bytes_needed_per_gpu: int  # max_num_seqs such sequences
    overhead_bytes_per_gpu: int
    usable_bytes_per_gpu: int
    available_bytes_per_gpu: int  # usable x gpu_memory_utilization
    kv_budget_bytes_per_gpu: int  # available - weights - overhead; negative when those alone do not fit
    max_model_len_that_fits: int  # largest context for one sequence; 0 when weights + overhead do not fit
    full_length_sequences: int  # max_model_len sequences that fit at once
    gpu_count: int
    tensor_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    kv_cache_dtype: str  # as resolved: never "auto"
    kv_bytes_per_element: int
    attention: AttentionLayout
    context_limit: int | None  # the longest context the engine accepts (preflight.context), when config.json gives one
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    # The context-limit refusal among ``problems`` (its own check, "context"), or None.
    context_refusal: str | None = None


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's settings: a multimodal config's ``text_config`` over its top-level keys."""
    for key in TEXT_CONFIG_KEYS:
        nested = config.get(key)
        if isinstance(nested, Mapping):
            top = {k: v for k, v in config.items() if not k.endswith("_config") or k == "quantization_config"}
            return {**top, **nested}
    return dict(config)


def _first(cfg: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def _positive_int(cfg: Mapping[str, Any], *keys: str, required: bool = True) -> int | None:
    value = _first(cfg, *keys)
    if value is None:
        if required:
            raise ValueError(f"config.json has no {' / '.join(keys)}: cannot size the KV cache")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config.json {keys[0]}={value!r} must be a positive integer")
    return value


def attention_layout(config: Mapping[str, Any]) -> AttentionLayout:
    """Read layer counts, heads, head_dim, latent width and windows from a parsed config.json."""
    cfg = text_config(config)
    notes: list[str] = []
    num_layers = _positive_int(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = _positive_int(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads")
    assert num_layers is not None and heads is not None

    if cfg.get("kv_lora_rank") is not None:
        rank = _positive_int(cfg, "kv_lora_rank")
        rope = _positive_int(cfg, "qk_rope_head_dim")
        assert rank is not None and rope is not None
        kind, kv_heads, head_dim = "mla", 0, rank + rope
        notes.append(
            f"latent attention (MLA): {rank} + {rope} = {head_dim} cached elements per layer and token, "
            "no separate K and V; replicated on every tensor-parallel rank (vLLM), so not divided by TP"
        )
    else:
        if cfg.get("multi_query") is True and _first(cfg, "num_key_value_heads", "num_kv_heads") is None:
            kv_heads = 1
        else:
            kv_heads = _positive_int(cfg, "num_key_value_heads", "num_kv_heads", "n_kv_heads", required=False) or heads
        head_dim = _positive_int(cfg, "head_dim", required=False) or 0
        if not head_dim:
            hidden = _positive_int(cfg, "hidden_size", "n_embd", "d_model")
            assert hidden is not None
            if hidden % heads:
                raise ValueError(f"config.json hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
            head_dim = hidden // heads
        kind = "mqa" if kv_heads == 1 else "mha" if kv_heads == heads else "gqa"

    full, window_layers, window = _classify_layers(cfg, num_layers, notes)
    if full + window_layers == 0:
        raise ValueError("config.json describes no attention layers: this estimate covers attention KV caches only")
    return AttentionLayout(
        kind=kind,
        num_layers=num_layers,
        full_layers=full,
        window_layers=window_layers,
        window=window,
        num_attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        notes=tuple(notes),
    )


def _classify_layers(cfg: Mapping[str, Any], num_layers: int, notes: list[str]) -> tuple[int, int, int | None]:
    """(full-attention layers, sliding-window layers, window), counting only layers with a per-token cache."""
    raw_window = cfg.get("sliding_window")
    window = raw_window if isinstance(raw_window, int) and raw_window > 0 else None
    if cfg.get("use_sliding_window") is False:
        window = None  # Qwen2/2.5/3 configs set a sliding_window they do not use

    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        types = [str(t) for t in layer_types[:num_layers]]
        if len(types) < num_layers:
            types += ["full_attention"] * (num_layers - len(types))
            notes.append(f"layer_types lists fewer than {num_layers} layers; the rest counted as full attention")
        full = sum(t in FULL_ATTENTION_TYPES for t in types)
        sliding = sum(t in SLIDING_ATTENTION_TYPES for t in types)
        chunked = sum(t in CHUNKED_ATTENTION_TYPES for t in types)
        state = sum(t in STATE_LAYER_TYPES for t in types)
        unknown = sorted({t for t in types} - FULL_ATTENTION_TYPES - SLIDING_ATTENTION_TYPES)
        unknown = [t for t in unknown if t not in CHUNKED_ATTENTION_TYPES and t not in STATE_LAYER_TYPES]
        other = num_layers - full - sliding - chunked - state
        if sliding and window is None:
            notes.append("sliding_attention layers without a sliding_window size: counted at full length")
            full, sliding = full + sliding, 0
        if chunked:
            notes.append(f"{chunked} chunked-attention layers counted at full length (an over-estimate)")
        if other:
            notes.append(f"{other} layers of unknown type ({', '.join(unknown)}) counted as full attention")
        if state:
            notes.append(
                f"hybrid model: {state} of {num_layers} layers keep a fixed-size state, not a per-token cache "
                "(not counted); only its attention layers are"
            )
        return full + chunked + other, sliding, window if sliding else None

    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        full = sum((i + 1) % interval == 0 for i in range(num_layers))
        notes.append(
            f"hybrid model: every {interval}th layer is full attention ({full} of {num_layers}); the others are "
            "linear attention with a fixed-size state per sequence (not counted)"
        )
        return full, 0, None

    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        full = pattern.count("*")
        notes.append(
            f"hybrid model: {full} of {len(pattern)} layers are attention ('*' in hybrid_override_pattern); "
            "Mamba state per sequence not counted"
        )
        return full, 0, None

    every = cfg.get("sliding_window_pattern")
    if window is not None and isinstance(every, int) and every > 0:
        full = sum((i + 1) % every == 0 for i in range(num_layers))
        return full, num_layers - full, window

    if window is not None:
        notes.append(
            f"config.json sets sliding_window={window} but not which layers use it: every layer counted at "
            "full length (an over-estimate for interleaved models)"
        )
    return num_layers, 0, None


def _checkpoint_bits(cfg: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """(bits per weight, description) of a quantized checkpoint; (None, None) when it is not quantized."""
    quant = cfg.get("quantization_config")
    if not isinstance(quant, Mapping):
        return None, None
    method = str(quant.get("quant_method") or "unknown").lower()
    bits: Any = _first(quant, "bits", "w_bit", "weight_bits")
    if method in ("fp8", "fbgemm_fp8"):
        bits = 8
    elif method == "mxfp4":
        bits = 4
    elif method == "bitsandbytes":
        bits = 4 if quant.get("load_in_4bit") else 8 if quant.get("load_in_8bit") else None
    elif method == "compressed-tensors":
        groups = quant.get("config_groups") or {}
        found = [
            g["weights"]["num_bits"]
            for g in groups.values()
            if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping) and g["weights"].get("num_bits")
        ]
        bits = min(found) if found else None
    elif method == "modelopt":
        algo = str(quant.get("quant_algo") or "").upper()
        bits = 4 if "FP4" in algo or "INT4" in algo else 8 if "FP8" in algo or "INT8" in algo else None
    if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= 16:
        return None, f"{method} (bits unknown: activation allowance not scaled)"
    return bits, f"{method}, {bits}-bit weights"


def _kv_dtype(cfg: Mapping[str, Any], kv_cache_dtype: str) -> tuple[str, int, str | None]:
    """(dtype name, bytes per element, note) for the KV cache."""
    if kv_cache_dtype != "auto":
        return kv_cache_dtype, KV_DTYPE_BYTES[kv_cache_dtype], None
    model_dtype = str(_first(cfg, "torch_dtype", "dtype") or "").removeprefix("torch.")
    if model_dtype in ("bfloat16", "float16"):
        return model_dtype, 2, None
    return "16-bit", 2, f"config.json dtype {model_dtype or 'unset'}: engines serve it, and cache KV, in 16-bit"


def _largest_context(layout: AttentionLayout, tp: int, elem_bytes: int, budget: int, limit: int | None) -> int:
    """Largest token count whose one-sequence KV cache fits ``budget`` bytes on one rank."""
    if budget <= 0:
        return 0
    per_layer = layout.elements_per_token_per_layer(tp) * elem_bytes
    full = layout.full_layers * per_layer
    windowed = layout.window_layers * per_layer
    inside_window = budget // (full + windowed)
    if layout.window is None or inside_window < layout.window:  # at the window, windowed layers stop growing
        return inside_window
    if full == 0:
        # Every attention layer is windowed and the window fits: memory does not bound the context.
        return limit if limit is not None else inside_window
    return (budget - windowed * layout.window) // full


def largest_context_for(fit: MemoryFit, sequences: int) -> int:
    """The longest context that ``sequences`` sequences can each have at once within the fit's KV budget."""
    per_sequence = max(fit.kv_budget_bytes_per_gpu, 0) // max(sequences, 1)
    found = _largest_context(
        fit.attention, fit.tensor_parallel_size, fit.kv_bytes_per_element, per_sequence, fit.context_limit
    )
    return found if fit.context_limit is None else min(found, fit.context_limit)


def context_limit(cfg: Mapping[str, Any]) -> int | None:
    value = _first(cfg, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def tp_divides_heads(config: Mapping[str, Any], tp: int) -> str | None:
    """The problem with tensor parallel size ``tp`` for this model, or None.

    vLLM and SGLang split attention heads evenly over the ranks: ``tp`` must divide num_attention_heads,
    and either divide num_key_value_heads or be a multiple of it (then KV heads are replicated).
    """
    layout = attention_layout(config)
    if tp < 1:
        return f"tensor_parallel_size={tp} must be at least 1"

    def ok(t: int) -> bool:
        if layout.num_attention_heads % t:
            return False
        return layout.kind == "mla" or layout.kv_heads % t == 0 or t % layout.kv_heads == 0

    if ok(tp):
        return None
    allowed = ", ".join(str(t) for t in TP_CANDIDATES if ok(t))
    if layout.num_attention_heads % tp:
        why = f"does not divide num_attention_heads={layout.num_attention_heads}"
    else:
        why = f"neither divides num_key_value_heads={layout.kv_heads} nor is a multiple of it"
    return (
        f"tensor_parallel_size={tp} {why}: engines split attention heads evenly across GPUs. "
        f"Allowed: {allowed}; pick an instance with that many GPUs, or give the model that many."
    )


def _gib(n: int | float) -> str:
    return f"{n / GIB:.2f} GiB"


def estimate_memory_fit(
    config: Mapping[str, Any],
    *,
    weight_bytes: int,
    gpu_count: int,
    gpu_memory_gib: float,
    max_model_len: int,
    tensor_parallel_size: int | None = None,
    max_num_seqs: int = 1,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    overhead: Overhead | None = None,
    usable_gpu_memory_bytes: int | None = None,
    max_num_batched_tokens: int | None = None,
    refuse_beyond_context: bool = True,
    long_context: str | None = None,
) -> MemoryFit:
    """Estimate whether a checkpoint fits ``gpu_count`` GPUs of ``gpu_memory_gib`` (nominal) each.

    config: the parsed config.json. weight_bytes: the on-disk bytes of its weight files.
    tensor_parallel_size: GPUs the model is split over. Default: ``gpu_count``.
    max_num_seqs: how many ``max_model_len``-token sequences must fit at once. Default: 1, the engine's
    own start-up check (vLLM refuses to start when one full-length sequence does not fit).
    kv_cache_dtype: one of ``KV_CACHE_DTYPES``. Default: ``auto``, the model's 16-bit dtype.
    overhead: Default: ``Overhead()``, 8.5 % of the 16-bit-equivalent weights per GPU (calibrated).
    usable_gpu_memory_bytes: a measured per-GPU total. Default: ``gpu_memory_gib`` read as GB.
    max_num_batched_tokens: the tokens of the engine's profiling pass (vLLM's ``max_num_batched_tokens``; with
    chunked prefill off, ``max_model_len``). Default: ``PROFILED_TOKENS`` (2048), the budget the overhead
    fraction was calibrated at; more tokens add ``Overhead.batched_token_activation`` activation per token.
    refuse_beyond_context: a ``max_model_len`` above the longest context the engine accepts for the model
    (:func:`preflight.context.engine_context_limit`, vLLM's rule) is a problem (``context_refusal``), and the memory
    advice then works from that longest context, never suggesting what would keep the refused one. Default: True;
    False (llama.cpp, which runs past the trained context, or the context check skipped) makes it a warning.
    long_context: the engine's opt-in to start beyond that limit as set (``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``,
    :func:`preflight.context.long_context_opt_in`): a longer context is then a warning and is sized as given.
    Default: None.
    Raises ValueError for inputs no deployment could have (a TP larger than the GPU count, an unknown
    KV-cache dtype, a config.json without layer or head counts).
    """
    overhead = overhead or Overhead()
    tp = gpu_count if tensor_parallel_size is None else tensor_parallel_size
    _validate(
        weight_bytes=weight_bytes,
        gpu_count=gpu_count,
        gpu_memory_gib=gpu_memory_gib,
        usable_gpu_memory_bytes=usable_gpu_memory_bytes,
        tp=tp,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
    )
    cfg = text_config(config)
    layout = attention_layout(config)
    kv_name, elem_bytes, dtype_note = _kv_dtype(cfg, kv_cache_dtype)
    bits, quant_note = _checkpoint_bits(cfg)
    engine_limit = engine_context_limit(cfg)
    limit = engine_limit.tokens if engine_limit is not None else None

    usable = usable_gpu_memory_bytes if usable_gpu_memory_bytes is not None else round(gpu_memory_gib * GB)
    available = math.floor(usable * gpu_memory_utilization)
    weights_per_gpu = -(-weight_bytes // tp)
    as_16_bit = weights_per_gpu * 16 / bits if bits else weights_per_gpu
    overhead_per_gpu = overhead.fixed_bytes_per_gpu + round(overhead.activation_fraction * as_16_bit)
    if max_num_batched_tokens is not None and (isinstance(max_num_batched_tokens, bool) or max_num_batched_tokens < 1):
        raise ValueError(f"max_num_batched_tokens={max_num_batched_tokens!r} must be a positive integer")
    batched = PROFILED_TOKENS if max_num_batched_tokens is None else max_num_batched_tokens
    activation_per_token = batched_activation_bytes_per_token(cfg, tp, overhead)
    overhead_per_gpu += round(activation_per_token * max(0, batched - PROFILED_TOKENS))
    budget = available - weights_per_gpu - overhead_per_gpu
    sequence = layout.sequence_elements(max_model_len, tp) * elem_bytes

    fit = MemoryFit(
        fits=False,
        weight_bytes=weight_bytes,
        weights_bytes_per_gpu=weights_per_gpu,
        kv_bytes_per_token=layout.elements_per_token_per_layer(1) * layout.attention_layers * elem_bytes,
        kv_bytes_per_token_per_gpu=layout.elements_per_token_per_layer(tp) * layout.attention_layers * elem_bytes,
        kv_bytes_per_sequence_per_gpu=sequence,
        kv_bytes_needed_per_gpu=max_num_seqs * sequence,
        overhead_bytes_per_gpu=overhead_per_gpu,
        usable_bytes_per_gpu=usable,
        available_bytes_per_gpu=available,
        kv_budget_bytes_per_gpu=budget,
        max_model_len_that_fits=_largest_context(layout, tp, elem_bytes, budget, limit),
        full_length_sequences=max(budget, 0) // sequence,
        gpu_count=gpu_count,
        tensor_parallel_size=tp,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_dtype=kv_name,
        kv_bytes_per_element=elem_bytes,
        attention=layout,
        context_limit=limit,
    )

    refusal = None
    warnings = []
    shortfall = _shortfall(fit)
    if refuse_beyond_context and long_context is None:
        largest = fit.max_model_len_that_fits or None  # 0: the weights do not fit, said by their own problem
        refusal = context_problem(cfg, max_model_len, largest_that_fits=largest)
        if refusal is not None and engine_limit is not None:
            # No fp8 cache, GPU or quantization makes the refused context start: advise from the longest accepted.
            shortfall = _shortfall(_at_length(fit, engine_limit.largest), refused=max_model_len)
    problems = [p for p in (tp_divides_heads(config, tp), shortfall, refusal) if p]
    if tp < gpu_count:
        warnings.append(f"tensor_parallel_size={tp} uses {tp} of the instance's {gpu_count} GPUs; the rest stay idle")
    if refuse_beyond_context:
        if long_context is not None and (beyond := beyond_context_warning(cfg, max_model_len, long_context)):
            warnings.append(beyond)
    elif (stated := context_limit(cfg)) is not None and max_model_len > stated:
        warnings.append(
            f"max_model_len={max_model_len:,} exceeds the model's max_position_embeddings={stated:,}: engines "
            "refuse to start unless rope scaling is configured for the engine (vLLM: --hf-overrides)"
        )

    assumptions = [
        f"usable GPU memory: {gpu_memory_gib:g} GB nominal = {_gib(usable)} per GPU"
        if usable_gpu_memory_bytes is None
        else f"usable GPU memory: {_gib(usable)} per GPU, as given",
        f"engine budget: gpu_memory_utilization {gpu_memory_utilization:.2f} of it = {_gib(available)} per GPU",
        f"weights: {weight_bytes / GB:.2f} GB on disk, split evenly over {tp} tensor-parallel rank(s)",
        f"overhead: {_gib(overhead.fixed_bytes_per_gpu)} fixed per GPU + {overhead.activation_fraction:.1%} of the "
        "16-bit-equivalent weights per GPU (activation peak, CUDA graphs, non-torch memory; calibrated against "
        "published vLLM start-up logs)"
        + (
            f" + {_gib(round(activation_per_token * (batched - PROFILED_TOKENS)))} of activations for "
            f"max_num_batched_tokens {batched:,} (above {PROFILED_TOKENS:,})"
            if batched > PROFILED_TOKENS
            else ""
        ),
        f"KV cache in {kv_name} ({elem_bytes} byte(s) per element)",
    ]
    if quant_note:
        scale = f"; activations run in 16-bit, so that share counts the weights x{16 / bits:g}" if bits else ""
        assumptions.append(f"quantized checkpoint: {quant_note}; weight bytes taken as stored{scale}")
        quant = cfg["quantization_config"]
        if kv_cache_dtype == "auto" and (quant.get("kv_cache_scheme") or quant.get("kv_cache_quant_algo")):
            assumptions.append("the checkpoint carries KV-cache scales: kv_cache_dtype=fp8 would use them")
    if dtype_note:
        assumptions.append(dtype_note)
    assumptions += _model_assumptions(config, cfg, layout, tp)
    return replace(
        fit, fits=not problems, problems=problems, warnings=warnings, assumptions=assumptions, context_refusal=refusal
    )


def batched_activation_bytes_per_token(cfg: Mapping[str, Any], tp: int, overhead: Overhead) -> float:
    """16-bit activation bytes per batched token per GPU: the MLP's width is split over TP, the hidden size is not.

    0 when config.json gives no hidden_size (the fraction alone then stands for the activations).
    """

    def size(*keys: str) -> int:
        value = _first(cfg, *keys)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    hidden, intermediate = size("hidden_size", "n_embd", "d_model"), size("intermediate_size", "n_inner", "ffn_dim")
    return overhead.batched_token_activation * (hidden + -(-intermediate // tp)) * 2


def _validate(
    *,
    weight_bytes: int,
    gpu_count: int,
    gpu_memory_gib: float,
    usable_gpu_memory_bytes: int | None,
    tp: int,
    max_model_len: int,
    max_num_seqs: int,
    kv_cache_dtype: str,
    gpu_memory_utilization: float,
) -> None:
    errors = []
    if weight_bytes < 0:
        errors.append(f"weight_bytes={weight_bytes} must not be negative")
    if gpu_count < 1:
        errors.append(f"gpu_count={gpu_count} must be at least 1")
    if usable_gpu_memory_bytes is None and not gpu_memory_gib > 0:
        errors.append(f"gpu_memory_gib={gpu_memory_gib} must be positive")
    if usable_gpu_memory_bytes is not None and usable_gpu_memory_bytes < 1:
        errors.append(f"usable_gpu_memory_bytes={usable_gpu_memory_bytes} must be positive")
    if tp < 1 or tp > gpu_count:
        errors.append(f"tensor_parallel_size={tp} must be between 1 and gpu_count={gpu_count}")
    if max_model_len < 1:
        errors.append(f"max_model_len={max_model_len} must be at least 1")
    if max_num_seqs < 1:
        errors.append(f"max_num_seqs={max_num_seqs} must be at least 1")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        errors.append(f"kv_cache_dtype={kv_cache_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)}")
    if not 0 < gpu_memory_utilization <= 1:
        errors.append(f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1]")
    if errors:
        raise ValueError("; ".join(errors))


def _model_assumptions(
    config: Mapping[str, Any], cfg: Mapping[str, Any], layout: AttentionLayout, tp: int
) -> list[str]:
    """What the estimate took from config.json about attention, experts and modality."""
    found = []
    if layout.kind != "mla":
        split = f"{layout.kv_heads_per_rank(tp)} per GPU at TP {tp}"
        if tp > layout.kv_heads:
            split += " (KV heads replicated: TP exceeds them)"
        found.append(
            f"{layout.kind.upper()}: {layout.kv_heads} KV heads x head_dim {layout.head_dim} over "
            f"{layout.attention_layers} attention layers; {split}"
        )
    if layout.window_layers:
        found.append(
            f"{layout.window_layers} sliding-window layers keep at most {layout.window:,} tokens per sequence "
            f"({layout.full_layers} full-attention layers keep all); per-token figures are full-attention "
            "equivalents"
        )
    found += layout.notes
    experts = _first(cfg, "num_experts", "n_routed_experts", "num_local_experts")
    if isinstance(experts, int) and experts > 1:
        active = _first(cfg, "num_experts_per_tok", "moe_topk", "top_k")
        per_token_experts = f", {active} active per token" if active else ""
        found.append(f"MoE: all {experts} experts resident in GPU memory{per_token_experts}")
    if any(k in config for k in TEXT_CONFIG_KEYS):
        found.append(
            "multimodal: language model read from the nested text config; the vision encoder is in the weight "
            "bytes, its activations are not estimated, and image tokens count against max_model_len"
        )
    return found


def _at_length(fit: MemoryFit, tokens: int) -> MemoryFit:
    """The same estimate with ``tokens``-token sequences (the KV figures only; the budget does not change)."""
    sequence = fit.attention.sequence_elements(tokens, fit.tensor_parallel_size) * fit.kv_bytes_per_element
    return replace(
        fit,
        max_model_len=tokens,
        kv_bytes_per_sequence_per_gpu=sequence,
        kv_bytes_needed_per_gpu=fit.max_num_seqs * sequence,
        full_length_sequences=max(fit.kv_budget_bytes_per_gpu, 0) // sequence,
    )


def _shortfall(fit: MemoryFit, refused: int | None = None) -> str | None:
    """What does not fit, by how much, and what to change; None when the KV cache fits.

    refused: a longer max_model_len the engine refuses whatever the memory; ``fit`` is then at the longest context it
    accepts, and the problem says so (its advice keeps to contexts the engine starts with).
    """
    budget, sequence, tp = fit.kv_budget_bytes_per_gpu, fit.kv_bytes_per_sequence_per_gpu, fit.tensor_parallel_size
    if budget >= fit.kv_bytes_needed_per_gpu:
        return None
    if refused is not None and budget > 0:
        found = _shortfall(fit)
        assert found is not None
        return (
            f"at {fit.max_model_len:,} tokens, the longest context the engine accepts (max_model_len={refused} is "
            f"refused whatever the memory: see the context problem): {found}"
        )
    weights, overhead = fit.weights_bytes_per_gpu, fit.overhead_bytes_per_gpu
    needed_total = weights + overhead + fit.kv_bytes_needed_per_gpu
    bigger = (
        f"GPUs of at least {math.ceil(needed_total / fit.gpu_memory_utilization / GB)} GB each at TP {tp}, "
        "or more GPUs (a larger tensor_parallel_size)"
    )
    quantized = "a quantized checkpoint (4-bit AWQ/GPTQ weights are about a quarter of 16-bit, FP8 half)"
    if budget <= 0:
        return (
            f"weights do not fit: {_gib(weights)} of weights plus {_gib(overhead)} runtime overhead per GPU exceed "
            f"the {_gib(fit.available_bytes_per_gpu)} the engine may use ({fit.gpu_memory_utilization:.0%} of "
            f"usable memory) by {_gib(-budget)}, before any KV cache. Use {bigger}; or {quantized}."
        )
    fp8: list[str] = []  # the fp8 KV cache as one more way out, unless the cache already is 1 byte per element
    if fit.kv_bytes_per_element > 1:
        fp8_sequences = budget // (sequence // fit.kv_bytes_per_element)
        if fit.max_num_seqs > 1:
            fp8 = [f"{FP8_KV_HINT}{fp8_sequences} full-length sequences fit)"]
        elif fp8_sequences >= 1:
            fp8 = [f"{FP8_KV_HINT}{fit.max_model_len:,} tokens then fit)"]
        else:
            fp8_largest = _largest_context(fit.attention, tp, 1, budget, fit.context_limit)
            fp8 = [f"{FP8_KV_HINT}max_model_len up to {fp8_largest:,})"]
    if fit.full_length_sequences < 1:
        largest = min(fit.max_model_len_that_fits, fit.context_limit or fit.max_model_len_that_fits)
        ways = [f"Set max_model_len to at most {largest:,}", *fp8, bigger, quantized]
        return (
            f"KV cache does not fit: one {fit.max_model_len:,}-token sequence needs {_gib(sequence)} of KV cache per "
            f"GPU, but {_gib(budget)} is left after weights ({_gib(weights)}) and overhead ({_gib(overhead)}). "
            + "; or ".join(ways)
            + "."
        )
    n = fit.max_num_seqs
    shorter = _largest_context(fit.attention, tp, fit.kv_bytes_per_element, budget // n, fit.context_limit)
    ways = [
        f"Set max_num_seqs to at most {fit.full_length_sequences}, or max_model_len to at most {shorter:,} for {n} "
        "sequences",
        *fp8,
        "more GPUs (a larger tensor_parallel_size)",
    ]
    return (
        f"concurrency does not fit: max_num_seqs={n} sequences of {fit.max_model_len:,} tokens need "
        f"{_gib(fit.kv_bytes_needed_per_gpu)} of KV cache per GPU; {_gib(budget)} is left, enough for "
        f"{fit.full_length_sequences}. " + "; or ".join(ways) + "."
    )


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB"


def format_table(fit: MemoryFit, title: str | None = None) -> str:
    """The estimate as a small table for people, with problems, warnings and assumptions under it."""
    tp = fit.tensor_parallel_size
    rows = [
        ("usable GPU memory", _gib(fit.usable_bytes_per_gpu)),
        (f"engine budget (x {fit.gpu_memory_utilization:.2f})", _gib(fit.available_bytes_per_gpu)),
        (f"- weights ({fit.weight_bytes / GB:.2f} GB / TP {tp})", _gib(fit.weights_bytes_per_gpu)),
        ("- runtime overhead", _gib(fit.overhead_bytes_per_gpu)),
        ("= KV-cache budget", _gib(fit.kv_budget_bytes_per_gpu)),
        (
            f"KV cache per token ({fit.kv_cache_dtype})",
            f"{_kib(fit.kv_bytes_per_token_per_gpu)} (whole model {_kib(fit.kv_bytes_per_token)})",
        ),
        (f"KV cache, one {fit.max_model_len:,}-token sequence", _gib(fit.kv_bytes_per_sequence_per_gpu)),
        (f"KV cache needed (max_num_seqs {fit.max_num_seqs})", _gib(fit.kv_bytes_needed_per_gpu)),
        ("largest context for one sequence", f"{fit.max_model_len_that_fits:,} tokens"),
        *([("longest context the engine accepts", f"{fit.context_limit:,} tokens")] if fit.context_limit else []),
        (f"{fit.max_model_len:,}-token sequences at once", f"{fit.full_length_sequences:,}"),
    ]
    width = max(len(label) for label, _ in rows)
    head = title or "memory fit"
    lines = [f"{head}: {fit.gpu_count} GPU(s), tensor parallel {tp}; figures per GPU"]
    lines += [f"  {label:<{width}}  {value:>12}" for label, value in rows]
    lines.append(f"  {'verdict':<{width}}  {'FITS' if fit.fits else 'DOES NOT FIT':>12}")
    for heading, items in (("problems", fit.problems), ("warnings", fit.warnings), ("assumptions", fit.assumptions)):
        if items:
            lines.append(f"{heading}:")
            lines += [f"  - {item}" for item in items]
    return "\n".join(lines)
