"""A tiny llama-architecture GGUF model that real llama.cpp loads and runs on a CPU, written by the ``gguf`` package.

Random weights (the answers are noise, which is all a serving test needs), one or two layers of width 64, and a
SentencePiece-style vocabulary of the control tokens, the 256 byte tokens (so any text tokenizes) and a few
word pieces. Tensor names and metadata keys are llama.cpp's for ``llama`` (gguf-py's constants).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

# Mostly whole-word pieces, so that random sampling mostly yields text rather than lone UTF-8 bytes.
WORDS = ["▁the", "▁a", "▁is", "▁S", "3", "▁bucket", "▁object", "▁store", "▁data", ".", *(f"▁w{i}" for i in range(1000))]


def write_tiny_llama(path: Path, *, layers: int = 2, width: int = 64, heads: int = 4, context: int = 512) -> Path:
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *WORDS]
    types = [2, 3, 3, *([6] * 256), *([1] * len(WORDS))]  # unknown, control, byte, normal
    vocab, ff = len(tokens), width * 2
    rng = np.random.default_rng(13)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama-test")
    writer.add_file_type(0)  # all F32
    writer.add_context_length(context)
    writer.add_embedding_length(width)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(width // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 259 + [-float(i + 1) for i in range(len(WORDS))])
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_tensor("token_embd.weight", weight(vocab, width))
    writer.add_tensor("output_norm.weight", np.ones(width, dtype=np.float32))
    writer.add_tensor("output.weight", weight(vocab, width))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(width, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(width, width))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(width, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ff, width))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(ff, width))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(width, ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
