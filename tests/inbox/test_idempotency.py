"""Idempotent creation: a replay returns the existing job and writes nothing; a
conflicting reuse of a key or job_id is refused and overwrites nothing."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from inbox.errors import IdempotencyConflict
from inbox.models import Job, JobState
from inbox.transitions import create_job
from tests.factories import PRODUCER, delete_doc, make_job, save_doc

pytestmark = pytest.mark.django_db


def _everything() -> tuple[list[dict], list[dict]]:
    return (
        list(Job.objects.order_by("job_id").values()),
        list(AuditEvent.objects.order_by("event_id").values()),
    )


@pytest.mark.parametrize("make_doc", [save_doc, delete_doc], ids=["SAVE", "DELETE"])
def test_create_job_same_document_replays_existing_job_without_events(make_doc):
    doc = make_doc()
    job, created = create_job(doc, requested_by=PRODUCER)
    assert created
    before = _everything()
    again, created_again = create_job(dict(doc), requested_by="someone-else")
    assert (again.job_id, created_again) == (job.job_id, False)
    assert _everything() == before


def test_create_job_replay_after_the_job_moved_on_returns_it_unchanged():
    job = make_job("save", JobState.SUCCEEDED)
    before = _everything()
    again, created = create_job(job.payload, requested_by=PRODUCER)
    assert (again.job_id, again.state, created) == (job.job_id, JobState.SUCCEEDED, False)
    assert _everything() == before


def test_create_job_same_key_different_content_conflicts_and_overwrites_nothing():
    doc = save_doc()
    create_job(doc, requested_by=PRODUCER)
    before = _everything()
    changed = save_doc(content="# something else\n", job_id="save-other")
    changed["idempotency_key"] = doc["idempotency_key"]
    with pytest.raises(IdempotencyConflict) as info:
        create_job(changed, requested_by=PRODUCER)
    assert info.value.key == doc["idempotency_key"]
    assert info.value.existing_job_id == doc["job_id"]
    assert "nothing was overwritten" in str(info.value)
    assert _everything() == before


def test_create_job_same_key_same_job_id_different_content_conflicts():
    doc = save_doc()
    create_job(doc, requested_by=PRODUCER)
    before = _everything()
    with pytest.raises(IdempotencyConflict):
        create_job(
            {**save_doc(content="other\n"), **{k: doc[k] for k in ("job_id", "idempotency_key")}},
            requested_by=PRODUCER,
        )
    assert _everything() == before


def test_create_job_same_job_id_different_key_conflicts():
    doc = save_doc()
    create_job(doc, requested_by=PRODUCER)
    before = _everything()
    with pytest.raises(IdempotencyConflict) as info:
        create_job({**doc, "idempotency_key": "another-key"}, requested_by=PRODUCER)
    assert info.value.existing_job_id == doc["job_id"]
    assert _everything() == before


def test_create_job_key_of_one_job_and_id_of_another_conflicts():
    first, second = save_doc(), save_doc()
    create_job(first, requested_by=PRODUCER)
    create_job(second, requested_by=PRODUCER)
    before = _everything()
    with pytest.raises(IdempotencyConflict):
        create_job({**first, "idempotency_key": second["idempotency_key"]}, requested_by=PRODUCER)
    assert _everything() == before
