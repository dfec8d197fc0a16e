"""The approvals page: DELETE jobs awaiting their four-eyes decision, with the object's current
state and, for a consolidation delete, the copy that stays; approve / deny one row, or many
with a preview that names the rows this user may not decide and why (through
``inbox.approvals``).

The whole queue is reachable: it pages by keyset, oldest first, and says "showing 1–50 of 80".
Its rows poll like the jobs list's (204 while nothing changed; console.js replaces only the
rows that did, so a reason being typed survives).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django_htmx.http import trigger_client_event

from console import keyset
from console.bulk import BulkOutcome
from console.htmx import dom_id, region_template
from console.policy import ActionContext, action, page
from core.errors import DomainError
from core.paging import capped_count, count_label
from inbox import approvals as svc
from inbox import vault
from inbox.errors import InboxError
from inbox.jobtypes import registry
from inbox.models import Approval, Job, JobState
from runs.models import Disposition, Member

APPROVALS = "console/approvals.html"

# The most pending approvals one page shows; the pager reaches the rest.
QUEUE_LIMIT = 50
# The queue's size stops counting here ("1,000+"): past that, the number is not what an approver
# needs, and each count reads that many rows.
QUEUE_COUNT_CAP = 1_000
# The most rows one bulk decision may touch.
BULK_MAX = 100
POLL_SECONDS = 15
# Oldest first: the claim index's order for CREATED rows is (state, created_at, job_id).
ORDERING = keyset.Ordering("created_at", ("created_at", "job_id"), False, "requested")
# Mission ids of the deletes a consolidation run requests (runs.consolidators).
CONSOLIDATION_MISSION = "consolidate:"


# --- read model -------------------------------------------------------------------------------


@dataclass
class Keeper:
    """The copy a consolidation delete keeps: the group's keeper, probed now."""

    path: str
    expected_hash: str
    present: bool | None = None
    current_hash: str | None = None
    probe_error: str = ""

    @property
    def intact(self) -> bool:
        return bool(self.present) and self.current_hash == self.expected_hash


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
    # For a consolidation delete: the copy that stays (None: not one, or its plan is gone).
    keeper: Keeper | None = None
    consolidation: bool = False

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

    @property
    def version(self) -> str:
        """Changes whenever the row would render differently (the poll compares it)."""
        keeper = self.keeper
        text = "|".join(
            (
                self.job.updated_at.isoformat(),
                self.object_state,
                str(keeper.intact) if keeper else "-",
            )
        )
        return hashlib.sha1(text.encode()).hexdigest()[:10]


def _probe(path: str) -> tuple[bool | None, str | None, str]:
    try:
        probe = vault.probe(path)
    except (InboxError, OSError) as exc:
        return None, None, str(exc)
    return probe.present, probe.current_hash, ""


def _keepers(jobs: list[Job]) -> dict[str, Keeper]:
    """{job_id: Keeper} for the consolidation deletes among ``jobs``, in one query.

    The run that dropped a copy recorded, on its member, the keeper the plan chose and the
    DELETE it requested (``Member.detail``: ``keeper``, ``applied.job_id``)."""
    wanted = {
        job.vault_path: job for job in jobs if job.mission_id.startswith(CONSOLIDATION_MISSION)
    }
    if not wanted:
        return {}
    found: dict[str, Keeper] = {}
    members = Member.objects.filter(
        item_ref__in=list(wanted), disposition=Disposition.DROP
    ).order_by("-id")
    for member in members.only("item_ref", "detail")[: len(wanted) * 4]:
        job = wanted.get(member.item_ref)
        detail = member.detail or {}
        applied = detail.get("applied") or {}
        if job is None or job.job_id in found or applied.get("job_id") != job.job_id:
            continue
        keeper_path = str(detail.get("keeper") or "")
        if not keeper_path:
            continue
        present, current, error = _probe(keeper_path)
        found[job.job_id] = Keeper(
            path=keeper_path,
            expected_hash=str(job.payload.get("expected_provenance_hash", "")),
            present=present,
            current_hash=current,
            probe_error=error,
        )
    return found


