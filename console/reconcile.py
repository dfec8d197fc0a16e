"""The reconcile page: OUTCOME_UNKNOWN jobs with their evidence, one decision per case, and
"reconcile all unambiguous" with its preview.

The page is a fixed number of queries however many cases it shows: audit chains, heartbeats
and vault probes are fetched in batches, never per case. Decisions go through
``inbox.reconcile``; nothing here assigns a state.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from audit.models import AuditEvent
from console.htmx import dom_id, region_template
from console.policy import ActionContext, action, page
from console.regions import row_response
from core.clock import db_now
from core.paging import COUNT_CAP, capped_count
from inbox import reconcile as svc
from inbox.models import Job, JobState, Worker
from inbox.workers import is_alive

RECONCILE = "console/reconcile.html"

# The most cases one page shows; the rest wait their turn (the page says how many).
QUEUE_LIMIT = 50
# Audit events shown per case (the newest; the job page has the whole trail).
CHAIN_LIMIT = 12


# --- read model -------------------------------------------------------------------------------


@dataclass
class UnknownCase:
    """One OUTCOME_UNKNOWN job with everything an operator needs to decide it."""

    job: Job
    dom_id: str
    evidence: svc.Evidence | None = None
    probe_error: str = ""
    worker: Worker | None = None
    worker_alive: bool | None = None
    chain: list[AuditEvent] = field(default_factory=list)
    fresh_job: Job | None = None
    # What the auto-reconcile rule would do with this case now (``inbox.reconcile.decide``).
    action: str = svc.SKIP
    # What the former holder reported after its lease lapsed: shown, never acted on.
    holder_report: svc.HolderReport | None = None

    @property
    def is_open(self) -> bool:
        return self.job.state == JobState.OUTCOME_UNKNOWN

    # Cached: the template asks each of these several times per case (fixed once built).
    @cached_property
    def probed(self) -> bool:
        """False for a type no vault probe can decide (a non-idempotent task): a person does."""
        return svc.is_probed(self.job)

    @cached_property
    def diagnosis(self) -> str:
        """What the vault evidence says, in the operator's words: absent means the delete
        happened; present with the expected hash, that it did not; present with another
        hash, that someone changed the object, which only an operator may decide."""
        ev = self.evidence
        if not self.probed:
            return "no vault probe: its effect lies outside the vault; an operator decides"
        if ev is None:
            return "no evidence: the probe failed"
        if not ev.present:
            return "absent: the delete happened (confirm deleted)"
        if ev.matches:
            return "present with the expected hash: the delete did not happen (not applied)"
        return "present with another hash: conflict, someone changed it (only an operator decides)"

    @cached_property
    def verdict(self) -> str:
        if not self.is_open:
            return "decided"
        if not self.probed:
            return "operator"
        ev = self.evidence
        if ev is None:
            return "unknown"
        if not ev.present:
            return "absent"
        return "untouched" if ev.matches else "conflict"


def _chains(job_ids: list[str], limit: int = CHAIN_LIMIT) -> dict[str, list[AuditEvent]]:
    """The newest ``limit`` events of each job, oldest first, in one query."""
    if not job_ids:
        return {}
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
    reports = svc.holder_reports(jobs)
    cases = []
    for assessment in svc.assess(jobs, now=now):
        job = assessment.job
        worker = workers.get(job.worker_id)
        cases.append(
            UnknownCase(
                job=job,
                dom_id=dom_id("case", job.job_id),
                evidence=assessment.evidence,
                probe_error=assessment.error,
                action=assessment.action,
                worker=worker,
                worker_alive=is_alive(worker, now) if worker else None,
                chain=chains.get(job.job_id, []),
                fresh_job=fresh.get(job.job_id),
                holder_report=reports.get(job.job_id),
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
    """The auto-reconciler's rule (``inbox.reconcile.decide``, already applied to each case) on
    the cases on the page: the preview shows exactly what the bulk button will do, and it
    touches only these cases."""
    plan = AutoPlan()
    for case in cases:
        if case.action == svc.CONFIRM:
            plan.confirm.append(case.job)
        elif case.action in (svc.DIAGNOSE_NOT_APPLIED, svc.DIAGNOSE_CONFLICT):
            assert case.evidence is not None
            code = svc.DIAG_NOT_APPLIED if case.evidence.matches else svc.DIAG_CONFLICT
            plan.diagnose.append((case.job, code))
        elif case.action == svc.UNCHANGED:
            plan.unchanged += 1
        else:
            plan.skipped += 1
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

    @property
    def hidden_label(self) -> str:
        # Past the cap the total is a lower bound, and so is what waits behind the page.
        return f"{self.hidden:,}+" if self.total > COUNT_CAP else f"{self.hidden:,}"


def reconcile_queue(*, limit: int = QUEUE_LIMIT) -> ReconcileQueue:
    """The oldest OUTCOME_UNKNOWN jobs with their evidence, and the auto-reconcile preview."""
    now = db_now()
    qs = Job.objects.unknown().order_by("updated_at", "job_id")
    jobs = list(qs[:limit])
    total = len(jobs) if len(jobs) < limit else capped_count(qs)
    cases = _cases(jobs, now)
    return ReconcileQueue(cases=cases, total=total, plan=auto_plan(cases), now=now)


def unknown_case(job_id: str) -> UnknownCase | None:
    """One case, whatever its state now (after an action it shows the outcome)."""
    job = Job.objects.filter(job_id=job_id).first()
    if job is None:
        return None
    return _cases([job], db_now())[0]


# --- views ------------------------------------------------------------------------------------


@page(permission="inbox.view_job")
def reconcile(request: HttpRequest) -> HttpResponse:
    template = region_template(
        request,
        RECONCILE,
        ("reconcile-queue", "reconcile-auto", "queue-count"),
        default="reconcile-queue",
    )
    return render(request, template, {"queue": reconcile_queue()})


def _case_response(request: HttpRequest, job_id: str, act: ActionContext) -> HttpResponse:
    case = unknown_case(job_id)
    if case is None:
        raise Http404(f"job {job_id!r} does not exist")
    # A decision changes the bulk preview above the queue: it reloads itself on the event.
    return row_response(
        request,
        f"{RECONCILE}#unknown-case",
        {"case": case},
        act=act,
        changed_event="reconcile-changed",
    )


def _decided(
    request: HttpRequest, job_id: str, act: ActionContext, decide: Callable[[], object], done: str
) -> HttpResponse:
    """Carry out one decision on a case and answer with the case as it is now."""
    act.perform(decide, done=done)
    return _case_response(request, job_id, act)


def _plain_decision(
    name: str, decide: Callable[..., object], done: str
) -> Callable[..., HttpResponse]:
    """A decision that takes nothing but the operator and the reason, as a view."""

    @action(permission="inbox.reconcile_job", region="unknown-case", needs_reason=True, name=name)
    def view(request: HttpRequest, job_id: str, *, act: ActionContext) -> HttpResponse:
        return _decided(
            request, job_id, act, lambda: decide(job_id, actor=act.actor, reason=act.reason), done
        )

    return view


reconcile_confirm_deleted = _plain_decision(
    "reconcile_confirm_deleted",
    svc.confirm_deleted,
    "Confirmed deleted: the job is RECONCILED (CONFIRMED_DELETED).",
)
reconcile_annotate = _plain_decision(
    "reconcile_annotate",
    svc.annotate,
    "Annotated: the job stays OUTCOME_UNKNOWN with your note in its trail.",
)


@action(permission="inbox.reconcile_job", region="unknown-case", needs_reason=True)
def reconcile_not_applied(request: HttpRequest, job_id: str, *, act: ActionContext):
    fresh = request.POST.get("fresh_delete") == "1"
    return _decided(
        request,
        job_id,
        act,
        lambda: svc.not_applied(
            job_id, actor=act.actor, reason=act.reason, request_fresh_delete=fresh
        ),
        "Not applied: the job is RECONCILED (NOT_APPLIED)"
        + ("; a fresh DELETE was requested and awaits approval." if fresh else "."),
    )


# An operator's decision on a case no probe can decide: the POSTed outcome → applied?
UNPROBED_OUTCOMES = {"applied": True, "not_applied": False}


@action(permission="inbox.reconcile_job", region="unknown-case", needs_reason=True)
def reconcile_decide(request: HttpRequest, job_id: str, *, act: ActionContext):
    """A person decides a case no vault probe can (a non-idempotent task): it ran, or not."""
    outcome = request.POST.get("outcome", "")
    if outcome not in UNPROBED_OUTCOMES:
        act.refuse("Choose whether the task ran (applied) or did not (not applied).", status=400)
    else:
        applied = UNPROBED_OUTCOMES[outcome]
        act.perform(
            lambda: svc.decide_unprobed(
                job_id, actor=act.actor, reason=act.reason, applied=applied
            ),
            done=f"Decided: the job is RECONCILED ({svc.APPLIED if applied else svc.NOT_APPLIED}).",
        )
    return _case_response(request, job_id, act)


@dataclass
class AutoOutcome:
    confirmed: list[str] = field(default_factory=list)
    annotated: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = (
            f"Reconciled {len(self.confirmed)} as CONFIRMED_DELETED, annotated "
            f"{len(self.annotated)} (they stay OUTCOME_UNKNOWN)"
        )
        if self.refused:
            text += f"; {len(self.refused)} changed meanwhile and were left alone"
        return text + "."


def _reconcile_unambiguous(*, actor: str, reason: str) -> AutoOutcome:
    """The auto-reconciler's rule on the cases the page shows, as this operator, with a reason.

    The cases are probed afresh here (``reconcile.assess``) and decided in one set-based call
    (``reconcile.apply``): a case that changed since the preview is refused or decided on the
    new evidence, never on stale data.
    """
    jobs = [case.job for case in reconcile_queue().cases if case.is_open]
    report = svc.apply(svc.assess(jobs), actor=actor, reason=reason)
    return AutoOutcome(
        confirmed=report.confirmed,
        annotated=report.not_applied + report.conflict,
        refused=[f"{job_id}: {why}" for job_id, why in report.refused],
    )


@action(permission="inbox.reconcile_job", region="reconcile-queue", needs_reason=True)
def reconcile_auto(request: HttpRequest, *, act: ActionContext):
    outcome = act.perform(
        lambda: _reconcile_unambiguous(actor=act.actor, reason=act.reason),
        done="Reconciled every unambiguous case.",
    )
    if outcome is not None:
        act.message = act.outcome = outcome.summary()
    context = {"queue": reconcile_queue(), "act": act}
    return render(request, f"{RECONCILE}#reconcile-queue", context)
