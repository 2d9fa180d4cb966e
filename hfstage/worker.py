"""Copy one Hugging Face model revision into S3, verified, with no local copy.

    python3 hfstage.zip --repo-id Qwen/Qwen3-8B --revision main --destination s3://bucket/models/
    python -m llmops.stage --repo-id Qwen/Qwen3-8B --revision main --destination s3://bucket/models/

The files land under ``<destination>/<Org>--<Name>/<commit sha>/`` with the manifest
``.hf-model-manifest.json`` written last, once every file is verified. Exit status: 0 done, 1 a
transfer or verification failure, 2 bad arguments (or an unreadable token secret), 3 the Hub does not
have, or will not give, the repository or revision, or what it answers cannot be staged safely (a file to
stage whose name is unsafe or one the worker owns, a redirect to anything but http(s), or from https to
http). On failure a one-line reason goes to stderr and to ``/opt/ml/output/message`` (created if missing;
SageMaker shows its first 1 KB as the job's ``ExitMessage``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import safejson
from hfstage import checksum, reach, tarball
from hfstage.base import (
    EXIT_HUB,
    EXIT_TRANSFER,
    EXIT_USAGE,
    FAILURE_FILE_HELP,
    Failure,
    Guard,
    UsageParser,
    call_s3,
    guarded_run,
    make_s3_client,
    parse_arguments,
)
from hfstage.events import EventLog, Progress, ProgressReporter
from hfstage.hub import HubClient, HubError, HubFile, HubUnavailable, RepoRevision, select_files
from hfstage.manifest import (
    build_manifest,
    manifest_matches,
    missing_files,
    read_manifest,
    revision_prefix,
    write_manifest,
)
from hfstage.names import UnsafeFileNames, refuse_unsafe
from hfstage.pack import PackContext, execute_pack
from hfstage.shard import RESOURCE_CONFIG, assign, leader, read_hosts
from hfstage.transfer import (
    BufferPool,
    Cancelled,
    FileFailed,
    FileStager,
    MiB,
    PermanentError,
    ResumePoint,
    Settings,
    backoff_delay,
    describe_client_error,
    part_size_for,
    reclaim_uploads,
)

# Whole-string, ASCII matches (fullmatch, re.ASCII): "$" alone would accept a trailing newline, "\w" any letter.
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?", re.ASCII)
TOKEN_KEYS = ("token", "HF_TOKEN")


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = UsageParser(prog=prog, description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--repo-id", required=True, help="Hugging Face model repository, e.g. Qwen/Qwen3-8B")
    add("--revision", default="main", help="branch, tag or commit SHA (default: main)")
    add("--destination", required=True, help="s3://bucket/prefix/: files go to <prefix>/<Org>--<Name>/<sha>/")
    add("--include", action="append", help="glob of files to copy (repeatable, or one JSON array); default all")
    add("--exclude", action="append", help="glob of files to skip (repeatable, or one JSON array)")
    add("--token-secret-arn", help="Secrets Manager secret holding the Hub token; default: $HF_TOKEN, if set")
    add("--part-size-mib", type=int, default=64, help="multipart part size in MiB, 5-5120 (default 64)")
    add("--parts-in-flight", type=int, default=8, help="part buffers in memory, all files together (default 8)")
    add("--files-in-flight", type=int, default=4, help="files copied at once (default 4)")
    add("--ranges-per-file", type=int, default=8, help="byte ranges of one file fetched at once; 1: one stream")
    add("--range-size-mib", type=int, default=16, help="size of each such range, at most (default 16)")
    add("--max-attempts", type=int, default=5, help="failures of a file in a row with no new byte read (default 5)")
    add("--retry-base-s", type=float, default=1.0, help="first retry delay; doubles each attempt (default 1)")
    add("--retry-window-s", type=float, default=1800.0, help="a file failing this long stops (default 1800)")
    add("--timeout-s", type=float, default=60.0, help="Hub connect/read timeout in seconds (default 60)")
    add("--resource-config", default=RESOURCE_CONFIG, help=f"host list of a multi-instance job ({RESOURCE_CONFIG})")
    add("--leader-wait-s", type=float, default=6 * 3600.0, help="how long the leader waits for the other hosts")
    add("--leader-poll-s", type=float, default=15.0, help="how often the leader checks the other hosts' files")
    add("--progress-interval-s", type=float, default=10.0, help="seconds between progress lines; 0: none")
    add("--pack-as-tarball", action="store_true", help="one gzip tar of the files (a LoRA adapter's ArtifactUrl)")
    add("--failure-file", help=FAILURE_FILE_HELP)
    return parser


def parse_args(argv: list[str], prog: str | None = None) -> argparse.Namespace:
    return parse_arguments(
        build_parser(prog),
        argv,
        _hub_problems,
        counts=("parts_in_flight", "files_in_flight", "ranges_per_file", "range_size_mib", "max_attempts"),
        durations=("retry_base_s", "retry_window_s", "timeout_s", "leader_wait_s", "leader_poll_s"),
        nonzero=("timeout_s", "retry_window_s"),
    )


def _hub_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if not REPO_ID.fullmatch(args.repo_id):
        problems.append(f"--repo-id {args.repo_id[:200]!r} is not a repository id like Org/Name")
    if not args.revision or len(args.revision) > 255 or any(c.isspace() or ord(c) < 32 for c in args.revision):
        problems.append(f"--revision {args.revision[:200]!r} is not a branch, tag or commit SHA")
    return problems


def parse_token(secret: str) -> str:
    """The token in a secret's value: the value itself, or the ``token``/``HF_TOKEN`` field of a JSON object."""
    text = secret.strip()
    if text.startswith("{"):
        try:
            data = safejson.loads(text, source="the secret")
        except ValueError:
            raise ValueError("the secret looks like JSON but does not parse") from None
        for key in TOKEN_KEYS:
            if isinstance(data, dict) and isinstance(data.get(key), str) and data[key].strip():
                return data[key].strip()
        raise ValueError("the secret is a JSON object without a 'token' or 'HF_TOKEN' string")
    if not text:
        raise ValueError("the secret is empty")
    return text


