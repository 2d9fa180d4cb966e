"""``Custom::StagedCheckpoint`` handlers, every branch, against a fake Hub and a moto S3 server over HTTP.

SageMaker Processing (which moto runs to completion at once, whatever the job does) is a botocore
Stubber, so that each job state (running, failed, completed, gone) can be played in turn. The wait
condition's presigned URL is a local HTTP server that records every signal, as CloudFormation would.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber

from hfstage.manifest import MANIFEST_NAME
from hfstage.worker import main as stage
from tests.conftest import load_lambda
from tests.fakes.fake_hub import TEST_TOKEN, Synthetic
from tests.fakes.fixtures import BUCKET, fake_hub, s3  # noqa: F401
from tests.harness import ServiceQuotas

ROOT = Path(__file__).resolve().parents[2]
REPO = "acme/tiny-llm"
# Job-name prefixes in the form StagedCheckpoint makes them, hfstage-<8 hex of its path>-<10 hex of its properties>-:
# this resource's, and a sibling's (the same construct with other properties), which neither extends.
PREFIX = "hfstage-6eba4753-3d7e0c5a21-"
SIBLING = "hfstage-6eba4753-a41f9b0c77-"
FILES = {
    "config.json": b'{"model_type": "llama", "num_hidden_layers": 2}',
    "tokenizer.json": b'{"version": "1.0"}' * 100,
    "model-00001-of-00002.safetensors": Synthetic(3 * 2**20, seed=1),
    "model-00002-of-00002.safetensors": Synthetic(2 * 2**20, seed=2),
    "original/consolidated.pth": Synthetic(2**20, seed=3),
}


# A WaitConditionHandle's Ref as CloudFormation returns it (SigV4 presigned, regional virtual-hosted form).
WAIT_HANDLE = (
    "https://cloudformation-waitcondition-us-east-1.s3.us-east-1.amazonaws.com/"
    "arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/LlmEndpoint/"
    "6f0c5c20-0000-0000-0000-000000000000/6f0c5c21-0000-0000-0000-000000000000/CheckpointWaitHandle0123456789"
    "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261129T000000Z&X-Amz-SignedHeaders=host&X-Amz-Expires=86399"
    "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261129%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Signature=" + "0123456789abcdef" * 4
)


class _ToReceiver(urllib.request.HTTPSHandler):
    """Carries the handler's https requests to the receiver over plain HTTP; the URL and Host stay as sent."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def https_open(self, req):
        def connect(host, timeout=None, **_):
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

        return self.do_open(connect, req)


class SignalReceiver:
    """Plays the WaitConditionHandle's presigned S3 URL: records each PUT body (and where it went).

    ``url`` has a real handle's form, which the handler accepts; ``attach(module)`` routes that module's
    signals here, through the handler's own opener (https only, no redirects) with only the transport swapped.
    ``answer`` is the status every PUT gets (a 3xx carries ``location``); only a 200 is recorded as a signal.
    """

    def __init__(self, url: str = WAIT_HANDLE) -> None:
        self.signals: list[dict] = []
        self.requests: list[tuple[str, str]] = []  # (Host header, request target) of every PUT
        self.answer, self.location = 200, ""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((self.headers.get("Host"), self.path))
                if receiver.answer == 200:
                    receiver.signals.append({"content_type": self.headers.get("Content-Type"), **json.loads(body)})
                self.send_response(receiver.answer)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = url
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def attach(self, module):
        module.SIGNAL_OPENER = module.signal_opener(_ToReceiver(self.server.server_address[1]))
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(handler):
    r = SignalReceiver().attach(handler)
    yield r
    r.close()


class _NotRollingBack:
    """DescribeStacks for a stack in a plain update (the rollback tests install a stubbed client instead)."""

    def describe_stacks(self, StackName: str) -> dict:
        return {"Stacks": [{"StackName": StackName, "StackStatus": "UPDATE_IN_PROGRESS"}]}


