"""What a bulk action did: the jobs it moved and the ones it refused, from one set-based call.

Bulk retry and bulk reconcile on the jobs page and "reconcile all unambiguous" on the reconcile
page each make one service call over all their jobs (``transitions.retry_jobs``,
``reconcile.apply``); the service writes what it may and names every refusal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from inbox.transitions import Moved


@dataclass
class BulkOutcome:
    """Which jobs a bulk action moved, and which it could not (``"<job id>: <why>"``)."""

    done: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, moved: Moved) -> BulkOutcome:
        return cls(
            done=[job.job_id for job in moved.jobs],
            refused=[f"{job_id}: {exc}" for job_id, exc in moved.refused.items()],
        )

    @classmethod
    def listed(cls, done: Iterable[str], refused: Iterable[tuple[str, str]]) -> BulkOutcome:
        return cls(done=list(done), refused=[f"{job_id}: {why}" for job_id, why in refused])
