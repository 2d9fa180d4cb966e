"""Where does a model fit, cheapest first, and will the GPU run its weight format? Before anything is deployed.

    python -m llmops.plan -c model_id=meta-llama/Llama-3.1-8B-Instruct -c instance_type=ml.g6e.12xlarge \
        -c max_model_len=65536                      # the context keys cdk synth takes (make plan ARGS=...)
    python -m llmops.plan --context-file cdk.json -c max_model_len=131072
    python -m llmops.plan -c deployments_file=fleet.json --deployment chat   # one deployment of a fleet
    python -m llmops.plan --model-id Qwen/Qwen3-32B --max-model-len 32768 [--region us-west-2] [--json]
    python -m llmops.plan --model-id Qwen/Qwen3-8B --instance-type ml.g6.xlarge --max-model-len 32768
    python -m llmops.plan --config config.json --weights-bytes 16381470000 --max-model-len 32768
    python -m llmops.plan --model-s3-uri s3://my-bucket/models/Qwen--Qwen3-8B/<revision>/ \\
        --instance-type ml.g6.xlarge --max-model-len 32768
    python -m llmops.plan --gguf Qwen3-8B-Q4_K_M.gguf --instance-type ml.g5.2xlarge --max-model-len 16384

The model comes from the Hugging Face Hub (``--model-id``: config.json and the weight files' sizes through
``huggingface_hub``, no weights downloaded; ``HF_ENDPOINT`` and a token from ``$HF_TOKEN`` or
``--hf-token-secret-arn`` are honoured), from a staged S3 prefix (``--model-s3-uri``: config.json and the
staging manifest ``.hf-model-manifest.json``, else the listed weight objects, unverified) or from a local
config.json with ``--weights-bytes``.

Without ``--instance-type`` it lists every catalog instance type on which the model fits, cheapest first
in ``--region``: GPUs, tensor parallel size, the largest context, full-length sequences at once, a margin
(fits / tight: under 10 % of the engine's memory left / no), and on-demand USD per hour and per month
(``?`` where no sourced price is known). When nothing fits it says what would. With ``--instance-type``
it prints the detailed per-GPU report for that type. ``--json`` prints either as JSON. The memory formula
is in ``preflight/memory_fit.py``; the weight-format table in ``preflight/data/weight_formats.json``.

With ``-c key=value`` / ``--context-file`` the deployment is read exactly as ``cdk synth`` reads it
(llmops/context.py: the context-key registry and DeploymentConfig's checks) and checked with the settings synth
checks it with (constructs_lib/deployment/model_checks.py ``check_settings``: engine_env's KV-cache dtype, memory share,
max_num_batched_tokens and format flags, ``preflight_sequences``, ``preflight_skip``), from ``model-facts.json``
when the model is recorded there (no network), else the Hub. A fleet (``deployments`` / ``deployments_file``)
needs ``--deployment NAME``: that deployment's keys merged over the top-level ones, as synth merges them;
without it plan exits 2 and lists the names.

Exit status: 0 fits (somewhere), 1 does not fit, 2 bad arguments or context, 3 could not read S3 or the Hub;
each error is one line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import safejson
from constructs_lib.rules import (
    MAX_FALLBACKS,
    InstanceSpec,
    Price,
    engine_names,
    hours_per_month,
    known_instance_types,
    lookup_hint,
    lookup_instance,
    nearest_capable,
    resolve_instance,
)
from constructs_lib.rules import PRICE_LOOKUP as LOOKUP
from constructs_lib.rules import PRICE_UNKNOWN as UNKNOWN
from llmops.context import add_context_arguments, uses_context
from llmops.facts import RECORD
from llmops.price_list import price
from preflight import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    KV_CACHE_DTYPES,
    MemoryFit,
    format_table,
    select_weight_files,
    tp_divides_heads,
)
from preflight.context import engine_context_limit
from preflight.formats import FormatCheck
from preflight.memory_fit import largest_context_for, text_config
from preflight.model_check import check_model
from preflight.weights import SAFETENSORS_INDEX

MANIFEST = ".hf-model-manifest.json"
S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>.*))?$")
SUGGESTIONS = 3


DEFAULT_REGION = "us-east-1"
DEFAULT_ENGINE = "vllm"
# Under this share of the engine's memory left after the required KV cache, a fit is "tight": activation
# peaks, CUDA graphs and fragmentation vary by engine version (see the calibration table in the README).
TIGHT_HEADROOM = 0.10
HYPERPOD = (
    "beyond one instance, multi-node serving (tensor/pipeline parallel across instances) is the path: "
    "Amazon SageMaker HyperPod runs such deployments; this project deploys single-instance endpoints"
)


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
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read(safejson.MAX_SIZE + 1)  # bounded: refused above it
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if missing_ok and code in ("NoSuchKey", "404"):
            return None
        raise S3ReadError(f"could not read s3://{bucket}/{key}: {code or e}") from None
    except BotoCoreError as e:
        raise S3ReadError(f"could not read s3://{bucket}/{key}: {e}") from None
    try:
        return safejson.loads(body, source=f"s3://{bucket}/{key}")
    except safejson.JsonError as e:  # names the object
        raise S3ReadError(f"{e.source} is {e.why}") from None


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


def instances_that_fit(
    config: dict[str, Any], weight_bytes: int, *, engine: str = DEFAULT_ENGINE, **settings: Any
) -> list[InstanceSpec]:
    """Catalog instance types on which the model fits with tensor parallel = all GPUs, smallest first.

    One type per GPU model and count (the smallest host), ordered by total GPU memory; types whose GPUs
    cannot run the checkpoint's weight format for ``engine`` are left out.
    """
    found: dict[tuple[str, int], InstanceSpec] = {}
    for instance_type in known_instance_types():
        spec = lookup_instance(instance_type)
        if spec is None:
            continue
        checked = check_model(
            config,
            weight_bytes=weight_bytes,
            gpu_count=spec.gpu_count,
            gpu_memory_gib=spec.gpu_memory_gib,
            compute_capability=spec.compute_capability,
            engine=engine,
            **settings,
        )
        key = (spec.gpu_model, spec.gpu_count)
        if checked.ok and (key not in found or _size_rank(instance_type) < _size_rank(found[key].instance_type)):
            found[key] = spec
    return sorted(found.values(), key=lambda s: (s.total_gpu_memory_gib, s.gpu_count, s.instance_type))


# -- ranking -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One instance type for the model: the fit, the margin, the format check and the price."""

    instance_type: str
    gpu_count: int
    gpu_model: str
    gpu_memory_gib: float
    tensor_parallel_size: int
    largest_context: int  # one sequence
    context_for_all_sequences: int  # each of max_num_seqs sequences at once
    full_length_sequences: int
    margin: str  # "fits", "tight", "no", or "skipped" (what does not fit is a check preflight_skip turns off)
    headroom: float  # share of the engine's memory left after the required KV cache (negative: short)
    usd_per_hour: float | None
    usd_per_month: float | None
    price_date: str | None = None
    price_source: str | None = None  # the price's source: Price List API (cached) or the shipped table's URL
    price_via: str | None = None  # who quoted that source, for a figure not read from it (prices.Price.via)
    reasons: list[str] = field(default_factory=list)  # why not, when margin is "no"
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # problems of checks preflight_skip turns off: not refused