@pytest.fixture
def handler(s3, fake_hub, capsys):  # noqa: F811
    module = load_lambda("staged_checkpoint")
    sagemaker = boto3.client("sagemaker", region_name="us-east-1")
    stubber = Stubber(sagemaker)
    module._clients.clear()
    module._clients["sagemaker"] = sagemaker
    module._clients["cloudformation"] = _NotRollingBack()
    quotas = module._clients["service-quotas"] = boto3.client("service-quotas", region_name="us-east-1")
    ServiceQuotas(quotas, defaults={"ml.m5.2xlarge for processing job usage": 4})
    module.test_stubber = stubber
    fake_hub.add_repo(REPO, FILES)
    with stubber:
        yield module
    stubber.assert_no_pending_responses()


def properties(receiver: SignalReceiver | None = None, **overrides) -> dict:
    props = {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:provider",
        "RepoId": REPO,
        "Revision": "main",
        "Bucket": BUCKET,
        "Prefix": "models/",
        "Include": [],
        "Exclude": ["original/*"],
        "TokenSecretArn": "",
        "HubEndpoint": "",
        "ImageUri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-cpu-py312-sagemaker",
        "InstanceType": "ml.m5.2xlarge",
        "MaxInstances": "4",
        "BytesPerInstance": str(100 * 2**30),
        "VolumeSizeGb": "30",
        "MaxRuntimeSeconds": "21600",
        "RoleArn": "arn:aws:iam::123456789012:role/staging-job",
        "CodeUri": "s3://cdk-assets/0123abcd.zip",
        "JobNamePrefix": PREFIX,
        "WaitHandle": receiver.url if receiver else "",
        "HandoffSeconds": "600",
    }
    props.update(overrides)
    return props


def event(request_type: str, props: dict, request_id: str = "req-1", **extra) -> dict:
    return {
        "RequestType": request_type,
        "RequestId": request_id,
        "LogicalResourceId": "Checkpoint",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/LlmEndpoint/1",
        "ResourceType": "Custom::StagedCheckpoint",
        "ResourceProperties": props,
        **extra,
    }


def stage_by_hand(s3_env, hub, *extra: str) -> None:
    """The worker, run in this process exactly as the job runs it."""
    client, _ = s3_env.worker_client()
    argv = ["--repo-id", REPO, "--revision", "main", "--destination", f"s3://{BUCKET}/models/"]
    assert stage([*argv, "--exclude", "original/*", "--progress-interval-s", "60", *extra], s3_client=client) == 0


def job_description(name: str, status: str, target: str, sha: str, **extra) -> dict:
    return {
        "ProcessingJobName": name,
        "ProcessingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:processing-job/{name}",
        "ProcessingJobStatus": status,
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.2xlarge", "VolumeSizeInGB": 30}
        },
        "AppSpecification": {
            "ImageUri": "img",
            "ContainerArguments": ["--repo-id", REPO, "--revision", sha, "--destination", f"s3://{BUCKET}/models/"],
        },
        "Environment": {"HFSTAGE_TARGET": target},
        "CreationTime": "2026-11-29T00:00:00Z",
        **extra,
    }


def revision_uri(hub) -> tuple[str, str]:
    sha = hub.repos[REPO].sha
    return sha, f"s3://{BUCKET}/models/acme--tiny-llm/{sha}/"


# --- on_event -------------------------------------------------------------------------------------


def test_create_with_nothing_to_do_starts_no_job_and_signals_the_wait_condition(handler, s3, fake_hub, receiver):  # noqa: F811
    stage_by_hand(s3, fake_hub)
    sha, uri = revision_uri(fake_hub)
    result = handler.on_event(event("Create", properties(receiver)))  # the stubber refuses any SageMaker call
    assert result["PhysicalResourceId"] == uri
    assert result["Data"]["Revision"] == sha
    assert result["Data"]["JobName"] == ""
    assert result["Data"]["ManifestUri"] == uri + MANIFEST_NAME
    assert result["Data"]["Files"] == "4"  # original/ excluded
    assert [s["Status"] for s in receiver.signals] == ["SUCCESS"]
    assert receiver.signals[0]["content_type"] == ""  # what a presigned PUT URL was signed for
    assert handler.is_complete(event("Create", properties(receiver), **result)) == {"IsComplete": True}


