"""The constructs as a library: public surface, no dependence on the host's feature flags, shared buckets,
smoke tests for components, assets found through the package, and the ``llmops`` command.

tests/package/ does the same from an installed wheel (``make test-package``); these run from the checkout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

import constructs_lib
from constructs_lib import (
    ComponentEndpoint,
    EndpointSmokeTest,
    GpuEndpoint,
    ModelBucket,
    S3ModelData,
    StagedCheckpoint,
)
from constructs_lib._assets import asset_folder, package_folder
from llmops.__main__ import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def empty_app_stack() -> cdk.Stack:
    """A stack in an App with no context at all: no feature flag of ours, as in a user's fresh app."""
    return cdk.Stack(cdk.App(context={}), "Consumer")


@pytest.mark.parametrize(
    "name",
    [
        "GpuEndpoint",
        "ComponentEndpoint",
        "InferenceComponent",
        "StagedCheckpoint",
        "ModelBucket",
        "EndpointSmokeTest",
        "DeploymentPreflight",
        "S3ModelData",
        "ModelSource",
        "UpdatePolicy",
        "AlarmThresholds",
        "AlarmTopic",
        "EngineSpec",
        "ServingImage",
        "get_engine",
    ],
)
def test_the_public_surface_exports_what_users_pass_and_get_back(name):
    assert name in constructs_lib.__all__ and getattr(constructs_lib, name) is not None


def test_every_exported_name_exists():
    missing = [n for n in constructs_lib.__all__ if not hasattr(constructs_lib, n)]
    assert missing == []


def test_the_public_surface_is_types_only_and_the_rules_are_in_one_module():
    import constructs_lib.rules

    assert len(constructs_lib.__all__) <= 36, len(constructs_lib.__all__)  # 33 types and helpers, 3 constructs since
    assert not [n for n in constructs_lib.__all__ if n.endswith(("_problem", "_problems", "_RANGE", "_RANGE_S"))]
    for name in ("plan_endpoint", "resolve_scaling", "THRESHOLD_RANGES", "tag_problems", "price"):
        assert name in constructs_lib.rules.__all__ and name not in constructs_lib.__all__, name
    assert not [n for n in constructs_lib.rules.__all__ if not hasattr(constructs_lib.rules, n)]


@pytest.mark.parametrize("name", ["plan_endpoint", "INFERENCE_COMPONENT", "default_image", "tag_problems"])
def test_a_name_the_top_module_exported_in_0_2_keeps_working_with_a_deprecation_warning(name):
    import constructs_lib.rules

    with pytest.warns(
        DeprecationWarning, match=rf"constructs_lib\.{name} is deprecated: import it from constructs_lib\.rules"
    ):
        value = getattr(constructs_lib, name)
    assert value is getattr(constructs_lib.rules, name)


def test_the_monitoring_mixins_say_what_replaced_them_and_unknown_names_fail_plainly():
    with pytest.raises(AttributeError, match=r"MonitoredEndpoint was a mixin and is gone: use GpuEndpoint\.monitor"):
        _ = constructs_lib.MonitoredEndpoint
    with pytest.raises(AttributeError, match=r"has no attribute 'no_such_name'"):
        _ = constructs_lib.no_such_name


# That app.py, stacks/ and llmops import only the public modules: tests/project/test_rooms.py (one list of them).


def test_stacks_and_app_stay_a_translation():
    # Issue 36: stacks/ and app.py hold no rule of their own; the library builds what they ask for.
    lines = sum(len(p.read_text().splitlines()) for p in [ROOT / "app.py", *(ROOT / "stacks").glob("*.py")])
    assert lines < 800, lines


def test_a_model_bucket_needs_no_feature_flag_of_the_host_app():
    """Without @aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy CDK would grant log delivery by an ACL,
    which enforced bucket ownership refuses (a jsii error at synth); the bucket policy is written out."""
    stack = empty_app_stack()
    ModelBucket(stack, "Models")
    template = Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::S3::Bucket", {"LoggingConfiguration": Match.object_like({"LogFilePrefix": "model-bucket/"})}
    )
    template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": "s3:PutObject",
                                "Principal": {"Service": "logging.s3.amazonaws.com"},
                                "Condition": {
                                    "ArnLike": {"aws:SourceArn": Match.any_value()},
                                    "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                                },
                            }
                        )
                    ]
                )
            }
        },
    )
    for bucket in template.find_resources("AWS::S3::Bucket").values():
        assert "AccessControl" not in bucket["Properties"]


def test_checkpoints_without_a_bucket_share_the_stacks_first_one():
    stack = empty_app_stack()
    first = StagedCheckpoint(stack, "First", repo_id="Qwen/Qwen3-0.6B")
    second = StagedCheckpoint(stack, "Second", repo_id="Qwen/Qwen3-4B-Instruct-2507")
    assert first.bucket is second.bucket and first.owns_bucket and not second.owns_bucket
    template = Template.from_stack(stack)
    assert len(template.find_resources("AWS::S3::Bucket")) == 2  # the model bucket and its access logs
    # The first keeps the logical ID a single-checkpoint app always had (First/Bucket).
    assert any(k.startswith("FirstBucket") for k in template.find_resources("AWS::S3::Bucket"))


def test_a_given_bucket_is_used_and_not_shared_onwards():
    stack = empty_app_stack()
    bucket = ModelBucket(stack, "Models").bucket
    given = StagedCheckpoint(stack, "Given", repo_id="Qwen/Qwen3-0.6B", bucket=bucket)
    assert given.bucket is bucket and not given.owns_bucket
    StagedCheckpoint(stack, "Own", repo_id="Qwen/Qwen3-4B-Instruct-2507")
    assert len(Template.from_stack(stack).find_resources("AWS::S3::Bucket")) == 4


