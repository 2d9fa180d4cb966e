"""GPU instance facts (``data/instances.json``) and their lookup.

The catalog is data: supporting a new instance type means adding a line to the JSON file,
with the page the facts came from, never a branch in code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"

# Architectures whose drivers and kernels need CUDA 13 images (PRODUCT.md section 3).
CUDA13_ARCHITECTURES = frozenset({"blackwell"})
# CUDA 13 dropped GPUs below compute capability 7.5 (Maxwell, Pascal, Volta): they need CUDA 12.
CUDA13_MIN_COMPUTE_CAPABILITY = (7, 5)


@dataclass(frozen=True)
class InstanceSpec:
    """What the rest of the app needs to know about one instance type."""

    instance_type: str
    gpu_count: int
    gpu_memory_gib: float
    gpu_model: str = "unknown"
    architecture: str = "unknown"
    compute_capability: str | None = None
    local_nvme: bool | None = None
    in_catalog: bool = True
    # Host memory of one instance in GiB (the catalog's per-instance EC2 figures); None when unknown.
    memory_gib: float | None = None

    @property
    def total_gpu_memory_gib(self) -> float:
        return self.gpu_count * self.gpu_memory_gib

    @property
    def requires_cuda13(self) -> bool:
        return self.architecture in CUDA13_ARCHITECTURES

    @property
    def supports_cuda13(self) -> bool:
        if self.compute_capability is None:
            return True
        major, minor = (int(x) for x in self.compute_capability.split("."))
        return (major, minor) >= CUDA13_MIN_COMPUTE_CAPABILITY

    def accepts_cuda(self, cuda: tuple[int, int]) -> bool:
        """Whether an image built for CUDA ``cuda`` can run on this instance's GPUs."""
        if self.requires_cuda13 and cuda[0] < 13:
            return False
        return not (cuda[0] >= 13 and not self.supports_cuda13)


@cache
def _catalog() -> dict:
    return json.loads((DATA_DIR / "instances.json").read_text())


def known_instance_types() -> list[str]:
    return sorted(_catalog()["instances"])


def lookup_instance(instance_type: str) -> InstanceSpec | None:
    """The catalog entry for ``instance_type``, or None when the catalog does not know it."""
    data = _catalog()
    entry = data["instances"].get(instance_type)
    if entry is None:
        return None
    family = data["families"][entry["family"]]
    return InstanceSpec(
        instance_type=instance_type,
        gpu_count=entry["gpu_count"],
        gpu_memory_gib=family["gpu_memory_gib"],
        gpu_model=family["gpu_model"],
        architecture=family["architecture"],
        compute_capability=family.get("compute_capability"),
        local_nvme=entry.get("local_nvme", family["local_nvme"]),
        memory_gib=entry.get("memory_gib"),
    )


def resolve_instance(
    instance_type: str,
    *,
    gpu_count: int | None = None,
    gpu_memory_gib: float | None = None,
) -> tuple[InstanceSpec | None, list[str]]:
    """Find ``instance_type`` in the catalog, or build a spec from explicit GPU facts.

    Explicit values are for types the catalog lacks; for a known type they must agree with it.
    Returns the spec (None when it cannot be determined) and a list of problems.
    """
    problems: list[str] = []
    spec = lookup_instance(instance_type)
    if spec is None:
        if gpu_count is None or gpu_memory_gib is None:
            from difflib import get_close_matches

            near = get_close_matches(instance_type, known_instance_types(), n=3, cutoff=0.6)
            hint = f" Did you mean {', '.join(near)}?" if near else ""
            problems.append(
                f"instance_type={instance_type!r} is not in the GPU instance catalog "
                f"(constructs_lib/data/instances.json).{hint} Use a known GPU instance type, "
                "or give both gpu_count and gpu_memory_gib for it."
            )
            return None, problems
        spec = InstanceSpec(
            instance_type=instance_type, gpu_count=gpu_count, gpu_memory_gib=gpu_memory_gib, in_catalog=False
        )
    else:
        # The catalog is the source of truth for the types it knows: a contradicting value would
        # only move the failure from synth to a deploy (wrong tensor parallel size, wrong fit).
        for key, given, known in (
            ("gpu_count", gpu_count, spec.gpu_count),
            ("gpu_memory_gib", gpu_memory_gib, spec.gpu_memory_gib),
        ):
            if given is not None and given != known:
                problems.append(
                    f"{key}={given} contradicts the catalog: {instance_type} has {known} ({spec.gpu_model}); "
                    f"allowed: {known}, or leave it unset (it is meant for instance types the catalog lacks)."
                )
    if spec.gpu_count < 1:
        problems.append(
            f"instance_type={instance_type!r} has gpu_count={spec.gpu_count}: a GPU endpoint needs "
            "an instance with at least one GPU."
        )
    if spec.gpu_memory_gib <= 0:
        problems.append(f"gpu_memory_gib={spec.gpu_memory_gib} must be a positive number of GiB per GPU.")
    return spec, problems
