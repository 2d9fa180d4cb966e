"""What every part of the ``Custom::StagedCheckpoint`` handler shares: its error, log line, reason limits, settings."""

from __future__ import annotations

import logging
from typing import Any

import handler_kit
from handler_kit.resources import StagedCheckpointProperties

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)


REASON_LIMIT = 1000  # bytes; CloudFormation shows at most 4 KB and a wait-condition reason should be short


# A failure's message, at most: CloudFormation takes a 4,096-byte response, and the Provider framework wraps
# the message in "Error: ...", the log group and its stack frames (about 1 KB with the event's IDs), and
# sends on_event's Data with a failure in is_complete (aws-cdk-lib provider-framework runtime: framework.js,
# cfn-response.js). So 3,000 bytes, less the Data that travels with it.
FAILURE_LIMIT = 3000


class StagingError(Exception):
    """A reason a person can act on; it becomes the CloudFormation failure message."""


def arn_region(arn: str | None) -> str | None:
    """The region an ARN names (a token secret may live in another region than the stack)."""
    parts = (arn or "").split(":")
    return parts[3] if parts[0] == "arn" and len(parts) > 3 and parts[3] else None


def short(text: str, limit: int = REASON_LIMIT) -> str:
    return handler_kit.shorten(text, limit)


def log(event: str, **fields: Any) -> None:
    LOG.info(handler_kit.log_line(event, **fields))


# The resource's properties, typed, with their defaults: the class the construct writes them with.
Settings = StagedCheckpointProperties
