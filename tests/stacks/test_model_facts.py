"""Model facts at synth: looked up on the (fake) Hub over HTTP once, recorded, read back offline; the model
checks refuse at synth and in ``plan -c`` what the deploy preflight would refuse after a GPU launch."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from app import build_app
from constructs_lib.deployment.config import ConfigError
from constructs_lib.model_facts import METADATA_KEY, FactsError, FactsRecord, FactsSource
from llmops.facts import hub_lookup
from llmops.facts import main as facts_main
from llmops.plan import main as plan_main
from llmops.summary import describe
from tests.conftest import context_with
from tests.fakes import hub_models
from tests.fakes.fake_hub import FakeHub, use_fake_hub

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen3-32B"
GPT_OSS = "openai/gpt-oss-20b"
MISTRAL = "mistralai/Mistral-Small-24B-Instruct-2501"
DEAD_HUB = "http://127.0.0.1:9"  # nothing listens on the discard port: connection refused at once


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as fake:
        yield hub_models.add_to(fake)


@pytest.fixture
def env(hub, monkeypatch, tmp_path):
    return use_fake_hub(monkeypatch, tmp_path, hub)


def synth_problems(record, **context) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        build_app(cdk.App(context=context_with(**context)), facts=FactsSource(record, lookup=hub_lookup))
    return refused.value.problems


def api_requests(hub, repo_id: str) -> int:
    return sum(1 for r in hub.requests if r.path.startswith(f"/api/models/{repo_id}"))


# -- the done-when cases: refused by synth (recorded lookup) and by plan, naming key, value and limit ---------

CASES = [
    # (context, what synth's refusal says, what plan's says: None when the same)
    (
        {"model_id": GPT_OSS, "instance_type": "ml.g4dn.xlarge", "max_model_len": "8192"},
        ["instance_type=ml.g4dn.xlarge (1 x NVIDIA T4, 16 GB): MXFP4 weights (gpt-oss) need compute capability 8.0"],
        ["ml.g4dn.xlarge (NVIDIA T4) (compute capability 7.5) cannot run them", "need compute capability 8.0"],
    ),
    (
        {"model_id": MISTRAL, "instance_type": "ml.g6e.2xlarge", "max_model_len": "8192"},
        ["instance_type=ml.g6e.2xlarge (1 x NVIDIA L40S, 48 GB): weights do not fit: 43.91 GiB of weights"],
        ["weights do not fit: 43.91 GiB of weights plus 3.73 GiB runtime overhead per GPU exceed the 40.23 GiB"],
    ),
    (
        {"model_id": LLAMA, "instance_type": "ml.g6e.12xlarge", "max_model_len": "1000000"},
        ["max_model_len=1000000: above the longest context the engine accepts for this model, 131,072 tokens"],
        None,
    ),
    (
        {"model_id": LLAMA, "instance_type": "ml.g6e.12xlarge", "max_model_len": "200000"},
        [
            "max_model_len=200000: above the longest context the engine accepts for this model, 131,072 tokens "
            "(max_position_embeddings=131,072; rope_type llama3 does not extend it",
            "The largest context that fits here: 131,072",
        ],
        None,
    ),
    (
        {"model_id": QWEN, "instance_type": "ml.g6e.12xlarge", "max_model_len": "131072"},
        [
            "max_model_len=131072: above the longest context the engine accepts for this model, 40,960 tokens "
            "(max_position_embeddings=40,960;",
            "The largest context that fits here: 40,960",
        ],
        None,
    ),
]


@pytest.mark.parametrize(
    ("context", "said", "plan_said"),
    CASES,
    ids=["gpt-oss-t4", "mistral-24b-l40s", "llama-1m", "llama-200k", "qwen3-32b-131k"],
)
def test_synth_refuses_with_a_recorded_lookup_and_plan_refuses_the_same(
    env, tmp_path, monkeypatch, capsys, context, said, plan_said
):
    record = tmp_path / "model-facts.json"
    problems = synth_problems(record, **context)  # looks the model up, records it, refuses
    assert all(any(s in p for p in problems) for s in said), problems
    assert all(f"model_id={context['model_id']}" in p and "looked up on the Hub now" in p for p in problems)
    assert json.loads(record.read_text())["models"][f"{context['model_id']}@main"]["sha"]

    # Again with the Hub gone: the record alone refuses it the same way, and nothing asks the Hub.
    before = api_requests(env, context["model_id"])
    monkeypatch.setenv("HF_ENDPOINT", DEAD_HUB)
    again = synth_problems(record, **context)
    assert all(any(s in p for p in again) for s in said)
    assert all("recorded in model-facts.json (looked up" in p for p in again)
    assert api_requests(env, context["model_id"]) == before

    monkeypatch.setenv("HF_ENDPOINT", env.endpoint)
    pairs = [arg for key, value in context.items() for arg in ("-c", f"{key}={value}")]
    assert plan_main(pairs) == 1
    out = capsys.readouterr().out
    assert all(s in out for s in plan_said or said), out


def test_plan_reads_the_record_beside_the_context_file_without_the_hub(env, tmp_path, monkeypatch, capsys):
    record = tmp_path / "model-facts.json"
    context = {"model_id": QWEN, "instance_type": "ml.g6e.12xlarge", "max_model_len": "131072"}
    synth_problems(record, **context)
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(json.dumps({"app": "python3 app.py", "context": {**context, "max_model_len": 32768}}))
    monkeypatch.setenv("HF_ENDPOINT", DEAD_HUB)
    assert plan_main(["--context-file", str(cdk_json)]) == 0  # 32,768 fits; the record answered
    out = capsys.readouterr().out
    assert "recorded in model-facts.json" in out and "FITS" in out
    assert plan_main(["--context-file", str(cdk_json), "-c", "max_model_len=131072"]) == 1  # -c wins, as in CDK


# -- plan's exit codes and one-line messages --------------------------------------------------------------


def test_plan_offline_exits_3_with_one_line(env, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", DEAD_HUB)
    assert plan_main(["-c", f"model_id={LLAMA}", "-c", "max_model_len=8192"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: could not read {LLAMA}@main from {DEAD_HUB}: ConnectError")
    assert "Traceback" not in err
    assert plan_main(["--model-id", LLAMA, "--max-model-len", "8192"]) == 3  # the old flags too
    assert "Traceback" not in capsys.readouterr().err


def test_the_old_flags_refuse_the_llama3_context_too(env, capsys):
    # The plan bug: rope_type llama3 was read as extending the context, so 200,000 said FITS with exit 0.
    assert plan_main(["--model-id", LLAMA, "--instance-type", "ml.g6e.12xlarge", "--max-model-len", "200000"]) == 1
    out = capsys.readouterr().out
    assert "max_model_len=200000: above the longest context the engine accepts for this model, 131,072" in out
    assert "DOES NOT FIT" in out
    assert plan_main(["--model-id", LLAMA, "--max-model-len", "200000"]) == 1  # the ranking: no type fits it


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["-c", "engine=vLLM"], "engine='vLLM'"),  # the registry's parser and its did-you-mean
        (["-c", "max_model_len=lots"], "max_model_len='lots'"),
        (["-c", "no_such_key=1"], "no_such_key: unknown context key"),
        (["-c", "model_id"], "expected key=value"),
        (["-c", f"model_id={LLAMA}", "--instance-type", "ml.g6.xlarge"], "not also as flags: --instance-type"),
        (["-c", f"model_id={LLAMA}", "--max-num-seqs", "4"], "--max-num-seqs (-c preflight_sequences=...)"),
        (["--context-file", "cdk.json", "--config", "c.json"], "--config (no context key: not with -c)"),
        (["--context-file", "/nonexistent/cdk.json"], "--context-file /nonexistent/cdk.json: cannot read it"),
    ],
)
def test_plan_bad_context_exits_2_naming_the_key_and_value(env, capsys, argv, said):
    assert plan_main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert all(line.startswith("error: ") for line in err.splitlines())


# -- synth without the Hub, the record as input, the lookup switched off -----------------------------------


def test_no_hub_and_no_record_synth_succeeds_and_the_summary_says_fit_was_not_checked(env, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", DEAD_HUB)
    record = tmp_path / "model-facts.json"
    app = build_app(cdk.App(context=context_with(model_id=LLAMA)), facts=FactsSource(record, lookup=hub_lookup))
    template = app.synth().stacks[0].template
    facts = template["Metadata"][METADATA_KEY]
    assert facts["Checked"] is False and "PinnedFrom" not in facts
    (line,) = [line for line in describe(template) if "fit not checked" in line]
    assert line.startswith(f"  fit not checked at synth: {LLAMA}@main is not in model-facts.json and the Hub did not")
    assert line.endswith("the deploy preflight checks it before any GPU starts")
    assert not record.exists()  # nothing looked up, nothing recorded
    assert f"model: {LLAMA} at main (not pinned" in "\n".join(describe(template))


def test_a_recorded_lookup_pins_main_to_its_commit_and_the_summary_says_so(env, tmp_path):
    record = tmp_path / "model-facts.json"
    context = context_with(model_id=LLAMA, instance_type="ml.g6e.2xlarge", max_model_len="32768")
    FactsSource(record, lookup=hub_lookup).facts_for(LLAMA, "main")  # the lookup synth makes, recorded
    sha = FactsRecord.load(record).find(LLAMA, "main").sha
    app = build_app(cdk.App(context=context), facts=FactsSource(record))
    template = app.synth().stacks[0].template
    (checkpoint,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::StagedCheckpoint"]
    assert checkpoint["Properties"]["Revision"] == sha
    lines = "\n".join(describe(template))
    assert f"model: {LLAMA} at {sha} (pinned at synth: revision 'main' as recorded in model-facts.json)" in lines
    assert "memory, context, tensor-parallel, format checked at synth, fits; revision 'main' pinned to " + sha in lines


def test_hf_hub_offline_stops_the_lookup(env, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(env.requests)
    known = FactsSource(tmp_path / "model-facts.json", lookup=hub_lookup).facts_for(LLAMA, "main")
    assert known.facts is None and "HF_HUB_OFFLINE is set" in str(known.missing)
    assert len(env.requests) == before


# -- the source's lookup: whatever the app hands it (app.py: the Hub), recorded; none reads the record only -----


def test_a_source_records_what_its_lookup_finds_and_says_why_it_found_nothing(tmp_path):
    from constructs_lib.model_facts import FactsUnavailable, ModelFacts

    record, asked = tmp_path / "model-facts.json", []

    def lookup(repo_id, revision, *, gguf, gguf_file):
        asked.append((repo_id, revision, gguf, gguf_file))
        if repo_id != LLAMA:
            raise FactsUnavailable("the mirror has no such model")
        config = hub_models.LLAMA_31_8B
        files = {"config.json": 900, "model.safetensors": 16_060_522_496}
        return ModelFacts(LLAMA, revision, "a" * 40, config, files, "2026-01-01T00:00:00Z", "a mirror")

    source = FactsSource(record, lookup=lookup)
    found = source.facts_for(LLAMA, "main")
    assert found.facts is not None and found.origin == "looked up on the Hub now and recorded in model-facts.json"
    assert FactsRecord.load(record).find(LLAMA, "main") == found.facts
    assert source.facts_for(LLAMA, "main").origin.startswith("recorded in model-facts.json")  # not asked again
    missing = source.facts_for(QWEN, "main")
    assert (
        missing.facts is None
        and missing.missing == f"{QWEN}@main is not in model-facts.json and the mirror has no such model"
    )
    assert asked == [(LLAMA, "main", False, None), (QWEN, "main", False, None)]
    unwired = FactsSource(str(record)).facts_for(QWEN, "main")  # a str is a path; no lookup: the record only
    assert unwired.missing == f"{QWEN}@main is not in model-facts.json and lookups are off"


def test_llmops_facts_source_is_deprecated_for_the_source_with_the_hub_lookup(tmp_path):
    import llmops.facts

    with pytest.warns(DeprecationWarning, match=r"constructs_lib\.deployment\.FactsSource"):
        source = llmops.facts.FactsSource(tmp_path / "model-facts.json")
    assert isinstance(source, FactsSource) and source.lookup is hub_lookup
    with pytest.warns(DeprecationWarning):
        assert llmops.facts.FactsSource(str(tmp_path / "model-facts.json"), lookup=False).lookup is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "not readable as JSON"),
        (json.dumps({"schema": 1, "models": []}), "not a model facts record"),
        (json.dumps({"schema": 1, "models": {"a/b@main": {"repo_id": "a/b"}}}), "entry 'a/b@main' has no revision"),
        (
            json.dumps(
                {
                    "schema": 1,
                    "models": {
                        "a/b@main": {
                            "repo_id": "a/b",
                            "revision": "main",
                            "sha": "main",
                            "looked_up": "x",
                            "endpoint": "x",
                            "config": {},
                            "files": {},
                        }
                    },
                }
            ),
            "sha='main', not a 40-character commit SHA",
        ),
    ],
)
def test_a_malformed_record_fails_synth_naming_the_file(tmp_path, text, said):
    record = tmp_path / "model-facts.json"
    record.write_text(text)
    with pytest.raises(FactsError, match=said) as error:
        build_app(cdk.App(context=context_with()), facts=FactsSource(record))
    assert str(record) in str(error.value) and "python -m llmops.facts refresh" in str(error.value)


def test_refresh_records_the_configured_model_and_show_prints_it(env, tmp_path, capsys):
    record = tmp_path / "model-facts.json"
    assert facts_main(["refresh", "-c", f"model_id={MISTRAL}", "--record", str(record)]) == 0
    out = capsys.readouterr().out
    assert f"{MISTRAL}@main: commit " in out and "47,148,027,768 bytes of weights" in out
    assert facts_main(["show", "--record", str(record)]) == 0
    assert f"{MISTRAL}@main: commit" in capsys.readouterr().out
    assert facts_main(["refresh", "-c", "model_id=acme/nope", "--record", str(record)]) == 3
    assert "acme/nope: repository not found" in capsys.readouterr().err


# -- llama.cpp: the GGUF header read from the Hub by range requests, recorded, checked -----------------------

GGUF_REPO = "acme/Qwen3.6-35B-A3B-GGUF"
GGUF_NAME = "Qwen3.6-35B-A3B-Q4_K_M.gguf"


@pytest.fixture
def gguf_hub(env, tmp_path):
    from tests.preflight.test_gguf_header import qwen36_like

    body = qwen36_like(tmp_path).read_bytes()
    env.add_repo(GGUF_REPO, {GGUF_NAME: body, "other-Q8_0.gguf": b"GGUF", "README.md": b"# model"})
    return env, body


def llamacpp(**context):
    return {
        "engine": "llamacpp",
        "model_id": GGUF_REPO,
        "gguf_file": GGUF_NAME,
        "instance_type": "ml.g6.xlarge",
        **context,
    }


def test_llamacpp_records_the_gguf_header_read_by_ranges_and_checks_it_at_synth(gguf_hub, tmp_path):
    hub, body = gguf_hub
    record = tmp_path / "model-facts.json"
    known = FactsSource(record, lookup=hub_lookup).facts_for(GGUF_REPO, "main", gguf=True, gguf_file=GGUF_NAME)
    assert known.facts is not None, known.missing
    gguf = json.loads(record.read_text())["models"][f"{GGUF_REPO}@main"]["gguf"]
    assert gguf["file"] == GGUF_NAME and gguf["metadata"]["qwen35moe.context_length"] == 262144
    assert known.facts.weight_bytes == len(body)  # the named model only, not the other GGUF
    assert all(r.range for r in hub.requests if r.file == GGUF_NAME)  # ranges, never the whole file
    # 10 full-attention layers x 20 KiB per token: 8 sequences of 262,144 tokens need 40 GiB, more than an L4.
    problems = synth_problems(record, **llamacpp(max_model_len="262144", preflight_sequences="8"))
    assert len(problems) == 1 and problems[0].startswith("instance_type=ml.g6.xlarge (1 x NVIDIA L4, 24 GB): ")
    assert "concurrency does not fit: max_num_seqs=8 sequences of 262,144 tokens" in problems[0]


def test_an_entry_recorded_for_another_engine_is_looked_up_again_for_llama_cpp(gguf_hub, tmp_path):
    hub, body = gguf_hub
    both = "acme/both-formats"  # safetensors with config.json, and a GGUF of the same model
    hub.add_repo(both, {**hub_models.repo_files(hub_models.QWEN3_32B, (1000,)), GGUF_NAME: body})
    record = tmp_path / "model-facts.json"
    FactsSource(record, lookup=hub_lookup).facts_for(both, "main")  # recorded for a config.json engine: no header
    assert "gguf" not in json.loads(record.read_text())["models"][f"{both}@main"]
    known = FactsSource(record).facts_for(both, "main", gguf=True, gguf_file=GGUF_NAME)
    assert known.facts is None  # the record cannot answer for llama.cpp, and lookups are off
    again = FactsSource(record, lookup=hub_lookup).facts_for(both, "main", gguf=True, gguf_file=GGUF_NAME)
    assert again.facts is not None and again.facts.gguf["file"] == GGUF_NAME
    assert again.facts.weight_bytes == len(body)


@pytest.mark.parametrize("mode", ["standard", "inference-component"])
def test_a_pool_entry_the_model_does_not_fit_is_refused_at_synth_naming_it(env, tmp_path, mode):
    # Llama 3.1 8B fits one L4 (24 GB) but not one T4 (16 GB): SageMaker may place any instance on the fallback.
    context = {"model_id": LLAMA, "instance_type": "ml.g6.xlarge", "max_model_len": "8192", "deployment_mode": mode}
    problems = synth_problems(tmp_path / "model-facts.json", **context, instance_pools='["ml.g4dn.xlarge"]')
    assert any(
        p.startswith("instance_pools[0]='ml.g4dn.xlarge' (1 x NVIDIA T4, 16 GB): weights do not fit") for p in problems
    ), problems
    assert not any(p.startswith("instance_type=") for p in problems), problems  # the primary fits


def test_plan_refuses_the_pool_entry_synth_refuses(env, capsys):
    """plan -c takes the keys synth takes, instance_pools included: the T4 fallback is refused there too (exit 1),
    naming the entry, while the L4 fallback fits."""
    context = {"model_id": LLAMA, "instance_type": "ml.g6.xlarge", "max_model_len": "8192"}
    pairs = [arg for key, value in context.items() for arg in ("-c", f"{key}={value}")]
    assert plan_main([*pairs, "-c", 'instance_pools=["ml.g4dn.xlarge","ml.g6.2xlarge"]']) == 1
    out = capsys.readouterr().out
    assert "instance_pools[0]='ml.g4dn.xlarge' (1 x NVIDIA T4, 16 GB): DOES NOT FIT: weights do not fit" in out
    assert "instance_pools[1]='ml.g6.2xlarge' (1 x NVIDIA L4, 24 GB): FITS at tensor parallel 1" in out
    assert plan_main([*pairs, "-c", 'instance_pools=["ml.g6.2xlarge"]']) == 0


# -- the context limit: its own check, its own advice, vLLM's opt-in ----------------------------------------


def _preflight_properties(template) -> dict:
    (found,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "Custom::DeploymentPreflight"]
    return found


def test_a_refused_context_gets_no_memory_advice_that_keeps_it(env, tmp_path, capsys):
    # One L40S has room for Llama 3.1 8B at its 131,072-token limit: the only problem is the limit, with no fp8 cache,
    # bigger GPU or quantization offered for 200,000 tokens the engine refuses whatever the memory.
    context = {"model_id": LLAMA, "instance_type": "ml.g6e.2xlarge", "max_model_len": "200000"}
    (problem,) = synth_problems(tmp_path / "model-facts.json", **context)
    assert "max_model_len=200000: above the longest context the engine accepts for this model, 131,072" in problem
    assert "fp8" not in problem and "GPUs of at least" not in problem and "quantized" not in problem
    pairs = [arg for key, value in context.items() for arg in ("-c", f"{key}={value}")]
    assert plan_main(pairs) == 1
    out = capsys.readouterr().out
    assert "200,000 tokens then fit" not in out and "GPUs of at least" not in out
    assert "no instance type fits max_model_len=200,000: it is above the longest context the engine accepts" in out
    assert "shorten max_model_len or quantize" not in out


def test_the_ranking_beyond_the_limit_points_to_it_not_to_quantization_or_more_nodes(env, capsys):
    assert plan_main(["--model-id", LLAMA, "--max-model-len", "1000000"]) == 1  # the ranking: no instance type
    out = capsys.readouterr().out
    advice = out.split("What would:")[1]
    assert advice.startswith("\n  - max_model_len=1,000,000 is above the longest context the engine accepts for this")
    assert "set max_model_len to at most 131,072" in advice
    assert "at max_model_len 131,072: ml." in advice and "fits (" in advice  # what fits at the limit
    assert "quantized checkpoint" not in advice and "smaller quantization" not in advice and "HyperPod" not in advice
    assert "fp8 KV cache" not in advice


def test_skipping_memory_keeps_the_context_refusal_and_context_is_its_own_skip(env, tmp_path):
    record = tmp_path / "model-facts.json"
    context = {"model_id": LLAMA, "instance_type": "ml.g6e.12xlarge", "max_model_len": "200000"}
    (problem,) = synth_problems(record, **context, preflight_skip='["memory"]')
    assert "max_model_len=200000: above the longest context the engine accepts" in problem
    app = build_app(
        cdk.App(context=context_with(**context, preflight_skip='["context"]')),
        facts=FactsSource(record, lookup=hub_lookup),
    )
    template = app.synth().stacks[0].template
    assert "memory, tensor-parallel, format checked at synth, fits" in template["Metadata"][METADATA_KEY]["Line"]
    assert _preflight_properties(template)["SkipChecks"] == ["context"]


def test_vllms_long_context_variable_is_the_opt_in_in_synth_plan_and_the_preflight(env, tmp_path, capsys):
    record = tmp_path / "model-facts.json"
    opt_in = json.dumps({"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    context = {"model_id": LLAMA, "instance_type": "ml.g6e.12xlarge", "max_model_len": "200000"}
    app = build_app(
        cdk.App(context=context_with(**context, container_env=opt_in)), facts=FactsSource(record, lookup=hub_lookup)
    )
    template = app.synth().stacks[0].template
    assert template["Metadata"][METADATA_KEY]["Checked"] is True
    assert _preflight_properties(template)["LongContext"] == "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
    pairs = [arg for key, value in context.items() for arg in ("-c", f"{key}={value}")]
    assert plan_main([*pairs, "-c", f"container_env={opt_in}"]) == 0
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets vLLM start with it" in capsys.readouterr().out
    # "0" is not vLLM's true: still refused.
    off = json.dumps({"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"})
    assert synth_problems(record, **context, container_env=off)


def test_refresh_records_the_named_gguf_model_of_several(gguf_hub, tmp_path):
    hub, body = gguf_hub
    repo = "acme/two-ggufs"
    hub.add_repo(repo, {"a-Q8_0.gguf": body, "b-Q4_K_M.gguf": body})
    record = tmp_path / "model-facts.json"
    context = {"engine": "llamacpp", "model_id": repo, "gguf_file": "b-Q4_K_M.gguf", "instance_type": "ml.g6.xlarge"}
    argv = ["refresh", *(a for k, v in context.items() for a in ("-c", f"{k}={v}")), "--record", str(record)]
    assert facts_main(argv) == 0
    entry = json.loads(record.read_text())["models"][f"{repo}@main"]
    assert entry["gguf"]["file"] == "b-Q4_K_M.gguf"
    facts = FactsRecord.load(record).find(repo, "main")
    assert facts.serves("b-Q4_K_M.gguf") and not facts.serves("a-Q8_0.gguf") and not facts.serves(None)
    assert facts.serves("*Q4_K_M*")  # a pattern, as the serving adapter takes it


def test_a_config_checkpoint_serves_no_gguf(env, tmp_path):
    record = tmp_path / "model-facts.json"
    facts = FactsSource(record, lookup=hub_lookup).facts_for(MISTRAL, "main").facts
    assert facts is not None and not facts.serves(None) and not facts.serves("x.gguf")


def test_header_arrays_are_left_out_and_every_other_key_kept():
    from llmops.facts import _json_safe

    skipped = object()  # read_header's ArrayInfo for a long array: not JSON
    metadata = {"a.vocab": skipped, "general.architecture": "qwen3", "b.vocab": skipped, "qwen3.block_count": 28}
    assert _json_safe(metadata) == {"general.architecture": "qwen3", "qwen3.block_count": 28}


# -- the GGUF check's own branches (mutation testing of preflight/model_check.py check_gguf, as synth calls it)
# -------------------------------


def _qwen36_header(tmp_path, drop: tuple[str, ...] = ()):
    import dataclasses

    from preflight.gguf import read_header
    from tests.preflight.test_gguf_header import qwen36_like

    data = qwen36_like(tmp_path).read_bytes()
    header = read_header(lambda offset, length: data[offset : offset + length])
    metadata = {k: v for k, v in header.metadata.items() if k not in drop}
    return dataclasses.replace(header, metadata=metadata), len(data)


def _gguf_checked(tmp_path, *, drop=(), **context):
    """check_gguf as synth calls it (model_checks._check): the deployment's settings, on its instance type."""
    from constructs_lib.deployment.config import DeploymentConfig
    from constructs_lib.deployment.model_checks import check_settings, resolve_instance
    from preflight.model_check import check_gguf

    header, size = _qwen36_header(tmp_path, drop)
    config = DeploymentConfig.from_context(context_with(**llamacpp(**{"max_model_len": None, **context})))
    spec, _ = resolve_instance(config.instance_type)
    settings = check_settings(config)
    return check_gguf(
        header,
        weight_bytes=size,
        gpu_count=spec.gpu_count,
        gpu_memory_gib=spec.gpu_memory_gib,
        max_model_len=settings["max_model_len"],
        max_num_seqs=settings["max_num_seqs"],
        skip=settings["skip"],
    )


