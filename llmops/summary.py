"""Print what ``cdk synth`` produced: one block per stack with its endpoint settings and what it costs.

python -m llmops.summary cdk.out [--region us-west-2]

The cost is on-demand SageMaker real-time inference: instances x the hourly price of the type in the region
(``llmops.price_list``: the AWS Price List API when credentials allow, cached, else
``constructs_lib/data/sagemaker_prices.json``; ``?`` where no sourced price is known), per hour and per month
of always-on use. Default region: $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1 (the template itself is
region-agnostic).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from constructs_lib.prices import hours_per_month
from llmops.fleet_summary import fleet_total_lines
from llmops.price_list import price

DEFAULT_REGION = "us-east-1"
# How long a cold start takes, for the scale-to-zero note (PRODUCT.md section 9): an instance launch plus the
# model load; requests fail with NoCapacityInvocationFailures until it is in service.
COLD_START = (
    "a cold start launches an instance and loads the model: minutes (AWS reports 164-346 s P50 scale-out on "
    "ml.g5.2xlarge; 303 s create-to-InService for a 21 GB model), and requests fail until it is in service"
)


def update_policy(config: dict) -> str:
    """One line for a DeploymentConfig: how traffic or copies move and how many alarms roll it back."""
    alarms = len(config.get("AutoRollbackConfiguration", {}).get("Alarms", []))
    if "BlueGreenUpdatePolicy" in config:
        traffic = config["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"]
        step = traffic.get("CanarySize") or traffic.get("LinearStepSize")
        kind = f"blue/green {traffic['Type']}" + (f" by {step['Value']} instance(s)" if step else "")
        wait = traffic.get("WaitIntervalInSeconds")
    else:
        rolling = config.get("RollingUpdatePolicy", {})
        kind = f"rolling by {rolling.get('MaximumBatchSize', {}).get('Value')} copies"
        wait = rolling.get("WaitIntervalInSeconds")
    return f"{kind}, bake {wait} s, rolled back by {alarms} alarm(s)"


def _count(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def cost_lines(variant: dict, region: str) -> list[str]:
    """The variant's on-demand cost: always-on instances, or idle and full scale with managed scaling."""
    instance_type = variant.get("InstanceType")
    if not isinstance(instance_type, str):
        return [f"  cost: unknown (instance type {instance_type!r} is not a literal in the template)"]
    cost = price(instance_type, region)
    hours = hours_per_month()
    source = f" (price of {cost.citation})" if cost.known else " (no sourced price for this type and region)"
    scaling = variant.get("ManagedInstanceScaling") or {}
    low, high = _count(scaling.get("MinInstanceCount")), _count(scaling.get("MaxInstanceCount"))
    if scaling.get("Status") == "ENABLED" and low is not None and high is not None:
        lines = [
            f"  cost in {region}: USD {cost.hourly_text(low)}/h idle ({low} x {instance_type}), "
            f"USD {cost.hourly_text(high)}/h at full scale ({high} x); always-on minimum "
            f"USD {cost.monthly_text(low)}/month ({hours} h){source}"
        ]
        if low == 0:
            lines.append(f"  scale-to-zero: no instance (USD 0/h) while idle; {COLD_START}")
        return lines
    count = _count(variant.get("InitialInstanceCount")) or 1
    return [
        f"  cost in {region}: {count} x {instance_type} = USD {cost.hourly_text(count)}/h, "
        f"USD {cost.monthly_text(count)}/month ({hours} h always on){source}"
    ]


SHA = re.compile(r"[0-9a-f]{40}")


def checkpoint_lines(props: dict) -> list[str]:
    """The staged model: repository, revision (and whether it is pinned), the token secret by name only."""
    revision = str(props.get("Revision", "main"))
    pinned = (
        "pinned" if SHA.fullmatch(revision) else "not pinned: resolved to a commit at deploy, see output ModelRevision"
    )
    secret = props.get("TokenSecretArn") or ""
    secret_name = secret.rsplit(":", 1)[-1] if isinstance(secret, str) and secret else "none (a public repository)"
    return [f"  model: {props.get('RepoId')} at {revision} ({pinned})", f"  token secret: {secret_name}"]


def _target(value: object) -> str | None:
    """The logical ID a ``Ref`` or ``Fn::GetAtt`` names."""
    if isinstance(value, dict) and "Ref" in value:
        return str(value["Ref"])
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return str(value["Fn::GetAtt"][0])
    return None


