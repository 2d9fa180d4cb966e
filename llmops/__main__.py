"""``llmops``: one command, a subcommand per tool (``llmops plan ...``); also ``python -m llmops``.

Each subcommand is a module of this package with ``main(argv) -> int``; ``python -m llmops.<module>`` runs the
same code. Modules load only when their subcommand runs: ``llmops --help`` starts no jsii.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

# subcommand -> module of this package (a hyphen in the command, an underscore in the module)
COMMANDS = {
    "plan": "plan",
    "facts": "facts",
    "invoke": "invoke",
    "bench": "bench",
    "playground": "playground",
    "stage": "stage",
    "resolve-image": "resolve_image",
    "summary": "summary",
    "status": "status",
}
EXIT_USAGE = 2


@runtime_checkable
class _SourceLoader(Protocol):
    """A loader that hands out a module's source (importlib.abc.InspectLoader's method; zipimporter has it too)."""

    def get_source(self, fullname: str) -> str | None: ...


def _summary(module: str) -> str:
    """The first line of the module's docstring, read without importing it."""
    spec = importlib.util.find_spec(f"llmops.{module}")
    loader = spec.loader if spec else None
    source = loader.get_source(spec.name) if spec and isinstance(loader, _SourceLoader) else None
    if not source:
        return ""
    import ast

    doc = ast.get_docstring(ast.parse(source)) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {_summary(module)}" for name, module in COMMANDS.items()]
    return (
        "usage: llmops <command> [options]   (llmops <command> --help for its options)\n\ncommands:\n"
        + "\n".join(lines)
        + "\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), end="")
        return 0 if args else EXIT_USAGE
    command, rest = args[0], args[1:]
    module = COMMANDS.get(command) or COMMANDS.get(command.replace("_", "-"))
    if module is None:
        from difflib import get_close_matches

        near = get_close_matches(command, COMMANDS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        print(f"llmops: unknown command {command!r}{hint}\n\n{usage()}", end="", file=sys.stderr)
        return EXIT_USAGE
    sys.argv[0] = f"llmops {command}"  # argparse's prog in each command's --help and errors
    try:
        return int(importlib.import_module(f"llmops.{module}").main(rest) or 0)
    except SystemExit as e:  # argparse's --help (0) and usage errors (2) inside the command
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


if __name__ == "__main__":
    sys.exit(main())
