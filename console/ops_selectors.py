"""Read queries behind the operator pages: reconcile, approvals, runs and workers.

Nothing here writes. Each page is a fixed number of queries however many rows it shows: the
audit chains, heartbeats and vault probes of a page are fetched in batches, never per row.
Callers: ``console.ops_views`` only.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count

from audit.models import AuditEvent
from inbox import vault
from inbox.errors import InboxError
from inbox.jobtypes import scopes as job_scopes
from inbox.models import Approval, Job, JobState, ScopePause, Worker, WorkerStatus
from inbox.transitions import db_now
from inbox.workers import is_alive, worker_rows

# The most cases one page shows; the rest wait their turn (the page says how many).
QUEUE_LIMIT = 50
# Audit events shown per case (the newest; the job page has the whole trail).
CHAIN_LIMIT = 12


def dom_id(prefix: str, key: str) -> str:
    """A stable, HTML-safe element id for any job id or store name."""
    return f"{prefix}-{hashlib.sha1(key.encode('utf-8')).hexdigest()[:12]}"


# --- reconcile --------------------------------------------------------------------------------


@dataclass
class UnknownCase:
    """One OUTCOME_UNKNOWN job with everything an operator needs to decide it."""

    job: Job
    dom_id: str
    evidence: Any = None  # inbox.reconcile.Evidence
    probe_error: str = ""
    worker: Worker | None = None
    worker_alive: bool | None = None
    chain: list[AuditEvent] = field(default_factory=list)
    fresh_job: Job | None = None

    @property
    def is_open(self) -> bool:
        return self.job.state == JobState.OUTCOME_UNKNOWN

    @property
    def diagnosis(self) -> str:
        """What the evidence says, in the operator's words (DESIGN §1.7)."""
        ev = self.evidence
        if ev is None:
            return "no evidence: the probe failed"
        if not ev.present:
            return "absent: the delete happened (confirm deleted)"
        if ev.matches:
            return "present with the expected hash: the delete did not happen (not applied)"
        return "present with another hash: conflict, someone changed it (only an operator decides)"

    @property
    def verdict(self) -> str:
        if not self.is_open:
            return "decided"
        ev = self.evidence
        if ev is None:
            return "unknown"
        if not ev.present:
            return "absent"
        return "untouched" if ev.matches else "conflict"


def _probe(job: Job, now: dt.datetime) -> tuple[Any, str]:
    """The reconcile service's evidence for ``job``, stamped with the page's one clock read.

    Same reading as ``inbox.reconcile.probe_job`` (which also asks the database for the time:
    one query per job) so a page of fifty cases stays a fixed number of queries.
    """
    from inbox.reconcile import Evidence

    payload = job.payload or {}
    expected = payload.get("expected_provenance_hash") or payload.get("provenance_hash")
    try:
        found = vault.probe(job.vault_path)
    except (InboxError, OSError) as exc:
        return None, str(exc)
    evidence = Evidence(
        vault_path=job.vault_path,
        present=found.present,
        current_hash=found.current_hash,
        expected_hash=expected,
        matches=found.present and found.current_hash == expected,
        probed_at=now,
    )
    return evidence, ""


def _chains(job_ids: list[str], limit: int = CHAIN_LIMIT) -> dict[str, list[AuditEvent]]:
    """The newest ``limit`` events of each job, oldest first, in one query."""
    if not job_ids:
        return {}
    from django.db.models import F, Window
    from django.db.models.functions import RowNumber

    rows = (
        AuditEvent.objects.filter(job_id__in=job_ids)
        .annotate(
            rank=Window(RowNumber(), partition_by=[F("job_id")], order_by=F("event_id").desc())
        )
        .filter(rank__lte=limit)
        .order_by("job_id", "event_id")
    )
    chains: dict[str, list[AuditEvent]] = defaultdict(list)
    for event in rows:
        chains[event.job_id].append(event)
    return chains


