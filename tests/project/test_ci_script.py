""".ci/run on a clean CI machine: it installs the browser test's packages without a prompt, as root or not.

The script runs for real with stand-ins for apt-get, sudo and make on a PATH that has no chromium, so
what it would ask apt for (and with which environment) is recorded instead of done.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDER = '#!/bin/sh\necho "$(basename "$0") DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-unset} $*" >> "$CALLS"\n'
SUDO = '#!/bin/sh\necho "sudo $*" >> "$CALLS"\nexec "$@"\n'


def _tool(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_ci(tmp_path: Path, uid: int) -> list[str]:
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", checkout / ".ci" / "run")
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("dirname", "env", "basename"):
        found = shutil.which(name)
        assert found, name
        (tools / name).symlink_to(found)
    for name in ("apt-get", "make"):
        _tool(tools, name, RECORDER)
    _tool(tools, "sudo", SUDO)
    _tool(tools, "id", f"#!/bin/sh\necho {uid}\n")
    calls = tmp_path / "calls"
    environment = {"PATH": str(tools), "CALLS": str(calls), "HOME": str(tmp_path)}
    bash = shutil.which("bash")
    assert bash
    done = subprocess.run(
        [bash, str(checkout / ".ci" / "run")], env=environment, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines()


@pytest.mark.parametrize("uid", [0, 1000])
def test_chromium_is_installed_without_prompts_after_an_update(tmp_path, uid):
    calls = run_ci(tmp_path, uid)
    apt = [c for c in calls if c.startswith("apt-get ")]
    update = next(i for i, c in enumerate(apt) if " update" in c)
    install = next(i for i, c in enumerate(apt) if " install " in c)
    assert update < install
    assert all("DEBIAN_FRONTEND=noninteractive" in c for c in apt), apt  # no debconf question can stop CI
    assert "chromium chromium-driver" in apt[install] and " -y " in apt[install]
    assert any(c.startswith("sudo ") for c in calls) == (uid != 0)  # root needs no sudo (often absent)
    # The test suite, its integration modules, the installed-library test, then the adapter against a real CPU
    # llama-server.
    assert [c.split(" ", 2)[-1] for c in calls if c.startswith("make ")] == [
        "test",
        "test-integration",
        "test-package",
        "test-llamacpp",
    ]
