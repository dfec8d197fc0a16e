"""Leases: fencing of stale holders, the stale sweep with ``at=``, and the database clock
(lease times come from the database, never a worker's wall clock)."""

from __future__ import annotations

import contextlib
import datetime as dt
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.errors import LostClaim
from inbox.models import Job, JobState
from inbox.writer import recovery
from tests.factories import make_job

pytestmark = pytest.mark.django_db

S = JobState
T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
LEASE = 30


def _row(job_id: str) -> list[dict]:
    return list(Job.objects.filter(job_id=job_id).values())


def _audit() -> list[dict]:
    return list(AuditEvent.objects.order_by("event_id").values())


# --- fencing ----------------------------------------------------------------------------------


def _lapsed_and_reclaimed(*, begun: bool) -> tuple[Job, str]:
    """Worker A holds the job (EXECUTING if ``begun``); its lease lapses, the sweep requeues it
    and worker B claims it. Return B's job row and A's stale claim id."""
    job = make_job("save", S.READY)
    a = transitions.claim_job(job.job_id, worker_id="w-a", lease_seconds=LEASE, at=T0)
    if begun:
        transitions.begin_job(job.job_id, claim_id=a.claim_id, actor="w-a", at=T0)
    later = T0 + dt.timedelta(seconds=LEASE + 1)
    assert transitions.recover_stale_claims(at=later) == 1
    b = transitions.claim_job(job.job_id, worker_id="w-b", lease_seconds=LEASE, at=later)
    assert b.claim_id != a.claim_id
    return b, a.claim_id


STALE_WRITES = {
    "renew_lease": lambda job_id, claim: transitions.renew_lease(
        job_id, claim_id=claim, lease_seconds=LEASE, actor="w-a"
    ),
    "begin_job": lambda job_id, claim: transitions.begin_job(job_id, claim_id=claim, actor="w-a"),
    "complete_job": lambda job_id, claim: transitions.complete_job(
        job_id, claim_id=claim, actor="w-a"
    ),
    "fail_job": lambda job_id, claim: transitions.fail_job(
        job_id, claim_id=claim, actor="w-a", result_code="HASH_MISMATCH"
    ),
    "release_job": lambda job_id, claim: transitions.release_job(
        job_id, claim_id=claim, actor="w-a"
    ),
    "mark_outcome_unknown": lambda job_id, claim: transitions.mark_outcome_unknown(
        job_id, claim_id=claim, actor="w-a"
    ),
}


@pytest.mark.parametrize("begun", [False, True], ids=["a-claimed", "a-executing"])
@pytest.mark.parametrize("write", list(STALE_WRITES))
def test_stale_holder_write_after_reclaim_raises_lost_claim_and_changes_nothing(write, begun):
    b, stale_claim = _lapsed_and_reclaimed(begun=begun)
    row_before = _row(b.job_id)
    events_before = AuditEvent.objects.count()

    with pytest.raises(LostClaim) as info:
        STALE_WRITES[write](b.job_id, stale_claim)

    assert info.value.job_id == b.job_id
    assert info.value.claim_id == stale_claim
    assert "no longer held" in str(info.value)
    assert _row(b.job_id) == row_before  # the new holder's row is untouched
    new = list(AuditEvent.objects.order_by("event_id")[events_before:])
    assert [(e.event_type, e.actor, e.result_code) for e in new] == [
        (EventType.STALE_WRITE_REJECTED, "w-a", "LOST_CLAIM")
    ]
    assert new[0].detail["claim_id"] == stale_claim
    assert new[0].detail["current_claim_id"] == b.claim_id
    assert new[0].detail["current_worker_id"] == "w-b"


def test_new_holder_keeps_working_after_stale_writes_are_refused():
    b, stale_claim = _lapsed_and_reclaimed(begun=True)
    for write in STALE_WRITES.values():
        with pytest.raises(LostClaim):
            write(b.job_id, stale_claim)
    transitions.renew_lease(b.job_id, claim_id=b.claim_id, lease_seconds=LEASE, actor="w-b")
    transitions.begin_job(b.job_id, claim_id=b.claim_id, actor="w-b")
    transitions.complete_job(b.job_id, claim_id=b.claim_id, actor="w-b")
    assert Job.objects.get(job_id=b.job_id).state == S.SUCCEEDED


