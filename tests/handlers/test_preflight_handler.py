"""``Custom::DeploymentPreflight``'s handler: every check, alone and together, against a moto S3 server over HTTP.

Service Quotas (which moto does not serve for SageMaker) is a botocore Stubber on the handler's own client.
"""

from __future__ import annotations

import json
import logging

import boto3
import pytest
from botocore.stub import Stubber

from constructs_lib.preflight_check import CHECKS as CONSTRUCT_CHECKS
from tests.conftest import load_lambda
from tests.fakes.fixtures import BUCKET, s3  # noqa: F401
from tests.harness import Stacks

PREFIX = "models/acme--tiny-llm/0123456789abcdef0123456789abcdef01234567/"
URI = f"s3://{BUCKET}/{PREFIX}"
STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/LlmEndpoint/1"
QUOTA_NAME = "ml.g6.xlarge for endpoint usage"
# A Llama-style 8-layer model: 32 heads, 8 KV heads, head_dim 128 -> 32 KiB of KV cache per token.
CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 8,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}
WEIGHTS = {"model-00001-of-00002.safetensors": 3000, "model-00002-of-00002.safetensors": 2000}


@pytest.fixture
def handler(s3):  # noqa: F811
    module = load_lambda("deployment_preflight")
    quotas = boto3.client("service-quotas", region_name="us-east-1")
    module._clients.clear()
    module._clients["service-quotas"] = quotas
    module._clients["cloudformation"] = Stacks()  # a plain update; the rollback tests set its status
    with Stubber(quotas) as stubber:
        module.quota_stub = stubber
        yield module
        stubber.assert_no_pending_responses()


def put(s3_env, name: str, body: bytes) -> None:
    s3_env.client.put_object(Bucket=BUCKET, Key=PREFIX + name, Body=body)


def stage(s3_env, *, config=CONFIG, weights=WEIGHTS, manifest=True, manifest_sizes=None, extra=None) -> None:
    """Objects as the staging job leaves them, the manifest last (``manifest_sizes`` overrides listed sizes)."""
    files = {"tokenizer.json": b'{"version": "1.0"}', **(extra or {})}
    if config is not None:
        files["config.json"] = json.dumps(config).encode()
    files.update({name: b"w" * size for name, size in weights.items()})
    for name, body in files.items():
        put(s3_env, name, body)
    if manifest:
        sizes = {name: len(body) for name, body in files.items()} | (manifest_sizes or {})
        entries = [{"path": p, "size": s, "blob_id": "0" * 40} for p, s in sorted(sizes.items())]
        document = {
            "schema_version": 1,
            "repo_id": "acme/tiny-llm",
            "revision": PREFIX.split("/")[-2],
            "files": entries,
        }
        put(s3_env, ".hf-model-manifest.json", json.dumps(document).encode())


def properties(**overrides) -> dict:
    props = {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:framework",
        "ModelS3Uri": URI,
        "InstanceType": "ml.g6.xlarge",
        "GpuCount": "1",
        "GpuMemoryGib": "24",
        "TensorParallelSize": "1",
        "MaxModelLen": "32768",
        "MaxNumSeqs": "1",
        "KvCacheDtype": "auto",
        "GpuMemoryUtilization": "0.9",
        "InstancesNeeded": "1",
        "AllowUnverifiedS3": "false",
        "SkipChecks": [],
    }
    props.update(overrides)
    return props


def event(request: str = "Create", props: dict | None = None, **extra) -> dict:
    return {
        "RequestType": request,
        "RequestId": "req-1",
        "StackId": STACK_ID,
        "LogicalResourceId": "Preflight",
        "ResourceType": "Custom::DeploymentPreflight",
        "ResourceProperties": props if props is not None else properties(),
        **extra,
    }


def quota(name: str = QUOTA_NAME, value: float = 2.0, code: str = "L-ABCD1234") -> dict:
    return {"ServiceCode": "sagemaker", "QuotaName": name, "QuotaCode": code, "Value": value, "Adjustable": True}


