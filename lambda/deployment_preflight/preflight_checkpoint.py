"""Reading the checkpoint's prefix once (sizes, manifest, config.json), and the S3 check of what is there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from preflight_base import DENIED

import safejson
from preflight import (
    WEIGHT_SUFFIXES,
    select_weight_files,
)
from preflight.gguf import S3Gguf, read_s3_gguf
from preflight.weights import SAFETENSORS_INDEX

MANIFEST_NAME = ".hf-model-manifest.json"


CONFIG_NAME = "config.json"


# Listed by name in a problem; the rest are counted.
SHOWN_FILES = 5


@dataclass
class Checkpoint:
    """What the prefix holds, read once for every check. ``error`` says why the prefix could not be read."""

    where: str
    sizes: dict[str, int] = field(default_factory=dict)  # key relative to the prefix -> bytes
    config: dict[str, Any] | None = None
    manifest: dict[str, Any] | None = None
    index: dict[str, Any] | None = None
    error: str | None = None
    # Files that are there but could not be used: name -> why (unreadable, not JSON).
    unusable: dict[str, str] = field(default_factory=dict)
    # A GGUF model (llama.cpp) stands in for config.json: its header gives the same settings.
    gguf: S3Gguf = field(default_factory=S3Gguf)


def _denied_hint(code: str, action: str) -> str:
    return f" (the preflight role needs {action} on the prefix)" if code in DENIED else ""


def read_checkpoint(s3: Any, bucket: str, prefix: str, gguf_file: str | None = None) -> Checkpoint:
    checkpoint = Checkpoint(where=f"s3://{bucket}/{prefix}")
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                checkpoint.sizes[obj["Key"][len(prefix) :]] = int(obj["Size"])
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        checkpoint.error = f"could not list {checkpoint.where}: {code}{_denied_hint(code, 's3:ListBucket')}"
        return checkpoint
    except BotoCoreError as e:
        checkpoint.error = f"could not list {checkpoint.where}: {type(e).__name__}"
        return checkpoint
    for name, attribute in ((CONFIG_NAME, "config"), (MANIFEST_NAME, "manifest"), (SAFETENSORS_INDEX, "index")):
        if name in checkpoint.sizes:
            value, why = _read_json(s3, bucket, prefix + name)
            if why:
                checkpoint.unusable[name] = why
            else:
                setattr(checkpoint, attribute, value)
    if gguf_file or CONFIG_NAME not in checkpoint.sizes:
        checkpoint.gguf = read_s3_gguf(s3, bucket, prefix, checkpoint.sizes, gguf_file)
        if checkpoint.gguf.error:
            checkpoint.unusable[str(checkpoint.gguf.name)] = checkpoint.gguf.error
        elif checkpoint.gguf.config is not None:
            checkpoint.config = checkpoint.gguf.config
    return checkpoint


def _read_json(s3: Any, bucket: str, key: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read(safejson.MAX_SIZE + 1)  # bounded: refused above it
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        return None, f"could not be read: {code}{_denied_hint(code, 's3:GetObject')}"
    except BotoCoreError as e:
        return None, f"could not be read: {type(e).__name__}"
    try:
        value = safejson.loads(body, source=f"s3://{bucket}/{key}")
    except safejson.JsonError as e:  # the caller names the object
        return None, f"is {e.why}"
    if not isinstance(value, dict):
        return None, "is not a JSON object"
    return value, None


def manifest_sizes(manifest: Mapping[str, Any]) -> dict[str, int] | None:
    """path -> size of the manifest's files; None when its ``files`` list is missing or malformed."""
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        return None
    try:
        return {str(f["path"]): int(f["size"]) for f in files}
    except (KeyError, TypeError, ValueError):
        return None


def _listed(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:SHOWN_FILES])
    return shown + (f" and {len(paths) - SHOWN_FILES} more" if len(paths) > SHOWN_FILES else "")


