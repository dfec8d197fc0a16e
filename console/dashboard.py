"""The dashboard: job counts by state, alert tiles, throughput, the READY backlog's age and
active runs (stuck ones flagged, with their close button).

Each region polls on its own (its ``hx-target`` is itself) and a poll computes only that
region's data; a full page computes all of them, sharing what two regions need (the stuck
runs feed both the alert tile and the runs table).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.htmx import region_template
from console.policy import ActionContext, page
from core.clock import db_now
from inbox import selectors
from runs.selectors import active_runs, stuck_reasons

DASHBOARD = "console/dashboard.html"


class Shared:
    """What more than one region reads, loaded at most once per request."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self._runs: list[dict[str, Any]] | None = None

    def runs(self) -> list[dict[str, Any]]:
        """Active rows (lapsed ones included: their bar shows it), each with its stuck reason."""
        if self._runs is None:
            runs = active_runs()
            stuck = stuck_reasons(runs, self.now)
            self._runs = [{"run": run, "stuck": stuck.get(run.run_id)} for run in runs]
        return self._runs

    def stuck_count(self) -> int:
        return sum(1 for item in self.runs() if item["stuck"])


REGIONS: dict[str, Callable[[Shared], dict[str, Any]]] = {
    "dashboard-counts": lambda shared: {"counts": selectors.state_counts()},
    "dashboard-alerts": lambda shared: {
        "alerts": selectors.dashboard_alerts(shared.now),
        "stuck_runs": shared.stuck_count(),
    },
    "dashboard-throughput": lambda shared: {
        "throughput": selectors.throughput_per_minute(shared.now)
    },
    "dashboard-ready": lambda shared: {"ready_ages": selectors.ready_age_by_scope(shared.now)},
    "dashboard-runs": lambda shared: {"runs": shared.runs()},
}


def region_context(names: list[str] | None, now: dt.datetime | None = None) -> dict[str, Any]:
    """The context of the named regions (all of them when ``names`` is None)."""
    shared = Shared(db_now(now))
    context: dict[str, Any] = {"now": shared.now}
    for name, build in REGIONS.items():
        if names is None or name in names:
            context.update(build(shared))
    return context


@page(permission="inbox.view_job")
def dashboard(request: HttpRequest) -> HttpResponse:
    """Counts by state, alerts, throughput, READY age and active runs; each region polls
    itself."""
    # An HTMX request for no known region gets the whole page.
    template = region_template(request, DASHBOARD, tuple(REGIONS), default=None)
    _page, _hash, region = template.partition("#")
    return render(request, template, region_context([region] if region else None))


def runs_region(request: HttpRequest, act: ActionContext) -> HttpResponse:
    """The active-runs region after a close from the dashboard, with the action's message."""
    context = {**region_context(["dashboard-runs"]), "act": act}
    return render(request, f"{DASHBOARD}#dashboard-runs", context)
