"""Django admin for runs: read-only, no add or delete, closing only through close_run."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from audit.models import AuditEvent, EventType
from runs.models import Group, Member, Run, RunStatus
from runs.transitions import plan_run
from tests.runs.support import StaticConsolidator

pytestmark = pytest.mark.django_db


@pytest.fixture
def run() -> Run:
    return plan_run(store="s", owner="w1", lease_seconds=600, consolidator=StaticConsolidator())


def test_admin_changelists_render_with_effective_status(admin_client, run):
    page = admin_client.get(reverse("admin:runs_run_changelist"))
    assert page.status_code == 200
    assert run.run_id in page.content.decode()
    assert "s left" in page.content.decode()
    assert admin_client.get(reverse("admin:runs_group_changelist")).status_code == 200
    assert admin_client.get(reverse("admin:runs_member_changelist")).status_code == 200


def test_admin_change_form_is_read_only(admin_client, run):
    url = reverse("admin:runs_run_change", args=[run.run_id])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert 'name="status"' not in page.content.decode()
    posted = admin_client.post(url, {"status": "complete"})
    assert posted.status_code == 403
    assert Run.objects.get(run_id=run.run_id).status == RunStatus.ACTIVE


@pytest.mark.parametrize("model", [Run, Group, Member])
def test_admin_delete_and_add_refused(admin_client, run, model):
    obj = model.objects.first()
    name = model._meta.model_name
    delete = admin_client.post(reverse(f"admin:runs_{name}_delete", args=[obj.pk]), {"post": "yes"})
    assert delete.status_code == 403
    assert admin_client.get(reverse(f"admin:runs_{name}_add")).status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()


def test_admin_close_action_calls_close_run_as_the_admin(admin_client, run):
    response = admin_client.post(
        reverse("admin:runs_run_changelist"),
        {"action": "close_selected_runs", "_selected_action": [run.run_id]},
    )
    assert response.status_code == 302
    stored = Run.objects.get(run_id=run.run_id)
    assert (stored.status, stored.closed_by) == (RunStatus.ABANDONED, "admin")
    event = AuditEvent.objects.for_run(run.run_id).last()
    assert (event.event_type, event.actor) == (EventType.RUN_ABANDONED, "admin")


def test_admin_close_action_hidden_without_close_permission(client, run):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(user)
    page = client.get(reverse("admin:runs_run_changelist"))
    assert page.status_code == 200
    assert "close_selected_runs" not in page.content.decode()
    client.post(
        reverse("admin:runs_run_changelist"),
        {"action": "close_selected_runs", "_selected_action": [run.run_id]},
    )
    assert Run.objects.get(run_id=run.run_id).status == RunStatus.ACTIVE
