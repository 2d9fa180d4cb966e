"""Parsing the deployments map (constructs_lib/deployment/fleet.py): inheritance, grouping, and refusals named
deployments.<name>.<key>."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from constructs_lib.deployment.config import ConfigError
from constructs_lib.deployment.fleet import deployments_of, fleet_from_context
from tests.conftest import ROOT, context_with

IC = {"deployment_mode": "inference-component", "instance_type": "ml.g6.12xlarge", "accelerators_per_copy": 1}
ADAPTER = {"model_s3_uri": "s3://my-adapters/sql/adapter.tar.gz"}


def fleet(deployments, **top):
    return fleet_from_context(context_with(**top), deployments)


def problems(deployments, **top) -> list[str]:
    with pytest.raises(ConfigError) as info:
        fleet(deployments, **top)
    return info.value.problems


def test_the_test_fleet_groups_into_three_endpoints_and_inherits_the_rest():
    deployments = json.loads((ROOT / "tests/data/fleet.json").read_text())
    f = fleet(deployments, smoke_max_tokens=32)
    assert [(e.stack_name, [d.name for d in e.deployments]) for e in f.endpoints] == [
        ("LlmEndpoint-chat", ["chat"]),
        ("LlmEndpoint-coder", ["coder"]),
        ("LlmEndpoint-shared", ["small", "medium"]),
    ]
    coder = f.deployments[1].config
    assert coder.model_id == "Qwen/Qwen2.5-Coder-7B-Instruct" and coder.smoke_max_tokens == 32  # inherited
    small = f.endpoints[2].deployments[0]
    assert [a.name for a in small.adapters] == ["sql"]
    # Serving adapters is the engine's data (engines.json vllm.adapters), added to the base model only.
    assert small.config.engine_env["SM_VLLM_ENABLE_LORA"] is True
    assert small.config.container_env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert "SM_VLLM_ENABLE_LORA" not in f.endpoints[2].deployments[1].config.engine_env


def test_a_bad_key_is_named_with_its_deployment():
    found = problems({"a": {"instance_type": "g6.xlarge"}, "b": {"max_tokenz": 1}})
    assert any(p.startswith("deployments.a.instance_type='g6.xlarge': expected") for p in found), found
    assert any(p.startswith("deployments.b.max_tokenz: unknown context key") for p in found), found


def test_app_keys_are_refused_per_deployment():
    found = problems({"a": {"stack_name": "Other", "reuse_model_bucket": True}})
    assert any(p.startswith("deployments.a.stack_name: set for the whole app") for p in found), found
    assert any(p.startswith("deployments.a.reuse_model_bucket: set for the whole app") for p in found), found


def test_sharing_an_endpoint_needs_component_mode_and_one_value_per_endpoint_key():
    found = problems({"a": {"endpoint": "e"}, "b": {**IC, "endpoint": "e", "instance_type": "ml.g6.24xlarge"}})
    assert any(p.startswith("deployments.a.endpoint='e': shared with b; several models") for p in found), found
    assert any(p.startswith("deployments.b.instance_type='ml.g6.24xlarge': differs from deployments.a.") for p in found)


def test_deployments_sharing_an_endpoint_must_agree_on_its_instance_pools():
    # One variant carries the pools (InstancePools) for every component on it: a second list would be ignored.
    found = problems(
        {"a": {**IC, "endpoint": "e", "instance_pools": '["ml.g5.12xlarge"]'}, "b": {**IC, "endpoint": "e"}}
    )
    assert any(p.startswith("deployments.b.instance_pools=(): differs from deployments.a.") for p in found), found
    same = {**IC, "endpoint": "e", "instance_pools": '["ml.g5.12xlarge"]'}
    f = fleet({"a": same, "b": same})
    assert [d.config.instance_pools for d in f.deployments] == [("ml.g5.12xlarge",)] * 2


def test_bad_names_are_refused():
    found = problems({"bad name": {}, "ok": {"endpoint": "-x"}})
    assert any("name 'bad name' is not usable" in p for p in found), found
    assert any(p.startswith("deployments.ok.endpoint='-x'") for p in found), found
    assert problems({}) == ["deployments: empty; give at least one deployment (name -> its keys)"]


def test_adapters_need_component_mode_and_an_engine_that_serves_them():
    found = problems({"a": {"adapters": {"sql": ADAPTER}}})
    assert any(p.startswith("deployments.a.adapters: needs deployment_mode=inference-component") for p in found)
    found = problems({"a": {**IC, "engine": "sglang", "adapters": {"sql": ADAPTER}}})
    assert any(p.startswith("deployments.a.adapters: engine='sglang' has no verified way") for p in found), found


def test_an_adapter_is_one_archive_in_s3():
    found = problems({"a": {**IC, "adapters": {"sql": {"model_s3_uri": "s3://b/adapters/sql/"}, "x": {"mode": 1}}}})
    assert any(
        p.startswith("deployments.a.adapters.sql.model_s3_uri='s3://b/adapters/sql/': an adapter") for p in found
    )
    assert any(p.startswith("deployments.a.adapters.x.mode: unknown adapter key") for p in found), found
    found = problems({"a": {**IC, "adapters": {"sql": {"include": ["*.json"]}}}})
    assert found == ["deployments.a.adapters.sql: revision and include apply to an adapter from the Hub (model_id)"]


def test_an_adapter_from_the_hub_is_staged_with_its_revision_and_patterns():
    f = fleet({"a": {**IC, "adapters": {"sql": {"model_id": "org/sql-lora", "revision": "v1"}}}})
    (adapter,) = f.deployments[0].adapters
    assert (adapter.model_id, adapter.revision, adapter.artifact_url) == ("org/sql-lora", "v1", "")
    assert adapter.include == ("adapter_config.json", "adapter_model.safetensors")  # the default: PEFT's files
    f = fleet({"a": {**IC, "adapters": {"sql": {"model_id": "org/sql-lora", "include": "*.safetensors"}}}})
    assert f.deployments[0].adapters[0].include == ("*.safetensors",) and f.stages
    found = problems(
        {"a": {**IC, "adapters": {"x": {"model_id": "../x", "revision": "a b", "include": [], **ADAPTER}}}}
    )
    assert found == [
        "deployments.a.adapters.x: give model_id or model_s3_uri, not both",
        "deployments.a.adapters.x.model_id='../x': not a Hub repository id; allowed: Org/Name",
        "deployments.a.adapters.x.revision='a b': not a branch, tag or commit SHA",
        "deployments.a.adapters.x.include=[]: expected a list of glob patterns",
    ]


def test_the_map_comes_inline_or_from_a_file_not_both(tmp_path):
    path = tmp_path / "fleet.json"
    path.write_text('{"a": {}}')

    def read(p: str) -> str:
        return Path(p).read_text()

    assert deployments_of({"deployments_file": str(path)}, read) == {"a": {}}
    assert deployments_of({"deployments": '{"a": {}}'}, read) == {"a": {}}  # -c deployments=... arrives as text
    assert deployments_of({}, read) is None
    with pytest.raises(ConfigError, match="not both"):
        deployments_of({"deployments": {}, "deployments_file": str(path)}, read)
    with pytest.raises(ConfigError, match="cannot be read"):
        deployments_of({"deployments_file": str(tmp_path / "missing.json")}, read)
    path.write_text("[1]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        deployments_of({"deployments_file": str(path)}, read)


def test_deployments_sharing_an_endpoint_take_one_logs_and_one_lambda_key():
    # One stack per endpoint, so one key for its log groups and one for its functions (constructs_lib/keys.py).
    key = "arn:aws:kms:us-east-1:123456789012:key/1111abcd-12ab-34cd-56ef-1234567890ab"
    found = problems(
        {"a": {**IC, "endpoint": "e"}, "b": {**IC, "endpoint": "e", "logs_kms_key_arn": key, "lambda_kms_key_arn": key}}
    )
    for name in ("logs_kms_key_arn", "lambda_kms_key_arn"):
        assert any(p.startswith(f"deployments.b.{name}={key!r}: differs from deployments.a.") for p in found), found


def test_the_registry_gives_every_key_a_scope_and_every_endpoint_key_a_second_value():
    # constructs_lib/deployment/context_keys.py scope: the fleet's app and endpoint checks are derived from it, not
    # kept by hand.
    from constructs_lib.deployment.config import DeploymentConfig
    from constructs_lib.deployment.context_keys import APP_SCOPED, ENDPOINT_SCOPED, KEYS, SCOPES

    assert {key.scope for key in KEYS} <= set(SCOPES)
    fields = {f.name for f in dataclasses.fields(DeploymentConfig)}
    for key in KEYS:
        if key.scope == "endpoint":
            assert key.name in fields, key.name
            assert key.parse(key.example) != key.parse(key.default), f"{key.name}: its example is its default"
        else:
            assert key.example is None, f"{key.name}: an example only serves the endpoint-scoped keys' test"
    # The keys the first deployment's stack alone reads (llm_endpoint_stack.py: the stack's network, keys, tags and
    # endpoint; fleet_stacks.py: the app's bucket stack) are scoped so.
    assert {"tags", "vpc_subnet_ids", "volume_kms_key_arn"} <= set(ENDPOINT_SCOPED)
    assert "provision_timeout_s" in ENDPOINT_SCOPED
    assert {"enhanced_metrics", "metric_publish_frequency_s", "capacity_reservation_instances"} <= set(ENDPOINT_SCOPED)
    assert {"prefix_routing_length", "prefix_routing_concurrency"} <= set(ENDPOINT_SCOPED)
    assert set(APP_SCOPED) == {
        "stack_name",
        "deployments",
        "deployments_file",
        "model_bucket",
        "reuse_model_bucket",
        "bucket_kms_key_arn",
    }


def _endpoint_keys():
    from constructs_lib.deployment.context_keys import KEYS

    return [key for key in KEYS if key.scope == "endpoint"]


@pytest.mark.parametrize("key", _endpoint_keys(), ids=lambda key: key.name)
def test_two_deployments_on_one_endpoint_that_differ_in_an_endpoint_key_are_refused(key):
    # Generated from the registry: every endpoint-scoped key, its example beside the first deployment's value.
    from constructs_lib.deployment.fleet import disagreements

    first = fleet({"a": {**IC, "endpoint": "e"}}).deployments[0].config
    value = key.parse(key.example)
    if value == getattr(first, key.name):
        value = key.parse(key.default)
    other = dataclasses.replace(first, **{key.name: value})
    assert disagreements("e", [("a", first), ("b", other), ("c", first)]) == [
        f"deployments.b.{key.name}={value!r}: differs from deployments.a.{key.name}={getattr(first, key.name)!r} on "
        "the endpoint 'e' they share; one endpoint has one value: give it once at the top level or the same in both"
    ]
    assert disagreements("e", [("a", first), ("b", first)]) == []


@pytest.mark.parametrize("key", ["provision_timeout_s", "enhanced_metrics", "metric_publish_frequency_s", "tags"])
def test_keys_once_dropped_on_a_shared_endpoint_are_refused_from_the_file(key):
    from constructs_lib.deployment.context_keys import BY_NAME

    found = problems({"a": {**IC, "endpoint": "e"}, "b": {**IC, "endpoint": "e", key: BY_NAME[key].example}})
    assert [p for p in found if p.startswith(f"deployments.b.{key}=")], found


def test_an_app_key_is_refused_per_deployment_for_every_app_scoped_key():
    from constructs_lib.deployment.context_keys import APP_SCOPED

    found = problems({"a": {key: "x" for key in APP_SCOPED}})
    assert [p.split(":")[0] for p in found] == [f"deployments.a.{key}" for key in sorted(APP_SCOPED)]


def test_a_base_that_switches_lora_off_is_refused_with_its_deployments_key():
    found = problems({"a": {**IC, "engine_env": {"SM_VLLM_ENABLE_LORA": False}, "adapters": {"sql": ADAPTER}}})
    assert len(found) == 1 and found[0].startswith(
        "deployments.a.engine_env.SM_VLLM_ENABLE_LORA: its value switches off what vllm needs to serve LoRA adapter"
    ), found
    # The same base without adapters keeps the user's value as it is.
    (deployment,) = fleet({"a": {**IC, "engine_env": {"SM_VLLM_ENABLE_LORA": False}}}).deployments
    assert deployment.config.engine_env == {"SM_VLLM_ENABLE_LORA": False}


def test_a_prefix_deployment_does_not_inherit_the_apps_staging_keys():
    # bucket_kms_key_arn (app scope) and hf_endpoint apply to what is staged; a deployment serving a given prefix
    # shares the fleet without them, while an archive (staged into the app's bucket) keeps the bucket's key.
    key = "arn:aws:kms:us-east-1:123456789012:key/1111abcd-12ab-34cd-56ef-1234567890ab"
    top = {"bucket_kms_key_arn": key, "hf_endpoint": "https://hub.example.com"}
    f = fleet(
        {
            "hub": {**IC, "endpoint": "e"},
            "prefix": {**IC, "endpoint": "e", "model_s3_uri": "s3://my-models/org--m/abc/"},
            "archive": {"model_s3_uri": "s3://my-models/training/output/model.tar.gz"},
        },
        **top,
    )
    configs = {d.name: d.config for d in f.deployments}
    assert (configs["hub"].bucket_kms_key_arn, configs["hub"].hf_endpoint) == (key, "https://hub.example.com")
    assert (configs["prefix"].bucket_kms_key_arn, configs["prefix"].hf_endpoint) == (None, None)
    assert configs["archive"].bucket_kms_key_arn == key
    # Given on the prefix deployment itself, the key is still refused by name.
    found = problems({"p": {"model_s3_uri": "s3://my-models/org--m/abc/", "hf_endpoint": "https://hub.example.com"}})
    assert any(p.startswith("deployments.p.hf_endpoint=") for p in found), found