def margin_of(fit: MemoryFit, formats: FormatCheck) -> tuple[str, float]:
    headroom = (fit.kv_budget_bytes_per_gpu - fit.kv_bytes_needed_per_gpu) / fit.available_bytes_per_gpu
    if not fit.fits or not formats.ok:
        return "no", headroom
    return ("tight" if headroom < TIGHT_HEADROOM else "fits"), headroom


def evaluate(
    config: dict[str, Any],
    weight_bytes: int,
    spec: InstanceSpec,
    *,
    engine: str,
    region: str,
    settings: dict[str, Any],
    tensor_parallel_size: int | None = None,
    gpu_label: str | None = None,
    skip: tuple[str, ...] = (),
) -> tuple[Candidate, MemoryFit, FormatCheck]:
    """Memory fit and weight format of the model on ``spec`` (tensor parallel: all GPUs unless given).

    ``gpu_label`` names the GPU in format warnings. Default: the instance type and its GPU model. ``skip``: the
    checks ``preflight_skip`` turns off (synth and the deploy preflight skip them): every check still runs and
    reports, but a problem of a skipped check is listed in ``skipped``, not refused (margin ``skipped`` when
    nothing else is wrong).
    """
    checked = check_model(
        config,
        weight_bytes=weight_bytes,
        gpu_count=spec.gpu_count,
        gpu_memory_gib=spec.gpu_memory_gib,
        compute_capability=spec.compute_capability,
        engine=engine,
        tensor_parallel_size=tensor_parallel_size,
        gpu=gpu_label or f"{spec.instance_type} ({spec.gpu_model})",
        alternatives=nearest_capable(spec, region) if spec.in_catalog else None,
        **settings,
    )
    fit, formats = checked.fit, checked.formats
    assert fit is not None and formats is not None  # nothing skipped
    margin, headroom = margin_of(fit, formats)
    skipped = [text for check, text in checked.problems if check in skip]
    if margin == "no" and skipped and len(skipped) == len(checked.problems):
        margin = "skipped"
    largest = fit.max_model_len_that_fits
    if fit.context_limit is not None:
        largest = min(largest, fit.context_limit)
    cost: Price = price(spec.instance_type, region)
    candidate = Candidate(
        instance_type=spec.instance_type,
        gpu_count=spec.gpu_count,
        gpu_model=spec.gpu_model,
        gpu_memory_gib=spec.gpu_memory_gib,
        tensor_parallel_size=fit.tensor_parallel_size,
        largest_context=largest,
        context_for_all_sequences=largest_context_for(fit, fit.max_num_seqs),
        full_length_sequences=fit.full_length_sequences,
        margin=margin,
        headroom=round(headroom, 4),
        usd_per_hour=cost.usd_per_hour,
        usd_per_month=cost.usd_per_month,
        price_date=cost.date,
        price_source=cost.source,
        price_via=cost.via,
        reasons=fit.problems + formats.problems,
        warnings=fit.warnings + formats.warnings,
        skipped=skipped,
    )
    return candidate, fit, formats


