"""The jobs pages: the list, a job's detail and lease countdown, and the job actions (retry or
cancel one; preview, retry, reconcile or cancel many).

Both pages stay live. The list's rows poll (``job-rows``) from their first row (keyset
``from_row=``), so inserts never shift them; the answer is 204 when no row changed, otherwise the
rows, of which console.js replaces only the changed ones. The detail page has one watcher
(``job-watch``) that answers 204 while the job is unchanged, refreshes every panel at once
(out-of-band swaps) when it changed, and stops once the job is terminal.

Views parse input, call one selector or service, and render; they never assign job state.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django_htmx.http import trigger_client_event

from console import keyset
from console.bulk import BulkOutcome
from console.filters import JobFilter
from console.htmx import NEWER_CAP, dom_id, live_rows, poll_answer, region_template
from console.policy import ActionContext, action, page
from core.clock import db_now
from core.paging import capped_count, count_label
from inbox import reconcile, transitions
from inbox.models import HELD_STATES, Job, JobState
from inbox.read import job_detail as read_detail
from inbox.read.job_detail import JobDetail
from inbox.selectors import CANCELLABLE_STATES, SEARCH_CAP, Orphan, orphaned, payload_supported

LIST = "console/jobs.html"
DETAIL = "console/jobs-detail.html"
LEASE = "console/jobs-lease.html"
BULK = "console/jobs-bulk.html"

PER_PAGE = 50
# The most rows one bulk action may touch.
BULK_LIMIT_MAX = 500
# The longest "retry in" an operator may set on a job page: a week.
RETRY_DELAY_MAX_MINUTES = 7 * 24 * 60
# Payload keys hidden from users without inbox.view_payload: a SAVE's content, a task's
# arguments (either may hold personal data).
REDACTED_KEYS = ("content", "args", "kwargs")
FILTER_FIELDS = tuple(JobFilter.base_filters)
# Always visible; the rest sit under "More filters" (opened when one of them is set).
MAIN_FILTERS = ("q", "state", "job_type")
# Seconds between two polls of the list's rows and of a job's page.
LIST_POLL_SECONDS = 5
DETAIL_POLL_SECONDS = 3


# --- orders the list offers (each one an index; see Job.Meta.indexes) -------------------------


def _orders(key: str, columns: tuple[str, ...], label: str) -> dict[str, keyset.Ordering]:
    return {
        key: keyset.Ordering(key, columns, False, label),
        f"-{key}": keyset.Ordering(f"-{key}", columns, True, label),
    }


ORDERINGS: dict[str, keyset.Ordering] = {
    **_orders("created_at", ("created_at", "job_id"), "created"),  # job_created_idx
    **_orders("updated_at", ("updated_at", "job_id"), "updated"),  # job_updated_idx
    **_orders("state", ("state", "created_at", "job_id"), "state"),  # job_state_created_idx
    **_orders("job_id", ("job_id",), "job id"),  # the primary key
}
DEFAULT_ORDERING = ORDERINGS["-created_at"]
# The lease filters page by lease end: the partial lease index (held jobs only). Not offered
# as a sort over every job, which no index serves.
LEASE_ORDERING = keyset.Ordering("lease", ("lease_until", "job_id"), False, "lease end")


def order_words(ordering: keyset.Ordering) -> str:
    """ "newest updated first", "job id A → Z": the pager says what order it walks."""
    if ordering is LEASE_ORDERING:
        return "lease ending soonest first"
    if ordering.columns[0].endswith(("_at", "_until")):
        return f"{'newest' if ordering.descending else 'oldest'} {ordering.label} first"
    return f"by {ordering.label}, {'Z → A' if ordering.descending else 'A → Z'}"


def list_ordering(params: Mapping[str, str]) -> keyset.Ordering:
    """The order asked for (``?sort=``), the lease order under a lease filter, else newest
    first. An unknown sort falls back rather than failing: it only ever comes from a URL."""
    sort = params.get("sort") or ""
    if sort in ORDERINGS:
        return ORDERINGS[sort]
    if sort == LEASE_ORDERING.key or params.get("lease"):
        return LEASE_ORDERING
    return DEFAULT_ORDERING


# --- jobs list --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of the jobs list: its label, css class and (if sortable) its sort key."""

    name: str
    label: str
    sort: str = ""
    # Hidden unless chosen in the column chooser (remembered per browser).
    optional: bool = False