def test_a_component_gets_a_smoke_test_of_its_own():
    stack = empty_app_stack()
    model = S3ModelData.from_s3_uri(stack, "Weights", "s3://my-models/models/q/")
    endpoint = ComponentEndpoint(stack, "Shared", instance_type="ml.g6.12xlarge")
    first = endpoint.add_component("First", model=model, tensor_parallel_size=1)
    second = endpoint.add_component("Second", model=model, tensor_parallel_size=1, engine="lmi")
    EndpointSmokeTest.for_component(stack, "FirstSmoke", first)
    EndpointSmokeTest.for_endpoint(stack, "SecondSmoke", second)  # for_endpoint takes a component too
    template = Template.from_stack(stack)
    tests = template.find_resources("Custom::EndpointSmokeTest")
    assert len(tests) == 2
    names = sorted(t["Properties"]["InferenceComponentName"] for t in tests.values())
    assert names == sorted([first.inference_component_name, second.inference_component_name])
    assert "First" in names[0] and "Second" in names[1]
    formats = sorted(t["Properties"].get("StreamFormat", "sse") for t in tests.values())
    assert formats == ["jsonlines", "sse"]  # each from its engine (absent means SSE)


def test_the_standard_endpoints_smoke_test_reads_its_engines_stream_format():
    stack = empty_app_stack()
    model = S3ModelData.from_s3_uri(stack, "Weights", "s3://my-models/models/q/")
    endpoint = GpuEndpoint(stack, "Chat", model=model, engine="lmi")
    EndpointSmokeTest.for_endpoint(stack, "Smoke", endpoint)
    Template.from_stack(stack).has_resource_properties("Custom::EndpointSmokeTest", {"StreamFormat": "jsonlines"})


def test_assets_are_found_through_the_package():
    assert (asset_folder("lambda") / "staged_checkpoint" / "index.py").is_file()
    assert (asset_folder("containers") / "llamacpp" / "Dockerfile").is_file()
    assert package_folder("hfstage") == ROOT / "hfstage"
    with pytest.raises(FileNotFoundError, match="nothing/ folder is missing"):
        asset_folder("nothing")
    with pytest.raises(ValueError, match="not an importable package"):
        package_folder("no_such_package_here")


def test_llmops_lists_every_command(capsys):
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    for command in COMMANDS:
        assert f"  {command} " in listing
    assert main([]) == 2


def test_llmops_suggests_the_command_meant(capsys):
    assert main(["pln"]) == 2
    assert "unknown command 'pln'; did you mean 'plan'?" in capsys.readouterr().err


def test_llmops_runs_the_subcommand_and_returns_its_exit_code(tmp_path, capsys):
    assert main(["summary", str(tmp_path)]) == 1  # no cloud assembly there
    assert "no manifest.json in" in capsys.readouterr().err
    assert main(["resolve_image", "--help"]) == 0  # the module's spelling works too


def test_python_dash_m_llmops_runs_and_each_old_module_keeps_its_main():
    done = subprocess.run(
        [sys.executable, "-m", "llmops", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "usage: llmops <command>" in done.stdout
    for module in COMMANDS.values():  # python -m llmops.<module> runs the same main(argv)
        source = (ROOT / "llmops" / f"{module}.py").read_text()
        assert "def main(" in source and 'if __name__ == "__main__":' in source, module


def _deployment_examples() -> list[str]:
    import re

    text = (ROOT / "docs" / "constructs" / "Deployments.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.integration  # a whole fleet synthesized: make test-integration (CI runs it)
def test_the_deployments_pages_examples_build_what_they_say(tmp_path, monkeypatch):
    """docs/constructs/Deployments.md, run as written (the fleet file and the record beside it, offline)."""
    import shutil

    import aws_cdk as cdk
    import aws_cdk.assertions as assertions

    fleet, single = _deployment_examples()
    shutil.copy(ROOT / "tests" / "data" / "fleet.json", tmp_path / "fleet.json")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the record is empty and nothing is looked up
    scope: dict = {}
    exec(compile(fleet, "Deployments.md", "exec"), scope)
    names = sorted(s.stack_name for s in scope["stacks"])
    assert names == ["Team-chat", "Team-coder", "Team-models", "Team-shared"]
    shared = assertions.Template.from_stack(next(s for s in scope["stacks"] if s.stack_name == "Team-shared"))
    shared.resource_count_is("AWS::SageMaker::InferenceComponent", 3)  # two packed models and the adapter
    scope = {}
    exec(compile(single, "Deployments.md", "exec"), scope)
    stack = scope["stack"]
    assert isinstance(stack, cdk.Stack) and stack.stack_name == "Chat"
    assertions.Template.from_stack(stack).resource_count_is("AWS::SageMaker::Endpoint", 1)


def test_the_deployment_calls_refuse_a_fleet_map_where_it_would_be_ignored():
    import aws_cdk as cdk

    from constructs_lib.deployment import ConfigError, build_deployment_stack, build_fleet_stacks

    with pytest.raises(ConfigError, match="deployments: a fleet's map; give it to build_fleet_stacks"):
        build_deployment_stack(cdk.App(), {"deployments": {"a": {}}})
    with pytest.raises(ConfigError, match=r"settings\.deployments_file: give the fleet's map as the deployments"):
        build_fleet_stacks(cdk.App(), {"a": {}}, settings={"deployments_file": "other.json"})
