"""Estimate whether a model fits an instance's GPUs at a context length, before anything is deployed.

    python -m llmops.plan --config config.json --weights-bytes 16381470000 \\
        --instance-type ml.g6e.2xlarge --max-model-len 32768
    python -m llmops.plan --model-s3-uri s3://my-bucket/models/Qwen--Qwen3-8B/<revision>/ \\
        --instance-type ml.g6.xlarge --max-model-len 32768
    python -m llmops.plan --gguf Qwen3-8B-Q4_K_M.gguf --instance-type ml.g5.2xlarge --max-model-len 16384

With ``--model-s3-uri`` the command reads ``config.json`` and the staging manifest
(``.hf-model-manifest.json``) under the prefix; without a manifest it sums the sizes of the weight
objects it lists there (unverified). It prints, per GPU, the weights, runtime overhead, KV-cache
budget, the largest context and the number of full-length sequences that fit, what to change when
they do not, and instance types that would fit. The formula and its assumptions are in
``preflight/memory_fit.py``.

Exit status: 0 fits, 1 does not fit, 2 bad arguments, 3 could not read S3.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from constructs_lib.catalog import InstanceSpec, known_instance_types, lookup_instance, resolve_instance
from preflight import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    KV_CACHE_DTYPES,
    estimate_memory_fit,
    format_table,
    select_weight_files,
    tp_divides_heads,
)
from preflight.weights import SAFETENSORS_INDEX

MANIFEST = ".hf-model-manifest.json"
S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>.*))?$")
SUGGESTIONS = 3


class S3ReadError(Exception):
    """The checkpoint under the S3 prefix could not be read; the message says what and why."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be at least 1")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be greater than 0")
    return value


def utilization(text: str) -> float:
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: a fraction in (0, 1], e.g. 0.9")
    return value


def split_s3_uri(uri: str) -> tuple[str, str] | None:
    """(bucket, key prefix ending in '/' or empty) of an s3:// URI, or None when it is not one."""
    match = S3_URI.match(uri)
    if not match:
        return None
    prefix = match["prefix"] or ""
    return match["bucket"], prefix if not prefix or prefix.endswith("/") else prefix + "/"


def _get_json(s3: Any, bucket: str, key: str, *, missing_ok: bool = False) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if missing_ok and code in ("NoSuchKey", "404"):
            return None
        raise S3ReadError(f"could not read s3://{bucket}/{key}: {code or e}") from None
    except BotoCoreError as e:
        raise S3ReadError(f"could not read s3://{bucket}/{key}: {e}") from None
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise S3ReadError(f"s3://{bucket}/{key} is not valid JSON: {e}") from None


def _list_sizes(s3: Any, bucket: str, prefix: str) -> dict[str, int]:
    from botocore.exceptions import BotoCoreError, ClientError

    sizes: dict[str, int] = {}
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                sizes[obj["Key"][len(prefix) :]] = obj["Size"]
    except (ClientError, BotoCoreError) as e:
        raise S3ReadError(f"could not list s3://{bucket}/{prefix}: {e}") from None
    return sizes


