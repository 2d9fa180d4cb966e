"""Every context key, declared once: its parser, its default, its section and one line of documentation.

``cdk.json``'s defaults and the table in docs/context-keys.md are generated from this list
(``python tools/context_docs.py``) and a test fails when either drifts; ``config.py`` parses every key with the
parser named here. A new key is one entry here plus the code that uses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from constructs_lib.names import (
    HUB_ENDPOINT_RULE,
    INSTANCE_TYPE,
    KMS_KEY_ARN,
    MAX_SECURITY_GROUPS,
    MAX_SUBNETS,
    REPO_ID_RULE,
    REVISION_RULE,
    SECRET_ARN,
    SECRET_ARN_RULE,
    SECURITY_GROUP_ID,
    SNS_TOPIC_ARN,
    STACK_NAME,
    SUBNET_ID,
    VPC_ID,
    hub_endpoint_problem,
    repo_id_problem,
    revision_problem,
)
from constructs_lib.rules import (
    ASYNC_PREFIX as PREFIX_PATTERN,
)
from constructs_lib.rules import (
    CONCURRENCY_THRESHOLD_RANGE,
    DEFAULT_INVOCATION_TIMEOUT_S,
    DEPLOYMENT_MODES,
    GGUF_FILE,
    GGUF_FILE_DESCRIPTION,
    INVOCATION_TIMEOUT_RANGE_S,
    LOAD_CONCURRENCY_RANGE,
    LOAD_ERROR_RATE_RANGE,
    LOAD_ITL_P95_RANGE_MS,
    LOAD_MAX_TOKENS_RANGE,
    LOAD_OUTPUT_TOKENS_PER_S_RANGE,
    LOAD_REQUESTS_RANGE,
    LOAD_TTFT_P95_RANGE_MS,
    MAX_CONCURRENT_INVOCATIONS_RANGE,
    MAX_S3_URI,
    PREFIX_LENGTH_RANGE,
    ROUTING_STRATEGIES,
    SMOKE_BUDGET_RANGE_S,
    STAGING_MAX_INSTANCES_RANGE,
    STAGING_MAX_RUNTIME_RANGE_S,
    THRESHOLD_RANGES,
    TIMEOUT_RANGE_S,
    UPDATE_POLICIES,
    WAIT_RANGE_S,
    bucket_name_problem,
    engine_names,
    known_ami_versions,
)
from preflight import CHECKS

from .parsers import (
    _boolean,
    _bucket,
    _checked,
    _choice,
    _choices_list,
    _ids,
    _instance_types,
    _integer,
    _json_object,
    _number,
    _optional,
    _optional_choice,
    _pattern,
    _patterns,
    _prompt,
    _share,
    _tags,
    _text,
)

PREFLIGHT_CHECKS = CHECKS  # what preflight_skip may name: the preflight's own list
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+", re.ASCII)
# Sections of docs/context-keys.md, in order, with their headings.
SECTIONS = {
    "general": "general",
    "model": "model and staging",
    "serving": "serving",
    "scaling": "mode and scaling",
    "async": "asynchronous endpoints",
    "checks": "checks",
    "observability": "dashboard, alarms, updates",
    "governance": "network, keys, tags",
}


CUSTOMER_KEY = "the ARN of a customer-managed KMS key arn:aws:kms:<region>:<account>:key/<id>"


def _async_output_problem(uri: str) -> str | None:
    """Why ``uri`` is not a prefix for asynchronous answers (the key's own words; DestinationS3Uri: 512 at most)."""
    match = re.fullmatch(r"s3://([^/]+)/(.+/)", uri)
    if len(uri) + len("failure") > MAX_S3_URI:
        return f"{uri!r} is too long: with 'failure' after it, at most {MAX_S3_URI} characters (DestinationS3Uri)"
    if match is None:
        return f"{uri!r} is not s3://<bucket>/<prefix>/ (a prefix ending in '/', not the bucket root)"
    return bucket_name_problem(match[1]) or (
        None
        if PREFIX_PATTERN.fullmatch(match[2]) and "//" not in match[2]
        else f"{match[2]!r} is not a key prefix of letters, digits and !_.*'()/-"
    )


@dataclass(frozen=True)
class ContextKey:
    name: str
    parse: Callable[[Any], Any]
    default: Any  # the JSON value cdk.json holds (None: the key is optional)
    section: str
    doc: str
    # Where one value holds in a fleet (fleet.py): "app" (every stack of the app; refused per deployment),
    # "endpoint" (one stack builds the endpoint and its functions, alarms, network and tags: every deployment
    # sharing it must agree) or "deployment" (its own model and component).
    scope: str = "deployment"
    # An endpoint-scoped key's second valid value, other than its default: the fleet test generated from this
    # registry sets it on one of two deployments sharing an endpoint and expects the refusal.
    example: Any = None
    # The AlarmThresholds field the key sets (observability.thresholds_of reads them all from here).
    threshold: str = ""

    @property
    def allowed(self) -> str:
        """What the parser accepts, as its error messages say it."""
        return str(self.parse.__doc__)


KEYS: tuple[ContextKey, ...] = (
    ContextKey(
        "stack_name",
        _pattern(STACK_NAME, "a CloudFormation stack name (letters, digits, hyphens; starts with a letter)"),
        "LlmEndpoint",
        "general",
        "CloudFormation stack name",
        scope="app",
    ),
    ContextKey(
        "deployments",
        _optional(_json_object),
        None,
        "general",
        "a fleet: a map deployment name -> the keys of one deployment (the rest inherited from the top level); "
        "one stack `<stack_name>-<endpoint or name>` per endpoint (docs/guide/fleets.md)",
        scope="app",
    ),
    ContextKey(
        "deployments_file",
        _optional(_text),
        None,
        "general",
        "a JSON file holding the `deployments` map (instead of the key itself); relative to the project folder",
        scope="app",
    ),
    ContextKey(
        "model_id",
        _checked(repo_id_problem, REPO_ID_RULE),
        "Qwen/Qwen3-4B-Instruct-2507",
        "model",
        "Hugging Face repo id `org/name`; staged from the Hub during the deploy",
    ),
    ContextKey(
        "revision",
        _checked(revision_problem, REVISION_RULE),
        "main",
        "model",
        "branch, tag or commit SHA; resolved to a SHA when the checkpoint resource is created or updated (pin"
        " a SHA for reproducibility; the `ModelRevision` output says which SHA an unpinned deploy got)",
    ),
    ContextKey(
        "model_s3_uri",
        _optional(_pattern(re.compile(r"s3://[^\s\x00-\x1f\x7f-\x9f]+"), "an S3 prefix URI s3://<bucket>/<prefix>/")),
        None,
        "model",
        "`s3://bucket/prefix/`: serve exactly this prefix, already staged by you (no bucket, no staging; "
        "`include`/`hf_token_secret_arn` refused); or `s3://bucket/key.tar.gz` (SageMaker Training's "
        "`model.tar.gz`): staged, unpacked into a verified prefix of the app's bucket",
    ),
    ContextKey(
        "model_bucket",
        _optional(_bucket),
        None,
        "model",
        "existing bucket name to stage into (`models/<org>--<name>/<sha>/`); null: the stack creates a "
        "bucket. Not together with `model_s3_uri`",
        scope="app",
    ),
    ContextKey(
        "reuse_model_bucket",
        _boolean,
        False,
        "model",
        "`true` after a `cdk destroy`: use the retained bucket `<stack>-models-<account>-<region>` (and its "
        "staged revisions) instead of creating it. Not with `model_bucket` or `model_s3_uri`",
        scope="app",
    ),
    ContextKey(
        "model_kms_key_arn",
        _optional(
            _pattern(KMS_KEY_ARN, "the key ARN arn:aws:kms:<region>:<account>:key/<key-id> of the given bucket's key")
        ),
        None,
        "model",
        "`arn:aws:kms:<region>:<acct>:key/<id>` of an SSE-KMS given bucket (with `model_bucket` or "
        "`model_s3_uri` only)",
    ),
    ContextKey(
        "hf_token_secret_arn",
        _optional(_pattern(SECRET_ARN, f"{SECRET_ARN_RULE}, of a secret holding a Hugging Face token")),
        None,
        "model",
        "ARN of a Secrets Manager secret holding a Hub token (the plain token, or JSON with `token` or "
        "`HF_TOKEN`) for gated or private repos; never the token itself (a value that is not a secret ARN is "
        "refused and not echoed)",
    ),
    ContextKey(
        "hf_token_kms_key_arn",
        _optional(
            _pattern(KMS_KEY_ARN, "the ARN of the customer-managed KMS key of the token secret (arn:aws:kms:...)")
        ),
        None,
        "model",
        "the customer-managed KMS key the token secret is encrypted with (with `hf_token_secret_arn`); the "
        "staging handler and job may then decrypt with it. Not needed for the AWS-managed key",
    ),
    ContextKey(
        "include",
        _patterns,
        [],
        "model",
        'JSON array of glob patterns of files to stage, e.g. `["*.json","*.safetensors"]` or one GGUF quantization',
    ),
    ContextKey(
        "exclude",
        _patterns,
        ["original/*"],
        "model",
        "JSON array of glob patterns of files to skip (the default skips duplicate `original/` weights)",
    ),
    ContextKey(
        "staging_instance_type",
        _pattern(INSTANCE_TYPE, "a SageMaker Processing instance type such as ml.m5.2xlarge"),
        "ml.m5.2xlarge",
        "model",
        "Processing instance type of the staging job",
    ),
    ContextKey(
        "staging_max_instances",
        _integer(*STAGING_MAX_INSTANCES_RANGE),
        4,
        "model",
        "1-100: the job gets one instance per 100 GiB missing, up to this",
    ),
    ContextKey(
        "staging_max_runtime_s",
        _integer(*STAGING_MAX_RUNTIME_RANGE_S),
        21600,
        "model",
        "600-42300: the job's limit; the deployment waits this plus 15 minutes at most",
    ),
    ContextKey(
        "deployment_mode",
        _choice(list(DEPLOYMENT_MODES)),
        "standard",
        "scaling",
        "`standard` \\| `inference-component` \\| `async` (requests queued through InvokeEndpointAsync, answered into "
        "S3, up to an hour each; docs/guide/async-inference.md)",
        scope="endpoint",
        example="inference-component",
    ),
    ContextKey(
        "scale_to_zero",
        _boolean,
        False,
        "scaling",
        "true only in component mode: min instances and copies 0, woken by the first request",
        scope="endpoint",
        example=True,
    ),
    ContextKey(
        "min_instances",
        _optional(_integer(0, 100)),
        None,
        "scaling",
        "0-100 / 1-100; standard and async mode autoscale instances when `max_instances` > the minimum; null: "
        "`instance_count` in standard mode, 0 in async mode, 1 in component mode (0 with scale-to-zero)",
        scope="endpoint",
        example=0,
    ),
    ContextKey(
        "max_instances",
        _optional(_integer(1, 100)),
        None,
        "scaling",
        "0-100 / 1-100; standard mode autoscales instances when `max_instances` > the minimum",
        scope="endpoint",
        example=3,
    ),
    ContextKey(
        "accelerators_per_copy",
        _optional(_integer(1, 64)),
        None,
        "scaling",
        "component mode: GPUs per copy, ≤ GPUs per instance, = tensor parallel size",
    ),
    ContextKey(
        "min_copies",
        _optional(_integer(0, 1000)),
        None,
        "scaling",
        "component mode; `min` ≤ `initial` ≤ `max`, all copies' GPUs ≤ `max_instances` x GPUs per instance",
    ),
    ContextKey(
        "initial_copies",
        _optional(_integer(0, 1000)),
        None,
        "scaling",
        "component mode; `min` ≤ `initial` ≤ `max`, all copies' GPUs ≤ `max_instances` x GPUs per instance",
    ),
    ContextKey(
        "max_copies",
        _optional(_integer(1, 1000)),
        None,
        "scaling",
        "component mode; `min` ≤ `initial` ≤ `max`, all copies' GPUs ≤ `max_instances` x GPUs per instance",
    ),
    ContextKey(
        "target_concurrency",
        _optional(_number(0, 10_000)),
        None,
        "scaling",
        "component mode: concurrent requests per copy to track",
    ),
    ContextKey(
        "scale_in_cooldown_s",
        # botocore's Application Auto Scaling model: Cooldown is an integer of seconds with no bound; a day here.
        _optional(_integer(0, 86_400)),
        None,
        "scaling",
        "seconds after a scale-in before another may start (`ScaleInCooldown` of the target tracking policy: "
        "instances in standard mode, copies in component mode); null: Application Auto Scaling's 300 s",
    ),
    ContextKey(
        "scale_out_cooldown_s",
        _optional(_integer(0, 86_400)),
        None,
        "scaling",
        "seconds after a scale-out before another may start (`ScaleOutCooldown`); null: Application Auto "
        "Scaling's 300 s",
    ),
    ContextKey(
        "target_invocations_per_instance",
        _optional(_number(0, 1_000_000)),
        None,
        "scaling",
        "standard mode: invocations per instance per minute to track",
        scope="endpoint",
        example=50,
    ),
    ContextKey(
        "routing_strategy",
        _optional(_choice(list(ROUTING_STRATEGIES))),
        None,
        "scaling",
        "`LEAST_OUTSTANDING_REQUESTS` \\| `RANDOM` \\| `PREFIX_AWARE` (with both `prefix_routing_*` keys)",
        scope="endpoint",
        example="RANDOM",
    ),
    ContextKey(
        "target_backlog_per_instance",
        _optional(_number(0, 1_000_000)),
        None,
        "scaling",
        "async mode: queued requests per instance to track (`ApproximateBacklogSizePerInstance`); null: 5, AWS's "
        "example",
        scope="endpoint",
        example=2,
    ),
    ContextKey(
        "async_max_concurrent_invocations",
        _optional(_integer(*MAX_CONCURRENT_INVOCATIONS_RANGE)),
        None,
        "async",
        "async mode: requests one instance is handed at once (`MaxConcurrentInvocationsPerInstance`, 1-1000); null: "
        "`max_num_seqs` (or its engine flag) when set, else SageMaker's choice",
        scope="endpoint",
        example=8,
    ),
    ContextKey(
        "async_invocation_timeout_s",
        _optional(_integer(*INVOCATION_TIMEOUT_RANGE_S)),
        None,
        "async",
        f"async mode: the `InvocationTimeoutSeconds` the smoke test sends, 1-3600; refused above the engine's own "
        f"request timeout; null: the API's default, {DEFAULT_INVOCATION_TIMEOUT_S}",
        scope="endpoint",
        example=1800,
    ),
    ContextKey(
        "async_output_s3_uri",
        _optional(_checked(_async_output_problem, "an S3 prefix s3://<bucket>/<prefix>/")),
        None,
        "async",
        "async mode: where answers (`output/`), failures (`failure/`) and large requests (`input/`) go; null: "
        "`async-inference/<endpoint>/` in the model's bucket",
        scope="endpoint",
        example="s3://my-answers/llm/",
    ),
    ContextKey(
        "async_output_kms_key_arn",
        _optional(
            _pattern(KMS_KEY_ARN, "the ARN of a customer-managed KMS key arn:aws:kms:<region>:<account>:key/<id>")
        ),
        None,
        "async",
        "async mode: the key SageMaker encrypts answers with (`OutputConfig.KmsKeyId`); the role may use it through "
        "S3; null: the bucket's own encryption",
        scope="endpoint",
        example="arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    ),
    ContextKey(
        "async_topic_kms_key_arn",
        _optional(
            _pattern(KMS_KEY_ARN, "the ARN of a customer-managed KMS key arn:aws:kms:<region>:<account>:key/<id>")
        ),
        None,
        "async",
        "async mode: the key of the given topics' server-side encryption, which the role may use to publish; null: "
        "none (the created topics use alias/aws/sns)",
        scope="endpoint",
        example="arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    ),
    ContextKey(
        "async_success_topic_arn",
        _optional(_pattern(SNS_TOPIC_ARN, "an SNS topic ARN arn:aws:sns:<region>:<account>:<name>")),
        None,
        "async",
        "async mode: the topic told of each answer (`SuccessTopic`); null: one the stack creates",
        scope="endpoint",
        example="arn:aws:sns:us-east-1:123456789012:answers",
    ),
    ContextKey(
        "async_error_topic_arn",
        _optional(_pattern(SNS_TOPIC_ARN, "an SNS topic ARN arn:aws:sns:<region>:<account>:<name>")),
        None,
        "async",
        "async mode: the topic told of each failure (`ErrorTopic`); null: one the stack creates",
        scope="endpoint",
        example="arn:aws:sns:us-east-1:123456789012:failures",
    ),
    ContextKey(
        "min_memory_mb",
        _optional(_integer(128, 4_000_000)),
        None,
        "scaling",
        "component mode: host memory reserved per copy, ≥ 128",
    ),
    ContextKey(
        "component_name",
        _optional(_text),
        None,
        "scaling",
        "component mode: 1-63 letters, digits, hyphens",
    ),
    ContextKey(
        "preflight_skip",
        _choices_list(PREFLIGHT_CHECKS),
        [],
        "checks",
        "JSON array of checks not to run: `s3`, `memory`, `context` (max_model_len within the model's limit; "
        "`memory` leaves it on), `tensor-parallel`, `quota`, `format`, `network` (each skip is a synth warning)",
    ),
    ContextKey(
        "allow_unverified_s3",
        _boolean,
        False,
        "checks",
        "accept a prefix without the staging manifest (for `model_s3_uri` copied by other means)",
    ),
    ContextKey(
        "allow_checkpoint_code",
        _boolean,
        False,
        "checks",
        "let checkpoint files the container runs or reads as settings (`requirements.txt`, `model.py`, "
        "`code/*`, `serving.properties`; for `lmi` every `*.py`) be staged and served, and accept variables "
        "that load code (`PYTHONPATH`, `LD_PRELOAD`, an LMI `.py` entry point...), each with a warning; only "
        "for a repository and revision you have read",
    ),
    ContextKey(
        "preflight_sequences",
        _integer(1, 4096),
        1,
        "checks",
        "full-length `max_model_len` sequences that must fit in the KV cache at once",
    ),
    ContextKey(
        "smoke_test",
        _boolean,
        True,
        "checks",
        "false leaves the smoke test out",
    ),
    ContextKey(
        "smoke_prompt",
        _prompt,
        "In one short sentence: what is Amazon S3?",
        "checks",
        "the smoke test's request",
    ),
    ContextKey(
        "smoke_max_tokens",
        _integer(1, 4096),
        64,
        "checks",
        "the smoke test's request",
    ),
    ContextKey(
        "smoke_inputs",
        _json_object,
        {},
        "checks",
        "JSON object merged into the smoke request (not `messages` or `stream`)",
    ),
    ContextKey(
        "smoke_expected_pattern",
        _optional(_text),
        None,
        "checks",
        "regex the non-streamed answer must match",
    ),
    ContextKey(
        "smoke_budget_s",
        _integer(*SMOKE_BUDGET_RANGE_S),
        600,
        "checks",
        "60-2700: how long transient errors are retried",
    ),
    ContextKey(
        "slo_concurrency",
        _optional(_integer(*LOAD_CONCURRENCY_RANGE)),
        None,
        "checks",
        "load gate: requests in flight at once during the smoke test's burst (4 when another `slo_*` key is set); "
        "any `slo_*` key turns the gate on ([load gate](guide/smoke-test.md#load-gate)); served at the endpoint's "
        "own scale",
    ),
    ContextKey(
        "slo_requests",
        _optional(_integer(*LOAD_REQUESTS_RANGE)),
        None,
        "checks",
        "load gate: requests in the burst, at least `slo_concurrency` (40 when another `slo_*` key is set)",
    ),
    ContextKey(
        "slo_max_tokens",
        _optional(_integer(*LOAD_MAX_TOKENS_RANGE)),
        None,
        "checks",
        "load gate: most output tokens per request (128 when another `slo_*` key is set)",
    ),
    ContextKey(
        "slo_ttft_p95_ms",
        _optional(_number(*LOAD_TTFT_P95_RANGE_MS)),
        None,
        "checks",
        "load gate target: time to first token, p95 (ms); null: not checked",
    ),
    ContextKey(
        "slo_itl_p95_ms",
        _optional(_number(*LOAD_ITL_P95_RANGE_MS)),
        None,
        "checks",
        "load gate target: inter-token latency as AIPerf defines it, (end-to-end - TTFT) / (output tokens - 1), "
        "p95 (ms); null: not checked",
    ),
    ContextKey(
        "slo_min_output_tokens_per_s",
        _optional(_number(*LOAD_OUTPUT_TOKENS_PER_S_RANGE)),
        None,
        "checks",
        "load gate target: output tokens per second of one request (1 / ITL), at least this for 95 % of the "
        "requests (their p5); null: not checked",
    ),
    ContextKey(
        "slo_max_error_rate",
        _optional(_share(*LOAD_ERROR_RATE_RANGE)),
        None,
        "checks",
        "load gate target: share of the burst's requests that may fail; null with the gate on: 0, none",
    ),
    ContextKey(
        "engine",
        _choice(engine_names()),
        "vllm",
        "serving",
        "`vllm` \\| `sglang` \\| `lmi` (see [LMI](guide/engines-and-images.md#lmi-djl-serving-with-vllms-async-engine))"
        " \\| `llamacpp` (one GGUF file, image built at deploy: see [llama.cpp](guide/llamacpp.md))",
        scope="endpoint",
        example="sglang",
    ),
    ContextKey(
        "image",
        _optional(_text),
        None,
        "serving",
        "full ECR URI `<acct>.dkr.ecr.<region>.amazonaws.com[.cn]/<repo>:<tag>` or `@sha256:…`; a floating "
        "tag gives a synth warning",
        scope="endpoint",
        example="123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm:0.11",
    ),
    ContextKey(
        "instance_type",
        _pattern(INSTANCE_TYPE, "a SageMaker instance type such as ml.g6.xlarge"),
        "ml.g6.xlarge",
        "serving",
        "a GPU instance type from the catalog below, or any `ml.*` type with `gpu_count` and `gpu_memory_gib`"
        " (if cfn-lint does not know it yet either: `make synth CFN_LINT_IGNORE=W3005,E3030,W3030`)",
        scope="endpoint",
        example="ml.g6.24xlarge",
    ),
    ContextKey(
        "instance_pools",
        _instance_types,
        [],
        "serving",
        "JSON array of up to 4 instance types SageMaker falls back to, in order, when `instance_type` has no "
        "capacity (both modes; components get one Specifications entry per type); each passes the same checks "
        "(docs/guide/capacity.md)",
        scope="endpoint",
        example='["ml.g5.12xlarge"]',
    ),
    ContextKey(
        "instance_count",
        _integer(1, 100),
        1,
        "serving",
        "1-100 instances at creation (both modes)",
        scope="endpoint",
        example=2,
    ),
    ContextKey(
        "gpu_count",
        _optional(_integer(1, 64)),
        None,
        "serving",
        "1-64; required with `gpu_memory_gib` for types the catalog lacks; for a catalog type it must equal "
        "the catalog's value",
        scope="endpoint",
        example=2,
    ),
    ContextKey(
        "gpu_memory_gib",
        _optional(_number(0, 1024)),
        None,
        "serving",
        "> 0, ≤ 1024 GiB per GPU; same rule",
        scope="endpoint",
        example=48,
    ),
    ContextKey(
        "tensor_parallel_size",
        _optional(_integer(1, 64)),
        None,
        "serving",
        "standard mode: must equal the instance's GPU count; component mode: the GPUs of one copy",
    ),
    ContextKey(
        "max_model_len",
        _optional(_integer(1, 16_777_216)),
        32768,
        "serving",
        "1-16777216; null lets the engine use the model's own maximum",
    ),
    ContextKey(
        "max_num_seqs",
        _optional(_integer(1, 65_536)),
        None,
        "serving",
        "1-65536",
    ),
    ContextKey(
        "engine_env",
        _json_object,
        {},
        "serving",
        "JSON object of engine flags, keys with the engine's prefix (below)",
    ),
    ContextKey(
        "container_env",
        _json_object,
        {},
        "serving",
        "JSON object of other container variables (below)",
    ),
    ContextKey(
        "inference_ami_version",
        _optional(_choice(known_ami_versions())),
        None,
        "serving",
        "`al2-ami-sagemaker-inference-gpu-2`, `-gpu-2-1`, `-gpu-3-1`, `al2023-ami-sagemaker-inference-gpu-4-1`",
        scope="endpoint",
        example="al2-ami-sagemaker-inference-gpu-3-1",
    ),
    ContextKey(
        "capacity_reservation_arn",
        _optional(_text),
        None,
        "serving",
        "`arn:aws:sagemaker:<region>:<acct>:<type>/<name>`; sets `capacity-reservations-only`",
        scope="endpoint",
        example="arn:aws:sagemaker:us-east-1:123456789012:training-plan/plan-1",
    ),
    ContextKey(
        "capacity_reservation_instances",
        _optional(_integer(1, 10000)),
        None,
        "serving",
        "with `capacity_reservation_arn`: instances it holds; an update policy is refused unless they fit the "
        "fleet (component mode: every copy) and an update's new instances (docs/guide/updates-and-observability.md)",
        scope="endpoint",
        example=2,
    ),
    ContextKey(
        "startup_timeout_s",
        _integer(60, 3600),
        1200,
        "serving",
        "60-3600 (container health check)",
    ),
    ContextKey(
        "provision_timeout_s",
        _optional(_integer(300, 3600)),
        None,
        "serving",
        "300-3600: the total time SageMaker spends getting instances across every `instance_pools` entry before "
        "the operation fails, not a wait per type (`VariantInstanceProvisionTimeoutInSeconds`); counted in the "
        "update timeout rules; null: SageMaker's",
        scope="endpoint",
        example=600,
    ),
    ContextKey(
        "download_timeout_s",
        _integer(60, 3600),
        1200,
        "serving",
        "60-3600 (model download from S3)",
    ),
    ContextKey(
        "endpoint_name",
        _optional(_text),
        None,
        "serving",
        "1-63 letters, digits, hyphens",
        scope="endpoint",
        example="other-endpoint",
    ),
    ContextKey(
        "gguf_file",
        _optional(_pattern(GGUF_FILE, GGUF_FILE_DESCRIPTION)),
        None,
        "serving",
        "with `engine=llamacpp` only, and required there: the `.gguf` file name or glob to stage and serve "
        "(its split parts included)",
    ),
    ContextKey(
        "update_policy",
        _optional_choice(_choice(list(UPDATE_POLICIES))),
        None,
        "observability",
        "`all-at-once` \\| `canary` \\| `linear` (standard), `rolling` (component, or standard one batch of "
        "instances at a time), `none`",
        scope="endpoint",
        example="canary",
    ),
    ContextKey(
        "update_step_size",
        _integer(1, 1000),
        1,
        "observability",
        "canary size or linear step in instances; copies per rolling batch",
        scope="endpoint",
        example=2,
    ),
    ContextKey(
        "update_wait_s",
        _integer(*WAIT_RANGE_S),
        300,
        "observability",
        "0-3600: baking period after each shift or batch, watched by the alarms",
        scope="endpoint",
        example=120,
    ),
    ContextKey(
        "update_termination_wait_s",
        _optional(_integer(*WAIT_RANGE_S)),
        None,
        "observability",
        "0-3600, blue/green only: how long the old fleet stays after the last shift",
        scope="endpoint",
        example=60,
    ),
    ContextKey(
        "update_timeout_s",
        _optional(_integer(*TIMEOUT_RANGE_S)),
        None,
        "observability",
        "600-28800: the whole update's limit",
        scope="endpoint",
        example=1200,
    ),
    ContextKey(
        "alarms",
        _boolean,
        True,
        "observability",
        "false leaves out every alarm and the alarm topic",
        scope="endpoint",
        example=False,
    ),
    ContextKey(
        "alarm_email",
        _optional(_pattern(EMAIL, "an e-mail address to notify")),
        None,
        "observability",
        "an address to subscribe to the alarm topic (SNS asks it to confirm first)",
        scope="endpoint",
        example="ops@example.com",
    ),
    ContextKey(
        "alarm_5xx_percent",
        _optional(_number(*THRESHOLD_RANGES["errors_5xx_percent"])),
        5,
        "observability",
        "> 0, ≤ 100: share of 5xx answers in 2 of 3 minutes; null: no alarm",
        scope="endpoint",
        example=10,
        threshold="errors_5xx_percent",
    ),
    ContextKey(
        "alarm_p99_latency_ms",
        _optional(_number(*THRESHOLD_RANGES["p99_latency_ms"])),
        30000,
        "observability",
        "> 0: p99 `ModelLatency` for 3 minutes; null: no alarm",
        scope="endpoint",
        example=9000,
        threshold="p99_latency_ms",
    ),
    ContextKey(
        "alarm_gpu_memory_percent",
        _optional(_number(*THRESHOLD_RANGES["gpu_memory_percent"])),
        95,
        "observability",
        "> 0, ≤ 100: GPU memory for 5 minutes, above the engine's reservation; null: no alarm",
        scope="endpoint",
        example=80,
        threshold="gpu_memory_percent",
    ),
    ContextKey(
        "alarm_model_errors_percent",
        _optional(_number(*THRESHOLD_RANGES["model_errors_percent"])),
        None,
        "observability",
        "> 0, ≤ 100: share of model calls not ending in 2xx (ModelError) in 2 of 3 minutes; null: no alarm",
        scope="endpoint",
        example=5,
        threshold="model_errors_percent",
    ),
    ContextKey(
        "alarm_async_failures",
        _optional(_number(*THRESHOLD_RANGES["async_failures"])),
        1,
        "observability",
        "async mode: failed queued requests (`InvocationFailures`) in 5 minutes that raise the alarm, > 0; null: "
        "no alarm",
        scope="endpoint",
        example=5,
        threshold="async_failures",
    ),
    ContextKey(
        "alarm_no_capacity",
        _boolean,
        True,
        "observability",
        "no instance (standard) or a request finding no copy (component, not with scale-to-zero)",
        scope="endpoint",
        example=False,
        threshold="no_capacity",
    ),
    ContextKey(
        "enhanced_metrics",
        _boolean,
        False,
        "observability",
        "`MetricsConfig.EnableEnhancedMetrics`: metrics per instance and container (off: SageMaker's default)",
        scope="endpoint",
        example=True,
    ),
    ContextKey(
        "metric_publish_frequency_s",
        _optional(_integer(10, 300)),
        None,
        "observability",
        "`MetricPublishFrequencyInSeconds`: 10, 30, 60, 120, 180, 240 or 300; null: SageMaker's 60",
        scope="endpoint",
        example=10,
    ),
    ContextKey(
        "data_cache",
        _optional(_boolean),
        None,
        "scaling",
        "component mode: `DataCacheConfig.EnableCaching` (instances keep the model and image for new copies); "
        "null: SageMaker's (on with > 232 GiB local NVMe)",
    ),
    ContextKey(
        "prefix_routing_length",
        _optional(_integer(*PREFIX_LENGTH_RANGE)),
        None,
        "scaling",
        "with `routing_strategy=PREFIX_AWARE` (required there): `PrefixLength`, 1024-65536",
        scope="endpoint",
        example=2048,
    ),
    ContextKey(
        "prefix_routing_concurrency",
        _optional(_integer(*CONCURRENCY_THRESHOLD_RANGE)),
        None,
        "scaling",
        "with `routing_strategy=PREFIX_AWARE` (required there): `ConcurrencyThreshold`, in-flight requests, 1-1024",
        scope="endpoint",
        example=8,
    ),
    ContextKey(
        "dashboard",
        _boolean,
        True,
        "observability",
        "false leaves out the dashboard and `DashboardUrl`",
        scope="endpoint",
        example=False,
    ),
    ContextKey(
        "vpc_subnet_ids",
        _ids(SUBNET_ID, "subnet ids", MAX_SUBNETS),
        [],
        "governance",
        "JSON array of subnet ids (two or more Availability Zones) for the model's and the staging job's network "
        "interfaces (`VpcConfig`); they must reach S3 and, for staging, the Hub or `hf_endpoint` "
        "(see [private networks](guide/private-network.md))",
        scope="endpoint",
        example=["subnet-0123456789abcdef0"],
    ),
    ContextKey(
        "vpc_security_group_ids",
        _ids(SECURITY_GROUP_ID, "security group ids", MAX_SECURITY_GROUPS),
        [],
        "governance",
        "JSON array of 1-5 security groups of the subnets' VPC (with `vpc_subnet_ids`); none: give `vpc_id` and "
        "a group with no inbound rule and HTTPS out is created",
        scope="endpoint",
        example=["sg-0123456789abcdef0"],
    ),
    ContextKey(
        "vpc_id",
        _optional(_pattern(VPC_ID, "a VPC id vpc-<8 or 17 hex digits>")),
        None,
        "governance",
        "the subnets' VPC, where a security group is created when `vpc_security_group_ids` is empty",
        scope="endpoint",
        example="vpc-0123456789abcdef0",
    ),
    ContextKey(
        "hf_endpoint",
        _optional(_checked(hub_endpoint_problem, HUB_ENDPOINT_RULE)),
        None,
        "governance",
        "https URL of a Hub mirror or proxy (Artifactory, Nexus, a self-hosted mirror) that staging reads from "
        "instead of huggingface.co; the token is sent to that origin only",
    ),
    ContextKey(
        "tags",
        _tags,
        {},
        "governance",
        'JSON object `{"key": "value"}` put on every taggable resource, the SageMaker ones and the staging jobs '
        "included (AWS tag rules; at most 48; `llm-endpoint-app` is the app's own, set to `stack_name`)",
        scope="endpoint",
        example={"team": "ml"},
    ),
    ContextKey(
        "bucket_kms_key_arn",
        _optional(
            _pattern(KMS_KEY_ARN, "the ARN of a customer-managed KMS key arn:aws:kms:<region>:<account>:key/<id>")
        ),
        None,
        "governance",
        "SSE-KMS with this key (and an S3 Bucket Key) for the bucket the stack creates, or the key of the retained "
        "one with `reuse_model_bucket`; for a given bucket use `model_kms_key_arn`",
        scope="app",
    ),
    ContextKey(
        "volume_kms_key_arn",
        _optional(
            _pattern(KMS_KEY_ARN, "the ARN of a customer-managed KMS key arn:aws:kms:<region>:<account>:key/<id>")
        ),
        None,
        "governance",
        "encrypts the ML storage volumes of the endpoint's instances (`KmsKeyId`) and of the staging job "
        "(`VolumeKmsKeyId`); refused for instance types with local NVMe storage, which their hardware encrypts",
        scope="endpoint",
        example="arn:aws:kms:us-east-1:123456789012:key/1111abcd-12ab-34cd-56ef-1234567890ab",
    ),
    ContextKey(
        "logs_kms_key_arn",
        _optional(
            _pattern(
                KMS_KEY_ARN, "the ARN of a symmetric customer-managed KMS key arn:aws:kms:<region>:<account>:key/<id>"
            )
        ),
        None,
        "governance",
        "encrypts every log group the stack creates (`KmsKeyId`); the key policy must allow "
        "`logs.<region>.amazonaws.com` (see [private networks](guide/private-network.md#keys))",
        scope="endpoint",
        example="arn:aws:kms:us-east-1:123456789012:key/1111abcd-12ab-34cd-56ef-1234567890ab",
    ),
    ContextKey(
        "lambda_kms_key_arn",
        _optional(
            _pattern(
                KMS_KEY_ARN, "the ARN of a symmetric customer-managed KMS key arn:aws:kms:<region>:<account>:key/<id>"
            )
        ),
        None,
        "governance",
        "encrypts the environment of every Lambda function of the stack (`KmsKeyArn`); each function's role may "
        "decrypt with it through Lambda only (may be the same key as `logs_kms_key_arn`)",
        scope="endpoint",
        example="arn:aws:kms:us-east-1:123456789012:key/1111abcd-12ab-34cd-56ef-1234567890ab",
    ),
)
SCOPES = ("app", "endpoint", "deployment")
FIELDS: dict[str, Callable[[Any], Any]] = {key.name: key.parse for key in KEYS}
APP_SCOPED = tuple(key.name for key in KEYS if key.scope == "app")
ENDPOINT_SCOPED = tuple(key.name for key in KEYS if key.scope == "endpoint")
BY_NAME: dict[str, ContextKey] = {key.name: key for key in KEYS}
