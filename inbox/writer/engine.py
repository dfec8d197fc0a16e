from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction

from core.db import bounded
from inbox.errors import ImmutableFieldDrift, InboxError
from inbox.models import Job
from inbox.writer import postgresql, sqlite
from inbox.writer.plan import Plan, conclude, plan_attempt
from inbox.writer.refusals import record_drift, record_stale_write, subject_of
from inbox.writer.rows import fingerprint_of
from inbox.writer.values import BatchDrift, Move, Moved


def run(move: Move) -> Moved:
    """Make one guarded move (see ``Move``)."""
    return run_moves([move])[0]


def run_moves(moves: Sequence[Move]) -> list[Moved]:
    """Make ``moves``: one, or several in one statement (the executor's turn: its outcomes
    and its next claim, on PostgreSQL). A drift refused in one attempt is left out of the next."""
    if not moves[0].held and moves[0].pick is None and len(moves) == 1:
        return [Moved()]
    refused: dict[str, InboxError] = {}
    drifted: list[Job] = []
    excluded: list[str] = []
    move = moves[0]
    while True:
        try:
            subject = subject_of(move.held)
            with bounded(subject), transaction.atomic(savepoint=move.savepoint):
                plans = [plan_attempt(m, excluded if len(moves) == 1 else []) for m in moves]
                returned = _write(plans)
                attempts = [conclude(p, r) for p, r in zip(plans, returned, strict=True)]
        except BatchDrift as exc:
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
            record_stale_write(job, item, m)
        for job in [*(drifted if n == 0 else []), *attempt_drifted]:
            record_drift(job, m.to or job.state, m.actor, m.at)
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


def _write(plans: Sequence[Plan]) -> list[dict[str, list[Any]]]:
    """The one statement of an attempt (each database's own: ``postgresql.write``,
    ``sqlite.write``); the returned rows by id, per plan."""
    out: list[dict[str, list[Any]]] = [{} for _ in plans]
    active = [(n, plan) for n, plan in enumerate(plans) if plan.writes]
    if active:
        dialect = postgresql if connection.vendor == "postgresql" else sqlite
        for n, rows in dialect.write(active).items():
            out[n] = rows
    return out
