"""Serving images that CDK builds from a folder of this repository (``containers/<engine>``).

An engine whose data has ``image_build`` (llama.cpp) gets its image as an ``aws_ecr_assets.DockerImageAsset``:
``cdk synth`` only stages the folder into ``cdk.out`` (no Docker needed); ``cdk deploy`` builds it with the
deployer's Docker and pushes it to the CDK bootstrap's asset repository. The CUDA architectures are a build
argument taken from the instance type's compute capability (``data/instances.json``), so the image carries
code for exactly the GPU it will run on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

from ._assets import asset_folder
from .catalog import lookup_instance
from .engines import EngineSpec
from .images import ServingImage

ASSET_ID = "ServingImageAsset"
# Every compute capability of the catalog, for an instance type whose own is unknown (a slower build).
ALL_ARCHITECTURES = "75;80;86;89;90;100;103;120"


def cuda_architectures(instance_type: str | None) -> str:
    """``8.6`` -> ``86``: the CMAKE_CUDA_ARCHITECTURES value for the instance type's GPU."""
    instance = lookup_instance(instance_type) if instance_type else None
    capability = instance.compute_capability if instance is not None else None
    return capability.replace(".", "") if capability else ALL_ARCHITECTURES


@dataclass(frozen=True)
class AssetImage(ServingImage):
    """An image built from ``directory`` during ``cdk deploy``: one asset per stack and build arguments."""

    directory: str = ""
    build_args: tuple[tuple[str, str], ...] = ()
    cuda_level: tuple[int, int] | None = None

    @classmethod
    def for_engine(cls, engine: EngineSpec, instance_type: str | None) -> AssetImage:
        build = dict(engine.image_build or {})
        major, minor = (int(x) for x in build["cuda"].split("."))
        args = ((build["architectures_build_arg"], cuda_architectures(instance_type)),)
        return cls(
            repository=engine.repository,
            directory=build["directory"],
            build_args=args,
            cuda_level=(major, minor),
            origin=f"the {engine.name} image built from {build['directory']}",
        )

    @property
    def cuda(self) -> tuple[int, int] | None:
        return self.cuda_level

    @property
    def is_pinned(self) -> bool:
        """Built from a pinned commit on digest-pinned base images (the Dockerfile's own pins)."""
        return True

    def describe(self) -> str:
        return f"{self.origin} ({', '.join(f'{k}={v}' for k, v in self.build_args)})"

    def asset(self, scope: Construct) -> ecr_assets.DockerImageAsset:
        """The stack's image asset, created on first use (the Model and the stack output share it)."""
        stack = cdk.Stack.of(scope)
        existing = stack.node.try_find_child(ASSET_ID)
        if isinstance(existing, ecr_assets.DockerImageAsset):
            return existing
        return ecr_assets.DockerImageAsset(
            stack,
            ASSET_ID,
            directory=str(asset_folder("containers") / Path(self.directory).relative_to("containers")),
            build_args=dict(self.build_args),
            # SageMaker hosting runs x86-64 instances for these GPU families.
            platform=ecr_assets.Platform.LINUX_AMD64,
        )

    def image_uri(self, scope: Construct) -> str:
        return self.asset(scope).image_uri

    def repository_arn(self, scope: Construct) -> str:
        return self.asset(scope).repository.repository_arn


def default_image(engine: EngineSpec, instance_type: str | None = None) -> ServingImage:
    """The image an engine serves from when none is given: built from this repository, or its pinned DLC."""
    if engine.image_build:
        return AssetImage.for_engine(engine, instance_type)
    return ServingImage.from_dlc(engine)
