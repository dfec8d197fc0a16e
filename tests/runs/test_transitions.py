"""Run transitions in one process: every run, group and member rule with a pinned clock
(both databases)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent, EventType
from inbox.transitions import db_now
from runs import transitions as t
from runs.errors import GroupExpired, InvalidRunTransition, RunAlreadyActive
from runs.models import Group, GroupStatus, Member, Run, RunStatus
from runs.selectors import list_runs, store_overview
from tests.runs.support import StaticConsolidator

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.UTC)
LEASE = 60
STORE = "vault"


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def plan(owner: str = "w1", seconds: float = 0, store: str = STORE, **kw) -> Run:
    kw.setdefault("consolidator", StaticConsolidator())
    return t.plan_run(store=store, owner=owner, lease_seconds=LEASE, at=at(seconds), **kw)


def snapshot() -> tuple:
    """Every run, group and member row, to compare before/after a refused write."""
    return (
        list(Run.objects.order_by("run_id").values()),
        list(Group.objects.order_by("id").values()),
        list(Member.objects.order_by("id").values()),
    )


def events(run_id: str) -> list[str]:
    return list(AuditEvent.objects.for_run(run_id).values_list("event_type", flat=True))


def writes(ctx: CaptureQueriesContext) -> list[str]:
    verbs = ("INSERT", "UPDATE", "DELETE")
    return [q["sql"] for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith(verbs)]


# --- effective status and derived expiry ------------------------------------------------------


def test_effective_status_within_lease_is_active():
    run = plan()
    assert t.effective_status(run, at(LEASE)) == RunStatus.ACTIVE
    assert t.is_effectively_active(run, at(LEASE))


def test_read_lapsed_run_reports_expired_and_writes_nothing():
    run = plan()
    before = (snapshot(), AuditEvent.objects.count())
    with CaptureQueriesContext(connection) as ctx:
        stored = Run.objects.get(run_id=run.run_id)
        assert t.effective_status(stored, at(LEASE + 1)) == RunStatus.EXPIRED
        assert not t.is_effectively_active(stored, at(LEASE + 1))
        assert t.seconds_left(stored, at(LEASE + 1)) == 0
        assert t.current_run(STORE).run_id == run.run_id
        overview = store_overview(at(LEASE + 1))
        views = list_runs(at=at(LEASE + 1))
    assert writes(ctx) == []
    assert overview[0].effective_status == RunStatus.EXPIRED
    assert views[0].effective_status == RunStatus.EXPIRED
    assert Run.objects.get(run_id=run.run_id).status == RunStatus.ACTIVE
    assert (snapshot(), AuditEvent.objects.count()) == before


def test_plan_run_after_lapse_closes_previous_expired():
    first = plan("w1")
    second = plan("w2", seconds=LEASE + 0.001)
    first.refresh_from_db()
    assert first.status == RunStatus.EXPIRED
    assert first.closed_by == "w2"
    assert second.replaced_run_id == first.run_id
    assert events(first.run_id) == [EventType.RUN_PLANNED, EventType.RUN_EXPIRED]


def test_plan_run_at_exact_lease_end_is_still_live_and_takes_over():
    first = plan("w1")
    plan("w2", seconds=LEASE)  # expires_at >= now: still effectively active
    first.refresh_from_db()
    assert first.status == RunStatus.TAKEN_OVER


def test_plan_run_same_owner_live_closes_previous_abandoned():
    first = plan("w1")
    plan("w1", seconds=10)
    first.refresh_from_db()
    assert first.status == RunStatus.ABANDONED
    assert events(first.run_id)[-1] == EventType.RUN_ABANDONED


def test_plan_run_other_owner_live_closes_previous_taken_over():
    first = plan("w1")
    second = plan("w2", seconds=10)
    first.refresh_from_db()
    assert first.status == RunStatus.TAKEN_OVER
    event = AuditEvent.objects.for_run(first.run_id).last()
    assert event.event_type == EventType.RUN_TAKEN_OVER
    assert event.detail["replaced_by"] == second.run_id
    assert event.detail["new_owner"] == "w2"


def test_plan_run_db_clock_sets_expiry_exactly_one_lease_after_start():
    run = t.plan_run(store=STORE, owner="w1", lease_seconds=37, consolidator=StaticConsolidator())
    stored = Run.objects.get(run_id=run.run_id)
    assert stored.expires_at - stored.started_at == dt.timedelta(seconds=37)
    assert stored.renewed_at == stored.started_at


def test_plan_run_records_planned_counts():
    run = plan(consolidator=StaticConsolidator(groups=3, members=4))
    event = AuditEvent.objects.for_run(run.run_id).first()
    assert event.event_type == EventType.RUN_PLANNED
    assert (event.detail["groups"], event.detail["members"], event.detail["deferred"]) == (3, 12, 0)
    assert Group.objects.filter(run_id=run.run_id, status=GroupStatus.PENDING).count() == 3


def test_plan_run_empty_plan_closes_complete_at_once():
    run = plan(consolidator=StaticConsolidator(groups=0))
    assert Run.objects.get(run_id=run.run_id).status == RunStatus.COMPLETE
    assert events(run.run_id) == [EventType.RUN_PLANNED, EventType.RUN_COMPLETE]


def test_plan_run_refused_insert_rolls_back_the_close(monkeypatch):
    first = plan("w1")
    before = (snapshot(), AuditEvent.objects.count())
    original = Run.save

    def refuse(self, *args, **kwargs):
        if self.run_id != first.run_id:
            raise IntegrityError("UNIQUE constraint failed: runs_run.store")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Run, "save", refuse)
    with pytest.raises(RunAlreadyActive):
        plan("w2", seconds=5)
    assert (snapshot(), AuditEvent.objects.count()) == before


def test_plan_run_non_integer_lease_refused():
    with pytest.raises(ValueError):
        t.plan_run(store=STORE, owner="w1", lease_seconds=0, consolidator=StaticConsolidator())


# --- the database constraint ------------------------------------------------------------------


def test_insert_second_active_run_raw_sql_refused_by_database():
    plan("w1")
    now = db_now()
    sql = (
        "INSERT INTO runs_run (run_id, store, worker_id, host, pid, started_at, expires_at, "
        "renewed_at, lease_seconds, status, closed_by, close_reason, replaced_run_id, "
        "created_at) VALUES (%s, %s, %s, '', 1, %s, %s, %s, 60, 'active', '', '', '', %s)"
    )
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, ["raw-second", STORE, "intruder", now, now, now, now])
    assert Run.objects.filter(store=STORE, status=RunStatus.ACTIVE).count() == 1


def test_insert_active_run_other_store_raw_sql_allowed():
    plan("w1")
    now = db_now()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runs_run (run_id, store, worker_id, host, pid, started_at, expires_at, "
            "renewed_at, lease_seconds, status, closed_by, close_reason, replaced_run_id, "
            "created_at) VALUES (%s, %s, 'w', '', 1, %s, %s, %s, 60, 'active', '', '', '', %s)",
            ["raw-other", "other-store", now, now, now, now],
        )
    assert Run.objects.filter(status=RunStatus.ACTIVE).count() == 2


# --- serve, dispose, defer --------------------------------------------------------------------


def test_next_group_without_run_plans_and_serves_first_group():
    c = StaticConsolidator(groups=2, members=2)
    served = t.next_group(store=STORE, owner="w1", lease_seconds=LEASE, consolidator=c, at=at(0))
    assert served.planned
    assert served.group.seq == 1
    assert served.group.status == GroupStatus.SERVED
    assert [e for e in events(served.run.run_id)] == [
        EventType.RUN_PLANNED,
        EventType.RUN_GROUP_SERVED,
    ]


def test_next_group_serve_refreshes_lease_from_now():
    c = StaticConsolidator()
    run = plan(consolidator=c)
    t.next_group(store=STORE, owner="w1", consolidator=c, at=at(20))
    stored = Run.objects.get(run_id=run.run_id)
    assert stored.expires_at == at(20 + LEASE)
    assert stored.expires_at - stored.renewed_at == dt.timedelta(seconds=LEASE)
    assert stored.started_at == at(0)


def test_next_group_unfinished_group_handed_back_without_write():
    c = StaticConsolidator()
    first = t.next_group(store=STORE, owner="w1", consolidator=c, at=at(0))
    before = (snapshot(), AuditEvent.objects.count())
    again = t.next_group(store=STORE, owner="w1", consolidator=c, at=at(30))
    assert again.resumed
    assert again.group.id == first.group.id
    assert (snapshot(), AuditEvent.objects.count()) == before  # lease not refreshed on a no-op


def test_next_group_other_owners_live_run_is_taken_over():
    c = StaticConsolidator()
    a = t.next_group(store=STORE, owner="a", consolidator=c, at=at(0))
    b = t.next_group(store=STORE, owner="b", consolidator=c, at=at(5))
    assert b.planned
    assert Run.objects.get(run_id=a.run.run_id).status == RunStatus.TAKEN_OVER


def _dispose_all(served: t.Served, owner: str, c, seconds: float) -> list[t.Disposed]:
    decisions = c.decide(run=served.run, group=served.group, members=served.members)
    return [
        t.dispose_member(
            member_id=m.id, owner=owner, disposition=decisions[m.id], consolidator=c, at=at(seconds)
        )
        for m in served.members
    ]


def test_dispose_member_refreshes_lease_and_applies():
    c = StaticConsolidator()
    served = t.next_group(store=STORE, owner="w1", consolidator=c, at=at(0))
    m = served.members[0]
    result = t.dispose_member(
        member_id=m.id, owner="w1", disposition="keep", consolidator=c, at=at(40)
    )
    assert result.applied == {"seen": "keep"}
    stored = Member.objects.get(id=m.id)
    assert stored.disposition == "keep"
    assert stored.detail["applied"] == {"seen": "keep"}
    assert Run.objects.get(run_id=served.run.run_id).expires_at == at(40 + LEASE)


def test_dispose_member_replay_same_disposition_is_noop_without_lease():
    c = StaticConsolidator()
    served = t.next_group(store=STORE, owner="w1", consolidator=c, at=at(0))
    m = served.members[0]
    t.dispose_member(member_id=m.id, owner="w1", disposition="keep", consolidator=c, at=at(1))
    before = (snapshot(), AuditEvent.objects.count())
    again = t.dispose_member(
        member_id=m.id, owner="w1", disposition="keep", consolidator=c, at=at(2)
    )
    assert not again.changed
    assert (snapshot(), AuditEvent.objects.count()) == before
    with pytest.raises(InvalidRunTransition):
        t.dispose_member(member_id=m.id, owner="w1", disposition="drop", consolidator=c, at=at(3))
    assert (snapshot(), AuditEvent.objects.count()) == before


def test_dispose_member_pending_group_refused():
    c = StaticConsolidator()
    run = plan(consolidator=c)
    member = Member.objects.filter(group__run_id=run.run_id).first()
    before = snapshot()
    with pytest.raises(InvalidRunTransition):
        t.dispose_member(
            member_id=member.id, owner="w1", disposition="keep", consolidator=c, at=at(1)
        )
    assert snapshot() == before


def test_dispose_last_members_close_groups_done_and_run_complete_once():
    c = StaticConsolidator(groups=2, members=2)
    results = []
    for step in range(2):
        served = t.next_group(store=STORE, owner="w1", consolidator=c, at=at(step * 10))
        results += _dispose_all(served, "w1", c, step * 10 + 1)
    assert [r.group_done for r in results] == [False, True, False, True]
    assert [r.run_closed for r in results] == [False, False, False, True]
    run = Run.objects.get(run_id=served.run.run_id)
    assert run.status == RunStatus.COMPLETE
    assert events(run.run_id).count(EventType.RUN_COMPLETE) == 1
    assert not t.close_if_finished(run.run_id)
    assert events(run.run_id).count(EventType.RUN_COMPLETE) == 1


def test_dispose_member_lapsed_own_run_rejected_changes_nothing():
    c = StaticConsolidator()
    served = t.next_group(store=STORE, owner="w1", consolidator=c, at=at(0))
    before = snapshot()
    with pytest.raises(GroupExpired) as info:
        t.dispose_member(
            member_id=served.members[0].id,
            owner="w1",
            disposition="keep",
            consolidator=c,
            at=at(LEASE + 1),
        )
    assert (info.value.stored_status, info.value.effective_status) == ("active", "expired")
    assert snapshot() == before
    assert c.applied == []
    assert events(served.run.run_id)[-1] == EventType.RUN_REJECTED_WRITE


def test_dispose_member_displaced_owner_rejected_changes_nothing():
    c = StaticConsolidator()
    a = t.next_group(store=STORE, owner="a", consolidator=c, at=at(0))
    t.next_group(store=STORE, owner="b", consolidator=c, at=at(5))
    before = snapshot()
    lease_before = Run.objects.get(run_id=a.run.run_id).expires_at
    with pytest.raises(GroupExpired) as info:
        t.dispose_member(
            member_id=a.members[0].id, owner="a", disposition="keep", consolidator=c, at=at(6)
        )
    assert (info.value.stored_status, info.value.effective_status) == ("taken_over", "taken_over")
    with pytest.raises(GroupExpired):
        t.defer_group(group_id=a.group.id, owner="a", reason="giving up", at=at(6))
    assert snapshot() == before
    assert Run.objects.get(run_id=a.run.run_id).expires_at == lease_before
    rejected = AuditEvent.objects.filter(event_type=EventType.RUN_REJECTED_WRITE)
    assert rejected.count() == 2
    assert rejected.first().detail["effective_status"] == "taken_over"


def test_dispose_member_in_new_run_by_non_owner_rejected():
    c = StaticConsolidator()
    b = t.next_group(store=STORE, owner="b", consolidator=c, at=at(0))
    before = snapshot()
    with pytest.raises(GroupExpired) as info:
        t.dispose_member(
            member_id=b.members[0].id, owner="a", disposition="keep", consolidator=c, at=at(1)
        )
    assert (info.value.stored_status, info.value.effective_status) == ("active", "active")
    assert snapshot() == before


def test_defer_group_members_return_to_next_plan_without_lease_refresh():
    c = StaticConsolidator(groups=1, members=3)
    served = t.next_group(store=STORE, owner="w1", consolidator=c, at=at(0))
    result = t.defer_group(group_id=served.group.id, owner="w1", reason="later", at=at(30))
    assert result.group.status == GroupStatus.DEFERRED
    assert result.run_closed  # nothing else was open
    run = Run.objects.get(run_id=served.run.run_id)
    assert run.status == RunStatus.COMPLETE
    assert run.expires_at == at(LEASE)  # deferring is not progress
    nxt = plan("w1", seconds=40, consolidator=c)
    assert sorted(c.carry_over_seen[-1]) == sorted(m.item_ref for m in served.members)
    planned = AuditEvent.objects.for_run(nxt.run_id).first()
    assert planned.detail["deferred"] == 3


# --- closing ----------------------------------------------------------------------------------


def test_close_run_operator_abandons_live_run_recorded_as_operator():
    run = plan("w1")
    t.close_run(run.run_id, status=RunStatus.ABANDONED, actor="alice", reason="stuck", at=at(5))
    stored = Run.objects.get(run_id=run.run_id)
    assert (stored.status, stored.closed_by, stored.close_reason) == ("abandoned", "alice", "stuck")
    event = AuditEvent.objects.for_run(run.run_id).last()
    assert (event.event_type, event.actor) == (EventType.RUN_ABANDONED, "alice")
    assert event.detail["reason"] == "stuck"


def test_close_run_already_closed_refused_writes_nothing():
    run = plan("w1")
    t.close_run(run.run_id, status=RunStatus.ABANDONED, actor="alice", reason="stuck", at=at(5))
    before = (snapshot(), AuditEvent.objects.count())
    with pytest.raises(InvalidRunTransition):
        t.close_run(run.run_id, status=RunStatus.ABANDONED, actor="bob", reason="me too", at=at(6))
    assert (snapshot(), AuditEvent.objects.count()) == before


def test_close_run_expired_with_live_lease_refused():
    run = plan("w1")
    with pytest.raises(InvalidRunTransition):
        t.close_run(run.run_id, status=RunStatus.EXPIRED, actor="alice", reason="x", at=at(5))
    t.close_run(run.run_id, status=RunStatus.EXPIRED, actor="alice", reason="x", at=at(61))
    assert Run.objects.get(run_id=run.run_id).status == RunStatus.EXPIRED


def test_close_run_complete_with_open_groups_refused():
    run = plan("w1")
    with pytest.raises(InvalidRunTransition):
        t.close_run(run.run_id, status=RunStatus.COMPLETE, actor="alice", reason="x", at=at(5))
    assert Run.objects.get(run_id=run.run_id).status == RunStatus.ACTIVE


def test_close_run_taken_over_not_an_operator_status():
    run = plan("w1")
    with pytest.raises(InvalidRunTransition):
        t.close_run(run.run_id, status=RunStatus.TAKEN_OVER, actor="alice", reason="x")


def test_close_if_finished_open_groups_changes_nothing():
    run = plan("w1")
    before = (snapshot(), AuditEvent.objects.count())
    assert not t.close_if_finished(run.run_id, at=at(1))
    assert (snapshot(), AuditEvent.objects.count()) == before


# --- selectors --------------------------------------------------------------------------------


def test_store_overview_counts_groups_and_history_in_few_queries():
    c = StaticConsolidator(groups=3, members=1)
    a = t.next_group(store=STORE, owner="a", consolidator=c, at=at(0))
    b = t.next_group(store=STORE, owner="b", consolidator=c, at=at(1))
    plan("z", store="other", seconds=2)
    with CaptureQueriesContext(connection) as ctx:
        overview = {o.store: o for o in store_overview(at(3))}
    assert len(ctx.captured_queries) <= 4
    vault = overview[STORE]
    assert vault.current.run.run_id == b.run.run_id
    assert vault.group_counts == {"pending": 2, "served": 1, "done": 0, "deferred": 0}
    assert vault.seconds_left == LEASE - 2
    assert [h.effective_status for h in vault.history] == ["active", "taken_over"]
    assert vault.history[1].run.run_id == a.run.run_id
    assert overview["other"].effective_status == "active"
