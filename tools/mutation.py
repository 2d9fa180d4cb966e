"""Mutation testing of the integrity-critical code: ``make mutation`` (not part of ``make test``).

Each suite mutates one module and runs only that module's own tests against each mutant, so a run fits
on 2 cores. Python modules go through mutmut (mutation schemata: one fork per mutant, and only the tests
that reach the mutated function run). The constructs' IAM grants go through a narrower mutator of our
own: each action string in a grant is deleted in turn, and the IAM tests must notice; mutmut would
mutate every line of a construct and need a CDK synth (seconds, through jsii) for each.

    .venv/bin/python tools/mutation.py                 # every suite
    .venv/bin/python tools/mutation.py --only preflight --only iam
    .venv/bin/python tools/mutation.py --only hfstage --recheck --match 'hub[.]'   # survivors only, after new tests
    .venv/bin/python tools/mutation.py --report        # score the last runs again (after editing the equivalents)

Each suite runs in a scratch copy under ``.mutation/<suite>/`` (kept, so mutmut's cache makes a rerun
after a small change quick). Mutants judged equivalent (no test can tell them from the original) are
listed with a reason in ``tools/mutation_equivalents.json`` and left out of the score.
A timeout or a crash of the test process counts as killed (``DETECTED``).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / ".mutation"
EQUIVALENTS = Path(__file__).with_name("mutation_equivalents.json")
GOAL = 0.90
# What counts as the tests noticing a mutant: a failing test, a run that never finishes where the original does
# (as Stryker counts a timeout), and a crash of the test process (mutmut's "segfault": exit -11 or -9, as when a
# mutant hands OpenSSL a NULL context in hfstage/hashstate.py).
DETECTED = ("killed", "timeout", "segfault")


@dataclass(frozen=True)
class Suite:
    name: str
    sources: tuple[str, ...]  # what mutmut mutates
    tests: tuple[str, ...]  # the module's own tests, and nothing else
    kind: str = "mutmut"  # or "iam"
    # mutmut kills a mutant after (its tests' time + 10 s) x this many seconds (mutmut's default: 15)
    timeout_multiplier: float | None = None
    pytest_args: tuple[str, ...] = ()  # added to each pytest run of this suite's mutants


# These run the staging code asset's zip under ``python -I -S``, where mutmut's mutated modules cannot import
# mutmut itself: every mutant would fail them. load_vendored, which only they reach, is measured by none.
ZIP_PROBES = tuple(
    f"--deselect=tests/hfstage/test_hfstage_checksum.py::{name}"
    for name in (
        "test_the_asset_s_awscrt_loads_from_the_zip_through_an_in_memory_file",
        "test_an_asset_without_awscrt_falls_back_to_crc32_and_says_why",
        # and these test the synth side (constructs_lib/runtime_code.py) and botocore in a subprocess
        "test_only_a_linux_x86_64_abi3_build_of_awscrt_is_bundled",
        "test_the_worker_keeps_botocore_s_own_signer",
    )
)

SUITES = (
    Suite(
        "hfstage",
        ("hfstage/",),
        (
            "tests/hfstage/test_hfstage_units.py",
            "tests/hfstage/test_hfstage_transfer.py",
            "tests/hfstage/test_hfstage_hub.py",
            "tests/hfstage/test_hfstage_worker.py",
            "tests/hfstage/test_hfstage_worker_edges.py",
            "tests/hfstage/test_hfstage_ranges.py",
            "tests/hfstage/test_hfstage_hashstate.py",
            "tests/hfstage/test_hfstage_errors.py",
            "tests/hfstage/test_hfstage_cli.py",
            "tests/hfstage/test_hfstage_log.py",
            "tests/hfstage/test_hfstage_hosts.py",
            "tests/hfstage/test_hfstage_wire.py",
            "tests/hfstage/test_hfstage_token.py",
            "tests/hfstage/test_hfstage_retries.py",
            "tests/hfstage/test_hfstage_checksum.py",
            "tests/hostile/test_staging_names.py",
        ),
        # Mutants of its retry, wait and poll loops hang (a buffer never released, a wait with no timeout);
        # at 15 each sat several minutes. 3 still lets a mutant run 3x its tests' time plus 30 s, and a
        # test that runs 20 s (the slowest takes 2) ends its mutant's run at once (pytest-timeout's thread
        # method exits with status 1, a kill) rather than waiting for the whole budget of its tests.
        timeout_multiplier=3.0,
        pytest_args=("--timeout=20", "--timeout-method=thread", *ZIP_PROBES),
    ),
    Suite(
        # The checksums S3 verifies (CRC combination, the awscrt the code asset carries), measured on their own.
        "checksum",
        ("hfstage/checksum.py",),
        ("tests/hfstage/test_hfstage_checksum.py",),
        pytest_args=("--timeout=60", "--timeout-method=thread", *ZIP_PROBES),
    ),
    Suite(
        # The tarball mode's own streaming gunzip and tar reader (the hfstage suite's tests do not reach them).
        "hfstage/tarball.py",
        ("hfstage/tarball.py",),
        ("tests/hfstage/test_hfstage_tarball.py", "tests/hostile/test_tarball.py"),
        timeout_multiplier=3.0,  # its read retry loop, as the hfstage suite's
        pytest_args=("--timeout=30", "--timeout-method=thread"),
    ),
    Suite(
        "endpoint_client",
        ("endpoint_client/",),
        (
            "tests/endpoint_client/test_sse.py",
            "tests/endpoint_client/test_jsonlines_stream.py",
            "tests/endpoint_client/test_invoke_integration.py",
            "tests/handlers/test_smoke_handler.py",
            "tests/endpoint_client/test_endpoint_client.py",
        ),
    ),
    Suite(
        # The bearer-token path alone, against the tests that call it (the endpoint_client suite's do not).
        "endpoint_client/openai_http.py",
        ("endpoint_client/openai_http.py",),
        (
            "tests/hostile/test_openai_redirects.py",
            "tests/hostile/test_answer_caps.py",
            "tests/llmops/test_bench_openai.py",
            "tests/endpoint_client/test_connection_pool.py",
        ),
        # A mutant that turns the read loop's end into `continue` spins forever: end it after 30 s (a kill), not
        # after mutmut's 15 x (its tests' time + 10 s). The bench's percentile comparison measures wall-clock
        # latencies: on 2 busy cores it fails the clean run, and would kill mutants it does not see.
        timeout_multiplier=3.0,
        pytest_args=(
            "--timeout=30",
            "--timeout-method=thread",
            "--deselect=tests/llmops/test_bench_openai.py::test_bench_reports_the_same_percentiles_over_both_paths",
        ),
    ),
    Suite(
        # The model-facts record (llmops facts): what it stores and how a stack reads it back.
        "llmops/facts.py",
        ("llmops/facts.py",),
        (
            "tests/stacks/test_model_facts.py",
            "tests/hostile/test_model_facts_record.py",
            "tests/stacks/test_fleet_model_facts.py",
        ),
    ),
    Suite(
        # The checks of a deployment against the model's recorded facts.
        "constructs_lib/deployment/model_checks.py",
        ("constructs_lib/deployment/model_checks.py",),
        (
            "tests/hostile/test_model_facts_record.py",
            "tests/stacks/test_model_facts.py",
            "tests/stacks/test_fleet_model_facts.py",
        ),
    ),
    Suite(
        # The one loader of outside JSON (depth, size, duplicate keys, non-finite numbers).
        "safejson/__init__.py",
        ("safejson/__init__.py",),
        ("tests/hostile/test_deep_json.py",),
    ),
    # Issue 34's modules, each with its focused tests (figures in docs/developing/tests-and-benchmarks.md).
    Suite(
        "constructs_lib/update_policy.py",
        ("constructs_lib/update_policy.py",),
        ("tests/constructs/test_update_room_and_time.py", "tests/handlers/test_update_policies_rollback.py"),
    ),
    Suite("constructs_lib/keys.py", ("constructs_lib/keys.py",), ("tests/stacks/test_customer_keys.py",)),
    Suite(
        "constructs_lib/serving_features.py",
        ("constructs_lib/serving_features.py",),
        ("tests/constructs/test_serving_features.py",),
    ),
    Suite("llmops/status.py", ("llmops/status.py",), ("tests/llmops/test_status.py",)),
    Suite(
        # The figures of a load run, shared by llmops bench and the smoke test's load step.
        "endpoint_client/load.py",
        ("endpoint_client/load.py",),
        ("tests/llmops/test_bench_client.py", "tests/llmops/test_bench.py"),
    ),
    Suite(
        "llmops/price_list.py",
        ("llmops/price_list.py",),
        ("tests/llmops/test_price_list.py", "tests/hostile/test_price_cache.py"),
    ),
    Suite(
        "preflight",
        ("preflight/",),
        (
            "tests/preflight/test_memory_fit.py",
            "tests/preflight/test_memory_fit_layers.py",
            "tests/preflight/test_memory_fit_refusals.py",
            "tests/preflight/test_memory_fit_inputs.py",
            "tests/preflight/test_context_limit.py",
            "tests/preflight/test_calibration.py",
            "tests/constructs/test_formats.py",
            "tests/constructs/test_checkpoint_code.py",
            "tests/preflight/test_gguf_header.py",
            "tests/llmops/test_plan_command.py",
            "tests/handlers/test_preflight_handler.py",
            "tests/handlers/test_preflight_format.py",
            "tests/handlers/test_preflight_gguf.py",
        ),
    ),
    Suite(
        "constructs_lib/deployment/config.py",
        ("constructs_lib/deployment/config.py",),
        (
            "tests/stacks/test_config.py",
            "tests/stacks/test_config_limits.py",
            "tests/stacks/test_config_rules.py",
            "tests/stacks/test_observability_config.py",
        ),
    ),
    Suite(
        "iam",
        ("constructs_lib/",),
        (
            "tests/handlers/test_iam_exact.py",
            "tests/handlers/test_iam_calls.py",
            "tests/constructs/test_gpu_endpoint.py::test_grant_invoke_covers_streaming_on_this_endpoint_only",
            "tests/constructs/test_monitoring.py::test_topic_is_encrypted_with_a_rotated_key_cloudwatch_may_use_and_ssl_only_with_email",
        ),
        kind="iam",
    ),
)


@dataclass
class Outcome:
    suite: str
    counts: dict[str, int] = field(default_factory=dict)
    survivors: list[str] = field(default_factory=list)
    # survivor name -> "<function> | <the mutated line(s)>": what an equivalent is listed under, so the
    # list survives mutmut renumbering a function's mutants after an edit.
    changes: dict[str, str] = field(default_factory=dict)
    equivalent: int = 0
    seconds: float = 0.0

    @property
    def killed(self) -> int:
        return sum(self.counts.get(status, 0) for status in DETECTED)

    @property
    def scored(self) -> int:
        return sum(self.counts.values()) - self.equivalent - self.counts.get("skipped", 0)

    @property
    def score(self) -> float:
        return self.killed / self.scored if self.scored else 1.0


def scratch_copy(suite: Suite) -> Path:
    """The tracked tree (and uncommitted edits) in ``.mutation/<suite>``; unchanged files keep their mtime."""
    where = scratch_dir(suite)
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    for name in filter(None, listed):
        source, target = ROOT / name, where / name
        if not source.is_file():
            continue
        if target.is_file() and target.read_bytes() == source.read_bytes():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    venv = where / ".venv"
    if not venv.exists():
        venv.symlink_to((ROOT / ".venv").resolve())
    return where


def mutmut_config(suite: Suite, where: Path, *, watch_tests: bool = True) -> str:
    listed = lambda values: "[" + ", ".join(json.dumps(v) for v in values) + "]"  # noqa: E731
    # mutmut runs the tests in its own copy (mutants/): everything else the tests import must be there too.
    # A folder holding a mutated file goes file by file, so the copy never overwrites the mutants.
    # A folder holding a mutated file is walked down to the folders that hold none, which go whole (their data
    # files too: constructs_lib/data/engines.json is read at import; mutmut copies a listed file only into a
    # folder that already exists).
    mutated = {(where / s).resolve() for s in suite.sources}
    others: list[str] = []

    def walk(folder: Path) -> None:
        for p in sorted(folder.iterdir()):
            top = folder == where
            if p.resolve() in mutated or p.name == "__pycache__":
                continue
            if top and (p.name.startswith(".") or p.name in ("mutants", "tests") or p.name.startswith("mutmut-")):
                continue
            if p.is_dir() and any(m.is_relative_to(p.resolve()) for m in mutated):
                walk(p)
            elif p.is_dir() or p.is_file():
                others.append(str(p.relative_to(where)) + ("/" if p.is_dir() else ""))

    walk(where)
    return (
        "\n[tool.mutmut]\n"
        f"source_paths = {listed(suite.sources)}\n"
        f"also_copy = {listed(others)}\n"
        f"pytest_add_cli_args_test_selection = {listed(suite.tests)}\n"
        f"pytest_add_cli_args = {listed(['-p', 'no:cacheprovider', '-q', *suite.pytest_args])}\n"
        # One fork per mutant from a process that imported the code once: mutmut switches mutants inside each
        # function at call time, so code must run in functions to be mutated (the context parsers are
        # module-level functions with bound settings for this reason); what runs only at import is not.
        "timeout_constant = 10.0\n"
        # mutmut keeps a cached verdict when only tests change ("Rerun mutant if it's explicitly mentioned, but
        # otherwise let the result stand", mutmut/__main__.py _run): a test added to kill a survivor would not
        # count. Watching the tests and rerunning everything when one changes keeps the score honest.
        + (
            'cache_invalidation_files = ["tests/**/*.py", "tests/**/*.json", "tests/**/*.txt"]\n'
            'on_dependency_change = "rerun"\n'
            if watch_tests
            else ""
        )
        + (f"timeout_multiplier = {suite.timeout_multiplier}\n" if suite.timeout_multiplier else "")
    )


def _selection(config: str) -> str | None:
    """The test-selection line of a mutmut config (None when it has none)."""
    return next((line for line in config.splitlines() if line.startswith("pytest_add_cli_args_test_selection")), None)


def scratch_dir(suite: Suite) -> Path:
    return SCRATCH / re.sub(r"[^A-Za-z0-9_.-]", "_", suite.name)


def run_mutmut(
    suite: Suite, children: int, log, *, run: bool = True, recheck: bool = False, match: str | None = None
) -> Outcome:
    """Run the suite's mutants (``run``), or only score its last run again (after an edit to the equivalents).

    ``recheck``: run only the last run's survivors, against the tests as they are now, and keep every other
    verdict. Sound after tests were added or tightened (a kill cannot be undone by more checks); after any other
    change the measure is a full run. ``match``: recheck only the survivors whose name matches this regex.
    """
    mutmut = [str(ROOT / ".venv" / "bin" / "mutmut")]
    env = {**os.environ, "CI": "", "PYTHONDONTWRITEBYTECODE": "1"}
    again = [n for n in survivors_of(scratch_dir(suite), env) if not match or re.search(match, n)] if recheck else []
    if again:  # an equivalent survives any test: rerunning it only costs its tests' time
        judged = json.loads(EQUIVALENTS.read_text()) if EQUIVALENTS.exists() else {}
        diffs = mutant_diffs(scratch_dir(suite), again, env)
        again = [n for n in again if n not in judged and change_signature(n, diffs.get(n, "")) not in judged]
    if recheck and not again:
        log(f"mutation: {suite.name}: no survivors to recheck")
    last = scratch_dir(suite) / "pyproject.toml"  # the config the last run used
    if again and _selection(last.read_text() if last.exists() else "") != _selection(mutmut_config(suite, last.parent)):
        # mutmut drops every verdict when the test selection changes (configuration.py config_fingerprint): the
        # recheck would leave all but the named mutants unchecked.
        log(f"mutation: {suite.name}: its test files changed since the last run; run it in full, not --recheck")
        again, run = [], False
    where = scratch_copy(suite) if run else scratch_dir(suite)
    started = time.monotonic()
    if run and not (recheck and not again):  # a recheck with nothing named would run every unchecked mutant
        pyproject = where / "pyproject.toml"
        config = mutmut_config(suite, where, watch_tests=not recheck)
        pyproject.write_text((ROOT / "pyproject.toml").read_text() + config)
        with open(where / ("mutmut-recheck.log" if recheck else "mutmut-run.log"), "w") as out:
            command = [*mutmut, "run", "--max-children", str(children), *again]
            subprocess.run(command, cwd=where, env=env, stdout=out, stderr=out)
            if recheck:
                # mutmut resets the verdicts of every function whose code changed since the last run
                # (create_mutants_for_file: "func in changed"): run those too, or they would count as unchecked.
                reset = [
                    name.strip()
                    for name, _, status in (
                        line.rpartition(": ")
                        for line in subprocess.run(
                            [*mutmut, "results", "--all", "true"], cwd=where, env=env, capture_output=True, text=True
                        ).stdout.splitlines()
                    )
                    if status == "not checked"
                ]
                if reset:
                    log(f"mutation: {suite.name}: {len(reset)} mutant(s) of changed code, run as well")
                    command = [*mutmut, "run", "--max-children", str(children), *reset]
                    subprocess.run(command, cwd=where, env=env, stdout=out, stderr=out)
    listing = subprocess.run(
        [*mutmut, "results", "--all", "true"], cwd=where, env=env, capture_output=True, text=True
    ).stdout
    timing = where / "mutmut-run.seconds"  # how long the run took, for a later --report
    if run:
        earlier = float(timing.read_text()) if recheck and timing.exists() else 0.0
        timing.write_text(f"{earlier + time.monotonic() - started:.1f}\n")
    outcome = Outcome(suite.name, seconds=float(timing.read_text()) if timing.exists() else 0.0)
    for line in listing.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if not sep:
            continue
        outcome.counts[status] = outcome.counts.get(status, 0) + 1
        if status not in (*DETECTED, "skipped"):
            outcome.survivors.append(f"{name}: {status}")
    if run and not outcome.counts:
        # mutmut generated no mutant: its copy under mutants/ is stale (a run stopped while it was writing it)
        log(f"mutation: {suite.name}: no mutants at all; delete {where} and run it again ({where}/mutmut-run.log)")
    if run and outcome.counts and set(outcome.counts) == {"not checked"}:
        # mutmut never ran a mutant (its copy of the tree could not import, or its clean run failed): say so,
        # rather than print a 0 % that reads like a score
        log(f"mutation: {suite.name}: no mutant was run; mutmut's log says why: {where}/mutmut-run.log")
    diffs = mutant_diffs(where, [s.rsplit(": ", 1)[0] for s in outcome.survivors], env)
    outcome.changes = {name: change_signature(name, diff) for name, diff in diffs.items()}
    return outcome


# The diff `mutmut show NAME` prints (mutmut/__main__.py show -> get_diff_for_mutant), for many mutants in one
# process: a `mutmut show` per survivor costs a second of start-up each, minutes for a suite with hundreds.
_DIFFS = """
import json, sys
from mutmut.__main__ import find_mutant
from mutmut.mutation.diff_apply import get_diff_for_mutant
diffs = {}
for name in json.load(sys.stdin):
    try:
        diffs[name] = get_diff_for_mutant(name, path=find_mutant(name).path)
    except Exception:  # one unreadable mutant leaves its change unnamed, not the whole report unwritten
        diffs[name] = ""
