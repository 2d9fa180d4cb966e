"""Every custom resource handler through CloudFormation's failure paths, with the harness in ``tests/harness``.

Each handler is driven the way the CDK Provider framework and CloudFormation drive it (create, update,
delete, retried requests, rollbacks, ``is_complete`` polling) on a fake clock, under the limits its
construct synthesizes (handler timeout, the waiter's interval and total timeout, ``ServiceTimeout``).
Faults go into the handler's own boto3 clients through botocore events: throttling (retried by the
client's own retry settings, back-off on the clock), access denied, a job that fails, hangs or
vanishes. After every run: the run ended by itself within its budget, the response (reason or data)
is under 4 KB, a failure names its check, and nothing is left running.

Adding a handler: one ``Driver`` subclass below and its class in ``DRIVERS``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import aws_cdk as cdk
import botocore.endpoint
import pytest
from aws_cdk.assertions import Template

from constructs_lib.image_check import ServingImageCheck
from constructs_lib.images import ServingImage
from constructs_lib.preflight_check import DeploymentPreflight
from constructs_lib.staged_checkpoint import StagedCheckpoint
from hfstage.worker import main as stage_worker
from tests.conftest import default_context, load_lambda
from tests.fakes.fake_hub import Synthetic
from tests.fakes.fixtures import BUCKET, fake_hub, s3  # noqa: F401
from tests.harness import (
    CREATE_FAILED_MARKER,
    RESPONSE_LIMIT,
    Clock,
    CloudFormation,
    Faults,
    HandlerUnderTest,
    ProcessingJobs,
    Response,
    ServiceQuotas,
    Stacks,
    Timeouts,
    completes_after,
    fails_after,
    stuck,
)

ROOT = Path(__file__).resolve().parents[2]
IMAGE_REPOSITORY_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm"  # moto's account
IMAGE_TAG = "0.11.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
ENDPOINT_ARN = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/llm-endpoint"


def handler_exists(name: str) -> bool:
    path = ROOT / "lambda" / name / "index.py"
    return path.is_file() and "def on_event" in path.read_text()


# --- the limits each construct deploys its resource with ------------------------------------------


@pytest.fixture(scope="module")
def deployed() -> dict[str, Any]:
    """One stack with every custom resource construct, synthesized: the source of every budget below."""
    app = cdk.App(context=default_context())
    stack = cdk.Stack(app, "Handlers")
    checkpoint = StagedCheckpoint(stack, "Checkpoint", repo_id="acme/tiny-llm")
    DeploymentPreflight(stack, "Preflight", model=checkpoint, instance_type="ml.g6.xlarge", max_model_len=32768)
    ServingImageCheck(stack, "ImageCheck", image=ServingImage.from_uri(f"{IMAGE_REPOSITORY_URI}:{IMAGE_TAG}"))
    if handler_exists("endpoint_smoke_test"):
        from constructs_lib.smoke_test import EndpointSmokeTest

        EndpointSmokeTest(
            stack, "SmokeTest", endpoint_name="llm-endpoint", endpoint_config_name="config-2", endpoint_arn=ENDPOINT_ARN
        )
    return Template.from_stack(stack).to_json()


def resource_properties(template: dict[str, Any], resource_type: str) -> dict[str, Any]:
    return next(r["Properties"] for r in template["Resources"].values() if r["Type"] == resource_type)


@pytest.fixture
def clock():
    """The run's clock, also botocore's: its retry back-off advances it instead of sleeping."""
    clock = Clock()
    with clock.installed(botocore.endpoint):
        yield clock


# --- drivers: one per handler ---------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """A way for Create to fail: ``arrange`` injects it, ``expect`` (a regex) must be in the handler's message."""

    arrange: Callable[[Any], None]
    expect: str


class Driver:
    """How to run one handler: its module and fakes, valid properties, and what it may leave running."""

    name: ClassVar[str]
    resource_type: ClassVar[str]
    failures: ClassVar[dict[str, Failure]] = {}

    def __init__(self, request: pytest.FixtureRequest, clock: Clock, template: dict[str, Any]) -> None:
        self.clock = clock
        self.timeouts = Timeouts.from_template(template, self.resource_type)
        self.template_properties = resource_properties(template, self.resource_type)
        self.stack = contextlib.ExitStack()

    def handler(self) -> HandlerUnderTest:
        raise NotImplementedError

    def properties(self, **overrides: Any) -> dict[str, Any]:
        raise NotImplementedError

    def changed_properties(self) -> dict[str, Any]:
        """A valid update that does not mean replacement."""
        raise NotImplementedError

    def running(self) -> list[str]:
        """What the resource has started and not stopped (jobs); empty for handlers that start nothing."""
        return []

    def cloudformation(self) -> CloudFormation:
        stack = getattr(self, "stacks", None)  # the handler's DescribeStacks, kept current by the harness
        return CloudFormation(
            self.handler(), clock=self.clock, logical_id=self.resource_type.split("::")[-1], stack=stack
        )


