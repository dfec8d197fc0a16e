"""One run through every job transition with the clock pinned, dumped as comparable data.

``tests/inbox/test_writer_golden.py`` compares what the current code writes with
``golden_transitions.json``, which this same scenario wrote on the code *before* the one
guarded writer (commit 9963659, the three write paths): every row and every audit event must
be the same. Only the public transition functions are used, so the scenario runs on both.

Regenerate (only when a change of the trail is intended and reviewed), against an empty,
migrated database: ``from tests.inbox.transition_scenario import dump; dump(PATH)`` in
``manage.py shell``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from django.db import connection

from audit.models import AuditEvent
from inbox import transitions as t
from inbox.errors import ImmutableFieldDrift, LostClaim
from inbox.jobtypes import sha256_hex
from inbox.models import Job

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
LEASE = 30


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def _save(uid: str) -> dict[str, Any]:
    content = f"# {uid}\n"
    return {
        "job_id": f"save-{uid}",
        "job_version": 1,
        "mission_id": "m-golden",
        "job_type": "SAVE_OBJECT",
        "object_id": f"note-{uid}",
        "vault_path": f"notes/{uid}.md",
        "idempotency_key": f"save:{uid}",
        "content": content,
        "provenance_hash": sha256_hex(content),
        "source_commit": "c0ffee",
    }


def _delete(uid: str) -> dict[str, Any]:
    return {
        "job_id": f"delete-{uid}",
        "job_version": 1,
        "mission_id": "m-golden",
        "job_type": "DELETE_OBJECT",
        "object_id": f"note-{uid}",
        "vault_path": f"notes/{uid}.md",
        "idempotency_key": f"delete:{uid}",
        "delete_request_id": f"r-{uid}",
        "expected_provenance_hash": sha256_hex(uid),
    }


def _noop(uid: str) -> dict[str, Any]:
    return {
        "job_id": f"noop-{uid}",
        "job_version": 1,
        "mission_id": "m-golden",
        "job_type": "NOOP",
        "object_id": f"n-{uid}",
        "vault_path": f"noop/{uid}",
        "idempotency_key": f"noop:{uid}",
    }


def _claim(job_id: str, worker: str, seconds: float) -> str:
    return t.claim_job(job_id, worker_id=worker, lease_seconds=LEASE, at=at(seconds)).claim_id


def run() -> None:
    """Drive every transition (and each recorded refusal) once, in a fixed order."""
    p = "producer"
    for doc in (
        _save("a"),
        _save("b"),
        _save("c"),
        _save("f"),
        _save("h"),
        _save("i"),
        _save("j"),
        _delete("d"),
        _delete("e"),
        _delete("g"),
        _noop("1"),
        _noop("2"),
    ):
        t.create_job(doc, requested_by=p, at=T0)

    # Claim, renew, begin (with AUTHORIZED), complete (with EXECUTED); an admin edit.
    claim = _claim("save-a", "w1", 1)
    t.renew_lease("save-a", claim_id=claim, lease_seconds=LEASE, actor="w1", at=at(2))
    t.begin_job(
        "save-a",
        claim_id=claim,
        actor="w1",
        lease_seconds=LEASE,
        authorized={"schema": "ok"},
        at=at(3),
    )
    t.complete_job(
        "save-a",
        claim_id=claim,
        actor="w1",
        result_code="SAVED",
        executed_detail={"handler": "h", "duration_ms": 1.0},
        at=at(4),
    )
    t.edit_job_fields("save-a", actor="admin", changes={"note": "checked"}, at=at(5))

    # A DELETE: approval, claim by selection, unknown outcome, a diagnosis, reconciliation.
    t.mark_ready("delete-d", actor="approver", approval_id="appr-d", at=at(6))
    claim = t.claim_next_jobs(
        scope="delete", worker_id="w2", lease_seconds=LEASE, limit=5, at=at(7)
    )[0].claim_id
    t.begin_job("delete-d", claim_id=claim, actor="w2", at=at(8))
    t.mark_outcome_unknown(
        "delete-d", claim_id=claim, actor="w2", error="timeout", executed_detail={}, at=at(9)
    )
    t.set_result_code(
        "delete-d", actor="op", result_code="CONFLICT", detail={"why": "hash"}, at=at(10)
    )
    t.reconcile_job(
        "delete-d",
        actor="op",
        result_code="CONFIRMED_DELETED",
        evidence={"present": False},
        reason="gone",
        at=at(11),
    )

    # Fail, then an operator's retry.
    claim = _claim("save-b", "w1", 12)
    t.begin_job("save-b", claim_id=claim, actor="w1", at=at(13))
    t.fail_job(
        "save-b", claim_id=claim, actor="w1", result_code="HASH_MISMATCH", error="x", at=at(14)
    )
    t.retry_job("save-b", actor="op", reason="fixed", at=at(15))

    # Release, claim again, then the lease lapses: requeued.
    claim = _claim("save-c", "w1", 16)
    t.release_job("save-c", claim_id=claim, actor="w1", reason="stopping", at=at(17))
    _claim("save-c", "w1", 18)
    # A DELETE whose lease lapses is parked; a job out of attempts fails.
    t.mark_ready("delete-e", actor="approver", approval_id="appr-e", at=at(19))
    _claim("delete-e", "w2", 20)
    t.edit_job_fields("save-f", actor="admin", changes={"max_attempts": 1}, at=at(21))
    claim_f = _claim("save-f", "w1", 22)
    t.begin_job("save-f", claim_id=claim_f, actor="w1", at=at(23))
    t.recover_stale_claims_report(at=at(200), actor="sweeper")

    # Rejections: an unapproved DELETE, and a holder's authorization re-check.
    t.reject_job("delete-g", actor="approver", reason="denied", result_code="DENIED", at=at(201))
    claim = _claim("save-h", "w1", 202)
    t.begin_job("save-h", claim_id=claim, actor="w1", at=at(203))
    t.reject_job(
        "save-h",
        actor="w1",
        reason="approval revoked",
        result_code="APPROVAL_REVOKED",
        claim_id=claim,
        at=at(204),
    )

    # A batch of two NOOPs: claimed, begun and finished together.
    batch = t.claim_next_jobs(
        scope="noop", worker_id="w3", lease_seconds=LEASE, limit=2, at=at(205)
    )
    t.begin_jobs(batch, actor="w3", lease_seconds=LEASE, authorized={}, at=at(206))
    t.finish_jobs(
        [
            t.Outcome(batch[0], "SUCCEEDED", "OK", executed_detail={"handler": "noop"}),
            t.Outcome(batch[1], "FAILED", "BOOM", error="no", executed_detail={"handler": "noop"}),
        ],
        actor="w3",
        at=at(207),
    )

    # A stale holder's late write, refused and recorded.
    old = _claim("save-i", "w1", 300)
    t.recover_stale_claims_report(at=at(400), actor="sweeper")
    _claim("save-i", "w2", 401)
    try:
        t.begin_job("save-i", claim_id=old, actor="w1", at=at(402))
    except LostClaim:
        pass
    else:  # pragma: no cover - the scenario depends on the refusal
        raise AssertionError("a stale claim began a job")

    # A broken seal: the claim is refused and the drift recorded.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE inbox_job SET object_id = 'evil' WHERE job_id = 'save-j'")
    try:
        t.claim_job("save-j", worker_id="w1", lease_seconds=LEASE, at=at(403))
    except ImmutableFieldDrift:
        pass
    else:  # pragma: no cover
        raise AssertionError("a drifted job was claimed")


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat()
    return value


def snapshot() -> dict[str, Any]:
    """Every job row and every audit event, with the random claim ids numbered in order."""
    jobs = [
        {k: _plain(v) for k, v in row.items()} for row in Job.objects.order_by("job_id").values()
    ]
    events = [
        {k: _plain(v) for k, v in row.items() if k != "event_id"}
        for row in AuditEvent.objects.order_by("event_id").values()
    ]
    text = json.dumps({"jobs": jobs, "events": events}, sort_keys=True, indent=1)
    claims = {row["claim_id"] for row in jobs if row["claim_id"]}
    for e in events:
        claims |= {v for k, v in e["detail"].items() if "claim_id" in k and v}
    order: list[str] = []
    for match in re.finditer(r"[0-9a-f]{32}", text):
        if match.group() in claims and match.group() not in order:
            order.append(match.group())
    for n, claim in enumerate(order, start=1):
        text = text.replace(claim, f"<claim-{n}>")
    return json.loads(text)


def dump(path: str) -> None:
    run()
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(snapshot(), fh, sort_keys=True, indent=1)
        fh.write("\n")
