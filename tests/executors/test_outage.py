"""Workers ride out a database or pooler that is away, and exit only on what no wait mends.

Real processes: an executor started while its PgBouncer is down, and one running while the
pooler restarts, both claim jobs once it is back; a stop signal ends a wait for the database at
once; an unmigrated schema, a missing database or a missing role ends every worker command
with a message that says what to do, without a retry loop.
"""

from __future__ import annotations

import signal
import subprocess
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.executors.support import output_of, seed, start_executor, wait_for
from tests.factories import noop_doc
from tests.support.procdb import ProcDB

# How long each outage lasts: long enough for several retries at the first waits.
DOWN_SECONDS = 3.0


def _succeeded(db: ProcDB) -> int:
    return db.scalar("SELECT count(*) FROM inbox_job WHERE state = 'SUCCEEDED'")


def _retries(proc: subprocess.Popen, doing: str) -> int:
    return output_of(proc).count(f"database unavailable while {doing}")


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=30)


@pytest.mark.postgresql
def test_an_executor_started_while_the_pooler_is_down_claims_jobs_once_it_is_back(
    proc_db: ProcDB, own_bouncer
) -> None:
    pooled = own_bouncer.url_for(proc_db)
    seed(proc_db, [noop_doc() for _ in range(5)])
    own_bouncer.stop()
    proc = start_executor(pooled, "noop", "--poll", "0.2", log_dir=proc_db.workdir)
    try:
        wait_for(lambda: _retries(proc, "starting") >= 2, timeout=30)
        time.sleep(max(0.0, DOWN_SECONDS - 1.5))
        assert proc.poll() is None, output_of(proc)
        down_retries = _retries(proc, "starting")
        own_bouncer.start()
        back = time.monotonic()
        wait_for(lambda: _succeeded(proc_db) == 5, timeout=60)
        claimed_after = time.monotonic() - back
        text = output_of(proc)
        assert "database is back after" in text
        print(
            f"pooler down ~{DOWN_SECONDS}s at start: {down_retries} retries; "
            f"5/5 jobs done {claimed_after:.1f}s after it came back"
        )
    finally:
        code = _stop(proc)
    assert code == 0, output_of(proc)


@pytest.mark.postgresql
def test_a_running_executor_rides_out_a_pooler_restart(proc_db: ProcDB, own_bouncer) -> None:
    pooled = own_bouncer.url_for(proc_db)
    proc = start_executor(pooled, "noop", "--poll", "0.2", log_dir=proc_db.workdir)
    try:
        seed(proc_db, [noop_doc() for _ in range(5)])
        wait_for(lambda: _succeeded(proc_db) == 5, timeout=60)
        own_bouncer.stop()
        seed(proc_db, [noop_doc() for _ in range(5)])  # arrive while the pooler is away
        time.sleep(DOWN_SECONDS)
        assert proc.poll() is None, output_of(proc)
        down_retries = _retries(proc, "working")
        assert down_retries >= 1, output_of(proc)
        own_bouncer.start()
        back = time.monotonic()
        wait_for(lambda: _succeeded(proc_db) == 10, timeout=60)
        print(
            f"pooler restarted under a running executor, {DOWN_SECONDS}s down: "
            f"{down_retries} retries; 5 more jobs done {time.monotonic() - back:.1f}s after"
        )
        assert "database is back after" in output_of(proc)
    finally:
        code = _stop(proc)
    assert code == 0, output_of(proc)
    assert proc_db.scalar("SELECT count(*) FROM inbox_job WHERE state <> 'SUCCEEDED'") == 0


@pytest.mark.postgresql
def test_a_stop_signal_ends_the_wait_for_the_database_at_once(proc_db: ProcDB, own_bouncer) -> None:
    pooled = own_bouncer.url_for(proc_db)
    own_bouncer.stop()
    proc = start_executor(pooled, "noop", "--poll", "0.2", log_dir=proc_db.workdir)
    wait_for(lambda: _retries(proc, "starting") >= 3, timeout=30)  # waits of 1-2 s by now
    sent = time.monotonic()
    code = _stop(proc)
    assert code == 0, output_of(proc)
    assert time.monotonic() - sent < 2.0
    assert proc_db.scalar("SELECT count(*) FROM inbox_worker") == 0  # it never registered


