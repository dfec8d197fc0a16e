"""The workers page: every worker process with its heartbeat, the executor scopes with their
pause, and pause/resume (through ``inbox.scopes``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from console.htmx import dom_id, region_template, unchanged, version_of
from console.policy import ActionContext, action, page
from core.clock import db_now
from core.paging import COUNT_CAP
from inbox import scopes
from inbox.jobtypes import scopes as job_scopes
from inbox.models import HELD_STATES, Job, JobState, ScopePause, Worker, WorkerStatus
from inbox.selectors import capped_counts
from inbox.workers import worker_rows

WORKERS = "console/workers.html"


# --- read model -------------------------------------------------------------------------------


@dataclass
class ScopeRow:
    name: str
    dom_id: str
    pause: ScopePause | None
    # Counted up to COUNT_CAP + 1 (inbox.selectors.capped_counts).
    ready: int
    held: int
    executors_alive: int

    @property
    def paused(self) -> bool:
        return self.pause is not None and self.pause.paused


@dataclass
class WorkersPage:
    workers: list[Worker]
    scopes: list[ScopeRow]
    alive: int
    # Silent past their deadline without saying goodbye (crashed, killed, host gone).
    dead: int
    # Marked themselves stopped on the way out: gone, but not a problem.
    stopped: int
    now: dt.datetime

    @property
    def version(self) -> str:
        """What the processes table shows, without the clock (last seen ticks in the browser
        from ``last_seen_at``; alive or dead is in)."""
        return version_of(
            [
                (w.worker_id, w.kind, w.scope, w.status, w.alive, w.last_seen_at)
                for w in self.workers
            ],
            [
                (w.current_job_id, w.jobs_done, w.jobs_failed, w.host, w.pid, w.started_at)
                for w in self.workers
            ],
        )


def scope_rows(workers: list[Worker] | None = None) -> list[ScopeRow]:
    """Every executor scope with its pause, READY/held counts and live executors."""
    names = job_scopes()
    pauses = {p.scope: p for p in ScopePause.objects.filter(scope__in=names)}
    # Bounded counts in one query, never a COUNT over a deep queue (at 1M jobs the grouped
    # count this replaced took 290 ms). Past the cap the template shows "10,000+".
    counts = capped_counts(
        [Job.objects.filter(scope=n, state=JobState.READY) for n in names]
        + [Job.objects.filter(scope=n, state__in=HELD_STATES) for n in names],
        COUNT_CAP,
    )
    ready = dict(zip(names, counts[: len(names)], strict=True))
    held = dict(zip(names, counts[len(names) :], strict=True))
    workers = worker_rows() if workers is None else workers
    rows = []
    for name in names:
        pause = pauses.get(name)
        rows.append(
            ScopeRow(
                name=name,
                dom_id=dom_id("scope", name),
                pause=pause if pause is not None and pause.paused else None,
                ready=ready[name],
                held=held[name],
                executors_alive=sum(
                    1 for w in workers if w.alive and w.kind == "executor" and w.scope == name
                ),
            )
        )
    return rows


def workers_page(*, with_scopes: bool = True) -> WorkersPage:
    """The page's read model; the processes table's poll leaves the scopes out (it does not
    show them, and their counts are the costly part)."""
    now = db_now()
    workers = worker_rows(now)
    alive = sum(1 for w in workers if w.alive)
    stopped = sum(1 for w in workers if not w.alive and w.status == WorkerStatus.STOPPED)
    return WorkersPage(
        workers=workers,
        scopes=scope_rows(workers) if with_scopes else [],
        alive=alive,
        dead=len(workers) - alive - stopped,
        stopped=stopped,
        now=now,
    )


def scope_row(name: str) -> ScopeRow | None:
    return next((row for row in scope_rows() if row.name == name), None)


# --- views ------------------------------------------------------------------------------------


@page(permission="inbox.view_worker")
def workers(request: HttpRequest) -> HttpResponse:
    template = region_template(request, WORKERS, ("workers-table",), default="workers-table")
    page = workers_page(with_scopes=template == WORKERS)
    return unchanged(request, page.version) or render(request, template, {"page": page})


def _scope_response(request: HttpRequest, scope: str, act: ActionContext) -> HttpResponse:
    row = scope_row(scope)
    if row is None:
        raise Http404(f"unknown scope {scope!r}")
    return render(request, f"{WORKERS}#scope-row", {"scope": row, "act": act})


@action(permission="inbox.pause_scope", region="scope-row", needs_reason=True)
def pause_scope(request: HttpRequest, scope: str, *, act: ActionContext):
    act.perform(
        lambda: scopes.pause_scope(scope, actor=act.actor, reason=act.reason),
        done=f"Scope {scope} paused: executors finish what they hold and claim nothing new.",
    )
    return _scope_response(request, scope, act)


@action(permission="inbox.pause_scope", region="scope-row")
def resume_scope(request: HttpRequest, scope: str, *, act: ActionContext):
    act.perform(
        lambda: scopes.resume_scope(scope, actor=act.actor, reason=act.reason),
        done=f"Scope {scope} resumed: executors claim again.",
    )
    return _scope_response(request, scope, act)
