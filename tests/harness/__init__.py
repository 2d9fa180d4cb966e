"""A small CloudFormation + CDK Provider framework for driving custom resource handlers through their failure paths.

``CloudFormation(handler).create(props)`` plays one request the way the Provider framework and
CloudFormation would (``on_event``, ``is_complete`` polling, physical IDs, timeouts, response size) on a
fake :class:`Clock`; :mod:`tests.harness.aws` injects faults into the handler's own boto3 clients.
"""

from .aws import (
    AwsError,
    FakeService,
    Faults,
    Job,
    ProcessingJobs,
    ServiceQuotas,
    Stacks,
    completes_after,
    fails_after,
    stuck,
)
from .cloudformation import (
    CREATE_FAILED_MARKER,
    RESPONSE_LIMIT,
    Clock,
    CloudFormation,
    HandlerUnderTest,
    LambdaContext,
    Response,
    Timeouts,
)

__all__ = [
    "CREATE_FAILED_MARKER",
    "RESPONSE_LIMIT",
    "AwsError",
    "Clock",
    "CloudFormation",
    "FakeService",
    "Faults",
    "HandlerUnderTest",
    "Job",
    "LambdaContext",
    "ProcessingJobs",
    "Response",
    "ServiceQuotas",
    "Stacks",
    "Timeouts",
    "completes_after",
    "fails_after",
    "stuck",
]
