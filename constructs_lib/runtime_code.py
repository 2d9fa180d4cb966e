"""Runtime code as CDK assets: a handler folder plus the shared packages it imports, bundled locally.

Handlers live in ``lambda/<name>/index.py`` (package data of the installed library, constructs_lib/_assets.py)
and import shared, importable packages (``hfstage``, ``endpoint_client``, ``preflight``). Each asset gets a copy
of exactly the packages it names, made by plain file copies at synth time: no Docker, no pip, and the asset hash is
the hash of what is shipped, so changing a shared package redeploys every function that uses it.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_

from ._assets import asset_folder, package_folder

# Byte code and caches differ between machines and would change the asset hash on every synth.
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")
# Never used: local bundling always succeeds. CDK requires an image in BundlingOptions.
_NO_DOCKER = cdk.DockerImage.from_registry("local-bundling-only")


@jsii.implements(cdk.ILocalBundling)
class _CopyBundler:
    def __init__(self, handler_dir: Path | None, packages: Sequence[str], main: str | None) -> None:
        self._handler_dir = handler_dir
        self._packages = tuple(packages)
        self._main = main

    def try_bundle(self, output_dir: str, *args: Any, **kwargs: Any) -> bool:
        out = Path(output_dir)
        if self._handler_dir is not None:
            shutil.copytree(self._handler_dir, out, ignore=IGNORED, dirs_exist_ok=True)
        for package in self._packages:
            shutil.copytree(package_folder(package), out / package, ignore=IGNORED, dirs_exist_ok=True)
        if self._main:
            module, _, function = self._main.partition(":")
            (out / "__main__.py").write_text(
                f"import sys\n\nfrom {module} import {function}\n\nsys.exit({function}(sys.argv[1:]))\n"
            )
        return True


def bundled_asset_options(
    *, handler_dir: Path | None = None, packages: Sequence[str] = (), main: str | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``Code.from_asset``/``s3_assets.Asset``: the handler folder plus ``packages``.

    ``main="pkg.module:function"`` adds a top-level ``__main__.py``, so that ``python3 <asset>.zip args``
    runs ``function(args)``: that is how a Processing job runs the staging worker.
    """
    for package in packages:
        if not (package_folder(package) / "__init__.py").is_file():
            raise ValueError(f"{package!r} is not an importable package")
    return {
        "asset_hash_type": cdk.AssetHashType.OUTPUT,
        "bundling": cdk.BundlingOptions(image=_NO_DOCKER, local=_CopyBundler(handler_dir, packages, main)),
    }


# Every handler imports it: rollback detection, the log line and the reason limit (handler_kit/__init__.py).
HANDLER_KIT = "handler_kit"
# Every JSON reader on outside input (handler_kit, preflight, hfstage) reads through it: depth and size limits.
SAFEJSON = "safejson"


def handler_code(name: str, *, packages: Sequence[str] = ()) -> lambda_.Code:
    """The code of ``lambda/<name>/`` with ``handler_kit``, ``safejson`` and the shared ``packages`` beside it."""
    packages = tuple(dict.fromkeys((HANDLER_KIT, SAFEJSON, *packages)))
    handler_dir = asset_folder("lambda") / name
    if not (handler_dir / "index.py").is_file():
        raise ValueError(f"no handler at {handler_dir}/index.py")
    return lambda_.Code.from_asset(
        str(handler_dir), **bundled_asset_options(handler_dir=handler_dir, packages=packages)
    )
