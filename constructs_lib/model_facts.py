"""The model-facts record: what synth knows about a Hub model, kept in ``model-facts.json`` beside cdk.json.

The way CDK keeps its lookups in ``cdk.context.json``: the record holds, for each ``repo_id@revision``, the commit
SHA the revision pointed at, config.json (or, for llama.cpp, the GGUF header) and every file's name and size, never
the weights. Synth reads it (``FactsSource``) and needs no network; a floating revision is pinned to the recorded
SHA. A model the record lacks is looked up by the ``lookup`` the app hands the source, then recorded: this app's
is the Hub's (``llmops.facts.hub_lookup``, wired in app.py); without one the deploy preflight checks the model.
``python -m llmops.facts`` refreshes, shows and records entries (from the Hub or a local snapshot).

The record is input like any other: a malformed one fails synth naming the file, never a traceback.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import safejson
from preflight import select_weight_files
from preflight.gguf import GgufHeader, select_gguf

from .names import SHA, repo_id_problem, revision_problem

RECORD = "model-facts.json"
METADATA_KEY = "LlmOps::ModelFacts"  # the template's Metadata entry: what synth checked (llmops.summary reads it)
SCHEMA = 1
REFRESH = "python -m llmops.facts refresh"
HEADER = (
    "Model facts cdk synth looked up on the Hugging Face Hub (commit SHA, config.json, file sizes), read back by "
    f"every later synth so that it needs no network. Commit this file. To look up again: {REFRESH} (make facts)."
)
# The fields every entry holds as non-empty text, in the record's order.
TEXT_FIELDS = ("repo_id", "revision", "sha", "looked_up", "endpoint")


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
        text: dict[str, str] = {}
        for name in TEXT_FIELDS:
            value = raw.get(name)
            if not isinstance(value, str) or not value:
                raise bad(f"has no {name}")
            text[name] = value
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
        return cls(config=raw["config"], files=dict(files), gguf=gguf, **text)


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


@dataclass(frozen=True)
class Known:
    """What synth knows: the facts and where they came from, or why there are none."""

    facts: ModelFacts | None
    origin: str  # "recorded in model-facts.json (looked up ...)" or "looked up on the Hub now, recorded in ..."
    missing: str | None = None  # why there are no facts


class FactsUnavailable(Exception):
    """A lookup has no answer. The message ends the sentence "<model> is not in <record> and ...", such as
    "HF_HUB_OFFLINE is set" or "the Hub did not answer (...)"."""


class FactsLookup(Protocol):
    """How a source finds the facts of a model its record lacks (``llmops.facts.hub_lookup`` asks the Hub).

    gguf: llama.cpp serves the model: the facts hold the header of the GGUF model ``gguf_file`` names (else the
    first one) instead of config.json. Raises FactsUnavailable when there is no answer."""

    def __call__(self, repo_id: str, revision: str, *, gguf: bool, gguf_file: str | None) -> ModelFacts: ...


@dataclass(frozen=True)
class FactsSource:
    """The facts synth checks a model with: the record at ``path``, and ``lookup`` (then recorded) for a model it
    lacks.

    path: a str is taken as a path (``FactsSource("model-facts.json")``). lookup: Default: none, so a model the
    record lacks is checked by the deploy preflight, and the synth summary says so."""

    path: Path
    lookup: FactsLookup | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        if isinstance(self.lookup, bool):  # 0.2.0's flag: True asked the Hub, False did not
            # The Hub client is the command package's, and the library imports nothing of it (no loop, even inside a
            # function): True now looks nothing up, and says how to ask the Hub. A model the record lacks is then
            # checked by the deploy preflight, as the synth summary says.
            warnings.warn(
                "FactsSource(lookup=True/False) is deprecated and looks nothing up: pass "
                "lookup=llmops.facts.hub_lookup to ask the Hub, or leave it out for no lookup",
                DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "lookup", None)

    def facts_for(self, repo_id: str, revision: str, *, gguf: bool = False, gguf_file: str | None = None) -> Known:
        """gguf: llama.cpp serves the model (``gguf_file`` names it): the record must hold that GGUF's header."""
        record = FactsRecord.load(self.path)  # FactsError: synth fails naming the file
        found = record.find(repo_id, revision)
        if found is not None and gguf and not found.serves(gguf_file):
            found = None  # recorded for another engine or another GGUF file: look it up again
        if found is not None:
            return Known(found, f"recorded in {self.path.name} (looked up {found.looked_up})")
        missing = f"{repo_id}@{revision} is not in {self.path.name}"
        if self.lookup is None:
            return Known(None, "", f"{missing} and lookups are off")
        try:
            facts = self.lookup(repo_id, revision, gguf=gguf, gguf_file=gguf_file)
        except FactsUnavailable as e:
            return Known(None, "", f"{missing} and {e}")
        record.put(facts)
        try:
            record.save()
        except OSError as e:
            return Known(facts, f"looked up on the Hub now (not recorded: {e})")
        return Known(facts, f"looked up on the Hub now and recorded in {self.path.name}")
