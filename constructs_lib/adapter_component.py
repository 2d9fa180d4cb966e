"""A LoRA adapter served as an adapter inference component on its base model's component.

SageMaker loads the adapter into the base component's running container and lets clients invoke it by its own
component name; it uses the base component's compute, so it sets no ComputeResourceRequirements and no copy count
(API reference InferenceComponentSpecification: BaseInferenceComponentName, "Omit this parameter [ComputeResource
Requirements] if your request is meant to create an adapter inference component";
https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-adapt.html).
"""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from .engines import engine_without_adapters
from .hosting import grant_invoke_arns, openai_base_url
from .image_check import ServingImageCheck
from .inference_component import InferenceComponent
from .monitoring import AlarmThresholds, Monitor, Watched
from .monitoring.metrics import ComponentMetrics, metrics_settings
from .names import COMPONENT_NAME, matches
from .problems import construct_subject, refuse
from .smoke_test import EndpointSmokeTest, _endpoint_props
from .staged_checkpoint import StagedCheckpoint

# InferenceComponentContainerSpecification.ArtifactUrl: "This path must point to a single gzip compressed tar
# archive (.tar.gz suffix)" (SageMaker API reference).
ARCHIVE_SUFFIX = ".tar.gz"
# Bucket names: 3-63 lowercase letters, digits, dots and hyphens (S3 bucket naming rules); then one object key.
ARCHIVE_URI = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>[^\s\x00-\x1f\x7f]+\.tar\.gz)")


def parse_archive_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key.tar.gz`` -> (bucket, key); ValueError otherwise."""
    m = ARCHIVE_URI.fullmatch(uri)
    if not m:
        raise ValueError(
            f"an adapter component's ArtifactUrl must be one gzip compressed tar archive: s3://<bucket>/<key>"
            f"{ARCHIVE_SUFFIX} (SageMaker API reference InferenceComponentContainerSpecification)"
        )
    return m.group("bucket"), m.group("key")


def staged_adapter_problems(artifact: StagedCheckpoint, base: InferenceComponent) -> list[str]:
    """A staged adapter must be one packed archive, staged for ``base``'s model and a rank ``base`` serves."""
    where = f"artifact={artifact.node.path}"
    if not artifact.pack:
        return [f"{where} is not packed: an adapter component's ArtifactUrl is one .tar.gz; allowed: pack=True"]
    problems = []
    base_model = getattr(base.model_source, "repo_id", None) or None
    wanted = artifact.adapter_base_model_id
    # Hub repository ids are case-insensitive (huggingface.co/Qwen/qwen3-4b serves Qwen/Qwen3-4B): compared so.
    if wanted and base_model and not cdk.Token.is_unresolved(base_model) and wanted.lower() != base_model.lower():
        problems.append(
            f"{where} is staged for adapter_base_model_id={wanted!r}, but base={base.node.path} serves {base_model!r}; "
            "allowed: an adapter trained on the base's model"
        )
    served = base.max_lora_rank
    if artifact.max_lora_rank and served and artifact.max_lora_rank > served:
        problems.append(
            f"{where} is checked against max_lora_rank={artifact.max_lora_rank}, but base={base.node.path} serves "
            f"LoRA ranks up to {served} ({base.engine.adapters['max_lora_rank_key']}); allowed: max_lora_rank <= "
            f"{served}, or raise {base.engine.adapters['max_lora_rank_key']} in the base's engine_env"
        )
    return problems


def artifact_problems(key: str, artifact_url: str) -> list[str]:
    """An adapter's artifact must be one ``.tar.gz`` object in S3."""
    if cdk.Token.is_unresolved(artifact_url):
        return []
    try:
        parse_archive_uri(artifact_url)
    except ValueError as e:
        return [f"{key}={artifact_url!r}: {e}"]
    return []


