"""``--deployment NAME [--adapter NAME]``: a fleet deployment's endpoint and component, read from stack outputs.

A fleet's endpoint stacks (constructs_lib/deployment/fleet_stacks.py) output ``<Deployment>EndpointName``,
``<Deployment>Inference
ComponentName`` (component mode) and ``<Deployment><Adapter>AdapterComponentName``, the names PascalCase; the
commands find them among the stacks named ``<app>-...`` (CloudFormation DescribeStacks, action
cloudformation:DescribeStacks; its Outputs hold OutputKey and OutputValue: botocore cloudformation service-2.json).
"""

from __future__ import annotations

import argparse
from typing import Any

from endpoint_client.outputs import APP_OUTPUT

DEFAULT_APP = "LlmEndpoint"  # cdk.json's stack_name default


class TargetError(ValueError):
    """The deployment or adapter is not found (the message says what is there instead)."""


def pascal(name: str) -> str:
    """As constructs_lib/deployment/fleet.py names outputs: ``chat-small`` -> ``ChatSmall``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("-"))


def add_fleet_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--deployment", help="a fleet deployment's name: its endpoint and component from the stacks")
    parser.add_argument("--adapter", help="with --deployment: invoke this LoRA adapter's component")
    parser.add_argument("--app", default=DEFAULT_APP, help=f"the app's stack_name (default: {DEFAULT_APP})")


def app_of(stack: dict[str, Any]) -> str | None:
    """The app a DescribeStacks stack belongs to, from its ``AppName`` output; None for a stack without one."""
    for output in stack.get("Outputs", []):
        if output.get("OutputKey") == APP_OUTPUT:
            return str(output.get("OutputValue"))
    return None


def is_app_stack(stack: dict[str, Any], app: str) -> bool:
    """Whether a DescribeStacks stack is one of ``app``'s: its ``AppName`` output says so; a stack deployed before
    that output existed is known by its name alone (``<app>`` or ``<app>-*``), as before."""
    owner = app_of(stack)
    if owner is not None:
        return owner == app
    name = str(stack.get("StackName", ""))
    return name == app or name.startswith(f"{app}-")


def fleet_outputs(cloudformation: Any, app: str) -> dict[str, str]:
    """Every output of the app's stacks (``is_app_stack``), by key."""
    outputs: dict[str, str] = {}
    for page in cloudformation.get_paginator("describe_stacks").paginate():
        for stack in page.get("Stacks", []):
            if is_app_stack(stack, app):
                for output in stack.get("Outputs", []):
                    outputs[output["OutputKey"]] = output["OutputValue"]
    return outputs


def resolve(outputs: dict[str, str], deployment: str, adapter: str | None) -> tuple[str, str | None]:
    """(endpoint name, inference component name or None) of ``deployment`` (and ``adapter``)."""
    prefix = pascal(deployment)
    endpoint = outputs.get(f"{prefix}EndpointName")
    if endpoint is None:
        known = sorted(k[: -len("EndpointName")] for k in outputs if k.endswith("EndpointName") and k != "EndpointName")
        raise TargetError(
            f"--deployment {deployment!r}: no deployed stack outputs {prefix}EndpointName; deployed: "
            f"{', '.join(known) or 'none (deploy the fleet first, or pass --app)'}"
        )
    if adapter is None:
        return endpoint, outputs.get(f"{prefix}InferenceComponentName")
    key = f"{prefix}{pascal(adapter)}AdapterComponentName"
    if key not in outputs:
        suffix = "AdapterComponentName"
        known = sorted(k[len(prefix) : -len(suffix)] for k in outputs if k.startswith(prefix) and k.endswith(suffix))
        raise TargetError(
            f"--adapter {adapter!r}: deployment {deployment!r} has no such adapter; its adapters: "
            f"{', '.join(known) or 'none'}"
        )
    return endpoint, outputs[key]


def apply_target(args: argparse.Namespace, cloudformation: Any = None) -> None:
    """Fill ``args.endpoint`` and ``args.inference_component`` from ``--deployment``; raise ``TargetError`` for a
    missing or conflicting choice. Without ``--deployment`` ``--endpoint`` is required, as before."""
    if args.deployment is None:
        if args.adapter is not None:
            raise TargetError("--adapter needs --deployment (the adapter belongs to a deployment)")
        if not args.endpoint:
            raise TargetError("give --endpoint (the stack's EndpointName output) or --deployment NAME")
        return
    if args.endpoint or args.inference_component:
        raise TargetError("--deployment finds the endpoint and component itself: not with --endpoint or --ic")
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        if cloudformation is None:
            import boto3

            cloudformation = boto3.client("cloudformation", region_name=args.region)
        outputs = fleet_outputs(cloudformation, args.app)
    except (BotoCoreError, ClientError) as e:
        raise TargetError(f"--deployment {args.deployment!r}: cannot read the stacks' outputs ({e})") from None
    args.endpoint, args.inference_component = resolve(outputs, args.deployment, args.adapter)
