"""The bulk pool loader writes what ``create_job`` writes (so pool tests test real jobs)."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from inbox.models import Job
from inbox.transitions import create_job
from tests.concurrency.pool import load_pool
from tests.factories import noop_doc

pytestmark = pytest.mark.django_db

VARYING = {"job_id", "object_id", "vault_path", "idempotency_key", "payload", "fingerprint"}
VARYING |= {"created_at", "updated_at", "requested_by"}


def _columns(job_id: str) -> dict:
    row = Job.objects.filter(job_id=job_id).values().get()
    return {k: v for k, v in row.items() if k not in VARYING}


def _events(job_id: str) -> list[tuple]:
    return [
        (e.event_type, e.result_code, sorted(e.detail)) for e in AuditEvent.objects.for_job(job_id)
    ]


def test_load_pool_rows_and_events_match_create_job():
    [pooled] = load_pool(1, prefix="cmp")
    real, _ = create_job(noop_doc(), requested_by="pool-loader")
    assert _columns(pooled) == _columns(real.job_id)
    assert _events(pooled) == _events(real.job_id)
    stored = Job.objects.get(job_id=pooled)
    assert stored.payload == noop_doc(uid="cmp-000000")
    assert create_job(noop_doc(uid="cmp-000000"), requested_by="pool-loader")[0].job_id == pooled
