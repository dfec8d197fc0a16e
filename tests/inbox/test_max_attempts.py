"""``max_attempts >= 1`` on every way in: the admin form, a service edit, raw SQL,
a job type from the settings and the ``INBOX_MAX_ATTEMPTS`` setting.

A job with ``max_attempts = 0`` would fail with MAX_ATTEMPTS the first time its lease lapsed
without ever being retried; admin used to accept it.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core import checks
from django.db import IntegrityError, connection, transaction
from django.urls import reverse

from audit.models import AuditEvent
from inbox import transitions
from inbox.errors import ConfigurationError
from inbox.jobtypes import registry
from inbox.models import Job, JobState
from tests.factories import make_job
from tests.support.startup import manage_check

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    user = get_user_model().objects.create_superuser("root", "root@example.test", "pw")
    client.force_login(user)
    return client


def _row(job_id: str) -> dict:
    return Job.objects.filter(job_id=job_id).values().get()


@pytest.mark.parametrize("value", ["0", "-1"])
def test_admin_change_with_max_attempts_below_one_is_a_form_error(admin_client, value) -> None:
    job = make_job("save", state=JobState.FAILED)
    before, events = _row(job.job_id), AuditEvent.objects.count()
    response = admin_client.post(
        reverse("admin:inbox_job_change", args=[job.job_id]),
        {"note": "zero please", "max_attempts": value, "_save": "Save"},
    )
    assert response.status_code == 200  # the form again, with its error
    errors = response.context["adminform"].form.errors
    assert "max_attempts" in errors
    assert "greater than or equal to" in str(errors["max_attempts"])
    assert _row(job.job_id) == before
    assert AuditEvent.objects.count() == events


def test_admin_change_with_max_attempts_one_is_accepted(admin_client) -> None:
    job = make_job("save", state=JobState.FAILED)
    response = admin_client.post(
        reverse("admin:inbox_job_change", args=[job.job_id]),
        {"note": "", "max_attempts": "1", "_save": "Save"},
    )
    assert response.status_code == 302
    assert _row(job.job_id)["max_attempts"] == 1


def test_service_edit_to_zero_is_refused_by_the_database(db) -> None:
    job = make_job("save", state=JobState.FAILED)
    before, events = _row(job.job_id), AuditEvent.objects.count()
    with pytest.raises(IntegrityError), transaction.atomic():
        transitions.edit_job_fields(job.job_id, actor="root", changes={"max_attempts": 0})
    assert _row(job.job_id) == before
    assert AuditEvent.objects.count() == events


def test_raw_update_to_zero_is_refused_by_the_database(db) -> None:
    job = make_job("save", state=JobState.READY)
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE inbox_job SET max_attempts = 0 WHERE job_id = %s", [job.job_id])
    assert _row(job.job_id)["max_attempts"] >= 1


@pytest.mark.parametrize("value", [0, -3, True, "3", 2.5])
def test_job_type_with_max_attempts_not_a_whole_number_from_one_is_a_configuration_error(
    settings, value
) -> None:
    settings.INBOX_JOB_TYPES = {
        "ZERO": {
            "scope": "zero",
            "idempotent": True,
            "handler": "inbox.handlers.noop",
            "max_attempts": value,
        }
    }
    registry.cache_clear()
    try:
        with pytest.raises(ConfigurationError, match="max_attempts"):
            registry()
        found = checks.run_checks(tags=["inbox"])
        assert [m.id for m in found if m.level >= checks.ERROR] == ["inbox.E001"]
    finally:
        registry.cache_clear()


def test_job_type_with_max_attempts_three_is_used(settings) -> None:
    settings.INBOX_JOB_TYPES = {
        "THRICE": {
            "scope": "noop",
            "idempotent": True,
            "handler": "inbox.handlers.noop",
            "max_attempts": 3,
        }
    }
    registry.cache_clear()
    try:
        assert registry()["THRICE"].max_attempts == 3
    finally:
        registry.cache_clear()


@pytest.mark.parametrize("value", ["0", "-1"])
def test_setting_inbox_max_attempts_below_one_refuses_to_start(tmp_path, value) -> None:
    proc = manage_check(tmp_path, INBOX_MAX_ATTEMPTS=value)
    assert proc.returncode != 0
    assert "INBOX_MAX_ATTEMPTS" in proc.stderr
    assert "at least 1" in proc.stderr