def rank(
    config: dict[str, Any], weight_bytes: int, *, engine: str, region: str, settings: dict[str, Any]
) -> list[Candidate]:
    """Every catalog instance type, those that fit first, cheapest known price first, then least GPU memory."""
    found = []
    for instance_type in known_instance_types():
        spec = lookup_instance(instance_type)
        if spec is None:
            continue
        # Format warnings name the GPU model only: the ranking prints each once, not once per instance size.
        found.append(
            evaluate(
                config, weight_bytes, spec, engine=engine, region=region, settings=settings, gpu_label=spec.gpu_model
            )[0]
        )
    return sorted(
        found,
        key=lambda c: (
            c.margin == "no",
            c.usd_per_hour is None,
            c.usd_per_hour or 0.0,
            c.gpu_count * c.gpu_memory_gib,
            c.instance_type,
        ),
    )


def pool_suggestion(fitting: list[Candidate], max_fallbacks: int = MAX_FALLBACKS) -> list[str]:
    """The next-best fitting types after the first, as ``instance_pools`` fallbacks, in ranking order.

    Every pool serves the same Model with the same engine settings (constructs_lib/instance_pools.py), so a
    fallback must run the first type's tensor parallel size on as many GPUs: only types with the same GPU count
    (their fit was computed at that size) qualify; at most ``max_fallbacks`` (InstancePools holds 5).
    """
    if not fitting:
        return []
    first = fitting[0]
    same = [
        c.instance_type
        for c in fitting[1:]
        if c.gpu_count == first.gpu_count and c.tensor_parallel_size == first.tensor_parallel_size
    ]
    return same[:max_fallbacks]


def suggestions(
    config: dict[str, Any],
    weight_bytes: int,
    candidates: list[Candidate],
    *,
    engine: str,
    region: str,
    settings: dict[str, Any],
    variants: list[str],
) -> list[str]:
    """What would fit when nothing does: an fp8 KV cache, a shorter context, a smaller quantization, more nodes.

    A max_model_len above the longest context the engine accepts is refused whatever the instance, so none of those
    can keep it: the advice then points to that limit and works from it (:func:`_beyond_limit`).
    """
    if (limit := refused_context(config, settings)) is not None:
        return _beyond_limit(
            config, weight_bytes, limit, engine=engine, region=region, settings=settings, variants=variants
        )
    found = []
    if settings["kv_cache_dtype"] not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        with_fp8 = rank(
            config, weight_bytes, engine=engine, region=region, settings={**settings, "kv_cache_dtype": "fp8"}
        )
        fitting = [c for c in with_fp8 if c.margin != "no"]
        if fitting:
            found.append(
                f"an fp8 KV cache (engine_env SM_<ENGINE>_KV_CACHE_DTYPE=fp8, or --kv-cache-dtype fp8 here) halves "
                f"the KV cache: then {fitting[0].instance_type} fits ({len(fitting)} type(s) in all)"
            )
    # Types where the weights fit and the format runs: the longest context every sequence can have there.
    sequences = settings["max_num_seqs"]
    shorter = [
        c
        for c in candidates
        if c.context_for_all_sequences > 0
        and not any(r.startswith(("weights do not fit", "tensor_parallel")) for r in c.reasons)
        and not any("compute capability" in r for r in c.reasons)
    ]
    if shorter:
        best = max(shorter, key=lambda c: (c.context_for_all_sequences, -(c.usd_per_hour or 0)))
        found.append(
            f"a shorter context: max_model_len up to {best.context_for_all_sequences:,} fits on "
            f"{best.instance_type} ({best.gpu_count} x {best.gpu_model}) for {sequences} sequence(s) at once"
        )
    if variants:
        found.append(
            "a smaller quantization of the same model (repositories on the Hub that declare it their base "
            f"model): {', '.join(variants)}; run plan with --model-id on one of them"
        )
    else:
        found.append(
            "a quantized checkpoint of the same model (AWQ/GPTQ 4-bit weights are about a quarter of 16-bit, FP8 "
            "half): none was found on the Hub for this repository (or the source is not the Hub)"
        )
    found.append(HYPERPOD)
    return found


def refused_context(config: dict[str, Any], settings: dict[str, Any]) -> int | None:
    """The longest context the engine accepts, when ``settings``' max_model_len is above it and the engine's opt-in
    (``long_context``: VLLM_ALLOW_LONG_MAX_MODEL_LEN, preflight/context.py) is not set; None otherwise."""
    if settings.get("long_context"):
        return None
    limit = engine_context_limit(text_config(config))
    if limit is None or limit.accepts(settings["max_model_len"]):
        return None
    return limit.largest


