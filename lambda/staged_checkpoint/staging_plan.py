"""What a revision holds and what of it S3 already has, verified: the plan ``on_event`` acts on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError
from staging_adapter import check_adapter
from staging_base import Settings, StagingError, short

from hfstage.hub import HubClient, HubError, HubFile, select_files
from hfstage.manifest import MANIFEST_NAME, manifest_matches, missing_files, read_manifest, revision_prefix
from hfstage.names import refuse_unsafe
from hfstage.pack import pack_prefix, staged_state, too_large
from hfstage.tarball import ArchiveUnreadable, archive_state
from hfstage.worker import parse_token


@dataclass(frozen=True)
class Plan:
    sha: str
    files: tuple
    missing: tuple
    prefix: str
    manifest_ok: bool

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def missing_bytes(self) -> int:
        return sum(f.size for f in self.missing)

    @property
    def complete(self) -> bool:
        return self.manifest_ok and not self.missing


def hub_token(settings: Settings, secrets: Any) -> str | None:
    if not settings.token_secret_arn:
        return None
    where = f"the Hugging Face token secret {settings.token_secret_arn}"
    try:
        value = secrets.get_secret_value(SecretId=settings.token_secret_arn).get("SecretString") or ""
    except ClientError as e:
        raise StagingError(f"could not read {where} ({e.response['Error']['Code']})") from None
    try:
        return parse_token(value)
    except ValueError as e:
        raise StagingError(f"{where} is unusable: {e}") from None


def make_plan(settings: Settings, hub: HubClient, s3: Any) -> Plan:
    """What the revision holds, and what of it is not yet (verified) in S3."""
    if settings.source_s3_uri:
        return archive_plan(settings, s3)
    try:
        revision = hub.revision_info(settings.repo_id, settings.revision)
    except HubError as e:
        raise StagingError(str(e)) from e
    files = tuple(select_files(revision.files, settings.include, settings.exclude))
    if not files:
        raise StagingError(
            f"no file of {settings.repo_id}@{revision.sha} matches include={list(settings.include)} "
            f"exclude={list(settings.exclude)} ({len(revision.files)} files in the revision)"
        )
    # Metadata of a gated repository is public; its files are not. Open the smallest file now, so that a
    # missing token or unaccepted conditions fail the deployment here rather than in the job.
    try:
        hub.open_file(settings.repo_id, revision.sha, min(files, key=lambda f: f.size).path).close()
    except HubError as e:
        raise StagingError(str(e)) from e
    if settings.pack:  # one model.tar.gz beside the revision's prefix (hfstage.pack)
        check_adapter(settings, hub, revision.sha, files)  # before any job (staging_adapter.py)
        return packed_plan(settings, revision.sha, files, s3)
    prefix = revision_prefix(settings.prefix, settings.repo_id, revision.sha)
    # The worker refuses the same names before its first upload; here the deploy fails before any job starts.
    try:
        refuse_unsafe(files, prefix)
    except HubError as e:
        raise StagingError(str(e)) from e
    try:
        try:
            manifest = read_manifest(s3, settings.bucket, prefix)
        except ValueError:
            manifest = None  # unreadable: the job rewrites it
        missing = tuple(missing_files(s3, settings.bucket, prefix, settings.repo_id, revision.sha, files))
    except ClientError as e:
        raise StagingError(s3_problem(e, settings.bucket, prefix, "the staging handler's role")) from None
    return Plan(
        sha=revision.sha,
        files=files,
        missing=missing,
        prefix=prefix,
        manifest_ok=manifest_matches(manifest, settings.repo_id, revision.sha, files),
    )


def packed_plan(settings: Settings, sha: str, files: tuple, s3: Any) -> Plan:
    """A Hub adapter packed into one archive: refused above the bound before a job; else what is missing."""
    prefix = pack_prefix(settings.prefix, settings.repo_id, sha)
    why = too_large(list(files))
    if why:
        raise StagingError(f"{settings.repo_id}@{sha}: {why}")
    try:
        refuse_unsafe(files, prefix)
    except HubError as e:
        raise StagingError(str(e)) from e
    try:
        manifest_ok, missing = staged_state(
            s3,
            settings.bucket,
            prefix,
            settings.repo_id,
            sha,
            list(files),
            list(settings.include),
            list(settings.exclude),
        )
    except ClientError as e:
        raise StagingError(s3_problem(e, settings.bucket, prefix, "the staging handler's role")) from None
    return Plan(sha=sha, files=files, missing=tuple(missing), prefix=prefix, manifest_ok=manifest_ok)


def archive_plan(settings: Settings, s3: Any) -> Plan:
    """A model.tar.gz: its ETag is the revision; until its prefix is staged, the archive is what is missing."""
    try:
        state = archive_state(
            s3, settings.source_s3_uri or "", settings.bucket, settings.prefix, settings.include, settings.exclude
        )
    except ArchiveUnreadable as e:
        raise StagingError(
            f"{e}: check model_s3_uri; the staging handler's role needs s3:GetObject on it (and kms:Decrypt for "
            "SSE-KMS, model_kms_key_arn)"
        ) from None
    except ClientError as e:
        raise StagingError(s3_problem(e, settings.bucket, settings.prefix, "the staging handler's role")) from None
    except ValueError as e:  # an ETag that is no S3 ETag
        raise StagingError(f"{settings.source_s3_uri}: {e}") from None
    archive = HubFile(path="model.tar.gz", size=state.size, blob_id=state.etag)
    return Plan(
        sha=state.etag,
        files=state.staged_files or (archive,),
        missing=() if state.staged_files else (archive,),
        prefix=state.prefix,
        manifest_ok=bool(state.staged_files),
    )


def s3_problem(error: ClientError, bucket: str, prefix: str, who: str) -> str:
    """An S3 error as a reason naming the place and the permission, not just botocore's wording."""
    code = error.response["Error"].get("Code", "error")
    operation = getattr(error, "operation_name", "an S3 call")
    hint = (
        f"; {who} needs s3:ListBucket (prefix {prefix}) and s3:GetObject on it, and kms:Decrypt for an SSE-KMS bucket"
        if code in ("AccessDenied", "403", "Forbidden", "AllAccessDisabled")
        else ""
    )
    return short(f"could not read s3://{bucket}/{prefix} ({code} on {operation}){hint}")


