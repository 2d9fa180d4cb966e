"""plan_scaling / resolve_scaling: defaults, and one failing case per rule (no CDK involved)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from constructs_lib import component_plan
from constructs_lib.component_plan import (
    DEFAULT_MIN_MEMORY_MB,
    DEFAULT_TARGET_CONCURRENCY,
    DEFAULT_TARGET_INVOCATIONS_PER_INSTANCE,
    plan_scaling,
    resolve_scaling,
)

IC = "inference-component"
G6E_12 = 4  # GPUs of ml.g6e.12xlarge


def test_module_does_not_import_cdk():
    """Config code calls it before any construct exists: it must stay cheap to import."""
    tree = ast.parse(Path(component_plan.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(name.startswith(("aws_cdk", "constructs", "jsii")) for name in imported)


def test_standard_defaults():
    plan = resolve_scaling(instance_spec_gpu_count=1)
    assert plan.errors == []
    assert (plan.min_instances, plan.initial_instances, plan.max_instances) == (1, 1, 1)
    assert plan.target_invocations_per_instance == DEFAULT_TARGET_INVOCATIONS_PER_INSTANCE
    assert plan.min_copies is None and plan.target_concurrency is None
    assert not plan.scales_instances and not plan.scales_copies


def test_standard_range_scales_instances():
    plan = resolve_scaling(min_instances=1, max_instances=4, target_invocations_per_instance=30)
    assert plan.errors == [] and plan.scales_instances
    assert plan.target_invocations_per_instance == 30


def test_component_defaults_use_every_gpu_and_one_fixed_copy():
    plan = resolve_scaling(deployment_mode=IC, instance_spec_gpu_count=G6E_12)
    assert plan.errors == []
    assert plan.accelerators_per_copy == G6E_12
    assert (plan.min_copies, plan.initial_copies, plan.max_copies) == (1, 1, 1)
    assert plan.target_concurrency == DEFAULT_TARGET_CONCURRENCY
    assert plan.min_memory_mb == DEFAULT_MIN_MEMORY_MB
    assert not plan.scales_copies


def test_component_copies_scale_within_capacity():
    plan = resolve_scaling(
        deployment_mode=IC,
        instance_spec_gpu_count=G6E_12,
        tensor_parallel_size=2,
        max_instances=2,
        max_copies=4,
        target_concurrency=8,
    )
    assert plan.errors == []
    assert plan.accelerators_per_copy == 2 and plan.scales_copies


def test_scale_to_zero_defaults():
    plan = resolve_scaling(deployment_mode=IC, instance_spec_gpu_count=1, scale_to_zero=True)
    assert plan.errors == []
    assert (plan.min_instances, plan.initial_instances, plan.max_instances) == (0, 1, 1)
    assert (plan.min_copies, plan.initial_copies, plan.max_copies) == (0, 1, 1)
    assert plan.scales_copies  # the wake-up policy needs a scalable target even at max 1


def test_endpoint_level_check_skips_copies():
    plan = resolve_scaling(deployment_mode=IC, instance_spec_gpu_count=1, max_instances=3, check_copies=False)
    assert plan.errors == [] and plan.min_copies is None


def test_unknown_gpu_count_skips_capacity_checks():
    assert plan_scaling(deployment_mode=IC, max_copies=50, tensor_parallel_size=8) == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"mode": "serverless"},
            r"deployment_mode='serverless' is not a deployment mode; allowed: standard",
        ),
        ({"scale_to_zero": True}, r"scale_to_zero=true needs deployment_mode='inference-component'"),
        ({"min_instances": 0}, r"min_instances=0 is allowed only with scale_to_zero=true"),
        ({"mode": IC, "scale_to_zero": True, "min_instances": 1}, r"min_instances=1 contradicts scale_to_zero"),
        ({"initial_instances": 0, "min_instances": 0, "mode": IC, "scale_to_zero": True}, r"initial_instances=0"),
        ({"min_instances": 3, "max_instances": 2}, r"max_instances=2 is below min_instances=3; allowed: 3 or more"),
        ({"max_instances": 0}, r"max_instances=0 is below min_instances=1; allowed: 1 or more"),
        # Standard mode: min_instances defaults to initial_instances, capped at max_instances (issue 35 item 3).
        ({"initial_instances": 5, "max_instances": 2}, r"initial_instances=5 is outside min_instances=2 to max"),
        ({"min_instances": -1}, r"min_instances=-1 must be a whole number of instances"),
        ({"max_instances": 1.5}, r"max_instances=1.5 must be a whole number of instances"),
        ({"mode": IC, "accelerators_per_copy": 8}, r"accelerators_per_copy=8 is more than the 4 GPU\(s\)"),
        ({"mode": IC, "accelerators_per_copy": 0}, r"accelerators_per_copy=0 must be a whole number of GPUs"),
        (
            {"mode": IC, "accelerators_per_copy": 2, "tensor_parallel_size": 4},
            r"accelerators_per_copy=2 does not match tensor_parallel_size=4; allowed: 4",
        ),
        ({"mode": IC, "tensor_parallel_size": 8}, r"tensor_parallel_size=8 is more than the 4 GPU"),
        ({"mode": IC, "min_copies": 0}, r"min_copies=0 is allowed only with scale_to_zero=true"),
        ({"mode": IC, "scale_to_zero": True, "min_copies": 1}, r"min_copies=1 contradicts scale_to_zero=true"),
        ({"mode": IC, "min_copies": 2, "initial_copies": 1}, r"0 <= min_copies <= initial_copies <= max_copies"),
        ({"mode": IC, "initial_copies": 3, "max_copies": 2}, r"got min_copies=1, initial_copies=3, max_copies=2"),
        ({"mode": IC, "scale_to_zero": True, "max_copies": 0, "initial_copies": 0}, r"max_copies=0 must be at least 1"),
        ({"mode": IC, "min_copies": -1}, r"min_copies=-1 must be a whole number of copies"),
        (
            {"mode": IC, "tensor_parallel_size": 2, "max_copies": 3, "max_instances": 1},
            r"max_copies=3 copies x 2 GPU\(s\) per copy need 6 GPUs, but max_instances=1 x 4 GPU\(s\) per "
            r"instance give 4; allowed: max_copies up to 2, or raise max_instances to 2",
        ),
        (
            {"mode": IC, "tensor_parallel_size": 4, "initial_copies": 2, "max_copies": 2, "max_instances": 1},
            r"initial_copies=2 copies x 4 GPU\(s\) per copy need 8 GPUs",
        ),
        ({"mode": IC, "target_concurrency": 0}, r"target_concurrency=0 must be a number above 0"),
        ({"mode": IC, "target_concurrency": float("nan")}, r"target_concurrency=nan must be a number above 0"),
        ({"target_invocations_per_instance": -5}, r"target_invocations_per_instance=-5 must be a number above 0"),
        ({"mode": IC, "min_memory_mb": 64}, r"min_memory_mb=64 must be a whole number of MB, 128 or more"),
        ({"mode": IC, "routing_strategy": "ROUND_ROBIN"}, r"routing_strategy='ROUND_ROBIN' is not a routing"),
        ({"max_copies": 2}, r"max_copies=2 applies only with deployment_mode='inference-component'"),
        ({"mode": IC, "target_invocations_per_instance": 10}, r"target_invocations_per_instance=10 applies only"),
    ],
)
def test_each_rule_names_the_key_the_value_and_what_is_allowed(settings, message):
    settings = dict(settings)
    mode = settings.pop("mode", "standard")
    errors = plan_scaling(deployment_mode=mode, instance_spec_gpu_count=G6E_12, **settings)
    assert any(re.search(message, e) for e in errors), errors


@pytest.mark.parametrize(
    ("settings", "max_instances", "update_instances"),
    [
        ({}, 2, 1),  # the default: 1 copy on a 1-GPU instance, and a batch of 1 beside it
        ({"max_copies": 3}, 4, 1),
        ({"max_copies": 3, "update_batch_copies": 2}, 5, 2),
        ({"min_instances": 3}, 3, 0),  # three instances already leave room for the batch
    ],
)
def test_component_default_max_instances_leaves_room_for_an_update_batch(settings, max_instances, update_instances):
    """Issue 28: max instances x GPUs >= (max copies + batch) x accelerators per copy, by default."""
    settings = {"update_batch_copies": 1, **settings}
    plan = resolve_scaling(deployment_mode=IC, instance_spec_gpu_count=1, **settings)
    assert (plan.max_instances, plan.update_instances, plan.errors) == (max_instances, update_instances, [])


def test_a_max_instances_that_leaves_no_room_for_the_batch_is_refused_naming_what_would_work():
    (error,) = plan_scaling(
        deployment_mode=IC, instance_spec_gpu_count=1, max_instances=2, max_copies=2, update_batch_copies=1
    )
    assert "max_instances=2 x 1 GPU(s) per instance give 2 GPUs" in error
    assert "(2 + 1) x 1 GPU(s) per copy = 3 GPUs" in error
    assert "Allowed: max_instances 3 or more" in error and "max_copies at most 1" in error
    # Without a batch to place (no update counted) the same settings fit.
    assert plan_scaling(deployment_mode=IC, instance_spec_gpu_count=1, max_instances=2, max_copies=2) == []


def test_all_problems_are_collected():
    errors = plan_scaling(
        deployment_mode=IC,
        instance_spec_gpu_count=1,
        min_copies=0,
        target_concurrency=-1,
        routing_strategy="X",
        min_memory_mb=1,
    )
    assert len(errors) == 4, errors


def test_plan_scaling_is_resolve_scaling_errors():
    kwargs = {"deployment_mode": IC, "instance_spec_gpu_count": 1, "min_copies": 0}
    assert plan_scaling(**kwargs) == resolve_scaling(**kwargs).errors
