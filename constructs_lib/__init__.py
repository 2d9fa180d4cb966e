"""Reusable L3 constructs: Hugging Face checkpoints to verified SageMaker GPU endpoints.

This module is the library's public surface: every construct and every type a user passes or gets back. The rules
and planners the constructs check their props with are the other public module, ``constructs_lib.rules`` (for an
app that checks its own settings first, as ``constructs_lib.deployment`` does); whole deployments and fleets from
settings are ``constructs_lib.deployment``. Everything else is internal and may change. Reference: docs/constructs/.
"""

import importlib
import warnings
from typing import Any

from .adapter_component import AdapterComponent
from .async_inference import AsyncInference, AsyncQueue
from .catalog import InstanceSpec
from .engines import EngineSpec, get_engine
from .gguf_file import staging_patterns
from .gpu_endpoint import GpuEndpoint
from .image_asset import AssetImage
from .image_check import ServingImageCheck
from .images import ServingImage
from .imported import ImportedComponent, ImportedComponentEndpoint, ImportedEndpoint
from .inference_component import ComponentEndpoint, InferenceComponent
from .keys import encrypt_logs_and_functions, logs_key_policy_statement
from .load_gate import LoadGate
from .model_bucket import ModelBucket, app_bucket_name
from .model_data import ModelSource, S3ModelData, hub_prefix
from .monitoring import AlarmThresholds, AlarmTopic, Monitor, Watched
from .network import FUNCTION_ENDPOINTS, VpcPlacement, place_functions_in_vpc
from .preflight_check import DeploymentPreflight
from .problems import Refusal
from .smoke_test import EndpointSmokeTest
from .staged_checkpoint import StagedCheckpoint
from .update_policy import UpdatePolicy

__all__ = [
    "FUNCTION_ENDPOINTS",
    "AdapterComponent",
    "AlarmThresholds",
    "AlarmTopic",
    "AssetImage",
    "AsyncInference",
    "AsyncQueue",
    "ComponentEndpoint",
    "DeploymentPreflight",
    "EndpointSmokeTest",
    "EngineSpec",
    "GpuEndpoint",
    "ImportedComponent",
    "ImportedComponentEndpoint",
    "ImportedEndpoint",
    "InferenceComponent",
    "InstanceSpec",
    "LoadGate",
    "ModelBucket",
    "ModelSource",
    "Monitor",
    "Refusal",
    "S3ModelData",
    "ServingImage",
    "ServingImageCheck",
    "StagedCheckpoint",
    "UpdatePolicy",
    "VpcPlacement",
    "Watched",
    "app_bucket_name",
    "encrypt_logs_and_functions",
    "get_engine",
    "hub_prefix",
    "logs_key_policy_statement",
    "place_functions_in_vpc",
    "staging_patterns",
]

# The monitoring mixins of 0.2.0: the hosting constructs now own a Monitor (composition), so these have no successor
# to alias.
_REMOVED = {
    "MonitoredEndpoint": "GpuEndpoint.monitor (a Monitor)",
    "MonitoredComponent": "InferenceComponent.monitor (a Monitor)",
    "MonitoredComponentEndpoint": "ComponentEndpoint.monitor (a Monitor)",
}


def __getattr__(name: str) -> Any:
    """The rules and planners this module exported in 0.2.0 keep working from here, with a ``DeprecationWarning``
    naming their home, ``constructs_lib.rules`` (a public name, once released, keeps working)."""
    rules = importlib.import_module(f"{__name__}.rules")  # not "from . import": that asks this hook for "rules"
    if name in rules.__all__:
        warnings.warn(
            f"constructs_lib.{name} is deprecated: import it from constructs_lib.rules",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(rules, name)
    if name in _REMOVED:
        raise AttributeError(f"constructs_lib.{name} was a mixin and is gone: use {_REMOVED[name]}")
    raise AttributeError(f"module 'constructs_lib' has no attribute {name!r}")
