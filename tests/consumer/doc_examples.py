#!/usr/bin/env python3
"""Run every Python example of docs/constructs/ as a user pastes it into a stack (tests/package runs this with
the installed wheel, outside the repository; tests/project runs it in the checkout).

    python doc_examples.py DOCS_DIR FLEET_JSON

Each example runs in a fresh stack as ``self`` and the app is synthesized. A name an example uses from the
page's earlier prose (``checkpoint``, ``endpoint``, ``chat``, ``client_role``...) is made on first use, as the page
describes it. One line per example, ``ok`` or ``FAIL`` with the reason; exit 1 when any failed.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("CDK_DISABLE_STACK_TRACE", "1")
os.environ["HF_HUB_OFFLINE"] = "1"  # the Deployments page's record: nothing is looked up

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

import constructs_lib as lib

PLACEHOLDERS = {"<commit sha>": "c" * 40}


class Given(dict):
    """An example's names: what it defines, and on first use what the page's text says it is."""

    def __init__(self, stack: cdk.Stack) -> None:
        super().__init__(self=stack)
        self.stack = stack

    def __missing__(self, name: str):
        s = self.stack
        made = {
            "checkpoint": lambda: lib.StagedCheckpoint(s, "GivenCheckpoint", repo_id="Qwen/Qwen3-8B"),
            "client_role": lambda: iam.Role(s, "GivenClientRole", assumed_by=iam.AccountRootPrincipal()),
            "endpoint": lambda: lib.GpuEndpoint(
                s, "GivenEndpoint", model=self["checkpoint"], instance_type="ml.g6.xlarge"
            ),
            "shared": lambda: lib.ComponentEndpoint(s, "GivenShared", instance_type="ml.g6.12xlarge"),
            "chat": lambda: self["shared"].add_component("GivenChat", model=self["checkpoint"], tensor_parallel_size=1),
        }.get(name)
        if made is None:
            raise KeyError(name)
        self[name] = value = made()
        return value


def examples(docs: Path) -> list[tuple[str, str]]:
    found = []
    for page in sorted(docs.glob("*.md")):
        for i, code in enumerate(re.findall(r"^[ \t]*```python\n(.*?)^[ \t]*```", page.read_text(), re.S | re.M)):
            for placeholder, value in PLACEHOLDERS.items():
                code = code.replace(placeholder, value)
            found.append((f"{page.name}#{i + 1}", textwrap.dedent(code)))
    return found


def run(name: str, code: str) -> str | None:
    app = cdk.App(outdir=tempfile.mkdtemp(prefix="example-"))
    stack = cdk.Stack(app, "Example")
    scope = Given(stack)
    try:
        exec(compile(code, name, "exec"), {"__name__": "example"}, scope)  # the docs' own code
        if not any(isinstance(c, cdk.CfnResource) for c in stack.node.find_all()):
            app.node.try_remove_child("Example")  # an app-level example, or one that only makes objects
        # Every app the example made synthesizes too (its validations run then), not only the runner's.
        for made in {id(v): v for v in [app, *scope.values()] if isinstance(v, cdk.App)}.values():
            made.synth()
    except Exception as e:  # every failure is reported, one line each
        return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    return None


def main(argv: list[str]) -> int:
    docs, fleet = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    work = Path(tempfile.mkdtemp(prefix="examples-"))
    shutil.copy(fleet, work / "fleet.json")
    os.chdir(work)  # the Deployments page names fleet.json and model-facts.json beside the app
    failed = 0
    for name, code in examples(docs):
        why = run(name, code)
        failed += why is not None
        print(f"{'ok  ' if why is None else 'FAIL'} {name}{'' if why is None else ': ' + why}", flush=True)
    total = len(examples(docs))
    print(f"{total - failed} of {total} examples ran")
    return 1 if failed or not total else 0  # no example found is a failure: the pages or the pattern moved


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
