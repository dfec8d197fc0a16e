"""The consolidator worker loop in-process (real clock, committed transactions)."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent, EventType
from runs.models import Member, Run, RunStatus
from runs.worker import ConsolidatorWorker
from tests.runs.support import StaticConsolidator

pytestmark = pytest.mark.django_db(transaction=True)


class DeferSecond(StaticConsolidator):
    """Keeps the first member of each group and defers the rest one by one."""

    def decide(self, *, run, group, members) -> dict[int, str]:
        return {m.id: ("keep" if i == 0 else "defer") for i, m in enumerate(members)}


def test_worker_member_deferred_is_disposed_and_returns_to_next_plan():
    consolidator = DeferSecond(groups=2, members=2)
    worker = ConsolidatorWorker(
        store="s", worker_id="w", once=True, consolidator=consolidator, say=lambda _t: None
    )
    progress = worker.run()
    assert progress.disposed == {"keep": 2, "defer": 2}
    assert progress.deferred == 0  # no group was put aside as a whole
    run = Run.objects.get()
    assert run.status == RunStatus.COMPLETE
    deferred_refs = sorted(
        Member.objects.filter(disposition="defer").values_list("item_ref", flat=True)
    )

    ConsolidatorWorker(
        store="s", worker_id="w", once=True, consolidator=consolidator, say=lambda _t: None
    ).run()
    assert sorted(consolidator.carry_over_seen[-1]) == deferred_refs
    second = Run.objects.exclude(run_id=run.run_id).get()
    planned = AuditEvent.objects.get(run_id=second.run_id, event_type=EventType.RUN_PLANNED)
    assert planned.detail["deferred"] == 2


def test_worker_all_members_deferred_defers_the_group():
    class DeferAll(StaticConsolidator):
        def decide(self, *, run, group, members) -> dict[int, str]:
            return {m.id: "defer" for m in members}

    worker = ConsolidatorWorker(
        store="s", worker_id="w", once=True, consolidator=DeferAll(groups=2), say=lambda _t: None
    )
    progress = worker.run()
    assert progress.deferred == 2
    assert progress.disposed == {}
    assert Run.objects.get().status == RunStatus.COMPLETE
    assert AuditEvent.objects.filter(event_type=EventType.RUN_GROUP_DEFERRED).count() == 2
