"""The staging worker as shipped: standard library and boto3 only, runnable as a zip and as ``llmops.stage``.

Not in the ``hfstage`` mutation suite (tools/mutation.py): these read the sources or run them in another
process, where mutmut's mutants are not switched (its copies import its trampoline, configured per folder).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from constructs_lib.staged_checkpoint import PACKAGES

ROOT = Path(__file__).resolve().parents[2]


def worker_sources() -> list[Path]:
    """The modules of every package the worker's asset ships (hfstage, safejson); a loop over none of them would
    pass whatever they import."""
    assert PACKAGES == ("hfstage", "safejson")
    sources = sorted(p for package in PACKAGES for p in (ROOT / package).glob("*.py"))
    names = {f"{p.parent.name}/{p.name}" for p in sources}
    assert {"hfstage/worker.py", "hfstage/hub.py", "hfstage/__main__.py", "safejson/__init__.py"} <= names
    return sources


def test_package_uses_only_stdlib_and_boto3() -> None:
    allowed = set(sys.stdlib_module_names) | {"boto3", "botocore", *PACKAGES}
    sources = worker_sources()
    for source in sources:
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{source.name}: relative import"
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                # checksum.py alone may try awscrt (the code asset carries it; zlib's CRC32 without it).
                extra = {"awscrt"} if source.name == "checksum.py" else set()
                assert name.split(".")[0] in allowed | extra, f"{source.name} imports {name}"


def test_zip_runs_with_a_top_level_main(tmp_path: Path) -> None:
    """The Processing job runs ``python3 code.zip ...``: hfstage/ at the zip root beside a ``__main__.py``."""
    archive = tmp_path / "hfstage.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for source in worker_sources():
            z.write(source, f"{source.parent.name}/{source.name}")
        z.writestr("__main__.py", "import sys\n\nfrom hfstage.worker import main\n\nsys.exit(main(sys.argv[1:]))\n")
    run = subprocess.run(
        [sys.executable, "-I", str(archive), "--help"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert "--repo-id" in run.stdout and "--token-secret-arn" in run.stdout
    bad = subprocess.run(
        [sys.executable, "-I", str(archive), "--repo-id", "Org/Name"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "bad arguments" in bad.stderr


def test_llmops_stage_is_the_worker() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "llmops.stage", "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert run.returncode == 0 and "python -m llmops.stage" in run.stdout
