"""place_functions_in_vpc: every AWS::Lambda::Function in the scope (ours and aws-cdk-lib's) gets the VpcConfig.

An SCP may require lambda:VpcIds / lambda:SubnetIds / lambda:SecurityGroupIds on CreateFunction (Service
Authorization Reference, AWS Lambda), so one function left outside blocks the whole stack: the assertions go over
all functions of the template, whatever adds them and whenever.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from constructs_lib import FUNCTION_ENDPOINTS, place_functions_in_vpc
from constructs_lib.network import LAMBDA_DESCRIBE_ACTIONS, LAMBDA_INTERFACE_ACTIONS
from constructs_lib.provider import HandlerProvider

SUBNETS = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
GROUP = "sg-0123456789abcdef0"


def _stack(*, private: bool, group: bool = True, late_function: bool = True) -> cdk.Stack:
    stack = cdk.Stack(cdk.App(), "S")
    if private:
        subnets = [ec2.Subnet.from_subnet_id(stack, f"Subnet{i}", s) for i, s in enumerate(SUBNETS)]
        groups = [ec2.SecurityGroup.from_security_group_id(stack, "Group", GROUP, mutable=False)] if group else None
        vpc = None if group else ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["a"])
        place_functions_in_vpc(stack, vpc=vpc, vpc_subnets=ec2.SubnetSelection(subnets=subnets), security_groups=groups)
    # After the call: an asynchronous provider (framework onEvent, isComplete, onTimeout) and a LogRetention.
    HandlerProvider(stack, "Provider", handler="deployment_preflight", is_complete=True)
    logs.LogRetention(stack, "Retention", log_group_name="/aws/x", retention=logs.RetentionDays.ONE_DAY)
    if late_function:
        lambda_.Function(
            stack,
            "Late",
            runtime=lambda_.Runtime.PYTHON_3_13,
            handler="index.h",
            code=lambda_.Code.from_inline("def h(e, c): pass"),
        )
    return stack


def _functions(template: Template) -> dict[str, dict]:
    return template.find_resources("AWS::Lambda::Function")


@pytest.mark.integration  # several synths (10-16 s): make test-integration, which CI runs
def test_every_function_gets_the_subnets_and_the_group():
    template = Template.from_stack(_stack(private=True))
    functions = _functions(template)
    assert len(functions) == 7  # OnEvent, IsComplete, framework onEvent/isComplete/onTimeout, LogRetention, Late
    missing = [name for name, f in functions.items() if "VpcConfig" not in f["Properties"]]
    assert not missing, f"functions outside the VPC: {missing}"
    for name, function in functions.items():
        assert function["Properties"]["VpcConfig"] == {"SubnetIds": SUBNETS, "SecurityGroupIds": [GROUP]}, name


def test_each_role_gets_the_lambda_eni_actions_in_a_policy_the_function_waits_for():
    template = Template.from_stack(_stack(private=True)).to_json()
    resources = template["Resources"]
    for name, function in resources.items():
        if function["Type"] != "AWS::Lambda::Function":
            continue
        role = function["Properties"]["Role"]["Fn::GetAtt"][0]
        (policy,) = [
            p
            for p, r in resources.items()
            if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"] and "VpcAccess" in p
        ]
        assert policy in function["DependsOn"], name
        statements = resources[policy]["Properties"]["PolicyDocument"]["Statement"]
        actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
        assert actions == {*LAMBDA_INTERFACE_ACTIONS, *LAMBDA_DESCRIBE_ACTIONS}
        create = next(s for s in statements if s["Action"] == "ec2:CreateNetworkInterface")
        assert any(GROUP in str(r) for r in create["Resource"]) and any(
            SUBNETS[0] in str(r) for r in create["Resource"]
        )
        # No AWS managed policy: the managed AWSLambdaVPCAccessExecutionRole puts everything on "*".
        assert "AWSLambdaVPCAccessExecutionRole" not in str(resources[role])


def test_without_groups_one_is_created_with_https_out_only():
    template = Template.from_stack(_stack(private=True, group=False))
    (group_id,) = template.find_resources("AWS::EC2::SecurityGroup")
    for function in _functions(template).values():
        assert function["Properties"]["VpcConfig"]["SecurityGroupIds"] == [{"Fn::GetAtt": [group_id, "GroupId"]}]
    template.has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {
            "SecurityGroupEgress": [
                {
                    "CidrIp": "0.0.0.0/0",
                    "FromPort": 443,
                    "ToPort": 443,
                    "IpProtocol": "tcp",
                    "Description": "HTTPS out on 443",
                }
            ]
        },
    )


def test_a_public_stack_is_unchanged():
    for function in _functions(Template.from_stack(_stack(private=False))).values():
        assert "VpcConfig" not in function["Properties"]


def test_no_network_given_changes_nothing():
    stack = cdk.Stack(cdk.App(), "S")
    assert place_functions_in_vpc(stack) is None
    assert not cdk.Aspects.of(stack).all


def test_groups_without_subnets_are_refused():
    stack = cdk.Stack(cdk.App(), "S")
    group = ec2.SecurityGroup.from_security_group_id(stack, "Group", GROUP, mutable=False)
    with pytest.raises(ValueError, match="needs the subnets"):
        place_functions_in_vpc(stack, security_groups=[group])


def test_the_endpoint_list_names_interface_services():
    assert (
        FUNCTION_ENDPOINTS["sagemaker"] == "sagemaker.api" and FUNCTION_ENDPOINTS["service-quotas"] == "servicequotas"
    )
