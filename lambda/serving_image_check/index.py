"""``Custom::ServingImageCheck``: the serving image is there, in the stack's region, for the instances' CPU.

SageMaker looks at the image only when the Model is created (CreateModel: "Requested image ... not found"), and
the Model waits for the staged weights and the preflight: a mistyped tag, a tag not yet published in this region
or an image built for arm64 used to surface after staging, tens of minutes in. This resource depends on nothing
but its own function, so CloudFormation runs it as the stack starts, beside staging; when it fails, CloudFormation
cancels the creations still in progress and sends each a Delete (aws-cdk #26139), which stops a running staging
job (lambda/staged_checkpoint). The Model waits for it too, so an update to a missing image fails before it.

``on_event`` only, synchronous, seconds:

- the URI: an ECR image ``<account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>(:<tag>|@sha256:<hex>)`` in
  the stack's region (botocore sagemaker model, ContainerDefinition.Image: the image "must be in the same region
  as the model or endpoint you are creating");
- ``BatchGetImage`` (what a pull calls first, for the manifest: botocore ecr model): the tag or digest exists.
  A failure code (``ImageNotFound``, ``ImageTagDoesNotMatchDigest``...) or ``RepositoryNotFoundException`` fails
  the resource;
- the platform: an image index (OCI image-index, Docker manifest list) must list ``linux/<Architecture>``; a
  single manifest's config blob (OCI image spec, config ``os`` and ``architecture``) is read through
  ``GetDownloadUrlForLayer``, at most ``CONFIG_LIMIT`` bytes, and must hash to its digest.

What this function cannot tell (its role denied, ECR throttling past botocore's retries, ECR or the layer URL out
of reach of the subnets) is a note, never a failure: SageMaker checks the image again, with the execution role,
when the Model is created.

Data: ``ImageDigest`` (what the tag names now: pin it with ``...@<digest>``; ``unverified`` when ECR did not
tell), ``MediaType``, ``Platform``
(``linux/amd64``, or empty when not read), ``Verified`` (``true`` when ECR answered), ``Notes``. The physical ID is
``image-check-<hash of stack and logical ID>``, kept by every update; Delete does nothing.

Rollback: a failed update sends this resource an Update with its old properties while the stack is
``UPDATE_ROLLBACK_IN_PROGRESS`` (aws-cdk #17040). The old image passed before and may be gone since; failing now
would leave the stack ``UPDATE_ROLLBACK_FAILED``, so the check runs for its data and its problems are logged.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import handler_kit
import safejson
from handler_kit import update_rolling_back
from handler_kit.resources import ServingImageCheckProperties

PHYSICAL_ID_PREFIX = "image-check-"
# botocore standard mode retries throttling with exponential backoff and jitter. Short connection timeouts: in
# subnets without an ecr.api endpoint (or NAT) every attempt hangs until it, and an unreachable ECR is a note,
# which has to be written before the function's own timeout (constructs_lib/image_check.py HANDLER_TIMEOUT).
RETRY_ATTEMPTS = 4
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 15
CONFIG_LIMIT = 1024 * 1024  # an image config is a few KB (OCI image spec, config); refuse to read more
MANIFEST_LIMIT = 4 * 1024 * 1024  # the most an OCI registry need accept for a manifest (distribution-spec, push)
URL_TIMEOUT_S = 10
ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
    r"(?P<repository>[a-z0-9._/-]{2,256}?)(?::(?P<tag>[A-Za-z0-9_.-]{1,128})|@(?P<digest>sha256:[a-f0-9]{64}))$",
    re.ASCII,
)
# Docker registry HTTP API v2 and OCI image spec media types: two single manifests, two indexes.
MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json")
INDEX_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
# BatchGetImage failure codes that say the image is not there as named (botocore ecr model, ImageFailureCode); the
# others (KmsError, Upstream*, ImageInaccessible, codes added later) say ECR could not tell: a note.
NOT_THERE = (
    "ImageNotFound",
    "ImageTagDoesNotMatchDigest",
    "InvalidImageTag",
    "InvalidImageDigest",
    "MissingDigestAndTag",
)
UNVERIFIED = "unverified"  # ImageDigest when ECR did not tell (see Notes)
# Every key always present, so Fn::GetAtt never fails.
DATA_KEYS = ("ImageDigest", "MediaType", "Platform", "Verified", "Notes")

logger = logging.getLogger()
logger.setLevel(logging.INFO)


def log(event: str, **fields: Any) -> None:
    logger.info(handler_kit.log_line(event, **fields))


_clients: dict[str, Any] = {}


def client(name: str, region: str | None = None) -> Any:
    """One boto3 client per service (and region) for the life of the execution environment."""
    return handler_kit.cached_client(
        _clients,
        name,
        region=region,
        retries={"mode": "standard", "total_max_attempts": RETRY_ATTEMPTS},
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
    )


class ImageCheckFailed(Exception):
    """The image cannot be pulled by the endpoint: the resource fails with this reason."""


@dataclass
class Result:
    digest: str = ""
    media_type: str = ""
    platform: str = ""
    verified: bool = False
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def data(self) -> dict[str, str]:
        notes = handler_kit.shorten("; ".join(self.notes), 1000)
        # Never empty: the digest is also a stack output (constructs_lib/deployment/llm_endpoint_stack.py).
        digest = self.digest or UNVERIFIED
        values = (digest, self.media_type, self.platform, "true" if self.verified else "false", notes)
        return dict(zip(DATA_KEYS, values, strict=True))


def physical_id(event: dict[str, Any]) -> str:
    key = f"{event.get('StackId', '')}/{event.get('LogicalResourceId', '')}"
    return PHYSICAL_ID_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16]


def on_event(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    request = handler_kit.request_type(event)
    if request == handler_kit.DELETE:
        return {"PhysicalResourceId": event.get("PhysicalResourceId") or physical_id(event)}
    problems: list[str] = []
    settings = ServingImageCheckProperties.from_properties(event.get("ResourceProperties", {}), problems)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION", "")
    result = Result(problems=problems)
    if not problems:
        check(settings.image_uri, settings.architecture, region, result)
    log("checked", image=settings.image_uri, digest=result.digest, problems=len(result.problems))
    answer = {"PhysicalResourceId": event.get("PhysicalResourceId") or physical_id(event), "Data": result.data()}
    if result.problems:
        stack_id = event.get("StackId", "")
        if request == handler_kit.UPDATE and update_rolling_back(stack_id, client("cloudformation"), log):
            log("rollback-problems-logged", problems="; ".join(result.problems))
            return answer
        raise ImageCheckFailed(
            handler_kit.shorten(handler_kit.refusal(f"Serving image {settings.image_uri[:300]}", result.problems))
        )
    return answer


def check(image_uri: str, architecture: str, region: str, result: Result) -> None:
    """Fill ``result`` for ``image_uri``: its problems (definite), notes (what could not be told) and data."""
    m = ECR_URI.fullmatch(image_uri)
    if m is None:
        result.problems.append(
            "not an ECR image URI: expected <account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag> or "
            "...@sha256:<digest>"
        )
        return
    if region and m["region"] != region:
        result.problems.append(
            f"the image is in {m['region']}, the stack in {region}: SageMaker pulls an image only from the region "
            f"of the model (CreateModel, ContainerDefinition.Image); use the {region} registry's copy"
        )
        return
    ecr = client("ecr", m["region"])
    wanted = {"imageDigest": m["digest"]} if m["digest"] else {"imageTag": m["tag"]}
    try:
        answer = ecr.batch_get_image(
            registryId=m["account"],
            repositoryName=m["repository"],
            imageIds=[wanted],
            acceptedMediaTypes=[*MANIFEST_TYPES, *INDEX_TYPES],
        )
    except Exception as e:
        _unreachable(e, "ecr:BatchGetImage", m, result)
        return
    for failure in answer.get("failures") or []:
        code, reason = str(failure.get("failureCode", ""))[:60], str(failure.get("failureReason", ""))[:300]
        if code not in NOT_THERE:
            result.notes.append(f"ECR could not read the image ({code}: {reason}); SageMaker checks it again")
            return
        what = f"tag {m['tag']!r}" if m["tag"] else f"digest {m['digest']}"
        result.problems.append(
            f"{what} is not in repository {m['repository']} of account {m['account']} in {m['region']} "
            f"({code}: {reason}); `aws ecr describe-images --registry-id {m['account']} --repository-name "
            f"{m['repository']} --region {m['region']}` lists what is there (DLC tags: the engine's release notes)"
        )
        return
    images = answer.get("images") or []
    if not images:
        result.notes.append("ECR answered without the image or a failure; SageMaker checks it again")
        return
    image = images[0]
    result.verified = True
    result.digest = str((image.get("imageId") or {}).get("imageDigest", ""))
    manifest_text = str(image.get("imageManifest", ""))
    result.media_type = str(image.get("imageManifestMediaType", ""))
    try:
        manifest = safejson.loads(manifest_text, source="the image manifest", max_size=MANIFEST_LIMIT)
    except safejson.JsonError as e:
        result.notes.append(f"the manifest is not JSON ({str(e)[:200]}); its platform was not checked")
        return
    if not isinstance(manifest, dict):
        result.notes.append("the manifest is not a JSON object; its platform was not checked")
        return
    result.media_type = result.media_type or str(manifest.get("mediaType", ""))
    wanted_platform = f"linux/{architecture}"
    if result.media_type in INDEX_TYPES or isinstance(manifest.get("manifests"), list):
        platforms = _index_platforms(manifest)
        if wanted_platform in platforms:
            result.platform = wanted_platform
        else:
            shown = ", ".join(sorted(platforms)[:10]) or "none"
            result.problems.append(
                f"the image index lists the platforms {shown}, not {wanted_platform}: the endpoint's instances run "
                f"{wanted_platform} (an image built on an arm64 machine needs `docker buildx build --platform "
                f"{wanted_platform}`)"
            )
        return
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    platform = _config_platform(ecr, m, config, result)
    if platform is None:
        return
    result.platform = platform
    if platform != wanted_platform:
        result.problems.append(
            f"the image is built for {platform}, the endpoint's instances run {wanted_platform} (it would stop with "
            f"'exec format error' once the instances are up; build it with `docker buildx build --platform "
            f"{wanted_platform}`)"
        )


def _index_platforms(index: dict[str, Any]) -> set[str]:
    """``os/architecture`` of each image an index lists (attestation manifests name ``unknown/unknown``)."""
    platforms = set()
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") if isinstance(entry, dict) else None
        if isinstance(platform, dict):
            platforms.add(f"{str(platform.get('os', ''))[:40]}/{str(platform.get('architecture', ''))[:40]}")
    return platforms


def _config_platform(ecr: Any, m: re.Match[str], config: dict[str, Any], result: Result) -> str | None:
    """``os/architecture`` from the image's config blob, or None (and a note) when it cannot be read."""
    digest, size = str(config.get("digest", "")), config.get("size")
    if not re.fullmatch(r"sha256:[a-f0-9]{64}", digest) or not isinstance(size, int) or not 0 < size <= CONFIG_LIMIT:
        result.notes.append("the manifest names no config of a readable size; its platform was not checked")
        return None
    try:
        url = ecr.get_download_url_for_layer(
            registryId=m["account"], repositoryName=m["repository"], layerDigest=digest
        )["downloadUrl"]
        body = _fetch(url, size)
    except Exception as e:
        result.notes.append(f"the image config could not be read ({type(e).__name__}); its platform was not checked")
        return None
    if hashlib.sha256(body).hexdigest() != digest.removeprefix("sha256:"):
        result.notes.append("the image config does not match its digest; its platform was not checked")
        return None
    try:
        blob = safejson.loads(body, source="the image config", max_size=CONFIG_LIMIT)
    except safejson.JsonError:
        blob = None
    if not isinstance(blob, dict) or not blob.get("architecture"):
        result.notes.append("the image config names no architecture; its platform was not checked")
        return None
    return f"{str(blob.get('os', 'linux'))[:40]}/{str(blob['architecture'])[:40]}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a presigned layer URL answers itself; a redirect is an HTTPError here


def _fetch(url: str, size: int) -> bytes:
    """At most ``size`` bytes from ``url`` (https only, no redirect), else an error."""
    if not url.startswith("https://"):
        raise ValueError("the layer URL is not https")
    opener = urllib.request.build_opener(_NoRedirects)
    with opener.open(urllib.request.Request(url), timeout=URL_TIMEOUT_S) as response:
        body = response.read(size + 1)
    if len(body) != size:
        raise ValueError(f"{len(body)} bytes where the manifest says {size}")
    return body


def _unreachable(error: Exception, action: str, m: re.Match[str], result: Result) -> None:
    code = getattr(error, "response", {}).get("Error", {}).get("Code", type(error).__name__)
    if code == "RepositoryNotFoundException":
        result.problems.append(
            f"repository {m['repository']} does not exist in account {m['account']} in {m['region']}"
        )
    elif code in ("AccessDeniedException", "AccessDenied"):
        result.notes.append(
            f"{action} was denied to this function ({code}); the repository's policy may allow only the "
            "endpoint's role: SageMaker checks the image when the Model is created"
        )
    else:
        result.notes.append(f"{action} failed ({code}); SageMaker checks the image when the Model is created")
