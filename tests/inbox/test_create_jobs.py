"""``create_jobs``: many jobs in one transaction with ``create_job``'s validation, idempotency,
sealing and audit, and an operator's cancel of a job that has not begun."""

from __future__ import annotations

import datetime as dt

import pytest

from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.errors import IdempotencyConflict, InvalidTransition, JobValidationError, LostClaim
from inbox.models import Job, JobState
from tests.factories import OPERATOR, PRODUCER, delete_doc, make_job, noop_doc, save_doc

pytestmark = pytest.mark.django_db

S = JobState


def _trail(job_id: str) -> list[tuple[str, str, dict]]:
    rows = AuditEvent.objects.for_job(job_id).values_list("event_type", "actor", "detail")
    return list(rows)


def _row(job: Job) -> dict:
    row = Job.objects.filter(job_id=job.job_id).values().get()
    return {
        k: v
        for k, v in row.items()
        if k
        not in (
            "job_id",
            "idempotency_key",
            "created_at",
            "updated_at",
            "object_id",
            "vault_path",
            "payload",
            "fingerprint",
        )
    }


def test_create_jobs_stores_each_like_create_job_with_one_insert_each():
    single, _ = transitions.create_job(save_doc(uid="one"), requested_by=PRODUCER)
    docs = [save_doc(uid=f"b{n}") for n in range(3)] + [delete_doc(uid="bd")]
    result = transitions.create_jobs(docs, requested_by=PRODUCER)

    assert result.ok and sorted(result.created) == [0, 1, 2, 3]
    assert not result.replayed
    for position, job in result.created.items():
        stored = Job.objects.get(job_id=docs[position]["job_id"])
        assert transitions.fingerprint_ok(stored)
        assert job.job_id == stored.job_id and job.state == stored.state
    saved = result.created[0]
    assert _row(saved) == _row(single)
    assert (
        [(t, a) for t, a, _d in _trail(saved.job_id)]
        == [(t, a) for t, a, _d in _trail(single.job_id)]
        == [(EventType.REQUESTED, PRODUCER), (EventType.READY, PRODUCER)]
    )
    deleted = Job.objects.get(job_id=docs[3]["job_id"])
    assert (deleted.state, deleted.fingerprint) == (S.CREATED, "")
    assert [t for t, _a, _d in _trail(deleted.job_id)] == [EventType.REQUESTED]


def test_create_jobs_keeps_the_input_order_as_the_claim_order():
    docs = [noop_doc(uid=f"z{n}") for n in range(5)][::-1]  # ids in descending order
    transitions.create_jobs(docs, requested_by=PRODUCER)
    claimed = transitions.claim_next_jobs(scope="noop", worker_id="w", lease_seconds=30, limit=5)
    assert [j.job_id for j in claimed] == [d["job_id"] for d in docs]


def test_create_jobs_replays_inside_one_batch_and_across_batches():
    doc = save_doc(uid="rep")
    first = transitions.create_jobs([doc, dict(doc)], requested_by=PRODUCER)
    assert list(first.created) == [0] and list(first.replayed) == [1]
    assert first.replayed[1].job_id == doc["job_id"]
    second = transitions.create_jobs([dict(doc)], requested_by=PRODUCER)
    assert not second.created and second.replayed[0].job_id == doc["job_id"]
    assert Job.objects.filter(job_id=doc["job_id"]).count() == 1
    assert AuditEvent.objects.filter(job_id=doc["job_id"]).count() == 2  # REQUESTED, READY


def test_create_jobs_refuses_conflicts_inside_a_batch_and_across_batches():
    doc = save_doc(uid="c1")
    variant = save_doc(uid="c1", content="# other\n")  # same ids and key, other content
    result = transitions.create_jobs([doc, variant], requested_by=PRODUCER)
    assert list(result.created) == [0]
    assert isinstance(result.refused[1], IdempotencyConflict)
    later = transitions.create_jobs([variant], requested_by=PRODUCER)
    assert isinstance(later.refused[0], IdempotencyConflict)
    assert Job.objects.get(job_id=doc["job_id"]).payload["content"] == doc["content"]


def test_create_jobs_lists_every_problem_of_every_refused_document():
    good = noop_doc(uid="ok")
    bad = noop_doc(uid="bad", job_version="one", vault_path="../up")
    result = transitions.create_jobs([bad, good, {"job_type": 7}], requested_by=PRODUCER)
    assert list(result.created) == [1]
    assert isinstance(result.refused[0], JobValidationError)
    problems = " ".join(result.refused[0].problems)
    assert "job_version" in problems and "vault_path" in problems
    assert isinstance(result.refused[2], JobValidationError)
    assert len(result.refused[2].problems) > 3


