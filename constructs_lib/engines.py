"""Serving engines as data (``data/engines.json``) and the container environment they get.

The DLC SageMaker entrypoints turn ``SM_<ENGINE>_FOO_BAR=v`` into ``--foo-bar v``; ``true``
becomes a bare flag and ``false`` drops the flag. Settings the app derives from typed
parameters (tensor parallel size, maximum length, maximum sequences, model path) can never be
overridden by the free-form maps, under any of their aliases.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

import safejson

from .catalog import DATA_DIR

# X.Y.Z[.postN]-gpu-py312-cuNNN-ubuntuA.B-sagemaker: the DLC's semantic SageMaker tags (vLLM, SGLang).
DEFAULT_TAG_PATTERN = re.compile(
    r"^(?P<version>\d+\.\d+\.\d+(?:\.post\d+)?)-gpu-py(?P<python>\d+)-cu(?P<cuda>\d{3,4})"
    r"-ubuntu(?P<ubuntu>\d+\.\d+)-sagemaker$"
)
DEFAULT_TAG_FORMAT = "X.Y.Z[.postN]-gpu-pyNNN-cuNNN-ubuntuA.B-sagemaker"

# Whole-string, ASCII: a "$"-anchored re.match would accept a trailing newline in the name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
# SageMaker's limits on a container's Environment map (CreateModel API reference).
MAX_ENV_ENTRIES = 100
MAX_ENV_LENGTH = 1024

SECRET_HINT = (
    "Secrets never go into a model's environment (it is visible in the template, the console "
    "and DescribeModel). The serving container needs no Hugging Face token: weights come from S3. "
    "Keep the token in AWS Secrets Manager, where only the job that stages the checkpoint reads it, "
    "by ARN, at run time."
)


def looks_secret(key: str) -> bool:
    """True for names that conventionally carry credentials."""
    upper = key.upper()
    return (
        upper == "HF_TOKEN"
        or upper.endswith("_TOKEN")
        or any(word in upper for word in ("SECRET", "PASSWORD", "API_KEY"))
    )


# Characters no environment value may hold. The SGLang entrypoint reads ``env | grep ^SM_SGLANG_`` line by line
# (aws/deep-learning-containers scripts/docker/sglang/sagemaker_entrypoint.sh), so a newline inside any value
# starts a new variable there, and a NUL cannot be passed to execve(2) at all; the other C0 controls have no use
# in a setting and hide in logs. TAB stays allowed.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# argparse reads a token that starts with '-' as an option unless it looks like a negative number (Python
# argparse docs, "Arguments containing -"): a value "--trust-remote-code" would become a flag of its own.
NEGATIVE_NUMBER = re.compile(r"-\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|-\.\d+(?:[eE][-+]?\d+)?", re.ASCII)


# Preflight settings that are numbers (the rest, such as kv_cache_dtype, are names).
NUMERIC_PREFLIGHT_SETTINGS = frozenset({"gpu_memory_utilization", "max_num_batched_tokens"})
# Integer flags of the engine (vLLM: optional_type(int), so int() of the text, vllm/engine/arg_utils.py).
WHOLE_PREFLIGHT_SETTINGS = frozenset({"max_num_batched_tokens"})


def number_in_text(value: Any) -> float | None:
    """A number given as a JSON number or as its text ("0.9", " 8192 "); None for anything else.

    Environment maps are text (SageMaker's Environment is a string map, CreateModel API reference),
    so a number written "0.9" is the same setting as 0.9. Booleans are not numbers.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def int_in_text(value: Any) -> int | None:
    """A whole number as the engine parses it from its environment; None where that parse fails.

    vLLM's integer flags are argparse ``type=int``, and argparse calls the type on the text (Python argparse docs,
    "type"), so this is Python's ``int()`` of the text: surrounding whitespace, a sign and underscores between
    digits are accepted (``" +1_6 "`` is 16), ``"16.0"`` and ``"1e3"`` are not (Python docs, built-in ``int``).
    Booleans are not numbers.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def boolean_in_text(value: Any) -> bool | None:
    """A boolean given as JSON true/false or as the text "true"/"false" (any case); None otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


@dataclass(frozen=True)
class EngineSpec:
    name: str
    repository: str
    default_tag: str
    env_prefix: str
    model_path_key: str
    model_path_value: str
    derived_keys: Mapping[str, tuple[str, ...]]
    reserved_keys: Mapping[str, str]
    true_value: str
    false_value: str | None
    # Engine flags the memory-fit preflight reads from engine_env: kv_cache_dtype, gpu_memory_utilization,
    # max_num_batched_tokens (vllm only).
    preflight_keys: Mapping[str, str] = field(default_factory=dict)
    # Which image tags are pins, and how their engine version sorts (named groups ``version`` and ``cuda``).
    tag_pattern: re.Pattern[str] = DEFAULT_TAG_PATTERN
    tag_format: str = DEFAULT_TAG_FORMAT
    # How a streamed answer is framed: "sse" (data: lines, [DONE]) or "jsonlines" (one JSON chunk a line).
    stream_format: str = "sse"
    # Variables set unless the user sets the same key; the user's value then passes through unchanged.
    default_env: Mapping[str, str] = field(default_factory=dict)
    # Whether the engine reads flags through argparse, which takes unambiguous abbreviations.
    flag_abbreviations: bool = True
    # Keys that bound the engine's own model-loading wait, and that wait when none is set (None: no such wait).
    loading_timeout_keys: tuple[str, ...] = ()
    loading_timeout_default_s: int | None = None
    # Variables the app always sets and the free-form maps may not change: name -> (value, why).
    fixed_env: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # The engine flag that lets it import Python code from the checkpoint; None when it has none.
    remote_code_flag: str | None = None
    # The weight format the engine serves ("safetensors", or "gguf": one file named by gguf_file).
    model_format: str = "safetensors"
    # An image CDK builds (a folder with a Dockerfile, its CUDA level) instead of a DLC repository.
    image_build: Mapping[str, str] | None = None
    # Checkpoint files this engine's container reads as code or configuration: glob -> why (engines.json's
    # top-level checkpoint_code, which every engine gets, plus the engine's own). Staging leaves them out and
    # the preflight refuses a prefix holding them, unless allow_checkpoint_code.
    checkpoint_code: Mapping[str, str] = field(default_factory=dict)
    # Whether a flag's value that is a JSON array becomes one argv token per element (vLLM's sagemaker_args.py).
    splits_json_arrays: bool = False
    # checkpoint_code patterns staged after all when remote_code_flag is on (the modeling files it imports).
    remote_code_files: tuple[str, ...] = ()
    # Settings that go together: {"when": {...}, "requires": {...}, "why": ...} (engines.json env_rules).
    env_rules: tuple[Mapping[str, Any], ...] = ()
    # What the base model's container needs to serve LoRA adapter inference components (engines.json adapters:
    # engine_env, container_env, the max-rank flag and its default); None: the engine serves no adapters.
    adapters: Mapping[str, Any] | None = None
    # The engine server's own limit on one request, which an asynchronous invocation's timeout must not pass
    # (engines.json request_timeout: {"env", "default_s", "source"}); None: the server has none.
    request_timeout: Mapping[str, Any] | None = None

    def for_model_file(self, model_file: str) -> EngineSpec:
        """This engine with its model path pointing at one file (or glob) below the model directory."""
        return replace(self, model_path_value=f"{self.model_path_value.rstrip('/')}/{model_file}")

    def max_lora_rank(self, engine_env: Mapping[str, Any]) -> int | None:
        """The largest adapter rank the engine serves with ``engine_env`` (its max-rank flag, else its default),
        parsed as the engine parses it (``int_in_text``); None where the engine serves no adapters or the value is
        not a whole number of at least 1 (the engine refuses such a flag when it starts)."""
        if not self.adapters:
            return None
        rank = int_in_text(engine_env.get(self.adapters["max_lora_rank_key"], self.adapters["max_lora_rank_default"]))
        return rank if rank is not None and rank > 0 else None

    def preflight_settings(self, engine_env: Mapping[str, Any]) -> dict[str, Any]:
        """What ``engine_env`` says about the KV-cache dtype and GPU memory share, by setting name.

        Values come typed: the GPU memory share as a float whether it was written ``0.9`` or ``"0.9"``
        (every public SageMaker example writes environment values as text); a value that is not a
        number stays as given, for the caller to report.
        """
        settings: dict[str, Any] = {}
        for setting, key in self.preflight_keys.items():
            if key in engine_env:
                value = engine_env[key]
                if setting in WHOLE_PREFLIGHT_SETTINGS and isinstance(value, str):
                    whole = int_in_text(value)  # vLLM's argparse int(): "8192.0" and "1e4" are refused there
                    value = value if whole is None else float(whole)
                elif setting in NUMERIC_PREFLIGHT_SETTINGS:
                    number = number_in_text(value)
                    value = value if number is None else number
                settings[setting] = value
        return settings

    def fixed_environment(self) -> dict[str, str]:
        """The variables the app always sets for this engine (``fixed_env`` in engines.json)."""
        return {name: value for name, (value, _) in self.fixed_env.items()}

    @property
    def splits_tensors(self) -> bool:
        """Whether the engine takes a tensor parallel size (llama.cpp splits layers over its GPUs by itself:
        llama-server --split-mode, default layer, tools/server/README.md)."""
        return "tensor_parallel_size" in self.derived_keys

    def derived_key(self, setting: str) -> str:
        """The canonical environment key for a derived setting (first listed alias)."""
        return self.derived_keys[setting][0]

    def protected_keys(self) -> dict[str, str]:
        """Every key the free-form maps may not set, mapped to why."""
        keys = {self.model_path_key: "the model path (the construct points it at the S3 model data)"}
        for setting, aliases in self.derived_keys.items():
            for alias in aliases:
                keys[alias] = f"derived from {setting}"
        keys.update(self.reserved_keys)
        keys.update({name: f"set by the app: {why}" for name, (_, why) in self.fixed_env.items()})
        return keys

    def render_flag_value(self, value: Any) -> str | None:
        """Render a JSON value the way the entrypoint turns it into a command-line flag.

        None means "leave the key out": that is how every image version reads a false flag.
        """
        if value is True:
            return self.true_value
        if value is False:
            return self.false_value
        if isinstance(value, (dict, list)):
            return compact_json(value)
        return str(value)


@cache
def _engines() -> dict[str, EngineSpec]:
    raw = _data()["engines"]
    return {
        name: EngineSpec(
            name=name,
            repository=e["repository"],
            default_tag=e["default_tag"],
            env_prefix=e["env_prefix"],
            model_path_key=e["model_path"]["key"],
            model_path_value=e["model_path"]["value"],
            derived_keys={k: tuple(v) for k, v in e["derived_keys"].items()},
            reserved_keys=dict(e.get("reserved_keys", {})),
            true_value=e["boolean_values"]["true"],
            false_value=e["boolean_values"]["false"],
            preflight_keys=dict(e.get("preflight_keys", {})),
            tag_pattern=re.compile(e["tag_pattern"]) if "tag_pattern" in e else DEFAULT_TAG_PATTERN,
            tag_format=e.get("tag_format", DEFAULT_TAG_FORMAT),
            stream_format=e.get("stream_format", "sse"),
            default_env=dict(e.get("default_env", {})),
            flag_abbreviations=e.get("flag_abbreviations", True),
            loading_timeout_keys=tuple(e.get("model_loading_timeout", {}).get("keys", ())),
            loading_timeout_default_s=e.get("model_loading_timeout", {}).get("image_default_s"),
            fixed_env={k: (v["value"], v["why"]) for k, v in e.get("fixed_env", {}).items()},
            remote_code_flag=e.get("remote_code_flag"),
            model_format=e.get("model_format", "safetensors"),
            image_build=e.get("image_build"),
            checkpoint_code={**_data()["checkpoint_code"], **e.get("checkpoint_code", {})},
            splits_json_arrays=e.get("splits_json_arrays", False),
            remote_code_files=tuple(e.get("remote_code_files", ())),
            env_rules=tuple(e.get("env_rules", ())),
            adapters=e.get("adapters"),
            request_timeout=e.get("request_timeout"),
        )
        for name, e in raw.items()
    }


@cache
def _data() -> dict[str, Any]:
    return json.loads((DATA_DIR / "engines.json").read_text())


def default_checkpoint_code() -> dict[str, str]:
    """Checkpoint files some engine's container reads as code or configuration, staged for no engine unasked."""
    return dict(_data()["checkpoint_code"])


def checkpoint_code_patterns(engine: str | EngineSpec | None, *, trust_remote_code: bool = False) -> tuple[str, ...]:
    """The checkpoint files ``engine``'s container reads as code or settings; every engine's common ones for None.

    With ``trust_remote_code`` (the engine's remote-code flag is on: the user asked it to import the modeling
    files) the engine's ``remote_code_files`` are left out of the list: for lmi, ``*.py``.
    """
    if engine is None:
        return tuple(default_checkpoint_code())
    spec = engine if isinstance(engine, EngineSpec) else get_engine(engine)
    waived = set(spec.remote_code_files) if trust_remote_code else set()
    return tuple(p for p in spec.checkpoint_code if p not in waived)


def guarded_env() -> dict[str, dict[str, str]]:
    """Variables that make a container load code or fetch models elsewhere (engines.json ``guarded_env``)."""
    return {name: dict(rule) for name, rule in _data()["guarded_env"].items()}


@cache
def _guarded_by_upper_name() -> dict[str, dict[str, str]]:
    # Matched case-insensitively, like the protected keys: no upper- or lower-case spelling slips past.
    return {name.upper(): rule for name, rule in guarded_env().items()}


def _guard_of(key: Any, value: Any) -> tuple[dict[str, str], bool]:
    """The guard rule of ``key`` ({} for none) and whether ``value`` is one the rule allows anyway."""
    rule = _guarded_by_upper_name().get(str(key).upper(), {})
    allowed = "allowed" in rule and re.fullmatch(rule["allowed"], str(value).strip(), re.ASCII) is not None
    return rule, allowed


def all_tag_patterns() -> list[re.Pattern[str]]:
    """The pinned-tag pattern of every engine (an image given by URI may belong to any of them)."""
    return list({e.tag_pattern.pattern: e.tag_pattern for e in _engines().values()}.values())


def engine_names() -> list[str]:
    return sorted(_engines())


def get_engine(name: str) -> EngineSpec:
    try:
        return _engines()[name]
    except KeyError:
        raise ValueError(f"engine={name!r} is not a known engine; allowed: {', '.join(engine_names())}") from None


def compact_json(value: Any) -> str:
    """JSON without spaces; ValueError for NaN or infinities, which JSON cannot carry."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)


def render_plain_value(value: Any) -> str:
    """Plain (non-flag) environment variables: JSON scalars as text, containers as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return compact_json(value)
    return str(value)


def loading_timeout_problems(
    engine: EngineSpec, env: Mapping[str, str], startup_timeout_s: float
) -> tuple[list[str], list[str]]:
    """Errors and warnings: the engine's model-loading wait against SageMaker's health-check timeout.

    Past ContainerStartupHealthCheckTimeoutInSeconds SageMaker fails the endpoint whatever the engine
    is still doing, so a loading timeout the user sets above it contradicts it (an error). The image's
    own default above it is only a warning: public examples run that way, and a load that finishes in
    time works; one that does not fails at the health-check timeout rather than at the engine's.
    """
    if not engine.loading_timeout_keys:
        return [], []
    errors: list[str] = []
    warnings: list[str] = []
    limit = f"startup_timeout_s={startup_timeout_s:.0f} (the endpoint's container health-check timeout)"
    advice = (
        f"set {engine.loading_timeout_keys[0]} to at most {startup_timeout_s:.0f} in engine_env, or raise "
        "startup_timeout_s (at most 3600)."
    )
    given = {key: env[key] for key in engine.loading_timeout_keys if key in env}
    for key, value in given.items():
        seconds = number_in_text(value)
        if seconds is None:
            errors.append(f"{key}={value!r} is not a number of seconds.")
        elif seconds > startup_timeout_s:
            errors.append(
                f"{key}={value} is longer than {limit}: SageMaker would fail the endpoint before {engine.name} "
                f"gives up loading; {advice}"
            )
    default = engine.loading_timeout_default_s
    if not given and default is not None and default > startup_timeout_s:
        warnings.append(
            f"{engine.name} waits up to {default} s for the model to load (the image's "
            f"{engine.loading_timeout_keys[-1]}), longer than {limit}; a slow load fails at the health check. "
            f"To make the two agree, {advice}"
        )
    return errors, warnings


def argv_tokens(engine: EngineSpec, value: str) -> list[str]:
    """The argv tokens the entrypoint makes of one flag's rendered value (after the flag itself).

    vLLM's entrypoint turns a JSON array into one token per element and ``{...} {...}`` into one token per
    object (aws/deep-learning-containers scripts/docker/vllm/sagemaker_args.py tokens_for, as_token); the
    SGLang entrypoint passes the value as one token (scripts/docker/sglang/sagemaker_entrypoint.sh).
    """
    if not engine.splits_json_arrays:
        return [value]
    stripped = value.strip()
    if stripped.startswith("[") and stripped.endswith("]"):
        try:
            parsed = safejson.loads(stripped, source="an engine_env value")
        except ValueError:
            return [value]
        if isinstance(parsed, list):
            return [
                compact_json(e) if isinstance(e, (dict, list)) else render_plain_value(e) if e is not None else ""
                for e in parsed
            ]
    return [value]


def _option_like(token: str) -> bool:
    """Whether argparse would read ``token`` as an option rather than as a flag's value."""
    return token.startswith("-") and not NEGATIVE_NUMBER.fullmatch(token.strip())


def _guarded_problem(map_name: str, key: str, value: str, allow_checkpoint_code: bool) -> str | None:
    """The refusal for a variable that loads code or fetches models elsewhere; None when allowed."""
    rule, allowed = _guard_of(key, value)
    if not rule or rule["kind"] == "warn" or allowed:
        return None
    if rule["kind"] == "code" and allow_checkpoint_code:
        return None  # environment_warnings says what it does
    allowed = f"allowed: {rule['allowed_text']}" if "allowed_text" in rule else "allowed: leave it unset"
    opt_in = "; or set allow_checkpoint_code=true to run code you have read" if rule["kind"] == "code" else ""
    return f"{map_name} key {key!r} is refused: it {rule['why']}. {allowed}{opt_in}."


def build_environment(
    engine: EngineSpec,
    *,
    tensor_parallel_size: int,
    max_model_len: int | None,
    max_num_seqs: int | None,
    engine_env: Mapping[str, Any],
    container_env: Mapping[str, Any],
    allow_checkpoint_code: bool = False,
) -> tuple[dict[str, str], list[str]]:
    """The container's Environment map and a list of problems with the free-form maps.

    ``allow_checkpoint_code`` lets variables that load code (PYTHONPATH, LD_PRELOAD, a .py entry point...) through,
    each with a warning from ``environment_warnings``; without it they are refused.
    """
    problems: list[str] = []
    env: dict[str, str] = {engine.model_path_key: engine.model_path_value}
    env.update(engine.fixed_environment())
    derived = {
        "tensor_parallel_size": tensor_parallel_size,
        "max_model_len": max_model_len,
        "max_num_seqs": max_num_seqs,
    }
    for setting, value in derived.items():
        if value is not None and setting in engine.derived_keys:
            env[engine.derived_key(setting)] = str(value)

    protected = engine.protected_keys()
    # Compare case-insensitively: the entrypoints lower-case the flag name anyway.
    protected_upper = {k.upper(): why for k, why in protected.items()}

    def check_key(map_name: str, key: Any, value: Any) -> bool:
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key) or len(key) > MAX_ENV_LENGTH:
            problems.append(
                f"{map_name} key {key!r} is not a valid environment variable name "
                "(letters, digits and underscores, not starting with a digit)."
            )
            return False
        if looks_secret(key):
            problems.append(f"{map_name} key {key!r} looks like a secret and is refused. {SECRET_HINT}")
            return False
        if key.upper() in protected_upper:
            problems.append(
                f"{map_name} key {key!r} would override a setting the app derives "
                f"({protected_upper[key.upper()]}); set the typed parameter instead."
            )
            return False
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{map_name} key {key!r} has the value {value}; give a finite number.")
            return False
        if value is None:
            problems.append(
                f"{map_name} key {key!r} has the value null; give a string, number, boolean or JSON "
                "object (false drops a flag)."
            )
            return False
        return True

    def check_value(map_name: str, key: str, rendered: str) -> bool:
        """The rendered value: no control characters, no guarded variable, no token argparse reads as an option."""
        if bad := CONTROL_CHARACTERS.search(rendered):
            problems.append(
                f"{map_name} key {key!r}: its value holds the control character U+{ord(bad.group()):04X} "
                "(a newline, carriage return, NUL...); the SGLang entrypoint reads the environment line by line "
                "and execve cannot pass a NUL, so a value may hold none. Give it on one line."
            )
            return False
        if why := _guarded_problem(map_name, key, rendered, allow_checkpoint_code):
            problems.append(why)
            return False
        if map_name == "engine_env" and engine.flag_abbreviations:
            tokens = argv_tokens(engine, rendered)
            options = [i for i, token in enumerate(tokens, 1) if _option_like(token)]
            if options:
                where = "its value" if len(tokens) == 1 else f"element {options[0]} of its JSON array"
                problems.append(
                    f"engine_env key {key!r}: {where} starts with '-', which the engine's argument parser would "
                    "read as a flag of its own, not as this flag's value (the entrypoint passes "
                    + ("each element of a JSON array as an argument" if engine.splits_json_arrays else "the value")
                    + "); give each flag its own engine_env key."
                )
                return False
        return True

    for key, value in engine_env.items():
        if not check_key("engine_env", key, value):
            continue
        # The entrypoints match the prefix case-sensitively: a lower-case key would be dropped silently.
        if not key.startswith(engine.env_prefix) or key == engine.env_prefix:
            problems.append(
                f"engine_env key {key!r} does not start with {engine.env_prefix!r} (upper case) followed by a flag "
                f"name, the prefix engine {engine.name!r} turns into command-line flags; put other variables in "
                "container_env."
            )
            continue
        # argparse accepts unambiguous abbreviations: --context-len would set --context-length.
        abbreviated = [
            k for k in protected_upper if engine.flag_abbreviations and k.startswith(key.upper()) and k != key.upper()
        ]
        if abbreviated:
            problems.append(
                f"engine_env key {key!r} is an abbreviation the engine's argument parser would read as "
                f"{abbreviated[0]!r} ({protected_upper[abbreviated[0]]}); set the typed parameter instead."
            )
            continue
        try:
            rendered = engine.render_flag_value(value)
        except ValueError:
            problems.append(f"engine_env key {key!r} holds a number that is not finite; give finite numbers.")
            continue
        if rendered is not None and check_value("engine_env", key, rendered):
            env[key] = rendered  # rendered None: the flag is switched off by leaving the key out

    for key, value in container_env.items():
        if not check_key("container_env", key, value):
            continue
        if key.upper().startswith(engine.env_prefix):
            problems.append(
                f"container_env key {key!r} starts with {engine.env_prefix!r}: engine flags belong in engine_env."
            )
            continue
        try:
            rendered = render_plain_value(value)
        except ValueError:
            problems.append(f"container_env key {key!r} holds a number that is not finite; give finite numbers.")
            continue
        if check_value("container_env", key, rendered):
            env[key] = rendered

    given = {k.upper() for k in env}
    for key, value in engine.default_env.items():
        if key.upper() not in given:
            env[key] = value

    for key, value in env.items():
        if len(value) > MAX_ENV_LENGTH:
            problems.append(
                f"environment value of {key!r} is {len(value)} characters; SageMaker allows {MAX_ENV_LENGTH}."
            )
    if len(env) > MAX_ENV_ENTRIES:
        problems.append(f"the container environment has {len(env)} entries; SageMaker allows {MAX_ENV_ENTRIES}.")
    return env, problems


