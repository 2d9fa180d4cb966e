"""``lambda/serving_image_check``: every branch, against moto's ECR (a real local server) where moto speaks the call,
and a stand-in ECR client for what moto does not implement (GetDownloadUrlForLayer: the config blob's platform).

The sequence test plays create, an update to a tag that is gone (fails), its rollback (the old image is gone too by
then: the rollback must still succeed with every attribute), delete and a redeploy after the delete.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.conftest import load_lambda
from tests.fakes.fixtures import s3  # noqa: F401
from tests.harness import CloudFormation, Faults, HandlerUnderTest, Stacks, Timeouts

ACCOUNT = "123456789012"  # moto's
REPOSITORY = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/team/vllm"
INDEX = "application/vnd.docker.distribution.manifest.list.v2+json"  # what the DLC images are
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ACCEPTED = [MANIFEST, OCI_MANIFEST, INDEX, OCI_INDEX]
TIMEOUTS = Timeouts(handler_s=180, service_timeout_s=480)  # constructs_lib/image_check.py


def index_of(*platforms: str, media_type: str = INDEX) -> str:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": media_type,
            "manifests": [
                {
                    "mediaType": MANIFEST,
                    "digest": f"sha256:{i:064x}",
                    "size": 500,
                    "platform": dict(zip(("os", "architecture"), p.split("/"), strict=True)),
                }
                for i, p in enumerate(platforms, 1)
            ],
        }
    )


@pytest.fixture
def handler(s3, monkeypatch):  # noqa: F811 - the shared moto fixture
    monkeypatch.setenv("AWS_ENDPOINT_URL_ECR", s3.endpoint)
    module = load_lambda("serving_image_check")
    module._clients.clear()
    module._clients["cloudformation"] = Stacks()
    ecr = module.client("ecr", "us-east-1")
    ecr.create_repository(repositoryName="team/vllm")
    module.test_ecr = ecr
    # moto has no DescribePullThroughCacheRules: by default the registry has no cache rules (tests below set others).
    monkeypatch.setattr(module, "_pull_through", lambda ecr, m: False)
    return module


def push(ecr: Any, tag: str, manifest: str, media_type: str = INDEX) -> str:
    answer = ecr.put_image(
        repositoryName="team/vllm", imageManifest=manifest, imageManifestMediaType=media_type, imageTag=tag
    )
    return answer["image"]["imageId"]["imageDigest"]


def event(request: str = "Create", **properties: Any) -> dict[str, Any]:
    return {
        "RequestType": request,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/LlmEndpoint/x",
        "LogicalResourceId": "ModelImageCheck",
        "RequestId": "r1",
        "ResourceProperties": {"ImageUri": f"{REPOSITORY}:v1", **properties},
    }


def refused(module: Any, evt: dict[str, Any]) -> str:
    with pytest.raises(module.ImageCheckFailed) as failed:
        module.on_event(evt)
    message = str(failed.value)
    assert len(message.encode()) < 4096
    return message


# --- what ECR says ------------------------------------------------------------------------------------------------


def test_a_tag_that_exists_on_the_instances_platform_passes_with_its_digest(handler):
    digest = push(handler.test_ecr, "v1", index_of("linux/amd64", "unknown/unknown"))
    answer = handler.on_event(event())
    assert answer["PhysicalResourceId"].startswith("image-check-")
    assert answer["Data"] == {
        "ImageDigest": digest,
        "MediaType": INDEX,
        "Platform": "linux/amd64",
        "Verified": "true",
        "Notes": "",
    }


def test_a_digest_is_looked_up_by_digest(handler):
    digest = push(handler.test_ecr, "v1", index_of("linux/amd64"))
    assert handler.on_event(event(ImageUri=f"{REPOSITORY}@{digest}"))["Data"]["ImageDigest"] == digest
    other = "sha256:" + "0" * 64
    message = refused(handler, event(ImageUri=f"{REPOSITORY}@{other}"))
    assert f"digest {other} is not in repository team/vllm of account {ACCOUNT} in us-east-1 (ImageNotFound" in message


def test_a_missing_tag_fails_naming_the_tag_the_repository_and_how_to_list_tags(handler):
    push(handler.test_ecr, "v2", index_of("linux/amd64"))
    message = refused(handler, event())
    assert message.startswith(f"Serving image {REPOSITORY}:v1: tag 'v1' is not in repository team/vllm")
    assert (
        "aws ecr describe-images --registry-id 123456789012 --repository-name team/vllm --region us-east-1" in message
    )


def test_a_missing_repository_fails(handler):
    message = refused(handler, event(ImageUri=f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/nothing:v1"))
    assert "repository nothing does not exist in account 123456789012 in us-east-1" in message


@pytest.mark.parametrize(
    ("cached", "note"),
    [(True, "a pull-through cache rule of this registry covers it"), (None, "cache rules could not be read")],
    ids=["covered", "unknown"],
)
def test_a_missing_image_of_the_stacks_own_registry_may_be_a_pull_through_caches_first_pull(
    handler, monkeypatch, cached, note
):
    """ECR creates a cache's repository, and fetches a tag, on the first pull (SageMaker's, with its own role)."""
    monkeypatch.setattr(handler, "_pull_through", lambda ecr, m: cached)
    for uri in (f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/quay/vllm:v1", f"{REPOSITORY}:v9"):  # no repo; no tag
        data = handler.on_event(event(ImageUri=uri))["Data"]
        assert data["Verified"] == "false" and note in data["Notes"], (uri, data)
    # In another account (a DLC registry) the repository is either there or not: no cache rule is asked.
    monkeypatch.setattr(handler, "_pull_through", lambda ecr, m: pytest.fail("asked"))
    message = refused(handler, event(ImageUri="763104351884.dkr.ecr.us-east-1.amazonaws.com/quay/vllm:v1"))
    assert "repository quay/vllm does not exist in account 763104351884" in message


class Rules:
    """An ECR client's DescribePullThroughCacheRules paginator over ``pages`` (or raising ``error``)."""

    def __init__(self, *pages: list[str], error: Exception | None = None) -> None:
        self.pages, self.error, self.asked = pages, error, []

    def get_paginator(self, name: str) -> Any:
        assert name == "describe_pull_through_cache_rules"
        return self

    def paginate(self, **kwargs: Any) -> Any:
        self.asked.append(kwargs)
        if self.error is not None:
            raise self.error
        return [{"pullThroughCacheRules": [{"ecrRepositoryPrefix": p} for p in page]} for page in self.pages]