@pytest.mark.parametrize("trouble", ["invalid", "conflict"])
def test_create_jobs_all_or_nothing_stores_nothing_on_any_refusal(trouble):
    stored, _ = transitions.create_job(noop_doc(uid="pre"), requested_by=PRODUCER)
    before = (Job.objects.count(), AuditEvent.objects.count())
    other = (
        noop_doc(uid="bad", job_version=0)
        if trouble == "invalid"
        else noop_doc(uid="pre", object_id="changed")
    )
    result = transitions.create_jobs(
        [noop_doc(uid="fine"), other], requested_by=PRODUCER, all_or_nothing=True
    )
    assert not result.ok and not result.created
    assert (Job.objects.count(), AuditEvent.objects.count()) == before
    assert stored.job_id


# --- cancel -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "state"), [("delete", S.CREATED), ("save", S.READY)])
def test_cancel_job_not_begun_is_rejected_cancelled_with_the_reason(kind, state):
    job = make_job(kind, state)
    transitions.cancel_job(job.job_id, actor=OPERATOR, reason="duplicate request")
    stored = Job.objects.get(job_id=job.job_id)
    assert (stored.state, stored.result_code, stored.last_error) == (
        S.REJECTED,
        "CANCELLED",
        "duplicate request",
    )
    event = AuditEvent.objects.for_job(job.job_id).last()
    assert (event.event_type, event.actor, event.result_code) == (
        EventType.REJECTED,
        OPERATOR,
        "CANCELLED",
    )
    assert event.detail["reason"] == "duplicate request" and event.detail["from"] == state


def test_cancel_claimed_job_fences_its_holder():
    job = make_job("save", S.CLAIMED)
    transitions.cancel_job(job.job_id, actor=OPERATOR, reason="wrong target")
    with pytest.raises(LostClaim):
        transitions.begin_job(job.job_id, claim_id=job.claim_id, actor="worker-test")
    assert Job.objects.get(job_id=job.job_id).state == S.REJECTED
    assert AuditEvent.objects.filter(
        job_id=job.job_id, event_type=EventType.STALE_WRITE_REJECTED
    ).exists()


@pytest.mark.parametrize("state", [S.EXECUTING, S.SUCCEEDED, S.OUTCOME_UNKNOWN])
def test_cancel_job_that_began_is_refused_and_writes_nothing(state):
    job = make_job("delete" if state == S.OUTCOME_UNKNOWN else "save", state)
    before = (list(Job.objects.filter(job_id=job.job_id).values()), AuditEvent.objects.count())
    with pytest.raises(InvalidTransition, match=f"{state} → REJECTED"):
        transitions.cancel_job(job.job_id, actor=OPERATOR, reason="too late")
    assert (list(Job.objects.filter(job_id=job.job_id).values()), AuditEvent.objects.count()) == (
        before
    )


def test_cancel_needs_a_reason():
    job = make_job("save", S.READY)
    with pytest.raises(ValueError, match="reason"):
        transitions.cancel_job(job.job_id, actor=OPERATOR, reason="  ")


# --- the creation time: the database's, in the text a Python-stamped row has ------------------


def _stamped_alike(job: Job) -> None:
    """The stored job, its events and a lookup by its time all agree with ``job.created_at``:
    on SQLite that holds only if the statement wrote the very text Django writes for it."""
    stored = Job.objects.get(job_id=job.job_id)
    assert stored.created_at == stored.updated_at == job.created_at == job.updated_at
    assert Job.objects.filter(job_id=job.job_id, created_at=job.created_at).exists()
    assert Job.objects.filter(job_id=job.job_id, updated_at=job.updated_at).exists()
    times = set(AuditEvent.objects.for_job(job.job_id).values_list("created_at", flat=True))
    assert times == {job.created_at}
    assert AuditEvent.objects.filter(job_id=job.job_id, created_at=job.created_at).count() == 2


def test_a_single_job_is_stamped_with_the_database_clock():
    before = transitions.db_now()
    job, created = transitions.create_job(noop_doc(uid="clock"), requested_by=PRODUCER)
    after = transitions.db_now()
    assert created and before <= job.created_at <= after
    _stamped_alike(job)


def test_a_batch_behind_a_replayed_first_job_is_stamped_in_order():
    """A replayed job keeps its time; the jobs created after it in the batch take the batch's
    database time, one microsecond apart in input order."""
    first = noop_doc(uid="again")
    transitions.create_job(first, requested_by=PRODUCER)
    docs = [dict(first), noop_doc(uid="after-1"), noop_doc(uid="after-2")]
    result = transitions.create_jobs(docs, requested_by=PRODUCER)
    assert list(result.replayed) == [0] and sorted(result.created) == [1, 2]
    one, two = result.created[1], result.created[2]
    assert two.created_at - one.created_at == dt.timedelta(microseconds=1)
    assert one.created_at > result.replayed[0].created_at
    for job in (one, two):
        _stamped_alike(job)
