"""``ComponentEndpoint`` and ``InferenceComponent``: models as inference components of one endpoint.

Each component brings its own model, GPUs per copy and copy count; the endpoint brings the
instances, which SageMaker adds and removes for the copies (managed instance scaling). Copies scale
with Application Auto Scaling, and with ``scale_to_zero`` the whole endpoint can release every
instance and wake again on the first request.

Teardown order is part of the template: scaling policies and alarm -> scalable target -> component
-> endpoint -> endpoint config, and component -> model, so ``cdk destroy`` deletes the components
before the endpoint (SageMaker's DeleteEndpoint leaves components behind).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct, IValidation

from .catalog import InstanceSpec, lookup_instance, resolve_instance
from .component_plan import INFERENCE_COMPONENT, host_memory_problem, resolve_scaling, rolling_room_problem
from .endpoint_plan import plan_endpoint
from .engines import EngineSpec, adapter_env, adapter_env_problems, build_environment, get_engine
from .hosting import (
    ENDPOINT_METRIC_NAMESPACES,
    EndpointVariantMixin,
    capacity_reservation,
    config_and_endpoint,
    endpoint_placement,
    execution_role,
    grant_invoke_arns,
    grant_log_streams,
    grant_model_and_image,
    grant_registry_login_and_metrics,
    metrics_config,
    openai_base_url,
    provision_timeout_problems,
    retained_log_group,
    routing_config,
    sagemaker_scaling_role,
    serving_model,
)
from .image_asset import default_image
from .images import ServingImage
from .imported import ImportedComponent, ImportedComponentEndpoint
from .instance_pools import pool_problems, pool_types, reservation_pools_problem
from .keys import grant_volume_key
from .model_data import ModelSource
from .monitoring import (
    AlarmThresholds,
    Monitor,
    Monitored,
    Watched,
    grant_describe_alarms,
    rollback_alarms,
)
from .monitoring.dashboards import SmokeFigures
from .monitoring.metrics import ComponentHostMetrics, CopyMetrics, metrics_settings
from .names import COMPONENT_NAME, matches
from .network import grant_network_interfaces
from .preflight_check import check_placement
from .problems import refuse
from .serving_features import metrics_problems, prefix_routing_problems
from .update_policy import UpdatePolicy

VARIANT_NAME = "AllTraffic"
DEFAULT_TIMEOUT = cdk.Duration.minutes(20)
# The wake-up alarm: one failed request in one minute is enough (AWS/SageMaker metrics are per minute).
WAKE_ALARM_PERIOD = cdk.Duration.minutes(1)
WAKE_COOLDOWN = cdk.Duration.seconds(60)


def _fail(kind: str, node_path: str, errors: list[str]) -> None:
    refuse(f"{kind} {node_path}", errors)


class ComponentEndpoint(ComponentHostMetrics, EndpointVariantMixin, Construct):
    """A SageMaker endpoint that hosts inference components: EndpointConfig (no model on the variant,
    the execution role on the config, managed instance scaling) and Endpoint.

    Minimal use::

        endpoint = ComponentEndpoint(self, "Endpoint")
        endpoint.add_component("Chat", model=S3ModelData(bucket, "models/x/"))

    serves one copy of the model with the pinned vLLM image on one ml.g6.xlarge. Settings are validated
    at synth time and all problems are reported together in one ``ValueError``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        instance_type: str = "ml.g6.xlarge",
        instance_pools: Sequence[str] | None = None,
        gpu_count: int | None = None,
        gpu_memory_gib: float | None = None,
        initial_instances: int | None = None,
        min_instances: int | None = None,
        max_instances: int | None = None,
        scale_to_zero: bool = False,
        routing_strategy: str | None = None,
        engine: str | EngineSpec = "vllm",
        image: ServingImage | None = None,
        inference_ami_version: str | None = None,
        capacity_reservation_arn: str | None = None,
        capacity_reservation_instances: int | None = None,
        provision_timeout: cdk.Duration | None = None,
        endpoint_name: str | None = None,
        role: iam.IRole | None = None,
        volume_kms_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] | None = None,
        enhanced_metrics: bool = False,
        metric_publish_frequency_s: int | None = None,
        prefix_routing_length: int | None = None,
        prefix_routing_concurrency: int | None = None,
    ) -> None:
        """
        :param instance_type: GPU instance type. Default: ml.g6.xlarge (1x L4, 24 GB).
        :param instance_pools: instance types SageMaker falls back to, in priority order after ``instance_type``,
            when it has no capacity for it (``ProductionVariant.InstancePools``, at most 4; each component then gets
            one ``Specifications`` entry per type). Each must be in the catalog and pass the endpoint's checks (image
            CUDA level and the variant's one AMI, volume key); each component checks its copies on each type (GPUs
            per copy, weight format, room for an update batch). ``max_instances`` counts instances of every type.
            Default: none (``instance_type`` only).
        :param gpu_count: GPUs per instance, with gpu_memory_gib for types the catalog lacks. Default: catalog.
        :param gpu_memory_gib: memory per GPU in GiB. Default: from the catalog.
        :param initial_instances: instances at creation, at least 1. Default: 1.
        :param min_instances: fewest instances SageMaker keeps (``ManagedInstanceScaling``).
            Default: 1; 0 with scale_to_zero (the only case 0 is allowed).
        :param max_instances: most instances SageMaker may add for the components' copies, which must leave room
            for each component's update batch beside its copies. Default: enough for every component's
            ``max_copies`` plus one update batch each (``max_instance_count``), at least the minimum and initial
            count; managed instance scaling adds the extra instance only while an update runs.
        :param scale_to_zero: let the endpoint release every instance when idle; its components then
            scale to zero copies and wake on the first request (which fails, as do all requests until
            a copy is in service, several minutes later). Default: off.
        :param routing_strategy: ``LEAST_OUTSTANDING_REQUESTS``, ``RANDOM`` or ``PREFIX_AWARE`` (requests sharing a
            prompt prefix go to the same instance; needs both ``prefix_routing_*``). Default: SageMaker's own.
        :param prefix_routing_length: with ``PREFIX_AWARE``: ``PrefixLength``, 1024-65536. Default: none (required).
        :param prefix_routing_concurrency: with ``PREFIX_AWARE``: ``ConcurrencyThreshold``, in-flight requests on an
            instance before another is chosen, 1-1024. Default: none (required).
        :param enhanced_metrics: ``MetricsConfig.EnableEnhancedMetrics``. Default: off (SageMaker's).
        :param metric_publish_frequency_s: ``MetricPublishFrequencyInSeconds`` (10-300, listed values). Default: 60.
        :param engine: the engine whose pinned image picks the default inference AMI. Default: vllm.
        :param image: the image whose CUDA level picks the default inference AMI; components whose
            images need a newer driver are refused. Default: the engine's pinned DLC image.
        :param inference_ami_version: the GPU inference AMI the instances run (the driver's CUDA level).
            Default: derived from the image's CUDA level (CUDA 13 ->
            al2023-ami-sagemaker-inference-gpu-4-1); SageMaker's default when the level is unknown.
        :param capacity_reservation_arn: run on reserved capacity only. Default: on-demand capacity.
        :param capacity_reservation_instances: instances the reservation holds. With a reservation, each component
            (``add_component``) is refused unless they hold the instances its copies need plus an update's batch of
            new copies beside them (``component_plan.reservation_room_problems``). Default: unknown, so a component
            on a reservation is refused.
        :param provision_timeout: ``VariantInstanceProvisionTimeoutInSeconds``, 300-3600 s: the total time SageMaker
            spends getting instances across all of ``instance_pools`` before the operation fails, not a wait per type
            (SageMaker guide, realtime-endpoints-heterogeneous); capacity only (botocore ProductionVariant). Each
            component's update timeout counts it once per batch. Default: SageMaker's.
        :param endpoint_name: the name clients call. Default: a stable name unique to this construct.
        :param role: execution role (on the endpoint config; components use it by default). Default: a
            role trusted by sagemaker.amazonaws.com; each component adds read access to its own model
            prefix, pull access to its image's repository and write access to its own log group.
        :param volume_kms_key: key for the ML storage volume; rejected on instance types with local NVMe storage
            (hardware-encrypted). Default: AWS-managed encryption.
        :param log_retention: retention of the endpoint's log group, kept after the endpoint.
            Default: one month.
        :param vpc: the VPC of the instances' network interfaces: the endpoint config's ``VpcConfig`` (the one
            inference-component endpoints take) and each component's Model's. Default: no VPC.
        :param vpc_subnets: the subnets, at least two in different Availability Zones (``SubnetSelection(subnets=
            [...])`` alone with ``security_groups``). Default: the vpc's private subnets (else its isolated ones).
        :param security_groups: 1-5 groups of that VPC. Default: one created with no inbound rule and HTTPS out.
            The execution role gets the EC2 network-interface actions SageMaker documents, limited to these subnets.
        """
        super().__init__(scope, id)
        engine_spec = engine if isinstance(engine, EngineSpec) else get_engine(engine)
        image = image or default_image(engine_spec, instance_type)
        name = endpoint_name or cdk.Names.unique_resource_name(self, max_length=63, separator="-")

        plan = plan_endpoint(
            engine=engine_spec,
            image=image,
            instance_type=instance_type,
            gpu_count=gpu_count,
            gpu_memory_gib=gpu_memory_gib,
            inference_ami_version=inference_ami_version,
            capacity_reservation_arn=capacity_reservation_arn,
            endpoint_name=None if cdk.Token.is_unresolved(name) else name,
            volume_kms_key=volume_kms_key is not None,
        )
        scaling = resolve_scaling(
            deployment_mode=INFERENCE_COMPONENT,
            instance_spec_gpu_count=plan.instance.gpu_count if plan.instance else None,
            min_instances=min_instances,
            max_instances=max_instances,
            initial_instances=initial_instances,
            scale_to_zero=scale_to_zero,
            routing_strategy=routing_strategy,
            check_copies=False,
        )
        features = metrics_problems(enhanced_metrics, metric_publish_frequency_s) + prefix_routing_problems(
            routing_strategy, prefix_routing_length, prefix_routing_concurrency
        )
        features += provision_timeout_problems(provision_timeout)
        if pools := reservation_pools_problem(instance_pools, capacity_reservation_arn):
            features.append(pools)

        def pool_check(pool: str) -> list[str]:
            # One variant, one AMI and one image serve every pool (realtime-endpoints-heterogeneous).
            return plan_endpoint(
                engine=engine_spec,
                image=image,
                instance_type=pool,
                inference_ami_version=plan.inference_ami_version,
                volume_kms_key=volume_kms_key is not None,
            ).errors

        pools = pool_problems(instance_type, instance_pools, pool_check) if instance_pools else []
        _fail("ComponentEndpoint", self.node.path, plan.errors + pools + scaling.errors + features)
        for warning in plan.warnings:
            cdk.Annotations.of(self).add_warning_v2("llm:component-endpoint", warning)

        self.instance_type = instance_type
        self.instance: InstanceSpec = plan.instance
        # Every instance type of the variant in priority order (one entry without pools); dashboards and alarms
        # read the InstanceType dimension SageMaker adds per type (realtime-endpoints-heterogeneous).
        self.instance_types = pool_types(instance_type, instance_pools)
        # Their catalog entries, the primary first: a component's copies must fit on each.
        self.pool_instances: list[InstanceSpec] = [
            plan.instance,
            # Every pool type is a catalog type (pool_problems refused the others above).
            *(spec for t in self.instance_types[1:] if (spec := lookup_instance(t)) is not None),
        ]
        self.inference_ami_version = plan.inference_ami_version
        self.scaling = scaling
        self.max_instances_given = max_instances
        self.capacity_reservation_arn = capacity_reservation_arn
        self.capacity_reservation_instances = capacity_reservation_instances
        # An update's new instances may wait this long for capacity, a total across every pool (SageMaker guide,
        # realtime-endpoints-heterogeneous): its components' update timeouts count it.
        self.provision_s = int(provision_timeout.to_seconds()) if provision_timeout else 0
        self.scale_to_zero = scale_to_zero
        self.variant_name = VARIANT_NAME
        self.monitored_name = name  # literal: the alarms that guard its updates must not reference it
        self.components: list[InferenceComponent] = []
        self.monitor = Monitor(self)

        self.log_group_name = f"/aws/sagemaker/Endpoints/{name}"
        self.log_retention = retained_log_group(
            self, "LogRetention", log_group_name=self.log_group_name, retention=log_retention
        )

        self.role = role or execution_role(self, "Role", description=f"Execution role of SageMaker endpoint {name}")
        self.owns_role = role is None
        grant_registry_login_and_metrics(self.role, acknowledged=self.owns_role, namespaces=ENDPOINT_METRIC_NAMESPACES)
        grant_log_streams(self.role, scope=self, log_group_name=self.log_group_name, acknowledged=self.owns_role)
        if volume_kms_key is not None:
            grant_volume_key(self.role, volume_kms_key, scope=self)
        network = {"vpc": vpc, "vpc_subnets": vpc_subnets, "security_groups": security_groups}
        self.placement = endpoint_placement(self, self.role, name=name, network=network, acknowledged=self.owns_role)

        variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name=VARIANT_NAME,
            # With pools, InstancePools replaces InstanceType (realtime-endpoints-heterogeneous; "you can use them
            # with single-model endpoints and with inference components"). ManagedInstanceScaling stays one range
            # for the variant, "the maximum number of instances that the endpoint can provision" (API
            # ProductionVariantManagedInstanceScaling; no per-pool count): instances of every type count.
            instance_type=None if instance_pools else instance_type,
            instance_pools=[
                sagemaker.CfnEndpointConfig.InstancePoolProperty(instance_type=t, priority=i)
                for i, t in enumerate(self.instance_types, 1)
            ]
            if instance_pools
            else None,
            initial_instance_count=scaling.initial_instances,
            managed_instance_scaling=sagemaker.CfnEndpointConfig.ManagedInstanceScalingProperty(
                status="ENABLED",
                min_instance_count=scaling.min_instances,
                # Unless given, sized at synth from the components added and their update policies.
                max_instance_count=scaling.max_instances
                if max_instances is not None
                else cdk.Lazy.number(_MaxInstanceCount(self)),
            ),
            routing_config=routing_config(routing_strategy, prefix_routing_length, prefix_routing_concurrency),
            inference_ami_version=plan.inference_ami_version,
            capacity_reservation_config=capacity_reservation(capacity_reservation_arn),
            variant_instance_provision_timeout_in_seconds=int(provision_timeout.to_seconds())
            if provision_timeout
            else None,
        )
        # No ModelName on the variant. The model download and startup timeouts belong to each component's
        # StartupParameters: the variant has no model of its own to download or start.
        self.endpoint_config, self.endpoint = config_and_endpoint(
            self,
            variant=variant,
            endpoint_name=name,
            log_retention=self.log_retention,
            volume_kms_key_arn=volume_kms_key.key_arn if volume_kms_key else None,
            execution_role_arn=self.role.role_arn,
            # Components' containers are isolated by the endpoint config's flag, which the API accepts only on
            # inference-component endpoints (CreateEndpointConfig API reference, EnableNetworkIsolation; also
            # hashicorp/terraform-provider-aws#48738). Each Model keeps its own flag as well.
            network_isolation=True,
            # An inference-component endpoint takes its VPC on the config, as it takes its role (CreateEndpointConfig
            # API reference, VpcConfig; hashicorp/terraform-provider-aws#48884: only without a model on the variant).
            vpc_config=self.placement.endpoint_config_vpc_config() if self.placement else None,
            metrics_config=metrics_config(enhanced_metrics, metric_publish_frequency_s),
        )
        # SageMaker manages the instance count (ManagedInstanceScaling): a config update keeps the current count
        # rather than resetting it to the initial one (UpdateEndpoint API reference, RetainAllVariantProperties).
        self.endpoint.retain_all_variant_properties = True
        # The role's policy must exist while the endpoint runs: deleted after it, created before it.
        self.endpoint.node.add_dependency(self.role)
        self.node.default_child = self.endpoint
        self.node.add_validation(_CapacityCheck(self))

    @classmethod
    def from_endpoint_name(cls, scope: Construct, id: str, endpoint_name: str) -> ImportedComponentEndpoint:
        """An endpoint hosting components deployed elsewhere, by name: ``grant_invoke`` (every component on it) and the
        variant's ``metric_*``, as here."""
        return ImportedComponentEndpoint(scope, id, endpoint_name=endpoint_name, variant_name=VARIANT_NAME)

    @property
    def endpoint_name(self) -> str:
        return self.endpoint.attr_endpoint_name

    @property
    def endpoint_arn(self) -> str:
        return self.endpoint.attr_endpoint_arn

    @property
    def max_instance_count(self) -> int:
        """``ManagedInstanceScaling.MaxInstanceCount``: ``max_instances`` when given, else room for every
        component's ``max_copies`` and one update batch of each (CloudFormation may update them together)."""
        if self.max_instances_given is not None:
            return self.max_instances_given
        return max(self.scaling.max_instances, self._instances_for(update_batches=True))

    @property
    def update_instance_count(self) -> int:
        """Instances of ``max_instance_count`` that only an update's batches use (counted by the quota check as an
        update's); 0 when ``max_instances`` is given."""
        if self.max_instances_given is not None:
            return 0
        serving = max(self.scaling.max_instances, self._instances_for(update_batches=False))
        return self.max_instance_count - serving

    @property
    def fewest_gpus_instance(self) -> InstanceSpec:
        """The variant's instance type with the fewest GPUs: SageMaker may place every instance on it (it falls back
        to any pool when the others have no capacity), so the instance counts are sized for it."""
        return min(self.pool_instances, key=lambda spec: spec.gpu_count)

    def _instances_for(self, *, update_batches: bool) -> int:
        gpus = self.fewest_gpus_instance.gpu_count if self.instance else 0
        if not gpus:
            return 0
        needed = sum(
            (c.max_copies + (c.update_batch_copies if update_batches else 0)) * c.accelerators_per_copy
            for c in self.components
        )
        return math.ceil(needed / gpus)

    def watched(self) -> Watched:
        """What its monitor watches: the variant hosting the components, by its literal names."""
        enhanced, publish_s = metrics_settings(self.endpoint_config)
        return Watched(
            kind="variant",
            name=self.monitored_name,
            title=self.node.id,
            variant_name=self.variant_name,
            hosts_components=True,
            gpus=self.instance.gpu_count if self.instance else None,
            instance_types=tuple(self.instance_types),
            enhanced=enhanced,
            publish_s=publish_s,
        )

    @property
    def parts(self) -> list[Monitored]:
        """Every component on this endpoint, each followed by its adapters (the order of the dashboard's rows)."""
        return [part for c in self.components for part in (c, *c.adapters)]

    @property
    def alarms(self) -> list[cloudwatch.Alarm]:
        """Every alarm of every component on this endpoint, and of their adapters."""
        return [alarm for part in self.parts for alarm in part.alarms]

    @property
    def dashboard(self) -> cloudwatch.Dashboard | None:
        """The dashboard of ``add_dashboard``, if any."""
        return self.monitor.dashboard

    @property
    def dashboard_url(self) -> str:
        """The console address of the dashboard (``add_dashboard`` first)."""
        return self.monitor.dashboard_url

    def add_alarms(
        self, thresholds: AlarmThresholds | None = None, *, topic: sns.ITopic | None = None
    ) -> list[cloudwatch.Alarm]:
        """``add_alarms`` on each component added so far and on each of their adapters."""
        for part in self.parts:
            part.add_alarms(thresholds, topic=topic)
        return self.alarms

    def add_dashboard(
        self, *, smoke_test: SmokeFigures | None = None, scope: Construct | None = None
    ) -> cloudwatch.Dashboard:
        """A dashboard of the endpoint (GPU, CPU, disk, GPU reservation, instances) and of each component and
        adapter on it, those added later too (invocations and errors, latency; a component's copies, the GPU of its
        copies and requests finding no copy), then every alarm's state. ``scope`` as for
        ``GpuEndpoint.add_dashboard``."""
        return self.monitor.add_dashboard(
            scope=scope, smoke_test=smoke_test, parts=lambda: self.parts, alarms=lambda: self.alarms
        )

    def add_component(self, id: str, *, model: ModelSource, **props: Any) -> InferenceComponent:
        """A new ``InferenceComponent`` on this endpoint, as a child of it (same props)."""
        return InferenceComponent(self, id, endpoint=self, model=model, **props)


