"""Counting the hostile inputs a module tries and refuses, printed once at the end of the module (``-s``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest


class Tally(Counter):
    """``"<area> tried"`` / ``"<area> refused"`` counts (or other outcomes a module names itself)."""

    def record(self, area: str, refused: bool) -> None:
        self[f"{area} tried"] += 1
        self[f"{area} refused"] += refused

    def line(self) -> str:
        return "hostile inputs: " + ", ".join(f"{k}={v}" for k, v in sorted(self.items()))


def report_fixture(tally: Tally):
    """A module-scoped autouse fixture that prints ``tally`` when the module's tests are done."""

    @pytest.fixture(scope="module", autouse=True)
    def _report_tally() -> Iterator[None]:
        yield
        print("\n" + tally.line())

    return _report_tally