def _pending(job: Job, username: str, keeper: Keeper | None = None) -> PendingApproval:
    item = PendingApproval(
        job=job,
        dom_id=dom_id("approval", job.job_id),
        own=job.requested_by == username,
        keeper=keeper,
        consolidation=job.mission_id.startswith(CONSOLIDATION_MISSION),
    )
    item.present, item.current_hash, item.probe_error = _probe(job.vault_path)
    return item


@dataclass
class ApprovalsPage:
    pending: list[PendingApproval]
    total: int
    recent: list[Approval]
    listing: keyset.Page | None = None
    # "showing 51–80" (None: more than QUEUE_COUNT_CAP rows come before this page)
    first_shown: int | None = 1

    @property
    def token(self) -> str:
        """The rows' version: a poll whose token still matches gets 204, nothing to redraw."""
        return hashlib.sha1(",".join(p.version for p in self.pending).encode()).hexdigest()[:16]

    @property
    def total_label(self) -> str:
        return count_label(self.total, QUEUE_COUNT_CAP)

    @property
    def range_label(self) -> str:
        """ "51–80", or "50 past the first 1,000+" when the rows before are not all counted."""
        if self.first_shown is None:
            return f"{len(self.pending)} past the first {QUEUE_COUNT_CAP:,}+"
        return f"{self.first_shown:,}–{self.first_shown + len(self.pending) - 1:,}"


def _approval_types() -> list[str]:
    return [name for name, spec in registry().items() if spec.needs_approval]


def pending_queryset():
    return Job.objects.awaiting_approval().filter(job_type__in=_approval_types())


def approvals_page(
    *, username: str, params: QueryDict | None = None, limit: int | None = None
) -> ApprovalsPage:
    """Pending DELETE approvals, oldest first, one keyset page of them; the latest decisions."""
    limit = QUEUE_LIMIT if limit is None else limit
    qs = pending_queryset()
    listing = keyset.paginate(qs, ORDERING, params or QueryDict(), per_page=limit)
    jobs = listing.rows
    # The whole queue on this page needs no count.
    whole = listing.at_start and listing.older is None
    total = len(jobs) if whole else capped_count(qs, QUEUE_COUNT_CAP)
    # Where this page starts: the rows before its first one (capped like the total).
    first_shown: int | None = 1
    if jobs and not listing.at_start:
        above = keyset.seek(qs, ORDERING, ORDERING.values(jobs[0]), backward=True, inclusive=False)
        before = capped_count(above, QUEUE_COUNT_CAP)
        first_shown = before + 1 if before <= QUEUE_COUNT_CAP else None
    recent = list(Approval.objects.order_by("-decided_at")[:10])
    keepers = _keepers(jobs)
    pending = [_pending(job, username, keepers.get(job.job_id)) for job in jobs]
    return ApprovalsPage(
        pending=pending, total=total, recent=recent, listing=listing, first_shown=first_shown
    )


def approval_item(job_id: str, *, username: str) -> PendingApproval | None:
    """One approval row after an action: the job as it is now, with its decision if any."""
    job = Job.objects.filter(job_id=job_id).first()
    if job is None:
        return None
    item = _pending(job, username, _keepers([job]).get(job.job_id))
    item.decision = Approval.objects.filter(job_id=job_id).order_by("-decided_at").first()
    return item


# --- views ------------------------------------------------------------------------------------


@page(permission="inbox.view_approval")
def approvals(request: HttpRequest) -> HttpResponse:
    username = request.user.get_username()
    target = request.htmx.target if request.htmx else None
    queue = approvals_page(username=username, params=request.GET)
    links = keyset.links(request.GET, queue.listing, top=queue.listing.at_start)
    context = {"page": queue, **links, "poll_seconds": POLL_SECONDS, "bulk_max": BULK_MAX}
    if target == "approval-rows" and not request.htmx.history_restore_request:
        if request.GET.get("v") == queue.token:
            return HttpResponse(status=204)
        return render(request, f"{APPROVALS}#approval-rows", context)
    template = region_template(
        request, APPROVALS, ("approvals-queue", "pending-count"), default="approvals-queue"
    )
    return render(request, template, context)


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


