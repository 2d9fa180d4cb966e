"""A tampered ``model-facts.json``: an entry whose own fields disagree with its key is refused naming the key, and
no lookup (synth, plan, refresh) ever hands one model's or revision's facts to another.

Every lookup keyed by more than one field (repository and revision; repository and commit for a pinned SHA) is
tried with records that share all but one field, and with case differences.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from app import build_app
from constructs_lib.deployment.config import DeploymentConfig
from constructs_lib.deployment.model_checks import check_deployment
from constructs_lib.model_facts import FactsError, FactsRecord, FactsSource, Known, ModelFacts
from tests.conftest import context_with
from tests.fakes.hub_models import LLAMA_31_8B

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
OTHER = "attacker/Llama-3.1-8B-Instruct"
MAIN_SHA = "a" * 40
DEV_SHA = "b" * 40
OTHER_SHA = "c" * 40
EVIL_SHA = "e" * 40
FITS = {"model_id": LLAMA, "instance_type": "ml.g6e.2xlarge", "max_model_len": "32768"}


def facts(repo_id: str = LLAMA, revision: str = "main", sha: str = MAIN_SHA) -> ModelFacts:
    return ModelFacts(
        repo_id=repo_id,
        revision=revision,
        sha=sha,
        config=LLAMA_31_8B,
        files={"config.json": 900, "model.safetensors": 16_060_522_496},
        looked_up="2026-01-01T00:00:00Z",
        endpoint="https://huggingface.co",
    )


def write(path, entries: dict[str, dict]) -> None:
    path.write_text(json.dumps({"schema": 1, "models": entries}))


def synth_revision(record, **context) -> str:
    app = build_app(cdk.App(context=context_with(**{**FITS, **context})), facts=FactsSource(record))
    template = app.synth().stacks[0].template
    (checkpoint,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::StagedCheckpoint"]
    return checkpoint["Properties"]["Revision"]


def test_an_honest_record_pins_main_to_its_commit(tmp_path):
    record = tmp_path / "model-facts.json"
    write(record, {f"{LLAMA}@main": facts().to_json()})
    assert synth_revision(record) == MAIN_SHA


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repo_id", OTHER),  # another repository
        ("repo_id", LLAMA.lower()),  # the same name in another case: the key is exact
        ("revision", "refs/pr/7"),  # another revision of the same repository
        ("revision", "Main"),
        ("revision", MAIN_SHA),  # a SHA revision under a branch's key
    ],
)
def test_an_entry_whose_fields_disagree_with_its_key_fails_synth_naming_the_key(tmp_path, field, value):
    record = tmp_path / "model-facts.json"
    entry = {**facts().to_json(), field: value, "sha": EVIL_SHA if field != "revision" or value != MAIN_SHA else value}
    write(record, {f"{LLAMA}@main": entry})
    with pytest.raises(FactsError) as refused:
        synth_revision(record)
    said = str(refused.value)
    assert f"entry '{LLAMA}@main'" in said and f"{field}={value!r}" in said and "which is not its key" in said
    assert str(record) in said and "python -m llmops.facts refresh" in said


def test_a_sha_revision_recorded_at_another_commit_is_refused(tmp_path):
    record = tmp_path / "model-facts.json"
    write(record, {f"{LLAMA}@{MAIN_SHA}": facts(revision=MAIN_SHA, sha=EVIL_SHA).to_json()})
    with pytest.raises(FactsError, match=f"entry '{LLAMA}@{MAIN_SHA}' pins revision '{MAIN_SHA}' to another commit"):
        FactsRecord.load(record)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("repo_id", "not a repo", "has repo_id='not a repo': expected"),
        ("revision", "main..x", "has revision='main..x': expected"),
    ],
)
def test_an_entry_with_an_invalid_name_is_refused(tmp_path, field, value, said):
    record = tmp_path / "model-facts.json"
    entry = {**facts().to_json(), field: value}
    key = f"{entry['repo_id']}@{entry['revision']}"
    write(record, {key: entry})
    with pytest.raises(FactsError, match=f"entry {key!r} {said}"):
        FactsRecord.load(record)


@pytest.fixture
def neighbours(tmp_path) -> FactsRecord:
    """Records that share all but one field: same repository other revision, same revision other repository."""
    record = FactsRecord(tmp_path / "model-facts.json")
    record.put(facts())
    record.put(facts(revision="dev", sha=DEV_SHA))
    record.put(facts(repo_id=OTHER, sha=OTHER_SHA))
    record.save()
    return FactsRecord.load(record.path)


@pytest.mark.parametrize(
    ("repo_id", "revision", "sha"),
    [
        (LLAMA, "main", MAIN_SHA),
        (LLAMA, "dev", DEV_SHA),  # same repository, other revision
        (OTHER, "main", OTHER_SHA),  # same revision, other repository
        (LLAMA, MAIN_SHA, MAIN_SHA),  # a pinned SHA: the same repository's entry recorded at it
        (LLAMA, DEV_SHA, DEV_SHA),
        (OTHER, OTHER_SHA, OTHER_SHA),
        (LLAMA.lower(), "main", None),  # case differs: another name
        (LLAMA.upper(), "main", None),
        (LLAMA, "MAIN", None),
        (LLAMA, "Dev", None),
        (LLAMA, "refs/pr/7", None),
        (LLAMA, OTHER_SHA, None),  # another repository's commit: never by SHA alone
        (OTHER, MAIN_SHA, None),
        (LLAMA, MAIN_SHA.upper(), None),  # not a SHA (git writes them in lower case)
        (LLAMA, EVIL_SHA, None),
        ("meta-llama/Llama-3.1-8B", "main", None),  # a prefix of the repository
        (LLAMA, "mai", None),
    ],
)
def test_the_lookup_matches_repository_and_revision_exactly(neighbours, repo_id, revision, sha):
    found = neighbours.find(repo_id, revision)
    assert (found and found.sha) == sha
    if found is not None:
        assert found.repo_id == repo_id and revision in (found.revision, found.sha)


def test_synth_stages_each_neighbours_own_commit(neighbours):
    assert synth_revision(neighbours.path) == MAIN_SHA
    assert synth_revision(neighbours.path, revision="dev") == DEV_SHA
    assert synth_revision(neighbours.path, revision=DEV_SHA) == DEV_SHA
    assert synth_revision(neighbours.path, model_id=OTHER) == OTHER_SHA


@pytest.mark.parametrize(
    ("repo_id", "revision", "sha"),
    [(OTHER, "main", EVIL_SHA), (LLAMA, "refs/pr/7", EVIL_SHA), (LLAMA.lower(), "main", EVIL_SHA)],
)
def test_facts_of_another_model_or_revision_never_pin_the_configured_one(repo_id, revision, sha):
    config = DeploymentConfig.from_context(context_with(**FITS))
    known = Known(facts(repo_id, revision, sha), "recorded in model-facts.json")
    pinned, status, problems = check_deployment(config, known)
    assert pinned.revision == "main" and not status.checked
    (problem,) = problems
    assert problem.startswith(f"model_id={LLAMA} revision=main: the model facts describe {repo_id}@{revision}")


def test_plan_refuses_a_tampered_record(tmp_path, capsys):
    from llmops.plan import main as plan_main

    record = tmp_path / "model-facts.json"
    write(record, {f"{LLAMA}@main": {**facts().to_json(), "repo_id": OTHER}})
    (tmp_path / "cdk.json").write_text(json.dumps({"app": "x", "context": FITS}))
    code = plan_main(["--context-file", str(tmp_path / "cdk.json")])
    assert code == 2
    assert f"entry '{LLAMA}@main' says repo_id={OTHER!r}" in capsys.readouterr().err
