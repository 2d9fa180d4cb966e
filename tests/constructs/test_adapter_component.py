"""AdapterComponent: a LoRA adapter as an adapter inference component on its base (constructs_lib/adapter_component)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from constructs_lib import AdapterComponent, Refusal, S3ModelData, get_engine
from constructs_lib.inference_component import ComponentEndpoint
from constructs_lib.rules import adapter_env

# Adapter components synthesized in whole apps: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

ARCHIVE = "s3://my-adapters/sql/adapter.tar.gz"


def base(engine: str = "vllm"):
    app = cdk.App()
    stack = cdk.Stack(app, "Test")
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "model-bucket")
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6.12xlarge", engine=engine)
    component = endpoint.add_component(
        "Chat", model=S3ModelData(bucket, "models/org--m/abc123"), engine=engine, tensor_parallel_size=1
    )
    return stack, component


def test_the_adapter_names_its_base_and_its_archive_and_asks_for_no_compute():
    stack, component = base()
    adapter = AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE, component_name="chat-sql")
    resources = Template.from_stack(stack).find_resources("AWS::SageMaker::InferenceComponent")
    (logical_id, resource) = next((k, r) for k, r in resources.items() if k.startswith("Sql"))
    props = resource["Properties"]
    assert props["InferenceComponentName"] == "chat-sql" == adapter.inference_component_name
    assert props["Specification"] == {
        "BaseInferenceComponentName": component.inference_component_name,
        "Container": {"ArtifactUrl": ARCHIVE},
    }
    assert "VariantName" not in props and "RuntimeConfig" not in props
    base_id = next(k for k in resources if k != logical_id)
    assert base_id in resource["DependsOn"]


def test_the_smoke_test_invokes_the_adapter_not_its_base():
    stack, component = base()
    adapter = AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE, component_name="chat-sql")
    adapter.smoke_test(adapter, "SmokeTest")
    (smoke,) = Template.from_stack(stack).find_resources("Custom::EndpointSmokeTest").values()
    assert smoke["Properties"]["InferenceComponentName"] == "chat-sql"
    assert "ModelName" not in smoke["Properties"]  # an adapter component runs no model of its own


@pytest.mark.parametrize(
    "url",
    ["s3://my-adapters/sql/", "s3://my-adapters/sql/adapter.zip", "https://example.com/a.tar.gz", "s3://A/x.tar.gz"],
)
def test_anything_but_one_archive_in_s3_is_refused(url):
    stack, component = base()
    with pytest.raises(Refusal, match="must be one gzip compressed tar archive"):
        AdapterComponent(stack, "Sql", base=component, artifact_url=url)


def test_an_engine_without_adapter_data_is_refused():
    stack, component = base("sglang")
    with pytest.raises(Refusal, match="engine='sglang' has no verified way to serve LoRA adapter"):
        AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE)


def test_adapter_env_adds_the_engine_data_and_the_user_value_wins():
    engine_env, container_env = adapter_env(get_engine("vllm"), {"SM_VLLM_MAX_LORA_RANK": "64"}, {})
    assert engine_env == {"SM_VLLM_ENABLE_LORA": True, "SM_VLLM_MAX_LORA_RANK": "64"}
    assert container_env == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    assert adapter_env(get_engine("vllm"), {}, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"})[1] == {
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"
    }
    with pytest.raises(ValueError, match="allowed: engine=vllm"):
        adapter_env(get_engine("lmi"), {}, {})


def _policy_statements(stack: cdk.Stack, role_logical_prefix: str) -> list[dict]:
    policies = Template.from_stack(stack).find_resources("AWS::IAM::Policy")
    return [
        s
        for p in policies.values()
        if any(r["Ref"].startswith(role_logical_prefix) for r in p["Properties"].get("Roles", []))
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_grant_invoke_names_the_endpoint_and_the_adapter_not_the_base():
    from aws_cdk import aws_iam as iam

    stack, component = base()
    adapter = AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE, component_name="chat-sql")
    caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    adapter.grant_invoke(caller, bearer_token=True)
    statements = _policy_statements(stack, "Caller")
    invoke = next(s for s in statements if "sagemaker:InvokeEndpoint" in s["Action"])
    assert invoke["Action"] == ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
    resources = [next(iter(r.values()))[0] if isinstance(r, dict) else r for r in invoke["Resource"]]
    (adapter_id,) = [
        k
        for k in Template.from_stack(stack).find_resources("AWS::SageMaker::InferenceComponent")
        if k.startswith("Sql")
    ]
    assert adapter_id in resources and len(resources) == 2  # the endpoint and this adapter only
    bearer = next(s for s in statements if s["Action"] == "sagemaker:CallWithBearerToken")
    assert bearer["Resource"] == "*"


def test_the_adapters_openai_base_url_names_the_adapter_component():
    stack, component = base()
    adapter = AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE, component_name="chat-sql")
    cdk.CfnOutput(stack, "Url", value=adapter.openai_base_url)
    value = Template.from_stack(stack).to_json()["Outputs"]["Url"]["Value"]
    joined = "".join(p for p in value["Fn::Join"][1] if isinstance(p, str))
    assert joined.endswith("/inference-components/chat-sql/openai/v1")


def _model_environment(stack: cdk.Stack, prefix: str = "EndpointChatModel") -> dict:
    models = Template.from_stack(stack).find_resources("AWS::SageMaker::Model")
    (model,) = [m for k, m in models.items() if k.startswith(prefix)]
    return model["Properties"]["PrimaryContainer"]["Environment"]


def test_the_adapter_enables_lora_on_its_base_and_a_value_the_user_gave_wins():
    """Following the docstring, with nothing set on the base by hand: the base's Model gets vLLM's LoRA switch and
    runtime adapter loading (engines.json ``adapters``), once however many adapters attach."""
    stack, component = base()
    assert "SM_VLLM_ENABLE_LORA" not in component.environment
    AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE)
    AdapterComponent(stack, "Chat2", base=component, artifact_url="s3://my-adapters/chat/adapter.tar.gz")
    env = _model_environment(stack)
    # A boolean engine flag is the variable with an empty value (as tests/stacks/test_fleet.py reads it).
    assert env["SM_VLLM_ENABLE_LORA"] == "" and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert component.environment == env
    # A base built with the adapter settings already (adapter_env) is left as it is.
    app = cdk.App()
    stack = cdk.Stack(app, "Given")
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6.12xlarge")
    engine_env, container_env = adapter_env(get_engine("vllm"), {"SM_VLLM_MAX_LORA_RANK": "64"}, {})
    given = endpoint.add_component(
        "Chat",
        model=S3ModelData(s3.Bucket.from_bucket_name(stack, "M", "bkt-models"), "m/"),
        engine_env=engine_env,
        container_env=container_env,
    )
    before = dict(given.environment)
    AdapterComponent(stack, "Sql", base=given, artifact_url=ARCHIVE)
    assert _model_environment(stack) == before and before["SM_VLLM_MAX_LORA_RANK"] == "64"
    assert given.max_lora_rank == 64 and component.max_lora_rank == 16  # engines.json's default rank


def _staged(stack: cdk.Stack, **props):
    from constructs_lib import StagedCheckpoint

    return StagedCheckpoint(stack, "SqlAdapter", **{"repo_id": "org/sql-lora", "revision": "a" * 40, **props})


def _hub_base(stack: cdk.Stack, repo_id: str = "Qwen/Qwen3-4B"):
    from constructs_lib import StagedCheckpoint

    model = StagedCheckpoint(stack, "Base", repo_id=repo_id, revision="b" * 40)
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6.12xlarge")
    return endpoint.add_component("Chat", model=model)


def test_a_staged_adapter_is_read_by_the_base_role_and_waited_for():
    app = cdk.App()
    stack = cdk.Stack(app, "Staged")
    component = _hub_base(stack)
    staged = _staged(stack, pack=True, adapter_base_model_id="Qwen/Qwen3-4B", max_lora_rank=16)
    adapter = AdapterComponent(stack, "Sql", base=component, artifact=staged)
    template = Template.from_stack(stack)
    resources = template.find_resources("AWS::SageMaker::InferenceComponent")
    (resource,) = [r for k, r in resources.items() if k.startswith("Sql")]
    # Created once the staging job verified every byte: after the staged archive's wait condition.
    assert stack.get_logical_id(staged.dependable) in resource["DependsOn"]
    assert resource["Properties"]["Specification"]["Container"]["ArtifactUrl"] == stack.resolve(staged.archive_uri)
    role_id = stack.get_logical_id(component.role.node.default_child)
    reads = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "s3:GetObject" and "model.tar.gz" in str(s["Resource"])
    ]
    # The base's role reads the one archive object, nothing wider (StagedCheckpoint.grant_read_archive).
    assert len(reads) == 1 and "*" not in str(reads[0]["Resource"]), reads
    assert _model_environment(stack)["SM_VLLM_ENABLE_LORA"] == ""
    assert stack.resolve(adapter.artifact_url) == stack.resolve(staged.archive_uri)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"pack": False}, "is not packed: an adapter component's ArtifactUrl is one .tar.gz; allowed: pack=True"),
        (
            {"pack": True, "adapter_base_model_id": "Qwen/Qwen3-0.6B", "max_lora_rank": 16},
            "is staged for adapter_base_model_id='Qwen/Qwen3-0.6B', but base=Staged/Endpoint/Chat serves "
            "'Qwen/Qwen3-4B'",
        ),
        (
            {"pack": True, "adapter_base_model_id": "Qwen/Qwen3-4B", "max_lora_rank": 17},
            "is checked against max_lora_rank=17, but base=Staged/Endpoint/Chat serves LoRA ranks up to 16 "
            "(SM_VLLM_MAX_LORA_RANK)",
        ),
    ],
)
def test_a_staged_adapter_for_another_base_or_a_larger_rank_is_refused_at_synth(props, message):
    app = cdk.App()
    stack = cdk.Stack(app, "Staged")
    component = _hub_base(stack)
    with pytest.raises(Refusal) as refused:
        AdapterComponent(stack, "Sql", base=component, artifact=_staged(stack, **props))
    assert message in str(refused.value)


def test_at_the_rank_the_base_serves_and_for_its_model_the_staged_adapter_is_accepted():
    app = cdk.App()
    stack = cdk.Stack(app, "Staged")
    AdapterComponent(
        stack,
        "Sql",
        base=_hub_base(stack),
        artifact=_staged(stack, pack=True, adapter_base_model_id="Qwen/Qwen3-4B", max_lora_rank=16),
    )


@pytest.mark.parametrize("given", ["both", "neither"])
def test_one_of_artifact_url_and_artifact_is_given(given):
    app = cdk.App()
    stack = cdk.Stack(app, "Staged")
    component = _hub_base(stack)
    extra = {"artifact_url": ARCHIVE, "artifact": _staged(stack, pack=True)} if given == "both" else {}
    with pytest.raises(Refusal, match=r"give one of artifact_url= .* and artifact="):
        AdapterComponent(stack, "Sql", base=component, **extra)


def _page_examples() -> list[str]:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "constructs" / "AdapterComponent.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("index", range(2))
def test_the_pages_examples_synthesize_with_the_wiring_they_promise(index):
    from aws_cdk import aws_iam as iam

    examples = _page_examples()
    assert len(examples) == 2
    app = cdk.App()
    stack = cdk.Stack(app, "Example")
    role = iam.Role(stack, "Client", assumed_by=iam.AccountRootPrincipal())
    code = examples[index].replace("<commit sha>", "c" * 40)
    exec(compile(code, "AdapterComponent.md", "exec"), {"self": stack, "client_role": role})
    template = Template.from_stack(stack)
    adapters = [
        r
        for r in template.find_resources("AWS::SageMaker::InferenceComponent").values()
        if "BaseInferenceComponentName" in r["Properties"]["Specification"]
    ]
    assert len(adapters) == 1
    (model,) = template.find_resources("AWS::SageMaker::Model").values()
    assert model["Properties"]["PrimaryContainer"]["Environment"]["SM_VLLM_ENABLE_LORA"] == ""


def test_enabling_lora_keeps_the_users_own_overrides_of_the_base_environment():
    stack, component = base()
    component.model.add_property_override("PrimaryContainer.Environment.MY_ESCAPE", "1")
    AdapterComponent(stack, "Sql", base=component, artifact_url=ARCHIVE)
    env = _model_environment(stack)
    assert env["MY_ESCAPE"] == "1" and env["SM_VLLM_ENABLE_LORA"] == ""


@pytest.mark.parametrize(
    ("engine_env", "container_env", "refused"),
    [
        # JSON false drops an engine flag (engines.json boolean_values), so the base starts without LoRA.
        ({"SM_VLLM_ENABLE_LORA": False}, {}, "engine_env.SM_VLLM_ENABLE_LORA"),
        ({"SM_VLLM_ENABLE_LORA": "false"}, {}, "engine_env.SM_VLLM_ENABLE_LORA"),
        ({}, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0"}, "container_env.VLLM_ALLOW_RUNTIME_LORA_UPDATING"),
        ({}, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "False"}, "container_env.VLLM_ALLOW_RUNTIME_LORA_UPDATING"),
        # Text where users write text: the same switch, on, in any case or as 1 (vllm/envs.py).
        ({"SM_VLLM_ENABLE_LORA": "true"}, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}, None),
        ({"SM_VLLM_ENABLE_LORA": True}, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": " TRUE "}, None),
    ],
)
def test_a_base_whose_own_values_switch_lora_off_is_refused(engine_env, container_env, refused):
    app = cdk.App()
    stack = cdk.Stack(app, "Off")
    endpoint = ComponentEndpoint(stack, "Endpoint", instance_type="ml.g6.12xlarge")
    given = endpoint.add_component(
        "Chat",
        model=S3ModelData(s3.Bucket.from_bucket_name(stack, "M", "bkt-models"), "m/"),
        engine_env=engine_env,
        container_env=container_env,
    )
    if refused is None:
        AdapterComponent(stack, "Sql", base=given, artifact_url=ARCHIVE)
        assert (
            _model_environment(stack)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]
            == container_env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]
        )  # the user's text, unchanged
        return
    with pytest.raises(Refusal) as info:
        AdapterComponent(stack, "Sql", base=given, artifact_url=ARCHIVE)
    message = f"base=Off/Endpoint/Chat {refused}: its value switches off what vllm needs to serve LoRA adapter"
    assert message in str(info.value)
    with pytest.raises(ValueError, match="switches off"):
        adapter_env(get_engine("vllm"), engine_env, container_env)


def test_the_base_model_is_compared_as_the_hub_compares_ids_in_any_case():
    app = cdk.App()
    stack = cdk.Stack(app, "Case")
    AdapterComponent(
        stack,
        "Sql",
        base=_hub_base(stack, "Qwen/Qwen3-4B"),
        artifact=_staged(stack, pack=True, adapter_base_model_id="qwen/qwen3-4b", max_lora_rank=16),
    )
