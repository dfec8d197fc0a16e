"""A pooler and ``DATABASE_POOLER`` that disagree, caught by real processes before any work.

Through the suite's real PgBouncer (transaction pooling, the ``pgbouncer`` fixture) without
``DATABASE_POOLER``, ``manage.py check --database default`` and a starting worker report
``inbox.E013`` and a command explains its failure instead of a traceback; directly connected
with the setting on, both warn (``inbox.W014``) and carry on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.pgbouncer import through_pooler
from tests.support.procdb import ProcDB

pytestmark = pytest.mark.postgresql

FIX = "set DATABASE_POOLER=pgbouncer"


@pytest.fixture
def unset_bouncer_db(proc_db: ProcDB, pgbouncer: int) -> ProcDB:
    """``proc_db`` through PgBouncer, as ``bouncer_db`` builds it, but with no DATABASE_POOLER."""
    return through_pooler(proc_db, pgbouncer, setting="")


@pytest.fixture
def needless_db(proc_db: ProcDB) -> ProcDB:
    """``proc_db`` reached directly, with DATABASE_POOLER=pgbouncer all the same."""
    return ProcDB(
        proc_db.url, "postgresql", Path(proc_db.workdir), {"DATABASE_POOLER": "pgbouncer"}
    )


def _noop_doc(job_id: str) -> str:
    return json.dumps(
        {
            "job_id": job_id,
            "job_version": 1,
            "mission_id": "m-pooler",
            "job_type": "NOOP",
            "object_id": job_id,
            "vault_path": f"noop/{job_id}",
            "idempotency_key": f"noop:{job_id}",
        }
    )


def test_check_through_pgbouncer_without_the_setting_reports_e013(unset_bouncer_db):
    proc = unset_bouncer_db.manage("check", "--database", "default", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "inbox.E013" in proc.stderr and FIX in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_worker_through_pgbouncer_without_the_setting_refuses_to_start(
    unset_bouncer_db, bouncer_db
):
    bouncer_db.manage("enqueue", "-", input=_noop_doc("pooler-1") + "\n")
    proc = unset_bouncer_db.manage(
        "run_executor", "--scope", "noop", "--exit-when-idle", check=False
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said
    assert "inbox.E013" in said and FIX in said, said
    assert "Traceback" not in said
    assert bouncer_db.scalar("SELECT state FROM inbox_job WHERE job_id = %s", ["pooler-1"]) == (
        "READY"
    )


def test_command_through_pgbouncer_without_the_setting_explains_its_failure(unset_bouncer_db):
    proc = unset_bouncer_db.manage("inbox_stats", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert FIX in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_check_through_pgbouncer_with_the_setting_reports_nothing(bouncer_db):
    proc = bouncer_db.manage("check", "--database", "default")
    assert "no issues" in proc.stdout, proc.stdout + proc.stderr


def test_check_direct_with_the_setting_warns_w014(needless_db):
    proc = needless_db.manage("check", "--database", "default")
    assert "inbox.W014" in proc.stderr and "unset DATABASE_POOLER" in proc.stderr, proc.stderr


def test_worker_direct_with_the_setting_warns_w014_and_runs(needless_db):
    needless_db.manage("enqueue", "-", input=_noop_doc("pooler-2") + "\n")
    proc = needless_db.manage("run_executor", "--scope", "noop", "--exit-when-idle")
    assert "inbox.W014" in proc.stderr, proc.stderr
    state = needless_db.scalar("SELECT state FROM inbox_job WHERE job_id = %s", ["pooler-2"])
    assert state == "SUCCEEDED"
