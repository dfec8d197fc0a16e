"""The run commands as real processes (``proc_db``: a fresh database and vault per test)."""

from __future__ import annotations

import json
import signal
import time

import pytest

from runs.consolidators import seed_duplicate_vault

pytestmark = pytest.mark.slow


def _wait_for(db, sql: str, proc, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not db.scalar(sql):
        assert proc.poll() is None, f"worker exited before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.05)


def test_run_consolidator_once_on_seeded_vault_requests_deletes_then_none_more(proc_db):
    seed_duplicate_vault(proc_db.workdir / "vault", originals=2, copies=2)
    first = proc_db.manage("run_consolidator", "--store", "vault", "--once", "--worker-id", "c1")
    assert "planned run" in first.stdout
    assert first.stdout.count("(requested)") == 4
    assert proc_db.scalar("SELECT COUNT(*) FROM inbox_job WHERE job_type = 'DELETE_OBJECT'") == 4
    assert proc_db.scalar("SELECT COUNT(*) FROM inbox_job WHERE state = 'CREATED'") == 4

    second = proc_db.manage("run_consolidator", "--store", "vault", "--once", "--worker-id", "c1")
    assert second.stdout.count("(already requested)") == 4
    assert proc_db.scalar("SELECT COUNT(*) FROM inbox_job") == 4
    statuses = proc_db.query("SELECT status FROM runs_run ORDER BY started_at")
    assert statuses == [("complete",), ("complete",)]
    # The store has its own column; scope is an executor's.
    heartbeat = proc_db.query("SELECT kind, store, scope, status, jobs_done FROM inbox_worker")
    assert heartbeat == [("consolidator", "vault", "", "stopped", 6)]

    listed = json.loads(proc_db.manage("runs", "--json").stdout)
    assert [r["effective_status"] for r in listed] == ["complete", "complete"]
    assert listed[0]["groups"]["done"] == 2


def test_run_consolidator_unimportable_consolidator_exits_nonzero(proc_db):
    proc_db.extra_env["RUNS_CONSOLIDATOR"] = "runs.consolidators.Nope"
    proc = proc_db.manage("run_consolidator", "--store", "vault", "--once", check=False)
    assert proc.returncode != 0
    assert "configuration error" in proc.stderr
    assert "RUNS_CONSOLIDATOR" in proc.stderr
    assert proc_db.scalar("SELECT COUNT(*) FROM runs_run") == 0


def test_run_consolidator_missing_vault_exits_nonzero(proc_db):
    proc_db.extra_env["VAULT_ROOT"] = str(proc_db.workdir / "no-such-vault")
    proc = proc_db.manage("run_consolidator", "--store", "vault", "--once", check=False)
    assert proc.returncode != 0
    assert "VAULT_ROOT" in proc.stderr
    assert proc_db.scalar("SELECT COUNT(*) FROM runs_run") == 0


def test_run_consolidator_sigterm_mid_run_closes_its_run_abandoned(proc_db):
    proc_db.extra_env.update(
        RUNS_CONSOLIDATOR="tests.runs.support.EnvConsolidator",
        RUNS_TEST_GROUPS="30x2",
        RUNS_TEST_DECIDE_SLEEP="1",
        LOG_LEVEL="WARNING",
    )
    proc = proc_db.popen("run_consolidator", "--store", "s", "--worker-id", "w-term")
    _wait_for(
        proc_db,
        "SELECT COUNT(*) FROM audit_auditevent WHERE event_type = 'RUN_GROUP_SERVED'",
        proc,
        "served group",
    )
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "received SIGTERM" in out
    rows = proc_db.query("SELECT run_id, status, closed_by FROM runs_run")
    assert [(status, by) for _id, status, by in rows] == [("abandoned", "w-term")]
    last = proc_db.query(
        "SELECT event_type, actor FROM audit_auditevent WHERE run_id = %s ORDER BY event_id DESC",
        [rows[0][0]],
    )[0]
    assert last == ("RUN_ABANDONED", "w-term")
    # Not all groups were worked: it stopped early rather than finishing the run.
    assert proc_db.scalar("SELECT COUNT(*) FROM runs_group WHERE status = 'pending'") > 0


def _make_operator(db, username: str, *, perm: bool) -> None:
    grant = (
        "u.user_permissions.add(Permission.objects.get(codename='close_run'))" if perm else "pass"
    )
    db.python(
        "from django.contrib.auth.models import User, Permission\n"
        f"u = User.objects.create_user({username!r}, password='x')\n"
        f"{grant}\n"
    )


def _active_run(db) -> str:
    db.python(
        "from runs.transitions import plan_run\n"
        "from tests.runs.support import StaticConsolidator\n"
        "plan_run(store='s', owner='stuck', lease_seconds=600, consolidator=StaticConsolidator())\n"
    )
    return db.scalar("SELECT run_id FROM runs_run WHERE status = 'active'")


def test_close_run_command_records_operator_action(proc_db):
    _make_operator(proc_db, "alice", perm=True)
    run_id = _active_run(proc_db)
    proc = proc_db.manage("close_run", run_id, "--reason", "worker host died", "--as", "alice")
    assert "closed abandoned by alice" in proc.stdout
    assert proc_db.query("SELECT status, closed_by FROM runs_run") == [("abandoned", "alice")]
    event = proc_db.query(
        "SELECT event_type, actor FROM audit_auditevent WHERE run_id = %s ORDER BY event_id DESC",
        [run_id],
    )[0]
    assert event == ("RUN_ABANDONED", "alice")
    again = proc_db.manage("close_run", run_id, "--reason", "again", "--as", "alice", check=False)
    assert again.returncode != 0
    assert "already abandoned" in again.stderr


def test_close_run_command_without_permission_refused(proc_db):
    _make_operator(proc_db, "bob", perm=False)
    run_id = _active_run(proc_db)
    proc = proc_db.manage("close_run", run_id, "--reason", "x", "--as", "bob", check=False)
    assert proc.returncode != 0
    assert "runs.close_run" in proc.stderr
    assert proc_db.query("SELECT status FROM runs_run") == [("active",)]


def test_runs_command_lists_effective_status_and_lease(proc_db):
    run_id = _active_run(proc_db)
    listed = json.loads(proc_db.manage("runs", "--store", "s", "--json").stdout)
    assert [(r["run_id"], r["effective_status"]) for r in listed] == [(run_id, "active")]
    assert 0 < listed[0]["seconds_left"] <= 600
    text = proc_db.manage("runs").stdout
    assert run_id in text


def test_two_active_rows_found_at_read_time_refused_loudly(proc_db):
    """Only a bug (here: the constraint dropped by hand) can make two; nobody picks one."""
    run_id = _active_run(proc_db)
    proc_db.execute("DROP INDEX run_one_active_per_store")
    proc_db.execute(
        "INSERT INTO runs_run (run_id, store, worker_id, host, pid, started_at, expires_at, "
        "renewed_at, lease_seconds, status, closed_by, close_reason, replaced_run_id, created_at) "
        "SELECT 'second', store, 'other', host, pid, started_at, expires_at, renewed_at, "
        "lease_seconds, status, closed_by, close_reason, '', created_at FROM runs_run "
        "WHERE run_id = %s",
        [run_id],
    )
    before = (
        proc_db.query("SELECT * FROM runs_run ORDER BY run_id"),
        proc_db.scalar("SELECT COUNT(*) FROM audit_auditevent"),
    )
    out = proc_db.python(
        "from runs import transitions as t\n"
        "from runs.errors import MultipleActiveRuns\n"
        "from runs.selectors import store_overview\n"
        "from tests.runs.support import StaticConsolidator\n"
        "c = StaticConsolidator()\n"
        "for call in (\n"
        "    lambda: t.plan_run(store='s', owner='x', lease_seconds=60, consolidator=c),\n"
        "    lambda: t.next_group(store='s', owner='stuck', consolidator=c),\n"
        "    lambda: t.current_run('s'),\n"
        "):\n"
        "    try:\n"
        "        call()\n"
        "        print('accepted')\n"
        "    except MultipleActiveRuns as exc:\n"
        "        print('refused', sorted(exc.run_ids))\n"
        "print('overview', repr(store_overview()[0].error[:2]), store_overview()[0].current)\n"
    )
    lines = out.strip().splitlines()
    assert lines[:3] == [f"refused {sorted(['second', run_id])}"] * 3
    assert lines[3] == "overview '2 ' None"
    after = (
        proc_db.query("SELECT * FROM runs_run ORDER BY run_id"),
        proc_db.scalar("SELECT COUNT(*) FROM audit_auditevent"),
    )
    assert after == before
