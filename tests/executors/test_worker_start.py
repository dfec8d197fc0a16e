"""A worker command's start: the checks it runs, and the console it does not import.

``run_executor`` and ``run_consolidator`` run Django's model and compatibility checks, the runs
settings' checks and their own worker checks with the database, not Django's URL, admin and
template checks: those import the whole console (URL conf, views, tables, API), about 0.1 s of
CPU at every start of every executor, for pages a worker never serves. Nor does app population
import django-ninja and pydantic (not an installed app: ``console.api.LocalSwagger``), another
fifth of an executor's start-up.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.procdb import ROOT, ProcDB

# Runs a command as ``manage.py`` does (system checks included, unlike ``call_command``) and
# prints which console and API modules the process imported.
PROBE = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
from django.core.management import execute_from_command_line
code = 0
try:
    execute_from_command_line(["manage.py", *sys.argv[1:]])
except SystemExit as exc:
    code = exc.code
watched = ("config.urls", "console.urls", "console.views", "console.api", "ninja", "pydantic")
print(json.dumps({"code": code, "imported": [m for m in watched if m in sys.modules]}))
"""


def _probe(db: ProcDB, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=db.env(PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_executor_starts_and_drains_without_importing_the_console(proc_db: ProcDB) -> None:
    proc_db.python(
        "from inbox.transitions import create_job\n"
        "from tests.factories import noop_doc\n"
        "for n in range(3):\n"
        "    create_job(noop_doc(), requested_by='producer')\n"
    )
    got = _probe(proc_db, "run_executor", "--scope", "noop", "--exit-when-idle")
    assert got == {"code": 0, "imported": []}
    assert proc_db.scalar("SELECT count(*) FROM inbox_job WHERE state = 'SUCCEEDED'") == 3


def test_a_full_system_check_still_imports_and_checks_the_console(proc_db: ProcDB) -> None:
    # The control: the probe sees the console when a command does run every check.
    got = _probe(proc_db, "check")
    assert got["code"] == 0
    assert {"config.urls", "console.api", "ninja"} <= set(got["imported"])


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (("run_executor", "--scope", "no-such-scope"), {}, "unknown scope"),
        (("run_executor", "--scope", "noop"), {"RUNS_STUCK_AFTER_SECONDS": "0"}, "runs.E002"),
        (
            ("run_consolidator", "--store", "vault", "--once"),
            {"RUNS_CONSOLIDATOR": "runs.consolidators.Nope"},
            "runs.E001",
        ),
    ],
)
def test_a_worker_misconfigured_still_refuses_to_start(proc_db: ProcDB, args, env, says) -> None:
    proc_db.extra_env.update(env)
    proc = proc_db.manage(*args, check=False, timeout=120)
    assert proc.returncode != 0
    assert says in proc.stderr
    assert proc_db.scalar("SELECT count(*) FROM inbox_worker") == 0
