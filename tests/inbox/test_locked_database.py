"""A command started while another process holds the database lock says so.

Before: on SQLite every command failed its system checks after the busy timeout with
``fields.E180 SQLite does not support JSONFields`` — Django's JSON probe runs in an IMMEDIATE
transaction, which needs the write lock. Now the probe is answered without a lock
(``inbox.dbcheck.declare_sqlite_features``), the checks pass, and a command that needs the lock
reports "the database is busy" and exits 1 with nothing changed; a worker waits the lock out.

A real process holds the lock (``tests/support/lockhold.py``): SQLite's write lock, or on
PostgreSQL an EXCLUSIVE table lock with the command's ``lock_timeout`` set through ``PGOPTIONS``.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.executors.support import wait_for
from tests.support.lockhold import hold_write_lock

# Seconds a command waits for the lock before giving up (SQLite busy timeout / lock_timeout).
WAIT = 1

pytestmark = pytest.mark.slow


@pytest.fixture
def short_wait(proc_db):
    proc_db.extra_env.update(SQLITE_BUSY_TIMEOUT=str(WAIT), PGOPTIONS=f"-c lock_timeout={WAIT}s")
    return proc_db


def test_check_while_the_database_is_locked_passes(short_wait) -> None:
    with hold_write_lock(short_wait.url, tables=("inbox_scopepause", "audit_auditevent")):
        proc = short_wait.manage("check", "--database", "default", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "E180" not in proc.stderr + proc.stdout


def test_command_while_the_database_is_locked_says_so_and_changes_nothing(short_wait) -> None:
    with hold_write_lock(short_wait.url, tables=("inbox_scopepause", "audit_auditevent")):
        proc = short_wait.manage("pause", "save", "--reason", "disk check", check=False)
    assert proc.returncode == 1
    assert "E180" not in proc.stderr
    assert "JSONField" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "CommandError: the database is busy" in proc.stderr
    assert "nothing was changed" in proc.stderr
    assert short_wait.scalar("SELECT COUNT(*) FROM inbox_scopepause") == 0
    assert short_wait.scalar("SELECT COUNT(*) FROM audit_auditevent") == 0
    # The lock gone, the same command acts.
    again = short_wait.manage("pause", "save", "--reason", "disk check", check=False)
    assert again.returncode == 0, again.stderr
    assert short_wait.scalar("SELECT COUNT(*) FROM inbox_scopepause WHERE paused") == 1


def test_worker_started_while_the_database_is_locked_waits_and_starts_once_it_is_free(
    short_wait,
) -> None:
    """A worker's start-up checks (inbox.checks, with the database) pass under the lock; its
    heartbeat registration then cannot write. A lock is mended by waiting: the worker says why
    it waits, and starts once the holder lets go."""
    log = short_wait.workdir / "sweeper.out"
    with hold_write_lock(short_wait.url, tables=("inbox_worker", "inbox_job", "audit_auditevent")):
        out = log.open("w")
        proc = short_wait.popen(
            "recover_stale", "--loop", "--interval", "0.2", stdout=out, stderr=subprocess.STDOUT
        )
        out.close()
        wait_for(lambda: "database unavailable while starting" in log.read_text(), timeout=60)
        assert proc.poll() is None, log.read_text()
        assert short_wait.scalar("SELECT COUNT(*) FROM inbox_worker") == 0
    try:
        wait_for(lambda: short_wait.scalar("SELECT COUNT(*) FROM inbox_worker") == 1, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    text = log.read_text()
    assert code == 0, text
    assert "E180" not in text
    assert "locked" in text or "lock timeout" in text
    assert "database is back after" in text
