"""The default deployment: a model bucket (or a given one) and a GPU endpoint serving one model."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from constructs_lib import GpuEndpoint, ModelBucket, S3ModelData, hub_prefix

from .config import DeploymentConfig


class LlmEndpointStack(cdk.Stack):
    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig, **kwargs) -> None:
        super().__init__(
            scope,
            id,
            description=f"{config.model_id} on {config.instance_type} with {config.engine} (SageMaker endpoint)",
            **kwargs,
        )
        key = kms.Key.from_key_arn(self, "ModelKey", config.model_kms_key_arn) if config.model_kms_key_arn else None
        if config.model_s3_uri:
            model = S3ModelData.from_s3_uri(self, "ModelBucket", config.model_s3_uri, encryption_key=key)
        else:
            if config.model_bucket:
                bucket = s3.Bucket.from_bucket_attributes(
                    self, "ModelBucket", bucket_name=config.model_bucket, encryption_key=key
                )
            else:
                bucket = ModelBucket(self, "ModelBucket").bucket
            model = S3ModelData(bucket, hub_prefix(config.model_id, config.revision))
            where = (
                f"the bucket {config.model_bucket}"
                if config.model_bucket
                else "the NEW, EMPTY bucket this stack creates"
            )
            cdk.Annotations.of(self).add_warning_v2(
                "llm:model-prefix",
                f"The endpoint reads {config.model_id}@{config.revision} from {model.prefix} in {where}. The prefix "
                "must hold the checkpoint (config.json, weights, tokenizer) before the endpoint starts, or the "
                "deploy fails its health check after startup_timeout_s. Until the staging construct lands, deploy "
                "with -c model_bucket=<bucket holding that prefix> or -c model_s3_uri=s3://<bucket>/<prefix>/.",
            )

        self.endpoint = GpuEndpoint(
            self,
            "Endpoint",
            model=model,
            engine=config.engine,
            image=config.serving_image,
            instance_type=config.instance_type,
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
            startup_timeout=cdk.Duration.seconds(config.startup_timeout_s),
            download_timeout=cdk.Duration.seconds(config.download_timeout_s),
            endpoint_name=config.endpoint_name,
        )

        cdk.CfnOutput(self, "EndpointName", value=self.endpoint.endpoint_name, description="SageMaker endpoint name")
        cdk.CfnOutput(self, "Region", value=self.region, description="Region of the endpoint")
        cdk.CfnOutput(self, "ModelDataUri", value=model.s3_uri, description="S3 prefix the model is served from")
        cdk.CfnOutput(
            self,
            "ImageUri",
            value=config.serving_image.image_uri(self),
            description=f"Serving image ({config.image_source})",
        )
        body = '{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":64}'
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
                    " --content-type application/json --cli-binary-format raw-in-base64-out",
                    f" --body '{body}' /dev/stdout",
                ],
            ),
        )
