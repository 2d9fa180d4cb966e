"""One format for every refusal at synth: who refuses, then each problem (key=value, what is allowed).

``Subject: problem`` when there is one, else ``Subject: N problems:`` and one ``  - problem`` line each. The
subject is ``context`` for the app's context keys and ``<Construct> <node path>`` for a construct; each problem
names the key or prop, its value (never a secret's), and what is allowed.
``constructs_lib.deployment.config.ConfigError`` and every
construct raise this; the handlers' deploy-time reasons use the same shape on one line (handler_kit.refusal,
which renders both), since CloudFormation shows a reason as one line of at most 4 KB.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from handler_kit import refusal

if TYPE_CHECKING:
    from constructs import Node


class Refusal(ValueError):
    """Synth stops: ``subject`` cannot be built as given, for every reason in ``problems``."""

    def __init__(self, subject: str, problems: Sequence[str]) -> None:
        self.subject = subject
        self.problems = [str(p) for p in problems]
        super().__init__(render(subject, self.problems))


def render(subject: str, problems: Sequence[str]) -> str:
    return refusal(subject, problems, one_line=False)


def refuse(subject: str, problems: Sequence[str]) -> None:
    """Raise a ``Refusal`` when there is any problem; return otherwise."""
    if problems:
        raise Refusal(subject, problems)


class HasNode(Protocol):
    """What names a construct in a refusal: its construct node (``constructs.Construct`` has one)."""

    @property
    def node(self) -> Node: ...


def construct_subject(kind: str, construct: HasNode) -> str:
    """``GpuEndpoint LlmEndpoint/Endpoint``: the construct's class and its node path."""
    return f"{kind} {construct.node.path}"
