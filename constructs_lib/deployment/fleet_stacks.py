"""A fleet's stacks: the app's model bucket, then one stack per endpoint (fleet.py parses the map)."""

from __future__ import annotations

import dataclasses

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from constructs import Construct

from constructs_lib import (
    AdapterComponent,
    AlarmTopic,
    InferenceComponent,
    ModelBucket,
    StagedCheckpoint,
    app_bucket_name,
)
from endpoint_client.outputs import APP_OUTPUT

from .config import ConfigError, DeploymentConfig
from .fleet import Adapter, Fleet, FleetDeployment, FleetEndpoint, claimed_ids, pascal
from .llm_endpoint_stack import LlmEndpointStack
from .observability import thresholds_of, update_policy_of
from .parsers import APP_TAG


class ModelBucketStack(cdk.Stack):
    """The one model bucket of an app's fleet: every endpoint stack stages into it (and reuses it by name)."""

    def __init__(self, scope: Construct, id: str, *, app: str, kms_key_arn: str | None = None, **kwargs) -> None:
        super().__init__(scope, id, description=f"Model bucket shared by the {app} fleet (retained)", **kwargs)
        cdk.Tags.of(self).add(APP_TAG, app)  # as every endpoint stack of the app (parsers.py APP_TAG)
        # bucket_kms_key_arn (scope "app"): the endpoint stacks reuse the bucket with the same key.
        key = kms.Key.from_key_arn(self, "BucketKey", kms_key_arn) if kms_key_arn else None
        self.bucket = ModelBucket(self, "ModelBucket", bucket_name=app_bucket_name(app), encryption_key=key).bucket
        cdk.CfnOutput(self, "ModelBucketName", value=self.bucket.bucket_name, description="Bucket of staged models")
        cdk.CfnOutput(self, APP_OUTPUT, value=app, description="The app (stack_name) of this stack")


def build_fleet(app: cdk.App, fleet: Fleet) -> list[cdk.Stack]:
    """The bucket stack (when some deployment stages and the app names no bucket) and one stack per endpoint,
    each deployable alone: ``cdk deploy <app>-<endpoint>`` deploys the bucket stack first if needed."""
    stacks: list[cdk.Stack] = []
    bucket_stack = None
    if fleet.stages and not (fleet.config.model_bucket or fleet.config.reuse_model_bucket):
        bucket_stack = ModelBucketStack(
            app, f"{fleet.app}-models", app=fleet.app, kms_key_arn=fleet.config.bucket_kms_key_arn
        )
        stacks.append(bucket_stack)

    def staged_into_app_bucket(config: DeploymentConfig) -> DeploymentConfig:
        # The bucket stack creates the bucket; endpoint stacks find it by its fixed name, as after a destroy.
        return dataclasses.replace(config, reuse_model_bucket=True) if bucket_stack else config

    taken: list[str] = []
    for endpoint in fleet.endpoints:
        first, *packed = endpoint.deployments
        stack = LlmEndpointStack(
            app,
            endpoint.stack_name,
            config=staged_into_app_bucket(first.config),
            bucket_app=fleet.app,
            hub_endpoints=[d.config.hf_endpoint for d in endpoint.deployments],
        )
        taken += _taken_by_the_stack(stack, endpoint)
        if taken:
            continue  # refused below, with every other stack's, before anything is synthesized
        if bucket_stack is not None:
            stack.add_stack_dependency(bucket_stack)
        _deployment_outputs(stack, first, stack.component)
        _add_adapters(stack, stack, first, stack.component, staged_into_app_bucket(first.config))
        for deployment in packed:
            scope = Construct(stack, pascal(deployment.name))
            config = staged_into_app_bucket(deployment.config)
            model = stack.model_source(scope, config)
            preflight = stack._preflight(config, model, scope)
            component = stack.add_model_component(
                stack.endpoint, config, preflight.checked_model, scope, id=f"{pascal(deployment.name)}Model"
            )
            _guard(stack, config, component)
            if config.smoke_test:
                stack._smoke_test(config, component, scope)
            _deployment_outputs(stack, deployment, component)
            _add_adapters(stack, scope, deployment, component, config)
        stacks.append(stack)
    if taken:
        raise ConfigError(taken)
    return stacks


def _taken_by_the_stack(stack: LlmEndpointStack, endpoint: FleetEndpoint) -> list[str]:
    """A deployment or adapter whose construct id or output is one the endpoint stack already has for itself
    (a deployment ``endpoint`` packed as ``Endpoint``, ``region`` as the ``Region`` output): jsii would refuse the
    second child with a traceback."""
    names = [d.name for d in endpoint.deployments]
    adapters = {d.name: d.adapters for d in endpoint.deployments}
    return [
        f"{owner}: becomes the {'output' if is_output else 'construct id'} {cid!r}, which the stack "
        f"{stack.stack_name} has for itself ({stack.node.find_child(cid).node.path}); rename it"
        for cid, owner, is_output in claimed_ids(names, adapters)
        if stack.node.try_find_child(cid) is not None
    ]