def read_token(secret_arn: str | None, secrets_client: Any = None) -> str | None:
    """The Hub token: from Secrets Manager when ``secret_arn`` is given, else $HF_TOKEN (for runs by hand)."""
    if not secret_arn:
        return os.environ.get("HF_TOKEN") or None
    try:
        if secrets_client is None:
            import boto3

            parts = secret_arn.split(":")
            region = parts[3] if secret_arn.startswith("arn:") and len(parts) > 3 and parts[3] else None
            secrets_client = boto3.session.Session().client("secretsmanager", region_name=region)
        answer = secrets_client.get_secret_value(SecretId=secret_arn)
        value = answer.get("SecretString")
        if value is None and answer.get("SecretBinary") is not None:
            value = bytes(answer["SecretBinary"]).decode("utf-8", "replace")
        return parse_token(value or "")
    except ValueError as error:
        raise Failure(EXIT_USAGE, f"the Hub token secret {secret_arn} is unusable: {error}") from None
    except Exception as error:  # botocore ClientError, NoCredentialsError, NoRegionError, ...
        raise Failure(
            EXIT_USAGE,
            describe_client_error(error, f"cannot read the Hub token secret {secret_arn}")
            + ": check hf_token_secret_arn and the job role's secretsmanager:GetSecretValue permission",
        ) from None