# Staging ------------------------------------------------------------------------------------------

REPO = "acme/tiny-llm"
FILES = {
    "config.json": json.dumps({"model_type": "llama", "num_hidden_layers": 2}).encode(),
    "tokenizer.json": b'{"version": "1.0"}' * 50,
    "model-00001-of-00002.safetensors": Synthetic(2 * 2**20, seed=1),
    "model-00002-of-00002.safetensors": Synthetic(2**20, seed=2),
}


class StagingDriver(Driver):
    name = "staged_checkpoint"
    resource_type = "Custom::StagedCheckpoint"

    def __init__(self, request, clock, template) -> None:
        super().__init__(request, clock, template)
        self.s3 = request.getfixturevalue("s3")
        self.hub = request.getfixturevalue("fake_hub")
        self.hub.add_repo(REPO, FILES)
        self.module = load_lambda(self.name)
        self.module._clients.clear()
        self.stack.enter_context(clock.installed(self.module))
        # The handler's own clients (its retry settings), answered by a fake SageMaker and the moto S3 server.
        self.jobs = ProcessingJobs(self.module.client("sagemaker"), script=completes_after(3, then=self.run_job))
        self.s3_faults = Faults(self.module.client("s3"))
        self.stacks = self.module._clients["cloudformation"] = Stacks()
        self.quotas = ServiceQuotas(
            self.module.client("service-quotas"), defaults={"ml.m5.2xlarge for processing job usage": 4}
        )
        self.handoff_s = int(self.template_properties["HandoffSeconds"])

    def run_job(self, job) -> None:
        """The Processing job's work: the staging worker with the job's own arguments, into moto."""
        client, _ = self.s3.worker_client()
        arguments = job.request["AppSpecification"]["ContainerArguments"]
        assert stage_worker([*arguments, "--progress-interval-s", "60"], s3_client=client) == 0

    def handler(self) -> HandlerUnderTest:
        return HandlerUnderTest.from_module(self.module, resource_type=self.resource_type, timeouts=self.timeouts)

    def properties(self, **overrides: Any) -> dict[str, Any]:
        return {
            "RepoId": REPO,
            "Revision": "main",
            "Bucket": BUCKET,
            "Prefix": "models/",
            "Include": [],
            "Exclude": ["original/*"],
            "TokenSecretArn": "",
            "HubEndpoint": "",
            "ImageUri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-cpu-py312",
            "InstanceType": "ml.m5.2xlarge",
            "MaxInstances": "4",
            "BytesPerInstance": str(100 * 2**30),
            "VolumeSizeGb": "30",
            "MaxRuntimeSeconds": "21600",
            "RoleArn": "arn:aws:iam::123456789012:role/staging-job",
            "CodeUri": "s3://cdk-assets/0123abcd.zip",
            "JobNamePrefix": "hfstage-0123456789-",
            "WaitHandle": "",  # the wait condition's URL: signals are tested in test_staging_handler.py
            "HandoffSeconds": str(self.handoff_s),
            **overrides,
        }

    def changed_properties(self) -> dict[str, Any]:
        return self.properties(MaxInstances="8")

    def running(self) -> list[str]:
        return self.jobs.running

    failures: ClassVar[dict[str, Failure]] = {
        "job-fails": Failure(
            lambda d: setattr(d.jobs, "script", fails_after(2, "AlgorithmError: sha256 mismatch " + "x" * 9000)),
            r"staging job hfstage-\w+-\w+ Failed: AlgorithmError: sha256 mismatch",
        ),
        "describe-denied": Failure(
            lambda d: d.jobs.deny("DescribeProcessingJob"),
            r"AccessDeniedException.*DescribeProcessingJob",
        ),
        "job-gone": Failure(
            lambda d: setattr(d.jobs, "script", lambda job: d.jobs.forget(job.name)),
            r"DescribeProcessingJob.*Could not find requested job",
        ),
        "create-denied": Failure(
            lambda d: d.jobs.deny("CreateProcessingJob"),
            r"could not start the staging job hfstage-\w+-\w+: AccessDeniedException",
        ),
        "s3-denied": Failure(
            lambda d: d.s3_faults.deny("HeadObject"),
            r"could not read s3://\S+ \(AccessDenied on HeadObject\); the staging handler's role needs s3:ListBucket",
        ),
        # SageMaker's validation messages quote the offending value: 100 container arguments of 256 characters.
        "create-invalid": Failure(
            lambda d: d.jobs.inject(
                "CreateProcessingJob",
                "ValidationException",
                "1 validation error detected: Value '[" + ", ".join(["a" * 250] * 40) + "]' at "
                "'appSpecification.containerArguments' failed to satisfy constraint: Member must have size less than "
                "or equal to 100",
            ),
            r"could not start the staging job hfstage-\w+-\w+: ValidationException: 1 validation error",
        ),
    }


