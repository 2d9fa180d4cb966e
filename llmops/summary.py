"""Print what ``cdk synth`` produced: per stack, what synth checked, then one block per model and what it costs.

python -m llmops.summary cdk.out [--region us-west-2]

The cost is on-demand SageMaker real-time inference: instances x the hourly price of the type in the region
(``llmops.price_list``: the AWS Price List API when credentials allow, cached, else
``constructs_lib/data/sagemaker_prices.json``), per hour and per month
of always-on use. A catalog type with no known price names the command that reads it from the AWS Price List
(``constructs_lib.prices.lookup_hint``); ``?`` only for a type outside the catalog. Default region:
$AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1 (the template itself is region-agnostic).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import safejson
from constructs_lib.rules import hours_per_month, known_instance_types, lookup_hint
from llmops.facts import METADATA_KEY
from llmops.fleet_summary import fleet_total_lines, variant_types
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
        size = rolling.get("MaximumBatchSize", {})
        units = {"INSTANCE_COUNT": " instance(s)", "CAPACITY_PERCENT": " % of the copies"}  # API CapacitySize types
        kind = f"rolling by {size.get('Value')}{units.get(size.get('Type'), ' copies')}"
        back = rolling.get("RollbackMaximumBatchSize")
        if back is not None:
            kind += f" (rollback by {back.get('Value')}{units.get(back.get('Type'), ' copies')})"
        wait = rolling.get("WaitIntervalInSeconds")
    return f"{kind}, bake {wait} s, rolled back by {alarms} alarm(s)"


def _count(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def cost_lines(variant: dict, region: str) -> list[str]:
    """The variant's on-demand cost: always-on instances, or idle and full scale with managed scaling."""
    instance_type = variant_types(variant)[0]  # priority 1: where SageMaker places instances while it has capacity
    if not isinstance(instance_type, str):
        return [f"  cost: unknown (instance type {instance_type!r} is not a literal in the template)"]
    cost = price(instance_type, region)
    hours = hours_per_month()
    if not cost.known and instance_type in known_instance_types():
        count = _count(variant.get("InitialInstanceCount")) or 1
        return [f"  cost in {region}: {count} x {instance_type}: {lookup_hint(region)}"]
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


# A secret's ARN ends in its name, '-' and six random characters that Secrets Manager adds (Secrets Manager API
# reference, CreateSecret response ARN: "includes the name of the secret followed by six random characters",
# docs.aws.amazon.com/sdk-for-kotlin/api/latest/secretsmanager/aws.sdk.kotlin.services.secretsmanager.model/
# -create-secret-response/arn.html); the key hf_token_secret_arn takes only complete ARNs (names.py SECRET_ARN).
SECRET_SUFFIX = re.compile(r"-[A-Za-z0-9]{6}$")


def secret_name_of(arn: str) -> str:
    """The secret's name from its complete ARN (``...:secret:hf-token-AbCdEf`` -> ``hf-token``)."""
    return SECRET_SUFFIX.sub("", arn.split(":secret:", 1)[-1]) if ":secret:" in arn else arn.rsplit(":", 1)[-1]


def checkpoint_lines(props: dict, pinned_from: str | None = None) -> list[str]:
    """The staged model: repository, revision (and whether it is pinned), the token secret by name only.

    pinned_from: the floating revision synth pinned to this commit from the recorded Hub facts."""
    revision = str(props.get("Revision", "main"))
    pinned = (
        "not pinned: resolved to a commit at deploy, see output ModelRevision"
        if not SHA.fullmatch(revision)
        else f"pinned at synth: revision {pinned_from!r} as recorded in model-facts.json"
        if pinned_from
        else "pinned"
    )
    secret = props.get("TokenSecretArn") or ""
    secret_name = secret_name_of(secret) if isinstance(secret, str) and secret else "none (a public repository)"
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


def _targets(value: object) -> set[str]:
    """Every logical ID a value names through ``Ref`` or ``Fn::GetAtt``, at any depth."""
    found: set[str] = set()
    if isinstance(value, dict):
        if (target := _target(value)) is not None:
            found.add(target)
        for item in value.values():
            found |= _targets(item)
    elif isinstance(value, list):
        for item in value:
            found |= _targets(item)
    return found