def test_create_that_starts_a_job_plans_only_the_revision_and_passes_no_token(handler, s3, fake_hub, receiver):  # noqa: F811
    sha, uri = revision_uri(fake_hub)
    captured = {}
    handler.test_stubber.add_response(
        "create_processing_job", {"ProcessingJobArn": "arn:job"}, {k: ANY for k in EXPECTED_JOB_KEYS}
    )
    handler.test_stubber.client.meta.events.register_first(
        "provide-client-params.sagemaker.CreateProcessingJob", lambda params, **_: captured.update(params)
    )
    result = handler.on_event(event("Create", properties(receiver), request_id="req-42"))
    assert result["PhysicalResourceId"] == uri
    name = result["Data"]["JobName"]
    assert name.startswith(PREFIX) and len(name) <= 63
    assert captured["ProcessingJobName"] == name
    assert captured["AppSpecification"]["ContainerEntrypoint"] == [
        "python3",
        "/opt/ml/processing/input/code/0123abcd.zip",
    ]
    args = captured["AppSpecification"]["ContainerArguments"]
    assert args[args.index("--revision") + 1] == sha  # pinned to the resolved commit, not "main"
    assert args[args.index("--exclude") + 1] == "original/*"  # one flag per pattern
    assert captured["Environment"]["HFSTAGE_TARGET"] == uri
    assert captured["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 1
    assert captured["ProcessingInputs"][0]["S3Input"]["S3Uri"] == "s3://cdk-assets/0123abcd.zip"
    assert receiver.signals == []  # the job's end signals, not the start
    # A retried request (same RequestId) gets the same name, and "already exists" resumes it.
    handler.test_stubber.add_client_error(
        "create_processing_job", "ResourceInUse", "Job name must be unique within an AWS account and region"
    )
    again = handler.on_event(event("Create", properties(receiver), request_id="req-42"))
    assert again["Data"]["JobName"] == name
    assert handler.job_name(handler.Settings.from_properties(properties()), "req-43") != name


EXPECTED_JOB_KEYS = (
    "ProcessingJobName",
    "RoleArn",
    "AppSpecification",
    "ProcessingInputs",
    "ProcessingResources",
    "StoppingCondition",
    "Environment",
    "Tags",
)


def test_large_checkpoints_are_spread_over_instances(handler):
    settings = handler.Settings.from_properties(properties(MaxInstances="4", BytesPerInstance=str(2**20)))
    files = tuple(handler.HubFile(f"f{i}", 2**20, "b") for i in range(6))
    plan = handler.Plan(sha="s", files=files, missing=files, prefix="p/", manifest_ok=False)
    assert handler.instances_for(plan, settings) == 4  # 6 MiB / 1 MiB, capped by MaxInstances
    one = handler.Plan(sha="s", files=files, missing=files[:1], prefix="p/", manifest_ok=False)
    assert handler.instances_for(one, settings) == 1  # never more instances than missing files
    settings = handler.Settings.from_properties(properties(BytesPerInstance=str(10 * 2**20)))
    assert handler.instances_for(plan, settings) == 1


def test_rerun_after_a_partial_copy_starts_a_job_for_what_is_missing(handler, s3, fake_hub, receiver):  # noqa: F811
    stage_by_hand(s3, fake_hub)
    s3.client.delete_object(Bucket=BUCKET, Key=f"models/acme--tiny-llm/{fake_hub.repos[REPO].sha}/tokenizer.json")
    handler.test_stubber.add_response("create_processing_job", {"ProcessingJobArn": "arn:job"})
    result = handler.on_event(event("Create", properties(receiver)))
    assert result["Data"]["JobName"].startswith(PREFIX)


def test_update_to_a_new_revision_changes_the_physical_id(handler, s3, fake_hub, receiver):  # noqa: F811
    stage_by_hand(s3, fake_hub)
    old_sha, old_uri = revision_uri(fake_hub)
    fake_hub.add_repo(REPO, {**FILES, "config.json": b'{"model_type": "llama", "num_hidden_layers": 3}'})
    new_sha, new_uri = revision_uri(fake_hub)
    assert new_sha != old_sha
    handler.test_stubber.add_response("create_processing_job", {"ProcessingJobArn": "arn:job"})
    result = handler.on_event(
        event(
            "Update",
            properties(receiver, Revision=new_sha, InstanceType="ml.m5.4xlarge"),  # a new revision stages
            PhysicalResourceId=old_uri,
            OldResourceProperties=properties(receiver),
        )
    )
    assert result["PhysicalResourceId"] == new_uri  # CloudFormation replaces, then deletes the old one


def test_update_of_an_unchanged_revision_keeps_the_physical_id(handler, s3, fake_hub, receiver):  # noqa: F811
    stage_by_hand(s3, fake_hub)
    _, uri = revision_uri(fake_hub)
    result = handler.on_event(
        event("Update", properties(receiver, MaxInstances="8"), PhysicalResourceId=uri, OldResourceProperties={})
    )
    assert result["PhysicalResourceId"] == uri


def test_gated_repo_without_a_token_fails_with_a_clear_message(handler, fake_hub):  # noqa: F811
    fake_hub.add_repo("acme/gated", FILES, gated=True)
    with pytest.raises(handler.StagingError, match=r"acme/gated.*(gated|private).*hf_token_secret_arn"):
        handler.on_event(event("Create", properties(RepoId="acme/gated")))


def test_gated_repo_with_a_token_secret_works_and_the_token_leaks_nowhere(handler, fake_hub, receiver, caplog):  # noqa: F811
    fake_hub.add_repo("acme/gated", FILES, gated=True)
    secrets = boto3.client("secretsmanager")
    arn = secrets.create_secret(Name="hf-token", SecretString=json.dumps({"HF_TOKEN": TEST_TOKEN}))["ARN"]
    captured = {}
    handler.test_stubber.add_response("create_processing_job", {"ProcessingJobArn": "arn:job"})
    handler.test_stubber.client.meta.events.register_first(
        "provide-client-params.sagemaker.CreateProcessingJob", lambda params, **_: captured.update(params)
    )
    caplog.set_level("INFO")  # what a Lambda function logs
    result = handler.on_event(event("Create", properties(receiver, RepoId="acme/gated", TokenSecretArn=arn)))
    args = captured["AppSpecification"]["ContainerArguments"]
    assert args[args.index("--token-secret-arn") + 1] == arn  # the job reads the secret itself
    everything = json.dumps([result, captured, receiver.signals]) + caplog.text
    assert TEST_TOKEN not in everything


def test_unusable_token_secret_fails_without_echoing_it(handler, fake_hub):  # noqa: F811
    secrets = boto3.client("secretsmanager")
    arn = secrets.create_secret(Name="hf-token-bad", SecretString=json.dumps({"other": TEST_TOKEN}))["ARN"]
    with pytest.raises(handler.StagingError) as error:
        handler.on_event(event("Create", properties(TokenSecretArn=arn)))
    assert "unusable" in str(error.value) and TEST_TOKEN not in str(error.value)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"RepoId": "acme/missing"}, r"acme/missing"),
        ({"Revision": "no-such-branch"}, r"no-such-branch"),
        ({"Include": ["*.gguf"]}, r"no file of acme/tiny-llm@\w+ matches include=\['\*\.gguf'\]"),
    ],
)
def test_nonexistent_repo_revision_or_empty_selection_fails_clearly(handler, overrides, expected):
    with pytest.raises(handler.StagingError, match=expected):
        handler.on_event(event("Create", properties(**overrides)))