def test_renew_lease_after_lapse_before_sweep_is_refused_without_change():
    job = make_job("save", S.READY)
    a = transitions.claim_job(job.job_id, worker_id="w-a", lease_seconds=LEASE, at=T0)
    before, audit_before = _row(job.job_id), _audit()
    with pytest.raises(LostClaim, match="lease lapsed"):
        transitions.renew_lease(
            job.job_id,
            claim_id=a.claim_id,
            lease_seconds=LEASE,
            at=T0 + dt.timedelta(seconds=LEASE, microseconds=1),
        )
    assert (_row(job.job_id), _audit()) == (before, audit_before)


def test_renew_lease_extends_from_now_and_records_event():
    job = make_job("save", S.READY)
    a = transitions.claim_job(job.job_id, worker_id="w-a", lease_seconds=LEASE, at=T0)
    at = T0 + dt.timedelta(seconds=LEASE)  # the last instant the lease still holds
    until = transitions.renew_lease(
        job.job_id, claim_id=a.claim_id, lease_seconds=120, actor="w-a", at=at
    )
    assert until == at + dt.timedelta(seconds=120)
    assert Job.objects.get(job_id=job.job_id).lease_until == until
    event = AuditEvent.objects.for_job(job.job_id).last()
    assert (event.event_type, event.actor, event.detail["claim_id"]) == (
        EventType.LEASE_RENEWED,
        "w-a",
        a.claim_id,
    )


# --- stale recovery with at= ------------------------------------------------------------------


def _held(kind: str, state: str, *, lease: int = LEASE, max_attempts: int | None = None) -> Job:
    job = make_job(kind, S.READY)
    if max_attempts is not None:
        transitions.edit_job_fields(job.job_id, actor="op", changes={"max_attempts": max_attempts})
    claimed = transitions.claim_job(job.job_id, worker_id="w-a", lease_seconds=lease, at=T0)
    if state == S.EXECUTING:
        transitions.begin_job(job.job_id, claim_id=claimed.claim_id, actor="w-a", at=T0)
    return Job.objects.get(job_id=job.job_id)


@pytest.mark.parametrize("state", [S.CLAIMED, S.EXECUTING])
def test_recover_lease_ending_exactly_at_now_is_not_lapsed(state):
    job = _held("save", state)
    assert job.lease_until == T0 + dt.timedelta(seconds=LEASE)
    before, audit_before = _row(job.job_id), _audit()
    assert transitions.recover_stale_claims(at=job.lease_until) == 0
    assert (_row(job.job_id), _audit()) == (before, audit_before)
    assert transitions.recover_stale_claims(at=job.lease_until + dt.timedelta(microseconds=1)) == 1


@pytest.mark.parametrize("state", [S.CLAIMED, S.EXECUTING])
@pytest.mark.parametrize(
    ("kind", "expected", "result_code"),
    [
        ("save", S.READY, ""),
        ("noop", S.READY, ""),
        ("delete", S.OUTCOME_UNKNOWN, "LEASE_EXPIRED"),
    ],
)
def test_recover_lapsed_lease_applies_idempotency_rule(kind, expected, result_code, state):
    job = _held(kind, state)
    at = T0 + dt.timedelta(seconds=LEASE + 5)
    assert transitions.recover_stale_claims(at=at) == 1
    after = Job.objects.get(job_id=job.job_id)
    assert (after.state, after.result_code, after.lease_until) == (expected, result_code, None)
    if expected == S.READY:
        assert (after.worker_id, after.claim_id) == ("", "")
    event = AuditEvent.objects.for_job(job.job_id).last()
    assert event.event_type == EventType.LEASE_EXPIRED
    assert (event.detail["from"], event.detail["to"]) == (state, expected)
    assert event.detail["claim_id"] == job.claim_id
    assert event.created_at == at


@pytest.mark.parametrize("state", [S.CLAIMED, S.EXECUTING])
def test_recover_delete_is_never_requeued_even_with_attempts_left(state):
    job = _held("delete", state, max_attempts=10)
    transitions.recover_stale_claims(at=T0 + dt.timedelta(hours=1))
    assert Job.objects.get(job_id=job.job_id).state == S.OUTCOME_UNKNOWN


@pytest.mark.parametrize("state", [S.CLAIMED, S.EXECUTING])
def test_recover_idempotent_at_max_attempts_fails_with_max_attempts(state):
    job = _held("save", state, max_attempts=1)
    assert job.attempt_count == 1
    transitions.recover_stale_claims(at=T0 + dt.timedelta(seconds=LEASE + 1))
    after = Job.objects.get(job_id=job.job_id)
    assert (after.state, after.result_code) == (S.FAILED, "MAX_ATTEMPTS")
    assert "1 attempts" in after.last_error


