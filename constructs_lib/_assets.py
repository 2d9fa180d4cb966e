"""Where the runtime assets are: package data of the installed library, found through ``importlib.resources``.

The wheel (pyproject.toml) maps the repository's mandated top-level folders into the package:
``lambda/`` -> ``constructs_lib/_runtime/lambda/`` and ``containers/`` -> ``constructs_lib/_runtime/containers/``.
The shared runtime packages bundled into assets (``hfstage``, ``preflight``, ``endpoint_client``) are packages
of their own, located the same way. Only a source checkout, where the folders have not been mapped, finds them
beside the package (the project root); an installed library never looks outside its own files.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from functools import cache
from pathlib import Path

# The package's own files (a wheel installs them as plain files, so they are a real directory).
_MAPPED = Path(str(importlib.resources.files(__package__))) / "_runtime"


@cache
def asset_folder(name: str) -> Path:
    """``lambda`` or ``containers``: the installed copy, else the source checkout's folder."""
    if (_MAPPED / name).is_dir():
        return _MAPPED / name
    checkout = _MAPPED.parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / name).is_dir():
        return checkout / name
    raise FileNotFoundError(f"the library's {name}/ folder is missing (looked in {_MAPPED / name})")


def package_folder(package: str) -> Path:
    """The folder of an importable package (``hfstage``...), without importing it (no side effects)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{package!r} is not an importable package")
    return Path(next(iter(spec.submodule_search_locations)))