def read_checkpoint(s3: Any, bucket: str, prefix: str) -> tuple[dict[str, Any], int, list[str]]:
    """(config.json, weight bytes, notes on where the bytes came from) of the checkpoint under the prefix."""
    where = f"s3://{bucket}/{prefix}"
    config = _get_json(s3, bucket, prefix + "config.json", missing_ok=True)
    if config is None:
        raise S3ReadError(f"no config.json under {where}: is this the checkpoint's root prefix?")
    if not isinstance(config, dict):
        raise S3ReadError(f"{where}config.json is not a JSON object")

    manifest = _get_json(s3, bucket, prefix + MANIFEST, missing_ok=True)
    if manifest is not None:
        files = manifest.get("files") if isinstance(manifest, dict) else None
        if not isinstance(files, list) or not files:
            total = manifest.get("total_bytes") if isinstance(manifest, dict) else None
            if not isinstance(total, int) or total <= 0:
                raise S3ReadError(f"{where}{MANIFEST} lists no files and no total_bytes")
            return config, total, [f"weights: total_bytes {total:,} of {where}{MANIFEST} (it lists no files)"]
        try:
            sizes = {str(f["path"]): int(f["size"]) for f in files}
        except (KeyError, TypeError, ValueError):
            raise S3ReadError(f"{where}{MANIFEST} has a files entry without path and size") from None
        source = f"listed in {MANIFEST}"
        if isinstance(manifest.get("total_bytes"), int):
            source += f" (total_bytes {manifest['total_bytes']:,}, incl. tokenizer and config files)"
    else:
        sizes = _list_sizes(s3, bucket, prefix)
        source = f"listed under the prefix: no {MANIFEST} there, so the sizes are not verified"

    index = _get_json(s3, bucket, prefix + SAFETENSORS_INDEX, missing_ok=True) if SAFETENSORS_INDEX in sizes else None
    weights = select_weight_files(sizes, index if isinstance(index, dict) else None)
    if not weights.files:
        raise S3ReadError(f"no weight files (*.safetensors, *.bin, *.gguf) under {where}")
    notes = [f"weights: {weights.total_bytes:,} bytes in {len(weights.files)} file(s) {source}"]
    notes += [f"weights: {note}" for note in weights.notes]
    return config, weights.total_bytes, notes


def _size_rank(instance_type: str) -> int:
    """Orders the sizes of one family: xlarge < 2xlarge < ... < 48xlarge."""
    match = re.search(r"\.(\d*)xlarge$", instance_type)
    return int(match[1] or 1) if match else 0


def instances_that_fit(config: dict[str, Any], weight_bytes: int, **settings: Any) -> list[InstanceSpec]:
    """Catalog instance types on which the model fits with tensor parallel = all GPUs, smallest first.

    One type per GPU model and count (the smallest host), ordered by total GPU memory.
    """
    found: dict[tuple[str, int], InstanceSpec] = {}
    for instance_type in known_instance_types():
        spec = lookup_instance(instance_type)
        if spec is None or tp_divides_heads(config, spec.gpu_count):
            continue
        fit = estimate_memory_fit(
            config, weight_bytes=weight_bytes, gpu_count=spec.gpu_count, gpu_memory_gib=spec.gpu_memory_gib, **settings
        )
        key = (spec.gpu_model, spec.gpu_count)
        if fit.fits and (key not in found or _size_rank(instance_type) < _size_rank(found[key].instance_type)):
            found[key] = spec
    return sorted(found.values(), key=lambda s: (s.total_gpu_memory_gib, s.gpu_count, s.instance_type))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llmops.plan", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", type=Path, help="a model's config.json (needs --weights-bytes)")
    source.add_argument("--model-s3-uri", help="s3://bucket/prefix/ of a staged checkpoint")
    source.add_argument("--gguf", help="a GGUF file for llama.cpp: a local path or s3://bucket/key.gguf (header only)")
    parser.add_argument("--weights-bytes", type=positive_int, help="on-disk bytes of the weight files")
    parser.add_argument("--instance-type", required=True, help="e.g. ml.g6e.2xlarge")
    parser.add_argument("--max-model-len", type=positive_int, required=True, help="context length in tokens")
    parser.add_argument(
        "--tensor-parallel-size", type=positive_int, help="GPUs the model is split over. Default: all of them"
    )
    parser.add_argument(
        "--max-num-seqs",
        type=positive_int,
        default=1,
        help="how many max-model-len sequences must fit at once. Default: 1 (the engine's own start-up check)",
    )
    parser.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    parser.add_argument(
        "--gpu-memory-utilization",
        type=utilization,
        default=DEFAULT_GPU_MEMORY_UTILIZATION,
        help=f"share of GPU memory the engine may use. Default: {DEFAULT_GPU_MEMORY_UTILIZATION} (vLLM's)",
    )
    parser.add_argument("--gpu-count", type=positive_int, help="GPUs per instance, for types the catalog lacks")
    parser.add_argument(
        "--gpu-memory-gib", type=positive_float, help="nominal memory per GPU, for types the catalog lacks"
    )
    parser.add_argument("--region", help="region of the S3 client. Default: the AWS configuration's")
    return parser