def _image_text(image: object) -> str:
    if isinstance(image, dict) and "Fn::Join" in image:
        return "<DLC registry>/" + str(image["Fn::Join"][1][-1]).split("/", 1)[-1]
    if isinstance(image, dict) and "Fn::Sub" in image:  # a DockerImageAsset in the CDK asset repository
        return "<CDK asset repository>:" + str(image["Fn::Sub"]).rsplit(":", 1)[-1] + " (built at deploy)"
    return str(image)


def _engine_of(image: str, description: str) -> str:
    """The engine whose DLC repository the image names (constructs_lib/data/engines.json), else the stack's."""
    from constructs_lib.rules import engine_names, get_engine

    repository = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    for name in engine_names():
        if get_engine(name).repository == repository:
            return name
    said = re.search(r" with (\S+) \(SageMaker endpoint\)$", description)  # LlmEndpointStack's description
    return said[1] if said else "unknown (not a known engine image)"


def _variant_lines(variant: dict, region: str, copies: object = None, indent: str = "    ") -> list[str]:
    head = f"{indent}variant {variant.get('VariantName')}: {variant.get('InitialInstanceCount')} x "
    primary, *fallbacks = variant_types(variant)
    pooled = f" (falls back to {', '.join(map(str, fallbacks))})" if fallbacks else ""
    head += f"{primary}{pooled}, AMI {variant.get('InferenceAmiVersion', 'SageMaker default')}"
    if copies is not None:
        head += f"; copy count {copies}"
    return [head] + [indent[2:] + line for line in cost_lines(variant, region)]


def _pinned_from(facts: dict, checkpoint: dict) -> str | None:
    """The floating revision synth pinned the checkpoint's commit from: the stack's, or in a fleet's stack that of
    the deployment staging this repository at this commit."""
    if facts.get("PinnedFrom"):
        return str(facts["PinnedFrom"])
    props = checkpoint.get("Properties", {})
    for deployment in facts.get("Deployments") or []:
        same = (deployment.get("RepoId"), deployment.get("Revision")) == (props.get("RepoId"), props.get("Revision"))
        if same and deployment.get("PinnedFrom"):
            return str(deployment["PinnedFrom"])
    return None