def test_a_revision_with_unsafe_file_names_fails_before_any_job_or_upload(handler, s3, fake_hub):  # noqa: F811
    """A file named like the manifest would overwrite it; '..' would leave the prefix (hfstage/names.py)."""
    fake_hub.add_repo("acme/hostile", {"config.json": b"{}", ".hf-model-manifest.json": b"{}", "w/../x.bin": b"x"})
    with pytest.raises(handler.StagingError, match="refused before any upload: 2 of the 3 files") as error:
        handler.on_event(event("Create", properties(RepoId="acme/hostile")))
    assert "'.hf-model-manifest.json'" in str(error.value) and "'w/../x.bin'" in str(error.value)
    # No CreateProcessingJob was stubbed (the stubber would fail on one), and nothing was written.
    assert s3.client.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


# --- is_complete ----------------------------------------------------------------------------------


def started(handler, fake_hub, receiver, started_at: float | None = None) -> dict:  # noqa: F811
    sha, uri = revision_uri(fake_hub)
    data = {
        "Revision": sha,
        "S3Uri": uri,
        "Prefix": f"models/acme--tiny-llm/{sha}/",
        "JobName": f"{PREFIX}abc",
        "StartedAt": str(int(started_at if started_at is not None else time.time())),
    }
    return event("Create", properties(receiver), PhysicalResourceId=uri, Data=data)