def verify_staged(s3: Any, bucket: str, prefix: str, repo_id: str, sha: str) -> int:
    """Re-read the manifest and check every file it lists; the number of files, or StagingError."""
    where = f"s3://{bucket}/{prefix}{MANIFEST_NAME}"
    try:
        manifest = read_manifest(s3, bucket, prefix)
    except ValueError as e:
        raise StagingError(f"the manifest {where} is unreadable: {e}") from e
    except ClientError as e:
        raise StagingError(s3_problem(e, bucket, prefix, "the staging handler's role")) from None
    if manifest is None:
        raise StagingError(f"the staging job ended but wrote no manifest at {where}")
    if manifest.get("repo_id") != repo_id or manifest.get("revision") != sha:
        raise StagingError(
            f"the manifest {where} is for {manifest.get('repo_id')}@{manifest.get('revision')}, not {repo_id}@{sha}"
        )
    files = [
        HubFile(path=f["path"], size=int(f["size"]), blob_id=f["blob_id"], sha256=f.get("sha256"))
        for f in manifest.get("files", [])
    ]
    if not files:
        raise StagingError(f"the manifest {where} lists no files")
    try:
        missing = missing_files(s3, bucket, prefix, repo_id, sha, files)
    except ClientError as e:
        raise StagingError(s3_problem(e, bucket, prefix, "the staging handler's role")) from None
    if missing:
        shown = ", ".join(f.path for f in missing[:5])
        raise StagingError(f"{len(missing)} file(s) of the manifest {where} are missing or differ in S3: {shown}")
    return len(files)
