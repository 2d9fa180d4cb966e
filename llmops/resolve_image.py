"""Find the newest pinned DLC image tag for an engine and instance type, and record it.

    python -m llmops.resolve_image --engine vllm --instance-type ml.g6e.xlarge --region us-west-2

Lists the tags of the engine's repository in the region's DLC registry (ECR DescribeImages),
keeps only the engine's pinned tags (its ``tag_pattern`` in constructs_lib/data/engines.json: for vLLM
and SGLang X.Y.Z[.postN]-gpu-py312-cuNNN-ubuntuA.B-sagemaker, for LMI <djl>-lmi<N.N.N>-cuNNN), drops
those whose CUDA level the instance's GPUs cannot run, prints the newest and records it in
cdk.context.json, the way CDK records its own context lookups. ``cdk synth`` then uses the
recorded tag for that engine and instance type until the entry is removed
(``cdk context --reset KEY``) or an ``image`` is given.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import safejson
from constructs_lib.rules import (
    SEMANTIC_TAG,
    cuda_of_tag,
    dlc_account,
    engine_names,
    get_engine,
    recorded_tag_key,
    resolve_instance,
    version_key,
)


def compatible_tags(tags: list[str], instance_spec: Any, pattern: re.Pattern[str] = SEMANTIC_TAG) -> list[str]:
    """Pinned tags (``pattern``) whose CUDA level the instance accepts, newest first (version, then CUDA)."""
    keep = [t for t in set(tags) if pattern.match(t) and instance_spec.accepts_cuda(cuda_of_tag(t))]
    return sorted(keep, key=lambda t: (version_key(t, pattern), cuda_of_tag(t), t), reverse=True)


def list_tags(ecr: Any, registry_id: str, repository: str) -> list[str]:
    tags: list[str] = []
    paginator = ecr.get_paginator("describe_images")
    pages = paginator.paginate(registryId=registry_id, repositoryName=repository, filter={"tagStatus": "TAGGED"})
    for page in pages:
        for detail in page.get("imageDetails", []):
            tags.extend(detail.get("imageTags", []))
    return tags


def record(context_file: Path, existing: dict[str, Any], key: str, tag: str) -> None:
    """Merge ``key: tag`` into the CDK context file, keeping every other entry."""
    data = {**existing, key: tag}
    context_file.write_text(json.dumps(dict(sorted(data.items())), indent=2) + "\n")


def main(argv: list[str] | None = None, *, ecr_client: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmops.resolve_image", description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", required=True, choices=engine_names())
    parser.add_argument("--instance-type", required=True, help="e.g. ml.g6e.xlarge")
    parser.add_argument("--region", required=True, help="region whose DLC registry is listed")
    parser.add_argument("--gpu-count", type=int, help="GPUs per instance, for types the catalog does not know")
    parser.add_argument("--gpu-memory-gib", type=float, help="memory per GPU, for types the catalog does not know")
    parser.add_argument("--context-file", type=Path, default=Path("cdk.context.json"))
    parser.add_argument("--no-record", action="store_true", help="print only; leave cdk.context.json alone")
    args = parser.parse_args(argv)

    engine = get_engine(args.engine)
    if engine.image_build:
        # Nothing to resolve: cdk deploy builds this engine's image from the repository (a CDK image asset).
        print(
            f"{engine.name}: the serving image is built by cdk deploy from {engine.image_build['directory']} "
            "(Docker needed), not resolved from the DLC registry; pass -c image=<uri> to serve one you built",
            file=sys.stderr,
        )
        return 2
    spec, problems = resolve_instance(args.instance_type, gpu_count=args.gpu_count, gpu_memory_gib=args.gpu_memory_gib)
    if problems:
        print(f"error: {problems[0]}", file=sys.stderr)
        return 2
    account = dlc_account(args.region)
    if account is None:
        print(
            f"error: region {args.region!r} has no DLC registry in constructs_lib/data/dlc_registry.json",
            file=sys.stderr,
        )
        return 2

    try:
        existing = (
            safejson.loads(args.context_file.read_bytes(), source=str(args.context_file))
            if args.context_file.exists()
            else {}
        )
    except json.JSONDecodeError as e:
        print(
            f"error: {args.context_file} is not valid JSON ({e.msg}, line {e.lineno}); fix or remove it",
            file=sys.stderr,
        )
        return 2

    if ecr_client is None:
        import boto3

        ecr_client = boto3.client("ecr", region_name=args.region)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        tags = list_tags(ecr_client, account, engine.repository)
    except (ClientError, BotoCoreError) as e:
        print(f"error: listing {account}/{engine.repository} in {args.region} failed: {e}", file=sys.stderr)
        return 3

    candidates = compatible_tags(tags, spec, engine.tag_pattern)
    if not candidates:
        print(
            f"error: none of the {len(tags)} tags of {engine.repository} is a pinned tag ({engine.tag_format}) that "
            f"{args.instance_type} ({spec.gpu_model}) can run",
            file=sys.stderr,
        )
        return 1
    tag = candidates[0]
    suffix = "amazonaws.com.cn" if args.region.startswith("cn-") else "amazonaws.com"
    uri = f"{account}.dkr.ecr.{args.region}.{suffix}/{engine.repository}:{tag}"
    print(tag)
    print(f"image: {uri} ({len(candidates)} compatible of {len(tags)} tags)", file=sys.stderr)
    if not args.no_record:
        key = recorded_tag_key(engine.name, args.instance_type)
        record(args.context_file, existing, key, tag)
        print(f"recorded {key} in {args.context_file}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
