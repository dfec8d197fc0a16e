"""A property-based model of the job lifecycle: its states, claims and leases.

A Hypothesis ``RuleBasedStateMachine`` drives random sequences of create (and its safe replay),
approve, deny, claim (named, or the next ones of a scope), renew, begin, complete, fail, mark
unknown, release, cancel, lapse (the clock moves: every call passes ``at=``), sweep, retry,
reconcile and diagnose through ``inbox.transitions`` — and stale workers' late writes: every
holder step may use any claim ever handed out, current or long lost. A plain Python model of
the lifecycle's states and transitions predicts each step. After every step:

- every row equals the model (state, claim, worker, lease, attempts, result code);
- a refused step changed nothing: no row (``updated_at`` included) and no audit event, except
  the one STALE_WRITE_REJECTED a stale holder's refused write records;
- a step changed only the rows it should and left exactly its audit events;
- a non-idempotent job never returns to READY after it began (read from the audit trail,
  independently of the model) — except by its one way back: a definite FAILED
  (the mutation certainly did not happen) retried by an operator.

Each example runs inside a savepoint rolled back at its end, so examples do not see each
other. ``CONSOLE_MODEL_EXAMPLES`` sizes a run (default 2,000; CI runs the default on both
databases); ``CONSOLE_MODEL_STEPS`` the steps per example.
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from audit.models import AuditEvent
from inbox import transitions
from inbox.errors import InboxError
from inbox.models import Job, JobState
from tests.factories import delete_doc, save_doc

S = JobState
HELD = (S.CLAIMED, S.EXECUTING)
EXAMPLES = int(os.environ.get("CONSOLE_MODEL_EXAMPLES", "2000"))
STEPS = int(os.environ.get("CONSOLE_MODEL_STEPS", "40"))
MAX_ATTEMPTS = 2
START = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
WORKERS = ("w-1", "w-2", "w-3")
# Events that record a refused write (their "to" is where the write wanted to go).
REFUSALS = {"STALE_WRITE_REJECTED", "FINGERPRINT_DRIFT"}
# Events whose detail carries no from/to pair.
NO_FROM_TO = {"LEASE_RENEWED", "STALE_WRITE_REJECTED", "DIAGNOSED"}
ROW_COLUMNS = (
    "job_id",
    "state",
    "claim_id",
    "worker_id",
    "claimed_at",
    "lease_until",
    "attempt_count",
    "max_attempts",
    "result_code",
    "last_error",
    "approval_id",
    "fingerprint",
    "note",
    "updated_at",
)
# What the model predicts of a row.
COLUMNS = (
    "state",
    "claim_id",
    "worker_id",
    "lease_until",
    "attempt_count",
    "max_attempts",
    "result_code",
    "approval_id",
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

# What the steps of a run did ("moved: CLAIMED", "refused: STALE_WRITE_REJECTED", ...).
SEEN: Counter[str] = Counter()
# A run this size must have reached each of these, or the model explores too little.
MUST_SEE = (
    "moved: CLAIMED",
    "moved: AUTHORIZED+STARTED",
    "moved: EXECUTED+SUCCEEDED",
    "moved: EXECUTED+FAILED",
    "moved: EXECUTED+OUTCOME_UNKNOWN",
    "moved: LEASE_RENEWED",
    "moved: RELEASED",
    "moved: LEASE_EXPIRED->READY",
    "moved: LEASE_EXPIRED->FAILED",
    "moved: LEASE_EXPIRED->OUTCOME_UNKNOWN",
    "moved: RETRIED",
    "moved: RECONCILED",
    "moved: DIAGNOSED",
    "moved: READY",
    "moved: REJECTED",
    "refused: STALE_WRITE_REJECTED",
    "refused: no event",
)


@dataclass
class ModelJob:
    job_id: str
    kind: str  # "save" (idempotent) or "delete"
    state: str
    created_at: dt.datetime
    doc: dict[str, Any]
    claim_id: str = ""
    worker_id: str = ""
    lease_until: dt.datetime | None = None
    attempt_count: int = 0
    max_attempts: int = MAX_ATTEMPTS
    result_code: str = ""
    approval_id: str | None = None
    began: bool = False

    @property
    def idempotent(self) -> bool:
        return self.kind == "save"

    @property
    def scope(self) -> str:
        return self.kind

    def row(self) -> tuple:
        return tuple(getattr(self, name) for name in COLUMNS)

    def clear_claim(self) -> None:
        self.claim_id, self.worker_id, self.lease_until = "", "", None


@dataclass(frozen=True)
class Handle:
    """A claim once handed to a worker; it may have been lost since (a stale holder)."""

    job_id: str
    claim_id: str
    worker_id: str


Ev = tuple[str, str, str | None, str | None]  # (job id, type, from, to)


@dataclass
class Expect:
    """What one step should do: the rows it changes and the events it leaves."""

    moved: set[str] = field(default_factory=set)
    events: list[Ev] = field(default_factory=list)
    refused: bool = False


def _ev(job: ModelJob, event_type: str, frm: str | None = None, to: str | None = None) -> Ev:
    return (job.job_id, event_type, frm, to)


def _label(event: Ev) -> str:
    return f"{event[1]}->{event[3]}" if event[1] == "LEASE_EXPIRED" else event[1]


def _stale(job: ModelJob) -> Ev:
    return (job.job_id, "STALE_WRITE_REJECTED", None, None)


class LifecycleModel(RuleBasedStateMachine):
    jobs = Bundle("jobs")
    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, ModelJob] = {}
        self.now = START
        self.counter = 0
        self.savepoint = transaction.savepoint_create()
        self.last_event = (
            AuditEvent.objects.order_by("-event_id").values_list("event_id", flat=True).first() or 0
        )
        # The rows as last read (only ``step`` writes, so they are current between steps) and
        # the DELETE jobs the audit trail shows STARTED.
        self.rows: dict[str, dict[str, Any]] = {}
        self.started: set[str] = set()
        # Claims the sweep took a job from while leaving them on the row (parked or failed):
        # their holder's later outcome is a late report, refused and recorded.
        self.swept: set[str] = set()

    def teardown(self) -> None:
        transaction.savepoint_rollback(self.savepoint)

    # --- the harness: snapshot, act, compare --------------------------------------------------

    def _rows(self) -> dict[str, dict[str, Any]]:
        """Every column a transition writes (the payload never changes and is skipped)."""
        rows = Job.objects.filter(job_id__in=list(self.model)).values(*ROW_COLUMNS)
        return {row["job_id"]: row for row in rows}

    def _new_events(self) -> list[tuple[str, str, dict[str, Any]]]:
        events = list(
            AuditEvent.objects.filter(event_id__gt=self.last_event)
            .order_by("event_id")
            .values_list("event_id", "job_id", "event_type", "detail")
        )
        if events:
            self.last_event = events[-1][0]
        return [(job_id, event_type, detail) for _id, job_id, event_type, detail in events]

    def step(self, expect: Expect, action) -> Any:
        """Run ``action``; check it moved or was refused as the model says, changed only the
        rows it should and left exactly the expected events."""
        before = self.rows
        try:
            result = action()
            refused = False
        except InboxError:
            result, refused = None, True
        after = self.rows = self._rows()
        assert refused == expect.refused, (expect, result)
        changed = {job_id for job_id, row in after.items() if before.get(job_id) != row}
        assert changed <= expect.moved, (changed, expect)
        for job_id in expect.moved - changed:
            # Moved to the very values it had (a renewal to the same lease end at the same
            # instant): the write happened (its event is checked below) but shows no change.
            stored = tuple(after[job_id][name] for name in COLUMNS)
            assert stored == self.model[job_id].row(), (job_id, stored, expect)
        actual = []
        for job_id, event_type, detail in self._new_events():
            frm = to = None
            if event_type not in NO_FROM_TO:
                frm, to = detail.get("from"), detail.get("to")
            actual.append((job_id, event_type, frm, to))
            self._watch_deletes(job_id, event_type, detail)
        assert Counter(actual) == Counter(expect.events), (actual, expect.events)
        kinds = "+".join(sorted({_label(e) for e in expect.events})) or "no event"
        SEEN[f"{'refused' if refused else 'moved'}: {kinds}"] += 1
        return result

    def _watch_deletes(self, job_id: str, event_type: str, detail: dict[str, Any]) -> None:
        """From the audit trail alone: once a DELETE began, nothing leads it back to READY."""
        if self.model[job_id].idempotent or event_type in REFUSALS:
            return
        if event_type == "STARTED":
            self.started.add(job_id)
        elif job_id in self.started and detail.get("to") == S.READY:
            # The one way back: a definite FAILED (the mutation certainly did not
            # happen) retried by an operator. Never a sweep, a release or anything else.
            assert (event_type, detail.get("from")) == ("RETRIED", S.FAILED), (job_id, detail)
            self.started.discard(job_id)

    # --- creation and approval ----------------------------------------------------------------

    @initialize(target=jobs)
    def first_job(self):
        return self._create("save")

    @rule(target=jobs, kind=st.sampled_from(["save", "delete"]))
    def create(self, kind: str):
        return self._create(kind)

    def _create(self, kind: str) -> str:
        self.counter += 1
        uid = f"m{self.counter:05d}"
        doc = (save_doc if kind == "save" else delete_doc)(uid=uid, job_id=f"job-{uid}")
        state = S.READY if kind == "save" else S.CREATED
        job = ModelJob(doc["job_id"], kind, state, self.now, doc)
        self.model[job.job_id] = job
        events = [_ev(job, "REQUESTED", None, S.CREATED)]
        if kind == "save":
            events.append(_ev(job, "READY", S.CREATED, S.READY))
        self.step(
            Expect({job.job_id}, events),
            lambda: transitions.create_job(doc, requested_by="producer", at=self.now),
        )
        return job.job_id

    def replay_create(self, job_id: str) -> None:
        """The same document again is a safe replay: nothing changes, nothing is recorded."""
        job = self.model[job_id]
        _stored, created = self.step(
            Expect(),
            lambda: transitions.create_job(job.doc, requested_by="producer", at=self.now),
        )
        assert created is False

    def approve(self, job_id: str) -> None:
        job = self.model[job_id]
        if job.state != S.CREATED:
            expect = Expect(refused=True)
        else:
            expect = Expect({job_id}, [_ev(job, "READY", S.CREATED, S.READY)])
            job.state, job.approval_id = S.READY, f"appr-{job_id}"
        self.step(
            expect,
            lambda: transitions.mark_ready(
                job_id, actor="approver", approval_id=f"appr-{job_id}", at=self.now
            ),
        )

    def deny(self, job_id: str) -> None:
        job = self.model[job_id]
        if job.state != S.CREATED:
            expect = Expect(refused=True)
        else:
            expect = Expect({job_id}, [_ev(job, "REJECTED", S.CREATED, S.REJECTED)])
            job.state, job.result_code = S.REJECTED, "REJECTED"
        self.step(
            expect,
            lambda: transitions.reject_job(job_id, actor="approver", reason="no", at=self.now),
        )

    # --- claims -------------------------------------------------------------------------------

    def _claimed(self, job: ModelJob, worker: str, lease: int, claim_id: str) -> Handle:
        job.state, job.worker_id, job.claim_id = S.CLAIMED, worker, claim_id
        job.lease_until = self.now + dt.timedelta(seconds=lease)
        job.attempt_count += 1
        return Handle(job.job_id, claim_id, worker)

    @rule(
        target=handles,
        job_id=jobs,
        worker=st.sampled_from(WORKERS),
        lease=st.integers(5, 60),
    )
    def claim(self, job_id: str, worker: str, lease: int):
        return self._claim(job_id, worker, lease)

    def _claim(self, job_id: str, worker: str, lease: int):
        job = self.model[job_id]
        if job.state != S.READY:
            self.step(
                Expect(refused=True),
                lambda: transitions.claim_job(
                    job_id, worker_id=worker, lease_seconds=lease, at=self.now
                ),
            )
            return multiple()
        claimed = self.step(
            Expect({job_id}, [_ev(job, "CLAIMED", S.READY, S.CLAIMED)]),
            lambda: transitions.claim_job(
                job_id, worker_id=worker, lease_seconds=lease, at=self.now
            ),
        )
        assert claimed.claim_id and claimed.claim_id != job.claim_id
        return self._claimed(job, worker, lease, claimed.claim_id)

    @rule(
        target=handles,
        scope=st.sampled_from(["save", "delete"]),
        limit=st.integers(1, 3),
        worker=st.sampled_from(WORKERS),
        lease=st.integers(5, 60),
    )
    def claim_next(self, scope: str, limit: int, worker: str, lease: int):
        ready = sorted(
            (j for j in self.model.values() if j.state == S.READY and j.scope == scope),
            key=lambda j: (j.created_at, j.job_id),
        )[:limit]
        events = [_ev(j, "CLAIMED", S.READY, S.CLAIMED) for j in ready]
        claimed = self.step(
            Expect({j.job_id for j in ready}, events),
            lambda: transitions.claim_next_jobs(
                scope=scope, worker_id=worker, lease_seconds=lease, limit=limit, at=self.now
            ),
        )
        assert [j.job_id for j in claimed] == [j.job_id for j in ready]
        return multiple(
            *(self._claimed(self.model[j.job_id], worker, lease, j.claim_id) for j in claimed)
        )

    def _fence(self, handle: Handle, allowed: tuple[str, ...]) -> tuple[ModelJob, Expect | None]:
        """The refusal every holder write shares: a claim that is no longer the caller's is a
        stale write (recorded); the caller's claim in a state not allowed is refused quietly."""
        job = self.model[handle.job_id]
        if job.claim_id != handle.claim_id:
            return job, Expect(refused=True, events=[_stale(job)])
        if job.state not in allowed:
            return job, Expect(refused=True)
        return job, None

    def renew(self, handle: Handle, lease: int) -> None:
        job = self.model[handle.job_id]
        if job.claim_id != handle.claim_id or job.state not in HELD:
            expect = Expect(refused=True, events=[_stale(job)])
        elif job.lease_until is None or job.lease_until < self.now:
            expect = Expect(refused=True)  # lapsed under its own claim: awaiting the sweep
        else:
            expect = Expect({job.job_id}, [_ev(job, "LEASE_RENEWED")])
            job.lease_until = self.now + dt.timedelta(seconds=lease)
        self.step(
            expect,
            lambda: transitions.renew_lease(
                handle.job_id,
                claim_id=handle.claim_id,
                lease_seconds=lease,
                actor=handle.worker_id,
                at=self.now,
            ),
        )

    def begin(self, handle: Handle, lease: int | None) -> None:
        job, expect = self._fence(handle, (S.CLAIMED,))
        if expect is None:
            if lease is not None and (job.lease_until is None or job.lease_until < self.now):
                expect = Expect(refused=True)
            else:
                expect = Expect(
                    {job.job_id},
                    [
                        _ev(job, "STARTED", S.CLAIMED, S.EXECUTING),
                        _ev(job, "AUTHORIZED", S.CLAIMED, S.EXECUTING),
                    ],
                )
                job.state, job.began = S.EXECUTING, True
                if lease is not None:
                    job.lease_until = self.now + dt.timedelta(seconds=lease)
        self.step(
            expect,
            lambda: transitions.begin_job(
                handle.job_id,
                claim_id=handle.claim_id,
                actor=handle.worker_id,
                lease_seconds=lease,
                authorized={"checks": "model"},
                at=self.now,
            ),
        )

    def finish(self, handle: Handle, outcome: str) -> None:
        job, expect = self._fence(handle, (S.EXECUTING,))
        if expect is not None and not expect.events and handle.claim_id in self.swept:
            expect = Expect(refused=True, events=[_stale(job)])  # the late holder's word
        code = {S.SUCCEEDED: "OK", S.FAILED: "MODEL_FAILED", S.OUTCOME_UNKNOWN: "UNKNOWN"}[outcome]
        if expect is None:
            expect = Expect(
                {job.job_id},
                [
                    _ev(job, "EXECUTED", S.EXECUTING, outcome),
                    _ev(job, outcome, S.EXECUTING, outcome),
                ],
            )
            job.state, job.result_code, job.lease_until = outcome, code, None
        call = {
            S.SUCCEEDED: transitions.complete_job,
            S.FAILED: transitions.fail_job,
            S.OUTCOME_UNKNOWN: transitions.mark_outcome_unknown,
        }[outcome]
        self.step(
            expect,
            lambda: call(
                handle.job_id,
                claim_id=handle.claim_id,
                actor=handle.worker_id,
                result_code=code,
                executed_detail={"handler": "model"},
                at=self.now,
            ),
        )

    def release(self, handle: Handle) -> None:
        job, expect = self._fence(handle, (S.CLAIMED,))
        if expect is None:
            expect = Expect({job.job_id}, [_ev(job, "RELEASED", S.CLAIMED, S.READY)])
            job.state = S.READY
            job.clear_claim()
            job.attempt_count = max(job.attempt_count - 1, 0)
        self.step(
            expect,
            lambda: transitions.release_job(
                handle.job_id, claim_id=handle.claim_id, actor=handle.worker_id, at=self.now
            ),
        )

    # --- the clock and the sweep --------------------------------------------------------------

    @rule(seconds=st.one_of(st.integers(0, 5), st.integers(5, 120)))
    def clock(self, seconds: int) -> None:
        """Time passes (often long enough for leases to lapse); nothing is written."""
        self.now += dt.timedelta(seconds=seconds)

    @precondition(lambda self: any(j.state in HELD for j in self.model.values()))
    @rule()
    def sweep(self) -> None:
        expect = Expect()
        for job in self.model.values():
            if job.state not in HELD or job.lease_until is None or job.lease_until >= self.now:
                continue
            if not job.idempotent:
                to = S.OUTCOME_UNKNOWN
            elif job.attempt_count >= job.max_attempts:
                to = S.FAILED
            else:
                to = S.READY
            expect.moved.add(job.job_id)
            expect.events.append(_ev(job, "LEASE_EXPIRED", job.state, to))
            job.state = to
            if to == S.READY:
                job.clear_claim()
            else:
                self.swept.add(job.claim_id)
                job.lease_until = None
                job.result_code = "MAX_ATTEMPTS" if to == S.FAILED else "LEASE_EXPIRED"
        report = self.step(
            expect, lambda: transitions.recover_stale_claims_report(actor="sweeper", at=self.now)
        )
        assert report.refused == []

    # --- operators ----------------------------------------------------------------------------

    def retry(self, job_id: str) -> None:
        job = self.model[job_id]
        if job.state != S.FAILED:
            expect = Expect(refused=True)
        else:
            expect = Expect({job_id}, [_ev(job, "RETRIED", S.FAILED, S.READY)])
            job.state, job.attempt_count, job.result_code = S.READY, 0, ""
            job.clear_claim()
        self.step(
            expect,
            lambda: transitions.retry_job(job_id, actor="op", reason="model", at=self.now),
        )

    def reconcile(self, job_id: str, code: str) -> None:
        job = self.model[job_id]
        if job.state != S.OUTCOME_UNKNOWN:
            expect = Expect(refused=True)
        else:
            expect = Expect({job_id}, [_ev(job, "RECONCILED", S.OUTCOME_UNKNOWN, S.RECONCILED)])
            job.state, job.result_code = S.RECONCILED, code
        self.step(
            expect,
            lambda: transitions.reconcile_job(
                job_id, actor="op", result_code=code, evidence={"present": False}, at=self.now
            ),
        )

    def diagnose(self, job_id: str) -> None:
        job = self.model[job_id]
        if job.state != S.OUTCOME_UNKNOWN:
            expect = Expect(refused=True)
        else:
            expect = Expect({job_id}, [_ev(job, "DIAGNOSED")])
            job.result_code = "RECONCILE_CONFLICT"
        self.step(
            expect,
            lambda: transitions.set_result_code(
                job_id, actor="op", result_code="RECONCILE_CONFLICT", at=self.now
            ),
        )

    def cancel(self, job_id: str) -> None:
        job = self.model[job_id]
        if job.state not in (S.CREATED, S.READY, S.CLAIMED):
            expect = Expect(refused=True)
        else:
            expect = Expect({job_id}, [_ev(job, "REJECTED", job.state, S.REJECTED)])
            job.state, job.result_code = S.REJECTED, "CANCELLED"
            job.clear_claim()
        self.step(
            expect,
            lambda: transitions.cancel_job(job_id, actor="op", reason="model", at=self.now),
        )

    # --- any step on any job or claim: mostly refusals, and stale holders' late writes ------

    @rule(
        job_id=jobs,
        action=st.sampled_from(
            ["replay", "approve", "deny", "retry", "reconcile", "diagnose", "cancel"]
        ),
    )
    def operator_on_any(self, job_id: str, action: str) -> None:
        if action == "replay":
            self.replay_create(job_id)
        elif action == "reconcile":
            self.reconcile(job_id, "CONFIRMED_DELETED")
        else:
            getattr(self, action)(job_id)

    @rule(
        handle=handles,
        action=st.sampled_from(["renew", "begin", "begin+lease", "finish", "release"]),
        lease=st.integers(5, 60),
        outcome=st.sampled_from([S.SUCCEEDED, S.FAILED, S.OUTCOME_UNKNOWN]),
    )
    def holder_on_any(self, handle: Handle, action: str, lease: int, outcome: str) -> None:
        """Any claim ever handed out — current, or lost to a sweep, a cancel or a new claim."""
        if action == "renew":
            self.renew(handle, lease)
        elif action == "begin":
            self.begin(handle, None)
        elif action == "begin+lease":
            self.begin(handle, lease)
        elif action == "finish":
            self.finish(handle, outcome)
        else:
            self.release(handle)

    # --- guided steps: the same rules, aimed at a job or claim where they can move -----------
    # Uniform choices rarely reach the deep states (a begun job whose lease lapses, a FAILED job
    # retried); these draw among the rows a step can move, the rules above mostly refuse.

    def _in(self, *states: str) -> list[str]:
        return sorted(j.job_id for j in self.model.values() if j.state in states)

    def _current(self, *states: str) -> list[Handle]:
        """The claims their holders still hold, of jobs in ``states``."""
        out = []
        for job in self.model.values():
            if job.state in states and job.claim_id:
                out.append(Handle(job.job_id, job.claim_id, job.worker_id))
        return sorted(out, key=lambda h: h.job_id)

    @precondition(lambda self: self._in(S.CREATED))
    @rule(data=st.data())
    def approve_created(self, data) -> None:
        self.approve(data.draw(st.sampled_from(self._in(S.CREATED))))

    @precondition(lambda self: self._in(S.READY))
    @rule(
        target=handles,
        data=st.data(),
        worker=st.sampled_from(WORKERS),
        lease=st.integers(5, 60),
    )
    def claim_ready(self, data, worker: str, lease: int):
        return self._claim(data.draw(st.sampled_from(self._in(S.READY))), worker, lease)

    @precondition(lambda self: self._current(*HELD))
    @rule(data=st.data(), lease=st.integers(5, 60))
    def renew_held(self, data, lease: int) -> None:
        self.renew(data.draw(st.sampled_from(self._current(*HELD))), lease)

    @precondition(lambda self: self._current(S.CLAIMED))
    @rule(data=st.data(), lease=st.one_of(st.none(), st.integers(5, 60)))
    def begin_held(self, data, lease: int | None) -> None:
        self.begin(data.draw(st.sampled_from(self._current(S.CLAIMED))), lease)

    @precondition(lambda self: self._current(S.EXECUTING))
    @rule(data=st.data(), outcome=st.sampled_from([S.SUCCEEDED, S.FAILED, S.OUTCOME_UNKNOWN]))
    def finish_held(self, data, outcome: str) -> None:
        self.finish(data.draw(st.sampled_from(self._current(S.EXECUTING))), outcome)

    @precondition(lambda self: self._current(S.CLAIMED))
    @rule(data=st.data())
    def release_held(self, data) -> None:
        self.release(data.draw(st.sampled_from(self._current(S.CLAIMED))))

    @precondition(lambda self: self._in(S.FAILED))
    @rule(data=st.data())
    def retry_failed(self, data) -> None:
        self.retry(data.draw(st.sampled_from(self._in(S.FAILED))))

    @precondition(lambda self: self._in(S.OUTCOME_UNKNOWN))
    @rule(data=st.data(), code=st.sampled_from(["CONFIRMED_DELETED", "NOT_APPLIED"]))
    def reconcile_unknown(self, data, code: str) -> None:
        self.reconcile(data.draw(st.sampled_from(self._in(S.OUTCOME_UNKNOWN))), code)

    @precondition(lambda self: self._in(S.CREATED, S.READY, S.CLAIMED))
    @rule(data=st.data())
    def cancel_not_begun(self, data) -> None:
        self.cancel(data.draw(st.sampled_from(self._in(S.CREATED, S.READY, S.CLAIMED))))

    @precondition(lambda self: self._in(S.OUTCOME_UNKNOWN))
    @rule(data=st.data())
    def diagnose_unknown(self, data) -> None:
        self.diagnose(data.draw(st.sampled_from(self._in(S.OUTCOME_UNKNOWN))))

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def rows_equal_the_model(self) -> None:
        assert set(self.rows) == set(self.model)
        for job_id, job in self.model.items():
            stored = tuple(self.rows[job_id][name] for name in COLUMNS)
            assert stored == job.row(), (job_id, stored, job.row())

    @invariant()
    def begun_deletes_never_return_to_ready(self) -> None:
        """The rows agree with the trail: no DELETE the trail shows STARTED is READY."""
        for job_id in self.started:
            assert self.rows[job_id]["state"] != S.READY, job_id


