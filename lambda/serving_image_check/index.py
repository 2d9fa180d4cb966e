"""``Custom::ServingImageCheck``: the serving image is there, in the stack's region, for the instances' CPU.

SageMaker looks at the image only when the Model is created (CreateModel: "Requested image ... not found"), and
the Model waits for the staged weights and the preflight: a mistyped tag, a tag not yet published in this region
or an image built for arm64 used to surface after staging, tens of minutes in. This resource depends on nothing
but its own function, and the staging of the Model's weights waits for it (constructs_lib/hosting.py), so a wrong
image fails the deploy in seconds, before any staging job starts. (Running beside staging instead would race: a
Create still in its function when CloudFormation sends the Delete of the rollback, aws-cdk #26139, could start a
job after it.) The Model waits for it too, so an update to a missing image fails before the Model is replaced.

``on_event`` only, synchronous, seconds:

- the URI: an ECR image ``<account>.dkr.ecr.<region>.<partition's DNS suffix>/<repository>(:<tag>|@sha256:<hex>)``
  in the stack's region (botocore sagemaker model, ContainerDefinition.Image: the image "must be in the same region
  as the model or endpoint you are creating"). Synth checks a literal URI; one this function cannot read is a note;
- ``BatchGetImage`` (what a pull calls first, for the manifest: botocore ecr model), in the image's registry
  (``registryId``: without it ECR looks in the caller's own account): the tag or digest exists. A failure code in
  ``NOT_THERE`` or ``RepositoryNotFoundException`` fails the resource, except in the stack's own registry when one
  of its pull-through cache rules covers the repository (or the rules cannot be read): the cache creates the
  repository and fetches the tag on the first pull, a note;
- the platform: an image index (OCI image-index, Docker manifest list) whose images name platforms must list
  ``linux/<Architecture>``; a single manifest's config blob (OCI image spec, config ``os`` and ``architecture``)
  is read through ``GetDownloadUrlForLayer`` (a pull fetches the config like a layer: OCI distribution-spec, "Pulling
  blobs"), at most ``CONFIG_LIMIT`` bytes, and must hash to its digest. No ``Architecture`` (an instance type outside
  the catalog): a note. An OCI image (not Docker schema 2) is a note too: SageMaker has refused OCI manifests
  ("Unsupported manifest media type", aws/amazon-sagemaker-feedback #180).

What this function cannot tell (its role denied, ECR throttling past botocore's retries, ECR or the layer URL out
of reach of the subnets, its own time running out) is a note, never a failure: SageMaker checks the image again,
with the execution role, when the Model is created. Each note is logged.

Data: ``ImageDigest`` (what the tag names now: pin it with ``...@<digest>``; ``unverified`` when ECR did not
tell), ``MediaType``, ``Platform``
(``linux/amd64``, or empty when not read), ``Verified`` (``true`` when ECR answered), ``Notes``. The physical ID is
``image-check-<hash of stack and logical ID>``, kept by every update; Delete does nothing.

Rollback: a failed update sends this resource an Update with its old properties while the stack is
``UPDATE_ROLLBACK_IN_PROGRESS`` (aws-cdk #17040). The old image passed before and may be gone since; failing now
would leave the stack ``UPDATE_ROLLBACK_FAILED``. So an Update reads the stack's status first: during a rollback,
or when the status cannot be read, the check runs for its data (the old image's digest) under the same time bound,
and what it finds is noted, never enforced.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import handler_kit
import safejson
from handler_kit import stack_status
from handler_kit.resources import ServingImageCheckProperties

PHYSICAL_ID_PREFIX = "image-check-"
# botocore standard mode retries throttling with exponential backoff and jitter. In subnets without an ecr.api
# endpoint (or NAT) every attempt hangs until its timeouts, once per address the name resolves to; an unreachable
# ECR is a note, so the whole check runs under a wall-clock bound (_bounded) that ends ANSWER_MARGIN_S before the
# function's own timeout (constructs_lib/image_check.py HANDLER_TIMEOUT: 180 s), whatever the timeouts add up to.
RETRY_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 10
URL_TIMEOUT_S = 10  # each socket operation on the layer URL
ANSWER_MARGIN_S = 15  # left to log and answer after the bound
CONFIG_MARGIN_S = 60  # the config blob is read only while this much of the bound is left
CHUNK = 64 * 1024  # the config is read in parts, the bound checked between them
CONFIG_LIMIT = 1024 * 1024  # an image config is a few KB (OCI image spec, config); refuse to read more
MANIFEST_LIMIT = 4 * 1024 * 1024  # the most an OCI registry need accept for a manifest (distribution-spec, push)
ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.(?P<suffix>[a-z0-9-]+(?:\.[a-z0-9-]+)+)/"
    r"(?P<repository>[a-z0-9._/-]{2,256}?)(?::(?P<tag>[A-Za-z0-9_.-]{1,128})|@(?P<digest>sha256:[a-f0-9]{64}))$",
    re.ASCII,
)
# Docker registry HTTP API v2 and OCI image spec media types. Docker schema 2 is what SageMaker documents and the
# DLC images are; OCI ones are read too, with a note.
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = (DOCKER_MANIFEST, OCI_MANIFEST)
INDEX_TYPES = (DOCKER_LIST, OCI_INDEX)
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
# What some builders write in a config's architecture (the Go names, which the OCI image spec uses, first).
ARCHITECTURE_ALIASES = {"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64"}
UNKNOWN_PLATFORM = "unknown/unknown"  # what an index lists for an attestation manifest (buildx provenance)
OCI_NOTE = (
    'the image is an OCI {kind}, not Docker schema 2: SageMaker has refused OCI manifests ("Unsupported manifest '
    'media type", aws/amazon-sagemaker-feedback #180); if CreateModel does, push it with `docker buildx build '
    "--platform linux/amd64 --provenance=false --output type=image,oci-mediatypes=false,push=true`"
)
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
    degraded: bool = False  # ECR was asked without the index media types: one image of an index may have come
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def data(self) -> dict[str, str]:
        notes = handler_kit.shorten("; ".join(self.notes), 1000)
        # Never empty: the digest is also a stack output (constructs_lib/deployment/llm_endpoint_stack.py).
        digest = self.digest[:100] or UNVERIFIED
        values = (digest, self.media_type[:100], self.platform[:100], "true" if self.verified else "false", notes)
        return dict(zip(DATA_KEYS, values, strict=True))


def physical_id(event: dict[str, Any]) -> str:
    key = f"{event.get('StackId', '')}/{event.get('LogicalResourceId', '')}"
    return PHYSICAL_ID_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16]


def on_event(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    request = handler_kit.request_type(event)
    physical = event.get("PhysicalResourceId") or physical_id(event)
    if request == handler_kit.DELETE:
        return {"PhysicalResourceId": physical}
    remaining_s = context.get_remaining_time_in_millis() / 1000 if context is not None else 900.0
    deadline = time.monotonic() + remaining_s - ANSWER_MARGIN_S
    problems: list[str] = []
    settings = ServingImageCheckProperties.from_properties(event.get("ResourceProperties", {}), problems)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION", "")
    # The stack's account is in its ID (arn:<partition>:cloudformation:<region>:<account>:stack/...).
    account = (event.get("StackId", "").split(":") + [""] * 5)[4]
    stack_id = event.get("StackId", "")
    # An Update may be a rollback's, whose image passed before: then nothing it finds may fail it. When the stack's
    # status cannot be read (no cloudformation endpoint, throttling), nothing may either.
    status = (
        _bounded(lambda: stack_status(stack_id, client("cloudformation"), log), deadline)
        if request == handler_kit.UPDATE
        else None
    )
    lenient = request == handler_kit.UPDATE and status in (handler_kit.UPDATE_ROLLBACK_IN_PROGRESS, None)
    result = Result(problems=problems)
    if not problems:
        done = _bounded(
            lambda: check(settings.image_uri, settings.architecture, region, account=account, deadline=deadline),
            deadline,
        )
        if done is None:
            result.notes.append("ECR did not answer within the function's time: not checked (SageMaker checks it)")
        else:
            result = done
    if lenient and result.problems:
        why = "a rollback" if status else "the stack's status could not be read, so this may be a rollback"
        result.notes = [f"{why}: not enforced: {p}" for p in result.problems] + result.notes
        result.problems = []
    log(
        "checked",
        image=settings.image_uri[:300],
        digest=result.digest[:100],
        platform=result.platform[:100],
        problems=len(result.problems),
        notes="; ".join(result.notes)[:2000] or None,
    )
    if result.problems:
        raise ImageCheckFailed(
            handler_kit.shorten(handler_kit.refusal(f"Serving image {settings.image_uri[:300]}", result.problems))
        )
    return {"PhysicalResourceId": physical, "Data": result.data()}


def _bounded(work: Any, deadline: float) -> Any:
    """``work()``'s answer, or None when it has not answered by ``deadline`` (monotonic seconds): a call that hangs
    on an address that never answers (no route from the subnets) cannot outlast the function, whatever botocore's
    or urllib's timeouts add up to over several addresses. The thread left behind is frozen with the function."""
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(work)
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        return None
    finally:
        pool.shutdown(wait=False)