def test_job_still_running_is_followed_then_handed_to_the_wait_condition(handler, fake_hub, receiver):  # noqa: F811
    sha, uri = revision_uri(fake_hub)
    handler.test_stubber.add_response(
        "describe_processing_job", job_description(f"{PREFIX}abc", "InProgress", uri, sha)
    )
    assert handler.is_complete(started(handler, fake_hub, receiver)) == {"IsComplete": False}
    handler.test_stubber.add_response(
        "describe_processing_job", job_description(f"{PREFIX}abc", "InProgress", uri, sha)
    )
    late = started(handler, fake_hub, receiver, started_at=time.time() - 601)
    assert handler.is_complete(late) == {"IsComplete": True}
    assert receiver.signals == []  # the job's completion event will signal


def test_job_completed_is_verified_and_signalled(handler, s3, fake_hub, receiver):  # noqa: F811
    stage_by_hand(s3, fake_hub)
    sha, uri = revision_uri(fake_hub)
    handler.test_stubber.add_response("describe_processing_job", job_description(f"{PREFIX}abc", "Completed", uri, sha))
    assert handler.is_complete(started(handler, fake_hub, receiver)) == {"IsComplete": True}
    assert [(s["Status"], s["UniqueId"], s["Data"]) for s in receiver.signals] == [("SUCCESS", f"{PREFIX}abc", sha)]


def test_job_completed_without_a_manifest_fails(handler, fake_hub, receiver):  # noqa: F811
    sha, uri = revision_uri(fake_hub)
    handler.test_stubber.add_response("describe_processing_job", job_description(f"{PREFIX}abc", "Completed", uri, sha))
    with pytest.raises(handler.StagingError, match="wrote no manifest"):
        handler.is_complete(started(handler, fake_hub, receiver))


def test_job_failed_fails_the_resource_with_the_jobs_reason_under_4_kb(handler, fake_hub, receiver):  # noqa: F811
    sha, uri = revision_uri(fake_hub)
    reason = "AlgorithmError: staging acme/tiny-llm@main failed: sha256 mismatch " + "x" * 10_000
    handler.test_stubber.add_response(
        "describe_processing_job", job_description(f"{PREFIX}abc", "Failed", uri, sha, FailureReason=reason)
    )
    with pytest.raises(handler.StagingError) as error:
        handler.is_complete(started(handler, fake_hub, receiver))
    message = str(error.value)
    assert "sha256 mismatch" in message and f"{PREFIX}abc Failed" in message
    assert len(message.encode()) < 4096
    assert receiver.signals[0]["Status"] == "FAILURE" and len(json.dumps(receiver.signals[0])) < 4096


def test_an_error_while_following_the_job_stops_it_before_failing(handler, fake_hub, receiver):  # noqa: F811
    _sha, _uri = revision_uri(fake_hub)
    stub = handler.test_stubber
    stub.add_client_error("describe_processing_job", "AccessDeniedException", "not authorized")
    stub.add_response(
        "list_processing_jobs",
        {"ProcessingJobSummaries": [summary(f"{PREFIX}abc", "InProgress")]},
        {"NameContains": f"{PREFIX}abc"},
    )
    stub.add_response("stop_processing_job", {}, {"ProcessingJobName": f"{PREFIX}abc"})
    with pytest.raises(Exception, match="not authorized"):
        handler.is_complete(started(handler, fake_hub, receiver))


# --- delete ---------------------------------------------------------------------------------------


def summary(name: str, status: str) -> dict:
    return {
        "ProcessingJobName": name,
        "ProcessingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:processing-job/{name}",
        "CreationTime": "2026-11-29T00:00:00Z",
        "ProcessingJobStatus": status,
    }