COLUMNS = (
    Column("job", "Job", sort="job_id"),
    Column("state", "State", sort="state"),
    Column("type", "Type"),
    Column("object", "Object"),
    Column("lease", "Lease"),
    Column("updated", "Updated", sort="updated_at"),
    Column("mission", "Mission", optional=True),
    Column("worker", "Worker", optional=True),
    Column("tries", "Tries", optional=True),
    Column("created", "Created", sort="created_at", optional=True),
)


@dataclass(frozen=True)
class JobRow:
    """One row of the jobs list as it is rendered, with the version the poll compares."""

    job: Job
    dom_id: str
    orphan: Orphan | None
    lease_left: int | None

    @property
    def version(self) -> str:
        """Changes whenever the row would render differently (not with the ticking clock)."""
        job = self.job
        orphan = self.orphan
        text = "|".join(
            (
                job.updated_at.isoformat(),
                orphan.holder if orphan else "",
                orphan.dead_since.isoformat() if orphan and orphan.dead_since else "",
            )
        )
        return hashlib.sha1(text.encode()).hexdigest()[:10]


def job_rows(jobs: Iterable[Job], now: Any) -> list[JobRow]:
    jobs = list(jobs)
    orphans = orphaned(jobs, now)
    rows = []
    for job in jobs:
        left = None
        if job.state in HELD_STATES and job.lease_until is not None:
            left = int((job.lease_until - now).total_seconds() // 1)
        rows.append(JobRow(job, dom_id("job-row", job.job_id), orphans.get(job.job_id), left))
    return rows


def _header(params: QueryDict, ordering: keyset.Ordering) -> list[dict[str, Any]]:
    """The table head: each column's label and, if sortable, the link that sorts by it (the
    same column again flips the direction; a new sort starts on its first page)."""
    cells = []
    for column in COLUMNS:
        cell: dict[str, Any] = {"column": column, "url": "", "aria": ""}
        if column.sort:
            current = ordering.key.lstrip("-") == column.sort
            descending = current and ordering.descending
            flip = column.sort if descending else f"-{column.sort}"
            if not current:
                # Times read newest first; names and states A → Z.
                flip = f"-{column.sort}" if column.sort.endswith("_at") else column.sort
            cell["url"] = "?" + keyset.query_string(
                params, drop=(*keyset.CURSOR_PARAMS, "sort"), sort=flip
            )
            if current:
                cell["aria"] = "descending" if ordering.descending else "ascending"
        cells.append(cell)
    return cells


def _newer(qs: QuerySet[Job], ordering: keyset.Ordering, listing: keyset.Page) -> int:
    """How many rows now sort before the page's first row (capped): "12 new jobs"."""
    if listing.rows:
        first = ordering.values(listing.rows[0])
        before = keyset.seek(qs, ordering, first, backward=True, inclusive=False)
        # Nearest first, in the order's index: the count is a range scan that stops at the cap.
        nearest = before.order_by(*ordering.order_by(reverse=True))
        return capped_count(nearest, NEWER_CAP, keep_order=True)
    return capped_count(qs, NEWER_CAP)


def page_token(rows: list[JobRow], newer: int | None) -> str:
    """The rows region's version: equal tokens render equal rows (the poll's 204)."""
    text = ",".join(row.version for row in rows) + f"|{newer}"
    return hashlib.sha1(text.encode()).hexdigest()[:16]


@page(permission="inbox.view_job")
def job_list(request: HttpRequest) -> HttpResponse:
    """Filter, search, sort and page jobs (keyset); HTMX swaps the table, its rows poll."""
    # The list never shows the payload; a SAVE's content can be megabytes per row.
    jobs = Job.objects.defer("payload")
    job_filter = JobFilter(request.GET or None, queryset=jobs)
    qs = job_filter.qs if job_filter.is_bound else jobs
    ordering = list_ordering(request.GET)
    listing = keyset.paginate(qs, ordering, request.GET, per_page=PER_PAGE)
    now = db_now()
    rows = job_rows(listing.rows, now)
    # The first page (or a poll of it) says how many rows arrived above it since.
    top = listing.at_start or request.GET.get("top") == "1"
    newer: int | None = None
    if listing.at_start:
        newer = 0
    elif top:
        newer = _newer(qs, ordering, listing)
    token = page_token(rows, newer)
    rows_context = {
        **live_rows(request, listing, top=top, newer=newer, token=token),
        "rows": rows,
        "now": now,
        "columns": COLUMNS,
        "poll_seconds": LIST_POLL_SECONDS,
    }
    polled = poll_answer(
        request, region="job-rows", template=LIST, token=token, context=rows_context
    )
    if polled is not None:
        return polled
    context = {
        **rows_context,
        "filter": job_filter,
        "listing": listing,
        "header": _header(request.GET, ordering),
        "ordering": ordering,
        "order_words": order_words(ordering),
        "total_label": count_label(capped_count(qs)),
        "filter_snapshot": _filter_snapshot(request.GET),
        "sort": request.GET.get("sort", ""),
        "more_filters": any(
            request.GET.get(name) for name in FILTER_FIELDS if name not in MAIN_FILTERS
        ),
        "bulk_limit": BULK_LIMIT_MAX,
        "can_retry": request.user.has_perm("inbox.retry_job"),
        "can_reconcile": request.user.has_perm("inbox.reconcile_job"),
        "can_cancel": request.user.has_perm("inbox.cancel_job"),
        "payload_search": payload_supported(jobs),
        "search_cap": f"{SEARCH_CAP:,}",
    }
    template = region_template(request, LIST, ("job-table",), default="job-table")
    return render(request, template, context)


def _filter_snapshot(params: QueryDict) -> list[tuple[str, str]]:
    """The filter values a bulk "all matching" action re-applies (only known filter names)."""
    return [(name, params.get(name, "")) for name in FILTER_FIELDS if params.get(name)]


# --- job detail -------------------------------------------------------------------------------


def _detail(job_id: str) -> JobDetail:
    detail = read_detail.job_detail(job_id)
    if detail is None:
        raise Http404(f"no job {job_id!r}")
    return detail


def _redacted_payload(payload: dict[str, Any], *, can_view: bool) -> str:
    shown = dict(payload or {})
    if not can_view:
        for key in REDACTED_KEYS:
            if key in shown:
                shown[key] = "[redacted: needs the view_payload permission]"
    return json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False)


