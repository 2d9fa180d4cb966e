"""The monitor of one watched construct: its alarms and its dashboard, composed from alarms.py and dashboards.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from constructs import Construct, IDependable

from ..problems import construct_subject, refuse
from .alarms import AlarmThresholds, serving_alarms
from .dashboards import SmokeFigures, dashboard_url, new_dashboard
from .watched import Watchable, Watched


class Monitored(Watchable, Protocol):
    """A watched construct with alarms of its own: a component or an adapter (``ComponentEndpoint.parts``)."""

    @property
    def alarms(self) -> list[cloudwatch.Alarm]: ...

    def add_alarms(
        self, thresholds: AlarmThresholds | None = None, *, topic: sns.ITopic | None = None
    ) -> list[cloudwatch.Alarm]: ...


class Monitor:
    """Alarms and a dashboard of ``owner`` (a ``Watchable`` construct), each made at most once.

    :param owner: what is watched; the alarms are its children ``Alarms/<Name>``.
    """

    def __init__(self, owner: Watchable) -> None:
        self.owner = owner
        self.alarms: list[cloudwatch.Alarm] = []
        self.no_capacity_alarm: cloudwatch.Alarm | None = None
        self.dashboard: cloudwatch.Dashboard | None = None

    def _construct(self) -> Construct:
        if not isinstance(self.owner, Construct):
            raise TypeError(f"{self.owner!r} is not a construct")
        return self.owner

    def _subject(self) -> str:
        return construct_subject(type(self.owner).__name__, self.owner)

    def add_alarms(
        self,
        thresholds: AlarmThresholds | None,
        *,
        topic: sns.ITopic | None,
        serving: IDependable | None = None,
    ) -> list[cloudwatch.Alarm]:
        """The owner's alarms (``serving_alarms``); ``serving``: what the no-capacity alarm waits for, when it counts
        instances (missing data breaching: it must not exist before the instances do)."""
        thresholds = thresholds or AlarmThresholds()
        refuse(self._subject(), thresholds.problems())
        if self.alarms:
            raise ValueError(f"{self.owner.node.path}: add_alarms was already called")
        self.alarms = serving_alarms(
            Construct(self._construct(), "Alarms"), self.owner.watched(), thresholds, topic=topic
        )
        self.no_capacity_alarm = next((a for a in self.alarms if a.node.id == "NoCapacity"), None)
        if self.no_capacity_alarm is not None and serving is not None:
            self.no_capacity_alarm.node.add_dependency(serving)
        return self.alarms

    def alarm(self, id: str) -> cloudwatch.Alarm | None:
        """The alarm of ``add_alarms`` with this id (``Errors5xx``, ``AsyncFailures``...), if there is one."""
        return next((a for a in self.alarms if a.node.id == id), None)

    def add_dashboard(
        self,
        *,
        scope: Construct | None,
        smoke_test: SmokeFigures | None,
        parts: Callable[[], Sequence[Watchable]] = tuple,
        alarms: Callable[[], Sequence[cloudwatch.IAlarm]] | None = None,
    ) -> cloudwatch.Dashboard:
        """A dashboard of the owner and of ``parts`` (read at synth: components and adapters added later are shown),
        then the state of ``alarms`` (default: the owner's). ``scope``: where the ``Dashboard`` goes (default: the
        owner; a dashboard that shows a smoke test depending on the owner must go elsewhere, or the two depend on
        each other)."""
        if self.dashboard is not None:
            raise ValueError(f"{self.owner.node.path}: add_dashboard was already called")
        owner = self.owner

        def targets() -> list[Watched]:
            return [owner.watched(), *(part.watched() for part in parts())]

        self.dashboard = new_dashboard(
            scope or self._construct(),
            targets=targets,
            alarms=alarms or (lambda: self.alarms),
            smoke_test=smoke_test,
        )
        return self.dashboard

    @property
    def dashboard_url(self) -> str:
        if self.dashboard is None:
            raise ValueError(f"{self.owner.node.path}: call add_dashboard first")
        return dashboard_url(self.dashboard)