def test_recover_requeued_job_counts_attempts_until_max():
    job = make_job("save", S.READY)
    transitions.edit_job_fields(job.job_id, actor="op", changes={"max_attempts": 3})
    at = T0
    for attempt in (1, 2, 3):
        claimed = transitions.claim_job(job.job_id, worker_id="w", lease_seconds=LEASE, at=at)
        assert claimed.attempt_count == attempt
        at += dt.timedelta(seconds=LEASE + 1)
        transitions.recover_stale_claims(at=at)
    after = Job.objects.get(job_id=job.job_id)
    assert (after.state, after.result_code, after.attempt_count) == (S.FAILED, "MAX_ATTEMPTS", 3)


def _mixed_lapsed_pool() -> dict[str, list[str]]:
    ids: dict[str, list[str]] = {"save": [], "noop": [], "delete": [], "max": [], "fresh": []}
    for kind in ("save", "save", "noop", "delete", "delete", "delete"):
        ids[kind].append(_held(kind, S.EXECUTING).job_id)
    ids["max"].append(_held("save", S.CLAIMED, max_attempts=1).job_id)
    ids["fresh"].append(_held("save", S.CLAIMED, lease=3600).job_id)
    make_job("save", S.READY)
    make_job("save", S.SUCCEEDED)
    return ids


def test_recover_dry_run_reports_counts_and_writes_nothing():
    ids = _mixed_lapsed_pool()
    at = T0 + dt.timedelta(seconds=LEASE + 1)
    jobs_before, audit_before = list(Job.objects.order_by("job_id").values()), _audit()

    report = transitions.recover_stale_claims_report(at=at, dry_run=True, batch=3)

    assert list(Job.objects.order_by("job_id").values()) == jobs_before
    assert _audit() == audit_before
    assert report.requeued == {"SAVE_OBJECT": 2, "NOOP": 1}
    assert report.parked == {"DELETE_OBJECT": 3}
    assert report.max_attempts == {"SAVE_OBJECT": 1}
    assert report.total == 7
    assert ids["fresh"][0] not in report.job_ids
    assert report.summary(dry_run=True).startswith("would have requeued 1 NOOP, 2 SAVE_OBJECT")


def test_recover_report_counts_match_what_moved():
    ids = _mixed_lapsed_pool()
    at = T0 + dt.timedelta(seconds=LEASE + 1)
    report = transitions.recover_stale_claims_report(at=at, batch=2)
    assert (report.requeued, report.parked, report.max_attempts) == (
        {"SAVE_OBJECT": 2, "NOOP": 1},
        {"DELETE_OBJECT": 3},
        {"SAVE_OBJECT": 1},
    )
    assert report.refused == []
    states = dict(Job.objects.values_list("job_id", "state"))
    assert {states[i] for i in ids["save"] + ids["noop"]} == {S.READY}
    assert {states[i] for i in ids["delete"]} == {S.OUTCOME_UNKNOWN}
    assert states[ids["max"][0]] == S.FAILED
    assert states[ids["fresh"][0]] == S.CLAIMED
    expired = AuditEvent.objects.filter(event_type=EventType.LEASE_EXPIRED)
    assert sorted(expired.values_list("job_id", flat=True)) == sorted(report.job_ids)
    assert transitions.recover_stale_claims(at=at) == 0  # nothing left to do


def test_recover_batches_shrink_when_transactions_run_long_and_still_finish(monkeypatch):
    # Every transaction counts as too long: the batches go 4, 2, 1, 1, … and the sweep must
    # still move every lapsed job (it stops only on a batch shorter than the current size).
    monkeypatch.setattr(recovery, "SWEEP_TRANSACTION_SECONDS", 0.0)
    monkeypatch.setattr(recovery, "_SWEEP_MIN_BATCH", 1)
    ids = _mixed_lapsed_pool()
    at = T0 + dt.timedelta(seconds=LEASE + 1)
    report = transitions.recover_stale_claims_report(at=at, batch=4)
    assert report.total == 7
    assert ids["fresh"][0] not in report.job_ids
    assert transitions.recover_stale_claims(at=at) == 0