def _model_block(
    resources: dict, logical_id: str, region: str, facts: dict, description: str, shown: set[int]
) -> list[str]:
    """One Model: what it serves (repository, revision, secret), how (engine, image, mode), where, and the cost."""
    props = resources[logical_id].get("Properties", {})
    served_by_component, component_config = _config_of_model(resources, logical_id)
    mode = "inference-component" if served_by_component else "standard"
    lines = [f"  model {logical_id} ({mode}):"]
    checkpoints = [lid for lid, r in resources.items() if r["Type"] == "Custom::StagedCheckpoint"]
    named = [lid for lid in checkpoints if lid in _targets(props)]
    staged = named or (checkpoints if len(checkpoints) == 1 else [])
    if staged:
        lines += [
            f"  {line}"
            for line in checkpoint_lines(
                resources[staged[0]].get("Properties", {}), _pinned_from(facts, resources[staged[0]])
            )
        ]
    else:
        source = props.get("PrimaryContainer", {}).get("ModelDataSource", {}).get("S3DataSource", {}).get("S3Uri")
        lines.append(f"    model: {source if isinstance(source, str) else 'an S3 prefix'} (given, not staged)")
    container = props.get("PrimaryContainer", {})
    image = _image_text(container.get("Image"))
    lines.append(f"    engine: {_engine_of(image, description)}")
    lines.append(f"    image: {image}")
    if not served_by_component:  # a standard endpoint's Model: its own flag isolates it
        endpoint_flag = True
    elif component_config is None:  # a component whose config cannot be followed: every config must isolate
        endpoint_flag = all(
            r.get("Properties", {}).get("EnableNetworkIsolation") is True
            for r in resources.values()
            if r["Type"] == "AWS::SageMaker::EndpointConfig"
        )
    else:  # with inference components the endpoint config carries the flag as well
        endpoint_flag = component_config.get("EnableNetworkIsolation") is True
    lines.append(f"    network isolation: {props.get('EnableNetworkIsolation') is True and endpoint_flag}")
    for key, value in sorted(container.get("Environment", {}).items()):
        lines.append(f"    env {key}={value!r}")
    if served_by_component:
        for res in resources.values():
            spec = res.get("Properties", {}).get("Specification", {})
            if res["Type"] == "AWS::SageMaker::InferenceComponent" and _target(spec.get("ModelName")) == logical_id:
                copies = res["Properties"].get("RuntimeConfig", {}).get("CopyCount")
                for variant in (component_config or {}).get("ProductionVariants", []):
                    if id(variant) in shown:  # packed beside another model: the endpoint's instances cost once
                        name = variant.get("VariantName", "the variant")
                        lines.append(
                            f"    variant {name}: {copies if copies is not None else '?'} cop(ies) on the instances "
                            "of the endpoint above (shared; its cost is counted once)"
                        )
                        continue
                    shown.add(id(variant))
                    lines += _variant_lines(variant, region, copies)
    else:
        for config_id, res in resources.items():
            if res["Type"] != "AWS::SageMaker::EndpointConfig":
                continue
            for variant in res.get("Properties", {}).get("ProductionVariants", []):
                if _target(variant.get("ModelName")) == logical_id:
                    shown.add(id(variant))
                    queue = res.get("Properties", {}).get("AsyncInferenceConfig")
                    if not queue:
                        lines += _variant_lines(variant, region)
                        continue
                    lines[0] = f"  model {logical_id} (async):"
                    scale = _variant_range(resources, config_id)
                    if scale is not None:  # its cost as managed scaling's: idle at the minimum, full at the maximum
                        low, high = scale
                        variant = {**variant, "ManagedInstanceScaling": {
                            "Status": "ENABLED", "MinInstanceCount": low, "MaxInstanceCount": high}}  # fmt: skip
                    # Queued requests wait for the instance; they do not fail as a component's do.
                    queued = "and queued requests wait until it is in service"
                    lines += [line.replace("and requests fail until it is in service", queued) for line in
                              _variant_lines(variant, region)]  # fmt: skip
                    lines += _queue_lines(queue, scale)
    return lines


def _joined(value: object) -> str:
    """An ``Fn::Join`` read as text, each token shown by the logical ID it names (``s3://<ModelBucket>/...``)."""
    if isinstance(value, dict) and isinstance(value.get("Fn::Join"), list) and len(value["Fn::Join"]) == 2:
        separator, parts = value["Fn::Join"]
        if isinstance(separator, str) and isinstance(parts, list):
            return separator.join(_text(part) for part in parts)
    return _text(value)


def _variant_range(resources: dict, config_id: str) -> tuple[int, int] | None:
    """The instance range autoscaling keeps the endpoint running ``config_id`` in: its scalable target's MinCapacity
    and MaxCapacity (ResourceId ``endpoint/<that endpoint>/variant/...``), or None without one."""
    endpoints = {
        lid for lid, r in resources.items()
        if r["Type"] == "AWS::SageMaker::Endpoint"
        and _target(r.get("Properties", {}).get("EndpointConfigName")) == config_id
    }  # fmt: skip
    for res in resources.values():
        props = res.get("Properties", {})
        if (
            res["Type"] != "AWS::ApplicationAutoScaling::ScalableTarget"
            or not _targets(props.get("ResourceId")) & endpoints
        ):
            continue
        low, high = _count(props.get("MinCapacity")), _count(props.get("MaxCapacity"))
        if low is not None and high is not None:
            return low, high
    return None


def _queue_lines(queue: dict, scale: tuple[int, int] | None) -> list[str]:
    """An asynchronous endpoint's queue: where answers and failures go, and how far it scales (AsyncInferenceConfig;
    the variant's scalable target)."""
    output = queue.get("OutputConfig", {})
    lines = [
        f"    queue: InvokeEndpointAsync; answers to {_joined(output.get('S3OutputPath'))}, failures to "
        f"{_joined(output.get('S3FailurePath'))}"
    ]
    if scale is not None:
        lines.append(f"    scales on the backlog: {scale[0]} to {scale[1]} instances")
    return lines