def _detail_context(request: HttpRequest, detail: JobDetail) -> dict[str, Any]:
    """The read model's names plus what this user may see and do."""
    can_view = request.user.has_perm("inbox.view_payload")
    return {
        **detail.context(),
        "poll_seconds": DETAIL_POLL_SECONDS,
        "payload_json": _redacted_payload(detail.job.payload, can_view=can_view),
        "can_view_payload": can_view,
        "can_retry": request.user.has_perm("inbox.retry_job"),
        "can_cancel": request.user.has_perm("inbox.cancel_job"),
    }


DETAIL_REGIONS = ("job-summary", "job-attempts", "job-trail", "job-actions", "job-watch")


@page(permission="inbox.view_job")
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    """Identity, immutable fields, payload, lease, attempts, trail and the allowed actions.

    The page's watcher (``job-watch``) polls with the version it shows: unchanged, the answer
    is 204 and costs three small queries (job row without its payload, newest event id, the
    holder's heartbeat when held) and no rendering; changed, every panel comes back as an
    out-of-band swap.
    """
    target = request.htmx.target if request.htmx else None
    if target == "job-watch" and not request.htmx.history_restore_request:
        version = read_detail.job_version(job_id)
        if version is None:
            raise Http404(f"no job {job_id!r}")
        if request.GET.get("v") == version:
            return HttpResponse(status=204)
        context = {**_detail_context(request, _detail(job_id)), "oob": True}
        return render(request, f"{DETAIL}#job-refresh", context)
    template = region_template(request, DETAIL, DETAIL_REGIONS, default="job-summary")
    return render(request, template, _detail_context(request, _detail(job_id)))


@page(permission="inbox.view_job")
def job_lease(request: HttpRequest, job_id: str) -> HttpResponse:
    """The lease countdown fragment (re-rendered from the database clock while polling)."""
    job = Job.objects.filter(job_id=job_id).first()
    if job is None:
        raise Http404(f"no job {job_id!r}")
    context = {"job": job, "now": db_now(), "held": job.state in HELD_STATES}
    return render(request, LEASE, context)


# --- job actions ------------------------------------------------------------------------------


def _render_job_actions(request: HttpRequest, job_id: str, act: ActionContext) -> HttpResponse:
    """The actions panel with the action's message, plus every other panel out of band: the
    page shows the job as the action left it, all at once."""
    context = {**_detail_context(request, _detail(job_id)), "act": act}
    response = render(request, f"{DETAIL}#job-action-result", context)
    if act.should_act and act.status == 200:
        # Anything else on the page that shows this job refreshes on this event.
        trigger_client_event(response, "job-changed")
    return response


