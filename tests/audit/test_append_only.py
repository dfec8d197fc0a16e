"""The audit log is append-only: the ORM, the admin and raw SQL all refuse to
change or remove an event — the last by database triggers, on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit.events import record_event
from audit.models import AppendOnlyError, AuditEvent, EventType
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def event() -> AuditEvent:
    make_job("save")
    return record_event(
        event_type=EventType.OPERATOR_ACTION, actor="op", job_id="j-1", detail={"why": "test"}
    )


def _table() -> list[dict]:
    return list(AuditEvent.objects.order_by("event_id").values())


# --- ORM --------------------------------------------------------------------------------------

ORM_WRITES = {
    "instance.save": lambda e: (setattr(e, "actor", "mallory"), e.save()),
    "instance.delete": lambda e: e.delete(),
    "queryset.update": lambda e: AuditEvent.objects.filter(pk=e.pk).update(actor="mallory"),
    "queryset.delete": lambda e: AuditEvent.objects.all().delete(),
    "bulk_update": lambda e: AuditEvent.objects.bulk_update(
        [AuditEvent(pk=e.pk, actor="mallory")], ["actor"]
    ),
    "update_or_create": lambda e: AuditEvent.objects.update_or_create(
        pk=e.pk, defaults={"actor": "mallory"}
    ),
}


@pytest.mark.parametrize("write", list(ORM_WRITES))
def test_orm_change_of_audit_event_raises_append_only_error(event, write):
    before = _table()
    with pytest.raises(AppendOnlyError), transaction.atomic():
        ORM_WRITES[write](AuditEvent.objects.get(pk=event.pk))
    assert _table() == before


def test_orm_create_still_appends(event):
    count = AuditEvent.objects.count()
    record_event(event_type=EventType.OPERATOR_ACTION, actor="op", detail={})
    assert AuditEvent.objects.count() == count + 1


# --- raw SQL: the database triggers -----------------------------------------------------------

RAW = {
    "UPDATE": "UPDATE audit_auditevent SET actor = 'mallory'",
    "UPDATE one": "UPDATE audit_auditevent SET detail = '{}' WHERE event_id = {pk}",
    "DELETE": "DELETE FROM audit_auditevent",
    "DELETE one": "DELETE FROM audit_auditevent WHERE event_id = {pk}",
}


@pytest.mark.parametrize("name", [*RAW, "TRUNCATE"])
def test_raw_sql_change_of_audit_table_is_refused_by_trigger(event, name):
    if name == "TRUNCATE" and connection.vendor != "postgresql":
        # SQLite has no TRUNCATE; its "DELETE FROM t" (the truncate optimisation) is the
        # DELETE case above, which the delete trigger refuses (a trigger disables it).
        name = "DELETE"
    sql = "TRUNCATE audit_auditevent" if name == "TRUNCATE" else RAW[name]
    before = _table()
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql.replace("{pk}", str(event.pk)))
    assert _table() == before


def test_raw_sql_against_migrated_database_is_refused(proc_db):
    """The triggers come from the migration itself, not from the test harness."""
    proc_db.python(
        "from audit.events import record_event\n"
        "record_event(event_type='OPERATOR_ACTION', actor='op', detail={})"
    )
    if proc_db.vendor == "postgresql":
        import psycopg

        refused: tuple[type[Exception], ...] = (psycopg.Error,)
        statements = ["UPDATE", "DELETE", "TRUNCATE"]
    else:
        refused = (sqlite3.Error,)
        statements = ["UPDATE", "DELETE"]
    sql = {**RAW, "TRUNCATE": "TRUNCATE audit_auditevent"}
    for name in statements:
        with pytest.raises(refused, match="append-only"):
            proc_db.execute(sql[name])
    assert proc_db.query("SELECT actor FROM audit_auditevent") == [("op",)]


# --- admin ------------------------------------------------------------------------------------


@pytest.fixture
def superuser_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(user)
    return client


def test_admin_audit_changelist_is_viewable_without_add_or_delete(superuser_client, event):
    response = superuser_client.get(reverse("admin:audit_auditevent_changelist"))
    assert response.status_code == 200
    assert str(event.event_id).encode() in response.content
    assert b"delete_selected" not in response.content
    assert reverse("admin:audit_auditevent_add").encode() not in response.content


def test_admin_audit_change_page_is_read_only(superuser_client, event):
    url = reverse("admin:audit_auditevent_change", args=[event.pk])
    response = superuser_client.get(url)
    assert response.status_code == 200
    assert b'name="_save"' not in response.content
    assert b'name="actor"' not in response.content


ADMIN_POSTS = {
    "add": lambda pk: (reverse("admin:audit_auditevent_add"), {"actor": "x", "event_type": "X"}),
    "change": lambda pk: (
        reverse("admin:audit_auditevent_change", args=[pk]),
        {"actor": "mallory", "event_type": "REQUESTED", "detail": "{}", "_save": "Save"},
    ),
    "delete": lambda pk: (reverse("admin:audit_auditevent_delete", args=[pk]), {"post": "yes"}),
}


@pytest.mark.parametrize("action", list(ADMIN_POSTS))
def test_admin_audit_post_is_refused_for_superuser(superuser_client, event, action):
    before = _table()
    url, data = ADMIN_POSTS[action](event.pk)
    response = superuser_client.post(url, data)
    assert response.status_code == 403
    assert _table() == before


def test_admin_audit_delete_selected_action_is_not_available(superuser_client, event):
    before = _table()
    response = superuser_client.post(
        reverse("admin:audit_auditevent_changelist"),
        {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"},
        follow=True,
    )
    assert response.status_code == 200
    assert _table() == before


def test_admin_audit_changelist_with_facets_runs_no_unbounded_count(superuser_client, event):
    with CaptureQueriesContext(connection) as captured:
        response = superuser_client.get(
            reverse("admin:audit_auditevent_changelist"), {"_facets": "1"}
        )
    assert response.status_code == 200
    unbounded = [
        q["sql"]
        for q in captured.captured_queries
        if "audit_auditevent" in q["sql"]
        and "COUNT(" in q["sql"].upper()
        and "LIMIT" not in q["sql"].upper()
    ]
    assert unbounded == []
