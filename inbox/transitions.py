"""The one writer of a job's state, claim and lease fields: the public face callers import.

Every change of a job row is one guarded ``UPDATE … WHERE <every guard> … RETURNING`` over
N ≥ 1 rows plus the INSERT of their audit events, in one transaction. The guards are the
allowed from-states, the claim the caller must hold (a worker's write) or the claim it saw (a
sweep), the lease (running or lapsed) and the seal, recomputed from what the UPDATE returns.
Refusals are written down in one place: a stale holder's write (STALE_WRITE_REJECTED), a
fingerprint drift (FINGERPRINT_DRIFT), an illegal transition (``InvalidTransition`` naming the
job, the from-state and the to-state; nothing written).

The operations come in a set form (``claim_next_jobs``, ``begin_jobs``, ``finish_jobs``…) and
a one-job form that is a batch of one. Times come from the database clock; every operation
takes ``at=`` so tests can pin it. Callers are the executor, the console, admin actions and
management commands; nothing else writes these fields or issues an UPDATE of the job table.

The engine lives in ``inbox.writer``, one subject per module:

- ``values``: the vocabulary (``Held``, ``Moved``, ``Move``, ``Pick``, ``Outcome``…);
- ``engine``: the guarded move and its attempts; ``plan``: what an attempt writes and how its
  result is concluded; ``refusals``: how a refusal is named and recorded;
- ``sql``: the statement text both databases share; ``postgresql`` and ``sqlite``: each
  database's own statements; ``rows``: rows to models and back, and the seal;
- ``events``: each event's shape, defined once for Python and for SQL;
- ``create``, ``claims``, ``outcomes``, ``recovery``, ``actions``: the operations by subject.
"""

from __future__ import annotations

from core.clock import db_now
from inbox.writer.actions import (
    CANCELLABLE,
    cancel_job,
    cancel_jobs,
    edit_job_fields,
    reconcile_job,
    reconcile_jobs,
    retry_job,
    retry_jobs,
    set_result_code,
    set_result_codes,
)
from inbox.writer.claims import (
    begin_job,
    begin_jobs,
    claim_and_begin_jobs,
    claim_job,
    claim_next_jobs,
    release_job,
    release_jobs,
    renew_lease,
    renew_leases,
)
from inbox.writer.create import (
    Created,
    build_job,
    create_job,
    create_jobs,
    mark_ready,
    reject_job,
    reject_jobs,
)
from inbox.writer.outcomes import (
    complete_job,
    fail_job,
    finish_and_claim_jobs,
    finish_jobs,
    mark_outcome_unknown,
    schedule_retry,
)
from inbox.writer.recovery import (
    SWEEP_TRANSACTION_SECONDS,
    RecoveryReport,
    lapsed_outcome,
    recover_stale_claims,
    recover_stale_claims_report,
)
from inbox.writer.rows import fingerprint_of, fingerprint_ok, lock_jobs
from inbox.writer.sql import CLAIM_ORDER_SQL
from inbox.writer.values import (
    CLEARED_CLAIM,
    EDITABLE_FIELDS,
    UNSEALED_STATES,
    BatchRefused,
    Held,
    Moved,
    Outcome,
    Pick,
)

__all__ = [
    "CANCELLABLE",
    "CLAIM_ORDER_SQL",
    "CLEARED_CLAIM",
    "EDITABLE_FIELDS",
    "SWEEP_TRANSACTION_SECONDS",
    "UNSEALED_STATES",
    "BatchRefused",
    "Created",
    "Held",
    "Moved",
    "Outcome",
    "Pick",
    "RecoveryReport",
    "begin_job",
    "begin_jobs",
    "build_job",
    "cancel_job",
    "cancel_jobs",
    "claim_and_begin_jobs",
    "claim_job",
    "claim_next_jobs",
    "complete_job",
    "create_job",
    "create_jobs",
    "db_now",
    "edit_job_fields",
    "fail_job",
    "fingerprint_of",
    "fingerprint_ok",
    "finish_and_claim_jobs",
    "finish_jobs",
    "lapsed_outcome",
    "lock_jobs",
    "mark_outcome_unknown",
    "mark_ready",
    "reconcile_job",
    "reconcile_jobs",
    "recover_stale_claims",
    "recover_stale_claims_report",
    "reject_job",
    "reject_jobs",
    "release_job",
    "release_jobs",
    "renew_lease",
    "renew_leases",
    "retry_job",
    "retry_jobs",
    "schedule_retry",
    "set_result_code",
    "set_result_codes",
]