@pytest.mark.parametrize(
    ("rules", "repository", "covered"),
    [
        (Rules(["docker-hub"], ["quay"]), "quay/vllm/vllm-openai", True),  # a rule on a later page
        (Rules(["ROOT"]), "vllm", True),  # ROOT: every repository of the registry
        (Rules(["quay"]), "quayside/vllm", False),  # a prefix is a whole first part
        (Rules(["quay"]), "quay", False),
        (Rules(), "quay/vllm", False),
        (Rules(error=RuntimeError("denied")), "quay/vllm", None),
    ],
)
def test_pull_through_cache_rules_cover_a_repository_by_its_prefix(handler, rules, repository, covered):
    module = load_lambda("serving_image_check")
    m = module.ECR_URI.fullmatch(f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/{repository}:v1")
    assert module._pull_through(rules, m) is covered
    assert rules.asked == [{"registryId": ACCOUNT}]


def test_an_index_without_the_instances_platform_fails_naming_what_it_has(handler):
    push(handler.test_ecr, "v1", index_of("linux/arm64", "unknown/unknown"))
    message = refused(handler, event())
    assert "lists the platforms linux/arm64, not linux/amd64" in message  # the attestation's unknown/unknown left out
    assert "docker buildx build --platform linux/amd64 --provenance=false" in message
    push(handler.test_ecr, "v1", index_of("linux/arm64"))
    assert handler.on_event(event(Architecture="arm64"))["Data"]["Platform"] == "linux/arm64"  # the prop decides


@pytest.mark.parametrize("platforms", [(), ("unknown/unknown",)], ids=["none", "attestation-only"])
def test_an_index_that_names_no_platform_is_a_note(handler, platforms):
    """``platform`` is optional in an OCI image index: nothing to compare is not a mismatch."""
    push(handler.test_ecr, "v1", index_of(*platforms))
    data = handler.on_event(event())["Data"]
    assert data["Platform"] == "" and "names no platform" in data["Notes"] and data["Verified"] == "true"


def test_an_oci_image_passes_with_a_note_on_how_to_push_docker_schema_2(handler):
    push(handler.test_ecr, "v1", index_of("linux/amd64", media_type=OCI_INDEX), media_type=OCI_INDEX)
    data = handler.on_event(event())["Data"]
    assert data["Platform"] == "linux/amd64" and data["MediaType"] == OCI_INDEX
    assert "OCI index, not Docker schema 2" in data["Notes"] and "--provenance=false" in data["Notes"]
    assert "aws/amazon-sagemaker-feedback #180" in data["Notes"]


def test_without_an_architecture_the_platform_is_a_note(handler):
    """A blank Architecture (an instance type outside the catalog, whose CPU is not known) checks no platform."""
    push(handler.test_ecr, "v1", index_of("linux/arm64"))
    data = handler.on_event(event(Architecture=""))["Data"]
    assert "no architecture given" in data["Notes"] and data["Verified"] == "true" and data["Platform"] == ""
    assert "not linux/amd64" in refused(handler, event())  # absent: the default, amd64


def test_an_image_in_another_region_fails_before_any_call(handler):
    faults = Faults(handler.test_ecr)
    message = refused(handler, event(ImageUri="763104351884.dkr.ecr.eu-west-1.amazonaws.com/vllm:v1"))
    assert "the image is in eu-west-1, the stack in us-east-1: SageMaker pulls an image only from the region" in message
    assert faults.calls == []


@pytest.mark.parametrize(
    "uri",
    [
        "docker.io/vllm/vllm-openai:latest",
        f"{REPOSITORY}",  # neither tag nor digest
        f"{REPOSITORY}:v1; rm -rf /",
        f"{REPOSITORY}@sha256:abc",
    ],
)
def test_what_cannot_be_read_as_an_ecr_image_uri_is_a_note(handler, uri):
    """Synth refuses a literal URI that is not ECR's; what only resolves at deploy is SageMaker's to judge."""
    faults = Faults(handler.test_ecr)
    data = handler.on_event(event(ImageUri=uri))["Data"]
    assert "not read as an ECR image URI" in data["Notes"] and data["Verified"] == "false" and faults.calls == []


@pytest.mark.parametrize(
    ("suffix", "region"),
    [
        ("amazonaws.com", "us-east-1"),
        ("amazonaws.com.cn", "cn-north-1"),
        ("c2s.ic.gov", "us-iso-east-1"),
        ("sc2s.sgov.gov", "us-isob-east-1"),
        ("csp.hci.ic.gov", "us-isof-south-1"),
        ("cloud.adc-e.uk", "eu-isoe-west-1"),
        ("amazonaws.eu", "eusc-de-east-1"),
    ],
)
def test_every_partitions_registry_host_is_read(handler, stand_in, monkeypatch, suffix, region):
    """The DLC registries of constructs_lib/data/dlc_registry.json, with each partition's DNS suffix (botocore
    partitions.json), as ${AWS::URLSuffix} renders them."""
    monkeypatch.setenv("AWS_REGION", region)
    ecr = stand_in(single(b'{"architecture": "amd64", "os": "linux"}'), b'{"architecture": "amd64", "os": "linux"}')
    handler._clients[f"ecr@{region}"] = ecr
    ecr.registry = "763104351884"
    data = handler.on_event(event(ImageUri=f"763104351884.dkr.ecr.{region}.{suffix}/vllm:v1"))["Data"]
    assert data["Verified"] == "true" and data["Platform"] == "linux/amd64", data


def test_properties_without_an_image_are_refused(handler):
    evt = event()
    evt["ResourceProperties"] = {}
    assert "ImageUri is required" in refused(handler, evt)


# --- what this function cannot tell: notes, never failures -------------------------------------------------------


def test_access_denied_is_a_note_and_the_deploy_goes_on(handler):
    Faults(handler.test_ecr).deny("BatchGetImage")
    data = handler.on_event(event())["Data"]
    assert data["Verified"] == "false" and data["ImageDigest"] == "unverified"  # never empty: a stack output
    assert "ecr:BatchGetImage was denied to this function (AccessDeniedException)" in data["Notes"]


def test_throttling_is_retried_then_a_note(handler):
    push(handler.test_ecr, "v1", index_of("linux/amd64"))
    faults = Faults(handler.test_ecr).throttle("BatchGetImage", times=1)
    assert handler.on_event(event())["Data"]["Verified"] == "true"
    assert faults.attempts("BatchGetImage") == 2
    faults.throttle("BatchGetImage")
    data = handler.on_event(event())["Data"]
    assert data["Verified"] == "false" and "ecr:BatchGetImage failed (ThrottlingException)" in data["Notes"]
    assert faults.attempts("BatchGetImage") == 2 + handler.RETRY_ATTEMPTS


class StandIn:
    """An ECR client for one image of ``registry``: BatchGetImage answers ``answer`` when asked in that registry
    (ECR looks in the caller's own account without ``registryId``) for every media type the check reads;
    GetDownloadUrlForLayer gives a URL."""

    def __init__(self, answer: dict[str, Any], url: str = "https://layer.example/config") -> None:
        self.answer, self.url, self.layers, self.registry, self.requests = answer, url, [], ACCOUNT, []

    def batch_get_image(self, **kwargs: Any) -> dict[str, Any]:
        self.requests.append(kwargs)
        assert kwargs["registryId"] == self.registry
        assert kwargs["acceptedMediaTypes"] == ACCEPTED
        return self.answer

    def get_download_url_for_layer(self, **kwargs: Any) -> dict[str, Any]:
        assert kwargs["registryId"] == self.registry
        self.layers.append(kwargs["layerDigest"])
        return {"downloadUrl": self.url, "layerDigest": kwargs["layerDigest"]}


def single(config: bytes, *, size: int | None = None) -> dict[str, Any]:
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
            "size": len(config) if size is None else size,
        },
        "layers": [],
    }
    image = {"imageId": {"imageDigest": "sha256:" + "a" * 64, "imageTag": "v1"}, "imageManifest": json.dumps(manifest)}
    return {"images": [{**image, "imageManifestMediaType": MANIFEST}], "failures": []}