def applied(handler, *quotas: dict, next_token: str | None = None) -> None:
    page = {"Quotas": list(quotas)} | ({"NextToken": next_token} if next_token else {})
    handler.quota_stub.add_response("list_service_quotas", page, {"ServiceCode": "sagemaker"})


def refused(handler, props: dict | None = None, request: str = "Create", **extra) -> str:
    with pytest.raises(handler.PreflightFailed) as error:
        handler.on_event(event(request, props=props, **extra))
    message = str(error.value)
    assert len(message.encode()) <= handler.REASON_LIMIT < 4096
    return message


# --- all clear ----------------------------------------------------------------------------------------


def test_all_clear_returns_the_key_figures_and_a_stable_physical_id(handler, s3, caplog):  # noqa: F811
    stage(s3)
    applied(handler, quota("ml.g5.xlarge for endpoint usage", 4), quota(value=2))
    caplog.set_level(logging.INFO)
    result = handler.on_event(event())
    assert result["PhysicalResourceId"].startswith("preflight-")
    data = result["Data"]
    assert set(data) == set(handler.DATA_KEYS) and all(isinstance(v, str) for v in data.values())
    assert data["WeightsBytes"] == "5000" and data["WeightsSource"] == "manifest"
    assert data["S3Verified"] == "true" and data["ManifestFiles"] == "4"
    assert data["MaxModelLen"] == "32768" and int(data["MaxModelLenThatFits"]) > 32768
    assert float(data["KvCacheGiBPerSequence"]) == pytest.approx(32768 * 32 * 1024 / 2**30, abs=0.01)  # 1.00 GiB
    assert data["QuotaValue"] == "2" and data["QuotaCode"] == "L-ABCD1234" and data["QuotaSource"] == "applied"
    assert data["ChecksRun"] == "s3,memory,context,tensor-parallel,quota,format,network" and data["ChecksSkipped"] == ""
    assert "does not guarantee" in data["Notes"] or "not a reservation" in data["Notes"]
    assert len(json.dumps(result).encode()) < 4096
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("event=")]
    assert "event=check name=memory result=ok problems=0" in lines
    assert any(line.startswith("event=passed ") for line in lines)


def test_quota_found_only_among_the_aws_defaults(handler, s3):  # noqa: F811
    stage(s3)
    handler.quota_stub.add_client_error("list_service_quotas", "NoSuchResourceException", "no applied quotas")
    handler.quota_stub.add_response(
        "list_aws_default_service_quotas", {"Quotas": [quota(value=1)]}, {"ServiceCode": "sagemaker"}
    )
    data = handler.on_event(event())["Data"]
    assert data["QuotaValue"] == "1" and data["QuotaSource"] == "AWS default"


def test_quota_pages_are_followed(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler, quota("ml.g5.xlarge for endpoint usage"), next_token="page-2")
    handler.quota_stub.add_response(
        "list_service_quotas", {"Quotas": [quota(value=3)]}, {"ServiceCode": "sagemaker", "NextToken": "page-2"}
    )
    assert handler.on_event(event())["Data"]["QuotaValue"] == "3"


def test_context_defaults_to_the_models_own_limit(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler, quota())
    assert handler.on_event(event(props=properties(MaxModelLen="")))["Data"]["MaxModelLen"] == "32768"


# --- s3 -----------------------------------------------------------------------------------------------


def test_missing_config_json_is_named_by_every_check_that_needs_it(handler, s3):  # noqa: F811
    stage(s3, config=None)
    applied(handler, quota())
    message = refused(handler)
    assert f"[s3] no config.json under {URI}: is this the checkpoint's root prefix?" in message
    assert f"[memory] cannot estimate GPU memory: no config.json under {URI}" in message
    assert "[tensor-parallel] cannot read the attention heads" in message
    assert "[quota]" not in message


def test_no_weight_file(handler, s3):  # noqa: F811
    stage(s3, weights={}, extra={"model.pth": b"x" * 10})
    applied(handler, quota())
    message = refused(handler)
    assert "[s3] no weight file (*.safetensors, *.bin, *.gguf) under" in message
    assert "(4 object(s) there)" in message
    assert "[memory] cannot estimate GPU memory: no weight files" in message


