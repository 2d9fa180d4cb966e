"""The default deployment: a model bucket (or a given one) and a GPU endpoint serving one model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from constructs import Construct

from constructs_lib import (
    AsyncInference,
    ComponentEndpoint,
    DeploymentPreflight,
    EndpointSmokeTest,
    GpuEndpoint,
    InferenceComponent,
    ModelBucket,
    ModelSource,
    S3ModelData,
    StagedCheckpoint,
    app_bucket_name,
    encrypt_logs_and_functions,
    get_engine,
    place_functions_in_vpc,
)
from constructs_lib.image_check import ServingImageCheck
from constructs_lib.model_facts import METADATA_KEY
from constructs_lib.rules import (
    ASYNC,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    INFERENCE_COMPONENT,
    hub_ports,
    is_model_archive,
    lookup_instance,
    parse_s3_uri,
    resolve_scaling,
    weight_format_flags,
)
from endpoint_client.outputs import APP_OUTPUT
from preflight.context import long_context_opt_in

from .config import DeploymentConfig
from .context_keys import BY_NAME
from .model_checks import FactsStatus
from .observability import add_observability, update_batch_copies, update_policy_of
from .parsers import APP_TAG

# The load gate's figures a stack shows as outputs (every figure is an attribute and a metric: handler_kit.resources).
LOAD_OUTPUTS = {
    "LoadTtftP95Ms": "time to first token, p95 (ms)",
    "LoadItlP95Ms": "inter-token latency (AIPerf's), p95 (ms)",
    "LoadOutputTokensPerSecondP5": "output tokens per second of one request, p5",
    "LoadE2eP95Ms": "end-to-end latency, p95 (ms)",
    "LoadErrorRate": "share of the burst's requests that failed",
}


class LlmEndpointStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: DeploymentConfig,
        model_facts: FactsStatus | None = None,
        bucket_app: str | None = None,
        hub_endpoints: Sequence[str | None] | None = None,
        **kwargs,
    ) -> None:
        """model_facts: what synth checked against the recorded Hub facts (model_checks.py), carried in the
        template's Metadata for ``llmops.summary``. Default: nothing recorded there. ``bucket_app``: the app whose
        bucket (app_bucket_name) this stack creates or reuses; a fleet's stacks share their app's
        (fleet.py). Default: ``config.stack_name``."""
        super().__init__(
            scope,
            id,
            description=f"{config.model_s3_uri if is_model_archive(config.model_s3_uri) else config.model_id} "
            f"on {config.instance_type} with {config.engine} (SageMaker endpoint)",
            **kwargs,
        )
        if model_facts is not None:
            # Template-level Metadata holds arbitrary JSON (CloudFormation template anatomy, "Metadata" section).
            self.template_options.metadata = {METADATA_KEY: model_facts.metadata()}
        self.volume_key = (
            kms.Key.from_key_arn(self, "VolumeKey", config.volume_kms_key_arn) if config.volume_kms_key_arn else None
        )
        self.network = self._network(config)
        if self.network:
            # Every function of the stack, CDK's own included, in the deployment's subnets (an SCP may require
            # lambda:VpcIds), so that the staging handler resolves the revision through the VPC too (a mirror).
            # A mirror's own port for the created group, as the staging job's (StagedCheckpoint.hub_endpoint).
            # hub_endpoints: every Hub mirror the stack's deployments stage through (a fleet's packed ones too).
            mirrors = [config.hf_endpoint] if hub_endpoints is None else hub_endpoints
            ports = tuple(dict.fromkeys((443, *(port for mirror in mirrors for port in hub_ports(mirror)))))
            place_functions_in_vpc(self, **self.network, egress_ports=ports)
        # Every log group and function of the stack, CDK's own included, whenever they are added (an aspect).
        key_of = {"LogsKey": config.logs_kms_key_arn, "LambdaKey": config.lambda_kms_key_arn}
        keys = {name: kms.Key.from_key_arn(self, name, arn) if arn else None for name, arn in key_of.items()}
        encrypt_logs_and_functions(self, logs_key=keys["LogsKey"], environment_key=keys["LambdaKey"])
        # Every taggable resource, the SageMaker ones included (CfnModel, CfnEndpointConfig, CfnEndpoint,
        # CfnInferenceComponent take Tags); the staging jobs started at run time get them through the handler.
        for tag_key, tag_value in config.tags.items():
            cdk.Tags.of(self).add(tag_key, tag_value)
        self.bucket_app = bucket_app or config.stack_name
        # The app's name on every taggable resource and on the stack itself (DescribeStacks Tags): llmops status.
        cdk.Tags.of(self).add(APP_TAG, self.bucket_app)
        model = self.model_source(self, config)
        self.checkpoint = model if isinstance(model, StagedCheckpoint) else None

        self.preflight = self._preflight(config, model)
        model = self.preflight.checked_model  # the Model (or component) waits for the preflight

        self.component: InferenceComponent | None = None
        if config.deployment_mode == INFERENCE_COMPONENT:
            self.endpoint = self._component_endpoint(config, model)
        else:
            self.endpoint = self._standard_endpoint(config, model)
        # The endpoint's subnets and groups (given, or the group it created) are checked before its Model exists:
        # the endpoint (or component) does it through its checked_model (constructs_lib.preflight_check).

        self.smoke_test = self._smoke_test(config) if config.smoke_test else None
        # Alarms (topic), update policy with auto-rollback, dashboard: observability.py.
        memory = get_engine(config.engine).preflight_settings(config.engine_env)
        add_observability(
            self,
            vars(config),
            endpoint=self.endpoint,
            component=self.component,
            smoke_test=self.smoke_test,
            gpu_memory_share=memory.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION),
        )

        cdk.CfnOutput(self, "EndpointName", value=self.endpoint.endpoint_name, description="SageMaker endpoint name")
        cdk.CfnOutput(self, "Region", value=self.region, description="Region of the endpoint")
        # llmops finds an app's stacks by this output, not by the name: app LlmEndpoint's stack for endpoint prod
        # and app LlmEndpoint-prod's stack are both named LlmEndpoint-prod (llmops/fleet_target.py app_of).
        cdk.CfnOutput(self, APP_OUTPUT, value=self.bucket_app, description="The app (stack_name) of this stack")
        if self.component is not None:
            cdk.CfnOutput(
                self,
                "InferenceComponentName",
                value=self.component.inference_component_name,
                description="Inference component to name in every invocation (InferenceComponentName)",
            )
        queue = getattr(self.endpoint, "async_queue", None)
        if queue is None:
            cdk.CfnOutput(
                self,
                "OpenAiBaseUrl",
                value=(self.component or self.endpoint).openai_base_url,
                description="OpenAI-compatible base URL (bearer token: sagemaker:CallWithBearerToken + InvokeEndpoint)",
            )
        else:
            cdk.CfnOutput(self, "AsyncOutputPath", value=queue.output_path, description="Where answers are written")
            cdk.CfnOutput(self, "AsyncFailurePath", value=queue.failure_path, description="Where failures are written")
            cdk.CfnOutput(
                self, "AsyncSuccessTopicArn", value=queue.success_topic.topic_arn, description="Told of each answer"
            )
            cdk.CfnOutput(
                self, "AsyncErrorTopicArn", value=queue.error_topic.topic_arn, description="Told of each failure"
            )
        cdk.CfnOutput(self, "ModelDataUri", value=model.s3_uri, description="S3 prefix the model is served from")
        if self.checkpoint is not None:
            cdk.CfnOutput(
                self,
                "ModelRevision",
                value=self.checkpoint.revision,
                description=f"ETag of {config.model_s3_uri}, unpacked and staged"[:1024]
                if is_model_archive(config.model_s3_uri)
                else f"Commit SHA of {config.model_id} that {config.revision!r} resolved to and that was staged",
            )
        cdk.CfnOutput(
            self,
            "ImageUri",
            value=config.serving_image.image_uri(self),
            description=f"Serving image ({config.image_source})",
        )
        if (check := ServingImageCheck.of((self.component or self.endpoint).model)) is not None:
            cdk.CfnOutput(
                self,
                "ImageDigest",
                value=check.image_digest,
                description="Digest the serving image's tag named at the deploy that set it (pin it with "
                "image=<repository>@<digest>; 'unverified' when ECR did not tell)",
            )
        if self.smoke_test is not None:
            cdk.CfnOutput(
                self,
                "SmokeTimeToFirstTokenMs",
                value=self.smoke_test.time_to_first_token_ms,
                description="Smoke test after this deploy: milliseconds to the first streamed token",
            )
            cdk.CfnOutput(
                self,
                "SmokeLatencyMs",
                value=self.smoke_test.latency_ms,
                description="Smoke test after this deploy: milliseconds for the whole non-streamed answer",
            )
            if self.smoke_test.load is not None:
                for figure, description in LOAD_OUTPUTS.items():
                    cdk.CfnOutput(
                        self,
                        f"Smoke{figure}",
                        value=self.smoke_test.load_figure(figure),
                        description=f"Load gate after this deploy: {description}",
                    )
        body = '{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":64}'
        if queue is not None:
            cdk.CfnOutput(
                self,
                "InvokeCommand",
                description="Submit a request and wait for its answer (an asynchronous endpoint)",
                value=cdk.Fn.join(
                    "",
                    [
                        "python -m llmops.invoke --async --region ",
                        self.region,
                        " --endpoint ",
                        self.endpoint.endpoint_name,
                        " 'Say hello'",
                    ],
                ),
            )
            return
        cdk.CfnOutput(
            self,
            "InvokeCommand",
            description="Invoke the endpoint with the AWS CLI",
            value=cdk.Fn.join(
                "",
                [
                    "aws sagemaker-runtime invoke-endpoint --region ",
                    self.region,
                    " --endpoint-name ",
                    self.endpoint.endpoint_name,
                    *(
                        [" --inference-component-name ", self.component.inference_component_name]
                        if self.component
                        else []
                    ),
                    " --content-type application/json --cli-binary-format raw-in-base64-out",
                    f" --body '{body}' /dev/stdout",
                ],
            ),
        )

    def model_source(
        self, scope: Construct, config: DeploymentConfig, *, pack: bool = False, **adapter: Any
    ) -> ModelSource:
        """The deployment's weights under ``scope``: the prefix it names, or a checkpoint staged into the bucket
        (a Hub revision, or a model.tar.gz, SageMaker Training's output, unpacked into a verified prefix)."""
        # model_kms_key_arn: the key of the user's bucket (model_s3_uri's, an archive's, model_bucket);
        # bucket_kms_key_arn: the key of the app's own bucket (created, or reused after a destroy).
        key = kms.Key.from_key_arn(scope, "ModelKey", config.model_kms_key_arn) if config.model_kms_key_arn else None
        bucket_key = (
            kms.Key.from_key_arn(scope, "BucketKey", config.bucket_kms_key_arn) if config.bucket_kms_key_arn else None
        )
        archive = is_model_archive(config.model_s3_uri)
        if config.model_s3_uri and not archive:
            return S3ModelData.from_s3_uri(scope, "ModelBucket", config.model_s3_uri, encryption_key=key)
        # The app's own bucket has a fixed name per account, region and app, so the deploy after a destroy
        # finds the retained bucket (reuse_model_bucket) and its staged revisions; IAM grants on it require
        # this account as its owner (s3:ResourceAccount), so a bucket of that name elsewhere is never used.
        app_bucket = app_bucket_name(self.bucket_app)
        bucket = (
            s3.Bucket.from_bucket_attributes(scope, "ModelBucket", bucket_name=config.model_bucket, encryption_key=key)
            if config.model_bucket
            # The retained bucket, with its key when it was created with bucket_kms_key_arn.
            else s3.Bucket.from_bucket_attributes(
                scope, "ModelBucket", bucket_name=app_bucket, encryption_key=bucket_key
            )
            if config.reuse_model_bucket
            else ModelBucket(scope, "ModelBucket", bucket_name=app_bucket, encryption_key=bucket_key).bucket
        )
        secret = (
            secretsmanager.Secret.from_secret_attributes(
                scope,
                "HubToken",
                secret_complete_arn=config.hf_token_secret_arn,
                # A customer-managed key: whoever reads the secret may decrypt with it (grant_read does).
                encryption_key=kms.Key.from_key_arn(scope, "HubTokenKey", config.hf_token_kms_key_arn)
                if config.hf_token_kms_key_arn
                else None,
            )
            if config.hf_token_secret_arn
            else None
        )
        return StagedCheckpoint(
            scope,
            "Checkpoint",
            repo_id=None if archive else config.model_id,
            source_s3_uri=config.model_s3_uri if archive else None,
            source_encryption_key=key if archive else None,
            revision="main" if archive else config.revision,
            bucket=bucket,
            include=config.staging_include,
            exclude=config.exclude,
            hf_token_secret=secret,
            instance_type=config.staging_instance_type,
            max_instances=config.staging_max_instances,
            max_runtime=cdk.Duration.seconds(config.staging_max_runtime_s),
            bucket_owner=None if config.model_bucket else cdk.Aws.ACCOUNT_ID,
            engine=config.engine,
            allow_checkpoint_code=config.allow_checkpoint_code,
            trust_remote_code=config.trust_remote_code,
            hub_endpoint=config.hf_endpoint,
            tags=config.tags,
            volume_kms_key=self.volume_key,
            pack=pack,  # a Hub adapter: one model.tar.gz, its config checked (fleet_stacks.py)
            **adapter,
            **self.network,
        )

    def _standard_endpoint(self, config: DeploymentConfig, model: ModelSource) -> GpuEndpoint:
        endpoint = GpuEndpoint(
            self,
            "Endpoint",
            model=model,
            engine=config.engine_spec,
            image=config.serving_image,
            instance_type=config.instance_type,
            instance_pools=config.instance_pools or None,
            instance_count=config.instance_count,
            gpu_count=config.gpu_count,
            gpu_memory_gib=config.gpu_memory_gib,
            tensor_parallel_size=config.tensor_parallel_size,
            max_model_len=config.max_model_len,
            max_num_seqs=config.max_num_seqs,
            engine_env=config.engine_env,
            container_env=config.container_env,
            inference_ami_version=config.inference_ami_version,
            capacity_reservation_arn=config.capacity_reservation_arn,
            capacity_reservation_instances=config.capacity_reservation_instances,
            provision_timeout=cdk.Duration.seconds(config.provision_timeout_s) if config.provision_timeout_s else None,
            startup_timeout=cdk.Duration.seconds(config.startup_timeout_s),
            download_timeout=cdk.Duration.seconds(config.download_timeout_s),
            endpoint_name=config.endpoint_name,
            allow_checkpoint_code=config.allow_checkpoint_code,
            volume_kms_key=self.volume_key,
            **self.network,
            enhanced_metrics=config.enhanced_metrics,
            metric_publish_frequency_s=config.metric_publish_frequency_s,
            routing_strategy=config.routing_strategy,
            prefix_routing_length=config.prefix_routing_length,
            prefix_routing_concurrency=config.prefix_routing_concurrency,
            async_inference=self._async_inference(config) if config.deployment_mode == ASYNC else None,
        )
        scaling = resolve_scaling(
            deployment_mode=config.deployment_mode,
            instance_spec_gpu_count=endpoint.instance.gpu_count if endpoint.instance else None,
            initial_instances=config.instance_count,
            min_instances=config.min_instances,
            max_instances=config.max_instances,
            target_invocations_per_instance=config.target_invocations_per_instance,
            target_backlog_per_instance=config.target_backlog_per_instance,
        )
        if scaling.scales_instances:
            endpoint.autoscale_instances(
                min_capacity=scaling.min_instances,
                max_capacity=scaling.max_instances,
                target_invocations_per_instance=config.target_invocations_per_instance,
                target_backlog_per_instance=config.target_backlog_per_instance,
                **_cooldowns(config),
            )
        return endpoint

    def _async_inference(self, config: DeploymentConfig) -> AsyncInference:
        """The queue's settings from the ``async_*`` keys (docs/guide/async-inference.md)."""
        holder = Construct(self, "AsyncSettings")
        bucket = prefix = None
        if config.async_output_s3_uri:
            name, prefix = parse_s3_uri(config.async_output_s3_uri)
            bucket = s3.Bucket.from_bucket_name(holder, "OutputBucket", name)
        topics = {
            field: sns.Topic.from_topic_arn(holder, id, arn) if arn else None
            for field, id, arn in (
                ("success_topic", "SuccessTopic", config.async_success_topic_arn),
                ("error_topic", "ErrorTopic", config.async_error_topic_arn),
            )
        }
        keys = {
            field: kms.Key.from_key_arn(holder, id, arn) if arn else None
            for field, id, arn in (
                ("output_key", "OutputKey", config.async_output_kms_key_arn),
                ("topic_key", "TopicKey", config.async_topic_kms_key_arn),
            )
        }
        timeout = config.async_invocation_timeout_s
        return AsyncInference(
            **keys,
            bucket=bucket,
            prefix=prefix,
            max_concurrent_invocations_per_instance=config.async_max_concurrent_invocations,
            invocation_timeout=cdk.Duration.seconds(timeout) if timeout else None,
            **topics,
        )

    def _component_endpoint(self, config: DeploymentConfig, model: ModelSource) -> ComponentEndpoint:
        endpoint = ComponentEndpoint(
            self,
            "Endpoint",
            instance_type=config.instance_type,
            instance_pools=config.instance_pools or None,
            gpu_count=config.gpu_count,
            gpu_memory_gib=config.gpu_memory_gib,
            initial_instances=config.instance_count,
            min_instances=config.min_instances,
            max_instances=config.max_instances,
            scale_to_zero=config.scale_to_zero,
            routing_strategy=config.routing_strategy,
            engine=config.engine,
            image=config.serving_image,
            inference_ami_version=config.inference_ami_version,
            capacity_reservation_arn=config.capacity_reservation_arn,
            capacity_reservation_instances=config.capacity_reservation_instances,
            provision_timeout=cdk.Duration.seconds(config.provision_timeout_s) if config.provision_timeout_s else None,
            endpoint_name=config.endpoint_name,
            volume_kms_key=self.volume_key,
            **self.network,
            enhanced_metrics=config.enhanced_metrics,
            metric_publish_frequency_s=config.metric_publish_frequency_s,
            prefix_routing_length=config.prefix_routing_length,
            prefix_routing_concurrency=config.prefix_routing_concurrency,
        )
        self.component = self.add_model_component(endpoint, config, model)
        return endpoint

    def add_model_component(
        self,
        endpoint: ComponentEndpoint,
        config: DeploymentConfig,
        model: ModelSource,
        scope: Construct | None = None,
        id: str = "Model",
    ) -> InferenceComponent:
        """The deployment's model as a component of ``endpoint`` (under ``scope`` and ``id``: a fleet packs several,
        each named after its deployment)."""
        return InferenceComponent(
            scope or endpoint,
            id,
            endpoint=endpoint,
            model=model,
            engine=config.engine_spec,
            image=config.serving_image,
            tensor_parallel_size=config.tensor_parallel_size,
            max_model_len=config.max_model_len,
            max_num_seqs=config.max_num_seqs,
            engine_env=config.engine_env,
            container_env=config.container_env,
            min_memory_mb=config.min_memory_mb,
            initial_copies=config.initial_copies,
            min_copies=config.min_copies,
            max_copies=config.max_copies,
            target_concurrency=config.target_concurrency,
            **_cooldowns(config),
            startup_timeout=cdk.Duration.seconds(config.startup_timeout_s),
            download_timeout=cdk.Duration.seconds(config.download_timeout_s),
            component_name=config.component_name,
            allow_checkpoint_code=config.allow_checkpoint_code,
            data_cache=config.data_cache,
        )

    def _network(self, config: DeploymentConfig) -> dict[str, Any]:
        """The ``vpc``/``vpc_subnets``/``security_groups`` props of every construct that runs something, from the
        ids in context (none: SageMaker's own network)."""
        if not config.vpc_subnet_ids:
            return {}
        holder = Construct(self, "Network")
        # Only the ids go into the VpcConfigs; the route tables are the preflight's to read (preflight/network.py).
        cdk.Annotations.of(holder).acknowledge_warning(
            "@aws-cdk/aws-ec2:noSubnetRouteTableId", "the subnets are referenced by id only; no route is added"
        )
        subnets = [
            ec2.Subnet.from_subnet_id(holder, f"Subnet{i}", subnet_id)
            for i, subnet_id in enumerate(config.vpc_subnet_ids)
        ]
        groups = [
            ec2.SecurityGroup.from_security_group_id(holder, f"SecurityGroup{i}", group_id, mutable=False)
            for i, group_id in enumerate(config.vpc_security_group_ids)
        ]
        # The VPC only to create a security group in (no subnet is looked up through it: they are given).
        vpc = (
            ec2.Vpc.from_vpc_attributes(holder, "Vpc", vpc_id=config.vpc_id, availability_zones=cdk.Fn.get_azs())
            if config.vpc_id
            else None
        )
        return {"vpc": vpc, "vpc_subnets": ec2.SubnetSelection(subnets=subnets), "security_groups": groups or None}

    def _smoke_test(
        self, config: DeploymentConfig, component: InferenceComponent | None = None, scope: Construct | None = None
    ) -> EndpointSmokeTest:
        options = {
            "prompt": config.smoke_prompt,
            "max_tokens": config.smoke_max_tokens,
            "extra_body": config.smoke_inputs or None,
            "expected_pattern": config.smoke_expected_pattern,
            "stream_format": get_engine(config.engine).stream_format,
        }
        if config.smoke_budget_s != BY_NAME["smoke_budget_s"].default:
            # Left out at its default: the construct's own (600 s; longer for a queue that may idle at zero).
            options["budget"] = cdk.Duration.seconds(config.smoke_budget_s)
        if config.load_gate is not None:  # left out without one: the construct's default, no gate
            options["load"] = config.load_gate
        component = component or self.component
        if component is None:
            return EndpointSmokeTest.for_endpoint(self, "SmokeTest", self.endpoint, **options)
        return EndpointSmokeTest.for_component(scope or self, "SmokeTest", component, **options)

    def _preflight(
        self, config: DeploymentConfig, model: ModelSource, scope: Construct | None = None
    ) -> DeploymentPreflight:
        component_mode = config.deployment_mode == INFERENCE_COMPONENT
        instance = lookup_instance(config.instance_type) if component_mode else None
        gpus = config.gpu_count or (instance.gpu_count if instance else None)
        # With instance pools every instance may be of the type with the fewest GPUs (ComponentEndpoint sizes
        # MaxInstanceCount for it); a copy keeps the primary's GPUs on every type (one Model).
        fewest = min([gpus or 0, *(spec.gpu_count for t in config.instance_pools if (spec := lookup_instance(t)))])
        scaling = resolve_scaling(
            deployment_mode=config.deployment_mode,
            instance_spec_gpu_count=(fewest or gpus) if component_mode else gpus,
            tensor_parallel_size=config.tensor_parallel_size,
            accelerators_per_copy=config.accelerators_per_copy
            if config.accelerators_per_copy is not None or config.tensor_parallel_size is not None or not component_mode
            else gpus,
            initial_instances=config.instance_count,
            min_instances=config.min_instances,
            max_instances=config.max_instances,
            min_copies=config.min_copies,
            max_copies=config.max_copies,
            initial_copies=config.initial_copies,
            scale_to_zero=config.scale_to_zero,
            # The same max_instances as ComponentEndpoint's default: room for one update batch (component_plan).
            update_batch_copies=update_batch_copies(vars(config)) if component_mode else None,
        )
        most = max(config.instance_count, scaling.max_instances)
        # A blue/green update runs a second fleet beside the first, a rolling one a batch; in component mode the
        # instances max_instances keeps for an update's batch count as an update's (not needed at create).
        update_instances = (
            scaling.update_instances
            if component_mode
            else update_policy_of(vars(config)).extra_instances_during_update(most)
        )
        memory = get_engine(config.engine).preflight_settings(config.engine_env)
        return DeploymentPreflight(
            scope or self,
            "Preflight",
            model=model,
            instance_type=config.instance_type,
            gpu_count=config.gpu_count,
            gpu_memory_gib=config.gpu_memory_gib,
            tensor_parallel_size=config.tensor_parallel_size,
            max_model_len=config.max_model_len,
            max_num_seqs=config.preflight_sequences,
            kv_cache_dtype=memory.get("kv_cache_dtype", "auto"),
            gpu_memory_utilization=memory.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION),
            # A whole number (config.py refuses anything else), read from text as a float.
            max_num_batched_tokens=int(memory["max_num_batched_tokens"])
            if "max_num_batched_tokens" in memory
            else None,
            # The quota must cover the most instances the endpoint may run, not only the first.
            instances_needed=most - update_instances if component_mode else most,
            update_instances=update_instances,
            allow_unverified_s3=config.allow_unverified_s3,
            skip_checks=config.preflight_skip,
            instance_pools=config.instance_pools,
            allow_checkpoint_code=config.allow_checkpoint_code,
            trust_remote_code=config.trust_remote_code,
            engine=config.engine,
            **weight_format_flags(get_engine(config.engine), config.engine_env),
            gguf_file=config.gguf_file,
            long_context=long_context_opt_in(config.engine, config.container_env),
        )


def _cooldowns(config: DeploymentConfig) -> dict[str, cdk.Duration]:
    """The target tracking policy's cooldowns the context gives (none: Application Auto Scaling's own)."""
    given = {"scale_in_cooldown": config.scale_in_cooldown_s, "scale_out_cooldown": config.scale_out_cooldown_s}
    return {prop: cdk.Duration.seconds(seconds) for prop, seconds in given.items() if seconds is not None}
