"""Acknowledging cdk-nag findings beside the resource they concern, each with its reason.

cdk-nag 3 reports through ``cdk.Validations`` and matches acknowledgements by exact finding id.
An IAM5 finding id embeds the wildcard resource as cdk-nag renders it (``<Logical.Arn>`` for
GetAtt, ``<Logical>`` for Ref), so the id is built from the same CloudFormation expression.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import IConstruct


def _render(expr: Any) -> str:
    if isinstance(expr, str):
        return expr
    if isinstance(expr, dict) and len(expr) == 1:
        ((fn, arg),) = expr.items()
        if fn == "Ref":
            return f"<{arg}>"
        if fn == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if fn == "Fn::Join":
            sep, parts = arg
            return sep.join(_render(p) for p in parts)
    raise ValueError(f"cannot render {expr!r} as a cdk-nag finding id")


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge AwsSolutions ``rule`` (e.g. ``AwsSolutions-S1``) on ``scope`` with ``reason``."""
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions::{rule}", reason=reason))


def acknowledge_wildcard(
    scope: IConstruct, *, action: str | None = None, resource: str | None = None, reason: str
) -> None:
    """Acknowledge an IAM5 finding for one wildcard action or resource of ``scope``'s policy."""
    if action is not None:
        detail = f"Action::{action}"
    else:
        detail = f"Resource::{_render(cdk.Stack.of(scope).resolve(resource))}"
    acknowledge(scope, f"AwsSolutions-IAM5[{detail}]", reason)