class Run:
    """One staging run: the state the phases share."""

    def __init__(self, args: argparse.Namespace, log: EventLog, stop: threading.Event, s3: Any, token: str | None):
        self.args = args
        self.log = log
        self.stop = stop
        self.s3 = s3
        self.settings = Settings(
            part_size=args.part_size_mib * MiB,
            parts_in_flight=args.parts_in_flight,
            files_in_flight=args.files_in_flight,
            ranges_per_file=args.ranges_per_file,
            range_size=args.range_size_mib * MiB,
            max_attempts=args.max_attempts,
            retry_base_s=args.retry_base_s,
            retry_window_s=args.retry_window_s,
        )
        self.hub = HubClient(token=token, timeout=args.timeout_s)

    # -- phases ------------------------------------------------------------------------------------------

    def resolve(self) -> RepoRevision:
        for attempt in range(1, self.settings.max_attempts + 1):
            try:
                return self.hub.revision_info(self.args.repo_id, self.args.revision)
            except HubUnavailable as error:
                if attempt == self.settings.max_attempts:
                    raise Failure(EXIT_TRANSFER, f"{error} (gave up after {attempt} attempts)") from None
                delay = backoff_delay(attempt, self.settings.retry_base_s, 30.0, error.retry_after)
                self.log.emit("retry", what="revision", attempt=attempt + 1, wait_s=delay, reason=str(error))
                if self.stop.wait(delay):
                    raise Cancelled() from None
            except HubError as error:
                raise Failure(EXIT_HUB, str(error)) from None
        raise AssertionError("unreachable")

    s3_call = staticmethod(call_s3)

    def pack_context(self) -> PackContext:
        args = self.args
        return PackContext(
            repo_id=args.repo_id,
            bucket=args.bucket,
            destination_prefix=args.prefix,
            include=args.include,
            exclude=args.exclude,
            resource_config=args.resource_config,
            settings=self.settings,
            hub=self.hub,
            s3=self.s3,
            log=self.log,
            stop=self.stop,
        )

    def execute(self) -> dict[str, Any]:
        args = self.args
        revision = self.resolve()
        sha = revision.sha
        plan = select_files(revision.files, args.include, args.exclude)
        self.log.emit(
            "resolved",
            repo=args.repo_id,
            revision=args.revision,
            sha=sha,
            files=len(revision.files),
            selected=len(plan),
            bytes=sum(f.size for f in plan),
        )
        if not plan:
            raise Failure(
                EXIT_USAGE,
                f"no file of {args.repo_id} at {sha} matches include {args.include or ['*']} "
                f"and exclude {args.exclude}",
            )
        if args.pack_as_tarball:  # an adapter: one archive object, not a prefix of files (hfstage/pack.py)
            return execute_pack(self.pack_context(), revision, plan)
        prefix = revision_prefix(args.prefix, args.repo_id, sha)
        try:
            # A listed path becomes an S3 key and then a file in /opt/ml/model: refuse unsafe ones before any write.
            refuse_unsafe(plan, prefix)
        except UnsafeFileNames as error:
            raise Failure(EXIT_HUB, str(error)) from None
        for f in plan:
            try:
                part_size_for(f.size, self.settings.part_size)
            except ValueError as error:
                raise Failure(EXIT_TRANSFER, f"{f.path} cannot be one S3 object: {error}") from None
        try:
            current, hosts = read_hosts(args.resource_config)
        except ValueError as error:
            raise Failure(EXIT_USAGE, str(error)) from None
        is_leader = current == leader(hosts)
        mine = assign(plan, hosts)[current]
        where = f"s3://{args.bucket}/{prefix}"
        self.log.emit(
            "plan",
            destination=where,
            host=current,
            hosts=len(hosts),
            leader=leader(hosts),
            files=len(mine),
            bytes=sum(f.size for f in mine),
            s3_endpoint=getattr(getattr(self.s3, "meta", None), "endpoint_url", None),
        )
        summary: dict[str, Any] = {"files": len(mine), "uploaded": 0, "skipped": 0, "bytes_uploaded": 0}

        if is_leader:
            try:
                manifest = self.s3_call(f"reading {where}", read_manifest, self.s3, args.bucket, prefix)
            except ValueError as error:
                self.log.emit("warning", reason=f"existing manifest ignored: {error}")
                manifest = None
            if manifest_matches(manifest, args.repo_id, sha, plan) and not self._missing(prefix, sha, plan):
                self.log.emit(
                    "up_to_date", destination=where, files=len(plan), reason="manifest and every object match"
                )
                summary.update(skipped=len(mine), manifest="unchanged")
                return summary

        todo = self._missing(prefix, sha, mine)
        todo_paths = {f.path for f in todo}
        for f in mine:
            if f.path not in todo_paths:
                self.log.emit("skip", path=f.path, size=f.size, reason="present with the same size, revision and blob")
        summary["skipped"] = len(mine) - len(todo)
        if todo:
            keys = {prefix + f.path for f in todo}
            resume = reclaim_uploads(self.s3, args.bucket, prefix, keys, self.log)
            self._stage(todo, prefix, sha, resume)
            summary.update(uploaded=len(todo), bytes_uploaded=sum(f.size for f in todo))

        if not is_leader:
            summary["manifest"] = "left to the leader"
            return summary
        self._wait_for_all(prefix, sha, plan, mine)
        manifest = build_manifest(args.repo_id, sha, plan, source=self.hub.endpoint)
        self.s3_call(f"writing the manifest in {where}", write_manifest, self.s3, args.bucket, prefix, manifest)
        self.log.emit("manifest", destination=where, files=len(plan), total_bytes=manifest["total_bytes"])
        summary["manifest"] = "written"
        return summary

    def _missing(self, prefix: str, sha: str, files: list[HubFile]) -> list[HubFile]:
        return self.s3_call(
            f"checking objects under s3://{self.args.bucket}/{prefix}",
            missing_files,
            self.s3,
            self.args.bucket,
            prefix,
            self.args.repo_id,
            sha,
            files,
        )

    def _stage(self, todo: list[HubFile], prefix: str, sha: str, resume: dict[str, ResumePoint] | None = None) -> None:
        resume = resume or {}
        settings = self.settings
        largest_part = max(part_size_for(f.size, settings.part_size) for f in todo)
        pool = BufferPool(settings.part_size, settings.parts_in_flight)
        if largest_part > settings.part_size:
            self.log.emit("note", reason=f"a file needs {largest_part // MiB} MiB parts to stay within 10,000 parts")
        algorithm, why = checksum.choose()
        self.log.emit("checksums", algorithm=algorithm.name, **({"reason": why} if why else {}))
        progress = Progress(len(todo), sum(f.size for f in todo))
        failures: list[str] = []
        fatal: BaseException | None = None
        with contextlib.ExitStack() as stack:
            uploads = stack.enter_context(ThreadPoolExecutor(settings.parts_in_flight, thread_name_prefix="part"))
            # A range read holds a pool buffer, so no more than parts_in_flight of them can be under way.
            ranges = stack.enter_context(ThreadPoolExecutor(settings.parts_in_flight, thread_name_prefix="range"))
            files = stack.enter_context(ThreadPoolExecutor(settings.files_in_flight, thread_name_prefix="file"))
            stack.enter_context(ProgressReporter(self.log, progress, self.args.progress_interval_s))
            stager = FileStager(
                hub=self.hub,
                s3=self.s3,
                bucket=self.args.bucket,
                prefix=prefix,
                repo_id=self.args.repo_id,
                sha=sha,
                settings=settings,
                pool=pool,
                uploads=uploads,
                progress=progress,
                log=self.log,
                stop=self.stop,
                ranges=ranges,
            )
            # Largest first: the long transfers start early and the small ones fill the gaps at the end.
            ordered = sorted(todo, key=lambda f: (-f.size, f.path))
            pending: set[Future[None]] = {files.submit(stager.stage, f, resume.get(prefix + f.path)) for f in ordered}
            while pending:
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    error = future.exception() if not future.cancelled() else Cancelled()
                    if error is None or isinstance(error, Cancelled):
                        continue
                    if isinstance(error, FileFailed):
                        failures.append(str(error))
                        self.log.emit("file_failed", reason=str(error))
                    elif fatal is None:
                        fatal = error
                        self.stop.set()
                if self.stop.is_set():
                    for future in pending:
                        future.cancel()
        self.log.emit("progress", **progress.snapshot())
        if fatal is not None:
            if isinstance(fatal, HubError) and not fatal.retryable:
                raise Failure(EXIT_HUB, str(fatal))
            if isinstance(fatal, (PermanentError, HubError)):
                raise Failure(EXIT_TRANSFER, str(fatal))
            raise fatal
        if self.stop.is_set():
            raise Cancelled()
        if failures:
            raise Failure(
                EXIT_TRANSFER,
                f"{len(failures)} of {len(todo)} files failed; the others are staged and a rerun copies only "
                f"what is missing. First: {failures[0]}",
            )

    def _wait_for_all(self, prefix: str, sha: str, plan: list[HubFile], mine: list[HubFile]) -> None:
        """Return once every file of the plan is in S3 and matches; this host's own share is already verified."""
        deadline = time.monotonic() + self.args.leader_wait_s
        waited_from = time.monotonic()
        own = {f.path for f in mine}
        remaining = [f for f in plan if f.path not in own]
        while True:
            remaining = self._missing(prefix, sha, remaining)  # an object that matched stays matched
            if not remaining:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure(
                    EXIT_TRANSFER,
                    f"{len(remaining)} of {len(plan)} files were still missing after the leader waited "
                    f"{self.args.leader_wait_s:.0f} s for the other hosts (first: {remaining[0].path})",
                )
            self.log.emit(
                "waiting",
                missing=len(remaining),
                of=len(plan),
                waited_s=time.monotonic() - waited_from,
                reason="other hosts are still copying their share",
            )
            if self.stop.wait(min(self.args.leader_poll_s, left)):
                raise Cancelled()


