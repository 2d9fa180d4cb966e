"""One format for every refusal at synth (constructs_lib/problems.py): the context's and every construct's."""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from constructs_lib import EndpointSmokeTest, Refusal, S3ModelData
from constructs_lib.deployment.config import ConfigError
from constructs_lib.problems import refuse, render


def test_one_problem_is_one_line_after_its_subject():
    assert render("GpuEndpoint App/Endpoint", ["instance_count=0 must be at least 1"]) == (
        "GpuEndpoint App/Endpoint: instance_count=0 must be at least 1"
    )


def test_several_problems_are_counted_and_listed_one_per_line():
    assert render("context", ["a=1: no", "b=2: no"]) == "context: 2 problems:\n  - a=1: no\n  - b=2: no"


def test_refuse_raises_only_when_there_is_a_problem():
    refuse("anything", [])
    with pytest.raises(Refusal) as info:
        refuse("X", ["k='v': not allowed; allowed: w"])
    assert (info.value.subject, info.value.problems) == ("X", ["k='v': not allowed; allowed: w"])
    assert isinstance(info.value, ValueError)  # callers that catch ValueError keep working


def test_the_context_and_the_constructs_refuse_in_the_same_format():
    context = ConfigError(["engine='x': not allowed; allowed: vllm"])
    assert isinstance(context, Refusal)
    assert str(context) == "context (fix with -c key=value or in cdk.json): engine='x': not allowed; allowed: vllm"
    stack = cdk.Stack(cdk.App(), "Test")
    with pytest.raises(Refusal) as info:
        EndpointSmokeTest(
            stack,
            "Smoke",
            endpoint_name="e",
            endpoint_config_name="c",
            endpoint_arn="arn:aws:sagemaker:us-east-1:111122223333:endpoint/e",
            max_tokens=0,
        )
    assert info.value.subject == "EndpointSmokeTest Test/Smoke"
    assert str(info.value).startswith("EndpointSmokeTest Test/Smoke: ")


def test_a_model_source_that_is_no_construct_names_itself_and_the_prop():
    with pytest.raises(Refusal, match=r"^S3ModelData: prefix='models/\*'"):
        S3ModelData(bucket=None, prefix="models/*")  # type: ignore[arg-type]
