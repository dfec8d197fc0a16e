"""``run_after`` open to every job type: a producer's scheduled job (a READY job is not claimed
before it). Validated as ISO 8601 with a zone, stored in the column the claim filters on,
never sealed."""

from __future__ import annotations

import datetime as dt

import pytest

from inbox import transitions
from inbox.errors import JobValidationError
from inbox.models import Job, JobState
from tests.factories import PRODUCER, delete_doc, noop_doc, save_doc

pytestmark = pytest.mark.django_db

AT = dt.datetime(2030, 6, 1, 8, 30, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "make_doc", [save_doc, noop_doc, delete_doc], ids=["SAVE", "NOOP", "DELETE"]
)
def test_create_job_with_run_after_stores_it_in_the_column(make_doc):
    job, _created = transitions.create_job(
        make_doc(run_after="2030-06-01T10:30:00+02:00"), requested_by=PRODUCER
    )
    assert Job.objects.get(job_id=job.job_id).run_after == AT


@pytest.mark.parametrize("value", ["2030-06-02T08:00:00+23:30", "2030-05-31T09:00:00-23:30:00"])
def test_create_job_with_a_far_offset_stores_the_same_instant(value):
    # PostgreSQL refuses an offset over 15 hours; the instant is stored in UTC.
    job, _created = transitions.create_job(noop_doc(run_after=value), requested_by=PRODUCER)
    stored = Job.objects.get(job_id=job.job_id).run_after
    assert stored == dt.datetime.fromisoformat(value) == AT


def test_run_after_is_not_part_of_the_fingerprint():
    uid = "same-1"
    plain = transitions.build_job(noop_doc(uid=uid), requested_by=PRODUCER)[0]
    later = transitions.build_job(
        noop_doc(uid=uid, run_after=AT.isoformat()), requested_by=PRODUCER
    )[0]
    assert plain.fingerprint == later.fingerprint


def test_scheduled_job_not_claimed_before_its_time_then_claimed():
    job, _created = transitions.create_job(
        noop_doc(run_after=AT.isoformat()), requested_by=PRODUCER
    )
    claim = {"scope": "noop", "worker_id": "w", "lease_seconds": 30}
    assert transitions.claim_next_jobs(**claim, at=AT - dt.timedelta(microseconds=1)) == []
    [claimed] = transitions.claim_next_jobs(**claim, at=AT)
    assert (claimed.job_id, claimed.state) == (job.job_id, JobState.CLAIMED)


def test_scheduled_job_does_not_hold_back_the_ones_behind_it():
    early, _ = transitions.create_job(noop_doc(run_after=AT.isoformat()), requested_by=PRODUCER)
    now, _ = transitions.create_job(noop_doc(), requested_by=PRODUCER)
    claimed = transitions.claim_next_jobs(
        scope="noop", worker_id="w", lease_seconds=30, limit=5, at=AT - dt.timedelta(days=1)
    )
    assert [j.job_id for j in claimed] == [now.job_id]
    assert Job.objects.get(job_id=early.job_id).state == JobState.READY


def test_create_jobs_bulk_stores_run_after():
    created = transitions.create_jobs(
        [noop_doc(run_after=AT.isoformat()), noop_doc()], requested_by=PRODUCER
    )
    assert created.ok
    stored = [Job.objects.get(job_id=job.job_id).run_after for job in created.created.values()]
    assert stored == [AT, None]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("2030-06-01T08:30:00", "has no time zone"),
        ("next tuesday", "is not an ISO 8601 date and time"),
        ("2030-13-01T00:00:00Z", "is not an ISO 8601 date and time"),
        (1_900_000_000, "run_after: must be str, got int"),
        ("", "run_after: must not be empty"),
    ],
)
def test_create_job_with_bad_run_after_refused_and_nothing_stored(value, problem):
    with pytest.raises(JobValidationError) as info:
        transitions.create_job(noop_doc(run_after=value), requested_by=PRODUCER)
    assert any(problem in p for p in info.value.problems)
    assert not Job.objects.exists()
