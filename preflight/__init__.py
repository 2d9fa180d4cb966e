"""Preflight checks that run before any GPU is paid for. Standard library only: bundled into a Lambda."""

from .memory_fit import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    GB,
    GIB,
    KV_CACHE_DTYPES,
    AttentionLayout,
    MemoryFit,
    Overhead,
    attention_layout,
    estimate_memory_fit,
    format_table,
    text_config,
    tp_divides_heads,
)
from .weights import WEIGHT_SUFFIXES, WeightFiles, select_weight_files

# The preflight's checks, in the order they run: what skip_checks / preflight_skip may name (one list for the
# construct, the handler and the context key).
CHECKS = ("s3", "memory", "context", "tensor-parallel", "quota", "format", "network")

__all__ = [
    "CHECKS",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "GB",
    "GIB",
    "KV_CACHE_DTYPES",
    "WEIGHT_SUFFIXES",
    "AttentionLayout",
    "MemoryFit",
    "Overhead",
    "WeightFiles",
    "attention_layout",
    "estimate_memory_fit",
    "format_table",
    "select_weight_files",
    "text_config",
    "tp_divides_heads",
]
