"""The deploy preflight runs the memory and format checks on every instance pool's GPUs, as on ``instance_type``.

SageMaker falls back to a pool whenever the types before it have no capacity (SageMaker developer guide,
realtime-endpoints-heterogeneous), so a fallback whose GPUs cannot hold the model fails exactly when it is needed.
Synth checks the pools when it has the model's facts (constructs_lib/deployment/model_checks.py); the preflight is the
first to see
the staged checkpoint otherwise.
"""

from __future__ import annotations

import json

from tests.fakes.fixtures import s3  # noqa: F401
from tests.handlers.test_preflight_format import preflight_properties
from tests.handlers.test_preflight_handler import (  # noqa: F401
    CONFIG,
    event,
    handler,
    properties,
    refused,
    stage,
)

NO_QUOTA = ["quota", "network"]
# 32 KiB of KV cache per token (CONFIG) x 32,768 tokens x 30 sequences = 30 GiB: fits 48 GB, not 24 GB.
L40S = {"InstanceType": "ml.g6e.xlarge", "GpuMemoryGib": "48", "MaxNumSeqs": "30", "SkipChecks": NO_QUOTA}
G6 = {"GpuCount": 1, "GpuMemoryGib": 24}


def test_a_fallback_whose_gpu_cannot_hold_the_kv_cache_is_refused_naming_it(handler, s3):  # noqa: F811
    stage(s3)
    assert handler.on_event(event(props=properties(**L40S)))["PhysicalResourceId"].startswith("preflight-")
    pools = {"InstancePools": ["ml.g6.xlarge"], "PoolGpus": json.dumps({"ml.g6.xlarge": G6})}
    message = refused(handler, properties(**L40S, **pools))
    fallback = "[memory] instance_pools fallback ml.g6.xlarge: ml.g6.xlarge (1 x 24 GB, tensor parallel 1, "
    assert fallback + "max_model_len 32,768, 30 sequence(s)" in message
    assert "ml.g6e.xlarge (" not in message  # the primary fits


def test_a_fallback_with_room_passes_and_one_without_gpus_listed_is_left_to_the_quota_check(handler, s3):  # noqa: F811
    stage(s3)
    roomy = {"ml.g6e.2xlarge": {"GpuCount": 1, "GpuMemoryGib": 48}}
    ok = properties(**L40S, InstancePools=["ml.g6e.2xlarge"], PoolGpus=json.dumps(roomy))
    assert handler.on_event(event(props=ok))["PhysicalResourceId"].startswith("preflight-")
    # A template from before PoolGpus names the pools only: nothing more is checked than before.
    older = properties(**L40S, InstancePools=["ml.g6.xlarge"])
    assert handler.on_event(event(props=older))["PhysicalResourceId"].startswith("preflight-")


def test_a_fallback_with_fewer_gpus_than_the_tensor_parallel_size_is_refused(handler, s3):  # noqa: F811
    stage(s3)
    props = properties(
        InstanceType="ml.g6.12xlarge",
        GpuCount="4",
        TensorParallelSize="4",
        SkipChecks=NO_QUOTA,
        InstancePools=["ml.g6.xlarge"],
        PoolGpus=json.dumps({"ml.g6.xlarge": G6}),
    )
    message = refused(handler, props)
    assert "[memory] instance_pools fallback ml.g6.xlarge: ml.g6.xlarge has 1 GPU(s), fewer than Tensor" in message


def test_a_fallback_whose_gpu_lacks_the_weight_format_is_refused_naming_it(handler, s3):  # noqa: F811
    stage(s3)  # config.json says torch_dtype bfloat16: compute capability 8.0 or newer (weight_formats.json)
    t4 = {"GpuCount": 1, "GpuMemoryGib": 16, "ComputeCapability": "7.5", "FormatAlternatives": '{"8.0":"ml.g6.xlarge"}'}
    props = properties(
        Engine="vllm",
        ComputeCapability="8.9",
        Dtype="bfloat16",
        SkipChecks=NO_QUOTA,
        InstancePools=["ml.g4dn.xlarge"],
        PoolGpus=json.dumps({"ml.g4dn.xlarge": t4}),
    )
    message = refused(handler, props)
    assert "[format] instance_pools fallback ml.g4dn.xlarge: bfloat16 weights and compute need compute" in message
    assert "ml.g4dn.xlarge (compute capability 7.5)" in message


def test_a_malformed_pool_entry_is_named(handler, s3):  # noqa: F811
    # What a hand-edited template could hold; the preflight says which entry, not a traceback.
    settings = handler.Settings.from_properties(
        properties(InstancePools=["ml.g6.xlarge"], PoolGpus=json.dumps({"ml.g6.xlarge": {"GpuCount": "one"}}))
    )
    ((pool, on_pool, why),) = handler.pool_settings(settings)
    assert pool == "ml.g6.xlarge" and on_pool is None and "has no whole GpuCount and GpuMemoryGib" in why


def test_the_construct_lists_each_catalog_fallbacks_gpus_and_none_without_pools():
    props = preflight_properties(instance_type="ml.g6e.xlarge", instance_pools=["ml.g6.xlarge"], engine="vllm")
    gpus = json.loads(props["PoolGpus"])
    assert gpus["ml.g6.xlarge"]["GpuCount"] == 1 and gpus["ml.g6.xlarge"]["ComputeCapability"] == "8.9"
    assert gpus["ml.g6.xlarge"]["GpuMemoryGib"] == 24 and "FormatAlternatives" in gpus["ml.g6.xlarge"]
    assert "PoolGpus" not in preflight_properties(instance_type="ml.g6.xlarge")  # templates without pools unchanged
    plain = json.loads(preflight_properties(instance_type="ml.g6e.xlarge", instance_pools=["ml.g6.xlarge"])["PoolGpus"])
    assert plain == {"ml.g6.xlarge": {"GpuCount": 1, "GpuMemoryGib": 24}}  # no engine: no format check