@jsii.implements(cdk.IStableNumberProducer)
class _MaxInstanceCount:
    def __init__(self, endpoint: ComponentEndpoint) -> None:
        self.endpoint = endpoint

    def produce(self) -> int:
        return self.endpoint.max_instance_count


@jsii.implements(IValidation)
class _CapacityCheck:
    """All components' copies must fit on the endpoint's largest fleet (checked at synth)."""

    def __init__(self, endpoint: ComponentEndpoint) -> None:
        self.endpoint = endpoint

    def validate(self) -> list[str]:
        endpoint = self.endpoint
        # One component is checked on its own (construction, apply_update_policy); the default fits them all.
        if len(endpoint.components) < 2 or endpoint.max_instances_given is None:
            return []
        given = endpoint.max_instances_given
        fewest = endpoint.fewest_gpus_instance
        per_instance = fewest.gpu_count
        gpus = per_instance * given
        # Named when it is a fallback: every instance may be of that type.
        of = f" ({fewest.instance_type})" if len(endpoint.instance_types) > 1 else ""
        errors = []
        for label in ("max_copies", "initial_copies"):
            needed = sum(getattr(c, label) * c.accelerators_per_copy for c in endpoint.components)
            if needed > gpus:
                parts = " + ".join(
                    f"{c.node.id} {getattr(c, label)} x {c.accelerators_per_copy}" for c in endpoint.components
                )
                errors.append(
                    f"the components' {label} need {parts} = {needed} GPUs together, but max_instances="
                    f"{given} x {per_instance} GPU(s) per instance{of} give "
                    f"{gpus}; lower their {label} or raise max_instances."
                )
        if not errors:
            # Each component's update batch is placed beside every copy (API InferenceComponentRollingUpdatePolicy).
            needed = sum((c.max_copies + c.update_batch_copies) * c.accelerators_per_copy for c in endpoint.components)
            if needed > gpus:
                errors.append(
                    f"the components' max_copies plus one update batch each need {needed} GPUs, but max_instances="
                    f"{given} x {per_instance} GPU(s) per instance{of} give {gpus}: an update would "
                    f"wait for room until it times out; raise max_instances to "
                    f"{math.ceil(needed / per_instance)} or leave it unset."
                )
        return errors


