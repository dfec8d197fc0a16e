"""The executor's one-write turn (``claim_and_begin_jobs``, ``finish_and_claim_jobs``): it must
write exactly what the step-by-step functions write — the same rows, the same events with the
same details, on both databases (PostgreSQL writes the claim's events in SQL, SQLite in
Python) — and nothing at all when it refuses (a wrong state, a lost claim, a lapsed lease or a
drifted seal)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection, transaction

from audit.models import AuditEvent, EventType
from inbox import scopes, transitions
from inbox.executor import Executor
from inbox.models import Job, JobState
from inbox.transitions import BatchRefused, Outcome
from inbox.writer.events import outcome_events
from tests.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)

S = JobState
LEASE = 30
WORKER = "w-turn"


def _ready(n: int, kind: str = "noop", **overrides: Any) -> list[str]:
    return [make_job(kind, S.READY, **overrides).job_id for _ in range(n)]


def _claim_and_begin(limit: int = 10, authorize=lambda job: True, scope: str = "noop"):
    with transaction.atomic():
        return transitions.claim_and_begin_jobs(
            scope=scope, worker_id=WORKER, lease_seconds=LEASE, limit=limit, authorize=authorize
        )


def _finish_and_claim(outcomes: list[Outcome]):
    """The executor's turn after ``outcomes``: they are recorded and the next 10 claimed."""
    return transitions.finish_and_claim_jobs(
        outcomes,
        scope="noop",
        worker_id=WORKER,
        lease_seconds=LEASE,
        limit=10,
        authorize=lambda job: True,
    )


