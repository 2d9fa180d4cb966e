"""Asynchronous inference: a queue in front of the model, answers in S3, news on SNS, scaling on the backlog.

``GpuEndpoint(async_inference=AsyncInference(...))`` gives the endpoint config an ``AsyncInferenceConfig``
(CreateEndpointConfig API: ``ClientConfig``, ``OutputConfig`` with ``S3OutputPath``, ``S3FailurePath``,
``KmsKeyId`` and ``NotificationConfig``); requests then go through ``InvokeEndpointAsync`` only and may take up to an
hour each (``InvocationTimeoutSeconds`` 1-3600, botocore sagemaker-runtime model), where a real-time invocation
must answer within 60 seconds (InvokeEndpoint API reference).

The rules (``AsyncInference.problems``, ``engine_timeout_problems``) take plain values, so the app's configuration
loader checks the same things before any construct exists; ``AsyncQueue`` is what ``GpuEndpoint`` builds from them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from .keys import WRITE, grant_bucket_key
from .nag import acknowledge_wildcard

if TYPE_CHECKING:
    from .engines import EngineSpec

# AsyncInferenceClientConfig.MaxConcurrentInvocationsPerInstance: 1-1000 (botocore sagemaker model); left out,
# "SageMaker chooses an optimal value" (API reference AsyncInferenceClientConfig).
MAX_CONCURRENT_INVOCATIONS_RANGE = (1, 1000)
# InvokeEndpointAsync InvocationTimeoutSeconds: 1-3600, default 900 (botocore sagemaker-runtime model).
INVOCATION_TIMEOUT_RANGE_S = (1, 3600)
DEFAULT_INVOCATION_TIMEOUT_S = 900
# AsyncInferenceNotificationConfig.IncludeInferenceResponseIn: AsyncNotificationTopicTypes (botocore sagemaker model).
NOTIFICATION_TOPIC_TYPES = ("SUCCESS_NOTIFICATION_TOPIC", "ERROR_NOTIFICATION_TOPIC")
# DestinationS3Uri: at most 512 characters (botocore sagemaker model); the prefix is ours to choose within it.
MAX_S3_URI = 512
PREFIX = re.compile(r"[A-Za-z0-9!_.*'()/-]+/")


@dataclass(frozen=True)
class AsyncInference:
    """How an asynchronous endpoint queues, answers and announces (``GpuEndpoint(async_inference=...)``).

    Every field has a default: ``AsyncInference()`` writes answers under ``async-inference/<endpoint>/`` of the
    model's bucket, creates both topics and lets SageMaker choose the concurrency.
    """

    #: where answers and failures are written. Default: the model's bucket (``S3ModelData.bucket``,
    #: ``StagedCheckpoint.bucket``); a model source without one needs this.
    bucket: s3.IBucket | None = None
    #: the key prefix in that bucket, ending in ``/``: answers go below ``<prefix>output/``, failures below
    #: ``<prefix>failure/``, and large requests may be uploaded below ``<prefix>input/``. Default:
    #: ``async-inference/<endpoint name>/``.
    prefix: str | None = None
    #: ``MaxConcurrentInvocationsPerInstance``, 1-1000: requests SageMaker hands one instance at once. Default: the
    #: engine's batch size (``max_num_seqs``, or its flag in ``engine_env``) when given, else SageMaker's choice.
    max_concurrent_invocations_per_instance: int | None = None
    #: ``SuccessTopic``. Default: a topic created here (SSE with the AWS-managed ``alias/aws/sns`` key, SSL only).
    success_topic: sns.ITopic | None = None
    #: ``ErrorTopic``. Default: created, as the success topic.
    error_topic: sns.ITopic | None = None
    #: the key of a given topic (its server-side encryption): the endpoint's role may use it to publish. Default:
    #: none (a created topic's AWS-managed key needs no grant; a given topic without SSE neither).
    topic_key: kms.IKey | None = None
    #: ``OutputConfig.KmsKeyId``: the key SageMaker encrypts answers with. Default: the bucket's own encryption
    #: (its ``encryption_key`` when it has one, which the role is then granted).
    output_key: kms.IKey | None = None
    #: ``IncludeInferenceResponseIn``: which notifications carry the answer itself. Default: none (the message names
    #: the output object; the answer may hold what a subscriber should not see).
    include_response_in: Sequence[str] = field(default_factory=tuple)
    #: the ``InvocationTimeoutSeconds`` clients send (the smoke test does), 1-3600 s; it is checked against the
    #: engine's own request timeout at synth. Default: the API's, 900 s.
    invocation_timeout: cdk.Duration | None = None

    def problems(self, owner: str = "") -> list[str]:
        """Every problem with these settings, each named by its field (after ``owner``, e.g. ``async_inference.``)."""
        problems = []
        prefix = self.prefix
        if prefix is not None and (not PREFIX.fullmatch(prefix) or prefix.startswith("/") or "//" in prefix):
            problems.append(
                f"{owner}prefix={prefix!r}: allowed: a key prefix ending in '/', of letters, digits and !_.*'()/- "
                "(no leading '/', no empty segment)"
            )
        low, high = MAX_CONCURRENT_INVOCATIONS_RANGE
        count = self.max_concurrent_invocations_per_instance
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not low <= count <= high):
            problems.append(
                f"{owner}max_concurrent_invocations_per_instance={count!r}: allowed: a whole number {low}-{high} "
                "(AsyncInferenceClientConfig.MaxConcurrentInvocationsPerInstance)"
            )
        low, high = INVOCATION_TIMEOUT_RANGE_S
        if self.invocation_timeout is not None:
            seconds = self.invocation_timeout.to_seconds()
            if seconds != int(seconds) or not low <= seconds <= high:
                problems.append(
                    f"{owner}invocation_timeout={seconds:g} s: allowed: {low}-{high} whole seconds "
                    "(InvokeEndpointAsync InvocationTimeoutSeconds)"
                )
        unknown = [t for t in self.include_response_in if t not in NOTIFICATION_TOPIC_TYPES]
        if unknown:
            problems.append(
                f"{owner}include_response_in={list(self.include_response_in)!r}: allowed: "
                f"{', '.join(NOTIFICATION_TOPIC_TYPES)}"
            )
        return problems

    @property
    def invocation_timeout_s(self) -> int:
        if self.invocation_timeout is None:
            return DEFAULT_INVOCATION_TIMEOUT_S
        return int(self.invocation_timeout.to_seconds())


def concurrency_of(engine: EngineSpec, max_num_seqs: int | None, engine_env: Mapping[str, Any] | None) -> int | None:
    """The engine's batch size (``max_num_seqs`` or its flag in ``engine_env``: engines.json ``derived_keys``), at
    most 1000, or None when neither is given (SageMaker chooses)."""
    value: Any = max_num_seqs
    if value is None:
        for key in engine.derived_keys.get("max_num_seqs", ()):
            if engine_env and key in engine_env:
                value = engine_env[key]
                break
    try:
        count = int(str(value)) if value is not None else None
    except ValueError:
        return None  # the engine's own checks refuse a flag that is not a number
    if count is None or count < 1:
        return None
    return min(count, MAX_CONCURRENT_INVOCATIONS_RANGE[1])


def engine_timeout_problems(
    engine: EngineSpec,
    engine_env: Mapping[str, Any] | None,
    container_env: Mapping[str, Any] | None,
    invocation_timeout_s: float,
    *,
    key: str = "invocation_timeout",
) -> list[str]:
    """Why the engine's own request timeout (engines.json ``request_timeout``: its variable, default and source)
    would cut a request before ``invocation_timeout_s``, or nothing."""
    spec = engine.request_timeout
    if not spec:
        return []
    env = {**(container_env or {}), **(engine_env or {})}
    variable = spec["env"]
    given = env.get(variable)
    if given is None and spec.get("default_s") is None:
        return []  # off unless set
    try:
        seconds = float(str(given)) if given is not None else float(spec["default_s"])
    except ValueError:
        return [f"{variable}={given!r}: allowed: a number of seconds (the engine's request timeout)"]
    off = spec.get("off_at_or_below")
    if (off is not None and seconds <= off) or seconds >= invocation_timeout_s:
        return []
    where = f"{variable}={given}" if given is not None else f"{variable} unset (its default, {seconds:g} s)"
    return [
        f"{key}={invocation_timeout_s:g} s is longer than engine={engine.name!r}'s own request timeout, {where}: "
        f"the container would end a long request first ({spec['source']}); allowed: {key} at most {seconds:g} s, "
        f"or {variable} of at least {invocation_timeout_s:g} in the environment"
    ]


class AsyncQueue(Construct):
    """The S3 paths, topics and grants of one asynchronous endpoint (``GpuEndpoint`` makes it as ``Async``).

    Its role (the endpoint's execution role) may write below the output and failure paths only, read below the
    input path (requests sent by ``InputLocation``), and publish to the two topics only ("Create an asynchronous
    endpoint" prerequisites, SageMaker developer guide async-inference-create-endpoint-prerequisites.html: the
    execution role needs s3:PutObject on the output location, s3:GetObject on the input and sns:Publish).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        settings: AsyncInference,
        bucket: s3.IBucket,
        endpoint_name: str,
        role: iam.IRole,
        max_concurrent: int | None,
        acknowledged: bool,
    ) -> None:
        super().__init__(scope, id)
        self.settings = settings
        self.bucket = bucket
        self.prefix = settings.prefix or f"async-inference/{endpoint_name}/"
        self.output_prefix = f"{self.prefix}output"
        self.failure_prefix = f"{self.prefix}failure"
        self.input_prefix = f"{self.prefix}input"
        self.output_path = f"s3://{bucket.bucket_name}/{self.output_prefix}"
        self.failure_path = f"s3://{bucket.bucket_name}/{self.failure_prefix}"
        self.max_concurrent = max_concurrent
        self.invocation_timeout_s = settings.invocation_timeout_s
        self._expiring: set[str] = set()
        # SSE with the AWS-managed key (AwsSolutions-SNS2), SSL only (AwsSolutions-SNS3). The endpoint's role is the
        # publisher, an IAM principal of this account, which the alias/aws/sns key policy lets use the key through
        # SNS; only AWS service principals need a customer-managed key (SNS developer guide, sns-key-management,
        # "Enable compatibility between event sources from AWS services and encrypted topics").
        managed = kms.Alias.from_alias_name(self, "SnsManagedKey", "alias/aws/sns")
        self.success_topic = settings.success_topic or sns.Topic(
            self, "SuccessTopic", master_key=managed, enforce_ssl=True, display_name=f"{endpoint_name} answers"
        )
        self.error_topic = settings.error_topic or sns.Topic(
            self, "ErrorTopic", master_key=managed, enforce_ssl=True, display_name=f"{endpoint_name} failures"
        )
        stack = cdk.Stack.of(self)
        written = [
            bucket.arn_for_objects(f"{self.output_prefix}/*"),
            bucket.arn_for_objects(f"{self.failure_prefix}/*"),
        ]
        # s3:AbortMultipartUpload beside PutObject: a large answer goes up in parts (the prerequisites' policy lists
        # both; its s3:ListBucket on object ARNs grants nothing, ListBucket being a bucket action, so none here).
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:AbortMultipartUpload", "s3:PutObject"], resources=written)
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{self.input_prefix}/*")])
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["sns:Publish"], resources=[self.success_topic.topic_arn, self.error_topic.topic_arn]
            )
        )
        key = settings.output_key or bucket.encryption_key
        if key is not None:
            grant_bucket_key(role, key, scope=self, actions=WRITE)
        if settings.topic_key is not None:
            # Publishing to an SSE topic: kms:GenerateDataKey* and kms:Decrypt for the publisher, through SNS (SNS
            # developer guide, sns-key-management "Allow a user to send messages to a topic with SSE").
            iam.Grant.add_to_principal(
                grantee=role,
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resource_arns=[settings.topic_key.key_arn],
                conditions={
                    "StringEquals": {
                        "kms:ViaService": f"sns.{stack.region}.{stack.url_suffix}",
                        "kms:CallerAccount": stack.account,
                    }
                },
            )
            if acknowledged:
                acknowledge_wildcard(
                    role,
                    action="kms:GenerateDataKey*",
                    reason="The SNS developer guide's policy for a publisher to a topic with SSE names "
                    "kms:GenerateDataKey*; limited to the topics' key and to requests made through SNS.",
                )
        if acknowledged:
            for path, why in (
                (written[0], "SageMaker writes each answer as a new object it names itself"),
                (written[1], "SageMaker writes each failure as a new object it names itself"),
                (bucket.arn_for_objects(f"{self.input_prefix}/*"), "SageMaker reads a request sent by InputLocation"),
            ):
                acknowledge_wildcard(role, resource=path, reason=f"{why}; the wildcard stops at that prefix.")

    def config_property(self) -> sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty:
        """The endpoint config's ``AsyncInferenceConfig``."""
        key = self.settings.output_key
        return sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty(
            client_config=sagemaker.CfnEndpointConfig.AsyncInferenceClientConfigProperty(
                max_concurrent_invocations_per_instance=self.max_concurrent
            )
            if self.max_concurrent is not None
            else None,
            output_config=sagemaker.CfnEndpointConfig.AsyncInferenceOutputConfigProperty(
                s3_output_path=self.output_path,
                s3_failure_path=self.failure_path,
                kms_key_id=key.key_arn if key is not None else None,
                notification_config=sagemaker.CfnEndpointConfig.AsyncInferenceNotificationConfigProperty(
                    success_topic=self.success_topic.topic_arn,
                    error_topic=self.error_topic.topic_arn,
                    include_inference_response_in=list(self.settings.include_response_in) or None,
                ),
            ),
        )

    def expire_smoke_answers(self, extension: str) -> None:
        """On a bucket this app creates, expire what the smoke test may leave below ``<output>/<extension>/`` after a
        day (S3 lifecycle Expiration; an imported bucket's rules are its owner's, so nothing is added there)."""
        prefix = f"{self.output_prefix}/{extension}/"
        if isinstance(self.bucket, s3.Bucket) and prefix not in self._expiring:
            # Rule ids are unique per bucket (PutBucketLifecycleConfiguration LifecycleRule.ID, at most 255).
            self.bucket.add_lifecycle_rule(id=f"expire-{prefix}"[:255], prefix=prefix, expiration=cdk.Duration.days(1))
            self._expiring.add(prefix)

    def grant_smoke_test(self, role: iam.IRole, endpoint_arn: str, extension: str) -> None:
        """What the smoke test needs: submit, then read and delete its own answers (below ``<output>/<extension>/``,
        InvokeEndpointAsync S3OutputPathExtension) and the failures (no source says the extension applies to a
        failure's path, so the failure prefix is granted; failures hold SageMaker's reason, not answers)."""
        iam.Grant.add_to_principal(
            grantee=role, actions=["sagemaker:InvokeEndpointAsync"], resource_arns=[endpoint_arn]
        )
        mine = [
            self.bucket.arn_for_objects(f"{self.output_prefix}/{extension}/*"),
            self.bucket.arn_for_objects(f"{self.failure_prefix}/*"),
        ]
        iam.Grant.add_to_principal(grantee=role, actions=["s3:DeleteObject", "s3:GetObject"], resource_arns=mine)
        key = self.settings.output_key or self.bucket.encryption_key
        if key is not None:
            grant_bucket_key(role, key, scope=self, actions=("kms:Decrypt",))
        for path in mine:
            acknowledge_wildcard(
                role,
                resource=path,
                reason="The smoke test reads and deletes the answer or failure of the request it submitted; "
                "SageMaker names each object itself, so the grant stops at the prefix.",
            )

    def grant_invoke(self, grantee: iam.IGrantable, endpoint_arn: str) -> iam.Grant:
        """``sagemaker:InvokeEndpointAsync`` on the endpoint, reading answers and failures, and uploading large
        requests below the input path (S3 ``InputLocation``)."""
        grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["sagemaker:InvokeEndpointAsync"], resource_arns=[endpoint_arn]
        )
        read = [
            self.bucket.arn_for_objects(f"{self.output_prefix}/*"),
            self.bucket.arn_for_objects(f"{self.failure_prefix}/*"),
        ]
        grant = grant.combine(iam.Grant.add_to_principal(grantee=grantee, actions=["s3:GetObject"], resource_arns=read))
        upload = [self.bucket.arn_for_objects(f"{self.input_prefix}/*")]
        grant = grant.combine(
            iam.Grant.add_to_principal(grantee=grantee, actions=["s3:PutObject"], resource_arns=upload)
        )
        key = self.settings.output_key or self.bucket.encryption_key
        if key is not None:
            grant = grant.combine(grant_bucket_key(grantee, key, scope=self, actions=WRITE))
        return grant