json.dump(diffs, sys.stdout)
"""


def mutant_diffs(where: Path, names: list[str], env: dict[str, str]) -> dict[str, str]:
    if not names:
        return {}
    python = str(ROOT / ".venv" / "bin" / "python")
    shown = subprocess.run(
        [python, "-c", _DIFFS], cwd=where, env=env, input=json.dumps(names), capture_output=True, text=True, check=True
    )
    return json.loads(shown.stdout)


def survivors_of(where: Path, env: dict[str, str]) -> list[str]:
    """The mutants the suite's last run left alive (none when it has not run)."""
    if not (where / "mutants").is_dir():
        return []
    mutmut = str(ROOT / ".venv" / "bin" / "mutmut")
    listing = subprocess.run([mutmut, "results"], cwd=where, env=env, capture_output=True, text=True).stdout
    return [
        name.strip()
        for name, _, status in (line.rpartition(": ") for line in listing.splitlines())
        if status in ("survived", "suspicious", "no tests")
    ]


def change_signature(name: str, diff: str) -> str:
    """``module.function | original line -> mutated line`` of a mutant, from ``mutmut show``'s unified diff.

    Both sides: two mutants of one function can produce the same line from different originals
    (``start = match.end()`` and ``start = 0`` both becoming ``start = None``).
    """
    lines = diff.splitlines()
    removed = [line[1:].strip() for line in lines if line.startswith("-") and not line.startswith("---")]
    added = [line[1:].strip() for line in lines if line.startswith("+") and not line.startswith("+++")]
    return f"{name.split('__mutmut_')[0]} | {' / '.join(removed)} -> {' / '.join(added)}"