# --- bulk decisions ---------------------------------------------------------------------------


@dataclass
class BulkDecision:
    """The ticked rows one bulk decision would decide, and the ones it may not, with why."""

    decidable: list[Job] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    more: bool = False


def bulk_decision(params: QueryDict, user: Any) -> BulkDecision:
    """Split the ticked ids into what ``user`` may decide now and what not (four eyes, already
    decided, gone, not a delete, no permission): the preview and the action use this."""
    ids = list(dict.fromkeys(params.getlist("job_ids")))[: BULK_MAX * 2]
    jobs = {job.job_id: job for job in Job.objects.filter(job_id__in=ids)}
    username = user.get_username()
    may = user.has_perm(svc.PERMISSION)
    needs = set(_approval_types())
    result = BulkDecision()
    for job_id in ids:
        job = jobs.get(job_id)
        if job is None:
            result.refused.append((job_id, "no such job"))
        elif job.job_type not in needs:
            result.refused.append((job_id, f"a {job.job_type} needs no approval"))
        elif job.state != JobState.CREATED or job.approval_id:
            result.refused.append((job_id, f"already decided: it is {job.state}"))
        elif not may:
            result.refused.append((job_id, f"you lack the permission {svc.PERMISSION}"))
        elif job.requested_by == username:
            result.refused.append(
                (job_id, "you requested it: someone else must decide (four eyes)")
            )
        elif len(result.decidable) >= BULK_MAX:
            result.more = True
        else:
            result.decidable.append(job)
    return result


@page(permission="inbox.view_approval")
def approvals_bulk_preview(request: HttpRequest) -> HttpResponse:
    """Which ticked rows a bulk approve / deny would decide, and which not and why (read only)."""
    context = {"preview": bulk_decision(request.GET, request.user), "bulk_max": BULK_MAX}
    return render(request, f"{APPROVALS}#approvals-bulk-preview", context)


@action(permission="inbox.approve_delete", region="approvals-bulk-result", needs_reason=True)
def approvals_bulk(request: HttpRequest, *, act: ActionContext) -> HttpResponse:
    """Approve or deny (``decision``) every ticked row this user may decide, each through
    ``inbox.approvals`` in its own savepoint: one refusal (a race, four eyes) skips that row
    and is named; the others are decided."""
    decision = request.POST.get("decision", "")
    preview = bulk_decision(request.POST, request.user)
    outcome = BulkOutcome(refused=[f"{job_id}: {why}" for job_id, why in preview.refused])
    if act.should_act:
        if decision not in ("approve", "deny"):
            act.refuse("Choose approve or deny.", status=400)
        elif not preview.decidable:
            act.refuse("Nothing to do: none of the ticked rows is yours to decide.")
        else:
            decide = svc.approve_delete if decision == "approve" else svc.deny_delete

            def decide_each() -> BulkOutcome:
                for job in preview.decidable:
                    try:
                        with transaction.atomic():
                            decide(job.job_id, approver=request.user, reason=act.reason)
                    except DomainError as exc:
                        outcome.refused.append(f"{job.job_id}: {exc}")
                    else:
                        outcome.done.append(job.job_id)
                return outcome

            act.perform(decide_each, done="")
            if act.status == 200:
                verb = "Approved" if decision == "approve" else "Denied"
                skipped = f"; {len(outcome.refused)} not decided" if outcome.refused else ""
                act.message = act.outcome = f"{verb} {len(outcome.done)} delete(s){skipped}."
    context = {"act": act, "outcome": outcome}
    response = render(request, f"{APPROVALS}#approvals-bulk-result", context)
    if act.should_act and outcome.done:
        trigger_client_event(response, "approvals-changed")
        trigger_client_event(response, "approvals-decided")
    return response
