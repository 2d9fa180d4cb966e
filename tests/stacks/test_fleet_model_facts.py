"""The model checks for fleets and the keys plan shares with synth (issue 26, review findings 3, 4 and 8).

A fleet's deployments are looked up (fake Hub), recorded and checked at synth like a single deployment, each with
its merged keys and its problems named ``deployments.<name>.<key>``; the summary says per deployment what was
checked. ``plan`` takes one deployment (``--deployment``) and every key synth's check reads (``engine_env``'s
max_num_batched_tokens, ``preflight_skip``); ``facts refresh`` records every deployment's model."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from app import build_app
from constructs_lib.deployment.config import ConfigError
from constructs_lib.model_facts import METADATA_KEY, FactsRecord, FactsSource
from llmops.facts import hub_lookup
from llmops.facts import main as facts_main
from llmops.plan import main as plan_main
from llmops.summary import describe
from tests.conftest import context_with
from tests.fakes import hub_models
from tests.fakes.fake_hub import FakeHub, use_fake_hub

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GPT_OSS = "openai/gpt-oss-20b"
MISTRAL = "mistralai/Mistral-Small-24B-Instruct-2501"
GATED = "acme/gated-model"
DEAD_HUB = "http://127.0.0.1:9"  # nothing listens on the discard port: connection refused at once

# Review finding 3's fleet: Llama 3.1 8B at 200,000 tokens (vLLM refuses above 131,072), beside one that fits.
FLEET = {
    "big": {"model_id": LLAMA, "instance_type": "ml.g6e.12xlarge", "max_model_len": 200000},
    "small": {"model_id": LLAMA, "instance_type": "ml.g6e.xlarge", "max_model_len": 8192},
}


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as fake:
        hub_models.add_to(fake)
        config, shards = hub_models.MODELS[LLAMA]
        fake.add_repo(GATED, hub_models.repo_files(config, shards), gated=True)
        yield fake


@pytest.fixture
def env(hub, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # plan and refresh read model-facts.json (and relative files) from here
    return use_fake_hub(monkeypatch, tmp_path, hub)


def fleet_file(tmp_path, deployments=None) -> str:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(deployments or FLEET))
    return str(path)


def pairs(**context) -> list[str]:
    return [arg for key, value in context.items() for arg in ("-c", f"{key}={value}")]


# -- synth: every deployment checked with its merged keys --------------------------------------------------


def test_a_fleet_deployment_the_engine_refuses_fails_synth_naming_it_with_the_hub_and_from_the_record(
    env, tmp_path, monkeypatch
):
    record = tmp_path / "model-facts.json"
    context = context_with(deployments_file=fleet_file(tmp_path))
    for _ in ("looked up on the Hub now", "recorded in model-facts.json"):  # then offline, from the record
        with pytest.raises(ConfigError) as refused:
            build_app(cdk.App(context=context), facts=FactsSource(record, lookup=hub_lookup))
        (problem,) = refused.value.problems  # the small one fits
        assert problem.startswith(
            "deployments.big.max_model_len=200000: above the longest context the engine accepts for this model, "
            "131,072 tokens"
        ), problem
        assert f"model_id={LLAMA}" in problem
        monkeypatch.setenv("HF_ENDPOINT", DEAD_HUB)
    assert "recorded in model-facts.json" in problem
    assert set(json.loads(record.read_text())["models"]) == {f"{LLAMA}@main"}


def test_a_fleet_without_facts_still_says_per_deployment_that_fit_was_not_checked(tmp_path):
    context = context_with(deployments_file=fleet_file(tmp_path))
    stacks = build_app(cdk.App(context=context)).synth().stacks  # no FactsSource: the tests' default
    template = next(s.template for s in stacks if s.stack_name == "LlmEndpoint-big")
    lines = describe(template)
    assert "  deployment big: fit not checked at synth: no model facts looked up (python -m llmops.facts refresh)" in (
        line.split(";")[0] for line in lines
    )


def test_each_deployment_of_a_shared_endpoint_is_checked_pinned_and_summarized(env, tmp_path, monkeypatch):
    shared = {"endpoint": "shared", "deployment_mode": "inference-component", "instance_type": "ml.g6e.12xlarge"}
    deployments = {
        "llama": {**shared, "model_id": LLAMA, "max_model_len": 8192, "accelerators_per_copy": 1},
        "oss": {**shared, "model_id": GPT_OSS, "max_model_len": 8192, "accelerators_per_copy": 1},
        "elsewhere": {"model_id": "acme/not-on-the-hub", "instance_type": "ml.g6.xlarge"},
    }
    record = tmp_path / "model-facts.json"
    context = context_with(deployments_file=fleet_file(tmp_path, deployments))
    app = build_app(
        cdk.App(context=context, outdir=str(tmp_path / "out")), facts=FactsSource(record, lookup=hub_lookup)
    )
    stacks = {s.stack_name: s.template for s in app.synth().stacks}
    entries = FactsRecord.load(record)
    sha = {model: entries.find(model, "main").sha for model in (LLAMA, GPT_OSS)}

    template = stacks["LlmEndpoint-shared"]
    (facts,) = [template["Metadata"][METADATA_KEY]]
    assert [(d["Deployment"], d["Checked"], d["Revision"]) for d in facts["Deployments"]] == [
        ("llama", True, sha[LLAMA]),
        ("oss", True, sha[GPT_OSS]),
    ]
    checkpoints = {
        r["Properties"]["RepoId"]: r["Properties"]["Revision"]
        for r in template["Resources"].values()
        if r["Type"] == "Custom::StagedCheckpoint"
    }
    assert checkpoints == sha  # each deployment's floating main pinned to its own recorded commit
    text = "\n".join(describe(template))
    for name, model in (("llama", LLAMA), ("oss", GPT_OSS)):
        assert f"  deployment {name}: model facts {model}@{sha[model][:12]} looked up on the Hub now" in text
        assert f"model: {model} at {sha[model]} (pinned at synth: revision 'main' as recorded in model-facts.json)" in (
            text
        )
    (line,) = [line for line in describe(stacks["LlmEndpoint-elsewhere"]) if "deployment elsewhere" in line]
    assert line.startswith(
        "  deployment elsewhere: fit not checked at synth: acme/not-on-the-hub@main is not in model-facts.json and "
        "the Hub did not answer (acme/not-on-the-hub: repository not found"
    ), line
    assert "--hf-token-secret-arn" not in line and "synth reads no secret" in line  # synth reads $HF_TOKEN only


# -- plan: one deployment of a fleet -----------------------------------------------------------------------


def test_plan_with_a_fleet_asks_which_deployment_and_plans_the_one_named(env, tmp_path, capsys):
    fleet = fleet_file(tmp_path)
    assert plan_main(["-c", f"deployments_file={fleet}"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: deployments_file={fleet!r} holds 2 deployment(s) (big, small): choose one with --deployment NAME "
        "(its keys merged over the top-level ones, as cdk synth checks it)\n"
    )
    assert plan_main(["-c", f"deployments_file={fleet}", "--deployment", "big"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"deployment big of deployments_file={fleet!r}: its keys over the top-level ones")
    assert "ml.g6e.12xlarge (4 x NVIDIA L40S, 48 GB)" in out
    assert "max_model_len=200000: above the longest context the engine accepts for this model, 131,072" in out
    assert plan_main(["-c", f"deployments_file={fleet}", "--deployment", "small"]) == 0
    assert "ml.g6e.xlarge (1 x NVIDIA L40S, 48 GB)" in capsys.readouterr().out


def test_plan_reads_an_inline_deployments_map_and_a_relative_file_beside_the_context_file(env, tmp_path, capsys):
    cdk_json = tmp_path / "app" / "cdk.json"
    cdk_json.parent.mkdir()
    (cdk_json.parent / "fleet.json").write_text(json.dumps(FLEET))
    cdk_json.write_text(json.dumps({"context": {"deployments_file": "fleet.json"}}))
    assert plan_main(["--context-file", str(cdk_json), "--deployment", "big"]) == 1  # read from cdk.json's folder
    assert "131,072" in capsys.readouterr().out
    assert plan_main(["-c", f"deployments={json.dumps(FLEET)}", "--deployment", "small"]) == 0
    assert capsys.readouterr().out.startswith("deployment small of deployments: ")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--deployment", "big"], "--deployment NAME"),  # replaced below: a fleet, an unknown name
        (["-c", f"model_id={LLAMA}", "--deployment", "big"], "--deployment big: the context has no deployments map"),
        (["--model-id", LLAMA, "--deployment", "big"], "argument --deployment: only with -c/--context-file"),
    ],
    ids=["unknown-name", "no-fleet", "no-context"],
)
def test_plan_deployment_errors_exit_2_in_one_line(env, tmp_path, capsys, argv, said):
    if argv[0] == "--deployment":
        argv = ["-c", f"deployments_file={fleet_file(tmp_path)}", "--deployment", "nope"]
        said = "--deployment nope: not in deployments_file="
    assert plan_main(argv) == 2
    err = capsys.readouterr().err
    assert said in err.splitlines()[-1] and "Traceback" not in err  # argparse's usage, then one error line
    if "nope" in said:
        assert err.rstrip().endswith("allowed: big, small")


def test_plan_names_a_fleet_problem_as_synth_names_it(env, tmp_path, capsys):
    fleet = fleet_file(tmp_path, {"big": {"model_id": LLAMA, "max_model_len": "lots"}})
    assert plan_main(["-c", f"deployments_file={fleet}", "--deployment", "big"]) == 2
    assert capsys.readouterr().err.startswith("error: deployments.big.max_model_len='lots'")


# -- facts refresh: every deployment's model ---------------------------------------------------------------


def test_refresh_records_every_deployments_model_once(env, tmp_path, capsys):
    record = tmp_path / "model-facts.json"
    deployments = {
        **FLEET,  # Llama twice: one lookup
        "mistral": {"model_id": MISTRAL, "instance_type": "ml.g6e.12xlarge"},
        "given": {"model_s3_uri": "s3://my-bucket/models/x/", "instance_type": "ml.g6.xlarge"},
    }
    argv = ["refresh", "-c", f"deployments_file={fleet_file(tmp_path, deployments)}", "--record", str(record)]
    assert facts_main(argv) == 0
    out = capsys.readouterr().out
    assert out.count(f"{LLAMA}@main: commit ") == 1 and f"{MISTRAL}@main: commit " in out
    assert "deployments.given.model_s3_uri='s3://my-bucket/models/x/': the model is an S3 prefix" in out
    assert set(json.loads(record.read_text())["models"]) == {f"{LLAMA}@main", f"{MISTRAL}@main"}


def test_refresh_hub_errors_name_the_context_key_not_plans_flag(env, tmp_path, capsys):
    record = tmp_path / "model-facts.json"
    assert facts_main(["refresh", "-c", f"model_id={GATED}", "--record", str(record)]) == 3
    err = capsys.readouterr().err
    assert f"{GATED} is gated" in err and "the context key hf_token_secret_arn (-c or cdk.json)" in err
    assert "--hf-token-secret-arn" not in err
    assert facts_main(["refresh", "-c", "model_id=acme/nope", "--record", str(record)]) == 3
    err = capsys.readouterr().err
    assert "a private repository needs a token: HF_TOKEN in the environment, or the context key" in err
    assert "--hf-token-secret-arn" not in err
    # plan with its flags still names its flag; with -c the key
    assert plan_main(["--model-id", GATED, "--max-model-len", "8192"]) == 3
    assert "--hf-token-secret-arn with the Secrets Manager secret" in capsys.readouterr().err
    assert plan_main(["-c", f"model_id={GATED}"]) == 3
    assert "--hf-token-secret-arn" not in capsys.readouterr().err


# -- plan reads every key synth's check reads --------------------------------------------------------------

BATCHED = {
    "model_id": LLAMA,
    "instance_type": "ml.g6e.xlarge",
    "max_model_len": "131072",
    "engine_env": json.dumps({"SM_VLLM_MAX_NUM_BATCHED_TOKENS": "131072"}),
}


def test_plan_reads_engine_envs_max_num_batched_tokens_and_refuses_what_synth_refuses(env, tmp_path, capsys):
    with pytest.raises(ConfigError) as refused:
        build_app(
            cdk.App(context=context_with(**BATCHED)),
            facts=FactsSource(tmp_path / "model-facts.json", lookup=hub_lookup),
        )
    assert any("KV cache does not fit" in p for p in refused.value.problems), refused.value.problems
    assert plan_main(pairs(**BATCHED)) == 1  # was FITS: the key was dropped
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out
    assert plan_main(pairs(**{**BATCHED, "engine_env": "{}"})) == 0  # the default 2,048-token pass fits
    # The flag would make plan differ from the context synth reads: one or the other.
    assert plan_main([*pairs(**BATCHED), "--max-num-batched-tokens", "2048"]) == 2
    assert "--max-num-batched-tokens (-c engine_env=...)" in capsys.readouterr().err


def test_plan_and_synth_call_the_check_with_the_same_settings(env, tmp_path, monkeypatch, capsys):
    import constructs_lib.deployment.model_checks
    import llmops.plan
    from preflight.model_check import check_model

    calls: dict[str, list[dict]] = {"synth": [], "plan": []}

    def recording(where):
        def check(config, **settings):
            calls[where].append({k: v for k, v in settings.items() if k not in ("gpu", "alternatives")})
            return check_model(config, **settings)

        return check

    monkeypatch.setattr(constructs_lib.deployment.model_checks, "check_model", recording("synth"))
    monkeypatch.setattr(llmops.plan, "check_model", recording("plan"))
    engine_env = {
        "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096",
        "SM_VLLM_KV_CACHE_DTYPE": "fp8",
        "SM_VLLM_GPU_MEMORY_UTILIZATION": "0.85",
        "SM_VLLM_DTYPE": "float16",
    }
    context = {
        "model_id": LLAMA,
        "instance_type": "ml.g6e.12xlarge",
        "max_model_len": "16384",
        "tensor_parallel_size": "4",
        "preflight_sequences": "3",
        "engine_env": json.dumps(engine_env),
    }
    build_app(
        cdk.App(context=context_with(**context)), facts=FactsSource(tmp_path / "model-facts.json", lookup=hub_lookup)
    )
    assert plan_main(pairs(**context)) == 0, capsys.readouterr()
    (synth,), (plan, *_) = calls["synth"], calls["plan"]
    assert {**plan, "skip": ()} == synth  # plan reports skipped checks instead of not running them
    assert synth["max_num_batched_tokens"] == 4096 and synth["kv_cache_dtype"] == "fp8"
    assert synth["dtype"] == "float16" and synth["max_num_seqs"] == 3


def test_plan_honours_preflight_skip_as_synth_does(env, tmp_path, capsys):
    # Mistral Small 24B in bf16 does not fit one L40S: with the memory check skipped, synth lets it through.
    context = {"model_id": MISTRAL, "instance_type": "ml.g6e.2xlarge", "max_model_len": "8192"}
    skipped = {**context, "preflight_skip": '["memory"]'}
    build_app(
        cdk.App(context=context_with(**skipped)), facts=FactsSource(tmp_path / "model-facts.json", lookup=hub_lookup)
    )
    assert plan_main(pairs(**context)) == 1
    capsys.readouterr()
    assert plan_main(pairs(**skipped)) == 0
    out = capsys.readouterr().out
    assert "preflight_skip=['memory']: not refused, as cdk synth and the deploy preflight skip these checks" in out
    assert "weights do not fit" in out
    assert plan_main([*pairs(**skipped), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fits"] is True and report["candidate"]["margin"] == "skipped"


# -- facts refresh and show, each branch (mutation testing of llmops/facts.py found these untested) --------------


def test_refresh_reads_past_a_given_prefix_to_the_next_deployment(env, tmp_path, capsys):
    record = tmp_path / "model-facts.json"
    deployments = {
        "given": {"model_s3_uri": "s3://my-bucket/models/x/", "instance_type": "ml.g6.xlarge"},  # first
        "mistral": {"model_id": MISTRAL, "instance_type": "ml.g6e.12xlarge"},
    }
    argv = ["refresh", "-c", f"deployments_file={fleet_file(tmp_path, deployments)}", "--record", str(record)]
    assert facts_main(argv) == 0
    assert set(json.loads(record.read_text())["models"]) == {f"{MISTRAL}@main"}
    assert capsys.readouterr().out.splitlines()[0] == (
        "deployments.given.model_s3_uri='s3://my-bucket/models/x/': the model is an S3 prefix, no Hub facts to record"
    )


def test_refresh_of_a_single_given_prefix_records_nothing_and_says_so(env, tmp_path, capsys):
    record = tmp_path / "model-facts.json"
    argv = ["refresh", "-c", "model_s3_uri=s3://my-bucket/models/x/", "--record", str(record)]
    assert facts_main(argv) == 0
    assert capsys.readouterr().out == (
        "model_s3_uri='s3://my-bucket/models/x/': the model is an S3 prefix, no Hub facts to record\n"
        f"recorded in {record}: commit it with the app\n"
    )
    assert json.loads(record.read_text())["models"] == {}


def test_refresh_reads_the_context_file(env, tmp_path, capsys):
    context = tmp_path / "context.json"
    context.write_text(json.dumps({"model_id": MISTRAL, "instance_type": "ml.g6e.12xlarge"}))
    record = tmp_path / "model-facts.json"
    assert facts_main(["refresh", "--context-file", str(context), "--record", str(record)]) == 0
    assert set(json.loads(record.read_text())["models"]) == {f"{MISTRAL}@main"}


def test_refresh_uses_the_token_from_the_environment_or_the_named_secret(env, tmp_path, monkeypatch):
    record = tmp_path / "model-facts.json"
    monkeypatch.setenv("HF_TOKEN", env.token)  # the fake Hub's own token
    assert facts_main(["refresh", "-c", f"model_id={GATED}", "--record", str(record)]) == 0  # gated: the token went
    monkeypatch.delenv("HF_TOKEN")
    import llmops.hub

    asked: list[str | None] = []
    monkeypatch.setattr(llmops.hub, "read_token", lambda arn: asked.append(arn) or env.token)
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
    assert (
        facts_main(["refresh", "-c", f"model_id={GATED}", "-c", f"hf_token_secret_arn={arn}", "--record", str(record)])
        == 0
    )
    assert asked == [arn]


def test_refresh_says_when_the_revision_moved(env, hub, tmp_path, capsys):
    moving = "acme/moving-model"
    config, shards = hub_models.MODELS[LLAMA]
    hub.add_repo(moving, hub_models.repo_files(config, shards))
    record = tmp_path / "model-facts.json"
    argv = ["refresh", "-c", f"model_id={moving}", "-c", "instance_type=ml.g6e.12xlarge", "--record", str(record)]
    assert facts_main(argv) == 0
    first = json.loads(record.read_text())["models"][f"{moving}@main"]["sha"]
    assert f"{moving}@main: commit {first}, " in capsys.readouterr().out  # first lookup: nothing moved
    assert facts_main(argv) == 0
    assert "(was" not in capsys.readouterr().out  # the same commit again
    hub.add_repo(moving, {**hub_models.repo_files(config, shards), "NOTES.md": b"a new commit"})
    assert facts_main(argv) == 0
    second = json.loads(record.read_text())["models"][f"{moving}@main"]["sha"]
    assert second != first
    assert f"{moving}@main: commit {second} (was {first[:12]}), " in capsys.readouterr().out


def test_refresh_over_a_damaged_record_starts_a_new_one(env, tmp_path, capsys):
    record = tmp_path / "model-facts.json"
    record.write_text("{not json")
    assert facts_main(["refresh", "-c", f"model_id={MISTRAL}", "--record", str(record)]) == 0
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert line.startswith("note: ") and line.endswith("; starting a new record") and str(record) in line
    assert out.endswith(f"recorded in {record}: commit it with the app\n")
    assert set(json.loads(record.read_text())["models"]) == {f"{MISTRAL}@main"}


def test_show_a_damaged_record_is_an_error_and_an_empty_one_says_so(env, tmp_path, capsys):
    record = tmp_path / "model-facts.json"
    record.write_text("{not json")
    assert facts_main(["show"]) == 2  # ./model-facts.json by default
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and "model-facts.json" in err and err.count("\n") == 1
    FactsRecord(record).save()
    assert facts_main(["show"]) == 0
    assert capsys.readouterr().out == "model-facts.json: no model facts recorded\n"


def test_the_facts_command_says_what_it_does(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps at the terminal's width
    assert facts_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m llmops.facts ")
    flat = " ".join(out.split())
    import llmops.facts

    assert llmops.facts.__doc__.split("\n\n")[0].split("\n")[0] in out
    assert "{refresh,show,record} refresh: look up and record; show: print; record: from a local snapshot" in flat
    assert "--record RECORD the record. Default: ./model-facts.json" in flat
    assert "[--context-file cdk.json]" not in flat  # the description is the docstring's first paragraph only
    assert facts_main(["list"]) == 2  # not an action
