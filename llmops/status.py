"""What this app has running and billing in an account and region, and what it keeps by design (read-only).

    python -m llmops.status                       # the default app, LlmEndpoint, in the session's region
    python -m llmops.status --stack-name MyApp --region us-west-2
    python -m llmops.status --expect-none         # after cdk destroy: exit 1 while compute is left

Billing compute: the app's endpoints (status, instance type and count of each variant), the inference components
on them (copies desired and current) and staging Processing jobs in progress. An asynchronous endpoint (its
endpoint config has AsyncInferenceConfig) is marked ``(async)`` with its output and failure paths and its queue:
CloudWatch's ``AWS/SageMaker ApproximateBacklogSize`` for the endpoint, the latest 1-minute average of the last
5 minutes (one GetMetricStatistics call per asynchronous endpoint); a queue that cannot be read shows "unknown"
and never fails the report. Kept by design: the model bucket (size from CloudWatch's daily BucketSizeBytes) and
the endpoints' log groups, which ``cdk destroy`` leaves.

The app's resources are found through its stacks and its tag: the stacks named exactly ``<stack>`` or tagged
``llm-endpoint-app=<stack>`` (a fleet's ``<stack>-<endpoint>`` stacks; a stack tagged for another app is never
read, whatever its name), their own SageMaker resources (ListStackResources), endpoints tagged
``llm-endpoint-app=<stack>``, endpoints named ``<stack>-...`` and each ``--endpoint``; components by the
endpoint they sit on; staging jobs by the bucket they write to (``HFSTAGE_TARGET``); the bucket and log groups
by their names. Only SageMaker's "Could not find" is read as gone: any other error (throttling, a denied call,
another validation error) fails the report, so ``--expect-none`` passes only when nothing bills.

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
# The app's own tag (constructs_lib/deployment/parsers.py APP_TAG, tested equal), on its stacks and every taggable
# resource. The
# stack-name tag CloudFormation adds is no help: AWS::SageMaker::Endpoint, EndpointConfig and InferenceComponent
# declare "cloudFormationSystemTags": false (their resource schemas, as cfn-lint ships them).
APP_TAG = "llm-endpoint-app"
# The resources a stack lists that this report reads (ListStackResources ResourceType); physical IDs are ARNs
# (each schema's primaryIdentifier is its ...Arn property).
ENDPOINT_TYPE = "AWS::SageMaker::Endpoint"
DEFINED_TYPES = {"AWS::SageMaker::Model": "model", "AWS::SageMaker::EndpointConfig": "endpoint config"}
# The staging worker's job environment names its target prefix (lambda/staged_checkpoint job_request).
TARGET_ENV = "HFSTAGE_TARGET"
JOB_FAMILY = "hfstage-"  # constructs_lib.staged_checkpoint names every staging job hfstage-<hash>-...
RUNNING_JOB = ("InProgress", "Stopping")
# Asynchronous endpoints' queue ("Monitoring asynchronous endpoints", SageMaker developer guide,
# async-inference-monitor.html): namespace AWS/SageMaker, dimension EndpointName, statistic Average.
BACKLOG_METRIC = "ApproximateBacklogSize"
BACKLOG_WINDOW = dt.timedelta(minutes=5)
BACKLOG_PERIOD_S = 60
# The constructs' retained log groups (constructs_lib/gpu_endpoint.py, inference_component.py).
LOG_GROUP_PREFIXES = ("/aws/sagemaker/Endpoints/", "/aws/sagemaker/InferenceComponents/")
APP_PART = 27  # constructs_lib/model_bucket.py APP_PART: the app's share of the bucket name


class AwsFailure(Exception):
    """A read that failed: the message names the call and the error."""


@dataclass
class Variant:
    name: str
    instance_type: str | None  # one type, or the instance pools' types in priority order ("a or b")
    current_instances: int | None
    desired_instances: int | None
    pools: dict[str, int | None] = field(default_factory=dict)  # instance pools: current instances per type


@dataclass
class StackInfo:
    name: str
    status: str


@dataclass
class Defined:
    kind: str  # "model" or "endpoint config"
    name: str  # the ARN's resource name (SageMaker ARNs hold it in lower case)
    stack: str


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
    mode: str | None = "real-time"  # or "async" (its config has AsyncInferenceConfig); None: config not found
    output_path: str | None = None  # async: AsyncInferenceConfig.OutputConfig.S3OutputPath
    failure_path: str | None = None  # async: OutputConfig.S3FailurePath, when set
    backlog: float | None = None  # async: requests queued or in progress (ApproximateBacklogSize), None: unknown
    backlog_note: str = ""  # when the backlog was measured, or why it is unknown


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
    stacks: list[StackInfo] = field(default_factory=list)  # the app's stacks, the fleet's included
    untagged: list[str] = field(default_factory=list)  # stacks named <stack>-... that no app tag claims
    endpoints: list[Endpoint] = field(default_factory=list)
    defined: list[Defined] = field(default_factory=list)
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


def _error_of(error: Exception) -> tuple[str, str]:
    """(code, message) of a failed call: botocore's ClientError carries ``response["Error"]``; an error raised
    before any answer (NoCredentialsError, EndpointConnectionError) is named by its class."""
    response = getattr(error, "response", None)
    err = response.get("Error") if isinstance(response, dict) else None
    err = err if isinstance(err, dict) else {}
    return str(err.get("Code") or type(error).__name__), str(err.get("Message") or "")


def _gone(error: Exception) -> bool:
    """SageMaker's answer for a resource that does not exist: ValidationException "Could not find endpoint ..."
    (DeleteEndpoint, aws/amazon-sagemaker-examples#2402; DescribeEndpointConfig, #2339). Nothing else is."""
    code, message = _error_of(error)
    return code == "ValidationException" and message.startswith("Could not find")


def _call(what: str, fn: Any, **kwargs: Any) -> Any:
    try:
        return fn(**kwargs)
    except Exception as error:  # botocore ClientError, NoCredentialsError, EndpointConnectionError, ...
        raise AwsFailure(f"{what}: {_error_of(error)[0]}") from None


def _pages(client: Any, operation: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    try:
        for page in client.get_paginator(operation).paginate(**kwargs):
            items.extend(page.get(key, []))
    except Exception as error:
        raise AwsFailure(f"{operation}: {_error_of(error)[0]}") from None
    return items


def app_stacks(cloudformation: Any, app: str, named: list[str]) -> tuple[list[StackInfo], list[str]]:
    """(the app's stacks, the stacks named ``<app>-...`` that no app tag claims). A stack is the app's when its
    ``APP_TAG`` is ``app``, or, untagged (deployed before the tag), when it is named ``app`` or in ``named``:
    exact names, never a prefix (``LlmEndpoint-prod`` may be another app's). DescribeStacks without a name
    lists every stack not yet deleted, with its Tags (CloudFormation API reference, DescribeStacks)."""
    mine, untagged = [], []
    for stack in _pages(cloudformation, "describe_stacks", "Stacks"):
        name = str(stack["StackName"])
        owner = {t["Key"]: t["Value"] for t in stack.get("Tags") or []}.get(APP_TAG)
        if owner == app or (owner is None and (name == app or name in named)):
            mine.append(StackInfo(name, str(stack["StackStatus"])))
        elif owner is None and name.startswith(f"{app}-"):
            untagged.append(name)
    return sorted(mine, key=lambda s: s.name), sorted(untagged)


def stack_resources(cloudformation: Any, stacks: list[StackInfo]) -> tuple[list[str], list[Defined]]:
    """(the endpoints' physical IDs, the models and endpoint configs) the app's stacks hold."""
    endpoints: list[str] = []
    defined: list[Defined] = []
    for stack in stacks:
        for resource in _pages(cloudformation, "list_stack_resources", "StackResourceSummaries", StackName=stack.name):
            physical = resource.get("PhysicalResourceId")
            if not physical or resource.get("ResourceStatus") == "DELETE_COMPLETE":
                continue
            if resource["ResourceType"] == ENDPOINT_TYPE:
                endpoints.append(str(physical))
            elif resource["ResourceType"] in DEFINED_TYPES:
                defined.append(
                    Defined(DEFINED_TYPES[resource["ResourceType"]], physical.rsplit("/", 1)[-1], stack.name)
                )
    return endpoints, defined


def endpoint_names(sagemaker: Any, tagging: Any, stack: str, extra: list[str], from_stacks: list[str]) -> list[str]:
    """The endpoints that exist among: those named ``<stack>-...``, those tagged ``APP_TAG=<stack>``, those the
    app's stacks hold (``from_stacks``: ARNs or names) and ``extra``. ARNs hold the name in lower case, and
    endpoint names are case-insensitive (CreateEndpoint EndpointName, botocore sagemaker service-2.json), so
    they are matched to ListEndpoints' names without regard to case."""
    listed = _pages(sagemaker, "list_endpoints", "Endpoints")
    by_key = {str(e["EndpointName"]).lower(): e["EndpointName"] for e in listed}
    by_key.update({str(e["EndpointArn"]).lower(): e["EndpointName"] for e in listed})
    # Every endpoint carrying the app tag, whatever its value: ours, and those of another app whose stack_name
    # starts like ours (app LlmEndpoint-prod's endpoints are named LlmEndpoint-prod-...), left out of the names.
    mappings = _pages(
        tagging,
        "get_resources",
        "ResourceTagMappingList",
        TagFilters=[{"Key": APP_TAG}],
        ResourceTypeFilters=["sagemaker:endpoint"],
    )
    owner = {
        str(m["ResourceARN"]).lower(): {t["Key"]: t["Value"] for t in m.get("Tags") or []}.get(APP_TAG)
        for m in mappings
    }
    tagged = [arn for arn, app in owner.items() if app == stack]
    others = {by_key[arn] for arn, app in owner.items() if app != stack and arn in by_key}
    named = [
        e["EndpointName"]
        for e in listed
        if e["EndpointName"].startswith(f"{stack}-") and e["EndpointName"] not in others
    ]
    # An ARN or name no longer listed is gone (a tag index lags behind deletes); an --endpoint is asked as given.
    found = {by_key[k.lower()] for k in [*tagged, *from_stacks] if k.lower() in by_key}
    return sorted(set(named) | found | set(extra))


def describe_endpoint(sagemaker: Any, name: str) -> Endpoint | None:
    try:
        answer = sagemaker.describe_endpoint(EndpointName=name)
    except Exception as error:
        if _gone(error):  # deleted since it was listed
            return None
        raise AwsFailure(f"DescribeEndpoint {name}: {_error_of(error)[0]}") from None
    # DescribeEndpoint's variants carry counts, not the instance type: that is in the endpoint config.
    types: dict[str, str | None] = {}
    mode: dict[str, Any] = {"mode": None}  # without a config to read, unknown
    if answer.get("EndpointConfigName"):
        try:
            config = sagemaker.describe_endpoint_config(EndpointConfigName=answer["EndpointConfigName"])
            types = {v["VariantName"]: _instance_types(v) for v in config.get("ProductionVariants", [])}
            mode = _mode(config)
        except Exception as error:
            if not _gone(error):  # a config deleted while its endpoint updates: its counts are still shown
                raise AwsFailure(
                    f"DescribeEndpointConfig {answer['EndpointConfigName']}: {_error_of(error)[0]}"
                ) from None
    variants = [
        Variant(
            name=v["VariantName"],
            instance_type=types.get(v["VariantName"]),
            current_instances=v.get("CurrentInstanceCount"),
            desired_instances=v.get("DesiredInstanceCount"),
            # ProductionVariantSummary.InstancePools: InstanceType and CurrentInstanceCount per pool (service-2.json).
            pools={p["InstanceType"]: p.get("CurrentInstanceCount") for p in v.get("InstancePools") or []},
        )
        for v in answer.get("ProductionVariants", [])
    ]
    return Endpoint(name=name, status=str(answer["EndpointStatus"]), variants=variants, **mode)


def _mode(config: dict[str, Any]) -> dict[str, Any]:
    """An endpoint config's mode: ``async`` with its output paths when it has AsyncInferenceConfig (its
    OutputConfig holds S3OutputPath and S3FailurePath: botocore sagemaker service-2.json), else ``real-time``."""
    asynchronous = config.get("AsyncInferenceConfig")
    if not asynchronous:
        return {"mode": "real-time"}
    output = asynchronous.get("OutputConfig") or {}
    return {"mode": "async", "output_path": output.get("S3OutputPath"), "failure_path": output.get("S3FailurePath")}


def async_backlog(cloudwatch: Any, endpoint: str, now: dt.datetime) -> tuple[float | None, str]:
    """(requests queued or in progress, when that was measured) of an asynchronous endpoint: the latest 1-minute
    Average of ApproximateBacklogSize in the last 5 minutes. Read-only and never fatal: a failed read or no
    datapoint is ``(None, "unknown (why)")``."""
    try:
        answer = cloudwatch.get_metric_statistics(
            Namespace="AWS/SageMaker",
            MetricName=BACKLOG_METRIC,
            Dimensions=[{"Name": "EndpointName", "Value": endpoint}],
            StartTime=now - BACKLOG_WINDOW,
            EndTime=now,
            Period=BACKLOG_PERIOD_S,
            Statistics=["Average"],
        )
    except Exception as error:  # denied, throttled, no connection: the queue is unknown, the report goes on
        return None, f"unknown (GetMetricStatistics {BACKLOG_METRIC}: {_error_of(error)[0]})"
    points = sorted(answer.get("Datapoints", []), key=lambda p: p["Timestamp"])
    if not points or points[-1].get("Average") is None:
        return None, f"unknown (no {BACKLOG_METRIC} datapoint in the last 5 minutes)"
    latest = points[-1]
    when = latest["Timestamp"].astimezone(dt.UTC) if latest["Timestamp"].tzinfo else latest["Timestamp"]
    return float(latest["Average"]), f"{BACKLOG_METRIC}, average of the minute from {when:%H:%M} UTC"


def _instance_types(variant: dict[str, Any]) -> str | None:
    """A config variant's InstanceType, or its InstancePools' types by Priority (lowest first, tried first:
    ProductionVariant.InstancePools, botocore sagemaker service-2.json)."""
    if variant.get("InstanceType"):
        return str(variant["InstanceType"])
    pools = sorted(variant.get("InstancePools") or [], key=lambda p: p.get("Priority", 0))
    return " or ".join(str(p["InstanceType"]) for p in pools) or None


def components_on(sagemaker: Any, endpoint: str) -> list[Component]:
    found = []
    for summary in _pages(sagemaker, "list_inference_components", "InferenceComponents", EndpointNameEquals=endpoint):
        name = summary["InferenceComponentName"]
        component = Component(name=name, endpoint=endpoint, status=str(summary.get("InferenceComponentStatus", "")))
        try:
            detail = sagemaker.describe_inference_component(InferenceComponentName=name)
        except Exception as error:
            if _gone(error):  # deleted since it was listed
                continue
            raise AwsFailure(f"DescribeInferenceComponent {name}: {_error_of(error)[0]}") from None
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
        code = _error_of(error)[0]
        # HeadBucket has no body: a missing bucket is HTTP 404, which botocore reports as code "404" (S3 API
        # reference, HeadBucket: "404 Not Found"); NoSuchBucket and NotFound are the same answer from other clients.
        if code in ("404", "NoSuchBucket", "NotFound"):
            return None
        raise AwsFailure(f"HeadBucket {bucket}: {code}") from None
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
    extra_stacks: list[str] | None = None,
    now: dt.datetime | None = None,
) -> Report:
    now = now or dt.datetime.now(dt.UTC)
    identity = _call("GetCallerIdentity", clients["sts"].get_caller_identity)
    account = str(identity["Account"])
    region = str(clients["sagemaker"].meta.region_name)
    stacks, untagged = app_stacks(clients["cloudformation"], stack, extra_stacks or [])
    report = Report(
        stack=stack,
        account=account,
        region=region,
        stack_status=next((s.status for s in stacks if s.name == stack), None),
        stacks=stacks,
        untagged=untagged,
    )
    held, report.defined = stack_resources(clients["cloudformation"], stacks)
    for name in endpoint_names(clients["sagemaker"], clients["tagging"], stack, extra_endpoints or [], held):
        endpoint = describe_endpoint(clients["sagemaker"], name)
        if endpoint is None:
            continue
        if endpoint.mode == "async":
            endpoint.backlog, endpoint.backlog_note = async_backlog(clients["cloudwatch"], name, now)
        report.endpoints.append(endpoint)
        report.components.extend(components_on(clients["sagemaker"], name))
    bucket = bucket or app_bucket_name(stack, account, region)
    report.jobs = staging_jobs(clients["sagemaker"], bucket)
    kept = bucket_kept(clients["s3"], clients["cloudwatch"], bucket, account, now)
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
    for other in (s for s in report.stacks if s.name != report.stack):
        write(f"  and stack {other.name}: {other.status}\n")
    for name in report.untagged:
        write(f"  stack {name} is named like this app's but carries no {APP_TAG} tag: not read (--stack {name})\n")
    write("billing by the hour:\n")
    if not report.compute:
        write("  nothing: no endpoint, inference component or staging job\n")
    for e in report.endpoints:
        write(f"  endpoint {e.name}: {e.status}" + (" (async)" if e.mode == "async" else "") + "\n")
        if e.mode == "async":
            failures = f", failures to {e.failure_path}" if e.failure_path else ""
            write(f"    answers to {e.output_path or 'an unknown path'}{failures}\n")
            queued = "" if e.backlog is None else f"{e.backlog:g} requests "
            write(f"    queue: {queued}({e.backlog_note})\n" if queued else f"    queue: {e.backlog_note}\n")
        for v in e.variants:
            count = f"{_known(v.current_instances)} of {_known(v.desired_instances)}"
            write(f"    variant {v.name}: {v.instance_type or 'instance type unknown'} x {count} instances\n")
            if v.pools:
                write("      instance pools: " + ", ".join(f"{t} x {_known(n)}" for t, n in v.pools.items()) + "\n")
        for c in (c for c in report.components if c.endpoint == e.name):
            copies = f"{_known(c.current_copies)} of {_known(c.desired_copies)}"
            write(f"    inference component {c.name}: {c.status}, copies {copies}\n")
    for j in report.jobs:
        write(f"  staging job {j.name}: {j.status}, {j.instance_type} x {j.instances}, writing {j.target}\n")
    if report.defined:
        write("defined by the stacks, not billing (cdk destroy deletes them):\n")
        for d in report.defined:
            write(f"  {d.kind} {d.name} (stack {d.stack})\n")
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
        "--stack",
        action="append",
        default=[],
        help=f"a stack of the app deployed before it carried the {APP_TAG} tag, by its exact name (repeatable)",
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
            extra_stacks=args.stack,
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
        out.write(json.dumps({**asdict(report), "compute_left": report.compute}, indent=2) + "\n")
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