def main(argv: list[str] | None = None, *, s3_client: Any = None) -> int:
    try:
        return _plan(argv, s3_client)
    except SystemExit as e:  # argparse's exits: 0 for --help, 2 with its message for a bad argument
        return e.code if isinstance(e.code, int) else 2


def _plan(argv: list[str] | None, s3_client: Any) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    spec, problems = resolve_instance(args.instance_type, gpu_count=args.gpu_count, gpu_memory_gib=args.gpu_memory_gib)
    if problems or spec is None:
        parser.error(f"argument --instance-type {args.instance_type}: {' '.join(problems)}")
    tp = args.tensor_parallel_size or spec.gpu_count
    if tp > spec.gpu_count:
        parser.error(
            f"argument --tensor-parallel-size: invalid value {tp}: {args.instance_type} has {spec.gpu_count} "
            f"GPU(s); allowed: 1 to {spec.gpu_count}"
        )

    if args.gguf is not None:
        from llmops.plan_gguf import plan_gguf

        return plan_gguf(args, spec, parser, s3_client)
    notes: list[str] = []
    if args.config is not None:
        if args.weights_bytes is None:
            parser.error("argument --weights-bytes: required with --config (the on-disk size of the weight files)")
        try:
            config = json.loads(args.config.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            parser.error(f"argument --config {args.config}: cannot read it as JSON: {e}")
        if not isinstance(config, dict):
            parser.error(f"argument --config {args.config}: not a JSON object")
        weight_bytes, source_flag = args.weights_bytes, f"--config {args.config}"
    else:
        location = split_s3_uri(args.model_s3_uri)
        if location is None:
            parser.error(f"argument --model-s3-uri: invalid value {args.model_s3_uri!r}: expected s3://bucket/prefix/")
        if s3_client is None:
            import boto3

            s3_client = boto3.session.Session().client("s3", region_name=args.region)
        try:
            config, weight_bytes, notes = read_checkpoint(s3_client, *location)
        except S3ReadError as e:
            print(f"error: {e}", file=sys.stderr)
            return 3
        if args.weights_bytes is not None:
            notes.append(f"weights: {args.weights_bytes:,} bytes as given by --weights-bytes (overrides the above)")
            weight_bytes = args.weights_bytes
        source_flag = f"--model-s3-uri {args.model_s3_uri}"

    settings = {
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "kv_cache_dtype": args.kv_cache_dtype,
        "gpu_memory_utilization": args.gpu_memory_utilization,
    }
    try:
        fit = estimate_memory_fit(
            config,
            weight_bytes=weight_bytes,
            gpu_count=spec.gpu_count,
            gpu_memory_gib=spec.gpu_memory_gib,
            tensor_parallel_size=tp,
            **settings,
        )
    except ValueError as e:
        parser.error(f"argument {source_flag}: {e}")

    title = f"{args.instance_type} ({spec.gpu_count} x {spec.gpu_model}, {spec.gpu_memory_gib:g} GB)"
    for note in notes:
        print(note)
    print(format_table(fit, title=title))
    if not fit.fits:
        better = instances_that_fit(config, weight_bytes, **settings)[:SUGGESTIONS]
        if better:
            listed = ", ".join(f"{s.instance_type} ({s.gpu_count} x {s.gpu_model})" for s in better)
            print(f"instance types that fit these settings (tensor parallel = all GPUs): {listed}")
        else:
            print("no instance type in the catalog fits these settings: shorten max_model_len or quantize")
    return 0 if fit.fits else 1


if __name__ == "__main__":
    sys.exit(main())
