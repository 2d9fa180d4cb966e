"""``GpuEndpoint``: one model on whole GPU instances behind a SageMaker real-time (or asynchronous) endpoint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct, IDependable

from .async_inference import (
    AsyncInference,
    AsyncQueue,
    concurrency_of,
    engine_timeout_problems,
)
from .catalog import lookup_instance
from .component_plan import (
    ASYNC,
    DEFAULT_TARGET_BACKLOG_PER_INSTANCE,
    DEFAULT_TARGET_INVOCATIONS_PER_INSTANCE,
    ROUTING_STRATEGIES,
    STANDARD,
    resolve_scaling,
)
from .endpoint_plan import plan_endpoint
from .engines import EngineSpec, get_engine
from .hosting import (
    EndpointVariantMixin,
    capacity_reservation,
    config_and_endpoint,
    endpoint_placement,
    execution_role,
    grant_log_streams,
    grant_model_and_image,
    grant_registry_login_and_metrics,
    metrics_config,
    provision_timeout_problems,
    retained_log_group,
    routing_config,
    sagemaker_metric,
    sagemaker_scaling_role,
    serving_model,
)
from .image_asset import default_image
from .images import ServingImage
from .imported import ImportedEndpoint
from .instance_pools import pool_problems, pool_types, reservation_pools_problem
from .keys import grant_volume_key
from .model_data import ModelSource
from .monitoring import AlarmThresholds, Monitor, Watched, grant_describe_alarms, rollback_alarms
from .monitoring.dashboards import SmokeFigures
from .monitoring.metrics import EndpointMetrics, metrics_settings
from .preflight_check import check_placement
from .problems import construct_subject, refuse
from .serving_features import metrics_problems, prefix_routing_problems
from .update_policy import UpdatePolicy, reservation_problems

__all__ = ["VARIANT_NAME", "GpuEndpoint"]

VARIANT_NAME = "AllTraffic"
# The scale-out-from-zero step policy's cooldown in AWS's example (async-inference-autoscale.html: Cooldown 300).
ASYNC_WAKE_COOLDOWN_S = 300


def _bucket_of(model: ModelSource) -> Any:
    """The bucket of a model source that has one (S3ModelData, StagedCheckpoint); the caller checked it has."""
    return getattr(model, "bucket", None)


class GpuEndpoint(EndpointMetrics, EndpointVariantMixin, Construct):
    """A SageMaker Model (uncompressed S3 prefix, network-isolated), EndpointConfig and Endpoint.

    Minimal use: ``GpuEndpoint(self, "Endpoint", model=S3ModelData(bucket, "models/x/"))`` serves the
    model with the pinned vLLM image on one ml.g6.xlarge. Every setting is validated at synth time
    and all problems are reported together in one ``ValueError``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: ModelSource,
        engine: str | EngineSpec = "vllm",
        image: ServingImage | None = None,
        instance_type: str = "ml.g6.xlarge",
        instance_pools: Sequence[str] | None = None,
        instance_count: int = 1,
        gpu_count: int | None = None,
        gpu_memory_gib: float | None = None,
        tensor_parallel_size: int | None = None,
        max_model_len: int | None = None,
        max_num_seqs: int | None = None,
        engine_env: Mapping[str, Any] | None = None,
        container_env: Mapping[str, Any] | None = None,
        inference_ami_version: str | None = None,
        capacity_reservation_arn: str | None = None,
        capacity_reservation_instances: int | None = None,
        startup_timeout: cdk.Duration | None = None,
        download_timeout: cdk.Duration | None = None,
        provision_timeout: cdk.Duration | None = None,
        endpoint_name: str | None = None,
        role: iam.IRole | None = None,
        volume_kms_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        allow_checkpoint_code: bool = False,
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] | None = None,
        enhanced_metrics: bool = False,
        metric_publish_frequency_s: int | None = None,
        routing_strategy: str | None = None,
        prefix_routing_length: int | None = None,
        prefix_routing_concurrency: int | None = None,
        async_inference: AsyncInference | None = None,
    ) -> None:
        """
        :param model: where the weights are (an S3 prefix); read access is granted to the role. When the
            source has a ``dependable`` (a construct that puts the weights there), the Model waits for it.
        :param engine: serving engine, a name in data/engines.json (``vllm``, ``sglang``, ``lmi``, ``llamacpp``), or an
            ``EngineSpec`` (``get_engine("llamacpp").for_model_file("m-Q4_K_M.gguf")`` for a GGUF file). Default: vllm.
        :param image: serving image. Default: the engine's pinned DLC tag from data/engines.json.
        :param instance_type: GPU instance type. Default: ml.g6.xlarge (1x L4, 24 GB).
        :param instance_pools: instance types SageMaker falls back to, in priority order after ``instance_type``,
            when it has no capacity for it (``ProductionVariant.InstancePools``; at most 4). Each must pass the same
            synth checks as ``instance_type`` with the same settings: the same Model serves on all of them.
            Default: none (``instance_type`` only).
        :param instance_count: instances behind the endpoint. Default: 1.
        :param gpu_count: GPUs per instance, required with gpu_memory_gib for instance types the
            catalog does not know. Default: from the catalog.
        :param gpu_memory_gib: memory per GPU in GiB. Default: from the catalog.
        :param tensor_parallel_size: GPUs one model spans. Default: every GPU of the instance.
        :param max_model_len: longest sequence the engine accepts. Default: the engine derives it
            from the model's config.
        :param max_num_seqs: concurrent sequences. Default: the engine's own default.
        :param engine_env: extra engine flags, keys with the engine's prefix (``SM_VLLM_...``).
            Default: none.
        :param container_env: other container variables (``VLLM_*``, ``NCCL_*``). Default: none.
        :param inference_ami_version: the GPU inference AMI the instances run (the driver's CUDA level).
            Default: derived from the image's CUDA level (CUDA 13 ->
            al2023-ami-sagemaker-inference-gpu-4-1); SageMaker's default when the level is unknown.
        :param capacity_reservation_arn: run on reserved capacity only. Default: on-demand capacity.
        :param capacity_reservation_instances: instances the reservation holds. With a reservation, the update
            policy (``apply_update_policy``) is refused unless they hold the serving fleet and an update's new
            instances (a whole second fleet for blue/green, one batch for rolling). Default: unknown, so any
            update policy is refused with a reservation.
        :param startup_timeout: container health-check timeout, 60-3600 s. Default: 20 minutes.
        :param download_timeout: model download timeout, 60-3600 s. Default: 20 minutes.
        :param provision_timeout: ``VariantInstanceProvisionTimeoutInSeconds``, 300-3600 s: the total time SageMaker
            spends getting instances across all pools (falling back to "the next instance pool (if configured)" on
            insufficient capacity) before the operation fails, not a wait per type (SageMaker guide,
            realtime-endpoints-heterogeneous); capacity only, not the model download or start-up (botocore
            ProductionVariant). An update's timeout counts it (``UpdatePolicy.needed_s``). Default: SageMaker's.
        :param endpoint_name: the name clients call. Default: a stable name unique to this construct.
        :param role: execution role. Default: a role trusted by sagemaker.amazonaws.com that can read
            only the model prefix, pull only the image's repository and write only its log group.
        :param volume_kms_key: key for the ML storage volume; rejected on instance types with local NVMe storage
            (hardware-encrypted). Default: AWS-managed encryption.
        :param log_retention: retention of the endpoint's log group, which is created before the
            endpoint and kept after it (so a failed deploy's logs survive the rollback). Default: one month.
        :param allow_checkpoint_code: let the container run code from the checkpoint or the environment: variables
            that load code (PYTHONPATH, LD_PRELOAD, an LMI entry point that is a .py file...) are accepted with a
            warning instead of refused. Give the same to the ``StagedCheckpoint`` and ``DeploymentPreflight``.
            Default: refused (constructs_lib/data/engines.json guarded_env).
        :param vpc: the VPC of the model's network interfaces (the Model's ``VpcConfig``): its ``vpc_subnets``
            (default: its private, else isolated, subnets), and the security group created in it when none is
            given. Default: no VPC (SageMaker's own network).
        :param vpc_subnets: the subnets, at least two in different Availability Zones; ``SubnetSelection(subnets=
            [...])`` alone (without ``vpc``) with ``security_groups``. Default: the vpc's private (else isolated)
            subnets.
        :param security_groups: 1-5 groups of that VPC. Default: one created with no inbound rule and HTTPS out.
            The execution role gets the EC2 network-interface actions SageMaker documents, limited to these subnets.
        :param enhanced_metrics: ``MetricsConfig.EnableEnhancedMetrics``: metrics per instance and container;
            ``add_dashboard`` then graphs each GPU and ``add_alarms``' GpuMemory watches the fullest one.
            Default: off (SageMaker's).
        :param metric_publish_frequency_s: ``MetricPublishFrequencyInSeconds``: 10, 30, 60, 120, 180, 240 or 300.
            Default: SageMaker's (60).
        :param routing_strategy: how requests are spread over the instances (``RoutingConfig``, API
            ProductionVariantRoutingConfig): ``LEAST_OUTSTANDING_REQUESTS``, ``RANDOM`` or ``PREFIX_AWARE`` (requests
            sharing a prompt prefix go to the same instance, so its engine's prefix cache serves them; needs both
            ``prefix_routing_*``). Default: SageMaker's own.
        :param prefix_routing_length: with ``PREFIX_AWARE``: ``PrefixLength``, 1024-65536. Default: none (required).
        :param prefix_routing_concurrency: with ``PREFIX_AWARE``: ``ConcurrencyThreshold``, in-flight requests on an
            instance before the endpoint routes elsewhere, 1-1024. Default: none (required).
        :param async_inference: make it an asynchronous endpoint (``AsyncInference``: where answers go, the topics,
            the concurrency per instance): requests are queued through ``InvokeEndpointAsync`` and answered into S3,
            up to an hour each; ``autoscale_instances`` then scales on the queue, down to zero. Not with
            ``routing_strategy`` (nothing is routed: instances take requests from the queue). Default: a real-time
            endpoint.
        """
        super().__init__(scope, id)
        engine_spec = engine if isinstance(engine, EngineSpec) else get_engine(engine)
        image = image or default_image(engine_spec, instance_type)
        startup_timeout = startup_timeout or cdk.Duration.minutes(20)
        download_timeout = download_timeout or cdk.Duration.minutes(20)
        # What an update's new fleet may take to come up; its timeout must cover it (apply_update_policy).
        self.provisioning_s = int(download_timeout.to_seconds() + startup_timeout.to_seconds())
        # ... and getting its instances: a total across every pool (SageMaker guide, realtime-endpoints-heterogeneous).
        self.provision_s = int(provision_timeout.to_seconds()) if provision_timeout else 0
        name = endpoint_name or cdk.Names.unique_resource_name(self, max_length=63, separator="-")

        plan = plan_endpoint(
            engine=engine_spec,
            image=image,
            instance_type=instance_type,
            instance_count=instance_count,
            gpu_count=gpu_count,
            gpu_memory_gib=gpu_memory_gib,
            tensor_parallel_size=tensor_parallel_size,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            engine_env=engine_env,
            container_env=container_env,
            inference_ami_version=inference_ami_version,
            capacity_reservation_arn=capacity_reservation_arn,
            startup_timeout_s=startup_timeout.to_seconds(),
            download_timeout_s=download_timeout.to_seconds(),
            endpoint_name=None if cdk.Token.is_unresolved(name) else name,
            volume_kms_key=volume_kms_key is not None,
            allow_checkpoint_code=allow_checkpoint_code,
        )

        def pool_check(pool: str) -> list[str]:
            # The primary's settings, its tensor parallel size and AMI: one Model and one variant serve every pool.
            return plan_endpoint(
                engine=engine_spec,
                image=image,
                instance_type=pool,
                instance_count=instance_count,
                tensor_parallel_size=plan.tensor_parallel_size,
                max_model_len=max_model_len,
                max_num_seqs=max_num_seqs,
                engine_env=engine_env,
                container_env=container_env,
                inference_ami_version=plan.inference_ami_version,
                volume_kms_key=volume_kms_key is not None,
                allow_checkpoint_code=allow_checkpoint_code,
            ).errors

        errors = plan.errors + (pool_problems(instance_type, instance_pools, pool_check) if instance_pools else [])
        errors += metrics_problems(enhanced_metrics, metric_publish_frequency_s)
        errors += provision_timeout_problems(provision_timeout)
        if pools := reservation_pools_problem(instance_pools, capacity_reservation_arn):
            errors.append(pools)
        if routing_strategy is not None and routing_strategy not in ROUTING_STRATEGIES:
            errors.append(
                f"routing_strategy={routing_strategy!r} is not a routing strategy; allowed: "
                f"{', '.join(ROUTING_STRATEGIES)}"
            )
        errors += prefix_routing_problems(routing_strategy, prefix_routing_length, prefix_routing_concurrency)
        if async_inference is not None:
            errors += self._async_problems(
                async_inference, model, routing_strategy, engine_spec, engine_env, container_env
            )
        refuse(construct_subject("GpuEndpoint", self), errors)
        for warning in plan.warnings:
            cdk.Annotations.of(self).add_warning_v2("llm:gpu-endpoint", warning)

        self.engine = engine_spec
        self.image = image
        self.instance = plan.instance
        self.tensor_parallel_size = plan.tensor_parallel_size
        self.variant_name = VARIANT_NAME
        self.monitored_name = name  # literal: the alarms that guard its updates must not reference it
        self.monitor = Monitor(self)
        self.update_policy: UpdatePolicy | None = None
        self.environment = plan.environment

        self.log_group_name = f"/aws/sagemaker/Endpoints/{name}"
        self.log_retention = retained_log_group(
            self, "LogRetention", log_group_name=self.log_group_name, retention=log_retention
        )
        self.log_group = logs.LogGroup.from_log_group_name(self, "Logs", self.log_group_name)

        self.role = role or execution_role(self, "Role", description=f"Execution role of SageMaker endpoint {name}")
        owned = role is None
        grant_model_and_image(self.role, scope=self, model=model, image=image, acknowledged=owned)
        grant_registry_login_and_metrics(self.role, acknowledged=owned)
        grant_log_streams(self.role, scope=self, log_group_name=self.log_group_name, acknowledged=owned)
        if volume_kms_key is not None:
            grant_volume_key(self.role, volume_kms_key, scope=self)
        network = {"vpc": vpc, "vpc_subnets": vpc_subnets, "security_groups": security_groups}
        self.placement = endpoint_placement(self, self.role, name=name, network=network, acknowledged=owned)
        check_placement(model, self.placement)  # its own preflight, if any, checks the network it is served on

        self.async_queue: AsyncQueue | None = None
        if async_inference is not None:
            self.async_queue = AsyncQueue(
                self,
                "Async",
                settings=async_inference,
                bucket=async_inference.bucket or _bucket_of(model),
                endpoint_name=name,
                role=self.role,
                max_concurrent=async_inference.max_concurrent_invocations_per_instance
                or concurrency_of(engine_spec, max_num_seqs, engine_env),
                acknowledged=owned,
            )

        self.model = serving_model(
            self,
            "Model",
            role=self.role,
            model=model,
            image=image,
            environment=plan.environment,
            vpc_config=self.placement.model_vpc_config() if self.placement else None,
            instance_types=pool_types(instance_type, instance_pools),
        )

        variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name=VARIANT_NAME,
            model_name=self.model.attr_model_name,
            # With pools, InstancePools replaces InstanceType (realtime-endpoints-heterogeneous).
            instance_type=None if instance_pools else instance_type,
            instance_pools=[
                sagemaker.CfnEndpointConfig.InstancePoolProperty(instance_type=t, priority=i)
                for i, t in enumerate(pool_types(instance_type, instance_pools), 1)
            ]
            if instance_pools
            else None,
            initial_instance_count=instance_count,
            initial_variant_weight=1.0,
            model_data_download_timeout_in_seconds=int(download_timeout.to_seconds()),
            container_startup_health_check_timeout_in_seconds=int(startup_timeout.to_seconds()),
            inference_ami_version=plan.inference_ami_version,
            capacity_reservation_config=capacity_reservation(capacity_reservation_arn),
            routing_config=routing_config(routing_strategy, prefix_routing_length, prefix_routing_concurrency),
            variant_instance_provision_timeout_in_seconds=int(provision_timeout.to_seconds())
            if provision_timeout
            else None,
        )
        self.endpoint_config, self.endpoint = config_and_endpoint(
            self,
            variant=variant,
            endpoint_name=name,
            log_retention=self.log_retention,
            volume_kms_key_arn=volume_kms_key.key_arn if volume_kms_key else None,
            metrics_config=metrics_config(enhanced_metrics, metric_publish_frequency_s),
            async_inference_config=self.async_queue.config_property() if self.async_queue else None,
        )
        self.node.default_child = self.endpoint
        self.instance_count = instance_count
        self.instance_types = pool_types(instance_type, instance_pools)
        self.capacity_reservation_arn = capacity_reservation_arn
        self.capacity_reservation_instances = capacity_reservation_instances
        self.scalable_target: appscaling.ScalableTarget | None = None
        self.wake_alarm: cloudwatch.Alarm | None = None

    def _async_problems(
        self,
        settings: AsyncInference,
        model: ModelSource,
        routing_strategy: str | None,
        engine: EngineSpec,
        engine_env: Mapping[str, Any] | None,
        container_env: Mapping[str, Any] | None,
    ) -> list[str]:
        problems = settings.problems("async_inference.")
        if not problems:
            problems += engine_timeout_problems(
                engine,
                engine_env,
                container_env,
                settings.invocation_timeout_s,
                key="async_inference.invocation_timeout",
            )
        if settings.bucket is None and getattr(model, "bucket", None) is None:
            problems.append(
                "async_inference.bucket: the model source has no bucket to write answers to; allowed: an s3.IBucket"
            )
        if routing_strategy is not None:
            problems.append(
                f"routing_strategy={routing_strategy!r}: an asynchronous endpoint's instances take requests from its "
                "queue, nothing is routed; leave it unset"
            )
        return problems

    @property
    def asynchronous(self) -> bool:
        """Whether requests go through ``InvokeEndpointAsync`` (``async_inference`` was given)."""
        return self.async_queue is not None

    def grant_invoke_async(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` submit requests (``sagemaker:InvokeEndpointAsync``: the endpoint is its one resource type in
        the IAM service authorization reference), read the answers and failures, and upload large requests below
        the input path. Only on an asynchronous endpoint."""
        if self.async_queue is None:
            raise ValueError(f"GpuEndpoint {self.node.path} is a real-time endpoint: use grant_invoke")
        return self.async_queue.grant_invoke(grantee, self.endpoint_arn)

    @classmethod
    def from_endpoint_name(cls, scope: Construct, id: str, endpoint_name: str) -> ImportedEndpoint:
        """An endpoint deployed elsewhere, by name: ``grant_invoke``, ``openai_base_url`` and ``metric_*`` as here."""
        return ImportedEndpoint(scope, id, endpoint_name=endpoint_name, variant_name=VARIANT_NAME)

    @property
    def endpoint_name(self) -> str:
        return self.endpoint.attr_endpoint_name

    @property
    def endpoint_arn(self) -> str:
        return self.endpoint.attr_endpoint_arn

    def autoscale_instances(
        self,
        *,
        max_capacity: int,
        min_capacity: int | None = None,
        target_invocations_per_instance: float | None = None,
        scale_in_cooldown: cdk.Duration | None = None,
        scale_out_cooldown: cdk.Duration | None = None,
        target_backlog_per_instance: float | None = None,
    ) -> appscaling.ScalableTarget:
        """Scale the instance count between ``min_capacity`` and ``max_capacity`` with the traffic.

        On an asynchronous endpoint (``async_inference``) it scales on the queue instead, as AWS documents it
        ("Autoscale an asynchronous endpoint", async-inference-autoscale.html): target tracking on
        ``ApproximateBacklogSizePerInstance`` (average, ``target_backlog_per_instance``), and with
        ``min_capacity=0`` a step policy that adds one instance when ``HasBacklogWithoutCapacity`` is 1 (average
        of two 1-minute periods), since target tracking has no per-instance value to act on at zero instances.

        Registers ``endpoint/<name>/variant/AllTraffic`` (``sagemaker:variant:DesiredInstanceCount``)
        with Application Auto Scaling, acting through its service-linked role for SageMaker, and tracks
        ``SageMakerVariantInvocationsPerInstance`` (invocations per instance per minute). The target and
        its policy depend on the endpoint, so ``cdk destroy`` removes them first.

        :param max_capacity: most instances. ``instance_count`` must lie between the two capacities.
        :param min_capacity: fewest instances, 1 or more (a standard endpoint cannot scale to zero;
            inference components can), or 0 on an asynchronous endpoint. Default: ``instance_count`` (scaling only
            adds instances above it); 0 on an asynchronous endpoint.
        :param target_invocations_per_instance: Default: 20 per minute, sized for LLM requests that take
            seconds; tune it from ``metric_invocations()`` under real load.
        :param scale_in_cooldown: Default: Application Auto Scaling's (300 s for SageMaker variants).
        :param scale_out_cooldown: Default: Application Auto Scaling's (300 s for SageMaker variants).
        :param target_backlog_per_instance: asynchronous endpoints only: queued requests per instance to aim for.
            Default: 5 (AWS's example); an asynchronous endpoint's ``min_capacity`` may be 0.
        """
        plan = resolve_scaling(
            deployment_mode=ASYNC if self.asynchronous else STANDARD,
            instance_spec_gpu_count=self.instance.gpu_count if self.instance else None,
            min_instances=min_capacity,
            max_instances=max_capacity,
            initial_instances=self.instance_count,
            target_invocations_per_instance=target_invocations_per_instance,
            target_backlog_per_instance=target_backlog_per_instance,
        )
        errors = list(plan.errors)
        if self.scalable_target is not None:
            errors.append("autoscale_instances was already called; an endpoint variant has one scalable target.")
        if self.asynchronous and self.alarms:
            errors.append(
                "autoscale_instances after add_alarms: on an asynchronous endpoint the capacity alarm depends on "
                "whether it may idle at zero instances; call autoscale_instances first."
            )
        refuse(construct_subject("GpuEndpoint", self), errors)
        cdk.Annotations.of(self).add_warning_v2(
            "llm:autoscaled-instance-type",
            "The endpoint's instance count is autoscaled: SageMaker refuses an update that changes the instance "
            "type of an autoscaled variant. To change instance_type later, deploy once without autoscaling "
            "(no max_instances), then with the new instance type.",
        )
        # A config update (new image, model, settings) must not reset the autoscaled instance count to
        # instance_count: UpdateEndpoint keeps it with RetainAllVariantProperties (UpdateEndpoint API reference;
        # AWS::SageMaker::Endpoint RetainAllVariantProperties).
        self.endpoint.retain_all_variant_properties = True
        self.scalable_target = appscaling.ScalableTarget(
            self,
            "InstanceScaling",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"endpoint/{self.endpoint_name}/variant/{self.variant_name}",
            scalable_dimension="sagemaker:variant:DesiredInstanceCount",
            min_capacity=plan.min_instances,
            max_capacity=plan.max_instances,
            role=sagemaker_scaling_role(self, "ScalingRole"),
        )
        if self.asynchronous:
            self._scale_on_backlog(
                self.scalable_target,
                plan.target_backlog_per_instance,
                plan.min_instances,
                scale_in_cooldown,
                scale_out_cooldown,
            )
            return self.scalable_target
        self.scalable_target.scale_to_track_metric(
            "InvocationsPerInstance",
            target_value=plan.target_invocations_per_instance or DEFAULT_TARGET_INVOCATIONS_PER_INSTANCE,
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
            scale_in_cooldown=scale_in_cooldown,
            scale_out_cooldown=scale_out_cooldown,
        )
        return self.scalable_target

    def _scale_on_backlog(
        self,
        scalable_target: appscaling.ScalableTarget,
        target: float | None,
        min_instances: int,
        scale_in_cooldown: cdk.Duration | None,
        scale_out_cooldown: cdk.Duration | None,
    ) -> None:
        """AWS's two policies for an asynchronous endpoint (async-inference-autoscale.html)."""
        scalable_target.scale_to_track_metric(
            "BacklogPerInstance",
            target_value=target or DEFAULT_TARGET_BACKLOG_PER_INSTANCE,
            custom_metric=sagemaker_metric("ApproximateBacklogSizePerInstance", {"EndpointName": self.monitored_name}),
            scale_in_cooldown=scale_in_cooldown,
            scale_out_cooldown=scale_out_cooldown,
        )
        if min_instances > 0:
            return
        # ExactCapacity 1, not AWS's ChangeInCapacity +1: HasBacklogWithoutCapacity stays 1 until an instance serves,
        # and an LLM's cold start outlasts the cooldown, after which +1 would add another instance per cooldown for a
        # single request; setting 1 again adds nothing, and the metric is 1 only at zero instances, so it never
        # scales a running endpoint in. A longer cooldown instead would delay the next wake ("won't increase the
        # desired capacity again unless ... the cooldown period ends", StepScalingPolicyConfiguration.Cooldown).
        wake = appscaling.StepScalingAction(
            self,
            "WakeFromZero",
            scaling_target=scalable_target,
            adjustment_type=appscaling.AdjustmentType.EXACT_CAPACITY,
            metric_aggregation_type=appscaling.MetricAggregationType.AVERAGE,
            cooldown=cdk.Duration.seconds(ASYNC_WAKE_COOLDOWN_S),
        )
        wake.add_adjustment(adjustment=1, lower_bound=0)
        self.wake_alarm = cloudwatch.Alarm(
            self,
            "WakeAlarm",
            metric=sagemaker_metric("HasBacklogWithoutCapacity", {"EndpointName": self.monitored_name}),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=2,
            datapoints_to_alarm=2,
            treat_missing_data=cloudwatch.TreatMissingData.MISSING,
            alarm_description=f"Starts an instance of asynchronous endpoint {self.monitored_name} when requests "
            "wait with none running.",
        )
        self.wake_alarm.add_alarm_action(cloudwatch_actions.ApplicationScalingAction(wake))

    def watched(self) -> Watched:
        """What its monitor watches: the variant, by its literal names, with the endpoint config's MetricsConfig."""
        enhanced, publish_s = metrics_settings(self.endpoint_config)
        pool_gpus = None
        if len(self.instance_types) > 1:
            # The primary's resolved spec (it may be outside the catalog), the pools' from the catalog (every pool is a
            # catalog type: pool_problems); standard mode gives them all one GPU count (pool_problems too).
            specs = [self.instance, *(lookup_instance(t) for t in self.instance_types[1:])]
            counts = {spec.gpu_count if spec is not None else 1 for spec in specs}
            pool_gpus = counts.pop() if len(counts) == 1 else None
        return Watched(
            kind="variant",
            name=self.monitored_name,
            title=self.node.id,
            variant_name=self.variant_name,
            gpus=self.instance.gpu_count if self.instance else None,
            instance_types=tuple(self.instance_types),
            pool_gpus=pool_gpus,
            enhanced=enhanced,
            publish_s=publish_s,
            queue=self.async_queue is not None,
            error_topic=self.async_queue.error_topic.topic_name if self.async_queue else None,
            idles_to_zero=self.idles_to_zero,
            wake_s=self.cold_start_s,
        )

    @property
    def idles_to_zero(self) -> bool:
        """An asynchronous endpoint whose autoscaling may leave no instance (``autoscale_instances(min_capacity=0)``,
        the default there): a request after idle waits for an instance to start."""
        return self.asynchronous and self._min_instances() == 0

    @property
    def cold_start_s(self) -> int:
        """The longest an instance may take to serve: getting it (``provision_timeout``), the model download and the
        container's start-up."""
        return self.provision_s + self.provisioning_s

    def _min_instances(self) -> int:
        """The fewest instances autoscaling may leave (``instance_count`` without autoscaling)."""
        target = self.scalable_target.node.default_child if self.scalable_target is not None else None
        if isinstance(target, appscaling.CfnScalableTarget):
            return int(target.min_capacity)
        return self.instance_count

    @property
    def alarms(self) -> list[cloudwatch.Alarm]:
        """The alarms of ``add_alarms`` (none before it)."""
        return self.monitor.alarms

    @property
    def no_capacity_alarm(self) -> cloudwatch.Alarm | None:
        """The instances-reporting alarm of ``add_alarms``, if any."""
        return self.monitor.no_capacity_alarm

    @property
    def dashboard(self) -> cloudwatch.Dashboard | None:
        """The dashboard of ``add_dashboard``, if any."""
        return self.monitor.dashboard

    @property
    def dashboard_url(self) -> str:
        """The console address of the dashboard (``add_dashboard`` first)."""
        return self.monitor.dashboard_url

    def add_alarms(
        self,
        thresholds: AlarmThresholds | None = None,
        *,
        topic: sns.ITopic | None = None,
        serving: IDependable | None = None,
    ) -> list[cloudwatch.Alarm]:
        """Alarms on 5xx errors, p99 model latency, GPU memory and instances reporting (``AlarmThresholds``
        says when each fires), notifying ``topic`` when given. They are children ``Alarms/<Name>``.

        :param serving: what completes once the endpoint serves (the stack's smoke test). The instances-reporting
            alarm (``NoCapacity``) treats missing data as breaching, since no instance reports nothing at all
            ("breaching: Missing data points are treated as 'bad' and breaching the threshold", CloudWatch user
            guide, AlarmThatSendsEmail "Configuring how CloudWatch alarms treat missing data"). Before the endpoint
            has instances and while it is deleted there is no data either, so that alarm is created after
            ``serving`` and deleted before it, and it is left out of the update's rollback alarms (the endpoint's
            DeploymentConfig cannot name an alarm that waits for the endpoint; a blue/green or rolling update keeps
            old instances reporting, so it has nothing to add there). Default: the endpoint, whose CloudFormation
            create polls DescribeEndpoint for up to 160 minutes and whose delete polls it too (cfn-lint schema of
            AWS::SageMaker::Endpoint, handlers), so the alarm starts once the endpoint is created and goes first.
        """
        if self.asynchronous and thresholds is not None and thresholds.model_errors_percent is not None:
            refuse(
                construct_subject("GpuEndpoint", self),
                [
                    f"thresholds.model_errors_percent={thresholds.model_errors_percent:g}: an asynchronous endpoint "
                    "publishes no InvocationModelErrors (async-inference-monitor.html); its failed requests have "
                    "their own alarm, thresholds.async_failures; leave it unset"
                ],
            )
        return self.monitor.add_alarms(thresholds, topic=topic, serving=serving or self.endpoint)

    def apply_update_policy(
        self, policy: UpdatePolicy, *, rollback_on: Sequence[cloudwatch.Alarm] | None = None
    ) -> UpdatePolicy:
        """Set the endpoint's ``DeploymentConfig``: blue/green with ``policy``'s traffic shifting, rolled back
        when one of ``rollback_on`` fires. Default ``rollback_on``: the alarms of ``add_alarms``. Call it after
        ``autoscale_instances``, so that a canary or linear step is also checked against the autoscaled range."""
        instances = self.instance_count
        target = self.scalable_target.node.default_child if self.scalable_target is not None else None
        scaled = target if isinstance(target, appscaling.CfnScalableTarget) else None
        # The most instances an update can start at: autoscaling's maximum, which UpdateEndpoint keeps
        # (RetainAllVariantProperties, set by autoscale_instances); the timeout counts a batch for each of them.
        fleet = max(instances, int(scaled.max_capacity)) if scaled is not None else instances
        problems = policy.problems(
            component_mode=False,
            instances=instances,
            provisioning_s=self.provisioning_s,
            provision_s=self.provision_s,
            most_instances=fleet,
        )
        if self.capacity_reservation_arn:
            problems += reservation_problems(
                policy, fleet=fleet, reservation_instances=self.capacity_reservation_instances
            )
        refuse(construct_subject("GpuEndpoint", self), problems)
        if scaled is not None:  # autoscale_instances was called first (the stack does)
            for warning in policy.autoscaled_warnings(
                min_instances=int(scaled.min_capacity), max_instances=int(scaled.max_capacity)
            ):
                cdk.Annotations.of(self).add_warning_v2("llm:update-policy-autoscaled", warning)
        # By default not the failed-requests alarm of a queue either: a caller's bad request writes a failure object
        # too (the container's 4xx), and one would roll the update back.
        default = [a for a in self.alarms if a is not self.monitor.alarm("AsyncFailures")]
        alarms = rollback_alarms(
            [
                a
                for a in (list(rollback_on) if rollback_on is not None else default)
                if a is not self.no_capacity_alarm  # created after the endpoint serves (add_alarms)
            ],
            self.node.path,
        )
        timeout = policy.derived_timeout_s(
            instances=fleet, provisioning_s=self.provisioning_s, provision_s=self.provision_s
        )
        config = policy.endpoint_deployment_config([a.alarm_name for a in alarms], timeout_s=timeout)
        self.endpoint.deployment_config = config
        if config is not None:
            grant_describe_alarms(self.role, alarms)
        self.update_policy = policy
        return policy

    def add_dashboard(
        self, *, smoke_test: SmokeFigures | None = None, scope: Construct | None = None
    ) -> cloudwatch.Dashboard:
        """A dashboard of this endpoint: invocations and errors, latency, GPU, CPU/memory/disk, instances,
        with instance pools the same per instance type, with enhanced metrics GPU memory and use per GPU,
        the alarms' state and, with ``smoke_test`` (an ``EndpointSmokeTest``), its last figures.

        :param scope: where the ``Dashboard`` goes. Default: this construct. A dashboard showing a smoke test
            that depends on this construct must go elsewhere (the stack), or the two depend on each other.
        """
        return self.monitor.add_dashboard(scope=scope, smoke_test=smoke_test)
