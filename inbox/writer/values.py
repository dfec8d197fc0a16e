from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from audit.events import Event, PairedEvents, RowEvent
from inbox.errors import InboxError, InvalidTransition
from inbox.models import Job, JobState

log = logging.getLogger("inbox.transitions")

S = JobState


# Fields an admin may edit by hand (recorded as ADMIN_EDIT). Everything else is either
# immutable, or owned by the transitions below.
EDITABLE_FIELDS = ("note", "max_attempts")


CLEARED_CLAIM: dict[str, Any] = {"worker_id": "", "claim_id": "", "lease_until": None}


# States in which a job may still be unsealed (the seal is made on CREATED → READY).
UNSEALED_STATES = (S.CREATED, S.REJECTED)


def lease_end(now: dt.datetime, lease_seconds: int | float) -> dt.datetime:
    if lease_seconds <= 0:
        raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
    return now + dt.timedelta(seconds=lease_seconds)


@dataclass(frozen=True, slots=True)
class Held:
    """A row a transition targets: its id and, for fenced writes, the claim the caller holds
    (a worker) or saw (a sweep). ``job`` is the caller's copy, updated in place if it moves."""

    job_id: str
    claim_id: str | None = None
    job: Job | None = None

    @classmethod
    def of(cls, job: Job) -> Held:
        return cls(job.job_id, job.claim_id, job)


class Moved(set):
    """The ids a transition moved (a set, so batch callers compare it directly), with the moved
    rows in input order and every refusal, already recorded where a refusal must leave a record
    (a stale holder's write, a drifted seal).

    ``undone`` lists the ids of a fail-closed batch: a fingerprint drift anywhere undid it all
    and nothing was written; each row must be tried again on its own (a batch of one), which
    refuses exactly the drifted one and records why.
    """

    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[Job] = []
        self.refused: dict[str, InboxError] = {}
        self.undone: list[str] = []

    def one(self) -> Job:
        """The moved job of a batch of one, or its refusal raised."""
        if self.jobs:
            return self.jobs[0]
        if self.refused:
            raise next(iter(self.refused.values()))
        raise InvalidTransition("?", None, "?", "nothing to move")  # pragma: no cover


class Sql(str):
    """A SQL expression assigned by an UPDATE (evaluated per row, e.g. ``attempt_count + 1``)."""


@dataclass(frozen=True, slots=True)
class DbClock:
    """The database's clock read by the UPDATE itself (PostgreSQL's ``statement_timestamp()``),
    plus an offset: what ``now`` is for a transition that needs no time in Python before its
    write. It saves the round trip of reading the clock first; the moved rows' ``updated_at``
    then tells the events the time."""

    offset: dt.timedelta = dt.timedelta(0)

    def __add__(self, delta: dt.timedelta) -> DbClock:
        return DbClock(self.offset + delta)


@dataclass(frozen=True, slots=True)
class Pick:
    """The rows a claim takes, chosen inside its UPDATE: the next ``limit`` READY jobs of
    ``scope`` in claim order whose ``run_after`` has come. On PostgreSQL they are locked with
    SKIP LOCKED in a materialized CTE (concurrent claimers take different rows, and the planner
    cannot update more rows than the limit); SQLite's IMMEDIATE transaction serialises
    claimers. ``unless_paused``: nothing while the scope is paused (checked in the same
    statement, so a pause committed before it is never missed)."""

    scope: str
    limit: int
    unless_paused: bool = False


class BatchRefused(Exception):
    """A batch step that runs inside its caller's transaction without a savepoint of its own
    (``claim_and_begin_jobs``, ``finish_jobs(savepoint=False)``) could not go as one: a sealed
    row drifted, or the caller's check refused a row. Raised out of the caller's transaction,
    which rolls back, so nothing of the step is kept; the caller then goes step by step, which
    refuses and records each row on its own."""


# What builds a moved row's events: (the row after the write, the row before when it was read
# under lock, the database time).
EventsFor = Callable[[Job, "Job | None", dt.datetime], list[Event]]


Fence = Literal["holder", "observed"]


LeaseGuard = Literal["running", "lapsed"]


class BatchDrift(BatchRefused):
    """A fail-closed batch found a drifted row: the caller's atomic block undoes it all."""

    def __init__(self, job_ids: list[str]) -> None:
        self.job_ids = job_ids
        super().__init__(", ".join(job_ids))