class InferenceComponent(CopyMetrics, Construct):
    """One model as an inference component of a ``ComponentEndpoint``: a SageMaker Model (uncompressed
    S3 prefix, network-isolated) and an InferenceComponent with its own GPUs per copy and copy count,
    optionally autoscaled and able to scale to zero.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        endpoint: ComponentEndpoint,
        model: ModelSource,
        engine: str | EngineSpec = "vllm",
        image: ServingImage | None = None,
        tensor_parallel_size: int | None = None,
        max_model_len: int | None = None,
        max_num_seqs: int | None = None,
        engine_env: Mapping[str, Any] | None = None,
        container_env: Mapping[str, Any] | None = None,
        min_memory_mb: int | None = None,
        initial_copies: int | None = None,
        min_copies: int | None = None,
        max_copies: int | None = None,
        scale_to_zero: bool | None = None,
        target_concurrency: float | None = None,
        scale_in_cooldown: cdk.Duration | None = None,
        scale_out_cooldown: cdk.Duration | None = None,
        startup_timeout: cdk.Duration | None = None,
        download_timeout: cdk.Duration | None = None,
        component_name: str | None = None,
        role: iam.IRole | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        allow_checkpoint_code: bool = False,
        data_cache: bool | None = None,
    ) -> None:
        """
        :param endpoint: the endpoint that hosts this component.
        :param model: where the weights are (an S3 prefix); read access is granted to the role. When the
            source has a ``dependable`` (a construct that puts the weights there), the Model waits for it.
        :param engine: serving engine, a name in data/engines.json (``vllm``, ``sglang``, ``lmi``, ``llamacpp``), or an
            ``EngineSpec`` (``get_engine("llamacpp").for_model_file("m-Q4_K_M.gguf")`` for a GGUF file). Default: vllm.
        :param image: serving image. Default: the engine's pinned DLC tag from data/engines.json.
        :param tensor_parallel_size: GPUs one copy spans (``NumberOfAcceleratorDevicesRequired``), at most
            the instance's GPUs. Default: every GPU of the instance.
        :param max_model_len: longest sequence the engine accepts. Default: the engine's own.
        :param max_num_seqs: concurrent sequences per copy. Default: the engine's own.
        :param engine_env: extra engine flags (``SM_VLLM_...``). Default: none.
        :param container_env: other container variables. Default: none.
        :param min_memory_mb: host memory reserved per copy (``MinMemoryRequiredInMb``), a placement
            reservation, not a limit. Default: 1024 MB; weights go to GPU memory, and a reservation near
            the instance's memory is refused by SageMaker although the instance is healthy.
        :param initial_copies: copies at creation (``RuntimeConfig.CopyCount``). Default: 1.
        :param min_copies: fewest copies autoscaling keeps. Default: 1; 0 with scale_to_zero.
        :param max_copies: most copies autoscaling adds. Default: the larger of 1, min and initial copies,
            that is a fixed copy count without autoscaling.
        :param scale_to_zero: scale to zero copies when idle and back to one copy on the first request
            (an alarm on NoCapacityInvocationFailures drives a step policy). Default: the endpoint's setting.
        :param target_concurrency: concurrent requests per copy that target tracking aims for
            (``SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution``). Default: 5.
        :param scale_in_cooldown: Default: Application Auto Scaling's (300 s for SageMaker).
        :param scale_out_cooldown: Default: Application Auto Scaling's (300 s for SageMaker).
        :param startup_timeout: container health-check timeout, 60-3600 s. Default: 20 minutes.
        :param download_timeout: model download timeout, 60-3600 s. Default: 20 minutes.
        :param component_name: the name clients pass as ``InferenceComponentName``. Default: a stable
            name unique to this construct.
        :param role: execution role of the model. Default: the endpoint's execution role.
        :param log_retention: retention of the component's log group
            ``/aws/sagemaker/InferenceComponents/<name>``, kept after the component. Default: one month.
        :param allow_checkpoint_code: let the container run code from the checkpoint or the environment: variables
            that load code (PYTHONPATH, LD_PRELOAD, an LMI entry point that is a .py file...) are accepted with a
            warning instead of refused. Give the same to the ``StagedCheckpoint`` and ``DeploymentPreflight``.
            Default: refused (constructs_lib/data/engines.json guarded_env).
        :param data_cache: ``DataCacheConfig.EnableCaching``: each instance keeps the model artifacts and image, so
            copies added later start from the cache. Default: SageMaker's (on for instance types with more than
            232 GiB of local NVMe storage, per the AWS::SageMaker::InferenceComponent schema).
        """
        super().__init__(scope, id)
        engine_spec = engine if isinstance(engine, EngineSpec) else get_engine(engine)
        image = image or default_image(engine_spec, endpoint.instance_type)
        startup_timeout = startup_timeout or DEFAULT_TIMEOUT
        download_timeout = download_timeout or DEFAULT_TIMEOUT
        # What an update's new copies may take to come up; its timeout must cover it (apply_update_policy).
        self.provisioning_s = int(download_timeout.to_seconds() + startup_timeout.to_seconds())
        scale_to_zero = endpoint.scale_to_zero if scale_to_zero is None else scale_to_zero
        name = component_name or cdk.Names.unique_resource_name(self, max_length=63, separator="-")
        instance = endpoint.instance
        unknown = not instance.in_catalog

        # The image, engine flags, timeouts and the endpoint's AMI: the same checks as a standard endpoint.
        # tensor_parallel_size is left out here: a copy may use fewer GPUs than the instance has.
        plan = plan_endpoint(
            engine=engine_spec,
            image=image,
            instance_type=endpoint.instance_type,
            gpu_count=instance.gpu_count if unknown else None,
            gpu_memory_gib=instance.gpu_memory_gib if unknown else None,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            engine_env=engine_env,
            container_env=container_env,
            inference_ami_version=endpoint.inference_ami_version,
            startup_timeout_s=startup_timeout.to_seconds(),
            download_timeout_s=download_timeout.to_seconds(),
            allow_checkpoint_code=allow_checkpoint_code,
        )
        scaling = resolve_scaling(
            deployment_mode=INFERENCE_COMPONENT,
            instance_spec_gpu_count=instance.gpu_count,
            tensor_parallel_size=tensor_parallel_size,
            min_instances=endpoint.scaling.min_instances,
            max_instances=endpoint.max_instances_given,
            initial_instances=endpoint.scaling.initial_instances,
            min_copies=min_copies,
            max_copies=max_copies,
            initial_copies=initial_copies,
            scale_to_zero=scale_to_zero,
            target_concurrency=target_concurrency,
            min_memory_mb=min_memory_mb,
            # Room for a new copy beside the old ones; apply_update_policy checks the policy's own batch.
            update_batch_copies=1,
            capacity_reservation=endpoint.capacity_reservation_arn is not None,
            capacity_reservation_instances=endpoint.capacity_reservation_instances,
        )
        errors = plan.errors + scaling.errors
        if memory := host_memory_problem(endpoint.instance_type, instance.memory_gib, scaling.min_memory_mb):
            errors.append(memory)
        if len(endpoint.instance_types) > 1 and not errors:
            errors += pool_problems(
                endpoint.instance_type,
                endpoint.instance_types[1:],
                lambda pool: _pool_problems(
                    endpoint,
                    pool,
                    engine=engine_spec,
                    image=image,
                    accelerators=scaling.accelerators_per_copy,
                    max_model_len=max_model_len,
                    max_num_seqs=max_num_seqs,
                    engine_env=engine_env,
                    container_env=container_env,
                    allow_checkpoint_code=allow_checkpoint_code,
                    copies={"min_copies": min_copies, "max_copies": max_copies, "initial_copies": initial_copies},
                    scale_to_zero=scale_to_zero,
                    min_memory_mb=scaling.min_memory_mb,
                ),
            )
        if not cdk.Token.is_unresolved(name) and (len(name) > 63 or not matches(COMPONENT_NAME, name)):
            errors.append(
                f"component_name={name!r} is not a valid inference component name; allowed: 1-63 letters, "
                "digits and hyphens, starting and ending with a letter or digit."
            )
        _fail("InferenceComponent", self.node.path, errors)
        for warning in plan.warnings:
            cdk.Annotations.of(self).add_warning_v2("llm:inference-component", warning)

        accelerators = scaling.accelerators_per_copy
        # What the environment is built from, kept so that an adapter can enable LoRA on it (enable_adapters).
        self._environment_args: dict[str, Any] = {
            "tensor_parallel_size": accelerators,
            "max_model_len": max_model_len,
            "max_num_seqs": max_num_seqs,
            "engine_env": dict(engine_env or {}),
            "container_env": dict(container_env or {}),
            "allow_checkpoint_code": allow_checkpoint_code,
        }
        environment, _ = build_environment(engine_spec, **self._environment_args)  # problems: in plan.errors
        self.model_source = model
        self.endpoint = endpoint
        self.engine = engine_spec
        self.image = image
        self.environment = environment
        self.inference_component_name = name
        self.accelerators_per_copy = accelerators
        self.min_copies = scaling.min_copies
        self.initial_copies = scaling.initial_copies
        self.max_copies = scaling.max_copies
        self.scale_to_zero = scale_to_zero
        self.scalable_target: appscaling.ScalableTarget | None = None
        self.wake_alarm: cloudwatch.Alarm | None = None
        self.monitor = Monitor(self)
        self.update_policy: UpdatePolicy | None = None
        # Adapter components on this base (AdapterComponent adds itself): the endpoint's dashboard shows them.
        self.adapters: list[Monitored] = []

        self.log_group_name = f"/aws/sagemaker/InferenceComponents/{name}"
        self.log_retention = retained_log_group(
            self, "LogRetention", log_group_name=self.log_group_name, retention=log_retention
        )
        self.role = role or endpoint.role
        acknowledged = role is None and endpoint.owns_role
        grant_model_and_image(self.role, scope=self, model=model, image=image, acknowledged=acknowledged)
        if role is not None:
            grant_registry_login_and_metrics(self.role, acknowledged=False, namespaces=ENDPOINT_METRIC_NAMESPACES)
            if endpoint.placement is not None:
                grant_network_interfaces(self.role, scope=self, placement=endpoint.placement, acknowledged=False)
        grant_log_streams(self.role, scope=self, log_group_name=self.log_group_name, acknowledged=acknowledged)
        check_placement(model, endpoint.placement)  # its own preflight, if any, checks the endpoint's network

        # The Model carries the endpoint's VpcConfig too: CreateModel is where an organization's policy reads
        # sagemaker:VpcSubnets (Service Authorization Reference, Amazon SageMaker AI: CreateModel condition keys).
        self.model: sagemaker.CfnModel = serving_model(
            self,
            "Model",
            role=self.role,
            model=model,
            image=image,
            environment=environment,
            vpc_config=endpoint.placement.model_vpc_config() if endpoint.placement else None,
            instance_types=endpoint.instance_types,
        )
        # The same for every instance type: one Model (its environment holds the tensor parallel size, so a copy
        # takes as many GPUs on each type), the same host memory reservation and timeouts.
        shared: dict[str, Any] = {
            "model_name": self.model.attr_model_name,
            "compute_resource_requirements": (
                sagemaker.CfnInferenceComponent.InferenceComponentComputeResourceRequirementsProperty(
                    number_of_accelerator_devices_required=accelerators,
                    min_memory_required_in_mb=scaling.min_memory_mb,
                )
            ),
            "data_cache_config": sagemaker.CfnInferenceComponent.InferenceComponentDataCacheConfigProperty(
                enable_caching=data_cache
            )
            if data_cache is not None
            else None,
            "startup_parameters": sagemaker.CfnInferenceComponent.InferenceComponentStartupParametersProperty(
                model_data_download_timeout_in_seconds=int(download_timeout.to_seconds()),
                container_startup_health_check_timeout_in_seconds=int(startup_timeout.to_seconds()),
            ),
        }
        pooled = len(endpoint.instance_types) > 1
        self.component = sagemaker.CfnInferenceComponent(
            self,
            "Resource",
            endpoint_name=endpoint.endpoint_name,
            inference_component_name=name,
            variant_name=endpoint.variant_name,
            # On an endpoint with instance pools: Specifications, one entry per instance type (2-5, InstanceType
            # required), instead of Specification (exactly one of the two; cfn-lint schema of
            # AWS::SageMaker::InferenceComponent, InferenceComponentSpecificationList; botocore sagemaker
            # CreateInferenceComponentInput.Specifications).
            specification=None
            if pooled
            else sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(**shared),
            specifications=[
                sagemaker.CfnInferenceComponent.InferenceComponentSpecificationForInstanceTypeProperty(
                    instance_type=t, **shared
                )
                for t in endpoint.instance_types
            ]
            if pooled
            else None,
            runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
                copy_count=scaling.initial_copies
            ),
        )
        self.component.node.add_dependency(self.log_retention)
        self.component.node.add_dependency(self.role)
        self.node.default_child = self.component
        endpoint.components.append(self)
        # The endpoint's instances are GPUs paid for from the moment it is created: whatever puts or checks
        # the weights (staging, preflight) must finish first, not only before this component.
        dependable = getattr(model, "dependable", None)
        if dependable is not None:
            endpoint.endpoint.node.add_dependency(dependable)

        if scaling.scales_copies:
            self._autoscale(scaling.target_concurrency, scale_in_cooldown, scale_out_cooldown)

    def _autoscale(
        self,
        target_concurrency: float,
        scale_in_cooldown: cdk.Duration | None,
        scale_out_cooldown: cdk.Duration | None,
    ) -> None:
        # The resource id names the component literally, so the dependency is declared: the target (and,
        # through it, every policy) is created after the component and deleted before it.
        self.scalable_target = appscaling.ScalableTarget(
            self,
            "CopyScaling",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"inference-component/{self.inference_component_name}",
            scalable_dimension="sagemaker:inference-component:DesiredCopyCount",
            min_capacity=self.min_copies,
            max_capacity=self.max_copies,
            role=sagemaker_scaling_role(self, "ScalingRole"),
        )
        self.scalable_target.node.add_dependency(self.component)
        self.scalable_target.scale_to_track_metric(
            "ConcurrentRequestsPerCopy",
            target_value=target_concurrency,
            predefined_metric=(
                appscaling.PredefinedMetric.SAGEMAKER_INFERENCE_COMPONENT_CONCURRENT_REQUESTS_PER_COPY_HIGH_RESOLUTION
            ),
            scale_in_cooldown=scale_in_cooldown,
            scale_out_cooldown=scale_out_cooldown,
        )
        if not self.scale_to_zero:
            return
        # Target tracking cannot leave zero copies (there is no per-copy value to track), so a step policy
        # does, driven by the requests that find no capacity, as AWS documents it: ChangeInCapacity +1,
        # Maximum aggregation, 60 s cooldown ("Scale an endpoint to zero instances", SageMaker developer
        # guide; aws-samples/sagemaker-genai-hosting-examples 03-features/autoscaling/scale_down_to_zero.ipynb).
        # Not ExactCapacity 1: requests can also find no capacity on a busy component with copies, and an
        # exact 1 would then scale it in to one copy. During the cooldown the copy being added counts as
        # capacity, so a wake that takes minutes adds one copy per cooldown at most, within max_copies.
        wake = appscaling.StepScalingAction(
            self,
            "WakeFromZero",
            scaling_target=self.scalable_target,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
            cooldown=WAKE_COOLDOWN,
        )
        wake.add_adjustment(adjustment=1, lower_bound=0)
        wake.node.add_dependency(self.component)
        self.wake_alarm = cloudwatch.Alarm(
            self,
            "WakeAlarm",
            metric=self.metric_no_capacity_invocation_failures(period=WAKE_ALARM_PERIOD),
            threshold=1,
            # >= 1, not > 1: a single request must wake the component.
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"Wakes inference component {self.inference_component_name} from zero copies "
            "when a request finds no capacity.",
        )
        self.wake_alarm.add_alarm_action(cloudwatch_actions.ApplicationScalingAction(wake))

    @property
    def update_batch_copies(self) -> int:
        """Copies an update of this component places beside the serving ones (its rolling batch; 1 without)."""
        policy = self.update_policy
        return policy.extra_instances_for_component_update() if policy is not None else 1

    def _rolling_room_problem(self, batch: int) -> str | None:
        given = self.endpoint.max_instances_given
        gpus = self.endpoint.fewest_gpus_instance.gpu_count
        if given is None or not gpus or len(self.endpoint.components) > 1:  # several: the endpoint's check
            return None
        return rolling_room_problem(given, gpus, self.max_copies, batch, self.accelerators_per_copy)

    @property
    def max_lora_rank(self) -> int | None:
        """The largest LoRA rank this component's engine serves with its settings (None: it serves no adapters)."""
        return self.engine.max_lora_rank(self._environment_args["engine_env"])

    def adapter_setting_problems(self) -> list[str]:
        """This component's own engine_env and container_env values that would switch off serving adapters."""
        return adapter_env_problems(
            self.engine, self._environment_args["engine_env"], self._environment_args["container_env"]
        )

    def enable_adapters(self) -> None:
        """Add what the engine needs to serve adapter inference components (engines.json ``adapters``: vLLM's
        ``SM_VLLM_ENABLE_LORA`` and runtime adapter loading) to this component's Model; a value the user gave wins.
        ``AdapterComponent`` calls it on its base. ValueError for an engine that serves no adapters."""
        engine_env, container_env = adapter_env(
            self.engine, self._environment_args["engine_env"], self._environment_args["container_env"]
        )
        if (engine_env, container_env) == (
            self._environment_args["engine_env"],
            self._environment_args["container_env"],
        ):
            return
        self._environment_args.update(engine_env=engine_env, container_env=container_env)
        environment, _ = build_environment(self.engine, **self._environment_args)
        # Key by key: one override of the whole map would drop the user's own overrides below it.
        for name, value in environment.items():
            if self.environment.get(name) != value:
                self.model.add_property_override(f"PrimaryContainer.Environment.{name}", value)
        self.environment = environment

    @classmethod
    def from_component_name(
        cls, scope: Construct, id: str, *, endpoint_name: str, inference_component_name: str
    ) -> ImportedComponent:
        """A component (or adapter component) deployed elsewhere, by name: ``grant_invoke`` (this component only),
        ``openai_base_url`` and ``metric_*``, as here."""
        return ImportedComponent(
            scope, id, endpoint_name=endpoint_name, inference_component_name=inference_component_name
        )

    @property
    def inference_component_arn(self) -> str:
        return self.component.attr_inference_component_arn

    def grant_invoke(self, grantee: iam.IGrantable, *, bearer_token: bool = False) -> iam.Grant:
        """Let ``grantee`` invoke this component (InvokeEndpoint with InferenceComponentName), streamed or not.

        The IAM service authorization reference lists both the endpoint and the inference component as resource
        types of ``sagemaker:InvokeEndpoint`` and ``InvokeEndpointWithResponseStream``, so the grant names both
        ARNs (as the smoke test's role does); other components of the endpoint are not included.

        :param bearer_token: also allow ``sagemaker:CallWithBearerToken`` (on ``*``), which the OpenAI-compatible
            path (``openai_base_url``) needs with a bearer token (``hosting.grant_bearer_token``). Default: no.
        """
        return grant_invoke_arns(
            grantee, [self.endpoint.endpoint_arn, self.inference_component_arn], bearer_token=bearer_token
        )

    @property
    def openai_base_url(self) -> str:
        """This component's OpenAI-compatible base URL: the endpoint's path naming the component."""
        return openai_base_url(self.endpoint.endpoint_name, self.inference_component_name)

    def watched(self) -> Watched:
        """What its monitor watches: this component's copies, with its endpoint's instance types and MetricsConfig."""
        enhanced, publish_s = metrics_settings(self.endpoint.endpoint_config)
        return Watched(
            kind="component",
            name=self.inference_component_name,
            title=self.node.id,
            instance_types=tuple(self.endpoint.instance_types),
            enhanced=enhanced,
            publish_s=publish_s,
            wakes_on_request=self.scale_to_zero,
        )

    @property
    def alarms(self) -> list[cloudwatch.Alarm]:
        """The alarms of ``add_alarms`` (none before it)."""
        return self.monitor.alarms

    def add_alarms(
        self, thresholds: AlarmThresholds | None = None, *, topic: sns.ITopic | None = None
    ) -> list[cloudwatch.Alarm]:
        """Alarms on this component's 5xx errors, p99 model latency, GPU memory of its copies and requests
        that find no copy (left out with scale-to-zero, where that is how it wakes). Children ``Alarms/<Name>``."""
        return self.monitor.add_alarms(thresholds, topic=topic)

    def apply_update_policy(
        self, policy: UpdatePolicy, *, rollback_on: Sequence[cloudwatch.Alarm] | None = None
    ) -> UpdatePolicy:
        """Set the component's ``DeploymentConfig``: a rolling update of ``policy.step_size`` copies per
        batch, rolled back when one of ``rollback_on`` fires. Default ``rollback_on``: ``add_alarms``'s."""
        copies = max(self.initial_copies, self.max_copies)
        # A batch may need a new instance (managed instance scaling), which may wait for capacity.
        provision = self.endpoint.provision_s
        problems = policy.problems(
            component_mode=True, instances=0, copies=copies, provisioning_s=self.provisioning_s, provision_s=provision
        )
        room = self._rolling_room_problem(policy.extra_instances_for_component_update())
        _fail("InferenceComponent", self.node.path, problems + ([room] if room else []))
        alarms = rollback_alarms(list(rollback_on) if rollback_on is not None else self.alarms, self.node.path)
        # An explicit limit, so that an update that cannot finish fails and rolls back in time (derived_timeout_s).
        timeout = policy.derived_timeout_s(
            instances=0, copies=copies, provisioning_s=self.provisioning_s, provision_s=provision
        )
        config = policy.component_deployment_config([a.alarm_name for a in alarms], timeout_s=timeout)
        self.component.deployment_config = config
        if config is not None:
            grant_describe_alarms(self.role, alarms)
            # 5-50% of the copy count when the update starts, which copy autoscaling may have moved anywhere
            # from min_copies (at least 1: scale-to-zero's 0 leaves nothing to roll) to max_copies.
            scaled = self.scalable_target is not None
            fewest = max(self.min_copies if scaled else self.initial_copies, 1)
            most = max(self.max_copies if scaled else self.initial_copies, 1)
            for warning in policy.rolling_batch_warnings(fewest=fewest, most=most):
                cdk.Annotations.of(self).add_warning_v2("llm:rolling-batch", warning)
        self.update_policy = policy
        return policy


