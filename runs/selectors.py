"""Read-only views of runs for the console, the ``runs`` command and admin (DESIGN §3).

Nothing here writes: a lapsed ``active`` row is reported as effectively ``expired`` and stays
``active`` in the table until the next plan. Callers: console views, management commands.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber

from core.clock import db_now
from runs.models import Group, GroupStatus, Run, RunStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunView:
    """One run as an operator sees it at ``now``."""

    run: Run
    effective_status: str
    seconds_left: float

    @property
    def lapsed(self) -> bool:
        """Stored ``active`` but past its lease (binds nobody; written ``expired`` on next plan)."""
        return self.run.status == RunStatus.ACTIVE and self.effective_status == RunStatus.EXPIRED


@dataclass
class StoreOverview:
    """Per store: its current run, that run's group progress and recent history."""

    store: str
    # The store's active row if it has one, else its most recent run.
    current: RunView | None
    # Group counts of ``current`` by status (pending / served / done / deferred).
    group_counts: dict[str, int] = field(default_factory=dict)
    # Most recent runs first, ``current`` included (closing status shows takeovers).
    history: list[RunView] = field(default_factory=list)
    # Set when the store has more than one active row (a bug); ``current`` is then None.
    error: str = ""

    @property
    def effective_status(self) -> str:
        return self.current.effective_status if self.current else ""

    @property
    def seconds_left(self) -> float:
        return self.current.seconds_left if self.current else 0.0

    @property
    def groups_total(self) -> int:
        return sum(self.group_counts.values())


def run_view(run: Run, now: dt.datetime) -> RunView:
    if run.status != RunStatus.ACTIVE:
        return RunView(run, run.status, 0.0)
    left = (run.expires_at - now).total_seconds()
    if left < 0:
        return RunView(run, RunStatus.EXPIRED, 0.0)
    return RunView(run, RunStatus.ACTIVE, left)


def group_counts_by_run(run_ids: list[str]) -> dict[str, dict[str, int]]:
    """{run_id: {status: n}} for many runs in one aggregate query."""
    counts = {run_id: {s.value: 0 for s in GroupStatus} for run_id in run_ids}
    rows = (
        Group.objects.filter(run_id__in=run_ids)
        .order_by()
        .values("run_id", "status")
        .annotate(n=Count("id"))
    )
    for row in rows:
        counts[row["run_id"]][row["status"]] = row["n"]
    return counts


def store_overview(
    at: dt.datetime | None = None, *, history: int = 10, store: str | None = None
) -> list[StoreOverview]:
    """Every store (or one) with its current run, effective status, lease and progress.

    Three queries however many stores: recent runs per store (a window function), their
    active rows, and the group counts of the current runs.
    """
    now = db_now(at)
    recent = Run.objects.annotate(
        rank=Window(RowNumber(), partition_by=[F("store")], order_by=F("started_at").desc())
    ).filter(rank__lte=max(history, 1))
    active = Run.objects.filter(status=RunStatus.ACTIVE)
    if store is not None:
        recent = recent.filter(store=store)
        active = active.filter(store=store)
    by_store: dict[str, list[Run]] = {}
    for run in recent.order_by("store", "-started_at"):
        by_store.setdefault(run.store, []).append(run)
    active_by_store: dict[str, list[Run]] = {}
    for run in active.order_by("store", "run_id"):
        active_by_store.setdefault(run.store, []).append(run)
        by_store.setdefault(run.store, [])

    overviews: list[StoreOverview] = []
    for name in sorted(by_store):
        runs = by_store[name]
        actives = active_by_store.get(name, [])
        item = StoreOverview(store=name, current=None, history=[run_view(r, now) for r in runs])
        if len(actives) > 1:
            # Never resolved by picking one: show the conflict loudly instead.
            ids = ", ".join(r.run_id for r in actives)
            item.error = f"{len(actives)} active runs ({ids}): at most one is allowed"
            log.critical("store %s: %s", name, item.error)
        elif actives:
            item.current = run_view(actives[0], now)
        elif runs:
            item.current = run_view(runs[0], now)
        overviews.append(item)
    current_ids = [o.current.run.run_id for o in overviews if o.current]
    counts = group_counts_by_run(current_ids)
    for item in overviews:
        if item.current:
            item.group_counts = counts[item.current.run.run_id]
    return overviews


def list_runs(
    *, store: str | None = None, limit: int = 50, at: dt.datetime | None = None
) -> list[RunView]:
    """Most recent runs first, each with its effective status and seconds left."""
    now = db_now(at)
    qs = Run.objects.order_by("-started_at", "run_id")
    if store:
        qs = qs.filter(store=store)
    return [run_view(run, now) for run in qs[:limit]]


def active_runs(*, limit: int = 20) -> list[Run]:
    """Runs whose status is active, lapsed ones included (their lease bar shows it)."""
    return list(Run.objects.filter(status=RunStatus.ACTIVE).order_by("store")[:limit])
