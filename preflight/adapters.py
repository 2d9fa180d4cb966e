"""Checks of a LoRA adapter's ``adapter_config.json`` against the base model it is deployed on (pure functions).

The fields are PEFT's ``LoraConfig`` as saved by ``save_pretrained`` (huggingface/peft src/peft/config.py,
src/peft/tuners/lora/config.py: ``peft_type``, ``base_model_name_or_path``, ``r``, ``target_modules``).
vLLM refuses an adapter whose rank exceeds ``--max-lora-rank`` when it loads it ("LoRA rank {rank} is greater
than max_lora_rank {max}", vllm-project/vllm vllm/lora/worker_manager.py), which on SageMaker fails the adapter
component after the GPUs are paid for;
the default is 16 (aws/model-hosting-container-standards docs/sagemaker/05_lora_adapter_management.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import safejson

REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def adapter_config_problems(
    raw: str | bytes | Mapping[str, Any],
    *,
    adapter: str,
    base_model_id: str | None,
    max_lora_rank: int,
) -> list[str]:
    """What makes this adapter unservable on the base: not LoRA, another base model, a rank above the engine's
    ``max_lora_rank``, no target modules. ``base_model_id`` None (a base served from an S3 prefix): the base
    model's name is not compared. Each problem names the adapter and the field."""
    where = f"adapter {adapter}: adapter_config.json"
    if not isinstance(raw, Mapping):
        try:
            raw = safejson.loads(raw, source=where)
        except safejson.JsonError as e:
            return [f"{where} is {e.why}"]
    if not isinstance(raw, Mapping):
        return [f"{where} is not a JSON object"]
    problems = []
    peft_type = raw.get("peft_type")
    if peft_type != "LORA":
        problems.append(f"{where} peft_type={peft_type!r}: only LoRA adapters (peft_type 'LORA') are served")
    base = raw.get("base_model_name_or_path")
    # A local path (the trainer's own copy) says nothing about which Hub model it was; only a repo id is compared.
    if (
        base_model_id
        and isinstance(base, str)
        and REPO_ID.fullmatch(base)
        and not base.startswith(("/", "."))
        and base.lower() != base_model_id.lower()
    ):
        problems.append(
            f"{where} base_model_name_or_path={base!r}: trained on another model than this deployment's "
            f"{base_model_id!r}; an adapter only fits the base it was trained on"
        )
    rank = raw.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        problems.append(f"{where} r={rank!r}: expected the adapter's rank, a whole number of at least 1")
    elif rank > max_lora_rank:
        problems.append(
            f"{where} r={rank}: above the engine's max_lora_rank {max_lora_rank}, so loading it fails; raise "
            f"max_lora_rank (vLLM: engine_env SM_VLLM_MAX_LORA_RANK) to at least {rank}"
        )
    targets = raw.get("target_modules")
    if not targets or not (
        isinstance(targets, str) or (isinstance(targets, list) and all(isinstance(t, str) for t in targets))
    ):
        problems.append(f"{where} target_modules={targets!r}: expected the module names (or a pattern) it adapts")
    return problems
