"""A task whose worker dies mid-run, with real processes (SQLite file or PostgreSQL).

Idempotent: the sweep offers it again, a second worker runs it, and it has one result.
Non-idempotent: the sweep parks it OUTCOME_UNKNOWN and nothing runs it again. The tasks note
each run in a marker file (across processes) and wait for a gate file while the test acts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inbox.models import JobState
from tests.executors.support import event_counts, output_of, start_executor, wait_for

pytestmark = pytest.mark.slow

ENQUEUE = "from tests.tasks import sample; print(sample.{name}.enqueue({arg!r}).id)"
SWEEP = """
from inbox.transitions import recover_stale_claims_report
print(recover_stale_claims_report(actor="test-sweeper").total)
"""
# A sweep that believes every lease lapsed (an hour ahead): the holder is still alive.
STEAL = """
import datetime as dt
from inbox.transitions import db_now, recover_stale_claims_report
print(recover_stale_claims_report(at=db_now() + dt.timedelta(hours=1), actor="test-sweeper").total)
"""
RESULT = """
import json
from django.tasks import default_task_backend
r = default_task_backend.get_result({id!r})
value = r.return_value if r.status == "SUCCESSFUL" else None
print(json.dumps({{"status": r.status, "value": value, "workers": r.worker_ids,
                  "errors": [e.exception_class_path for e in r.errors]}}))
"""


def _gated(proc_db) -> tuple[Path, Path]:
    marker, gate = proc_db.workdir / "runs.txt", proc_db.workdir / "gate"
    proc_db.extra_env.update(TASK_MARKER=str(marker), TASK_GATE=str(gate))
    return marker, gate


def _runs(marker: Path, line: str) -> int:
    return marker.read_text(encoding="utf-8").splitlines().count(line) if marker.exists() else 0


def _state(proc_db, job_id: str) -> str:
    return proc_db.scalar("SELECT state FROM inbox_job WHERE job_id = %s", (job_id,))


def _result(proc_db, job_id: str) -> dict:
    return json.loads(proc_db.python(RESULT.format(id=job_id)).strip().splitlines()[-1])


def _kill_mid_run(proc_db, marker: Path, line: str) -> None:
    """Start an executor with a 2 s lease, kill -9 it while the task runs, then sweep once the
    lease has lapsed (the database clock decides)."""
    proc = start_executor(proc_db, "default", "--lease", "2", log_dir=proc_db.workdir)
    try:
        wait_for(lambda: _runs(marker, line) == 1, timeout=60)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    wait_for(lambda: proc_db.python(SWEEP).strip() == "1", timeout=60, every=0.5)


def test_idempotent_task_worker_killed_runs_again_and_has_one_result(proc_db):
    marker, gate = _gated(proc_db)
    job_id = proc_db.python(ENQUEUE.format(name="gated", arg="a")).strip()
    _kill_mid_run(proc_db, marker, "gated a")
    assert _state(proc_db, job_id) == JobState.READY  # offered again

    gate.touch()
    second = start_executor(proc_db, "default", "--exit-when-idle", log_dir=proc_db.workdir)
    assert second.wait(timeout=120) == 0, output_of(second)

    assert _state(proc_db, job_id) == JobState.SUCCEEDED
    assert _runs(marker, "gated a") == 2  # at least once: it ran again after the lost lease
    assert event_counts(proc_db, "LEASE_EXPIRED")[job_id] == 1
    assert event_counts(proc_db, "EXECUTED")[job_id] == 1  # one result
    assert event_counts(proc_db, "SUCCEEDED")[job_id] == 1
    result = _result(proc_db, job_id)
    assert (result["status"], result["value"]) == ("SUCCESSFUL", "a")
    assert len(result["workers"]) == 2 and len(set(result["workers"])) == 2


def test_non_idempotent_task_worker_killed_parked_unknown_never_run_twice(proc_db):
    marker, gate = _gated(proc_db)
    job_id = proc_db.python(ENQUEUE.format(name="gated_once", arg="b")).strip()
    _kill_mid_run(proc_db, marker, "gated_once b")
    assert _state(proc_db, job_id) == JobState.OUTCOME_UNKNOWN

    gate.touch()
    second = start_executor(proc_db, "default", "--exit-when-idle", log_dir=proc_db.workdir)
    assert second.wait(timeout=120) == 0, output_of(second)

    assert _state(proc_db, job_id) == JobState.OUTCOME_UNKNOWN
    assert _runs(marker, "gated_once b") == 1  # never twice
    assert event_counts(proc_db, "STARTED")[job_id] == 1
    assert event_counts(proc_db, "EXECUTED")[job_id] == 0
    assert _result(proc_db, job_id)["status"] == "RUNNING"  # not finished: an operator decides


def test_non_idempotent_task_lease_taken_from_a_live_worker_its_outcome_refused(proc_db):
    marker, gate = _gated(proc_db)
    job_id = proc_db.python(ENQUEUE.format(name="gated_once", arg="c")).strip()
    proc = start_executor(
        proc_db, "default", "--exit-when-idle", "--lease", "30", log_dir=proc_db.workdir
    )
    wait_for(lambda: _runs(marker, "gated_once c") == 1, timeout=60)
    assert proc_db.python(STEAL).strip() == "1"
    gate.touch()  # the task returns; its holder must find the claim gone
    assert proc.wait(timeout=120) == 0, output_of(proc)

    assert "LOST FENCE" in output_of(proc)
    assert _state(proc_db, job_id) == JobState.OUTCOME_UNKNOWN
    assert _runs(marker, "gated_once c") == 1
    assert event_counts(proc_db, "EXECUTED")[job_id] == 0
    assert event_counts(proc_db, "SUCCEEDED")[job_id] == 0
