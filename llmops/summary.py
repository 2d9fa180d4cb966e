"""Print what ``cdk synth`` produced: one block per stack with its endpoint settings.

python -m llmops.summary cdk.out
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def describe(template: dict) -> list[str]:
    resources = template.get("Resources", {})
    counts = Counter(r["Type"] for r in resources.values())
    lines = [
        f"  {len(resources)} resources: " + ", ".join(f"{t.split('::', 1)[1]} x{c}" for t, c in sorted(counts.items()))
    ]
    # With inference components, containers are isolated only when the endpoint config says so as well.
    component_mode = counts["AWS::SageMaker::InferenceComponent"] > 0
    endpoint_isolated = all(
        r.get("Properties", {}).get("EnableNetworkIsolation") is True
        for r in resources.values()
        if r["Type"] == "AWS::SageMaker::EndpointConfig"
    )
    for res in resources.values():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::SageMaker::Model":
            container = props.get("PrimaryContainer", {})
            image = container.get("Image")
            if isinstance(image, dict) and "Fn::Join" in image:
                image = "<DLC registry>/" + str(image["Fn::Join"][1][-1]).split("/", 1)[-1]
            elif isinstance(image, dict) and "Fn::Sub" in image:  # a DockerImageAsset in the CDK asset repository
                image = "<CDK asset repository>:" + str(image["Fn::Sub"]).rsplit(":", 1)[-1] + " (built at deploy)"
            lines.append(f"  image: {image}")
            isolated = props.get("EnableNetworkIsolation") is True and (endpoint_isolated or not component_mode)
            lines.append(f"  network isolation: {isolated}")
            for key, value in sorted(container.get("Environment", {}).items()):
                lines.append(f"  env {key}={value!r}")
        if res["Type"] == "AWS::SageMaker::EndpointConfig":
            for variant in props.get("ProductionVariants", []):
                lines.append(
                    f"  variant {variant.get('VariantName')}: {variant.get('InitialInstanceCount')} x "
                    f"{variant.get('InstanceType')}, AMI {variant.get('InferenceAmiVersion', 'SageMaker default')}"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else "cdk.out")
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
        print("\n".join(describe(json.loads(path.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
