"""Pure, synth-time checks and derived settings for a GPU endpoint (no CDK objects).

``plan_endpoint`` is called by ``GpuEndpoint`` and, earlier, by the app's configuration loader,
so a wrong combination of settings fails ``cdk synth`` in one message, before any deploy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .catalog import InstanceSpec, resolve_instance
from .engines import EngineSpec, build_environment, environment_warnings, loading_timeout_problems
from .format_guard import synth_format_check
from .images import ServingImage, ami_cuda, default_ami_for_cuda, known_ami_versions
from .names import ENDPOINT_NAME, matches

# SageMaker's bounds for ModelDataDownloadTimeoutInSeconds / ContainerStartupHealthCheckTimeoutInSeconds.
TIMEOUT_RANGE = (60, 3600)
RESERVATION_ARN = re.compile(r"arn:aws(?:-[a-z]+)*:sagemaker:[a-z0-9-]+:\d{12}:[a-z-]+/[\x21-\x7e]+", re.ASCII)


@dataclass(frozen=True)
class EndpointPlan:
    instance: InstanceSpec | None
    tensor_parallel_size: int | None
    environment: dict[str, str]
    inference_ami_version: str | None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def fmt_cuda(cuda: tuple[int, int] | None) -> str:
    return "unknown" if cuda is None else f"{cuda[0]}.{cuda[1]}"


def plan_endpoint(
    *,
    engine: EngineSpec,
    image: ServingImage,
    instance_type: str,
    instance_count: int = 1,
    gpu_count: int | None = None,
    gpu_memory_gib: float | None = None,
    tensor_parallel_size: int | None = None,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    engine_env: Mapping[str, Any] | None = None,
    container_env: Mapping[str, Any] | None = None,
    inference_ami_version: str | None = None,
    capacity_reservation_arn: str | None = None,
    startup_timeout_s: int | None = None,
    download_timeout_s: int | None = None,
    endpoint_name: str | None = None,
    volume_kms_key: bool = False,
    allow_checkpoint_code: bool = False,
) -> EndpointPlan:
    errors: list[str] = []
    warnings: list[str] = []

    instance, problems = resolve_instance(instance_type, gpu_count=gpu_count, gpu_memory_gib=gpu_memory_gib)
    errors += problems

    if instance_count < 1:
        errors.append(f"instance_count={instance_count} must be at least 1.")

    tp = tensor_parallel_size
    if instance is not None and instance.gpu_count >= 1:
        if tp is None:
            tp = instance.gpu_count
        elif tp != instance.gpu_count:
            errors.append(
                f"tensor_parallel_size={tp} does not match instance_type={instance_type!r}, which has "
                f"{instance.gpu_count} GPU(s); allowed: {instance.gpu_count} (one model uses every GPU of "
                "the instance in standard mode), or leave it unset. To give a model fewer GPUs than the instance has "
                f"(or run {instance.gpu_count // tp if tp and instance.gpu_count % tp == 0 else 'several'} copies on "
                f"it), use deployment_mode=inference-component with accelerators_per_copy={tp}."
            )
    if tp is not None and tp < 1:
        errors.append(f"tensor_parallel_size={tp} must be at least 1.")

    for name, value in (("max_model_len", max_model_len), ("max_num_seqs", max_num_seqs)):
        if value is not None and value < 1:
            errors.append(f"{name}={value} must be a positive integer.")

    for name, value in (("startup_timeout_s", startup_timeout_s), ("download_timeout_s", download_timeout_s)):
        if value is not None and not TIMEOUT_RANGE[0] <= value <= TIMEOUT_RANGE[1]:
            errors.append(
                f"{name}={value} is outside what SageMaker accepts; allowed: {TIMEOUT_RANGE[0]} to "
                f"{TIMEOUT_RANGE[1]} seconds."
            )

    environment, env_problems = build_environment(
        engine,
        tensor_parallel_size=tp or 1,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        engine_env=engine_env or {},
        container_env=container_env or {},
        allow_checkpoint_code=allow_checkpoint_code,
    )
    errors += env_problems
    if startup_timeout_s is not None and TIMEOUT_RANGE[0] <= startup_timeout_s <= TIMEOUT_RANGE[1]:
        timeout_errors, timeout_warnings = loading_timeout_problems(engine, environment, startup_timeout_s)
        errors += timeout_errors
        warnings += timeout_warnings
    warnings += environment_warnings(
        engine, engine_env or {}, container_env or {}, allow_checkpoint_code=allow_checkpoint_code
    )
    if instance is not None and engine_env:
        # Weight format against GPU, when engine_env states it (preflight/data/weight_formats.json).
        formats = synth_format_check(engine.name, engine.env_prefix, instance, engine_env, engine.preflight_keys)
        errors += formats.problems
        warnings += formats.warnings

    # Image, CUDA level and the inference AMI whose driver runs it.
    cuda = image.cuda
    shown = image.describe()
    if not image.is_pinned:
        warnings.append(
            f"{shown} uses a floating tag: the image can change under a redeploy. Pin a versioned "
            f"tag ({engine.tag_format}) or a digest; python -m llmops.resolve_image finds the newest one."
        )
    ami = inference_ami_version
    if ami is not None:
        if ami not in known_ami_versions():
            errors.append(
                f"inference_ami_version={ami!r} is not a known GPU inference AMI; allowed: "
                f"{', '.join(known_ami_versions())}."
            )
        elif cuda is not None and ami_cuda(ami)[0] < cuda[0]:
            errors.append(
                f"inference_ami_version={ami!r} ships CUDA {fmt_cuda(ami_cuda(ami))} but {shown} is "
                f"built for CUDA {fmt_cuda(cuda)}; allowed: {default_ami_for_cuda(cuda)} (or leave it unset)."
            )
    else:
        ami = default_ami_for_cuda(cuda)
        if cuda is None:
            warnings.append(
                f"the CUDA level of {shown} is unknown (no cuNNN in its tag), so SageMaker's default "
                "inference AMI is used; set inference_ami_version if the image needs a newer driver."
            )

    if instance is not None and cuda is not None and not instance.accepts_cuda(cuda):
        need = "a CUDA 13 (cu130) image" if instance.requires_cuda13 else "a CUDA 12 image (CUDA 13 dropped it)"
        errors.append(
            f"instance_type={instance_type!r} ({instance.gpu_model}, {instance.architecture}, compute capability "
            f"{instance.compute_capability}) needs {need}, but {shown} is built for CUDA {fmt_cuda(cuda)}."
        )
    if instance is not None and instance.requires_cuda13 and cuda is None:
        warnings.append(
            f"instance_type={instance_type!r} is a {instance.architecture} GPU that needs CUDA 13; the CUDA "
            f"level of {shown} cannot be read from its tag."
        )

    if volume_kms_key and instance is not None and instance.local_nvme:
        errors.append(
            f"a volume KMS key cannot be used with instance_type={instance_type!r}: it has local NVMe "
            "storage, which is hardware-encrypted, and SageMaker rejects KmsKeyId for it."
        )

    if endpoint_name is not None and (len(endpoint_name) > 63 or not matches(ENDPOINT_NAME, endpoint_name)):
        errors.append(
            f"endpoint_name={endpoint_name!r} is not a valid SageMaker endpoint name; allowed: 1-63 letters, "
            "digits and hyphens, starting and ending with a letter or digit."
        )
    if capacity_reservation_arn is not None and not matches(RESERVATION_ARN, capacity_reservation_arn):
        errors.append(
            f"capacity_reservation_arn={capacity_reservation_arn!r} is not a SageMaker capacity reservation "
            "ARN (arn:aws:sagemaker:<region>:<account>:<type>/<name>)."
        )

    return EndpointPlan(
        instance=instance,
        tensor_parallel_size=tp,
        environment=environment,
        inference_ami_version=ami,
        errors=errors,
        warnings=warnings,
    )
