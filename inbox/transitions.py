"""The one writer of Job state, claim and lease fields (DESIGN §1.3–§1.6).

Every change of a job row goes through ``_move``: one guarded ``UPDATE … WHERE <every guard>
… RETURNING`` over N ≥ 1 rows plus one INSERT of their audit events, in one transaction. The
guards are the allowed from-states, the claim the caller must hold (a worker's write) or the
claim it saw (a sweep), the lease (running or lapsed) and the seal: the fingerprint is
recomputed from the immutable columns and payload keys the UPDATE returns. ``_move`` also writes
down every refusal in one place: a stale holder's write (STALE_WRITE_REJECTED), a fingerprint
drift (FINGERPRINT_DRIFT) and an illegal transition (an ``InvalidTransition`` naming the job,
the from-state and the to-state, nothing written). A move into a finished state also adds its
rows to the throughput chart's per-minute counts (``FinishedCount``), in the same statement.

The public functions are thin callers — each names its from-states, to-state, field effects and
events — with a set form (``claim_next_jobs``, ``begin_jobs``, ``finish_jobs``,
``renew_leases``, ``release_jobs``, ``retry_jobs``, ``reconcile_jobs``…) and a one-job form that
is a batch of one. Times come from the database clock; every function takes ``at=`` so tests
can pin it. Callers: the executor, the console, admin actions and management commands; nothing
else writes these fields, and nothing else issues an UPDATE of the job table.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import logging
import operator
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.db.models.base import ModelState

from audit.events import (
    Event,
    PairedEvents,
    RowEvent,
    joined_insert_sql,
    paired_insert_sql,
    record_event,
    record_events,
    row_events_insert_sql,
)
from audit.models import AuditEvent, EventType
from core import faults
from core.clock import db_now, parse_sqlite_datetime
from core.db import bounded, locked, prepared_cursor
from core.errors import Busy
from core.paging import capped_count
from inbox.errors import (
    IdempotencyConflict,
    ImmutableFieldDrift,
    InboxError,
    InvalidTransition,
    JobNotFound,
    LostClaim,
)
from inbox.jobtypes import (
    IMMUTABLE_COLUMNS,
    IMMUTABLE_PAYLOAD_FIELDS,
    fingerprint_from,
    get_job_type,
    parse_run_after,
    registry,
    validate_job_document,
)
from inbox.models import FINISHED_STATES, HELD_STATES, FinishedCount, Job, JobState, ScopePause

__all__ = [
    "EDITABLE_FIELDS",
    "BatchRefused",
    "Created",
    "Held",
    "Moved",
    "Outcome",
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

log = logging.getLogger(__name__)

S = JobState
# Fields an admin may edit by hand (recorded as ADMIN_EDIT). Everything else is either
# immutable, or owned by the transitions below.
EDITABLE_FIELDS = ("note", "max_attempts")
CLEARED_CLAIM: dict[str, Any] = {"worker_id": "", "claim_id": "", "lease_until": None}
# States in which a job may still be unsealed (the seal is made on CREATED → READY).
UNSEALED_STATES = (S.CREATED, S.REJECTED)
# The event that records each outcome state.
_FINISH_EVENT = {
    S.SUCCEEDED: EventType.SUCCEEDED,
    S.FAILED: EventType.FAILED,
    S.OUTCOME_UNKNOWN: EventType.OUTCOME_UNKNOWN,
    # A failed attempt with a retry left (``schedule_retry``): back to the queue, deferred.
    S.READY: EventType.RETRY_SCHEDULED,
}
_RANDOM_TOKEN_SQL = {
    "postgresql": "replace(gen_random_uuid()::text, '-', '')",
    "sqlite": "lower(hex(randomblob(16)))",
}
_COLUMNS = tuple(f.column for f in Job._meta.concrete_fields)


def _lease(now: dt.datetime, lease_seconds: int | float) -> dt.datetime:
    if lease_seconds <= 0:
        raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
    return now + dt.timedelta(seconds=lease_seconds)


# --- fingerprints -----------------------------------------------------------------------------


def fingerprint_of(job: Job) -> str:
    """Recompute a job's fingerprint from its stored columns and payload."""
    return fingerprint_from(_IMMUTABLE_OF(job), job.payload or {})


def fingerprint_ok(job: Job) -> bool:
    """True while the job is unsealed (CREATED/REJECTED before READY) or its seal still holds."""
    if not job.fingerprint and job.state in UNSEALED_STATES:
        return True
    return job.fingerprint == fingerprint_of(job)


# --- the one guarded write --------------------------------------------------------------------


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
    rows in input order and every refusal, already recorded where DESIGN asks for a record.

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
class _DbClock:
    """The database's clock read by the UPDATE itself (PostgreSQL's ``statement_timestamp()``),
    plus an offset: what ``now`` is for a transition that needs no time in Python before its
    write. It saves the round trip of reading the clock first; the moved rows' ``updated_at``
    then tells the events the time."""

    offset: dt.timedelta = dt.timedelta(0)

    def __add__(self, delta: dt.timedelta) -> _DbClock:
        return _DbClock(self.offset + delta)


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


class _BatchDrift(BatchRefused):
    """A fail-closed batch found a drifted row: the caller's atomic block undoes it all."""

    def __init__(self, job_ids: list[str]) -> None:
        self.job_ids = job_ids
        super().__init__(", ".join(job_ids))


def lock_jobs(job_ids: Iterable[str], *, skip_locked: bool = False) -> dict[str, Job]:
    """Load jobs for a write in this transaction, locked (``core.db.locked``). With
    ``skip_locked`` a row another transaction holds right now is left out (the writer then
    refuses it as busy) instead of waited on."""
    qs = Job.objects.filter(job_id__in=list(job_ids))
    return {job.job_id: job for job in locked(qs, skip_locked=skip_locked)}


@dataclass(frozen=True)
class _Move:
    """One move as ``_move`` is asked for it (its arguments; see ``_move``)."""

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


def _move(
    held: Sequence[Held],
    *,
    to: str | None,
    allowed: Iterable[str],
    actor: str,
    events: EventsFor,
    values: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None = None,
    fence: Fence | None = None,
    lease: LeaseGuard | None = None,
    seal: bool = True,
    prior: Callable[[], Mapping[str, Job]] | None = None,
    pick: Pick | None = None,
    check: Callable[[Job, dt.datetime], None] | None = None,
    fail_closed: bool = False,
    savepoint: bool = True,
    events_ahead: bool = False,
    row_events: Sequence[RowEvent] | None = None,
    accept: Callable[[Job], bool] | None = None,
    full: bool = True,
    why: str = "",
    refusal: Callable[[Job, Held, dt.datetime], InboxError | None] | None = None,
    at: dt.datetime | None = None,
    paired: Callable[[Sequence[Held]], PairedEvents] | None = None,
) -> Moved:
    """Move ``held`` rows ``allowed`` → ``to`` (None: the state stays) in one guarded UPDATE.

    One transaction (a savepoint when the caller already holds one) per attempt:
    - ``fence``: "holder" — the row's ``claim_id`` must be the caller's, else ``LostClaim``
      and a STALE_WRITE_REJECTED event; "observed" — it must still be the claim the caller saw.
    - ``lease``: the lease must still run ("running") or have lapsed ("lapsed") at ``now``.
    - ``seal``: the fingerprint must still hold (recomputed from what the UPDATE returns); a
      drift undoes the attempt, is recorded once, and the others are moved in a new attempt —
      or, with ``fail_closed``, ``_BatchDrift`` is raised and the caller drops the whole batch.
    - ``prior``: reads the rows under lock first (``lock_jobs``), for transitions whose events
      or ``check`` need the values before the write; refusals are then named from them.
    - ``pick``: the UPDATE chooses its rows itself instead of ``held`` (the claim; see
      ``Pick``), leaving out the ids a drift already refused.
    - ``savepoint``: False when the caller's own transaction is the undo (its one-transaction
      batch steps): no savepoint round trips, and a drift raises ``BatchRefused`` out of it.
    - ``values``: the field effects, or a function of ``now`` giving them (``now`` may be the
      statement's own clock, ``_DbClock``, when nothing needs the time before the write).
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
    """
    move = _Move(
        held,
        to,
        tuple(allowed),
        actor,
        events,
        values,
        fence,
        lease,
        seal,
        prior,
        pick,
        check,
        fail_closed,
        savepoint,
        events_ahead,
        row_events,
        accept,
        full,
        why,
        refusal,
        at,
        paired,
    )
    return _moves([move])[0]


def _moves(moves: Sequence[_Move]) -> list[Moved]:
    """Run ``moves`` (one, or several in one statement: see ``_together``)."""
    if not moves[0].held and moves[0].pick is None and len(moves) == 1:
        return [Moved()]
    refused: dict[str, InboxError] = {}
    drifted: list[Job] = []
    excluded: list[str] = []
    move = moves[0]
    while True:
        try:
            subject = _subject(move.held)
            with bounded(subject), transaction.atomic(savepoint=move.savepoint):
                plans = [_plan(m, excluded if len(moves) == 1 else []) for m in moves]
                returned = _write(plans)
                attempts = [_conclude(p, r) for p, r in zip(plans, returned, strict=True)]
        except _BatchDrift as exc:
            if move.fail_closed or not move.savepoint or len(moves) > 1:
                raise
            for job in Job.objects.filter(job_id__in=exc.job_ids):
                refused[job.job_id] = ImmutableFieldDrift(
                    job.job_id, job.fingerprint, fingerprint_of(job)
                )
                drifted.append(job)
            excluded += exc.job_ids
            continue
        break
    results = []
    for n, (m, attempt) in enumerate(zip(moves, attempts, strict=True)):
        rows, attempt_refused, stale, attempt_drifted, targets = attempt
        all_refused = {**refused, **attempt_refused} if n == 0 else attempt_refused
        # Refusals are written after the transition's own transaction: nothing of it is kept.
        for job, item in stale:
            _record_stale_write(job, m.to or job.state, item.claim_id or "", m.actor, m.at)
        for job in [*(drifted if n == 0 else []), *attempt_drifted]:
            _record_drift(job, m.to or job.state, m.actor, m.at)
        result = Moved()
        for item in targets:
            if item.job_id in rows:
                result.add(item.job_id)
                result.jobs.append(rows[item.job_id][0])
            elif item.job_id in all_refused:
                result.refused[item.job_id] = all_refused[item.job_id]
        for job_id in excluded if n == 0 else ():
            result.refused.setdefault(job_id, all_refused[job_id])
        results.append(result)
    return results


@dataclass
class _Plan:
    """One attempt of a move up to its statement: the rows it aims at, what it assigns, what
    was refused before the write (``prior``), and the events that ride in the statement."""

    move: _Move
    now: Any
    assigned: dict[str, Any]
    targets: list[Held]
    candidates: list[Held]
    excluded: list[str]
    before_rows: Mapping[str, Job]
    refused: dict[str, InboxError] = field(default_factory=dict)
    stale: list[tuple[Job, Held]] = field(default_factory=list)
    drifted: list[Job] = field(default_factory=list)
    # Events written by the statement itself (PostgreSQL): known ahead, or derived in SQL.
    early: list[Event] | None = None
    derived: Sequence[RowEvent] | None = None
    paired: PairedEvents | None = None

    @property
    def writes(self) -> bool:
        return bool(self.candidates) or self.move.pick is not None


