"""Batched begin and outcome steps (``begin_jobs`` / ``finish_jobs``): the executor's fast path
for idempotent types must do exactly what the one-job functions do, row by row, and leave every
row it cannot move untouched for them (its state, claim fence, lease and seal all checked)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection

from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.errors import ImmutableFieldDrift, LostClaim
from inbox.executor import Executor
from inbox.models import Job, JobState
from tests.factories import make_job, noop_doc

pytestmark = pytest.mark.django_db

S = JobState
T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
LEASE = 30
WORKER = "w-batch"


def _claimed(n: int, kind: str = "save", at: dt.datetime = T0) -> list[Job]:
    for _ in range(n):
        make_job(kind, S.READY, at=at)
    scope = {"save": "save", "noop": "noop"}[kind]
    jobs = transitions.claim_next_jobs(
        scope=scope, worker_id=WORKER, lease_seconds=LEASE, limit=n, at=at
    )
    assert len(jobs) == n
    return jobs


def _events(job_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(type, result code, detail) of a job's events after its claim, in order."""
    rows = AuditEvent.objects.for_job(job_id).values_list("event_type", "result_code", "detail")
    kept = [r for r in rows if r[0] not in (EventType.REQUESTED, EventType.READY)]
    return [(t, code, detail) for t, code, detail in kept if t != EventType.CLAIMED]


def _without_claim(events):
    return [(t, code, {k: v for k, v in d.items() if k != "claim_id"}) for t, code, d in events]


def _snapshot() -> tuple[list[dict], int]:
    return list(Job.objects.order_by("job_id").values()), AuditEvent.objects.count()


def test_begin_jobs_matches_begin_job_row_for_row():
    batched = _claimed(3)
    single = _claimed(1)[0]
    checks = {"schema": "ok", "fingerprint": "x"}
    at = T0 + dt.timedelta(seconds=5)

    moved = transitions.begin_jobs(
        batched,
        actor=WORKER,
        lease_seconds=LEASE,
        authorized={j.job_id: checks for j in batched},
        at=at,
    )
    transitions.begin_job(
        single.job_id,
        claim_id=single.claim_id,
        actor=WORKER,
        lease_seconds=LEASE,
        authorized=checks,
        at=at,
    )

    assert moved == {j.job_id for j in batched}
    reference = Job.objects.get(job_id=single.job_id)
    for job in batched:
        row = Job.objects.get(job_id=job.job_id)
        assert (row.state, row.lease_until, row.updated_at, row.claim_id) == (
            S.EXECUTING,
            at + dt.timedelta(seconds=LEASE),
            at,
            job.claim_id,
        )
        assert (job.state, job.lease_until) == (row.state, row.lease_until)  # updated in place
        assert (row.lease_until, row.updated_at) == (reference.lease_until, reference.updated_at)
        assert _events(job.job_id) == _events(single.job_id)
        assert [t for t, _c, _d in _events(job.job_id)] == [
            EventType.STARTED,
            EventType.AUTHORIZED,
        ]


def test_finish_jobs_matches_the_one_job_outcomes():
    jobs = _claimed(4)
    at = T0 + dt.timedelta(seconds=1)
    transitions.begin_jobs(jobs, actor=WORKER, lease_seconds=LEASE, authorized={}, at=at)
    ok_a, ok_b, failed, twin = jobs
    # The reference: the same outcome as ok_a, through complete_job.
    executed = {"handler": "inbox.handlers.save_object", "duration_ms": 1.5}
    outcomes = [
        transitions.Outcome(ok_a, S.SUCCEEDED, "SAVED", executed_detail=executed),
        transitions.Outcome(ok_b, S.SUCCEEDED, "UNCHANGED", executed_detail=executed),
        transitions.Outcome(
            failed, S.FAILED, "HASH_MISMATCH", error="hash differs", executed_detail=executed
        ),
    ]
    moved = transitions.finish_jobs(outcomes, actor=WORKER, at=at)
    transitions.complete_job(
        twin.job_id,
        claim_id=twin.claim_id,
        actor=WORKER,
        result_code="SAVED",
        executed_detail=executed,
        at=at,
    )

    assert moved == {ok_a.job_id, ok_b.job_id, failed.job_id}
    rows = {r.job_id: r for r in Job.objects.filter(job_id__in=[j.job_id for j in jobs])}
    assert (rows[ok_a.job_id].state, rows[ok_a.job_id].result_code) == (S.SUCCEEDED, "SAVED")
    assert (rows[ok_b.job_id].state, rows[ok_b.job_id].result_code) == (S.SUCCEEDED, "UNCHANGED")
    assert (rows[failed.job_id].state, rows[failed.job_id].last_error) == (S.FAILED, "hash differs")
    assert all(r.lease_until is None and r.claim_id for r in rows.values())
    assert _events(ok_a.job_id) == _events(twin.job_id)
    assert [t for t, _c, _d in _events(failed.job_id)][-2:] == [
        EventType.EXECUTED,
        EventType.FAILED,
    ]
    assert _events(failed.job_id)[-1][2]["error"] == "hash differs"