def main(
    argv: list[str] | None = None, *, s3_client: Any = None, secrets_client: Any = None, prog: str | None = None
) -> int:
    """The worker's one command line, ``argv`` (default: sys.argv[1:]); the exit status. ``--source-s3-uri`` unpacks
    an archive (hfstage.tarball); otherwise a Hub revision is staged, as files or, with ``--pack-as-tarball``, as one
    archive (hfstage.pack). Clients may be injected (tests)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if tarball.is_tarball_run(argv):
        return tarball.main(argv, s3_client=s3_client, prog=prog)

    def stage(guard: Guard) -> int:
        args = parse_args(argv, prog)
        guard.failure_file = args.failure_file or guard.failure_file
        guard.label = f"staging {args.repo_id}@{args.revision}"
        token = read_token(args.token_secret_arn, secrets_client)
        guard.log.add_secret(token)
        s3 = s3_client if s3_client is not None else make_s3_client_for(args)
        run = Run(args, guard.log, guard.stop, s3, token)
        guard.log.emit(
            "begin",
            repo=args.repo_id,
            revision=args.revision,
            destination=args.destination,
            hub=run.hub.endpoint,
            token="yes" if token else "no",
            part_size_mib=args.part_size_mib,
            parts_in_flight=args.parts_in_flight,
            files_in_flight=args.files_in_flight,
        )
        probe_s = float(os.environ.get(reach.ENV) or 0)  # set by the staging handler: fail in seconds, not minutes
        if probe_s > 0 and (why := reach.unreachable(run.hub.endpoint, timeout=probe_s)):
            raise Failure(EXIT_HUB, why)
        return guard.done(run.execute())

    def stopped(error: BaseException, guard: Guard) -> tuple[str, int]:
        why = f"stopped by {guard.signals[0]}" if guard.signals else "stopped"
        return f"{why} before every file was copied; a rerun resumes", EXIT_TRANSFER

    return guarded_run("staging", stage, {Cancelled: stopped})


def make_s3_client_for(args: argparse.Namespace) -> Any:
    return make_s3_client(Settings(parts_in_flight=args.parts_in_flight, files_in_flight=args.files_in_flight))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
