"""The one loop of the console's bulk actions: act on each job, collect the refusals.

Bulk retry and bulk reconcile on the jobs page and "reconcile all unambiguous" on the reconcile
page all go through ``act_on_each``. When set-based services replace the per-job calls, this is
the function to change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from core.errors import DomainError


@dataclass
class BulkOutcome:
    """Which jobs a bulk action moved, and which it could not (``"<job id>: <why>"``)."""

    done: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def act_on_each(job_ids: Iterable[str], act_on: Callable[[str], object]) -> BulkOutcome:
    """Call ``act_on(job_id)`` for each id in order; a refusal is reported, not raised.

    A refusal is a job that changed since the operator's preview (a lost race): the service
    wrote nothing for it and the others still go ahead.
    """
    outcome = BulkOutcome()
    for job_id in job_ids:
        try:
            act_on(job_id)
        except DomainError as exc:
            outcome.refused.append(f"{job_id}: {exc}")
        else:
            outcome.done.append(job_id)
    return outcome
