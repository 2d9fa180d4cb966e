"""``--pack-as-tarball``: a revision's selected files as ONE gzip tar object, for a LoRA adapter's ArtifactUrl.

SageMaker takes an adapter inference component's artifacts as one object: ``ArtifactUrl`` is "the Amazon S3
path where the model artifacts ... are stored. This path must point to a single gzip compressed tar archive
(.tar.gz suffix)" (botocore data/sagemaker/2017-07-24/service-2.json.gz,
InferenceComponentContainerSpecification.ArtifactUrl).
So an adapter from the Hub (``adapter_config.json`` and ``adapter_model.safetensors``, megabytes to a few
hundred) is packed here: each file is streamed from the Hub through its Hub hash check into a ``w|gz`` tar
stream (tarfile's stream mode: no seeking), and that stream into an S3 multipart upload one part buffer at a
time, so memory holds one part and the disk nothing. The selected files together may not exceed
``MAX_PACK_BYTES``: an adapter is small, and a base model does not belong in an adapter archive.

Layout, beside (never inside) the revision's unpacked prefix, so that the same repository staged both ways
keeps two manifests: ``<destination>/<Org>--<Name>/<sha>-packed/model.tar.gz`` and the manifest
``.hf-model-manifest.json`` written last. Its ``files`` lists the one archive object (so the staging handler
verifies it as it verifies any staged prefix: size and metadata by HEAD), ``members`` each packed file with the
SHA-256 of its content as read, ``archive`` the archive's SHA-256 and size, and ``include``/``exclude`` the
patterns it was packed with (other patterns are another archive). A rerun whose manifest and archive match
skips; otherwise the archive is packed again (an interrupted pack restarts: it is small).
"""

from __future__ import annotations

import hashlib
import tarfile
import threading
from dataclasses import dataclass
from typing import IO, Any, TypeGuard, cast

from botocore.exceptions import BotoCoreError, ClientError

from hfstage.base import EXIT_HUB, EXIT_TRANSFER, EXIT_USAGE, Failure, call_s3
from hfstage.events import EventLog
from hfstage.hub import HubClient, HubError, HubFile, HubUnavailable, RepoRevision
from hfstage.manifest import (
    META_BLOB_ID,
    META_REPO_ID,
    META_REVISION,
    build_manifest,
    missing_files,
    read_manifest,
    revision_prefix,
    write_manifest,
)
from hfstage.names import UnsafeFileNames, refuse_unsafe
from hfstage.shard import leader, read_hosts
from hfstage.transfer import (
    MIN_PART,
    READ_CHUNK,
    Cancelled,
    IntegrityError,
    Settings,
    StreamedObject,
    Verifier,
    backoff_delay,
    describe_client_error,
)
from hfstage.uris import ARCHIVE_NAME, PACK_SUFFIX

GiB = 1024**3
MAX_PACK_BYTES = 2 * GiB  # of selected files, before compression; an adapter is megabytes to a few hundred
ARCHIVE_CONTENT_TYPE = "application/gzip"


@dataclass(frozen=True)
class PackContext:
    """What packing takes from the Hub run (hfstage.worker.Run): the repository and where its archive goes, the
    patterns it was selected with, the transfer settings (part size, attempts, retry delay) and the clients."""

    repo_id: str
    bucket: str
    destination_prefix: str  # the archive goes to <destination_prefix><Org>--<Name>/<sha>-packed/
    include: list[str]
    exclude: list[str]
    resource_config: str  # the job's host list: only the leader packs
    settings: Settings
    hub: HubClient
    s3: Any  # a boto3 S3 client
    log: EventLog
    stop: threading.Event


def pack_prefix(destination_prefix: str, repo_id: str, sha: str) -> str:
    """``models/Org--Name/<sha>-packed/``: beside the unpacked prefix (a commit SHA has no ``-``)."""
    return revision_prefix(destination_prefix, repo_id, sha).rstrip("/") + PACK_SUFFIX


def members_id(files: list[HubFile]) -> str:
    """The archive object's blob id: a digest of what it holds (paths, sizes, Hub blob ids), known before
    packing, so it goes on the object at CreateMultipartUpload; the archive's own SHA-256 is in the manifest."""
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        digest.update(f"{f.path}\0{f.size}\0{f.blob_id}\0{f.sha256 or ''}\n".encode())
    return "members-sha256:" + digest.hexdigest()


def member_entries(files: list[HubFile]) -> list[dict[str, Any]]:
    """The manifest's ``members`` without their content digests: what a rerun compares."""
    return [{"path": f.path, "size": f.size, "blob_id": f.blob_id} for f in sorted(files, key=lambda f: f.path)]