def _retry_delay(raw: str) -> int | None:
    """Minutes of "retry in" (0 when empty), None when the text is not a whole number in range."""
    if not raw:
        return 0
    if not raw.isdigit() or not 0 <= int(raw) <= RETRY_DELAY_MAX_MINUTES:
        return None
    return int(raw)


@action(permission="inbox.retry_job", region="job-actions", needs_reason=True)
def job_retry(request: HttpRequest, job_id: str, *, act: ActionContext) -> HttpResponse:
    """FAILED → READY by an operator, with the reason in the audit event; with "retry in N
    minutes" the job is READY but not claimed before then (an operator's "retry at", kept in
    ``run_after`` and measured on the database clock like every lease)."""
    raw = (request.POST.get("delay_minutes") or "").strip()
    delay = _retry_delay(raw) if act.should_act else 0
    if delay is None:
        act.refuse(
            f"Retry in: give a whole number of minutes from 0 to {RETRY_DELAY_MAX_MINUTES}"
            f" (got {raw[:20]!r}); nothing was changed.",
            status=400,
        )
        return _render_job_actions(request, job_id, act)
    run_after = db_now() + dt.timedelta(minutes=delay) if delay else None
    act.perform(
        partial(
            transitions.retry_job, job_id, actor=act.actor, reason=act.reason, run_after=run_after
        ),
        done=(
            f"Retried: the job is READY and will not be claimed before "
            f"{run_after:%Y-%m-%d %H:%M:%S} UTC."
            if run_after
            else "Retried: the job is READY again."
        ),
    )
    return _render_job_actions(request, job_id, act)


@action(permission="inbox.cancel_job", region="job-actions", needs_reason=True)
def job_cancel(request: HttpRequest, job_id: str, *, act: ActionContext) -> HttpResponse:
    """CREATED / READY / CLAIMED → REJECTED (CANCELLED) by an operator: only a job that has not
    begun may be cancelled; one that began is refused with the transition's own words, and
    nothing is written."""
    act.perform(
        partial(transitions.cancel_job, job_id, actor=act.actor, reason=act.reason),
        done="Cancelled: the job is REJECTED (CANCELLED) and will not run.",
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


def _bulk_select(params: QueryDict, *, eligible_state: str | Iterable[str]) -> BulkSelection:
    """Selected rows (``job_ids``) or every row matching the filter, up to the limit."""
    states = {eligible_state} if isinstance(eligible_state, str) else set(eligible_state)
    wanted = " or ".join(sorted(states))
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
            if job.state not in states:
                selection.skipped.append((job, f"is {job.state}, not {wanted}"))
            elif len(selection.eligible) < limit:
                selection.eligible.append(job)
            else:
                selection.more = True
        return selection
    job_filter = JobFilter(params, queryset=Job.objects.all())
    qs = job_filter.qs.filter(state__in=states).order_by("created_at", "job_id")
    rows = list(qs[: limit + 1])
    selection.eligible = rows[:limit]
    selection.more = len(rows) > limit
    return selection


def _bulk_context(request: HttpRequest, params: QueryDict) -> dict[str, Any]:
    return {
        "retry": _bulk_select(params, eligible_state=JobState.FAILED),
        "reconcile": _reconcile_preview(params),
        "cancel": _bulk_select(params, eligible_state=CANCELLABLE_STATES),
        "can_retry": request.user.has_perm("inbox.retry_job"),
        "can_reconcile": request.user.has_perm("inbox.reconcile_job"),
        "can_cancel": request.user.has_perm("inbox.cancel_job"),
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


@action(permission="inbox.cancel_job", region="bulk-result", needs_reason=True)
def bulk_cancel(request: HttpRequest, *, act: ActionContext) -> HttpResponse:
    """Cancel every eligible not-yet-begun row (CREATED, READY, CLAIMED) of the selection, up to
    the limit, in one set-based call; a row that began meanwhile is refused and named."""
    selection = _bulk_select(request.POST, eligible_state=CANCELLABLE_STATES)
    outcome = _run_bulk(
        act,
        selection,
        lambda ids: BulkOutcome.of(
            transitions.cancel_jobs(ids, actor=act.actor, reason=act.reason)
        ),
        verb="Cancelled",
        noun="not-yet-begun (CREATED, READY or CLAIMED)",
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