COMMANDS = {
    "executor": ("run_executor", "--scope", "noop"),
    "consolidator": ("run_consolidator", "--store", "vault"),
    "sweeper": ("recover_stale", "--loop", "--interval", "1"),
    "reconciler": ("reconcile", "--loop", "--interval", "1"),
}


def _latest_inbox_migration(db: ProcDB) -> str:
    return db.scalar("SELECT max(name) FROM django_migrations WHERE app = 'inbox'")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_migration_not_applied_ends_every_worker_command_with_what_to_do(
    proc_db: ProcDB, command: str
) -> None:
    latest = _latest_inbox_migration(proc_db)
    proc_db.execute("DELETE FROM django_migrations WHERE app = 'inbox' AND name = %s", [latest])
    started = time.monotonic()
    done = proc_db.manage(*COMMANDS[command], check=False, timeout=60)
    assert done.returncode != 0
    assert "manage.py migrate" in done.stderr
    assert f"inbox.{latest}" in done.stderr
    assert "database unavailable" not in done.stderr  # no retry loop first
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 30
    assert proc_db.scalar("SELECT count(*) FROM inbox_worker") == 0


def test_an_empty_database_ends_a_worker_with_what_to_do(proc_db: ProcDB) -> None:
    if proc_db.vendor == "sqlite":
        empty = proc_db.workdir / "empty.sqlite3"
        empty.touch()
        url = f"sqlite:///{empty}"
    else:
        url = _fresh_pg_database(proc_db, "console_empty_outage")
    db = ProcDB(url, proc_db.vendor, proc_db.workdir)
    try:
        done = db.manage(*COMMANDS["executor"], check=False, timeout=60)
    finally:
        if proc_db.vendor == "postgresql":
            _drop_pg_database(proc_db, "console_empty_outage")
    assert done.returncode != 0
    assert "manage.py migrate" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


@pytest.mark.postgresql
@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("database", "does not exist"),
        ("role", "does not exist"),
    ],
)
def test_a_missing_database_or_role_ends_a_worker_with_what_to_do(
    proc_db: ProcDB, change: str, says: str
) -> None:
    parts = urlsplit(proc_db.url)
    if change == "database":
        parts = parts._replace(path="/console_no_such_database")
    else:
        parts = parts._replace(netloc=f"no_such_role@{parts.hostname}:{parts.port or 5432}")
    db = ProcDB(urlunsplit(parts), "postgresql", proc_db.workdir)
    done = db.manage(*COMMANDS["executor"], check=False, timeout=60)
    assert done.returncode != 0
    assert says in done.stderr and "DATABASE_URL" in done.stderr, done.stderr[-2000:]
    assert "database unavailable" not in done.stderr
    assert "Traceback" not in done.stderr


def _admin(proc_db: ProcDB):
    import psycopg

    parts = urlsplit(proc_db.url)
    return psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True)


def _fresh_pg_database(proc_db: ProcDB, name: str) -> str:
    with _admin(proc_db) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(proc_db.url)._replace(path=f"/{name}"))


def _drop_pg_database(proc_db: ProcDB, name: str) -> None:
    with _admin(proc_db) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgresql
@pytest.mark.parametrize("command", ["consolidator", "sweeper", "reconciler"])
def test_every_other_worker_started_while_the_pooler_is_down_registers_once_it_is_back(
    proc_db: ProcDB, own_bouncer, command: str
) -> None:
    pooled = own_bouncer.url_for(proc_db)
    own_bouncer.stop()
    out = (proc_db.workdir / f"{command}.out").open("w")
    proc = pooled.popen(*COMMANDS[command], stdout=out, stderr=subprocess.STDOUT)
    out.close()
    log = proc_db.workdir / f"{command}.out"
    try:
        wait_for(lambda: log.read_text().count("database unavailable while starting") >= 2)
        assert proc.poll() is None, log.read_text()
        own_bouncer.start()
        wait_for(lambda: proc_db.scalar("SELECT count(*) FROM inbox_worker") == 1, timeout=60)
        assert proc.poll() is None, log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, log.read_text()
    assert "database is back after" in log.read_text()