def several_components(resources: dict) -> bool:
    """Whether the template has more than one inference component with a policy of its own (a packed endpoint)."""
    return (
        sum(
            1
            for r in resources.values()
            if r["Type"] == "AWS::SageMaker::InferenceComponent" and r.get("Properties", {}).get("DeploymentConfig")
        )
        > 1
    )


def _text(value: object) -> str:
    """A property as a reviewer reads it: the literal, or the logical ID a token points at."""
    if isinstance(value, str):
        return value
    return f"<{_target(value)}>" if _target(value) else "<a token>"


def _texts(values: object) -> str:
    return ", ".join(_text(v) for v in values) if isinstance(values, list) else _text(values)


def governance_lines(resources: dict) -> list[str]:
    """What a reviewer of a governed account looks for: adapters, VPC placement, customer keys, tags."""
    lines = []
    for res in resources.values():
        spec = res.get("Properties", {}).get("Specification", {})
        if res["Type"] == "AWS::SageMaker::InferenceComponent" and spec.get("BaseInferenceComponentName"):
            name = _text(res["Properties"].get("InferenceComponentName"))
            artifact = _text((spec.get("Container") or {}).get("ArtifactUrl"))
            lines.append(f"  adapter {name} on {_text(spec['BaseInferenceComponentName'])}: {artifact}")
    placements = {
        (_texts(c.get("Subnets")), _texts(c.get("SecurityGroupIds")))
        for r in resources.values()
        if r["Type"] in ("AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig")
        for c in [r.get("Properties", {}).get("VpcConfig")]
        if c
    }
    if placements:
        for subnets, groups in sorted(placements):
            lines.append(f"  VPC: subnets {subnets}; security groups {groups}")
    else:
        lines.append("  VPC: none (SageMaker's own network; vpc_subnet_ids places it in yours)")
    keys = []
    for res in resources.values():
        props = res.get("Properties", {})
        kind = res["Type"]
        if kind == "AWS::SageMaker::EndpointConfig" and props.get("KmsKeyId"):
            keys.append(f"endpoint volumes {_text(props['KmsKeyId'])}")
        elif kind == "AWS::S3::Bucket":
            for rule in (props.get("BucketEncryption") or {}).get("ServerSideEncryptionConfiguration", []):
                key = (rule.get("ServerSideEncryptionByDefault") or {}).get("KMSMasterKeyID")
                if key:
                    keys.append(f"bucket {_text(key)}")
        elif kind == "AWS::Logs::LogGroup" and props.get("KmsKeyId"):
            keys.append(f"logs {_text(props['KmsKeyId'])}")
        elif kind == "AWS::Lambda::Function" and props.get("KmsKeyArn"):
            keys.append(f"function environment {_text(props['KmsKeyArn'])}")
        elif (
            kind == "AWS::SNS::Topic"
            and props.get("KmsMasterKeyId")
            and "alias/aws/sns" not in str(props["KmsMasterKeyId"])
        ):  # (an asynchronous endpoint's topics use the AWS-managed key)
            keys.append(f"alarm topic {_text(props['KmsMasterKeyId'])}")
        elif kind == "Custom::StagedCheckpoint" and props.get("VolumeKmsKeyArn"):
            keys.append(f"staging volumes {_text(props['VolumeKmsKeyArn'])}")
    counted = Counter(keys)
    shown = ", ".join(k if n == 1 else f"{k} (x{n})" for k, n in sorted(counted.items()))
    lines.append(f"  customer keys: {shown or 'none (AWS-managed encryption)'}")
    tags = {
        (t.get("Key"), _text(t.get("Value")))
        for r in resources.values()
        if r["Type"] == "AWS::SageMaker::Endpoint"
        for t in r.get("Properties", {}).get("Tags") or []
    }
    lines.append("  tags: " + (", ".join(f"{k}={v}" for k, v in sorted(tags)) or "none"))
    return lines


