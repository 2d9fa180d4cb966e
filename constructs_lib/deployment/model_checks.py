"""The model checks at synth: the recorded Hub facts (constructs_lib/model_facts.py) against the configured instance.

Two steps, as CDK looks up context before it checks: ``facts_of`` finds the deployment's facts (the record, else
the source's lookup), ``check_deployment`` checks the deployment against them. The check is the same call plan makes
(``preflight.model_check.check_model``; ``check_gguf`` for a GGUF model), with the settings the stack hands the deploy
preflight (``LlmEndpointStack._preflight``): tensor parallel size, ``preflight_sequences`` full-length
sequences, the KV-cache dtype, GPU memory share and dtype/quantization flags read from ``engine_env``, vLLM's
``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` from ``container_env``, and ``preflight_skip``. A problem fails synth naming the
key, the value and the limit, before anything exists. The facts also pin a floating ``revision`` to the commit
they were looked up at. A fleet's deployments are each checked the same way (``check_fleet``), their problems
named ``deployments.<name>.<key>``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from constructs_lib import get_engine
from constructs_lib.model_facts import REFRESH
from constructs_lib.names import SHA, matches
from constructs_lib.rules import nearest_capable, resolve_instance, weight_format_flags
from preflight import DEFAULT_GPU_MEMORY_UTILIZATION
from preflight.context import long_context_settings
from preflight.model_check import ModelCheck, check_gguf, check_model

from .config import DeploymentConfig

if TYPE_CHECKING:
    from constructs_lib.catalog import InstanceSpec
    from constructs_lib.model_facts import FactsSource, Known, ModelFacts
    from preflight.gguf import GgufHeader

    from .fleet import Fleet, FleetEndpoint

# Problems that already start with the context key they are about; the others are about the instance.
KEY_LED = ("max_model_len=", "tensor_parallel_size=")


@dataclass(frozen=True)
class FactsStatus:
    """One line for the summary (checked or why not), and the revision a floating one was pinned from."""

    checked: bool
    line: str
    pinned_from: str | None = None

    def metadata(self) -> dict[str, Any]:
        found: dict[str, Any] = {"Checked": self.checked, "Line": self.line}
        if self.pinned_from:
            found["PinnedFrom"] = self.pinned_from
        return found


def not_checked(why: str) -> FactsStatus:
    return FactsStatus(False, f"fit not checked at synth: {why}; the deploy preflight checks it before any GPU starts")


def facts_of(config: DeploymentConfig, facts: FactsSource | None) -> Known | None:
    """The lookup synth makes for one deployment, a step of the app like CDK's own context lookups: the record's
    entry, else the source's lookup (then recorded); None when there is nothing to look up (no FactsSource, or the
    model is an S3 prefix). check_deployment then checks what it found."""
    if facts is None or config.model_s3_uri:
        return None
    gguf = config.engine_spec.model_format == "gguf"  # llama.cpp: the GGUF header, not config.json
    return facts.facts_for(config.model_id, config.revision, gguf=gguf, gguf_file=config.gguf_file)


def check_fleet(fleet: Fleet, facts: FactsSource | None) -> tuple[Fleet, dict[str, FactsStatus], list[str]]:
    """Every deployment of a fleet looked up and checked as a single deployment is (facts_of, check_deployment),
    with its merged keys: (the fleet, each revision pinned by its facts; each deployment's summary line by name;
    problems, each named ``deployments.<name>.<key>`` as fleet.py names the fleet's other problems)."""
    statuses: dict[str, FactsStatus] = {}
    problems: list[str] = []
    endpoints = []
    for endpoint in fleet.endpoints:
        deployments = []
        for deployment in endpoint.deployments:
            config, status, refused = check_deployment(deployment.config, facts_of(deployment.config, facts))
            statuses[deployment.name] = status
            problems += [f"deployments.{deployment.name}.{problem}" for problem in refused]
            deployments.append(dataclasses.replace(deployment, config=config))
        endpoints.append(dataclasses.replace(endpoint, deployments=tuple(deployments)))
    return dataclasses.replace(fleet, endpoints=tuple(endpoints)), statuses, problems


def fleet_metadata(endpoint: FleetEndpoint, statuses: dict[str, FactsStatus]) -> dict[str, Any]:
    """The Metadata entry of a fleet's endpoint stack (llmops.summary reads it): one FactsStatus per deployment,
    with its name and the repository and revision its checkpoint stages (to match a Model's block to it)."""
    return {
        "Deployments": [
            {
                "Deployment": d.name,
                **({} if d.config.model_s3_uri else {"RepoId": d.config.model_id, "Revision": d.config.revision}),
                **statuses[d.name].metadata(),
            }
            for d in endpoint.deployments
        ]
    }


def check_deployment(config: DeploymentConfig, known: Known | None) -> tuple[DeploymentConfig, FactsStatus, list[str]]:
    """The deployment checked against what facts_of found for it, on its instance type and each instance pool:
    (the config, its revision pinned by the facts; the summary's line; problems that fail synth)."""
    if config.model_s3_uri:
        return config, not_checked("the model is an S3 prefix (model_s3_uri), read by the preflight"), []
    if known is None:
        return config, not_checked(f"no model facts looked up ({REFRESH})"), []
    facts = known.facts
    if facts is None:
        return config, not_checked(str(known.missing)), []

    if not facts.describes(config.model_id, config.revision):  # never pin one model to another's commit
        said = f"{facts.repo_id}@{facts.revision} (commit {facts.sha})"
        return (
            config,
            FactsStatus(False, f"refused at synth: the model facts {known.origin} describe {said}"),
            [
                f"model_id={config.model_id} revision={config.revision}: the model facts describe {said}, another "
                f"model or revision; run {REFRESH}"
            ],
        )
    pinned_from = None
    if not matches(SHA, config.revision) and facts.sha:
        pinned_from = config.revision
        config = dataclasses.replace(config, revision=facts.sha)
    where = f"{facts.repo_id}@{facts.sha[:12]} {known.origin}"
    engine = get_engine(config.engine)
    header = facts.gguf_header()
    if engine.model_format == "gguf" and header is None:
        why = f"{engine.name} serves a GGUF file whose header the facts do not hold ({where})"
        return config, dataclasses.replace(not_checked(why), pinned_from=pinned_from), []

    spec, problems = resolve_instance(
        config.instance_type, gpu_count=config.gpu_count, gpu_memory_gib=config.gpu_memory_gib
    )
    if spec is None:  # DeploymentConfig already refused it; nothing more to say
        return config, not_checked(" ".join(problems)), []
    pools = [
        (f"instance_pools[{i}]={pool!r}", resolve_instance(pool)[0]) for i, pool in enumerate(config.instance_pools)
    ]
    settings = check_settings(config)
    # Every instance pool serves the same Model with the primary's tensor parallel size (constructs_lib/
    # instance_pools.py): SageMaker may place any instance on a fallback, so the model must fit there too.
    on_pools = {**settings, "tensor_parallel_size": config.tensor_parallel_size or spec.gpu_count}
    targets = [(f"instance_type={config.instance_type}", spec, settings)]
    targets += [(name, pool_spec, on_pools) for name, pool_spec in pools if pool_spec is not None]  # else refused
    model = f"model_id={config.model_id}: {facts.weight_bytes / 1e9:.2f} GB of weights, {where}"
    refusals: list[str] = []
    primary: set[str] = set()  # the primary's problems: the same on every type (the attention heads), said once
    for index, (name, target, on) in enumerate(targets):
        label = f"{name} ({target.gpu_count} x {target.gpu_model}, {target.gpu_memory_gib:g} GB)"
        try:
            checked = _check(facts, header, target, label, on)
        except ValueError as e:  # GgufError is one
            if index:  # a pool: the same text as the primary's, already handled
                continue
            what = "GGUF header" if header is not None else "config.json"
            return config, not_checked(f"the {what} of {where} cannot be read: {e}"), []
        for _, text in checked.problems:
            if not index:
                primary.add(text)
            elif text in primary:
                continue
            said = text if not index and text.startswith(KEY_LED) else f"{label}: {text}"
            refusals.append(f"{said} ({model})")
    if refusals:
        return config, FactsStatus(False, f"refused at synth: {where}", pinned_from), refusals
    checks = ("memory",) if header is not None else ("memory", "context", "tensor-parallel", "format")
    ran = [c for c in checks if c not in config.preflight_skip]
    line = f"model facts {where}: {', '.join(ran) or 'no check'} checked at synth, fits"
    if pinned_from:
        line += f"; revision {pinned_from!r} pinned to {facts.sha}"
    return config, FactsStatus(True, line, pinned_from), []


def check_settings(config: DeploymentConfig) -> dict[str, Any]:
    """``check_model``'s keyword arguments for a deployment, besides the instance: the settings the stack hands
    the deploy preflight (LlmEndpointStack._preflight). Synth (below) and ``plan -c`` (llmops/plan.py
    ``_from_context``) both take them from here, so the two cannot read different keys.

    engine, max_model_len, tensor_parallel_size, ``preflight_sequences`` as max_num_seqs, what ``engine_env`` says
    of the KV-cache dtype, GPU memory share and max_num_batched_tokens (``Engine.preflight_settings``), its
    dtype/quantization flags, whether the engine splits heads, ``preflight_skip`` as skip, and the engine's opt-in to
    start beyond the model's context limit (``container_env``) as long_context."""
    engine = get_engine(config.engine)
    memory = engine.preflight_settings(config.engine_env)
    return {
        "engine": engine.name,
        "max_model_len": config.max_model_len,
        "tensor_parallel_size": config.tensor_parallel_size,
        "max_num_seqs": config.preflight_sequences,
        "kv_cache_dtype": memory.get("kv_cache_dtype", "auto"),
        "gpu_memory_utilization": memory.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION),
        # A whole number (config.py refuses anything else), read from text as a float.
        "max_num_batched_tokens": int(memory["max_num_batched_tokens"]) if "max_num_batched_tokens" in memory else None,
        "splits_heads": engine.splits_tensors,
        "skip": tuple(config.preflight_skip),
        # vLLM starts beyond the model's limit with this variable in its environment (preflight/context.py).
        **long_context_settings(engine.name, config.container_env),
        **{k: v or None for k, v in weight_format_flags(engine, config.engine_env).items()},
    }


def _check(
    facts: ModelFacts, header: GgufHeader | None, spec: InstanceSpec, gpu: str, settings: dict[str, Any]
) -> ModelCheck:
    """The model on one instance type, as the deploy preflight checks it (check_settings): a GGUF header with
    llama.cpp's fit (``check_gguf``: no heads or format rule), else config.json with every check."""
    if header is not None:  # llama.cpp: the GGUF header stands in for config.json, as in the preflight
        return check_gguf(
            header,
            weight_bytes=facts.weight_bytes,
            gpu_count=spec.gpu_count,
            gpu_memory_gib=spec.gpu_memory_gib,
            max_model_len=settings["max_model_len"],
            max_num_seqs=settings["max_num_seqs"],
            skip=settings["skip"],
        )
    return check_model(
        facts.config,
        weight_bytes=facts.weight_bytes,
        gpu_count=spec.gpu_count,
        gpu_memory_gib=spec.gpu_memory_gib,
        compute_capability=spec.compute_capability,
        gpu=gpu,
        alternatives=nearest_capable(spec) if spec.in_catalog else None,
        **settings,
    )
