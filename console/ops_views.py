"""Operator pages: the reconcile queue, approvals, runs and workers (issue 5).

Views are thin: parse the request, call one selector or one service, render the page or — for
HTMX requests and actions — only the region that changed. Every action wears
``console.policy.action`` (POST, CSRF, login, named permission, request-id dedupe, reason) and
calls its service through ``act.perform``; nothing here assigns a state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.http import trigger_client_event

from console import ops_selectors as sel
from console.policy import ActionContext, action, page
from inbox.errors import InboxError

RECONCILE = "ops/reconcile.html"
APPROVALS = "ops/approvals.html"
RUNS = "ops/runs.html"
WORKERS = "ops/workers.html"


def _region(request: HttpRequest, template: str, allowed: set[str], default: str) -> str:
    """The full page, or for HTMX the partial its target names (pollers target themselves)."""
    if not request.htmx:
        return template
    target = request.htmx.target or ""
    return f"{template}#{target if target in allowed else default}"


# --- reconcile --------------------------------------------------------------------------------


@page(permission="inbox.view_job")
def reconcile(request: HttpRequest) -> HttpResponse:
    template = _region(
        request, RECONCILE, {"reconcile-queue", "reconcile-auto", "queue-count"}, "reconcile-queue"
    )
    return render(request, template, {"queue": sel.reconcile_queue()})


def _case_response(request: HttpRequest, job_id: str, act: ActionContext) -> HttpResponse:
    case = sel.unknown_case(job_id)
    if case is None:
        raise Http404(f"job {job_id!r} does not exist")
    response = render(request, f"{RECONCILE}#unknown-case", {"case": case, "act": act})
    if act.results:
        # The bulk preview above the queue is stale now; it reloads itself on this event.
        trigger_client_event(response, "reconcile-changed")
    return response


@action(permission="inbox.reconcile_job", region="unknown-case", needs_reason=True)
def reconcile_confirm_deleted(request: HttpRequest, job_id: str, *, act: ActionContext):
    from inbox.reconcile import confirm_deleted

    act.perform(
        lambda: confirm_deleted(job_id, actor=act.actor, reason=act.reason),
        done="Confirmed deleted: the job is RECONCILED (CONFIRMED_DELETED).",
    )
    return _case_response(request, job_id, act)


@action(permission="inbox.reconcile_job", region="unknown-case", needs_reason=True)
def reconcile_not_applied(request: HttpRequest, job_id: str, *, act: ActionContext):
    from inbox.reconcile import not_applied

    fresh = request.POST.get("fresh_delete") == "1"
    act.perform(
        lambda: not_applied(job_id, actor=act.actor, reason=act.reason, request_fresh_delete=fresh),
        done="Not applied: the job is RECONCILED (NOT_APPLIED)"
        + ("; a fresh DELETE was requested and awaits approval." if fresh else "."),
    )
    return _case_response(request, job_id, act)


@action(permission="inbox.reconcile_job", region="unknown-case", needs_reason=True)
def reconcile_annotate(request: HttpRequest, job_id: str, *, act: ActionContext):
    from inbox.reconcile import annotate

    act.perform(
        lambda: annotate(job_id, actor=act.actor, reason=act.reason),
        done="Annotated: the job stays OUTCOME_UNKNOWN with your note in its trail.",
    )
    return _case_response(request, job_id, act)


@dataclass
class BulkOutcome:
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


def _reconcile_unambiguous(*, actor: str, reason: str) -> BulkOutcome:
    """The auto-reconciler's rule on the cases the page shows, as this operator, with a reason.

    Each case goes through the same service as its single-case button, which probes afresh:
    a case whose evidence changed since the preview is refused, never decided on stale data.
    """
    from inbox import reconcile as svc

    outcome = BulkOutcome()
    plan = sel.reconcile_queue().plan
    for job in plan.confirm:
        try:
            svc.confirm_deleted(job.job_id, actor=actor, reason=reason)
            outcome.confirmed.append(job.job_id)
        except InboxError:
            outcome.refused.append(job.job_id)
    for job, _code in plan.diagnose:
        try:
            svc.annotate(job.job_id, actor=actor, reason=reason)
            outcome.annotated.append(job.job_id)
        except InboxError:
            outcome.refused.append(job.job_id)
    return outcome


@action(permission="inbox.reconcile_job", region="reconcile-queue", needs_reason=True)
def reconcile_auto(request: HttpRequest, *, act: ActionContext):
    outcome = act.perform(
        lambda: _reconcile_unambiguous(actor=act.actor, reason=act.reason),
        done="Reconciled every unambiguous case.",
    )
    if outcome is not None:
        act.message = act.outcome = outcome.summary()
    context = {"queue": sel.reconcile_queue(), "act": act}
    return render(request, f"{RECONCILE}#reconcile-queue", context)


# --- approvals --------------------------------------------------------------------------------


@page(permission="inbox.view_approval")
def approvals(request: HttpRequest) -> HttpResponse:
    template = _region(request, APPROVALS, {"approvals-queue", "pending-count"}, "approvals-queue")
    return render(
        request, template, {"page": sel.approvals_page(username=request.user.get_username())}
    )


def _approval_response(request: HttpRequest, job_id: str, act: ActionContext) -> HttpResponse:
    item = sel.approval_item(job_id, username=request.user.get_username())
    if item is None:
        raise Http404(f"job {job_id!r} does not exist")
    response = render(request, f"{APPROVALS}#approval-row", {"item": item, "act": act})
    if act.results:
        # One fewer pending: the count in the heading reloads itself on this event.
        trigger_client_event(response, "approvals-changed")
    return response


@action(permission="inbox.approve_delete", region="approval-row", needs_reason=True)
def approve_delete(request: HttpRequest, job_id: str, *, act: ActionContext):
    from inbox.approvals import approve_delete as approve

    act.perform(
        lambda: approve(job_id, approver=request.user, reason=act.reason),
        done="Approved: the DELETE is READY for the delete executor.",
    )
    return _approval_response(request, job_id, act)


@action(permission="inbox.approve_delete", region="approval-row", needs_reason=True)
def deny_delete(request: HttpRequest, job_id: str, *, act: ActionContext):
    from inbox.approvals import deny_delete as deny

    act.perform(
        lambda: deny(job_id, approver=request.user, reason=act.reason),
        done="Denied: the DELETE is REJECTED and will not run.",
    )
    return _approval_response(request, job_id, act)


# --- runs -------------------------------------------------------------------------------------


@page(permission="runs.view_run")
def runs(request: HttpRequest) -> HttpResponse:
    store = request.GET.get("store") or None
    if request.htmx and store and request.htmx.target == sel.dom_id("live", store):
        cards = sel.store_cards(store=store)
        if not cards:
            raise Http404(f"no runs for store {store!r}")
        return render(request, f"{RUNS}#store-live", {"card": cards[0]})
    template = _region(request, RUNS, {"runs-stores"}, "runs-stores")
    # ``?store=`` (the audit log links runs this way) narrows the page to that store.
    return render(request, template, {"cards": sel.store_cards(store=store), "store": store})


@action(permission="runs.close_run", region="store-card", needs_reason=True)
def close_run(request: HttpRequest, run_id: str, *, act: ActionContext):
    from runs.models import Run, RunStatus
    from runs.transitions import close_run as close

    run = Run.objects.filter(run_id=run_id).first()
    if run is None:
        raise Http404(f"run {run_id!r} does not exist")
    # A RunError is a DomainError: shown in the region like any refused action (409).
    act.perform(
        lambda: close(run_id, status=RunStatus.ABANDONED, actor=act.actor, reason=act.reason),
        done=f"Run {run_id} closed as abandoned; the store is free.",
    )
    cards = sel.store_cards(store=run.store)
    return render(request, f"{RUNS}#store-card", {"card": cards[0], "act": act})


# --- workers and scopes -----------------------------------------------------------------------


@page(permission="inbox.view_worker")
def workers(request: HttpRequest) -> HttpResponse:
    template = _region(request, WORKERS, {"workers-table"}, "workers-table")
    return render(request, template, {"page": sel.workers_page()})


def _scope_response(request: HttpRequest, scope: str, act: ActionContext) -> HttpResponse:
    row = sel.scope_row(scope)
    if row is None:
        raise Http404(f"unknown scope {scope!r}")
    return render(request, f"{WORKERS}#scope-row", {"scope": row, "act": act})


@action(permission="inbox.pause_scope", region="scope-row", needs_reason=True)
def pause_scope(request: HttpRequest, scope: str, *, act: ActionContext):
    from inbox.scopes import pause_scope as pause

    act.perform(
        lambda: pause(scope, actor=act.actor, reason=act.reason),
        done=f"Scope {scope} paused: executors finish what they hold and claim nothing new.",
    )
    return _scope_response(request, scope, act)


@action(permission="inbox.pause_scope", region="scope-row")
def resume_scope(request: HttpRequest, scope: str, *, act: ActionContext):
    from inbox.scopes import resume_scope as resume

    act.perform(
        lambda: resume(scope, actor=act.actor, reason=act.reason),
        done=f"Scope {scope} resumed: executors claim again.",
    )
    return _scope_response(request, scope, act)
