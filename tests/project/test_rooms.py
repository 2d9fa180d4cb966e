"""The house's rooms (issue 37): no import loop among product modules, few ``type: ignore``, a public surface that
the app and the commands keep to, and an ``adding-things.md`` that names files that exist.

Imports inside functions count (a loop hidden by a late import is still a loop); imports under ``if TYPE_CHECKING:``
do not (they never run).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["constructs_lib", "hfstage", "preflight", "endpoint_client", "llmops", "handler_kit", "safejson", "stacks"]


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "lambda":  # a handler's folder is its own top level: its modules import each other flatly
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def product_files() -> dict[str, Path]:
    files = {_module_of(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    files.update({_module_of(p): p for p in (ROOT / "lambda").rglob("*.py")})
    files["app"] = ROOT / "app.py"
    return files


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return skipped


def imports_of(module: str, path: Path, files: dict[str, Path]) -> set[str]:
    """The product modules ``module`` imports, anywhere in it."""
    tree = ast.parse(path.read_text())
    skipped = _type_checking_nodes(tree)
    named: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            named |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            named |= {f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in node.names}
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            named.add(node.args[0].value)  # importlib.import_module("pkg.mod"): an import all the same
    found = set()
    for name in named:
        if path.parent.parent.name == "lambda" and (path.parent / f"{name}.py").is_file():
            found.add(f"{path.parent.name}.{name}")  # a handler's own module, imported flatly
            continue
        while name and name not in files:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    found.discard(module)
    return found


def import_loops(files: dict[str, Path]) -> list[list[str]]:
    graph = {m: imports_of(m, p, files) for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return loops


def test_no_import_loop_among_product_modules():
    assert import_loops(product_files()) == []


def test_the_loop_finder_finds_a_loop_hidden_in_a_function(tmp_path, monkeypatch):
    # A test that cannot fail is a defect: two modules that import each other, one of them inside a function.
    files = {"pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py", "pkg.c": tmp_path / "c.py"}
    files["pkg.a"].write_text("from pkg import b\n")
    files["pkg.b"].write_text("def late():\n    from pkg.a import thing\n")
    files["pkg.c"].write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    assert import_loops(files) == [["pkg.a", "pkg.b"]]
    # importlib.import_module with a literal name is an import too (a deprecation shim once hid a loop that way).
    files["pkg.b"].write_text("import importlib\ndef late():\n    return importlib.import_module('pkg.c')\n")
    files["pkg.c"].write_text("from pkg import b\n")
    assert import_loops(files) == [["pkg.b", "pkg.c"]]


def test_at_most_five_type_ignores_in_product_code():
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in product_files().values()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "type: ignore" in line
    ]
    assert len(found) <= 5, found


# Modules an app may import: the library's two faces, its deployment layer, monitoring, and the facts record's format.
PUBLIC = {
    "constructs_lib",
    "constructs_lib.rules",
    "constructs_lib.deployment",
    "constructs_lib.monitoring",
    "constructs_lib.model_facts",
}


def test_the_app_and_the_commands_import_only_the_public_surface():
    files = product_files()
    offenders = []
    for module, path in files.items():
        if not (module == "app" or module.split(".")[0] in ("stacks", "llmops")):
            continue
        for imported in imports_of(module, path, files):
            if imported.startswith("constructs_lib") and imported not in PUBLIC:
                offenders.append(f"{path.relative_to(ROOT)}: {imported}")
    assert offenders == []


def test_adding_things_names_files_that_exist():
    """docs/developing/adding-things.md counts the files a change touches: each path it names must exist, so the
    page fails here when the layout it describes moves."""
    text = (ROOT / "docs" / "developing" / "adding-things.md").read_text()
    paths = set(re.findall(r"`((?:[a-z_]+/)+[A-Za-z_.]*)`", text))
    assert len(paths) >= 8
    missing = [p for p in sorted(paths) if not (ROOT / p).exists() and not (ROOT / "constructs_lib" / p).exists()]
    assert missing == []


def test_every_product_package_is_in_the_wheel():
    """A package folder the wheel leaves out imports in the checkout and fails in a user's app (make test-package)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for pkg in PACKAGES
        if pkg != "stacks"  # the repository's app, not shipped
        for init in (ROOT / pkg).rglob("__init__.py")
        if "playground_static" not in init.parts
    }
    assert folders - listed == set()
