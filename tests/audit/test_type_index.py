"""The audit type index holds the rare types only (audit 0007).

The routine events every job writes stay out of it; a filter on a rare type must still reach
the index (SQLite only uses a partial index when the query states its condition), and a filter
on any type, routine or rare, must return exactly that type's events, on the console's audit
page and in the admin.
"""

from __future__ import annotations

import importlib
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import reverse

from audit.events import record_event
from audit.models import ROUTINE_EVENT_TYPES, AuditEvent, EventType
from inbox.models import JobState
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db

# The types an operator hunts for: each must stay in the index however rare it is.
NEEDLES = {
    EventType.REJECTED,
    EventType.FAILED,
    EventType.OUTCOME_UNKNOWN,
    EventType.FINGERPRINT_DRIFT,
    EventType.STALE_WRITE_REJECTED,
    EventType.LEASE_EXPIRED,
    EventType.RETRIED,
    EventType.RECONCILED,
    EventType.APPROVED,
    EventType.DENIED,
    EventType.APPROVAL_REVOKED,
    EventType.ADMIN_EDIT,
    EventType.OPERATOR_ACTION,
    EventType.RUN_REJECTED_WRITE,
}


def _mixed_log() -> None:
    """A log with routine events and a few rare ones among them."""
    for _ in range(3):
        make_job("save", JobState.SUCCEEDED)
    make_job("save", JobState.FAILED)
    make_job("delete", JobState.REJECTED)
    record_event(event_type=EventType.OPERATOR_ACTION, actor="op", detail={"why": "test"})
    record_event(event_type=EventType.RUN_PLANNED, actor="planner", run_id="run-1")


def test_routine_types_are_the_ones_every_successful_job_writes() -> None:
    job = make_job("save", JobState.SUCCEEDED)
    written = set(AuditEvent.objects.filter(job_id=job.job_id).values_list("event_type", flat=True))
    assert written <= set(ROUTINE_EVENT_TYPES), written - set(ROUTINE_EVENT_TYPES)
    assert {"REQUESTED", "READY", "CLAIMED", "SUCCEEDED"} <= written


def test_no_type_an_operator_hunts_for_is_routine() -> None:
    assert not NEEDLES & set(ROUTINE_EVENT_TYPES)
    assert all(t.startswith("RUN_") is False for t in ROUTINE_EVENT_TYPES)


def test_the_migration_leaves_out_exactly_the_models_routine_types() -> None:
    migration = importlib.import_module("audit.migrations.0007_type_index_without_routine_events")
    assert tuple(migration.ROUTINE) == tuple(str(t) for t in ROUTINE_EVENT_TYPES)


def test_the_built_index_is_partial() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'audit_type_idx'")
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'audit_type_idx'")
        (definition,) = cursor.fetchone()
    assert "WHERE" in definition.upper(), definition
    for event_type in ROUTINE_EVENT_TYPES:
        assert f"'{event_type}'" in definition, definition


@pytest.mark.parametrize("event_type", [t for t in EventType.values])
def test_of_type_returns_exactly_that_types_events(event_type: str) -> None:
    _mixed_log()
    every = list(AuditEvent.objects.order_by("-event_id").values_list("event_id", "event_type"))
    expected = [event_id for event_id, t in every if t == event_type]
    got = list(AuditEvent.objects.of_type(event_type).order_by("-event_id").values_list("pk"))
    assert [pk for (pk,) in got] == expected


def _plan(qs) -> str:  # type: ignore[no-untyped-def]
    """The plan of ``qs``; on PostgreSQL with sequential scans off (a test table is a page long,
    where a scan is right; can the index serve the query?)."""
    if connection.vendor != "postgresql":
        return qs.explain()
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            return qs.explain()
        finally:
            cursor.execute("RESET enable_seqscan")


@pytest.mark.parametrize("event_type", [EventType.REJECTED, EventType.OPERATOR_ACTION])
def test_a_rare_type_is_read_through_the_type_index(event_type: str) -> None:
    _mixed_log()
    page = AuditEvent.objects.of_type(event_type).order_by("-event_id")[:51]
    assert "audit_type_idx" in _plan(page)


def test_a_routine_type_is_read_by_event_id() -> None:
    _mixed_log()
    page = AuditEvent.objects.of_type(EventType.CLAIMED).order_by("-event_id")[:51]
    plan = _plan(page)
    assert "audit_type_idx" not in plan, plan


def _event_ids(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr id="event-(\d+)"', html)]


@pytest.mark.parametrize("event_type", ["REJECTED", "CLAIMED", "OPERATOR_ACTION", "FAILED"])
def test_the_audit_page_filters_by_rare_and_routine_types(client: Client, event_type) -> None:
    login(client, "look", "viewer")
    _mixed_log()
    response = client.get(
        reverse("console:event_list"), {"type": event_type}, headers=hx("audit-table")
    )
    assert response.status_code == 200
    expected = list(
        AuditEvent.objects.filter(event_type=event_type)
        .order_by("-event_id")
        .values_list("event_id", flat=True)
    )
    assert expected
    assert _event_ids(response.content.decode()) == expected


@pytest.mark.parametrize("event_type", ["REJECTED", "SUCCEEDED"])
def test_the_admin_filters_by_rare_and_routine_types(client: Client, event_type) -> None:
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    _mixed_log()
    response = client.get("/admin/audit/auditevent/", {"event_type": event_type})
    assert response.status_code == 200
    shown = [int(n) for n in re.findall(r"/admin/audit/auditevent/(\d+)/change/", response.text)]
    expected = list(
        AuditEvent.objects.filter(event_type=event_type)
        .order_by("-event_id")
        .values_list("event_id", flat=True)
    )
    assert expected and shown == expected