def _beyond_limit(
    config: dict[str, Any],
    weight_bytes: int,
    limit: int,
    *,
    engine: str,
    region: str,
    settings: dict[str, Any],
    variants: list[str],
) -> list[str]:
    """The suggestions for a refused context: the limit first, then what fits at the limit (or what would)."""
    head = (
        f"max_model_len={settings['max_model_len']:,} is above the longest context the engine accepts for this "
        f"model, {limit:,} tokens: no instance type, KV-cache dtype, quantization or node count makes the engine "
        f"start with it; set max_model_len to at most {limit:,} (or, with vLLM, container_env "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: vLLM then starts but warns that positions past the limit give NaN)"
    )
    at_limit = {**settings, "max_model_len": limit}
    ranked = rank(config, weight_bytes, engine=engine, region=region, settings=at_limit)
    fitting = [c for c in ranked if c.margin != "no"]
    if fitting:
        return [
            head,
            f"at max_model_len {limit:,}: {fitting[0].instance_type} fits ({len(fitting)} type(s) in all at that "
            "length; run plan with it to rank them)",
        ]
    more = suggestions(config, weight_bytes, ranked, engine=engine, region=region, settings=at_limit, variants=variants)
    return [head, *(f"at max_model_len {limit:,}: {s}" for s in more)]


def nothing_fits_line(config: dict[str, Any], weight_bytes: int, *, engine: str, settings: dict[str, Any]) -> str:
    """The detailed plan's last line when no catalog type fits: the context limit first when that is the reason."""
    limit = refused_context(config, settings)
    if limit is None:
        return "no instance type in the catalog fits these settings: shorten max_model_len or quantize"
    there = instances_that_fit(config, weight_bytes, engine=engine, **{**settings, "max_model_len": limit})
    listed = ", ".join(f"{s.instance_type} ({s.gpu_count} x {s.gpu_model})" for s in there[:SUGGESTIONS])
    return (
        f"no instance type fits max_model_len={settings['max_model_len']:,}: it is above the longest context the "
        f"engine accepts for this model ({limit:,} tokens), whatever the instance or quantization; set max_model_len "
        f"to at most {limit:,}"
        + (f" (then these fit: {listed})" if listed else f"; at {limit:,} no type fits either: shorten it further")
    )


# -- output --------------------------------------------------------------------------------------------


def _short_gpu(model: str) -> str:
    return model.removeprefix("NVIDIA ").removesuffix(" Server Edition")


def _money(value: float | None, digits: int, instance_type: str) -> str:
    """A price cell: the figure; for a catalog type without a shipped price ``lookup`` (the legend gives the command
    that reads it from the AWS Price List); ``?`` only for a type outside the catalog."""
    if value is not None:
        return f"{value:,.{digits}f}"
    return LOOKUP if instance_type in known_instance_types() else UNKNOWN


def ranking_table(candidates: list[Candidate], *, region: str, max_model_len: int, max_num_seqs: int) -> str:
    rows = [
        (
            c.instance_type,
            f"{c.gpu_count} x {_short_gpu(c.gpu_model)} {c.gpu_memory_gib:g} GB",
            str(c.tensor_parallel_size),
            f"{c.largest_context:,}",
            f"{c.full_length_sequences:,}",
            c.margin,
            _money(c.usd_per_hour, 2, c.instance_type),
            _money(c.usd_per_month, 0, c.instance_type),
        )
        for c in candidates
    ]
    heads = ("instance type", "GPUs", "TP", "largest context", f"{max_model_len:,}-token seqs", "margin")
    heads += (f"USD/h {region}", f"USD/month ({hours_per_month()} h)")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    left = {0, 1, 5}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(heads), *(line(r) for r in rows)])


def price_legend(candidates: list[Candidate], region: str) -> str:
    """Where each price in the table comes from: one line per source and date, and the types without one."""
    by_source: dict[str, list[str]] = {}
    for c in candidates:
        cited = Price(c.instance_type, region, c.usd_per_hour, c.price_date, c.price_source, c.price_via).citation
        by_source.setdefault(cited, []).append(c.instance_type)
    lines = []
    for cited, types in by_source.items():
        if cited == "no sourced price":
            listed = [t for t in types if t in known_instance_types()]
            others = [t for t in types if t not in listed]
            if listed:
                lines.append(f"{LOOKUP}: {', '.join(listed)} in {region}: {lookup_hint(region)}")
            if others:
                lines.append(f"{UNKNOWN}: {', '.join(others)}: not in the catalog, no price known")
        else:
            lines.append(f"price of {cited}: {', '.join(types)}")
    return "\n".join(lines)


def _candidate_json(c: Candidate) -> dict[str, Any]:
    return asdict(c)


def _fit_json(fit: MemoryFit) -> dict[str, Any]:
    data = asdict(fit)
    data["attention"] = asdict(fit.attention)
    return data


