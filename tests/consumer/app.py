#!/usr/bin/env python3
"""A CDK app of a user's own that installs this library (tests/package/test_consumer_app.py synthesizes it
outside the repo).

One stack: two staged checkpoints sharing one model bucket, a standard GpuEndpoint with its smoke test, and a
ComponentEndpoint holding two components, each with its smoke test. Its cdk.json holds nothing but ``app``:
the constructs depend on no feature flag of the host app.
"""

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from constructs_lib import (
    ComponentEndpoint,
    DeploymentPreflight,
    EndpointSmokeTest,
    GpuEndpoint,
    ModelBucket,
    StagedCheckpoint,
)

app = cdk.App()
stack = cdk.Stack(app, "MyModels")
bucket = ModelBucket(stack, "Models")
small = StagedCheckpoint(stack, "Small", repo_id="Qwen/Qwen3-0.6B", bucket=bucket.bucket)
larger = StagedCheckpoint(stack, "Larger", repo_id="Qwen/Qwen3-4B-Instruct-2507", bucket=bucket.bucket)

checked = DeploymentPreflight(stack, "LargerPreflight", model=larger, instance_type="ml.g6.xlarge", engine="vllm")
endpoint = GpuEndpoint(stack, "Chat", model=checked.checked_model, instance_type="ml.g6.xlarge", max_model_len=8192)
EndpointSmokeTest.for_endpoint(stack, "ChatSmokeTest", endpoint)

shared = ComponentEndpoint(stack, "Shared", instance_type="ml.g6.12xlarge", max_instances=2)
first = shared.add_component("First", model=small, tensor_parallel_size=1, max_model_len=4096)
second = shared.add_component("Second", model=larger, tensor_parallel_size=1, max_model_len=8192)
EndpointSmokeTest.for_component(stack, "FirstSmokeTest", first)
EndpointSmokeTest.for_component(stack, "SecondSmokeTest", second)

cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