def test_an_empty_prefix_says_so(handler, s3):  # noqa: F811
    applied(handler, quota())
    message = refused(handler)
    assert f"[s3] {URI} is empty: stage the model first" in message


def test_no_manifest(handler, s3):  # noqa: F811
    stage(s3, manifest=False)
    applied(handler, quota())
    message = refused(handler)
    assert "[s3] no staging manifest .hf-model-manifest.json under" in message and "allow_unverified_s3" in message
    assert "1 problem(s)" in message  # the other checks passed


def test_manifest_size_mismatch_and_missing_files_are_listed_with_their_sizes(handler, s3):  # noqa: F811
    stage(s3, manifest_sizes={"model-00002-of-00002.safetensors": 2048, "model-00003-of-00003.safetensors": 7})
    applied(handler, quota())
    message = refused(handler)
    assert "1 of 5 file(s) in the manifest are missing from" in message
    assert "model-00003-of-00003.safetensors" in message
    assert "model-00002-of-00002.safetensors (manifest 2,048 bytes, S3 2,000)" in message


def test_allow_unverified_accepts_a_prefix_without_a_manifest(handler, s3):  # noqa: F811
    stage(s3, manifest=False, extra={"original/consolidated.safetensors": b"o" * 99})
    applied(handler, quota())
    data = handler.on_event(event(props=properties(AllowUnverifiedS3="true")))["Data"]
    assert data["S3Verified"] == "false" and data["WeightsSource"] == "listing"
    assert data["WeightsBytes"] == "5000"  # original/ is not what the engine loads
    assert "subfolders" in data["Notes"]


def test_allow_unverified_still_checks_a_manifest_that_is_there(handler, s3):  # noqa: F811
    stage(s3, manifest_sizes={"config.json": 1})
    applied(handler, quota())
    message = refused(handler, properties(AllowUnverifiedS3="true"))
    assert "differ in size from the manifest: config.json (manifest 1 bytes" in message


def test_an_unreadable_manifest_is_a_problem(handler, s3):  # noqa: F811
    stage(s3, manifest=False)
    put(s3, ".hf-model-manifest.json", b"{not json")
    applied(handler, quota())
    message = refused(handler)
    assert f"[s3] the manifest {URI}.hf-model-manifest.json is not valid JSON" in message


# --- memory and tensor parallel ----------------------------------------------------------------------


def test_model_that_does_not_fit_gives_the_numbers_and_the_largest_context(handler, s3):  # noqa: F811
    big = {**CONFIG, "num_hidden_layers": 80, "max_position_embeddings": 1_048_576}
    stage(s3, config=big)
    applied(handler, quota())
    message = refused(handler, properties(MaxModelLen="1000000"))
    assert "[memory] ml.g6.xlarge (1 x 24 GB, tensor parallel 1, max_model_len 1,000,000, 1 sequence(s)" in message
    assert "KV cache does not fit: one 1,000,000-token sequence needs 305.18 GiB of KV cache per GPU" in message
    # 24 GB x 0.9 = 20.12 GiB; the overhead is 8.5 % of the (tiny) weights: 20.12 GiB for 320 KiB per token.
    assert "but 20.12 GiB is left after weights (0.00 GiB) and overhead (0.00 GiB)" in message
    assert "Set max_model_len to at most 65,917; or an fp8 KV cache (kv-cache-dtype fp8: engine_env" in message
    assert "[s3]" not in message and "[quota]" not in message


def test_a_longer_profiling_pass_leaves_less_kv_cache(handler, s3):  # noqa: F811
    # engine_env SM_VLLM_MAX_NUM_BATCHED_TOKENS reaches the estimate: 63,488 tokens beyond vLLM's 2048 default, each
    # 2 x hidden_size 16-bit activations (no intermediate_size in CONFIG): 63,488 x 16 KiB = 0.97 GiB more overhead.
    stage(s3)
    applied(handler, quota())
    applied(handler, quota())
    default = handler.on_event(event())["Data"]
    batched = handler.on_event(event(props=properties(MaxNumBatchedTokens="65536")))["Data"]
    assert default["OverheadGiBPerGpu"] == "0.00" and batched["OverheadGiBPerGpu"] == "0.97"
    assert int(batched["MaxModelLenThatFits"]) < int(default["MaxModelLenThatFits"])
    assert "MaxNumBatchedTokens='0' must be positive" in refused(handler, properties(MaxNumBatchedTokens="0"))