# -- the IAM grant mutator -------------------------------------------------------------------------------

ACTION = re.compile(r"^[a-z0-9-]+:[A-Za-z0-9*]+$")


def iam_mutants(source: str) -> list[tuple[int, int, str]]:
    """(start, end, action) of each IAM action literal in a list, tuple or call: deleting it is one mutant."""
    tree = ast.parse(source)
    offsets = [0]
    for line in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            elements = node.elts
        elif isinstance(node, ast.Call):  # key.grant(role, "kms:Decrypt", ...)
            elements = node.args
        else:
            continue
        for element in elements:
            if isinstance(element, ast.Constant) and isinstance(element.value, str) and ACTION.match(element.value):
                start = offsets[element.lineno - 1] + element.col_offset
                end = offsets[element.end_lineno - 1] + element.end_col_offset
                found.append((start, end, element.value))
    return found


def delete_element(source: str, start: int, end: int) -> str:
    """The list element at [start, end) and one adjoining comma removed: still valid Python."""
    tail = re.match(r"\s*,", source[end:])
    if tail:
        return source[:start] + source[end + tail.end() :]
    head = re.search(r",\s*$", source[:start])
    return source[: head.start()] + source[end:] if head else source[:start] + "None" + source[end:]


def run_iam(suite: Suite, log) -> Outcome:
    where = scratch_copy(suite)
    outcome = Outcome(suite.name)
    started = time.monotonic()
    pytest = [str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    env = {**os.environ, "CI": "", "PYTHONDONTWRITEBYTECODE": "1"}
    files = sorted(p for d in suite.sources for p in (where / d).glob("*.py"))
    for path in files:
        original = path.read_text()
        for index, (start, end, action) in enumerate(iam_mutants(original)):
            name = f"{path.relative_to(where)}:{action}#{index}"
            path.write_text(delete_element(original, start, end))
            try:
                run = subprocess.run([*pytest, *suite.tests], cwd=where, env=env, capture_output=True, timeout=900)
                status = "killed" if run.returncode != 0 else "survived"
            except subprocess.TimeoutExpired:
                status = "timeout"
            finally:
                path.write_text(original)
            outcome.counts[status] = outcome.counts.get(status, 0) + 1
            if status == "survived":
                outcome.survivors.append(f"{name}: survived")
            log(f"  {suite.name}: {name} {status}")
    outcome.seconds = time.monotonic() - started
    return outcome


def apply_equivalents(outcome: Outcome, equivalents: dict[str, str]) -> None:
    def listed(survivor: str) -> bool:
        name = survivor.rsplit(": ", 1)[0]
        return name in equivalents or outcome.changes.get(name) in equivalents

    judged = [s for s in outcome.survivors if listed(s)]
    outcome.equivalent = len(judged)
    outcome.survivors = [s for s in outcome.survivors if s not in judged]


def percent(score: float) -> str:
    """Rounded down, so one survivor in thousands never reads as 100.0% nor a score under the goal as the goal."""
    return f"{math.floor(score * 1000) / 10:.1f}%"


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| suite | mutants | killed | survived | no tests | equivalent | score | minutes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        total = sum(o.counts.values())
        survived = o.counts.get("survived", 0) + o.counts.get("suspicious", 0) - o.equivalent
        lines.append(
            f"| {o.suite} | {total} | {o.killed} | {survived} | {o.counts.get('no tests', 0)} | {o.equivalent} "
            f"| {percent(o.score)} | {o.seconds / 60:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/mutation.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=[s.name for s in SUITES], help="run only this suite")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2, help="parallel mutants (mutmut)")
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="rerun only the last run's survivors against the current tests (after adding tests), keep the rest",
    )
    parser.add_argument("--match", help="with --recheck: only the survivors whose name matches this regex")
    parser.add_argument(
        "--report",
        action="store_true",
        help="score each mutmut suite's last run again (after editing the equivalents) without running mutants",
    )
    args = parser.parse_args(argv)
    equivalents = json.loads(EQUIVALENTS.read_text()) if EQUIVALENTS.exists() else {}
    outcomes = []
    for suite in SUITES:
        if args.only and suite.name not in args.only:
            continue
        print(
            f"mutation: {suite.name} ({', '.join(suite.sources)}) against {len(suite.tests)} test file(s)", flush=True
        )
        if suite.kind == "iam":
            if args.report:
                print(f"mutation: {suite.name}: not stored between runs; run it without --report")
                continue
            outcome = run_iam(suite, print)
        elif args.report and not (scratch_dir(suite) / "mutants").is_dir():
            print(f"mutation: {suite.name}: no run to report under {scratch_dir(suite)}")
            continue
        else:
            outcome = run_mutmut(
                suite, args.max_children, print, run=not args.report, recheck=args.recheck, match=args.match
            )
        apply_equivalents(outcome, equivalents)
        outcomes.append(outcome)
        print(f"mutation: {suite.name}: {percent(outcome.score)} in {outcome.seconds / 60:.1f} min", flush=True)
    report = table(outcomes)
    print("\n" + report)
    survivors = [s for o in outcomes for s in o.survivors]
    if survivors:
        print(f"\n{len(survivors)} surviving or untested mutant(s) (`mutmut show NAME` in .mutation/<suite>):")
        changes = {name: change for o in outcomes for name, change in o.changes.items()}
        for s in survivors[:200]:
            print(f"  {s}" + (f"\n      {changes[s.rsplit(': ', 1)[0]]}" if s.rsplit(": ", 1)[0] in changes else ""))
    SCRATCH.mkdir(exist_ok=True)
    (SCRATCH / "report.json").write_text(
        json.dumps([{**o.__dict__, "score": o.score} for o in outcomes], indent=2) + "\n"
    )
    below = [o.suite for o in outcomes if o.score < GOAL or not o.counts]  # no mutants: no measure
    if below:
        print(f"\nbelow the {GOAL:.0%} goal: {', '.join(below)}")
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