def test_without_max_model_len_the_gguf_check_takes_the_trained_context(tmp_path):
    # max_model_len unset (null: the app's cdk.json sets 32768)
    checked = _gguf_checked(tmp_path, preflight_sequences="8")  # 8 x 262,144 tokens: more than an L4 holds
    (problem,) = checked.problems
    assert problem[0] == "memory" and "max_num_seqs=8 sequences of 262,144 tokens" in problem[1]
    assert checked.fit is not None and checked.warnings == checked.fit.warnings and checked.formats is None
    fits = _gguf_checked(tmp_path, max_model_len="4096")
    assert fits.problems == [] and fits.fit is not None


def test_a_gguf_header_without_a_context_length_needs_max_model_len(tmp_path):
    with pytest.raises(ValueError, match=r"^the GGUF header states no context_length: set max_model_len$"):
        _gguf_checked(tmp_path, drop=("qwen35moe.context_length",))
    assert _gguf_checked(tmp_path, drop=("qwen35moe.context_length",), max_model_len="4096").problems == []


def test_skipping_memory_drops_the_gguf_refusal_but_keeps_the_estimate(tmp_path):
    checked = _gguf_checked(tmp_path, preflight_sequences="8", preflight_skip='["memory"]')
    assert checked.problems == [] and checked.fit is not None and checked.fit.problems


@pytest.mark.parametrize("flag", [True, False])
def test_the_0_2_lookup_flag_is_accepted_with_a_warning_naming_the_hub_lookup(tmp_path, flag):
    """The library imports nothing of llmops (tests/project/test_rooms.py): the flag no longer reaches the Hub."""
    from constructs_lib.deployment import FactsSource

    with pytest.warns(DeprecationWarning, match=r"looks nothing up: pass lookup=llmops\.facts\.hub_lookup"):
        source = FactsSource(tmp_path / "model-facts.json", lookup=flag)
    assert source.lookup is None
