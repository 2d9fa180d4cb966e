"""Seeing a deployment and guarding its updates: metrics, alarms, an alarm topic and dashboards, by composition.

A construct describes what it is (``Watched``: an endpoint's variant, a component or an adapter, by literal names)
and owns a ``Monitor``, which makes its alarms (``alarms.py``) and its dashboard (``dashboards.py``, one builder for
every target); its ``metric_*`` methods come from ``metrics.py``.
"""

from .alarms import THRESHOLD_RANGES, AlarmThresholds, AlarmTopic, AlarmWindow, grant_describe_alarms, rollback_alarms
from .dashboards import dashboard_url
from .monitor import Monitor, Monitored
from .watched import Watchable, Watched

__all__ = [
    "THRESHOLD_RANGES",
    "AlarmThresholds",
    "AlarmTopic",
    "AlarmWindow",
    "Monitor",
    "Monitored",
    "Watchable",
    "Watched",
    "dashboard_url",
    "grant_describe_alarms",
    "rollback_alarms",
]