# Llama 3.1's rope_type llama3 does not extend its 131,072 positions (vLLM's _get_and_verify_max_len).
LLAMA3 = {**CONFIG, "max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}


def test_a_context_past_what_the_engine_accepts_fails_the_context_check_not_a_note(handler, s3):  # noqa: F811
    stage(s3, config={**LLAMA3, "num_hidden_layers": 1})
    applied(handler, quota())
    message = refused(handler, properties(MaxModelLen="200000"))
    assert "(1) [context]" in message and "1 problem(s)" in message
    assert (
        "max_model_len=200000: above the longest context the engine accepts for this model, 131,072 tokens" in message
    )
    assert "The largest context that fits here: 131,072" in message


def test_skipping_memory_still_refuses_the_context_and_context_has_its_own_skip(handler, s3):  # noqa: F811
    stage(s3, config={**LLAMA3, "num_hidden_layers": 1})
    applied(handler, quota())
    message = refused(handler, properties(MaxModelLen="200000", SkipChecks=["memory"]))
    assert "(1) [context] max_model_len=200000: above the longest context" in message and "1 problem(s)" in message
    applied(handler, quota())
    data = handler.on_event(event(props=properties(MaxModelLen="200000", SkipChecks=["context"])))["Data"]
    assert data["ChecksSkipped"] == "context" and "context" not in data["ChecksRun"].split(",")
    assert "exceeds the model's max_position_embeddings=131,072" in data["Notes"]  # the memory check's warning


def test_vllms_long_context_variable_turns_the_refusal_into_a_note(handler, s3):  # noqa: F811
    stage(s3, config={**LLAMA3, "num_hidden_layers": 1})
    applied(handler, quota())
    props = properties(MaxModelLen="200000", LongContext="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    data = handler.on_event(event(props=props))["Data"]
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets vLLM start with it" in data["Notes"]
    assert data["MaxModelLen"] == "200000"


def test_a_refused_context_gets_memory_advice_at_the_limit_never_for_the_refused_length(handler, s3):  # noqa: F811
    # 32 layers: one 131,072-token sequence needs 16 GiB of KV cache, more than a GPU of 8 GB holds.
    stage(s3, config={**LLAMA3, "num_hidden_layers": 32})
    applied(handler, quota())
    message = refused(handler, properties(MaxModelLen="1000000", GpuMemoryGib="8"))
    assert "[memory] ml.g6.xlarge" in message and "[context] max_model_len=1000000" in message
    memory = message.split("[memory]")[1].split("[context]")[0]
    assert "at 131,072 tokens, the longest context the engine accepts" in memory
    assert "one 131,072-token sequence needs" in memory
    assert "1,000,000-token" not in memory and "1,000,000 tokens then fit" not in memory


def test_the_default_context_is_what_the_engine_derives_rope_scaling_included(handler, s3):  # noqa: F811
    yarn = {**CONFIG, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16384}}
    stage(s3, config={**yarn, "num_hidden_layers": 1})
    applied(handler, quota())
    # 16,384 x 4 = 65,536, past the 32,768 positions config.json states: vLLM's derived length.
    assert handler.on_event(event(props=properties(MaxModelLen="")))["Data"]["MaxModelLen"] == "65536"
    applied(handler, quota())
    assert handler.on_event(event(props=properties(MaxModelLen="65536")))["Data"]["MaxModelLen"] == "65536"


def test_tensor_parallel_that_does_not_divide_the_heads(handler, s3):  # noqa: F811
    stage(s3, config={**CONFIG, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128})
    applied(handler, quota("ml.g6.12xlarge for endpoint usage", 1))
    props = properties(InstanceType="ml.g6.12xlarge", GpuCount="4", TensorParallelSize="3")
    message = refused(handler, props)
    assert "[tensor-parallel] tensor_parallel_size=3 does not divide num_attention_heads=40" in message
    assert "Allowed: 1, 2, 4, 8" in message
    assert "[memory]" not in message  # one problem, reported once, by its own check


# --- quota --------------------------------------------------------------------------------------------


def test_quota_too_low(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler, quota(value=1))
    message = refused(handler, properties(InstancesNeeded="3"))
    assert "[quota] the quota 'ml.g6.xlarge for endpoint usage' (L-ABCD1234, applied value) is 1" in message
    assert "this deployment needs 3 instance(s)" in message and "quota code L-ABCD1234" in message
    assert "guarantee" not in message and "reservation" not in message  # capacity is a note, never a failure


def test_quota_zero_by_default(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler)
    handler.quota_stub.add_response("list_aws_default_service_quotas", {"Quotas": [quota(value=0)]})
    assert "(L-ABCD1234, AWS default value) is 0" in refused(handler)


def test_quota_that_does_not_exist(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler)
    handler.quota_stub.add_response("list_aws_default_service_quotas", {"Quotas": []})
    assert "[quota] Service Quotas has no quota named 'ml.g6.xlarge for endpoint usage'" in refused(handler)


def test_quota_access_denied_names_the_missing_permission(handler, s3):  # noqa: F811
    stage(s3)
    handler.quota_stub.add_client_error("list_service_quotas", "AccessDeniedException", "not authorized", 400)
    message = refused(handler)
    assert "[quota] access denied to Service Quotas (AccessDeniedException)" in message
    assert "the preflight role needs servicequotas:ListServiceQuotas" in message


def test_quota_throttling_is_retried_by_botocore_then_reported(handler, s3):  # noqa: F811
    stubbed = handler._clients.pop("service-quotas")
    assert handler.client("service-quotas").meta.config.retries == {"mode": "standard", "total_max_attempts": 6}
    handler._clients["service-quotas"] = stubbed  # a Stubber answers before botocore's retries; see test_failure_paths
    stage(s3)
    handler.quota_stub.add_client_error(
        "list_service_quotas",
        "TooManyRequestsException",
        "Rate exceeded",
        400,
        response_meta={"RetryAttempts": handler.RETRY_ATTEMPTS - 1},
    )
    message = refused(handler)
    assert f"[quota] Service Quotas throttled ListServiceQuotas (TooManyRequestsException) after {6} attempt(s)" in (
        message
    )


# --- several problems, limits ------------------------------------------------------------------------


def test_several_problems_come_in_one_message_each_with_its_check(handler, s3):  # noqa: F811
    stage(s3, config={**CONFIG, "num_attention_heads": 40, "num_hidden_layers": 80}, manifest=False)
    applied(handler, quota("ml.g6.12xlarge for endpoint usage", 0))
    props = properties(InstanceType="ml.g6.12xlarge", GpuCount="4", GpuMemoryGib="24", TensorParallelSize="3")
    message = refused(handler, {**props, "MaxModelLen": "1000000"})
    assert message.startswith(f"Preflight refused the deployment of {URI} on 1 x ml.g6.12xlarge: 5 problem(s).")
    for number, check in enumerate(("s3", "memory", "context", "tensor-parallel", "quota"), 1):
        assert f"({number}) [{check}]" in message
    assert message.endswith(
        "name it in the preflight's skip_checks (s3, memory, context, tensor-parallel, quota, format, network)."
    )


def test_the_message_stays_under_4_kb_and_names_every_failing_check(handler, s3):  # noqa: F811
    names = {f"shard-{'x' * 180}-{i:05d}.safetensors": 10 for i in range(40)}
    stage(s3, weights=names, manifest_sizes={name: 11 for name in names}, config={**CONFIG, "num_attention_heads": 40})
    applied(handler, quota("ml.g6.12xlarge for endpoint usage", 0))
    props = properties(InstanceType="ml.g6.12xlarge", GpuCount="4", TensorParallelSize="3", MaxModelLen="9999999")
    message = refused(handler, props)
    for check in ("[s3]", "[memory]", "[tensor-parallel]", "[quota]"):
        assert check in message
    assert "and 35 more" in message or "…" in message


def test_failure_reason_shares_the_limit_fairly_and_never_splits_a_character(handler):
    settings = handler.Settings.from_properties(properties())
    problems = [("s3", "🪣" * 5000), ("memory", "m" * 10), ("quota", "q" * 9000)]
    reason = handler.failure_reason(problems, settings, limit=1000)
    assert len(reason.encode()) <= 1000
    assert "[s3] " in reason and "[memory] mmmmmmmmmm" in reason and "[quota] qqq" in reason
    reason.encode().decode()  # valid UTF-8


def test_data_stays_under_the_limit(handler):
    data = handler.bounded_data(dict.fromkeys(handler.DATA_KEYS, "1"), ["n" * 5000, "n" * 5000, "other"])
    assert len(json.dumps(data).encode()) <= handler.DATA_LIMIT


# --- skipping -----------------------------------------------------------------------------------------


def test_skipped_checks_do_not_run(handler, s3):  # noqa: F811
    stage(s3, manifest=False, config={**CONFIG, "num_attention_heads": 40, "head_dim": 128})
    props = properties(
        GpuCount="4", TensorParallelSize="3", SkipChecks=["s3", "tensor-parallel", "quota", "format", "network"]
    )
    data = handler.on_event(event(props=props))["Data"]  # the Stubber refuses any Service Quotas call
    assert data["ChecksRun"] == "memory,context" and data["ChecksSkipped"] == "s3,tensor-parallel,quota,format,network"
    assert data["QuotaValue"] == "" and data["WeightsGiBPerGpu"] != ""


def test_skipping_every_check_reads_nothing(handler):
    def no_client():
        raise AssertionError("no client may be created")

    settings = handler.Settings.from_properties(
        properties(SkipChecks='["s3","memory","context","tensor-parallel","quota","format","network"]')
    )
    report = handler.run_checks(settings, s3=no_client, quotas=no_client)
    assert report.problems == [] and report.data["ChecksRun"] == ""


def test_skip_checks_as_cloudformation_may_pass_them(handler):
    for raw in (["quota"], '["quota"]', "quota", " Quota "):
        assert handler.Settings.from_properties(properties(SkipChecks=raw)).skip == {"quota"}


def test_check_names_match_the_constructs():
    assert load_lambda("deployment_preflight").CHECKS == CONSTRUCT_CHECKS


def test_invalid_properties_fail_at_once_with_every_problem(handler):
    bad = properties(
        ModelS3Uri="my-bucket/prefix",
        GpuCount="two",
        GpuMemoryGib="-1",
        TensorParallelSize="8",
        KvCacheDtype="int3",
        GpuMemoryUtilization="1.5",
        AllowUnverifiedS3="maybe",
        SkipChecks=["quota", "vibes"],
    )
    with pytest.raises(handler.PreflightFailed) as error:
        handler.on_event(event(props=bad))
    message = str(error.value)
    for fragment in (
        "ModelS3Uri='my-bucket/prefix'",
        "GpuCount='two' is not a whole number",
        "GpuMemoryGib='-1' must be positive",
        "TensorParallelSize=8 exceeds GpuCount=1",
        "KvCacheDtype='int3'",
        "GpuMemoryUtilization=1.5",
        "AllowUnverifiedS3='maybe'",
        "unknown checks ['vibes']",
    ):
        assert fragment in message


# --- lifecycle ----------------------------------------------------------------------------------------


def test_delete_does_nothing(handler):
    assert handler.on_event(event("Delete", {}, PhysicalResourceId="preflight-abc")) == {
        "PhysicalResourceId": "preflight-abc"
    }
    assert handler._clients.get("s3") is None  # nothing was read


def test_update_keeps_the_physical_id_and_a_retried_create_gets_the_same_one(handler, s3):  # noqa: F811
    stage(s3)
    for _ in range(3):
        applied(handler, quota())
    first = handler.on_event(event())["PhysicalResourceId"]
    assert handler.on_event(event(RequestId="req-1-retry"))["PhysicalResourceId"] == first
    updated = handler.on_event(
        event(
            "Update",
            properties(MaxModelLen="16384"),
            PhysicalResourceId=first,
            OldResourceProperties=properties(),
        )
    )
    assert updated["PhysicalResourceId"] == first and updated["Data"]["MaxModelLen"] == "16384"


def test_code_files_in_the_served_prefix_are_refused_before_any_gpu(handler, s3):  # noqa: F811
    stage(s3, extra={"requirements.txt": b"flash-attn\n", "model.py": b"import os\n"})
    applied(handler, quota(value=2))
    message = refused(handler)
    assert f"[checkpoint-code] {URI} holds model.py, requirements.txt, which the serving container would run" in message
    assert "set allow_checkpoint_code=true" in message


def test_an_lmi_checkpoint_that_brings_its_own_handler_is_refused(handler, s3):  # noqa: F811
    """serving.properties overrides the environment in DJL Serving (its option.entryPoint names handler.py)."""
    stage(
        s3,
        extra={
            "serving.properties": b"option.entryPoint=handler.py\noption.trust_remote_code=true\n",
            "handler.py": b"import os\nos.system('id')\n",
        },
    )
    applied(handler, quota(value=2))
    lmi = ["*.py", "code/*", "model.py", "requirements.txt", "serving.properties"]
    message = refused(handler, properties(CheckpointCode=lmi))
    assert f"{URI} holds handler.py, serving.properties, which the serving container" in message


def test_a_template_without_the_pattern_list_still_checks_every_engines_files(handler, s3):  # noqa: F811
    stage(s3, extra={"serving.properties": b"option.entryPoint=handler.py\n"})
    applied(handler, quota(value=2))
    props = properties()
    props.pop("CheckpointCode", None)
    assert "holds serving.properties, which" in refused(handler, props)


def test_allowed_checkpoint_code_is_a_note(handler, s3):  # noqa: F811
    stage(s3, extra={"requirements.txt": b"flash-attn\n", "model.py": b"import os\n"})
    applied(handler, quota(value=2))
    notes = handler.on_event(event(props=properties(AllowCheckpointCode="true")))["Data"]["Notes"]
    assert f"{URI} holds model.py, requirements.txt, which the serving container may run" in notes


def test_allow_checkpoint_code_must_be_a_boolean(handler):
    with pytest.raises(handler.PreflightFailed, match=r"AllowCheckpointCode='yes' is not a flag \(true or false\)"):
        handler.Settings.from_properties(properties(AllowCheckpointCode="yes"))


# --- quota: the second fleet of a blue/green update -----------------------------------------------------


def test_quota_counts_the_new_fleet_of_a_blue_green_update(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler, quota(value=3))
    message = refused(
        handler, properties(InstancesNeeded="2", UpdateInstances="2"), "Update", PhysicalResourceId="preflight-1"
    )
    assert (
        "this deployment needs 4 instance(s) (2 serving + 2 for an update's new instances: a blue/green fleet or "
        "a rolling batch)" in message
    )


def test_quota_that_holds_both_fleets_passes(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler, quota(value=2))
    update = event("Update", props=properties(UpdateInstances="1"), PhysicalResourceId="preflight-1")
    assert handler.on_event(update)["Data"]["QuotaValue"] == "2"


def test_a_first_deploy_needs_no_second_fleet(handler, s3):  # noqa: F811
    # The endpoint does not exist yet: a quota that fits the serving fleet exactly must pass.
    stage(s3)
    applied(handler, quota(value=2))
    created = handler.on_event(event("Create", props=properties(InstancesNeeded="2", UpdateInstances="2")))
    assert created["Data"]["QuotaValue"] == "2"


def test_update_instances_zero_or_absent_adds_nothing_and_a_bad_value_is_refused(handler):
    settings = handler.Settings.from_properties
    assert settings(properties(UpdateInstances="0")).update_instances == 0
    assert settings(properties()).update_instances == 0
    with pytest.raises(handler.PreflightFailed, match=r"UpdateInstances='two' is not a whole number"):
        settings(properties(UpdateInstances="two"))
    with pytest.raises(handler.PreflightFailed, match=r"UpdateInstances='-1' must be positive"):
        settings(properties(UpdateInstances="-1"))


# --- quota: each instance pool's type ----------------------------------------------------------------------


def test_each_instance_pool_type_needs_a_quota_for_every_instance(handler, s3):  # noqa: F811
    # SageMaker falls back to a pool whenever the types before it have no capacity, for any of the instances
    # (SageMaker developer guide, realtime-endpoints-heterogeneous): each pool's quota must hold all of them.
    stage(s3)
    applied(handler, quota(value=2))  # the primary, ml.g6.xlarge: fits
    applied(handler, quota("ml.g5.xlarge for endpoint usage", value=1, code="L-G5X"))  # the first fallback: short
    applied(handler, quota("ml.g6.2xlarge for endpoint usage", value=4, code="L-G62X"))  # the second: fits
    message = refused(handler, properties(InstancesNeeded="2", InstancePools=["ml.g5.xlarge", "ml.g6.2xlarge"]))
    assert "[quota] the quota 'ml.g5.xlarge for endpoint usage' (L-G5X, applied value) is 1" in message
    assert "needs 2 instance(s) (instance_pools fallback ml.g5.xlarge: SageMaker may place every instance" in message
    assert "ml.g6.2xlarge" not in message and "1 problem(s)" in message
    handler.quota_stub.assert_no_pending_responses()


def test_instance_pools_whose_quotas_hold_pass_and_none_reads_only_the_primary(handler, s3):  # noqa: F811
    stage(s3)
    applied(handler, quota(value=2))
    applied(handler, quota("ml.g5.xlarge for endpoint usage", value=2, code="L-G5X"))
    created = handler.on_event(event("Create", props=properties(InstancesNeeded="2", InstancePools=["ml.g5.xlarge"])))
    assert created["Data"]["QuotaValue"] == "2"  # the primary's, as before
    handler.quota_stub.assert_no_pending_responses()
    stage(s3)
    applied(handler, quota(value=2))
    handler.on_event(event("Create", props=properties(InstancesNeeded="2")))  # one quota read: no pools
    handler.quota_stub.assert_no_pending_responses()


def test_component_mode_pools_need_the_serving_instances_and_an_updates_batch_on_each_type(handler, s3):  # noqa: F811
    # Component mode: 2 serving instances and 1 kept for an update's batch (ManagedInstanceScaling max 3), sized for
    # the 1-GPU fallback (test_component_pools_size_the_preflight_for_the_type_with_fewest_gpus); every one of them
    # may be a fallback, so each pool's quota must hold the 3.
    stage(s3)
    props = properties(
        InstanceType="ml.g6.12xlarge",
        GpuCount="4",
        InstancesNeeded="2",
        UpdateInstances="1",
        InstancePools=["ml.g6.xlarge"],
    )
    applied(handler, quota("ml.g6.12xlarge for endpoint usage", value=3, code="L-G612X"))  # the primary: holds 3
    applied(handler, quota("ml.g6.xlarge for endpoint usage", value=2, code="L-G6X"))  # the fallback: short
    # An update (a first deploy has no batch to place: test_a_first_deploy_needs_no_second_fleet).
    message = refused(handler, props, "Update", PhysicalResourceId="preflight-1")
    assert "[quota] the quota 'ml.g6.xlarge for endpoint usage' (L-G6X, applied value) is 2" in message
    assert "needs 3 instance(s) (2 serving + 1 for an update's new instances" in message
    assert "instance_pools fallback ml.g6.xlarge: SageMaker may place every instance on it" in message
    assert "ml.g6.12xlarge for endpoint usage" not in message and "1 problem(s)" in message
    handler.quota_stub.assert_no_pending_responses()