@pytest.fixture
def stand_in(handler, monkeypatch):
    def use(answer: dict[str, Any], body: bytes | Exception | None = None) -> StandIn:
        ecr = StandIn(answer)
        handler._clients["ecr@us-east-1"] = ecr

        def fetch(url: str, size: int, deadline: float) -> bytes:
            assert url == ecr.url
            if isinstance(body, Exception):
                raise body
            return body

        monkeypatch.setattr(handler, "_fetch", fetch)
        return ecr

    return use


def test_a_single_manifest_is_checked_by_its_config_blob(handler, stand_in):
    config = json.dumps({"architecture": "arm64", "os": "linux", "rootfs": {}}).encode()
    ecr = stand_in(single(config), config)
    message = refused(handler, event())
    assert "the image is built for linux/arm64, the endpoint's instances run linux/amd64" in message
    assert "exec format error" in message and ecr.layers == ["sha256:" + hashlib.sha256(config).hexdigest()]
    good = json.dumps({"architecture": "amd64", "os": "linux"}).encode()
    stand_in(single(good), good)
    data = handler.on_event(event())["Data"]
    assert data["Platform"] == "linux/amd64" and data["MediaType"] == MANIFEST and data["Verified"] == "true"


@pytest.mark.parametrize(
    ("answer", "body", "note"),
    [
        (single(b'{"architecture": "amd64"}'), b'{"architecture": "arm64"}', "does not match its digest"),
        (single(b"{}"), b"{}", "names no architecture"),
        (single(b"[[["), b"[[[", "names no architecture"),
        (single(b"x", size=2 * 1024 * 1024), b"x", "no config of a readable size"),
        (single(b"x", size=0), b"", "no config of a readable size"),
        (single(b'{"architecture": "amd64"}'), TimeoutError("timed out"), "could not be read (TimeoutError)"),
    ],
    ids=["digest-mismatch", "no-architecture", "not-json", "too-large", "empty", "unreachable"],
)
def test_a_config_blob_that_cannot_be_trusted_is_a_note(handler, stand_in, answer, body, note):
    stand_in(answer, body)
    data = handler.on_event(event())["Data"]
    assert note in data["Notes"] and data["Platform"] == "" and data["Verified"] == "true"


