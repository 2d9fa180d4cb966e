"""``StagedCheckpoint``: a Hugging Face revision copied into S3 during the deployment, verified.

How the deployment waits (PRODUCT.md section 8): CloudFormation gives a custom resource one hour,
and the checkpoints that most need staging take longer. So the custom resource only plans and starts
the copy (and follows short jobs to the end), while an ``AWS::CloudFormation::WaitCondition`` (up to
12 hours) waits for the job's completion signal, sent by a function that EventBridge calls when the
job changes state. The function re-reads the manifest before it signals success. The copy itself is
spread over several Processing instances when the checkpoint is large.

::

    Custom::StagedCheckpoint --starts--> Processing job (N instances) --EventBridge--> signal function
           |  (nothing to do: signals itself)                                          |
           v                                                                           v
    WaitConditionHandle <------------------------- PUT SUCCESS/FAILURE --------------------
           |
    WaitCondition --> (whatever depends on the checkpoint: the SageMaker Model)
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct, IDependable

from handler_kit.resources import StagedCheckpointProperties
from hfstage.uris import ARCHIVE_NAME, PACK_SUFFIX, archive_prefix, parse_source
from preflight.checkpoint_code import staging_exclude

from ._assets import package_folder
from .engines import EngineSpec, checkpoint_code_patterns
from .images import ServingImage
from .keys import READ, WRITE, grant_bucket_key, grant_volume_key
from .model_bucket import ModelBucket
from .model_data import S3ModelData, prefix_problem
from .nag import acknowledge_wildcard
from .names import (
    INSTANCE_TYPE,
    INSTANCE_TYPE_RULE,
    SHA,
    hub_endpoint_problem,
    local_storage_problem,
    matches,
    repo_id_problem,
    revision_problem,
)
from .network import UNSCOPED_REASON, grant_network_interfaces, vpc_placement
from .problems import construct_subject, refuse
from .provider import HandlerProvider, python_function
from .runtime_code import bundled_asset_options, crt_files, handler_code
from .tags import job_source_problem, tag_problems

# CloudFormation's limit for a wait condition, less the time the signal needs after the job ends.
WAIT_LIMIT_S = 43200
SIGNAL_MARGIN_S = 900
# The job's runtime: the wait condition waits it plus the margin, at most 12 hours (also the context key's).
MAX_RUNTIME_RANGE_S = (60, WAIT_LIMIT_S - SIGNAL_MARGIN_S)
MAX_INSTANCES_RANGE = (1, 100)
# CreateProcessingJob takes at most 100 container arguments of at most 256 characters each, and environment
# values of at most 256 characters (botocore's sagemaker model: ContainerArguments, ContainerArgument,
# ProcessingEnvironmentValue). The handler passes each pattern as a flag and its value, after at most 10
# arguments of its own (worker_arguments in lambda/staged_checkpoint): so 45 patterns.
MAX_CONTAINER_ARGUMENTS = 100
MAX_ARGUMENT_CHARS = 256
HANDLER_ARGUMENTS = 10
MAX_PATTERNS = (MAX_CONTAINER_ARGUMENTS - HANDLER_ARGUMENTS) // 2
HANDLER = "staged_checkpoint"
PACKAGES = ("hfstage", "safejson")  # the worker reads the Hub's JSON through safejson


@cache
def staging_defaults() -> dict:
    return json.loads((Path(__file__).parent / "data" / "staging.json").read_text())


def default_staging_image() -> ServingImage:
    image = staging_defaults()["image"]
    return ServingImage(repository=image["repository"], tag=image["tag"], origin="the staging image")


def staging_image_past_end_of_patch(today: datetime.date | None = None) -> str | None:
    """A warning when the pinned staging image no longer gets security patches (DLC support policy)."""
    image = staging_defaults()["image"]
    end = datetime.date.fromisoformat(image["eop"])
    if (today or datetime.date.today()) <= end:
        return None
    return (
        f"the staging image {image['repository']}:{image['tag']} reached End of Patch on {end} (DLC support "
        "policy): it gets no more security fixes. Pin a supported CPU DLC in constructs_lib/data/staging.json, "
        "or pass image=."
    )


def repo_prefix(prefix: str, repo_id: str) -> str:
    """Where every revision of ``repo_id`` lives: ``<prefix><org>--<name>/``."""
    return f"{prefix}{repo_id.replace('/', '--')}/"


class StagedCheckpoint(Construct):
    """A Hugging Face repository, pinned to a commit, streamed into S3 by a SageMaker Processing job.

    Minimal use: ``StagedCheckpoint(self, "Checkpoint", repo_id="Qwen/Qwen3-8B")``, then pass it as the
    ``model`` of ``GpuEndpoint``. Files land under ``s3://<bucket>/<prefix><org>--<name>/<sha>/`` with a
    manifest written last; a second deployment of the same revision starts no job.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        repo_id: str | None = None,
        revision: str = "main",
        bucket: s3.IBucket | None = None,
        prefix: str = "models/",
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        hf_token_secret: secretsmanager.ISecret | None = None,
        instance_type: str | None = None,
        max_instances: int | None = None,
        bytes_per_instance: int | None = None,
        volume_size_gb: int | None = None,
        max_runtime: cdk.Duration | None = None,
        image: ServingImage | None = None,
        hub_endpoint: str | None = None,
        handoff_after: cdk.Duration | None = None,
        bucket_owner: str | None = None,
        engine: str | EngineSpec | None = None,
        allow_checkpoint_code: bool = False,
        trust_remote_code: bool = False,
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] | None = None,
        tags: Mapping[str, str] | None = None,
        allow_http_hub: bool = False,
        volume_kms_key: kms.IKey | None = None,
        source_s3_uri: str | None = None,
        source_encryption_key: kms.IKey | None = None,
        pack: bool = False,
        adapter_base_model_id: str | None = None,
        max_lora_rank: int | None = None,
    ) -> None:
        """
        :param repo_id: ``org/name`` on the Hub. Give it or ``source_s3_uri``, not both.
        :param revision: branch, tag or commit SHA; resolved to a SHA when the resource is created or
            updated. Default: main.
        :param bucket: Default: the stack's model bucket, created by its first ``StagedCheckpoint`` without a
            bucket and shared by the others: kept on destroy, encrypted, SSL-only, private, aborting incomplete
            multipart uploads after 3 days.
        :param prefix: Default: ``models/``.
        :param include: glob patterns of files to copy. Default: every file.
        :param exclude: glob patterns of files to skip. Default: none. Always skipped as well, unless
            ``allow_checkpoint_code``: the files ``engine``'s container would run as code or read as its settings
            (``checkpoint_code`` in data/engines.json; preflight/checkpoint_code.py).
        :param engine: the engine that will serve the checkpoint (``vllm``, ``sglang``, ``lmi``, ``llamacpp``),
            whose ``checkpoint_code`` staging leaves out (for lmi also every ``*.py``). Default: the files every
            engine's container reads (``requirements.txt``, ``model.py``, ``code/*``, ``serving.properties``).
        :param allow_checkpoint_code: stage those files too, for a repository and revision you have read (the
            serving side needs the same setting). Default: they are left out.
        :param trust_remote_code: the engine will import the checkpoint's modeling files (its remote-code flag is
            on), so the ``remote_code_files`` of ``engine`` are staged (for lmi: ``*.py``; serving.properties,
            model.py and the rest stay out). Default: false.
        :param hf_token_secret: a Secrets Manager secret holding a Hub token (the plain token, or JSON
            with ``token`` or ``HF_TOKEN``), read at run time by ARN. Default: no token (public repos).
        :param instance_type: Processing instance type. Default: ml.m5.2xlarge.
        :param max_instances: most instances one job spreads the files over. Default: 4.
        :param bytes_per_instance: bytes one instance should copy; the job gets missing bytes / this
            instances, within max_instances. Default: 100 GiB.
        :param volume_size_gb: Processing volume; the copy streams and writes nothing to it. Default: 30.
        :param max_runtime: the job's limit; the wait condition waits this plus 15 minutes. At most
            11 h 45 min. Default: 6 hours.
        :param image: a CPU image with python3 and boto3. Default: the pinned AWS PyTorch CPU DLC in
            data/staging.json.
        :param hub_endpoint: Hub URL (a mirror or proxy, such as an Artifactory or Nexus Hugging Face remote), https
            only unless ``allow_http_hub``; the token is sent to its origin only. Default: https://huggingface.co.
        :param bucket_owner: the account that must own ``bucket``: every S3 grant of the job, the handler and the
            readers carries ``s3:ResourceAccount``. Default: the stack's account for the bucket this construct
            creates, no condition for a given bucket.
        :param handoff_after: how long the custom resource follows the job before leaving the wait to the
            wait condition, 1-25 minutes. Default: 10 minutes.
        :param vpc: the VPC of the staging job's network interfaces (CreateProcessingJob NetworkConfig.VpcConfig),
            which must reach S3 (a gateway endpoint or NAT) and the Hub or ``hub_endpoint`` (NAT or the mirror's
            address). Default: no VPC (SageMaker's own network, with internet access).
        :param vpc_subnets: the job's subnets (``SubnetSelection(subnets=[...])`` alone with ``security_groups``).
            Default: the vpc's private subnets (else its isolated ones).
        :param security_groups: 1-5 groups. Default: one created with no inbound rule and HTTPS out (and the
            mirror's port when ``hub_endpoint`` names one).
        :param allow_http_hub: accept an ``http://`` hub_endpoint (a mirror inside the VPC without TLS; the token and
            the files then travel unencrypted). Default: https only.
        :param volume_kms_key: key for the job's ML storage volume (``VolumeKmsKeyId``); refused for instance types
            with instance storage, which their hardware encrypts. Default: AWS-managed encryption.
        :param tags: tags the handler puts on each staging job it starts (CloudFormation tags reach only the
            resources in the template); AWS tag rules, checked at synth (keys 1-128, values 0-256 letters, digits,
            spaces and ``_ . : / = + - @``, no ``aws:`` key, at most 48, not the job's own keys).
            Default: the job's own ``hf-repo-id`` and ``hf-revision`` only.
        :param source_s3_uri: instead of a Hub repository, a gzip-compressed tar such as the
            ``s3://bucket/<job>/output/model.tar.gz`` SageMaker Training writes: the job unpacks it (streamed,
            every member checked before any write) under ``<prefix>s3-tarball--<hash of the URI>/<ETag>/`` with
            the same manifest, so the endpoint serves a verified, uncompressed prefix. The job and the handler
            may read exactly that object. ``revision`` does not apply. The job's tag ``hf-repo-id`` holds the URI,
            so it may hold only characters a tag value allows (no ``(`` or ``#``). Default: none (``repo_id`` is
            staged).
        :param source_encryption_key: the KMS key of ``source_s3_uri``'s bucket when it uses SSE-KMS: the job
            and the handler may decrypt with it. Default: none (SSE-S3 or unencrypted).
        :param pack: pack the selected files of ``repo_id`` into ONE gzip tar, ``archive_uri``
            (``<prefix><org>--<name>/<sha>-packed/model.tar.gz``, at most 2 GiB of files, with a manifest of
            the archive's and each member's SHA-256), instead of a prefix of files: a LoRA adapter's
            ``ArtifactUrl`` must name a single .tar.gz. Not with ``source_s3_uri``. Default: false.
        :param max_lora_rank: with ``pack``, the LoRA adapter's ``adapter_config.json`` is read from the Hub
            and checked before any job (preflight/adapters.py: PEFT LoRA, rank at most this, target modules);
            a failure fails this resource, before an adapter component exists. Default: no check.
        :param adapter_base_model_id: with ``max_lora_rank``, the Hub id of the base model that the adapter's
            ``base_model_name_or_path`` must name (when that is a repo id). Default: not compared.
        """
        super().__init__(scope, id)
        refuse(
            construct_subject("StagedCheckpoint", self),
            (
                ["pack=True with source_s3_uri: pack applies to a Hub repository (repo_id); an archive is one object"]
                if pack and source_s3_uri
                else []
            )
            + (
                [f"max_lora_rank={max_lora_rank!r}: needs pack=True and a whole number of at least 1"]
                if max_lora_rank is not None and (not pack or not isinstance(max_lora_rank, int) or max_lora_rank < 1)
                else []
            ),
        )
        self.pack = pack
        # What the staging job checks an adapter against (its adapter_config.json's rank and base model).
        self.max_lora_rank = max_lora_rank
        self.adapter_base_model_id = adapter_base_model_id if max_lora_rank else None
        # Defaults are the resource's own (handler_kit/resources.py), the ones its handler falls back to.
        default = StagedCheckpointProperties.default
        self.repo_id = repo_id or ""
        self.source_s3_uri = source_s3_uri
        self.requested_revision = revision
        # What the job stages, in descriptions and log lines: the repository, or the archive.
        label = (repo_id or source_s3_uri or "")[:200]
        max_runtime = max_runtime or cdk.Duration.seconds(default("max_runtime_s"))
        handoff_after = handoff_after or cdk.Duration.seconds(default("handoff_s"))
        instance_type = instance_type or default("instance_type")
        max_instances = default("max_instances") if max_instances is None else max_instances
        bytes_per_instance = bytes_per_instance or default("bytes_per_instance")
        volume_size_gb = volume_size_gb or default("volume_size_gb")
        # The job's exclude patterns: the user's and the files the serving container would run (engines.json).
        code = checkpoint_code_patterns(engine, trust_remote_code=trust_remote_code)
        staged_exclude = staging_exclude(exclude, code, allow=allow_checkpoint_code)
        _validate(
            subject=construct_subject("StagedCheckpoint", self),
            repo_id=repo_id,
            source_s3_uri=source_s3_uri,
            revision=revision,
            prefix=prefix,
            include=include,
            exclude=staged_exclude,
            bucket_name=None if bucket is None else bucket.bucket_name,
            max_instances=max_instances,
            volume_size_gb=volume_size_gb,
            max_runtime_s=max_runtime.to_seconds(),
            handoff_s=handoff_after.to_seconds(),
            instance_type=instance_type,
            hub_endpoint=hub_endpoint,
            allow_http_hub=allow_http_hub,
            volume_kms_key=volume_kms_key is not None,
            tags=tags or {},
        )
        # One model bucket per stack: the first checkpoint without a bucket creates it (under itself, so a
        # single-checkpoint app keeps its logical IDs), the others in the same stack share it.
        shared = None if bucket is not None else _stack_model_bucket(self)
        self.owns_bucket = bucket is None and shared is None
        self.bucket = bucket or shared or ModelBucket(self, "Bucket").bucket
        if bucket is None and bucket_owner is None:
            bucket_owner = cdk.Aws.ACCOUNT_ID
        self.prefix = prefix
        pinned = matches(SHA, revision)
        if not pinned and not cdk.Token.is_unresolved(revision):
            # As a floating image tag warns (endpoint_plan): the same deploy may stage other weights next time.
            cdk.Annotations.of(self).add_warning_v2(
                "llm:floating-revision",
                f"revision={revision!r} is a branch or tag: a redeploy after a new commit stages other weights. "
                "Pin a commit SHA: the ModelRevision output names the one a deploy got, and "
                "constructs_lib.deployment pins it at synth from a model-facts.json (FactsSource; "
                "python -m llmops.facts refresh, or record DIR from a local copy).",
            )
        # Grants cover the revision's prefix when the SHA is known now, else every revision of the repo
        # (for an archive: every ETag of that one archive, since its ETag is known only at deploy time).
        self._read_scope = S3ModelData(
            self.bucket,
            archive_prefix(prefix, source_s3_uri)
            if source_s3_uri
            else f"{repo_prefix(prefix, self.repo_id)}{revision}{PACK_SUFFIX if pack else '/'}"
            if pinned
            else repo_prefix(prefix, self.repo_id),
            owner_account=bucket_owner,
        )
        self._source_object_arn = (
            f"arn:{cdk.Aws.PARTITION}:s3:::{'/'.join(parse_source(source_s3_uri))}" if source_s3_uri else None
        )
        self._source_key = source_encryption_key
        # Job names start with a segment fixed for this construct (what IAM allows: a Delete that cleans up
        # after an update must still stop the old revision's job) ...
        self.job_family = f"hfstage-{hashlib.sha256(self.node.path.encode()).hexdigest()[:8]}-"
        if image is None:
            image = default_staging_image()
            if warning := staging_image_past_end_of_patch():
                cdk.Annotations.of(self).add_warning_v2("llm:staging-image-eop", warning)

        crt = crt_files()
        if crt is None:
            cdk.Annotations.of(self).add_info(
                "the staging worker's code carries no awscrt (none for Linux x86-64 is installed where this app "
                "synthesizes): it writes CRC32 checksums with zlib, at about 0.2 CPU-s per GB more than CRC64NVME; "
                "pip install -r requirements.txt on Linux x86-64 brings it (docs/guide/staging.md)"
            )
        code = s3_assets.Asset(
            self,
            "WorkerCode",
            path=str(package_folder("hfstage")),
            **bundled_asset_options(packages=PACKAGES, main="hfstage.worker:main", crt=crt),
        )
        self.job_role = self._job_role(code, image, hf_token_secret)
        self.placement = vpc_placement(
            self,
            vpc=vpc,
            vpc_subnets=vpc_subnets,
            security_groups=security_groups,
            description=f"Staging job of {repo_id}: no inbound, HTTPS out",
            egress_ports=(443, *hub_ports(hub_endpoint)),
        )
        if volume_kms_key is not None:
            grant_volume_key(self.job_role, volume_kms_key, scope=self)
        if self.placement is not None:
            grant_network_interfaces(self.job_role, scope=self, placement=self.placement, acknowledged=False)
            _acknowledge_network(self.job_role.node.find_child("DefaultPolicy"))
        provider = HandlerProvider.of(
            self,
            "StagedCheckpointProvider",
            handler=HANDLER,
            packages=(*PACKAGES, "preflight"),  # preflight/adapters.py checks a packed adapter's config
            timeout=cdk.Duration.minutes(5),
            is_complete=True,
            query_interval=cdk.Duration.seconds(30),
            total_timeout=cdk.Duration.minutes(40),
            memory_size=512,
        )
        self._grant_handler(provider.role, hf_token_secret, manage_jobs=True)
        self._grant_source(provider.role)  # the handler HEADs the archive to plan
        signal_function = self._signal_function()
        self._grant_handler(signal_function.role, None, manage_jobs=False)

        resource_properties = StagedCheckpointProperties(
            repo_id=self.repo_id,
            source_s3_uri=source_s3_uri,
            revision=revision,
            bucket=self.bucket.bucket_name,
            prefix=prefix,
            include=tuple(include),
            exclude=tuple(staged_exclude),
            token_secret_arn=hf_token_secret.secret_arn if hf_token_secret else None,
            hub_endpoint=hub_endpoint or None,
            image_uri=image.image_uri(self),
            instance_type=instance_type,
            max_instances=max_instances,
            bytes_per_instance=bytes_per_instance,
            volume_size_gb=volume_size_gb,
            max_runtime_s=int(max_runtime.to_seconds()),
            role_arn=self.job_role.role_arn,
            code_uri=code.s3_object_url,
            handoff_s=int(handoff_after.to_seconds()),
            subnets=tuple(self.placement.subnet_ids) if self.placement else (),
            security_group_ids=tuple(self.placement.security_group_ids) if self.placement else (),
            tags=tuple((tags or {}).items()),
            volume_kms_key_arn=volume_kms_key.key_arn if volume_kms_key else None,
            pack=pack,
            adapter_base=adapter_base_model_id if max_lora_rank else None,
            max_lora_rank=max_lora_rank or 0,
        )
        properties = resource_properties.to_properties()
        # ... and a token of every property. Any change of the resource (a new revision, patterns, image,
        # worker code, limits) is an update that may start a job, so it gets a new wait-condition handle and
        # wait condition (CloudFormation cannot update either, and a wait condition added in an update needs
        # a new handle), and a job-name prefix of its own for the EventBridge rule.
        token = hashlib.sha256(json.dumps(cdk.Stack.of(self).resolve(properties), sort_keys=True).encode()).hexdigest()[
            :10
        ]
        self.job_name_prefix = f"{self.job_family}{token}-"

        handle = cdk.CfnWaitConditionHandle(self, f"WaitHandle{token}")
        rule = events.Rule(
            self,
            "JobStateChange",
            description=f"Signals the staging of {label}"
            + ("" if source_s3_uri else f"@{revision}")
            + " when its Processing job ends",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker Processing Job State Change"],
                detail={
                    "ProcessingJobName": [{"prefix": self.job_name_prefix}],
                    "ProcessingJobStatus": ["Completed", "Failed", "Stopped"],
                },
            ),
        )
        rule.add_target(
            targets.LambdaFunction(
                signal_function,
                event=events.RuleTargetInput.from_object(
                    {
                        "WaitHandle": handle.ref,
                        "JobNamePrefix": self.job_name_prefix,
                        "Event": events.EventField.from_path("$"),
                    }
                ),
                retry_attempts=20,
                max_event_age=cdk.Duration.hours(2),
            )
        )

        self.resource = provider.custom_resource(
            self,
            dataclasses.replace(resource_properties, job_name_prefix=self.job_name_prefix, wait_handle=handle.ref),
            # The Provider answers once is_complete hands off (at most handoff_after) plus one planning call.
            service_timeout=cdk.Duration.seconds(handoff_after.to_seconds() + 900),
        )
        # The rule must exist before a job can end, and the roles must be complete before they are used.
        self.resource.node.add_dependency(rule, self.job_role, provider.role, signal_function.role)
        self.wait = cdk.CfnWaitCondition(
            self,
            f"Wait{token}",
            handle=handle.ref,
            count=1,
            timeout=str(int(max_runtime.to_seconds()) + SIGNAL_MARGIN_S),
        )
        self.wait.node.add_dependency(self.resource)

    # What GpuEndpoint needs of a model source.
    @property
    def s3_uri(self) -> str:
        """The revision prefix ``s3://bucket/models/<org>--<name>/<sha>/`` (a token)."""
        return self.resource.get_att_string("S3Uri")

    @property
    def archive_uri(self) -> str:
        """With ``pack``: the archive ``s3://bucket/models/<org>--<name>/<sha>-packed/model.tar.gz`` (a token)."""
        if not self.pack:
            raise ValueError("archive_uri is for a StagedCheckpoint with pack=True")
        return cdk.Fn.join("", [self.s3_uri, ARCHIVE_NAME])

    @property
    def object_arn_pattern(self) -> str:
        """Every object below the resolved revision prefix (a token): what ``grant_read`` allows to get."""
        return self.bucket.arn_for_objects(f"{self.resource.get_att_string('Prefix')}*")

    @property
    def dependable(self) -> IDependable:
        """What a consumer must wait for: the wait condition, which ends when every file is verified."""
        return self.wait

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the staged revision only: list under its prefix and get the objects below it.

        The prefix is the resolved one (``models/<org>--<name>/<sha>/``, a token), so an endpoint serving
        this revision cannot read other revisions of the repository.
        """
        prefix = self.resource.get_att_string("Prefix")
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:ListBucket"],
            resource_arns=[self.bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}, **self._read_scope.owner_condition()},
        )
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:GetObject"],
            resource_arns=[self.object_arn_pattern],
            conditions=self._read_scope.owner_condition() or None,
        )
        if self.bucket.encryption_key is not None:
            grant_bucket_key(grantee, self.bucket.encryption_key, scope=self, actions=READ)
        return grant

    def grant_read_archive(self, grantee: iam.IGrantable) -> iam.Grant:
        """With ``pack``: s3:GetObject on the one archive object of the resolved revision (no wildcard)."""
        arn = self.bucket.arn_for_objects(cdk.Fn.join("", [self.resource.get_att_string("Prefix"), ARCHIVE_NAME]))
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:GetObject"],
            resource_arns=[arn],
            conditions=self._read_scope.owner_condition() or None,
        )
        if self.bucket.encryption_key is not None:
            grant_bucket_key(grantee, self.bucket.encryption_key, scope=self, actions=READ)
        return grant

    @property
    def revision(self) -> str:
        """The commit SHA the revision resolved to (a token)."""
        return self.resource.get_att_string("Revision")

    @property
    def manifest_uri(self) -> str:
        return self.resource.get_att_string("ManifestUri")

    # Construction helpers.
    def _write_scope(self) -> str:
        return self.bucket.arn_for_objects(f"{self._read_scope.prefix}*")

    def _job_role(self, code: s3_assets.Asset, image: ServingImage, secret: secretsmanager.ISecret | None) -> iam.Role:
        # Only this construct's jobs (SageMaker guide, "Cross-service confused deputy prevention": Processing Jobs)
        jobs = cdk.Stack.of(self).format_arn(
            service="sagemaker", resource="processing-job", resource_name=f"{self.job_family}*"
        )
        role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com", conditions={"ArnLike": {"aws:SourceArn": jobs}}),
            description=f"Staging job of {(self.repo_id or self.source_s3_uri or '')[:200]}: "
            "writes only under its prefix",
        )
        self._grant_source(role)
        # ListParts (s3:ListMultipartUploadParts) is how a rerun resumes a killed run's upload inside a file,
        # and hash checkpoints are uploads never completed (PutObject, AbortMultipartUpload): S3 User Guide,
        # "Multipart upload API and permissions" (mpuoverview.html#mpuAndPermissions).
        role.add_to_policy(
            iam.PolicyStatement(
                # ListMultipartUploadParts: the worker resumes a file's upload from its listed parts. Reads
                # (GetObject) come from grant_read below, on the same scope.
                actions=["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
                resources=[self._write_scope()],
                conditions=self._read_scope.owner_condition() or None,
            )
        )
        self._read_scope.grant_read(role)
        # Finding (and aborting) the multipart uploads a killed run left open under the prefix. No s3:prefix
        # condition: S3 does not supply that key for ListBucketMultipartUploads (Service Authorization Reference,
        # Amazon S3), so it would always deny; the worker asks with Prefix= and aborts only keys it owns.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucketMultipartUploads"],
                resources=[self.bucket.bucket_arn],
                conditions=self._read_scope.owner_condition() or None,
            )
        )
        # Processing jobs publish their metrics (SageMaker developer guide, "CreateProcessingJob API: Execution
        # Role Permissions"); limited to the processing namespace.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/ProcessingJobs"}},
            )
        )
        if self.bucket.encryption_key is not None:
            # Writing SSE-KMS objects (multipart included) needs exactly these two.
            grant_bucket_key(role, self.bucket.encryption_key, scope=self, actions=WRITE)
        # The worker's code: exactly one asset object.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{code.s3_bucket_name}/{code.s3_object_key}"],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{code.s3_bucket_name}"],
                conditions={"StringEquals": {"s3:prefix": code.s3_object_key}},
            )
        )
        if secret is not None:
            _grant_token(role, secret)
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
                resources=[image.repository_arn(self)],
            )
        )
        role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
        log_group_arn = cdk.Stack.of(self).format_arn(
            service="logs",
            resource="log-group",
            resource_name="/aws/sagemaker/ProcessingJobs",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[log_group_arn, f"{log_group_arn}:log-stream:*"],
            )
        )
        policy = role.node.find_child("DefaultPolicy")
        acknowledge_wildcard(
            policy,
            resource=f"{log_group_arn}:log-stream:*",
            reason="Processing jobs name their log streams <job-name>/<host>-<id> at run time; the role may write "
            "streams of the ProcessingJobs log group only.",
        )
        acknowledge_wildcard(
            policy,
            resource="*",
            reason="ecr:GetAuthorizationToken and cloudwatch:PutMetricData have no resource-level permissions; "
            "image pulls are limited to the staging image's repository, metrics to the ProcessingJobs namespace.",
        )
        self._acknowledge_prefix(policy)
        return role

    def _grant_source(self, role: iam.IRole) -> None:
        """Read the archive to unpack, that one object only (HeadObject and GetObject are s3:GetObject)."""
        if self._source_object_arn is None:
            return
        iam.Grant.add_to_principal(grantee=role, actions=["s3:GetObject"], resource_arns=[self._source_object_arn])
        if self._source_key is not None:
            self._source_key.grant_decrypt(role)

    def _acknowledge_prefix(self, policy: Construct) -> None:
        acknowledge_wildcard(
            policy,
            resource=self._write_scope(),
            reason="The objects of one Hugging Face repository's prefix (every file of the revision, named by the "
            "Hub); nothing else in the bucket.",
        )

    def _grant_handler(self, role: iam.IRole, secret: secretsmanager.ISecret | None, *, manage_jobs: bool) -> None:
        """What the custom resource handler (``manage_jobs``) or the signal function may do."""
        self._read_scope.grant_read(role)
        job_arn = cdk.Stack.of(self).format_arn(
            service="sagemaker", resource="processing-job", resource_name=f"{self.job_family}*"
        )
        actions = ["sagemaker:DescribeProcessingJob"]
        if manage_jobs:
            actions += ["sagemaker:CreateProcessingJob", "sagemaker:StopProcessingJob"]
            # CreateProcessingJob with Tags needs sagemaker:AddTags too, only as part of that call (SageMaker
            # developer guide, "Grant permission to tag SageMaker AI resources on creation"; the condition key
            # sagemaker:TaggingAction, as AWS managed SageMaker policies use it).
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["sagemaker:AddTags"],
                    resources=[job_arn],
                    conditions={"StringEquals": {"sagemaker:TaggingAction": "CreateProcessingJob"}},
                )
            )
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["iam:PassRole"],
                    resources=[self.job_role.role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
                )
            )
            role.add_to_principal_policy(iam.PolicyStatement(actions=["sagemaker:ListProcessingJobs"], resources=["*"]))
            # The "<type> for processing job usage" quota, read before a job starts.
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["servicequotas:ListServiceQuotas", "servicequotas:ListAWSDefaultServiceQuotas"],
                    resources=["*"],
                )
            )
            if secret is not None:
                _grant_token(role, secret)
        role.add_to_principal_policy(iam.PolicyStatement(actions=actions, resources=[job_arn]))
        policy = role.node.find_child("DefaultPolicy")
        acknowledge_wildcard(
            policy,
            resource=job_arn,
            reason="Staging jobs are named <prefix><request hash> when they start; the prefix is unique to this "
            "checkpoint, so only its own jobs match.",
        )
        acknowledge_wildcard(
            policy,
            resource=self._read_scope.object_arn_pattern,
            reason="Reading the manifest and checking the files of one Hugging Face repository's prefix.",
        )
        if manage_jobs:
            acknowledge_wildcard(
                policy,
                resource="*",
                reason="sagemaker:ListProcessingJobs and servicequotas:ListServiceQuotas/ListAWSDefaultServiceQuotas "
                "have no resource-level permissions; the first finds this checkpoint's running job (by name prefix) "
                "to stop it, the others read the Processing instance quota before a job starts.",
            )

    def _signal_function(self):
        stack = cdk.Stack.of(self)
        existing = stack.node.try_find_child("StagingSignal")
        if existing is not None:
            return existing.node.find_child("Function")
        holder = Construct(stack, "StagingSignal")
        role = iam.Role(
            holder,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),  # no aws:Source* condition: see provider.py
            description="Signals staging wait conditions when a staging Processing job ends",
        )
        log_group = logs.LogGroup(
            holder, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        log_group.grant_write(role)
        code = handler_code(HANDLER, packages=PACKAGES)
        function = python_function(
            holder,
            "Function",
            code=code,
            entry="on_job_state_change",
            role=role,
            log_group=log_group,
            timeout=cdk.Duration.minutes(5),
            memory_size=512,
        )
        _signal_failures(holder, function, code=code, log_group=log_group)
        return function


def _signal_failures(holder: Construct, function: lambda_.Function, *, code: lambda_.Code, log_group: logs.ILogGroup):
    """A signal function that throws must still end the wait in minutes, not when the wait condition times out.

    EventBridge retries only its delivery to Lambda (the rule target's retry policy); Lambda retries a
    function error of an asynchronous invocation twice, then sends the invocation record to the on-failure
    destination (Lambda developer guide, "How Lambda handles errors and retries with asynchronous
    invocation"), here a function that signals FAILURE with the error: a few minutes in all.
    """
    role = iam.Role(
        holder,
        "FailureRole",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),  # no aws:Source* condition: see provider.py
        description="Signals a staging wait condition FAILURE when the signal function fails every attempt",
    )
    log_group.grant_write(role)  # its only permission: the signal is a PUT to the handle's presigned URL
    on_failure = python_function(
        holder,
        "OnFailure",
        code=code,
        entry="on_signal_failure",
        role=role,
        log_group=log_group,
        timeout=cdk.Duration.minutes(2),
    )
    function.configure_async_invoke(
        retry_attempts=2,
        max_event_age=cdk.Duration.hours(2),
        on_failure=destinations.LambdaDestination(on_failure, response_only=False),
    )
    acknowledge_wildcard(
        function.role.node.find_child("DefaultPolicy"),
        resource=f"{on_failure.function_arn}:*",
        reason="Lambda invokes the on-failure destination function and its versions (the ':*' suffix CDK grants); "
        "nothing else.",
    )
    return on_failure


def hub_ports(hub_endpoint: str | None) -> tuple[int, ...]:
    """The port of a mirror named with one (``https://mirror.example:8443``); none for the default 443."""
    if not hub_endpoint or cdk.Token.is_unresolved(hub_endpoint):
        return ()
    try:
        port = urllib.parse.urlsplit(hub_endpoint).port
    except ValueError:
        return ()
    return (port,) if port else ()


def _acknowledge_network(policy: Construct) -> None:
    acknowledge_wildcard(
        policy,
        resource=cdk.Stack.of(policy).format_arn(service="ec2", resource="network-interface", resource_name="*"),
        reason="SageMaker names the staging job's network interfaces at run time; the ec2:Subnet condition limits "
        "them to the given subnets.",
    )
    acknowledge_wildcard(
        policy,
        resource="*",
        reason=f"{UNSCOPED_REASON} ecr:GetAuthorizationToken and cloudwatch:PutMetricData have none either: image "
        "pulls are limited to the staging image's repository, metrics to the ProcessingJobs namespace.",
    )


def _grant_token(role: iam.IRole, secret: secretsmanager.ISecret) -> None:
    """Read the token secret, and decrypt it when a customer-managed key encrypts it.

    ``Secret.grant_read`` grants the decrypt through the key's policy, which an imported key cannot take;
    the role gets it instead, limited to decryption through Secrets Manager.
    """
    # GetSecretValue only: nothing calls DescribeSecret (tests/handlers/test_iam_calls.py).
    iam.Grant.add_to_principal(
        grantee=role, actions=["secretsmanager:GetSecretValue"], resource_arns=[secret.secret_arn]
    )
    if secret.encryption_key is not None:
        # Secrets Manager decrypts in the secret's own region, which may not be the stack's: the worker and the
        # handler call the region named in the ARN.
        region = secret_region(secret.secret_arn)
        iam.Grant.add_to_principal(
            grantee=role,
            actions=["kms:Decrypt"],
            resource_arns=[secret.encryption_key.key_arn],
            conditions={"StringEquals": {"kms:ViaService": f"secretsmanager.{region}.amazonaws.com"}},
        )


def secret_region(secret_arn: str) -> str:
    """The region in a literal secret ARN; the stack's region for a token or an ARN without one."""
    if cdk.Token.is_unresolved(secret_arn):
        return cdk.Aws.REGION
    parts = secret_arn.split(":")
    return parts[3] if len(parts) > 3 and parts[3] else cdk.Aws.REGION


def _stack_model_bucket(checkpoint: StagedCheckpoint) -> s3.IBucket | None:
    """The bucket an earlier ``StagedCheckpoint`` of the same stack created for itself, if any."""
    stack = cdk.Stack.of(checkpoint)
    for node in stack.node.find_all():
        if (
            isinstance(node, StagedCheckpoint)
            and node is not checkpoint
            and getattr(node, "owns_bucket", False)
            and cdk.Stack.of(node).node.path == stack.node.path  # not one of a nested stack
        ):
            return node.bucket
    return None


def _validate(
    *,
    subject: str,
    repo_id: str | None,
    source_s3_uri: str | None = None,
    revision: str,
    prefix: str,
    max_instances: int,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    bucket_name: str | None = None,
    volume_size_gb: int,
    max_runtime_s: float,
    handoff_s: float,
    instance_type: str,
    hub_endpoint: str | None = None,
    allow_http_hub: bool = False,
    volume_kms_key: bool = False,
    tags: Mapping[str, str] | None = None,
) -> None:
    problems = []
    literal_tags = {k: v for k, v in (tags or {}).items() if not cdk.Token.is_unresolved(k + str(v))}
    problems += [f"tags: {why}" for why in tag_problems(literal_tags)]
    if volume_kms_key and (why := local_storage_problem(instance_type)):
        problems.append(f"volume_kms_key with instance_type={instance_type!r}: {why}")
    literal_hub = hub_endpoint and not cdk.Token.is_unresolved(hub_endpoint)
    if literal_hub and (why := hub_endpoint_problem(hub_endpoint, allow_http=allow_http_hub)):
        problems.append(f"hub_endpoint={hub_endpoint[:200]!r}: {why}")
    if bool(repo_id) == bool(source_s3_uri):
        problems.append(
            f"repo_id={repo_id!r}, source_s3_uri={source_s3_uri!r}: give exactly one (a Hub repository, or a "
            "model.tar.gz in S3)"
        )
    if source_s3_uri:
        problems += _source_problems(source_s3_uri, revision)
    elif repo_id and (why := repo_id_problem(repo_id)):
        problems.append(f"repo_id={repo_id!r} is not a Hugging Face repository id; {why}")
    if why := revision_problem(revision):
        problems.append(f"revision={revision!r} is not a branch, tag or commit SHA; {why}")
    if problem := prefix_problem(prefix):
        problems.append(f"prefix: {problem}")
    elif not prefix.endswith("/"):
        problems.append(f"prefix={prefix!r} must end with '/'")
    if not MAX_INSTANCES_RANGE[0] <= max_instances <= MAX_INSTANCES_RANGE[1]:
        problems.append(
            f"max_instances={max_instances} is out of range; allowed: {MAX_INSTANCES_RANGE[0]}-{MAX_INSTANCES_RANGE[1]}"
        )
    if not 1 <= volume_size_gb <= 16384:
        problems.append(f"volume_size_gb={volume_size_gb} is out of range; allowed: 1-16384")
    if not MAX_RUNTIME_RANGE_S[0] <= max_runtime_s <= MAX_RUNTIME_RANGE_S[1]:
        problems.append(
            f"max_runtime={int(max_runtime_s)} s is out of range; allowed: {MAX_RUNTIME_RANGE_S[0]}-"
            f"{MAX_RUNTIME_RANGE_S[1]} s (a wait condition waits at most 12 hours)"
        )
    if not 60 <= handoff_s <= 1500:
        problems.append(f"handoff_after={int(handoff_s)} s is out of range; allowed: 60-1500 s")
    if not matches(INSTANCE_TYPE, instance_type):
        problems.append(
            f"instance_type={instance_type!r} is not a SageMaker instance type; expected {INSTANCE_TYPE_RULE}"
        )
    problems += _argument_problems(repo_id or "", prefix, include, exclude, bucket_name, source_s3_uri)
    refuse(subject, problems)


def _source_problems(source_s3_uri: str, revision: str) -> list[str]:
    if cdk.Token.is_unresolved(source_s3_uri):
        return [f"source_s3_uri={source_s3_uri!r}: must be known at synth (its object ARN is granted)"]
    problems = []
    if why := job_source_problem(source_s3_uri):
        problems.append(f"source_s3_uri={source_s3_uri[:200]!r}: {why}")
    try:
        parse_source(source_s3_uri)
        if "${" in source_s3_uri:  # IAM would read it as a policy variable in the granted object ARN
            problems.append(f"source_s3_uri={source_s3_uri!r} contains '${{', which IAM reads as a variable")
    except ValueError as e:
        problems.append(f"source_s3_uri: {e}")
    if revision != "main":
        problems.append(f"revision={revision!r}: does not apply to source_s3_uri (the archive's ETag pins it)")
    return problems


def _argument_problems(
    repo_id: str,
    prefix: str,
    include: Sequence[str],
    exclude: Sequence[str],
    bucket_name: str | None,
    source_s3_uri: str | None = None,
) -> list[str]:
    """What would make CreateProcessingJob refuse the staging job, found at synth instead of at deploy."""
    problems = []
    if len(include) + len(exclude) > MAX_PATTERNS:
        problems.append(
            f"include and exclude hold {len(include) + len(exclude)} patterns ({len(include)} + {len(exclude)}); "
            f"allowed: at most {MAX_PATTERNS} together (CreateProcessingJob takes {MAX_CONTAINER_ARGUMENTS} "
            "container arguments, two per pattern): use broader globs"
        )
    for key, patterns in (("include", include), ("exclude", exclude)):
        for pattern in patterns:
            if len(pattern) > MAX_ARGUMENT_CHARS:
                problems.append(
                    f"{key} pattern {pattern[:40]!r}... is {len(pattern)} characters; allowed: at most "
                    f"{MAX_ARGUMENT_CHARS} (one CreateProcessingJob container argument)"
                )
    # The job's HFSTAGE_TARGET: s3://<bucket>/<prefix><org>--<name>/<40-character sha>/
    bucket_chars = 63 if bucket_name is None or cdk.Token.is_unresolved(bucket_name) else len(bucket_name)
    target_chars = len("s3:///") + bucket_chars + len(prefix) + len(repo_prefix("", repo_id)) + 41
    if source_s3_uri:  # s3://<bucket>/<prefix>s3-tarball--<16 hex>/<ETag, at most 32 hex + "-" + 5 digits>/
        target_chars = len("s3:///") + bucket_chars + len(archive_prefix(prefix, "")) + 39
        if len(source_s3_uri) > MAX_ARGUMENT_CHARS:
            problems.append(
                f"source_s3_uri is {len(source_s3_uri)} characters; allowed: at most {MAX_ARGUMENT_CHARS} (one "
                "CreateProcessingJob container argument)"
            )
    if target_chars > MAX_ARGUMENT_CHARS:
        problems.append(
            f"prefix={prefix!r} with repo_id={repo_id!r} makes the revision's S3 URI {target_chars} characters "
            f"(with a {bucket_chars}-character bucket name); allowed: at most {MAX_ARGUMENT_CHARS} (a "
            "CreateProcessingJob environment value): shorten the prefix"
        )
    return problems
