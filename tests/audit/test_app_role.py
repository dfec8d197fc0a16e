"""The console runs on PostgreSQL as a role that does not own its tables, so it cannot disable
the triggers that keep the audit log append-only.

The grants are docs/postgres-app-role.sql, the file the README shows. Through that role the
console's work goes on (enqueue, executor, a console action, a pause) while every way of
rewriting the audit log is refused — UPDATE, DELETE, TRUNCATE, an upsert (PostgreSQL's
REPLACE), disabling or dropping the triggers, dropping the table — and so is writing the
migration records.

The role only exists on PostgreSQL. Under the SQLite suite these tests use the local PostgreSQL
server the CI starts anyway (``CONSOLE_TEST_PG_URL``, default the loopback's ``postgres``
database) with a database of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import delete_doc, save_doc
from tests.support import approle
from tests.support.procdb import MANAGE, ROOT, ProcDB, is_postgres, suite_database_url

ROLE = "console_app_test"
PG_ADMIN_URL = os.environ.get("CONSOLE_TEST_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")

pytestmark = pytest.mark.slow


def _admin_url() -> str:
    suite = suite_database_url()
    if is_postgres(suite):
        from tests.support.procdb import _with_dbname

        return _with_dbname(suite, "postgres")
    return PG_ADMIN_URL


@pytest.fixture
def role_db(tmp_path: Path) -> Iterator[ProcDB]:
    """A freshly migrated PostgreSQL database, the grants applied, processes connecting as the
    role and the test's own reads as the owner."""
    import psycopg

    from tests.support.procdb import _with_dbname

    admin = _admin_url()
    try:
        psycopg.connect(admin, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL not reachable at {admin}: {exc}")
    name = f"console_role_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    owner_url = _with_dbname(admin, name)
    try:
        env = {**os.environ, "DATABASE_URL": owner_url, "CONSOLE_VAR_DIR": str(tmp_path / "var")}
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        subprocess.run(
            [sys.executable, MANAGE, "migrate", "-v0"],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
            timeout=600,
        )
        approle.ensure_role(admin, ROLE)
        approle.apply_grants(owner_url, ROLE)
        (tmp_path / "vault").mkdir()
        yield ProcDB(owner_url, "postgresql", tmp_path, app_url=approle.as_role(owner_url, ROLE))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _as_role(db: ProcDB):
    import psycopg

    return psycopg.connect(db.app_url, autocommit=True)


def test_processes_connect_as_the_role_that_owns_nothing(role_db: ProcDB) -> None:
    out = role_db.python(
        "from django.db import connection\n"
        "with connection.cursor() as c:\n"
        "    c.execute('SELECT current_user')\n"
        "    print(c.fetchone()[0])\n"
        "    c.execute(\"SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public' "
        'AND tableowner = current_user")\n'
        "    print(c.fetchone()[0])"
    )
    assert out.split() == [ROLE, "0"]


def test_a_worker_refuses_to_start_when_a_grant_is_missing(role_db: ProcDB) -> None:
    """A table a migration added after the grants (inbox_finishedcount came with 0010) would
    fail every finish as "permission denied"; the worker says so before it claims anything."""
    import psycopg

    with psycopg.connect(role_db.url, autocommit=True) as conn:
        conn.execute(f"REVOKE INSERT, UPDATE ON inbox_finishedcount FROM {ROLE}")
    role_db.manage("enqueue", "-", input=json.dumps(save_doc()) + "\n")
    proc = role_db.manage("run_executor", "--scope", "save", "--exit-when-idle", check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said
    assert "inbox.E011" in said and "docs/postgres-app-role.sql" in said, said
    assert f"role {ROLE} may not INSERT on inbox_finishedcount" in said, said
    assert f"role {ROLE} may not UPDATE on inbox_finishedcount" in said, said
    assert role_db.query("SELECT state FROM inbox_job") == [("READY",)]  # nothing claimed
    approle.apply_grants(role_db.url, ROLE)
    role_db.manage("run_executor", "--scope", "save", "--exit-when-idle")
    assert role_db.query("SELECT state FROM inbox_job") == [("SUCCEEDED",)]


def test_console_work_goes_on_as_the_role(role_db: ProcDB) -> None:
    save, delete = save_doc(), delete_doc()
    target = role_db.workdir / "vault" / delete["vault_path"]
    target.parent.mkdir(parents=True)
    target.write_text(f"# Note {delete['object_id'].removeprefix('note-')}\n")
    lines = json.dumps(save) + "\n" + json.dumps(delete) + "\n"
    assert role_db.manage("enqueue", "-", input=lines).returncode == 0
    role_db.python(
        "from django.contrib.auth.models import Permission, User\n"
        "u = User.objects.create_user('approver-r')\n"
        "u.user_permissions.add(Permission.objects.get(codename='approve_delete'))\n"
        "op = User.objects.create_user('op-r')\n"
        "op.user_permissions.add(Permission.objects.get(codename='retry_job'))"
    )
    role_db.manage("approve", delete["job_id"], "--as", "approver-r", "--reason", "dup")
    for scope in ("save", "delete"):
        role_db.manage("run_executor", "--scope", scope, "--exit-when-idle")
    states = dict(role_db.query("SELECT job_id, state FROM inbox_job"))
    assert states == {save["job_id"]: "SUCCEEDED", delete["job_id"]: "SUCCEEDED"}
    role_db.manage("recover_stale")
    role_db.manage("reconcile", "--auto")
    role_db.manage("pause", "save", "--reason", "role check")
    role_db.manage("resume", "save")
    # A console action through the web stack (session, request id, transition, audit event).
    out = role_db.python(
        "import uuid\n"
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "from django.urls import reverse\n"
        "from inbox import transitions\n"
        "from tests.factories import make_job\n"
        "job = make_job('save', 'FAILED')\n"
        "c = Client()\n"
        "c.force_login(User.objects.get(username='op-r'))\n"
        "r = c.post(reverse('console:job_retry', args=[job.job_id]),\n"
        "           {'request_id': uuid.uuid4().hex, 'reason': 'as the role'},\n"
        "           HTTP_HOST='localhost')\n"
        "print(r.status_code)"
    )
    assert out.strip().splitlines()[-1] == "200"
    retried = role_db.scalar("SELECT COUNT(*) FROM audit_auditevent WHERE event_type = 'RETRIED'")
    assert retried == 1


REFUSED = {
    "UPDATE": "UPDATE audit_auditevent SET actor = 'mallory'",
    "DELETE": "DELETE FROM audit_auditevent",
    "TRUNCATE": "TRUNCATE audit_auditevent",
    "REPLACE (upsert)": (
        "INSERT INTO audit_auditevent (event_id, event_type, actor, result_code, detail, "
        "created_at) SELECT event_id, 'REQUESTED', 'mallory', '', '{}', now() "
        "FROM audit_auditevent ON CONFLICT (event_id) DO UPDATE SET actor = excluded.actor"
    ),
    "DISABLE TRIGGER": "ALTER TABLE audit_auditevent DISABLE TRIGGER ALL",
    "DROP TRIGGER": "DROP TRIGGER audit_no_change ON audit_auditevent",
    "DROP TABLE": "DROP TABLE audit_auditevent",
    "DROP FUNCTION": "DROP FUNCTION audit_refuse_change() CASCADE",
    "fake migration record": (
        "INSERT INTO django_migrations (app, name, applied) VALUES ('audit', 'x', now())"
    ),
    "forget a migration": "DELETE FROM django_migrations WHERE app = 'audit'",
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_role_cannot_rewrite_the_audit_log(role_db: ProcDB, name: str) -> None:
    import psycopg

    role_db.python(
        "from audit.events import record_event\n"
        "record_event(event_type='OPERATOR_ACTION', actor='op', detail={'why': 'kept'})"
    )
    with _as_role(role_db) as conn, pytest.raises(psycopg.Error) as refused:
        conn.execute(REFUSED[name])
    assert isinstance(
        refused.value, psycopg.errors.InsufficientPrivilege | psycopg.errors.RaiseException
    ), refused.value
    assert role_db.query("SELECT actor, detail->>'why' FROM audit_auditevent") == [("op", "kept")]
    triggers = role_db.scalar(
        "SELECT COUNT(*) FROM pg_trigger WHERE tgrelid = 'audit_auditevent'::regclass "
        "AND NOT tgisinternal AND tgenabled <> 'D'"
    )
    assert triggers == 2


def test_role_may_append_and_read_the_audit_log(role_db: ProcDB) -> None:
    """The positive control: the refusals above are about rewriting, not about access."""
    with _as_role(role_db) as conn:
        conn.execute(
            "INSERT INTO audit_auditevent (event_type, actor, result_code, detail, created_at) "
            "VALUES ('OPERATOR_ACTION', 'op', '', '{}', now())"
        )
        assert conn.execute("SELECT COUNT(*) FROM audit_auditevent").fetchone() == (1,)


def test_readme_shows_the_grants_the_tests_use() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for statement in approle.grants_sql(approle.FILE_ROLE).replace('"', "").splitlines():
        assert statement in readme, statement
