"""Read-only views of runs for the console, the ``runs`` command and admin.

Nothing here writes: a lapsed ``active`` row is reported as effectively ``expired`` and stays
``active`` in the table until the next plan. Callers: console views, management commands.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Count, F, QuerySet, Window
from django.db.models.functions import RowNumber

from core.clock import db_now
from core.errors import ConfigurationError
from inbox.models import Worker, WorkerStatus
from inbox.workers import is_alive
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

    Four queries however many stores: recent runs per store (a window function; one store's
    are a plain range scan), their active rows, their owners' heartbeats and the group counts of
    the current runs.
    """
    now = db_now(at)
    recent: QuerySet[Run]
    if store is None:
        recent = Run.objects.annotate(
            rank=Window(RowNumber(), partition_by=[F("store")], order_by=F("started_at").desc())
        ).filter(rank__lte=max(history, 1))
        recent = recent.order_by("store", "-started_at")
        active = Run.objects.filter(status=RunStatus.ACTIVE)
    else:
        recent = Run.objects.filter(store=store).order_by("-started_at")[: max(history, 1)]
        active = Run.objects.filter(status=RunStatus.ACTIVE, store=store)
    by_store: dict[str, list[Run]] = {}
    for run in recent:
        by_store.setdefault(run.store, []).append(run)
    active_by_store: dict[str, list[Run]] = {}
    for run in with_owner_heartbeat(active.order_by("store", "run_id")):
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
    """Runs whose status is active, lapsed ones included (their lease bar shows it), each with
    its owner's heartbeat (``with_owner_heartbeat``) for ``stuck_reasons``."""
    qs = Run.objects.filter(status=RunStatus.ACTIVE)
    return with_owner_heartbeat(qs.order_by("store")[:limit])


# --- stuck runs ------------------------------------------------------------------------------

# No progress for longer than this (while the lease still runs) makes a run stuck.
DEFAULT_STUCK_AFTER_SECONDS = 300


def stuck_after_seconds() -> int:
    """``settings.RUNS_STUCK_AFTER_SECONDS`` (default 300), refused unless a positive integer."""
    value = getattr(settings, "RUNS_STUCK_AFTER_SECONDS", DEFAULT_STUCK_AFTER_SECONDS)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(
            f"RUNS_STUCK_AFTER_SECONDS must be a positive number of seconds, got {value!r}"
        )
    return value


@dataclass(frozen=True)
class Stuck:
    """Why an effectively active run is stuck: derived when read, never stored."""

    # "owner_dead" (its heartbeat row is dead, stopped or missing) or "no_progress".
    kind: str
    # Since when: the moment the owner's heartbeat died, or the run's last progress.
    since: dt.datetime | None
    # The operator's words, without the time ("owner w-1 is dead (no heartbeat)").
    reason: str
    # Seconds the condition has lasted at ``now`` (0 when unknown).
    for_seconds: float = 0.0


# The owner's heartbeat columns ``with_owner_heartbeat`` puts on each run.
_OWNER_FIELDS = {
    "owner_last_seen_at": "last_seen_at",
    "owner_status": "status",
    "owner_poll_seconds": "poll_seconds",
    "owner_lease_seconds": "lease_seconds",
}


def with_owner_heartbeat(runs: Iterable[Run]) -> list[Run]:
    """The runs, each with its owner's heartbeat columns (``owner_status`` None: no row), read
    in one query by the worker table's primary key, so ``stuck_reasons`` needs no query of its
    own. Two plain queries cost less than one with four correlated subqueries: building those
    took 2.9 ms of CPU per call, these 1.1 ms (the runs page's live block polls it)."""
    runs = list(runs)
    ids = {run.worker_id for run in runs}
    rows = Worker.objects.filter(worker_id__in=ids).values("worker_id", *_OWNER_FIELDS.values())
    owners = {row["worker_id"]: row for row in rows} if ids else {}
    for run in runs:
        row = owners.get(run.worker_id, {})
        for name, column in _OWNER_FIELDS.items():
            setattr(run, name, row.get(column))
    return runs


def _owners(runs: list[Run]) -> dict[str, Worker]:
    """The owners' heartbeat rows: from ``with_owner_heartbeat``'s columns when every run has
    them (no query), else one query."""
    if all(hasattr(run, "owner_status") for run in runs):
        owners = {}
        for run in runs:
            if run.owner_status is None:
                continue  # no heartbeat row
            owners[run.worker_id] = Worker(
                worker_id=run.worker_id,
                last_seen_at=run.owner_last_seen_at,
                status=run.owner_status,
                poll_seconds=run.owner_poll_seconds,
                lease_seconds=run.owner_lease_seconds,
            )
        return owners
    ids = {run.worker_id for run in runs}
    return {worker.worker_id: worker for worker in Worker.objects.filter(worker_id__in=ids)}


def stuck_reasons(runs: Iterable[Run], now: dt.datetime) -> dict[str, Stuck]:
    """{run_id: Stuck} for the effectively active runs among ``runs`` that are stuck.

    Stuck: the run holds its store (``status = active`` and its lease runs) but its
    owner's heartbeat is dead — the consolidator's heartbeat row is the one whose ``worker_id``
    is the run's — or it has made no progress (``renewed_at``) for longer than
    ``RUNS_STUCK_AFTER_SECONDS``. At most one query (none for runs read with
    ``with_owner_heartbeat``), whatever the count.
    A dead owner wins over slow progress: it is the stronger reason to close the run.
    """
    live = [run for run in runs if run.status == RunStatus.ACTIVE and run.expires_at >= now]
    if not live:
        return {}
    threshold = stuck_after_seconds()
    owners = _owners(live)
    found: dict[str, Stuck] = {}
    for run in live:
        owner = owners.get(run.worker_id)
        if owner is None:
            found[run.run_id] = Stuck("owner_dead", None, "its owner has no heartbeat row")
        elif not is_alive(owner, now):
            # A stopped owner said goodbye at last_seen_at; a silent one died when its
            # heartbeat deadline passed.
            if owner.status == WorkerStatus.STOPPED:
                since, what = owner.last_seen_at, "its owner stopped"
            else:
                since, what = owner.last_seen_at + owner.dead_after(), "its owner is dead"
            found[run.run_id] = Stuck(
                "owner_dead", since, what, max((now - since).total_seconds(), 0.0)
            )
        else:
            idle = (now - run.renewed_at).total_seconds()
            if idle > threshold:
                found[run.run_id] = Stuck("no_progress", run.renewed_at, "no progress", idle)
    return found


def stuck_runs(at: dt.datetime | None = None, *, limit: int = 100) -> list[tuple[Run, Stuck]]:
    """Every stuck run (at most one per store holds it), store order: the dashboard's tile."""
    now = db_now(at)
    live = Run.objects.filter(status=RunStatus.ACTIVE, expires_at__gte=now)
    runs = with_owner_heartbeat(live.order_by("store")[:limit])
    reasons = stuck_reasons(runs, now)
    return [(run, reasons[run.run_id]) for run in runs if run.run_id in reasons]