def _plan(move: _Move, excluded: list[str]) -> _Plan:
    """What an attempt of ``move`` will write, and what it refuses before writing."""
    pg = connection.vendor == "postgresql"
    # Nothing reads the time before the write: on PostgreSQL the UPDATE reads its own clock.
    own_clock = move.at is None and move.prior is None and move.check is None and pg
    now: Any = _DbClock() if own_clock else db_now(move.at)
    values = move.values
    assigned = dict(values(now) if callable(values) else values or {})
    targets = [item for item in move.held if item.job_id not in excluded]
    before_rows = move.prior() if move.prior is not None else {}
    plan = _Plan(move, now, assigned, targets, targets, excluded, before_rows)
    if move.prior is not None:
        plan.candidates = []
        unread = [item.job_id for item in targets if item.job_id not in before_rows]
        # A row the locked read left out exists but is held right now (skip-locked reads).
        busy = set(Job.objects.filter(job_id__in=unread).values_list("job_id", flat=True))
        for item in targets:
            before = before_rows.get(item.job_id)
            if item.job_id in busy:
                plan.refused[item.job_id] = Busy(
                    f"job {item.job_id!r}: a worker holds it right now; left for the next try"
                )
                continue
            error = _refusal(before, item, move, now)
            if error is None and move.check is not None:
                try:
                    move.check(before, now)
                except InvalidTransition as exc:
                    error = exc
            if error is None:
                plan.candidates.append(item)
                continue
            plan.refused[item.job_id] = error
            if _is_stale(error, before, item, move):
                plan.stale.append((before, item))
            elif isinstance(error, ImmutableFieldDrift) and before is not None:
                plan.drifted.append(before)
    # Events known before the write, or derived from its rows in SQL, ride in the UPDATE
    # statement (PostgreSQL).
    if pg and move.events_ahead and move.pick is None and move.prior is None:
        if move.paired is not None:
            plan.paired = move.paired(plan.candidates)
        else:
            plan.early = [
                e for item in plan.candidates for e in move.events(_copy(item), None, now)
            ]
    if pg and move.row_events:
        plan.derived = move.row_events
    return plan


def _conclude(
    plan: _Plan, returned: dict[str, list[Any]]
) -> tuple[
    dict[str, tuple[Job, Job | None]],
    dict[str, InboxError],
    list[tuple[Job, Held]],
    list[Job],
    list[Held],
]:
    """After the write: seals checked, copies brought up to date, refusals named, events
    recorded. Returns (moved rows with their prior row, refusals, stale holders to record,
    drifts to record, the rows aimed at, in order)."""
    move, now = plan.move, plan.now
    rows: dict[str, tuple[Job, Job | None]] = {}
    targets, candidates = plan.targets, plan.candidates
    if plan.writes:
        if move.pick is not None:
            # What the UPDATE chose, in claim order (RETURNING promises no order).
            order = sorted(returned.values(), key=lambda row: (row[_CREATED], row[_JOB_ID]))
            targets = candidates = [Held(row[_JOB_ID]) for row in order]
        # A picked row left a sealed state (READY): it must carry its seal.
        bad = [
            job_id
            for job_id, row in returned.items()
            if move.seal and not _sealed(row, required=move.pick is not None)
        ]
        if bad:
            raise _BatchDrift(bad)
        if isinstance(now, _DbClock) and returned:
            # The statement's time, as the moved rows' updated_at tells it.
            now = next(iter(returned.values()))[_UPDATED]
        changed = [*plan.assigned, "state", "updated_at"]
        for item in candidates:
            row = returned.get(item.job_id)
            if row is not None:
                after = _job_of(row) if item.job is None else _into(item.job, row, changed)
                rows[item.job_id] = (after, plan.before_rows.get(item.job_id))
        missing = [item for item in candidates if item.job_id not in returned]
        if missing and move.prior is not None:
            for item in missing:
                plan.refused[item.job_id] = _invalid(
                    item.job_id, plan.before_rows[item.job_id], move.to
                )
        elif missing:
            if isinstance(now, _DbClock):
                now = db_now()  # only a refusal needs the time in Python
            current = {j.job_id: j for j in Job.objects.filter(job_id__in=_ids(missing))}
            for item in missing:
                job = current.get(item.job_id)
                error = _refusal(job, item, move, now) or _invalid(item.job_id, job, move.to)
                plan.refused[item.job_id] = error
                if _is_stale(error, job, item, move):
                    plan.stale.append((job, item))
                elif isinstance(error, ImmutableFieldDrift) and job is not None:
                    plan.drifted.append(job)
    if move.accept is not None:
        for after, _before in rows.values():
            if not move.accept(after):
                raise BatchRefused(after.job_id)
    moved_events: list[Event] = []
    if plan.early is None and plan.derived is None and plan.paired is None:
        for item in targets:
            if item.job_id in rows:
                after, before = rows[item.job_id]
                moved_events.extend(move.events(after, before, now))
    if rows:
        # The write is made and accepted, not committed (the rows are locked): where the
        # fault tests stop or kill a worker.
        job_type = next(iter(rows.values()))[0].job_type
        for point in _fault_points(move.allowed, move.to):
            faults.point(f"{point}:{job_type}")
    record_events(moved_events)
    if rows and move.to in FINISHED_STATES and connection.vendor != "postgresql":
        _count_finished([after for after, _before in rows.values()])
    return rows, plan.refused, plan.stale, plan.drifted, targets


def _snapshot(job: Job) -> Job:
    """A shallow copy of a row as read, kept while the original is updated in place (a
    fraction of ``copy.copy``'s cost: no pickling protocol; the two share ``_state``)."""
    clone = Job.__new__(Job)
    clone.__dict__ = job.__dict__.copy()
    return clone


def _copy(item: Held) -> Job:
    """The caller's copy of a row (or a stub of its keys): what events known ahead are built
    from."""
    return item.job if item.job is not None else Job(job_id=item.job_id, claim_id=item.claim_id)


def _subject(held: Sequence[Held]) -> str:
    """How a refusal names the rows (a lock timeout's message)."""
    if len(held) == 1:
        return f"job {held[0].job_id!r}"
    return f"{len(held)} jobs" if held else "the jobs picked"


def _seal_payload_sql() -> str:
    """Only the payload keys a seal needs: a SAVE's payload carries its content (megabytes)."""
    if connection.vendor == "postgresql":
        pairs = ", ".join(f"'{k}', payload -> '{k}'" for k in IMMUTABLE_PAYLOAD_FIELDS)
        return f"jsonb_build_object({pairs})"
    pairs = ", ".join(f"'{k}', json_extract(payload, '$.{k}')" for k in IMMUTABLE_PAYLOAD_FIELDS)
    return f"json_object({pairs})"


def _write(plans: Sequence[_Plan]) -> list[dict[str, list[Any]]]:
    """The one statement of an attempt: each plan's guarded UPDATE with the events that ride
    in it; the returned rows by id, per plan.

    On PostgreSQL the UPDATEs and the events' INSERTs are data-modifying CTEs of one
    statement — one round trip however many plans (the executor's turn: its outcomes and its
    next claim). One statement text per shape (rows travel as array parameters), run through
    ``prepared_cursor``: PostgreSQL plans it once per connection. SQLite takes one plan at a
    time and writes the events after it (``_conclude``: no data-modifying CTEs there).
    """
    out: list[dict[str, list[Any]]] = [{} for _ in plans]
    active = [(n, plan) for n, plan in enumerate(plans) if plan.writes]
    if not active:
        return out
    if connection.vendor != "postgresql":
        if len(active) > 1:
            raise ValueError("SQLite writes one move per statement")
        n, plan = active[0]
        sql, params = _update_sql(plan, picked=None)
        with prepared_cursor() as cursor:
            cursor.execute(sql, params)
            out[n] = _rows_from(cursor.fetchall())
        return out
    ctes: list[str] = []
    params: list[Any] = []
    for n, plan in active:
        picked = None
        if plan.move.pick is not None:
            picked = f"picked{n}"
            chosen, pick_params = _pick_sql(plan.move.pick, plan.now, plan.excluded)
            ctes.append(f"{picked} AS MATERIALIZED ({chosen})")
            params += pick_params
        update, update_params = _update_sql(plan, picked=picked)
        ctes.append(f"m{n} AS ({update})")
        params += update_params
        if plan.early:
            insert, rows = joined_insert_sql(plan.early, rows=f"m{n}", time_column="updated_at")
            ctes.append(f"e{n} AS ({insert})")
            params.append(rows)
        elif plan.paired is not None and plan.candidates:
            ctes.append(f"e{n} AS ({paired_insert_sql(rows=f'm{n}', time_column='updated_at')})")
            params += plan.paired.params()
        elif plan.derived:
            insert = row_events_insert_sql(
                plan.derived, rows=f"m{n}", time_column="updated_at", order_by=_CLAIM_ORDER
            )
            ctes.append(f"e{n} AS ({insert})")
            params.append(plan.move.actor)
    ended = [f"m{n}" for n, plan in active if plan.move.to in FINISHED_STATES]
    if ended:
        ctes.append(f"f AS ({_count_finished_sql(ended)})")
        params.append(os.getpid())
    if len(active) == 1 and len(ctes) == 1:
        sql = update  # a plain UPDATE … RETURNING
    else:
        parts = " UNION ALL ".join(f"SELECT {n} AS part, m{n}.* FROM m{n}" for n, _p in active)
        sql = f"WITH {', '.join(ctes)} {parts}"
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    if sql is update:
        out[active[0][0]] = _rows_from(fetched)
        return out
    by_part: dict[int, list[Any]] = {n: [] for n, _p in active}
    for raw in fetched:
        by_part[raw[0]].append(raw[1:])
    for n, _plan in active:
        out[n] = _rows_from(by_part[n])
    return out


# --- the throughput counts (``FinishedCount``) ------------------------------------------------


def _count_finished_sql(moved: Sequence[str]) -> str:
    """PostgreSQL: the INSERT that adds the rows ``moved`` (CTE names) into finished states to
    this process's per-minute counts, as a CTE of the statement that moves them (no round trip
    of its own). One parameter: the shard."""
    table = FinishedCount._meta.db_table
    rows = " UNION ALL ".join(f"SELECT updated_at, scope, state FROM {name}" for name in moved)
    return (
        f"INSERT INTO {table} (minute, scope, state, shard, finished) "
        f"SELECT date_trunc('minute', updated_at, 'UTC'), scope, state, %s::integer, count(*) "
        f"FROM ({rows}) AS ended GROUP BY 1, 2, 3 "
        "ON CONFLICT (minute, scope, state, shard) "
        f"DO UPDATE SET finished = {table}.finished + EXCLUDED.finished"
    )


def _count_finished(jobs: Iterable[Job]) -> None:
    """SQLite: the same counts as ``_count_finished_sql``, from the moved rows, in the move's
    transaction."""
    counts: dict[tuple[dt.datetime, str, str], int] = {}
    for job in jobs:
        key = (job.updated_at.replace(second=0, microsecond=0), job.scope, str(job.state))
        counts[key] = counts.get(key, 0) + 1
    table = FinishedCount._meta.db_table
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (minute, scope, state, shard, finished) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (minute, scope, state, shard) "
            "DO UPDATE SET finished = finished + excluded.finished",
            [(adapt(m), scope, state, os.getpid(), n) for (m, scope, state), n in counts.items()],
        )


