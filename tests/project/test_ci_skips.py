"""In CI a skipped test fails the run: a module that skips when a tool is missing must not pass green there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# pytest run inside pytest, three times: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

SKIPPING = """import pytest


def test_needs_a_tool():
    pytest.skip("the tool is missing")


def test_other():
    pass
"""


@pytest.mark.parametrize(
    ("ci", "allow", "code"), [("true", None, 1), (None, None, 0), ("true", "1", 0)], ids=["ci", "local", "allowed"]
)
def test_a_skip_fails_the_run_only_in_ci(tmp_path: Path, ci: str | None, allow: str | None, code: int) -> None:
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "LLMOPS_ALLOW_SKIPS")}
    env.update({k: v for k, v in {"CI": ci, "LLMOPS_ALLOW_SKIPS": allow}.items() if v is not None})
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == code, run.stdout + run.stderr
    assert "1 passed, 1 skipped" in run.stdout
    if code:
        assert "test_skipping.py::test_needs_a_tool: Skipped: the tool is missing" in run.stdout
