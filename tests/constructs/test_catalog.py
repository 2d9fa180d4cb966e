"""The GPU instance catalog: data integrity, lookups and resolution with explicit GPU facts."""

from __future__ import annotations

import json
import re

import pytest

from constructs_lib.catalog import DATA_DIR, InstanceSpec, known_instance_types, lookup_instance, resolve_instance

REQUIRED_FAMILIES = {"g5", "g6", "g6e", "g7e", "p4d", "p4de", "p5", "p5e", "p5en"}
INSTANCE_NAME = re.compile(r"^ml\.(?P<family>[a-z0-9-]+)\.(?P<size>\d*xlarge)$")
# Read the file directly, not through the cached loader, so the tests see exactly what ships.
CATALOG = json.loads((DATA_DIR / "instances.json").read_text())


@pytest.fixture
def catalog() -> dict:
    return CATALOG


# --- data integrity ---


def test_required_families_are_present(catalog):
    assert set(catalog["families"]) >= REQUIRED_FAMILIES


@pytest.mark.parametrize("family", sorted(CATALOG["families"]))
def test_family_has_every_fact_and_a_source(catalog, family):
    facts = catalog["families"][family]
    assert isinstance(facts["gpu_model"], str)
    assert facts["gpu_model"].startswith("NVIDIA ")
    assert isinstance(facts["gpu_memory_gib"], (int, float))
    assert facts["gpu_memory_gib"] > 0
    assert isinstance(facts["architecture"], str)
    assert facts["architecture"]
    assert re.fullmatch(r"\d+\.\d+", facts["compute_capability"])
    assert isinstance(facts["local_nvme"], bool)
    assert facts["sources"]
    assert all(isinstance(s, str) and s.strip() for s in facts["sources"])


def test_every_instance_belongs_to_a_known_family(catalog):
    unknown = {name: e["family"] for name, e in catalog["instances"].items() if e["family"] not in catalog["families"]}
    assert unknown == {}


def test_every_instance_name_is_ml_family_size_of_its_own_family(catalog):
    for name, entry in catalog["instances"].items():
        m = INSTANCE_NAME.match(name)
        assert m, f"{name} is not ml.<family>.<size>"
        assert m.group("family") == entry["family"], name


def test_every_instance_has_at_least_one_gpu(catalog):
    bad = {name: e.get("gpu_count") for name, e in catalog["instances"].items() if not (e.get("gpu_count") or 0) >= 1}
    assert bad == {}


def test_every_family_has_instances(catalog):
    used = {e["family"] for e in catalog["instances"].values()}
    assert set(catalog["families"]) == used


def test_known_instance_types_is_sorted_catalog_keys(catalog):
    assert known_instance_types() == sorted(catalog["instances"])


# --- lookup_instance ---


@pytest.mark.parametrize(
    ("instance_type", "gpu_count", "gpu_memory_gib", "gpu_model"),
    [
        ("ml.g6e.12xlarge", 4, 48, "NVIDIA L40S"),
        ("ml.p5.48xlarge", 8, 80, "NVIDIA H100"),
        ("ml.g5.xlarge", 1, 24, "NVIDIA A10G"),
        ("ml.g6.xlarge", 1, 24, "NVIDIA L4"),
        ("ml.p4d.24xlarge", 8, 40, "NVIDIA A100"),
        ("ml.p4de.24xlarge", 8, 80, "NVIDIA A100"),
        ("ml.p5e.48xlarge", 8, 141, "NVIDIA H200"),
    ],
)
def test_lookup_known_instance(instance_type, gpu_count, gpu_memory_gib, gpu_model):
    spec = lookup_instance(instance_type)
    assert spec is not None
    assert spec.instance_type == instance_type
    assert spec.gpu_count == gpu_count
    assert spec.gpu_memory_gib == gpu_memory_gib
    assert spec.total_gpu_memory_gib == gpu_count * gpu_memory_gib
    assert spec.gpu_model == gpu_model
    assert spec.in_catalog is True


def test_lookup_unknown_instance_is_none():
    assert lookup_instance("ml.g9.xlarge") is None
    assert lookup_instance("g6e.12xlarge") is None


def test_g7e_is_blackwell_and_requires_cuda13():
    spec = lookup_instance("ml.g7e.2xlarge")
    assert spec.architecture == "blackwell"
    assert spec.requires_cuda13 is True
    assert spec.supports_cuda13 is True


def test_p3_volta_does_not_support_cuda13():
    spec = lookup_instance("ml.p3.2xlarge")
    assert spec.architecture == "volta"
    assert spec.compute_capability == "7.0"
    assert spec.supports_cuda13 is False
    assert spec.requires_cuda13 is False


@pytest.mark.parametrize("instance_type", ["ml.g6.xlarge", "ml.p5.48xlarge", "ml.g4dn.xlarge", "ml.g5.xlarge"])
def test_pre_blackwell_cuda13_capable_instances_need_neither(instance_type):
    spec = lookup_instance(instance_type)
    assert spec.requires_cuda13 is False
    assert spec.supports_cuda13 is True


