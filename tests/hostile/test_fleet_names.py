"""Fleet names that collide (issue 34, item 5): names that become one construct id, output, endpoint or component
name are refused at synth naming both entries, in the one refusal format; llmops finds an app's stacks by their
``AppName`` output, not by a name prefix another app shares.

Before: ``a-b`` and ``aB`` packed on one endpoint crashed synth with a jsii traceback ("There is already a Construct
with name 'AB'"), on two endpoints they synthesized and ``--deployment a-b`` could resolve to ``aB``'s endpoint; a
duplicate deployment key in the fleet file was dropped by ``json``; two endpoints with one ``endpoint_name`` (in any
case: SageMaker CreateEndpoint treats EndpointName case-insensitively) passed synth and failed the second deploy.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st

from constructs_lib.deployment.config import ConfigError
from constructs_lib.deployment.fleet import NAME, DuplicateKey, deployments_of, fleet_from_context, pascal, unique_pairs
from llmops.fleet_target import APP_OUTPUT, fleet_outputs, is_app_stack, resolve
from llmops.status import endpoint_names
from tests.conftest import build, context_with
from tests.hostile.tally import Tally, report_fixture

TALLY = Tally()
_report_tally = report_fixture(TALLY)
BOUNDED = settings(max_examples=40, deadline=None, database=None)
IC = {"deployment_mode": "inference-component", "instance_type": "ml.g6.12xlarge", "accelerators_per_copy": 1}
MODEL = {"model_id": "Qwen/Qwen3-0.6B"}
ADAPTER = {"model_s3_uri": "s3://my-adapters/sql/adapter.tar.gz"}
PACKED = {**IC, **MODEL, "endpoint": "shared"}
REGION = "us-east-1"


def refusals(deployments, **top) -> list[str]:
    with pytest.raises(ConfigError) as info:
        fleet_from_context(context_with(**top), deployments)
    assert str(info.value).startswith("context (fix with -c key=value or in cdk.json): ")  # the one format
    return info.value.problems


# --- names that become one construct id or output ---


def test_names_equal_in_pascal_case_packed_on_one_endpoint_are_refused_naming_both():
    assert refusals({"a-b": PACKED, "aB": PACKED}) == [
        "deployments.a-b and deployments.aB: both become the output 'ABEndpointName' (names join in PascalCase: "
        "hyphens dropped, parts capitalised); rename one"
    ]


def test_names_equal_in_pascal_case_on_two_endpoints_are_refused_naming_both():
    (problem,) = refusals({"a-b": MODEL, "aB": MODEL})
    assert problem.startswith("deployments.a-b and deployments.aB: both become the output 'ABEndpointName'"), problem
    assert "in two stacks, so --deployment would find either" in problem


def test_a_deployment_named_like_another_ones_adapter_outputs_is_refused():
    (problem,) = refusals({"chat": {**IC, **MODEL, "adapters": {"sql": ADAPTER}}, "chat-sql-adapter": MODEL})
    assert problem.startswith(
        "deployments.chat.adapters.sql and deployments.chat-sql-adapter: both become the output "
        "'ChatSqlAdapterOpenAiBaseUrl'"
    ), problem


def test_a_packed_deployment_named_like_the_first_ones_adapter_construct_is_refused():
    found = refusals({"chat": {**PACKED, "adapters": {"sql": ADAPTER}}, "adapter-sql": PACKED})
    assert found == [
        "deployments.chat.adapters.sql and deployments.adapter-sql: both become the construct id 'AdapterSql' (names "
        "join in PascalCase: hyphens dropped, parts capitalised); rename one"
    ]


def test_adapters_equal_in_pascal_case_are_refused():
    (problem,) = refusals({"chat": {**IC, **MODEL, "adapters": {"s-ql": ADAPTER, "sQl": ADAPTER}}})
    assert problem.startswith("deployments.chat.adapters.s-ql and deployments.chat.adapters.sQl: both become"), problem


_NAMES = st.from_regex(NAME, fullmatch=True)


@BOUNDED
@given(st.lists(_NAMES, min_size=2, max_size=4, unique=True))
def test_names_are_refused_exactly_when_their_pascal_case_is_shared(names):
    deployments = {name: MODEL for name in names}
    shared = len({pascal(n) for n in names}) < len(names)
    if shared:
        found = refusals(deployments)
        assert all(" and deployments." in p and "both become the output" in p for p in found), found
    else:
        assert [d.name for d in fleet_from_context(context_with(), deployments).deployments] == names
    TALLY.record("fleet names", shared)


@BOUNDED
@given(_NAMES.filter(lambda n: n[0].isalpha()))
def test_a_name_and_the_same_name_with_its_first_letter_in_the_other_case_collide(name):
    # 'chat' and 'Chat' both become 'Chat'.
    other = name[0].swapcase() + name[1:]
    assert refusals({name: MODEL, other: MODEL})[0].startswith(f"deployments.{name} and deployments.{other}: ")
    TALLY.record("case variants", True)


# --- a name the stack has for itself (refused when the stack is built, before synth) ---


def test_a_packed_deployment_named_like_the_stacks_own_output_is_refused_without_a_traceback():
    with pytest.raises(ConfigError) as info:
        build(deployments={"chat": PACKED, "region": PACKED})
    assert info.value.problems == [
        "deployments.region: becomes the construct id 'Region', which the stack LlmEndpoint-shared has for itself "
        "(LlmEndpoint-shared/Region); rename it"
    ]


# --- endpoint and component names ---


def test_two_endpoints_with_one_endpoint_name_are_refused():
    (problem,) = refusals({"x": {**MODEL, "endpoint_name": "prod"}, "y": {**MODEL, "endpoint_name": "prod"}})
    assert problem.startswith(
        "deployments.x.endpoint_name='prod' and deployments.y.endpoint_name='prod': two endpoints, one name"
    ), problem


def test_endpoint_names_that_differ_only_in_case_are_refused():
    (problem,) = refusals({"x": {**MODEL, "endpoint_name": "Prod-Chat"}, "y": {**MODEL, "endpoint_name": "prod-chat"}})
    assert "case-insensitive" in problem and "deployments.y.endpoint_name='prod-chat'" in problem


def test_a_top_level_endpoint_name_inherited_by_two_endpoints_is_refused():
    assert refusals({"x": MODEL, "y": MODEL}, endpoint_name="prod")


def test_one_shared_endpoint_keeps_its_one_endpoint_name():
    fleet = fleet_from_context(context_with(endpoint_name="prod"), {"a": PACKED, "b": PACKED})
    assert [e.name for e in fleet.endpoints] == ["shared"]


def test_two_components_with_one_component_name_are_refused():
    found = refusals({"a": {**PACKED, "component_name": "chat"}, "b": {**PACKED, "component_name": "chat"}})
    assert found == [
        "deployments.a.component_name='chat' and deployments.b.component_name='chat': two inference components, "
        "one name; rename one"
    ]


# --- a key given twice in the fleet file ---


def test_a_deployment_given_twice_in_the_file_is_refused_naming_both_entries():
    text = '{"chat": {"model_id": "Qwen/Qwen3-0.6B"}, "chat": {"model_id": "Qwen/Qwen3-8B"}}'
    with pytest.raises(ConfigError) as info:
        deployments_of({"deployments_file": "fleet.json"}, read_text=lambda _: text)
    assert info.value.problems == [
        "deployments_file='fleet.json': the key 'chat' is given twice in one object ({\"model_id\": "
        '"Qwen/Qwen3-0.6B"} and {"model_id": "Qwen/Qwen3-8B"}); JSON would keep only the last: give each key once'
    ]


def test_a_key_given_twice_inside_a_deployment_is_refused_too():
    text = '{"chat": {"instance_type": "ml.g6.xlarge", "instance_type": "ml.g6.2xlarge"}}'
    with pytest.raises(ConfigError, match="the key 'instance_type' is given twice"):
        deployments_of({"deployments": text}, read_text=lambda _: "")


def test_the_hook_alone_takes_any_json_loader():
    assert json.loads('{"a": 1, "b": {"c": 2}}', object_pairs_hook=unique_pairs) == {"a": 1, "b": {"c": 2}}
    with pytest.raises(DuplicateKey) as info:
        json.loads('{"a": 1, "a": 2}', object_pairs_hook=unique_pairs)
    assert (info.value.key, info.value.first, info.value.second) == ("a", 1, 2)


# --- llmops finds an app's stacks by their AppName output ---


def stack(name: str, outputs: dict[str, str]) -> dict:
    return {
        "StackName": name,
        "StackId": f"arn:aws:cloudformation:{REGION}:111122223333:stack/{name}/1",
        "CreationTime": datetime(2026, 12, 1, tzinfo=UTC),
        "StackStatus": "CREATE_COMPLETE",
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
    }


OURS = stack("LlmEndpoint-chat", {APP_OUTPUT: "LlmEndpoint", "ChatEndpointName": "ours"})
# App LlmEndpoint-prod's fleet stack for its own endpoint chat: its name starts with LlmEndpoint- too.
THEIRS = stack("LlmEndpoint-prod-chat", {APP_OUTPUT: "LlmEndpoint-prod", "ChatEndpointName": "theirs"})
LEGACY = stack("LlmEndpoint-coder", {"CoderEndpointName": "legacy"})  # deployed before AppName


def test_an_app_reads_only_its_own_stacks_not_another_apps_with_its_name_as_prefix():
    assert is_app_stack(OURS, "LlmEndpoint") and not is_app_stack(THEIRS, "LlmEndpoint")
    assert is_app_stack(THEIRS, "LlmEndpoint-prod") and not is_app_stack(OURS, "LlmEndpoint-prod")
    assert is_app_stack(LEGACY, "LlmEndpoint")  # by its name, as before
    for order in ([OURS, THEIRS, LEGACY], [THEIRS, OURS, LEGACY]):
        cfn = boto3.client("cloudformation", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
        with Stubber(cfn) as stubber:
            stubber.add_response("describe_stacks", {"Stacks": order}, {})
            outputs = fleet_outputs(cfn, "LlmEndpoint")
        assert resolve(outputs, "chat", None) == ("ours", None)
        assert resolve(outputs, "coder", None) == ("legacy", None)


def test_status_leaves_out_the_endpoints_another_app_tagged():
    sagemaker = boto3.client("sagemaker", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    tagging = boto3.client(
        "resourcegroupstaggingapi", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y"
    )
    when = datetime(2026, 12, 1, tzinfo=UTC)
    names = ("LlmEndpoint-chat-Endpoint-1", "LlmEndpoint-prod-Endpoint-2", "LlmEndpoint-gone-Endpoint-3")
    arn = {n: f"arn:aws:sagemaker:{REGION}:1:endpoint/{n.lower()}" for n in names}
    endpoints = [
        {
            "EndpointName": n,
            "EndpointArn": arn[n],
            "CreationTime": when,
            "LastModifiedTime": when,
            "EndpointStatus": "InService",
        }
        for n in names
    ]
    tags = {names[0]: "LlmEndpoint", names[1]: "LlmEndpoint-prod"}
    with Stubber(sagemaker) as sm, Stubber(tagging) as tg:
        sm.add_response("list_endpoints", {"Endpoints": endpoints}, {})
        tg.add_response(
            "get_resources",
            {
                "ResourceTagMappingList": [
                    {"ResourceARN": arn[n], "Tags": [{"Key": "llm-endpoint-app", "Value": app}]}
                    for n, app in tags.items()
                ]
            },
            {"TagFilters": [{"Key": "llm-endpoint-app"}], "ResourceTypeFilters": ["sagemaker:endpoint"]},
        )
        found = endpoint_names(sagemaker, tagging, "LlmEndpoint", [], [])
    # The other app's endpoint is left out; an untagged one named like ours is still listed (for --expect-none).
    assert found == ["LlmEndpoint-chat-Endpoint-1", "LlmEndpoint-gone-Endpoint-3"]


def test_every_stack_of_the_app_outputs_its_app():
    from aws_cdk.assertions import Template

    app = build(deployments={"chat": MODEL, "coder": MODEL}, stack_name="Team")
    for child in app.node.children:
        if hasattr(child, "template_options"):
            assert Template.from_stack(child).find_outputs(APP_OUTPUT) == {
                APP_OUTPUT: {"Description": "The app (stack_name) of this stack", "Value": "Team"}
            }, child.node.id


def test_the_claimed_ids_cover_every_child_the_fleet_adds_to_a_stack():
    # A tripwire: a new output or scope in constructs_lib/deployment/fleet_stacks.py must be claimed
    # (constructs_lib/deployment/fleet.py claimed_ids),
    # or two names could meet there unchecked.
    import aws_cdk as cdk

    from constructs_lib.deployment.fleet import claimed_ids

    hub = {"model_id": "org/qwen3-0.6b-sql-lora"}
    deployments = {
        "chat": {**PACKED, "adapters": {"sql": ADAPTER, "hub-one": hub}},
        "medium": {**PACKED, "adapters": {"sql": ADAPTER}},
    }
    app = build(deployments=deployments)
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack) and c.node.id == "LlmEndpoint-shared"]
    fleet = fleet_from_context(context_with(), deployments)
    (endpoint,) = fleet.endpoints
    claims = {cid for cid, _, _ in claimed_ids(["chat", "medium"], {d.name: d.adapters for d in endpoint.deployments})}
    added = {c.node.id for c in stack.node.children if c.node.id.startswith(("Chat", "Medium", "Adapter"))}
    assert added and added <= claims, added - claims
