"""How an endpoint or an inference component takes a change: the ``DeploymentConfig`` SageMaker follows on
``UpdateEndpoint``/``UpdateInferenceComponent``, and what it costs in capacity.

Standard mode (``AWS::SageMaker::Endpoint.DeploymentConfig``): every update of the endpoint config is a
blue/green deployment. SageMaker provisions a whole new (green) fleet beside the old (blue) one, shifts
traffic to it all at once, as a canary then the rest, or in linear steps, watches the alarms for
``wait_s`` after each shift (the baking period) and rolls all traffic back to the blue fleet if one fires
("If no update policy is specified, SageMaker uses a blue/green deployment strategy with all at once
traffic shifting by default": CloudFormation AWS::SageMaker::Endpoint DeploymentConfig). So an update
needs twice the instances while it runs, whatever the policy: ``extra_instances_during_update`` says how
many, and the preflight's quota check counts them.

Component mode (``AWS::SageMaker::InferenceComponent.DeploymentConfig``): a rolling update replaces the
component's copies ``step_size`` at a time (new copies first, then old ones removed), baking ``wait_s``
after each batch, and rolls back on the alarms. The extra capacity is one batch of copies, placed on
the endpoint's instances; managed instance scaling adds instances up to ``max_instances`` if they do not
fit. CreateInferenceComponent takes no DeploymentConfig (botocore sagemaker model: only
UpdateInferenceComponent has it), so the policy first applies to the first update after creation.

Schema: cfn-lint's AWS::SageMaker::Endpoint and AWS::SageMaker::InferenceComponent (DeploymentConfig,
BlueGreenUpdatePolicy, TrafficRoutingConfig, CapacitySize, RollingUpdatePolicy, AutoRollbackConfig:
1-10 alarms, WaitIntervalInSeconds 0-3600, MaximumExecutionTimeoutInSeconds 600-28800,
TerminationWaitInSeconds 0-3600).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import aws_sagemaker as sagemaker

ALL_AT_ONCE = "all-at-once"
CANARY = "canary"
LINEAR = "linear"
ROLLING = "rolling"
NONE = "none"
# Rolling is also an endpoint policy: AWS::SageMaker::Endpoint DeploymentConfig.RollingUpdatePolicy (cfn-lint schema;
# botocore sagemaker DeploymentConfig), the way to update without a second full fleet (capacity reservations).
STANDARD_POLICIES = (ALL_AT_ONCE, CANARY, LINEAR, ROLLING, NONE)
COMPONENT_POLICIES = (ROLLING, NONE)
UPDATE_POLICIES = (ALL_AT_ONCE, CANARY, LINEAR, ROLLING, NONE)
# The API's ranges (CreateEndpoint/UpdateEndpoint DeploymentConfig; CreateInferenceComponent), also the context
# keys' (constructs_lib/deployment/context_keys.py): one definition.
WAIT_RANGE_S = (0, 3600)  # WaitIntervalInSeconds, TerminationWaitInSeconds
TIMEOUT_RANGE_S = (600, 28800)  # MaximumExecutionTimeoutInSeconds
TRAFFIC_TYPES = {ALL_AT_ONCE: "ALL_AT_ONCE", CANARY: "CANARY", LINEAR: "LINEAR"}
DEFAULT_WAIT_S = 300
# What a derived rolling-update timeout allows per batch beyond its documented waits, for SageMaker to launch the
# instance the batch may need (managed instance scaling). Not an AWS figure: our allowance, at the API's own
# minimum timeout. Give update_timeout_s to choose another.
INSTANCE_LAUNCH_ALLOWANCE_S = 600
MAX_ROLLBACK_ALARMS = 10  # AutoRollbackConfig.Alarms: 1-10 (cfn-lint schema; API_AutoRollbackConfig)
# A one-copy component's default batch: 50 % of the copy count, the top of MaximumBatchSize's documented 5-50 % (API
# InferenceComponentRollingUpdatePolicy), as CAPACITY_PERCENT (API InferenceComponentCapacitySize).
ONE_COPY_BATCH_PERCENT = 50


@dataclass(frozen=True)
class UpdatePolicy:
    """An update policy, the same object for both modes.

    :param kind: ``all-at-once``, ``canary`` or ``linear`` (blue/green, standard mode), ``rolling``
        (component mode, or an endpoint updated one batch of instances at a time) or ``none`` (no
        DeploymentConfig: SageMaker's default blue/green all at once, without baking or alarms). Default: the
        mode's default (``default_for``).
    :param step_size: canary size or linear step in instances (standard mode), or copies per rolling
        batch (component mode). Default: 1.
    :param wait_s: baking period after each traffic shift or batch, 0-3600 s, during which the alarms
        roll the update back. Default: 300 s.
    :param termination_wait_s: blue/green only: how long the old fleet stays after the last shift, 0-3600 s
        (a fast manual way back). Default: 0 (SageMaker's).
    :param max_execution_timeout_s: the whole update's limit, 600-28800 s. Default: rolling: derived from the
        waits and the provisioning, download and start-up timeouts (``derived_timeout_s``); blue/green: SageMaker's.
    :param rollback_step_size: rolling only: instances (copies) per batch when the update rolls back
        (``RollbackMaximumBatchSize``). Default: ``step_size``, so a rollback needs no more room than the update.
    :param step_percent: component rolling only: the batch as ``CAPACITY_PERCENT`` of the copy count instead of
        ``step_size`` copies. Default: none (``COPY_COUNT`` ``step_size``); ``default_for`` sets 50 for one copy.
    """

    kind: str
    step_size: int = 1
    wait_s: int = DEFAULT_WAIT_S
    termination_wait_s: int | None = None
    max_execution_timeout_s: int | None = None
    rollback_step_size: int | None = None
    step_percent: int | None = None

    @staticmethod
    def default_for(component_mode: bool, *, copies: int | None = None) -> UpdatePolicy:
        """Rolling for a component; blue/green all at once with a baking period for an endpoint.

        A component whose most copies an update can start at (``copies``) is 1 rolls in batches of
        ``CAPACITY_PERCENT`` 50: no whole-copy batch is 5-50% of one copy (COPY_COUNT 1 is 100 %), while 50 % of
        the copy count is inside the range SageMaker documents (API InferenceComponentRollingUpdatePolicy.
        MaximumBatchSize; InferenceComponentCapacitySize: COPY_COUNT or CAPACITY_PERCENT). The batch is still
        counted as one copy (``step_size`` 1) for room, quota and timeouts: a batch provisions capacity, and SageMaker
        does not document rounding half a copy down to none.
        """
        if component_mode and copies == 1:
            return UpdatePolicy(ROLLING, step_percent=ONE_COPY_BATCH_PERCENT)
        return UpdatePolicy(ROLLING if component_mode else ALL_AT_ONCE)

    @property
    def blue_green(self) -> bool:
        return self.kind in TRAFFIC_TYPES

    @property
    def rollback_batch(self) -> int:
        """``RollbackMaximumBatchSize`` of a rolling update: ``rollback_step_size``, else the update's own batch.

        Absent, SageMaker brings "the whole capacity of the old fleet at once during rollback" (API
        RollingUpdatePolicy.RollbackMaximumBatchSize; "100% of the total capacity",
        InferenceComponentRollingUpdatePolicy), a second full fleet (or every old copy) beside the new one, which a
        reservation or MaxInstanceCount cannot hold.
        """
        return self.rollback_step_size if self.rollback_step_size is not None else self.step_size

    @property
    def batch_units(self) -> int:
        """The most new instances (copies) an update or its rollback adds at once beside the serving ones."""
        return max(self.step_size, self.rollback_batch)

    def steps(self, *, instances: int, copies: int | None = None) -> int:
        """How many baking periods the update runs: one per traffic step, rolling batch or canary stage.

        All at once: one bake after the single shift (deployment-guardrails-blue-green-all-at-once). Canary: one
        bake after the canary, then "all traffic shifts to the green fleet and enters a final baking period"
        (deployment-guardrails-blue-green-canary): two. Linear: "For each step, there is a baking period"
        (deployment-guardrails-blue-green-linear), ceil(instances / step) steps. Rolling: one per batch,
        ceil(copies / batch) for a component, ceil(instances / batch) for an endpoint (API RollingUpdatePolicy,
        InferenceComponentRollingUpdatePolicy: WaitIntervalInSeconds is "for each batch").
        """
        if self.kind == CANARY:
            return 2
        if self.kind == LINEAR:
            return max(1, math.ceil(max(instances, 1) / max(self.step_size, 1)))
        if self.kind == ROLLING:
            units = copies if copies is not None else instances
            return max(1, math.ceil(max(units or 1, 1) / max(self.step_size, 1)))
        return 1

    def waiting_s(self, *, instances: int, copies: int | None = None) -> int:
        """The waits the update contains: one bake per step (``steps``), then the termination wait."""
        return self.steps(instances=instances, copies=copies) * self.wait_s + (self.termination_wait_s or 0)

    def needed_s(
        self, *, instances: int, copies: int | None = None, provisioning_s: int = 0, provision_s: int = 0
    ) -> int:
        """What the update's timeout must exceed: its waits and the new capacity coming up.

        ``provisioning_s``: the model download and container start-up timeouts; ``provision_s``: the provisioning
        timeout, "the total time SageMaker AI spends attempting to provision instances across all pools before the
        operation fails" (SageMaker guide, realtime-endpoints-heterogeneous: VariantInstanceProvisionTimeoutInSeconds),
        once for each new capacity. Blue/green: "The timeout value should be larger than the total waiting time
        specified in TerminationWaitInSeconds and WaitIntervalInSeconds" (API BlueGreenUpdatePolicy.
        MaximumExecutionTimeoutInSeconds), and the one green fleet must be provisioned, download the model and pass
        its health check before any traffic moves: once. Rolling: the timeout is "the time limit for the total
        deployment" (API RollingUpdatePolicy, InferenceComponentRollingUpdatePolicy), and every batch brings up its
        own new capacity ("For each step, SageMaker AI provisions capacity on the new endpoint fleet",
        InferenceComponentRollingUpdatePolicy.MaximumBatchSize) before its bake: once per batch.
        """
        coming_up = provisioning_s + provision_s
        if self.kind == ROLLING:
            return self.steps(instances=instances, copies=copies) * (self.wait_s + coming_up)
        return self.waiting_s(instances=instances, copies=copies) + coming_up

    def derived_timeout_s(
        self, *, instances: int, copies: int | None = None, provisioning_s: int = 0, provision_s: int = 0
    ) -> int | None:
        """``MaximumExecutionTimeoutInSeconds`` to send: the given one, else, for a rolling update, every batch's
        bake and new capacity coming up (``needed_s``) plus ``INSTANCE_LAUNCH_ALLOWANCE_S`` per batch, within the
        API's 600-28800 s. ``instances`` (``copies``): the most an update can start at (an autoscaled variant keeps
        its count through an update: RetainAllVariantProperties). Without it a rolling update that cannot finish
        waits for SageMaker's own limit, which the API does not state, before CloudFormation rolls back. Blue/green
        keeps SageMaker's default when none is given."""
        if self.max_execution_timeout_s is not None or self.kind != ROLLING:
            return self.max_execution_timeout_s
        steps = self.steps(instances=instances, copies=copies)
        total = steps * (self.wait_s + provisioning_s + provision_s + INSTANCE_LAUNCH_ALLOWANCE_S)
        return min(TIMEOUT_RANGE_S[1], max(TIMEOUT_RANGE_S[0], total))

    def _needed_text(
        self, *, component_mode: bool, instances: int, copies: int | None, provisioning_s: int, provision_s: int
    ) -> str:
        """Each term of ``needed_s``, with the key it comes from."""
        steps = self.steps(instances=instances, copies=copies)
        needed = self.needed_s(
            instances=instances, copies=copies, provisioning_s=provisioning_s, provision_s=provision_s
        )
        new = "copies" if component_mode else "instances"
        start = (f"provision_timeout_s {provision_s} + " if provision_s else "") + (
            f"download_timeout_s + startup_timeout_s {provisioning_s}"
        )
        if self.kind == ROLLING:
            unit = "batch" if steps == 1 else "batches"
            counted = f"{copies} copies" if component_mode else f"{instances} instances, the most an update starts at"
            return (
                f"{steps} {unit} ({counted}, update_step_size {self.step_size}) x (update_wait_s {self.wait_s} + "
                f"{start} for each batch's new {new}) = {needed} s (API "
                f"{'InferenceComponent' if component_mode else ''}RollingUpdatePolicy: the time limit for the total "
                "deployment)"
            )
        return (
            f"{steps} x update_wait_s {self.wait_s}"
            + (f" + update_termination_wait_s {self.termination_wait_s}" if self.termination_wait_s else "")
            + f" + {start} for the new {new} = {needed} s (API BlueGreenUpdatePolicy: larger than the total waiting)"
        )

    def problems(
        self,
        *,
        component_mode: bool,
        instances: int,
        copies: int | None = None,
        provisioning_s: int = 0,
        provision_s: int = 0,
        most_instances: int | None = None,
    ) -> list[str]:
        """What is wrong with this policy for an endpoint of ``instances`` (or a component of ``copies``).

        ``provisioning_s``: how long the new fleet (or copies) may take to come up, the model download and
        container start-up timeouts, which the update's timeout must also cover; ``provision_s``: the provisioning
        timeout (``provision_timeout_s``), counted with them. ``most_instances``: the most instances an update can
        start at (autoscaling's maximum: RetainAllVariantProperties keeps the count), which the timeout rules count.
        Default: ``instances``.
        """
        allowed = COMPONENT_POLICIES if component_mode else STANDARD_POLICIES
        mode = "inference-component" if component_mode else "standard"
        errors = []
        if self.kind not in allowed:
            errors.append(f"update_policy={self.kind!r} does not apply in {mode} mode; allowed: {', '.join(allowed)}")
            return errors
        low, high = WAIT_RANGE_S
        if not low <= self.wait_s <= high:
            errors.append(f"update_wait_s={self.wait_s}: allowed {low} to {high} (WaitIntervalInSeconds)")
        if self.termination_wait_s is not None and not low <= self.termination_wait_s <= high:
            errors.append(
                f"update_termination_wait_s={self.termination_wait_s}: allowed {low} to {high} "
                "(TerminationWaitInSeconds)"
            )
        if self.termination_wait_s is not None and not self.blue_green:
            errors.append("update_termination_wait_s: only for a blue/green policy (all-at-once, canary, linear)")
        timed = {
            "instances": most_instances if most_instances is not None else instances,
            "copies": copies,
            "provisioning_s": provisioning_s,
            "provision_s": provision_s,
        }
        timeout = self.max_execution_timeout_s
        needed = self.needed_s(**timed) if self.step_size >= 1 else 0
        if timeout is not None:
            if not TIMEOUT_RANGE_S[0] <= timeout <= TIMEOUT_RANGE_S[1]:
                errors.append(
                    f"update_timeout_s={timeout}: allowed {TIMEOUT_RANGE_S[0]} to {TIMEOUT_RANGE_S[1]} "
                    "(MaximumExecutionTimeoutInSeconds)"
                )
            elif timeout <= needed:
                wait = self._needed_text(component_mode=component_mode, **timed)
                allowed_text = (
                    f"more than {needed}, at most {TIMEOUT_RANGE_S[1]}, or leave it unset"
                    if needed < TIMEOUT_RANGE_S[1]
                    else f"none: it is more than MaximumExecutionTimeoutInSeconds' maximum of {TIMEOUT_RANGE_S[1]}"
                )
                errors.append(
                    f"update_timeout_s={timeout} must exceed what the update may wait ({self.kind}): {wait}; "
                    f"allowed: {allowed_text}"
                )
        elif self.kind == ROLLING and needed >= TIMEOUT_RANGE_S[1]:
            # MaximumExecutionTimeoutInSeconds: 600-28800 (botocore sagemaker; API RollingUpdatePolicy).
            wait = self._needed_text(component_mode=component_mode, **timed)
            errors.append(
                f"update_policy=rolling cannot finish within MaximumExecutionTimeoutInSeconds' maximum of "
                f"{TIMEOUT_RANGE_S[1]} s (API RollingUpdatePolicy): {wait}. Raise update_step_size, lower "
                "update_wait_s, download_timeout_s, startup_timeout_s or provision_timeout_s, "
                + ("or lower max_copies" if component_mode else "lower max_instances, or use a blue/green policy")
            )
        if self.step_size < 1:
            errors.append(f"update_step_size={self.step_size}: at least 1")
        elif self.kind == CANARY and self.step_size * 2 > instances:
            # CanarySize "must be less than or equal to 50% of the variant's total instance count"
            # (API TrafficRoutingConfig).
            errors.append(
                f"update_policy=canary with update_step_size={self.step_size} needs at least "
                f"{self.step_size * 2} instances (a canary is at most half of them); instance_count is {instances}. "
                "Use all-at-once, or more instances"
            )
        elif self.kind == LINEAR and not (instances * 0.1 <= self.step_size <= instances * 0.5):
            # LinearStepSize "must be 10-50% of the variant's total instance count" (API TrafficRoutingConfig).
            errors.append(
                f"update_policy=linear with update_step_size={self.step_size}: a linear step is 10-50% of the "
                f"instance count ({instances}); allowed here: {_range(instances * 0.1, instances * 0.5)}"
            )
        elif self.kind == ROLLING and not component_mode and self.step_size * 2 > instances:
            # MaximumBatchSize "must be between 5% to 50% of the variant's total instance count"
            # (API RollingUpdatePolicy).
            errors.append(
                f"update_policy=rolling with update_step_size={self.step_size} needs at least {self.step_size * 2} "
                f"instances (a rolling batch is 5-50% of the variant's instances); instance_count is {instances}. "
                "Raise instance_count, or use a blue/green policy"
            )
        elif self.kind == ROLLING and copies is not None and self.step_size > max(copies, 1):
            errors.append(
                f"update_step_size={self.step_size} copies is more than the component's {copies} copies; "
                "give at most that many"
            )
        if self.rollback_step_size is not None and self.rollback_step_size < 1:
            errors.append(f"rollback_step_size={self.rollback_step_size}: at least 1")
        if self.step_percent is not None and not 5 <= self.step_percent <= 50:
            # MaximumBatchSize: "between 5% to 50% of the copy count" (API InferenceComponentRollingUpdatePolicy).
            errors.append(f"step_percent={self.step_percent}: allowed 5 to 50 (% of the copy count)")
        return errors

    def autoscaled_warnings(self, *, min_instances: int, max_instances: int) -> list[str]:
        """Canary and linear sizes against every instance count autoscaling may leave the variant at.

        SageMaker checks CanarySize (at most 50 %) and LinearStepSize (10-50 %) against "the variant's total
        instance count" (API TrafficRoutingConfig). With autoscaling, UpdateEndpoint keeps the current count
        (RetainAllVariantProperties, which GpuEndpoint.autoscale_instances sets), so an update may start at
        any count from ``min_instances`` to ``max_instances``, not only at ``instance_count``. Which count
        SageMaker validates is not documented, hence warnings, not errors.
        """
        step = self.step_size
        if self.kind == CANARY and step * 2 > min_instances:
            return [
                f"update_policy=canary with update_step_size={step}: autoscaling may leave the variant at "
                f"min_instances={min_instances} when an update starts, and a canary is at most half of the "
                f"variant's instances (API TrafficRoutingConfig); an update started then fails. Keep min_instances "
                f"at {step * 2} or more, or use all-at-once."
            ]
        if self.kind == LINEAR and not (max_instances * 0.1 <= step <= min_instances * 0.5):
            return [
                f"update_policy=linear with update_step_size={step}: autoscaling may leave the variant anywhere "
                f"from {min_instances} to {max_instances} instances when an update starts, and a linear step is "
                "10-50% of the variant's instances (API TrafficRoutingConfig); an update started at a count the "
                "step does not fit fails. Narrow the instance range, or use all-at-once."
            ]
        if self.kind == ROLLING and not (max_instances * 0.05 <= step <= min_instances * 0.5):
            return [
                f"update_policy=rolling with update_step_size={step}: autoscaling may leave the variant anywhere "
                f"from {min_instances} to {max_instances} instances when an update starts, and a rolling batch is "
                "5-50% of the variant's instances (API RollingUpdatePolicy); an update started at a count the batch "
                "does not fit fails. Narrow the instance range, or use all-at-once."
            ]
        return []

    def rolling_batch_warnings(self, *, fewest: int, most: int) -> list[str]:
        """A component's rolling batch against its copy count when an update may start, ``fewest`` to ``most`` (copy
        autoscaling may have moved it anywhere between min_copies, at least 1, and max_copies): 5-50 % of it
        (API InferenceComponentRollingUpdatePolicy). A ``step_percent`` batch fits any count."""
        if self.step_percent is not None:
            return []
        if most == 1:
            # One copy: no batch of whole copies is 5-50% of it (CapacitySizeValue is at least 1, botocore
            # sagemaker): a COPY_COUNT batch is the whole component. The default (update_policy unset) is
            # CAPACITY_PERCENT 50 instead (default_for); this one was asked for.
            return [
                f"Rolling update of a one-copy component with a batch of {self.step_size} copy (COPY_COUNT): "
                "the batch is the whole component, 100 % of its copies, outside the 5-50% of the copy count "
                "SageMaker documents (API InferenceComponentRollingUpdatePolicy); if SageMaker refuses it, the "
                "update fails and rolls back. Leave update_policy unset for the default batch of 50 % "
                "(CAPACITY_PERCENT), or set update_policy=none."
            ]
        if self.step_size * 2 > fewest:
            return [
                f"Rolling update batch of {self.step_size} copies is more than half of the component's "
                f"{fewest} copies (its fewest when an update may start); SageMaker documents a batch of 5-50% of "
                "the copy count (API InferenceComponentRollingUpdatePolicy). With one copy the batch is the whole "
                "component: if SageMaker refuses it, the update fails and rolls back; set update_policy=none to "
                "update without a rolling policy."
            ]
        if self.step_size < most * 0.05:
            return [
                f"Rolling update batch of {self.step_size} copies is less than 5% of the component's {most} "
                "copies (its most when an update may start); SageMaker documents a batch of 5-50% of the copy "
                "count (API InferenceComponentRollingUpdatePolicy). Raise update_step_size to at least "
                f"{math.ceil(most * 0.05)}."
            ]
        return []

    def extra_instances_during_update(self, instances: int) -> int:
        """Instances an update adds while it runs (counted by the preflight's quota check).

        Blue/green (``none`` included: SageMaker's default is blue/green all at once) provisions a whole
        green fleet of the variant's instance count beside the blue one. A rolling component update places
        one batch of new copies on the endpoint's instances, up to its ``max_instances``, which leaves room for it
        (``component_plan``'s default) and which the quota check counts: 0 extra here. A rolling endpoint update
        provisions one batch of ``step_size`` instances before it terminates old ones (API RollingUpdatePolicy), and
        its rollback one batch of ``rollback_batch`` old instances before it terminates new ones (API
        RollingUpdatePolicy.RollbackMaximumBatchSize): the larger of the two. A blue/green rollback shifts traffic
        back to the blue fleet, which is still there: nothing more.
        """
        return self.batch_units if self.kind == ROLLING else instances

    def extra_instances_for_component_update(self) -> int:
        """Copies one component update (or its rollback) places beside the serving ones: the larger of a rolling
        batch and a rollback batch; 1 without a rolling policy (what SageMaker does then is not documented: room for
        one new copy is kept)."""
        return self.batch_units if self.kind == ROLLING else 1

    def endpoint_deployment_config(
        self, alarm_names: Sequence[str], *, timeout_s: int | None = None
    ) -> sagemaker.CfnEndpoint.DeploymentConfigProperty | None:
        """``AWS::SageMaker::Endpoint.DeploymentConfig``, or None for ``none``.

        ``timeout_s``: ``MaximumExecutionTimeoutInSeconds`` (``derived_timeout_s``). Default: the policy's own.
        """
        if self.kind not in (*TRAFFIC_TYPES, ROLLING):
            return None
        timeout_s = self.max_execution_timeout_s if timeout_s is None else timeout_s
        size = sagemaker.CfnEndpoint.CapacitySizeProperty(type="INSTANCE_COUNT", value=self.step_size)
        rollback = (
            sagemaker.CfnEndpoint.AutoRollbackConfigProperty(
                alarms=[sagemaker.CfnEndpoint.AlarmProperty(alarm_name=n) for n in alarm_names]
            )
            if alarm_names
            else None
        )
        if self.kind == ROLLING:
            # RollbackMaximumBatchSize absent: "100% of total capacity", the whole old fleet at once (API
            # RollingUpdatePolicy): set, so that a rollback needs the room of one batch (rollback_batch).
            return sagemaker.CfnEndpoint.DeploymentConfigProperty(
                rolling_update_policy=sagemaker.CfnEndpoint.RollingUpdatePolicyProperty(
                    maximum_batch_size=size,
                    wait_interval_in_seconds=self.wait_s,
                    maximum_execution_timeout_in_seconds=timeout_s,
                    rollback_maximum_batch_size=sagemaker.CfnEndpoint.CapacitySizeProperty(
                        type="INSTANCE_COUNT", value=self.rollback_batch
                    ),
                ),
                auto_rollback_configuration=rollback,
            )
        traffic = sagemaker.CfnEndpoint.TrafficRoutingConfigProperty(
            type=TRAFFIC_TYPES[self.kind],
            wait_interval_in_seconds=self.wait_s,
            canary_size=size if self.kind == CANARY else None,
            linear_step_size=size if self.kind == LINEAR else None,
        )
        return sagemaker.CfnEndpoint.DeploymentConfigProperty(
            blue_green_update_policy=sagemaker.CfnEndpoint.BlueGreenUpdatePolicyProperty(
                traffic_routing_configuration=traffic,
                termination_wait_in_seconds=self.termination_wait_s,
                maximum_execution_timeout_in_seconds=timeout_s,
            ),
            auto_rollback_configuration=rollback,
        )

    def component_deployment_config(
        self, alarm_names: Sequence[str], *, timeout_s: int | None = None
    ) -> sagemaker.CfnInferenceComponent.InferenceComponentDeploymentConfigProperty | None:
        """``AWS::SageMaker::InferenceComponent.DeploymentConfig``, or None for ``none``.

        ``timeout_s``: ``MaximumExecutionTimeoutInSeconds`` (``derived_timeout_s``). Default: the policy's own.
        """
        if self.kind != ROLLING:
            return None
        timeout_s = self.max_execution_timeout_s if timeout_s is None else timeout_s
        size = sagemaker.CfnInferenceComponent.InferenceComponentCapacitySizeProperty
        batch = (
            size(type="CAPACITY_PERCENT", value=self.step_percent)
            if self.step_percent is not None
            else size(type="COPY_COUNT", value=self.step_size)
        )
        return sagemaker.CfnInferenceComponent.InferenceComponentDeploymentConfigProperty(
            rolling_update_policy=sagemaker.CfnInferenceComponent.InferenceComponentRollingUpdatePolicyProperty(
                maximum_batch_size=batch,
                wait_interval_in_seconds=self.wait_s,
                maximum_execution_timeout_in_seconds=timeout_s,
                # RollbackMaximumBatchSize absent: "100% of the total capacity", every old copy at once, blue/green
                # (botocore InferenceComponentRollingUpdatePolicy, InferenceComponentCapacitySize): set to the batch.
                rollback_maximum_batch_size=batch
                if self.rollback_step_size is None
                else size(type="COPY_COUNT", value=self.rollback_step_size),
            ),
            auto_rollback_configuration=(
                sagemaker.CfnInferenceComponent.AutoRollbackConfigurationProperty(
                    alarms=[sagemaker.CfnInferenceComponent.AlarmProperty(alarm_name=n) for n in alarm_names]
                )
                if alarm_names
                else None
            ),
        )


