"""``llmops.facts record DIR``: model facts from a local snapshot, so an offline CI checks fit at synth (issue 36)."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from app import build_app
from constructs_lib.deployment import ConfigError
from constructs_lib.model_facts import FactsError, FactsRecord, FactsSource
from llmops.facts import from_snapshot, hub_lookup
from llmops.facts import main as facts_main
from tests.conftest import context_with
from tests.fakes.hub_models import MISTRAL_SMALL_24B, MISTRAL_SMALL_24B_SHARDS

MISTRAL = "mistralai/Mistral-Small-24B-Instruct-2501"
SHA = "a" * 40


def index(shards: tuple[int, ...], total: int | None = None) -> dict:
    n = len(shards)
    names = [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    return {
        "metadata": {"total_size": sum(shards) if total is None else total},
        "weight_map": {f"layer.{i}.weight": name for i, name in enumerate(names)},
    }


def snapshot(folder, config=MISTRAL_SMALL_24B, shards=MISTRAL_SMALL_24B_SHARDS, present: int = 0, total=None):
    """A config-only copy (``huggingface-cli download ... config.json model.safetensors.index.json``), with the
    first ``present`` shards as files of their size."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors.index.json").write_text(json.dumps(index(shards, total)))
    for i in range(present):
        with (folder / f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors").open("wb") as f:
            f.truncate(shards[i])  # sparse: the size is what counts
    return folder


def test_a_config_only_snapshot_records_every_shard_the_index_names(tmp_path):
    facts = from_snapshot(snapshot(tmp_path / SHA), MISTRAL, "main")
    assert facts.sha == SHA  # huggingface_hub's snapshots/<sha>/ folder
    assert facts.config == MISTRAL_SMALL_24B
    shards = {k: v for k, v in facts.files.items() if k.endswith(".safetensors")}
    assert len(shards) == 10 and sum(shards.values()) == sum(MISTRAL_SMALL_24B_SHARDS)
    assert facts.weight_bytes == sum(MISTRAL_SMALL_24B_SHARDS)


@pytest.mark.parametrize(("total", "count", "expected"), [(10, 3, [4, 3, 3]), (11, 3, [4, 4, 3]), (2, 3, [1, 1, 0])])
def test_missing_shards_share_the_total_in_whole_bytes_the_first_ones_one_more(tmp_path, total, count, expected):
    folder = snapshot(tmp_path / "m", shards=(1,) * count, total=total)
    facts = from_snapshot(folder, MISTRAL, "main", sha=SHA)
    assert [facts.files[f"model-{i:05d}-of-{count:05d}.safetensors"] for i in range(1, count + 1)] == expected


def test_shards_that_are_there_keep_their_size_and_the_rest_share_what_is_left(tmp_path):
    folder = snapshot(tmp_path / "m", shards=(100, 100, 100), present=1, total=301)
    facts = from_snapshot(folder, MISTRAL, "main", sha=SHA)
    sizes = [facts.files[f"model-{i:05d}-of-00003.safetensors"] for i in (1, 2, 3)]
    assert sizes == [100, 101, 100] and facts.weight_bytes == 301


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"revision": "main", "sha": None, "folder": "plain"}, "give --sha"),
        ({"revision": "b" * 40, "sha": SHA}, "is not the commit revision="),
        ({"repo_id": "../x"}, "model_id:"),
        ({"no_config": True}, "has no readable config.json"),
        ({"bad_index": True}, "has no weight_map"),
        ({"no_total": True}, "has no metadata.total_size"),
    ],
)
def test_a_snapshot_that_cannot_answer_is_refused_naming_the_folder(tmp_path, change, message):
    folder = snapshot(tmp_path / change.get("folder", SHA))
    if change.get("no_config"):
        (folder / "config.json").unlink()
    if change.get("bad_index"):
        (folder / "model.safetensors.index.json").write_text('{"weight_map": [1]}')
    if change.get("no_total"):
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "x.safetensors"}}))
    with pytest.raises(FactsError, match=message) as info:
        from_snapshot(folder, change.get("repo_id", MISTRAL), change.get("revision", "main"), sha=change.get("sha"))
    assert str(info.value).startswith(str(folder))