@pytest.mark.parametrize(
    "manifest",
    ["not json", "[1, 2]", "[" * 1000 + "]" * 1000],
    ids=["text", "array", "deep"],
)
def test_a_manifest_that_is_not_a_json_object_is_a_note(handler, stand_in, manifest):
    answer = single(b"{}")
    answer["images"][0]["imageManifest"] = manifest
    stand_in(answer)
    data = handler.on_event(event())["Data"]
    assert "platform was not checked" in data["Notes"] and data["Verified"] == "true"


@pytest.mark.parametrize(
    "code", ["UpstreamUnavailable", "UpstreamAccessDenied", "KmsError", "ImageInaccessible", "SomeCodeAddedLater"]
)
def test_failures_ecr_itself_could_not_answer_are_notes(handler, stand_in, code):
    stand_in({"images": [], "failures": [{"imageId": {"imageTag": "v1"}, "failureCode": code, "failureReason": "x"}]})
    data = handler.on_event(event())["Data"]
    assert data["Verified"] == "false" and f"ECR could not read the image ({code}: x)" in data["Notes"]


@pytest.mark.parametrize("code", ["ImageTagDoesNotMatchDigest", "InvalidImageTag", "InvalidImageDigest"])
def test_failures_that_say_the_image_is_not_there_as_named_fail(handler, stand_in, code):
    stand_in({"images": [], "failures": [{"imageId": {"imageTag": "v1"}, "failureCode": code, "failureReason": "x"}]})
    assert f"tag 'v1' is not in repository team/vllm of account 123456789012 in us-east-1 ({code}: x)" in refused(
        handler, event()
    )


