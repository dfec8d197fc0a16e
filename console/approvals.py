"""The approvals page: DELETE jobs awaiting their four-eyes decision, with the object's current
state, and the approve/deny actions (through ``inbox.approvals``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.http import trigger_client_event

from console.htmx import dom_id, region_template
from console.policy import ActionContext, action, page
from inbox import approvals as svc
from inbox import vault
from inbox.errors import InboxError
from inbox.jobtypes import registry
from inbox.models import Approval, Job

APPROVALS = "console/approvals.html"

# The most pending approvals one page shows; the heading counts them all.
QUEUE_LIMIT = 50


# --- read model -------------------------------------------------------------------------------


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


def _approval_types() -> list[str]:
    return [name for name, spec in registry().items() if spec.needs_approval]


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


# --- views ------------------------------------------------------------------------------------


@page(permission="inbox.view_approval")
def approvals(request: HttpRequest) -> HttpResponse:
    template = region_template(
        request, APPROVALS, ("approvals-queue", "pending-count"), default="approvals-queue"
    )
    return render(request, template, {"page": approvals_page(username=request.user.get_username())})


def _approval_response(request: HttpRequest, job_id: str, act: ActionContext) -> HttpResponse:
    item = approval_item(job_id, username=request.user.get_username())
    if item is None:
        raise Http404(f"job {job_id!r} does not exist")
    response = render(request, f"{APPROVALS}#approval-row", {"item": item, "act": act})
    if act.results:
        # One fewer pending: the count in the heading reloads itself on this event.
        trigger_client_event(response, "approvals-changed")
    return response


@action(permission="inbox.approve_delete", region="approval-row", needs_reason=True)
def approve_delete(request: HttpRequest, job_id: str, *, act: ActionContext):
    act.perform(
        lambda: svc.approve_delete(job_id, approver=request.user, reason=act.reason),
        done="Approved: the DELETE is READY for the delete executor.",
    )
    return _approval_response(request, job_id, act)


@action(permission="inbox.approve_delete", region="approval-row", needs_reason=True)
def deny_delete(request: HttpRequest, job_id: str, *, act: ActionContext):
    act.perform(
        lambda: svc.deny_delete(job_id, approver=request.user, reason=act.reason),
        done="Denied: the DELETE is REJECTED and will not run.",
    )
    return _approval_response(request, job_id, act)
