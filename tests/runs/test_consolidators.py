"""The bundled vault deduplicator and consolidator selection (both databases, in-process)."""

from __future__ import annotations

import hashlib
import os

import pytest

from audit.models import AuditEvent, EventType
from inbox.models import Job, JobState
from runs.consolidators import (
    VaultDeduplicator,
    get_consolidator,
    seed_duplicate_vault,
)
from runs.errors import ConsolidatorError
from runs.models import Group, GroupStatus, Member, Run, RunStatus
from runs.worker import ConsolidatorWorker


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def vault(tmp_path, settings):
    root = tmp_path / "vault"
    root.mkdir()
    settings.VAULT_ROOT = root
    return root


def write(root, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run_once(store: str = "vault", worker_id: str = "dedup-1") -> ConsolidatorWorker:
    worker = ConsolidatorWorker(store=store, worker_id=worker_id, once=True, say=lambda _t: None)
    worker.run()
    return worker


def delete_jobs():
    return Job.objects.filter(job_type="DELETE_OBJECT")


# --- planning ---------------------------------------------------------------------------------


def test_plan_identical_content_grouped_keeper_shortest_then_by_name(vault):
    for rel in ("b.md", "a.md", "deep/a.md"):
        write(vault, rel, "same")
    write(vault, "unique.md", "other")
    groups = VaultDeduplicator().plan(store="vault", carry_over=[])
    assert len(groups) == 1
    assert groups[0].key == sha("same")
    assert [m.item_ref for m in groups[0].members] == ["a.md", "b.md", "deep/a.md"]
    assert {m.detail["keeper"] for m in groups[0].members} == {"a.md"}


def test_plan_symlinks_and_hidden_files_are_not_items(vault, tmp_path):
    write(vault, "a.md", "same")
    write(vault, ".tmp-a.md", "same")
    outside = tmp_path / "outside.md"
    outside.write_text("same")
    os.symlink(outside, vault / "link-out.md")
    os.symlink(vault / "a.md", vault / "link-in.md")
    os.symlink(tmp_path, vault / "dir-link")
    assert VaultDeduplicator().plan(store="vault", carry_over=[]) == []


def test_check_missing_vault_root_raises_configuration_error(tmp_path, settings):
    settings.VAULT_ROOT = tmp_path / "missing"
    with pytest.raises(ConsolidatorError, match="VAULT_ROOT"):
        VaultDeduplicator().check()


def test_get_consolidator_unimportable_path_raises():
    with pytest.raises(ConsolidatorError, match="cannot be imported"):
        get_consolidator("runs.consolidators.NoSuchThing")


def test_get_consolidator_factory_failure_raises():
    with pytest.raises(ConsolidatorError, match="could not be built"):
        get_consolidator("runs.consolidators.PlannedGroup")


def test_get_consolidator_object_without_interface_raises():
    with pytest.raises(ConsolidatorError, match="does not provide"):
        get_consolidator("runs.consolidators.DEFAULT_CONSOLIDATOR")


def test_get_consolidator_default_from_settings():
    assert isinstance(get_consolidator(), VaultDeduplicator)


def test_delete_document_same_inputs_same_document():
    d = VaultDeduplicator()
    one = d.delete_document(store="vault", item_ref="a/b.md", digest=sha("x"))
    assert one == d.delete_document(store="vault", item_ref="a/b.md", digest=sha("x"))
    assert one != d.delete_document(store="vault", item_ref="a/b.md", digest=sha("y"))


# --- a whole run ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_dedup_run_requests_one_delete_per_extra_copy_and_none_on_second_run(vault):
    seeded = seed_duplicate_vault(vault, originals=3, copies=2)
    write(vault, "notes/unique.md", "only once")
    run_once()

    jobs = list(delete_jobs().order_by("vault_path"))
    assert len(jobs) == seeded["expected_deletes"] == 6
    keepers = {f"notes/dup-{i}.md" for i in (1, 2, 3)}
    assert {j.vault_path for j in jobs} == set(seeded["written"]) - keepers
    for job in jobs:
        assert job.state == JobState.CREATED  # awaiting approval like any other DELETE
        content = (vault / job.vault_path).read_text()
        assert job.payload["expected_provenance_hash"] == sha(content)
    first = Run.objects.get()
    assert first.status == RunStatus.COMPLETE
    dispositions = sorted(Member.objects.values_list("disposition", flat=True))
    assert dispositions == ["drop"] * 6 + ["keep"] * 3
    requested = AuditEvent.objects.filter(event_type=EventType.REQUESTED).count()

    run_once()
    assert delete_jobs().count() == 6
    assert AuditEvent.objects.filter(event_type=EventType.REQUESTED).count() == requested
    second = Run.objects.exclude(run_id=first.run_id).get()
    assert second.status == RunStatus.COMPLETE
    applied = [
        m.detail["applied"]
        for m in Member.objects.filter(group__run=second, disposition="drop").order_by("id")
    ]
    assert len(applied) == 6
    assert all(a["created"] is False for a in applied)
    assert {a["job_id"] for a in applied} == {j.job_id for j in jobs}


@pytest.mark.django_db(transaction=True)
def test_dedup_apply_replayed_member_creates_no_second_job(vault):
    seed_duplicate_vault(vault, originals=1, copies=1)
    run_once()
    member = Member.objects.get(disposition="drop")
    dedup = VaultDeduplicator()
    run = member.group.run
    again = dedup.apply(run=run, group=member.group, member=member, disposition="drop")
    assert again["created"] is False
    assert delete_jobs().count() == 1


@pytest.mark.django_db(transaction=True)
def test_dedup_keeper_changed_after_plan_defers_group_without_deletes(vault, monkeypatch):
    seed_duplicate_vault(vault, originals=1, copies=2)
    original_plan = VaultDeduplicator.plan

    def plan_then_edit(self, **kwargs):
        groups = original_plan(self, **kwargs)
        write(vault, "notes/dup-1.md", "edited after the plan")
        return groups

    monkeypatch.setattr(VaultDeduplicator, "plan", plan_then_edit)
    worker = run_once()
    assert delete_jobs().count() == 0
    assert Group.objects.get().status == GroupStatus.DEFERRED
    assert Run.objects.get().status == RunStatus.COMPLETE
    assert worker.progress.deferred == 1
