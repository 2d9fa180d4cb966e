"""Whether an S3 VPC endpoint's policy lets the model download through: its ``PolicyDocument`` (DescribeVpcEndpoints).

An endpoint policy controls which principals can use the endpoint for which actions and resources; without one the
default allows everything ({"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*"}), and for a gateway
endpoint the Principal must be "*" (VPC user guide / PrivateLink guide, "Control access to VPC endpoints using endpoint
policies"). Standard IAM evaluation applies: an explicit Deny wins, and what no Allow covers is denied (IAM user
guide, "Policy evaluation logic"). SageMaker reads an S3Prefix model with s3:ListBucket on the bucket and
s3:GetObject on the objects (SageMaker developer guide, "SageMaker AI Roles": CreateModel API execution role
permissions), and so does the preflight's and the staging job's reading of the prefix.

Evaluated conservatively and simply: Effect, Action/NotAction and Resource/NotResource with IAM's * and ? wildcards
(actions case-insensitive, resources case-sensitive). A statement with a Condition, a NotPrincipal, a principal other
than everyone, or a policy variable cannot be evaluated here: where it decides the outcome it makes a note, never a
refusal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GUIDE = "docs/guide/private-network.md"
YES, NO, MAYBE = "yes", "no", "maybe"
# A key no literal pattern names: a Resource pattern that matches it covers every object under the prefix.
PROBE = "\x00any-object\x00"


@dataclass(frozen=True)
class ModelObjects:
    """The model's bucket and prefix ("models/org--name/rev/"), as the download reads them."""

    bucket: str
    prefix: str
    partition: str = "aws"

    @property
    def bucket_arn(self) -> str:
        return f"arn:{self.partition}:s3:::{self.bucket}"

    def object_arn(self, key: str) -> str:
        return f"{self.bucket_arn}/{self.prefix}{key}"


def _glob(pattern: str, value: str, *, ignore_case: bool) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def _everyone(principal: Any) -> bool:
    if principal == "*":
        return True
    return isinstance(principal, Mapping) and set(principal) == {"AWS"} and _strings(principal["AWS"]) == ["*"]


def _element(statement: Mapping[str, Any], name: str, value: str, *, ignore_case: bool) -> str:
    """YES/NO/MAYBE for ``Action``/``NotAction`` (or Resource) against one value."""
    for key, negated in ((name, False), (f"Not{name}", True)):
        if key not in statement:
            continue
        patterns = _strings(statement[key])
        if patterns is None or any("${" in p for p in patterns):
            return MAYBE
        matched = any(_glob(p, value, ignore_case=ignore_case) for p in patterns)
        return YES if matched != negated else NO
    return MAYBE  # neither element: not a valid statement


def applies(statement: Mapping[str, Any], action: str, resource: str) -> str:
    """Whether the statement applies to this request from the SageMaker role: YES, NO or MAYBE."""
    verdicts = [
        _element(statement, "Action", action, ignore_case=True),
        _element(statement, "Resource", resource, ignore_case=False),
    ]
    if NO in verdicts:
        return NO
    if statement.get("Condition") or "NotPrincipal" in statement or not _everyone(statement.get("Principal", "*")):
        return MAYBE
    return MAYBE if MAYBE in verdicts else YES


def _statements(document: Any) -> list[Mapping[str, Any]] | None:
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return None
    if not isinstance(document, Mapping):
        return None
    statements = document.get("Statement")
    statements = [statements] if isinstance(statements, Mapping) else statements
    if not isinstance(statements, list) or not all(isinstance(s, Mapping) for s in statements):
        return None
    return statements


def _name(index: int, statement: Mapping[str, Any]) -> str:
    sid = statement.get("Sid")
    return f"statement {index + 1}" + (f" (Sid {sid!r})" if sid else "")


def policy_findings(endpoint: Mapping[str, Any], model: ModelObjects) -> tuple[list[str], list[str]]:
    """(problems, notes) of ``endpoint``'s policy for reading ``model``."""
    endpoint_id = endpoint.get("VpcEndpointId", "the S3 endpoint")
    if not endpoint.get("PolicyDocument"):
        return [], []  # the default policy allows everything
    statements = _statements(endpoint["PolicyDocument"])
    if statements is None:
        return [], [f"the policy of VPC endpoint {endpoint_id} could not be read; it was not checked"]
    problems, notes = [], []
    checks = (
        ("s3:GetObject", model.object_arn(PROBE), (model.object_arn(PROBE), model.object_arn("config.json"))),
        ("s3:ListBucket", model.bucket_arn, (model.bucket_arn,)),
    )
    for action, covering, denied_on in checks:
        shown = covering.replace(PROBE, "*")
        verdict = {
            effect: {
                kind: [
                    _name(i, s)
                    for i, s in enumerate(statements)
                    if s.get("Effect") == effect and any(applies(s, action, r) == kind for r in targets)
                ]
                for kind in (YES, MAYBE)
            }
            for effect, targets in (("Deny", denied_on), ("Allow", (covering,)))
        }
        deny, allow = verdict["Deny"], verdict["Allow"]
        if deny[YES]:
            problems.append(
                f"VPC endpoint {endpoint_id}'s policy denies {action} on {shown}: {', '.join(deny[YES])}. The model "
                f"download through the endpoint would fail; allow it for the model bucket ({GUIDE})"
            )
            continue
        if deny[MAYBE]:
            notes.append(
                f"VPC endpoint {endpoint_id}'s policy may deny {action} on {shown} ({', '.join(deny[MAYBE])}: a "
                "condition or principal the preflight cannot evaluate)"
            )
        if allow[YES]:
            continue
        partial = [
            _name(i, s)
            for i, s in enumerate(statements)
            if s.get("Effect") == "Allow" and applies(s, action, model.object_arn("config.json")) != NO
        ]
        if allow[MAYBE] or (action == "s3:GetObject" and partial):
            notes.append(
                f"VPC endpoint {endpoint_id}'s policy allows {action} on {shown} only under "
                f"{', '.join(dict.fromkeys(allow[MAYBE] + partial))} (a condition, principal or resource the "
                "preflight cannot evaluate for every object)"
            )
            continue
        problems.append(
            f"VPC endpoint {endpoint_id}'s policy has no statement that allows {action} on {shown} ("
            f"{len(statements)} statement(s)), so the model download through the endpoint would be denied. Add an "
            f"Allow for it ({GUIDE})"
        )
    return problems, notes
