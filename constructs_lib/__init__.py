"""Reusable L3 constructs: Hugging Face checkpoints to verified SageMaker GPU endpoints.

This module is the library's public surface: every construct, every type a user passes or gets back, and the
planners the constructs check their props with (so an app can check its own settings the same way, as this
repository's ``stacks/`` does). Everything else is internal and may change. Reference: docs/constructs/.
"""

from .adapter_component import AdapterComponent
from .adapter_component import artifact_problems as adapter_artifact_problems
from .catalog import InstanceSpec, known_instance_types, lookup_instance, resolve_instance
from .component_plan import (
    DEPLOYMENT_MODES,
    INFERENCE_COMPONENT,
    ROUTING_STRATEGIES,
    STANDARD,
    ScalingPlan,
    plan_scaling,
    resolve_scaling,
)
from .endpoint_plan import EndpointPlan, plan_endpoint
from .engines import (
    SECRET_HINT,
    EngineSpec,
    adapter_env,
    checkpoint_code_patterns,
    engine_names,
    engine_without_adapters,
    get_engine,
    looks_secret,
    remote_code_keys,
)
from .format_guard import nearest_capable, weight_format_flags
from .gguf_file import DESCRIPTION as GGUF_FILE_DESCRIPTION
from .gguf_file import GGUF_FILE, staging_patterns
from .gpu_endpoint import GpuEndpoint
from .image_asset import AssetImage, default_image
from .images import ServingImage, known_ami_versions, recorded_tag_key
from .inference_component import ComponentEndpoint, InferenceComponent
from .instance_pools import pool_problems, reservation_pools_problem
from .keys import encrypt_logs_and_functions, logs_key_policy_statement
from .load_gate import CONCURRENCY_RANGE as LOAD_CONCURRENCY_RANGE
from .load_gate import CONTEXT_KEYS as LOAD_CONTEXT_KEYS
from .load_gate import ERROR_RATE_RANGE as LOAD_ERROR_RATE_RANGE
from .load_gate import ITL_P95_RANGE_MS as LOAD_ITL_P95_RANGE_MS
from .load_gate import MAX_TOKENS_RANGE as LOAD_MAX_TOKENS_RANGE
from .load_gate import OUTPUT_TOKENS_PER_S_RANGE as LOAD_OUTPUT_TOKENS_PER_S_RANGE
from .load_gate import REQUESTS_RANGE as LOAD_REQUESTS_RANGE
from .load_gate import TTFT_P95_RANGE_MS as LOAD_TTFT_P95_RANGE_MS
from .load_gate import LoadGate, load_gate_problems
from .model_bucket import ModelBucket, app_bucket_name
from .model_data import (
    BUCKET_RULE,
    ModelSource,
    S3ModelData,
    bucket_name_problem,
    hub_prefix,
    is_model_archive,
    parse_s3_uri,
)
from .monitoring import (
    THRESHOLD_RANGES,
    AlarmThresholds,
    AlarmTopic,
    Monitor,
    Watched,
)
from .names import repo_id_problem, revision_problem
from .network import FUNCTION_ENDPOINTS, VpcPlacement, place_functions_in_vpc
from .preflight_check import DEFAULT_GPU_MEMORY_UTILIZATION, DeploymentPreflight
from .prices import Price, price
from .problems import Refusal
from .serving_features import (
    CONCURRENCY_THRESHOLD_RANGE,
    PREFIX_LENGTH_RANGE,
    metrics_problems,
    prefix_routing_problems,
)
from .smoke_test import EndpointSmokeTest
from .smoke_test import request_problems as smoke_request_problems
from .staged_checkpoint import MAX_INSTANCES_RANGE as STAGING_MAX_INSTANCES_RANGE
from .staged_checkpoint import MAX_RUNTIME_RANGE_S as STAGING_MAX_RUNTIME_RANGE_S
from .staged_checkpoint import StagedCheckpoint, hub_ports
from .tags import MAX_TAGS, job_source_problem, tag_problems, tag_value_problem
from .update_policy import TIMEOUT_RANGE_S, UPDATE_POLICIES, WAIT_RANGE_S, UpdatePolicy, reservation_problems

__all__ = [
    "BUCKET_RULE",
    "CONCURRENCY_THRESHOLD_RANGE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEPLOYMENT_MODES",
    "FUNCTION_ENDPOINTS",
    "GGUF_FILE",
    "GGUF_FILE_DESCRIPTION",
    "INFERENCE_COMPONENT",
    "LOAD_CONCURRENCY_RANGE",
    "LOAD_CONTEXT_KEYS",
    "LOAD_ERROR_RATE_RANGE",
    "LOAD_ITL_P95_RANGE_MS",
    "LOAD_MAX_TOKENS_RANGE",
    "LOAD_OUTPUT_TOKENS_PER_S_RANGE",
    "LOAD_REQUESTS_RANGE",
    "LOAD_TTFT_P95_RANGE_MS",
    "MAX_TAGS",
    "PREFIX_LENGTH_RANGE",
    "ROUTING_STRATEGIES",
    "SECRET_HINT",
    "STAGING_MAX_INSTANCES_RANGE",
    "STAGING_MAX_RUNTIME_RANGE_S",
    "STANDARD",
    "THRESHOLD_RANGES",
    "TIMEOUT_RANGE_S",
    "UPDATE_POLICIES",
    "WAIT_RANGE_S",
    "AdapterComponent",
    "AlarmThresholds",
    "AlarmTopic",
    "AssetImage",
    "ComponentEndpoint",
    "DeploymentPreflight",
    "EndpointPlan",
    "EndpointSmokeTest",
    "EngineSpec",
    "GpuEndpoint",
    "InferenceComponent",
    "InstanceSpec",
    "LoadGate",
    "ModelBucket",
    "ModelSource",
    "Monitor",
    "Price",
    "Refusal",
    "S3ModelData",
    "ScalingPlan",
    "ServingImage",
    "StagedCheckpoint",
    "UpdatePolicy",
    "VpcPlacement",
    "Watched",
    "adapter_artifact_problems",
    "adapter_env",
    "app_bucket_name",
    "bucket_name_problem",
    "checkpoint_code_patterns",
    "default_image",
    "encrypt_logs_and_functions",
    "engine_names",
    "engine_without_adapters",
    "get_engine",
    "hub_ports",
    "hub_prefix",
    "is_model_archive",
    "job_source_problem",
    "known_ami_versions",
    "known_instance_types",
    "load_gate_problems",
    "logs_key_policy_statement",
    "looks_secret",
    "lookup_instance",
    "metrics_problems",
    "nearest_capable",
    "parse_s3_uri",
    "place_functions_in_vpc",
    "plan_endpoint",
    "plan_scaling",
    "pool_problems",
    "prefix_routing_problems",
    "price",
    "recorded_tag_key",
    "remote_code_keys",
    "repo_id_problem",
    "reservation_pools_problem",
    "reservation_problems",
    "resolve_instance",
    "resolve_scaling",
    "revision_problem",
    "smoke_request_problems",
    "staging_patterns",
    "tag_problems",
    "tag_value_problem",
    "weight_format_flags",
]
