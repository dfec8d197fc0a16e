"""Chaos: kill -9 executors at random moments while they work; nothing runs twice or is lost.

Figures (kills, jobs, duplicates) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import random
import signal
import time

import pytest

from inbox.models import JobState
from tests.executors.support import (
    event_counts,
    oplog_counts,
    output_of,
    put_object,
    seed,
    start_executor,
    states,
    vault_dir,
    wait_for,
)
from tests.factories import delete_doc, save_doc

N_SAVE = 600
N_DELETE = 450
KILLS = 22
LEASE = "2"

pytestmark = pytest.mark.slow


def _started(proc) -> bool:
    return "executor " in proc.out_path.read_text()


def test_kill_executors_repeatedly_no_delete_runs_twice_and_every_save_lands(proc_db):
    # Killed holders leave claims that lapse and are retried; give SAVE room for every retry.
    proc_db.extra_env["INBOX_MAX_ATTEMPTS"] = "1000"
    saves = [save_doc(uid=f"c{i:05d}", content=f"chaos {i}\n" * (1 + i % 5)) for i in range(N_SAVE)]
    deletes = [delete_doc(uid=f"k{i:04d}") for i in range(N_DELETE)]
    for i, doc in enumerate(deletes):
        put_object(proc_db, doc["vault_path"], f"# Note k{i:04d}\n")
    seed(proc_db, saves + deletes)

    rng = random.Random(20261130)
    args = ("--lease", LEASE, "--poll", "0.2", "--batch", "5", "--sweep-every", "10")
    logs = proc_db.workdir
    running = {
        scope: start_executor(proc_db, scope, *args, log_dir=logs) for scope in ("save", "delete")
    }
    kills = 0
    for n in range(KILLS):
        scope = ("save", "delete")[n % 2]
        victim = running[scope]
        wait_for(lambda victim=victim: _started(victim), timeout=60)
        time.sleep(rng.uniform(0.05, 0.6))
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        kills += 1
        if n % 6 == 5:
            proc_db.manage("recover_stale")
        running[scope] = start_executor(proc_db, scope, *args, log_dir=logs)
    for proc in running.values():
        wait_for(lambda proc=proc: _started(proc), timeout=60)  # its handlers are installed
        proc.send_signal(signal.SIGTERM)
    assert [p.wait(timeout=120) for p in running.values()] == [0, 0], [
        output_of(p)[-3000:] for p in running.values()
    ]

    # Let every lapsed claim lapse, recover it, and drain what is left.
    time.sleep(float(LEASE) + 0.5)
    print(proc_db.manage("recover_stale").stdout.strip())
    final = [
        start_executor(proc_db, scope, "--exit-when-idle", "--lease", LEASE, log_dir=logs)
        for scope in ("save", "delete")
    ]
    assert [p.wait(timeout=600) for p in final] == [0, 0], [output_of(p)[-3000:] for p in final]

    state = states(proc_db)
    for doc in saves:
        assert state[doc["job_id"]] == JobState.SUCCEEDED
        assert (vault_dir(proc_db) / doc["vault_path"]).read_bytes() == doc["content"].encode()
    executed = event_counts(proc_db, "EXECUTED")
    attempts = oplog_counts(proc_db)
    duplicates = [
        d["job_id"] for d in deletes if executed[d["job_id"]] > 1 or attempts[d["job_id"]] > 1
    ]
    delete_states = {d["job_id"]: state[d["job_id"]] for d in deletes}
    assert duplicates == []
    assert set(delete_states.values()) <= {
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.OUTCOME_UNKNOWN,
    }
    for doc in deletes:
        if delete_states[doc["job_id"]] == JobState.SUCCEEDED:
            assert not (vault_dir(proc_db) / doc["vault_path"]).exists()

    unknown = [d for d in deletes if delete_states[d["job_id"]] == JobState.OUTCOME_UNKNOWN]
    print(proc_db.manage("reconcile", "--auto", "--quiet").stdout.strip())
    after = states(proc_db)
    codes = dict(proc_db.query("SELECT job_id, result_code FROM inbox_job"))
    for doc in unknown:
        if (vault_dir(proc_db) / doc["vault_path"]).exists():
            assert after[doc["job_id"]] == JobState.OUTCOME_UNKNOWN
            assert codes[doc["job_id"]] == "RECONCILE_NOT_APPLIED"
        else:
            assert (after[doc["job_id"]], codes[doc["job_id"]]) == (
                JobState.RECONCILED,
                "CONFIRMED_DELETED",
            )
    lapsed = proc_db.scalar(
        "SELECT COUNT(*) FROM audit_auditevent WHERE event_type = 'LEASE_EXPIRED'"
    )
    print(
        f"chaos: {kills} kills, {lapsed} lapsed leases recovered, {N_SAVE + N_DELETE} jobs, "
        f"duplicates found {len(duplicates)}, "
        f"{len(unknown)} DELETE parked OUTCOME_UNKNOWN, "
        f"{sum(1 for s in delete_states.values() if s == JobState.SUCCEEDED)} DELETE succeeded, "
        f"{sum(attempts.values())} vault delete attempts"
    )
