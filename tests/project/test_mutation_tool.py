"""``tools/mutation.py`` without running a mutation: the IAM mutator's mutants, the scoring, the suites."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import tomllib

import pytest

from tests.conftest import ROOT
from tools.mutation import (
    EQUIVALENTS,
    SUITES,
    Outcome,
    Suite,
    apply_equivalents,
    change_signature,
    delete_element,
    iam_mutants,
    mutant_diffs,
    mutmut_config,
    survivors_of,
    table,
)

# mutmut run inside pytest: `make test-integration` (CI runs it), so `make test` stays fast.
pytestmark = pytest.mark.integration

SOURCE = """
role.add_to_policy(iam.PolicyStatement(actions=["s3:PutObject", "s3:AbortMultipartUpload"], resources=[x]))
key.grant(role, "kms:GenerateDataKey", "kms:Decrypt")
only = ["sagemaker:InvokeEndpoint"]
not_an_action = ["models/", "https://example.com"]
"""


def test_each_action_literal_is_one_mutant_and_each_deletion_is_still_python() -> None:
    mutants = iam_mutants(SOURCE)
    assert sorted(action for _, _, action in mutants) == [
        "kms:Decrypt",
        "kms:GenerateDataKey",
        "s3:AbortMultipartUpload",
        "s3:PutObject",
        "sagemaker:InvokeEndpoint",
    ]
    for start, end, action in mutants:
        mutated = delete_element(SOURCE, start, end)
        ast.parse(mutated)
        assert mutated.count(f'"{action}"') == SOURCE.count(f'"{action}"') - 1


def test_deleting_the_last_element_removes_the_comma_before_it() -> None:
    (_, (start, end, _)) = iam_mutants('x = ["a:B", "c:D"]\n')
    assert delete_element('x = ["a:B", "c:D"]\n', start, end) == 'x = ["a:B"]\n'


def test_an_equivalent_mutant_leaves_the_score_and_the_survivor_list() -> None:
    outcome = Outcome("iam", counts={"killed": 9, "survived": 1}, survivors=["a.py:s3:GetObject#3: survived"])
    apply_equivalents(outcome, {"a.py:s3:GetObject#3": "granted twice"})
    assert (outcome.score, outcome.survivors, outcome.equivalent) == (1.0, [], 1)
    assert "| iam | 10 | 9 | 0 | 0 | 1 | 100.0% |" in table([outcome])


def test_an_equivalent_is_found_by_its_change_after_mutmut_renumbers_it() -> None:
    diff = "--- a.py\n+++ a.py\n@@ -1 +1 @@\n-    n = f(k, n=1)\n+    n = f(k, n=2)\n"
    change = change_signature("pkg.mod.x_f__mutmut_16", diff)
    assert change == "pkg.mod.x_f | n = f(k, n=1) -> n = f(k, n=2)"
    twin = change_signature("pkg.mod.x_f__mutmut_18", diff.replace("n = f(k, n=1)", "n = g(k)"))
    assert twin != change  # the same mutated line from another original is another mutant
    outcome = Outcome("m", counts={"killed": 3, "survived": 1}, survivors=["pkg.mod.x_f__mutmut_17: survived"])
    outcome.changes = {"pkg.mod.x_f__mutmut_17": change}
    apply_equivalents(outcome, {change: "only the best match is used"})
    assert (outcome.score, outcome.survivors, outcome.equivalent) == (1.0, [], 1)


def test_timeouts_and_crashes_count_as_killed_and_untested_mutants_against_the_score() -> None:
    outcome = Outcome("m", counts={"killed": 5, "timeout": 1, "segfault": 1, "survived": 2, "no tests": 1})
    assert outcome.killed == 7 and outcome.score == 0.7


def test_every_suite_names_test_files_that_exist_and_every_equivalent_has_a_reason() -> None:
    for suite in SUITES:
        assert suite.tests, suite.name
        for test in suite.tests:
            assert (ROOT / test.split("::")[0]).is_file(), test
    for name, reason in json.loads(EQUIVALENTS.read_text()).items():
        assert len(reason) > 40, name


def test_a_suite_timeout_multiplier_and_pytest_args_reach_mutmut_and_the_others_keep_its_defaults(tmp_path) -> None:
    (tmp_path / "pkg").mkdir()
    for suite, expected in (
        (Suite("a", ("pkg/",), ("t.py",), timeout_multiplier=3.0, pytest_args=("--timeout=9",)), 3.0),
        (Suite("b", ("pkg/",), ("t.py",)), None),
    ):
        config = tomllib.loads(mutmut_config(suite, tmp_path))["tool"]["mutmut"]
        assert config.get("timeout_multiplier") == expected
        assert config["timeout_constant"] == 10.0 and config["source_paths"] == ["pkg/"]
        assert config["pytest_add_cli_args"] == ["-p", "no:cacheprovider", "-q", *suite.pytest_args]


def test_survivors_changes_come_from_mutmut_in_one_process(tmp_path) -> None:
    """A real (tiny) mutmut run: its survivors' diffs, read in one process, name each change."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text("def double(n):\n    return n * 2\n")
    test = "from pkg.m import double\n\ndef test_zero():\n    assert double(0) == 0\n"
    (tmp_path / "tests" / "test_m.py").write_text(test)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.mutmut]\nsource_paths = ["pkg/"]\npytest_add_cli_args_test_selection = ["tests/"]\n'
    )
    env = {**os.environ, "CI": "", "PYTHONDONTWRITEBYTECODE": "1"}
    mutmut = str(ROOT / ".venv" / "bin" / "mutmut")
    subprocess.run([mutmut, "run", "--max-children", "1"], cwd=tmp_path, env=env, capture_output=True, check=True)
    names = ["pkg.m.x_double__mutmut_1", "pkg.m.x_double__mutmut_2"]
    changes = {name: change_signature(name, diff) for name, diff in mutant_diffs(tmp_path, names, env).items()}
    assert changes == {
        "pkg.m.x_double__mutmut_1": "pkg.m.x_double | return n * 2 -> return n / 2",
        "pkg.m.x_double__mutmut_2": "pkg.m.x_double | return n * 2 -> return n * 3",
    }
    assert mutant_diffs(tmp_path, [], env) == {}
    assert survivors_of(tmp_path, env) == names
    assert survivors_of(tmp_path / "never-ran", env) == []


