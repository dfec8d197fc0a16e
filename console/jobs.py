"""The jobs pages: the list, a job's detail and lease countdown, and the job actions (retry one;
preview, retry or reconcile many).

Views parse input, call one selector or service, and render; they never assign job state.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django_htmx.http import trigger_client_event
from django_tables2 import RequestConfig
from django_tables2.paginators import LazyPaginator

from console.bulk import BulkOutcome
from console.filters import JobFilter
from console.htmx import region_template
from console.policy import ActionContext, action, page
from console.tables import JobTable, label_page
from core.clock import db_now
from inbox import reconcile, transitions
from inbox.jobtypes import IMMUTABLE_COLUMNS, IMMUTABLE_PAYLOAD_FIELDS
from inbox.models import HELD_STATES, Job, JobState
from inbox.selectors import allowed_actions, attempts_from_trail, expiry_behaviour, job_trail

LIST = "console/jobs.html"
DETAIL = "console/jobs-detail.html"
LEASE = "console/jobs-lease.html"
BULK = "console/jobs-bulk.html"

PER_PAGE = 50
# The most rows one bulk action may touch.
BULK_LIMIT_MAX = 500
# Events drawn in red on the trail: refusals and rejected writes.
REFUSAL_EVENTS = {"REJECTED", "STALE_WRITE_REJECTED", "FINGERPRINT_DRIFT", "FAILED"}
# Payload keys hidden from users without inbox.view_payload: a SAVE's content, a task's
# arguments (either may hold personal data).
REDACTED_KEYS = ("content", "args", "kwargs")
FILTER_FIELDS = tuple(JobFilter.base_filters)
# Always visible; the rest sit under "More filters" (opened when one of them is set).
MAIN_FILTERS = ("q", "state", "job_type")


# --- jobs list --------------------------------------------------------------------------------


@page(permission="inbox.view_job")
def job_list(request: HttpRequest) -> HttpResponse:
    """Filter, search, sort and page jobs; HTMX swaps only the table."""
    # The list never shows the payload; a SAVE's content can be megabytes per row.
    jobs = Job.objects.defer("payload")
    job_filter = JobFilter(request.GET or None, queryset=jobs)
    qs = job_filter.qs if job_filter.is_bound else jobs
    # Lease filters come ordered by lease end (see JobFilter.filter_lease) unless a sort is asked.
    default_sort = None if request.GET.get("lease") else "-created_at"
    table = JobTable(qs, order_by=request.GET.get("sort") or default_sort)
    RequestConfig(
        request, paginate={"per_page": PER_PAGE, "paginator_class": LazyPaginator}
    ).configure(table)
    label_page(table, qs)
    context = {
        "filter": job_filter,
        "table": table,
        "filter_snapshot": _filter_snapshot(request.GET),
        "sort": request.GET.get("sort", ""),
        "more_filters": any(
            request.GET.get(name) for name in FILTER_FIELDS if name not in MAIN_FILTERS
        ),
        "bulk_limit": BULK_LIMIT_MAX,
        # Lease cells count down from the database clock, like the detail page.
        "now": db_now(),
        "held_states": HELD_STATES,
        "can_retry": request.user.has_perm("inbox.retry_job"),
        "can_reconcile": request.user.has_perm("inbox.reconcile_job"),
    }
    template = region_template(request, LIST, ("job-table",), default="job-table")
    return render(request, template, context)


def _filter_snapshot(params: QueryDict) -> list[tuple[str, str]]:
    """The filter values a bulk "all matching" action re-applies (only known filter names)."""
    return [(name, params.get(name, "")) for name in FILTER_FIELDS if params.get(name)]


# --- job detail -------------------------------------------------------------------------------


def _load_job(job_id: str) -> Job:
    job = Job.objects.filter(job_id=job_id).first()
    if job is None:
        raise Http404(f"no job {job_id!r}")
    return job


def _redacted_payload(payload: dict[str, Any], *, can_view: bool) -> str:
    shown = dict(payload or {})
    if not can_view:
        for key in REDACTED_KEYS:
            if key in shown:
                shown[key] = "[redacted: needs the view_payload permission]"
    return json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False)


def _fingerprint_status(job: Job) -> tuple[str, str]:
    if not job.fingerprint:
        return ("not sealed yet (sealed when the job becomes READY)", "muted")
    if transitions.fingerprint_ok(job):
        return ("sealed, intact", "ok")
    return ("DRIFT: immutable fields changed since sealing; transitions are refused", "bad")


def _immutable_fields(job: Job) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = [(name, getattr(job, name)) for name in IMMUTABLE_COLUMNS]
    payload = job.payload or {}
    rows += [(name, payload[name]) for name in IMMUTABLE_PAYLOAD_FIELDS if name in payload]
    return rows


def _detail_context(request: HttpRequest, job: Job) -> dict[str, Any]:
    now = db_now()
    trail = job_trail(job.job_id)
    fp_text, fp_css = _fingerprint_status(job)
    return {
        "job": job,
        "now": now,
        "held": job.state in HELD_STATES,
        "trail": trail,
        "attempts": attempts_from_trail(trail),
        "refusals": REFUSAL_EVENTS,
        "payload_json": _redacted_payload(
            job.payload, can_view=request.user.has_perm("inbox.view_payload")
        ),
        "can_view_payload": request.user.has_perm("inbox.view_payload"),
        "fingerprint_text": fp_text,
        "fingerprint_css": fp_css,
        "immutable": _immutable_fields(job),
        "on_expiry": expiry_behaviour(job.job_type),
        "actions": allowed_actions(job),
        "can_retry": request.user.has_perm("inbox.retry_job"),
    }


DETAIL_REGIONS = ("job-summary", "job-trail", "job-actions")


@page(permission="inbox.view_job")
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    """Identity, immutable fields, payload, lease, attempts, trail and the allowed actions."""
    job = _load_job(job_id)
    template = region_template(request, DETAIL, DETAIL_REGIONS, default="job-summary")
    return render(request, template, _detail_context(request, job))


@page(permission="inbox.view_job")
def job_lease(request: HttpRequest, job_id: str) -> HttpResponse:
    """The lease countdown fragment (re-rendered from the database clock while polling)."""
    job = _load_job(job_id)
    context = {"job": job, "now": db_now(), "held": job.state in HELD_STATES}
    return render(request, LEASE, context)


# --- job actions ------------------------------------------------------------------------------


def _render_job_actions(request: HttpRequest, job_id: str, act: ActionContext) -> HttpResponse:
    job = _load_job(job_id)
    context = {**_detail_context(request, job), "act": act}
    response = render(request, f"{DETAIL}#job-actions", context)
    if act.should_act and act.status == 200:
        # The trail and summary refresh themselves on this event.
        trigger_client_event(response, "job-changed")
    return response


@action(permission="inbox.retry_job", region="job-actions", needs_reason=True)
def job_retry(request: HttpRequest, job_id: str, *, act: ActionContext) -> HttpResponse:
    """FAILED → READY by an operator, with the reason in the audit event."""
    act.perform(
        lambda: transitions.retry_job(job_id, actor=act.actor, reason=act.reason),
        done="Retried: the job is READY again.",
    )
    return _render_job_actions(request, job_id, act)


# --- bulk actions -----------------------------------------------------------------------------


@dataclass
class BulkSelection:
    """The rows one bulk action would touch, and the ones it would skip."""

    mode: str
    limit: int
    eligible: list[Job] = field(default_factory=list)
    skipped: list[tuple[Job, str]] = field(default_factory=list)
    more: bool = False
    missing: list[str] = field(default_factory=list)
    # For bulk reconcile: the evidence probed for each eligible job (``reconcile.assess``).
    assessments: list[reconcile.Assessment] = field(default_factory=list)


def _bulk_limit(params: QueryDict) -> int:
    try:
        limit = int(params.get("limit") or 100)
    except ValueError:
        limit = 100
    return max(1, min(limit, BULK_LIMIT_MAX))


def _bulk_select(params: QueryDict, *, eligible_state: str) -> BulkSelection:
    """Selected rows (``job_ids``) or every row matching the filter, up to the limit."""
    mode = "matching" if params.get("mode") == "matching" else "selected"
    limit = _bulk_limit(params)
    selection = BulkSelection(mode=mode, limit=limit)
    if mode == "selected":
        ids = list(dict.fromkeys(params.getlist("job_ids")))[: BULK_LIMIT_MAX * 2]
        jobs = {job.job_id: job for job in Job.objects.filter(job_id__in=ids)}
        selection.missing = [job_id for job_id in ids if job_id not in jobs]
        for job_id in ids:
            job = jobs.get(job_id)
            if job is None:
                continue
            if job.state != eligible_state:
                selection.skipped.append((job, f"is {job.state}, not {eligible_state}"))
            elif len(selection.eligible) < limit:
                selection.eligible.append(job)
            else:
                selection.more = True
        return selection
    job_filter = JobFilter(params, queryset=Job.objects.all())
    qs = job_filter.qs.filter(state=eligible_state).order_by("created_at", "job_id")
    rows = list(qs[: limit + 1])
    selection.eligible = rows[:limit]
    selection.more = len(rows) > limit
    return selection


def _bulk_context(request: HttpRequest, params: QueryDict) -> dict[str, Any]:
    return {
        "retry": _bulk_select(params, eligible_state=JobState.FAILED),
        "reconcile": _reconcile_preview(params),
        "can_retry": request.user.has_perm("inbox.retry_job"),
        "can_reconcile": request.user.has_perm("inbox.reconcile_job"),
    }


def _reconcile_preview(params: QueryDict) -> BulkSelection:
    """OUTCOME_UNKNOWN rows of the selection whose evidence is unambiguous (object absent).

    The probe is read-only (``reconcile.assess``, the auto-reconciler's rule); a present object
    (not applied, or a conflict) needs a person on the reconcile page, so those rows are listed
    as skipped with the reason.
    """
    candidates = _bulk_select(params, eligible_state=JobState.OUTCOME_UNKNOWN)
    selection = BulkSelection(
        mode=candidates.mode,
        limit=candidates.limit,
        skipped=list(candidates.skipped),
        more=candidates.more,
        missing=candidates.missing,
    )
    for assessment in reconcile.assess(candidates.eligible):
        job, evidence = assessment.job, assessment.evidence
        if assessment.action == reconcile.CONFIRM:
            selection.eligible.append(job)
            selection.assessments.append(assessment)
        elif evidence is None:
            selection.skipped.append((job, assessment.error))
        else:
            why = "object present with the expected hash (not applied)"
            if not evidence.matches:
                why = "object present with another hash (conflict)"
            selection.skipped.append((job, why + ": decide on the reconcile page"))
    return selection


@page(permission="inbox.view_job")
def bulk_preview(request: HttpRequest) -> HttpResponse:
    """Which rows a bulk action would touch (read only)."""
    template = region_template(request, BULK, ("bulk-preview",), default="bulk-preview")
    return render(request, template, _bulk_context(request, request.GET))


@action(permission="inbox.retry_job", region="bulk-result", needs_reason=True)
def bulk_retry(request: HttpRequest, *, act: ActionContext) -> HttpResponse:
    """Retry every eligible FAILED row of the selection (or filter), up to the limit."""
    selection = _bulk_select(request.POST, eligible_state=JobState.FAILED)
    outcome = _run_bulk(
        act,
        selection,
        lambda ids: BulkOutcome.of(transitions.retry_jobs(ids, actor=act.actor, reason=act.reason)),
        verb="Retried",
        noun="FAILED",
    )
    return _bulk_result(request, act, outcome)


@action(permission="inbox.reconcile_job", region="bulk-result", needs_reason=True)
def bulk_reconcile(request: HttpRequest, *, act: ActionContext) -> HttpResponse:
    """Reconcile (CONFIRMED_DELETED) the selected unknowns whose object is absent: probed now,
    so a job whose object reappeared since the preview is left alone."""
    selection = _reconcile_preview(request.POST)

    def confirm(_ids: list[str]) -> BulkOutcome:
        report = reconcile.apply(selection.assessments, actor=act.actor, reason=act.reason)
        return BulkOutcome.listed(report.confirmed, report.refused)

    outcome = _run_bulk(act, selection, confirm, verb="Reconciled", noun="unambiguous")
    return _bulk_result(request, act, outcome)


def _run_bulk(
    act: ActionContext,
    selection: BulkSelection,
    act_on: Callable[[list[str]], BulkOutcome],
    *,
    verb: str,
    noun: str,
) -> BulkOutcome:
    """``act_on`` the eligible jobs in one action (a replay or a bad form acts on none)."""
    if not act.should_act:
        return BulkOutcome()
    if not selection.eligible:
        act.refuse(f"Nothing to do: no {noun} job in the selection.")
        return BulkOutcome()
    ids = [job.job_id for job in selection.eligible]
    outcome = act.perform(lambda: act_on(ids), done="") or BulkOutcome()
    if act.status == 200:
        refused = f"; {len(outcome.refused)} refused" if outcome.refused else ""
        act.message = act.outcome = f"{verb} {len(outcome.done)} job(s){refused}."
    return outcome


def _bulk_result(request: HttpRequest, act: ActionContext, outcome: BulkOutcome) -> HttpResponse:
    template = region_template(request, BULK, ("bulk-result",), default="bulk-result")
    context: dict[str, Any] = {"act": act, "outcome": outcome}
    if template == BULK:
        context.update(_bulk_context(request, request.POST))
    response = render(request, template, context)
    if act.should_act and outcome.done:
        trigger_client_event(response, "jobs-changed")
    return response
