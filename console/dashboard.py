"""The dashboard: job counts by state, alert tiles, throughput, the READY backlog's age and
active runs (stuck ones flagged, with their close button).

Each region polls on its own (its ``hx-target`` is itself) and a poll computes only that
region's data; a full page computes all of them, sharing what two regions need (the stuck
runs feed both the alert tile and the runs table). Each region carries its version
(``VERSIONS``) and read time: a poll whose data is what the page already shows gets 204 and
nothing is rendered, and a poll within a few seconds of another operator's is answered from
that reading (console.livecache: the data is the same for everyone).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console import livecache
from console.htmx import region_template, version_of
from console.policy import ActionContext, page
from console.templatetags.console_tags import duration_words
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


def _runs_version(context: dict[str, Any]) -> str:
    now = context["now"]
    return version_of(
        [
            (
                run.run_id,
                run.store,
                run.status,
                run.worker_id,
                run.started_at,
                run.expires_at,
                # Lapsed or not is the one thing the clock changes here (the bar ticks itself).
                run.expires_at < now,
                item["stuck"],
            )
            for item in context["runs"]
            for run in (item["run"],)
        ]
    )


def _ready_version(context: dict[str, Any]) -> str:
    # The oldest job's age as the region words it (and colours it), not to the second.
    return version_of(
        [
            (
                ready.scope,
                ready.buckets,
                None if ready.oldest_seconds is None else duration_words(ready.oldest_seconds),
                (ready.oldest_seconds or 0) >= 300,
                (ready.oldest_seconds or 0) >= 900,
            )
            for ready in context["ready_ages"]
        ]
    )


# What each region shows, without the clock: its version (``data-v``).
VERSIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "dashboard-counts": lambda c: version_of(c["counts"]),
    "dashboard-alerts": lambda c: version_of(c["alerts"], c["stuck_runs"]),
    "dashboard-throughput": lambda c: version_of(c["throughput"]),
    "dashboard-ready": _ready_version,
    "dashboard-runs": _runs_version,
}


# How often each region polls (its ``hx-trigger``), in seconds; a poll's reading is shared
# between operators for part of it (console.livecache).
EVERY: dict[str, int] = {
    "dashboard-alerts": 5,
    "dashboard-runs": 10,
    "dashboard-counts": 10,
    "dashboard-throughput": 30,
    "dashboard-ready": 15,
}


def _read(name: str, shared: Shared) -> tuple[dict[str, Any], str]:
    """One region's context and version."""
    part = {"now": shared.now, **REGIONS[name](shared)}
    return part, VERSIONS[name](part)


def _key(name: str) -> str:
    return f"dashboard:{name}"


def _context(readings: dict[str, livecache.Reading]) -> dict[str, Any]:
    """The regions' data merged, each region's token as ``versions.<name with underscores>``
    and every poll interval as ``every.<name with underscores>``."""
    context: dict[str, Any] = {}
    for reading in readings.values():
        context.update(reading.for_render())
    context["versions"] = {name.replace("-", "_"): r.token for name, r in readings.items()}
    context["every"] = {name.replace("-", "_"): every for name, every in EVERY.items()}
    return context


def region_context(names: list[str] | None, now: dt.datetime | None = None) -> dict[str, Any]:
    """The named regions (all of them when ``names`` is None) read afresh, shared for the
    polls that follow (console.livecache)."""
    shared = Shared(db_now(now))
    readings = {
        name: livecache.read(_key(name), functools.partial(_read, name, shared))
        for name in REGIONS
        if names is None or name in names
    }
    return _context(readings)


@page(permission="inbox.view_job")
def dashboard(request: HttpRequest) -> HttpResponse:
    """Counts by state, alerts, throughput, READY age and active runs; each region polls
    itself, and its poll is answered from a reading shared between operators when one is
    recent enough (console.livecache)."""
    # An HTMX request for no known region gets the whole page.
    template = region_template(request, DASHBOARD, tuple(REGIONS), default=None)
    _page, _hash, region = template.partition("#")
    if not region:
        return render(request, template, region_context(None))
    reading = livecache.poll(
        request, _key(region), EVERY[region], lambda: _read(region, Shared(db_now()))
    )
    if reading is None:
        return HttpResponse(status=204)
    return render(request, template, _context({region: reading}))


def runs_region(request: HttpRequest, act: ActionContext) -> HttpResponse:
    """The active-runs region after a close from the dashboard, with the action's message."""
    context = {**region_context(["dashboard-runs"]), "act": act}
    return render(request, f"{DASHBOARD}#dashboard-runs", context)
