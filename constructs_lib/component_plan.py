"""Pure, synth-time checks for how an endpoint scales: instances, inference-component copies, scale-to-zero.

No CDK import, so the app's configuration loader can call ``plan_scaling`` cheaply, before any
construct exists; ``ComponentEndpoint``, ``InferenceComponent`` and ``GpuEndpoint.autoscale_instances``
call ``resolve_scaling`` for the same checks and the defaults they build from.

Defaults (each applies only when the value is not given):

- ``scale_to_zero``: off.
- ``min_instances``: standard mode: ``initial_instances`` (``instance_count``), so an endpoint autoscales only
  above the count it was given, when ``max_instances`` is larger; inference-component mode: 1; 0 with scale-to-zero.
- ``initial_instances``: 1 (CloudFormation's ``InitialInstanceCount`` is at least 1, even on an
  endpoint that may later scale to zero).
- ``max_instances``: the larger of 1, ``min_instances`` and ``initial_instances``: no growth unless asked. In
  inference-component mode, also enough for every copy plus one update batch beside them:
  max instances x GPUs >= (``max_copies`` + batch) x ``accelerators_per_copy``. An update "provisions capacity on
  the new endpoint fleet, routes traffic to that fleet, and terminates capacity on the old endpoint fleet" per batch
  (API InferenceComponentRollingUpdatePolicy.MaximumBatchSize), so the new copies need GPUs of their own first;
  AWS's rolling-update sample watches SageMaker launch one more instance for it
  (aws-samples/sagemaker-genai-hosting-examples 03-features/deployment/ic_rolling_deployment.ipynb). Managed
  instance scaling adds that instance only while the update runs. A ``max_instances`` that leaves no room is
  refused.
- ``accelerators_per_copy``: the tensor parallel size, else every GPU of the instance.
- ``min_copies``: 1; 0 with scale-to-zero. ``initial_copies``: 1. ``max_copies``: the larger of
  ``min_copies``, ``initial_copies`` and 1: a fixed copy count unless asked.
- ``target_concurrency``: 5 concurrent requests per copy, the value of AWS's own example for
  ``SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution`` (SageMaker developer guide,
  "Define a scaling policy"). A starting point, not a measurement: tune it to the model.
- ``min_memory_mb``: 1024 MB of host memory reserved per copy (see ``DEFAULT_MIN_MEMORY_MB``).
- ``target_backlog_per_instance`` (async mode): 5 queued requests per instance (``ApproximateBacklogSizePerInstance``,
  AWS's example in async-inference-autoscale.html).
- ``min_instances`` in async mode: 0: the endpoint releases every instance while its queue is empty, and a step
  policy on ``HasBacklogWithoutCapacity`` starts one for the first request (a given minimum is kept).
- ``target_invocations_per_instance``: 20 invocations per instance per minute
  (``SageMakerVariantInvocationsPerInstance``), sized for LLM requests that take seconds, not the
  70 of AWS's example for millisecond models. Tune it as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

DEPLOYMENT_MODES = ("standard", "inference-component", "async")
STANDARD = "standard"
INFERENCE_COMPONENT = "inference-component"
# One model on whole instances behind an asynchronous endpoint (AsyncInferenceConfig): requests are queued, answered
# into S3, and the instance count scales on the queue, down to zero ("Autoscale an asynchronous endpoint", SageMaker
# developer guide async-inference-autoscale.html: MinCapacity 0 is allowed for asynchronous endpoints).
ASYNC = "async"
# Target tracking's ApproximateBacklogSizePerInstance: AWS's own example value (async-inference-autoscale.html,
# TargetValue 5.0). A starting point: a long generation per request wants it lower.
DEFAULT_TARGET_BACKLOG_PER_INSTANCE = 5.0
# RoutingConfig.RoutingStrategy values (cfn-lint schema of AWS::SageMaker::EndpointConfig); PREFIX_AWARE also needs
# its PrefixAwareRoutingConfig (serving_features.prefix_routing_problems).
ROUTING_STRATEGIES = ("LEAST_OUTSTANDING_REQUESTS", "RANDOM", "PREFIX_AWARE")
DEFAULT_TARGET_CONCURRENCY = 5.0
DEFAULT_TARGET_INVOCATIONS_PER_INSTANCE = 20.0
# ComputeResourceRequirements.MinMemoryRequiredInMb: host memory SageMaker reserves for a copy when it
# places it (a scheduling reservation, not a limit; the weights live in GPU memory). The schema's floor
# is 128 MB. Requests near the instance's memory are refused ("not enough hardware resources") although
# the instance is healthy, so the default stays small instead of following the checkpoint's size.
DEFAULT_MIN_MEMORY_MB = 1024
MIN_MEMORY_MB_FLOOR = 128

# Settings that only mean something in inference-component mode, and the one that only means
# something in standard mode: given in the other mode they would be silently ignored.
COMPONENT_ONLY = (
    "accelerators_per_copy",
    "min_copies",
    "max_copies",
    "initial_copies",
    "target_concurrency",
    "min_memory_mb",
)
STANDARD_ONLY = ("target_invocations_per_instance",)
ASYNC_ONLY = ("target_backlog_per_instance",)


@dataclass(frozen=True)
class ScalingPlan:
    """Resolved scaling settings (defaults applied) and the problems found, in the house style."""

    deployment_mode: str
    scale_to_zero: bool
    min_instances: int
    initial_instances: int
    max_instances: int
    accelerators_per_copy: int | None = None
    min_copies: int | None = None
    initial_copies: int | None = None
    max_copies: int | None = None
    target_concurrency: float | None = None
    target_invocations_per_instance: float | None = None
    routing_strategy: str | None = None
    min_memory_mb: int | None = None
    target_backlog_per_instance: float | None = None
    # Component mode: instances of max_instances kept for an update's batch (the quota counts them as an update's).
    update_instances: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def scales_instances(self) -> bool:
        """Standard and async mode: whether Application Auto Scaling has a range of instance counts to work in."""
        return self.deployment_mode in (STANDARD, ASYNC) and self.max_instances > self.min_instances

    @property
    def scales_copies(self) -> bool:
        """Component mode: whether the copy count is registered with Application Auto Scaling."""
        return (
            self.deployment_mode == INFERENCE_COMPONENT
            and self.min_copies is not None
            and self.max_copies is not None
            and (self.scale_to_zero or self.max_copies > self.min_copies)
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def resolve_scaling(
    *,
    deployment_mode: str = STANDARD,
    instance_spec_gpu_count: int | None = None,
    tensor_parallel_size: int | None = None,
    accelerators_per_copy: int | None = None,
    min_instances: int | None = None,
    max_instances: int | None = None,
    initial_instances: int | None = None,
    min_copies: int | None = None,
    max_copies: int | None = None,
    initial_copies: int | None = None,
    scale_to_zero: bool = False,
    target_concurrency: float | None = None,
    target_invocations_per_instance: float | None = None,
    routing_strategy: str | None = None,
    min_memory_mb: int | None = None,
    target_backlog_per_instance: float | None = None,
    check_copies: bool | None = None,
    update_batch_copies: int | None = None,
    capacity_reservation: bool = False,
    capacity_reservation_instances: int | None = None,
) -> ScalingPlan:
    """Apply the defaults (module docstring) and check every rule; all problems are collected.

    ``check_copies``: whether the copy settings are checked. Default: in inference-component mode.
    An endpoint that hosts components checks its own settings with ``check_copies=False``; each
    component checks its copies against the endpoint's instances.

    ``update_batch_copies``: copies an update places beside the serving ones (``UpdatePolicy``'s
    ``extra_instances_for_component_update``). Default: none counted.

    ``capacity_reservation``: the endpoint runs on reserved capacity only (``capacity-reservations-only``, API
    CapacityReservationConfig), so in component mode the instances the copies and an update's batch need must fit
    in the reservation too; its size cannot be read at synth, so it is given (``capacity_reservation_instances``).
    """
    errors: list[str] = []
    mode = deployment_mode
    if mode not in DEPLOYMENT_MODES:
        errors.append(f"deployment_mode={mode!r} is not a deployment mode; allowed: {', '.join(DEPLOYMENT_MODES)}.")
    component_mode = mode == INFERENCE_COMPONENT
    if check_copies is None:
        check_copies = component_mode

    given = {
        "accelerators_per_copy": accelerators_per_copy,
        "min_copies": min_copies,
        "max_copies": max_copies,
        "initial_copies": initial_copies,
        "target_concurrency": target_concurrency,
        "routing_strategy": routing_strategy,
        "min_memory_mb": min_memory_mb,
        "target_invocations_per_instance": target_invocations_per_instance,
        "target_backlog_per_instance": target_backlog_per_instance,
    }
    async_mode = mode == ASYNC
    if mode in (STANDARD, ASYNC):
        for key in COMPONENT_ONLY:
            if given[key] is not None:
                errors.append(
                    f"{key}={given[key]!r} applies only with deployment_mode='inference-component' (this is "
                    f"deployment_mode={mode!r}, where one model uses whole instances); leave it unset or switch modes."
                )
    if mode != ASYNC:
        for key in ASYNC_ONLY:
            if given[key] is not None:
                errors.append(
                    f"{key}={given[key]!r} applies only with deployment_mode='async' (the queue it tracks exists only "
                    f"on an asynchronous endpoint; this is deployment_mode={mode!r}); leave it unset or switch modes."
                )
    if async_mode:
        for key in STANDARD_ONLY:
            if given[key] is not None:
                errors.append(
                    f"{key}={given[key]!r} applies only with deployment_mode='standard'; an asynchronous endpoint "
                    "scales on its queue (target_backlog_per_instance), not on invocations per minute."
                )
        if routing_strategy is not None:
            errors.append(
                f"routing_strategy={routing_strategy!r}: an asynchronous endpoint takes requests from its queue, "
                "there is no request routing to choose; leave it unset."
            )
    elif component_mode:
        for key in STANDARD_ONLY:
            if given[key] is not None:
                errors.append(
                    f"{key}={given[key]!r} applies only with deployment_mode='standard'; with "
                    "deployment_mode='inference-component' the copy count scales (target_concurrency) and SageMaker "
                    "adds or removes instances for the copies (min_instances, max_instances)."
                )
    if scale_to_zero and async_mode:
        errors.append(
            "scale_to_zero=true is for inference components; an asynchronous endpoint scales to zero with "
            "min_instances=0 (its queue wakes it); allowed: false, with min_instances=0."
        )
    elif scale_to_zero and not component_mode:
        errors.append(
            f"scale_to_zero=true needs deployment_mode='inference-component' (this is deployment_mode={mode!r}): "
            "SageMaker scales an endpoint to zero instances only when it hosts inference components, or with "
            "deployment_mode='async' and min_instances=0 on its queue."
        )

    # --- instances ---
    bad_instances = [
        f"{key}={value!r} must be a whole number of instances, 0 or more."
        for key, value in (
            ("min_instances", min_instances),
            ("max_instances", max_instances),
            ("initial_instances", initial_instances),
        )
        if value is not None and (not _is_int(value) or value < 0)
    ]
    if bad_instances:
        return ScalingPlan(mode, scale_to_zero, 1, 1, 1, errors=errors + bad_instances)

    if min_instances is not None:
        min_i = min_instances
    elif scale_to_zero or async_mode:
        # An asynchronous endpoint releases every instance while its queue is empty unless told to keep some.
        min_i = 0
    elif not component_mode and initial_instances is not None:
        # Standard mode scales only when max_instances is above instance_count: a minimum of 1 would let an idle
        # endpoint of 2 lose its second Availability Zone and make every rolling batch of 1 100 % of the variant.
        min_i = max(1, min(initial_instances, max_instances if max_instances is not None else initial_instances))
    else:
        min_i = 1
    init_i = initial_instances if initial_instances is not None else max(1, min_i)
    max_i = max_instances if max_instances is not None else max(1, min_i, init_i)
    if min_i == 0 and not scale_to_zero and not async_mode:
        errors.append(
            "min_instances=0 is allowed only with scale_to_zero=true (an endpoint at zero instances needs the "
            "wake-up alarm that scale-to-zero adds) or deployment_mode='async' (its queue wakes it); allowed: 1 or "
            "more, or set scale_to_zero."
        )
    if scale_to_zero and min_i != 0:
        errors.append(
            f"min_instances={min_i} contradicts scale_to_zero=true, which lets the endpoint release every "
            "instance; allowed: 0, or leave it unset."
        )
    if init_i < 1:
        errors.append(
            f"initial_instances={init_i} must be at least 1: CloudFormation starts every endpoint with one or "
            "more instances, even one that may later scale to zero."
        )
    if max_i < max(1, min_i):
        errors.append(f"max_instances={max_i} is below min_instances={min_i}; allowed: {max(1, min_i)} or more.")
    elif not min_i <= init_i <= max_i:
        errors.append(
            f"initial_instances={init_i} is outside min_instances={min_i} to max_instances={max_i}; allowed: a "
            "value in that range (autoscaling would move it there at once)."
        )

    # --- copies (inference-component mode) ---
    gpus = instance_spec_gpu_count
    acc = min_c = init_c = max_c = memory = None
    update_i = 0
    target_c = target_inv = None
    if component_mode and check_copies:
        acc = (
            accelerators_per_copy
            if accelerators_per_copy is not None
            else (tensor_parallel_size if tensor_parallel_size is not None else gpus)
        )
        # Name the setting the value came from: a construct gives only the tensor parallel size.
        acc_key = "accelerators_per_copy" if accelerators_per_copy is not None else "tensor_parallel_size"
        if acc is not None and (not _is_int(acc) or acc < 1):
            errors.append(f"{acc_key}={acc!r} must be a whole number of GPUs, 1 or more.")
            acc = None
        if acc is not None and gpus is not None and acc > gpus:
            errors.append(
                f"{acc_key}={acc} is more than the {gpus} GPU(s) of one instance; allowed: 1 to {gpus} "
                "(a copy's GPUs are on one instance)."
            )
        if acc is not None and tensor_parallel_size is not None and acc != tensor_parallel_size:
            errors.append(
                f"accelerators_per_copy={acc} does not match tensor_parallel_size={tensor_parallel_size}; allowed: "
                f"{tensor_parallel_size} (the engine shards the model over exactly the GPUs a copy is given), or "
                "leave it unset."
            )
        bad_copies = False
        for key, value in (("min_copies", min_copies), ("max_copies", max_copies), ("initial_copies", initial_copies)):
            if value is not None and (not _is_int(value) or value < 0):
                errors.append(f"{key}={value!r} must be a whole number of copies, 0 or more.")
                bad_copies = True
        if not bad_copies:
            min_c = min_copies if min_copies is not None else (0 if scale_to_zero else 1)
            init_c = initial_copies if initial_copies is not None else max(1, min_c)
            max_c = max_copies if max_copies is not None else max(1, min_c, init_c)
            if min_c == 0 and not scale_to_zero:
                errors.append(
                    "min_copies=0 is allowed only with scale_to_zero=true (without the wake-up alarm a component at "
                    "zero copies never serves again); allowed: 1 or more, or set scale_to_zero."
                )
            if scale_to_zero and min_c != 0:
                errors.append(f"min_copies={min_c} contradicts scale_to_zero=true; allowed: 0, or leave it unset.")
            if max_c < 1:
                errors.append(f"max_copies={max_c} must be at least 1, or the component can never serve.")
            elif not min_c <= init_c <= max_c:
                errors.append(
                    f"copies must satisfy 0 <= min_copies <= initial_copies <= max_copies; got min_copies={min_c}, "
                    f"initial_copies={init_c}, max_copies={max_c}."
                )
            batch = update_batch_copies or 0
            if acc is not None and gpus is not None and gpus >= 1 and max_i >= 1 and max_c >= 1:
                serving = max(1, min_i, init_i, math.ceil(max_c * acc / gpus))
                if max_instances is None:
                    # The default leaves room for every copy and one update batch beside them (module docstring).
                    max_i = max(serving, math.ceil((max_c + batch) * acc / gpus))
                    update_i = max_i - serving
                capacity = max_i * gpus
                fits = True
                for key, copies in (("max_copies", max_c), ("initial_copies", init_c)):
                    if copies * acc > capacity:
                        errors.append(
                            f"{key}={copies} copies x {acc} GPU(s) per copy need {copies * acc} GPUs, but "
                            f"max_instances={max_i} x {gpus} GPU(s) per instance give {capacity}; allowed: "
                            f"{key} up to {capacity // acc}, or raise max_instances to "
                            f"{math.ceil(copies * acc / gpus)}."
                        )
                        fits = False
                if fits and batch and (problem := rolling_room_problem(max_i, gpus, max_c, batch, acc)):
                    errors.append(problem)
                if fits and check_copies and capacity_reservation:
                    errors += reservation_room_problems(
                        capacity_reservation_instances,
                        gpus=gpus,
                        serving=serving,
                        max_copies=max_c,
                        batch=batch,
                        accelerators=acc,
                    )
        memory = min_memory_mb if min_memory_mb is not None else DEFAULT_MIN_MEMORY_MB
        if not _is_int(memory) or memory < MIN_MEMORY_MB_FLOOR:
            errors.append(
                f"min_memory_mb={min_memory_mb!r} must be a whole number of MB, {MIN_MEMORY_MB_FLOOR} or more (host "
                "memory reserved per copy; it does not limit what the copy uses)."
            )
        target_c = target_concurrency if target_concurrency is not None else DEFAULT_TARGET_CONCURRENCY
        if not _positive(target_c):
            errors.append(
                f"target_concurrency={target_concurrency!r} must be a number above 0 (concurrent requests per copy "
                "that autoscaling aims for)."
            )
    if mode == STANDARD:
        target_inv = (
            target_invocations_per_instance
            if target_invocations_per_instance is not None
            else DEFAULT_TARGET_INVOCATIONS_PER_INSTANCE
        )
        if not _positive(target_inv):
            errors.append(
                f"target_invocations_per_instance={target_invocations_per_instance!r} must be a number above 0 "
                "(invocations per instance per minute that autoscaling aims for)."
            )
    target_backlog = None
    if async_mode:
        target_backlog = (
            target_backlog_per_instance
            if target_backlog_per_instance is not None
            else DEFAULT_TARGET_BACKLOG_PER_INSTANCE
        )
        if not _positive(target_backlog):
            errors.append(
                f"target_backlog_per_instance={target_backlog_per_instance!r} must be a number above 0 (queued "
                "requests per instance that autoscaling aims for)."
            )
    if routing_strategy is not None and routing_strategy not in ROUTING_STRATEGIES:
        errors.append(
            f"routing_strategy={routing_strategy!r} is not a routing strategy; allowed: "
            f"{', '.join(ROUTING_STRATEGIES)}."
        )

    return ScalingPlan(
        deployment_mode=mode,
        scale_to_zero=scale_to_zero,
        min_instances=min_i,
        initial_instances=init_i,
        max_instances=max_i,
        accelerators_per_copy=acc,
        min_copies=min_c,
        initial_copies=init_c,
        max_copies=max_c,
        target_concurrency=target_c,
        target_invocations_per_instance=target_inv,
        routing_strategy=routing_strategy,
        min_memory_mb=memory,
        target_backlog_per_instance=target_backlog,
        update_instances=update_i,
        errors=errors,
    )


def rolling_room_problem(max_instances: int, gpus: int, max_copies: int, batch: int, accelerators: int) -> str | None:
    """Why ``max_instances`` leaves no room for an update's batch of copies beside ``max_copies``, or None.

    Each batch's new copies are provisioned before old ones are removed (API InferenceComponentRollingUpdatePolicy
    MaximumBatchSize), so max_instances x GPUs must hold (max_copies + batch) x accelerators per copy.
    """
    needed = (max_copies + batch) * accelerators
    capacity = max_instances * gpus
    if needed <= capacity:
        return None
    fits = capacity // accelerators - batch
    lower = f", max_copies at most {fits}" if fits >= 1 else ""
    return (
        f"max_instances={max_instances} x {gpus} GPU(s) per instance give {capacity} GPUs, and an update places its "
        f"batch of {batch} new cop{'y' if batch == 1 else 'ies'} (update_step_size) beside the max_copies="
        f"{max_copies} serving ones before removing any (API InferenceComponentRollingUpdatePolicy): ({max_copies} + "
        f"{batch}) x {accelerators} GPU(s) per copy = {needed} GPUs, so every update would wait for room until it "
        f"times out. Allowed: max_instances {math.ceil(needed / gpus)} or more (or leave it unset: the default leaves "
        f"this room, and managed instance scaling adds the instance only while an update runs){lower}."
    )


def reservation_room_problems(
    reservation_instances: int | None, *, gpus: int, serving: int, max_copies: int, batch: int, accelerators: int
) -> list[str]:
    """What a capacity reservation of ``reservation_instances`` lacks for a component endpoint: the instances its
    serving copies need, and those plus an update's batch of new copies (rolling_room_problem's rule, with the
    reservation as the limit: on reserved capacity only, SageMaker cannot launch beyond it, API
    CapacityReservationConfig ``capacity-reservations-only``)."""
    needed = max(serving, math.ceil((max_copies + batch) * accelerators / gpus))
    update = (
        f"and an update places its batch of {batch} new cop{'y' if batch == 1 else 'ies'} beside the max_copies="
        f"{max_copies} serving ones (API InferenceComponentRollingUpdatePolicy)"
        if batch
        else f"for max_copies={max_copies}"
    )
    what = f"({max_copies} + {batch}) x {accelerators} GPU(s) per copy on {gpus}-GPU instances need {needed} instances"
    if reservation_instances is None:
        return [
            f"capacity_reservation_arn: the endpoint runs on reserved capacity only, {update}: {what}, and the "
            "reservation's size is not known at synth; set capacity_reservation_instances to the instances the "
            f"reservation holds (allowed: {needed} or more)"
        ]
    if reservation_instances < needed:
        stuck = (
            "every update would wait for room until it times out"
            if batch and reservation_instances * gpus >= max_copies * accelerators
            else "the copies could never all be placed"
        )
        return [
            f"capacity_reservation_instances={reservation_instances}: the endpoint runs on reserved capacity only, "
            f"{update}: {what}, so {stuck}; allowed: a reservation of {needed} or more instances, or fewer max_copies"
        ]
    return []


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def plan_scaling(**settings: Any) -> list[str]:
    """Every problem with these scaling settings (empty when usable): ``resolve_scaling``'s arguments, None
    meaning "not given".

    Rules: ``deployment_mode`` is standard, inference-component or async; async allows ``min_instances`` 0 and
    takes ``target_backlog_per_instance``, no routing strategy; scale-to-zero needs
    inference-component mode and means ``min_instances`` 0 and ``min_copies`` 0, which nothing else
    allows; ``initial_instances`` >= 1; ``min_instances`` <= ``initial_instances`` <= ``max_instances``
    and ``max_instances`` >= 1; a copy's accelerators are at most one instance's GPUs and equal the
    tensor parallel size; 0 <= ``min_copies`` <= ``initial_copies`` <= ``max_copies``, ``max_copies``
    >= 1; ``max_copies`` (and ``initial_copies``) x accelerators fit in ``max_instances`` x GPUs per
    instance; targets are numbers above 0; ``min_memory_mb`` >= 128; ``routing_strategy`` is
    LEAST_OUTSTANDING_REQUESTS or RANDOM; settings of the other mode are refused rather than ignored.
    """
    return resolve_scaling(**settings).errors


def host_memory_problem(instance_type: str, memory_gib: float | None, min_memory_mb: int | None) -> str | None:
    """Why one copy's host memory reservation cannot be placed on ``instance_type``, or None.

    ``MinMemoryRequiredInMb`` is "the minimum amount of memory" a copy needs (API reference
    InferenceComponentComputeResourceRequirements): SageMaker places a copy only on an instance that has it, so a
    reservation above the instance's memory (constructs_lib/data/instances.json, EC2 figures) is never placed.
    """
    if memory_gib is None or not _is_int(min_memory_mb) or min_memory_mb <= memory_gib * 1024:
        return None
    return (
        f"min_memory_mb={min_memory_mb} is more than the {memory_gib:g} GiB ({memory_gib * 1024:g} MB) of host memory "
        f"of {instance_type}: SageMaker would never place a copy there; allowed: at most {int(memory_gib * 1024)}, "
        f"or leave it unset ({DEFAULT_MIN_MEMORY_MB} MB)."
    )
