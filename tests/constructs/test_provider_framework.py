"""``HandlerProvider``: what every custom resource's Provider deploys with (issue 11)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk.assertions import Match, Template

from constructs_lib.provider import HandlerProvider


def _template(*, is_complete: bool) -> Template:
    app = cdk.App()
    stack = cdk.Stack(app, "Providers")
    HandlerProvider(
        stack, "Waiting", handler="endpoint_smoke_test", packages=["endpoint_client"], is_complete=is_complete
    )
    return Template.from_stack(stack)


def test_the_waiter_logs_under_vendedlogs_states():
    """Step Functions puts a group outside /aws/vendedlogs/ into the account's 5,120-character log policy."""
    t = _template(is_complete=True)
    (machine,) = t.find_resources("AWS::StepFunctions::StateMachine").values()
    destinations = machine["Properties"]["LoggingConfiguration"]["Destinations"]
    (group_id,) = [d["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0] for d in destinations]
    group = t.to_json()["Resources"][group_id]
    name = group["Properties"]["LogGroupName"]["Fn::Join"][1]
    assert name[0].startswith("/aws/vendedlogs/states/") and name[1] == {"Ref": "AWS::StackName"}
    assert group["Properties"]["RetentionInDays"] == 30 and group["DeletionPolicy"] == "Delete"
    # The functions keep their own group (generated name): Lambda needs no resource policy.
    functions = t.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": Match.string_like_regexp("^index\\.")}}
    )
    for function in functions.values():
        assert function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"] != group_id


def test_every_handler_may_read_its_own_stack_status_only():
    t = _template(is_complete=False)
    t.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Action": "cloudformation:DescribeStacks",
                            "Effect": "Allow",
                            "Resource": {"Ref": "AWS::StackId"},
                        }
                    ]
                )
            }
        },
    )
    t.resource_count_is("AWS::StepFunctions::StateMachine", 0)
