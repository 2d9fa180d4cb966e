"""Where a revision lives in S3, what its manifest says, and which objects are already there and intact."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

import safejson
from hfstage.hub import HubFile, default_endpoint

MANIFEST_NAME = ".hf-model-manifest.json"
SCHEMA_VERSION = 1
META_REPO_ID = "hf-repo-id"
META_REVISION = "hf-revision"
META_BLOB_ID = "hf-blob-id"
META_SHA256 = "hf-sha256"
METADATA_KEYS = (META_REPO_ID, META_REVISION, META_BLOB_ID, META_SHA256)
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}


def revision_prefix(destination_prefix: str, repo_id: str, sha: str) -> str:
    """``"models/"``, ``"Org/Name"``, sha -> ``"models/Org--Name/<sha>/"`` (an empty prefix means the bucket root)."""
    base = destination_prefix.strip("/")
    leaf = f"{repo_id.replace('/', '--')}/{sha}/"
    return f"{base}/{leaf}" if base else leaf


def object_metadata(file: HubFile, repo_id: str, sha: str) -> dict[str, str]:
    """User metadata written on every staged object (boto3 sends these as ``x-amz-meta-*``)."""
    metadata = {META_REPO_ID: repo_id, META_REVISION: sha, META_BLOB_ID: file.blob_id}
    if file.sha256:
        metadata[META_SHA256] = file.sha256
    return metadata


def _file_entry(file: HubFile) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": file.path, "size": file.size, "blob_id": file.blob_id}
    if file.sha256:
        entry["sha256"] = file.sha256
    return entry


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def build_manifest(
    repo_id: str,
    sha: str,
    files: Iterable[HubFile],
    completed_at: str | None = None,
    *,
    source: str | None = None,
) -> dict[str, Any]:
    entries = sorted((_file_entry(f) for f in files), key=lambda e: e["path"])
    return {
        "schema_version": SCHEMA_VERSION,
        "source": (source or default_endpoint()).rstrip("/"),
        "repo_id": repo_id,
        "revision": sha,
        "files": entries,
        "total_bytes": sum(e["size"] for e in entries),
        "completed_at": completed_at or utc_now(),
    }


def _is_not_found(error: ClientError) -> bool:
    err = error.response.get("Error", {})
    status = str(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return str(err.get("Code", "")) in _NOT_FOUND or status == "404"


def _is_forbidden(error: ClientError) -> bool:
    err = error.response.get("Error", {})
    status = str(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return str(err.get("Code", "")) in ("403", "AccessDenied", "Forbidden") or status == "403"


def listed_sizes(s3_client: Any, bucket: str, prefix: str) -> dict[str, int]:
    """Sizes of the objects whose keys start with ``prefix``, by key relative to the prefix's folder."""
    folder = prefix[: prefix.rfind("/") + 1]
    sizes: dict[str, int] = {}
    for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            sizes[item["Key"][len(folder) :]] = int(item["Size"])
    return sizes


def read_manifest(s3_client: Any, bucket: str, prefix: str) -> dict[str, Any] | None:
    """The manifest at ``prefix``; None when there is none; ValueError when it is not a JSON object."""
    try:
        response = s3_client.get_object(Bucket=bucket, Key=prefix + MANIFEST_NAME)
    except ClientError as error:
        if _is_not_found(error):
            return None
        # With s3:ListBucket granted only for the prefix (least privilege), S3 answers 403, not 404, for a
        # missing key: the listing, which that grant allows, tells absent from forbidden.
        if _is_forbidden(error) and MANIFEST_NAME not in listed_sizes(s3_client, bucket, prefix + MANIFEST_NAME):
            return None
        raise
    try:
        manifest = safejson.loads(
            response["Body"].read(safejson.MAX_SIZE + 1), source=f"s3://{bucket}/{prefix}{MANIFEST_NAME}"
        )
    except safejson.JsonError as error:  # names the object
        raise ValueError(str(error)) from None
    finally:
        response["Body"].close()
    if not isinstance(manifest, dict):
        raise ValueError(f"s3://{bucket}/{prefix}{MANIFEST_NAME} is not a JSON object")
    return manifest


def write_manifest(s3_client: Any, bucket: str, prefix: str, manifest: dict[str, Any]) -> None:
    s3_client.put_object(
        Bucket=bucket,
        Key=prefix + MANIFEST_NAME,
        Body=(json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode(),
        ContentType="application/json",
        Metadata={META_REPO_ID: manifest["repo_id"], META_REVISION: manifest["revision"]},
    )


def manifest_matches(manifest: dict[str, Any] | None, repo_id: str, sha: str, files: Iterable[HubFile]) -> bool:
    """True when ``manifest`` describes exactly these files of ``repo_id`` at ``sha`` (the source may differ)."""
    if not isinstance(manifest, dict):
        return False
    expected = build_manifest(repo_id, sha, files, completed_at="-", source="-")
    return (
        manifest.get("schema_version") == SCHEMA_VERSION
        and manifest.get("repo_id") == repo_id
        and manifest.get("revision") == sha
        and manifest.get("files") == expected["files"]
        and manifest.get("total_bytes") == expected["total_bytes"]
    )


def object_matches(head: dict[str, Any], file: HubFile, repo_id: str, sha: str) -> bool:
    """True when a HeadObject answer shows ``file`` of ``repo_id`` at ``sha``: size, revision and blob id."""
    metadata = {str(k).lower(): v for k, v in (head.get("Metadata") or {}).items()}
    if head.get("ContentLength") != file.size:
        return False
    if metadata.get(META_REPO_ID) != repo_id or metadata.get(META_REVISION) != sha:
        return False
    if metadata.get(META_BLOB_ID) != file.blob_id:
        return False
    recorded_sha256 = metadata.get(META_SHA256)
    return not (file.sha256 and recorded_sha256 and recorded_sha256 != file.sha256)


def missing_files(
    s3_client: Any,
    bucket: str,
    prefix: str,
    repo_id: str,
    sha: str,
    files: Sequence[HubFile],
    max_workers: int = 16,
) -> list[HubFile]:
    """The files without a matching object under ``prefix`` (absent, or another size, revision or blob), in order.

    Errors other than "not found" (access denied, throttling after retries) are raised.
    """

    def is_missing(file: HubFile) -> bool:
        if sizes.get(file.path) != file.size:
            return True  # absent or another size: no need to ask for its metadata
        try:
            head = s3_client.head_object(Bucket=bucket, Key=prefix + file.path)
        except ClientError as error:
            if _is_not_found(error):
                return True
            raise
        return not object_matches(head, file, repo_id, sha)

    files = list(files)
    if not files:
        return []
    # One listing finds what exists (a HEAD of a missing key is a 403 under a prefix-scoped ListBucket grant,
    # and a thousand HEADs cost more than a page of listing); only existing objects are asked for metadata.
    sizes = listed_sizes(s3_client, bucket, prefix)
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(files))), thread_name_prefix="head") as pool:
        flags = list(pool.map(is_missing, files))
    return [f for i, f in enumerate(files) if flags[i]]
