"""Retries of failed idempotent tasks: exponential backoff with jitter and a cap; each retry a new
attempt of the same job (EXECUTING → READY with ``run_after``, RETRY_SCHEDULED recorded); never
for a non-idempotent job."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.tasks import TaskResultStatus

from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.errors import InvalidTransition
from inbox.jobtypes import TASK, RetryPolicy, get_job_type, retry_delay
from inbox.models import Job, JobState
from inbox.tasks import is_idempotent, non_idempotent, retry, retry_policy
from tests.factories import OPERATOR, WORKER, make_job
from tests.tasks import sample
from tests.tasks.support import drain

S = JobState


def _drain_until_done(job_id: str, *, timeout: float = 30) -> Job:
    """Run the executor until the job leaves READY for good (waiting out each backoff)."""
    deadline = time.monotonic() + timeout
    while True:
        drain()
        job = Job.objects.get(job_id=job_id)
        if job.state != S.READY:
            return job
        assert time.monotonic() < deadline, "the retries did not finish in time"
        time.sleep(0.05)


# --- the policy -----------------------------------------------------------------------------------


def test_backoff_ceilings_double_then_stop_at_the_cap():
    policy = RetryPolicy(retries=8, backoff=1.0, cap=10.0, jitter=0.5)
    assert [policy.ceiling(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_backoff_delays_grow_and_stop_at_the_cap_whatever_the_jitter_draws():
    policy = RetryPolicy(retries=8, backoff=1.0, cap=10.0, jitter=0.5)
    for draw in (0.0, 0.3, 0.999):
        delays = [policy.delay(n, rand=lambda draw=draw: draw) for n in range(1, 8)]
        assert delays == sorted(delays)
        assert max(delays) <= 10.0
        assert delays[-1] == delays[-2] == delays[-3]  # capped
    # Jitter stays inside [ceiling × (1 − jitter), ceiling].
    for n in range(1, 8):
        for _ in range(50):
            assert policy.ceiling(n) * 0.5 <= policy.delay(n) <= policy.ceiling(n)


def test_backoff_huge_attempt_number_still_capped():
    assert RetryPolicy(retries=3, backoff=2.0, cap=60.0, jitter=0).delay(10_000) == 60.0


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"retries": 0}, "retry.retries"),
        ({"retries": True}, "retry.retries"),
        ({"retries": 3, "backoff": 10, "cap": 5}, "retry.cap: must not be shorter"),
        ({"retries": 3, "jitter": 1.5}, "retry.jitter"),
        ({"retries": 3, "backoff": float("inf")}, "retry.backoff"),
        ({"retries": 3, "forever": True}, "retry.forever: unknown field"),
    ],
)
def test_retry_policy_bad_values_refused(spec, problem):
    assert any(problem in p for p in RetryPolicy.problems(spec))
    with pytest.raises((ValueError, TypeError)):
        RetryPolicy(**spec)


def test_declaring_retries_on_a_non_idempotent_task_refused_in_either_order():
    def charge_twice(order: str) -> None: ...

    with pytest.raises(TypeError, match="cannot declare retries"):
        retry(retries=2)(non_idempotent(charge_twice))

    def charge_thrice(order: str) -> None: ...

    with pytest.raises(TypeError, match="cannot declare retries"):
        non_idempotent(retry(retries=2)(charge_thrice))


def test_declarations_below_task_decorator_mark_the_same_function():
    assert retry_policy(sample.retried_below) == RetryPolicy(retries=2, backoff=0.5, cap=1.0)
    assert not is_idempotent(sample.once_below)


@pytest.mark.django_db
def test_retry_delay_none_for_non_idempotent_type_or_when_retries_are_used_up():
    job = Job.objects.get(job_id=sample.flaky.enqueue("a", 0).id)
    assert job.max_attempts >= 4  # room for 1 + 3 retries
    job.attempt_count = 3
    assert retry_delay(job, get_job_type(TASK)) is not None
    job.attempt_count = 4
    assert retry_delay(job, get_job_type(TASK)) is None
    job.attempt_count = 1
    assert retry_delay(job, get_job_type("TASK_NON_IDEMPOTENT")) is None


# --- the transition -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_schedule_retry_back_to_ready_deferred_by_the_database_clock_attempt_kept():
    t0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
    job = make_job("save", S.EXECUTING, at=t0)
    moved = transitions.schedule_retry(
        job.job_id,
        claim_id=job.claim_id,
        actor=WORKER,
        retry_in=7.5,
        result_code="TASK_ERROR",
        error="RuntimeError: later",
        executed_detail={"handler": "h"},
        at=t0,
    )
    assert (moved.state, moved.run_after) == (S.READY, t0 + dt.timedelta(seconds=7.5))
    assert (moved.worker_id, moved.claim_id, moved.lease_until) == ("", "", None)
    assert (moved.attempt_count, moved.result_code) == (1, "TASK_ERROR")
    executed, scheduled = AuditEvent.objects.for_job(job.job_id).order_by("-event_id")[:2][::-1]
    assert executed.event_type == EventType.EXECUTED
    assert scheduled.event_type == EventType.RETRY_SCHEDULED
    assert scheduled.detail["attempt"] == 1
    assert scheduled.detail["run_after"] == (t0 + dt.timedelta(seconds=7.5)).isoformat()
    claim = {"scope": "save", "worker_id": "w", "lease_seconds": 30}
    assert transitions.claim_next_jobs(**claim, at=t0 + dt.timedelta(seconds=7)) == []
    assert [
        j.job_id for j in transitions.claim_next_jobs(**claim, at=t0 + dt.timedelta(seconds=8))
    ] == [job.job_id]


@pytest.mark.django_db
def test_schedule_retry_of_a_non_idempotent_job_refused_and_nothing_written():
    job = make_job("delete", S.EXECUTING)
    row = list(Job.objects.filter(job_id=job.job_id).values())
    events = AuditEvent.objects.count()
    with pytest.raises(InvalidTransition, match="never retried blindly"):
        transitions.schedule_retry(
            job.job_id, claim_id=job.claim_id, actor=WORKER, retry_in=1, result_code="X"
        )
    assert list(Job.objects.filter(job_id=job.job_id).values()) == row
    assert AuditEvent.objects.count() == events


@pytest.mark.django_db
def test_finish_jobs_retry_needs_a_delay_and_a_delay_needs_a_retry():
    job = make_job("save", S.EXECUTING)
    with pytest.raises(ValueError, match="not an outcome state"):
        transitions.finish_jobs([transitions.Outcome(job, S.FAILED, "X", retry_in=3)], actor=WORKER)
    with pytest.raises(ValueError, match="retry_in must be"):
        transitions.finish_jobs([transitions.Outcome(job, S.READY, "X", retry_in=-1)], actor=WORKER)


# --- an operator's "retry at" ---------------------------------------------------------------------


@pytest.mark.django_db
def test_retry_job_at_a_time_waits_until_then_and_records_it():
    t0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
    job = make_job("save", S.FAILED, at=t0)
    at = t0 + dt.timedelta(hours=2)
    retried = transitions.retry_job(
        job.job_id, actor=OPERATOR, reason="after the vault maintenance", run_after=at, at=t0
    )
    assert (retried.state, retried.run_after) == (S.READY, at)
    event = AuditEvent.objects.for_job(job.job_id).last()
    assert (event.event_type, event.detail["run_after"]) == (EventType.RETRIED, at.isoformat())
    claim = {"scope": "save", "worker_id": "w", "lease_seconds": 30}
    assert transitions.claim_next_jobs(**claim, at=at - dt.timedelta(minutes=1)) == []
    assert len(transitions.claim_next_jobs(**claim, at=at)) == 1


@pytest.mark.django_db
def test_retry_job_without_a_time_clears_an_earlier_deferral():
    job = make_job("save", S.EXECUTING)
    transitions.schedule_retry(
        job.job_id, claim_id=job.claim_id, actor=WORKER, retry_in=3600, result_code="X"
    )
    claimed = transitions.claim_job(
        job.job_id,
        worker_id=WORKER,
        lease_seconds=30,
        at=transitions.db_now() + dt.timedelta(hours=2),
    )
    transitions.begin_job(job.job_id, claim_id=claimed.claim_id, actor=WORKER)
    transitions.fail_job(job.job_id, claim_id=claimed.claim_id, actor=WORKER, result_code="X")
    retried = transitions.retry_job(job.job_id, actor=OPERATOR, reason="now please")
    assert retried.run_after is None


@pytest.mark.django_db
def test_retry_job_with_a_naive_time_refused():
    job = make_job("save", S.FAILED)
    with pytest.raises(ValueError, match="aware"):
        transitions.retry_job(
            job.job_id, actor=OPERATOR, reason="x", run_after=dt.datetime(2030, 1, 1)
        )
    assert Job.objects.get(job_id=job.job_id).state == S.FAILED


# --- the executor ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_failing_task_with_retries_retried_then_succeeds_one_job_every_attempt_recorded(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("TASK_MARKER", str(tmp_path / "runs"))
    result = sample.flaky.enqueue("twice", 2)
    drain()
    job = Job.objects.get(job_id=result.id)
    assert (job.state, job.attempt_count) == (S.READY, 1)
    assert job.run_after is not None and job.run_after > job.updated_at
    assert result.task.get_backend().get_result(result.id).status == TaskResultStatus.READY

    job = _drain_until_done(result.id)
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "twice ok after 3")
    assert result.attempts == 3
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"] * 2
    scheduled = AuditEvent.objects.filter(job_id=job.job_id, event_type=EventType.RETRY_SCHEDULED)
    assert [e.detail["attempt"] for e in scheduled.order_by("event_id")] == [1, 2]
    assert Job.objects.filter(object_id="tests.tasks.sample.flaky").count() == 1


@pytest.mark.django_db(transaction=True)
def test_failing_task_retries_used_up_ends_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("TASK_MARKER", str(tmp_path / "runs"))
    result = sample.flaky.enqueue("never", 99)
    job = _drain_until_done(result.id)
    assert (job.state, job.attempt_count) == (S.FAILED, 4)  # the first and its 3 retries
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 4
    delays = [
        e.detail["retry_in_s"]
        for e in AuditEvent.objects.filter(
            job_id=job.job_id, event_type=EventType.RETRY_SCHEDULED
        ).order_by("event_id")
    ]
    # backoff 1 s doubling, capped at 2 s, jitter 0.5: [0.5, 1], [1, 2], [1, 2]
    assert len(delays) == 3
    for delay, (low, high) in zip(delays, [(0.5, 1.0), (1.0, 2.0), (1.0, 2.0)], strict=True):
        assert low - 0.001 <= delay <= high + 0.001


@pytest.mark.django_db(transaction=True)
def test_failing_task_without_retries_fails_at_once():
    result = sample.boom.enqueue("no retry")
    drain()
    assert Job.objects.get(job_id=result.id).state == S.FAILED
    assert not AuditEvent.objects.filter(event_type=EventType.RETRY_SCHEDULED).exists()
