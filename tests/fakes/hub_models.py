"""Real models as the Hub serves them: config.json as published, weight files with their published sizes.

Each config is the model's public ``config.json`` (the keys the checks read, and the ones that change them; the
URL above each). Weight sizes are the totals the Hub lists for the safetensors files, in as many shards (Llama
3.1's four shard sizes as listed; the others' totals split evenly), so the checks see the real byte counts.
``add_to(hub)`` puts them on a FakeHub.
"""

from __future__ import annotations

import json

from tests.fakes.fake_hub import Declared, FakeHub

# https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json
LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
LLAMA_31_8B_SHARDS = (4_976_698_672, 4_999_802_720, 4_915_916_176, 1_168_138_808)

# https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json (its model card: 32,768 native, 131,072 with YaRN
# factor 4 over original_max_position_embeddings 32,768 added to config.json by the user)
QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "max_position_embeddings": 40960,
    "max_window_layers": 64,
    "model_type": "qwen3",
    "num_attention_heads": 64,
    "num_hidden_layers": 64,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 151936,
}
QWEN3_32B_SHARDS = (3_900_000_000,) * 16 + (3_140_000_000,)  # 65.54 GB in 17 shards

# https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "experts_per_token": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2880,
    "initial_context_length": 4096,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072,
    "model_type": "gpt_oss",
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
    "rope_theta": 150000,
    "sliding_window": 128,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 201088,
}
GPT_OSS_20B_SHARDS = (4_600_000_000,) * 3  # 13.8 GB

# https://huggingface.co/mistralai/Mistral-Small-24B-Instruct-2501/blob/main/config.json
MISTRAL_SMALL_24B = {
    "architectures": ["MistralForCausalLM"],
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "intermediate_size": 32768,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 40,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 100000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 131072,
}
MISTRAL_SMALL_24B_SHARDS = (4_781_571_736,) * 9 + (4_113_882_144,)  # 47.15 GB in 10 shards

MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": (LLAMA_31_8B, LLAMA_31_8B_SHARDS),
    "Qwen/Qwen3-32B": (QWEN3_32B, QWEN3_32B_SHARDS),
    "openai/gpt-oss-20b": (GPT_OSS_20B, GPT_OSS_20B_SHARDS),
    "mistralai/Mistral-Small-24B-Instruct-2501": (MISTRAL_SMALL_24B, MISTRAL_SMALL_24B_SHARDS),
}


def repo_files(config: dict, shards: tuple[int, ...]) -> dict:
    n = len(shards)
    files: dict = {"config.json": json.dumps(config).encode(), "tokenizer.json": b"{}"}
    files.update({f"model-{i:05d}-of-{n:05d}.safetensors": Declared(size) for i, size in enumerate(shards, 1)})
    return files


def add_to(hub: FakeHub) -> FakeHub:
    for repo_id, (config, shards) in MODELS.items():
        hub.add_repo(repo_id, repo_files(config, shards))
    return hub
