from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from audit.events import Event
from audit.models import EventType
from core.db import mark_saved
from inbox.errors import IdempotencyConflict, InboxError, InvalidTransition
from inbox.jobtypes import IMMUTABLE_COLUMNS, get_job_type, parse_run_after, validate_job_document
from inbox.models import Job
from inbox.writer import postgresql, sqlite
from inbox.writer.engine import run
from inbox.writer.events import moved_events
from inbox.writer.rows import fingerprint_of, ids_of, lock_jobs, new_job
from inbox.writer.values import CLEARED_CLAIM, Held, Move, Moved, S


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
    job = new_job(
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
    fresh, twins = _within_batch(built, result)
    if all_or_nothing and result.refused:
        return result
    _save(built, fresh, twins, result, all_or_nothing=all_or_nothing, at=at)
    return result


def _within_batch(
    built: dict[int, tuple[Job, list[Event]]], result: Created
) -> tuple[dict[int, tuple[Job, list[Event]]], dict[int, int]]:
    """The same key twice in one batch: the first stands; a twin replays it, a variant
    conflicts (refused in ``result``). Returns (the documents to store by position, each
    twin's position → the earlier position it replays)."""
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
    return fresh, twins


def _save(
    built: dict[int, tuple[Job, list[Event]]],
    fresh: dict[int, tuple[Job, list[Event]]],
    twins: dict[int, int],
    result: Created,
    *,
    all_or_nothing: bool,
    at: dt.datetime | None,
) -> None:
    """Store the fresh jobs; a key already stored replays (same content) or conflicts."""
    # One transaction when it must roll back as a whole or when SQLite needs two statements;
    # on PostgreSQL a lone batch is one statement (jobs and events), atomic by itself.
    needs_transaction = all_or_nothing or connection.vendor != "postgresql"
    with transaction.atomic() if needs_transaction else contextlib.nullcontext():
        stamps = _store(list(fresh.values()), at)
        for position, (job, _events) in fresh.items():
            if job.job_id in stamps:
                job.created_at = job.updated_at = stamps[job.job_id]
                mark_saved(job)
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


def _store(fresh: list[tuple[Job, list[Event]]], at: dt.datetime | None) -> dict[str, dt.datetime]:
    """Insert the jobs and, for those actually stored (a key already present is skipped), their
    creation events; each job's ``created_at`` (the batch's database time plus one microsecond
    per position) by id. PostgreSQL: one statement; SQLite: one INSERT each, in the caller's
    transaction."""
    if not fresh:
        return {}
    dialect = postgresql if connection.vendor == "postgresql" else sqlite
    return dialect.store(fresh, at)


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

        def detail(job: Job, before: Job | None) -> dict[str, Any]:
            return {"fingerprint": sealed, "approval_id": attach}

        moved = run(
            Move(
                [Held(job_id)],
                to=S.READY,
                allowed=[S.CREATED],
                actor=actor,
                values={"approval_id": attach, "fingerprint": sealed},
                events=moved_events(EventType.READY, actor, S.READY, [S.CREATED], detail),
                prior=lambda: prior,
                check=check,
                at=at,
            )
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

    def detail(job: Job, before: Job | None) -> dict[str, Any]:
        return {"reason": reason, "result_code": result_code}

    events = moved_events(EventType.REJECTED, actor, S.REJECTED, allowed, detail)
    return run(
        Move(
            held,
            to=S.REJECTED,
            allowed=allowed,
            actor=actor,
            values={"result_code": result_code, "last_error": reason, **CLEARED_CLAIM},
            events=events,
            fence="holder" if holder else None,
            prior=lambda: lock_jobs(ids_of(held)),
            at=at,
        )
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