# Preflight ----------------------------------------------------------------------------------------

PREFLIGHT_PREFIX = "models/acme--tiny-llm/0123456789abcdef0123456789abcdef01234567/"
PREFLIGHT_CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 8,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}


class PreflightDriver(Driver):
    name = "deployment_preflight"
    resource_type = "Custom::DeploymentPreflight"

    def __init__(self, request, clock, template) -> None:
        super().__init__(request, clock, template)
        self.s3 = request.getfixturevalue("s3")
        files = {"config.json": json.dumps(PREFLIGHT_CONFIG).encode(), "model.safetensors": b"w" * 4096}
        entries = [{"path": p, "size": len(b), "blob_id": "0" * 40} for p, b in sorted(files.items())]
        files[".hf-model-manifest.json"] = json.dumps({"schema_version": 1, "files": entries}).encode()
        for name, body in files.items():
            self.s3.client.put_object(Bucket=BUCKET, Key=PREFLIGHT_PREFIX + name, Body=body)
        self.module = load_lambda(self.name)
        self.module._clients.clear()
        self.quotas = ServiceQuotas(
            self.module.client("service-quotas"), applied={"ml.g6.xlarge for endpoint usage": 2}
        )
        self.s3_faults = Faults(self.module.client("s3"))
        self.stacks = self.module._clients["cloudformation"] = Stacks()

    def handler(self) -> HandlerUnderTest:
        return HandlerUnderTest.from_module(self.module, resource_type=self.resource_type, timeouts=self.timeouts)

    def properties(self, **overrides: Any) -> dict[str, Any]:
        synthesized = {k: v for k, v in self.template_properties.items() if k not in ("ServiceToken", "ServiceTimeout")}
        return {**synthesized, "ModelS3Uri": f"s3://{BUCKET}/{PREFLIGHT_PREFIX}", **overrides}

    def changed_properties(self) -> dict[str, Any]:
        return self.properties(MaxModelLen="16384")

    failures: ClassVar[dict[str, Failure]] = {
        "quota-throttled": Failure(
            lambda d: d.quotas.throttle("ListServiceQuotas"), r"\[quota\] Service Quotas throttled"
        ),
        "quota-denied": Failure(
            lambda d: d.quotas.deny("ListServiceQuotas"),
            r"\[quota\] access denied .* needs servicequotas:ListServiceQuotas",
        ),
        "quota-too-low": Failure(
            lambda d: d.quotas.applied.update({"ml.g6.xlarge for endpoint usage": 0}), r"\[quota\] the quota .* is 0"
        ),
        "s3-denied": Failure(
            lambda d: d.s3_faults.deny("ListObjectsV2"), r"\[s3\] could not list .*AccessDenied .*s3:ListBucket"
        ),
        # A file DJL Serving reads as settings (its option.entryPoint runs the checkpoint's handler) appears in
        # the served prefix: refused before any GPU runs it (issue 23).
        "checkpoint-code": Failure(
            lambda d: d.s3.client.put_object(
                Bucket=BUCKET, Key=PREFLIGHT_PREFIX + "serving.properties", Body=b"option.entryPoint=handler.py\n"
            ),
            r"\[checkpoint-code\] s3://\S+ holds serving.properties, which the serving container would run",
        ),
        "s3-read-denied": Failure(
            lambda d: d.s3_faults.deny("GetObject"), r"\[s3\] s3://\S+config.json could not be read: AccessDenied"
        ),
    }


# Smoke test ---------------------------------------------------------------------------------------

SMOKE_ENDPOINT = "llm-endpoint"


