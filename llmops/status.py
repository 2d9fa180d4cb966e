"""What this app has running and billing in an account and region, and what it keeps by design (read-only).

    python -m llmops.status                       # the default app, LlmEndpoint, in the session's region
    python -m llmops.status --stack-name MyApp --region us-west-2
    python -m llmops.status --expect-none         # after cdk destroy: exit 1 while compute is left

Billing compute: the app's endpoints (status, instance type and count of each variant), the inference components
on them (copies desired and current) and staging Processing jobs in progress. Kept by design: the model bucket
(size from CloudWatch's daily BucketSizeBytes) and the endpoints' log groups, which ``cdk destroy`` leaves.

The app's resources are found by name and tag: endpoints named ``<stack>-...`` (the constructs' default names)
or carrying the ``aws:cloudformation:stack-name`` tag CloudFormation adds; components by the endpoint they sit
on; staging jobs by the bucket they write to (``HFSTAGE_TARGET``); the bucket and log groups by their names.

Exit status: 0 listed (and, with --expect-none, no compute left); 1 --expect-none and compute is left (each
resource is named); 2 bad arguments; 3 AWS could not be read (credentials, region or a denied call, named).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

EXIT_OK = 0
EXIT_LEFT = 1
EXIT_USAGE = 2
EXIT_AWS = 3
DEFAULT_STACK = "LlmEndpoint"
# A CloudFormation stack name: letters, digits and hyphens, starting with a letter, at most 128 characters
# (CloudFormation API, CreateStack StackName).
STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}", re.ASCII)
STACK_TAG = "aws:cloudformation:stack-name"  # CloudFormation User Guide, aws-properties-resource-tags.html
# The staging worker's job environment names its target prefix (lambda/staged_checkpoint job_request).
TARGET_ENV = "HFSTAGE_TARGET"
JOB_FAMILY = "hfstage-"  # constructs_lib.staged_checkpoint names every staging job hfstage-<hash>-...
RUNNING_JOB = ("InProgress", "Stopping")
# The constructs' retained log groups (constructs_lib/gpu_endpoint.py, inference_component.py).
LOG_GROUP_PREFIXES = ("/aws/sagemaker/Endpoints/", "/aws/sagemaker/InferenceComponents/")
APP_PART = 27  # constructs_lib/model_bucket.py APP_PART: the app's share of the bucket name


class AwsFailure(Exception):
    """A read that failed: the message names the call and the error."""


@dataclass
class Variant:
    name: str
    instance_type: str | None
    current_instances: int | None
    desired_instances: int | None


@dataclass
class Component:
    name: str
    endpoint: str
    status: str
    desired_copies: int | None = None
    current_copies: int | None = None


@dataclass
class Endpoint:
    name: str
    status: str
    variants: list[Variant] = field(default_factory=list)


@dataclass
class Job:
    name: str
    status: str
    instance_type: str | None
    instances: int | None
    target: str


@dataclass
class Kept:
    kind: str  # "bucket" or "log group"
    name: str
    bytes: int | None  # None: not reported (a bucket's size metric lags by a day)
    note: str = ""


@dataclass
class Report:
    stack: str
    account: str
    region: str
    stack_status: str | None  # None: no such stack
    endpoints: list[Endpoint] = field(default_factory=list)
    components: list[Component] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)

    @property
    def compute(self) -> list[str]:
        """What still bills by the hour, one line each."""
        return (
            [f"endpoint {e.name} ({e.status})" for e in self.endpoints]
            + [f"inference component {c.name} ({c.status})" for c in self.components]
            + [f"staging job {j.name} ({j.status})" for j in self.jobs]
        )


def app_bucket_name(stack: str, account: str, region: str) -> str:
    """The app's model bucket, named as constructs_lib.model_bucket.app_bucket_name names it (tested equal)."""
    import hashlib

    part = "".join(c if c.isalnum() else "-" for c in stack.lower()).strip("-") or "llm"
    if len(part) > APP_PART:
        part = f"{part[: APP_PART - 7].rstrip('-')}-{hashlib.sha256(stack.encode()).hexdigest()[:6]}"
    return f"{part}-models-{account}-{region}"


def _call(what: str, fn: Any, **kwargs: Any) -> Any:
    try:
        return fn(**kwargs)
    except Exception as error:  # botocore ClientError, NoCredentialsError, EndpointConnectionError, ...
        response = getattr(error, "response", None)
        code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
        raise AwsFailure(f"{what}: {code or type(error).__name__}") from None