def _after_ready(job_id: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(type, actor, result code, detail) of a job's events after it became READY."""
    rows = AuditEvent.objects.for_job(job_id).values_list(
        "event_type", "actor", "result_code", "detail"
    )
    return [r for r in rows if r[0] not in (EventType.REQUESTED, EventType.READY)]


def _snapshot() -> tuple[list[dict], int]:
    return list(Job.objects.order_by("job_id").values()), AuditEvent.objects.count()


def test_claim_and_begin_moves_ready_to_executing_in_claim_order_with_three_events():
    ids = _ready(3)

    jobs = _claim_and_begin()

    assert [j.job_id for j in jobs] == ids  # claim order: oldest first
    for job in jobs:
        row = Job.objects.get(job_id=job.job_id)
        assert (row.state, row.worker_id, row.attempt_count) == (S.EXECUTING, WORKER, 1)
        assert row.claim_id == job.claim_id and len(row.claim_id) == 32
        assert row.claimed_at == row.updated_at
        assert row.lease_until == row.claimed_at + dt.timedelta(seconds=LEASE)
        events = _after_ready(job.job_id)
        assert [e[0] for e in events] == ["CLAIMED", "STARTED", "AUTHORIZED"]
        assert {e[1] for e in events} == {WORKER}
        assert events[0][3] == {
            "from": "READY",
            "to": "CLAIMED",
            "claim_id": row.claim_id,
            "attempt": 1,
            "lease_until": row.lease_until.isoformat(),
        }
        assert events[1][3] == {"from": "CLAIMED", "to": "EXECUTING"}
        assert events[2][3] == {
            "from": "CLAIMED",
            "to": "EXECUTING",
            "schema": "ok",
            "fingerprint": row.fingerprint,
        }
        stamps = set(
            AuditEvent.objects.filter(
                job_id=job.job_id, event_type__in=["CLAIMED", "STARTED"]
            ).values_list("created_at", flat=True)
        )
        assert stamps == {row.updated_at}  # the events carry the change's database time


def test_claim_and_begin_writes_what_claim_then_begin_write():
    """The one-statement claim and the two steps leave the same row and the same events."""
    one = _ready(1)[0]
    _claim_and_begin(limit=1)
    two = _ready(1)[0]
    [claimed] = transitions.claim_next_jobs(
        scope="noop", worker_id=WORKER, lease_seconds=LEASE, limit=1
    )
    transitions.begin_jobs(
        [claimed],
        actor=WORKER,
        lease_seconds=LEASE,
        authorized={two: {"schema": "ok", "fingerprint": claimed.fingerprint}},
    )
    kept = ("state", "worker_id", "attempt_count", "result_code", "max_attempts")
    a, b = (Job.objects.values(*kept).get(job_id=i) for i in (one, two))
    assert a == b

    def shape(job_id: str) -> list[tuple[str, list[str]]]:
        return [(t, sorted(d)) for t, _a, _c, d in _after_ready(job_id)]

    assert shape(one) == shape(two)


def test_claim_and_begin_refused_by_the_check_writes_nothing():
    _ready(3)
    before = _snapshot()
    refused = Job.objects.order_by("created_at", "job_id")[1].job_id

    with pytest.raises(BatchRefused):
        _claim_and_begin(authorize=lambda job: job.job_id != refused)

    assert _snapshot() == before


def test_claim_and_begin_on_a_drifted_seal_writes_nothing_and_the_steps_record_it():
    ids = _ready(2)
    Job.objects.filter(job_id=ids[0]).update(object_id="tampered")  # raw edit: seal broken
    before = _snapshot()

    with pytest.raises(BatchRefused):
        _claim_and_begin()

    assert _snapshot() == before
    # The step-by-step claim refuses the drifted row, records it, and takes the other.
    jobs = transitions.claim_next_jobs(scope="noop", worker_id=WORKER, lease_seconds=LEASE, limit=2)
    assert [j.job_id for j in jobs] == [ids[1]]
    assert AuditEvent.objects.filter(job_id=ids[0], event_type=EventType.FINGERPRINT_DRIFT).exists()


def test_claim_and_begin_takes_nothing_from_a_paused_scope():
    _ready(2)
    scopes.pause_scope("noop", actor="op", reason="maintenance")

    assert _claim_and_begin() == []
    assert set(Job.objects.values_list("state", flat=True)) == {S.READY}

    scopes.resume_scope("noop", actor="op")
    assert len(_claim_and_begin()) == 2


def test_finish_and_claim_records_outcomes_and_claims_the_next_batch():
    _ready(2)
    first = _claim_and_begin(limit=2)
    later = _ready(2)
    outcomes = [
        Outcome(job, S.SUCCEEDED, "OK", executed_detail={"handler": "h", "duration_ms": 1.0})
        for job in first
    ]

    with transaction.atomic():
        finished, claimed = _finish_and_claim(outcomes)

    assert finished == {j.job_id for j in first}
    assert [j.job_id for j in claimed] == later
    for job in first:
        row = Job.objects.get(job_id=job.job_id)
        assert (row.state, row.result_code, row.lease_until) == (S.SUCCEEDED, "OK", None)
        assert job.state == S.SUCCEEDED  # the caller's copy is brought up to date
        tail = _after_ready(job.job_id)[3:]
        assert [(t, c) for t, _a, c, _d in tail] == [("EXECUTED", "OK"), ("SUCCEEDED", "OK")]
        assert tail[0][3] == {
            "from": "EXECUTING",
            "to": "SUCCEEDED",
            "handler": "h",
            "duration_ms": 1.0,
        }
    assert {Job.objects.get(job_id=i).state for i in later} == {S.EXECUTING}


def test_finish_and_claim_refuses_a_lost_claim_and_records_the_stale_write():
    _ready(2)
    jobs = _claim_and_begin(limit=2)
    lost = jobs[0]
    stale = Job(job_id=lost.job_id, claim_id="not-the-claim", job_type=lost.job_type)
    outcomes = [Outcome(stale, S.SUCCEEDED, "OK"), Outcome(jobs[1], S.SUCCEEDED, "OK")]

    with transaction.atomic():
        finished, claimed = _finish_and_claim(outcomes)

    assert finished == {jobs[1].job_id}
    assert lost.job_id in finished.refused
    assert claimed == []
    assert Job.objects.get(job_id=lost.job_id).state == S.EXECUTING
    assert AuditEvent.objects.filter(
        job_id=lost.job_id, event_type=EventType.STALE_WRITE_REJECTED
    ).exists()


def test_finish_and_claim_with_mixed_outcomes_records_each_group():
    _ready(3)
    jobs = _claim_and_begin(limit=3)
    outcomes = [
        Outcome(jobs[0], S.SUCCEEDED, "OK"),
        Outcome(jobs[1], S.FAILED, "BROKEN", error="no"),
        Outcome(jobs[2], S.SUCCEEDED, "OK"),
    ]

    with transaction.atomic():
        finished, _claimed = _finish_and_claim(outcomes)

    assert finished == {j.job_id for j in jobs}
    states = dict(Job.objects.values_list("job_id", "state"))
    assert [states[j.job_id] for j in jobs] == [S.SUCCEEDED, S.FAILED, S.SUCCEEDED]


@pytest.mark.postgresql
def test_a_busy_turn_is_one_statement_on_postgresql():
    """Outcomes, claim, begin and all their events: one round trip between BEGIN and COMMIT."""
    from django.test.utils import CaptureQueriesContext

    _ready(2)
    jobs = _claim_and_begin(limit=2)
    _ready(2)
    outcomes = [Outcome(job, S.SUCCEEDED, "OK") for job in jobs]
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        _finish_and_claim(outcomes)
    statements = [
        q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")
    ]
    assert len(statements) == 1, statements
    assert AuditEvent.objects.filter(event_type=EventType.SUCCEEDED).count() == 2
    assert AuditEvent.objects.filter(event_type=EventType.AUTHORIZED).count() == 4


# Handler details that override the executor's keys, carry a result code, nest, or are absent:
# the statement's compact outcome events (PostgreSQL) must equal what Python builds.
_ODD_DETAILS: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = [
    ({"handler": "h", "duration_ms": 1.5, "result_code": "DONE"}, {"note": "n"}),
    (None, None),
    ({"handler": "h", "duration_ms": 0.0, "nested": {"a": [1, 2.5, None, "é"]}}, {"n": 1.0}),
]


@pytest.mark.parametrize(
    ("to", "code", "error"),
    [(S.SUCCEEDED, "OK", ""), (S.FAILED, "BROKEN", "it broke"), (S.OUTCOME_UNKNOWN, "LOST", "")],
)
@pytest.mark.parametrize("turn", [True, False], ids=["one-write turn", "finish_jobs"])
def test_outcome_events_are_what_python_builds(to, code, error, turn):
    _ready(3)
    jobs = _claim_and_begin(limit=3)
    outcomes = [
        Outcome(job, to, code, error=error, executed_detail=executed, detail=detail)
        for job, (executed, detail) in zip(jobs, _ODD_DETAILS, strict=True)
    ]
    expected = {
        o.job.job_id: [
            (str(e.event_type), e.actor, e.result_code, e.detail)
            for e in outcome_events(WORKER, {o.job.job_id: o})(o.job, None, T_ANY)
        ]
        for o in outcomes
    }
    with transaction.atomic():
        if turn:
            finished, _claimed = _finish_and_claim(outcomes)
        else:
            finished = transitions.finish_jobs(outcomes, actor=WORKER)
    assert finished == {j.job_id for j in jobs}
    for job in jobs:
        assert _after_ready(job.job_id)[3:] == expected[job.job_id]
    assert [len(expected[j.job_id]) for j in jobs] == [2, 1, 2]


T_ANY = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def test_executor_on_a_queue_it_cannot_take_as_one_goes_step_by_step(monkeypatch):
    """A job whose checks fail (here: its schema no longer validates) makes the one-write turn
    refuse; the step-by-step turn rejects it with its reason and runs the others."""
    ids = _ready(3)
    bad = ids[1]
    row = Job.objects.get(job_id=bad)
    payload = dict(row.payload, surprise="field")  # an unknown field: the schema check fails
    Job.objects.filter(job_id=bad).update(payload=payload)

    stats = Executor(
        scope="noop", batch=10, exit_when_idle=True, poll_seconds=0.1, out=lambda _l: None
    ).run()

    states = dict(Job.objects.values_list("job_id", "state"))
    assert states[bad] == S.REJECTED
    assert Job.objects.get(job_id=bad).result_code == "SCHEMA_INVALID"
    assert [states[i] for i in ids if i != bad] == [S.SUCCEEDED, S.SUCCEEDED]
    assert (stats.succeeded, stats.rejected) == (2, 1)


def test_job_of_matches_the_orm() -> None:
    """The writer builds instances of returned rows without ``Model.__init__``; they must be
    the instances the ORM would build, and nothing may listen for Job's init signals."""
    from django.db.models import signals

    from inbox.writer.rows import COLUMNS as _COLUMNS
    from inbox.writer.rows import job_of as _job_of
    from inbox.writer.rows import rows_from as _rows_from

    assert not signals.pre_init.has_listeners(Job)
    assert not signals.post_init.has_listeners(Job)
    job = make_job("save", JobState.EXECUTING)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(_COLUMNS)} FROM inbox_job WHERE job_id = %s", [job.pk])
        (row,) = _rows_from(cursor.fetchall()).values()
    built, read = _job_of(row), Job.objects.get(pk=job.pk)
    assert {f.attname: getattr(built, f.attname) for f in Job._meta.concrete_fields} == {
        f.attname: getattr(read, f.attname) for f in Job._meta.concrete_fields
    }
    assert (built._state.adding, built._state.db) == (read._state.adding, read._state.db)
    assert built == read and built.get_deferred_fields() == set()
    built.note = "edited through the built instance"
    built.save(update_fields=["note"])
    assert Job.objects.get(pk=job.pk).note == "edited through the built instance"


