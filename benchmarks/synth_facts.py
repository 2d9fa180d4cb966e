"""What do the model facts add to a synth? Today's synth against a synth that reads a recorded Hub lookup.

    .venv/bin/python benchmarks/synth_facts.py [--runs 3]

Both in one process, alternating, the default deployment (cdk.json's context) built and synthesized with cdk-nag:
(a) as the tests build it, no facts (the model checks wait for the deploy preflight); (b) as app.py builds it,
with ``model-facts.json`` holding the model (looked up once on a local fake Hub before timing), so the synth reads
the record, runs the memory, tensor-parallel and format checks and pins the revision; no network. Prints the
medians, their difference and ratio (the target: at most 2 s more).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aws_cdk as cdk

from app import build_app
from constructs_lib.deployment import FactsSource
from llmops.facts import hub_lookup
from tests.conftest import default_context
from tests.fakes.fake_hub import Declared, FakeHub

# Qwen/Qwen3-4B-Instruct-2507 (the default model_id): https://huggingface.co/Qwen/Qwen3-4B-Instruct-2507/blob/main/config.json
QWEN3_4B = {
    "architectures": ["Qwen3ForCausalLM"],
    "head_dim": 128,
    "hidden_size": 2560,
    "max_position_embeddings": 262144,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
}


def synth(facts: FactsSource | None) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        build_app(cdk.App(context=default_context(), outdir=out), facts=facts).synth()
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    context = default_context()
    with tempfile.TemporaryDirectory() as work, FakeHub() as hub:
        files = {"config.json": json.dumps(QWEN3_4B).encode(), "tokenizer.json": b"{}"}
        files |= {f"model-0000{i}-of-00003.safetensors": Declared(2_700_000_000) for i in (1, 2, 3)}
        hub.add_repo(context["model_id"], files)
        os.environ.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(Path(work) / "hf"))
        record = Path(work) / "model-facts.json"
        known = FactsSource(record, lookup=hub_lookup).facts_for(
            context["model_id"], context["revision"]
        )  # the one lookup
        assert known.facts is not None, known.missing
        recorded = FactsSource(record)
        synth(None)  # warm-up: jsii loads its modules on first use
        plain, with_facts = [], []
        for _ in range(args.runs):
            plain.append(synth(None))
            with_facts.append(synth(recorded))
    a, b = statistics.median(plain), statistics.median(with_facts)
    print(f"synth, no facts (today):       {a:6.2f} s  (median of {args.runs})")
    print(f"synth, recorded Hub lookup:    {b:6.2f} s  (median of {args.runs})")
    print(f"difference {b - a:+.2f} s, ratio {b / a:.3f}")
    return 0 if b - a <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
