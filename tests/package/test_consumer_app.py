"""The library as a user installs it: a wheel, a fresh virtual environment outside the repository, their own app.

Run by ``make test-package`` (and so by .ci/run), not by ``make test``: it builds a wheel and a virtual
environment (about a minute on 2 cores). Nothing of the checkout is on ``sys.path`` in the consumer's process:
the app lives in a temporary folder, PYTHONPATH is unset, and the checkout is never the working directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".uv" / "bin" / "uv"
CDK = ROOT / "node_modules" / ".bin" / "cdk"
CONSUMER_APP = ROOT / "tests" / "consumer" / "app.py"
FLEET_APP = ROOT / "tests" / "consumer" / "fleet_app.py"
FLEET = ROOT / "tests" / "data" / "fleet.json"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1111abcd-12ab-34cd-56ef-1234567890ab"
# A platform team's own network, key and tags, inherited by every deployment of the fleet.
FLEET_SETTINGS = {
    "stack_name": "Team",
    "vpc_subnet_ids": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
    "vpc_security_group_ids": ["sg-0123456789abcdef0"],
    "logs_kms_key_arn": KEY,
    "lambda_kms_key_arn": KEY,
    "tags": {"team": "ml-platform", "cost-center": "4711"},
}
PACKAGES = ("constructs_lib", "handler_kit", "safejson", "hfstage", "preflight", "endpoint_client", "llmops")


def run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: int = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout's files (the build writes nothing into the repository)."""
    source = tmp_path_factory.mktemp("source")
    files = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT).split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    uv = [str(UV)] if UV.exists() else [sys.executable, "-m", "uv"]
    run([*uv, "build", "--wheel", "--out-dir", str(out), str(source)], cwd=source)
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh environment with the wheel and the pinned versions it was tested with."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    uv = [str(UV)] if UV.exists() else [sys.executable, "-m", "uv"]
    run([*uv, "venv", "--quiet", "--python", sys.executable, str(where)], cwd=where.parent)
    python = str(where / "bin" / "python")
    constraint = ["--constraint", str(ROOT / "requirements.txt")]
    run([*uv, "pip", "install", "--quiet", "--python", python, f"{wheel}[nag]", *constraint], cwd=where.parent)
    return where


def clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        CDK_DISABLE_CLI_TELEMETRY="true",
        CDK_DISABLE_VERSION_CHECK="1",
        AWS_EC2_METADATA_DISABLED="true",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
    )
    return env