def test_new_job_matches_the_orm() -> None:
    """``build_job`` makes its unsaved Job without ``Model.__init__``; it must be the instance
    ``Job(**values)`` makes — every default, an unsaved state — and save like one."""
    from inbox.writer.rows import new_job as _new_job

    values = {
        "job_id": "new-job-1",
        "job_version": 1,
        "mission_id": "m-new",
        "job_type": "NOOP",
        "scope": "noop",
        "object_id": "o-new",
        "vault_path": "",
        "payload": {"job_id": "new-job-1"},
        "idempotency_key": "new:1",
        "requested_by": "tester",
        "max_attempts": 3,
        "supersedes": None,
        "run_after": None,
    }
    built, made = _new_job(**values), Job(**values)
    names = [f.attname for f in Job._meta.concrete_fields]
    assert [repr(getattr(built, n)) for n in names] == [repr(getattr(made, n)) for n in names]
    assert (built._state.adding, built._state.db) == (made._state.adding, made._state.db)
    assert set(built.__dict__) == set(made.__dict__)
    # A second instance shares no mutable state with the first.
    other = _new_job(**{**values, "job_id": "new-job-2", "idempotency_key": "new:2"})
    other.note = "only mine"
    assert built.note == "" and built._state is not other._state
    built.save(force_insert=True)
    stored = Job.objects.get(pk="new-job-1")
    assert (stored.state, stored.worker_id, stored.attempt_count, stored.max_attempts) == (
        JobState.CREATED,
        "",
        0,
        3,
    )