@pytest.fixture(scope="module")
def fake_sagemaker():
    from tests.fakes.fake_runtime import FakeSageMaker

    with FakeSageMaker() as server:
        yield server


class SmokeDriver(Driver):
    name = "endpoint_smoke_test"
    resource_type = "Custom::EndpointSmokeTest"

    def __init__(self, request, clock, template) -> None:
        super().__init__(request, clock, template)
        from tests.fakes.fake_runtime import load_handler

        self.fake = request.getfixturevalue("fake_sagemaker")
        self.fake.reset()
        self.fake.add_endpoint(SMOKE_ENDPOINT, config_name="config-2")
        monkeypatch = request.getfixturevalue("monkeypatch")
        for key, value in {
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ENDPOINT_URL_SAGEMAKER": self.fake.url,
            "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": self.fake.url,
        }.items():
            monkeypatch.setenv(key, value)
        self.module = load_handler(self.name)  # the clients it makes from here on reach the fake
        self.stacks = self.module._clients["cloudformation"] = Stacks()
        self.sagemaker = Faults(self.module.client("sagemaker"))
        self.runtime = Faults(self.module.client("sagemaker-runtime"))

    def handler(self) -> HandlerUnderTest:
        module, clock = self.module, self.clock

        # The handler's own seams for time (its defaults are bound to the real clock at import).
        def on_event(event, context):
            return module.on_event(event, context, clock=clock)

        def is_complete(event, context):
            remaining = context.get_remaining_time_in_millis
            return module.complete(event, clock=clock, sleep=clock.sleep, remaining_s=lambda: remaining() / 1000)

        return HandlerUnderTest(self.name, self.resource_type, on_event, self.timeouts, is_complete)

    def properties(self, **overrides: Any) -> dict[str, Any]:
        synthesized = {k: v for k, v in self.template_properties.items() if k not in ("ServiceToken", "ServiceTimeout")}
        return {**synthesized, "EndpointName": SMOKE_ENDPOINT, "EndpointConfigName": "config-2", **overrides}

    def changed_properties(self) -> dict[str, Any]:
        return self.properties(MaxTokens="32")

    failures: ClassVar[dict[str, Failure]] = {
        "endpoint-never-in-service": Failure(
            lambda d: setattr(d.fake.endpoint(SMOKE_ENDPOINT), "status", "Creating"),
            r"endpoint status: status is Creating.*budget of \d+ s is spent",
        ),
        "describe-denied": Failure(
            lambda d: d.sagemaker.deny("DescribeEndpoint"), r"DescribeEndpoint: .*AccessDeniedException"
        ),
        "describe-throttled": Failure(
            lambda d: d.sagemaker.throttle("DescribeEndpoint"), r"DescribeEndpoint: .*Throttling.*budget .* is spent"
        ),
        "endpoint-gone": Failure(
            lambda d: d.fake.endpoints.clear(), r"DescribeEndpoint: HTTP 400 .*Could not find endpoint"
        ),
        "rolled-back": Failure(
            lambda d: setattr(d.fake.endpoint(SMOKE_ENDPOINT), "config_name", "config-1"),
            r"endpoint config: the endpoint runs endpoint config config-1",
        ),
    }


# Serving image check -------------------------------------------------------------------------------


IMAGE_INDEX = "application/vnd.docker.distribution.manifest.list.v2+json"  # a DLC image's


def image_index(*platforms: str) -> str:
    """A Docker manifest list naming one image per ``os/architecture``."""
    manifests = [
        {
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "digest": f"sha256:{i:064x}",
            "size": 1000,
            "platform": dict(zip(("os", "architecture"), p.split("/"), strict=True)),
        }
        for i, p in enumerate(platforms, 1)
    ]
    return json.dumps({"schemaVersion": 2, "mediaType": IMAGE_INDEX, "manifests": manifests})