# --- resolve_instance ---


def test_resolve_known_instance_has_no_problems():
    spec, problems = resolve_instance("ml.g6e.12xlarge")
    assert problems == []
    assert spec == lookup_instance("ml.g6e.12xlarge")


def test_resolve_unknown_instance_names_key_value_and_suggests_close_match():
    spec, problems = resolve_instance("ml.g6e.12xlrge")
    assert spec is None
    assert len(problems) == 1
    assert "instance_type='ml.g6e.12xlrge'" in problems[0]
    assert "Did you mean ml.g6e.12xlarge" in problems[0]
    assert "gpu_count and gpu_memory_gib" in problems[0]


def test_resolve_unknown_instance_with_only_one_gpu_fact_is_a_problem():
    spec, problems = resolve_instance("ml.g9.xlarge", gpu_count=2)
    assert spec is None
    assert "instance_type='ml.g9.xlarge'" in problems[0]


def test_resolve_unknown_instance_with_gpu_facts_builds_custom_spec():
    spec, problems = resolve_instance("ml.g9.xlarge", gpu_count=2, gpu_memory_gib=40)
    assert problems == []
    assert spec.instance_type == "ml.g9.xlarge"
    assert spec.gpu_count == 2
    assert spec.gpu_memory_gib == 40
    assert spec.total_gpu_memory_gib == 80
    assert spec.in_catalog is False
    assert spec.gpu_model == "unknown"
    assert spec.compute_capability is None


def test_resolve_refuses_facts_that_contradict_the_catalog():
    spec, problems = resolve_instance("ml.g6.xlarge", gpu_count=2, gpu_memory_gib=40)
    assert spec.gpu_count == 1 and spec.gpu_memory_gib == 24
    assert problems == [
        "gpu_count=2 contradicts the catalog: ml.g6.xlarge has 1 (NVIDIA L4); allowed: 1, or leave it unset "
        "(it is meant for instance types the catalog lacks).",
        "gpu_memory_gib=40 contradicts the catalog: ml.g6.xlarge has 24 (NVIDIA L4); allowed: 24, or leave it "
        "unset (it is meant for instance types the catalog lacks).",
    ]


def test_resolve_accepts_facts_that_agree_with_the_catalog():
    spec, problems = resolve_instance("ml.p5.48xlarge", gpu_count=8, gpu_memory_gib=80)
    assert problems == []
    assert (spec.gpu_count, spec.gpu_memory_gib, spec.in_catalog) == (8, 80, True)


def test_resolve_zero_gpus_is_a_problem():
    spec, problems = resolve_instance("ml.g9.xlarge", gpu_count=0, gpu_memory_gib=40)
    assert spec is not None
    assert len(problems) == 1
    assert "gpu_count=0" in problems[0]
    assert "instance_type='ml.g9.xlarge'" in problems[0]


def test_resolve_non_positive_gpu_memory_is_a_problem():
    _, problems = resolve_instance("ml.g9.xlarge", gpu_count=1, gpu_memory_gib=0)
    assert any("gpu_memory_gib=0" in p for p in problems)


# --- accepts_cuda ---

CUDA_12_9 = (12, 9)
CUDA_13_0 = (13, 0)


@pytest.mark.parametrize(
    ("instance_type", "cuda", "accepted"),
    [
        # Blackwell needs CUDA 13.
        ("ml.g7e.2xlarge", CUDA_12_9, False),
        ("ml.g7e.2xlarge", CUDA_13_0, True),
        ("ml.p6-b200.48xlarge", CUDA_12_9, False),
        ("ml.p6-b200.48xlarge", CUDA_13_0, True),
        # Volta cannot run CUDA 13.
        ("ml.p3.2xlarge", CUDA_12_9, True),
        ("ml.p3.2xlarge", CUDA_13_0, False),
        # Turing (7.5) is the lowest that still runs CUDA 13.
        ("ml.g4dn.xlarge", CUDA_12_9, True),
        ("ml.g4dn.xlarge", CUDA_13_0, True),
        # Ampere, Ada and Hopper run both.
        ("ml.g5.xlarge", CUDA_12_9, True),
        ("ml.g5.xlarge", CUDA_13_0, True),
        ("ml.g6e.xlarge", (12, 4), True),
        ("ml.p5.48xlarge", CUDA_13_0, True),
    ],
)
def test_accepts_cuda_matrix(instance_type, cuda, accepted):
    assert lookup_instance(instance_type).accepts_cuda(cuda) is accepted


def test_custom_spec_without_compute_capability_accepts_any_cuda():
    spec = InstanceSpec(instance_type="ml.x.xlarge", gpu_count=1, gpu_memory_gib=16, in_catalog=False)
    assert spec.accepts_cuda(CUDA_12_9)
    assert spec.accepts_cuda(CUDA_13_0)
