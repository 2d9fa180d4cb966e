"""``python -m llmops.plan --gguf <path or s3://bucket/key.gguf>``: the memory fit of a GGUF file for llama.cpp.

Only the file's header is read (a local read, or S3 range GETs of its first megabytes); the weight bytes
are the file's size, summed over the parts of a split file (``-00001-of-0000N.gguf``). The report is the
same table as for safetensors checkpoints (``preflight.format_table``), with llama.cpp's figures
(``preflight/gguf.py``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from constructs_lib.rules import InstanceSpec, known_instance_types, lookup_instance
from preflight import format_table
from preflight.gguf import SPLIT_PART, GgufError, GgufHeader, estimate_gguf_fit, file_reader, read_header, s3_reader

S3_OBJECT = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>.+\.gguf)$")
SUGGESTIONS = 3


def _base(name: str) -> str:
    return SPLIT_PART.sub("", name) if SPLIT_PART.search(name) else name[: -len(".gguf")]


def _parts_pattern(name: str) -> re.Pattern[str]:
    """The file's own name, and the names of every part of the split file it belongs to."""
    return re.compile(rf"^{re.escape(_base(name))}(?:-\d{{5}}-of-\d{{5}})?\.gguf$")


def local_gguf(path: str) -> tuple[GgufHeader, int, list[str]]:
    folder, name = os.path.split(os.path.abspath(path))
    header = read_header(file_reader(path))
    names = [name]
    if header.split_count > 1:
        pattern = _parts_pattern(name)
        names = sorted(n for n in os.listdir(folder) if pattern.match(n))
    total = sum(os.path.getsize(os.path.join(folder, n)) for n in names)
    return header, total, [f"weights: {total:,} bytes in {len(names)} file(s) ({', '.join(names)})"]


def s3_gguf(s3: Any, bucket: str, key: str) -> tuple[GgufHeader, int, list[str]]:
    folder, _, name = key.rpartition("/")
    prefix = f"{folder}/" if folder else ""
    pattern = _parts_pattern(name)
    sizes = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + _base(name)):
        for obj in page.get("Contents", []):
            rest = obj["Key"][len(prefix) :]
            if pattern.match(rest):
                sizes[rest] = int(obj["Size"])
    if name not in sizes:
        raise GgufError(f"s3://{bucket}/{key} does not exist")
    header = read_header(s3_reader(s3, bucket, key))
    names = sorted(sizes) if header.split_count > 1 else [name]
    total = sum(sizes[n] for n in names)
    return header, total, [f"weights: {total:,} bytes in {len(names)} object(s) under s3://{bucket}/{prefix}"]


def instances_that_fit(header: GgufHeader, weight_bytes: int, **settings: Any) -> list[InstanceSpec]:
    """Catalog instance types llama.cpp fits on, one per GPU model and count, smallest total memory first."""
    found: dict[tuple[str, int], InstanceSpec] = {}
    for instance_type in known_instance_types():
        spec = lookup_instance(instance_type)
        if spec is None:
            continue
        fit = estimate_gguf_fit(
            header, weight_bytes=weight_bytes, gpu_count=spec.gpu_count, gpu_memory_gib=spec.gpu_memory_gib, **settings
        )
        key = (spec.gpu_model, spec.gpu_count)
        if fit.fits and (key not in found or spec.gpu_count < found[key].gpu_count):
            found.setdefault(key, spec)
    return sorted(found.values(), key=lambda s: (s.total_gpu_memory_gib, s.gpu_count, s.instance_type))


def plan_gguf(
    args: argparse.Namespace, spec: InstanceSpec | None, parser: argparse.ArgumentParser, s3_client: Any
) -> int:
    """Exit status as for the other sources: 0 fits, 1 does not fit, 2 bad arguments, 3 could not read S3."""
    match = S3_OBJECT.match(args.gguf)
    try:
        if match:
            if s3_client is None:
                import boto3

                s3_client = boto3.session.Session().client("s3", region_name=args.region)
            header, weight_bytes, notes = s3_gguf(s3_client, match["bucket"], match["key"])
        elif args.gguf.startswith("s3://"):
            parser.error(f"argument --gguf: invalid value {args.gguf!r}: expected s3://bucket/key.gguf")
        else:
            if not Path(args.gguf).is_file():
                parser.error(f"argument --gguf: {args.gguf} is not a file")
            header, weight_bytes, notes = local_gguf(args.gguf)
    except GgufError as e:
        parser.error(f"argument --gguf {args.gguf}: {e}")
    except Exception as e:  # botocore's errors: say which object and why, as the other S3 source does
        if not match:
            raise
        print(f"error: could not read {args.gguf}: {e}", file=sys.stderr)
        return 3
    if args.weights_bytes is not None:
        notes.append(f"weights: {args.weights_bytes:,} bytes as given by --weights-bytes (overrides the above)")
        weight_bytes = args.weights_bytes
    settings = {"max_model_len": args.max_model_len, "max_num_seqs": args.max_num_seqs}
    for note in notes:
        print(note)
    if spec is None:  # no --instance-type: every catalog type llama.cpp fits on
        try:
            found = instances_that_fit(header, weight_bytes, **settings)
        except (GgufError, ValueError) as e:
            parser.error(f"argument --gguf {args.gguf}: {e}")
        listed = ", ".join(f"{s.instance_type} ({s.gpu_count} x {s.gpu_model})" for s in found)
        print(f"instance types that fit these settings with llama.cpp: {listed or 'none in the catalog'}")
        return 0 if found else 1
    try:
        fit = estimate_gguf_fit(
            header, weight_bytes=weight_bytes, gpu_count=spec.gpu_count, gpu_memory_gib=spec.gpu_memory_gib, **settings
        )
    except (GgufError, ValueError) as e:
        parser.error(f"argument --gguf {args.gguf}: {e}")
    title = f"{args.instance_type} ({spec.gpu_count} x {spec.gpu_model}, {spec.gpu_memory_gib:g} GB), llama.cpp"
    print(format_table(fit, title=title))
    if not fit.fits:
        better = instances_that_fit(header, weight_bytes, **settings)[:SUGGESTIONS]
        if better:
            listed = ", ".join(f"{s.instance_type} ({s.gpu_count} x {s.gpu_model})" for s in better)
            print(f"instance types that fit these settings with llama.cpp: {listed}")
        else:
            print("no instance type in the catalog fits these settings: shorten max_model_len or pick a smaller quant")
    return 0 if fit.fits else 1