@dataclass(frozen=True)
class Move:
    """A move of ``held`` rows ``allowed`` → ``to`` (None: the state stays) in one guarded
    UPDATE, as ``engine.run`` makes it.

    One transaction (a savepoint when the caller already holds one) per attempt:
    - ``fence``: "holder" — the row's ``claim_id`` must be the caller's, else ``LostClaim``
      and a STALE_WRITE_REJECTED event; "observed" — it must still be the claim the caller saw.
    - ``lease``: the lease must still run ("running") or have lapsed ("lapsed") at ``now``.
    - ``seal``: the fingerprint must still hold (recomputed from what the UPDATE returns); a
      drift undoes the attempt, is recorded once, and the others are moved in a new attempt —
      or, with ``fail_closed``, ``BatchDrift`` is raised and the caller drops the whole batch.
    - ``prior``: reads the rows under lock first (``lock_jobs``), for transitions whose events
      or ``check`` need the values before the write; refusals are then named from them.
    - ``pick``: the UPDATE chooses its rows itself instead of ``held`` (the claim; see
      ``Pick``), leaving out the ids a drift already refused.
    - ``savepoint``: False when the caller's own transaction is the undo (its one-transaction
      batch steps): no savepoint round trips, and a drift raises ``BatchRefused`` out of it.
    - ``values``: the field effects, or a function of ``now`` giving them (``now`` may be the
      statement's own clock, ``DbClock``, when nothing needs the time before the write).
    - ``events_ahead``: the events depend only on the caller's copy of each row, not on what
      the write returns, so on PostgreSQL they are written by the UPDATE statement itself (a
      data-modifying CTE: only the rows it moved get theirs).
    - ``row_events``: the events as SQL over each moved row (``audit.events.RowEvent``),
      written by the UPDATE statement itself on PostgreSQL; ``events`` builds the same in
      Python elsewhere.
    - ``accept``: the caller's check of each moved row before anything is recorded; a row it
      refuses raises ``BatchRefused`` (only with ``savepoint=False``: the caller's rollback
      is the undo).
    - ``full``: return whole rows (payload included); otherwise only the seal's columns and the
      assigned ones (the executor's batches update their own copies in place).
    - ``why`` names a failed lease/observed-claim guard; ``refusal`` lets a caller name a
      refusal its own way (``renew_leases``).
    - ``paired``: the events known ahead in their compact form (``PairedEvents``, from the
      rows aimed at), written by the UPDATE statement itself on PostgreSQL instead of
      ``events`` (which builds the same elsewhere); with ``events_ahead``'s conditions.
    - ``reported``: a holder's outcome as it reported it, per row aimed at. Such a report
      refused because the claim is no longer the holder's, or because its lease lapsed and
      the sweep already moved the job, is recorded with the refusal (STALE_WRITE_REJECTED).
    """

    held: Sequence[Held]
    to: str | None
    allowed: tuple[str, ...]
    actor: str
    events: EventsFor
    values: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None = None
    fence: Fence | None = None
    lease: LeaseGuard | None = None
    seal: bool = True
    prior: Callable[[], Mapping[str, Job]] | None = None
    pick: Pick | None = None
    check: Callable[[Job, dt.datetime], None] | None = None
    fail_closed: bool = False
    savepoint: bool = True
    events_ahead: bool = False
    row_events: Sequence[RowEvent] | None = None
    accept: Callable[[Job], bool] | None = None
    full: bool = True
    why: str = ""
    refusal: Callable[[Job, Held, dt.datetime], InboxError | None] | None = None
    at: dt.datetime | None = None
    paired: Callable[[Sequence[Held]], PairedEvents] | None = None
    reported: Callable[[Held], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.allowed, tuple):
            object.__setattr__(self, "allowed", tuple(self.allowed))


@dataclass(frozen=True)
class Outcome:
    """A handler's result for ``finish_jobs``: the job as its holder knows it and the outcome."""

    job: Job
    to: str
    result_code: str
    error: str = ""
    executed_detail: Mapping[str, Any] | None = field(default_factory=dict)
    detail: Mapping[str, Any] | None = None
    # With ``to`` READY: a retry, not claimed before the database time plus this many seconds.
    retry_in: float | None = None


def undone_batch(jobs: Sequence[Job], exc: BatchDrift) -> Moved:
    log.warning("batch undone: job %s drifted; each job goes on its own", exc)
    moved = Moved()
    moved.undone = [job.job_id for job in jobs]
    return moved
