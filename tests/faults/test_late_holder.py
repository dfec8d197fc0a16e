"""The late holder's word, with real processes: a delete executor frozen (SIGSTOP) while it
holds a DELETE it has just carried out, its lease lapsing meanwhile; the sweep parks the job
as OUTCOME_UNKNOWN; the executor resumes and reports. Its report is refused (the job stays
OUTCOME_UNKNOWN) and recorded as STALE_WRITE_REJECTED with its worker, claim and outcome, and
the executor keeps running.

PostgreSQL only: the executor is frozen in its outcome's transaction, which the server ends
after ``idle_in_transaction_session_timeout`` so the sweep can reach the row. On SQLite a
process frozen there holds the write lock until it dies (the sweep cannot run at all); the
writer-level tests cover the same refusal on both databases.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.executors.support import put_object, seed, sha, states, wait_for
from tests.factories import delete_doc
from tests.faults.support import freeze_at, output, resume, row_locked

pytestmark = pytest.mark.slow

LEASE = 3
IDLE_MS = 8_000
EXECUTOR = ("run_executor", "--lease", str(LEASE), "--batch", "4", "--scope", "delete")


def _late_reports(proc_db, job_id: str) -> list[tuple[str, dict]]:
    rows = proc_db.query(
        "SELECT actor, detail FROM audit_auditevent WHERE job_id = %s "
        "AND event_type = 'STALE_WRITE_REJECTED' ORDER BY event_id",
        [job_id],
    )
    out = [
        (actor, detail if isinstance(detail, dict) else json.loads(detail))
        for actor, detail in rows
    ]
    return [(actor, d) for actor, d in out if "reported" in d]


@pytest.mark.postgresql
def test_frozen_delete_holder_reports_after_the_sweep_its_word_is_recorded_not_applied(proc_db):
    doc = delete_doc(uid="late")
    put_object(proc_db, doc["vault_path"], "# Note late\n")
    doc["expected_provenance_hash"] = sha("# Note late\n")
    seed(proc_db, [doc])
    job_id = doc["job_id"]
    env = {"DB_IDLE_IN_TRANSACTION_TIMEOUT_MS": str(IDLE_MS)}
    proc = freeze_at(proc_db, "finish:DELETE_OBJECT", EXECUTOR, env=env)
    claim_id, worker_id, attempt = proc_db.query(
        "SELECT claim_id, worker_id, attempt_count FROM inbox_job WHERE job_id = %s", [job_id]
    )[0]
    # The server ends the frozen transaction; the lease has lapsed long before.
    wait_for(lambda: not row_locked(proc_db, "inbox_job", "job_id", job_id), timeout=60)
    sweep = proc_db.manage("recover_stale").stdout
    assert "parked 1 DELETE_OBJECT" in sweep
    assert states(proc_db)[job_id] == "OUTCOME_UNKNOWN"

    resume(proc)
    wait_for(lambda: _late_reports(proc_db, job_id), timeout=60)
    time.sleep(1)
    assert proc.poll() is None, output(proc)[-3000:]  # the executor keeps running
    [(actor, detail)] = _late_reports(proc_db, job_id)
    assert actor == worker_id
    assert detail["claim_id"] == detail["current_claim_id"] == claim_id
    assert detail["attempt"] == attempt
    assert detail["reported"]["to"] == "SUCCEEDED"
    assert detail["reported"]["result_code"] == "DELETED"
    assert detail["reported"]["executed"]["vault_path"] == doc["vault_path"]
    assert states(proc_db)[job_id] == "OUTCOME_UNKNOWN"  # refused: the state did not change
    executed = proc_db.scalar(
        "SELECT COUNT(*) FROM audit_auditevent WHERE job_id = %s AND event_type = 'EXECUTED'",
        [job_id],
    )
    assert executed == 0  # a refused report writes nothing but its record

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, output(proc)[-3000:]