def _guard(stack: LlmEndpointStack, config: DeploymentConfig, component: InferenceComponent) -> None:
    """A packed component gets what the stack's first one gets (observability.py): its own alarms on the
    stack's topic, and the rolling update policy they roll back."""
    alarms = []
    topic = stack.node.try_find_child("AlarmTopic")  # add_observability's, when alarms are on (ENDPOINT_KEYS agree)
    if config.alarms and topic is not None:
        alarms = component.add_alarms(thresholds_of(vars(config)), topic=topic.topic)
    component.apply_update_policy(update_policy_of(vars(config)), rollback_on=alarms)


def _deployment_outputs(
    stack: LlmEndpointStack, deployment: FleetDeployment, component: InferenceComponent | None
) -> None:
    # llmops/fleet_target.py finds a deployment by these keys (llmops invoke --deployment NAME).
    cdk.CfnOutput(
        stack,
        f"{pascal(deployment.name)}EndpointName",
        value=stack.endpoint.endpoint_name,
        description=f"Endpoint of deployment {deployment.name}",
    )
    if component is not None:
        cdk.CfnOutput(
            stack,
            f"{pascal(deployment.name)}InferenceComponentName",
            value=component.inference_component_name,
            description=f"Inference component of deployment {deployment.name}",
        )
    if getattr(stack.endpoint, "asynchronous", False):
        return  # a queue has no OpenAI-compatible path (InvokeEndpointAsync only)
    cdk.CfnOutput(
        stack,
        f"{pascal(deployment.name)}OpenAiBaseUrl",
        value=(component or stack.endpoint).openai_base_url,
        description=f"OpenAI-compatible base URL of deployment {deployment.name} (bearer token)",
    )


def _staged_adapter(
    stack: LlmEndpointStack, scope: Construct, config: DeploymentConfig, adapter: Adapter
) -> StagedCheckpoint:
    """A Hub adapter staged like a model (same worker, manifest, skip on rerun) into the deployment's bucket,
    packed into one .tar.gz: an adapter component's ArtifactUrl names a single archive."""
    # engines.json: the rank the engine serves unless engine_env raises it, parsed as vLLM's int() does
    rank = config.engine_spec.max_lora_rank(config.engine_env)
    base_model_id = None if config.model_s3_uri else config.model_id
    config = dataclasses.replace(
        config,
        model_id=adapter.model_id or "",
        revision=adapter.revision,
        model_s3_uri=None,
        include=adapter.include,
        exclude=(),
        gguf_file=None,
    )
    staged = stack.model_source(scope, config, pack=True, adapter_base_model_id=base_model_id, max_lora_rank=rank)
    if not isinstance(staged, StagedCheckpoint):  # a Hub adapter (model_id, no model_s3_uri) is always staged
        raise TypeError(f"adapter {adapter.model_id!r} was not staged")
    return staged


def _add_adapters(
    stack: LlmEndpointStack,
    scope: Construct,
    deployment: FleetDeployment,
    base: InferenceComponent | None,
    staging: DeploymentConfig,
) -> None:
    """``staging``: the deployment's config with the bucket its checkpoints stage into (Hub adapters too)."""
    if base is None:  # refused at parse time (adapters need component mode); never reached with adapters
        return
    config = deployment.config
    for adapter in deployment.adapters:
        holder = Construct(scope, f"Adapter{pascal(adapter.name)}Source") if adapter.model_id else None
        staged = _staged_adapter(stack, holder, staging, adapter) if holder is not None else None
        # The construct wires itself: LoRA on the base, the base's read of the archive, the wait for its staging.
        component = AdapterComponent(
            scope,
            f"Adapter{pascal(adapter.name)}",
            base=base,
            **({"artifact": staged} if staged is not None else {"artifact_url": adapter.artifact_url}),
        )
        topic = stack.node.try_find_child("AlarmTopic")  # add_observability's, when alarms are on
        if config.alarms and isinstance(topic, AlarmTopic):
            # Its own errors and latency (its base's copies serve it: GPU memory and capacity are the base's).
            component.add_alarms(thresholds_of(vars(config)), topic=topic.topic)
        if config.smoke_test:
            component.smoke_test(
                component,
                "SmokeTest",
                prompt=config.smoke_prompt,
                max_tokens=config.smoke_max_tokens,
                extra_body=config.smoke_inputs or None,
                expected_pattern=config.smoke_expected_pattern,
                budget=cdk.Duration.seconds(config.smoke_budget_s),
                # The adapter's own slo_* keys over its deployment's, if any (invoked by the adapter's component name).
                **({"load": gate} if (gate := adapter.load_gate(config)) is not None else {}),
            )
        cdk.CfnOutput(
            stack,
            f"{pascal(deployment.name)}{pascal(adapter.name)}AdapterComponentName",
            value=component.inference_component_name,
            description=f"Adapter component {adapter.name} of deployment {deployment.name} (InferenceComponentName)",
        )
        cdk.CfnOutput(
            stack,
            f"{pascal(deployment.name)}{pascal(adapter.name)}AdapterOpenAiBaseUrl",
            value=component.openai_base_url,
            description=f"OpenAI-compatible base URL of adapter {adapter.name} of deployment {deployment.name}",
        )
