"""Shared test factories: job documents with correct hashes, and jobs in any state.

``make_job`` reaches every state only through ``inbox.transitions`` (never by assigning
``state``), so a factory-made job has the same columns and audit trail as a real one.

    save_doc(**overrides)    a valid SAVE_OBJECT document (provenance_hash follows content)
    delete_doc(**overrides)  a valid DELETE_OBJECT document
    noop_doc(**overrides)    a valid NOOP document
    job_doc(kind, **overrides)
    make_job(kind="save", state=JobState.READY, **overrides) -> Job
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from inbox import transitions
from inbox.jobtypes import sha256_hex
from inbox.models import Job, JobState

PRODUCER = "producer-test"
WORKER = "worker-test"
OPERATOR = "operator-test"
LEASE_SECONDS = 60
KINDS = ("save", "delete", "noop")


def _uid() -> str:
    return uuid.uuid4().hex[:12]


def save_doc(**overrides: Any) -> dict[str, Any]:
    """A valid SAVE_OBJECT document; ``provenance_hash`` is sha256(content) unless overridden."""
    uid = overrides.pop("uid", None) or _uid()
    doc: dict[str, Any] = {
        "job_id": f"save-{uid}",
        "job_version": 1,
        "mission_id": "m-test",
        "job_type": "SAVE_OBJECT",
        "object_id": f"note-{uid}",
        "vault_path": f"notes/note-{uid}.md",
        "idempotency_key": f"save:note-{uid}:1",
        "content": f"# Note {uid}\n",
        "source_commit": "a1b2c3",
    }
    doc.update(overrides)
    if "provenance_hash" not in overrides and isinstance(doc.get("content"), str):
        doc["provenance_hash"] = sha256_hex(doc["content"])
    return doc


def delete_doc(**overrides: Any) -> dict[str, Any]:
    """A valid DELETE_OBJECT document (it waits CREATED for an approval)."""
    uid = overrides.pop("uid", None) or _uid()
    doc: dict[str, Any] = {
        "job_id": f"delete-{uid}",
        "job_version": 1,
        "mission_id": "m-test",
        "job_type": "DELETE_OBJECT",
        "object_id": f"note-{uid}",
        "vault_path": f"notes/note-{uid}.md",
        "idempotency_key": f"delete:note-{uid}:r1",
        "delete_request_id": f"r-{uid}",
        "expected_provenance_hash": sha256_hex(f"# Note {uid}\n"),
    }
    doc.update(overrides)
    return doc


def noop_doc(**overrides: Any) -> dict[str, Any]:
    """A valid NOOP document."""
    uid = overrides.pop("uid", None) or _uid()
    doc: dict[str, Any] = {
        "job_id": f"noop-{uid}",
        "job_version": 1,
        "mission_id": "m-test",
        "job_type": "NOOP",
        "object_id": f"obj-{uid}",
        "vault_path": f"noop/obj-{uid}",
        "idempotency_key": f"noop:obj-{uid}",
    }
    doc.update(overrides)
    return doc


_DOCS = {"save": save_doc, "delete": delete_doc, "noop": noop_doc}


def job_doc(kind: str = "save", **overrides: Any) -> dict[str, Any]:
    try:
        return _DOCS[kind](**overrides)
    except KeyError:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}") from None


# How make_job reaches each state: the states it passes through after READY.
_PATHS: dict[str, tuple[str, ...]] = {
    JobState.READY: (),
    JobState.CLAIMED: ("claim",),
    JobState.EXECUTING: ("claim", "begin"),
    JobState.SUCCEEDED: ("claim", "begin", "complete"),
    JobState.FAILED: ("claim", "begin", "fail"),
    JobState.OUTCOME_UNKNOWN: ("claim", "begin", "unknown"),
    JobState.RECONCILED: ("claim", "begin", "unknown", "reconcile"),
}


def make_job(
    kind: str = "save",
    state: str = JobState.READY,
    *,
    requested_by: str = PRODUCER,
    worker_id: str = WORKER,
    lease_seconds: int = LEASE_SECONDS,
    approval_id: str | None = None,
    at: dt.datetime | None = None,
    **overrides: Any,
) -> Job:
    """Create a job and drive it to ``state`` through the transition functions only.

    ``overrides`` go into the job document. CREATED is reachable only for kinds that need an
    approval ("delete"); REJECTED is CREATED → REJECTED for a delete and a holder's
    EXECUTING → REJECTED otherwise. A claimed job's ``claim_id`` is on the returned row.
    """
    state = JobState(state)
    doc = job_doc(kind, **overrides)
    job, _created = transitions.create_job(doc, requested_by=requested_by, at=at)
    job_id = job.job_id
    if job.state == JobState.CREATED:
        if state == JobState.CREATED:
            return Job.objects.get(job_id=job_id)
        if state == JobState.REJECTED:
            transitions.reject_job(job_id, actor=OPERATOR, reason="test: denied", at=at)
            return Job.objects.get(job_id=job_id)
        transitions.mark_ready(
            job_id, actor=OPERATOR, approval_id=approval_id or f"appr-{_uid()}", at=at
        )
    elif state == JobState.CREATED:
        raise ValueError(f"a {kind} job becomes READY on creation; CREATED needs kind='delete'")

    steps = ("claim", "begin", "reject") if state == JobState.REJECTED else _PATHS[state]
    claim_id = ""
    for step in steps:
        if step == "claim":
            claim_id = transitions.claim_job(
                job_id, worker_id=worker_id, lease_seconds=lease_seconds, at=at
            ).claim_id
        elif step == "begin":
            transitions.begin_job(job_id, claim_id=claim_id, actor=worker_id, at=at)
        elif step == "complete":
            transitions.complete_job(job_id, claim_id=claim_id, actor=worker_id, at=at)
        elif step == "fail":
            transitions.fail_job(
                job_id, claim_id=claim_id, actor=worker_id, result_code="TEST_FAILED", at=at
            )
        elif step == "unknown":
            transitions.mark_outcome_unknown(job_id, claim_id=claim_id, actor=worker_id, at=at)
        elif step == "reconcile":
            transitions.reconcile_job(
                job_id, actor=OPERATOR, result_code="CONFIRMED_DELETED", at=at
            )
        elif step == "reject":
            transitions.reject_job(
                job_id,
                actor=worker_id,
                reason="test: authorization failed",
                claim_id=claim_id,
                at=at,
            )
    return Job.objects.get(job_id=job_id)