# -- command -------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llmops.plan", description=__doc__.split("\n\n")[0])
    add_context_arguments(parser)  # -c key=value, --context-file: the deployment exactly as cdk synth reads it
    parser.add_argument(
        "--deployment",
        metavar="NAME",
        help="with -c/--context-file holding a deployments map (or deployments_file): the deployment to plan, "
        "its keys merged over the top-level ones as cdk synth merges them; needed with a fleet",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model-id", help="a Hugging Face Hub repository, e.g. Qwen/Qwen3-32B")
    source.add_argument("--config", type=Path, help="a model's config.json (needs --weights-bytes)")
    source.add_argument("--model-s3-uri", help="s3://bucket/prefix/ of a staged checkpoint")
    parser.add_argument("--revision", help="with --model-id: a branch, tag or commit SHA. Default: main")
    parser.add_argument(
        "--hf-token-secret-arn",
        help="with --model-id: Secrets Manager secret holding the Hub token. Default: $HF_TOKEN",
    )
    source.add_argument("--gguf", help="a GGUF file for llama.cpp: a local path or s3://bucket/key.gguf (header only)")
    parser.add_argument("--weights-bytes", type=positive_int, help="on-disk bytes of the weight files")
    parser.add_argument(
        "--instance-type", help="e.g. ml.g6e.2xlarge: the detailed report for that type. Default: rank every type"
    )
    parser.add_argument(
        "--max-model-len",
        type=positive_int,
        help="context length in tokens. Default: the longest the engine accepts for the model (as engines do)",
    )
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
    parser.add_argument(
        "--max-num-batched-tokens",
        type=positive_int,
        help="vLLM's max_num_batched_tokens (engine_env SM_VLLM_MAX_NUM_BATCHED_TOKENS): a longer profiling pass "
        "leaves less KV cache. Default: 2048 (vLLM's serving default); not used with --gguf",
    )
    parser.add_argument("--gpu-count", type=positive_int, help="GPUs per instance, for types the catalog lacks")
    parser.add_argument(
        "--gpu-memory-gib", type=positive_float, help="nominal memory per GPU, for types the catalog lacks"
    )
    parser.add_argument(
        "--engine",
        choices=engine_names(),
        default=DEFAULT_ENGINE,
        help=f"whose weight-format rules apply. Default: {DEFAULT_ENGINE}",
    )
    parser.add_argument(
        "--region",
        help="region of the prices (and of the S3 client). Default: $AWS_REGION, $AWS_DEFAULT_REGION, else "
        f"{DEFAULT_REGION}",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def main(argv: list[str] | None = None, *, s3_client: Any = None) -> int:
    try:
        return _plan(argv, s3_client)
    except SystemExit as e:  # argparse's exits: 0 for --help, 2 with its message for a bad argument
        return e.code if isinstance(e.code, int) else 2


@dataclass
class Source:
    config: dict[str, Any]
    weight_bytes: int
    notes: list[str]
    flag: str  # how the user named it, for error messages
    repo_id: str | None = None
    token: str | None = None


def _load(args: argparse.Namespace, parser: argparse.ArgumentParser, s3_client: Any) -> Source | int:
    """The model's config.json and weight bytes from the flag the user gave; an exit code on a read failure."""
    if args.model_id is not None:
        from llmops.facts import FactsError, FactsRecord
        from llmops.hub import CONTEXT_TOKEN_HINT, FLAG_TOKEN_HINT, HubError, fetch_model, read_token

        if args.facts_record is not None and args.weights_bytes is None:  # what synth recorded: no network
            try:
                recorded = FactsRecord.load(args.facts_record).find(args.model_id, args.revision or "main")
            except FactsError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            if recorded is not None:
                note = (
                    f"weights: {recorded.weight_bytes:,} bytes of {args.model_id}@{recorded.sha[:12]}, recorded in "
                    f"{args.facts_record.name} (looked up {recorded.looked_up}; python -m llmops.facts refresh)"
                )
                flag = f"-c model_id={args.model_id}"
                return Source(recorded.config, recorded.weight_bytes, [note], flag, args.model_id)
        try:
            token = read_token(args.hf_token_secret_arn)
            hint = CONTEXT_TOKEN_HINT if args.facts_record else FLAG_TOKEN_HINT  # -c takes the key, not the flag
            model = fetch_model(args.model_id, args.revision, token=token, token_hint=hint)
        except HubError as e:
            print(f"error: {e}", file=sys.stderr)
            return 3
        weight_bytes, notes = model.weight_bytes, list(model.notes)
        if args.weights_bytes is not None:
            notes.append(f"weights: {args.weights_bytes:,} bytes as given by --weights-bytes (overrides the above)")
            weight_bytes = args.weights_bytes
        flag = f"-c model_id={args.model_id}" if args.facts_record else f"--model-id {args.model_id}"
        return Source(model.config, weight_bytes, notes, flag, args.model_id, token)
    notes: list[str] = []
    if args.config is not None:
        if args.weights_bytes is None:
            parser.error("argument --weights-bytes: required with --config (the on-disk size of the weight files)")
        try:
            config = safejson.loads(args.config.read_bytes(), source=str(args.config))
        except (OSError, safejson.JsonError) as e:
            parser.error(f"argument --config {args.config}: cannot read it as JSON: {e}")
        if not isinstance(config, dict):
            parser.error(f"argument --config {args.config}: not a JSON object")
        return Source(config, args.weights_bytes, [], f"--config {args.config}")
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
    return Source(config, weight_bytes, notes, f"--model-s3-uri {args.model_s3_uri}")


# The flags -c replaces, with the context key that says it instead (None: a deployment has no such key).
CONTEXT_REPLACES = {
    "model_id": "model_id",
    "config": None,
    "model_s3_uri": "model_s3_uri",
    "gguf": "gguf_file",
    "revision": "revision",
    "hf_token_secret_arn": "hf_token_secret_arn",
    "instance_type": "instance_type",
    "tensor_parallel_size": "tensor_parallel_size",
    "gpu_count": "gpu_count",
    "gpu_memory_gib": "gpu_memory_gib",
    "max_model_len": "max_model_len",
    "max_num_seqs": "preflight_sequences",
    "kv_cache_dtype": "engine_env",
    "gpu_memory_utilization": "engine_env",
    "max_num_batched_tokens": "engine_env",
    "engine": "engine",
}
# check_settings' names (constructs_lib/deployment/model_checks.py) that plan holds as its own arguments; every other
# one goes to
# check_model as it is (dtype, quantization, splits_heads), so a setting synth reads cannot be left out here.
ARGUMENT_OF = {
    "engine": "engine",
    "max_model_len": "max_model_len",
    "tensor_parallel_size": "tensor_parallel_size",
    "max_num_seqs": "max_num_seqs",
    "kv_cache_dtype": "kv_cache_dtype",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "skip": "preflight_skip",
}


def _from_context(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int | None:
    """Fill ``args`` from the context keys (the registry's parsers, DeploymentConfig's checks); 2 on bad input.

    The fit is checked as the deploy preflight checks it (constructs_lib/deployment/llm_endpoint_stack.py
    ``_preflight``):
    ``preflight_sequences`` full-length sequences, the KV-cache dtype, GPU memory share and dtype/quantization
    flags that ``engine_env`` sets, tensor parallel size from the key or every GPU.
    """
    given = [
        f"--{flag.replace('_', '-')}"
        for flag in CONTEXT_REPLACES
        if getattr(args, flag) not in (None, parser.get_default(flag))
    ]
    if given:

        def instead(flag: str) -> str:
            key = CONTEXT_REPLACES[flag[2:].replace("-", "_")]
            return f"{flag} (-c {key}=...)" if key else f"{flag} (no context key: not with -c)"

        keys = ", ".join(instead(f) for f in given)
        print(f"error: give the deployment as context keys only, not also as flags: {keys}", file=sys.stderr)
        return 2
    from constructs_lib import get_engine
    from constructs_lib.deployment import check_settings
    from llmops.context import fleet_source, load_config

    config = load_config(args.context, args.context_file, args.deployment)
    if isinstance(config, int):
        return config
    engine = get_engine(config.engine)
    if config.gguf_file or engine.model_format == "gguf":
        print(
            f"error: engine={engine.name!r} (gguf_file={config.gguf_file!r}): plan reads a GGUF header from a file; "
            "use --gguf PATH or s3://bucket/key.gguf with the other flags (cdk synth checks it from model-facts.json)",
            file=sys.stderr,
        )
        return 2
    args.model_id = None if config.model_s3_uri else config.model_id
    args.model_s3_uri = config.model_s3_uri
    args.revision = None if config.model_s3_uri else config.revision
    args.hf_token_secret_arn = config.hf_token_secret_arn
    args.instance_type, args.gpu_count, args.gpu_memory_gib = (
        config.instance_type,
        config.gpu_count,
        config.gpu_memory_gib,
    )
    # The settings synth checks with (one function for both): preflight_sequences, engine_env's KV-cache dtype,
    # memory share, max_num_batched_tokens and format flags, preflight_skip.
    for name, value in check_settings(config).items():
        if name in ARGUMENT_OF:
            setattr(args, ARGUMENT_OF[name], value)
        elif value is not None:
            args.format_flags[name] = value
    args.instance_pools = tuple(config.instance_pools)  # each checked as synth checks it (_pool_verdicts)
    args.facts_record = (args.context_file.parent if args.context_file else Path.cwd()) / RECORD
    if args.deployment is not None:
        args.context_notes.append(
            f"deployment {args.deployment} of {fleet_source(args.context, args.context_file)}: its keys over the "
            "top-level ones, as cdk synth checks it"
        )
    return None


def _plan(argv: list[str] | None, s3_client: Any) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.format_flags, args.facts_record, args.preflight_skip, args.context_notes = {}, None, (), []
    args.instance_pools = ()
    if uses_context(args):
        if (failed := _from_context(args, parser)) is not None:
            return failed
    elif args.deployment is not None:
        parser.error("argument --deployment: only with -c/--context-file (a deployments map or deployments_file)")
    elif args.model_id is None and args.config is None and args.model_s3_uri is None and args.gguf is None:
        parser.error(
            "give the model: -c model_id=... (and the other context keys cdk synth takes), or one of --model-id, "
            "--config, --model-s3-uri, --gguf"
        )
    for flag, value in (("--revision", args.revision), ("--hf-token-secret-arn", args.hf_token_secret_arn)):
        if value is not None and args.model_id is None:
            parser.error(f"argument {flag}: only with --model-id")
    region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION

    spec = None
    if args.instance_type is not None:
        spec, problems = resolve_instance(
            args.instance_type, gpu_count=args.gpu_count, gpu_memory_gib=args.gpu_memory_gib
        )
        if problems or spec is None:
            parser.error(f"argument --instance-type {args.instance_type}: {' '.join(problems)}")
        if args.tensor_parallel_size and args.tensor_parallel_size > spec.gpu_count:
            parser.error(
                f"argument --tensor-parallel-size: invalid value {args.tensor_parallel_size}: {args.instance_type} "
                f"has {spec.gpu_count} GPU(s); allowed: 1 to {spec.gpu_count}"
            )
    else:
        for flag, value in (
            ("--tensor-parallel-size", args.tensor_parallel_size),
            ("--gpu-count", args.gpu_count),
            ("--gpu-memory-gib", args.gpu_memory_gib),
        ):
            if value is not None:
                parser.error(f"argument {flag}: only with --instance-type (the ranking uses every GPU of each type)")

    if args.gguf is not None:
        from llmops.plan_gguf import plan_gguf

        if args.max_model_len is None:
            parser.error("argument --max-model-len: required with --gguf")

        return plan_gguf(args, spec, parser, s3_client)
    source = _load(args, parser, s3_client)
    if isinstance(source, int):
        return source
    source.notes[:0] = args.context_notes
    if args.max_model_len is None:  # what engines use when none is given
        limit = engine_context_limit(text_config(source.config))
        if limit is None:
            parser.error("argument --max-model-len (-c max_model_len): needed, config.json states no context limit")
        args.max_model_len = limit.tokens
        source.notes.append(f"max_model_len: {limit.tokens:,}, the longest the engine accepts ({limit.how})")
    settings = {
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "kv_cache_dtype": args.kv_cache_dtype,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        **args.format_flags,  # dtype / quantization that engine_env sets (with -c)
    }
    try:
        tp_divides_heads(source.config, 1)  # reads the attention layout: a bad config.json is a bad argument
        if spec is not None:
            return _detailed(args, source, spec, region, settings)
        return _ranking(args, source, region, settings)
    except ValueError as e:
        parser.error(f"argument {source.flag}: {e}")
    return 2  # not reached: parser.error exits


def _detailed(
    args: argparse.Namespace, source: Source, spec: InstanceSpec, region: str, settings: dict[str, Any]
) -> int:
    candidate, fit, formats = evaluate(
        source.config,
        source.weight_bytes,
        spec,
        engine=args.engine,
        region=region,
        settings=settings,
        tensor_parallel_size=args.tensor_parallel_size or spec.gpu_count,
        skip=args.preflight_skip,
    )
    fits = candidate.margin != "no"  # a problem of a check preflight_skip names is not refused, as at synth
    pool_lines, pools_fit = _pool_verdicts(args, source, spec, region, settings)
    better = (
        []
        if fits
        else instances_that_fit(source.config, source.weight_bytes, engine=args.engine, **settings)[:SUGGESTIONS]
    )
    if args.json:
        report = {
            "instance": asdict(spec),
            "fits": fits,
            "candidate": _candidate_json(candidate),
            "memory": _fit_json(fit),
            "weight_format": asdict(formats),
            "notes": source.notes,
            "instance_types_that_fit": [s.instance_type for s in better],
            "instance_pools": pool_lines,
        }
        print(json.dumps(report, indent=2))
        return 0 if fits and pools_fit else 1
    title = f"{spec.instance_type} ({spec.gpu_count} x {spec.gpu_model}, {spec.gpu_memory_gib:g} GB)"
    for note in source.notes:
        print(note)
    print(format_table(fit, title=title))
    if formats.formats:
        print(f"weight format: {', '.join(formats.formats)} with {args.engine}: {'OK' if formats.ok else 'NO'}")
    for problem in formats.problems:
        print(f"  - {problem}")
    for item in formats.warnings + formats.notes:
        print(f"  - {item}")
    if candidate.skipped:
        print(
            f"preflight_skip={list(args.preflight_skip)!r}: not refused, as cdk synth and the deploy preflight skip "
            f"these checks; the engine still meets them at start-up: {'; '.join(candidate.skipped)}"
        )
    cost = price(spec.instance_type, region)
    if cost.known:
        print(
            f"on-demand price in {region}: USD {cost.hourly_text()} per hour, {cost.monthly_text()} per month "
            f"({hours_per_month()} h); {cost.citation}"
        )
    elif spec.in_catalog:  # a catalog type without a public price: where to read it
        print(f"on-demand price in {region}: {lookup_hint(region)}")
    else:  # given with --gpu-count/--gpu-memory-gib: neither the table nor the lookup knows it
        print(f"on-demand price in {region}: USD {UNKNOWN} per hour ({spec.instance_type} is not in the catalog)")
    if not fits:
        if better:
            listed = ", ".join(f"{s.instance_type} ({s.gpu_count} x {s.gpu_model})" for s in better)
            print(f"instance types that fit these settings (tensor parallel = all GPUs): {listed}")
        else:
            print(nothing_fits_line(source.config, source.weight_bytes, engine=args.engine, settings=settings))
    for line in pool_lines:
        print(line)
    return 0 if fits and pools_fit else 1


def _pool_verdicts(
    args: argparse.Namespace, source: Source, primary: InstanceSpec, region: str, settings: dict[str, Any]
) -> tuple[list[str], bool]:
    """Each ``instance_pools`` entry checked as synth checks it (constructs_lib/deployment/model_checks.py): the same
    Model, so the
    primary's tensor parallel size on the pool's GPUs. One line per entry, and whether every entry fits."""
    lines, every = [], True
    tensor_parallel = args.tensor_parallel_size or primary.gpu_count
    for index, pool in enumerate(args.instance_pools):
        spec = lookup_instance(pool)
        if spec is None:  # DeploymentConfig refused it already
            continue
        label = f"instance_pools[{index}]={pool!r} ({spec.gpu_count} x {spec.gpu_model}, {spec.gpu_memory_gib:g} GB)"
        try:
            candidate, _, _ = evaluate(
                source.config,
                source.weight_bytes,
                spec,
                engine=args.engine,
                region=region,
                settings=settings,
                tensor_parallel_size=tensor_parallel,
                skip=args.preflight_skip,
            )
        except ValueError as e:  # a tensor parallel size the pool's GPUs cannot take
            lines.append(f"{label}: DOES NOT FIT: {e}")
            every = False
            continue
        if candidate.margin == "no":
            every = False
            lines.append(f"{label}: DOES NOT FIT: {'; '.join(candidate.reasons) or 'see the checks above'}")
        else:
            lines.append(f"{label}: {candidate.margin.upper()} at tensor parallel {tensor_parallel}")
    return lines, every


def _ranking(args: argparse.Namespace, source: Source, region: str, settings: dict[str, Any]) -> int:
    candidates = rank(source.config, source.weight_bytes, engine=args.engine, region=region, settings=settings)
    fitting = [c for c in candidates if c.margin != "no"]
    advice: list[str] = []
    if not fitting:
        variants: list[str] = []
        if source.repo_id is not None:
            from llmops.hub import quantized_variants

            variants = quantized_variants(source.repo_id, token=source.token)
        advice = suggestions(
            source.config,
            source.weight_bytes,
            candidates,
            engine=args.engine,
            region=region,
            settings=settings,
            variants=variants,
        )
    warnings = sorted({w for c in fitting for w in c.warnings})
    if args.json:
        report = {
            "model": source.flag.split(" ", 1)[1],
            "region": region,
            "engine": args.engine,
            "settings": settings,
            "weight_bytes": source.weight_bytes,
            "hours_per_month": hours_per_month(),
            "instances": [_candidate_json(c) for c in fitting],
            # The priced ones cheapest first; those without a sourced price apart (not ranked by price).
            "ranked_by_price": [c.instance_type for c in fitting if c.usd_per_hour is not None],
            "unpriced": [c.instance_type for c in fitting if c.usd_per_hour is None],
            "instance_pools": pool_suggestion(fitting),
            "does_not_fit": [_candidate_json(c) for c in candidates if c.margin == "no"],
            "suggestions": advice,
            "warnings": warnings,
            "notes": source.notes,
        }
        print(json.dumps(report, indent=2))
        return 0 if fitting else 1
    for note in source.notes:
        print(note)
    shown = f"max_model_len {args.max_model_len:,}, {args.max_num_seqs} full-length sequence(s)"
    shown += f", KV cache {args.kv_cache_dtype}, gpu_memory_utilization {args.gpu_memory_utilization:g}"
    if not fitting:
        print(f"fits on no single catalog instance type ({shown}, {args.engine}). What would:")
        print("\n".join(f"  - {a}" for a in advice))
        return 1
    # Only priced types are ranked by price: a type without one is not "cheaper" or dearer, so it is listed
    # apart, with how to read its price.
    priced = [c for c in fitting if c.usd_per_hour is not None]
    unpriced = [c for c in fitting if c.usd_per_hour is None]
    table = {"region": region, "max_model_len": args.max_model_len, "max_num_seqs": args.max_num_seqs}
    if priced:
        print(
            f"{len(fitting)} instance type(s) fit ({shown}, {args.engine}); the {len(priced)} priced, cheapest first:"
        )
        print(ranking_table(priced, **table))
        print(price_legend(priced, region))
    else:
        print(f"{len(fitting)} instance type(s) fit ({shown}, {args.engine}); none has a sourced price in {region}")
    if unpriced:
        lead = "also fit" if priced else "listed"
        print(f"{lead}, not ranked by price (none sourced in {region}), least GPU memory first:")
        print(ranking_table(unpriced, **table))
        print(price_legend(unpriced, region))
    pools = pool_suggestion(fitting)
    if pools:
        print(
            f"instance_type={fitting[0].instance_type} instance_pools={json.dumps(pools)}: the next-best types with "
            f"its {fitting[0].gpu_count} GPU(s), for SageMaker to fall back to when it has no capacity "
            "(docs/guide/capacity.md)"
        )
    for warning in warnings:
        print(f"warning: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
