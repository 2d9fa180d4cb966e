"""The account's quota for the endpoint's instances (Service Quotas), and whether it holds the deployment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from preflight_base import DENIED, THROTTLED
from preflight_settings import Settings

QUOTA_NAME = "{} for endpoint usage"


QUOTA_SERVICE = "sagemaker"


QUOTA_NOTE = (
    "a quota is a limit, not a reservation: SageMaker can still answer InsufficientCapacity; "
    "a capacity reservation (capacity_reservation_arn) guarantees instances"
)


@dataclass(frozen=True)
class Quota:
    name: str
    code: str
    value: float
    source: str  # "applied" or "AWS default"


class QuotaLookupError(Exception):
    """Service Quotas could not be read; the message says why and what to do."""


def find_quota(quotas: Any, instance_type: str) -> Quota | None:
    """The ``<instance type> for endpoint usage`` quota: the account's applied value, else the AWS default."""
    name = QUOTA_NAME.format(instance_type)
    for operation, source in (("list_service_quotas", "applied"), ("list_aws_default_service_quotas", "AWS default")):
        try:
            for page in quotas.get_paginator(operation).paginate(ServiceCode=QUOTA_SERVICE):
                for quota in page.get("Quotas", []):
                    if quota.get("QuotaName") == name:
                        return Quota(name, str(quota.get("QuotaCode", "")), float(quota.get("Value", 0)), source)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code == "NoSuchResourceException":
                continue  # no applied values for this service: the defaults apply
            raise QuotaLookupError(_quota_error(e, code)) from None
        except BotoCoreError as e:
            raise QuotaLookupError(f"could not read Service Quotas: {type(e).__name__}: {e}") from None
    return None


def _quota_error(error: ClientError, code: str) -> str:
    action = f"servicequotas:{error.operation_name}"
    if code in DENIED:
        return (
            f"access denied to Service Quotas ({code}): the preflight role needs {action} (the check uses "
            "servicequotas:ListServiceQuotas and servicequotas:ListAWSDefaultServiceQuotas; an SCP may deny them). "
            "Grant it, or skip the quota check"
        )
    if code in THROTTLED:
        attempts = error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
        return (
            f"Service Quotas throttled {error.operation_name} ({code}) after {attempts} attempt(s): deploy again "
            "later, or skip the quota check"
        )
    message = error.response.get("Error", {}).get("Message", "")
    return f"could not read Service Quotas ({error.operation_name}): {code}: {message}"


def check_quota(quota: Quota | None, settings: Settings, instance_type: str | None = None) -> list[str]:
    """``instance_type``: a fallback of the variant's instance pools (default: ``settings.instance_type``). Each
    pool must hold every instance: SageMaker falls back to it whenever the types before it have no capacity, at
    creation, scale-out and replacement (SageMaker developer guide, realtime-endpoints-heterogeneous)."""
    # An update of a standard endpoint provisions a whole new (green) fleet beside the serving one
    # (SageMaker deployment-guardrails-blue-green), so the quota must hold both while it runs.
    needed = settings.instances_needed + settings.update_instances
    why = (
        f" ({settings.instances_needed} serving + {settings.update_instances} for an update's new instances: "
        "a blue/green fleet or a rolling batch)"
        if settings.update_instances
        else ""
    )
    name = QUOTA_NAME.format(instance_type or settings.instance_type)
    if instance_type:
        why += f" (instance_pools fallback {instance_type}: SageMaker may place every instance on it)"
    if quota is None:
        return [
            f"Service Quotas has no quota named {name!r} for SageMaker in this region: the instance type may not "
            "be offered for endpoints here (check the name and the region), or skip the quota check"
        ]
    if quota.value < needed:
        return [
            f"the quota {name!r} ({quota.code}, {quota.source} value) is {quota.value:g} in this account and "
            f"region; this deployment needs {needed} instance(s){why}. Request an increase in the Service Quotas "
            f"console (quota code {quota.code}), or choose another instance type. Instances of this type in other "
            "endpoints of the account count against the same quota"
        ]
    return []