def _pool_problems(
    endpoint: ComponentEndpoint,
    pool: str,
    *,
    engine: EngineSpec,
    image: ServingImage,
    accelerators: int | None,
    copies: Mapping[str, int | None],
    scale_to_zero: bool,
    min_memory_mb: int | None,
    **settings: Any,
) -> list[str]:
    """An inference component's checks on one fallback type of its endpoint, with its settings: the image and weight
    format against that type's GPU, and its copies (GPUs per copy, room for an update batch) on its GPUs."""
    spec = resolve_instance(pool)[0]
    errors = plan_endpoint(
        engine=engine,
        image=image,
        instance_type=pool,
        inference_ami_version=endpoint.inference_ami_version,
        **settings,
    ).errors
    if spec is None:
        return errors
    if memory := host_memory_problem(pool, spec.memory_gib, min_memory_mb):
        errors.append(memory)
    return (
        errors
        + resolve_scaling(
            deployment_mode=INFERENCE_COMPONENT,
            instance_spec_gpu_count=spec.gpu_count,
            # The primary's: one Model, one tensor parallel size on every type.
            tensor_parallel_size=accelerators,
            min_instances=endpoint.scaling.min_instances,
            max_instances=endpoint.max_instances_given,
            initial_instances=endpoint.scaling.initial_instances,
            scale_to_zero=scale_to_zero,
            update_batch_copies=1,
            **copies,
        ).errors
    )
