"""Every (from, to) pair of the job state machine, generated from JobState².

An allowed pair writes exactly one audit event of the right type; a refused pair raises
``InvalidTransition`` naming the job, the from-state and the to-state and leaves the job row and
the whole audit table byte-identical. Selectors that pick their own jobs (``claim_next_jobs``,
the stale sweep) do not raise for a job they may not move: they skip it and write nothing.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.errors import InvalidTransition
from inbox.models import Job, JobState
from tests.factories import OPERATOR, PRODUCER, WORKER, delete_doc, make_job, noop_doc, save_doc

pytestmark = pytest.mark.django_db

S = JobState
FAR_FUTURE = dt.datetime(2999, 1, 1, tzinfo=dt.UTC)


def _lapse() -> dict[str, Any]:
    return transitions.recover_stale_claims_report(at=FAR_FUTURE).__dict__


@dataclass(frozen=True)
class Mover:
    """One transition function aimed at one target state."""

    name: str
    to: str | None  # None: the state does not change (a diagnosis)
    allowed_from: frozenset[str]
    event: str
    call: Callable[[Job], Any]
    kind: str = "save"
    selector: bool = False  # picks its own jobs: skips instead of raising
    max_attempts: int | None = None


def _claim_next(job: Job) -> list[Job]:
    return transitions.claim_next_jobs(scope=job.scope, worker_id="w-next", lease_seconds=30)


MOVERS: tuple[Mover, ...] = (
    Mover(
        "mark_ready",
        S.READY,
        frozenset({S.CREATED}),
        EventType.READY,
        lambda j: transitions.mark_ready(j.job_id, actor=OPERATOR, approval_id="appr-1"),
        kind="delete",
    ),
    Mover(
        "reject_job",
        S.REJECTED,
        frozenset({S.CREATED}),
        EventType.REJECTED,
        lambda j: transitions.reject_job(j.job_id, actor=OPERATOR, reason="denied"),
        kind="delete",
    ),
    Mover(
        "reject_job(claim_id)",
        S.REJECTED,
        frozenset({S.CLAIMED, S.EXECUTING}),
        EventType.REJECTED,
        lambda j: transitions.reject_job(
            j.job_id, actor=WORKER, reason="approval revoked", claim_id=j.claim_id
        ),
    ),
    Mover(
        "claim_job",
        S.CLAIMED,
        frozenset({S.READY}),
        EventType.CLAIMED,
        lambda j: transitions.claim_job(j.job_id, worker_id="w-2", lease_seconds=30),
    ),
    Mover(
        "claim_next_jobs",
        S.CLAIMED,
        frozenset({S.READY}),
        EventType.CLAIMED,
        _claim_next,
        selector=True,
    ),
    Mover(
        "release_job",
        S.READY,
        frozenset({S.CLAIMED}),
        EventType.RELEASED,
        lambda j: transitions.release_job(j.job_id, claim_id=j.claim_id, actor=WORKER),
    ),
    Mover(
        "begin_job",
        S.EXECUTING,
        frozenset({S.CLAIMED}),
        EventType.STARTED,
        lambda j: transitions.begin_job(j.job_id, claim_id=j.claim_id, actor=WORKER),
    ),
    Mover(
        "complete_job",
        S.SUCCEEDED,
        frozenset({S.EXECUTING}),
        EventType.SUCCEEDED,
        lambda j: transitions.complete_job(j.job_id, claim_id=j.claim_id, actor=WORKER),
    ),
    Mover(
        "fail_job",
        S.FAILED,
        frozenset({S.EXECUTING}),
        EventType.FAILED,
        lambda j: transitions.fail_job(
            j.job_id, claim_id=j.claim_id, actor=WORKER, result_code="HASH_MISMATCH"
        ),
    ),
    Mover(
        "mark_outcome_unknown",
        S.OUTCOME_UNKNOWN,
        frozenset({S.EXECUTING}),
        EventType.OUTCOME_UNKNOWN,
        lambda j: transitions.mark_outcome_unknown(j.job_id, claim_id=j.claim_id, actor=WORKER),
        kind="delete",
    ),
    Mover(
        "schedule_retry",
        S.READY,
        frozenset({S.EXECUTING}),
        EventType.RETRY_SCHEDULED,
        lambda j: transitions.schedule_retry(
            j.job_id, claim_id=j.claim_id, actor=WORKER, retry_in=5, result_code="TASK_ERROR"
        ),
    ),
    Mover(
        "recover_stale_claims(idempotent)",
        S.READY,
        frozenset({S.CLAIMED, S.EXECUTING}),
        EventType.LEASE_EXPIRED,
        lambda j: _lapse(),
        selector=True,
    ),
    Mover(
        "recover_stale_claims(non-idempotent)",
        S.OUTCOME_UNKNOWN,
        frozenset({S.CLAIMED, S.EXECUTING}),
        EventType.LEASE_EXPIRED,
        lambda j: _lapse(),
        kind="delete",
        selector=True,
    ),
    Mover(
        "recover_stale_claims(max_attempts)",
        S.FAILED,
        frozenset({S.CLAIMED, S.EXECUTING}),
        EventType.LEASE_EXPIRED,
        lambda j: _lapse(),
        selector=True,
        max_attempts=1,
    ),
    Mover(
        "retry_job",
        S.READY,
        frozenset({S.FAILED}),
        EventType.RETRIED,
        lambda j: transitions.retry_job(j.job_id, actor=OPERATOR, reason="fixed the vault"),
    ),
    Mover(
        "reconcile_job",
        S.RECONCILED,
        frozenset({S.OUTCOME_UNKNOWN}),
        EventType.RECONCILED,
        lambda j: transitions.reconcile_job(
            j.job_id, actor=OPERATOR, result_code="CONFIRMED_DELETED", evidence={"present": False}
        ),
        kind="delete",
    ),
    Mover(
        "cancel_job",
        S.REJECTED,
        frozenset({S.CREATED, S.READY, S.CLAIMED}),
        EventType.REJECTED,
        lambda j: transitions.cancel_job(j.job_id, actor=OPERATOR, reason="not needed"),
    ),
    Mover(
        "set_result_code",
        None,
        frozenset({S.OUTCOME_UNKNOWN}),
        EventType.DIAGNOSED,
        lambda j: transitions.set_result_code(j.job_id, actor=OPERATOR, result_code="CONFLICT"),
        kind="delete",
    ),
)

# The job lifecycle's allowed moves (and the executor's re-check of a DELETE's approval right
# before it runs, which may reject a READY or CLAIMED job), written out independently of the
# movers: anything not listed here must be refused.
LIFECYCLE_EDGES = frozenset(
    {
        (S.CREATED, S.READY),
        (S.CREATED, S.REJECTED),
        (S.READY, S.CLAIMED),
        (S.READY, S.REJECTED),  # an operator's cancel
        (S.CLAIMED, S.EXECUTING),
        (S.CLAIMED, S.READY),
        (S.CLAIMED, S.FAILED),
        (S.CLAIMED, S.OUTCOME_UNKNOWN),
        (S.CLAIMED, S.REJECTED),
        (S.EXECUTING, S.SUCCEEDED),
        (S.EXECUTING, S.FAILED),
        (S.EXECUTING, S.OUTCOME_UNKNOWN),
        (S.EXECUTING, S.READY),
        (S.EXECUTING, S.REJECTED),
        (S.FAILED, S.READY),
        (S.OUTCOME_UNKNOWN, S.RECONCILED),
        (S.OUTCOME_UNKNOWN, S.OUTCOME_UNKNOWN),  # a diagnosis: result_code only
    }
)
TERMINAL = {S.SUCCEEDED, S.REJECTED, S.RECONCILED}


def _target(mover: Mover, from_state: str) -> str:
    return from_state if mover.to is None else mover.to


def _cases() -> list[Any]:
    cases = []
    for from_state, to_state in itertools.product(JobState, JobState):
        movers = [m for m in MOVERS if _target(m, from_state) == to_state]
        for mover in movers:
            cases.append(
                pytest.param(
                    from_state, to_state, mover, id=f"{from_state}->{to_state}:{mover.name}"
                )
            )
        if not movers:
            cases.append(pytest.param(from_state, to_state, None, id=f"{from_state}->{to_state}"))
    return cases


def _snapshot(job_id: str) -> tuple[list[dict], list[dict]]:
    row = list(Job.objects.filter(job_id=job_id).values())
    audit = list(AuditEvent.objects.order_by("event_id").values())
    return row, audit


def _job_in(state: str, mover: Mover) -> Job:
    kind = "delete" if state == S.CREATED else mover.kind
    job = make_job(kind, state)
    if mover.max_attempts is not None:
        transitions.edit_job_fields(
            job.job_id, actor=OPERATOR, changes={"max_attempts": mover.max_attempts}
        )
        job.refresh_from_db()
    return job


def test_design_edges_are_exactly_the_movers_allowed_pairs():
    implemented = {(f, _target(m, f)) for m in MOVERS for f in m.allowed_from}
    assert implemented == LIFECYCLE_EDGES


def test_every_state_is_terminal_or_has_a_way_out():
    for state in JobState:
        leaves = {t for f, t in LIFECYCLE_EDGES if f == state and t != state}
        assert bool(leaves) != (state in TERMINAL), state


@pytest.mark.parametrize(("from_state", "to_state", "mover"), _cases())
def test_transition_pair_allowed_writes_one_event_refused_changes_nothing(
    from_state, to_state, mover
):
    if mover is None:
        # No transition function produces this pair at all; the design must agree.
        assert (from_state, to_state) not in LIFECYCLE_EDGES
        return
    job = _job_in(from_state, mover)
    row_before, audit_before = _snapshot(job.job_id)
    last_event = audit_before[-1]["event_id"]

    if from_state in mover.allowed_from:
        result = mover.call(job)
        after = Job.objects.get(job_id=job.job_id)
        assert after.state == to_state
        new = list(AuditEvent.objects.filter(event_id__gt=last_event).order_by("event_id"))
        assert [(e.job_id, e.event_type) for e in new] == [(job.job_id, mover.event)]
        if mover.to is not None:
            assert new[0].detail["from"] == from_state
            assert new[0].detail["to"] == to_state
        if mover.name == "claim_next_jobs":
            assert [j.job_id for j in result] == [job.job_id]
        if mover.to == S.READY:
            assert (after.worker_id, after.claim_id, after.lease_until) == ("", "", None)
        return

    if mover.selector:
        result = mover.call(job)
        assert not result or (isinstance(result, dict) and not result["job_ids"])
    else:
        with pytest.raises(InvalidTransition) as info:
            mover.call(job)
        exc = info.value
        assert (exc.job_id, exc.from_state, exc.to_state) == (job.job_id, from_state, to_state)
        assert job.job_id in str(exc)
        assert f"{from_state} → {to_state}" in str(exc)
    assert _snapshot(job.job_id) == (row_before, audit_before)


@pytest.mark.parametrize("make_doc", [save_doc, noop_doc], ids=["SAVE", "NOOP"])
def test_create_job_without_approval_writes_requested_and_ready(make_doc):
    job, created = transitions.create_job(make_doc(), requested_by=PRODUCER)
    assert created
    assert Job.objects.get(job_id=job.job_id).state == S.READY
    events = list(AuditEvent.objects.for_job(job.job_id).values_list("event_type", "actor"))
    assert events == [(EventType.REQUESTED, PRODUCER), (EventType.READY, PRODUCER)]
    assert job.fingerprint == transitions.fingerprint_of(job)


def test_create_job_delete_waits_created_with_one_requested_event():
    job, created = transitions.create_job(delete_doc(), requested_by=PRODUCER)
    assert created
    stored = Job.objects.get(job_id=job.job_id)
    assert (stored.state, stored.fingerprint, stored.approval_id) == (S.CREATED, "", None)
    events = list(AuditEvent.objects.for_job(job.job_id).values_list("event_type", flat=True))
    assert events == [EventType.REQUESTED]


def test_mark_ready_delete_without_approval_is_refused_and_changes_nothing():
    job = make_job("delete", S.CREATED)
    before = _snapshot(job.job_id)
    with pytest.raises(InvalidTransition, match="needs an approval"):
        transitions.mark_ready(job.job_id, actor=OPERATOR)
    assert _snapshot(job.job_id) == before


def test_mark_ready_delete_seals_fingerprint_with_approval_id():
    job = make_job("delete", S.CREATED)
    ready = transitions.mark_ready(job.job_id, actor=OPERATOR, approval_id="appr-9")
    stored = Job.objects.get(job_id=job.job_id)
    assert stored.approval_id == "appr-9"
    assert stored.fingerprint == transitions.fingerprint_of(stored) == ready.fingerprint


def test_release_job_does_not_count_the_attempt():
    job = make_job("save", S.CLAIMED)
    assert job.attempt_count == 1
    transitions.release_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    assert Job.objects.get(job_id=job.job_id).attempt_count == 0


def test_retry_job_gives_a_fresh_attempt_budget():
    job = make_job("save", S.FAILED)
    transitions.retry_job(job.job_id, actor=OPERATOR, reason="vault fixed")
    stored = Job.objects.get(job_id=job.job_id)
    assert (stored.state, stored.attempt_count, stored.result_code) == (S.READY, 0, "")
    event = AuditEvent.objects.for_job(job.job_id).last()
    assert (event.event_type, event.actor, event.detail["reason"]) == (
        EventType.RETRIED,
        OPERATOR,
        "vault fixed",
    )


def test_claim_next_jobs_claims_only_its_scope_in_creation_order():
    first = make_job("save")
    make_job("noop")
    second = make_job("save")
    claimed = transitions.claim_next_jobs(scope="save", worker_id="w", lease_seconds=30, limit=5)
    assert [j.job_id for j in claimed] == [first.job_id, second.job_id]
    assert len({j.claim_id for j in claimed}) == 2
    assert all(len(j.claim_id) == 32 for j in claimed)
