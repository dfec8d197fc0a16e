"""The executor's writes as steps: each one transaction, and what a step whose response was
lost had committed, read back from the database."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inbox import transitions
from inbox.models import Job
from inbox.transitions import Moved, Outcome


def finish_any(outcomes: Sequence[Outcome], *, actor: str) -> Moved:
    """Record ``outcomes`` (``finish_jobs``); nothing to record writes nothing."""
    return transitions.finish_jobs(outcomes, actor=actor) if outcomes else Moved()


def begin_any(
    ready: Sequence[Job],
    *,
    actor: str,
    lease_seconds: int,
    authorized: Mapping[str, Mapping[str, Any]],
) -> Moved:
    """Begin ``ready`` (``begin_jobs``); nothing to begin writes nothing."""
    if not ready:
        return Moved()
    return transitions.begin_jobs(
        ready, actor=actor, lease_seconds=lease_seconds, authorized=authorized
    )


def holding(jobs: Sequence[Job], states: Mapping[str, str]) -> set[str]:
    """Which of ``jobs`` are in their target state under our claim (a step's commit check)."""
    if not jobs:
        return set()
    rows = Job.objects.filter(job_id__in=[j.job_id for j in jobs]).values_list(
        "job_id", "state", "claim_id"
    )
    claims = {j.job_id: j.claim_id for j in jobs}
    return {jid for jid, state, claim in rows if state == states[jid] and claim == claims[jid]}


def as_moved(found: set[str], items: Sequence[Any]) -> Moved:
    """What a step whose response was lost moved, read back from the database."""
    moved = Moved()
    for item in items:
        job = item.job if isinstance(item, Outcome) else item
        if job.job_id in found:
            moved.add(job.job_id)
            moved.jobs.append(job)
    return moved
