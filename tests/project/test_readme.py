"""The README and docs/ stay true: short, every link resolves, every recipe passes the context check, and the
sample summary is what ``llmops summary`` prints for the default deployment.

Regenerate the sample after an intended change:
``UPDATE_README=1 .venv/bin/python -m pytest tests/project/test_readme.py``.
"""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
from aws_cdk.assertions import Template

from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.rules import DEPLOYMENT_MODES
from llmops.summary import describe
from tests.conftest import ROOT, context_with

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
START, END = "<!-- summary:start (tests/project/test_readme.py) -->", "<!-- summary:end -->"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slugs(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    return {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", markdown, re.M)
    }


def test_the_readme_is_short_and_has_a_table_of_contents():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "**Contents:**" in text


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_heading(page):
    text = page.read_text()
    broken = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in slugs(file.read_text())):
            broken.append(target)
    assert broken == []


def recipes() -> list[str]:
    block = README.read_text().split("## Recipes", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith("npx cdk deploy")]


def context_of(command: str) -> dict[str, str]:
    words = shlex.split(command)
    return dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "-c")


def test_the_readme_has_a_recipe_per_engine_and_mode():
    contexts = [context_of(line) for line in recipes()]
    assert {c.get("engine", "vllm") for c in contexts} >= {"vllm", "sglang", "lmi", "llamacpp"}
    assert {c.get("deployment_mode", "standard") for c in contexts} == set(DEPLOYMENT_MODES)


@pytest.mark.parametrize("command", recipes())
def test_every_recipe_passes_the_check_cdk_synth_runs(command):
    try:
        DeploymentConfig.from_context(context_with(**context_of(command)))
    except ConfigError as e:
        pytest.fail(f"{command}\n{e}")


def summary_block(tmp_path, monkeypatch) -> str:
    """What ``make synth`` prints for the default deployment in a fresh clone with no Hub: app.py's own step, with
    the facts record beside cdk.json (none yet) and the Hub offline (HF_HUB_OFFLINE, so the line is the same on
    every machine; an unreachable Hub says "the Hub did not answer (...)" instead)."""
    import aws_cdk as cdk

    from app import build_app
    from constructs_lib.model_facts import RECORD, FactsSource
    from llmops.facts import hub_lookup

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = build_app(
        cdk.App(context=context_with(), outdir=str(tmp_path / "out")),
        facts=FactsSource(tmp_path / RECORD, lookup=hub_lookup),
    )
    (stack,) = [c for c in app.node.children if isinstance(c, cdk.Stack)]
    template = Template.from_stack(stack).to_json()
    lines = ["LlmEndpoint.template.json", *describe(json.loads(json.dumps(template)))]
    return "```\n" + "\n".join(lines) + "\n```"


def test_the_sample_summary_is_what_llmops_summary_prints(tmp_path, monkeypatch):
    text = README.read_text()
    head, _, rest = text.partition(START)
    current, _, tail = rest.partition(END)
    wanted = summary_block(tmp_path, monkeypatch)
    if os.environ.get("UPDATE_README"):
        README.write_text(f"{head}{START}\n{wanted}\n{END}{tail}")
        current = f"\n{wanted}\n"
    assert current.strip() == wanted, "README sample out of date; regenerate (see module docstring)"


def commands() -> list[str]:
    block = README.read_text().split("## Use the endpoint", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.startswith("llmops ")]


@pytest.mark.parametrize("command", commands())
def test_every_llmops_line_names_a_command_and_options_it_has(command, capsys):
    """Each option the README passes is one the command's --help lists (a wrong flag such as -c would not be)."""
    from llmops.__main__ import main

    words = shlex.split(command.replace("<EndpointName output>", "my-endpoint"))
    assert main([words[1], "--help"]) == 0
    usage = capsys.readouterr().out
    for option in (w for w in words[2:] if w.startswith("-")):
        assert re.search(rf"(?<![\w-]){re.escape(option)}\b", usage), f"{command}: {option} is not an option"


def test_the_prerequisites_name_a_node_release_the_jsii_runtime_supports():
    """jsii's runtime (the one the venv's jsii package embeds) lists each Node.js release with its end of life and
    prints a banner on one past it: the README's minimum must be one it still supports, today."""
    import datetime as dt
    from importlib.resources import files

    runtime = (files("jsii") / "_embedded" / "jsii" / "bin__jsii-runtime.js").read_text(encoding="utf-8")
    releases = re.findall(r'new NodeRelease\((\d+),\{endOfLife:new Date\("([\d-]+)"\)([^}]*)\}', runtime)
    today = dt.date.today().isoformat()
    supported = {int(major) for major, end, rest in releases if end > today and "untested" not in rest}
    assert supported, "no supported Node.js release found in the jsii runtime"
    (named,) = re.findall(r"Node\.js (\d+)", README.read_text().split("## Two commands", 1)[1].split("```", 1)[0])
    assert int(named) in supported, (named, sorted(supported))
