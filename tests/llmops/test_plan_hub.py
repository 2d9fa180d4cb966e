"""``plan --model-id``: Hub metadata through huggingface_hub against the fake Hub over HTTP, ranked by price."""

from __future__ import annotations

import json

import pytest

from constructs_lib.prices import lookup_hint
from llmops.plan import main
from tests.fakes.fake_hub import TEST_TOKEN, Declared, FakeHub, use_fake_hub

QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 4096,
    "head_dim": 128,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 40960,
    "use_sliding_window": False,
    "torch_dtype": "bfloat16",
}
MOE = {
    **QWEN3_8B,
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "num_experts": 128,
    "num_experts_per_tok": 8,
}
MULTIMODAL = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "torch_dtype": "bfloat16",
    "text_config": {
        "hidden_size": 5120,
        "head_dim": 128,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
    },
    "vision_config": {"hidden_size": 1024},
}


def weights(total: int, shards: int = 2) -> dict[str, Declared]:
    return {f"model-{i:05d}-of-{shards:05d}.safetensors": Declared(total // shards) for i in range(1, shards + 1)}


def repo(config: dict, total: int, **files) -> dict:
    return {"config.json": json.dumps(config).encode(), "tokenizer.json": b"{}", **weights(total), **files}


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as fake:
        fake.add_repo("Qwen/Qwen3-8B", repo(QWEN3_8B, 16_400_000_000))
        fake.add_repo("acme/gated-8b", repo(QWEN3_8B, 16_400_000_000), gated=True)
        fake.add_repo("Qwen/Qwen3-30B-A3B", repo(MOE, 61_100_000_000))
        fake.add_repo("mistralai/Mistral-Small-3.1-24B", repo(MULTIMODAL, 48_000_000_000))
        fp8 = {**QWEN3_8B, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
        fake.add_repo("Qwen/Qwen3-8B-FP8", repo(fp8, 8_800_000_000))
        awq = {**QWEN3_8B, "torch_dtype": "float16", "quantization_config": {"quant_method": "awq", "bits": 4}}
        fake.add_repo("Qwen/Qwen3-8B-AWQ", repo(awq, 5_700_000_000))
        mxfp4 = {**QWEN3_8B, "quantization_config": {"quant_method": "mxfp4"}}
        fake.add_repo("acme/mxfp4-8b", repo(mxfp4, 5_000_000_000))
        # A model no single instance holds, and two quantizations of it that the Hub lists by its tag.
        fake.add_repo("acme/huge", repo({**QWEN3_8B, "num_hidden_layers": 126}, 3_000_000_000_000))
        tag = ("base_model:quantized:acme/huge",)
        fake.add_repo("acme/huge-AWQ", repo(awq, 800_000_000_000), model_tags=tag, downloads=5)
        fake.add_repo("someone/huge-GPTQ-Int4", repo(awq, 800_000_000_000), model_tags=tag, downloads=50)
        yield fake


@pytest.fixture
def env(hub, monkeypatch, tmp_path):
    return use_fake_hub(monkeypatch, tmp_path, hub)


def plan(*args: str) -> int:
    return main(list(args))


def test_ranks_every_type_that_fits_cheapest_first_with_fit_columns_and_prices(env, capsys):
    assert plan("--model-id", "Qwen/Qwen3-8B", "--max-model-len", "8192") == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("weights: 16,400,000,000 bytes in 2 file(s) of Qwen/Qwen3-8B@")
    assert "instance type(s) fit (max_model_len 8,192" in lines[1]
    head, *rows = lines[2:]
    assert head.split()[:3] == ["instance", "type", "GPUs"] and "USD/h us-east-1" in head and "margin" in head
    ranked = [r.split()[0] for r in rows if r.startswith("ml.")]
    # The types with a sourced us-east-1 price first, cheapest first; then the rest ("lookup").
    assert ranked[:5] == ["ml.g6.xlarge", "ml.g6.2xlarge", "ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge"]
    first = rows[0].split()
    assert first[-2:] == ["1.13", "822"]  # 1.1267 USD/h, x 730 h
    assert "ml.g6e.xlarge" in ranked[5:]  # fits, but no sourced price: after every priced type
    (g6e,) = [r.split() for r in rows if r.startswith("ml.g6e.xlarge ")]
    assert g6e[-2:] == ["lookup", "lookup"]  # a catalog type: never "?" (issue 26), the legend says how to read it
    assert not any(r.split()[-1] == "?" for r in rows if r.startswith("ml."))
    assert "ml.g4dn.xlarge" not in ranked  # 16.4 GB of bfloat16 weights on a 16 GB T4: neither memory nor format
    # Each price's source and date under the table, and the types without one.
    legend = [line for line in lines if line.startswith(("price of ", "lookup: ", "?: "))]
    assert any(
        line.startswith("price of 2026-10-05, https://pricing.us-east-1.amazonaws.com/") and "ml.g6.xlarge" in line
        for line in legend
    )
    assert any(line.startswith("price of 2025-02-13, https://github.com/aws-samples/") for line in legend)
    # The quoted offer-file row says who quoted it: the figure was not read from the offer file here.
    assert any("ml.g6.xlarge" in line and "as quoted by a public report (not re-read here)" in line for line in legend)
    unpriced = next(line for line in legend if line.startswith("lookup: "))
    assert "ml.g6e.xlarge" in unpriced and "ml.g6.xlarge," not in unpriced
    assert unpriced.endswith(f" in us-east-1: {lookup_hint('us-east-1')}")  # where to read the missing prices
    assert not any(line.startswith("?: ") for line in legend)  # every ranked type is in the catalog
    # The next-best types with the first's GPU count, as the instance_pools fallbacks (at most 4).
    (pools,) = [line for line in lines if " instance_pools=" in line]
    assert pools.startswith(
        'instance_type=ml.g6.xlarge instance_pools=["ml.g6.2xlarge", "ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge"]:'
    )


def test_json_has_the_same_ranking_and_why_the_others_do_not_fit(env, capsys, tmp_path):
    assert plan("--model-id", "Qwen/Qwen3-8B", "--max-model-len", "8192", "--json", "--region", "eu-west-1") == 0
    assert list((tmp_path / "hf" / "hub").rglob("config.json"))  # the test's own cache, not the user's
    report = json.loads(capsys.readouterr().out)
    assert report["region"] == "eu-west-1" and report["weight_bytes"] == 16_400_000_000
    first = report["instances"][0]
    assert first["usd_per_hour"] is None  # no sourced eu-west-1 price: never a guess
    assert {c["margin"] for c in report["instances"]} <= {"fits", "tight"}
    by_type = {c["instance_type"]: c for c in report["instances"]}
    assert 1 <= len(report["instance_pools"]) <= 4 and first["instance_type"] not in report["instance_pools"]
    assert all(by_type[t]["gpu_count"] == first["gpu_count"] for t in report["instance_pools"])
    t4 = next(c for c in report["does_not_fit"] if c["instance_type"] == "ml.g4dn.xlarge")
    assert any("weights do not fit" in r for r in t4["reasons"])
    # Memory, not the format: vLLM serves a bfloat16 checkpoint in float16 on a T4 (dtype auto), with a warning.
    assert not any("compute capability" in r for r in t4["reasons"])
    assert any("Falling back to torch.float16" in w for w in t4["warnings"])


def test_pool_suggestion_keeps_the_first_types_gpu_count_and_stops_at_four():
    from llmops.plan import Candidate, pool_suggestion

    def candidate(name: str, gpus: int) -> Candidate:
        return Candidate(name, gpus, "L4", 24.0, gpus, 8192, 8192, 1, "fits", 0.5, None, None)

    ranked = [candidate("a", 4), candidate("b", 1), candidate("c", 4), *(candidate(f"d{i}", 4) for i in range(5))]
    assert pool_suggestion(ranked) == ["c", "d0", "d1", "d2"]  # "b" has 1 GPU: tensor parallel 4 cannot run there
    assert pool_suggestion(ranked[:1]) == [] and pool_suggestion([]) == []


def test_gated_repository_needs_a_token_and_says_how(env, monkeypatch, capsys):
    assert plan("--model-id", "acme/gated-8b", "--max-model-len", "8192") == 3
    err = capsys.readouterr().err
    assert "acme/gated-8b is gated: accept its terms on the Hub" in err and "HF_TOKEN" in err
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    assert plan("--model-id", "acme/gated-8b", "--max-model-len", "8192") == 0
    out, err = capsys.readouterr()
    assert TEST_TOKEN not in out + err


def test_missing_repository_and_revision_exit_3(env, capsys):
    assert plan("--model-id", "acme/nope", "--max-model-len", "8") == 3
    assert "acme/nope: repository not found" in capsys.readouterr().err
    assert plan("--model-id", "Qwen/Qwen3-8B", "--revision", "v9", "--max-model-len", "8") == 3
    assert "Qwen/Qwen3-8B@v9: no such revision" in capsys.readouterr().err


def test_moe_and_multimodal_detailed_reports(env, capsys):
    assert (
        plan("--model-id", "Qwen/Qwen3-30B-A3B", "--instance-type", "ml.g6e.12xlarge", "--max-model-len", "32768") == 0
    )
    assert "MoE: all 128 experts resident in GPU memory, 8 active per token" in capsys.readouterr().out
    args = ("--model-id", "mistralai/Mistral-Small-3.1-24B", "--instance-type", "ml.g6e.12xlarge")
    assert plan(*args, "--max-model-len", "16384") == 0
    out = capsys.readouterr().out
    assert "multimodal: language model read from the nested text config" in out
    assert (
        "on-demand price in us-east-1: USD 13.12 per hour, 9,575 per month (730 h); "
        "2026-10-05, https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonSageMaker/current/us-east-1/index.csv"
    ) in out
    # A catalog type without a public price: the Price List command, not "USD ? per hour".
    args = ("--model-id", "Qwen/Qwen3-30B-A3B", "--instance-type", "ml.g6e.48xlarge", "--max-model-len", "32768")
    assert plan(*args) == 0
    out = capsys.readouterr().out
    assert f"on-demand price in us-east-1: {lookup_hint('us-east-1')}" in out and "USD ?" not in out


def test_quantized_checkpoints_against_the_gpu(env, capsys):
    # FP8 on an A10G: runs, weight-only through Marlin; on a V100: refused, with the nearest type that can.
    assert plan("--model-id", "Qwen/Qwen3-8B-FP8", "--instance-type", "ml.g5.xlarge", "--max-model-len", "8192") == 0
    out = capsys.readouterr().out
    assert "weight format: bfloat16, fp8 with vllm: OK" in out and "Marlin" in out
    args = ("--model-id", "Qwen/Qwen3-8B-FP8", "--instance-type", "ml.g5.xlarge", "--max-model-len", "8192", "--json")
    assert plan(*args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fits"] and report["instance"]["compute_capability"] == "8.6"
    assert report["weight_format"]["formats"] == ["bfloat16", "fp8"] and report["weight_format"]["warnings"]
    assert report["memory"]["attention"]["kv_heads"] == 8 and report["candidate"]["margin"] in ("fits", "tight")
    assert plan("--model-id", "Qwen/Qwen3-8B-AWQ", "--instance-type", "ml.p3.2xlarge", "--max-model-len", "4096") == 1
    out = capsys.readouterr().out
    assert "AWQ 4-bit weights need compute capability 7.5 or newer" in out
    assert "the nearest instance type that can: ml.g4dn.xlarge" in out  # the cheapest priced T4 (USD 0.7364/h)
    (better,) = [line for line in out.splitlines() if line.startswith("instance types that fit")]
    assert "ml.g4dn.xlarge (1 x NVIDIA T4)" in better and "ml.p3" not in better  # V100s fit, but cannot run AWQ
    assert plan("--model-id", "acme/mxfp4-8b", "--max-model-len", "8192", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert not [c for c in report["instances"] if c["instance_type"].startswith(("ml.g4dn", "ml.p3"))]


def test_the_ranking_prints_each_format_warning_once_per_gpu_model(env, capsys):
    assert plan("--model-id", "Qwen/Qwen3-8B-FP8", "--max-model-len", "4096") == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: FP8")]
    gpus = [line.split(" on ", 1)[1].split(" (compute capability")[0] for line in warnings]
    assert "NVIDIA A10G" in gpus and "NVIDIA T4" in gpus  # Marlin weight-only FP8 below Ada
    assert len(gpus) == len(set(gpus))  # not once per ml.g5 / ml.g4dn size


def test_bfloat16_on_t4_runs_in_float16_with_vllm_and_volta_is_refused_for_sglang(env, capsys):
    args = ("--model-id", "Qwen/Qwen3-8B", "--max-model-len", "4096", "--instance-type")
    assert plan(*args, "ml.g4dn.12xlarge") == 0
    out = capsys.readouterr().out
    assert "weight format: bfloat16 with vllm: OK" in out and "Falling back to torch.float16" in out
    assert plan(*args, "ml.p3.8xlarge", "--engine", "sglang") == 1
    out = capsys.readouterr().out
    assert "weight format: bfloat16 with sglang: NO" in out and "SGLang only supports sm75 and above" in out
    assert "the nearest instance type that can:" in out
    (better,) = [line for line in out.splitlines() if line.startswith("instance types that fit")]
    assert "ml.p3" not in better  # only GPUs SGLang runs on


def test_nothing_fits_says_what_would(env, capsys):
    assert plan("--model-id", "acme/huge", "--max-model-len", "32768") == 1
    out = capsys.readouterr().out
    assert "fits on no single catalog instance type" in out
    assert "a smaller quantization of the same model" in out
    assert "someone/huge-GPTQ-Int4, acme/huge-AWQ" in out  # most downloaded first
    assert "SageMaker HyperPod" in out


def test_nothing_fits_but_a_shorter_context_or_an_fp8_cache_would(env, capsys):
    # 500 sequences of 40,960 tokens: more KV cache than 8 x B300 hold in 16-bit, not in fp8.
    assert plan("--model-id", "Qwen/Qwen3-8B", "--max-model-len", "40960", "--max-num-seqs", "500") == 1
    out = capsys.readouterr().out
    assert "an fp8 KV cache" in out and "then ml.p6-b300.48xlarge fits" in out
    assert "a shorter context: max_model_len up to" in out and "for 500 sequence(s) at once" in out
    assert "none was found on the Hub for this repository" in out


def test_flags_that_need_a_model_id_or_an_instance_type(env, capsys):
    assert plan("--config", "x.json", "--revision", "main", "--weights-bytes", "1", "--max-model-len", "8") == 2
    assert "argument --revision: only with --model-id" in capsys.readouterr().err
    assert plan("--model-id", "Qwen/Qwen3-8B", "--tensor-parallel-size", "2", "--max-model-len", "8") == 2
    assert "argument --tensor-parallel-size: only with --instance-type" in capsys.readouterr().err
    assert plan("--model-id", "Qwen/Qwen3-8B", "--engine", "tgi", "--max-model-len", "8") == 2


def test_the_token_can_come_from_secrets_manager_by_arn(env, monkeypatch, capsys):
    import boto3
    from moto import mock_aws

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        arn = boto3.client("secretsmanager").create_secret(Name="hf", SecretString=TEST_TOKEN)["ARN"]
        args = ("--model-id", "acme/gated-8b", "--max-model-len", "8192", "--region", "us-east-1")
        assert plan(*args, "--hf-token-secret-arn", arn) == 0
        missing = arn.replace(":secret:hf", ":secret:nope")
        assert plan(*args, "--hf-token-secret-arn", missing) == 3
    out, err = capsys.readouterr()
    assert "cannot read the Hub token secret" in err
    assert TEST_TOKEN not in out + err


def test_unpriced_types_are_listed_apart_not_ranked_as_cheaper_or_dearer(env, capsys):
    assert plan("--model-id", "Qwen/Qwen3-8B", "--max-model-len", "8192") == 0
    lines = capsys.readouterr().out.splitlines()
    (apart,) = [i for i, line in enumerate(lines) if line.startswith("also fit, not ranked by price")]
    assert "the " in lines[1] and " priced, cheapest first:" in lines[1]
    ranked = [line.split() for line in lines[2:apart] if line.startswith("ml.")]
    unranked = [line.split() for line in lines[apart:] if line.startswith("ml.")]
    assert ranked and unranked
    assert all(r[-1] != "lookup" for r in ranked)  # the ranked table holds priced types only
    assert all(r[-2:] == ["lookup", "lookup"] for r in unranked)  # each says how to price it, in its legend
    hint = next(line for line in lines[apart:] if line.startswith("lookup: "))
    assert all(r[0] in hint for r in unranked) and hint.endswith(lookup_hint("us-east-1"))
    prices = [float(r[-2]) for r in ranked]
    assert prices == sorted(prices)


def test_json_names_the_priced_ranking_and_the_unpriced_apart(env, capsys):
    assert plan("--model-id", "Qwen/Qwen3-8B", "--max-model-len", "8192", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ranked_by_price"][0] == "ml.g6.xlarge" and "ml.g6e.xlarge" in report["unpriced"]
    assert set(report["ranked_by_price"]) | set(report["unpriced"]) == {c["instance_type"] for c in report["instances"]}