def check_s3(checkpoint: Checkpoint, *, allow_unverified: bool) -> list[str]:
    """What is missing or wrong under the prefix."""
    where = checkpoint.where
    if checkpoint.error:
        return [checkpoint.error]
    if not checkpoint.sizes:
        return [f"{where} is empty: stage the model first, or check model_s3_uri (it must be the checkpoint's root)"]
    problems = []
    if checkpoint.gguf.name:
        if checkpoint.gguf.error:
            problems.append(f"{where}{checkpoint.gguf.name} {checkpoint.gguf.error}")
    elif CONFIG_NAME not in checkpoint.sizes:
        problems.append(f"no {CONFIG_NAME} under {where}: is this the checkpoint's root prefix?")
    elif CONFIG_NAME in checkpoint.unusable:
        problems.append(f"{where}{CONFIG_NAME} {checkpoint.unusable[CONFIG_NAME]}")
    if not any(path.endswith(WEIGHT_SUFFIXES) for path in checkpoint.sizes):
        problems.append(
            f"no weight file ({', '.join('*' + s for s in WEIGHT_SUFFIXES)}) under {where} "
            f"({len(checkpoint.sizes)} object(s) there)"
        )
    if MANIFEST_NAME not in checkpoint.sizes:
        if not allow_unverified:
            problems.append(
                f"no staging manifest {MANIFEST_NAME} under {where}: staging did not finish, or the prefix was "
                "copied by other means (then set allow_unverified_s3 to deploy it unverified)"
            )
        return problems
    if MANIFEST_NAME in checkpoint.unusable:
        return [*problems, f"the manifest {where}{MANIFEST_NAME} {checkpoint.unusable[MANIFEST_NAME]}"]
    listed = manifest_sizes(checkpoint.manifest or {})
    if listed is None:
        return [*problems, f"the manifest {where}{MANIFEST_NAME} lists no files (each needs a path and a size)"]
    missing = sorted(p for p in listed if p not in checkpoint.sizes)
    differ = sorted(p for p in listed if p in checkpoint.sizes and checkpoint.sizes[p] != listed[p])
    if missing:
        problems.append(
            f"{len(missing)} of {len(listed)} file(s) in the manifest are missing from {where}: {_listed(missing)}"
        )
    if differ:
        detail = [f"{p} (manifest {listed[p]:,} bytes, S3 {checkpoint.sizes[p]:,})" for p in differ]
        problems.append(f"{len(differ)} file(s) under {where} differ in size from the manifest: {_listed(detail)}")
    return problems


@dataclass(frozen=True)
class Weights:
    total_bytes: int
    source: str  # "manifest" or "listing"
    files: int
    notes: tuple[str, ...] = ()


def weights_of(checkpoint: Checkpoint) -> Weights | None:
    """The weight bytes an engine loads: the manifest's sizes when there is a usable manifest, else the listing's."""
    listed = manifest_sizes(checkpoint.manifest) if checkpoint.manifest else None
    sizes, source = (listed, "manifest") if listed is not None else (checkpoint.sizes, "listing")
    if checkpoint.gguf.files:  # llama.cpp loads one GGUF model (its parts), whatever else is there
        sizes = {p: size for p, size in sizes.items() if p in checkpoint.gguf.files}
    selected = select_weight_files(sizes, checkpoint.index)
    if not selected.files:
        return None
    return Weights(selected.total_bytes, source, len(selected.files), selected.notes)


def _why_no_config(checkpoint: Checkpoint) -> str:
    if checkpoint.error:
        return checkpoint.error
    if checkpoint.gguf.error:
        return f"{checkpoint.where}{checkpoint.gguf.name} {checkpoint.gguf.error}"
    if CONFIG_NAME in checkpoint.unusable:
        return f"{checkpoint.where}{CONFIG_NAME} {checkpoint.unusable[CONFIG_NAME]}"
    return f"no {CONFIG_NAME} under {checkpoint.where}"