def _pages(client: Any, operation: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    try:
        for page in client.get_paginator(operation).paginate(**kwargs):
            items.extend(page.get(key, []))
    except Exception as error:
        response = getattr(error, "response", None)
        code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
        raise AwsFailure(f"{operation}: {code or type(error).__name__}") from None
    return items


def stack_status(cloudformation: Any, stack: str) -> str | None:
    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except Exception as error:
        response = getattr(error, "response", None)
        err = response.get("Error", {}) if isinstance(response, dict) else {}
        # DescribeStacks answers ValidationError "Stack with id X does not exist" for a missing (or deleted) stack.
        if err.get("Code") == "ValidationError" and "does not exist" in str(err.get("Message", "")):
            return None
        raise AwsFailure(f"DescribeStacks {stack}: {err.get('Code') or type(error).__name__}") from None
    return str(stacks[0]["StackStatus"]) if stacks else None


def other_apps_endpoints(cloudformation: Any, stack: str) -> set[str]:
    """The endpoints that stacks named ``<stack>-...`` of another app output (their AppName output names that app:
    llmops/fleet_target.py): app LlmEndpoint-prod's endpoints also start with ``LlmEndpoint-``."""
    from llmops.fleet_target import is_app_stack

    try:
        stacks = _pages(cloudformation, "describe_stacks", "Stacks")
    except AwsFailure:  # DescribeStacks allowed on the app's stack only (docs/guide/status.md): names alone, as before
        return set()
    return {
        str(output["OutputValue"])
        for found in stacks
        if str(found.get("StackName", "")).startswith(f"{stack}-") and not is_app_stack(found, stack)
        for output in found.get("Outputs", [])
        if str(output.get("OutputKey", "")).endswith("EndpointName")
    }


def endpoint_names(
    sagemaker: Any, tagging: Any, stack: str, extra: list[str], cloudformation: Any | None = None
) -> list[str]:
    named = [
        e["EndpointName"]
        for e in _pages(sagemaker, "list_endpoints", "Endpoints", NameContains=stack)
        if e["EndpointName"].startswith(f"{stack}-")
    ]
    if named and cloudformation is not None:  # only when a name matched: one more read otherwise spared
        others = other_apps_endpoints(cloudformation, stack)
        named = [name for name in named if name not in others]
    tagged = [
        m["ResourceARN"].rsplit("/", 1)[-1]
        for m in _pages(
            tagging,
            "get_resources",
            "ResourceTagMappingList",
            TagFilters=[{"Key": STACK_TAG, "Values": [stack]}],
            ResourceTypeFilters=["sagemaker:endpoint"],
        )
    ]
    return sorted(set(named) | set(tagged) | set(extra))


def describe_endpoint(sagemaker: Any, name: str) -> Endpoint | None:
    try:
        answer = sagemaker.describe_endpoint(EndpointName=name)
    except Exception as error:
        response = getattr(error, "response", None)
        err = response.get("Error", {}) if isinstance(response, dict) else {}
        # A tagged endpoint may be gone already (the tagging index lags): SageMaker says ValidationException.
        if err.get("Code") == "ValidationException" and "Could not find" in str(err.get("Message", "")):
            return None
        raise AwsFailure(f"DescribeEndpoint {name}: {err.get('Code') or type(error).__name__}") from None
    # DescribeEndpoint's variants carry counts, not the instance type: that is in the endpoint config.
    types: dict[str, str] = {}
    if answer.get("EndpointConfigName"):
        try:
            config = sagemaker.describe_endpoint_config(EndpointConfigName=answer["EndpointConfigName"])
            types = {v["VariantName"]: v.get("InstanceType") for v in config.get("ProductionVariants", [])}
        except Exception:  # a config deleted while its endpoint is updating: counts are still worth showing
            types = {}
    variants = [
        Variant(
            name=v["VariantName"],
            instance_type=types.get(v["VariantName"]),
            current_instances=v.get("CurrentInstanceCount"),
            desired_instances=v.get("DesiredInstanceCount"),
        )
        for v in answer.get("ProductionVariants", [])
    ]
    return Endpoint(name=name, status=str(answer["EndpointStatus"]), variants=variants)


def components_on(sagemaker: Any, endpoint: str) -> list[Component]:
    found = []
    for summary in _pages(sagemaker, "list_inference_components", "InferenceComponents", EndpointNameEquals=endpoint):
        name = summary["InferenceComponentName"]
        component = Component(name=name, endpoint=endpoint, status=str(summary.get("InferenceComponentStatus", "")))
        detail = _call(
            f"DescribeInferenceComponent {name}", sagemaker.describe_inference_component, InferenceComponentName=name
        )
        runtime = detail.get("RuntimeConfig") or {}
        component.desired_copies = runtime.get("DesiredCopyCount")
        component.current_copies = runtime.get("CurrentCopyCount")
        found.append(component)
    return found


def staging_jobs(sagemaker: Any, bucket: str) -> list[Job]:
    jobs = []
    for status in RUNNING_JOB:
        for summary in _pages(
            sagemaker, "list_processing_jobs", "ProcessingJobSummaries", NameContains=JOB_FAMILY, StatusEquals=status
        ):
            name = summary["ProcessingJobName"]
            if not name.startswith(JOB_FAMILY):
                continue
            detail = _call(f"DescribeProcessingJob {name}", sagemaker.describe_processing_job, ProcessingJobName=name)
            target = (detail.get("Environment") or {}).get(TARGET_ENV, "")
            if not target.startswith(f"s3://{bucket}/"):
                continue  # another app's staging job
            cluster = (detail.get("ProcessingResources") or {}).get("ClusterConfig") or {}
            jobs.append(Job(name, status, cluster.get("InstanceType"), cluster.get("InstanceCount"), target))
    return jobs


def bucket_kept(s3: Any, cloudwatch: Any, bucket: str, account: str, now: dt.datetime) -> Kept | None:
    try:
        s3.head_bucket(Bucket=bucket, ExpectedBucketOwner=account)
    except Exception as error:
        response = getattr(error, "response", None)
        code = str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""
        if code in ("404", "NoSuchBucket", "NotFound"):
            return None
        raise AwsFailure(f"HeadBucket {bucket}: {code or type(error).__name__}") from None
    # S3 reports BucketSizeBytes once a day per storage class (S3 User Guide, metrics-dimensions.html).
    answer = _call(
        f"GetMetricStatistics BucketSizeBytes {bucket}",
        cloudwatch.get_metric_statistics,
        Namespace="AWS/S3",
        MetricName="BucketSizeBytes",
        Dimensions=[{"Name": "BucketName", "Value": bucket}, {"Name": "StorageType", "Value": "StandardStorage"}],
        StartTime=now - dt.timedelta(days=3),
        EndTime=now,
        Period=86400,
        Statistics=["Average"],
    )
    points = sorted(answer.get("Datapoints", []), key=lambda p: p["Timestamp"])
    if not points:
        return Kept("bucket", bucket, None, "size not reported yet (S3 sends it once a day)")
    return Kept("bucket", bucket, int(points[-1]["Average"]), f"as of {points[-1]['Timestamp']:%Y-%m-%d}")


def log_groups_kept(logs: Any, stack: str, endpoints: list[str]) -> list[Kept]:
    prefixes = {p + stack + "-" for p in LOG_GROUP_PREFIXES} | {LOG_GROUP_PREFIXES[0] + e for e in endpoints}
    found: dict[str, Kept] = {}
    for prefix in sorted(prefixes):
        for group in _pages(logs, "describe_log_groups", "logGroups", logGroupNamePrefix=prefix):
            name = group["logGroupName"]
            retention = group.get("retentionInDays")
            found[name] = Kept(
                "log group", name, group.get("storedBytes"), f"kept {retention} days" if retention else "kept forever"
            )
    return [found[n] for n in sorted(found)]


def collect(
    clients: dict[str, Any],
    stack: str,
    *,
    bucket: str | None = None,
    extra_endpoints: list[str] | None = None,
    now: dt.datetime | None = None,
) -> Report:
    identity = _call("GetCallerIdentity", clients["sts"].get_caller_identity)
    account = str(identity["Account"])
    region = str(clients["sagemaker"].meta.region_name)
    report = Report(
        stack=stack, account=account, region=region, stack_status=stack_status(clients["cloudformation"], stack)
    )
    for name in endpoint_names(
        clients["sagemaker"], clients["tagging"], stack, extra_endpoints or [], clients["cloudformation"]
    ):
        endpoint = describe_endpoint(clients["sagemaker"], name)
        if endpoint is None:
            continue
        report.endpoints.append(endpoint)
        report.components.extend(components_on(clients["sagemaker"], name))
    bucket = bucket or app_bucket_name(stack, account, region)
    report.jobs = staging_jobs(clients["sagemaker"], bucket)
    kept = bucket_kept(clients["s3"], clients["cloudwatch"], bucket, account, now or dt.datetime.now(dt.UTC))
    report.kept = ([kept] if kept else []) + log_groups_kept(clients["logs"], stack, [e.name for e in report.endpoints])
    return report


def _size(value: int | None) -> str:
    if value is None:
        return "size unknown"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


def _known(value: int | None) -> str:
    return "?" if value is None else str(value)


def render(report: Report, out: TextIO) -> None:
    write = out.write
    state = report.stack_status or "not deployed (no such stack)"
    write(f"{report.stack} in account {report.account}, {report.region}: stack {state}\n")
    write("billing by the hour:\n")
    if not report.compute:
        write("  nothing: no endpoint, inference component or staging job\n")
    for e in report.endpoints:
        write(f"  endpoint {e.name}: {e.status}\n")
        for v in e.variants:
            count = f"{_known(v.current_instances)} of {_known(v.desired_instances)}"
            write(f"    variant {v.name}: {v.instance_type or 'instance type unknown'} x {count} instances\n")
        for c in (c for c in report.components if c.endpoint == e.name):
            copies = f"{_known(c.current_copies)} of {_known(c.desired_copies)}"
            write(f"    inference component {c.name}: {c.status}, copies {copies}\n")
    for j in report.jobs:
        write(f"  staging job {j.name}: {j.status}, {j.instance_type} x {j.instances}, writing {j.target}\n")
    write("kept by design (not compute; delete by hand when no longer wanted):\n")
    if not report.kept:
        write("  nothing\n")
    for k in report.kept:
        write(f"  {k.kind} {k.name}: {_size(k.bytes)}" + (f" ({k.note})" if k.note else "") + "\n")


def make_clients(region: str | None, profile: str | None) -> dict[str, Any]:
    import boto3

    session = boto3.session.Session(region_name=region, profile_name=profile)
    names = {
        "sts": "sts",
        "cloudformation": "cloudformation",
        "sagemaker": "sagemaker",
        "s3": "s3",
        "cloudwatch": "cloudwatch",
        "logs": "logs",
        "tagging": "resourcegroupstaggingapi",
    }
    return {key: session.client(service) for key, service in names.items()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmops status", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--stack-name", default=DEFAULT_STACK, help=f"the app's stack (stack_name; default {DEFAULT_STACK})"
    )
    parser.add_argument("--region", help="AWS region (default: the session's, AWS_REGION)")
    parser.add_argument("--profile", help="AWS profile (default: the session's)")
    parser.add_argument("--bucket", help="the model bucket, when model_bucket named one (default: the app's bucket)")
    parser.add_argument(
        "--endpoint", action="append", default=[], help="an endpoint of the app with a custom name (repeatable)"
    )
    parser.add_argument(
        "--expect-none", action="store_true", help="exit 1 when any endpoint, component or staging job is left"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(
    argv: list[str] | None = None,
    *,
    clients: dict[str, Any] | None = None,
    out: TextIO | None = None,
    now: dt.datetime | None = None,
) -> int:
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code) if isinstance(exit_.code, int) else EXIT_USAGE
    if not STACK_NAME.fullmatch(args.stack_name):
        print(
            f"llmops status: --stack-name {args.stack_name[:200]!r} is not a CloudFormation stack name", file=sys.stderr
        )
        return EXIT_USAGE
    try:
        report = collect(
            clients or make_clients(args.region, args.profile),
            args.stack_name,
            bucket=args.bucket,
            extra_endpoints=args.endpoint,
            now=now,
        )
    except AwsFailure as error:
        print(
            f"llmops status: could not read {error} (see docs/guide/status.md for the read-only policy)",
            file=sys.stderr,
        )
        return EXIT_AWS
    except Exception as error:  # no region, no credentials: botocore raises before any call
        print(f"llmops status: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_AWS
    if args.json:
        out.write(json.dumps({**asdict(report), "compute_left": report.compute}, indent=2, default=str) + "\n")
    else:
        render(report, out)
    if args.expect_none and report.compute:
        print(
            f"llmops status: {len(report.compute)} billing resource(s) left: " + "; ".join(report.compute),
            file=sys.stderr,
        )
        return EXIT_LEFT
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
