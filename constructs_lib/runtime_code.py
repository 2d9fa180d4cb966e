"""Runtime code as CDK assets: a handler folder plus the shared packages it imports, bundled locally.

Handlers live in ``lambda/<name>/index.py`` (package data of the installed library, constructs_lib/_assets.py)
and import shared, importable packages (``hfstage``, ``endpoint_client``, ``preflight``). Each asset gets a copy
of exactly the packages it names, made by plain file copies at synth time: no Docker, no pip, and the asset hash is
the hash of what is shipped, so changing a shared package redeploys every function that uses it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
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


# The C extension the staging worker uses for checksums when the asset carries it (hfstage/checksum.py): the AWS
# Common Runtime, as installed from its manylinux x86-64 wheel (requirements.txt pins it), for the staging image's
# CPython 3.12 (an abi3 build, stable ABI since 3.11) on the x86-64 instances Processing jobs run on.
CRT_DISTRIBUTION, CRT_EXTENSION, VENDOR_DIR = "awscrt", "_awscrt", "_vendor"
_ELF_X86_64 = 62  # e_machine of an x86-64 ELF object (System V ABI, AMD64 supplement)


def crt_files() -> tuple[Path, Path] | None:
    """(awscrt's package folder, its extension) as installed here, when they are a Linux x86-64 abi3 build.

    Found through the installed distribution's file list (importlib.metadata), not the import system: a process
    that loaded the extension from a code asset (hfstage.checksum, through memfd) has another ``_awscrt`` in
    ``sys.modules``, and find_spec would answer with that one."""
    try:
        distribution = importlib.metadata.distribution(CRT_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    files = distribution.files or []
    extension_file = next((f for f in files if f.parts == (f"{CRT_EXTENSION}.abi3.so",)), None)
    init_file = next((f for f in files if f.parts == (CRT_DISTRIBUTION, "__init__.py")), None)
    if extension_file is None or init_file is None:
        return None
    extension = Path(str(distribution.locate_file(extension_file)))
    try:
        header = extension.read_bytes()[:20]
    except OSError:
        return None
    # ELF magic, 64-bit class, little-endian, then e_machine at byte 18 (System V gABI, ELF header).
    if header[:6] != b"\x7fELF\x02\x01" or int.from_bytes(header[18:20], "little") != _ELF_X86_64:
        return None
    return Path(str(distribution.locate_file(init_file))).parent, extension


@jsii.implements(cdk.ILocalBundling)
class _CopyBundler:
    def __init__(
        self, handler_dir: Path | None, packages: Sequence[str], main: str | None, crt: tuple[Path, Path] | None = None
    ) -> None:
        self._handler_dir = handler_dir
        self._packages = tuple(packages)
        self._main = main
        self._crt = crt

    def try_bundle(self, output_dir: str, *args: Any, **kwargs: Any) -> bool:
        out = Path(output_dir)
        if self._handler_dir is not None:
            shutil.copytree(self._handler_dir, out, ignore=IGNORED, dirs_exist_ok=True)
        for package in self._packages:
            shutil.copytree(package_folder(package), out / package, ignore=IGNORED, dirs_exist_ok=True)
        if self._crt is not None:
            package, extension = self._crt
            shutil.copytree(package, out / VENDOR_DIR / package.name, ignore=IGNORED, dirs_exist_ok=True)
            shutil.copyfile(extension, out / VENDOR_DIR / extension.name)
        if self._main:
            module, _, function = self._main.partition(":")
            (out / "__main__.py").write_text(
                f"import sys\n\nfrom {module} import {function}\n\nsys.exit({function}(sys.argv[1:]))\n"
            )
        return True


def bundled_asset_options(
    *,
    handler_dir: Path | None = None,
    packages: Sequence[str] = (),
    main: str | None = None,
    crt: tuple[Path, Path] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``Code.from_asset``/``s3_assets.Asset``: the handler folder plus ``packages``.

    ``main="pkg.module:function"`` adds a top-level ``__main__.py``, so that ``python3 <asset>.zip args``
    runs ``function(args)``: that is how a Processing job runs the staging worker. ``crt`` (``crt_files()``):
    awscrt's package and extension, copied under ``_vendor/``.
    """
    for package in packages:
        if not (package_folder(package) / "__init__.py").is_file():
            raise ValueError(f"{package!r} is not an importable package")
    return {
        "asset_hash_type": cdk.AssetHashType.OUTPUT,
        "bundling": cdk.BundlingOptions(image=_NO_DOCKER, local=_CopyBundler(handler_dir, packages, main, crt)),
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