def _config_of_model(resources: dict, model_id: str) -> tuple[bool, dict | None]:
    """Whether an inference component serves the Model, and the properties of the endpoint config it runs on
    (Model <- component -> endpoint -> config; None when that chain cannot be followed)."""
    for res in resources.values():
        props = res.get("Properties", {})
        if res["Type"] != "AWS::SageMaker::InferenceComponent":
            continue
        if _target(props.get("Specification", {}).get("ModelName")) != model_id:
            continue
        endpoint = resources.get(_target(props.get("EndpointName")) or "", {})
        config = resources.get(_target(endpoint.get("Properties", {}).get("EndpointConfigName")) or "", {})
        return True, (config.get("Properties") if config else None)
    return False, None


def describe(template: dict, region: str = DEFAULT_REGION) -> list[str]:
    resources = template.get("Resources", {})
    counts = Counter(r["Type"] for r in resources.values())
    lines = [
        f"  {len(resources)} resources: " + ", ".join(f"{t.split('::', 1)[1]} x{c}" for t, c in sorted(counts.items()))
    ]
    # With inference components, containers are isolated only when the endpoint config says so as well.
    component_mode = counts["AWS::SageMaker::InferenceComponent"] > 0
    lines.append(f"  mode: {'inference-component' if component_mode else 'standard'}")
    for res in resources.values():
        if res["Type"] == "Custom::StagedCheckpoint":
            lines += checkpoint_lines(res.get("Properties", {}))
    endpoint_isolated = all(
        r.get("Properties", {}).get("EnableNetworkIsolation") is True
        for r in resources.values()
        if r["Type"] == "AWS::SageMaker::EndpointConfig"
    )
    for logical_id, res in resources.items():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::SageMaker::Model":
            container = props.get("PrimaryContainer", {})
            image = container.get("Image")
            if isinstance(image, dict) and "Fn::Join" in image:
                image = "<DLC registry>/" + str(image["Fn::Join"][1][-1]).split("/", 1)[-1]
            elif isinstance(image, dict) and "Fn::Sub" in image:  # a DockerImageAsset in the CDK asset repository
                image = "<CDK asset repository>:" + str(image["Fn::Sub"]).rsplit(":", 1)[-1] + " (built at deploy)"
            lines.append(f"  image: {image}")
            served_by_component, config = _config_of_model(resources, logical_id)
            if not served_by_component:  # a standard endpoint's Model: its own flag isolates it
                endpoint_flag = True
            elif config is None:  # a component whose config cannot be followed: every config must isolate
                endpoint_flag = endpoint_isolated
            else:
                endpoint_flag = config.get("EnableNetworkIsolation") is True
            isolated = props.get("EnableNetworkIsolation") is True and endpoint_flag
            lines.append(f"  network isolation: {isolated}")
            for key, value in sorted(container.get("Environment", {}).items()):
                lines.append(f"  env {key}={value!r}")
        if res["Type"] in ("AWS::SageMaker::Endpoint", "AWS::SageMaker::InferenceComponent") and props.get(
            "DeploymentConfig"
        ):
            lines.append(f"  update policy: {update_policy(props['DeploymentConfig'])}")
        if res["Type"] == "AWS::SageMaker::EndpointConfig":
            for variant in props.get("ProductionVariants", []):
                lines.append(
                    f"  variant {variant.get('VariantName')}: {variant.get('InitialInstanceCount')} x "
                    f"{variant.get('InstanceType')}, AMI {variant.get('InferenceAmiVersion', 'SageMaker default')}"
                )
                lines += cost_lines(variant, region)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmops summary", description=__doc__.strip().splitlines()[0])
    parser.add_argument("out", nargs="?", default="cdk.out", help="the cloud assembly folder (default: cdk.out)")
    parser.add_argument(
        "--region",
        default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
        help=f"region whose prices to show (default: $AWS_REGION, else {DEFAULT_REGION})",
    )
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:  # argparse's usage error (2) or --help (0), as a return code like every command
        return int(e.code or 0)
    region, out = args.region, Path(args.out)
    templates = sorted(out.glob("*.template.json"))
    if not templates:
        print(f"no templates in {out}", file=sys.stderr)
        return 1
    report = out / "validation-report.json"
    if report.exists():
        for plugin in json.loads(report.read_text()).get("pluginReports", []):
            print(
                f"{plugin['pluginName']}: {plugin['conclusion']}, {len(plugin['violations'])} findings, "
                f"{len(plugin.get('suppressedViolations', []))} acknowledged with reasons ({report})"
            )
    for path in templates:
        print(path)
        print("\n".join(describe(json.loads(path.read_text()), region)))
    for line in fleet_total_lines([json.loads(p.read_text()) for p in templates], region):  # several endpoints
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
