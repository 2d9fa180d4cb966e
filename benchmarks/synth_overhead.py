"""How much does our validation and construct tree add to a synth? Ratios against a baseline.

    .venv/bin/python benchmarks/synth_overhead.py [--runs 5]

Baseline, in the same process: a bare CDK app with one S3 bucket, synthesized the same way.
Measured: (a) reading and validating the context alone, (b) building and synthesizing the default
deployment with cdk-nag enabled. Figures are medians of --runs runs after one warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3

from app import build_app
from constructs_lib.deployment.config import DeploymentConfig
from tests.conftest import default_context


def median_seconds(fn, runs: int) -> float:
    fn()  # warm-up: jsii loads modules on first use
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def baseline() -> None:
    with tempfile.TemporaryDirectory() as out:
        app = cdk.App(outdir=out)
        stack = cdk.Stack(app, "Baseline")
        s3.Bucket(stack, "Bucket")
        app.synth()


def ours() -> None:
    with tempfile.TemporaryDirectory() as out:
        build_app(cdk.App(context=default_context(), outdir=out)).synth()


def validate_only() -> None:
    DeploymentConfig.from_context(default_context())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    base = median_seconds(baseline, runs)
    full = median_seconds(ours, runs)
    check = median_seconds(validate_only, runs)
    print(f"baseline synth (1 bucket):            {base * 1000:8.1f} ms  1.00x")
    print(f"default deployment synth + cdk-nag:   {full * 1000:8.1f} ms  {full / base:5.2f}x baseline")
    print(f"context validation alone:             {check * 1000:8.1f} ms  {check / base:5.3f}x baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
