"""A probe that cannot get evidence is shown, never a 500: the reconcile page, its
three buttons, "reconcile all unambiguous" and the bulk preview each report "evidence
unavailable" for that one job and go on with the others.

Three ways a probe fails: a path no filesystem can hold (a job stored before component lengths
were checked), a FIFO at the path, and a directory the process may not read. The test process
may be root, which reads any directory, so EACCES is injected at ``os.open`` for that one
directory; the real-process tests (tests/executors/test_hostile_processes.py) use a real one.
"""

from __future__ import annotations

import errno
import os

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from console.htmx import dom_id
from inbox import vault
from inbox.jobtypes import IMMUTABLE_COLUMNS, compute_fingerprint
from inbox.models import Job, JobState
from tests.console.pagekit import action_form, hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db

LEGACY_PATH = "legacy/" + "n" * 300 + ".md"


@pytest.fixture
def vault_root(settings, tmp_path):
    settings.VAULT_ROOT = tmp_path / "vault"
    (tmp_path / "vault").mkdir()
    return tmp_path / "vault"


@pytest.fixture
def operator(client: Client):
    return login(client, "ops", "operator")


def _legacy(job: Job) -> Job:
    """Give ``job`` a path validation now refuses, resealed (stored before the check existed)."""
    job.vault_path = LEGACY_PATH
    columns = {name: getattr(job, name) for name in IMMUTABLE_COLUMNS}
    fingerprint = compute_fingerprint(columns=columns, payload=job.payload)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE inbox_job SET vault_path = %s, fingerprint = %s WHERE job_id = %s",
            [LEGACY_PATH, fingerprint, job.job_id],
        )
    return Job.objects.get(job_id=job.job_id)


@pytest.fixture
def cases(vault_root, monkeypatch) -> dict[str, Job]:
    """One absent (decidable) and three unprobeable OUTCOME_UNKNOWN deletes."""
    jobs = {
        "absent": make_job("delete", JobState.OUTCOME_UNKNOWN),
        "legacy": _legacy(make_job("delete", JobState.OUTCOME_UNKNOWN)),
        "fifo": make_job("delete", JobState.OUTCOME_UNKNOWN, vault_path="odd/fifo.md"),
        "denied": make_job("delete", JobState.OUTCOME_UNKNOWN, vault_path="private/x.md"),
    }
    (vault_root / "odd").mkdir()
    os.mkfifo(vault_root / "odd" / "fifo.md")
    (vault_root / "private").mkdir()
    real_open = os.open

    def deny_private(path, flags, *args, **kwargs):
        if path == "private":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(vault.os, "open", deny_private)
    return jobs


UNPROBEABLE = {
    "legacy": "at most 255",
    "fifo": "not a regular file",
    "denied": "Permission denied",
}


def _snapshot() -> tuple[list, int]:
    jobs = list(Job.objects.order_by("job_id").values_list("job_id", "state", "result_code"))
    return jobs, AuditEvent.objects.count()


def test_reconcile_page_shows_evidence_unavailable_per_job(client, operator, cases) -> None:
    response = client.get(reverse("console:reconcile"))
    assert response.status_code == 200
    body = response.content.decode()
    for name, why in UNPROBEABLE.items():
        case_id = dom_id("case", cases[name].job_id)
        case = body.split(f'id="{case_id}"', 1)[1].split("</article>", 1)[0]
        assert "evidence unavailable" in case, name
        assert why in case, name
    # The decidable one is still offered.
    assert cases["absent"].job_id in body.split('id="reconcile-auto"', 1)[1]


@pytest.mark.parametrize("name", list(UNPROBEABLE))
@pytest.mark.parametrize(
    "button",
    ["reconcile_confirm_deleted", "reconcile_not_applied", "reconcile_annotate"],
)
def test_reconcile_button_without_evidence_is_refused_with_409(
    client, operator, cases, name, button
) -> None:
    job = cases[name]
    before = _snapshot()
    response = client.post(
        reverse(f"console:{button}", args=[job.job_id]),
        action_form("checked the vault", fresh_delete="1"),
        headers=hx("unknown-case"),
    )
    assert response.status_code == 409, response.content[:500]
    body = response.content.decode()
    assert "evidence unavailable" in body
    assert UNPROBEABLE[name] in body
    jobs, events = _snapshot()
    assert jobs == before[0]
    # Only the refusal's own bookkeeping (the request id); no audit event, no state change.
    assert events == before[1]


def test_reconcile_all_unambiguous_skips_jobs_without_evidence(client, operator, cases) -> None:
    response = client.post(
        reverse("console:reconcile_auto"), action_form("sweep"), headers=hx("reconcile-queue")
    )
    assert response.status_code == 200
    assert "Reconciled 1 as CONFIRMED_DELETED" in response.content.decode()
    absent = Job.objects.get(job_id=cases["absent"].job_id)
    assert (absent.state, absent.result_code) == (JobState.RECONCILED, "CONFIRMED_DELETED")
    for name in UNPROBEABLE:
        assert Job.objects.get(job_id=cases[name].job_id).state == JobState.OUTCOME_UNKNOWN


def test_bulk_preview_lists_jobs_without_evidence_as_skipped(client, operator, cases) -> None:
    ids = [job.job_id for job in cases.values()]
    response = client.get(
        reverse("console:bulk_preview"), {"mode": "selected", "job_ids": ids}, headers=hx()
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count("evidence unavailable") >= len(UNPROBEABLE)
    for why in UNPROBEABLE.values():
        assert why in body


def test_bulk_reconcile_acts_on_the_absent_one_only(client, operator, cases) -> None:
    ids = [job.job_id for job in cases.values()]
    form = action_form("vault checked", mode="selected", job_ids=ids)
    response = client.post(reverse("console:bulk_reconcile"), form, headers=hx("bulk-result"))
    assert response.status_code == 200
    assert "Reconciled 1 job(s)" in response.content.decode()
    for name in UNPROBEABLE:
        assert Job.objects.get(job_id=cases[name].job_id).state == JobState.OUTCOME_UNKNOWN
