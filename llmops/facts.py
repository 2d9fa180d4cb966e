"""The model-facts record's commands, and the Hub lookup synth makes for a model the record lacks.

    python -m llmops.facts refresh [-c key=value ...] [--context-file cdk.json]   # look up again, record
    python -m llmops.facts show                                                  # what is recorded
    python -m llmops.facts record DIR --model-id ORG/NAME [--sha SHA]            # from a local snapshot

The way CDK records its lookups in ``cdk.context.json``: when the model comes from the Hub (``model_id``, no
``model_s3_uri``), ``cdk synth`` (app.py) reads ``model-facts.json`` beside cdk.json (the record:
constructs_lib/model_facts.py); when it holds no entry for ``model_id@revision``, the lookup app.py hands it
(``hub_lookup``) asks the Hub once with ``huggingface_hub`` (the revision's commit SHA, config.json, every file's
name and size; no weights) and the entry is written. The next synth reads the record and needs no network: the
same synth every time, and ``revision=main`` pinned to the recorded SHA. ``refresh`` looks every configured model
up again (a new commit on ``main``; a gated model with a token): with a ``deployments`` map (or
``deployments_file``) every deployment's model, as synth checks each of them. The token comes from ``$HF_TOKEN``
at synth; ``refresh`` also reads ``hf_token_secret_arn`` as ``plan`` does. ``HF_HUB_OFFLINE=1``
(huggingface_hub's switch) stops synth from looking anything up. With neither a record nor the Hub, synth still
succeeds and its summary says that fit was not checked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import safejson
from constructs_lib import model_facts
from constructs_lib.model_facts import METADATA_KEY as METADATA_KEY  # llmops.summary reads it from here
from constructs_lib.model_facts import (
    RECORD,
    REFRESH,
    FactsError,
    FactsRecord,
    FactsUnavailable,
    ModelFacts,
    record_key,
)
from constructs_lib.rules import SHA, repo_id_problem, revision_problem
from preflight.gguf import GgufError, GgufHeader, read_header, select_gguf
from preflight.weights import SAFETENSORS_INDEX

LOOKUP_TIMEOUT_S = 10.0
# Synth reads the token from the environment only; refresh also reads the deployment's secret.
SYNTH_TOKEN_HINT = f"HF_TOKEN in the environment: synth reads no secret, {REFRESH} also reads hf_token_secret_arn"
OFFLINE_VALUES = {"1", "true", "yes", "on"}  # huggingface_hub's constants._is_true


def _json_safe(metadata: dict[str, Any]) -> dict[str, Any]:
    """The header's metadata without the arrays read_header skipped (ArrayInfo: tokenizer vocabularies)."""
    safe = {}
    for key, value in metadata.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        safe[key] = value
    return safe


def _gguf_entry(name: str, header: GgufHeader) -> dict[str, Any]:
    """The record's ``gguf`` entry: the file whose header was read, and that header."""
    return {
        "file": name,
        "version": header.version,
        "tensor_count": header.tensor_count,
        "header_bytes": header.header_bytes,
        "parameter_count": header.parameter_count,
        "metadata": _json_safe(header.metadata),
    }


def look_up(
    repo_id: str,
    revision: str,
    *,
    token: str | None = None,
    timeout: float = LOOKUP_TIMEOUT_S,
    gguf: bool = False,
    gguf_file: str | None = None,
    token_hint: str | None = None,
) -> ModelFacts:
    """The Hub's answer for ``repo_id@revision``; ``llmops.hub.HubError`` (one line) when it has none.

    gguf: llama.cpp serves the model: record the header of the GGUF model ``gguf_file`` names (else the first
    one), read by range requests, instead of config.json. token_hint: where a token comes from, for the Hub's
    errors. Default: the context key hf_token_secret_arn (as refresh takes it)."""
    from llmops.hub import CONTEXT_TOKEN_HINT, HubError, endpoint, fetch_files, fetch_model, gguf_reader

    hint = token_hint or CONTEXT_TOKEN_HINT
    found: dict[str, Any] | None = None
    if not gguf:
        model = fetch_model(repo_id, revision, token=token, timeout=timeout, token_hint=hint)
        sha, config, files = model.sha, model.config, model.sizes
    else:
        sha, files = fetch_files(repo_id, revision, token=token, timeout=timeout, token_hint=hint)
        name, _ = select_gguf(files, gguf_file)
        if name is None:
            named = f" matching gguf_file={gguf_file!r}" if gguf_file else ""
            raise HubError(f"{repo_id}@{sha[:12]} has no .gguf file{named}")
        try:
            header = read_header(gguf_reader(repo_id, sha, name, token=token, timeout=timeout, token_hint=hint))
        except GgufError as e:
            raise HubError(f"{repo_id}@{sha[:12]}/{name} is not a GGUF file llama.cpp can load: {e}") from None
        found = _gguf_entry(name, header)
        config = {}
    return ModelFacts(
        repo_id=repo_id,
        revision=revision,
        sha=sha,
        config=config,
        files=files,
        looked_up=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        endpoint=endpoint() or "https://huggingface.co",
        gguf=found,
    )


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in OFFLINE_VALUES


