"""The properties of each custom resource, typed and defined once: the construct writes them, the handler reads them.

CloudFormation passes every scalar property as a string (CloudFormation User Guide, "Custom resources":
``ResourceProperties`` values arrive as strings), so ``to_properties`` renders numbers as text and
``from_properties`` parses them back. A default lives here only: the construct fills what its user left out
from the same fields the handler falls back to (provider framework's consts.ts shares its names the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from handler_kit import string_list

GIB = 2**30


@dataclass(frozen=True)
class StagedCheckpointProperties:
    """``Custom::StagedCheckpoint``: constructs_lib.StagedCheckpoint writes it, lambda/staged_checkpoint reads it.

    Only ARNs and names: the Hub token itself is never a property.
    """

    repo_id: str
    bucket: str
    image_uri: str
    role_arn: str
    code_uri: str
    revision: str = "main"
    prefix: str = "models/"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    token_secret_arn: str | None = None
    hub_endpoint: str | None = None
    instance_type: str = "ml.m5.2xlarge"
    max_instances: int = 4
    bytes_per_instance: int = 100 * GIB
    volume_size_gb: int = 30
    max_runtime_s: int = 6 * 3600
    handoff_s: int = 600
    # A model.tar.gz to unpack instead of a Hub repository (repo_id is then ""): s3://bucket/key.tar.gz.
    source_s3_uri: str | None = None
    # Set by the construct once the other properties are known (their hash names the job family and handle).
    job_name_prefix: str | None = None
    wait_handle: str | None = None

    # field -> the CloudFormation property name (the template's spelling, kept as the first release wrote it)
    NAMES: ClassVar[dict[str, str]] = {
        "repo_id": "RepoId",
        "revision": "Revision",
        "bucket": "Bucket",
        "prefix": "Prefix",
        "include": "Include",
        "exclude": "Exclude",
        "token_secret_arn": "TokenSecretArn",
        "hub_endpoint": "HubEndpoint",
        "image_uri": "ImageUri",
        "instance_type": "InstanceType",
        "max_instances": "MaxInstances",
        "bytes_per_instance": "BytesPerInstance",
        "volume_size_gb": "VolumeSizeGb",
        "max_runtime_s": "MaxRuntimeSeconds",
        "role_arn": "RoleArn",
        "code_uri": "CodeUri",
        "handoff_s": "HandoffSeconds",
        "job_name_prefix": "JobNamePrefix",
        "wait_handle": "WaitHandle",
        "source_s3_uri": "SourceS3Uri",
    }
    # Written as "" when unset (the handler reads "" as unset); the two late ones are left out until set.
    _EMPTY_WHEN_UNSET: ClassVar[tuple[str, ...]] = ("token_secret_arn", "hub_endpoint")
    # Left out until set: the two late ones, and the archive source (a Hub checkpoint's template is unchanged).
    _LATE: ClassVar[tuple[str, ...]] = ("job_name_prefix", "wait_handle", "source_s3_uri")

    @property
    def source(self) -> str:
        """What is staged, as the manifest's ``repo_id`` names it: the Hub repository or the archive's URI."""
        return self.source_s3_uri or self.repo_id

    def to_properties(self) -> dict[str, Any]:
        """The resource's properties as the template holds them (numbers as text, patterns as lists)."""
        properties: dict[str, Any] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value is None and field.name in self._LATE:
                continue
            if value is None:
                value = ""
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, int) and not isinstance(value, bool):
                value = str(value)
            properties[self.NAMES[field.name]] = value
        return properties

    @classmethod
    def from_properties(cls, props: dict[str, Any]) -> StagedCheckpointProperties:
        """Parse what CloudFormation sent; a missing required property is a KeyError naming it."""
        defaults = {f.name: f.default for f in fields(cls)}

        def text(name: str, *, required: bool = False) -> str | None:
            key = cls.NAMES[name]
            if required:
                return str(props[key])
            return props.get(key) or defaults[name]

        def number(name: str) -> int:
            raw = props.get(cls.NAMES[name])
            return int(raw) if raw not in (None, "") else int(defaults[name])

        return cls(
            repo_id=str(text("repo_id", required=True)),
            bucket=str(text("bucket", required=True)),
            image_uri=str(text("image_uri", required=True)),
            role_arn=str(text("role_arn", required=True)),
            code_uri=str(text("code_uri", required=True)),
            revision=str(text("revision")),
            prefix=str(props.get(cls.NAMES["prefix"], defaults["prefix"])),
            include=string_list(props.get(cls.NAMES["include"])),
            exclude=string_list(props.get(cls.NAMES["exclude"])),
            token_secret_arn=props.get(cls.NAMES["token_secret_arn"]) or None,
            hub_endpoint=props.get(cls.NAMES["hub_endpoint"]) or None,
            instance_type=str(text("instance_type")),
            max_instances=number("max_instances"),
            bytes_per_instance=number("bytes_per_instance"),
            volume_size_gb=number("volume_size_gb"),
            max_runtime_s=int(props[cls.NAMES["max_runtime_s"]]),
            handoff_s=number("handoff_s"),
            job_name_prefix=str(props[cls.NAMES["job_name_prefix"]]),
            wait_handle=props.get(cls.NAMES["wait_handle"]) or None,
            source_s3_uri=props.get(cls.NAMES["source_s3_uri"]) or None,
        )
