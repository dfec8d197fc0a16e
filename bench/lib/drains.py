"""One drain round of each system the benchmarks compare, read back from the database.

- ``drain_cold``: K ``manage.py run_executor --exit-when-idle`` processes of a tree started with
  the round's jobs waiting (their Python start-up falls inside the span, as the peer's does);
- ``drain_warm``: the same K started first, while the jobs wait in a paused scope, and released
  once every one has registered (the steady state of long-running workers, as pgbench's
  clients are);
- ``drain_peer``: K ``db_worker --batch`` processes of django-tasks-db, in its own venv;
- ``drain_pgbench``: the ceiling, pgbench with K clients running ``pgbench_batched.sql``: our
  executor's statements and rows on our own tables, batches of 10, without Python.

A round's rate is its span rate: jobs / (last completion − first claim), both read from the
database after the round. ``settled`` wraps a round with the database's settling (VACUUM
ANALYZE, CHECKPOINT) and reads its commits and the server's CPU per job.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lib import base as bl

PEER_DIR = bl.BENCH / "peer"
PEER_VENV = bl.VAR / "tasks-venv"
PEER_PY = PEER_VENV / "bin" / "python"
PEER_PACKAGES = ["django-tasks-db", "dj-database-url", "psycopg[binary]"]
# Jobs per pgbench transaction in the batched ceiling (the executor's --batch default).
PGBENCH_BATCH = 10


@dataclass
class Round:
    system: str
    backend: str  # pg | sqlite
    workers: int
    repeat: int
    jobs: int
    wall_s: float = float("nan")
    span_s: float = float("nan")
    done: int = 0
    note: str = ""
    events: dict[str, int] = field(default_factory=dict)
    commits_per_job: float = float("nan")
    cpu_s: float = float("nan")  # the workers' CPU (user + system); a cold round's start-up too
    server_cpu_s: float = float("nan")  # PostgreSQL's processes over the round (PG only)
    # How far into the span the last of the K executors made its first claim (ours only).
    joined_s: float = float("nan")

    @property
    def cpu_ms_per_job(self) -> float:
        return self.cpu_s / self.done * 1000 if self.done else float("nan")

    @property
    def server_cpu_ms_per_job(self) -> float:
        return self.server_cpu_s / self.done * 1000 if self.done else float("nan")

    @property
    def span_rate(self) -> float:
        return self.done / self.span_s if self.span_s and self.span_s == self.span_s else 0.0

    def fail(self, note: str) -> None:
        self.note = f"{self.note}; {note}" if self.note else note

    def check(self) -> None:
        if self.done != self.jobs:
            self.fail(f"only {self.done}/{self.jobs} succeeded")


def timeout(r: Round) -> float:
    return max(120.0, r.jobs / 20)


def show(r: Round) -> None:
    bl.say(
        f"  {r.backend:6} {r.system:22} K={r.workers} rep {r.repeat}: "
        f"{r.done:,}/{r.jobs:,} in {r.span_s:.2f} s = {r.span_rate:,.0f}/s {r.note}"
    )


# --- the peer, django-tasks-db, in its own venv ------------------------------------------------


def ensure_peer_venv() -> None:
    """Create var/bench/tasks-venv with django-tasks-db (never touches the project's venv)."""
    probe = [str(PEER_PY), "-c", "import django_tasks_db, dj_database_url, psycopg"]
    if PEER_PY.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return
    bl.say(f"installing the django-tasks-db peer into {PEER_VENV} …")
    python = shutil.which("python3.12") or sys.executable
    bl.run([python, "-m", "venv", str(PEER_VENV)])
    bl.run([str(PEER_PY), "-m", "pip", "install", "--quiet", *PEER_PACKAGES])


def peer_version() -> str:
    code = (
        "import importlib.metadata as m, django; "
        "print(m.version('django-tasks-db'), 'on Django', django.get_version())"
    )
    return bl.run([str(PEER_PY), "-c", code]).strip()


def peer_env(url: str) -> dict[str, str]:
    env = bl.django_env(url)
    env["DJANGO_SETTINGS_MODULE"] = "peer_settings"
    env.pop("PYTHONPATH", None)
    return env


def peer_json(url: str, *args: str) -> dict[str, Any]:
    import json

    out = bl.run([str(PEER_PY), "peerside.py", *args], env=peer_env(url), cwd=PEER_DIR)
    return json.loads(out.strip().splitlines()[-1])


def migrate_peer(url: str) -> None:
    bl.run([str(PEER_PY), "manage.py", "migrate", "-v", "0"], env=peer_env(url), cwd=PEER_DIR)


# --- the rounds -------------------------------------------------------------------------------


def _pg_name(url: str) -> str:
    return url.rsplit("/", 1)[-1] if url.startswith("postgres") else ""


def settled(url: str, r: Round, drain: Callable[[], None]) -> None:
    """Settle the database (``pg_quiesce``: a round must not pay for the dead rows and dirty
    pages of the one before), run ``drain()``, and record the round's commits and server CPU
    per job (PostgreSQL only)."""
    name = _pg_name(url)
    if name:
        bl.pg_quiesce(name)
    before = bl.pg_commits(name) if name else 0
    cpu_before = bl.pg_cpu_seconds() if name else float("nan")
    drain()
    if name and r.done:
        time.sleep(0.6)  # backends flush their statistics at exit / at most once a second
        r.commits_per_job = (bl.pg_commits(name) - before) / r.done
        r.server_cpu_s = bl.pg_cpu_seconds() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _spawn_and_wait(
    cmds: list[list[str]], *, env: dict[str, str], cwd: Path, tag: str, limit: float
) -> tuple[float, str, float]:
    """Start the workers, wait for all; return (wall s, note, their CPU s: user + system)."""
    bl.LOGS.mkdir(parents=True, exist_ok=True)
    cpu_before = _children_cpu()
    logs = [open(bl.LOGS / f"{tag}-{i}.log", "w") for i in range(len(cmds))]  # noqa: SIM115
    start = time.perf_counter()
    procs = [
        subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        for cmd, log in zip(cmds, logs, strict=True)
    ]
    note = ""
    deadline = start + limit
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            note = f"timed out after {limit:.0f} s"
    wall = time.perf_counter() - start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
        elif proc.returncode and not note:
            note = f"a worker exited {proc.returncode} (log: var/bench/logs/{tag}-*.log)"
    for log in logs:
        log.close()
    return wall, note, _children_cpu() - cpu_before


def _since() -> str:
    """A moment just before the round, for reading back the rounds marked by time."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 1))


def drain_cold(
    tree: bl.Tree,
    url: str,
    r: Round,
    mission: str,
    executor_args: Sequence[str] = (),
    tasks: bool = False,
) -> None:
    """K executors of ``tree`` started with the round's jobs waiting; each exits when the scope
    is empty. ``tasks``: the TASK jobs of queue ``default`` (read back by claim time)."""
    scope = "default" if tasks else "noop"
    cmd = [*tree.manage, "run_executor", "--scope", scope, "--exit-when-idle", *executor_args]
    since = _since()
    tag = f"{r.system}-{r.backend}-k{r.workers}-r{r.repeat}".replace(" ", "-")
    r.wall_s, r.note, r.cpu_s = _spawn_and_wait(
        [cmd] * r.workers, env=tree.env(url), cwd=tree.root, tag=tag, limit=timeout(r)
    )
    if tasks:
        s = tree.side(url, "tasks-span", "--since", since)
    else:
        s = tree.side(url, "span", "--mission", mission)
        # The whole span when one of the K never claimed (still starting when it ended).
        r.joined_s = s["joined_s"] if s["claimers"] >= r.workers else s["span_s"]
    r.done, r.span_s, r.events = s["succeeded"], s["span_s"], s["events"]
    r.check()


class _Reader:
    """One connection of the orchestrator's own for the reads a warm round polls with (a new
    PostgreSQL connection per read would fork a backend 20 times a second beside the drain)."""

    def __init__(self, url: str) -> None:
        self.pg = url.startswith("postgres")
        if self.pg:
            import psycopg

            self.conn: Any = psycopg.connect(url, autocommit=True)
        else:
            import sqlite3

            self.conn = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30)
            self.conn.isolation_level = None  # autocommit: each read sees the latest commit

    def one(self, sql: str, params: tuple = ()) -> Any:
        if self.pg:
            sql = sql.replace("?", "%s")
        return self.conn.execute(sql, params).fetchone()[0]

    def close(self) -> None:
        self.conn.close()


# How many jobs of the scope have finished, ever: the executors' own per-minute counts (a table
# of a few rows, written in the statement that finishes the jobs). A warm round is over when it
# grew by the round's N; polling the jobs table instead would bill a scan to ours alone.
_FINISHED = "SELECT coalesce(sum(finished), 0) FROM inbox_finishedcount WHERE scope = 'noop'"
_LEFT = (
    "SELECT EXISTS (SELECT 1 FROM inbox_job WHERE scope = 'noop' "
    "AND state IN ('READY', 'CLAIMED', 'EXECUTING'))"
)


def drain_warm(
    tree: bl.Tree,
    url: str,
    r: Round,
    mission: str,
    executor_args: Sequence[str] = (),
    *,
    before_release: Callable[[], None] | None = None,
    at: Callable[[str], None] | None = None,
) -> None:
    """The round's N READY jobs wait in a paused scope while K executors of ``tree`` start and
    register; the scope is resumed and they drain it; SIGTERM once N more have finished.

    CPU and commits are read over the drain alone (resumed → N finished), never over start-up.
    ``before_release`` runs once every executor is up; ``at("start")`` / ``at("end")`` bracket
    the drain (live_load.py reads its web server's CPU there). The database settles inside.
    """
    tree.run(["pause", "noop", "--reason", "bench: a warm round"], url)
    tree.side(url, "load", "--n", str(r.jobs), "--mission", mission)
    # Polling every 0.25 s while paused: every executor claims within 0.25 s of the resume.
    cmd = [*tree.manage, "run_executor", "--scope", "noop", "--poll", "0.25"]
    cmd += ["--progress-every", "3600", *executor_args]
    bl.LOGS.mkdir(parents=True, exist_ok=True)
    tag = f"warm-{tree.name}-{r.backend}-k{r.workers}-r{r.repeat}"
    logs = [open(bl.LOGS / f"{tag}-{i}.log", "w") for i in range(r.workers)]  # noqa: SIM115
    env = tree.env(url)
    procs = [
        subprocess.Popen(cmd, env=env, cwd=tree.root, stdout=log, stderr=subprocess.STDOUT)
        for log in logs
    ]
    pids = tuple(p.pid for p in procs)
    pg = _pg_name(url)
    deadline = time.monotonic() + timeout(r)
    reader = _Reader(url)
    try:
        # Every executor registered (its heartbeat row is written after its checks pass).
        marks = ", ".join("?" for _ in pids)
        registered = f"SELECT count(*) FROM inbox_worker WHERE pid IN ({marks})"
        while reader.one(registered, pids) < len(pids):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"an executor did not start (log: var/bench/logs/{tag}-*)")
            time.sleep(0.05)
        if pg:
            bl.pg_quiesce(pg)
        if before_release is not None:
            before_release()
        cpu0, server0 = bl.proc_cpu(pids), bl.pg_cpu_seconds() if pg else float("nan")
        commits0 = bl.pg_commits(pg) if pg else 0
        finished0 = reader.one(_FINISHED)
        tree.run(["resume", "noop", "--reason", "bench: drain"], url)
        if at is not None:
            at("start")
        start = time.perf_counter()
        while reader.one(_FINISHED) - finished0 < r.jobs:
            if time.monotonic() > deadline:
                r.fail(f"timed out after {timeout(r):.0f} s")
                break
            time.sleep(0.05)
        r.wall_s = time.perf_counter() - start
        if at is not None:
            at("end")
        r.cpu_s = bl.proc_cpu(pids) - cpu0
        if pg:
            r.server_cpu_s = bl.pg_cpu_seconds() - server0
            time.sleep(0.6)  # backends flush their statistics at most once a second
            r.commits_per_job = (bl.pg_commits(pg) - commits0) / max(r.jobs, 1)
        if reader.one(_LEFT):
            r.fail("jobs of the scope were left unfinished")
    finally:
        reader.close()
        _stop(procs, r, tag)
        for log in logs:
            log.close()
        # A round that failed must not leave the next one paused.
        tree.run(["resume", "noop", "--reason", "bench: round over"], url)
    s = tree.side(url, "span", "--mission", mission)
    r.done, r.span_s, r.events = s["succeeded"], s["span_s"], s["events"]
    r.joined_s = s["joined_s"] if s["claimers"] >= r.workers else s["span_s"]
    r.check()


def _stop(procs: list[subprocess.Popen], r: Round, tag: str) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.returncode and not r.note:
            r.fail(f"an executor exited {proc.returncode} (log: var/bench/logs/{tag}-*.log)")


def drain_peer(url: str, r: Round) -> None:
    """K ``db_worker --batch`` processes of django-tasks-db (each exits when the queue is
    empty); the span is first start → last finish of the tasks started in the round."""
    cmd = [str(PEER_PY), "manage.py", "db_worker", "--batch", "--no-startup-delay"]
    cmd += ["--no-reload", "--interval", "0.1", "-v", "0"]
    since = _since()
    tag = f"peer-{r.backend}-k{r.workers}-r{r.repeat}"
    r.wall_s, r.note, r.cpu_s = _spawn_and_wait(
        [cmd] * r.workers, env=peer_env(url), cwd=PEER_DIR, tag=tag, limit=timeout(r)
    )
    s = peer_json(url, "span", "--since", since)
    r.done, r.span_s = s["succeeded"], s["span_s"]
    r.check()


def drain_pgbench(db: str, r: Round, mission: str) -> None:
    """The ceiling: pgbench with K clients running ``pgbench_batched.sql`` on a database of our
    schema. It loads the round's READY rows and settles the database first (not measured)."""
    import psycopg

    with psycopg.connect(bl.pg_url(db), autocommit=True) as conn:
        conn.execute((bl.LIB / "pgbench_load.sql").read_text(), {"mission": mission, "n": r.jobs})
    bl.pg_quiesce(db)
    per_client = r.jobs // (r.workers * PGBENCH_BATCH)
    r.jobs = per_client * r.workers * PGBENCH_BATCH
    pgbench = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
    cmd = [pgbench, "-n", "-M", "prepared", "-f", str(bl.LIB / "pgbench_batched.sql")]
    cmd += ["-c", str(r.workers), "-j", str(r.workers), "-t", str(per_client), bl.pg_url(db)]
    commits0, server0 = bl.pg_commits(db), bl.pg_cpu_seconds()
    cpu_before = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    r.wall_s = time.perf_counter() - start
    r.cpu_s = _children_cpu() - cpu_before
    r.server_cpu_s = bl.pg_cpu_seconds() - server0
    time.sleep(0.6)  # backends flush their statistics at exit
    r.commits_per_job = (bl.pg_commits(db) - commits0) / max(r.jobs, 1)
    if proc.returncode != 0:
        r.fail("pgbench failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1])
    with psycopg.connect(bl.pg_url(db), autocommit=True) as conn:
        n, first, last = conn.execute(
            "SELECT count(*), min(claimed_at), max(updated_at) FROM inbox_job "
            "WHERE mission_id = %s AND state = 'SUCCEEDED'",
            [mission],
        ).fetchone()
    r.done = n
    r.span_s = (last - first).total_seconds() if n else float("nan")
    r.check()
