"""Disposing a served group's member: its disposition, its effect, and what follows.

The consolidator's ``apply`` (for the bundled one: requesting a DELETE job) runs inside the same
transaction as the disposition, so a disposition and its effect commit together or not at all.
The member that was its group's last undisposed one finishes the group, and a finished group
that leaves nothing open closes the run complete — all in that transaction.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Exists, OuterRef

from core import faults
from runs.consolidators import Consolidator, get_consolidator
from runs.errors import InvalidRunTransition
from runs.models import Disposition, Group, GroupStatus, Member, Run
from runs.writer import events
from runs.writer.close import close_if_finished
from runs.writer.guard import as_owner, write
from runs.writer.lease import effectively_active_q, refresh_lease
from runs.writer.rows import run_id_of


@dataclass
class Disposed:
    """What ``dispose_member`` did."""

    member: Member
    # False when the member already had this very disposition (a replay; nothing written).
    changed: bool = True
    # The member was its group's last undisposed one: the group is done.
    group_done: bool = False
    # ... and with it nothing was left open: the run closed complete.
    run_closed: bool = False
    applied: dict[str, Any] = field(default_factory=dict)


def dispose_member(
    *,
    member_id: int,
    owner: str,
    disposition: str,
    consolidator: Consolidator | None,
    at: dt.datetime | None,
) -> Disposed:
    """Give the member its disposition, apply it and refresh the lease, for its run's owner."""
    if disposition not in Disposition.values:
        raise ValueError(f"unknown disposition {disposition!r} ({', '.join(Disposition.values)})")
    consolidator = consolidator or get_consolidator()
    member_of = Member.objects.filter(id=member_id)
    run_id = run_id_of(member_of, "group__run_id", f"member {member_id}")
    what = f"dispose member {member_id}"
    detail = {"member_id": member_id, "disposition": disposition}
    with as_owner(run_id, owner=owner, what=what, detail=detail, at=at) as (run, now):
        # Read under the run lock: an earlier read may predate a concurrent write.
        member = Member.objects.select_related("group").get(id=member_id)
        group = member.group
        if not _disposable(member, disposition):
            return Disposed(member=member, changed=False)  # a replay: no write, no lease
        applied = _dispose(run, member, disposition, owner=owner, now=now, apply=consolidator)
        group_done = _finish_group(group)
        expires_at = refresh_lease(run, owner, now)
        member.disposition = disposition
        member.disposed_at = now
        events.record_one(
            events.member_disposed(
                member,
                group=group,
                group_done=group_done,
                applied=applied,
                owner=owner,
                expires_at=expires_at,
                at=now,
            )
        )
        run_closed = group_done and close_if_finished(run.run_id, actor=owner, now=now)
    if group_done:
        group.status = GroupStatus.DONE
    return Disposed(member=member, group_done=group_done, run_closed=run_closed, applied=applied)


def _disposable(member: Member, disposition: str) -> bool:
    """True if ``member`` may take ``disposition`` now, False for a replay; else refused."""
    if member.disposition is not None:
        if member.disposition == disposition:
            return False
        raise InvalidRunTransition(
            f"member {member.id}", member.disposition, disposition, "already disposed"
        )
    group = member.group
    if group.status != GroupStatus.SERVED:
        raise InvalidRunTransition(
            f"member {member.id}",
            None,
            disposition,
            f"its group {group.seq} is {group.status}; only a served group's members "
            "can be disposed",
        )
    return True


def _dispose(
    run: Run,
    member: Member,
    disposition: str,
    *,
    owner: str,
    now: dt.datetime,
    apply: Consolidator,
) -> dict[str, Any]:
    """Write the disposition, then apply it; returns what applying produced (kept on the row)."""
    write(
        Member.objects.filter(
            effectively_active_q(now, "group__run__"),
            id=member.id,
            disposition__isnull=True,
            group__status=GroupStatus.SERVED,
            group__run__worker_id=owner,
        ),
        {"disposition": disposition, "disposed_at": now},
        what=f"member {member.id}",
        frm=None,
        to=disposition,
    )
    faults.point("dispose")
    applied = apply.apply(run=run, group=member.group, member=member, disposition=disposition)
    if applied:
        member.detail = {**member.detail, "applied": applied}
        write(
            Member.objects.filter(id=member.id, disposition=disposition),
            {"detail": member.detail},
            what=f"member {member.id}",
            frm=disposition,
            to=disposition,
        )
    return applied or {}


def _finish_group(group: Group) -> bool:
    """served → done when no member is left undisposed; True only if this call changed it."""
    undisposed = Member.objects.filter(group_id=OuterRef("id"), disposition__isnull=True)
    return bool(
        write(
            Group.objects.filter(id=group.id, status=GroupStatus.SERVED).filter(
                ~Exists(undisposed)
            ),
            {"status": GroupStatus.DONE},
            what=f"group {group.id}",
            frm=GroupStatus.SERVED,
            to=GroupStatus.DONE,
            exactly_one=False,
        )
    )
