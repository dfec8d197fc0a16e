"""The database goes away under a running executor; it carries on and no job is lost.

PostgreSQL: the test terminates the executor's backends (``pg_terminate_backend``) mid-loop.
SQLite has no server connection to drop; there the test takes the write lock for longer than
the executor's (shortened) busy timeout, so its statements fail with "database is locked" — the
same OperationalError path.
"""

from __future__ import annotations

import sqlite3
import time

import pytest

from inbox.models import JobState
from tests.executors.support import output_of, seed, start_executor, wait_for
from tests.factories import noop_doc

pytestmark = pytest.mark.slow

N_JOBS = 150
OUTAGES = 5


def _terminate_backends(db) -> int:
    import psycopg

    with psycopg.connect(db.url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)


def _hold_write_lock(db, seconds: float) -> int:
    conn = sqlite3.connect(db.path, timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        time.sleep(seconds)
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return 1


def test_drop_database_connection_mid_loop_executor_carries_on(proc_db):
    marker = proc_db.workdir / "started.txt"
    proc_db.extra_env.update(
        DJANGO_SETTINGS_MODULE="tests.executors.slow_settings",
        SLOW_HANDLER_SECONDS="0.04",
        SLOW_HANDLER_MARKER=str(marker),
        TEST_SQLITE_BUSY_MS="200",
    )
    seed(proc_db, [noop_doc(job_type="SLOW_NOOP") for _ in range(N_JOBS)])
    proc = start_executor(
        proc_db,
        "slow",
        "--exit-when-idle",
        "--poll",
        "0.2",
        "--lease",
        "30",
        log_dir=proc_db.workdir,
    )
    outages = 0
    for n in range(OUTAGES):
        # Strike while the executor is mid-batch: after it has begun more jobs.
        wait_for(
            lambda n=n: len(marker.read_text().split()) > 10 * (n + 1) if marker.exists() else False
        )
        if proc_db.vendor == "postgresql":
            outages += _terminate_backends(proc_db)
        else:
            outages += _hold_write_lock(proc_db, 1.5)
    assert proc.wait(timeout=300) == 0, output_of(proc)[-3000:]

    counts = dict(proc_db.query("SELECT state, COUNT(*) FROM inbox_job GROUP BY state"))
    assert counts == {JobState.SUCCEEDED: N_JOBS}
    assert outages >= OUTAGES
    assert "database error" in output_of(proc)