def test_delete_while_running_stops_this_revisions_job_and_keeps_the_objects(handler, s3, fake_hub):  # noqa: F811
    stage_by_hand(s3, fake_hub)
    sha, uri = revision_uri(fake_hub)
    stub = handler.test_stubber
    stub.add_response(
        "list_processing_jobs",
        {
            "ProcessingJobSummaries": [
                summary(f"{PREFIX}running", "InProgress"),
                summary(f"{PREFIX}newer", "InProgress"),
                summary(f"{PREFIX}done", "Completed"),
                summary(f"{SIBLING}0123456789", "InProgress"),  # another properties' job
            ]
        },
        {"NameContains": PREFIX},
    )
    stub.add_response("describe_processing_job", job_description(f"{PREFIX}running", "InProgress", uri, sha))
    stub.add_response("stop_processing_job", {}, {"ProcessingJobName": f"{PREFIX}running"})
    # A replacement's job stages another revision under the same name prefix: it must keep running.
    stub.add_response("describe_processing_job", job_description(f"{PREFIX}newer", "InProgress", uri + "other/", sha))
    result = handler.on_event(event("Delete", properties(), PhysicalResourceId=uri))
    assert result == {"PhysicalResourceId": uri}
    assert MANIFEST_NAME in " ".join(s3.list_keys())  # the checkpoint stays for the next deployment
    assert handler.is_complete(event("Delete", properties(), PhysicalResourceId=uri)) == {"IsComplete": True}


def test_delete_when_the_job_is_already_gone_succeeds(handler, fake_hub):  # noqa: F811
    sha, uri = revision_uri(fake_hub)
    stub = handler.test_stubber
    stub.add_response(
        "list_processing_jobs",
        {"ProcessingJobSummaries": [summary(f"{PREFIX}a", "Stopping")]},
        {"NameContains": PREFIX},
    )
    stub.add_response("describe_processing_job", job_description(f"{PREFIX}a", "Stopping", uri, sha))
    stub.add_client_error("stop_processing_job", "ValidationException", "The job is not in a stoppable state")
    assert handler.on_event(event("Delete", properties(), PhysicalResourceId=uri)) == {"PhysicalResourceId": uri}


def test_delete_after_a_failed_create_stops_every_running_job_of_the_resource(handler):
    # The physical ID of a failed create is not a revision prefix: no revision to compare, stop them all.
    stub = handler.test_stubber
    stub.add_response(
        "list_processing_jobs",
        {"ProcessingJobSummaries": [summary(f"{PREFIX}a", "InProgress")]},
        {"NameContains": PREFIX},
    )
    stub.add_response("stop_processing_job", {}, {"ProcessingJobName": f"{PREFIX}a"})
    answer = handler.on_event(event("Delete", properties(), PhysicalResourceId="Checkpoint-req-1"))
    assert answer == {"PhysicalResourceId": "Checkpoint-req-1"}
    stub.assert_no_pending_responses()  # the stop was sent, not merely allowed


# --- the job's state change (EventBridge) -----------------------------------------------------------


def state_change(receiver, name: str) -> dict:
    return {
        "WaitHandle": receiver.url,
        "JobNamePrefix": PREFIX,
        "Event": {
            "source": "aws.sagemaker",
            "detail-type": "SageMaker Processing Job State Change",
            "detail": {"ProcessingJobName": name, "ProcessingJobStatus": "Completed"},
        },
    }


def test_state_change_completed_verifies_the_manifest_then_signals_success(handler, s3, fake_hub, receiver):  # noqa: F811
    stage_by_hand(s3, fake_hub)
    sha, uri = revision_uri(fake_hub)
    handler.test_stubber.add_response("describe_processing_job", job_description(f"{PREFIX}abc", "Completed", uri, sha))
    assert handler.on_job_state_change(state_change(receiver, f"{PREFIX}abc")) == {"signalled": True, "success": True}
    assert receiver.signals[0]["Status"] == "SUCCESS" and receiver.signals[0]["Data"] == sha


def test_state_change_completed_with_a_missing_file_signals_failure(handler, s3, fake_hub, receiver):  # noqa: F811
    stage_by_hand(s3, fake_hub)
    sha, uri = revision_uri(fake_hub)
    s3.client.delete_object(Bucket=BUCKET, Key=f"models/acme--tiny-llm/{sha}/config.json")
    handler.test_stubber.add_response("describe_processing_job", job_description(f"{PREFIX}abc", "Completed", uri, sha))
    assert handler.on_job_state_change(state_change(receiver, f"{PREFIX}abc"))["success"] is False
    assert receiver.signals[0]["Status"] == "FAILURE" and "config.json" in receiver.signals[0]["Reason"]