def test_report_scores_the_last_run_again_without_running_or_copying(tmp_path, monkeypatch, capsys) -> None:
    """``--report`` reads a suite's stored results; it neither copies the tree (a test edit would rerun it all)
    nor runs mutmut, and says so for a suite with no stored run."""
    import tools.mutation as tool

    monkeypatch.setattr(tool, "SCRATCH", tmp_path)
    (tmp_path / "preflight" / "mutants").mkdir(parents=True)
    (tmp_path / "preflight" / "mutmut-run.seconds").write_text("90.0\n")
    seen = []

    def fake_run(command, **kwargs):
        seen.append(command[1:3])
        listing = "    preflight.a.x_f__mutmut_1: killed\n    preflight.a.x_f__mutmut_2: segfault\n"
        return subprocess.CompletedProcess(command, 0, stdout=listing if command[1] == "results" else "{}")

    monkeypatch.setattr(tool.subprocess, "run", fake_run)
    monkeypatch.setattr(tool, "scratch_copy", lambda suite: (_ for _ in ()).throw(AssertionError("copied")))
    assert tool.main(["--report", "--only", "preflight", "--only", "hfstage", "--only", "iam"]) == 0
    out = capsys.readouterr().out
    assert seen == [["results", "--all"]]
    assert "mutation: preflight: 100.0% in 1.5 min" in out
    assert "mutation: hfstage: no run to report under" in out
    assert "mutation: iam: not stored between runs" in out


def test_recheck_reruns_only_the_survivors_and_stops_watching_the_tests(tmp_path, monkeypatch) -> None:
    """``--recheck`` names the last run's survivors to mutmut and leaves the test watch out of the config, so
    mutmut keeps every other verdict; the minutes add up over the run and its rechecks."""
    import tools.mutation as tool

    monkeypatch.setattr(tool, "SCRATCH", tmp_path)
    where = tmp_path / "preflight"
    (where / "mutants").mkdir(parents=True)
    (where / "mutmut-run.seconds").write_text("60.0\n")
    monkeypatch.setattr(tool, "scratch_copy", lambda suite: where)
    commands = []

    def fake_run(command, **kwargs):
        commands.append(command[1:])
        listing = "    preflight.a.x_f__mutmut_2: survived\n    preflight.a.x_f__mutmut_3: no tests\n"
        return subprocess.CompletedProcess(command, 0, stdout=listing if command[1] == "results" else "{}")

    monkeypatch.setattr(tool.subprocess, "run", fake_run)
    monkeypatch.setattr(tool.time, "monotonic", iter([0.0, 30.0]).__next__)
    (suite,) = [s for s in SUITES if s.name == "preflight"]
    (where / "pyproject.toml").write_text(tool.mutmut_config(suite, where))  # as the last full run left it
    tool.run_mutmut(suite, 2, print, recheck=True)
    assert ["run", "--max-children", "2", "preflight.a.x_f__mutmut_2", "preflight.a.x_f__mutmut_3"] in commands
    assert (where / "mutmut-run.seconds").read_text() == "90.0\n"
    config = (where / "pyproject.toml").read_text()
    assert "[tool.mutmut]" in config and "cache_invalidation_files" not in config
    commands.clear()
    monkeypatch.setattr(tool.time, "monotonic", lambda: 0.0)
    tool.run_mutmut(suite, 2, print, recheck=True, match=r"_3$")
    assert ["run", "--max-children", "2", "preflight.a.x_f__mutmut_3"] in commands
    commands.clear()
    tool.run_mutmut(suite, 2, print, recheck=True, match="nothing")
    assert not [c for c in commands if c[0] == "run"]  # naming none would run every unchecked mutant
    judged = tmp_path / "equivalents.json"
    judged.write_text('{"preflight.a.x_f__mutmut_2": "no test can tell"}')
    monkeypatch.setattr(tool, "EQUIVALENTS", judged)
    tool.run_mutmut(suite, 2, print, recheck=True)
    assert ["run", "--max-children", "2", "preflight.a.x_f__mutmut_3"] in commands  # the equivalent is not rerun
    # A suite whose test files changed since its run: mutmut would drop every verdict, so nothing is rerun.
    (where / "pyproject.toml").write_text('pytest_add_cli_args_test_selection = ["tests/other.py"]\n')
    commands.clear()
    said = []
    tool.run_mutmut(suite, 2, said.append, recheck=True)
    assert not [c for c in commands if c[0] == "run"]
    assert said == ["mutation: preflight: its test files changed since the last run; run it in full, not --recheck"]


def test_scores_are_rounded_down_so_one_survivor_never_reads_as_all_killed() -> None:
    from tools.mutation import percent

    assert (percent(2284 / 2285), percent(0.8999), percent(1.0), percent(0.0)) == ("99.9%", "89.9%", "100.0%", "0.0%")