def pack_matches(
    manifest: Any, repo_id: str, sha: str, files: list[HubFile], include: list, exclude: list
) -> TypeGuard[dict[str, Any]]:
    """True when ``manifest`` is a packed archive of exactly these files with these patterns."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("archive"), dict):
        return False
    members = manifest.get("members")
    if not isinstance(members, list) or not all(isinstance(m, dict) for m in members):
        return False
    listed = [{k: m.get(k) for k in ("path", "size", "blob_id")} for m in members]
    return (
        manifest.get("repo_id") == repo_id
        and manifest.get("revision") == sha
        and listed == member_entries(files)
        and manifest.get("include", []) == list(include)
        and manifest.get("exclude", []) == list(exclude)
        and manifest["archive"].get("blob_id") == members_id(files)
    )


def archive_file(manifest: dict[str, Any]) -> HubFile:
    """The archive object as the manifest's one ``files`` entry names it."""
    entry = manifest["archive"]
    return HubFile(path=ARCHIVE_NAME, size=int(entry["size"]), blob_id=str(entry["blob_id"]))


def staged_state(
    s3: Any, bucket: str, prefix: str, repo_id: str, sha: str, files: list[HubFile], include: list, exclude: list
) -> tuple[bool, list[HubFile]]:
    """(manifest matches, what is missing) for the packed archive of ``files`` at ``prefix``: the staging
    handler's plan. Missing is the archive itself (as the manifest names it, or a stand-in sized by its members)."""
    try:
        manifest = read_manifest(s3, bucket, prefix)
    except ValueError:
        manifest = None  # unreadable: the job packs again and rewrites it
    if not pack_matches(manifest, repo_id, sha, files, include, exclude):
        return False, [HubFile(path=ARCHIVE_NAME, size=sum(f.size for f in files), blob_id=members_id(files))]
    archive = archive_file(manifest)
    return True, missing_files(s3, bucket, prefix, repo_id, sha, [archive])


def too_large(files: list[HubFile]) -> str | None:
    """Why ``files`` cannot be one adapter archive; None when they can."""
    total = sum(f.size for f in files)
    if total <= MAX_PACK_BYTES:
        return None
    return (
        f"the {len(files)} selected files hold {total} bytes, over the {MAX_PACK_BYTES} an adapter archive may "
        "pack: narrow include to the adapter's files (adapter_config.json, adapter_model.safetensors)"
    )


class _Member:
    """A Hub response read by tarfile.addfile: every byte goes through the Hub hash and a SHA-256."""

    def __init__(self, response: Any, file: HubFile, stop: Any) -> None:
        self.response, self.file, self.stop = response, file, stop
        self.verifier = Verifier(file)
        self.sha256 = hashlib.sha256()
        self.read_bytes = 0

    def read(self, n: int = -1) -> bytes:
        if self.stop.is_set():
            raise Cancelled()
        want = READ_CHUNK if n is None or n < 0 else n
        data = b""
        while len(data) < want:  # tarfile's copy takes a short read for the end of the file
            chunk = self.response.read(min(want - len(data), READ_CHUNK))
            if not chunk:
                break
            data += chunk
        self.read_bytes += len(data)
        if self.read_bytes > self.file.size:
            raise IntegrityError(f"{self.file.path}: the Hub sent more than its listed {self.file.size} bytes")
        self.verifier.update(data)
        self.sha256.update(data)
        return data


