"""Settings and start-up checks: the production profile, worker database checks, inbox_stats.

Settings are read once per process, so the production profile is tested in subprocesses with
their own environment.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.utils import ConnectionHandler

from inbox import dbcheck
from inbox.errors import ConfigurationError
from inbox.models import JobState
from tests.factories import make_job

ROOT = Path(__file__).resolve().parents[1]
STRONG_KEY = "k7Qe9vZp2LmX4tRw8yBn6HcJ3sFd5GaU1oIiKlMxNbVcZ0qWeRtYuPaSdFgHjKl"
PRODUCTION_VARS = ("DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "DJANGO_SECURE_SSL_REDIRECT")


def _manage(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in PRODUCTION_VARS}
    base.pop("DJANGO_SETTINGS_MODULE", None)
    base.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # set by conftest for Playwright only
    base.update({"CONSOLE_ENV": "production", "CONSOLE_VAR_DIR": str(tmp_path / "var"), **env})
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=base,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({}, "DJANGO_SECRET_KEY and DJANGO_ALLOWED_HOSTS"),
        ({"DJANGO_ALLOWED_HOSTS": "console.example.com"}, "DJANGO_SECRET_KEY"),
        ({"DJANGO_SECRET_KEY": STRONG_KEY}, "DJANGO_ALLOWED_HOSTS"),
        ({"DJANGO_SECRET_KEY": STRONG_KEY, "DJANGO_ALLOWED_HOSTS": " , "}, "DJANGO_ALLOWED_HOSTS"),
        ({"DJANGO_SECRET_KEY": "  ", "DJANGO_ALLOWED_HOSTS": "a.example"}, "DJANGO_SECRET_KEY"),
    ],
    ids=["both", "secret", "hosts", "hosts-blank", "secret-blank"],
)
def test_production_without_required_variables_refuses_to_start(tmp_path, env, missing):
    proc = _manage("check", tmp_path=tmp_path, **env)
    assert proc.returncode != 0
    assert f"CONSOLE_ENV=production needs {missing} in the environment" in proc.stderr
    assert "System check identified" not in proc.stdout


@pytest.mark.parametrize(
    ("extra", "silenced"),
    [({}, "0 silenced"), ({"DJANGO_SECURE_SSL_REDIRECT": "0"}, "1 silenced")],
    ids=["https-redirect", "behind-tls-proxy"],
)
def test_production_with_required_variables_passes_check_deploy(tmp_path, extra, silenced):
    proc = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        tmp_path=tmp_path,
        DJANGO_SECRET_KEY=STRONG_KEY,
        DJANGO_ALLOWED_HOSTS="console.example.com",
        **extra,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"System check identified no issues ({silenced})."
    assert proc.stderr == ""


def test_development_check_deploy_warns_so_the_production_test_can_fail(tmp_path):
    proc = _manage("check", "--deploy", tmp_path=tmp_path, CONSOLE_ENV="development")
    assert "security.W004" in proc.stderr + proc.stdout  # no HSTS outside production


# --- worker database check --------------------------------------------------------------------


def _sqlite_connection(path: Path, *, options: dict):
    handler = ConnectionHandler(
        {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path), "OPTIONS": options}}
    )
    return handler["default"]


@pytest.mark.parametrize(
    ("options", "problems"),
    [
        (
            {"transaction_mode": "IMMEDIATE"},
            ["journal_mode is delete; add 'PRAGMA journal_mode=WAL'"],
        ),
        (
            {"init_command": "PRAGMA journal_mode=WAL;"},
            ["OPTIONS['transaction_mode'] is unset; set it to 'IMMEDIATE'"],
        ),
        (
            {"transaction_mode": "DEFERRED", "init_command": "PRAGMA journal_mode=WAL;"},
            ["OPTIONS['transaction_mode'] is DEFERRED"],
        ),
        (
            {},
            ["transaction_mode'] is unset", "journal_mode is delete"],
        ),
    ],
    ids=["no-wal", "no-immediate", "deferred", "neither"],
)
@pytest.mark.django_db  # lets pytest-django open the extra SQLite connection
def test_check_worker_database_refuses_unsafe_sqlite(tmp_path, monkeypatch, options, problems):
    conn = _sqlite_connection(tmp_path / "unsafe.sqlite3", options=options)
    monkeypatch.setattr(dbcheck, "connection", conn)
    try:
        with pytest.raises(ConfigurationError, match="not safe for workers") as info:
            dbcheck.check_worker_database()
    finally:
        conn.close()
    for fragment in problems:
        assert fragment in str(info.value)


@pytest.mark.django_db
def test_check_worker_database_accepts_the_settings_sqlite_options(tmp_path, monkeypatch):
    from config.settings import SQLITE_OPTIONS

    conn = _sqlite_connection(tmp_path / "safe.sqlite3", options=dict(SQLITE_OPTIONS))
    monkeypatch.setattr(dbcheck, "connection", conn)
    try:
        assert dbcheck.check_worker_database().endswith("(WAL, IMMEDIATE)")
    finally:
        conn.close()


@pytest.mark.django_db
def test_check_worker_database_accepts_the_suite_database():
    description = dbcheck.check_worker_database()
    expected = {"postgresql": "PostgreSQL ", "sqlite": "SQLite "}[connection.vendor]
    assert description.startswith(expected)


def test_check_worker_database_accepts_default_config_in_a_real_process(proc_db):
    out = proc_db.python("from inbox.dbcheck import check_worker_database as c; print(c())")
    assert out.startswith({"postgresql": "PostgreSQL ", "sqlite": "SQLite "}[proc_db.vendor])


# --- inbox_stats ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_inbox_stats_json_counts_every_state_and_oldest_ready_age():
    make_job("save", JobState.READY)
    make_job("noop", JobState.READY)
    make_job("save", JobState.FAILED)
    make_job("delete", JobState.CREATED)
    out = io.StringIO()
    call_command("inbox_stats", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert set(data["counts"]) == {s.value for s in JobState}
    assert {k: v for k, v in data["counts"].items() if v} == {
        "READY": 2,
        "FAILED": 1,
        "CREATED": 1,
    }
    assert data["total"] == 4
    assert 0 <= data["oldest_ready_age_s"] < 600


@pytest.mark.django_db
def test_inbox_stats_without_ready_jobs_reports_none():
    make_job("save", JobState.SUCCEEDED)
    out = io.StringIO()
    call_command("inbox_stats", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert (data["total"], data["counts"]["SUCCEEDED"], data["oldest_ready_age_s"]) == (
        1,
        1,
        None,
    )
    text = io.StringIO()
    call_command("inbox_stats", stdout=text)
    assert "oldest READY job: none" in text.getvalue()
    assert "SUCCEEDED" in text.getvalue()


def _settings_of(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    base.update(env)
    prelude = "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'config.settings'; "
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        env=base,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_postgresql_connect_is_bounded_by_db_connect_timeout_s() -> None:
    read = (
        "from django.conf import settings; "
        "print(settings.DATABASES['default']['OPTIONS']['connect_timeout'])"
    )
    url = "postgres://app@db.invalid:5432/console"
    assert _settings_of(read, DATABASE_URL=url).stdout.strip() == "5"
    assert _settings_of(read, DATABASE_URL=url, DB_CONNECT_TIMEOUT_S="3").stdout.strip() == "3"
    refused = _settings_of(read, DATABASE_URL=url, DB_CONNECT_TIMEOUT_S="1")
    assert refused.returncode != 0
    assert "DB_CONNECT_TIMEOUT_S must be at least 2" in refused.stderr