def _cases(jobs: list[Job], now: dt.datetime) -> list[UnknownCase]:
    ids = [job.job_id for job in jobs]
    chains = _chains(ids)
    workers = {
        w.worker_id: w
        for w in Worker.objects.filter(worker_id__in={j.worker_id for j in jobs if j.worker_id})
    }
    fresh = {j.supersedes: j for j in Job.objects.filter(supersedes__in=ids).order_by("created_at")}
    cases = []
    for job in jobs:
        evidence, error = _probe(job, now) if job.state == JobState.OUTCOME_UNKNOWN else (None, "")
        worker = workers.get(job.worker_id)
        cases.append(
            UnknownCase(
                job=job,
                dom_id=dom_id("case", job.job_id),
                evidence=evidence,
                probe_error=error,
                worker=worker,
                worker_alive=is_alive(worker, now) if worker else None,
                chain=chains.get(job.job_id, []),
                fresh_job=fresh.get(job.job_id),
            )
        )
    return cases


@dataclass
class AutoPlan:
    """What "reconcile all unambiguous" would do right now (the preview)."""

    confirm: list[Job] = field(default_factory=list)
    diagnose: list[tuple[Job, str]] = field(default_factory=list)
    unchanged: int = 0
    skipped: int = 0


def auto_plan(cases: list[UnknownCase]) -> AutoPlan:
    """The auto-reconciler's rule (``inbox.reconcile``) applied to the cases on the page: the
    preview shows exactly what the bulk button will do, and it touches only these cases."""
    from inbox import reconcile as svc

    plan = AutoPlan()
    for case in cases:
        ev = case.evidence
        if not case.is_open or case.job.job_type not in svc.PROBED_TYPES or ev is None:
            plan.skipped += 1
        elif not ev.present:
            plan.confirm.append(case.job)
        else:
            code = svc.DIAG_NOT_APPLIED if ev.matches else svc.DIAG_CONFLICT
            if case.job.result_code == code:
                plan.unchanged += 1
            else:
                plan.diagnose.append((case.job, code))
    return plan


@dataclass
class ReconcileQueue:
    cases: list[UnknownCase]
    total: int
    plan: AutoPlan
    now: dt.datetime

    @property
    def hidden(self) -> int:
        return max(self.total - len(self.cases), 0)


def reconcile_queue(*, limit: int = QUEUE_LIMIT) -> ReconcileQueue:
    """The oldest OUTCOME_UNKNOWN jobs with their evidence, and the auto-reconcile preview."""
    now = db_now()
    qs = Job.objects.unknown().order_by("updated_at", "job_id")
    jobs = list(qs[:limit])
    total = len(jobs) if len(jobs) < limit else qs.count()
    cases = _cases(jobs, now)
    return ReconcileQueue(cases=cases, total=total, plan=auto_plan(cases), now=now)


def unknown_case(job_id: str) -> UnknownCase | None:
    """One case, whatever its state now (after an action it shows the outcome)."""
    job = Job.objects.filter(job_id=job_id).first()
    if job is None:
        return None
    return _cases([job], db_now())[0]


# --- approvals --------------------------------------------------------------------------------


@dataclass
class PendingApproval:
    """A DELETE awaiting its four-eyes decision, with the object's current state."""

    job: Job
    dom_id: str
    present: bool | None = None
    current_hash: str | None = None
    probe_error: str = ""
    decision: Approval | None = None
    # The viewing user asked for this delete: four eyes hide their buttons.
    own: bool = False

    @property
    def expected_hash(self) -> str:
        return str(self.job.payload.get("expected_provenance_hash", ""))

    @property
    def matches(self) -> bool:
        return bool(self.present) and self.current_hash == self.expected_hash

    @property
    def object_state(self) -> str:
        if self.probe_error:
            return "unknown"
        if not self.present:
            return "absent"
        return "as expected" if self.matches else "changed"


def _pending(job: Job, username: str) -> PendingApproval:
    item = PendingApproval(
        job=job, dom_id=dom_id("approval", job.job_id), own=job.requested_by == username
    )
    try:
        probe = vault.probe(job.vault_path)
    except (InboxError, OSError) as exc:
        item.probe_error = str(exc)
    else:
        item.present, item.current_hash = probe.present, probe.current_hash
    return item


@dataclass
class ApprovalsPage:
    pending: list[PendingApproval]
    total: int
    recent: list[Approval]