def remote_code_keys(engine: EngineSpec, engine_env: Mapping[str, Any]) -> list[str]:
    """The engine_env keys that switch on the engine's trust-remote-code flag, under any spelling it reads.

    The entrypoints lower-case the flag name, and argparse takes any unambiguous abbreviation of an option
    (Python argparse docs, allow_abbrev), so SM_VLLM_TRUST_REMOTE is --trust-remote-code too.
    """
    flag = engine.remote_code_flag
    if flag is None:
        return []
    keys = []
    for key, value in engine_env.items():
        if not isinstance(key, str) or boolean_in_text(value) is False:
            continue
        upper = key.upper()
        same = upper == flag.upper()
        abbreviated = engine.flag_abbreviations and len(upper) > len(engine.env_prefix) and flag.startswith(upper)
        if same or abbreviated:
            keys.append(key)
    return keys


def environment_warnings(
    engine: EngineSpec,
    engine_env: Mapping[str, Any],
    container_env: Mapping[str, Any] | None = None,
    *,
    allow_checkpoint_code: bool = False,
) -> list[str]:
    """What the free-form maps allow that the user should know at synth time."""
    warnings = []
    # A bare flag (empty value) or true switches it on in every image version; false leaves it out.
    for key in remote_code_keys(engine, engine_env):
        spelled = "" if key.upper() == str(engine.remote_code_flag).upper() else f" (read as {engine.remote_code_flag})"
        warnings.append(
            f"engine_env {key}{spelled} lets the engine import and run the Python files of the checkpoint (the "
            "modeling_*.py and configuration_*.py that config.json's auto_map names) inside the serving container, "
            "with the endpoint role's permissions. Set it only for a repository and revision you have read; staging "
            "copies those files only when include names them or include is empty."
        )
    for map_name, env in (("engine_env", engine_env), ("container_env", container_env or {})):
        for key, value in env.items():
            rule, allowed = _guard_of(key, value)
            if rule.get("kind") == "warn" or (rule.get("kind") == "code" and allow_checkpoint_code and not allowed):
                warnings.append(f"{map_name} {key}: it {rule['why']}.")
    # The values as the container gets them (str() for what build_environment refuses, such as NaN in an object).
    effective = {
        **engine.default_env,
        **{k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in engine_env.items()},
    }
    for rule in engine.env_rules:
        holds = all(str(effective.get(k, "")).lower() == str(v).lower() for k, v in rule["when"].items())
        broken = {k: effective.get(k) for k, v in rule["requires"].items() if str(effective.get(k, "")).lower() != v}
        if holds and broken:
            given = ", ".join(f"{k}={v!r}" for k, v in broken.items())
            wanted = ", ".join(f"{k}={v!r}" for k, v in rule["requires"].items())
            warnings.append(
                f"engine_env {given} with {', '.join(rule['when'])} as set: expected {wanted}. {rule['why']}."
            )
    if allow_checkpoint_code:
        warnings.append(
            f"allow_checkpoint_code=true: staging copies, and the preflight accepts, the checkpoint files "
            f"{engine.name}'s container runs or reads as configuration ({', '.join(engine.checkpoint_code)}); they "
            "run inside the serving container with the endpoint role's permissions. Use it only for a repository "
            "and revision you have read."
        )
    return warnings


