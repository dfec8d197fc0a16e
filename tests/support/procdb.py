"""Fresh, migrated databases for tests that run real worker processes.

Each test gets its own database of the same kind as the suite's (SQLite file by default,
PostgreSQL when ``DATABASE_URL`` points there), cloned from a template migrated once per session.
Processes reach it through ``DATABASE_URL``; the test reads it back with the plain driver, so no
test transaction can hide a missing commit.

``CONSOLE_TEST_APP_ROLE=<role>`` (PostgreSQL only; the CI's run "as a role that does not own the
tables"): the template gets the README's grants (docs/postgres-app-role.sql) for that role, and
processes connect as it, while the test's own reads and set-up use the owner.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANAGE = str(ROOT / "manage.py")


APP_ROLE = os.environ.get("CONSOLE_TEST_APP_ROLE", "").strip()


def suite_database_url() -> str:
    return os.environ.get("DATABASE_URL", "").strip()


def is_postgres(url: str) -> bool:
    return url.startswith(("postgres://", "postgresql://"))


def _with_dbname(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def _pg_admin(url: str):
    import psycopg

    return psycopg.connect(_with_dbname(url, "postgres"), autocommit=True)


@dataclass
class ProcDB:
    """One database for one test, plus helpers to run commands against it."""

    url: str
    vendor: str
    workdir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    # What processes connect with when it differs from ``url`` (CONSOLE_TEST_APP_ROLE).
    app_url: str = ""

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DATABASE_URL=self.app_url or self.url,
            CONN_MAX_AGE="60",
            VAULT_ROOT=str(self.workdir / "vault"),
            CONSOLE_VAR_DIR=str(self.workdir / "var"),
            PYTHONUNBUFFERED="1",
        )
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        env.update(self.extra_env)
        env.update(extra)
        return env

    def manage(
        self, *args: str, check: bool = True, timeout: float = 600, input: str | None = None
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, MANAGE, *args],
            env=self.env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"manage.py {' '.join(args)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
            )
        return proc

    def popen(self, *args: str, **kwargs: Any) -> subprocess.Popen:
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        kwargs.setdefault("env", self.env())
        return subprocess.Popen([sys.executable, MANAGE, *args], cwd=ROOT, **kwargs)

    def script(self, path: str | Path, *args: str, **kwargs: Any) -> subprocess.Popen:
        """Start a Python script (with Django set up by the script) against this database."""
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        return subprocess.Popen(
            [sys.executable, str(path), *args], env=self.env(), cwd=ROOT, **kwargs
        )

    def python(self, code: str, timeout: float = 600) -> str:
        """Run ``code`` in ``manage.py shell`` against this database; return its stdout."""
        return self.manage("shell", "--no-imports", "-c", code, timeout=timeout).stdout

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Run one read query with the plain driver (``%s`` placeholders on both)."""
        if self.vendor == "postgresql":
            import psycopg

            with psycopg.connect(self.url) as conn:
                return list(conn.execute(sql, params).fetchall())
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            return list(conn.execute(sql.replace("%s", "?"), params).fetchall())
        finally:
            conn.close()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write statement with the plain driver; return the row count."""
        if self.vendor == "postgresql":
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as conn:
                return conn.execute(sql, params).rowcount
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            return conn.execute(sql.replace("%s", "?"), params).rowcount
        finally:
            conn.close()

    @property
    def path(self) -> str:
        assert self.vendor == "sqlite"
        return self.url.removeprefix("sqlite:///")

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None


class _Templates:
    """Per-session migrated template databases."""

    def __init__(self, tmp_root: Path) -> None:
        self.tmp_root = tmp_root
        self.pg_template: str | None = None
        self.sqlite_template: Path | None = None
        self.created_pg: list[str] = []

    def _migrate(self, url: str) -> None:
        env = dict(os.environ, DATABASE_URL=url, CONSOLE_VAR_DIR=str(self.tmp_root / "var"))
        subprocess.run(
            [sys.executable, MANAGE, "migrate", "-v0"],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
            timeout=600,
        )

    def make(self, workdir: Path) -> ProcDB:
        suite = suite_database_url()
        if is_postgres(suite):
            if self.pg_template is None:
                name = f"console_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
                with _pg_admin(suite) as admin:
                    admin.execute(f'CREATE DATABASE "{name}"')
                self.created_pg.append(name)
                self._migrate(_with_dbname(suite, name))
                if APP_ROLE:
                    from tests.support import approle

                    approle.ensure_role(_with_dbname(suite, "postgres"), APP_ROLE)
                    approle.apply_grants(_with_dbname(suite, name), APP_ROLE)
                self.pg_template = name
            name = f"console_proc_{uuid.uuid4().hex[:12]}"
            with _pg_admin(suite) as admin:
                admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.pg_template}"')
            self.created_pg.append(name)
            url = _with_dbname(suite, name)
            if APP_ROLE:
                from tests.support.approle import as_role

                return ProcDB(url, "postgresql", workdir, app_url=as_role(url, APP_ROLE))
            return ProcDB(url, "postgresql", workdir)
        if self.sqlite_template is None:
            path = self.tmp_root / "template.sqlite3"
            self._migrate(f"sqlite:///{path}")
            conn = sqlite3.connect(path)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            self.sqlite_template = path
        target = workdir / "db.sqlite3"
        shutil.copyfile(self.sqlite_template, target)
        return ProcDB(f"sqlite:///{target}", "sqlite", workdir)

    def drop(self, db: ProcDB) -> None:
        if db.vendor != "postgresql":
            return
        name = urlsplit(db.url).path.lstrip("/")
        with _pg_admin(suite_database_url()) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        if self.pg_template:
            with _pg_admin(suite_database_url()) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{self.pg_template}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _proc_db_templates(tmp_path_factory) -> Iterator[_Templates]:
    templates = _Templates(tmp_path_factory.mktemp("procdb"))
    yield templates
    templates.close()


@pytest.fixture
def proc_db(_proc_db_templates: _Templates, tmp_path: Path) -> Iterator[ProcDB]:
    """A fresh migrated database (same kind as the suite's) for real-process tests."""
    db = _proc_db_templates.make(tmp_path)
    (tmp_path / "vault").mkdir(exist_ok=True)
    try:
        yield db
    finally:
        _proc_db_templates.drop(db)
