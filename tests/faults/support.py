"""Helpers for the fault tests: a worker frozen or killed at a named transaction point
(``core.faults``), and the operator's, the sweeper's and the auto-reconciler's view meanwhile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.executors.support import wait_for
from tests.support.procdb import ProcDB

# What the operator's retry button does, run in its own process against the frozen row:
# the real view (route policy, request id, transaction) through Django's test client.
OPERATOR_CODE = """
import json, time, uuid
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
user, _ = get_user_model().objects.get_or_create(username="fault-op", is_superuser=True)
client = Client(HTTP_HOST="localhost")
client.force_login(user)
start = time.monotonic()
response = client.post(
    reverse("console:job_retry", args=[{job_id!r}]),
    {{"request_id": uuid.uuid4().hex, "reason": "operator during the freeze"}},
    headers={{"HX-Request": "true"}},
)
print(json.dumps({{"status": response.status_code, "seconds": time.monotonic() - start,
                  "body": response.content.decode()}}))
"""


@dataclass
class Timed:
    """A command run to its end: exit code, output and how long it took."""

    code: int
    out: str
    seconds: float


def start(db: ProcDB, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    out = log.open("w")
    proc = db.popen(*args, stdout=out, stderr=subprocess.STDOUT, env=db.env(**env))
    proc.log = log  # type: ignore[attr-defined]
    out.close()
    return proc


def output(proc: subprocess.Popen) -> str:
    return proc.log.read_text()  # type: ignore[attr-defined]


def freeze_at(
    db: ProcDB, point: str, args: tuple[str, ...], *, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start ``manage.py <args>`` so that it stops itself (SIGSTOP) at ``point``, inside its
    transaction, and wait until it has."""
    marker = db.workdir / f"fault-{point.replace(':', '-')}.txt"
    extra = {
        "CONSOLE_FAULT": f"{point}=stop",
        "CONSOLE_FAULT_MARKER": str(marker),
        **(env or {}),
    }
    proc = start(db, *args, env=extra, log=db.workdir / f"frozen-{args[0]}.log")
    wait_for(lambda: marker.exists() and marker.read_text().strip(), timeout=90)
    wait_for(lambda: _state(proc.pid) == "T", timeout=10)
    return proc


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return ""


def resume(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGCONT)


def run_timed(db: ProcDB, *args: str, timeout: float = 120) -> Timed:
    started = time.monotonic()
    proc = db.manage(*args, check=False, timeout=timeout)
    return Timed(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started)


def concurrently(*calls) -> list:
    """Run the given zero-argument callables at the same time (threads); their results."""
    import threading

    results: list = [None] * len(calls)

    def run(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def operator_retry(db: ProcDB, job_id: str) -> dict:
    started = time.monotonic()
    out = db.python(OPERATOR_CODE.format(job_id=job_id), timeout=120)
    result = json.loads(out.strip().splitlines()[-1])
    result["wall"] = time.monotonic() - started
    return result


def row_locked(db: ProcDB, table: str, key: str, value: str) -> bool:
    """Does some transaction hold a lock on that row right now? (PostgreSQL, NOWAIT probe)"""
    import psycopg

    with psycopg.connect(db.url, autocommit=True) as conn:
        try:
            with conn.transaction():
                conn.execute(f"SELECT 1 FROM {table} WHERE {key} = %s FOR UPDATE NOWAIT", [value])
        except psycopg.errors.LockNotAvailable:
            return True
    return False
