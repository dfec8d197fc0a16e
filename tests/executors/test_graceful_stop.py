"""SIGTERM mid-batch: the jobs in hand finish, the rest of the batch is handed back, exit 0.

One by one (a DELETE's way, or ``--one-by-one``) the job in hand is the one job begun. With
batched steps (idempotent types) the whole claimed batch is begun together, so all of it is in
hand and finishes; nothing is left held either way.
"""

from __future__ import annotations

import signal

import pytest

from inbox.models import JobState
from tests.executors.support import event_counts, output_of, seed, start_executor, wait_for
from tests.factories import noop_doc

pytestmark = pytest.mark.slow


@pytest.fixture
def slow_db(proc_db):
    proc_db.extra_env.update(
        DJANGO_SETTINGS_MODULE="tests.executors.slow_settings",
        SLOW_HANDLER_MARKER=str(proc_db.workdir / "started.txt"),
        SLOW_HANDLER_GATE=str(proc_db.workdir / "gate"),
    )
    return proc_db


def test_sigterm_mid_batch_leaves_nothing_held_and_exits_zero(slow_db):
    seed(slow_db, [noop_doc(job_type="SLOW_NOOP") for _ in range(30)])
    marker = slow_db.workdir / "started.txt"
    proc = start_executor(
        slow_db,
        "slow",
        "--batch",
        "10",
        "--one-by-one",
        "--worker-id",
        "graceful-1",
        log_dir=slow_db.workdir,
    )
    wait_for(lambda: marker.exists() and marker.read_text().strip(), timeout=60)
    proc.send_signal(signal.SIGTERM)
    # Open the gate only once the executor has taken the signal in, so the job in hand
    # finishes after the stop was requested.
    wait_for(lambda: "SIGTERM" in output_of(proc), timeout=60)
    (slow_db.workdir / "gate").touch()
    assert proc.wait(timeout=60) == 0, output_of(proc)

    held = slow_db.scalar(
        "SELECT COUNT(*) FROM inbox_job WHERE state IN ('CLAIMED', 'EXECUTING')"
        " OR worker_id = 'graceful-1' AND state NOT IN ('SUCCEEDED')"
    )
    assert held == 0
    counts = dict(slow_db.query("SELECT state, COUNT(*) FROM inbox_job GROUP BY state"))
    started = len(marker.read_text().split())
    # Every job the handler began finished; the claimed rest of the batch went back to READY.
    assert started == 1
    assert counts[JobState.SUCCEEDED] == 1
    assert counts[JobState.READY] == 29
    assert sum(event_counts(slow_db, "RELEASED").values()) == 9
    assert slow_db.scalar("SELECT status FROM inbox_worker WHERE worker_id = 'graceful-1'") == (
        "stopped"
    )
    assert "SIGTERM" in output_of(proc)


def test_sigterm_mid_batched_steps_finishes_the_begun_batch(slow_db):
    seed(slow_db, [noop_doc(job_type="SLOW_NOOP") for _ in range(30)])
    marker = slow_db.workdir / "started.txt"
    proc = start_executor(
        slow_db, "slow", "--batch", "10", "--worker-id", "graceful-2", log_dir=slow_db.workdir
    )
    wait_for(lambda: marker.exists() and marker.read_text().strip(), timeout=60)
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM" in output_of(proc), timeout=60)
    (slow_db.workdir / "gate").touch()
    assert proc.wait(timeout=60) == 0, output_of(proc)

    held = slow_db.scalar("SELECT COUNT(*) FROM inbox_job WHERE state IN ('CLAIMED', 'EXECUTING')")
    assert held == 0
    counts = dict(slow_db.query("SELECT state, COUNT(*) FROM inbox_job GROUP BY state"))
    # The ten begun together all ran and were recorded; nothing else was claimed.
    assert len(marker.read_text().split()) == 10
    assert counts == {JobState.SUCCEEDED: 10, JobState.READY: 20}
    assert sum(event_counts(slow_db, "STARTED").values()) == 10
    assert sum(event_counts(slow_db, "EXECUTED").values()) == 10
    assert sum(event_counts(slow_db, "RELEASED").values()) == 0
    assert slow_db.scalar("SELECT status FROM inbox_worker WHERE worker_id = 'graceful-2'") == (
        "stopped"
    )