class AdapterComponent(ComponentMetrics, Construct):
    """A LoRA adapter (one ``.tar.gz`` in S3) as an adapter inference component on ``base``.

    Minimal use: ``AdapterComponent(self, "Sql", base=component, artifact_url="s3://b/adapters/sql.tar.gz")``, or
    ``artifact=StagedCheckpoint(self, "SqlAdapter", repo_id=..., pack=True, ...)`` for an adapter staged from the Hub.

    It wires itself: LoRA is enabled on ``base`` (``InferenceComponent.enable_adapters``), the base's role may read
    the archive, and with ``artifact`` the component waits for the staged archive and is refused at synth when the
    archive was staged for another base model or for a larger rank than the base serves.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        base: InferenceComponent,
        artifact_url: str | None = None,
        artifact: StagedCheckpoint | None = None,
        component_name: str | None = None,
    ) -> None:
        """
        :param base: the base model's component; its engine must serve adapters (engines.json ``adapters``). What
            the engine needs for them (vLLM: ``SM_VLLM_ENABLE_LORA``, runtime adapter loading) is added to its
            Model's environment; a value the user gave that sets the same wins, one that switches it off
            (``SM_VLLM_ENABLE_LORA: false``) is refused.
        :param artifact_url: ``s3://bucket/key.tar.gz``, the adapter's files (adapter_config.json and weights);
            read access is granted to the base component's role, whose container loads it. Give this or
            ``artifact``. Default: none.
        :param artifact: the adapter staged from the Hub, packed (``StagedCheckpoint(..., pack=True)``): its
            archive is the ArtifactUrl, the base's role may read it, and the component is created once every byte
            is verified. With the checkpoint's ``adapter_base_model_id`` and ``max_lora_rank`` (what the staging job
            checks the adapter's adapter_config.json against), a base of another model or a base serving a smaller
            rank is refused at synth. Default: none.
        :param component_name: the name clients pass as ``InferenceComponentName``. Default: a stable name
            unique to this construct.
        """
        super().__init__(scope, id)
        name = component_name or cdk.Names.unique_resource_name(self, max_length=63, separator="-")
        problems = []
        if (artifact_url is None) == (artifact is None):
            problems.append(
                "give one of artifact_url= (an s3://.../*.tar.gz) and artifact= (a packed StagedCheckpoint)"
            )
        elif artifact is not None:
            problems += staged_adapter_problems(artifact, base)
        else:
            problems += artifact_problems("artifact_url", artifact_url or "")
        if not base.engine.adapters:
            problems.append(engine_without_adapters(base.engine.name))
        else:
            problems += [f"base={base.node.path} {p}" for p in base.adapter_setting_problems()]
        if len(base.endpoint.instance_types) > 1:
            # The adapter names its base in Specification.BaseInferenceComponentName, which the per-type
            # Specifications entries do not accept ("adapter inference components are supported only on the
            # singular Specification": cfn-lint schema of AWS::SageMaker::InferenceComponent,
            # InferenceComponentSpecificationForInstanceType); whether SageMaker loads an adapter into a base created
            # with Specifications is not documented, so it is refused here rather than failing the deploy.
            problems.append(
                f"base={base.node.path} is on an endpoint with instance_pools={base.endpoint.instance_types[1:]!r}: "
                "an adapter component needs a base created with the singular Specification (one instance type); "
                "allowed: a base on an endpoint without instance_pools"
            )
        if not cdk.Token.is_unresolved(name) and not matches(COMPONENT_NAME, name):
            problems.append(
                f"component_name={name!r}: not a valid inference component name; allowed: 1-63 letters, digits and "
                "hyphens, starting and ending with a letter or digit"
            )
        refuse(construct_subject("AdapterComponent", self), problems)
        base.enable_adapters()
        if artifact is not None:
            artifact_url = artifact.archive_uri
            artifact.grant_read_archive(base.role)  # the base container downloads it with its role
        assert artifact_url is not None  # one of the two, checked above
        self.base = base
        self.endpoint = base.endpoint
        self.engine = base.engine
        self.inference_component_name = name
        self.artifact_url = artifact_url
        bucket, key = (None, None) if cdk.Token.is_unresolved(artifact_url) else parse_archive_uri(artifact_url)
        if bucket is not None:
            # The base container downloads the archive with the base model's execution role.
            base.role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["s3:GetObject"],
                    resources=[
                        cdk.Stack.of(self).format_arn(
                            service="s3", region="", account="", resource=bucket, resource_name=key
                        )
                    ],
                )
            )
        self.component = sagemaker.CfnInferenceComponent(
            self,
            "Resource",
            endpoint_name=base.endpoint.endpoint_name,
            inference_component_name=name,
            specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                base_inference_component_name=base.inference_component_name,
                container=sagemaker.CfnInferenceComponent.InferenceComponentContainerSpecificationProperty(
                    artifact_url=artifact_url
                ),
            ),
        )
        # The base is named literally (no token): the adapter must wait for it, and go before it on delete.
        self.component.node.add_dependency(base.component)
        self.component.node.add_dependency(base.role)
        if artifact is not None:  # the archive exists once the staging job verified every byte
            self.component.node.add_dependency(artifact.dependable)
            if (check := ServingImageCheck.of(base.model)) is not None:
                check.precedes(artifact)  # its base's image, which serves it, is checked before it is staged
        self.node.default_child = self.component
        self.monitor = Monitor(self)
        base.adapters.append(self)  # the endpoint's dashboard shows it under its base

    def watched(self) -> Watched:
        """What its monitor watches: this adapter's invocations (its base's copies serve it: no GPU of its own)."""
        enhanced, publish_s = metrics_settings(self.endpoint.endpoint_config)
        return Watched(
            kind="adapter",
            name=self.inference_component_name,
            title=self.node.id,
            enhanced=enhanced,
            publish_s=publish_s,
        )

    @property
    def alarms(self) -> list[cloudwatch.Alarm]:
        """The alarms of ``add_alarms`` (none before it)."""
        return self.monitor.alarms

    def add_alarms(
        self, thresholds: AlarmThresholds | None = None, *, topic: sns.ITopic | None = None
    ) -> list[cloudwatch.Alarm]:
        """Alarms on this adapter's 5xx errors and p99 model latency (``errors_5xx_percent``, ``p99_latency_ms``;
        GPU memory and capacity are its base's), children ``Alarms/<Name>``."""
        return self.monitor.add_alarms(thresholds, topic=topic)

    @property
    def inference_component_arn(self) -> str:
        return self.component.attr_inference_component_arn

    def grant_invoke(self, grantee: iam.IGrantable, *, bearer_token: bool = False) -> iam.Grant:
        """Let ``grantee`` invoke this adapter (InvokeEndpoint with its InferenceComponentName), streamed or not.

        As ``InferenceComponent.grant_invoke``: the endpoint's ARN and this adapter component's, both resource types of
        ``sagemaker:InvokeEndpoint`` and ``InvokeEndpointWithResponseStream`` (IAM service authorization reference);
        neither the base component nor other adapters are included.

        :param bearer_token: also allow ``sagemaker:CallWithBearerToken`` (on ``*``) for the OpenAI-compatible path
            (``openai_base_url``). Default: no.
        """
        return grant_invoke_arns(
            grantee, [self.endpoint.endpoint_arn, self.inference_component_arn], bearer_token=bearer_token
        )

    @property
    def openai_base_url(self) -> str:
        """This adapter's OpenAI-compatible base URL: the endpoint's path naming the adapter's component, the name
        clients invoke the adapter by (realtime-endpoints-adapt)."""
        return openai_base_url(self.endpoint.endpoint_name, self.inference_component_name)

    def smoke_test(self, scope: Construct, id: str, **options: Any) -> EndpointSmokeTest:
        """A smoke test that invokes this adapter by its component name (the base's model is not checked: an
        adapter component names no model of its own)."""
        endpoint = self.endpoint
        return EndpointSmokeTest(
            scope,
            id,
            **_endpoint_props(endpoint),
            inference_component_name=self.inference_component_name,
            inference_component_arn=self.inference_component_arn,
            stream_format=options.pop("stream_format", self.engine.stream_format),
            fingerprint=[
                self.component,
                self.base.component,
                endpoint.endpoint_config,
                *options.pop("fingerprint", ()),
            ],
            depends_on=[endpoint, self, *options.pop("depends_on", ())],
            **options,
        )