def check(image_uri: str, architecture: str, region: str, *, deadline: float, account: str = "") -> Result:
    """What ECR says of ``image_uri``: its problems (definite), notes (what could not be told) and data."""
    result = Result()
    _check(image_uri, _oci_architecture(architecture), region, result, deadline, account)
    return result


def _check(image_uri: str, architecture: str, region: str, result: Result, deadline: float, account: str) -> None:
    m = ECR_URI.fullmatch(image_uri)
    if m is None:
        result.notes.append(
            "not read as an ECR image URI (<account>.dkr.ecr.<region>.<suffix>/<repository>:<tag> or "
            "...@sha256:<digest>): not checked"
        )
        return
    if region and m["region"] != region:
        result.problems.append(
            f"the image is in {m['region']}, the stack in {region}: SageMaker pulls an image only from the region "
            f"of the model (CreateModel, ContainerDefinition.Image); use the {region} registry's copy"
        )
        return
    ecr = client("ecr", m["region"])
    image = _get_image(ecr, m, result, own_account=m["account"] == account, deadline=deadline)
    if image is None:
        return
    result.verified = True
    result.digest = str((image.get("imageId") or {}).get("imageDigest", ""))
    result.media_type = str(image.get("imageManifestMediaType", ""))[:100]
    try:
        manifest = safejson.loads(str(image.get("imageManifest", "")), source="the manifest", max_size=MANIFEST_LIMIT)
    except safejson.JsonError as e:
        result.notes.append(f"the manifest is not JSON ({str(e)[:200]}); its platform was not checked")
        return
    if not isinstance(manifest, dict):
        result.notes.append("the manifest is not a JSON object; its platform was not checked")
        return
    result.media_type = result.media_type or str(manifest.get("mediaType", ""))[:100]
    if result.media_type in (OCI_MANIFEST, OCI_INDEX):
        result.notes.append(OCI_NOTE.format(kind="index" if result.media_type == OCI_INDEX else "manifest"))
    if not architecture:
        result.notes.append("no architecture given (an instance type outside the catalog): the platform not checked")
        return
    wanted = f"linux/{architecture}"
    if result.media_type in INDEX_TYPES or isinstance(manifest.get("manifests"), list):
        _check_index(manifest, wanted, result)
        return
    if time.monotonic() > deadline - CONFIG_MARGIN_S:
        result.notes.append("too little time left to read the image config: its platform was not checked")
        return
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    platform = _config_platform(ecr, m, config, result, deadline)
    if platform is None:
        return
    result.platform = platform
    if result.degraded and platform != wanted:
        result.notes.append(f"ECR answered one image of the index ({platform}): the platform not checked")
    elif platform != wanted:
        result.problems.append(
            f"the image is built for {platform}, the endpoint's instances run {wanted} (it would stop with "
            f"'exec format error' once the instances are up; build it with `docker buildx build --platform "
            f"{wanted} --provenance=false`)"
        )


