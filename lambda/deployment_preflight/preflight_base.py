"""What every part of the ``Custom::DeploymentPreflight`` handler shares: its error, log line and limits."""

from __future__ import annotations

import logging
from typing import Any

import handler_kit
import handler_kit.resources

LOG = logging.getLogger()


# CloudFormation takes at most 4 KB for the whole response; the Provider framework adds its own lines
# (the log group) and the event's IDs around the reason.
REASON_LIMIT = 3000


DATA_LIMIT = 3000


THROTTLED = frozenset({"ThrottlingException", "TooManyRequestsException", "Throttling", "RequestLimitExceeded"})


DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})


NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})


class PreflightFailed(Exception):
    """The deployment cannot work; the message (under 4 KB) lists every problem and is CloudFormation's reason."""


def log(event: str, **fields: Any) -> None:
    """One ``key=value`` line (handler_kit.log_line)."""
    LOG.info(handler_kit.log_line(event, **fields))


shorten = handler_kit.shorten
