"""``ServingImageCheck``: fail a deployment in seconds when its serving image cannot be pulled.

A ``Custom::ServingImageCheck`` resource, served by ``lambda/serving_image_check`` through the stack's one
``ServingImageCheckProvider``, asks ECR (``BatchGetImage``, what a pull calls first) whether the image's tag or
digest exists in the stack's region, and whether it is built for the instances' CPU. SageMaker itself looks only
when the Model is created, which waits for the staged weights; this check depends on nothing but its function, and
the staging waits for it, so a wrong image fails the deploy in seconds, before any staging job starts.

Every Model this library creates waits for one, and so does a staged checkpoint it serves from
(``constructs_lib.hosting.serving_model``), so ``GpuEndpoint`` and ``InferenceComponent`` need no setting. Its
role may call ``BatchGetImage`` and ``GetDownloadUrlForLayer`` on the image's repository only; what the role is
denied is a note, not a failure (the execution role is what SageMaker pulls with, and a repository policy may
name only that one).
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from handler_kit.resources import ServingImageCheckProperties

from .catalog import lookup_instance
from .images import ServingImage
from .nag import acknowledge_wildcard
from .provider import HandlerProvider

PROVIDER_ID = "ServingImageCheckProvider"
HANDLER = "serving_image_check"
# The handler bounds its own work by wall clock to 15 s before this (lambda/serving_image_check ANSWER_MARGIN_S), so
# an ECR out of reach ends in a note, not a Lambda timeout (which the Provider framework reports as a failure).
HANDLER_TIMEOUT = cdk.Duration.minutes(3)
# One synchronous run, the Provider framework around it, and its retry of a crashed invocation.
SERVICE_TIMEOUT = cdk.Duration.minutes(8)
X86_64 = "amd64"
# The manifest, then the config blob's URL (botocore ecr model: a pull calls these two for them); both take the
# repository ARN as their resource (Service Authorization Reference, Amazon ECR: resource type "repository").
ACTIONS = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
CACHE_RULES_ACTION = "ecr:DescribePullThroughCacheRules"


def cpu_architecture(instance_types: Sequence[str]) -> str:
    """``amd64`` when the catalog knows every type (all x86-64: constructs_lib/data/instances.json), else ``""``: a
    type outside the catalog may run another CPU, so its image's platform is not checked."""
    return X86_64 if all(lookup_instance(t) is not None for t in instance_types) else ""


class ServingImageCheck(Construct):
    """Checks that ``image`` exists in the stack's region and runs on the instances' CPU, before anything waits on it.

    ``ServingImageCheck(self, "ImageCheck", image=ServingImage.from_uri(uri))``; make what pulls the image, and the
    staging of its weights, depend on it (``model.node.add_dependency(check)``). ``image_digest`` is the digest the
    tag named when the check last ran (when the image was set).
    """

    def __init__(self, scope: Construct, id: str, *, image: ServingImage, architecture: str = X86_64) -> None:
        """
        :param image: the serving image, as the Model names it.
        :param architecture: the instances' CPU as an OCI platform architecture (``cpu_architecture``); ``""``: not
            known, the platform is not checked. Default: ``amd64`` (every GPU instance type in the catalog is x86-64).
        """
        super().__init__(scope, id)
        first = cdk.Stack.of(self).node.try_find_child(PROVIDER_ID) is None
        self.provider = HandlerProvider.of(self, PROVIDER_ID, handler=HANDLER, timeout=HANDLER_TIMEOUT)
        role = self.provider.role
        role.add_to_principal_policy(iam.PolicyStatement(actions=list(ACTIONS), resources=[image.repository_arn(self)]))
        if first:
            # Once per provider: a missing image of the stack's own registry may be a pull-through cache's first pull.
            role.add_to_principal_policy(iam.PolicyStatement(actions=[CACHE_RULES_ACTION], resources=["*"]))
            acknowledge_wildcard(
                role.node.find_child("DefaultPolicy"),
                resource="*",
                reason="ecr:DescribePullThroughCacheRules supports no resource-level permissions (Service "
                "Authorization Reference, Amazon ECR); the handler lists its own registry's cache rules only, to tell "
                "a pull-through cache's first pull from a missing image.",
            )
        self.resource = self.provider.custom_resource(
            self,
            ServingImageCheckProperties(image_uri=image.image_uri(self), architecture=architecture),
            service_timeout=SERVICE_TIMEOUT,
        )
        self.resource.node.add_dependency(role)  # its grant before it runs
        self.node.default_child = self.resource
        self.image = image

    def precedes(self, staging: IConstruct) -> None:
        """Make ``staging`` (a ``StagedCheckpoint``) wait for this check, so no staging job starts for an image that
        is not there: a check beside staging could fail while a staging Create still runs, and that Create could
        start its job after the rollback's Delete (aws-cdk #26139). Only within this check's stack: across stacks the
        consumer's stack already depends on the staging's (its S3 prefix), and the wait would be a cycle."""
        if cdk.Stack.of(staging) is cdk.Stack.of(self):
            staging.node.add_dependency(self)
        else:
            cdk.Annotations.of(self).add_warning_v2(
                "llm:image-check-other-stack",
                f"{staging.node.path} is in another stack: its staging does not wait for this image check, so a "
                "wrong image fails the deploy only after that stack's staging.",
            )

    @classmethod
    def of(cls, model: IConstruct) -> ServingImageCheck | None:
        """The check ``model`` (a Model this library created: ``GpuEndpoint.model``, ``InferenceComponent.model``)
        waits for, or None."""
        return next((d for d in model.node.dependencies if isinstance(d, cls)), None)

    @property
    def image_digest(self) -> str:
        """The digest the image's tag named when the check last ran, at the deploy that set this image
        (``sha256:...``; ``unverified`` when ECR did not tell)."""
        return self.resource.get_att_string("ImageDigest")
