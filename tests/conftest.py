"""Shared helpers: the app's own context defaults, and one fresh App per synthesized stack."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# Prices come from the shipped table in tests: never the AWS Price List API with a developer's own credentials,
# nor their on-disk cache (tests/llmops/test_price_list.py exercises the API path with a Stubber).
os.environ["LLMOPS_PRICES"] = "offline"

import aws_cdk as cdk
from aws_cdk.assertions import Template

from tests.fakes.fixtures import s3_stub  # noqa: F401  (shared by the staging worker's Stubber tests)

ROOT = Path(__file__).resolve().parent.parent

# The real llama-server tests run under `make test-llamacpp`, which builds the server and names it in
# LLAMACPP_REAL_SERVER; `make test` does not collect them (not collected is not skipped: see below).
collect_ignore = [] if os.environ.get("LLAMACPP_REAL_SERVER") else ["containers/test_llamacpp_real.py"]
# The installed-library test builds a wheel and a virtual environment: `make test-package` runs it.
if not os.environ.get("LLM_PACKAGE_TEST"):
    collect_ignore.append("package")


def default_context() -> dict[str, Any]:
    """cdk.json's context as the CDK CLI hands it to the app (null values dropped)."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    return {k: v for k, v in context.items() if v is not None}


def context_with(**overrides: Any) -> dict[str, Any]:
    context = default_context()
    context.update(overrides)
    return context


def build(outdir: str | None = None, **overrides: Any) -> cdk.App:
    """A new App with the default context plus ``overrides``, built exactly as app.py builds it."""
    from app import build_app

    return build_app(cdk.App(context=context_with(**overrides), outdir=outdir))


def stack_template(**overrides: Any) -> Template:
    app = build(**overrides)
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    return Template.from_stack(stack)


@pytest.fixture
def template_for():
    return stack_template


def load_lambda(name: str, module_name: str | None = None):
    """``lambda/<name>/index.py`` as a fresh module: tests/fakes/handlers.py, the one loader."""
    from tests.fakes.handlers import load_handler

    return load_handler(name, module_name)


# -- a skip in CI is a failure ----------------------------------------------------------------------------
# A module that skips when a tool is missing (the CDK CLI, a browser, hadolint) passes green on a machine that
# lacks it. CI installs every tool, so there a skip means a missing install step: fail the run and name it.


def _skips_are_failures(config: pytest.Config) -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true") and os.environ.get("LLMOPS_ALLOW_SKIPS") != "1"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and _skips_are_failures(session.config):
        reporter.write_line(
            f"CI: {len(skipped)} test(s) skipped; a skip in CI means a missing tool or install step:", red=True
        )
        for report in skipped[:20]:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            reporter.write_line(f"  {report.nodeid}: {reason}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