def test_the_wheel_carries_the_constructs_their_handlers_data_and_container_folder(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for package in PACKAGES:
        assert f"{package}/__init__.py" in names
    for handler in ("staged_checkpoint", "deployment_preflight", "endpoint_smoke_test"):
        assert f"constructs_lib/_runtime/lambda/{handler}/index.py" in names
    assert "constructs_lib/_runtime/containers/llamacpp/Dockerfile" in names
    assert "constructs_lib/data/engines.json" in names and "preflight/data/weight_formats.json" in names
    assert "llmops/playground_static/index.html" in names
    assert not [n for n in names if n.startswith(("tests/", "stacks/", "app.py"))]  # the app is not the library
    assert "constructs_lib/deployment/__init__.py" in names  # the fleet and deployment builders are
    size = wheel.stat().st_size
    print(f"\nwheel {wheel.name}: {size / 1024:.0f} KiB, {len(names)} files")
    assert size < 2 * 1024 * 1024


def test_a_consumer_app_with_an_empty_cdk_json_synthesizes_clean(venv, tmp_path):
    app_dir = tmp_path / "my-app"
    app_dir.mkdir()
    shutil.copy(CONSUMER_APP, app_dir / "app.py")
    # Nothing but "app": no feature flags, no context the constructs could lean on.
    (app_dir / "cdk.json").write_text(json.dumps({"app": f"{venv / 'bin' / 'python'} app.py"}))
    env = clean_env(venv)
    out = app_dir / "cdk.out"
    run([str(CDK), "synth", "--quiet", "--no-notices", "-o", str(out)], cwd=app_dir, env=env)

    report = json.loads((out / "validation-report.json").read_text())
    (nag,) = report["pluginReports"]
    assert nag["pluginName"] == "AwsSolutions" and nag["conclusion"] == "success" and nag["violations"] == []
    templates = sorted(out.glob("*.template.json"))
    run([str(ROOT / ".venv" / "bin" / "cfn-lint"), "--ignore-checks", "W3005", "--", *map(str, templates)], cwd=out)

    (template,) = [json.loads(t.read_text()) for t in templates]
    types = [r["Type"] for r in template["Resources"].values()]
    assert types.count("AWS::S3::Bucket") == 2  # one model bucket (and its access-log bucket) for both checkpoints
    assert types.count("Custom::StagedCheckpoint") == 2
    assert types.count("AWS::SageMaker::Endpoint") == 2
    assert types.count("AWS::SageMaker::InferenceComponent") == 2
    assert types.count("Custom::EndpointSmokeTest") == 3

    # Every handler asset holds its index.py and the packages it bundles, copied from the installed library.
    assets = json.loads(next(out.glob("*.assets.json")).read_text())["files"]
    folders = [out / a["source"]["path"] for a in assets.values() if a["source"].get("packaging") == "zip"]
    handlers = [f for f in folders if (f / "index.py").is_file()]
    assert len(handlers) >= 3
    assert all((f / "handler_kit" / "__init__.py").is_file() for f in handlers)  # every handler bundles the kit
    assert all((f / "safejson" / "__init__.py").is_file() for f in handlers)  # and the JSON reader
    assert any((f / "hfstage" / "worker.py").is_file() for f in folders)  # the staging worker
    assert any((f / "preflight" / "memory_fit.py").is_file() for f in handlers)
    assert str(ROOT) not in (out / "manifest.json").read_text()


def test_llmops_runs_from_the_installed_environment(venv, tmp_path):
    env = clean_env(venv)
    listing = run([str(venv / "bin" / "llmops"), "--help"], cwd=tmp_path, env=env)
    for command in ("plan", "invoke", "bench", "playground", "stage", "resolve-image", "summary"):
        assert f"  {command} " in listing
    assert "usage: llmops summary" in run([str(venv / "bin" / "llmops"), "summary", "--help"], cwd=tmp_path, env=env)
    assert "usage:" in run([str(venv / "bin" / "python"), "-m", "llmops", "plan", "--help"], cwd=tmp_path, env=env)
    where = run(
        [str(venv / "bin" / "python"), "-c", "import constructs_lib; print(constructs_lib.__file__)"],
        cwd=tmp_path,
        env=env,
    )
    assert str(venv) in where and str(ROOT) not in where


def _resources(template: dict) -> dict[str, str]:
    # AWS::CDK::Metadata: the CLI's version reporting, which an in-process synth leaves out.
    return {i: r["Type"] for i, r in template["Resources"].items() if r["Type"] != "AWS::CDK::Metadata"}


def test_a_fleet_from_a_file_in_the_users_app_is_the_apps_fleet_and_clean(venv, tmp_path):
    """Issue 36: the fleet file read and built by the library's public call (constructs_lib.deployment), from the
    installed wheel, gives the same stacks and resources as this project's app for the same file and settings."""
    app_dir = tmp_path / "team-app"
    app_dir.mkdir()
    shutil.copy(FLEET_APP, app_dir / "app.py")
    shutil.copy(FLEET, app_dir / "fleet.json")
    (app_dir / "settings.json").write_text(json.dumps(FLEET_SETTINGS))
    (app_dir / "cdk.json").write_text(json.dumps({"app": f"{venv / 'bin' / 'python'} app.py"}))
    out = app_dir / "cdk.out"
    run([str(CDK), "synth", "--quiet", "--no-notices", "-o", str(out)], cwd=app_dir, env=clean_env(venv))

    report = json.loads((out / "validation-report.json").read_text())
    (nag,) = report["pluginReports"]
    assert nag["conclusion"] == "success" and nag["violations"] == []
    templates = {t.name.removesuffix(".template.json"): json.loads(t.read_text()) for t in out.glob("*.template.json")}
    assert sorted(templates) == ["Team-chat", "Team-coder", "Team-models", "Team-shared"]
    run(
        [
            str(ROOT / ".venv" / "bin" / "cfn-lint"),
            "--ignore-checks",
            "W3005",
            "--",
            *map(str, out.glob("*.template.json")),
        ],
        cwd=out,
    )

    # This project's app, for the same file and settings (its cdk.json's defaults are the registry's).
    ours = tmp_path / "ours"
    done = subprocess.run(
        [sys.executable, "-c", PROJECT_SYNTH, str(ours), str(FLEET), json.dumps(FLEET_SETTINGS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for name, template in templates.items():
        theirs = json.loads((ours / f"{name}.template.json").read_text())
        assert _resources(template) == _resources(theirs), name

    shared = templates["Team-shared"]["Resources"]
    # The adapter's wiring, owned by the construct: LoRA on its base, the base's read of the archive, its base.
    models = [r for r in shared.values() if r["Type"] == "AWS::SageMaker::Model"]
    assert sum("SM_VLLM_ENABLE_LORA" in m["Properties"]["PrimaryContainer"]["Environment"] for m in models) == 1
    (adapter,) = [
        r
        for r in shared.values()
        if r["Type"] == "AWS::SageMaker::InferenceComponent"
        and "BaseInferenceComponentName" in r["Properties"]["Specification"]
    ]
    assert adapter["Properties"]["Specification"]["Container"]["ArtifactUrl"].endswith("adapter.tar.gz")
    reads = json.dumps([r for r in shared.values() if r["Type"] == "AWS::IAM::Policy"])
    assert ":s3:::my-adapters/qwen3-0.6b-sql/adapter.tar.gz" in reads  # arn:<partition>:s3:::bucket/key
    # The user's network, key and tags on every stack's functions and SageMaker resources.
    for name in ("Team-chat", "Team-coder", "Team-shared"):
        resources = templates[name]["Resources"].values()
        functions = [r for r in resources if r["Type"] == "AWS::Lambda::Function"]
        assert functions and all(f["Properties"].get("VpcConfig") for f in functions), name
        assert all(f["Properties"].get("KmsKeyArn") == KEY for f in functions), name
        # Every deployment's preflight checks the subnets its model is served in, the packed ones' too.
        preflights = [r for r in resources if r["Type"] == "Custom::DeploymentPreflight"]
        assert preflights and all(
            p["Properties"].get("Subnets") == FLEET_SETTINGS["vpc_subnet_ids"] for p in preflights
        )
        endpoints = [r for r in resources if r["Type"] == "AWS::SageMaker::Endpoint"]
        assert endpoints and all({"Key": "team", "Value": "ml-platform"} in e["Properties"]["Tags"] for e in endpoints)


# The project's own app (app.py) synthesized in a child process: argv outdir, fleet file, settings as JSON.
PROJECT_SYNTH = """
import json, sys
import aws_cdk as cdk
from app import build_app
from tests.conftest import context_with
outdir, fleet, settings = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
build_app(cdk.App(context=context_with(deployments_file=fleet, **settings), outdir=outdir)).synth()
"""


def test_the_installed_commands_read_the_librarys_context_keys(venv, tmp_path):
    # llmops -c reads the registry the library carries (it used to need the app's repository).
    probe = (
        "from llmops.context import context_of; "
        "print(context_of(['instance_type=ml.g6.xlarge'], None)['instance_type'])"
    )
    out = run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path, env=clean_env(venv))
    assert out.strip() == "ml.g6.xlarge"


def test_every_example_in_the_construct_docs_runs_from_the_installed_wheel(venv, tmp_path):
    """Issue 36: each ```python block of docs/constructs/ (tests/consumer/doc_examples.py) run in a fresh stack
    of a user's app, with the installed library only, and synthesized."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs" / "constructs", docs)  # the docs travel alone: no checkout on the path
    script = tmp_path / "doc_examples.py"
    shutil.copy(ROOT / "tests" / "consumer" / "doc_examples.py", script)
    shutil.copy(FLEET, tmp_path / "fleet.json")
    out = run(
        [str(venv / "bin" / "python"), str(script), str(docs), str(tmp_path / "fleet.json")],
        cwd=tmp_path,
        env=clean_env(venv),
    )
    lines = [line for line in out.splitlines() if line.startswith(("ok ", "FAIL"))]
    total = len(re.findall(r"^[ \t]*```python$", "\n".join(p.read_text() for p in docs.glob("*.md")), re.M))
    assert total >= 30 and len(lines) == total and all(line.startswith("ok") for line in lines), out
    assert out.rstrip().endswith(f"{total} of {total} examples ran")