def test_begin_jobs_skips_a_lost_claim_and_begin_job_then_names_it():
    jobs = _claimed(3)
    lost = jobs[1]
    later = T0 + dt.timedelta(seconds=LEASE + 1)
    # A's lease lapses; the sweep requeues the job and worker B claims it.
    assert transitions.recover_stale_claims(at=later) == 3
    for job in jobs:
        if job is not lost:  # A's other claims were requeued too: re-claim them for A
            job.claim_id = transitions.claim_job(
                job.job_id, worker_id=WORKER, lease_seconds=LEASE, at=later
            ).claim_id
    b = transitions.claim_job(lost.job_id, worker_id="w-b", lease_seconds=LEASE, at=later)

    moved = transitions.begin_jobs(jobs, actor=WORKER, lease_seconds=LEASE, authorized={}, at=later)

    assert moved == {jobs[0].job_id, jobs[2].job_id}
    row = Job.objects.get(job_id=lost.job_id)
    assert (row.state, row.claim_id, row.worker_id) == (S.CLAIMED, b.claim_id, "w-b")
    assert not AuditEvent.objects.filter(job_id=lost.job_id, event_type=EventType.STARTED)
    with pytest.raises(LostClaim):
        transitions.begin_job(lost.job_id, claim_id=lost.claim_id, actor=WORKER, at=later)
    assert AuditEvent.objects.filter(
        job_id=lost.job_id, event_type=EventType.STALE_WRITE_REJECTED
    ).exists()


def test_begin_jobs_does_not_begin_a_job_whose_lease_lapsed():
    jobs = _claimed(2)
    before = _snapshot()
    late = T0 + dt.timedelta(seconds=LEASE + 1)

    moved = transitions.begin_jobs(jobs, actor=WORKER, lease_seconds=LEASE, authorized={}, at=late)

    assert moved == set()
    assert _snapshot() == before
    assert all(j.state == S.CLAIMED for j in jobs)


def test_finish_jobs_leaves_a_job_that_is_not_executing():
    jobs = _claimed(2)
    transitions.begin_jobs(jobs, actor=WORKER, lease_seconds=LEASE, authorized={}, at=T0)
    done = jobs[0]
    transitions.complete_job(done.job_id, claim_id=done.claim_id, actor=WORKER, at=T0)
    events_before = AuditEvent.objects.filter(job_id=done.job_id).count()

    moved = transitions.finish_jobs(
        [transitions.Outcome(j, S.FAILED, "BOOM", error="x") for j in jobs], actor=WORKER, at=T0
    )

    assert moved == {jobs[1].job_id}
    assert Job.objects.get(job_id=done.job_id).state == S.SUCCEEDED
    assert AuditEvent.objects.filter(job_id=done.job_id).count() == events_before


