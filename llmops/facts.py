"""What synth knows about the model: a Hub lookup recorded in ``model-facts.json``, committed with the app.

    python -m llmops.facts refresh [-c key=value ...] [--context-file cdk.json]   # look up again, record
    python -m llmops.facts show                                                  # what is recorded
    python -m llmops.facts record DIR --model-id ORG/NAME [--sha SHA]            # from a local snapshot

The way CDK records its lookups in ``cdk.context.json``: when the model comes from the Hub (``model_id``, no
``model_s3_uri``), ``cdk synth`` (app.py) reads ``model-facts.json`` beside cdk.json; when it holds no entry for
``model_id@revision`` it looks the model up on the Hub once with ``huggingface_hub`` (the revision's commit
SHA, config.json, every file's name and size; no weights) and writes the entry. The next synth reads the
record and needs no network: the same synth every time, and ``revision=main`` pinned to the recorded SHA.
``refresh`` looks every configured model up again (a new commit on ``main``; a gated model with a token): with
a ``deployments`` map (or ``deployments_file``) every deployment's model, as synth checks each of them. The
token comes from ``$HF_TOKEN`` at synth; ``refresh`` also reads ``hf_token_secret_arn`` as ``plan`` does.
``HF_HUB_OFFLINE=1`` (huggingface_hub's switch) stops synth from looking anything up. With neither a record
nor the Hub, synth still succeeds and its summary says that fit was not checked.

The record is input like any other: a malformed one fails synth naming the file, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import safejson
from constructs_lib.names import SHA, repo_id_problem, revision_problem
from preflight import select_weight_files
from preflight.gguf import GgufError, GgufHeader, read_header, select_gguf

RECORD = "model-facts.json"
METADATA_KEY = "LlmOps::ModelFacts"  # the template's Metadata entry: what synth checked (llmops.summary reads it)
SCHEMA = 1
LOOKUP_TIMEOUT_S = 10.0
REFRESH = "python -m llmops.facts refresh"
HEADER = (
    "Model facts cdk synth looked up on the Hugging Face Hub (commit SHA, config.json, file sizes), read back by "
    f"every later synth so that it needs no network. Commit this file. To look up again: {REFRESH} (make facts)."
)
# Synth reads the token from the environment only; refresh also reads the deployment's secret.
SYNTH_TOKEN_HINT = f"HF_TOKEN in the environment: synth reads no secret, {REFRESH} also reads hf_token_secret_arn"
OFFLINE_VALUES = {"1", "true", "yes", "on"}  # huggingface_hub's constants._is_true


class FactsError(ValueError):
    """The record cannot be used; the message names the file and what to do."""


@dataclass(frozen=True)
class ModelFacts:
    repo_id: str
    revision: str  # as configured (a branch, tag or SHA)
    sha: str  # the commit it pointed at when looked up
    config: dict[str, Any]
    files: dict[str, int]  # every file of that commit, with its size
    looked_up: str  # ISO date and time (UTC)
    endpoint: str
    # llama.cpp: the GGUF model's header (file, version, tensor_count, header_bytes, parameter_count, metadata
    # without its long arrays), read by range requests; None for a config.json checkpoint.
    gguf: dict[str, Any] | None = None

    @property
    def weight_bytes(self) -> int:
        if self.gguf is not None:  # llama.cpp loads one GGUF model: its parts, nothing else
            _, parts = select_gguf(self.files, self.gguf["file"])
            return sum(self.files[p] for p in parts)
        return select_weight_files(self.files).total_bytes

    def gguf_header(self) -> GgufHeader | None:
        if self.gguf is None:
            return None
        g = self.gguf
        return GgufHeader(g["version"], g["tensor_count"], g["metadata"], g["header_bytes"], g["parameter_count"])

    def describes(self, repo_id: str, revision: str) -> bool:
        """Whether these facts are those of ``repo_id@revision``: the same repository, and the same revision or
        (a pinned SHA) the commit they were looked up at."""
        return self.repo_id == repo_id and revision in (self.revision, self.sha)

    def serves(self, gguf_file: str | None) -> bool:
        """Whether the recorded GGUF model is the one ``gguf_file`` names (as the serving adapter chooses)."""
        return self.gguf is not None and select_gguf(self.files, gguf_file)[0] == self.gguf["file"]

    def to_json(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "revision": self.revision,
            "sha": self.sha,
            "looked_up": self.looked_up,
            "endpoint": self.endpoint,
            "config": self.config,
            "files": dict(sorted(self.files.items())),
            **({"gguf": self.gguf} if self.gguf is not None else {}),
        }

    @classmethod
    def from_json(cls, key: str, raw: Any, where: str) -> ModelFacts:
        def bad(why: str) -> FactsError:
            return FactsError(f"{where}: entry {key!r} {why}; run {REFRESH} (or delete the entry)")

        if not isinstance(raw, dict):
            raise bad("is not an object")
        text = {k: raw.get(k) for k in ("repo_id", "revision", "sha", "looked_up", "endpoint")}
        for name, value in text.items():
            if not isinstance(value, str) or not value:
                raise bad(f"has no {name}")
        if not SHA.fullmatch(text["sha"]):
            raise bad(f"has sha={text['sha']!r}, not a 40-character commit SHA")
        # The key is what synth looks up, the fields are what it stages: a record whose fields say another
        # repository or revision than its key would stage that (or pin the key's model to a foreign commit).
        for name, check in (("repo_id", repo_id_problem), ("revision", revision_problem)):
            if problem := check(text[name]):
                raise bad(f"has {name}={text[name]!r}: {problem}")
        if record_key(text["repo_id"], text["revision"]) != key:
            raise bad(
                f"says repo_id={text['repo_id']!r} revision={text['revision']!r}, which is not its key "
                f"(an entry is keyed repo_id@revision, exactly)"
            )
        if SHA.fullmatch(text["revision"]) and text["sha"] != text["revision"]:
            raise bad(f"pins revision {text['revision']!r} to another commit sha={text['sha']!r}")
        if not isinstance(raw.get("config"), dict):
            raise bad("has no config object")
        files = raw.get("files")
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in files.items()
        ):
            raise bad("has no files object of name -> size in bytes")
        gguf = raw.get("gguf")
        if gguf is not None and not (
            isinstance(gguf, dict)
            and isinstance(gguf.get("file"), str)
            and gguf["file"] in files
            and isinstance(gguf.get("metadata"), dict)
            and all(isinstance(gguf.get(k), int) for k in ("version", "tensor_count", "header_bytes"))
            and (gguf.get("parameter_count") is None or isinstance(gguf["parameter_count"], int))
        ):
            raise bad("has a gguf entry without file (one of its files), metadata, version, tensor_count")
        return cls(config=raw["config"], files=dict(files), gguf=gguf, **text)  # type: ignore[arg-type]


def record_key(repo_id: str, revision: str) -> str:
    return f"{repo_id}@{revision}"


@dataclass
class FactsRecord:
    """``model-facts.json``: entries by ``repo_id@revision``."""

    path: Path
    entries: dict[str, ModelFacts] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> FactsRecord:
        if not path.exists():
            return cls(path)
        try:
            raw = safejson.loads(path.read_bytes(), source=str(path))
        except OSError as e:
            raise FactsError(f"{path}: not readable ({e}); run {REFRESH} or delete it") from None
        except safejson.JsonError as e:  # names the file
            raise FactsError(f"{e.source}: not readable as JSON: {e.why}; run {REFRESH} or delete it") from None
        if not isinstance(raw, dict) or raw.get("schema") != SCHEMA or not isinstance(raw.get("models"), dict):
            raise FactsError(f"{path}: not a model facts record (schema {SCHEMA}); run {REFRESH} or delete it")
        entries = {key: ModelFacts.from_json(key, value, str(path)) for key, value in raw["models"].items()}
        return cls(path, entries)

    def find(self, repo_id: str, revision: str) -> ModelFacts | None:
        """The entry for exactly this repository and revision (case-sensitive: the Hub's names are); for a pinned
        SHA also an entry of the same repository some branch was recorded at that commit. Never by SHA alone."""
        found = self.entries.get(record_key(repo_id, revision))
        if found is None and SHA.fullmatch(revision):  # a pinned SHA some branch was recorded at
            found = next((f for f in self.entries.values() if f.repo_id == repo_id and f.sha == revision), None)
        if found is not None and not found.describes(repo_id, revision):  # load() refuses such entries
            return None
        return found

    def put(self, facts: ModelFacts) -> None:
        self.entries[record_key(facts.repo_id, facts.revision)] = facts

    def save(self) -> None:
        document = {
            "//": HEADER,
            "schema": SCHEMA,
            "models": {key: self.entries[key].to_json() for key in sorted(self.entries)},
        }
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        temporary.replace(self.path)  # a reader never sees half a record


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


# What a local snapshot's walk leaves out: git's and huggingface_hub's own bookkeeping, not the model's files.
SNAPSHOT_SKIPPED = (".git", ".cache", ".huggingface")
SAFETENSORS_INDEX = "model.safetensors.index.json"


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


@dataclass(frozen=True)
class Known:
    """What synth knows: the facts and where they came from, or why there are none."""

    facts: ModelFacts | None
    origin: str  # "recorded in model-facts.json (looked up ...)" or "looked up on the Hub now, recorded in ..."
    missing: str | None = None  # why there are no facts


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in OFFLINE_VALUES


@dataclass(frozen=True)
class FactsSource:
    """The step app.py runs: the record at ``path``, and a Hub lookup (recorded) when it lacks the model."""

    path: Path  # a str is taken as a path (a library user's FactsSource("model-facts.json"))
    lookup: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def facts_for(self, repo_id: str, revision: str, *, gguf: bool = False, gguf_file: str | None = None) -> Known:
        """gguf: llama.cpp serves the model (``gguf_file`` names it): the record must hold that GGUF's header."""
        record = FactsRecord.load(self.path)  # FactsError: synth fails naming the file
        found = record.find(repo_id, revision)
        if found is not None and gguf and not found.serves(gguf_file):
            found = None  # recorded for another engine or another GGUF file: look it up again
        if found is not None:
            return Known(found, f"recorded in {self.path.name} (looked up {found.looked_up})")
        if not self.lookup or offline():
            why = "HF_HUB_OFFLINE is set" if self.lookup else "lookups are off"
            return Known(None, "", f"{repo_id}@{revision} is not in {self.path.name} and {why}")
        from llmops.hub import HubError

        try:
            token = os.environ.get("HF_TOKEN") or None
            facts = look_up(repo_id, revision, token=token, gguf=gguf, gguf_file=gguf_file, token_hint=SYNTH_TOKEN_HINT)
        except HubError as e:
            return Known(None, "", f"{repo_id}@{revision} is not in {self.path.name} and the Hub did not answer ({e})")
        record.put(facts)
        try:
            record.save()
        except OSError as e:
            return Known(facts, f"looked up on the Hub now (not recorded: {e})")
        return Known(facts, f"looked up on the Hub now and recorded in {self.path.name}")


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