class ImageCheckDriver(Driver):
    name = "serving_image_check"
    resource_type = "Custom::ServingImageCheck"

    def __init__(self, request, clock, template) -> None:
        super().__init__(request, clock, template)
        moto = request.getfixturevalue("s3").endpoint  # a reset moto server; boto3 here points at it
        request.getfixturevalue("monkeypatch").setenv("AWS_ENDPOINT_URL_ECR", moto)
        self.module = load_lambda(self.name)
        self.module._clients.clear()
        # moto has no DescribePullThroughCacheRules: the registry has no cache rules.
        request.getfixturevalue("monkeypatch").setattr(self.module, "_pull_through", lambda ecr, m: False)
        self.stacks = self.module._clients["cloudformation"] = Stacks()
        self.ecr = self.module.client("ecr", "us-east-1")
        self.ecr.create_repository(repositoryName="vllm")
        self.push(IMAGE_TAG, "linux/amd64", "unknown/unknown")
        self.ecr_faults = Faults(self.ecr)

    def push(self, tag: str, *platforms: str) -> None:
        self.ecr.put_image(
            repositoryName="vllm",
            imageManifest=image_index(*platforms),
            imageManifestMediaType=IMAGE_INDEX,
            imageTag=tag,
        )

    def handler(self) -> HandlerUnderTest:
        return HandlerUnderTest.from_module(self.module, resource_type=self.resource_type, timeouts=self.timeouts)

    def properties(self, **overrides: Any) -> dict[str, Any]:
        synthesized = {k: v for k, v in self.template_properties.items() if k not in ("ServiceToken", "ServiceTimeout")}
        return {**synthesized, **overrides}

    def changed_properties(self) -> dict[str, Any]:
        self.push("0.12.0", "linux/amd64")
        return self.properties(ImageUri=f"{IMAGE_REPOSITORY_URI}:0.12.0")

    failures: ClassVar[dict[str, Failure]] = {
        "tag-missing": Failure(
            lambda d: d.ecr.batch_delete_image(repositoryName="vllm", imageIds=[{"imageTag": IMAGE_TAG}]),
            r"tag '0\.11\.0-gpu.*' is not in repository vllm of account 123456789012 in us-east-1 \(ImageNotFound",
        ),
        "repository-missing": Failure(
            lambda d: d.ecr.delete_repository(repositoryName="vllm", force=True),
            r"repository vllm does not exist in account 123456789012 in us-east-1",
        ),
        "arm64-only": Failure(
            lambda d: d.push(IMAGE_TAG, "linux/arm64"),
            r"the image index lists the platforms linux/arm64, not linux/amd64",
        ),
    }


DRIVERS: list[type[Driver]] = [StagingDriver, PreflightDriver, SmokeDriver, ImageCheckDriver]
# Bugs this harness found are fixed; list a new one here as (handler, failure) -> description to xfail it.
KNOWN_BUGS: dict[tuple[str, str], str] = {}


def driver_params() -> list[Any]:
    return [
        pytest.param(d, id=d.name, marks=[] if handler_exists(d.name) else [pytest.mark.skip(reason=f"no {d.name}")])
        for d in DRIVERS
    ]


def failure_params() -> list[Any]:
    params = []
    for d in DRIVERS:
        for failure in d.failures:
            marks = [] if handler_exists(d.name) else [pytest.mark.skip(reason=f"no {d.name}")]
            if (d.name, failure) in KNOWN_BUGS:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[(d.name, failure)]))
            params.append(pytest.param(d, failure, id=f"{d.name}-{failure}", marks=marks))
    return params


@pytest.fixture
def driver(request, clock, deployed) -> Driver:
    driver = request.param(request, clock, deployed)
    with driver.stack:
        yield driver


def assert_well_behaved(cfn: CloudFormation, *responses: Response) -> None:
    for response in responses:
        assert cfn.problems(response) == [], response.reason


# --- the same paths for every handler -------------------------------------------------------------


def test_every_handler_in_the_project_has_a_driver():
    handlers = {p.parent.name for p in (ROOT / "lambda").glob("*/index.py") if "def on_event" in p.read_text()}
    assert handlers <= {d.name for d in DRIVERS}, "add a Driver for the new handler"


@pytest.mark.parametrize("driver", driver_params(), indirect=True)
def test_create_update_delete(driver):
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    updated = cfn.update(driver.changed_properties())
    assert updated.ok, updated.reason
    assert updated.physical_id == created.physical_id and updated.cleanup is None  # no replacement
    deleted = cfn.delete()
    assert deleted.ok and deleted.physical_id == created.physical_id
    assert_well_behaved(cfn, created, updated, deleted)
    assert driver.running() == []


@pytest.mark.parametrize("driver", driver_params(), indirect=True)
def test_a_retried_create_is_the_same_resource(driver):
    cfn = driver.cloudformation()
    first = cfn.create(driver.properties(), request_id="request-1")
    again = cfn.retry()
    assert first.ok and again.ok, (first.reason, again.reason)
    assert again.request["RequestId"] == "request-1" and again.physical_id == first.physical_id
    assert_well_behaved(cfn, first, again)