@pytest.mark.parametrize("step", ["begin", "finish"])
@pytest.mark.parametrize("field", ["payload", "column"])
def test_a_fingerprint_drift_undoes_the_whole_batch(step, field):
    jobs = _claimed(3)
    if step == "finish":
        transitions.begin_jobs(jobs, actor=WORKER, lease_seconds=LEASE, authorized={}, at=T0)
    tampered = jobs[2]
    # An immutable field changed behind our back (raw SQL, as a bad migration would).
    with connection.cursor() as cursor:
        if field == "column":
            cursor.execute(
                "UPDATE inbox_job SET object_id = 'evil' WHERE job_id = %s", [tampered.job_id]
            )
        elif connection.vendor == "postgresql":
            cursor.execute(
                "UPDATE inbox_job SET payload = jsonb_set(payload, '{source_commit}', '\"evil\"')"
                " WHERE job_id = %s",
                [tampered.job_id],
            )
        else:
            cursor.execute(
                "UPDATE inbox_job SET payload = json_set(payload, '$.source_commit', 'evil')"
                " WHERE job_id = %s",
                [tampered.job_id],
            )
    before = _snapshot()

    if step == "begin":
        moved = transitions.begin_jobs(
            jobs, actor=WORKER, lease_seconds=LEASE, authorized={}, at=T0
        )
    else:
        moved = transitions.finish_jobs(
            [transitions.Outcome(j, S.SUCCEEDED, "OK") for j in jobs], actor=WORKER, at=T0
        )

    assert moved == set()
    assert _snapshot() == before  # nothing written, not even for the two intact jobs
    # The one-job path then refuses exactly the drifted job and records why.
    with pytest.raises(ImmutableFieldDrift):
        if step == "begin":
            transitions.begin_job(tampered.job_id, claim_id=tampered.claim_id, actor=WORKER)
        else:
            transitions.complete_job(tampered.job_id, claim_id=tampered.claim_id, actor=WORKER)
    assert AuditEvent.objects.filter(
        job_id=tampered.job_id, event_type=EventType.FINGERPRINT_DRIFT
    ).exists()


def test_finish_jobs_refuses_a_state_that_is_not_an_outcome():
    job = _claimed(1)[0]
    with pytest.raises(ValueError, match="not an outcome state"):
        transitions.finish_jobs([transitions.Outcome(job, S.READY, "OK")], actor=WORKER)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("batch_steps", [True, False])
def test_executor_writes_the_same_trail_batched_or_one_by_one(batch_steps):
    """The fast path is invisible in the audit trail: every job gets the full sequence."""
    for _ in range(23):
        transitions.create_job(noop_doc(), requested_by="producer")
    stats = Executor(
        scope="noop",
        batch=10,
        exit_when_idle=True,
        poll_seconds=0.1,
        batch_steps=batch_steps,
        out=lambda _line: None,
    ).run()

    assert (stats.succeeded, stats.not_ok) == (23, 0)
    assert set(Job.objects.values_list("state", flat=True)) == {S.SUCCEEDED}
    for job_id in Job.objects.values_list("job_id", flat=True):
        trail = list(AuditEvent.objects.for_job(job_id).values_list("event_type", flat=True))
        assert trail == [
            EventType.REQUESTED,
            EventType.READY,
            EventType.CLAIMED,
            EventType.STARTED,
            EventType.AUTHORIZED,
            EventType.EXECUTED,
            EventType.SUCCEEDED,
        ]
        executed = AuditEvent.objects.get(job_id=job_id, event_type=EventType.EXECUTED)
        assert executed.detail["handler"] == "inbox.handlers.noop"
        assert executed.result_code == "OK"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("flush_seconds", "commits"), [(3600.0, [4]), (0.0, [1, 1, 1, 1])])
def test_a_batch_records_its_outcomes_at_least_every_flush_interval(
    monkeypatch, flush_seconds, commits
):
    """Fast handlers: one outcome commit per batch. Slow ones (here: every handler outlasts the
    interval): each finished job is recorded right away, not after the rest of its batch."""
    from inbox import executor as executor_module

    monkeypatch.setattr(executor_module, "OUTCOME_FLUSH_SECONDS", flush_seconds)
    sizes: list[int] = []
    real = Executor._settle

    def counting(self, outcomes, moved):
        # Every commit of outcomes ends here (alone, or with the next claim in one turn).
        if outcomes:
            sizes.append(len(outcomes))
        return real(self, outcomes, moved)

    monkeypatch.setattr(Executor, "_settle", counting)
    for _ in range(4):
        transitions.create_job(noop_doc(), requested_by="producer")

    stats = Executor(
        scope="noop", batch=10, exit_when_idle=True, poll_seconds=0.1, out=lambda _line: None
    ).run()

    assert stats.succeeded == 4
    assert sizes == commits
    assert set(Job.objects.values_list("state", flat=True)) == {S.SUCCEEDED}