def test_sweep_batch_follows_the_transaction_time():
    aim = transitions.SWEEP_TRANSACTION_SECONDS
    assert recovery._next_sweep_batch(400, aim * 3, 1000) == 200
    assert recovery._next_sweep_batch(400, aim / 4, 1000) == 800
    assert recovery._next_sweep_batch(800, aim / 4, 1000) == 1000
    assert recovery._next_sweep_batch(400, aim * 0.75, 1000) == 400
    assert recovery._next_sweep_batch(10, aim * 3, 1000) == 10  # the floor
    assert recovery._next_sweep_batch(4, aim * 3, 4) == 4  # a floor above the cap: the cap


# --- one clock: the database's ----------------------------------------------------------------


def _database_now() -> dt.datetime:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT clock_timestamp()")
            return cursor.fetchone()[0]
        cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        return dt.datetime.fromisoformat(cursor.fetchone()[0]).replace(tzinfo=dt.UTC)


def _shift_process_clock(monkeypatch, seconds: int) -> None:
    """Shift every Python clock of this process; the database's clock is left alone."""
    shift = dt.timedelta(seconds=seconds)
    real_datetime, real_time, real_time_ns = dt.datetime, time.time, time.time_ns

    class _Meta(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, real_datetime)

    class ShiftedDatetime(real_datetime, metaclass=_Meta):
        @classmethod
        def now(cls, tz=None):
            return real_datetime.now(tz) + shift

        @classmethod
        def utcnow(cls):
            return real_datetime.now(dt.UTC).replace(tzinfo=None) + shift

    monkeypatch.setattr(time, "time", lambda: real_time() + seconds)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + seconds * 1_000_000_000)
    monkeypatch.setattr(dt, "datetime", ShiftedDatetime)
    monkeypatch.setattr(timezone, "now", lambda: real_datetime.now(dt.UTC) + shift)


TOLERANCE = dt.timedelta(seconds=5)


@pytest.mark.parametrize("shift", [-15 * 60, 15 * 60], ids=["minus-15min", "plus-15min"])
def test_lease_comes_from_database_clock_when_process_clock_is_shifted(monkeypatch, shift):
    job = make_job("save", S.READY)
    other = make_job("save", S.READY)
    _shift_process_clock(monkeypatch, shift)
    assert abs(timezone.now() - _database_now()) > dt.timedelta(minutes=14)

    claimed = transitions.claim_job(job.job_id, worker_id="w", lease_seconds=LEASE)
    [batch] = transitions.claim_next_jobs(scope="save", worker_id="w", lease_seconds=LEASE)
    assert batch.job_id == other.job_id
    renewed = transitions.renew_lease(job.job_id, claim_id=claimed.claim_id, lease_seconds=LEASE)
    db_now = _database_now()

    for until in (claimed.lease_until, batch.lease_until, renewed):
        assert abs(until - dt.timedelta(seconds=LEASE) - db_now) < TOLERANCE
    stored = Job.objects.get(job_id=other.job_id)
    assert abs(stored.lease_until - dt.timedelta(seconds=LEASE) - db_now) < TOLERANCE
    assert abs(stored.claimed_at - db_now) < TOLERANCE

    # The sweep reads the same clock: fresh leases are not lapsed whatever this process thinks.
    assert transitions.recover_stale_claims() == 0
    assert set(Job.objects.values_list("state", flat=True)) == {S.CLAIMED}
    events = AuditEvent.objects.filter(event_type=EventType.CLAIMED)
    assert all(abs(e.created_at - db_now) < TOLERANCE for e in events)


@pytest.mark.parametrize("logged", [False, True], ids=["quiet", "queries-logged"])
def test_db_now_reads_the_database_clock_between_two_reads_of_it(monkeypatch, logged):
    """``db_now`` is the database's time as the database itself reads it: between two reads
    made by the database, whatever this process's Python clock says; on SQLite in the
    millisecond steps SQLite's clock has. With queries logged the read is in the log."""
    _shift_process_clock(monkeypatch, 15 * 60)
    before = _database_now()
    with CaptureQueriesContext(connection) if logged else contextlib.nullcontext() as queries:
        now = transitions.db_now()
    after = _database_now()
    if logged:
        assert len(queries) == 1
    assert before <= now <= after
    assert now.utcoffset() == dt.timedelta(0)
    if connection.vendor == "sqlite":
        assert now.microsecond % 1000 == 0
