"""Which files of a staged checkpoint are the weights an engine loads, and how many bytes they hold.

The weights' GPU footprint is their on-disk size (quantized checkpoints are already small on disk), so
the memory-fit estimate needs the right files summed, not every object under the prefix. A Hugging Face
repository often carries the same weights twice (``*.safetensors`` next to ``pytorch_model*.bin``, or
an ``original/`` or ``consolidated.safetensors`` copy); vLLM loads only one set: the ``*.safetensors``
files in the model folder itself when there are any (those named in ``model.safetensors.index.json``
when that index exists), otherwise the ``*.bin`` files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
SAFETENSORS_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class WeightFiles:
    total_bytes: int
    files: tuple[str, ...]
    notes: tuple[str, ...] = ()


def select_weight_files(sizes: Mapping[str, int], safetensors_index: Mapping[str, Any] | None = None) -> WeightFiles:
    """The weight files among ``sizes`` (path relative to the checkpoint root -> bytes) and their sum.

    ``safetensors_index`` is the parsed ``model.safetensors.index.json``, when the checkpoint has one.
    """
    notes: list[str] = []
    weights = {p: s for p, s in sizes.items() if p.endswith(WEIGHT_SUFFIXES)}
    top_level = {p: s for p, s in weights.items() if "/" not in p}
    if top_level:
        nested = len(weights) - len(top_level)
        if nested:
            notes.append(f"{nested} weight file(s) in subfolders (e.g. original/) not counted: engines load the root")
        weights = top_level
    elif weights:
        notes.append("no weight file at the checkpoint root; counted the ones in subfolders")

    safetensors = {p: s for p, s in weights.items() if p.endswith(".safetensors")}
    if safetensors and len(safetensors) < len(weights):
        notes.append(f"{len(weights) - len(safetensors)} non-safetensors weight file(s) not counted: *.safetensors win")
        weights = safetensors
    if safetensors and safetensors_index:
        listed = {str(name) for name in (safetensors_index.get("weight_map") or {}).values()}
        kept = {p: s for p, s in weights.items() if p in listed}
        if kept and len(kept) < len(weights):
            dropped = sorted(set(weights) - set(kept))
            notes.append(f"not in {SAFETENSORS_INDEX}, not counted: {', '.join(dropped)}")
            weights = kept
    ggufs = [p for p in weights if p.endswith(".gguf")]
    if len(ggufs) > 1:
        notes.append(f"{len(ggufs)} .gguf files summed: stage one quantization (its split parts) only")
    return WeightFiles(total_bytes=sum(weights.values()), files=tuple(sorted(weights)), notes=tuple(notes))