def _get_image(
    ecr: Any, m: re.Match[str], result: Result, *, own_account: bool, deadline: float
) -> dict[str, Any] | None:
    """The image as BatchGetImage answers it, or None with a problem or a note."""
    wanted = {"imageDigest": m["digest"]} if m["digest"] else {"imageTag": m["tag"]}
    request = {"registryId": m["account"], "repositoryName": m["repository"], "imageIds": [wanted]}
    try:
        try:
            answer = ecr.batch_get_image(**request, acceptedMediaTypes=[*MANIFEST_TYPES, *INDEX_TYPES])
        except Exception as e:
            if _code(e) != "InvalidParameterException":
                raise
            # botocore lists only single-manifest types as valid values: asked without the index types, a registry
            # answers a multi-platform image with one of its images, or with "not found": neither is definite.
            result.degraded = True
            answer = ecr.batch_get_image(**request, acceptedMediaTypes=list(MANIFEST_TYPES))
    except Exception as e:
        _unreachable(e, m, result, cached=_pull_through(ecr, m) if own_account else False)
        return None
    for failure in answer.get("failures") or []:
        code, reason = str(failure.get("failureCode", ""))[:60], str(failure.get("failureReason", ""))[:300]
        if code not in NOT_THERE:
            result.notes.append(f"ECR could not read the image ({code}: {reason}); SageMaker checks it again")
            return None
        what = f"tag {m['tag']!r}" if m["tag"] else f"digest {m['digest']}"
        if result.degraded:
            result.notes.append(f"{what}: {code} when asked without the index media types; SageMaker checks it")
            return None
        if own_account and (cached := _pull_through(ecr, m)) is not False:
            result.notes.append(f"{what}: {code}, {_CACHE_NOTE if cached else _CACHE_UNKNOWN}")
            return None
        result.problems.append(
            f"{what} is not in repository {m['repository']} of account {m['account']} in {m['region']} "
            f"({code}: {reason}); `aws ecr describe-images --registry-id {m['account']} --repository-name "
            f"{m['repository']} --region {m['region']}` lists what is there (DLC tags: the engine's release notes)"
        )
        return None
    images = answer.get("images") or []
    if not images:
        result.notes.append("ECR answered without the image or a failure; SageMaker checks it again")
        return None
    return images[0]


