"""Runs under real concurrency: threads in a separate process against a file SQLite database or
a real PostgreSQL database (``proc_db``), checked from this process with the plain driver."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent / "scripts"
CLOSE_EVENTS = {
    "expired": "RUN_EXPIRED",
    "abandoned": "RUN_ABANDONED",
    "taken_over": "RUN_TAKEN_OVER",
    "complete": "RUN_COMPLETE",
}

pytestmark = pytest.mark.slow


def _dt(value) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    parsed = dt.datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


class ActiveSampler:
    """Counts status='active' rows per store from its own connection, as often as it can."""

    SQL = "SELECT store, COUNT(*) FROM runs_run WHERE status = 'active' GROUP BY store"

    def __init__(self, db) -> None:
        self.db = db
        self.samples = 0
        self.max_active = 0
        if db.vendor == "postgresql":
            import psycopg

            self.conn = psycopg.connect(db.url, autocommit=True)
        else:
            self.conn = sqlite3.connect(db.path, timeout=30, isolation_level=None)

    def sample(self) -> None:
        rows = self.conn.execute(self.SQL).fetchall()
        self.samples += 1
        self.max_active = max([self.max_active, *(n for _store, n in rows)])

    def close(self) -> None:
        self.conn.close()


def _start(db, script: str, *args: object):
    """Start a script with its output in files (a full pipe would block it while we sample)."""
    out = (db.workdir / f"{script}.out").open("w+")
    err = (db.workdir / f"{script}.err").open("w+")
    proc = db.script(SCRIPTS / script, *map(str, args), stdout=out, stderr=err)
    return proc, out, err


def _finish(proc, out, err, sampler: ActiveSampler | None = None) -> str:
    """Wait for the script (sampling meanwhile); return its stdout, fail on a non-zero exit."""
    while proc.poll() is None:
        if sampler is not None:
            sampler.sample()
            time.sleep(0.002)
        else:
            time.sleep(0.05)
    if sampler is not None:
        sampler.sample()
    out.seek(0)
    err.seek(0)
    text, errors = out.read(), err.read()
    out.close()
    err.close()
    assert proc.returncode == 0, f"script failed ({proc.returncode}):\n{errors[-4000:]}"
    return text


def test_plan_run_32_threads_50_rounds_one_active_row_and_every_displaced_run_closed(proc_db):
    threads, rounds, lease, pause_every, owners = 32, 50, 2, 10, 8
    proc_db.extra_env["LOG_LEVEL"] = "WARNING"
    sampler = ActiveSampler(proc_db)
    started = _start(proc_db, "plan_race.py", "race", threads, rounds, lease, pause_every, owners)
    try:
        out = _finish(*started, sampler)
    finally:
        sampler.close()
    result = json.loads(out.strip().splitlines()[-1])
    assert result["errors"] == []
    assert result["planned"] == threads * rounds
    assert sampler.max_active == 1
    assert sampler.samples > 10

    runs = {
        row[0]: row
        for row in proc_db.query(
            "SELECT run_id, worker_id, status, started_at, expires_at, renewed_at, lease_seconds, "
            "replaced_run_id, closed_by FROM runs_run WHERE store = 'race'"
        )
    }
    assert len(runs) == threads * rounds
    active = [r for r in runs.values() if r[2] == "active"]
    assert len(active) == 1
    # Lease length: exactly the lease on every row (none was refreshed: plans only).
    for _id, _w, _s, started, expires, renewed, lease_s, _rep, _by in runs.values():
        assert _dt(expires) - _dt(started) == dt.timedelta(seconds=lease_s)
        assert _dt(renewed) == _dt(started)

    # The successors form one chain: every run but the last was displaced exactly once.
    successor = {}
    for run in runs.values():
        if run[7]:
            assert run[7] not in successor, f"run {run[7]} displaced twice"
            successor[run[7]] = run
    assert set(successor) == set(runs) - {active[0][0]}
    assert sum(1 for r in runs.values() if not r[7]) == 1

    # Each displaced run: the status the facts call for, and exactly one matching event.
    closing = {
        (run_id, event_type): n
        for run_id, event_type, n in proc_db.query(
            "SELECT run_id, event_type, COUNT(*) FROM audit_auditevent "
            "WHERE run_id IS NOT NULL GROUP BY run_id, event_type"
        )
    }
    seen = Counter()
    for run_id, nxt in successor.items():
        run = runs[run_id]
        if _dt(run[4]) < _dt(nxt[3]):
            expected = "expired"
        elif run[1] == nxt[1]:
            expected = "abandoned"
        else:
            expected = "taken_over"
        assert run[2] == expected, (run, nxt)
        assert run[8] == nxt[1]  # closed_by the displacing owner
        assert closing.get((run_id, CLOSE_EVENTS[expected])) == 1
        assert _dt(nxt[3]) >= _dt(run[3])
        seen[expected] += 1
    for run_id in runs:
        assert closing.get((run_id, "RUN_PLANNED")) == 1
        assert sum(n for (rid, et), n in closing.items() if rid == run_id) <= 2
    # The forced pauses make at least one expiry; owners repeat, so abandons occur too.
    assert seen["expired"] >= rounds // pause_every - 1
    assert seen["taken_over"] > 0
    assert seen["abandoned"] > 0


def test_close_race_exactly_one_complete_event_per_run(proc_db):
    threads, rounds = 12, 15
    out = _finish(*_start(proc_db, "close_race.py", threads, rounds))
    lines = [json.loads(line) for line in out.strip().splitlines()]
    assert len(lines) == rounds
    for line in lines:
        assert len(line["closed"]) == 1, line
        events = proc_db.scalar(
            "SELECT COUNT(*) FROM audit_auditevent WHERE run_id = %s AND event_type = %s",
            [line["run_id"], "RUN_COMPLETE"],
        )
        assert events == 1
        status = proc_db.scalar("SELECT status FROM runs_run WHERE run_id = %s", [line["run_id"]])
        assert status == "complete"


def test_two_consolidator_processes_displaced_one_stops_and_writes_nothing_after(proc_db):
    proc_db.extra_env.update(
        RUNS_CONSOLIDATOR="tests.runs.support.EnvConsolidator",
        RUNS_TEST_GROUPS="20x2",
        # A is slow (20 s of work) so B takes over mid-run; B, started later, is fast.
        RUNS_TEST_DECIDE_SLEEP="1",
    )
    proc_db.extra_env["LOG_LEVEL"] = "WARNING"
    first = proc_db.popen("run_consolidator", "--store", "s", "--worker-id", "A", "--once")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until A is mid-run (a member disposed)
        if proc_db.scalar("SELECT COUNT(*) FROM runs_member WHERE disposition IS NOT NULL"):
            break
        assert first.poll() is None, first.communicate()
        time.sleep(0.05)
    proc_db.extra_env["RUNS_TEST_DECIDE_SLEEP"] = "0"
    second = proc_db.popen("run_consolidator", "--store", "s", "--worker-id", "B", "--once")
    out_a, err_a = first.communicate(timeout=300)
    out_b, err_b = second.communicate(timeout=300)
    assert first.returncode == 0, err_a
    assert second.returncode == 0, err_b

    runs = proc_db.query(
        "SELECT run_id, worker_id, status, closed_at, expires_at FROM runs_run "
        "WHERE store = 's' ORDER BY started_at"
    )
    displaced = [r for r in runs if r[2] == "taken_over"]
    assert displaced, runs
    assert runs[-1][2] == "complete"
    loser = displaced[-1][1]
    assert "taken over" in (out_a if loser == "A" else out_b)
    for run_id, _owner, _status, closed_at, expires_at in displaced:
        # Nothing of a displaced run changed after its close: no disposition, no lease.
        late = proc_db.scalar(
            "SELECT COUNT(*) FROM runs_member m JOIN runs_group g ON m.group_id = g.id "
            "WHERE g.run_id = %s AND m.disposed_at > %s",
            [run_id, closed_at],
        )
        assert late == 0
        close_event = proc_db.scalar(
            "SELECT MIN(event_id) FROM audit_auditevent WHERE run_id = %s "
            "AND event_type = 'RUN_TAKEN_OVER'",
            [run_id],
        )
        after = proc_db.query(
            "SELECT event_type FROM audit_auditevent WHERE run_id = %s AND event_id > %s",
            [run_id, close_event],
        )
        assert {e for (e,) in after} <= {"RUN_REJECTED_WRITE"}
        last_lease = proc_db.query(
            "SELECT detail FROM audit_auditevent WHERE run_id = %s AND event_id < %s AND "
            "event_type IN ('RUN_GROUP_SERVED', 'RUN_MEMBER_DISPOSED') ORDER BY event_id DESC",
            [run_id, close_event],
        )
        if last_lease:
            detail = last_lease[0][0]
            detail = json.loads(detail) if isinstance(detail, str) else detail
            assert _dt(detail["expires_at"]) == _dt(expires_at)
