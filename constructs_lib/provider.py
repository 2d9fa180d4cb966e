"""``HandlerProvider``: a ``custom_resources.Provider`` around our own Python handler, one per stack.

Every custom resource in this project is served by one of these: ``lambda/<handler>/index.py`` exports
``on_event`` (and ``is_complete`` for asynchronous work), bundled with the shared packages it imports.
The functions get their own role (no managed policies) and a log group with a retention, so that what
a failed deployment logged is still there when someone looks, and goes away eventually.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from constructs import Construct

from handler_kit.resources import ResourceProperties

from .nag import acknowledge, acknowledge_wildcard
from .runtime_code import handler_code

RUNTIME = lambda_.Runtime.PYTHON_3_14


def python_function(
    scope: Construct,
    id: str,
    *,
    code: lambda_.Code,
    entry: str,
    role: iam.IRole,
    log_group: logs.ILogGroup,
    timeout: cdk.Duration,
    memory_size: int = 256,
    environment: Mapping[str, str] | None = None,
) -> lambda_.Function:
    """A function running ``entry`` of ``code`` (see :func:`handler_code`), with its own role and log group."""
    return lambda_.Function(
        scope,
        id,
        runtime=RUNTIME,
        code=code,
        handler=f"index.{entry}",
        role=role,
        log_group=log_group,
        timeout=timeout,
        memory_size=memory_size,
        environment=dict(environment or {}),
        architecture=lambda_.Architecture.ARM_64,
    )


class HandlerProvider(Construct):
    """The provider of one kind of custom resource; find it again with :meth:`of`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        handler: str,
        packages: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
        timeout: cdk.Duration | None = None,
        is_complete: bool = False,
        query_interval: cdk.Duration | None = None,
        total_timeout: cdk.Duration | None = None,
        memory_size: int = 256,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        """
        :param handler: folder name under ``lambda/``.
        :param packages: shared packages bundled beside ``index.py``. Default: none.
        :param environment: the handler's settings. Default: none.
        :param timeout: one handler invocation. Default: 2 minutes.
        :param is_complete: also run ``index.is_complete`` until it reports completion. Default: no.
        :param query_interval: between ``is_complete`` calls. Default: 30 seconds.
        :param total_timeout: how long ``is_complete`` may keep saying "not yet". Default: 50 minutes
            (CloudFormation gives up on a custom resource after one hour whatever this says).
        """
        super().__init__(scope, id)
        # No aws:SourceArn/aws:SourceAccount here: Lambda documents an execution role's trust as the service principal
        # alone ("Defining Lambda function permissions with an execution role") and aws:SourceArn for a function's
        # resource-based policy only ("Using source function ARN to control function access behavior").
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Runs the {handler} custom resource handler",
        )
        # Every handler tells a rollback's Update (old properties, UPDATE_ROLLBACK_IN_PROGRESS) from a user's
        # by the stack's status (aws-cdk #17040): its own stack only.
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[cdk.Stack.of(self).stack_id])
        )
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention, removal_policy=cdk.RemovalPolicy.DESTROY)
        self.log_group.grant_write(self.role)
        settings = {
            "code": handler_code(handler, packages=packages),
            "role": self.role,
            "log_group": self.log_group,
            "timeout": timeout or cdk.Duration.minutes(2),
            "memory_size": memory_size,
            "environment": environment,
        }
        self.on_event_function = python_function(self, "OnEvent", entry="on_event", **settings)
        self.is_complete_function = (
            python_function(self, "IsComplete", entry="is_complete", **settings) if is_complete else None
        )
        self.waiter_log_group: logs.LogGroup | None = None
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.on_event_function,
            is_complete_handler=self.is_complete_function,
            query_interval=(query_interval or cdk.Duration.seconds(30)) if is_complete else None,
            total_timeout=(total_timeout or cdk.Duration.minutes(50)) if is_complete else None,
            log_group=self.log_group,
            disable_waiter_state_machine_logging=False if is_complete else None,
            waiter_state_machine_log_options=(
                cr.LogOptions(
                    destination=self._waiter_log_group(log_retention),
                    level=sfn.LogLevel.ALL,
                    include_execution_data=False,
                )
                if is_complete
                else None
            ),
        )
        if is_complete:
            self._limit_waiter_trust()
        self._acknowledge_framework()

    def _limit_waiter_trust(self) -> None:
        """The Provider's waiter role trusts Step Functions for this account's state machines in this region only.

        aws-cdk-lib creates the role with the bare service principal; its trust statement gets the conditions
        Step Functions documents ("Creating an IAM role for your state machine": Prevent cross-service confused
        deputy issue). ``stateMachine:*``, not the waiter's own ARN, which would depend on the role itself.
        """
        stack = cdk.Stack.of(self)
        waiter_role = self.provider.node.find_child("waiter-state-machine").node.find_child("Role")
        machines = stack.format_arn(
            service="states", resource="stateMachine", resource_name="*", arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME
        )
        waiter_role.node.default_child.add_property_override(
            "AssumeRolePolicyDocument.Statement.0.Condition",
            {"ArnLike": {"aws:SourceArn": machines}, "StringEquals": {"aws:SourceAccount": stack.account}},
        )

    def _waiter_log_group(self, retention: logs.RetentionDays) -> logs.LogGroup:
        """The waiter state machine's own group, under ``/aws/vendedlogs/states/``.

        Step Functions adds every log group it delivers to into the account's CloudWatch Logs resource
        policy, which is limited to 5,120 characters; groups under ``/aws/vendedlogs/`` need no entry
        (Step Functions developer guide, "Avoiding Amazon CloudWatch Logs resource policy size
        restrictions"). The stack's name and this construct's path make the name unique in the region.
        """
        self.waiter_log_group = logs.LogGroup(
            self,
            "WaiterLogs",
            log_group_name=f"/aws/vendedlogs/states/{cdk.Aws.STACK_NAME}-{cdk.Names.unique_id(self)}",
            retention=retention,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        return self.waiter_log_group

    @classmethod
    def of(cls, scope: Construct, id: str, **props) -> HandlerProvider:
        """The stack's provider called ``id``, created with ``props`` the first time."""
        stack = cdk.Stack.of(scope)
        existing = stack.node.try_find_child(id)
        if isinstance(existing, cls):
            return existing
        return cls(stack, id, **props)

    @property
    def service_token(self) -> str:
        return self.provider.service_token

    def custom_resource(
        self, scope: Construct, properties: ResourceProperties, *, service_timeout: cdk.Duration, id: str = "Resource"
    ) -> cdk.CustomResource:
        """A resource this provider serves, its type and properties written by the class its handler reads them with
        (handler_kit/resources.py: names and defaults once)."""
        return cdk.CustomResource(
            scope,
            id,
            service_token=self.service_token,
            resource_type=properties.RESOURCE,
            service_timeout=service_timeout,
            properties=properties.to_properties(),
        )

    def add_environment(self, key: str, value: str) -> None:
        for function in (self.on_event_function, self.is_complete_function):
            if function is not None:
                function.add_environment(key, value)

    def _acknowledge_framework(self) -> None:
        framework = self.provider
        acknowledge(
            framework,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's Provider framework functions are created by aws-cdk-lib with the basic execution policy; they "
            "only relay CloudFormation events to our handler and write their own logs.",
        )
        internal = [framework.node.try_find_child(name) for name in ("framework-isComplete", "framework-onTimeout")]
        for function in [self.on_event_function, self.is_complete_function, *internal]:
            if function is not None:
                acknowledge_wildcard(
                    framework,
                    resource=f"{function.function_arn}:*",
                    reason="The Provider framework invokes our handler function and its versions (the ':*' "
                    "suffix); it can invoke nothing else.",
                )
        acknowledge(
            framework,
            "AwsSolutions-L1",
            "The Provider framework's own functions use the Node.js runtime chosen by aws-cdk-lib; they are "
            "upgraded with aws-cdk-lib, not by this app.",
        )
        if self.is_complete_function is not None:
            acknowledge_wildcard(
                framework,
                resource="*",
                reason="Step Functions log delivery (logs:CreateLogDelivery, PutResourcePolicy, DescribeLogGroups "
                "and the like) supports no resource-level permissions; the waiter state machine needs them to "
                "log to its /aws/vendedlogs/states/ log group.",
            )
            acknowledge(
                framework,
                "AwsSolutions-SF2",
                "The Provider's waiter state machine only polls is_complete on a timer; its every state change is "
                "logged (level ALL) to its /aws/vendedlogs/states/ log group, so X-Ray traces would add cost and no "
                "insight.",
            )