def _check_index(index: dict[str, Any], wanted: str, result: Result) -> None:
    """An index must list ``wanted`` among the platforms it names; one that names none is a note."""
    platforms = _index_platforms(index) - {UNKNOWN_PLATFORM}
    if wanted in platforms:
        result.platform = wanted
    elif not platforms:
        result.notes.append("the image index names no platform (optional in an OCI index): the platform not checked")
    else:
        shown = ", ".join(sorted(platforms)[:10])
        result.problems.append(
            f"the image index lists the platforms {shown}, not {wanted}: the endpoint's instances run {wanted} "
            f"(an image built on an arm64 machine needs `docker buildx build --platform {wanted} --provenance=false`)"
        )


def _index_platforms(index: dict[str, Any]) -> set[str]:
    """``os/architecture`` of each image an index lists (attestation manifests name ``unknown/unknown``)."""
    platforms = set()
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") if isinstance(entry, dict) else None
        if isinstance(platform, dict):
            architecture = _oci_architecture(str(platform.get("architecture", ""))[:40])
            platforms.add(f"{str(platform.get('os', ''))[:40]}/{architecture}")
    return platforms


def _config_platform(ecr: Any, m: re.Match[str], config: dict[str, Any], result: Result, deadline: float) -> str | None:
    """``os/architecture`` from the image's config blob, or None (and a note) when it cannot be read."""
    digest, size = str(config.get("digest", "")), config.get("size")
    if not re.fullmatch(r"sha256:[a-f0-9]{64}", digest) or not isinstance(size, int) or not 0 < size <= CONFIG_LIMIT:
        result.notes.append("the manifest names no config of a readable size; its platform was not checked")
        return None
    try:
        url = ecr.get_download_url_for_layer(
            registryId=m["account"], repositoryName=m["repository"], layerDigest=digest
        )["downloadUrl"]
        body = _fetch(url, size, deadline)
    except Exception as e:
        result.notes.append(f"the image config could not be read ({_code(e)}); its platform was not checked")
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
    return f"{str(blob.get('os', 'linux'))[:40]}/{_oci_architecture(str(blob['architecture'])[:40])}"