def test_state_change_failed_signals_the_reason(handler, fake_hub, receiver):  # noqa: F811
    sha, uri = revision_uri(fake_hub)
    handler.test_stubber.add_response(
        "describe_processing_job",
        job_description(f"{PREFIX}abc", "Failed", uri, sha, FailureReason="ClientError: gated repository"),
    )
    handler.on_job_state_change(state_change(receiver, f"{PREFIX}abc"))
    assert receiver.signals[0]["Status"] == "FAILURE" and "gated repository" in receiver.signals[0]["Reason"]


def test_state_change_of_another_checkpoints_job_is_ignored(handler, receiver):
    assert handler.on_job_state_change(state_change(receiver, f"{SIBLING}0123456789")) == {"signalled": False}
    assert receiver.signals == []


def test_update_during_a_rollback_is_answered_from_the_physical_id_without_the_hub(handler, fake_hub, receiver):  # noqa: F811
    sha, uri = revision_uri(fake_hub)
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    with Stubber(cloudformation) as stub:
        handler._clients["cloudformation"] = cloudformation
        stub.add_response(
            "describe_stacks",
            {
                "Stacks": [
                    {
                        "StackName": "LlmEndpoint",
                        "CreationTime": "2026-11-29T00:00:00Z",
                        "StackStatus": "UPDATE_ROLLBACK_IN_PROGRESS",
                    }
                ]
            },
        )
        fake_hub.repos.clear()  # the Hub is not asked: it may be what failed
        result = handler.on_event(
            event("Update", properties(receiver), PhysicalResourceId=uri, OldResourceProperties=properties())
        )
    assert result["PhysicalResourceId"] == uri
    assert result["Data"]["Revision"] == sha and result["Data"]["S3Uri"] == uri and result["Data"]["JobName"] == ""
    assert receiver.signals == []  # that wait condition was satisfied long ago


def test_update_when_the_stack_status_is_unreadable_plans_as_usual(handler, s3, fake_hub, receiver):  # noqa: F811
    stage_by_hand(s3, fake_hub)
    _, uri = revision_uri(fake_hub)
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    with Stubber(cloudformation) as stub:
        handler._clients["cloudformation"] = cloudformation
        stub.add_client_error("describe_stacks", "AccessDenied", "not authorized")
        result = handler.on_event(
            event("Update", properties(receiver), PhysicalResourceId=uri, OldResourceProperties=properties())
        )
    assert result["PhysicalResourceId"] == uri and result["Data"]["Files"] == "4"
    assert [s["Status"] for s in receiver.signals] == ["SUCCESS"]


def test_through_a_mirror_without_blobs_the_handler_plans_from_heads_and_skips_what_the_hub_staged(
    handler,
    s3,  # noqa: F811
    fake_hub,  # noqa: F811
    receiver,
):
    """A mirror whose listing has no blobId/lfs: the revision's files come from one HEAD each (hfstage/hub.py),
    with the blob ids the Hub lists, so the objects staged from the Hub match and no job starts."""
    stage_by_hand(s3, fake_hub)
    fake_hub.listing = "names"
    _, uri = revision_uri(fake_hub)
    result = handler.on_event(event("Create", properties(receiver)))  # the stubber refuses any SageMaker call
    assert result["PhysicalResourceId"] == uri and result["Data"]["JobName"] == ""
    assert {r.file for r in fake_hub.requests if r.method == "HEAD"} == set(FILES)


def test_through_a_mirror_whose_heads_lack_the_hashes_the_deploy_fails_before_any_job(handler, fake_hub, receiver):  # noqa: F811
    fake_hub.listing = "names"
    fake_hub.resolve_drops = ("X-Linked-Etag", "ETag")
    with pytest.raises(Exception, match=r"the HEAD of .* has no X-Linked-Etag .* cannot be verified"):
        handler.on_event(event("Create", properties(receiver)))