def hub_lookup(repo_id: str, revision: str, *, gguf: bool = False, gguf_file: str | None = None) -> ModelFacts:
    """The lookup synth makes for a model the record lacks (a ``FactsLookup``; app.py hands it to its
    FactsSource): the Hub, with ``$HF_TOKEN`` as the only token (synth reads no secret). FactsUnavailable when
    ``HF_HUB_OFFLINE`` is set or the Hub does not answer."""
    from llmops.hub import HubError

    if offline():
        raise FactsUnavailable("HF_HUB_OFFLINE is set")
    try:
        token = os.environ.get("HF_TOKEN") or None
        return look_up(repo_id, revision, token=token, gguf=gguf, gguf_file=gguf_file, token_hint=SYNTH_TOKEN_HINT)
    except HubError as e:
        raise FactsUnavailable(f"the Hub did not answer ({e})") from None


# What a local snapshot's walk leaves out: git's and huggingface_hub's own bookkeeping, not the model's files.
SNAPSHOT_SKIPPED = (".git", ".cache", ".huggingface")


def from_snapshot(
    folder: Path,
    repo_id: str,
    revision: str,
    *,
    sha: str | None = None,
    gguf: bool = False,
    gguf_file: str | None = None,
) -> ModelFacts:
    """The facts of ``repo_id@revision`` from a local copy instead of the Hub (a CI without network): the folder's
    config.json (or, for llama.cpp, the header of the GGUF model ``gguf_file`` names, read from the file) and every
    file with its size. A snapshot may hold config.json and the safetensors index without the shards: each shard
    the index names and the folder lacks gets its share of the index's ``metadata.total_size`` (the tensors'
    bytes; the first shards take the remainder). ``sha``: the commit the copy is of; default: ``revision`` when it
    is one, else the folder's name when it is one (huggingface_hub's ``snapshots/<sha>/``). FactsError naming the
    folder when it cannot answer."""
    folder = Path(folder)

    def bad(why: str) -> FactsError:
        return FactsError(f"{folder}: {why}")

    if not folder.is_dir():
        raise bad("not a folder")
    for name, check in (("model_id", repo_id_problem), ("revision", revision_problem)):
        if problem := check(repo_id if name == "model_id" else revision):
            raise bad(f"{name}: {problem}")
    sha = sha or next((c for c in (revision, folder.name) if SHA.fullmatch(c)), None)
    if sha is None or not SHA.fullmatch(sha):
        raise bad(f"give --sha: the 40-character commit SHA this copy of {repo_id}@{revision} is of")
    if SHA.fullmatch(revision) and sha != revision:
        raise bad(f"sha={sha!r} is not the commit revision={revision!r} names")
    files: dict[str, int] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if relative.parts[0] in SNAPSHOT_SKIPPED or not path.is_file():  # is_file follows huggingface_hub's links
            continue
        files[relative.as_posix()] = _snapshot_size(path)
    found: dict[str, Any] | None = None
    if gguf:
        name, _ = select_gguf(files, gguf_file)
        if name is None:
            raise bad("has no .gguf file" + (f" matching gguf_file={gguf_file!r}" if gguf_file else ""))
        with (folder / name).open("rb") as handle:

            def read_at(offset: int, length: int) -> bytes:
                handle.seek(offset)
                return handle.read(length)

            try:
                header = read_header(read_at)
            except GgufError as e:
                raise bad(f"{name} is not a GGUF file llama.cpp can load: {e}") from None
        found = _gguf_entry(name, header)
        config: dict[str, Any] = {}
    else:
        config = _snapshot_json(folder, "config.json", bad)
        if SAFETENSORS_INDEX in files:
            files.update(_shards_from_index(_snapshot_json(folder, SAFETENSORS_INDEX, bad), files, bad))
    facts = ModelFacts(
        repo_id=repo_id,
        revision=revision,
        sha=sha,
        config=config,
        files=files,
        looked_up=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        endpoint=f"local snapshot {folder.name}",
        gguf=found,
    )
    if not facts.weight_bytes:  # nothing to check the fit with: a record saying 0 bytes would pass every check
        raise bad("holds no weights and no safetensors index naming them (config.json alone cannot be sized)")
    return facts


