"""Container images: DLC registry accounts, tag parsing, CUDA level and inference AMI pairing."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache

import aws_cdk as cdk
from constructs import Construct

from .catalog import DATA_DIR
from .engines import DEFAULT_TAG_PATTERN, EngineSpec, all_tag_patterns

# X.Y.Z[.postN]-gpu-py312-cuNNN-ubuntuA.B-sagemaker (vLLM, SGLang). Each engine names its own pinned-tag
# pattern in data/engines.json (LMI: <djl>-lmi<N.N.N>-cuNNN); those and digests are the only pins.
SEMANTIC_TAG = DEFAULT_TAG_PATTERN
CUDA_IN_TAG = re.compile(r"(?:^|[-_])cu(?:da)?-?(?P<cuda>\d{3,4})(?:$|[-_.])")
ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
    r"(?P<repository>[a-z0-9._/-]+?)(?::(?P<tag>[A-Za-z0-9_.-]{1,128})|@(?P<digest>sha256:[a-f0-9]{64}))$",
    re.ASCII,
)
MAPPING_ID = "DlcRegistryAccounts"


def recorded_tag_key(engine: str, instance_type: str) -> str:
    """The cdk.context.json key under which ``llmops.resolve_image`` records a DLC tag."""
    return f"dlc-image-tag:engine={engine}:instance-type={instance_type}"


def parse_cuda(text: str) -> tuple[int, int]:
    """'130' -> (13, 0), '129' -> (12, 9), '1210' -> (12, 10)."""
    if len(text) == 3:
        return int(text[:2]), int(text[2])
    return int(text[:2]), int(text[2:])


def cuda_of_tag(tag: str | None) -> tuple[int, int] | None:
    if not tag:
        return None
    m = SEMANTIC_TAG.match(tag) or CUDA_IN_TAG.search(tag)
    return parse_cuda(m.group("cuda")) if m else None


def version_key(tag: str, pattern: re.Pattern[str] = SEMANTIC_TAG) -> tuple[int, ...] | None:
    """Sort key of a pinned tag's engine version (its ``version`` group); None for other tags."""
    m = pattern.match(tag)
    if not m:
        return None
    parts = m.group("version").replace(".post", ".").split(".")
    nums = [int(p) for p in parts]
    return tuple(nums + [0] * (4 - len(nums)))


@cache
def _registry() -> dict:
    return json.loads((DATA_DIR / "dlc_registry.json").read_text())


@cache
def _amis() -> dict:
    return json.loads((DATA_DIR / "inference_amis.json").read_text())


def dlc_account(region: str) -> str | None:
    """The DLC registry account of ``region``, or None when the table does not list it."""
    return _registry()["accounts"].get(region)


def dlc_regions() -> dict[str, str]:
    return dict(_registry()["accounts"])


def known_ami_versions() -> list[str]:
    return sorted(_amis()["amis"])


def ami_cuda(ami: str) -> tuple[int, int] | None:
    entry = _amis()["amis"].get(ami)
    if not entry:
        return None
    major, minor = entry["max_cuda"].split(".")  # "12.8" (data/amis.json)
    return int(major), int(minor)


def default_ami_for_cuda(cuda: tuple[int, int] | None) -> str | None:
    """The inference AMI whose driver runs images built for ``cuda`` (None: let SageMaker choose)."""
    if cuda is None:
        return None
    return _amis()["default_for_cuda_major"].get(str(cuda[0]))


@dataclass(frozen=True)
class ServingImage:
    """A serving container image: a DLC repository and tag, or a full ECR URI.

    Use ``ServingImage.from_dlc(engine)`` for the pinned default of an engine, ``from_dlc(engine,
    tag)`` for another DLC tag, or ``from_uri(uri)`` for any ECR image.
    """

    repository: str
    tag: str | None = None
    digest: str | None = None
    account: str | None = None
    region: str | None = None
    source_uri: str | None = None
    # Where the choice came from, for messages ("image", "the default image of engine vllm", ...).
    origin: str = field(default="image", compare=False)

    @classmethod
    def from_dlc(cls, engine: EngineSpec, tag: str | None = None, *, origin: str | None = None) -> ServingImage:
        default_origin = "image" if tag else f"the default image of engine {engine.name}"
        return cls(repository=engine.repository, tag=tag or engine.default_tag, origin=origin or default_origin)

    def describe(self) -> str:
        """How messages name this image: ``image='<uri>'`` or ``<origin> '<repo>:<tag>'``."""
        if self.source_uri:
            return f"image={self.source_uri!r}"
        shown = f"{self.repository}{'@' + self.digest if self.digest else ':' + str(self.tag)}"
        return f"image={shown!r}" if self.origin == "image" else f"{self.origin} {shown!r}"

    @classmethod
    def from_uri(cls, uri: str) -> ServingImage:
        m = ECR_URI.fullmatch(uri)
        china_host = ".amazonaws.com.cn/" in uri
        if not m or china_host != m.group("region").startswith("cn-"):
            raise ValueError(
                f"image={uri!r} is not an ECR image URI; expected "
                "<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag> or ...@sha256:<digest>."
            )
        return cls(
            repository=m.group("repository"),
            tag=m.group("tag"),
            digest=m.group("digest"),
            account=m.group("account"),
            region=m.group("region"),
            source_uri=uri,
        )

    @property
    def cuda(self) -> tuple[int, int] | None:
        return cuda_of_tag(self.tag)

    @property
    def is_pinned(self) -> bool:
        """A digest or an engine's pinned tag. Floating tags (``...-sagemaker-v1``) are not pins."""
        return self.digest is not None or (self.tag is not None and any(p.match(self.tag) for p in all_tag_patterns()))

    def _account(self, scope: Construct) -> str:
        if self.account:
            return self.account
        stack = cdk.Stack.of(scope)
        if not cdk.Token.is_unresolved(stack.region):
            account = dlc_account(stack.region)
            if account is None:
                raise ValueError(
                    f"region {stack.region!r} has no DLC registry account in constructs_lib/data/dlc_registry.json; "
                    "give the full image URI with image=..."
                )
            return account
        mapping = stack.node.try_find_child(MAPPING_ID)
        if mapping is None:
            mapping = cdk.CfnMapping(
                stack,
                MAPPING_ID,
                mapping={region: {"account": acct} for region, acct in sorted(dlc_regions().items())},
            )
        return mapping.find_in_map(cdk.Aws.REGION, "account")

    def image_uri(self, scope: Construct) -> str:
        if self.source_uri:
            return self.source_uri
        ref = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"{self._account(scope)}.dkr.ecr.{cdk.Aws.REGION}.{cdk.Aws.URL_SUFFIX}/{self.repository}{ref}"

    def repository_arn(self, scope: Construct) -> str:
        region = self.region or cdk.Aws.REGION
        return f"arn:{cdk.Aws.PARTITION}:ecr:{region}:{self._account(scope)}:repository/{self.repository}"
