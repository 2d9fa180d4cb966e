"""docs/constructs/: one page per public construct, its props table generated from the construct itself."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import construct_docs  # noqa: E402


def test_every_page_exists_with_its_generated_props_table_up_to_date():
    assert construct_docs.main(["--check"]) == 0, "run: .venv/bin/python tools/construct_docs.py"


def test_every_prop_of_every_construct_is_in_its_page():
    for page, function in construct_docs.PAGES.items():
        text = (construct_docs.DOCS / f"{page}.md").read_text()
        for name in construct_docs.inspect.signature(function).parameters:
            if name not in ("self", "scope", "id"):
                assert f"| `{name}` |" in text, f"{page}.md lacks {name}"


def test_every_page_has_the_sections_a_user_needs():
    for page in construct_docs.PAGES:
        text = (construct_docs.DOCS / f"{page}.md").read_text()
        for heading in ("## Example", "## Props", "## What it creates", "## IAM", "## Cost", "## Update, rollback"):
            assert heading in text, f"{page}.md lacks {heading!r}"
        assert "```python" in text


def test_the_cdk_nag_recipe_is_the_one_the_package_test_synthesizes():
    """docs/constructs/README.md shows how to run cdk-nag in your own app: the line tests/consumer/app.py (built
    from the installed wheel by `make test-package`) runs."""
    recipe = "cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))"
    assert recipe in (construct_docs.DOCS / "README.md").read_text()
    assert recipe in (ROOT / "tests" / "consumer" / "app.py").read_text()


import pytest  # noqa: E402


@pytest.mark.integration  # every example synthesized: about a minute on 2 cores (make test-integration, CI)
def test_every_example_in_the_construct_docs_runs_in_the_checkout(tmp_path):
    # The same runner make test-package uses from the installed wheel (tests/package/test_consumer_app.py).
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "tests/consumer/doc_examples.py"), str(ROOT / "docs/constructs"),
         str(ROOT / "tests/data/fleet.json")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    ran = re.search(r"^(\d+) of (\d+) examples ran$", done.stdout, re.M)
    assert ran and ran[1] == ran[2] and int(ran[2]) >= 30 and "FAIL" not in done.stdout, done.stdout[-2000:]
