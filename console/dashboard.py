"""The dashboard: job counts by state, alert tiles, throughput and active runs.

Each region polls on its own (its ``hx-target`` is itself) and a poll computes only that
region's data; a full page computes all four.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.htmx import region_template
from console.policy import page
from core.clock import db_now
from inbox import selectors
from runs.selectors import active_runs

DASHBOARD = "console/dashboard.html"

REGIONS: dict[str, Callable[[dt.datetime], dict[str, Any]]] = {
    "dashboard-counts": lambda now: {"counts": selectors.state_counts()},
    "dashboard-alerts": lambda now: {"alerts": selectors.dashboard_alerts(now)},
    "dashboard-throughput": lambda now: {"throughput": selectors.throughput_per_minute(now)},
    "dashboard-runs": lambda now: {"runs": active_runs()},
}


@page(permission="inbox.view_job")
def dashboard(request: HttpRequest) -> HttpResponse:
    """Counts by state, throughput, alert tiles and active runs; each region polls itself."""
    # An HTMX request for no known region gets the whole page.
    template = region_template(request, DASHBOARD, tuple(REGIONS), default=None)
    _page, _hash, region = template.partition("#")
    now = db_now()
    context: dict[str, Any] = {"now": now}
    for name, build in REGIONS.items():
        if not region or name == region:
            context.update(build(now))
    return render(request, template, context)
