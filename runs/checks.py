"""System checks of the runs settings, reported by ``manage.py check`` and by every command
before it runs (Django runs all checks first), not by the first consolidator pass or the first
page that asks whether a run is stuck.

- ``runs.E001`` ``RUNS_CONSOLIDATOR`` cannot be imported or built, or is not a consolidator;
- ``runs.E002`` ``RUNS_STUCK_AFTER_SECONDS`` is not a positive number of seconds.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from core.errors import ConfigurationError
from runs.consolidators import get_consolidator
from runs.errors import ConsolidatorError
from runs.selectors import stuck_after_seconds


@checks.register("runs")
def check_consolidator(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        get_consolidator()
    except ConsolidatorError as exc:
        hint = "Point RUNS_CONSOLIDATOR at a class or factory providing a Consolidator."
        return [checks.Error(f"configuration error: {exc}", hint=hint, id="runs.E001")]
    return []


@checks.register("runs")
def check_stuck_after(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        stuck_after_seconds()
    except ConfigurationError as exc:
        return [checks.Error(str(exc), hint="Set it to seconds, e.g. 300.", id="runs.E002")]
    return []
