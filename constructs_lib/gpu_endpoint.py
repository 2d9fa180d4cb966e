"""``GpuEndpoint``: one model on whole GPU instances behind a SageMaker real-time endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from .endpoint_plan import plan_endpoint
from .engines import EngineSpec, get_engine
from .images import ServingImage
from .model_data import ModelSource
from .nag import acknowledge, acknowledge_wildcard

VARIANT_NAME = "AllTraffic"


class GpuEndpoint(Construct):
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
        startup_timeout: cdk.Duration | None = None,
        download_timeout: cdk.Duration | None = None,
        endpoint_name: str | None = None,
        role: iam.IRole | None = None,
        volume_kms_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        """
        :param model: where the weights are (an S3 prefix); read access is granted to the role.
        :param engine: serving engine, ``vllm`` or ``sglang``. Default: vllm.
        :param image: serving image. Default: the engine's pinned DLC tag from data/engines.json.
        :param instance_type: GPU instance type. Default: ml.g6.xlarge (1x L4, 24 GB).
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
        :param inference_ami_version: Default: derived from the image's CUDA level (CUDA 13 ->
            al2023-ami-sagemaker-inference-gpu-4-1); SageMaker's default when the level is unknown.
        :param capacity_reservation_arn: run on reserved capacity only. Default: on-demand capacity.
        :param startup_timeout: container health-check timeout, 60-3600 s. Default: 20 minutes.
        :param download_timeout: model download timeout, 60-3600 s. Default: 20 minutes.
        :param endpoint_name: the name clients call. Default: a stable name unique to this construct.
        :param role: execution role. Default: a role trusted by sagemaker.amazonaws.com that can read
            only the model prefix, pull only the image's repository and write only its log group.
        :param volume_kms_key: key for the ML storage volume. Default: AWS-managed encryption.
            Rejected on instance types with local NVMe storage (hardware-encrypted).
        :param log_retention: retention of the endpoint's log group, which is created before the
            endpoint and kept after it (so a failed deploy's logs survive the rollback). Default: one month.
        """
        super().__init__(scope, id)
        engine_spec = engine if isinstance(engine, EngineSpec) else get_engine(engine)
        image = image or ServingImage.from_dlc(engine_spec)
        startup_timeout = startup_timeout or cdk.Duration.minutes(20)
        download_timeout = download_timeout or cdk.Duration.minutes(20)
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
        )
        if plan.errors:
            raise ValueError(
                f"GpuEndpoint {self.node.path}: " + " ".join(f"({i}) {e}" for i, e in enumerate(plan.errors, 1))
            )
        for warning in plan.warnings:
            cdk.Annotations.of(self).add_warning_v2("llm:gpu-endpoint", warning)

        self.engine = engine_spec
        self.image = image
        self.instance = plan.instance
        self.tensor_parallel_size = plan.tensor_parallel_size
        self.variant_name = VARIANT_NAME
        self.environment = plan.environment

        # SageMaker writes to /aws/sagemaker/Endpoints/<name> whether or not the group exists. A
        # LogGroup resource would be deleted by the rollback of a failed first deploy, taking the only
        # explanation of the failure with it, and a retained one blocks the next deploy ("already
        # exists"). LogRetention creates or adopts the group, sets its retention and keeps it.
        self.log_group_name = f"/aws/sagemaker/Endpoints/{name}"
        self.log_retention = logs.LogRetention(
            self, "LogRetention", log_group_name=self.log_group_name, retention=log_retention
        )
        self.log_group = logs.LogGroup.from_log_group_name(self, "Logs", self.log_group_name)
        _harden_log_retention(self.log_retention)

        self.role = role or iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"Execution role of SageMaker endpoint {name}",
        )
        model.grant_read(self.role)
        iam.Grant.add_to_principal(
            grantee=self.role,
            actions=["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            resource_arns=[image.repository_arn(self)],
        )
        iam.Grant.add_to_principal(grantee=self.role, actions=["ecr:GetAuthorizationToken"], resource_arns=["*"])
        iam.Grant.add_to_principal(
            grantee=self.role,
            actions=["cloudwatch:PutMetricData"],
            resource_arns=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}},
        )
        log_streams_arn = cdk.Stack.of(self).format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{self.log_group_name}:*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        iam.Grant.add_to_principal(
            grantee=self.role,
            actions=["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
            resource_arns=[log_streams_arn],
        )
        if role is None:
            acknowledge_wildcard(
                self.role,
                resource="*",
                reason="ecr:GetAuthorizationToken and cloudwatch:PutMetricData have no resource-level "
                "permissions; image pulls are limited to the serving image's repository and metrics to the "
                "/aws/sagemaker/Endpoints namespace by condition.",
            )
            acknowledge_wildcard(
                self.role,
                resource=model.object_arn_pattern,
                reason="SageMaker downloads every object below the model prefix (S3Prefix model data); "
                "the wildcard stops at that prefix.",
            )
            acknowledge_wildcard(
                self.role,
                resource=log_streams_arn,
                reason="Log streams of this endpoint's own log group; SageMaker names a stream per "
                "variant and instance at run time.",
            )
        if volume_kms_key is not None:
            volume_kms_key.grant_encrypt_decrypt(self.role)

        self.model = sagemaker.CfnModel(
            self,
            "Model",
            execution_role_arn=self.role.role_arn,
            enable_network_isolation=True,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image.image_uri(self),
                environment=plan.environment,
                model_data_source=sagemaker.CfnModel.ModelDataSourceProperty(
                    s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                        s3_uri=model.s3_uri, s3_data_type="S3Prefix", compression_type="None"
                    )
                ),
            ),
        )
        # The role's policy must exist before SageMaker validates the model's access.
        self.model.node.add_dependency(self.role)

        variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name=VARIANT_NAME,
            model_name=self.model.attr_model_name,
            instance_type=instance_type,
            initial_instance_count=instance_count,
            initial_variant_weight=1.0,
            model_data_download_timeout_in_seconds=int(download_timeout.to_seconds()),
            container_startup_health_check_timeout_in_seconds=int(startup_timeout.to_seconds()),
            inference_ami_version=plan.inference_ami_version,
            capacity_reservation_config=(
                sagemaker.CfnEndpointConfig.CapacityReservationConfigProperty(
                    capacity_reservation_preference="capacity-reservations-only",
                    ml_reservation_arn=capacity_reservation_arn,
                )
                if capacity_reservation_arn
                else None
            ),
        )
        # No EndpointConfigName: configs are immutable, a fixed name would block replacement.
        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self,
            "Config",
            production_variants=[variant],
            kms_key_id=volume_kms_key.key_arn if volume_kms_key else None,
        )
        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Resource",
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
            endpoint_name=name,
        )
        self.endpoint.node.add_dependency(self.log_retention)
        self.node.default_child = self.endpoint

    @property
    def endpoint_name(self) -> str:
        return self.endpoint.attr_endpoint_name

    @property
    def endpoint_arn(self) -> str:
        return self.endpoint.attr_endpoint_arn

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` invoke the endpoint, with and without response streaming."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
            resource_arns=[self.endpoint_arn],
        )

    def metric(
        self,
        metric_name: str,
        *,
        namespace: str = "AWS/SageMaker",
        statistic: str = "Average",
        period: cdk.Duration | None = None,
    ) -> cloudwatch.Metric:
        """A CloudWatch metric of this endpoint's variant."""
        return cloudwatch.Metric(
            namespace=namespace,
            metric_name=metric_name,
            dimensions_map={"EndpointName": self.endpoint_name, "VariantName": self.variant_name},
            statistic=statistic,
            period=period or cdk.Duration.minutes(1),
        )

    def metric_invocations(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("Invocations", statistic="Sum", **kwargs)

    def metric_invocation_5xx_errors(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("Invocation5XXErrors", statistic="Sum", **kwargs)

    def metric_model_latency(self, **kwargs: Any) -> cloudwatch.Metric:
        """Model latency in microseconds (p90 by default)."""
        return self.metric("ModelLatency", statistic=kwargs.pop("statistic", "p90"), **kwargs)

    def metric_gpu_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("GPUUtilization", namespace="/aws/sagemaker/Endpoints", **kwargs)

    def metric_gpu_memory_utilization(self, **kwargs: Any) -> cloudwatch.Metric:
        return self.metric("GPUMemoryUtilization", namespace="/aws/sagemaker/Endpoints", **kwargs)


# The Lambda behind every LogRetention in a stack is one singleton with this construct id.
LOG_RETENTION_FUNCTION_ID = "LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8a"
LOG_RETENTION_SERVICE_TIMEOUT_S = 300


def _harden_log_retention(retention: logs.LogRetention) -> None:
    """Fail in minutes rather than an hour, and acknowledge what cdk-nag finds in CDK's own handler."""
    resource = retention.node.default_child
    resource.add_property_override("ServiceTimeout", LOG_RETENTION_SERVICE_TIMEOUT_S)
    function = cdk.Stack.of(retention).node.try_find_child(LOG_RETENTION_FUNCTION_ID)
    if function is None:  # pragma: no cover - CDK renamed its singleton; nag will then say so loudly
        return
    acknowledge(
        function,
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        "aws-cdk-lib's LogRetention handler: the basic execution policy only lets it write its own logs.",
    )
    acknowledge_wildcard(
        function,
        resource="*",
        reason="aws-cdk-lib's LogRetention handler sets retention on log groups named at deploy time "
        "(logs:PutRetentionPolicy/DeleteRetentionPolicy); CDK scopes it this way for every stack.",
    )
