"""Health checks and the dashboard."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.htmx import wants_fragment
from console.policy import page, public
from inbox import selectors
from inbox.transitions import db_now
from runs.selectors import active_runs


@public
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers; no database access."""
    return JsonResponse({"status": "ok"})


@public
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: the database answers and every migration is applied."""
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        return JsonResponse({"status": "unavailable", "error": str(exc)}, status=503)
    if pending:
        return JsonResponse(
            {"status": "migrations pending", "pending": [str(m) for m, _ in pending]}, status=503
        )
    return JsonResponse({"status": "ready"})


# Each dashboard region polls on its own; a poll renders only that region's data.
DASHBOARD_REGIONS: dict[str, Callable[[dt.datetime], dict[str, Any]]] = {
    "dashboard-counts": lambda now: {"counts": selectors.state_counts()},
    "dashboard-alerts": lambda now: {"alerts": selectors.dashboard_alerts(now)},
    "dashboard-throughput": lambda now: {"throughput": selectors.throughput_per_minute(now)},
    "dashboard-runs": lambda now: {"runs": active_runs()},
}


@page(permission="inbox.view_job")
def dashboard(request: HttpRequest) -> HttpResponse:
    """Counts by state, throughput, alert tiles and active runs; each region polls itself."""
    now = db_now()
    target = request.htmx.target if wants_fragment(request) else None
    if target in DASHBOARD_REGIONS:
        context = {"now": now, **DASHBOARD_REGIONS[target](now)}
        return render(request, f"console/dashboard.html#{target}", context)
    context: dict[str, Any] = {"now": now}
    for build in DASHBOARD_REGIONS.values():
        context.update(build(now))
    return render(request, "console/dashboard.html", context)