def _update_sql(plan: _Plan, *, picked: str | None) -> tuple[str, list[Any]]:
    """The guarded UPDATE … RETURNING of one plan: every guard in its WHERE clause. ``picked``
    names the CTE of ids a claim chose (PostgreSQL); without it a claim chooses inline."""
    move, now = plan.move, plan.now
    assignments = dict(plan.assigned)
    if move.to is not None:
        assignments["state"] = move.to
    assignments["updated_at"] = now
    sets, params = _assign(assignments)
    # ``state || ''`` keeps the planner on the primary key: every transition leaves a dead
    # entry in the state indexes, so on a busy queue "state = 'CLAIMED'" walks thousands.
    where = [f"state || '' IN ({', '.join(['%s'] * len(move.allowed))})"]
    params += list(move.allowed)
    if move.pick is not None:
        if picked is not None:
            where.append(f"job_id IN (SELECT job_id FROM {picked})")
        else:
            chosen, pick_params = _pick_sql(move.pick, now, plan.excluded)
            where.append(f"job_id IN ({chosen})")
            params += pick_params
    elif move.fence is not None:
        where.append(f"(job_id, claim_id) IN ({_pairs_sql()})")
        pairs = [{"j": t.job_id, "c": t.claim_id or ""} for t in plan.candidates]
        params.append(json.dumps(pairs))
    else:
        where.append(f"job_id IN ({_ids_sql()})")
        params.append(_ids_param([t.job_id for t in plan.candidates]))
    if move.lease is not None:
        clock, clock_params = _time_sql(now)
        where.append(f"lease_until {'>=' if move.lease == 'running' else '<'} {clock}")
        params += clock_params
    if move.seal and move.pick is None:
        # (A picked row is READY, so sealed: its seal is checked on what the UPDATE returns.)
        unsealed = ", ".join(f"'{s}'" for s in UNSEALED_STATES)
        where.append(f"(fingerprint <> '' OR state IN ({unsealed}))")
    # Copies of every row in hand: only what the write changed comes back.
    lean = not move.full and all(item.job is not None for item in plan.candidates)
    table = connection.ops.quote_name(Job._meta.db_table)
    sql = (
        f"UPDATE {table} SET {', '.join(sets)} WHERE {' AND '.join(where)} "
        f"{_returning(move.full, assignments if lean else None)}"
    )
    return sql, params


def _ids(items: Iterable[Held]) -> list[str]:
    return [item.job_id for item in items]


def _refusal(job: Job | None, item: Held, move: _Move, now: dt.datetime) -> InboxError | None:
    """Why ``job`` (as stored now) may not move, or None. The order is the contract: a stale
    holder hears that it lost the claim whatever state the new holder moved the job to."""
    if job is None:
        return JobNotFound(item.job_id)
    target = move.to or job.state
    if move.refusal is not None and (error := move.refusal(job, item, now)) is not None:
        return error
    if move.fence == "holder" and job.claim_id != item.claim_id:
        holder = job.worker_id or "nobody"
        return LostClaim(
            job.job_id,
            job.state,
            target,
            claim_id=item.claim_id or "",
            why=f"claim {item.claim_id} is no longer held (held by {holder})",
        )
    if job.state not in move.allowed:
        return InvalidTransition(
            job.job_id, job.state, target, f"allowed only from {', '.join(move.allowed)}"
        )
    if move.seal and not fingerprint_ok(job):
        return ImmutableFieldDrift(job.job_id, job.fingerprint, fingerprint_of(job))
    observed_lost = move.fence == "observed" and job.claim_id != item.claim_id
    lease_failed = (
        move.lease == "running" and (job.lease_until is None or job.lease_until < now)
    ) or (move.lease == "lapsed" and (job.lease_until is None or job.lease_until >= now))
    if observed_lost or lease_failed:
        return InvalidTransition(job.job_id, job.state, target, move.why or "lost a race")
    return None


def _is_stale(error: InboxError, job: Job | None, item: Held, move: _Move) -> bool:
    """A holder's write refused because the claim is no longer its own (a STALE_WRITE record);
    a lapsed lease under a claim still held is only awaiting the sweep."""
    if not isinstance(error, LostClaim) or move.fence != "holder" or job is None:
        return False
    return not (job.claim_id == item.claim_id and job.state in move.allowed)


def _invalid(job_id: str, job: Job | None, to: str | None) -> InboxError:
    if job is None:
        return JobNotFound(job_id)
    return InvalidTransition(job_id, job.state, to or job.state, "lost a race")


# Claim order, over a moved row ``r`` (the order a claim's events are written in).
_CLAIM_ORDER = "r.created_at, r.job_id"


def _pick_sql(pick: Pick, now: dt.datetime | _DbClock, excluded: Sequence[str]) -> tuple[str, list]:
    """The claim's choice of rows (see ``Pick``): a SELECT of job ids and its parameters."""
    clock, params = _time_sql(now)
    table = connection.ops.quote_name(Job._meta.db_table)
    pg = connection.vendor == "postgresql"
    scope, scope_params = (_literal(pick.scope), []) if pg else ("%s", [pick.scope])
    where = [
        "state = 'READY'",
        f"scope = {scope}",
        f"(run_after IS NULL OR run_after <= {clock})",
    ]
    params = [*scope_params, *params]
    if excluded:
        where.append(f"job_id NOT IN ({_ids_sql()})")
        params.append(_ids_param(list(excluded)))
    if pick.unless_paused:
        pauses = connection.ops.quote_name(ScopePause._meta.db_table)
        where.append(f"NOT EXISTS (SELECT 1 FROM {pauses} WHERE scope = {scope} AND paused)")
        params += scope_params
    if not pg:
        sql = (
            f"SELECT job_id FROM {table} WHERE {' AND '.join(where)} "
            "ORDER BY created_at, job_id LIMIT %s"
        )
        return sql, [*params, pick.limit]
    # PostgreSQL: the order only ``job_claim_order_idx`` provides (inbox 0012), the scope and
    # the limit in the text. No plan of the statement can then depend on a parameter's value
    # or pick another index, so PostgreSQL plans it once per connection, not per execution.
    sql = (
        f"SELECT job_id FROM {table} WHERE {' AND '.join(where)} "
        f"ORDER BY {CLAIM_ORDER_SQL}, job_id LIMIT {int(pick.limit)} FOR UPDATE SKIP LOCKED"
    )
    return sql, params


# The claim order on PostgreSQL: created_at as ``job_claim_order_idx`` holds it (inbox 0012).
CLAIM_ORDER_SQL = "(created_at AT TIME ZONE 'UTC')"


@functools.lru_cache(maxsize=256)
def _literal(value: str) -> str:
    """``value`` as a quoted SQL literal for a PostgreSQL statement text that still goes
    through ``%s`` formatting (a ``%`` doubled). Kept per value: an executor quotes its one
    scope every turn, and the quoting depends only on the server's settings."""
    from psycopg import sql

    return sql.Literal(value).as_string(connection.connection).replace("%", "%%")


def _time_sql(value: dt.datetime | _DbClock) -> tuple[str, list[Any]]:
    """A time as SQL: the statement's own clock (plus its offset), or a parameter."""
    if isinstance(value, _DbClock):
        if not value.offset:
            return "statement_timestamp()", []
        return "(statement_timestamp() + %s::interval)", [value.offset]
    return "%s", [connection.ops.adapt_datetimefield_value(value)]