def test_an_answer_without_image_or_failure_is_a_note(handler, stand_in):
    stand_in({"images": [], "failures": []})
    assert "without the image or a failure" in handler.on_event(event())["Data"]["Notes"]


def test_the_layer_url_must_be_https_its_size_exact_and_its_read_bounded(handler, monkeypatch):
    import time

    soon = time.monotonic() + 60
    with pytest.raises(ValueError, match="not https"):
        handler._fetch("http://layer.example/config", 10, soon)

    class Response:
        def __init__(self, body: bytes, delay: float = 0.0) -> None:
            self.body, self.delay = body, delay

        def read(self, n: int) -> bytes:
            time.sleep(self.delay)
            part, self.body = self.body[:n], self.body[n:]
            return part

        def __enter__(self):
            return self

        def __exit__(self, *args: Any) -> None:
            return None

    class Opener:
        body, delay = b"abc", 0.0

        def open(self, request: Any, timeout: float) -> Response:
            assert timeout == handler.URL_TIMEOUT_S
            return Response(self.body, self.delay)

    monkeypatch.setattr(handler.urllib.request, "build_opener", lambda *handlers: Opener())
    assert handler._fetch("https://layer.example/config", 3, soon) == b"abc"
    Opener.body = b"x" * (3 * handler.CHUNK)
    assert len(handler._fetch("https://layer.example/config", 3 * handler.CHUNK, soon)) == 3 * handler.CHUNK
    Opener.body = b"abcd"
    with pytest.raises(ValueError, match="4 bytes where the manifest says 3"):
        handler._fetch("https://layer.example/config", 3, soon)
    Opener.body, Opener.delay = b"x" * (3 * handler.CHUNK), 0.05  # a URL that drips: stopped at the deadline
    with pytest.raises(TimeoutError, match="too slow"):
        handler._fetch("https://layer.example/config", 3 * handler.CHUNK, time.monotonic() + 0.01)


def test_a_redirect_from_the_layer_url_is_not_followed():
    """The opener _fetch uses, against a real local server that redirects: an HTTPError, no second request."""
    import http.server
    import threading
    import urllib.error
    import urllib.request

    module = load_lambda("serving_image_check")
    seen: list[str] = []

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        opener = urllib.request.build_opener(module._NoRedirects)
        with pytest.raises(urllib.error.HTTPError) as error:
            opener.open(f"http://127.0.0.1:{server.server_address[1]}/config", timeout=5)
        assert error.value.code == 302 and seen == ["/config"]
    finally:
        server.shutdown()


