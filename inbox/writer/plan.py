from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from audit.events import Event, PairedEvents, RowEvent, record_events
from core import faults
from core.clock import db_now
from core.errors import Busy
from inbox.errors import ImmutableFieldDrift, InboxError, InvalidTransition
from inbox.models import FINISHED_STATES, Job
from inbox.writer.refusals import is_stale, lost_race, refusal_of
from inbox.writer.rows import (
    COL_CREATED,
    COL_JOB_ID,
    COL_UPDATED,
    caller_copy,
    ids_of,
    job_of,
    seal_holds,
    update_copy,
)
from inbox.writer.sqlite import count_finished
from inbox.writer.values import BatchDrift, BatchRefused, DbClock, Held, Move, S


@dataclass
class Plan:
    """One attempt of a move up to its statement: the rows it aims at, what it assigns, what
    was refused before the write (``prior``), and the events that ride in the statement."""

    move: Move
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


def plan_attempt(move: Move, excluded: list[str]) -> Plan:
    """What an attempt of ``move`` will write, and what it refuses before writing."""
    pg = connection.vendor == "postgresql"
    # Nothing reads the time before the write: on PostgreSQL the UPDATE reads its own clock.
    own_clock = move.at is None and move.prior is None and move.check is None and pg
    now: Any = DbClock() if own_clock else db_now(move.at)
    values = move.values
    assigned = dict(values(now) if callable(values) else values or {})
    targets = [item for item in move.held if item.job_id not in excluded]
    before_rows = move.prior() if move.prior is not None else {}
    plan = Plan(move, now, assigned, targets, targets, excluded, before_rows)
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
            error = refusal_of(before, item, move, now)
            if error is None and move.check is not None:
                try:
                    move.check(before, now)
                except InvalidTransition as exc:
                    error = exc
            if error is None:
                plan.candidates.append(item)
                continue
            plan.refused[item.job_id] = error
            if is_stale(error, before, item, move):
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
                e for item in plan.candidates for e in move.events(caller_copy(item), None, now)
            ]
    if pg and move.row_events:
        plan.derived = move.row_events
    return plan


def conclude(
    plan: Plan, returned: dict[str, list[Any]]
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
    targets = plan.targets
    if plan.writes:
        targets, rows, now = _take_returned(plan, returned)
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
        count_finished([after for after, _before in rows.values()])
    return rows, plan.refused, plan.stale, plan.drifted, targets


def _take_returned(
    plan: Plan, returned: dict[str, list[Any]]
) -> tuple[list[Held], dict[str, tuple[Job, Job | None]], Any]:
    """The rows the write returned: seals checked, the caller's copies brought up to date, the
    rows it did not move named. Returns (the rows aimed at, in order; the moved rows with their
    prior row; the time of the move)."""
    move, now = plan.move, plan.now
    targets, candidates = plan.targets, plan.candidates
    if move.pick is not None:
        # What the UPDATE chose, in claim order (RETURNING promises no order).
        order = sorted(returned.values(), key=lambda row: (row[COL_CREATED], row[COL_JOB_ID]))
        targets = candidates = [Held(row[COL_JOB_ID]) for row in order]
    # A picked row left a sealed state (READY): it must carry its seal.
    bad = [
        job_id
        for job_id, row in returned.items()
        if move.seal and not seal_holds(row, required=move.pick is not None)
    ]
    if bad:
        raise BatchDrift(bad)
    if isinstance(now, DbClock) and returned:
        # The statement's time, as the moved rows' updated_at tells it.
        now = next(iter(returned.values()))[COL_UPDATED]
    changed = [*plan.assigned, "state", "updated_at"]
    rows: dict[str, tuple[Job, Job | None]] = {}
    for item in candidates:
        row = returned.get(item.job_id)
        if row is not None:
            after = job_of(row) if item.job is None else update_copy(item.job, row, changed)
            rows[item.job_id] = (after, plan.before_rows.get(item.job_id))
    missing = [item for item in candidates if item.job_id not in returned]
    if missing:
        now = _refuse_missing(plan, missing, now)
    return targets, rows, now


def _refuse_missing(plan: Plan, missing: list[Held], now: Any) -> Any:
    """Name why each row the guarded UPDATE left alone was refused, from the rows as read under
    lock (``prior``) or as stored now; the time, read if only a refusal needed it."""
    move = plan.move
    if move.prior is not None:
        for item in missing:
            plan.refused[item.job_id] = lost_race(
                item.job_id, plan.before_rows[item.job_id], move.to
            )
        return now
    if isinstance(now, DbClock):
        now = db_now()  # only a refusal needs the time in Python
    current = {j.job_id: j for j in Job.objects.filter(job_id__in=ids_of(missing))}
    for item in missing:
        job = current.get(item.job_id)
        error = refusal_of(job, item, move, now) or lost_race(item.job_id, job, move.to)
        plan.refused[item.job_id] = error
        if is_stale(error, job, item, move):
            plan.stale.append((job, item))
        elif isinstance(error, ImmutableFieldDrift) and job is not None:
            plan.drifted.append(job)
    return now


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
