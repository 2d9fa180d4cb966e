"""How each engine frames a streamed answer, read straight from constructs_lib/data/engines.json.

The commands that talk to an endpoint (invoke, playground, bench) need only this one fact per engine.
Importing ``constructs_lib`` would load aws-cdk and start jsii (seconds, and a Node.js banner on
stderr), so the data file is read here with the standard library.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path


def _package_folder(name: str) -> Path:
    """The folder of package ``name``, found without importing it (constructs_lib's __init__ loads aws-cdk)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not an installed package", name=name)
    return Path(next(iter(spec.submodule_search_locations)))


# Installed or in a source checkout.
ENGINES_JSON = _package_folder("constructs_lib") / "data" / "engines.json"
DEFAULT_ENGINE = "vllm"


@cache
def stream_formats() -> dict[str, str]:
    """Engine name -> ``sse`` or ``jsonlines`` (an entry without ``stream_format`` streams SSE)."""
    engines = json.loads(ENGINES_JSON.read_text())["engines"]
    return {name: entry.get("stream_format", "sse") for name, entry in sorted(engines.items())}


def engine_option(parser) -> None:
    """The ``--engine`` option of a command that reads a stream."""
    parser.add_argument(
        "--engine",
        choices=list(stream_formats()),
        default=DEFAULT_ENGINE,
        help=f"the engine the endpoint serves with; it decides how a stream is framed (default: {DEFAULT_ENGINE})",
    )