def _same_setting(given: Any, needed: Any) -> bool:
    """Whether the user's value sets what the engine needs, compared as the text the container reads: a switch
    is on as ``true`` in any case or ``1`` (vllm/envs.py reads VLLM_ALLOW_RUNTIME_LORA_UPDATING as
    ``.strip().lower() in ("1", "true")``; the DLC's sagemaker_entrypoint.sh passes SM_VLLM_* values as arguments)."""
    text, wanted = str(given).strip().lower(), str(needed).strip().lower()
    return text in ("1", "true") if wanted in ("1", "true") else text == wanted


def adapter_env_problems(engine: EngineSpec, engine_env: Mapping[str, Any], container_env: Mapping[str, Any]) -> list:
    """The user's values that would switch off what ``engine`` needs to serve adapters (a base with
    ``SM_VLLM_ENABLE_LORA: false`` cannot load one): each named with the setting it needs."""
    needed = engine.adapters or {}
    return [
        # The value itself is not repeated: engine_env and container_env may hold a pasted secret (never echoed).
        f"{where}.{name}: its value switches off what {engine.name} needs to serve LoRA adapter components on this "
        f"base (engines.json {engine.name}.adapters); allowed: {value!r}, or leave it unset (it is added)"
        for where, given, wanted in (
            ("engine_env", engine_env, needed.get("engine_env", {})),
            ("container_env", container_env, needed.get("container_env", {})),
        )
        for name, value in wanted.items()
        if name in given and not _same_setting(given[name], value)
    ]


def adapter_env(engine: EngineSpec, engine_env: Mapping[str, Any], container_env: Mapping[str, Any]) -> tuple:
    """The base model's engine_env and container_env with what its engine needs to serve adapters (engines.json
    ``adapters``); a value the user gave that sets the same wins (``"true"`` for ``true``). Raises ``ValueError``
    for an engine that serves none, or a value that switches one off (``adapter_env_problems``)."""
    if not engine.adapters:
        raise ValueError(engine_without_adapters(engine.name))
    if problems := adapter_env_problems(engine, engine_env, container_env):
        raise ValueError("; ".join(problems))
    return (
        {**engine.adapters.get("engine_env", {}), **engine_env},
        {**engine.adapters.get("container_env", {}), **container_env},
    )


def engine_without_adapters(name: str) -> str:
    serving = [n for n in engine_names() if get_engine(n).adapters]
    return (
        f"engine={name!r} has no verified way to serve LoRA adapter inference components; allowed: "
        f"engine={' or '.join(serving)}"
    )
