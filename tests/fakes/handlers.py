"""The one loader of custom-resource handlers for tests: ``lambda/<name>/index.py`` as a fresh module.

``lambda`` is a Python keyword, so the folders are not importable as packages (CONVENTIONS 13). Each call loads
a new module object under a name of its own, so module-level state (cached clients, stubs) never leaks from
one test into another; the shared packages it imports (handler_kit, hfstage, preflight, endpoint_client) come
from the repository root, as the asset bundles them. A handler split by concern imports its other modules from its
own folder (named after the handler, e.g. ``staging_job``, so no two handlers' modules share a name); they hold no
state, so sharing them between loads leaks nothing. A handler makes each boto3 client when it first uses it
(``handler_kit.cached_client``), from the environment then: set ``AWS_DEFAULT_REGION`` and any
``AWS_ENDPOINT_URL_*`` before calling it, or put a stub in its ``_clients``.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from typing import Any

LAMBDA_DIR = Path(__file__).resolve().parents[2] / "lambda"
_ids = itertools.count()


def load_handler(name: str, module_name: str | None = None) -> Any:
    path = LAMBDA_DIR / name / "index.py"
    if not path.is_file():
        raise FileNotFoundError(f"no handler at {path}")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # the Lambda runtime puts the asset's root on the path the same way
    module_name = module_name or f"handler_{name}_{next(_ids)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