def test_recorded_from_a_snapshot_synth_refuses_what_does_not_fit_with_no_hub(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # an offline CI: no lookup may happen
    record = tmp_path / "model-facts.json"
    folder = snapshot(tmp_path / "mistral" / SHA)
    assert facts_main(["record", str(folder), "--model-id", MISTRAL, "--record", str(record)]) == 0
    out = capsys.readouterr().out
    assert f"{MISTRAL}@main: commit {SHA} from {folder}, " in out and "47,148,027,768 bytes of weights" in out
    assert FactsRecord.load(record).find(MISTRAL, "main").endpoint == f"local snapshot {SHA}"
    context = context_with(model_id=MISTRAL, instance_type="ml.g6e.2xlarge", max_model_len="8192")
    with pytest.raises(ConfigError) as refused:
        build_app(cdk.App(context=context), facts=FactsSource(record, lookup=hub_lookup))
    assert any("weights do not fit: 43.91 GiB of weights" in p for p in refused.value.problems)


def test_a_gguf_snapshot_records_its_header_read_from_the_file(tmp_path, capsys):
    from tests.preflight.test_gguf_header import qwen36_like

    folder = tmp_path / "gguf"
    folder.mkdir()
    model = qwen36_like(folder)
    (folder / ".cache").mkdir()
    (folder / ".cache" / "junk.gguf").write_bytes(b"x")  # huggingface_hub's bookkeeping is not the model's
    record = tmp_path / "model-facts.json"
    argv = ["record", str(folder), "--model-id", "acme/Q-GGUF", "--sha", SHA, "--gguf-file", model.name]
    assert facts_main([*argv, "--record", str(record)]) == 0
    facts = FactsRecord.load(record).find("acme/Q-GGUF", "main")
    assert facts.gguf["file"] == model.name and facts.gguf["metadata"]["qwen35moe.context_length"] == 262144
    assert list(facts.files) == [model.name] and facts.weight_bytes == model.stat().st_size
    (folder / model.name).write_bytes(b"not a gguf")
    assert facts_main([*argv, "--record", str(record)]) == 2
    assert "is not a GGUF file llama.cpp can load" in capsys.readouterr().err


def test_record_without_a_folder_or_model_id_says_what_it_needs(capsys):
    assert facts_main(["record"]) == 2
    assert "record needs the snapshot folder and --model-id" in capsys.readouterr().err


def test_git_lfs_pointers_stand_for_the_files_they_name(tmp_path):
    # A clone with GIT_LFS_SKIP_SMUDGE=1 keeps ~130-byte pointers where the shards are (git-lfs spec).
    folder = snapshot(tmp_path / "m", shards=(5_000_000_000, 4_000_000_000), total=1)
    for i, size in enumerate((5_000_000_000, 4_000_000_000), 1):
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{'ab' * 32}\nsize {size}\n"
        (folder / f"model-{i:05d}-of-00002.safetensors").write_text(pointer)
    (folder / "notes.txt").write_text("version https://git-lfs.github.com/spec/v1\nno size here\n")
    facts = from_snapshot(folder, MISTRAL, "main", sha=SHA)
    assert facts.weight_bytes == 9_000_000_000  # the pointers' sizes, not the index's total
    assert facts.files["notes.txt"] == len("version https://git-lfs.github.com/spec/v1\nno size here\n")


def test_a_snapshot_with_nothing_to_size_is_refused(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MISTRAL_SMALL_24B))
    with pytest.raises(FactsError, match="holds no weights and no safetensors index"):
        from_snapshot(folder, MISTRAL, "main", sha=SHA)
