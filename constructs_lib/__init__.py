"""Reusable L3 constructs: Hugging Face checkpoints to verified SageMaker GPU endpoints."""

from .catalog import InstanceSpec, lookup_instance, resolve_instance
from .endpoint_plan import EndpointPlan, plan_endpoint
from .engines import EngineSpec, get_engine
from .gpu_endpoint import GpuEndpoint
from .images import ServingImage
from .model_bucket import ModelBucket
from .model_data import ModelSource, S3ModelData, hub_prefix

__all__ = [
    "EndpointPlan",
    "EngineSpec",
    "GpuEndpoint",
    "InstanceSpec",
    "ModelBucket",
    "ModelSource",
    "S3ModelData",
    "ServingImage",
    "get_engine",
    "hub_prefix",
    "lookup_instance",
    "plan_endpoint",
    "resolve_instance",
]