@pytest.mark.parametrize("driver", driver_params(), indirect=True)
def test_delete_of_an_already_deleted_resource_succeeds(driver):
    cfn = driver.cloudformation()
    assert cfn.create(driver.properties()).ok
    first, second = cfn.delete(), cfn.delete()
    assert first.ok and second.ok, (first.reason, second.reason)
    assert_well_behaved(cfn, first, second)


@pytest.mark.parametrize(("driver", "failure"), failure_params(), indirect=["driver"])
def test_a_failed_create_says_why_in_time_and_leaves_nothing_running(driver, failure):
    scenario = driver.failures[failure]
    scenario.arrange(driver)
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert not created.ok
    assert re.search(scenario.expect, created.message, re.DOTALL), created.message
    assert len(created.body) < RESPONSE_LIMIT, f"{len(created.body)} bytes: {created.message[:300]}"
    assert cfn.problems(created) == []  # ended by the handler, within ServiceTimeout
    rollback = cfn.rollback()
    assert rollback.ok, rollback.reason
    if created.physical_id == CREATE_FAILED_MARKER:
        assert not rollback.handler_called  # the Provider framework swallows it: cleanup was the handler's job
    assert driver.running() == []


# --- what only some handlers do -------------------------------------------------------------------


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_a_job_that_runs_too_long_is_handed_to_the_wait_condition(driver):
    driver.jobs.script = stuck
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok and created.data["JobName"] in driver.running()  # still copying, by design
    assert driver.handoff_s <= created.elapsed_s <= driver.handoff_s + driver.timeouts.query_interval_s
    assert_well_behaved(cfn, created)
    assert cfn.delete().ok and driver.running() == []  # cdk destroy stops the copy


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_a_retried_create_resumes_its_job(driver):
    driver.jobs.script = stuck
    cfn = driver.cloudformation()
    first = cfn.create(driver.properties(), request_id="request-1")
    again = cfn.retry()
    assert first.ok and again.ok and again.data["JobName"] == first.data["JobName"]
    assert len(driver.jobs.jobs) == 1 and driver.jobs.created == 2  # the second create met "already exists"


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_a_new_revision_replaces_and_the_old_delete_spares_the_new_job(driver):
    cfn = driver.cloudformation()
    old = cfn.create(driver.properties())
    assert old.ok and old.physical_id.startswith(f"s3://{BUCKET}/models/acme--tiny-llm/")
    repo = driver.hub.add_repo(REPO, {**FILES, "config.json": b'{"model_type": "llama", "num_hidden_layers": 3}'})
    driver.jobs.script = stuck
    new = cfn.update(driver.properties(Revision=repo.sha, MaxInstances="2"))  # a new revision stages
    assert new.ok and new.physical_id != old.physical_id
    assert new.cleanup is not None and new.cleanup.ok
    assert new.cleanup.request["PhysicalResourceId"] == old.physical_id
    assert new.cleanup.request["ResourceProperties"]["MaxInstances"] == "4"  # the old properties
    assert driver.running() == [new.data["JobName"]]  # the replacement's copy goes on
    assert_well_behaved(cfn, old, new)


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_many_include_patterns_fit_the_job_arguments(driver):
    """Found by this harness: all patterns used to go in one argument, over SageMaker's 256 characters."""
    patterns = [
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "chat_template.jinja",
        "vocab.json",
        "merges.txt",
    ]
    assert len(json.dumps(patterns)) > 256
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties(Include=patterns))
    assert created.ok, created.message


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_throttled_s3_reads_are_retried_by_botocore(driver):
    driver.s3_faults.inject("HeadObject", "SlowDown", "Please reduce your request rate.", times=2)
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    assert driver.clock.sleeps  # back-off, on the clock
    assert_well_behaved(cfn, created)


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_throttling_is_retried_across_polls_then_followed_to_the_end(driver):
    retries = driver.module.client("sagemaker").meta.config.retries["total_max_attempts"]
    driver.jobs.throttle("DescribeProcessingJob", times=3 * retries)  # three polls in a row exhaust botocore's
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    assert created.polls > 3 and driver.running() == []  # the job completed and was verified
    assert_well_behaved(cfn, created)


