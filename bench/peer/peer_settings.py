"""Settings of the throwaway django-tasks-db project used as the throughput peer.

It runs from its own venv under ``var/bench/`` (never the project's) and gets the same database
settings as ours: ``DATABASE_URL``, persistent connections with health checks on PostgreSQL, and
on SQLite the project's WAL / synchronous=FULL / IMMEDIATE / busy-timeout options.
"""

import os

import dj_database_url

SECRET_KEY = "bench-peer-only"
DEBUG = False
ALLOWED_HOSTS: list[str] = []
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django.contrib.contenttypes", "django_tasks_db"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_db = dj_database_url.parse(
    os.environ["DATABASE_URL"], conn_max_age=int(os.environ.get("CONN_MAX_AGE", "60"))
)
if _db["ENGINE"] == "django.db.backends.sqlite3":
    _db["CONN_MAX_AGE"] = 0
    _db["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": (
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=30000; "
            "PRAGMA foreign_keys=ON;"
        ),
    }
else:
    _db["CONN_HEALTH_CHECKS"] = True
DATABASES = {"default": _db}

TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "root": {"level": "WARNING"},
}
