"""Immutable fields: a value changed behind the code's back (raw SQL) makes the
next transition fail closed with ``ImmutableFieldDrift``; the refusal is recorded once."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import pytest
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.errors import ImmutableFieldDrift
from inbox.jobtypes import IMMUTABLE_PAYLOAD_FIELDS
from inbox.models import Job, JobState
from tests.factories import OPERATOR, make_job

pytestmark = pytest.mark.django_db

S = JobState
T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def _tamper_column(job_id: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE inbox_job SET vault_path = %s WHERE job_id = %s", ["elsewhere/x.md", job_id]
        )


def _tamper_payload(job_id: str) -> None:
    payload = Job.objects.get(job_id=job_id).payload
    payload["provenance_hash"] = "0" * 64
    cast = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE inbox_job SET payload = {cast} WHERE job_id = %s",
            [json.dumps(payload), job_id],
        )


TAMPER = {"column:vault_path": _tamper_column, "payload:provenance_hash": _tamper_payload}


def _claim_named(job: Job):
    return transitions.claim_job(job.job_id, worker_id="w", lease_seconds=30)


def _claim_next(job: Job):
    claimed = transitions.claim_next_jobs(scope="save", worker_id="w", lease_seconds=30)
    assert claimed == []  # skipped, never claimed
    raise ImmutableFieldDrift(job.job_id, job.fingerprint, "")  # the selector's way to refuse


def _recover(job: Job):
    report = transitions.recover_stale_claims_report(at=T0 + dt.timedelta(days=1))
    assert report.total == 0
    assert len(report.refused) == 1 and job.job_id in report.refused[0]
    raise ImmutableFieldDrift(job.job_id, job.fingerprint, "")


# (from-state, the transition attempted, the target named in the drift event)
CASES = {
    "claim_job": (S.READY, _claim_named, S.CLAIMED),
    "claim_next_jobs": (S.READY, _claim_next, S.CLAIMED),
    "begin_job": (
        S.CLAIMED,
        lambda j: transitions.begin_job(j.job_id, claim_id=j.claim_id, actor="w"),
        S.EXECUTING,
    ),
    "complete_job": (
        S.EXECUTING,
        lambda j: transitions.complete_job(j.job_id, claim_id=j.claim_id, actor="w"),
        S.SUCCEEDED,
    ),
    "retry_job": (
        S.FAILED,
        lambda j: transitions.retry_job(j.job_id, actor=OPERATOR, reason="again"),
        S.READY,
    ),
    "reconcile_job": (
        S.OUTCOME_UNKNOWN,
        lambda j: transitions.reconcile_job(j.job_id, actor=OPERATOR, result_code="NOT_APPLIED"),
        S.RECONCILED,
    ),
    "set_result_code": (
        S.OUTCOME_UNKNOWN,
        lambda j: transitions.set_result_code(j.job_id, actor=OPERATOR, result_code="CONFLICT"),
        S.OUTCOME_UNKNOWN,
    ),
    "recover_stale_claims": (S.EXECUTING, _recover, S.READY),
}


def _make(state: str) -> Job:
    if state == S.EXECUTING:
        job = make_job("save", S.READY)
        claim = transitions.claim_job(job.job_id, worker_id="w", lease_seconds=30, at=T0)
        transitions.begin_job(job.job_id, claim_id=claim.claim_id, actor="w", at=T0)
        return Job.objects.get(job_id=job.job_id)
    return make_job("save", state)


@pytest.mark.parametrize("tamper", list(TAMPER))
@pytest.mark.parametrize("name", list(CASES))
def test_transition_after_tampering_is_refused_and_recorded_once(name, tamper):
    from_state, attempt, to_state = CASES[name]
    job = _make(from_state)
    sealed = job.fingerprint
    TAMPER[tamper](job.job_id)
    tampered_row = list(Job.objects.filter(job_id=job.job_id).values())

    for _ in range(2):  # the second identical refusal is not recorded again
        with pytest.raises(ImmutableFieldDrift) as info:
            attempt(Job.objects.get(job_id=job.job_id))
        assert info.value.job_id == job.job_id
        assert list(Job.objects.filter(job_id=job.job_id).values()) == tampered_row

    drift = list(AuditEvent.objects.filter(event_type=EventType.FINGERPRINT_DRIFT))
    assert len(drift) == 1
    event = drift[0]
    assert (event.job_id, event.result_code) == (job.job_id, "FINGERPRINT_DRIFT")
    assert event.detail["sealed"] == sealed
    assert event.detail["current"] != sealed
    assert (event.detail["state"], event.detail["to"]) == (from_state, to_state)
    last = AuditEvent.objects.for_job(job.job_id).last()
    assert last.event_id == event.event_id  # nothing else was written for the job


def test_different_drift_after_a_recorded_one_is_recorded_again():
    job = make_job("save", S.READY)
    _tamper_column(job.job_id)
    with pytest.raises(ImmutableFieldDrift):
        _claim_named(job)
    _tamper_payload(job.job_id)
    with pytest.raises(ImmutableFieldDrift):
        _claim_named(job)
    assert AuditEvent.objects.filter(event_type=EventType.FINGERPRINT_DRIFT).count() == 2


def test_claim_next_jobs_skips_drifted_job_and_claims_the_next():
    bad = make_job("save", S.READY)
    good = make_job("save", S.READY)
    _tamper_column(bad.job_id)
    claimed = transitions.claim_next_jobs(scope="save", worker_id="w", lease_seconds=30)
    assert [j.job_id for j in claimed] == [good.job_id]
    assert Job.objects.get(job_id=bad.job_id).state == S.READY


def test_editable_field_change_keeps_the_seal():
    job = make_job("save", S.READY)
    transitions.edit_job_fields(
        job.job_id, actor=OPERATOR, changes={"note": "checked", "max_attempts": 9}
    )
    assert transitions.claim_job(job.job_id, worker_id="w", lease_seconds=30).state == S.CLAIMED


def test_equal_values_of_other_json_types_seal_differently():
    """The seal is a hash of JSON: 1, 1.0, True and "1" are equal or hash-equal in Python but
    different JSON. Each must get its own seal, whichever was sealed first in the process
    (the hash is memoised only for text and nulls)."""
    from inbox.jobtypes import IMMUTABLE_COLUMNS, compute_fingerprint

    columns = dict.fromkeys(IMMUTABLE_COLUMNS, "x")
    seals = []
    for value in ("1", 1, 1.0, True, "1", True, 1):
        payload = {"expected_commit": value}
        canonical = {**columns, **dict.fromkeys(IMMUTABLE_PAYLOAD_FIELDS)}
        canonical["expected_commit"] = value
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        expected = hashlib.sha256(text.encode("utf-8")).hexdigest()
        assert compute_fingerprint(columns=columns, payload=payload) == expected, value
        seals.append(expected)
    assert len(set(seals)) == 4


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text()), min_size=10, max_size=10))
def test_fast_canonical_is_json_dumps(values):
    """The seal of text and nulls, filled into its template, is the hash of exactly what
    ``json.dumps`` writes (any text: quotes, backslashes, control characters, non-ASCII,
    lone surrogates)."""
    from inbox.jobtypes import _FINGERPRINT_NAMES, _fingerprint_of_text

    canonical = json.dumps(
        dict(zip(_FINGERPRINT_NAMES, values, strict=True)),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    try:
        expected = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            _fingerprint_of_text.__wrapped__(tuple(values))
        return
    assert _fingerprint_of_text.__wrapped__(tuple(values)) == expected
