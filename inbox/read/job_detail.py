"""The job detail page's read model: ``job_detail`` reads everything the page shows in one
call (the job, its trail and attempts, its holder's life, its seal, the actions its state
allows), and ``job_version`` reads the few things the page's watcher compares.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from audit.models import AuditEvent, EventType
from core.clock import db_now
from inbox.jobtypes import IMMUTABLE_COLUMNS, IMMUTABLE_PAYLOAD_FIELDS, registry
from inbox.models import HELD_STATES, TERMINAL_STATES, Job, JobState
from inbox.read.orphans import Orphan, orphaned
from inbox.transitions import fingerprint_ok

# Events drawn in red on the trail: refusals and rejected writes.
REFUSAL_EVENTS = frozenset({"REJECTED", "STALE_WRITE_REJECTED", "FINGERPRINT_DRIFT", "FAILED"})


def expiry_behaviour(job_type: str) -> str:
    """What the sweep does to this job type when its lease lapses: an idempotent job is offered
    again, any other is parked as OUTCOME_UNKNOWN for a person to reconcile."""
    spec = registry().get(job_type)
    return "retried" if spec is not None and spec.idempotent else "parked for reconcile"


@dataclass(frozen=True)
class Attempt:
    """One claim of a job, reconstructed from its CLAIMED event and what ended it."""

    number: int
    worker_id: str
    claim_id: str
    claimed_at: dt.datetime
    ended_by: str
    ended_at: dt.datetime | None
    result_code: str


# Events that close a claim in the trail.
_ATTEMPT_ENDS = {
    EventType.RELEASED,
    EventType.SUCCEEDED,
    EventType.FAILED,
    EventType.OUTCOME_UNKNOWN,
    EventType.LEASE_EXPIRED,
    EventType.REJECTED,
    EventType.RETRY_SCHEDULED,
}


def attempts_from_trail(events: Iterable[AuditEvent]) -> list[Attempt]:
    """Each CLAIMED event opens an attempt; the next ending event closes it."""
    attempts: list[Attempt] = []
    current: dict | None = None
    for event in events:
        if event.event_type == EventType.CLAIMED:
            if current is not None:
                attempts.append(Attempt(**current, ended_by="", ended_at=None, result_code=""))
            current = {
                "number": len(attempts) + 1,
                "worker_id": event.actor,
                "claim_id": str(event.detail.get("claim_id", "")),
                "claimed_at": event.created_at,
            }
        elif current is not None and event.event_type in _ATTEMPT_ENDS:
            attempts.append(
                Attempt(
                    **current,
                    ended_by=event.event_type,
                    ended_at=event.created_at,
                    result_code=event.result_code,
                )
            )
            current = None
    if current is not None:
        attempts.append(Attempt(**current, ended_by="", ended_at=None, result_code=""))
    return attempts


# How many trail events the detail page shows (newest kept); a job rarely has more.
TRAIL_LIMIT = 500


def job_trail(job_id: str, limit: int = TRAIL_LIMIT) -> list[AuditEvent]:
    """A job's events oldest first, capped (the audit page shows the rest)."""
    newest = list(AuditEvent.objects.filter(job_id=job_id).order_by("-event_id")[:limit])
    newest.reverse()
    return newest


# States an operator may cancel from: a job that has not begun; ``transitions.cancel_jobs``
# guards the same set in its WHERE clause, this only decides which buttons to show.
CANCELLABLE_STATES = (JobState.CREATED, JobState.READY, JobState.CLAIMED)


def allowed_actions(job: Job) -> list[str]:
    """The console actions the job's current state allows (the template shows only these)."""
    actions = []
    if job.state == JobState.FAILED:
        actions.append("retry")
    if job.state == JobState.OUTCOME_UNKNOWN:
        actions.append("reconcile")
    if job.state == JobState.CREATED and not job.approval_id:
        actions.append("approve")
    if job.state in CANCELLABLE_STATES:
        actions.append("cancel")
    return actions


def seal_status(job: Job) -> tuple[str, str]:
    """The fingerprint's state in words, and the css class that colours them."""
    if not job.fingerprint:
        return ("not sealed yet (sealed when the job becomes READY)", "muted")
    if fingerprint_ok(job):
        return ("sealed, intact", "ok")
    return ("DRIFT: immutable fields changed since sealing; transitions are refused", "bad")


def immutable_fields(job: Job) -> list[tuple[str, Any]]:
    """The fields the fingerprint seals, with their values (payload fields when present)."""
    rows: list[tuple[str, Any]] = [(name, getattr(job, name)) for name in IMMUTABLE_COLUMNS]
    payload = job.payload or {}
    rows += [(name, payload[name]) for name in IMMUTABLE_PAYLOAD_FIELDS if name in payload]
    return rows


def detail_token(job: Job, last_event: int, orphan: Orphan | None) -> str:
    """The detail page's version: it changes with the row, the trail or the holder's life."""
    text = f"{job.updated_at.isoformat()}|{last_event}|{orphan.dead_since if orphan else '-'}"
    return hashlib.sha1(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class JobDetail:
    """Everything the job detail page shows, read at one moment of the database clock."""

    job: Job
    now: dt.datetime
    orphan: Orphan | None
    trail: list[AuditEvent]
    attempts: list[Attempt]
    seal: tuple[str, str]
    immutable: list[tuple[str, Any]]
    on_expiry: str
    actions: list[str]

    @property
    def token(self) -> str:
        last_event = self.trail[-1].event_id if self.trail else 0
        return detail_token(self.job, last_event, self.orphan)

    def context(self) -> dict[str, Any]:
        """The template's names for the read model."""
        job = self.job
        return {
            "job": job,
            "now": self.now,
            "held": job.state in HELD_STATES,
            "terminal": job.state in TERMINAL_STATES,
            "orphan": self.orphan,
            "token": self.token,
            "trail": self.trail,
            "attempts": self.attempts,
            "refusals": REFUSAL_EVENTS,
            "fingerprint_text": self.seal[0],
            "fingerprint_css": self.seal[1],
            "immutable": self.immutable,
            "on_expiry": self.on_expiry,
            "actions": self.actions,
        }


def _find_job(job_id: str, *, payload: bool) -> Job | None:
    jobs = Job.objects.all() if payload else Job.objects.defer("payload")
    return jobs.filter(job_id=job_id).first()


def job_detail(job_id: str) -> JobDetail | None:
    """The job's page in one read (None: no such job): the row, the clock, the trail, and the
    holder's heartbeat when held."""
    job = _find_job(job_id, payload=True)
    if job is None:
        return None
    now = db_now()
    trail = job_trail(job.job_id)
    return JobDetail(
        job=job,
        now=now,
        orphan=orphaned([job], now).get(job.job_id),
        trail=trail,
        attempts=attempts_from_trail(trail),
        seal=seal_status(job),
        immutable=immutable_fields(job),
        on_expiry=expiry_behaviour(job.job_type),
        actions=allowed_actions(job),
    )


def job_version(job_id: str) -> str | None:
    """The detail page's version without reading the payload (a SAVE's content can be
    megabytes): the row, the newest event id (an index probe), the holder's heartbeat when
    held. None: no such job."""
    job = _find_job(job_id, payload=False)
    if job is None:
        return None
    last_event = (
        AuditEvent.objects.filter(job_id=job_id)
        .order_by("-event_id")
        .values_list("event_id", flat=True)
        .first()
        or 0
    )
    return detail_token(job, last_event, orphaned([job], db_now()).get(job.job_id))