@pytest.mark.parametrize("driver", [pytest.param(PreflightDriver, id="deployment_preflight")], indirect=True)
def test_preflight_throttling_is_retried_by_botocore_then_passes(driver):
    driver.quotas.throttle("ListServiceQuotas", times=3)
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    assert driver.quotas.attempts("ListServiceQuotas") == 4 and len(driver.clock.sleeps) == 3
    assert created.data["QuotaValue"] == "2"
    assert_well_behaved(cfn, created)


@pytest.mark.parametrize("driver", [pytest.param(PreflightDriver, id="deployment_preflight")], indirect=True)
def test_preflight_gives_up_after_the_configured_attempts(driver):
    driver.quotas.throttle("ListServiceQuotas")
    created = driver.cloudformation().create(driver.properties())
    assert driver.quotas.attempts("ListServiceQuotas") == driver.module.RETRY_ATTEMPTS
    assert f"after {driver.module.RETRY_ATTEMPTS} attempt(s)" in created.message
    assert created.elapsed_s < driver.timeouts.handler_s  # the back-off fits one invocation


@pytest.mark.parametrize("driver", [pytest.param(PreflightDriver, id="deployment_preflight")], indirect=True)
def test_preflight_every_problem_in_one_reason(driver):
    driver.quotas.applied.update({"ml.g6.xlarge for endpoint usage": 0})
    driver.s3.client.delete_object(Bucket=BUCKET, Key=PREFLIGHT_PREFIX + ".hf-model-manifest.json")
    cfn = driver.cloudformation()
    # 9,999,999 tokens: past the model's limit (the context check) and, at that limit, past an L4's memory.
    created = cfn.create(driver.properties(MaxModelLen="9999999", GpuMemoryGib="1"))
    for check in ("[s3]", "[memory]", "[context]", "[quota]"):
        assert check in created.message
    assert cfn.problems(created) == []


@pytest.mark.parametrize("driver", [pytest.param(SmokeDriver, id="endpoint_smoke_test")], indirect=True)
def test_smoke_test_polls_until_in_service_within_its_budget(driver):
    endpoint = driver.fake.endpoint(SMOKE_ENDPOINT)
    endpoint.status = "Updating"
    calls = {"n": 0}

    def come_up(**kwargs):
        calls["n"] += 1
        if calls["n"] == 12:
            endpoint.status = "InService"

    driver.module.client("sagemaker").meta.events.register("before-send.sagemaker.DescribeEndpoint", come_up)
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    assert created.polls > 1  # handed back to the waiter between Lambda invocations
    assert_well_behaved(cfn, created)


# --- the harness keeps the Provider framework's rules -----------------------------------------------


class Toy:
    """A scriptable handler for the harness's own rules."""

    def __init__(self, clock: Clock, *, polls_needed: int | None = 1, on_event_sleep: float = 0.0) -> None:
        self.clock = clock
        self.polls_needed = polls_needed
        self.on_event_sleep = on_event_sleep
        self.events: list[dict[str, Any]] = []
        self.polls = 0
        self.fail_on: set[str] = set()

    def on_event(self, event, context):
        self.events.append(event)
        self.clock.sleep(self.on_event_sleep)
        if "on_event" in self.fail_on:
            raise RuntimeError("on_event broke")
        if event["RequestType"] == "Delete":
            return {"PhysicalResourceId": "other" if "delete-renames" in self.fail_on else event["PhysicalResourceId"]}
        return {"PhysicalResourceId": f"toy-{event['ResourceProperties']['Version']}", "Data": {"From": "on_event"}}

    def is_complete(self, event, context):
        self.events.append(event)
        if "is_complete" in self.fail_on:
            raise RuntimeError("is_complete broke")
        self.polls += 1
        if self.polls_needed is None or self.polls < self.polls_needed:
            return {"IsComplete": False, **({"Data": {"x": "y"}} if "data-too-early" in self.fail_on else {})}
        return {"IsComplete": True, "Data": {"Polls": str(self.polls)}}

    def cloudformation(self, timeouts: Timeouts) -> CloudFormation:
        handler = HandlerUnderTest("toy", "Custom::Toy", self.on_event, timeouts, self.is_complete)
        return CloudFormation(handler, clock=self.clock)


TOY_LIMITS = Timeouts(handler_s=60, service_timeout_s=900, query_interval_s=30, total_timeout_s=600)


def test_harness_merges_data_and_polls_on_the_clock():
    toy = Toy(Clock(), polls_needed=3)
    cfn = toy.cloudformation(TOY_LIMITS)
    created = cfn.create({"Version": "1"})
    assert created.ok and created.polls == 3 and created.elapsed_s == 60
    assert created.data == {"From": "on_event", "Polls": "3"}