# A Git LFS pointer (a clone with GIT_LFS_SKIP_SMUDGE=1): "version <spec>", "oid sha256:<hex>", "size <bytes>"
# (git-lfs docs/spec.md), small text standing for the real file.
LFS_SPEC = b"version https://git-lfs.github.com/spec/v1\n"
LFS_POINTER_MAX = 1024  # bytes: the spec's pointers are under 200


def _snapshot_size(path: Path) -> int:
    """The size of the file ``path`` stands for: its own, or the one a Git LFS pointer names."""
    size = path.stat().st_size
    if size > LFS_POINTER_MAX:
        return size
    text = path.read_bytes()
    if not text.startswith(LFS_SPEC):
        return size
    sizes = [line[5:] for line in text.split(b"\n") if line.startswith(b"size ")]
    return int(sizes[0]) if len(sizes) == 1 and sizes[0].isdigit() else size


def _snapshot_json(folder: Path, name: str, bad: Any) -> dict[str, Any]:
    try:
        raw = safejson.loads((folder / name).read_bytes(), source=str(folder / name))
    except OSError:
        raise bad(f"has no readable {name}") from None
    except safejson.JsonError as e:
        raise bad(f"{name} is not valid JSON ({e.why})") from None
    if not isinstance(raw, dict):
        raise bad(f"{name} is not a JSON object")
    return raw


def _shards_from_index(index: dict[str, Any], present: dict[str, int], bad: Any) -> dict[str, int]:
    """The sizes of the shards the index names and the folder lacks: the index's total_size, less the shards that
    are there, shared out over the missing ones (whole bytes, the first ones one more)."""
    weight_map, total = index.get("weight_map"), (index.get("metadata") or {}).get("total_size")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise bad(f"{SAFETENSORS_INDEX} has no weight_map of tensor -> shard file")
    missing = sorted({shard for shard in weight_map.values() if shard not in present})
    if not missing:
        return {}
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise bad(f"{SAFETENSORS_INDEX} has no metadata.total_size for the shards the folder lacks")
    left = max(0, total - sum(present[shard] for shard in set(weight_map.values()) if shard in present))
    share, extra = divmod(left, len(missing))
    return {shard: share + (1 if i < extra else 0) for i, shard in enumerate(missing)}