def approvals_page(*, username: str, limit: int = QUEUE_LIMIT) -> ApprovalsPage:
    """Pending DELETE approvals (oldest first) and the latest decisions."""
    qs = (
        Job.objects.awaiting_approval()
        .filter(job_type__in=_approval_types())
        .order_by("created_at", "job_id")
    )
    jobs = list(qs[:limit])
    total = len(jobs) if len(jobs) < limit else qs.count()
    recent = list(Approval.objects.order_by("-decided_at")[:10])
    return ApprovalsPage(
        pending=[_pending(job, username) for job in jobs], total=total, recent=recent
    )


def approval_item(job_id: str, *, username: str) -> PendingApproval | None:
    """One approval row after an action: the job as it is now, with its decision if any."""
    job = Job.objects.filter(job_id=job_id).first()
    if job is None:
        return None
    item = _pending(job, username)
    item.decision = Approval.objects.filter(job_id=job_id).order_by("-decided_at").first()
    return item


def _approval_types() -> list[str]:
    from inbox.jobtypes import registry

    return [name for name, spec in registry().items() if spec.needs_approval]


# --- workers and scopes -----------------------------------------------------------------------


@dataclass
class ScopeRow:
    name: str
    dom_id: str
    pause: ScopePause | None
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


def scope_rows(workers: list[Worker] | None = None) -> list[ScopeRow]:
    """Every executor scope with its pause, READY/held counts and live executors."""
    names = job_scopes()
    pauses = {p.scope: p for p in ScopePause.objects.filter(scope__in=names)}
    counts: dict[tuple[str, str], int] = {}
    for row in (
        Job.objects.filter(
            scope__in=names,
            state__in=[JobState.READY, JobState.CLAIMED, JobState.EXECUTING],
        )
        .order_by()
        .values("scope", "state")
        .annotate(n=Count("job_id"))
    ):
        counts[(row["scope"], row["state"])] = row["n"]
    workers = worker_rows() if workers is None else workers
    rows = []
    for name in names:
        pause = pauses.get(name)
        rows.append(
            ScopeRow(
                name=name,
                dom_id=dom_id("scope", name),
                pause=pause if pause is not None and pause.paused else None,
                ready=counts.get((name, JobState.READY), 0),
                held=counts.get((name, JobState.CLAIMED), 0)
                + counts.get((name, JobState.EXECUTING), 0),
                executors_alive=sum(
                    1 for w in workers if w.alive and w.kind == "executor" and w.scope == name
                ),
            )
        )
    return rows


def workers_page() -> WorkersPage:
    now = db_now()
    workers = worker_rows(now)
    alive = sum(1 for w in workers if w.alive)
    stopped = sum(1 for w in workers if not w.alive and w.status == WorkerStatus.STOPPED)
    return WorkersPage(
        workers=workers,
        scopes=scope_rows(workers),
        alive=alive,
        dead=len(workers) - alive - stopped,
        stopped=stopped,
        now=now,
    )


def scope_row(name: str) -> ScopeRow | None:
    return next((row for row in scope_rows() if row.name == name), None)


# --- runs -------------------------------------------------------------------------------------


@dataclass
class StoreCard:
    """One store on the runs page: h3's overview plus what the page needs to render it."""

    overview: Any  # runs.selectors.StoreOverview
    dom_id: str
    takeovers: list[Any]
    now: dt.datetime

    @property
    def store(self) -> str:
        return self.overview.store

    @property
    def current(self):
        return self.overview.current

    @property
    def live_id(self) -> str:
        return dom_id("live", self.overview.store)

    @property
    def finished_groups(self) -> int:
        counts = self.overview.group_counts
        return counts.get("done", 0) + counts.get("deferred", 0)

    @property
    def closable(self) -> bool:
        """Only a row stored ``active`` can be closed (lapsed or not)."""
        current = self.overview.current
        return current is not None and current.run.status == "active"


def store_cards(*, store: str | None = None) -> list[StoreCard]:
    from runs.selectors import store_overview

    now = db_now()
    cards = []
    for overview in store_overview(now, store=store):
        takeovers = [
            view
            for view in overview.history
            if view.run.status in ("taken_over", "abandoned", "expired")
        ]
        cards.append(
            StoreCard(
                overview=overview,
                dom_id=dom_id("store", overview.store),
                takeovers=takeovers,
                now=now,
            )
        )
    return cards
