"""What the doc generators share: a generated block between two markers, and a ``--check`` that writes nothing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def between(text: str, start: str, end: str, body: str, where: str) -> str:
    """``text`` with what stands between ``start`` and ``end`` replaced by ``body`` (markers kept)."""
    if start not in text or end not in text:
        raise ValueError(f"{where} has no {start!r} ... {end!r} markers")
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{body}{end}{tail}"


def regenerate(
    argv: Sequence[str] | None, description: str, files: Sequence[tuple[Path, Callable[[str], str]]], source: str
) -> int:
    """Rewrite each file as its renderer wants it; with ``--check``, write nothing and exit 1 on any drift."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="exit 1 when a file differs; write nothing")
    args = parser.parse_args(argv)
    drifted = []
    for path, render in files:
        current = path.read_text()
        wanted = render(current)
        if wanted != current:
            drifted.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(wanted)
    if drifted and args.check:
        print(f"out of date with {source}: {', '.join(drifted)} (regenerate it)", file=sys.stderr)
        return 1
    return 0
