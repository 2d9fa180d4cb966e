"""The rules and planners the constructs check their props with, for an app that checks its own settings first.

``constructs_lib`` exports the types a user passes or gets back; this module is the other public half, for the
library's own app layer (``constructs_lib.deployment``, ``llmops``) and for advanced users who validate settings
before building constructs, as the deployment layer does with context keys. Each name is the one the construct
itself applies, never a copy: a range here is the range the construct refuses outside of.

Sections:

- **planners**: ``plan_endpoint`` (``EndpointPlan``: instance, tensor parallel size, environment, AMI, problems) and
  ``plan_scaling`` / ``resolve_scaling`` (``ScalingPlan``: instance and copy counts), the deployment modes and
  routing strategies;
- **catalog and data**: instance types (``lookup_instance``, ``resolve_instance``), engines (``get_engine``,
  ``engine_names``, what switches adapters or checkpoint code on), images (tags, CUDA levels, DLC accounts, AMIs),
  prices, weight formats (``weight_format_flags``, ``nearest_capable``);
- **ranges**: each setting's allowed values (``*_RANGE*``, ``UPDATE_POLICIES``, ``THRESHOLD_RANGES``, ``MAX_TAGS``);
- **problems**: functions returning what is wrong with one setting, as the construct words it (``*_problem(s)``);
  pass their lists to ``refuse(subject, problems)`` for the one refusal format (``Refusal``);
- **identifiers**: the patterns of repo ids, revisions, ARNs and names (``names``' ``*_RULE`` texts beside them).

Everything not named here or in ``constructs_lib`` is internal and may change.
"""

from .adapter_component import artifact_problems as adapter_artifact_problems
from .async_inference import (
    DEFAULT_INVOCATION_TIMEOUT_S,
    INVOCATION_TIMEOUT_RANGE_S,
    MAX_CONCURRENT_INVOCATIONS_RANGE,
    MAX_S3_URI,
    engine_timeout_problems,
)
from .async_inference import PREFIX as ASYNC_PREFIX
from .catalog import InstanceSpec, known_instance_types, lookup_instance, resolve_instance
from .component_plan import (
    ASYNC,
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
from .image_asset import default_image
from .images import SEMANTIC_TAG, cuda_of_tag, dlc_account, known_ami_versions, recorded_tag_key, version_key
from .instance_pools import MAX_FALLBACKS, pool_problems, reservation_pools_problem
from .load_gate import CONCURRENCY_RANGE as LOAD_CONCURRENCY_RANGE
from .load_gate import CONTEXT_KEYS as LOAD_CONTEXT_KEYS
from .load_gate import ERROR_RATE_RANGE as LOAD_ERROR_RATE_RANGE
from .load_gate import ITL_P95_RANGE_MS as LOAD_ITL_P95_RANGE_MS
from .load_gate import MAX_TOKENS_RANGE as LOAD_MAX_TOKENS_RANGE
from .load_gate import OUTPUT_TOKENS_PER_S_RANGE as LOAD_OUTPUT_TOKENS_PER_S_RANGE
from .load_gate import REQUESTS_RANGE as LOAD_REQUESTS_RANGE
from .load_gate import TTFT_P95_RANGE_MS as LOAD_TTFT_P95_RANGE_MS
from .load_gate import load_gate_problems
from .model_data import BUCKET_RULE, bucket_name_problem, is_model_archive, parse_s3_uri
from .monitoring import THRESHOLD_RANGES
from .names import SHA, repo_id_problem, revision_problem
from .network import FUNCTION_ENDPOINTS
from .preflight_check import DEFAULT_GPU_MEMORY_UTILIZATION
from .prices import LOOKUP as PRICE_LOOKUP
from .prices import UNKNOWN as PRICE_UNKNOWN
from .prices import Price, hours_per_month, known_regions, lookup_hint, price
from .problems import refuse
from .serving_features import (
    CONCURRENCY_THRESHOLD_RANGE,
    PREFIX_LENGTH_RANGE,
    metrics_problems,
    prefix_routing_problems,
)
from .smoke_test import BUDGET_RANGE_S as SMOKE_BUDGET_RANGE_S
from .smoke_test import request_problems as smoke_request_problems
from .staged_checkpoint import MAX_INSTANCES_RANGE as STAGING_MAX_INSTANCES_RANGE
from .staged_checkpoint import MAX_RUNTIME_RANGE_S as STAGING_MAX_RUNTIME_RANGE_S
from .staged_checkpoint import hub_ports
from .tags import MAX_TAGS, job_source_problem, tag_problems, tag_value_problem
from .update_policy import TIMEOUT_RANGE_S, UPDATE_POLICIES, WAIT_RANGE_S, reservation_problems

__all__ = [
    "ASYNC",
    "ASYNC_PREFIX",
    "BUCKET_RULE",
    "CONCURRENCY_THRESHOLD_RANGE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_INVOCATION_TIMEOUT_S",
    "DEPLOYMENT_MODES",
    "FUNCTION_ENDPOINTS",
    "GGUF_FILE",
    "GGUF_FILE_DESCRIPTION",
    "INFERENCE_COMPONENT",
    "INVOCATION_TIMEOUT_RANGE_S",
    "LOAD_CONCURRENCY_RANGE",
    "LOAD_CONTEXT_KEYS",
    "LOAD_ERROR_RATE_RANGE",
    "LOAD_ITL_P95_RANGE_MS",
    "LOAD_MAX_TOKENS_RANGE",
    "LOAD_OUTPUT_TOKENS_PER_S_RANGE",
    "LOAD_REQUESTS_RANGE",
    "LOAD_TTFT_P95_RANGE_MS",
    "MAX_CONCURRENT_INVOCATIONS_RANGE",
    "MAX_FALLBACKS",
    "MAX_S3_URI",
    "MAX_TAGS",
    "PREFIX_LENGTH_RANGE",
    "PRICE_LOOKUP",
    "PRICE_UNKNOWN",
    "ROUTING_STRATEGIES",
    "SECRET_HINT",
    "SEMANTIC_TAG",
    "SHA",
    "SMOKE_BUDGET_RANGE_S",
    "STAGING_MAX_INSTANCES_RANGE",
    "STAGING_MAX_RUNTIME_RANGE_S",
    "STANDARD",
    "THRESHOLD_RANGES",
    "TIMEOUT_RANGE_S",
    "UPDATE_POLICIES",
    "WAIT_RANGE_S",
    "EndpointPlan",
    "InstanceSpec",
    "Price",
    "ScalingPlan",
    "adapter_artifact_problems",
    "adapter_env",
    "bucket_name_problem",
    "checkpoint_code_patterns",
    "cuda_of_tag",
    "default_image",
    "dlc_account",
    "engine_names",
    "engine_timeout_problems",
    "engine_without_adapters",
    "get_engine",
    "hours_per_month",
    "hub_ports",
    "is_model_archive",
    "job_source_problem",
    "known_ami_versions",
    "known_instance_types",
    "known_regions",
    "load_gate_problems",
    "looks_secret",
    "lookup_hint",
    "lookup_instance",
    "metrics_problems",
    "nearest_capable",
    "parse_s3_uri",
    "plan_endpoint",
    "plan_scaling",
    "pool_problems",
    "prefix_routing_problems",
    "price",
    "recorded_tag_key",
    "refuse",
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
    "version_key",
    "weight_format_flags",
]
