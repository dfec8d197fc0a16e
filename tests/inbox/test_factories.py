"""The shared factories reach every state through transitions and make valid documents."""

import pytest

from audit.models import AuditEvent
from inbox.jobtypes import sha256_hex, validate_job_document
from inbox.models import Job, JobState
from tests.factories import KINDS, job_doc, make_job, save_doc

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("kind", KINDS)
def test_job_doc_default_is_valid(kind):
    validate_job_document(job_doc(kind))


def test_save_doc_content_override_recomputes_hash():
    doc = save_doc(content="other")
    assert doc["provenance_hash"] == sha256_hex("other")


@pytest.mark.parametrize("state", list(JobState))
def test_make_job_reaches_every_state(state):
    kind = "delete" if state == JobState.CREATED else "save"
    job = make_job(kind, state)
    assert Job.objects.get(job_id=job.job_id).state == state
    assert AuditEvent.objects.filter(job_id=job.job_id).exists()


def test_make_job_save_created_is_refused():
    with pytest.raises(ValueError, match="CREATED"):
        make_job("save", JobState.CREATED)
