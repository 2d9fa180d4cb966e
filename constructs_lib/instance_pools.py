"""Instance pools: instance types SageMaker falls back to, in priority order, when the first has no capacity.

"To use instance pools, replace the InstanceType parameter in the production variant with an InstancePools list.
Each entry specifies an instance type and a priority (1 to 5, where 1 is the highest)"; SageMaker "automatically
falls back to the next pool in priority order" on an insufficient capacity error (SageMaker developer guide,
realtime-endpoints-heterogeneous). ``ProductionVariant.InstancePools``: 1-5 items, each ``InstanceType`` and
``Priority`` 1-5, optional ``ModelNameOverride`` (cfn-lint schema of AWS::SageMaker::EndpointConfig; botocore
sagemaker ``InstancePoolList`` max 5, ``InstancePoolPriority`` 1-5).

Here the primary ``instance_type`` is priority 1 and ``instance_pools`` lists up to 4 fallbacks (2, 3, ...). Every
pool serves the same Model (no ``ModelNameOverride``), so each entry must pass the same synth checks as the primary
type with the same settings: catalog membership, the tensor parallel size against its GPUs, the image's CUDA level
against its GPU and the variant's one inference AMI, the weight format against its GPU.

No CDK import: the configuration loader calls it before any construct exists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

MAX_POOLS = 5  # InstancePools maxItems (cfn-lint schema) and InstancePoolList max (botocore sagemaker)
MAX_FALLBACKS = MAX_POOLS - 1  # the primary instance_type takes priority 1


def pool_types(instance_type: str, instance_pools: Sequence[str] | None) -> list[str]:
    """Every instance type of the variant in priority order: the primary, then the fallbacks."""
    return [instance_type, *(instance_pools or ())]


def pool_problems(
    instance_type: str, instance_pools: Sequence[str] | None, check: Callable[[str], list[str]]
) -> list[str]:
    """What is wrong with ``instance_pools``; ``check(pool_type)`` gives the primary type's synth checks for one
    entry (an ``EndpointPlan``'s errors with the primary's settings)."""
    pools = list(instance_pools or ())
    errors: list[str] = []
    if len(pools) > MAX_FALLBACKS:
        errors.append(
            f"instance_pools has {len(pools)} instance types; allowed: at most {MAX_FALLBACKS} beside "
            f"instance_type={instance_type!r} (InstancePools holds {MAX_POOLS}, priorities 1-{MAX_POOLS})."
        )
    seen = {instance_type}
    for index, pool in enumerate(pools):
        if pool in seen:
            errors.append(
                f"instance_pools[{index}]={pool!r} is listed twice (or is instance_type itself); allowed: each "
                "instance type once, in priority order after instance_type."
            )
            continue
        seen.add(pool)
        errors += [f"instance_pools[{index}]={pool!r}: {problem}" for problem in check(pool)]
    return errors


def reservation_pools_problem(instance_pools: Sequence[str] | None, capacity_reservation_arn: str | None) -> str | None:
    """Fallback types beside a capacity reservation, which they could never use.

    The variant runs with ``capacity-reservations-only``: "SageMaker AI launches instances only into an ML capacity
    reservation. If no capacity is available, the instances fail to launch" (API
    ProductionVariantCapacityReservationConfig), and a reservation holds one type: "The InstanceType field set in the
    ProductionVariants section of the CreateEndpointConfig request must match the InstanceType of your training plan"
    (SageMaker developer guide, use-training-plan-for-inference-endpoints-using-api-cli-sdk). So a fallback type finds
    no reserved capacity and fails to launch: the pools would only delay the failure.
    """
    if not instance_pools or not capacity_reservation_arn:
        return None
    return (
        f"instance_pools={list(instance_pools)!r} with capacity_reservation_arn: the variant launches only into the "
        'reservation (capacity-reservations-only: "If no capacity is available, the instances fail to launch"), '
        "which holds one instance type, so the fallback types could never launch; allowed: instance_pools or a "
        "capacity reservation, not both"
    )
