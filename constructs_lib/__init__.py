"""Reusable L3 constructs: Hugging Face checkpoints to verified SageMaker GPU endpoints."""

from .catalog import InstanceSpec, lookup_instance, resolve_instance
from .component_plan import ScalingPlan, plan_scaling, resolve_scaling
from .endpoint_plan import EndpointPlan, plan_endpoint
from .engines import EngineSpec, get_engine
from .gpu_endpoint import GpuEndpoint
from .images import ServingImage
from .inference_component import ComponentEndpoint, InferenceComponent
from .model_bucket import ModelBucket
from .model_data import ModelSource, S3ModelData, hub_prefix
from .preflight_check import DeploymentPreflight
from .smoke_test import EndpointSmokeTest
from .staged_checkpoint import StagedCheckpoint

__all__ = [
    "ComponentEndpoint",
    "DeploymentPreflight",
    "EndpointPlan",
    "EndpointSmokeTest",
    "EngineSpec",
    "GpuEndpoint",
    "InferenceComponent",
    "InstanceSpec",
    "ModelBucket",
    "ModelSource",
    "S3ModelData",
    "ScalingPlan",
    "ServingImage",
    "StagedCheckpoint",
    "get_engine",
    "hub_prefix",
    "lookup_instance",
    "plan_endpoint",
    "plan_scaling",
    "resolve_instance",
    "resolve_scaling",
]