def _assign(assignments: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
    adapt = connection.ops.adapt_datetimefield_value
    sets, params = [], []
    for column, value in assignments.items():
        if isinstance(value, Sql):
            sets.append(f"{column} = {value}")
        elif isinstance(value, _DbClock):
            clock, clock_params = _time_sql(value)
            sets.append(f"{column} = {clock}")
            params += clock_params
        else:
            sets.append(f"{column} = %s")
            params.append(adapt(value) if isinstance(value, dt.datetime) else value)
    return sets, params


def _ids_sql() -> str:
    # One statement text for any batch size (the driver parses and caches it once).
    if connection.vendor == "postgresql":
        return "SELECT unnest(%s::text[])"
    return "SELECT value FROM json_each(%s)"


def _ids_param(ids: list[str]) -> Any:
    return ids if connection.vendor == "postgresql" else json.dumps(ids)


def _pairs_sql() -> str:
    if connection.vendor == "postgresql":
        return "SELECT j, c FROM jsonb_to_recordset(%s::jsonb) AS x(j text, c text)"
    return "SELECT json_extract(value, '$.j'), json_extract(value, '$.c') FROM json_each(%s)"


def _returning(full: bool, lean: Iterable[str] | None = None) -> str:
    """Every column in model order; without ``full`` the payload is only its sealed keys; with
    ``lean`` (the caller holds a copy of every row and takes back only these columns) the
    others come back NULL, in place: less to send and parse (timestamps, mostly)."""
    keep = None if lean is None else frozenset(lean)
    return _returning_sql(connection.vendor, full, keep)


@functools.cache
def _returning_sql(vendor: str, full: bool, lean: frozenset[str] | None) -> str:
    """``_returning``'s text, made once per shape: a few shapes per process, and building it
    (a column type per NULL) was a tenth of an executor turn's Python."""
    if full:
        return f"RETURNING {', '.join(_COLUMNS)}"
    keep = None if lean is None else {*_LEAN_ALWAYS, *lean}
    columns = [
        f"{_seal_payload_sql()} AS payload"
        if c == "payload"
        else c
        if keep is None or c in keep
        else f"{_null_of(c)} AS {c}"
        for c in _COLUMNS
    ]
    return f"RETURNING {', '.join(columns)}"


def _null_of(column: str) -> str:
    """A NULL of the column's type (PostgreSQL: one statement's moves are a UNION ALL)."""
    if connection.vendor != "postgresql":
        return "NULL"
    return f"NULL::{Job._meta.get_field(_ATTNAME[column]).db_type(connection)}"


# What a lean RETURNING always carries: the id, the seal's inputs, the new state and time.
_LEAN_ALWAYS = frozenset(
    {"job_id", "state", "scope", "updated_at", "fingerprint", "payload", *IMMUTABLE_COLUMNS}
)
_DATETIMES = tuple(
    i for i, f in enumerate(Job._meta.concrete_fields) if f.get_internal_type() == "DateTimeField"
)
_INDEX = {f.attname: i for i, f in enumerate(Job._meta.concrete_fields)}
_ATTNAME = {f.column: f.attname for f in Job._meta.concrete_fields}
_ATTNAMES = tuple(f.attname for f in Job._meta.concrete_fields)
_PAYLOAD = _INDEX["payload"]
_FINGERPRINT = _INDEX["fingerprint"]
# The immutable columns' values of a row, and of a model, in ``IMMUTABLE_COLUMNS`` order.
_IMMUTABLE_AT = operator.itemgetter(*(_INDEX[name] for name in IMMUTABLE_COLUMNS))
_IMMUTABLE_OF = operator.attrgetter(*IMMUTABLE_COLUMNS)
_JOB_ID = _INDEX["job_id"]
_JOB_TYPE = _INDEX["job_type"]
_CREATED = _INDEX["created_at"]
_UPDATED = _INDEX["updated_at"]
# The named transaction points of the job writer (core.faults; test-only).
_FAULT_POINTS = {
    S.CLAIMED: "claim",
    S.EXECUTING: "begin",
    S.SUCCEEDED: "finish",
    S.FAILED: "finish",
    S.OUTCOME_UNKNOWN: "finish",
}


def _fault_points(allowed: tuple[str, ...], to: str | None) -> list[str]:
    """The fault points a write passes (a claim that also begins passes both)."""
    if to == S.EXECUTING and allowed == (S.READY,):
        return ["claim", "begin"]
    return [_FAULT_POINTS[to]] if to in _FAULT_POINTS else []


def _rows_from(fetched: Iterable[Sequence[Any]]) -> dict[str, list[Any]]:
    """RETURNING rows by id, columns in model order, datetimes aware and JSON parsed (SQLite
    hands back naive datetimes and JSON text; Django has psycopg hand back JSON as text)."""
    rows: dict[str, list[Any]] = {}
    if connection.vendor == "postgresql":
        for raw in fetched:
            row = list(raw)
            if isinstance(row[_PAYLOAD], str):
                row[_PAYLOAD] = json.loads(row[_PAYLOAD])
            rows[row[_JOB_ID]] = row
        return rows
    for raw in fetched:
        row = list(raw)
        for i in _DATETIMES:
            if row[i] is not None:
                row[i] = parse_sqlite_datetime(row[i])
        if isinstance(row[_PAYLOAD], str):
            row[_PAYLOAD] = json.loads(row[_PAYLOAD])
        rows[row[_JOB_ID]] = row
    return rows


@functools.cache
def _new_job_defaults() -> dict[str, Any]:
    """What ``Job()`` sets on an instance (every field's default), read once per process."""
    defaults = dict(Job().__dict__)
    del defaults["_state"]
    return defaults


def _new_job(**values: Any) -> Job:
    """``Job(**values)`` for the fields a new job sets, without ``Model.__init__`` (an eighth of
    a single-job enqueue's Python): the defaults are copied from one ``Job()`` made per process
    (all immutable values), and the instance is unsaved like one ``Job()`` makes.
    ``test_new_job_matches_the_orm`` holds the two ways equal."""
    job = Job.__new__(Job)
    job.__dict__.update(_new_job_defaults())
    job.__dict__.update(values)
    job._state = ModelState()
    return job


def _job_of(row: list[Any]) -> Job:
    """A model instance of a returned row (every column present), without ``Model.__init__``:
    its per-field checks were a twentieth of an executor's Python per claimed job. Job has
    no deferred fields and no init signal receivers (``test_job_of_matches_the_orm`` holds
    the two ways equal)."""
    job = Job.__new__(Job)
    job.__dict__.update(zip(_ATTNAMES, row, strict=True))
    job._state = ModelState()
    job._state.adding = False
    job._state.db = "default"
    return job


def _into(mine: Job, row: list[Any], names: Iterable[str]) -> Job:
    """Bring the caller's copy up to date with what the UPDATE wrote."""
    for name in names:
        setattr(mine, name, row[_INDEX[name]])
    return mine


def _sealed(row: list[Any], *, required: bool = False) -> bool:
    """The seal check on a returned row (its ``state`` is already the new one). An empty
    fingerprint passes where the UPDATE's WHERE allowed it (an unsealed state); ``required``:
    the row came from a sealed state, so an empty one is a drift too."""
    sealed = row[_FINGERPRINT]
    if not sealed:
        return not required
    return sealed == fingerprint_from(_IMMUTABLE_AT(row), row[_PAYLOAD] or {})


def _record_drift(job: Job, to_state: str, actor: str, at: dt.datetime | None) -> None:
    """Record a fingerprint refusal in its own transaction, once per run of identical drift."""
    current = fingerprint_of(job)
    with transaction.atomic():
        last = (
            AuditEvent.objects.filter(job_id=job.job_id)
            .order_by("-event_id")
            .values("event_type", "detail")
            .first()
        )
        if (
            last
            and last["event_type"] == EventType.FINGERPRINT_DRIFT
            and last["detail"].get("current") == current
        ):
            return  # the same drift was already recorded; do not flood the trail
        record_event(
            event_type=EventType.FINGERPRINT_DRIFT,
            actor=actor,
            job_id=job.job_id,
            result_code="FINGERPRINT_DRIFT",
            detail={
                "state": job.state,
                "to": to_state,
                "sealed": job.fingerprint,
                "current": current,
            },
            at=at,
        )
    log.error("job %s: fingerprint drift, transition to %s refused", job.job_id, to_state)


def _record_stale_write(job: Job, to_state: str, claim_id: str, actor: str, at) -> None:
    with transaction.atomic():
        record_event(
            event_type=EventType.STALE_WRITE_REJECTED,
            actor=actor,
            job_id=job.job_id,
            result_code="LOST_CLAIM",
            detail={
                "state": job.state,
                "to": to_state,
                "claim_id": claim_id,
                "current_claim_id": job.claim_id,
                "current_worker_id": job.worker_id,
            },
            at=at,
        )
    log.warning(
        "job %s: write to %s by stale claim %s refused (now %s, held by %r)",
        job.job_id,
        to_state,
        claim_id,
        job.state,
        job.worker_id,
    )


def _event(
    job: Job,
    event_type: str,
    actor: str,
    now: dt.datetime,
    frm: str,
    to: str,
    **detail: Any,
) -> Event:
    result_code = detail.pop("result_code", "")
    return Event(
        event_type=event_type,
        actor=actor,
        job_id=job.job_id,
        result_code=result_code,
        detail={"from": frm, "to": to, **detail},
        at=now,
    )


def _from(before: Job | None, allowed: Sequence[str]) -> str:
    """The from-state of a moved row: as read under lock, or the only one allowed."""
    if before is not None:
        return before.state
    assert len(allowed) == 1, "a transition from several states must read its rows first"
    return allowed[0]


# --- creation and validation -----------------------------------------------------------------


def build_job(
    data: dict[str, Any],
    *,
    requested_by: str,
    supersedes: str | None = None,
    at: dt.datetime | None = None,
) -> tuple[Job, list[Event]]:
    """Validate a document into an unsaved Job and the events its creation records.

    Types that need no approval are built READY with their seal (the same outcome as
    CREATED → READY, one write fewer); a DELETE is built CREATED, awaiting approval. Only
    ``create_job`` (and bulk loaders that insert exactly what it would) store the result.
    """
    job_type, doc = validate_job_document(data)
    if not requested_by:
        raise ValueError("create_job needs requested_by")
    job = _new_job(
        job_id=doc["job_id"],
        job_version=doc["job_version"],
        mission_id=doc["mission_id"],
        job_type=job_type.name,
        scope=job_type.scope_for(doc),
        object_id=doc["object_id"],
        vault_path=doc.get("vault_path", ""),
        payload=doc,
        idempotency_key=doc["idempotency_key"],
        requested_by=requested_by,
        max_attempts=job_type.max_attempts_for(doc),
        supersedes=supersedes,
        run_after=parse_run_after(doc.get("run_after")),
    )
    if at is not None:
        job.created_at = job.updated_at = at
    events = [
        Event(
            EventType.REQUESTED,
            requested_by,
            job_id=job.job_id,
            detail={
                "job_type": job.job_type,
                "object_id": job.object_id,
                "to": S.CREATED,
                **({"supersedes": supersedes} if supersedes else {}),
            },
            at=at,
        )
    ]
    if not job_type.needs_approval:
        job.state = S.READY
        job.fingerprint = fingerprint_of(job)
        events.append(
            Event(
                EventType.READY,
                requested_by,
                job_id=job.job_id,
                detail={"from": S.CREATED, "to": S.READY, "fingerprint": job.fingerprint},
                at=at,
            )
        )
    return job, events


def create_job(
    data: dict[str, Any],
    *,
    requested_by: str,
    supersedes: str | None = None,
    at: dt.datetime | None = None,
) -> tuple[Job, bool]:
    """Validate and store a job; return (job, created). A safe replay returns the existing job.

    Types that need no approval become READY in the same transaction (REQUESTED and READY
    both recorded); a DELETE stays CREATED until an approval decides it.
    """
    result = create_jobs([data], requested_by=requested_by, supersedes=supersedes, at=at)
    if result.refused:
        raise result.refused[0]
    if result.created:
        return result.created[0], True
    return result.replayed[0], False


@dataclass
class Created:
    """What ``create_jobs`` did with each document, by its position in the input."""

    # position → the stored job (created now, or the existing one a safe replay returned)
    created: dict[int, Job] = field(default_factory=dict)
    replayed: dict[int, Job] = field(default_factory=dict)
    # position → the refusal (validation problems, an idempotency conflict)
    refused: dict[int, InboxError] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.refused


_INSERT_COLUMNS = (
    "job_id",
    "job_version",
    "mission_id",
    "job_type",
    "scope",
    "object_id",
    "vault_path",
    "payload",
    "idempotency_key",
    "requested_by",
    "max_attempts",
    "supersedes",
    "state",
    "fingerprint",
    "run_after",
    "created_at",
    "updated_at",
)


def create_jobs(
    documents: Sequence[Any],
    *,
    requested_by: str,
    all_or_nothing: bool = False,
    supersedes: str | None = None,
    at: dt.datetime | None = None,
) -> Created:
    """Validate and store many jobs in one transaction: ``create_job``'s validation,
    idempotency, sealing and audit, with one INSERT for the jobs and one for their events.

    Every document is validated first; each refusal is listed by position. With
    ``all_or_nothing`` any refusal (a problem or a conflict) stores nothing. A document whose
    ``job_id`` or ``idempotency_key`` is already stored — or appears earlier in the same batch
    — with the same content is a safe replay; with other content it is refused as a conflict.
    The jobs' ``created_at`` is the batch's database time plus one microsecond per position,
    so the claim order is the input order.
    """
    result = Created()
    built: dict[int, tuple[Job, list[Event]]] = {}
    for position, data in enumerate(documents):
        try:
            built[position] = build_job(
                data, requested_by=requested_by, supersedes=supersedes, at=at
            )
        except InboxError as exc:
            result.refused[position] = exc
    if all_or_nothing and result.refused:
        return result
    # The same key twice in one batch: the first stands; a twin replays it, a variant conflicts.
    first: dict[str, int] = {}
    fresh: dict[int, tuple[Job, list[Event]]] = {}
    twins: dict[int, int] = {}  # a position → the earlier position it replays
    for position, (job, events) in built.items():
        earlier = first.get(job.job_id, first.get(job.idempotency_key))
        if earlier is None:
            first[job.job_id] = first[job.idempotency_key] = position
            fresh[position] = (job, events)
            continue
        twin = built[earlier][0]
        same = (twin.job_id, twin.idempotency_key, twin.payload) == (
            job.job_id,
            job.idempotency_key,
            job.payload,
        )
        if same:
            twins[position] = earlier
        else:
            key = job.idempotency_key if twin.idempotency_key == job.idempotency_key else ""
            result.refused[position] = IdempotencyConflict(key or job.job_id, twin.job_id)
    if all_or_nothing and result.refused:
        return result
    # One transaction when it must roll back as a whole or when SQLite needs two statements;
    # on PostgreSQL a lone batch is one statement (jobs and events), atomic by itself.
    needs_transaction = all_or_nothing or connection.vendor != "postgresql"
    with transaction.atomic() if needs_transaction else contextlib.nullcontext():
        stamps = _store(list(fresh.values()), at)
        for position, (job, _events) in fresh.items():
            if job.job_id in stamps:
                job.created_at = job.updated_at = stamps[job.job_id]
                job._state.adding = False
                result.created[position] = job
        stored = {job.job_id: job for job in result.created.values()}
        for position, (job, _events) in fresh.items():
            if job.job_id not in stamps:
                try:
                    stored[job.job_id] = result.replayed[position] = _existing_for_replay(job)
                except IdempotencyConflict as exc:
                    result.refused[position] = exc
        # A twin within the batch replays whatever its first occurrence became.
        for position, earlier in twins.items():
            if earlier in result.refused:
                result.refused[position] = result.refused[earlier]
            else:
                result.replayed[position] = stored[built[earlier][0].job_id]
        if all_or_nothing and result.refused:
            transaction.set_rollback(True)
            result.created.clear()
    return result


def _store(fresh: list[tuple[Job, list[Event]]], at: dt.datetime | None) -> dict[str, dt.datetime]:
    """Insert the jobs and, for those actually stored (a key already present is skipped), their
    creation events; each job's ``created_at`` (the batch's database time plus one microsecond
    per position) by id. PostgreSQL: one statement; SQLite: one INSERT each, in the caller's
    transaction."""
    if not fresh:
        return {}
    if connection.vendor == "postgresql":
        return _store_postgresql(fresh, at)
    now = db_now(at)
    stamps = {job.job_id: now + dt.timedelta(microseconds=n) for n, (job, _e) in enumerate(fresh)}
    for job, _events in fresh:
        job.created_at = job.updated_at = stamps[job.job_id]
    inserted = _insert_jobs([job for job, _events in fresh])
    record_events(
        Event(
            e.event_type, e.actor, e.job_id, e.run_id, e.result_code, e.detail, stamps[job.job_id]
        )
        for job, job_events in fresh
        if job.job_id in inserted
        for e in job_events
    )
    return {job_id: stamps[job_id] for job_id in inserted}


_PG_TYPES = {
    "job_version": "integer",
    "max_attempts": "integer",
    "payload": "jsonb",
    "run_after": "timestamptz",
}


def _store_postgresql(
    fresh: list[tuple[Job, list[Event]]], at: dt.datetime | None
) -> dict[str, dt.datetime]:
    columns = [c for c in _INSERT_COLUMNS if c not in ("created_at", "updated_at")]
    adapt = connection.ops.adapt_datetimefield_value
    rows, events = [], []
    for n, (job, job_events) in enumerate(fresh):
        row = {c: getattr(job, c) for c in columns}
        if row["run_after"] is not None:
            row["run_after"] = str(adapt(row["run_after"]))
        rows.append({**row, "n": n})
        events += [
            {
                "job_id": e.job_id,
                "k": k,
                "event_type": str(e.event_type),
                "actor": e.actor,
                "result_code": e.result_code or "",
                "detail": e.detail or {},
            }
            for k, e in enumerate(job_events)
        ]
    spec = ", ".join(f"{c} {_PG_TYPES.get(c, 'text')}" for c in columns)
    names = ", ".join(columns)
    table = connection.ops.quote_name(Job._meta.db_table)
    audit = connection.ops.quote_name(AuditEvent._meta.db_table)
    sql = f"""
WITH base AS (SELECT COALESCE(%s::timestamptz, statement_timestamp()) AS t),
src AS (SELECT * FROM jsonb_to_recordset(%s::jsonb) AS x({spec}, n integer)),
ins AS (
    INSERT INTO {table} ({names}, created_at, updated_at,
                         attempt_count, worker_id, claim_id, result_code, last_error, note)
    SELECT {names}, base.t + src.n * interval '1 microsecond',
           base.t + src.n * interval '1 microsecond', 0, '', '', '', '', ''
    FROM src, base ORDER BY src.n
    ON CONFLICT DO NOTHING
    RETURNING job_id, created_at
),
ev AS (
    INSERT INTO {audit} (job_id, run_id, event_type, actor, result_code, detail, created_at)
    SELECT e.job_id, NULL, e.event_type, e.actor, e.result_code, e.detail, ins.created_at
    FROM jsonb_to_recordset(%s::jsonb)
         AS e(job_id text, k integer, event_type text, actor text, result_code text, detail jsonb)
    JOIN ins ON ins.job_id = e.job_id
    ORDER BY ins.created_at, e.k
)
SELECT job_id, created_at FROM ins"""
    with prepared_cursor() as cursor:
        cursor.execute(sql, [at, json.dumps(rows), json.dumps(events)])
        return dict(cursor.fetchall())


def _insert_jobs(jobs: list[Job]) -> set[str]:
    """SQLite: the jobs inserted one prepared row INSERT each, in the caller's transaction;
    the ids stored (a key already present is skipped: ON CONFLICT DO NOTHING). A JSON array
    read back with json_extract would be parsed once per column of every row."""
    adapt = connection.ops.adapt_datetimefield_value
    columns = ", ".join(_INSERT_COLUMNS)
    table = connection.ops.quote_name(Job._meta.db_table)
    marks = ", ".join(["%s"] * len(_INSERT_COLUMNS))
    sql = (
        f"INSERT INTO {table} ({columns}, attempt_count, worker_id, claim_id, result_code, "
        f"last_error, note) VALUES ({marks}, 0, '', '', '', '', '') ON CONFLICT DO NOTHING"
    )
    stored: set[str] = set()
    texts: dict[dt.datetime, str] = {}  # created_at and updated_at are one value: adapt it once
    with prepared_cursor() as cursor:
        for job in jobs:
            row = [getattr(job, c) for c in _INSERT_COLUMNS]
            row[_INSERT_PAYLOAD] = json.dumps(row[_INSERT_PAYLOAD])
            for i in _INSERT_TIMES:
                if (value := row[i]) is not None:
                    if (text := texts.get(value)) is None:
                        text = texts[value] = str(adapt(value))
                    row[i] = text
            cursor.execute(sql, row)
            if cursor.rowcount == 1:
                stored.add(job.job_id)
    return stored


_INSERT_PAYLOAD = _INSERT_COLUMNS.index("payload")
_INSERT_TIMES = tuple(_INSERT_COLUMNS.index(c) for c in ("run_after", "created_at", "updated_at"))


def _existing_for_replay(new: Job) -> Job:
    matches = list(
        Job.objects.filter(Q(job_id=new.job_id) | Q(idempotency_key=new.idempotency_key))
    )
    if not matches:
        # The conflict was not on our keys (should not happen): let the caller see it.
        raise IntegrityError(f"job {new.job_id!r} could not be stored")
    for existing in matches:
        same = (
            existing.job_id == new.job_id
            and existing.idempotency_key == new.idempotency_key
            and existing.payload == new.payload
        )
        if not same:
            key = new.idempotency_key if existing.idempotency_key == new.idempotency_key else ""
            raise IdempotencyConflict(key or new.job_id, existing.job_id)
    return matches[0]


def mark_ready(
    job_id: str,
    *,
    actor: str,
    approval_id: str | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """CREATED → READY; attach the approval (DELETE) and seal the fingerprint."""
    with transaction.atomic():
        prior = lock_jobs([job_id])
        job = prior.get(job_id)
        attach = approval_id or (job.approval_id if job is not None else None)
        sealed = ""
        if job is not None:
            candidate = Job(**{n: getattr(job, n) for n in IMMUTABLE_COLUMNS}, payload=job.payload)
            candidate.approval_id = attach
            sealed = fingerprint_of(candidate)

        def check(job: Job, _now: dt.datetime) -> None:
            if get_job_type(job.job_type).needs_approval and not approval_id:
                raise InvalidTransition(
                    job_id, job.state, S.READY, "this job type needs an approval"
                )
            if approval_id and job.approval_id and job.approval_id != approval_id:
                raise InvalidTransition(job_id, job.state, S.READY, "another approval is attached")

        def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
            return [
                _event(
                    job,
                    EventType.READY,
                    actor,
                    now,
                    S.CREATED,
                    S.READY,
                    fingerprint=sealed,
                    approval_id=attach,
                )
            ]

        moved = _move(
            [Held(job_id)],
            to=S.READY,
            allowed=[S.CREATED],
            actor=actor,
            values={"approval_id": attach, "fingerprint": sealed},
            events=events,
            prior=lambda: prior,
            check=check,
            at=at,
        )
    return moved.one()


def _reject(
    held: Sequence[Held],
    *,
    actor: str,
    reason: str,
    result_code: str,
    holder: bool,
    at: dt.datetime | None,
) -> Moved:
    if not reason:
        raise ValueError("reject_job needs a reason")
    allowed = [S.CLAIMED, S.EXECUTING] if holder else [S.CREATED]

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        frm = _from(before, allowed)
        return [
            _event(
                job,
                EventType.REJECTED,
                actor,
                now,
                frm,
                S.REJECTED,
                reason=reason,
                result_code=result_code,
            )
        ]

    return _move(
        held,
        to=S.REJECTED,
        allowed=allowed,
        actor=actor,
        values={"result_code": result_code, "last_error": reason, **CLEARED_CLAIM},
        events=events,
        fence="holder" if holder else None,
        prior=lambda: lock_jobs(_ids(held)),
        at=at,
    )


def reject_jobs(
    job_ids: Sequence[str],
    *,
    actor: str,
    reason: str,
    result_code: str = "REJECTED",
    at: dt.datetime | None = None,
) -> Moved:
    """CREATED → REJECTED (validation, a denied approval, an operator); the reason is kept."""
    return _reject(
        [Held(job_id) for job_id in job_ids],
        actor=actor,
        reason=reason,
        result_code=result_code,
        holder=False,
        at=at,
    )


def reject_job(
    job_id: str,
    *,
    actor: str,
    reason: str,
    result_code: str = "REJECTED",
    claim_id: str | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """CREATED → REJECTED (see ``reject_jobs``), or with ``claim_id`` a holder's
    CLAIMED/EXECUTING → REJECTED when the authorization re-check fails right before execution."""
    return _reject(
        [Held(job_id, claim_id)],
        actor=actor,
        reason=reason,
        result_code=result_code,
        holder=claim_id is not None,
        at=at,
    ).one()


# --- claims and leases ------------------------------------------------------------------------


def _claim_values(worker_id: str, now: dt.datetime, lease_until: dt.datetime) -> dict[str, Any]:
    return {
        "worker_id": worker_id,
        "claim_id": Sql(_RANDOM_TOKEN_SQL[connection.vendor]),
        "claimed_at": now,
        "lease_until": lease_until,
        "attempt_count": Sql("attempt_count + 1"),
    }


def _claim_events(worker_id: str) -> EventsFor:
    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        return [
            _event(
                job,
                EventType.CLAIMED,
                worker_id,
                now,
                S.READY,
                S.CLAIMED,
                claim_id=job.claim_id,
                attempt=job.attempt_count,
                lease_until=job.lease_until.isoformat(),
            )
        ]

    return events


def claim_next_jobs(
    *,
    scope: str,
    worker_id: str,
    lease_seconds: int,
    limit: int = 1,
    at: dt.datetime | None = None,
) -> list[Job]:
    """Claim up to ``limit`` READY jobs of ``scope`` in claim order, atomically; a job whose
    ``run_after`` is still ahead waits.

    The one guarded UPDATE picks its rows itself (``Pick``): in claim order, on PostgreSQL
    with FOR UPDATE SKIP LOCKED, so concurrent claimers take different rows; SQLite's
    IMMEDIATE transaction serialises them. A job whose seal broke is refused (and recorded)
    and another is picked in its place.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if not worker_id:
        raise ValueError("claim_next_jobs needs a worker_id")
    return _move(
        [],
        to=S.CLAIMED,
        allowed=[S.READY],
        actor=worker_id,
        values=lambda now: _claim_values(worker_id, now, _lease(now, lease_seconds)),
        events=_claim_events(worker_id),
        pick=Pick(scope, limit),
        at=at,
    ).jobs


def claim_and_begin_jobs(
    *,
    scope: str,
    worker_id: str,
    lease_seconds: int,
    limit: int,
    authorize: Callable[[Job], bool],
    at: dt.datetime | None = None,
) -> list[Job]:
    """READY → CLAIMED → EXECUTING in one guarded UPDATE: the executor's claim of jobs it
    begins at once (idempotent types that need no approval; DESIGN §1.3's two edges, both
    recorded), the next ``limit`` of ``scope`` in claim order unless the scope is paused.

    Each moved job records CLAIMED, STARTED and AUTHORIZED (the executor's checks: schema and
    seal) — on PostgreSQL in the claiming statement itself. It runs in the caller's transaction
    with no savepoint of its own: ``authorize`` (the executor's checks of each claimed job,
    before the commit, asked only of rows whose seal this statement's result has passed)
    refusing a row, or a drifted seal, raises ``BatchRefused`` and the
    caller's rollback undoes the claim and its events (nothing is kept); the caller then claims
    step by step (``claim_next_jobs``, ``begin_jobs``), which refuses and records each row on
    its own. The intermediate CLAIMED state is never visible to anyone: with separate steps
    the claim and the begin of these jobs commit together too.
    """
    claim = _claim_and_begin_move(scope, worker_id, lease_seconds, limit, authorize, at)
    return _moves([claim])[0].jobs


def finish_and_claim_jobs(
    outcomes: Sequence[Outcome],
    *,
    scope: str,
    worker_id: str,
    lease_seconds: int,
    limit: int,
    authorize: Callable[[Job], bool],
    at: dt.datetime | None = None,
) -> tuple[Moved, list[Job]]:
    """The executor's turn as one write: its ``outcomes`` recorded (``finish_jobs``) and the
    next batch claimed and begun (``claim_and_begin_jobs``), in the caller's transaction with
    no savepoint of its own; refusals raise ``BatchRefused`` as there.

    On PostgreSQL, outcomes that are all one final state and code (the usual turn: every job
    SUCCEEDED) and the claim are one statement — one round trip for the whole turn; other
    outcomes (a retry, a mix) are recorded first, then the claim is made.
    """
    claim = _claim_and_begin_move(scope, worker_id, lease_seconds, limit, authorize, at)
    if not outcomes:
        return Moved(), _moves([claim])[0].jobs
    groups = _outcome_groups(outcomes)
    to, result_code, error, _retry_in = next(iter(groups))
    if connection.vendor != "postgresql" or len(groups) > 1 or to == S.READY:
        finished = finish_jobs(outcomes, actor=worker_id, savepoint=False, at=at)
        return finished, _moves([claim])[0].jobs
    values: dict[str, Any] = {"result_code": result_code, "lease_until": None}
    if error:
        values["last_error"] = error
    by_id = {o.job.job_id: o for o in outcomes}
    finishing = _Move(
        [Held.of(o.job) for o in outcomes],
        to,
        (S.EXECUTING,),
        worker_id,
        _outcome_events(worker_id, by_id),
        values=values,
        fence="holder",
        fail_closed=True,
        savepoint=False,
        events_ahead=True,
        full=False,
        at=at,
        paired=_outcome_pairs(worker_id, to, by_id),
    )
    finished, claimed = _moves([finishing, claim])
    return finished, claimed.jobs


def _claim_and_begin_move(
    scope: str,
    worker_id: str,
    lease_seconds: int,
    limit: int,
    authorize: Callable[[Job], bool],
    at: dt.datetime | None,
) -> _Move:
    """``claim_and_begin_jobs``'s move."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if not worker_id:
        raise ValueError("claim_and_begin_jobs needs a worker_id")
    claimed = _claim_events(worker_id)

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        checks = _authorized_checks(job)
        return [
            *claimed(job, before, now),
            _event(job, EventType.STARTED, worker_id, now, S.CLAIMED, S.EXECUTING),
            _event(job, EventType.AUTHORIZED, worker_id, now, S.CLAIMED, S.EXECUTING, **checks),
        ]

    return _Move(
        [],
        S.EXECUTING,
        (S.READY,),
        worker_id,
        events,
        values=lambda now: _claim_values(worker_id, now, _lease(now, lease_seconds)),
        row_events=_CLAIM_AND_BEGIN_EVENTS,
        accept=authorize,
        pick=Pick(scope, limit, unless_paused=True),
        fail_closed=True,
        savepoint=False,
        at=at,
    )


def _authorized_checks(job: Job) -> dict[str, Any]:
    """What AUTHORIZED records for a job the executor checked and may begin at once: its
    schema validated and its seal (approval types add the approval; see the executor)."""
    return {"schema": "ok", "fingerprint": job.fingerprint}


def _iso_sql(column: str) -> str:
    """``datetime.isoformat()`` of a UTC timestamp column, in SQL (the events' own format)."""
    utc = f"({column} AT TIME ZONE 'UTC')"
    return (
        f"to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN "
        f"date_part('microseconds', {utc})::bigint %% 1000000 = 0 THEN '' "
        f"ELSE to_char({utc}, '.US') END || '+00:00'"
    )


# CLAIMED, STARTED and AUTHORIZED as SQL over the claimed row (``claim_and_begin_jobs`` on
# PostgreSQL): the same details ``_claim_events``, ``_begin_events`` and ``_authorized_checks``
# build in Python.
_CLAIM_AND_BEGIN_EVENTS = (
    RowEvent(
        EventType.CLAIMED,
        "jsonb_build_object('from', 'READY', 'to', 'CLAIMED', 'claim_id', r.claim_id, "
        f"'attempt', r.attempt_count, 'lease_until', {_iso_sql('r.lease_until')})",
    ),
    RowEvent(EventType.STARTED, "jsonb_build_object('from', 'CLAIMED', 'to', 'EXECUTING')"),
    RowEvent(
        EventType.AUTHORIZED,
        "jsonb_build_object('from', 'CLAIMED', 'to', 'EXECUTING', 'schema', 'ok', "
        "'fingerprint', r.fingerprint)",
    ),
)


def claim_job(
    job_id: str, *, worker_id: str, lease_seconds: int, at: dt.datetime | None = None
) -> Job:
    """Claim one named READY job."""
    return _move(
        [Held(job_id)],
        to=S.CLAIMED,
        allowed=[S.READY],
        actor=worker_id,
        values=lambda now: _claim_values(worker_id, now, _lease(now, lease_seconds)),
        events=_claim_events(worker_id),
        at=at,
    ).one()


def renew_leases(
    held: Sequence[Held],
    *,
    lease_seconds: int,
    actor: str | None = None,
    at: dt.datetime | None = None,
) -> Moved:
    """Extend the holder's leases; a lease that is no longer the caller's, or has lapsed, is
    refused (``LostClaim``) and the worker must stop working on that job."""
    actor = actor or "worker"

    def refusal(job: Job, item: Held, now: dt.datetime) -> InboxError | None:
        if job.claim_id == item.claim_id and job.state in HELD_STATES:
            if job.lease_until is None or job.lease_until < now:
                lapsed = job.lease_until.isoformat() if job.lease_until else "never set"
                return LostClaim(
                    job.job_id,
                    job.state,
                    job.state,
                    claim_id=item.claim_id or "",
                    why=f"lease lapsed at {lapsed}; awaiting the sweep",
                )
            return None
        return LostClaim(
            job.job_id,
            job.state,
            job.state,
            claim_id=item.claim_id or "",
            why=f"claim {item.claim_id} is no longer held (job is {job.state})",
        )

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        detail = {"claim_id": job.claim_id, "lease_until": job.lease_until.isoformat()}
        return [Event(EventType.LEASE_RENEWED, actor, job_id=job.job_id, detail=detail, at=now)]

    return _move(
        held,
        to=None,
        allowed=HELD_STATES,
        actor=actor,
        values=lambda now: {"lease_until": _lease(now, lease_seconds)},
        events=events,
        fence="holder",
        lease="running",
        seal=False,
        full=False,
        refusal=refusal,
        at=at,
    )


def renew_lease(
    job_id: str,
    *,
    claim_id: str,
    lease_seconds: int,
    actor: str | None = None,
    at: dt.datetime | None = None,
) -> dt.datetime:
    """Extend one holder's lease; its new end, or ``LostClaim``."""
    job = renew_leases(
        [Held(job_id, claim_id)], lease_seconds=lease_seconds, actor=actor, at=at
    ).one()
    return job.lease_until


def release_jobs(
    held: Sequence[Held], *, actor: str, reason: str = "", at: dt.datetime | None = None
) -> Moved:
    """The holder hands back CLAIMED jobs it never began: → READY, the attempt not counted."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        return [_event(job, EventType.RELEASED, actor, now, S.CLAIMED, S.READY, reason=reason)]

    return _move(
        held,
        to=S.READY,
        allowed=[S.CLAIMED],
        actor=actor,
        values={
            **CLEARED_CLAIM,
            "attempt_count": Sql("CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END"),
        },
        events=events,
        fence="holder",
        at=at,
    )


def release_job(
    job_id: str, *, claim_id: str, actor: str, reason: str = "", at: dt.datetime | None = None
) -> Job:
    """Hand back one CLAIMED job (see ``release_jobs``)."""
    return release_jobs([Held(job_id, claim_id)], actor=actor, reason=reason, at=at).one()


def _begin_events(actor: str, authorized: Callable[[str], Mapping[str, Any] | None]) -> EventsFor:
    """STARTED, and AUTHORIZED with the executor's checks: what a begin records."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        out = [_event(job, EventType.STARTED, actor, now, S.CLAIMED, S.EXECUTING)]
        checks = authorized(job.job_id)
        if checks is not None:
            out.append(
                _event(job, EventType.AUTHORIZED, actor, now, S.CLAIMED, S.EXECUTING, **checks)
            )
        return out

    return events


def _begin(
    held: Sequence[Held],
    *,
    actor: str,
    lease_seconds: int | None,
    authorized: Callable[[str], Mapping[str, Any] | None],
    fail_closed: bool,
    full: bool,
    at: dt.datetime | None,
) -> Moved:
    return _move(
        held,
        to=S.EXECUTING,
        allowed=[S.CLAIMED],
        actor=actor,
        values=lambda now: (
            {} if lease_seconds is None else {"lease_until": _lease(now, lease_seconds)}
        ),
        events=_begin_events(actor, authorized),
        fence="holder",
        lease="running" if lease_seconds is not None else None,
        fail_closed=fail_closed,
        events_ahead=True,
        full=full,
        why="the lease lapsed before the job began",
        at=at,
    )


def begin_jobs(
    jobs: Sequence[Job],
    *,
    actor: str,
    lease_seconds: int,
    authorized: Mapping[str, Mapping[str, Any]],
    at: dt.datetime | None = None,
) -> Moved:
    """CLAIMED → EXECUTING for a holder's batch, renewing each running lease, each begin
    committed with its STARTED and AUTHORIZED (``authorized``: job id → the executor's checks).

    Fail closed: a drifted seal anywhere undoes the whole batch (``Moved.undone``, nothing
    written); begin each job on its own then. The copies in ``jobs`` are updated in place.
    """
    try:
        return _begin(
            [Held.of(job) for job in jobs],
            actor=actor,
            lease_seconds=lease_seconds,
            authorized=lambda job_id: authorized.get(job_id, {}),
            fail_closed=len(jobs) > 1,
            full=False,
            at=at,
        )
    except _BatchDrift as exc:
        return _undone(jobs, exc)


def begin_job(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    lease_seconds: int | None = None,
    authorized: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """CLAIMED → EXECUTING: the holder confirms it is starting.

    With ``lease_seconds`` the lease must still be running and is renewed (a holder whose lease
    lapsed while the job waited in its batch must not start it). With ``authorized`` an
    AUTHORIZED event (the executor's checks) commits together with the start.
    """
    checks = dict(authorized) if authorized is not None else None
    return _begin(
        [Held(job_id, claim_id)],
        actor=actor,
        lease_seconds=lease_seconds,
        authorized=lambda _job_id: checks,
        fail_closed=False,
        full=True,
        at=at,
    ).one()


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


def _outcome_events(actor: str, outcomes: Mapping[str, Outcome]) -> EventsFor:
    """The outcome event, preceded by EXECUTED when the outcome carries ``executed_detail``:
    EXECUTED (the mutation was attempted) commits with its outcome, never alone."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        o = outcomes[job.job_id]
        extra = dict(o.detail or {})
        if o.error:
            extra["error"] = o.error
        if o.to == S.READY:
            extra.update(
                attempt=job.attempt_count,
                retry_in_s=round(o.retry_in or 0.0, 3),
                run_after=job.run_after.isoformat() if job.run_after else None,
            )
        out = [
            _event(
                job,
                _FINISH_EVENT[o.to],
                actor,
                now,
                S.EXECUTING,
                o.to,
                result_code=o.result_code,
                **extra,
            )
        ]
        if o.executed_detail is not None:
            executed = dict(o.executed_detail)
            executed.setdefault("result_code", o.result_code)
            out.insert(
                0, _event(job, EventType.EXECUTED, actor, now, S.EXECUTING, o.to, **executed)
            )
        return out

    return events


def _outcome_pairs(
    actor: str, to: str, outcomes: Mapping[str, Outcome]
) -> Callable[[Sequence[Held]], PairedEvents]:
    """``_outcome_events`` in the compact form the statement writes on PostgreSQL (``_move``'s
    ``paired``), for an outcome other than a retry (whose event needs the row after the
    write): the same events with the same details (``test_turn`` compares them)."""
    if to == S.READY:
        raise ValueError("a retry's events are built from the row after the write")

    def pairs(held: Sequence[Held]) -> PairedEvents:
        rows = []
        for item in held:
            o = outcomes[item.job_id]
            second = dict(o.detail or {})
            if o.error:
                second["error"] = o.error
            first, first_code = None, ""
            if o.executed_detail is not None:
                first = dict(o.executed_detail)
                first_code = first.pop("result_code", o.result_code)
            rows.append((item.job_id, first_code, first, o.result_code, second))
        return PairedEvents(actor, S.EXECUTING, EventType.EXECUTED, _FINISH_EVENT[to], rows)

    return pairs


def _finish(
    outcomes: Sequence[Outcome],
    *,
    actor: str,
    fail_closed: bool,
    full: bool,
    held: Callable[[Outcome], Held],
    at: dt.datetime | None,
    savepoint: bool = True,
) -> Moved:
    groups = _outcome_groups(outcomes)
    by_id = {o.job.job_id: o for o in outcomes}
    result = Moved()
    # One UPDATE per distinct outcome, usually one; several share one transaction and clock.
    several = len(groups) > 1
    with transaction.atomic(savepoint=savepoint) if several else contextlib.nullcontext():
        now = db_now(at) if several else at
        parts: dict[str, Moved] = {}
        for (to, result_code, error, retry_in), group in groups.items():
            values: dict[str, Any] = {"result_code": result_code, "lease_until": None}
            if error:
                values["last_error"] = error
            retry = _retry_guard(group, values, retry_in) if to == S.READY else {}
            if to != S.READY:
                retry["paired"] = _outcome_pairs(actor, to, by_id)
            part = _move(
                [held(o) for o in group],
                to=to,
                allowed=[S.EXECUTING],
                actor=actor,
                values=retry.pop("values", values),
                events=_outcome_events(actor, by_id),
                fence="holder",
                fail_closed=fail_closed,
                savepoint=savepoint,
                events_ahead=True,
                full=full,
                at=now,
                **retry,
            )
            for job in part.jobs:
                parts[job.job_id] = part
            result.refused.update(part.refused)
    for o in outcomes:
        job_id = o.job.job_id
        if job_id in parts:
            result.add(job_id)
            result.jobs.extend(j for j in parts[job_id].jobs if j.job_id == job_id)
    return result


def _outcome_groups(
    outcomes: Sequence[Outcome],
) -> dict[tuple[str, str, str, float | None], list[Outcome]]:
    """The outcomes by what their UPDATE assigns (one UPDATE each), checked."""
    groups: dict[tuple[str, str, str, float | None], list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.to not in _FINISH_EVENT or (outcome.to == S.READY) != (
            outcome.retry_in is not None
        ):
            raise ValueError(f"not an outcome state: {outcome.to} (retry_in={outcome.retry_in})")
        if outcome.retry_in is not None and not 0 <= outcome.retry_in < 10**7:
            raise ValueError(f"retry_in must be from 0 to 10^7 seconds, got {outcome.retry_in}")
        key = (outcome.to, outcome.result_code, outcome.error, outcome.retry_in)
        groups.setdefault(key, []).append(outcome)
    return groups


def _retry_guard(
    group: Sequence[Outcome], values: dict[str, Any], retry_in: float | None
) -> dict[str, Any]:
    """What a retry's ``_move`` adds: the claim cleared, ``run_after`` from the database clock,
    and the guard that only an idempotent type is ever sent back (DESIGN §1.3: a
    non-idempotent job is never retried blindly), checked on the rows read under lock."""
    delay = dt.timedelta(seconds=retry_in or 0.0)
    ids = [o.job.job_id for o in group]

    def check(job: Job, _now: dt.datetime) -> None:
        job_type = registry().get(job.job_type)
        if job_type is None or not job_type.idempotent:
            raise InvalidTransition(
                job.job_id, job.state, S.READY, "a non-idempotent job is never retried blindly"
            )

    return {
        "values": lambda now: {**values, **CLEARED_CLAIM, "run_after": now + delay},
        "prior": lambda: lock_jobs(ids),
        "check": check,
    }


def finish_jobs(
    outcomes: Sequence[Outcome],
    *,
    actor: str,
    savepoint: bool = True,
    at: dt.datetime | None = None,
) -> Moved:
    """EXECUTING → SUCCEEDED / FAILED / OUTCOME_UNKNOWN for a holder's batch, each outcome
    committed with its EXECUTED event (one UPDATE per distinct outcome, usually one); an
    outcome to READY with ``retry_in`` is a retry (see ``schedule_retry``).

    Fail closed like ``begin_jobs``; the copies in the outcomes are updated in place. With
    ``savepoint=False`` it runs in the caller's transaction with no savepoint of its own and
    a drift raises ``BatchRefused`` out of it (the caller's rollback undoes the batch).
    """
    try:
        return _finish(
            outcomes,
            actor=actor,
            fail_closed=len(outcomes) > 1 or not savepoint,
            full=False,
            held=lambda o: Held.of(o.job),
            at=at,
            savepoint=savepoint,
        )
    except _BatchDrift as exc:
        if not savepoint:
            raise
        return _undone([o.job for o in outcomes], exc)


def _undone(jobs: Sequence[Job], exc: _BatchDrift) -> Moved:
    log.warning("batch undone: job %s drifted; each job goes on its own", exc)
    moved = Moved()
    moved.undone = [job.job_id for job in jobs]
    return moved


def _finish_one(
    job_id: str,
    *,
    to: str,
    claim_id: str,
    actor: str,
    result_code: str,
    error: str = "",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
    retry_in: float | None = None,
    at: dt.datetime | None = None,
) -> Job:
    stub = Job(job_id=job_id, claim_id=claim_id)
    outcome = Outcome(stub, to, result_code, error, executed_detail, detail, retry_in)
    return _finish(
        [outcome],
        actor=actor,
        fail_closed=False,
        full=True,
        held=lambda o: Held(o.job.job_id, o.job.claim_id),
        at=at,
    ).one()


def complete_job(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    result_code: str = "OK",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """EXECUTING → SUCCEEDED (with ``executed_detail``: and EXECUTED, in one transaction)."""
    return _finish_one(
        job_id,
        to=S.SUCCEEDED,
        claim_id=claim_id,
        actor=actor,
        result_code=result_code,
        detail=detail,
        executed_detail=executed_detail,
        at=at,
    )


def fail_job(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    result_code: str,
    error: str = "",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """EXECUTING → FAILED: the mutation certainly did not happen."""
    return _finish_one(
        job_id,
        to=S.FAILED,
        claim_id=claim_id,
        actor=actor,
        result_code=result_code,
        error=error,
        detail=detail,
        executed_detail=executed_detail,
        at=at,
    )


def mark_outcome_unknown(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    result_code: str = "UNKNOWN",
    error: str = "",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """EXECUTING → OUTCOME_UNKNOWN: the handler could not tell whether the mutation happened."""
    return _finish_one(
        job_id,
        to=S.OUTCOME_UNKNOWN,
        claim_id=claim_id,
        actor=actor,
        result_code=result_code,
        error=error,
        detail=detail,
        executed_detail=executed_detail,
        at=at,
    )


def schedule_retry(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    retry_in: float,
    result_code: str,
    error: str = "",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """EXECUTING → READY: a failed attempt of an idempotent job with a retry left goes back to
    the queue and is not claimed before the database time plus ``retry_in`` seconds
    (``run_after``). The attempt stays counted; RETRY_SCHEDULED records it (with EXECUTED when
    ``executed_detail`` is given). A non-idempotent job is refused: it is never retried blindly.
    """
    return _finish_one(
        job_id,
        to=S.READY,
        claim_id=claim_id,
        actor=actor,
        result_code=result_code,
        error=error,
        detail=detail,
        executed_detail=executed_detail,
        retry_in=retry_in,
        at=at,
    )


# --- recovery ---------------------------------------------------------------------------------


@dataclass
class RecoveryReport:
    """What a sweep did (or, with ``dry_run``, would do)."""

    requeued: dict[str, int] = field(default_factory=dict)
    parked: dict[str, int] = field(default_factory=dict)
    max_attempts: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    # Lapsed but held by another transaction right now (skipped, not waited on): next pass.
    busy: int = 0

    @property
    def total(self) -> int:
        return (
            sum(self.requeued.values())
            + sum(self.parked.values())
            + sum(self.max_attempts.values())
        )

    def summary(self, *, dry_run: bool = False) -> str:
        def fmt(counts: dict[str, int]) -> str:
            return ", ".join(f"{n} {t}" for t, n in sorted(counts.items())) or "0"

        verb = "would have " if dry_run else ""
        text = (
            f"{verb}requeued {fmt(self.requeued)}; {verb}parked {fmt(self.parked)} as "
            f"OUTCOME_UNKNOWN; {sum(self.max_attempts.values())} hit max_attempts"
        )
        if self.refused:
            text += f"; {len(self.refused)} refused (fingerprint drift or race)"
        if self.busy:
            text += f"; {self.busy} busy (locked right now; taken on the next pass)"
        return text

    def count(self, job: Job, to: str) -> None:
        bucket = {S.READY: self.requeued, S.FAILED: self.max_attempts}.get(to, self.parked)
        bucket[job.job_type] = bucket.get(job.job_type, 0) + 1
        self.job_ids.append(job.job_id)


def lapsed_outcome(job: Job) -> str:
    """Where §1.3 sends a job whose lease lapsed: READY, FAILED (max attempts) or UNKNOWN."""
    job_type = registry().get(job.job_type)
    if job_type is None or not job_type.idempotent:
        return S.OUTCOME_UNKNOWN
    if job.attempt_count >= job.max_attempts:
        return S.FAILED
    return S.READY


def _recovery_values(to: str, attempt_count: int) -> dict[str, Any]:
    if to == S.READY:
        return {**CLEARED_CLAIM}
    if to == S.FAILED:
        return {
            "lease_until": None,
            "result_code": "MAX_ATTEMPTS",
            "last_error": f"lease lapsed after {attempt_count} attempts",
        }
    return {
        "lease_until": None,
        "result_code": "LEASE_EXPIRED",
        "last_error": "lease lapsed while held; outcome unknown",
    }


def _recovery_events(actor: str, to: str) -> EventsFor:
    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        assert before is not None
        return [
            _event(
                job,
                EventType.LEASE_EXPIRED,
                actor,
                now,
                before.state,
                to,
                result_code="MAX_ATTEMPTS" if to == S.FAILED else "LEASE_EXPIRED",
                claim_id=before.claim_id,
                worker_id=before.worker_id,
                lease_until=before.lease_until.isoformat() if before.lease_until else None,
                attempt=before.attempt_count,
            )
        ]

    return events


def recover_stale_claims_report(
    *,
    at: dt.datetime | None = None,
    dry_run: bool = False,
    actor: str = "sweeper",
    batch: int = 1000,
) -> RecoveryReport:
    """Apply §1.3's lapsed-lease rules to every held job whose lease ended strictly before now.

    Works in batches of at most ``batch`` rows, each one short transaction: lock the lapsed
    rows, group them by where they go, one guarded UPDATE per group (claim and lapse
    re-checked). The batch size follows the time a transaction took, aiming at
    ``SWEEP_TRANSACTION_SECONDS``: on a slow or busy database the batches shrink, so no row
    stays locked for long whatever the machine; on a fast one they grow to ``batch``.
    """
    now = db_now(at)
    report = RecoveryReport()
    refused: list[str] = []
    size = min(batch, _SWEEP_FIRST_BATCH)
    while True:
        began = time.monotonic()
        with transaction.atomic():
            qs = Job.objects.lapsed(now).order_by("lease_until", "job_id")
            if refused:
                qs = qs.exclude(job_id__in=refused)
            if dry_run:
                # Nothing changes in a dry run: one read of every lapsed lease, no lock.
                for job in qs:
                    report.count(job, lapsed_outcome(job))
                return report
            candidates = list(locked(qs, skip_locked=True)[:size])
            groups: dict[str, list[Job]] = {}
            for job in candidates:
                groups.setdefault(lapsed_outcome(job), []).append(job)
            for to, jobs in groups.items():
                # Every row of a group shares its values but ``attempt_count`` (FAILED's text).
                by_attempts: dict[int, list[Job]] = {}
                for job in jobs:
                    by_attempts.setdefault(job.attempt_count, []).append(job)
                for attempts, part in by_attempts.items():
                    # The rows as read (the events' "before"); ``part`` is updated in place.
                    seen = {job.job_id: _snapshot(job) for job in part}
                    moved = _move(
                        [Held.of(job) for job in part],
                        to=to,
                        allowed=HELD_STATES,
                        actor=actor,
                        values=_recovery_values(to, attempts),
                        events=_recovery_events(actor, to),
                        fence="observed",
                        lease="lapsed",
                        prior=lambda seen=seen: seen,
                        why="the lease was renewed or the claim changed meanwhile",
                        at=now,
                    )
                    for job in part:
                        if job.job_id in moved:
                            report.count(job, to)
                    for job_id, exc in moved.refused.items():
                        report.refused.append(f"{job_id}: {exc}")
                        refused.append(job_id)
        if len(candidates) < size:
            # What is still lapsed and not refused was locked by someone else: skipped.
            report.busy = capped_count(Job.objects.lapsed(now).exclude(job_id__in=refused))
            return report
        size = _next_sweep_batch(size, time.monotonic() - began, batch)


def _next_sweep_batch(size: int, took: float, most: int) -> int:
    """Halve the batch after a transaction longer than the aim, double it (up to ``most``)
    after one shorter than half of it."""
    if took > SWEEP_TRANSACTION_SECONDS:
        return max(min(most, _SWEEP_MIN_BATCH), size // 2)
    if took < SWEEP_TRANSACTION_SECONDS / 2:
        return min(most, size * 2)
    return size


# The sweep's transactions aim at this length (a quarter of the 1 s a row may stay locked);
# the first batch is small because it also measures the machine.
SWEEP_TRANSACTION_SECONDS = 0.25
_SWEEP_FIRST_BATCH = 100
_SWEEP_MIN_BATCH = 10


def recover_stale_claims(*, at: dt.datetime | None = None) -> int:
    """Recover every lapsed lease; return how many jobs moved."""
    return recover_stale_claims_report(at=at).total


# --- operator actions -------------------------------------------------------------------------


def retry_jobs(
    job_ids: Sequence[str],
    *,
    actor: str,
    reason: str,
    run_after: dt.datetime | None = None,
    at: dt.datetime | None = None,
) -> Moved:
    """FAILED → READY by an operator; each job gets a fresh attempt budget. With
    ``run_after`` (aware) the jobs are not claimed before it (an operator's "retry at");
    without, a deferral left from an earlier retry is cleared: they run now."""
    if not reason:
        raise ValueError("retry_job needs a reason")
    if run_after is not None and (run_after.tzinfo is None or run_after.utcoffset() is None):
        raise ValueError("run_after must be an aware datetime")

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        assert before is not None
        return [
            _event(
                job,
                EventType.RETRIED,
                actor,
                now,
                before.state,
                S.READY,
                reason=reason,
                previous_result_code=before.result_code,
                previous_attempts=before.attempt_count,
                **({"run_after": run_after.isoformat()} if run_after else {}),
            )
        ]

    return _move(
        [Held(job_id) for job_id in job_ids],
        to=S.READY,
        allowed=[S.FAILED],
        actor=actor,
        values={**CLEARED_CLAIM, "attempt_count": 0, "result_code": "", "run_after": run_after},
        events=events,
        prior=lambda: lock_jobs(job_ids, skip_locked=len(job_ids) > 1),
        at=at,
    )


def retry_job(
    job_id: str,
    *,
    actor: str,
    reason: str,
    run_after: dt.datetime | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """Retry one FAILED job (see ``retry_jobs``)."""
    return retry_jobs([job_id], actor=actor, reason=reason, run_after=run_after, at=at).one()


CANCELLABLE = (S.CREATED, S.READY, S.CLAIMED)


def cancel_jobs(
    job_ids: Sequence[str], *, actor: str, reason: str, at: dt.datetime | None = None
) -> Moved:
    """An operator's cancel of jobs that have not begun (CREATED, READY, or CLAIMED before its
    begin) → REJECTED with ``CANCELLED`` and the reason (DESIGN §1.3). A job that began is
    refused: it ends by its outcome, its lease or reconciliation. A holder of a cancelled
    claim is fenced off like any stale holder."""
    if not (reason or "").strip():
        raise ValueError("cancel_job needs a reason")

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        assert before is not None
        return [
            _event(
                job,
                EventType.REJECTED,
                actor,
                now,
                before.state,
                S.REJECTED,
                result_code="CANCELLED",
                reason=reason,
                cancelled=True,
                claim_id=before.claim_id,
                worker_id=before.worker_id,
            )
        ]

    return _move(
        [Held(job_id) for job_id in job_ids],
        to=S.REJECTED,
        allowed=CANCELLABLE,
        actor=actor,
        values={"result_code": "CANCELLED", "last_error": reason, **CLEARED_CLAIM},
        events=events,
        prior=lambda: lock_jobs(job_ids, skip_locked=len(job_ids) > 1),
        why="it began meanwhile",
        at=at,
    )


def cancel_job(job_id: str, *, actor: str, reason: str, at: dt.datetime | None = None) -> Job:
    """Cancel one job that has not begun (see ``cancel_jobs``)."""
    return cancel_jobs([job_id], actor=actor, reason=reason, at=at).one()


def reconcile_jobs(
    evidence: Mapping[str, Mapping[str, Any] | None],
    *,
    actor: str,
    result_code: str,
    reason: str = "",
    skip_locked: bool = False,
    at: dt.datetime | None = None,
) -> Moved:
    """OUTCOME_UNKNOWN → RECONCILED with a result code and, per job, the evidence that decided
    it (``evidence``: job id → evidence). With ``skip_locked`` (the auto-reconciler, bulk
    actions) a row held right now is refused as busy instead of waited on."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        return [
            _event(
                job,
                EventType.RECONCILED,
                actor,
                now,
                S.OUTCOME_UNKNOWN,
                S.RECONCILED,
                result_code=result_code,
                evidence=dict(evidence.get(job.job_id) or {}),
                reason=reason,
            )
        ]

    return _move(
        [Held(job_id) for job_id in evidence],
        to=S.RECONCILED,
        allowed=[S.OUTCOME_UNKNOWN],
        actor=actor,
        values={"result_code": result_code},
        events=events,
        prior=(lambda: lock_jobs(evidence, skip_locked=True)) if skip_locked else None,
        at=at,
    )


def reconcile_job(
    job_id: str,
    *,
    actor: str,
    result_code: str,
    evidence: Mapping[str, Any] | None = None,
    reason: str = "",
    at: dt.datetime | None = None,
) -> Job:
    """Reconcile one OUTCOME_UNKNOWN job (see ``reconcile_jobs``)."""
    return reconcile_jobs(
        {job_id: evidence}, actor=actor, result_code=result_code, reason=reason, at=at
    ).one()


def set_result_codes(
    detail: Mapping[str, Mapping[str, Any] | None],
    *,
    actor: str,
    result_code: str,
    states: Iterable[str] = (S.OUTCOME_UNKNOWN,),
    skip_locked: bool = False,
    at: dt.datetime | None = None,
) -> Moved:
    """Store a diagnosis as ``result_code`` without a state change (guarded on the state);
    ``detail``: job id → what the DIAGNOSED event records beside the state."""
    allowed = tuple(states)

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        return [
            Event(
                EventType.DIAGNOSED,
                actor,
                job_id=job.job_id,
                result_code=result_code,
                detail={"state": job.state, **dict(detail.get(job.job_id) or {})},
                at=now,
            )
        ]

    return _move(
        [Held(job_id) for job_id in detail],
        to=None,
        allowed=allowed,
        actor=actor,
        values={"result_code": result_code},
        events=events,
        prior=(
            (lambda: lock_jobs(detail, skip_locked=skip_locked))
            if skip_locked or len(allowed) > 1
            else None
        ),
        at=at,
    )


def set_result_code(
    job_id: str,
    *,
    actor: str,
    result_code: str,
    detail: Mapping[str, Any] | None = None,
    states: Iterable[str] = (S.OUTCOME_UNKNOWN,),
    at: dt.datetime | None = None,
) -> Job:
    """Store one diagnosis (see ``set_result_codes``)."""
    return set_result_codes(
        {job_id: detail}, actor=actor, result_code=result_code, states=states, at=at
    ).one()


def edit_job_fields(
    job_id: str, *, actor: str, changes: Mapping[str, Any], at: dt.datetime | None = None
) -> Job:
    """An admin's raw edit of the few editable fields, recorded as ADMIN_EDIT. No seal check:
    these fields are not sealed, and an operator may annotate a drifted job."""
    refused = sorted(set(changes) - set(EDITABLE_FIELDS))
    if refused:
        raise InvalidTransition(job_id, None, "edit", f"fields not editable: {', '.join(refused)}")
    with transaction.atomic():
        prior = lock_jobs([job_id])
        job = prior.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        changed = {k: v for k, v in changes.items() if getattr(job, k) != v}
        if not changed:
            return job

        def events(after: Job, before: Job | None, now: dt.datetime) -> list[Event]:
            detail = {
                "fields": sorted(changed),
                "before": {k: getattr(job, k) for k in changed},
                "after": dict(changed),
            }
            return [Event(EventType.ADMIN_EDIT, actor, job_id=job_id, detail=detail, at=now)]

        moved = _move(
            [Held(job_id)],
            to=None,
            allowed=tuple(JobState),
            actor=actor,
            values=changed,
            events=events,
            seal=False,
            prior=lambda: prior,
            at=at,
        )
    return moved.one()