def reservation_problems(policy: UpdatePolicy, *, fleet: int, reservation_instances: int | None) -> list[str]:
    """What is wrong with updating a ``fleet``-instance endpoint on a capacity reservation with ``policy``.

    The variant runs on reserved capacity only (``capacity-reservations-only``, API CapacityReservationConfig), so an
    update's new instances must fit in the reservation beside the serving ones: a blue/green update (``none``
    included, SageMaker's default) "creates a new fleet during the deployment while maintaining the old fleet"
    (API BlueGreenUpdatePolicy); a rolling one provisions one batch before it terminates old instances (API
    RollingUpdatePolicy), and its rollback one batch of old ones before it terminates new ones
    (RollbackMaximumBatchSize). The reservation's size cannot be read at synth, so it is given
    (``capacity_reservation_instances``).
    """
    needed = fleet + policy.extra_instances_during_update(fleet)
    rolling_needs = fleet + 1
    new = "new" if policy.kind != ROLLING else "new: the larger of a batch and a rollback batch"
    rolling = (
        f"update_policy=rolling with update_step_size=1 needs {rolling_needs} (and instance_count 2 or more: a "
        "batch is at most half of the instances)"
    )
    if reservation_instances is None:
        return [
            f"capacity_reservation_arn: an update with update_policy={policy.kind} runs {needed} instances at once "
            f"({fleet} serving + {needed - fleet} {new}) on reserved capacity only, and the reservation's size is not "
            "known at synth: set capacity_reservation_instances to the instances the reservation holds "
            f"(allowed: {needed} or more for this policy; {rolling})"
        ]
    if reservation_instances < needed:
        return [
            f"capacity_reservation_instances={reservation_instances}: an update with update_policy={policy.kind} runs "
            f"{needed} instances at once ({fleet} serving + {needed - fleet} {new}) on reserved capacity only, so it "
            f"could never start; allowed: a reservation of {needed} or more, or {rolling}"
        ]
    return []


def _range(low: float, high: float) -> str:
    first, last = max(1, math.ceil(low)), math.floor(high)
    return f"{first} to {last} instance(s)" if first <= last else "none (at least 2 instances are needed)"