def test_the_config_is_not_read_when_too_little_time_is_left(handler, stand_in):
    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return (handler.ANSWER_MARGIN_S + handler.CONFIG_MARGIN_S - 1) * 1000

    ecr = stand_in(single(b'{"architecture": "arm64"}'), b'{"architecture": "arm64"}')
    data = handler.on_event(event(), Context())["Data"]
    assert "too little time left" in data["Notes"] and ecr.layers == [] and data["Verified"] == "true"


def test_an_ecr_that_refuses_the_index_media_types_is_asked_again_without_them(handler):
    push(handler.test_ecr, "v1", index_of("linux/amd64"))
    faults = Faults(handler.test_ecr).inject("BatchGetImage", "InvalidParameterException", "acceptedMediaTypes")
    assert handler.on_event(event())["Data"]["Verified"] == "true"
    (first, second) = [params for name, params in faults.calls if name == "BatchGetImage"]
    assert first["acceptedMediaTypes"] == ACCEPTED and second["acceptedMediaTypes"] == [MANIFEST, OCI_MANIFEST]
    assert first["registryId"] == second["registryId"] == ACCOUNT


# --- a deploy sequence --------------------------------------------------------------------------------------------


def test_create_failed_update_rollback_delete_and_redeploy(handler):
    ecr = handler.test_ecr
    push(ecr, "v1", index_of("linux/amd64"))
    stacks = handler._clients["cloudformation"]
    cfn = CloudFormation(
        HandlerUnderTest.from_module(handler, resource_type="Custom::ServingImageCheck", timeouts=TIMEOUTS),
        logical_id="ModelImageCheck",
        stack=stacks,
    )
    created = cfn.create({"ImageUri": f"{REPOSITORY}:v1"})
    assert created.ok and created.data["Verified"] == "true"
    failed = cfn.update({"ImageUri": f"{REPOSITORY}:v2"})  # never pushed
    assert not failed.ok and "tag 'v2' is not in repository team/vllm" in failed.reason
    back = cfn.rollback()
    assert back.ok, back.reason
    assert cfn.status == "UPDATE_ROLLBACK_COMPLETE" and back.data == created.data  # the old image's own figures
    deleted = cfn.delete()
    assert deleted.ok and deleted.physical_id == created.physical_id
    again = cfn.create({"ImageUri": f"{REPOSITORY}:v1"})
    assert again.ok and again.physical_id == created.physical_id  # the same stack and logical ID
    for response in (created, failed, back, deleted, again):
        assert cfn.problems(response) == [], response.reason


def test_a_rollback_never_fails_on_what_it_finds(handler):
    """The old image passed before and may be gone since: a rollback notes what it finds, and keeps every key."""
    handler._clients["cloudformation"].status = "UPDATE_ROLLBACK_IN_PROGRESS"
    evt = event("Update")
    evt["PhysicalResourceId"] = "image-check-0123456789abcdef"
    data = handler.on_event(evt)["Data"]  # the tag was never pushed
    assert "a rollback: not enforced: tag 'v1' is not in repository team/vllm" in data["Notes"]
    assert set(data) == set(handler.DATA_KEYS) and data["ImageDigest"] == "unverified"


def test_an_update_whose_stack_status_cannot_be_read_never_fails(handler):
    """No cloudformation endpoint in the subnets, or throttling: it may be a rollback, so nothing is enforced."""

    class Unreadable:
        def describe_stacks(self, **kwargs: Any) -> dict[str, Any]:
            from botocore.exceptions import EndpointConnectionError

            raise EndpointConnectionError(endpoint_url="https://cloudformation.us-east-1.amazonaws.com")

    handler._clients["cloudformation"] = Unreadable()
    data = handler.on_event(event("Update"))["Data"]
    assert "the stack's status could not be read, so this may be a rollback: not enforced: tag 'v1'" in data["Notes"]
    handler._clients["cloudformation"] = Stacks()  # read: a plain update enforces it
    assert "tag 'v1' is not in repository" in refused(handler, event("Update"))