class FactsSource(model_facts.FactsSource):
    """Deprecated: ``constructs_lib.deployment.FactsSource(path, lookup=hub_lookup)``, which this makes
    (``lookup=False``: no lookup)."""

    def __init__(self, path: Path | str, lookup: bool = True) -> None:
        warnings.warn(
            "llmops.facts.FactsSource is deprecated: use constructs_lib.deployment.FactsSource(path, "
            "lookup=llmops.facts.hub_lookup)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(Path(path), hub_lookup if lookup else None)


# -- command -------------------------------------------------------------------------------------------


def _configured_models(args: argparse.Namespace) -> list[tuple[str, str, str | None, bool, str | None]] | int:
    """(model_id, revision, hf_token_secret_arn, gguf, gguf_file) of every deployment the context describes (each
    of a fleet's, with its merged keys; one entry per model), in order; 2 on bad input."""
    from llmops.context import load_configs

    configs = load_configs(args.context, args.context_file)
    if isinstance(configs, int):
        return configs
    models: list[tuple[str, str, str | None, bool, str | None]] = []
    for name, config in configs.items():
        if config.model_s3_uri:
            who = f"deployments.{name}." if name is not None else ""
            print(f"{who}model_s3_uri={config.model_s3_uri!r}: the model is an S3 prefix, no Hub facts to record")
            continue
        gguf = config.engine_spec.model_format == "gguf"
        model = (config.model_id, config.revision, config.hf_token_secret_arn, gguf, config.gguf_file)
        if model not in models:
            models.append(model)
    return models


def _refresh(args: argparse.Namespace) -> int:
    from llmops.hub import HubError, read_token

    models = _configured_models(args)
    if isinstance(models, int):
        return models
    try:
        record = FactsRecord.load(args.record)
    except FactsError as e:
        print(f"note: {e}; starting a new record", file=sys.stderr)
        record = FactsRecord(args.record)
    for repo_id, revision, secret_arn, gguf, gguf_file in models:
        try:
            token = read_token(secret_arn)
            # look_up's own hint names the context key (refresh takes it, not plan's flag)
            facts = look_up(repo_id, revision, token=token, gguf=gguf, gguf_file=gguf_file)
        except HubError as e:
            print(f"error: {e}", file=sys.stderr)
            return 3
        old = record.find(repo_id, revision)
        record.put(facts)
        moved = "" if old is None or old.sha == facts.sha else f" (was {old.sha[:12]})"
        print(
            f"{record_key(repo_id, revision)}: commit {facts.sha}{moved}, {len(facts.files)} files, "
            f"{facts.weight_bytes:,} bytes of weights"
        )
    record.save()
    print(f"recorded in {args.record}: commit it with the app")
    return 0


def _show(args: argparse.Namespace) -> int:
    try:
        record = FactsRecord.load(args.record)
    except FactsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not record.entries:
        print(f"{args.record}: no model facts recorded")
    for key, facts in sorted(record.entries.items()):
        print(f"{key}: commit {facts.sha}, {facts.weight_bytes:,} bytes of weights, looked up {facts.looked_up}")
    return 0


def _record_snapshot(args: argparse.Namespace) -> int:
    """``record DIR --model-id ID``: the facts from a local copy, recorded as a lookup would record them."""
    if args.folder is None or not args.model_id:
        print("error: record needs the snapshot folder and --model-id (and --sha unless the folder is named by it)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        facts = from_snapshot(
            args.folder, args.model_id, args.revision, sha=args.sha, gguf=args.gguf or args.gguf_file is not None,
            gguf_file=args.gguf_file,
        )  # fmt: skip
        try:
            record = FactsRecord.load(args.record)
        except FactsError as e:
            print(f"note: {e}; starting a new record", file=sys.stderr)
            record = FactsRecord(args.record)
    except FactsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    record.put(facts)
    record.save()
    print(
        f"{record_key(facts.repo_id, facts.revision)}: commit {facts.sha} from {args.folder}, {len(facts.files)} "
        f"files, {facts.weight_bytes:,} bytes of weights; recorded in {args.record}: commit it with the app"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from llmops.context import add_context_arguments

    parser = argparse.ArgumentParser(prog="python -m llmops.facts", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "action",
        choices=("refresh", "show", "record"),
        help="refresh: look up and record; show: print; record: from a local snapshot folder, without the Hub",
    )
    parser.add_argument("folder", nargs="?", type=Path, help="record: the snapshot (config.json, index or GGUF)")
    add_context_arguments(parser)
    parser.add_argument("--record", type=Path, default=Path(RECORD), help=f"the record. Default: ./{RECORD}")
    parser.add_argument("--model-id", help="record: the Hub repository id the snapshot is of (as model_id)")
    parser.add_argument("--revision", default="main", help="record: the revision synth names. Default: main")
    parser.add_argument("--sha", help="record: the commit of the snapshot. Default: the revision or folder name")
    parser.add_argument("--gguf", action="store_true", help="record: llama.cpp serves it: read a GGUF header")
    parser.add_argument("--gguf-file", help="record: llama.cpp's model file (as gguf_file; implies --gguf)")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    return {"refresh": _refresh, "show": _show, "record": _record_snapshot}[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
