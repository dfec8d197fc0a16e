"""The late holder's word: a holder whose lease lapsed, and whose job the sweep already moved,
reports its outcome afterwards. The report is refused (the job does not change) and recorded
as STALE_WRITE_REJECTED with the holder, its claim and what it reported; nothing else is
written. Runs on SQLite and PostgreSQL (the suite's two passes)."""

from __future__ import annotations

import datetime as dt

import pytest

from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.errors import InvalidTransition, LostClaim
from inbox.models import Job, JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db

S = JobState
T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
LEASE = 30
LATER = T0 + dt.timedelta(seconds=LEASE + 1)
REPORT_AT = LATER + dt.timedelta(seconds=5)
DELETED = {"result_code": "DELETED", "vault_path": "notes/x.md", "sha256": "ab" * 32}


def _parked_delete() -> tuple[Job, str]:
    """A DELETE begun by w-a whose lease lapsed; the sweep parked it as OUTCOME_UNKNOWN."""
    job = make_job("delete", S.READY)
    claim = transitions.claim_job(job.job_id, worker_id="w-a", lease_seconds=LEASE, at=T0)
    transitions.begin_job(job.job_id, claim_id=claim.claim_id, actor="w-a", at=T0)
    assert transitions.recover_stale_claims(at=LATER) == 1
    parked = Job.objects.get(job_id=job.job_id)
    assert parked.state == S.OUTCOME_UNKNOWN and parked.claim_id == claim.claim_id
    return parked, claim.claim_id


REPORTS = {
    "complete_job": lambda job_id, claim: transitions.complete_job(
        job_id,
        claim_id=claim,
        actor="w-a",
        result_code="DELETED",
        executed_detail={"handler": "delete_object", **DELETED},
        at=REPORT_AT,
    ),
    "fail_job": lambda job_id, claim: transitions.fail_job(
        job_id,
        claim_id=claim,
        actor="w-a",
        result_code="HASH_MISMATCH",
        error="the object changed",
        at=REPORT_AT,
    ),
    "mark_outcome_unknown": lambda job_id, claim: transitions.mark_outcome_unknown(
        job_id, claim_id=claim, actor="w-a", error="I/O error around the unlink", at=REPORT_AT
    ),
    "finish_jobs": lambda job_id, claim: transitions.finish_jobs(
        [
            transitions.Outcome(
                Job(job_id=job_id, claim_id=claim), S.SUCCEEDED, "DELETED", "", DELETED
            )
        ],
        actor="w-a",
        at=REPORT_AT,
    ).one(),
}
WANTED = {
    "complete_job": (S.SUCCEEDED, "DELETED"),
    "fail_job": (S.FAILED, "HASH_MISMATCH"),
    "mark_outcome_unknown": (S.OUTCOME_UNKNOWN, "UNKNOWN"),
    "finish_jobs": (S.SUCCEEDED, "DELETED"),
}


@pytest.mark.parametrize("report", list(REPORTS))
def test_late_report_on_parked_delete_is_refused_and_recorded_with_holder_claim_outcome(report):
    job, claim = _parked_delete()
    row_before = list(Job.objects.filter(job_id=job.job_id).values())
    last = AuditEvent.objects.order_by("-event_id").values_list("event_id", flat=True)[0]

    with pytest.raises(LostClaim) as info:
        REPORTS[report](job.job_id, claim)

    assert "the sweep moved the job" in str(info.value)
    assert list(Job.objects.filter(job_id=job.job_id).values()) == row_before
    new = list(AuditEvent.objects.filter(event_id__gt=last).order_by("event_id"))
    assert [(e.event_type, e.actor, e.result_code) for e in new] == [
        (EventType.STALE_WRITE_REJECTED, "w-a", "LOST_CLAIM")
    ]
    detail = new[0].detail
    assert new[0].created_at == REPORT_AT
    assert detail["claim_id"] == detail["current_claim_id"] == claim
    assert detail["current_worker_id"] == "w-a"
    assert detail["attempt"] == 1
    assert detail["state"] == S.OUTCOME_UNKNOWN
    to, code = WANTED[report]
    assert (detail["to"], detail["reported"]["to"], detail["reported"]["result_code"]) == (
        to,
        to,
        code,
    )
    if report in ("complete_job", "finish_jobs"):
        assert detail["reported"]["executed"]["vault_path"] == "notes/x.md"
    if report == "fail_job":
        assert detail["reported"]["detail"]["error"] == "the object changed"


def test_late_report_after_reconcile_is_still_recorded():
    job, claim = _parked_delete()
    transitions.reconcile_job(
        job.job_id, actor="op", result_code="CONFIRMED_DELETED", evidence={"present": False}
    )
    with pytest.raises(LostClaim):
        REPORTS["complete_job"](job.job_id, claim)
    assert Job.objects.get(job_id=job.job_id).state == S.RECONCILED
    event = AuditEvent.objects.filter(job_id=job.job_id).order_by("-event_id").first()
    assert event.event_type == EventType.STALE_WRITE_REJECTED
    assert event.detail["reported"]["result_code"] == "DELETED"


def test_duplicate_report_of_a_committed_outcome_writes_nothing():
    """Not a late report: the holder's own outcome is in; a second one is refused quietly."""
    job = make_job("delete", S.EXECUTING)
    transitions.complete_job(job.job_id, claim_id=job.claim_id, actor=job.worker_id)
    count = AuditEvent.objects.count()
    with pytest.raises(InvalidTransition) as info:
        transitions.complete_job(job.job_id, claim_id=job.claim_id, actor=job.worker_id)
    assert not isinstance(info.value, LostClaim)
    assert AuditEvent.objects.count() == count


def test_stale_outcome_after_reclaim_carries_what_it_reported():
    job = make_job("save", S.READY)
    a = transitions.claim_job(job.job_id, worker_id="w-a", lease_seconds=LEASE, at=T0)
    transitions.begin_job(job.job_id, claim_id=a.claim_id, actor="w-a", at=T0)
    assert transitions.recover_stale_claims(at=LATER) == 1
    b = transitions.claim_job(job.job_id, worker_id="w-b", lease_seconds=LEASE, at=LATER)
    with pytest.raises(LostClaim):
        transitions.complete_job(job.job_id, claim_id=a.claim_id, actor="w-a", result_code="OK")
    event = AuditEvent.objects.filter(job_id=job.job_id).order_by("-event_id").first()
    assert event.event_type == EventType.STALE_WRITE_REJECTED
    assert event.detail["current_claim_id"] == b.claim_id
    assert event.detail["reported"]["to"] == S.SUCCEEDED
    assert "attempt" not in event.detail  # the row's attempt is the new holder's, not w-a's