def stack_templates(out: Path) -> list[Path] | str:
    """The templates of the stacks the assembly's manifest.json lists (not every template left in the folder
    by an earlier synth), or why there are none. The manifest's artifacts of type ``aws:cloudformation:stack``
    name theirs in ``properties.templateFile`` (the cloud assembly schema, cloud-assembly-schema manifest)."""
    manifest = out / "manifest.json"
    try:
        artifacts = safejson.loads(manifest.read_text(), source=str(manifest)).get("artifacts") or {}
    except FileNotFoundError:
        return f"no manifest.json in {out}: run cdk synth first"
    except (OSError, ValueError, AttributeError) as e:
        return f"{manifest} is unreadable: {e}"
    templates = [
        out / str(a["properties"]["templateFile"])
        for _, a in sorted(artifacts.items())
        if isinstance(a, dict)
        and a.get("type") == "aws:cloudformation:stack"
        and isinstance(a.get("properties"), dict)
        and a["properties"].get("templateFile")
    ]
    return templates or f"no stacks in {manifest}"


def describe(template: dict, region: str = DEFAULT_REGION) -> list[str]:
    """The stack in lines: its resources, the model checks at synth, then one block per SageMaker Model."""
    resources = template.get("Resources", {})
    counts = Counter(r["Type"] for r in resources.values())
    lines = [
        f"  {len(resources)} resources: " + ", ".join(f"{t.split('::', 1)[1]} x{c}" for t, c in sorted(counts.items()))
    ]
    facts = template.get("Metadata", {}).get(METADATA_KEY) or {}
    if facts.get("Line"):
        lines.append(f"  {facts['Line']}")  # the model checks at synth: what was checked, or why not
    for deployment in facts.get("Deployments") or []:  # a fleet's endpoint stack: one line per deployment
        lines.append(f"  deployment {deployment.get('Deployment')}: {deployment.get('Line')}")
    description = str(template.get("Description", ""))
    shown: set[int] = set()  # the variants a model block printed
    for logical_id, res in resources.items():
        if res["Type"] == "AWS::SageMaker::Model":
            lines += _model_block(resources, logical_id, region, facts, description, shown)
    # Variants no Model block showed (a config whose model is not in this template): still an instance and a cost.
    for res in resources.values():
        if res["Type"] == "AWS::SageMaker::EndpointConfig":
            for variant in res.get("Properties", {}).get("ProductionVariants", []):
                if id(variant) not in shown:
                    lines += _variant_lines(variant, region, indent="  ")
    for res in resources.values():
        props = res.get("Properties", {})
        if res["Type"] in ("AWS::SageMaker::Endpoint", "AWS::SageMaker::InferenceComponent") and props.get(
            "DeploymentConfig"
        ):
            # Several components on one endpoint each have a policy: say whose.
            name = props.get("InferenceComponentName") if res["Type"] == "AWS::SageMaker::InferenceComponent" else None
            whose = f" of component {name}" if isinstance(name, str) and several_components(resources) else ""
            lines.append(f"  update policy{whose}: {update_policy(props['DeploymentConfig'])}")
    return lines + governance_lines(resources)


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
    templates = stack_templates(out)
    if isinstance(templates, str):
        print(templates, file=sys.stderr)
        return 1
    report = out / "validation-report.json"
    try:
        reports = safejson.loads(report.read_bytes(), source=str(report)) if report.exists() else {}
        documents = [safejson.loads(p.read_bytes(), source=str(p)) for p in templates]
    except (OSError, safejson.JsonError) as e:  # JsonError names the file
        print(f"error: {e}", file=sys.stderr)
        return 1
    for plugin in reports.get("pluginReports", []):
        print(
            f"{plugin['pluginName']}: {plugin['conclusion']}, {len(plugin['violations'])} findings, "
            f"{len(plugin.get('suppressedViolations', []))} acknowledged with reasons ({report})"
        )
    for path, document in zip(templates, documents, strict=True):
        print(path)
        print("\n".join(describe(document, region)))
    for line in fleet_total_lines(documents, region):  # several endpoints
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
