"""Checks of a LoRA adapter's ``adapter_config.json`` against the base model it is deployed on (pure functions).

The fields are PEFT's ``LoraConfig`` as saved by ``save_pretrained`` (huggingface/peft src/peft/config.py,
src/peft/tuners/lora/config.py: ``peft_type``, ``base_model_name_or_path``, ``r``, ``target_modules``).
vLLM refuses an adapter whose rank exceeds ``--max-lora-rank`` when it loads it ("LoRA rank {rank} is greater
than max_lora_rank {max}", vllm-project/vllm vllm/lora/worker_manager.py), which on SageMaker fails the adapter
component after the GPUs are paid for;
the default is 16 (aws/model-hosting-container-standards docs/sagemaker/05_lora_adapter_management.md).

What vLLM itself refuses when it loads an adapter is in vllm-project/vllm vllm/lora/peft_helper.py:
``PEFTHelper.from_dict`` ("Missing required configuration fields": ``r``, ``lora_alpha``, ``target_modules``),
``__post_init__`` (``r`` must be a positive integer), ``_validate_features`` (``modules_to_save`` other than
``classifier``/``score``, ``use_dora``, ``lora_bias``, an ``init_lora_weights`` that rewrites base weights,
``alora_invocation_tokens``, ``layer_replication``, ``use_bdlora``, ``use_qalora``) and ``validate_legal`` (the
largest of ``r`` and the ``rank_pattern`` values above ``max_lora_rank``; ``bias`` other than ``"none"``). Exactly
those are refused here; vLLM reads no other field (``from_dict`` drops unknown keys), so a
``base_model_name_or_path`` given as a URL, ``hf://`` or ``org/x@rev`` and an empty entry in ``target_modules``
load in vLLM. They are still checked here, for the deployment's sake rather than vLLM's: such a base names a
repository too (``base_repo_id`` reads it out) and must be the deployment's, and one that names no repository in a
form we can read is refused rather than let through unchecked; an empty module name adapts nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import safejson

REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# PEFTHelper fields without a default: from_dict refuses a config lacking one (vllm/lora/peft_helper.py).
REQUIRED = ("r", "lora_alpha", "target_modules")
# _validate_features: modules_to_save may name only these (classification heads).
SAVABLE_MODULES = ("classifier", "score")
# _init_is_supported: string inits that only set initial adapter weights; any other string (PiSSA, OLoRA, CorDA,
# LoftQ) modifies the base weights and is refused. A boolean init is always supported.
SUPPORTED_INITS = ("gaussian", "eva", "orthogonal", "mica", "lora_ga")
# _validate_features: a truthy value of any of these is refused, with vLLM's reason.
UNSUPPORTED_FEATURES = {
    "use_dora": "DoRA",
    "lora_bias": "LoRA bias (lora_bias)",
    "alora_invocation_tokens": "Activated LoRA (aLoRA)",
    "layer_replication": "layer_replication",
    "use_bdlora": "block-diagonal LoRA (BD-LoRA)",
    "use_qalora": "QALoRA",
}


# The forms a base model is written in besides a bare repo id: a Hub URL (huggingface.co/<repo>[/tree/<rev>]), the
# hf:// scheme of huggingface_hub's file system (hf://<repo>[@<rev>]) and <repo>@<rev>.
HUB_URL = re.compile(r"https?://(?:www\.)?(?:huggingface\.co|hf\.co)/(?P<repo>[^/?#@]+/[^/?#@]+)(?:/tree/[^?#]*)?/?")
HF_SCHEME = re.compile(r"hf://(?:models/)?(?P<repo>[^/?#@]+/[^/?#@]+)(?:@[^/?#]+)?/?")
AT_REVISION = re.compile(r"(?P<repo>[^/?#@:]+/[^/?#@:]+)@[^?#@]+")


def base_repo_id(base: str) -> str | None:
    """The repository a ``base_model_name_or_path`` names: a repo id, a Hub URL, ``hf://`` or ``repo@rev``;
    None when it names none we can read (a local path, another host's URL)."""
    for form in (REPO_ID, HUB_URL, HF_SCHEME, AT_REVISION):
        if found := form.fullmatch(base):
            repo = found.groupdict().get("repo") or found.group(0)
            return repo if REPO_ID.fullmatch(repo) else None
    return None


def _local_path(base: str) -> bool:
    return base.startswith(("/", ".", "~")) or (":" not in base and "@" not in base and base.count("/") != 1)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    # A local path (the trainer's own copy) says nothing about which Hub model it was; every form that names a
    # repository is compared, and one that looks like a reference we cannot read is refused, not skipped.
    if base_model_id and isinstance(base, str) and base and not _local_path(base):
        repo = base_repo_id(base)
        if repo is None:
            problems.append(
                f"{where} base_model_name_or_path={base!r}: names no Hub repository this check can read (expected "
                f"org/name, https://huggingface.co/org/name, hf://org/name or org/name@revision), so it cannot be "
                f"compared with this deployment's {base_model_id!r}; write the base's repo id"
            )
        elif repo.lower() != base_model_id.lower():
            problems.append(
                f"{where} base_model_name_or_path={base!r}: trained on another model than this deployment's "
                f"{base_model_id!r}; an adapter only fits the base it was trained on"
            )
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        problems.append(f"{where} lacks {', '.join(missing)}: vLLM refuses an adapter config without them")
    rank = raw.get("r")
    if "r" in raw and (not _whole(rank) or rank < 1):
        problems.append(f"{where} r={rank!r}: expected the adapter's rank, a whole number of at least 1")
    pattern = raw.get("rank_pattern") or {}
    if not isinstance(pattern, Mapping) or not all(_whole(v) and v >= 1 for v in pattern.values()):
        problems.append(f"{where} rank_pattern={pattern!r}: expected module patterns mapped to whole ranks >= 1")
        pattern = {}
    ranks = ([rank] if _whole(rank) and rank >= 1 else []) + list(pattern.values())
    if ranks and max(ranks) > max_lora_rank:
        field = f"r={rank}" if rank == max(ranks) else f"rank_pattern={dict(pattern)!r}"
        problems.append(
            f"{where} {field}: above the engine's max_lora_rank {max_lora_rank}, so loading it fails "
            f"(vLLM takes the largest of r and rank_pattern); raise max_lora_rank "
            f"(vLLM: engine_env SM_VLLM_MAX_LORA_RANK) to at least {max(ranks)}"
        )
    bias = raw.get("bias", "none")
    if bias != "none":
        problems.append(f"{where} bias={bias!r}: vLLM serves only bias 'none' (\"Adapter bias is not supported\")")
    saved = raw.get("modules_to_save")
    if saved:
        extra = [m for m in saved if m not in SAVABLE_MODULES] if isinstance(saved, list) else [saved]
        if extra:
            problems.append(
                f"{where} modules_to_save={saved!r}: vLLM allows none, or only {list(SAVABLE_MODULES)} "
                f"(classification heads); not {extra}"
            )
    for key, feature in UNSUPPORTED_FEATURES.items():
        if raw.get(key):
            problems.append(f"{where} {key}={raw[key]!r}: vLLM does not support {feature}")
    init = raw.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in SUPPORTED_INITS:
        problems.append(
            f"{where} init_lora_weights={init!r}: this init modifies the base model's weights, which vLLM does not "
            f"support; allowed: true/false or {', '.join(SUPPORTED_INITS)} (or convert it to a plain LoRA with PEFT)"
        )
    targets = raw.get("target_modules")
    if ("target_modules" in raw and not targets) or (
        targets
        and not (isinstance(targets, str) or (isinstance(targets, list) and all(isinstance(t, str) for t in targets)))
    ):
        problems.append(f"{where} target_modules={targets!r}: expected the module names (or a pattern) it adapts")
    elif isinstance(targets, list) and any(not t.strip() for t in targets):
        problems.append(f"{where} target_modules={targets!r}: an empty module name adapts nothing; remove it")
    elif isinstance(targets, str) and not targets.strip():
        problems.append(f"{where} target_modules={targets!r}: an empty pattern adapts nothing")
    return problems
