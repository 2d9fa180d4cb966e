"""A fleet: the ``deployments`` map parsed into one DeploymentConfig per deployment, grouped by endpoint.

Each deployment takes the keys of a single deployment; what it does not give it inherits from the top-level
keys, and it is checked by the same registry and parsers (context_keys.py, config.py), its problems
named ``deployments.<name>.<key>``. Deployments naming the same ``endpoint`` in component mode share it (several
inference components on one ComponentEndpoint, the GPUs accounted across them by the constructs); the others
get their own. One stack per endpoint, ``<stack_name>-<endpoint or deployment name>``; one model bucket per app.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import safejson
from constructs_lib import get_engine
from constructs_lib.engines import adapter_env_problems
from constructs_lib.model_data import is_model_archive
from constructs_lib.names import COMPONENT_NAME, REPO_ID, matches
from constructs_lib.rules import INFERENCE_COMPONENT, adapter_artifact_problems, adapter_env, engine_without_adapters

from .config import SLO_KEYS, ConfigError, DeploymentConfig
from .context_keys import APP_SCOPED, ENDPOINT_SCOPED

FLEET_KEYS = ("deployments", "deployments_file")
# Keys only a deployment takes: which endpoint it shares, and its LoRA adapters.
DEPLOYMENT_ONLY_KEYS = ("endpoint", "adapters")
# Keys of the app as a whole (the registry's scope "app"): its stacks' name prefix and the one model bucket all
# its stacks share, with its key.
APP_KEYS = APP_SCOPED
# What one endpoint has once (the registry's scope "endpoint"): the first deployment's stack builds the endpoint,
# its functions, network, keys, alarms and tags, so every deployment sharing it must agree.
ENDPOINT_KEYS = ENDPOINT_SCOPED
# Top-level keys a deployment whose model is in S3 (model_s3_uri) does not inherit: the Hub mirror; and with a
# prefix served as it is (not an archive staged into the app's bucket), that bucket's key.
S3_UNUSED = ("hf_endpoint",)
PREFIX_UNUSED = ("bucket_kms_key_arn",)
# An adapter's own load-gate targets (issue 39, item 4): the slo_* keys (the config's, from the construct's
# LOAD_CONTEXT_KEYS), over its deployment's.
ADAPTER_SLO_KEYS = SLO_KEYS
ADAPTER_KEYS = ("model_s3_uri", "model_id", "revision", "include", *ADAPTER_SLO_KEYS)
# A deployment's (or shared endpoint's) name becomes part of a stack name and of construct ids.
NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38}[A-Za-z0-9])?", re.ASCII)
NAME_RULE = "1-40 letters, digits and hyphens, starting and ending with a letter or digit"


# The outputs fleet_stacks.py gives each deployment and each adapter, after its PascalCase name.
DEPLOYMENT_OUTPUTS = ("EndpointName", "InferenceComponentName", "OpenAiBaseUrl")
ADAPTER_OUTPUTS = ("AdapterComponentName", "AdapterOpenAiBaseUrl")

# An adapter from the Hub packs only these unless its include says otherwise (PEFT's save_pretrained names).
ADAPTER_INCLUDE = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class Adapter:
    name: str
    artifact_url: str = ""  # s3://bucket/key.tar.gz; "" for a Hub adapter, staged and packed at deploy
    model_id: str | None = None
    revision: str = "main"
    include: tuple[str, ...] = ADAPTER_INCLUDE
    # Its own load-gate keys (slo_*), parsed; the deployment's answer for those it does not give.
    slo: tuple[tuple[str, Any], ...] = ()

    def load_gate(self, config: DeploymentConfig) -> Any:
        """The load gate of this adapter's smoke test: its ``slo_*`` keys over its deployment's (None: no gate)."""
        from .config import _load_gate

        return _load_gate({**vars(config), **dict(self.slo)})


@dataclass(frozen=True)
class FleetDeployment:
    name: str
    config: DeploymentConfig
    adapters: tuple[Adapter, ...] = ()


@dataclass(frozen=True)
class FleetEndpoint:
    name: str
    stack_name: str
    deployments: tuple[FleetDeployment, ...]


@dataclass(frozen=True)
class Fleet:
    app: str
    config: DeploymentConfig  # the top-level keys
    endpoints: tuple[FleetEndpoint, ...]

    @property
    def deployments(self) -> tuple[FleetDeployment, ...]:
        return tuple(d for e in self.endpoints for d in e.deployments)

    @property
    def stages(self) -> bool:
        """Whether any deployment stages from the Hub (and so needs the app's bucket)."""
        return any(not d.config.model_s3_uri or any(a.model_id for a in d.adapters) for d in self.deployments)


def pascal(name: str) -> str:
    """``chat-small`` -> ``ChatSmall``: a deployment's construct id and output prefix."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("-"))


def deployments_of(context: Mapping[str, Any], read_text: Callable[[str], str]) -> dict[str, Any] | None:
    """The ``deployments`` map from the context, or from the file ``deployments_file`` names (read with
    ``read_text``: app.py reads the environment); None without either."""
    inline, path = context.get("deployments"), context.get("deployments_file")
    if inline is not None and path is not None:
        raise ConfigError(
            [f"deployments_file={path!r}: give the deployments map either inline (deployments) or in a file, not both"]
        )
    if path is None:
        return _as_object("deployments", inline) if inline is not None else None
    if not isinstance(path, str) or not path:
        raise ConfigError([f"deployments_file={path!r}: expected the path of a JSON file"])
    try:
        text = read_text(path)
    except OSError as e:
        raise ConfigError([f"deployments_file={path!r}: cannot be read ({e.strerror or e})"]) from None
    return _as_object(f"deployments_file={path!r}", text)


class DuplicateKey(ValueError):
    """A JSON object gives ``key`` twice: ``json`` would keep ``second`` and drop ``first`` without a word."""

    def __init__(self, key: str, first: Any, second: Any) -> None:
        self.key, self.first, self.second = key, first, second
        super().__init__(
            f"the key {key!r} is given twice in one object ({_brief(first)} and {_brief(second)}); JSON would keep "
            "only the last: give each key once"
        )


def _brief(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else f"{text[:77]}..."


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads``: the object as a dict, or ``DuplicateKey`` naming both entries."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(key, seen[key], value)
        seen[key] = value
    return seen


def _as_object(what: str, raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = safejson.loads(raw, source=what, object_pairs_hook=unique_pairs)
        except safejson.JsonError as e:
            where = f"{e.msg} at line {e.lineno}" if e.msg != e.why else e.why  # a syntax error, or a limit
            raise ConfigError([f"{what}: not valid JSON ({where})"]) from None
        except DuplicateKey as e:
            raise ConfigError([f"{what}: {e}"]) from None
    if not isinstance(raw, dict):
        raise ConfigError([f"{what}: expected a JSON object mapping deployment names to their keys"])
    return raw


def fleet_from_context(context: Mapping[str, Any], deployments: Mapping[str, Any]) -> Fleet:
    """Parse every deployment; raise ``ConfigError`` naming each problem as ``deployments.<name>.<key>``."""
    top = {k: v for k, v in context.items() if k not in FLEET_KEYS}
    app_config = DeploymentConfig.from_context(top)  # the top-level keys alone must be valid (named plainly)
    app = app_config.stack_name
    problems: list[str] = []
    if not deployments:
        problems.append("deployments: empty; give at least one deployment (name -> its keys)")
    parsed: dict[str, tuple[str, DeploymentConfig, tuple[Adapter, ...]]] = {}
    for name, entry in deployments.items():
        where = f"deployments.{name}"
        if not isinstance(name, str) or not matches(NAME, name):
            problems.append(f"deployments: name {name!r} is not usable; allowed: {NAME_RULE}")
            continue
        if not isinstance(entry, dict):
            problems.append(f"{where}: expected a JSON object of context keys")
            continue
        for key in sorted(set(entry) & set(APP_KEYS)):
            problems.append(
                f"{where}.{key}: set for the whole app, not per deployment (its stacks are named "
                f"<stack_name>-<endpoint>, and all of them share one model bucket); give it at the top level"
            )
        endpoint = entry.get("endpoint", name)
        if not isinstance(endpoint, str) or not matches(NAME, endpoint):
            problems.append(f"{where}.endpoint={endpoint!r}: allowed: {NAME_RULE}")
            continue
        merged = {**top, **{k: v for k, v in entry.items() if k not in (*APP_KEYS, *DEPLOYMENT_ONLY_KEYS)}}
        merged["stack_name"] = f"{app}-{endpoint}"
        if isinstance(merged.get("model_s3_uri"), str):
            # Not inherited where they do not apply (given on the deployment itself, they are still refused by name):
            # a model from S3 reads no Hub mirror, and a prefix served as it is is not in the app's bucket.
            prefix = not is_model_archive(merged["model_s3_uri"])
            for key in S3_UNUSED + (PREFIX_UNUSED if prefix else ()):
                if key not in entry:
                    merged.pop(key, None)
        try:
            config = DeploymentConfig.from_context(merged)
        except ConfigError as e:
            problems += [f"{where}.{p}" for p in e.problems]
            continue
        adapters, adapter_problems = _adapters(where, entry.get("adapters"), config)
        problems += adapter_problems
        if adapters and get_engine(config.engine).adapters:
            # The construct's own refusal (AdapterComponent), named by the deployment's key.
            found = adapter_env_problems(get_engine(config.engine), config.engine_env, config.container_env)
            problems += [f"{where}.{p}" for p in found]
            if found:
                continue
            engine_env, container_env = adapter_env(get_engine(config.engine), config.engine_env, config.container_env)
            config = dataclasses.replace(config, engine_env=engine_env, container_env=container_env)
        parsed[name] = (endpoint, config, adapters)

    groups: dict[str, list[str]] = {}
    for name, (endpoint, _, _) in parsed.items():
        groups.setdefault(endpoint, []).append(name)
    for endpoint, names in groups.items():
        if len(names) < 2:
            continue
        for name in names:
            config = parsed[name][1]
            if config.deployment_mode != INFERENCE_COMPONENT:
                problems.append(
                    f"deployments.{name}.endpoint={endpoint!r}: shared with {', '.join(n for n in names if n != name)}"
                    f"; several models share an endpoint only as inference components: deployment_mode="
                    f"{INFERENCE_COMPONENT} (now {config.deployment_mode!r})"
                )
        problems += disagreements(endpoint, [(name, parsed[name][1]) for name in names])
    problems += _collisions(groups, parsed)
    if problems:
        raise ConfigError(problems)
    endpoints = tuple(
        FleetEndpoint(
            name=endpoint,
            stack_name=f"{app}-{endpoint}",
            deployments=tuple(FleetDeployment(n, parsed[n][1], parsed[n][2]) for n in names),
        )
        for endpoint, names in groups.items()
    )
    return Fleet(app=app, config=app_config, endpoints=endpoints)


def disagreements(endpoint: str, configs: list[tuple[str, DeploymentConfig]]) -> list[str]:
    """Each endpoint-scoped key (the registry's scope, context_keys.py) on which a deployment sharing
    ``endpoint`` differs from the first one, whose stack builds it: the other value would be dropped."""
    (first_name, first), *others = configs
    return [
        f"deployments.{name}.{key}={getattr(config, key)!r}: differs from deployments.{first_name}.{key}="
        f"{getattr(first, key)!r} on the endpoint {endpoint!r} they share; one endpoint has one value: give it once "
        "at the top level or the same in both"
        for name, config in others
        for key in ENDPOINT_KEYS
        if getattr(config, key) != getattr(first, key)
    ]


def claimed_ids(names: list[str], adapters: Mapping[str, tuple[Adapter, ...]]) -> list[tuple[str, str, bool]]:
    """(id, owner, is an output) of everything fleet_stacks.py adds to one endpoint stack for the deployments
    ``names`` (the first one's stack, then the packed ones): outputs and construct ids share the stack's names."""
    claims = []
    for index, name in enumerate(names):
        where, prefix = f"deployments.{name}", pascal(name)
        claims += [(f"{prefix}{suffix}", where, True) for suffix in DEPLOYMENT_OUTPUTS]
        if index:  # a packed deployment's constructs sit under one scope named after it
            claims.append((prefix, where, False))
        for adapter in adapters.get(name, ()):
            owner, part = f"{where}.adapters.{adapter.name}", pascal(adapter.name)
            claims += [(f"{prefix}{part}{suffix}", owner, True) for suffix in ADAPTER_OUTPUTS]
            if not index:  # the first deployment's adapters sit in the stack itself
                claims += [(f"Adapter{part}", owner, False), (f"Adapter{part}Source", owner, False)]
    return claims


def _collisions(groups: Mapping[str, list[str]], parsed: Mapping[str, tuple[str, DeploymentConfig, Any]]) -> list:
    """Names that would become one: a construct id or output twice in a stack (a jsii crash at synth), an output
    key in two stacks (llmops/fleet_target.py reads every stack's outputs as one map), one endpoint or component
    name for two resources (SageMaker refuses the second at deploy)."""
    problems: list[str] = []
    reported: set[tuple[str, str]] = set()

    def collide(owner: str, other: str, what: str) -> None:
        if owner != other and (other, owner) not in reported:
            reported.add((other, owner))
            problems.append(f"{other} and {owner}: {what}; rename one")

    outputs: dict[str, tuple[str, str]] = {}  # output key -> (owner, endpoint): across the app's stacks
    adapters = {name: entry[2] for name, entry in parsed.items()}
    for endpoint, names in groups.items():
        ids: dict[str, str] = {}  # construct ids and outputs in this endpoint's stack
        for cid, owner, is_output in claimed_ids(names, adapters):
            kind = "output" if is_output else "construct id"
            joined = f"both become the {kind} {cid!r} (names join in PascalCase: hyphens dropped, parts capitalised)"
            if cid in ids:
                collide(owner, ids[cid], joined)
            ids.setdefault(cid, owner)
            if is_output and cid in outputs and outputs[cid][1] != endpoint:
                collide(owner, outputs[cid][0], f"{joined}, in two stacks, so --deployment would find either")
            if is_output:
                outputs.setdefault(cid, (owner, endpoint))
    # EndpointName is case-insensitive in CreateEndpoint and unique in a region (SageMaker API reference,
    # CreateEndpoint): two stacks naming one endpoint, in any case, fail the second deploy.
    endpoint_names: dict[str, str] = {}
    for names in groups.values():
        given = parsed[names[0]][1].endpoint_name  # one per endpoint (ENDPOINT_KEYS agree)
        if given is None:
            continue
        if given.lower() in endpoint_names:
            first = endpoint_names[given.lower()]
            collide(
                f"deployments.{names[0]}.endpoint_name={given!r}",
                first,
                "two endpoints, one name (SageMaker endpoint names are unique in a region and case-insensitive)",
            )
        endpoint_names.setdefault(given.lower(), f"deployments.{names[0]}.endpoint_name={given!r}")
    # InferenceComponentName: "A unique name to assign to the inference component" (SageMaker API reference,
    # CreateInferenceComponent).
    component_names: dict[str, str] = {}
    for name, (_, config, _) in parsed.items():
        if config.component_name is None:
            continue
        owner = f"deployments.{name}.component_name={config.component_name!r}"
        if config.component_name in component_names:
            collide(owner, component_names[config.component_name], "two inference components, one name")
        component_names.setdefault(config.component_name, owner)
    return problems


def _adapters(where: str, raw: Any, config: DeploymentConfig) -> tuple[tuple[Adapter, ...], list[str]]:
    if raw is None:
        return (), []
    if not isinstance(raw, dict) or not raw:
        return (), [f"{where}.adapters: expected a JSON object mapping adapter names to their source"]
    problems = []
    if config.deployment_mode != INFERENCE_COMPONENT:
        problems.append(
            f"{where}.adapters: needs deployment_mode={INFERENCE_COMPONENT} (now {config.deployment_mode!r}): "
            "SageMaker serves a LoRA adapter as an adapter inference component on its base model's component"
        )
    if not get_engine(config.engine).adapters:
        problems.append(f"{where}.adapters: {engine_without_adapters(config.engine)}")
    adapters = []
    for name, entry in raw.items():
        key = f"{where}.adapters.{name}"
        if not isinstance(name, str) or not matches(COMPONENT_NAME, name):
            problems.append(f"{where}.adapters: name {name!r} is not usable; allowed: {NAME_RULE}")
            continue
        if not isinstance(entry, dict):
            problems.append(f"{key}: expected a JSON object with model_s3_uri")
            continue
        for unknown in sorted(set(entry) - set(ADAPTER_KEYS)):
            problems.append(f"{key}.{unknown}: unknown adapter key; allowed: {', '.join(ADAPTER_KEYS)}")
        slo, found = _adapter_slo(key, entry, config)
        if found:
            problems += found
            continue
        entry = {k: v for k, v in entry.items() if k not in ADAPTER_SLO_KEYS}
        if "model_id" in entry:
            hub, found = _hub_adapter(key, name, entry)
            problems += found
            if hub is not None:
                adapters.append(dataclasses.replace(hub, slo=slo))
            continue
        if "revision" in entry or "include" in entry:
            problems.append(f"{key}: revision and include apply to an adapter from the Hub (model_id)")
            continue
        uri = entry.get("model_s3_uri")
        if not isinstance(uri, str):
            problems.append(f"{key}.model_s3_uri: missing; give s3://<bucket>/<key>.tar.gz")
            continue
        found = adapter_artifact_problems(f"{key}.model_s3_uri", uri)
        problems += found
        if not found:
            adapters.append(Adapter(name=name, artifact_url=uri, slo=slo))
    return tuple(adapters), problems


def _adapter_slo(key: str, entry: dict, config: DeploymentConfig) -> tuple[tuple[tuple[str, Any], ...], list[str]]:
    """An adapter's own slo_* keys, each parsed as the top-level key is (context_keys.py), and the gate
    they make over the deployment's checked by the construct's rules, each problem named ``<key>.<slo key>``."""
    from constructs_lib.rules import LOAD_CONTEXT_KEYS, load_gate_problems

    from .context_keys import BY_NAME

    parsed, problems = [], []
    for slo_key in ADAPTER_SLO_KEYS:
        if slo_key not in entry:
            continue
        try:
            value = BY_NAME[slo_key].parse(entry[slo_key])
        except ValueError as e:
            problems.append(f"{key}.{slo_key}={entry[slo_key]!r}: {e}")
            continue
        parsed.append((slo_key, value))
    if problems or not parsed:
        return tuple(parsed), problems
    if not config.smoke_test:
        return (), [f"{key}: slo_* keys gate the adapter's smoke test, and smoke_test=false leaves it out"]
    gate = Adapter(name="", slo=tuple(parsed)).load_gate(config)
    own = {slo_key for slo_key, _ in parsed}
    names = {field: (f"{key}.{name}" if name in own else name) for field, name in LOAD_CONTEXT_KEYS.items()}
    return tuple(parsed), load_gate_problems(gate, config.smoke_budget_s, names=names, own_ranges=False)


def _hub_adapter(key: str, name: str, entry: dict) -> tuple[Adapter | None, list[str]]:
    """An adapter staged from the Hub and packed into one .tar.gz (StagedCheckpoint pack=True)."""
    problems = []
    if "model_s3_uri" in entry:
        problems.append(f"{key}: give model_id or model_s3_uri, not both")
    model_id, revision = entry.get("model_id"), entry.get("revision", "main")
    if not isinstance(model_id, str) or not matches(REPO_ID, model_id):
        problems.append(f"{key}.model_id={model_id!r}: not a Hub repository id; allowed: Org/Name")
    if not isinstance(revision, str) or not revision.strip() or any(c.isspace() for c in revision):
        problems.append(f"{key}.revision={revision!r}: not a branch, tag or commit SHA")
    include = entry.get("include", list(ADAPTER_INCLUDE))
    if isinstance(include, str):
        include = [include]
    if not isinstance(include, list) or not include or not all(isinstance(p, str) and p for p in include):
        problems.append(f"{key}.include={include!r}: expected a list of glob patterns")
    if problems:
        return None, problems
    return Adapter(name=name, model_id=model_id, revision=revision, include=tuple(include)), []