# How many extra runs a coverage miss may take (each half of CONSOLE_MODEL_EXAMPLES).
TOP_UPS = 3


def test_lifecycle_matches_the_model(settings_override) -> None:
    _explore(EXAMPLES)
    if EXAMPLES >= 1000:
        # Hypothesis's runs are correlated: the rarest path (a lease lapsing on a job's last
        # attempt) came up 13 times in one run of 1,000 and never in another. A miss is
        # explored further, up to TOP_UPS more runs of half the size, before it fails: the
        # check still proves every path was exercised, and one unlucky run no longer fails CI.
        for _ in range(TOP_UPS):
            if not _missing():
                break
            print("\nnot reached yet:", ", ".join(_missing()), "- exploring further")
            _explore(EXAMPLES // 2)
        assert _missing() == []


def _explore(examples: int) -> None:
    run_state_machine_as_test(
        LifecycleModel,
        settings=hypothesis_settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    print("\nsteps by outcome:", ", ".join(f"{k} {n}" for k, n in sorted(SEEN.items())))


def _missing() -> list[str]:
    """The paths a run of this size must reach and has not (yet)."""
    return [label for label in MUST_SEE if not _reached(label)]


def _kinds(label: str) -> tuple[str, set[str]]:
    verdict, _sep, kinds = label.partition(": ")
    return verdict, set(kinds.split("+"))


def _reached(label: str) -> bool:
    """Some step ended with the verdict and at least these events: a sweep that expired one
    lease to FAILED and another to READY in the same step ("moved: LEASE_EXPIRED->FAILED+
    LEASE_EXPIRED->READY") did reach LEASE_EXPIRED->FAILED."""
    verdict, wanted = _kinds(label)
    return any(
        n and seen[0] == verdict and wanted <= seen[1]
        for seen, n in ((_kinds(key), count) for key, count in SEEN.items())
    )


@pytest.fixture
def settings_override(settings):
    settings.INBOX_MAX_ATTEMPTS = MAX_ATTEMPTS
    return settings


# --- failures the machine found and shrank, kept as plain tests -------------------------------


def _unknown_steps_job(kind: str = "delete") -> tuple[Job, str]:
    doc = (save_doc if kind == "save" else delete_doc)(uid="kept")
    transitions.create_job(doc, requested_by="producer", at=START)
    if kind == "delete":
        transitions.mark_ready(doc["job_id"], actor="approver", approval_id="a-1", at=START)
    job = transitions.claim_job(doc["job_id"], worker_id="w-1", lease_seconds=5, at=START)
    return job, job.claim_id


def test_renewal_to_the_same_lease_end_records_it_and_changes_nothing_else() -> None:
    """Shrunk from the machine: claim (lease 5), begin with lease 10, renew with lease 10 at the
    same instant — the row is written to the values it had; the renewal is still recorded."""
    job, claim = _unknown_steps_job("save")
    transitions.begin_job(job.job_id, claim_id=claim, actor="w-1", lease_seconds=10, at=START)
    before = Job.objects.filter(job_id=job.job_id).values(*ROW_COLUMNS).get()
    end = transitions.renew_lease(
        job.job_id, claim_id=claim, lease_seconds=10, actor="w-1", at=START
    )
    assert end == START + dt.timedelta(seconds=10)
    assert Job.objects.filter(job_id=job.job_id).values(*ROW_COLUMNS).get() == before
    last = AuditEvent.objects.filter(job_id=job.job_id).order_by("-event_id").first()
    assert last.event_type == "LEASE_RENEWED"


def test_begun_delete_returns_to_ready_only_as_failed_and_retried() -> None:
    """Shrunk from the machine: a DELETE begun, FAILED (definitely not applied) and retried by
    an operator is READY again — the lifecycle's one way back; the invariant allows only it."""
    job, claim = _unknown_steps_job()
    transitions.begin_job(job.job_id, claim_id=claim, actor="w-1", at=START)
    transitions.fail_job(job.job_id, claim_id=claim, actor="w-1", result_code="NOT_FOUND", at=START)
    retried = transitions.retry_job(job.job_id, actor="op", reason="object restored", at=START)
    assert retried.state == S.READY
    trail = list(
        AuditEvent.objects.filter(job_id=job.job_id)
        .order_by("event_id")
        .values_list("event_type", flat=True)
    )
    assert trail[-3:] == ["STARTED", "FAILED", "RETRIED"]


def test_begun_delete_whose_lease_lapses_is_parked_and_its_late_writes_refused() -> None:
    job, claim = _unknown_steps_job()
    transitions.begin_job(job.job_id, claim_id=claim, actor="w-1", at=START)
    later = START + dt.timedelta(seconds=6)
    report = transitions.recover_stale_claims_report(actor="sweeper", at=later)
    assert report.job_ids == [job.job_id]
    assert Job.objects.get(job_id=job.job_id).state == S.OUTCOME_UNKNOWN
    for late in (
        lambda: transitions.complete_job(job.job_id, claim_id=claim, actor="w-1", at=later),
        lambda: transitions.release_job(job.job_id, claim_id=claim, actor="w-1", at=later),
        lambda: transitions.renew_lease(
            job.job_id, claim_id=claim, lease_seconds=5, actor="w-1", at=later
        ),
    ):
        with pytest.raises(InboxError):
            late()
    assert Job.objects.get(job_id=job.job_id).state == S.OUTCOME_UNKNOWN


@pytest.mark.parametrize(("reached_on_run", "runs", "fails"), [(2, 2, False), (None, 4, True)])
def test_a_coverage_miss_is_explored_further_then_fails(
    monkeypatch, reached_on_run: int | None, runs: int, fails: bool
) -> None:
    """The top-up loop itself: a path first reached by the second run passes after two runs;
    one never reached fails after the first run and every top-up (nothing is explored here)."""
    monkeypatch.setattr(f"{__name__}.EXAMPLES", 1000)
    monkeypatch.setattr(f"{__name__}.MUST_SEE", ("moved: NEVER_BEFORE",))
    monkeypatch.setattr(f"{__name__}.SEEN", Counter())
    sizes: list[int] = []

    def explore(examples: int) -> None:
        sizes.append(examples)
        if len(sizes) == reached_on_run:
            SEEN["moved: NEVER_BEFORE+READY"] += 1

    monkeypatch.setattr(f"{__name__}._explore", explore)
    if fails:
        with pytest.raises(AssertionError):
            test_lifecycle_matches_the_model(None)
    else:
        test_lifecycle_matches_the_model(None)
    assert sizes == [1000] + [500] * (runs - 1)