def test_the_check_is_bounded_by_the_functions_time_whatever_the_calls_take(handler):
    """An ECR that never answers (every address of the name unroutable) ends in a note before the function's
    timeout, not in a Lambda timeout that would fail the deploy."""
    import time

    class Hanging:
        def batch_get_image(self, **kwargs: Any) -> dict[str, Any]:
            time.sleep(10)
            raise AssertionError("answered too late")

    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return int((handler.ANSWER_MARGIN_S + 0.5) * 1000)

    handler._clients["ecr@us-east-1"] = Hanging()
    started = time.monotonic()
    data = handler.on_event(event(), Context())["Data"]
    assert time.monotonic() - started < 2
    assert "ECR did not answer within the function's time" in data["Notes"] and data["Verified"] == "false"


def test_config_architecture_aliases_are_the_oci_names(handler, stand_in):
    for written in ("x86_64", "amd64"):
        config = json.dumps({"architecture": written, "os": "linux"}).encode()
        stand_in(single(config), config)
        assert handler.on_event(event())["Data"]["Platform"] == "linux/amd64"
    config = json.dumps({"architecture": "aarch64", "os": "linux"}).encode()
    stand_in(single(config), config)
    assert "built for linux/arm64" in refused(handler, event())


def test_not_found_after_asking_without_the_index_types_is_a_note(handler):
    """A registry may answer an index it is asked for without the index types with "not found": not definite."""
    Faults(handler.test_ecr).inject("BatchGetImage", "InvalidParameterException", "acceptedMediaTypes")
    data = handler.on_event(event())["Data"]  # nothing pushed: moto answers ImageNotFound on the second ask
    assert "ImageNotFound when asked without the index media types" in data["Notes"]


@pytest.mark.parametrize(
    ("size", "read"),
    [(1, True), (1024 * 1024, True), (1024 * 1024 + 1, False), (0, False), (-1, False)],
    ids=["one-byte", "at-the-limit", "one-over", "empty", "negative"],
)
def test_the_config_size_is_read_from_one_byte_to_the_limit(handler, stand_in, size, read):
    assert handler.CONFIG_LIMIT == 1024 * 1024
    config = json.dumps({"architecture": "amd64", "os": "linux"}).encode()
    body = config.ljust(size, b" ") if size >= len(config) else b"x" * max(size, 0)
    ecr = stand_in(single(body, size=size), body)
    data = handler.on_event(event())["Data"]
    assert (ecr.layers != []) is read, data
    if not read:
        assert "no config of a readable size" in data["Notes"]


@pytest.mark.parametrize(("extra", "read"), [(0, True), (1, False)], ids=["at-the-limit", "one-over"])
def test_a_manifest_is_read_up_to_its_limit(handler, stand_in, extra, read):
    manifest = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": []})
    manifest = manifest[:-1] + " " * (handler.MANIFEST_LIMIT - len(manifest) + extra) + "}"
    answer = single(b"{}")
    answer["images"][0]["imageManifest"], answer["images"][0]["imageManifestMediaType"] = manifest, INDEX
    stand_in(answer)
    notes = handler.on_event(event())["Data"]["Notes"]
    assert ("names no platform" in notes) is read and ("the manifest is not JSON" in notes) is not read


def test_a_config_whose_size_does_not_divide_into_parts_is_read_whole(handler, monkeypatch):
    import time

    size = 2 * handler.CHUNK + 7
    reads: list[int] = []

    class Response:
        body = b"y" * size

        def read(self, n: int) -> bytes:
            reads.append(n)
            part, Response.body = Response.body[:n], Response.body[n:]
            return part

        def __enter__(self):
            return self

        def __exit__(self, *args: Any) -> None:
            return None

    class Opener:
        def open(self, request: Any, timeout: float) -> Response:
            return Response()

    monkeypatch.setattr(handler.urllib.request, "build_opener", lambda *handlers: Opener())
    assert len(handler._fetch("https://layer.example/config", size, time.monotonic() + 60)) == size
    assert reads[:3] == [handler.CHUNK, handler.CHUNK, 8]  # the last part asks for one byte more than is left