def execute_pack(context: PackContext, revision: RepoRevision, plan: list[HubFile]) -> dict[str, Any]:
    """Pack ``plan`` (files of ``revision``) into the archive, verified; the run summary."""
    log, s3, settings, bucket, repo_id = context.log, context.s3, context.settings, context.bucket, context.repo_id
    sha = revision.sha
    total = sum(f.size for f in plan)
    if why := too_large(plan):
        raise Failure(EXIT_USAGE, f"{repo_id} at {sha}: {why}")
    prefix = pack_prefix(context.destination_prefix, repo_id, sha)
    try:
        # Member names become paths when SageMaker unpacks the archive: the same names as a staged prefix.
        refuse_unsafe(plan, prefix)
    except UnsafeFileNames as error:
        raise Failure(EXIT_HUB, str(error)) from None
    where = f"s3://{bucket}/{prefix}"
    key = prefix + ARCHIVE_NAME
    try:
        current, hosts = read_hosts(context.resource_config)
    except ValueError as error:
        raise Failure(EXIT_USAGE, str(error)) from None
    if current != leader(hosts):  # one archive, one writer: the other hosts of a larger job have nothing to do
        log.emit("skip", host=current, reason="the leader packs the archive")
        return {"files": 0, "uploaded": 0, "skipped": 0, "bytes_uploaded": 0, "manifest": "left to the leader"}
    log.emit("plan", destination=where + ARCHIVE_NAME, mode="pack", files=len(plan), bytes=total)
    summary: dict[str, Any] = {"files": len(plan), "uploaded": 0, "skipped": 0, "bytes_uploaded": 0}
    try:
        manifest = call_s3(f"reading {where}", read_manifest, s3, bucket, prefix)
    except ValueError as error:
        log.emit("warning", reason=f"existing manifest ignored: {error}")
        manifest = None
    if pack_matches(manifest, repo_id, sha, plan, context.include, context.exclude):
        missing = call_s3(
            f"checking {where}{ARCHIVE_NAME}", missing_files, s3, bucket, prefix, repo_id, sha, [archive_file(manifest)]
        )
        if not missing:
            log.emit("up_to_date", destination=where, files=len(plan), reason="manifest and archive match")
            summary.update(skipped=len(plan), manifest="unchanged")
            return summary

    blob_id = members_id(plan)
    metadata = {META_REPO_ID: repo_id, META_REVISION: sha, META_BLOB_ID: blob_id}
    digests: dict[str, str] = {}
    writer = None
    for attempt in range(1, settings.max_attempts + 1):
        writer = StreamedObject(
            s3, bucket, key, max(settings.part_size, MIN_PART), metadata, ARCHIVE_CONTENT_TYPE, stop=context.stop
        )
        try:
            digests = _pack(context, sha, plan, writer)
            writer.finish()
            break
        except (HubUnavailable, IntegrityError, OSError, ClientError, BotoCoreError) as error:
            writer.abort()
            if isinstance(error, (ClientError, BotoCoreError)):
                reason = describe_client_error(error, f"writing {where}{ARCHIVE_NAME}")
            else:
                reason = str(error)
            if attempt == settings.max_attempts:
                raise Failure(EXIT_TRANSFER, f"{reason} (gave up after {attempt} attempts)") from None
            delay = backoff_delay(attempt, settings.retry_base_s, 30.0, getattr(error, "retry_after", None))
            log.emit("retry", what="archive", attempt=attempt + 1, wait_s=delay, reason=reason)
            if context.stop.wait(delay):
                raise Cancelled() from None
        except HubError as error:
            writer.abort()
            raise Failure(EXIT_HUB, str(error)) from None
        except BaseException:
            writer.abort()
            raise
    assert writer is not None
    entry = {"path": ARCHIVE_NAME, "size": writer.size, "blob_id": blob_id}
    manifest = build_manifest(repo_id, sha, [], source=context.hub.endpoint)
    manifest.update(
        files=[entry],
        total_bytes=writer.size,
        archive={**entry, "sha256": writer.sha256.hexdigest()},
        members=[{**e, "sha256": digests[e["path"]]} for e in member_entries(plan)],
        include=list(context.include),
        exclude=list(context.exclude),
    )
    call_s3(f"writing the manifest in {where}", write_manifest, s3, bucket, prefix, manifest)
    log.emit("manifest", destination=where, files=len(plan), archive_bytes=writer.size, total_bytes=total)
    summary.update(uploaded=len(plan), bytes_uploaded=writer.size, manifest="written")
    return summary


def _pack(context: PackContext, sha: str, plan: list[HubFile], writer: StreamedObject) -> dict[str, str]:
    """Stream every file into the archive; each member's SHA-256. Raises IntegrityError on a hash mismatch."""
    digests: dict[str, str] = {}
    # Stream mode ("w|gz") writes forward only; members carry no owner, a fixed time and mode 0644. It only ever
    # calls write() on a file object it did not open (CPython Lib/tarfile.py, _Stream), all StreamedObject has;
    # typeshed asks for a whole file object.
    with tarfile.open(fileobj=cast(IO[bytes], writer), mode="w|gz", format=tarfile.PAX_FORMAT) as tar:
        for f in sorted(plan, key=lambda f: f.path):
            info = tarfile.TarInfo(f.path)
            info.size, info.mode, info.mtime, info.type = f.size, 0o644, 0, tarfile.REGTYPE
            response = context.hub.open_file(context.repo_id, sha, f.path)
            try:
                member = _Member(response, f, context.stop)
                tar.addfile(info, member)  # raises OSError ("unexpected end of data") on a short body
                if response.read(1):
                    raise IntegrityError(f"{f.path}: the Hub sent more than its listed {f.size} bytes")
            finally:
                response.close()
            member.verifier.check()
            digests[f.path] = member.sha256.hexdigest()
            context.log.emit("packed", path=f.path, size=f.size, sha256=digests[f.path])
    return digests