def test_harness_waiter_and_service_timeouts():
    toy = Toy(Clock(), polls_needed=None)
    created = toy.cloudformation(TOY_LIMITS).create({"Version": "1"})
    assert created.reason == "Operation timed out" and created.timed_out == "Operation timed out"
    assert created.polls == TOY_LIMITS.max_polls + 1 and created.elapsed_s == TOY_LIMITS.total_timeout_s
    short = Timeouts(handler_s=60, service_timeout_s=300, query_interval_s=30, total_timeout_s=600)
    created = Toy(Clock(), polls_needed=None).cloudformation(short).create({"Version": "1"})
    assert created.timed_out == "ServiceTimeout" and "did not receive a response" in created.reason


def test_harness_lambda_timeout_and_data_before_completion():
    created = Toy(Clock(), on_event_sleep=61).cloudformation(TOY_LIMITS).create({"Version": "1"})
    assert created.timed_out == "Lambda timeout" and "Task timed out after 60.00 seconds" in created.reason
    toy = Toy(Clock(), polls_needed=2)
    toy.fail_on.add("data-too-early")
    created = toy.cloudformation(TOY_LIMITS).create({"Version": "1"})
    assert not created.ok and '"Data" is not allowed if "IsComplete" is "False"' in created.reason


def test_harness_failed_creates_and_their_rollback():
    toy = Toy(Clock())
    toy.fail_on.add("on_event")
    cfn = toy.cloudformation(TOY_LIMITS)
    created = cfn.create({"Version": "1"})
    assert created.physical_id == CREATE_FAILED_MARKER and created.reason.startswith("Error: on_event broke\n\nLogs:")
    calls = len(toy.events)
    assert cfn.rollback().ok and len(toy.events) == calls  # ignored by the framework
    toy = Toy(Clock())
    toy.fail_on.add("is_complete")
    cfn = toy.cloudformation(TOY_LIMITS)
    created = cfn.create({"Version": "1"})
    assert created.physical_id == "toy-1"  # on_event had answered: CloudFormation's Delete reaches the handler
    rollback = cfn.rollback()
    assert rollback.handler_called and toy.events[-1]["RequestType"] == "Delete"


def test_harness_replacement_deletes_the_old_resource_with_its_old_properties():
    toy = Toy(Clock())
    cfn = toy.cloudformation(TOY_LIMITS)
    cfn.create({"Version": "1"})
    updated = cfn.update({"Version": "2"})
    assert updated.physical_id == "toy-2" and updated.cleanup is not None
    assert updated.cleanup.request["PhysicalResourceId"] == "toy-1"
    assert updated.cleanup.request["ResourceProperties"]["Version"] == "1"
    toy.fail_on.add("delete-renames")
    assert "cannot change the physical resource ID" in cfn.delete().reason


def test_harness_reads_each_constructs_limits(deployed):
    staging = Timeouts.from_template(deployed, "Custom::StagedCheckpoint")
    assert (staging.handler_s, staging.query_interval_s, staging.total_timeout_s) == (300, 30, 2400)
    assert staging.service_timeout_s == 600 + 900
    preflight = Timeouts.from_template(deployed, "Custom::DeploymentPreflight")
    assert preflight.handler_s == 120 and preflight.service_timeout_s == 360
    if handler_exists("endpoint_smoke_test"):
        from constructs_lib import smoke_test

        smoke = Timeouts.from_template(deployed, "Custom::EndpointSmokeTest")
        assert smoke.total_timeout_s == smoke_test.TOTAL_TIMEOUT.to_seconds()
        assert smoke.query_interval_s == smoke_test.QUERY_INTERVAL.to_seconds()


@pytest.mark.parametrize("driver", [pytest.param(StagingDriver, id="staged_checkpoint")], indirect=True)
def test_staging_rollback_of_an_update_needs_neither_the_hub_nor_a_job(driver):
    cfn = driver.cloudformation()
    created = cfn.create(driver.properties())
    assert created.ok, created.reason
    driver.hub.repos.clear()  # the Hub may be why the update failed
    assert not cfn.update(driver.properties(Exclude=["original/*", "*.md"])).ok
    rolled_back = cfn.rollback()
    assert rolled_back.ok, rolled_back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE"
    assert rolled_back.physical_id == created.physical_id
    assert rolled_back.data["Revision"] == created.data["Revision"]
    assert_well_behaved(cfn, created, rolled_back)