def _oci_architecture(name: str) -> str:
    return ARCHITECTURE_ALIASES.get(name, name)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a presigned layer URL answers itself; a redirect is an HTTPError here


def _fetch(url: str, size: int, deadline: float) -> bytes:
    """At most ``size`` bytes from ``url`` (https only, no redirect) before ``deadline``, else an error."""
    if not url.startswith("https://"):
        raise ValueError("the layer URL is not https")
    opener = urllib.request.build_opener(_NoRedirects)
    parts: list[bytes] = []
    with opener.open(urllib.request.Request(url), timeout=URL_TIMEOUT_S) as response:
        while (got := sum(map(len, parts))) <= size and (part := response.read(min(CHUNK, size + 1 - got))):
            if time.monotonic() > deadline:
                raise TimeoutError("the layer URL is too slow")
            parts.append(part)
    body = b"".join(parts)
    if len(body) != size:
        raise ValueError(f"{len(body)} bytes where the manifest says {size}")
    return body


def _code(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code") or type(error).__name__)[:80]


_CACHE_NOTE = (
    "but a pull-through cache rule of this registry covers it: the cache fetches it on the first pull (SageMaker's, "
    "with the execution role)"
)
_CACHE_UNKNOWN = "and this registry's pull-through cache rules could not be read: SageMaker checks it"


def _pull_through(ecr: Any, m: re.Match[str]) -> bool | None:
    """Whether a pull-through cache rule of the registry covers the repository (its prefix, or ``ROOT``: ECR user
    guide, "Customizing repository prefixes for pull through cache rules"); None when the rules cannot be read."""
    try:
        rules = [
            rule
            for page in ecr.get_paginator("describe_pull_through_cache_rules").paginate(registryId=m["account"])
            for rule in page.get("pullThroughCacheRules", [])
        ]
    except Exception as e:
        log("cache-rules-unread", error=_code(e))
        return None
    prefixes = {str(rule.get("ecrRepositoryPrefix", "")) for rule in rules}
    return "ROOT" in prefixes or any(m["repository"].startswith(f"{p}/") for p in prefixes if p)


def _unreachable(error: Exception, m: re.Match[str], result: Result, *, cached: bool | None) -> None:
    code = _code(error)
    if code == "RepositoryNotFoundException" and cached is False:
        result.problems.append(
            f"repository {m['repository']} does not exist in account {m['account']} in {m['region']}"
        )
    elif code == "RepositoryNotFoundException":
        result.notes.append(f"repository {m['repository']} does not exist, {_CACHE_NOTE if cached else _CACHE_UNKNOWN}")
    elif code in ("AccessDeniedException", "AccessDenied"):
        result.notes.append(
            f"ecr:BatchGetImage was denied to this function ({code}); the repository's policy may allow only the "
            "endpoint's role: SageMaker checks the image when the Model is created"
        )
    else:
        result.notes.append(f"ecr:BatchGetImage failed ({code}); SageMaker checks the image when the Model is created")
