"""Executor throughput, side by side with django-tasks-db and the pgbench lifecycle ceiling.

For each database (PostgreSQL, SQLite) and each repeat, for K in --workers:
  ours        N NOOP jobs → K ``manage.py run_executor --scope noop --exit-when-idle`` processes
  ours warm   N READY jobs in a paused scope, K ``run_executor --scope noop`` processes started
              and registered, then the scope resumed (stopped once none is left): the steady
              state the ceilings measure
  ours-tasks  N no-op tasks through ``django.tasks`` (``noop.enqueue()`` on InboxTaskBackend)
              → K ``run_executor --scope default --exit-when-idle`` processes
  peer        N no-op tasks (``noop.enqueue()`` on django-tasks-db) → K ``db_worker --batch``
              processes (own venv)
  ceiling     N READY rows → pgbench with K clients running bench/pgbench_lifecycle.sql (PG only)
The rounds alternate (ours, ours-tasks, peer, ceiling) so all see the same machine noise.
ours-tasks and peer go through the same API on both sides: the exact task-backend comparison.
Jobs for the first two K of each repeat come from the measured enqueue (one commit per job, then
one transaction for all); the rest are bulk-loaded (setup). Drain rate = N / span, the span being
first claim → last completion read from the database; wall time (process start → last exit) is
reported too. Medians over the repeats; ratios compare medians of the same session.

    .venv/bin/python bench/throughput.py                 # N=20,000, K=1,2,4, 3 repeats
    .venv/bin/python bench/throughput.py --jobs 2000     # what `make bench` runs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import benchlib as bl

PEER_DIR = bl.BENCH / "peer"
PEER_VENV = bl.VAR / "tasks-venv"
PEER_PY = PEER_VENV / "bin" / "python"
PEER_PACKAGES = ["django-tasks-db", "dj-database-url", "psycopg[binary]"]
LOGS = bl.VAR / "logs"
# CPU seconds one worker process spends starting and finding an empty queue, per system and
# database; subtracted from each round so "CPU per job" is the drain's own.
STARTUP_CPU: dict[tuple[str, str], float] = {}


@dataclass
class Round:
    system: str  # ours | ours-tasks | django-tasks-db | pgbench
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
    cpu_s: float = float("nan")  # the workers' own CPU (user + system), start-up excluded
    server_cpu_s: float = float("nan")  # PostgreSQL's processes over the round (PG only)
    # Ours: how far into the span the last of the K executors made its first claim (0 when
    # they all claimed from the start; a cold round's start-up shows here).
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

    @property
    def wall_rate(self) -> float:
        return self.done / self.wall_s if self.wall_s == self.wall_s else 0.0


@dataclass
class Enqueue:
    system: str
    backend: str
    mode: str
    per_s: float


# --- setup ------------------------------------------------------------------------------------


def ensure_peer_venv() -> None:
    """Create var/bench/tasks-venv with django-tasks-db (never touches the project's venv)."""
    if (
        PEER_PY.exists()
        and subprocess.run(
            [str(PEER_PY), "-c", "import django_tasks_db, dj_database_url, psycopg"],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    ):
        return
    bl.say(f"installing the django-tasks-db peer into {PEER_VENV} …")
    python = shutil.which("python3.12") or sys.executable
    bl.run([python, "-m", "venv", str(PEER_VENV)])
    bl.run([str(PEER_PY), "-m", "pip", "install", "--quiet", *PEER_PACKAGES])


def peer_version() -> str:
    return bl.run(
        [
            str(PEER_PY),
            "-c",
            "import django_tasks_db, django; "
            "print(django_tasks_db.__version__, 'on Django', django.get_version())",
        ]
    ).strip()


def peer_env(url: str) -> dict[str, str]:
    env = bl.django_env(url)
    env["DJANGO_SETTINGS_MODULE"] = "peer_settings"
    env.pop("PYTHONPATH", None)
    return env


def ours_json(url: str, *args: str) -> dict[str, Any]:
    out = bl.run([bl.PY, str(bl.BENCH / "ourside.py"), *args], env=bl.django_env(url))
    return json.loads(out.strip().splitlines()[-1])


def peer_json(url: str, *args: str) -> dict[str, Any]:
    out = bl.run([str(PEER_PY), "peerside.py", *args], env=peer_env(url), cwd=PEER_DIR)
    return json.loads(out.strip().splitlines()[-1])


# --- one drain --------------------------------------------------------------------------------


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _spawn_and_wait(
    cmds: list[list[str]], *, env: dict[str, str], cwd: Path, tag: str, timeout: float
) -> tuple[float, str, float]:
    """Start the workers, wait for all; return (wall s, note, their CPU s: user + system)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    cpu_before = _children_cpu()
    logs = [open(LOGS / f"{tag}-{i}.log", "w") for i in range(len(cmds))]  # noqa: SIM115
    start = time.perf_counter()
    procs = [
        subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        for cmd, log in zip(cmds, logs, strict=True)
    ]
    note = ""
    deadline = start + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            note = f"timed out after {timeout:.0f} s"
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


def drain_ours(
    url: str, r: Round, mission: str, executor_args: list[str], direct: bool, tasks: bool = False
) -> None:
    """K executors drain the round; ``tasks``: the TASK jobs of queue ``default`` (``mission``
    is then ignored: tasks are read back by claim time)."""
    scope = "default" if tasks else "noop"
    if direct:
        cmd = [bl.PY, str(bl.BENCH / "ourside.py"), "work", "--scope", scope]
        cmd += executor_args
    else:
        cmd = [bl.PY, bl.MANAGE, "run_executor", "--scope", scope, "--exit-when-idle"]
        cmd += executor_args
    since = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 1))
    tag = f"{r.system}-{r.backend}-k{r.workers}-r{r.repeat}"
    r.wall_s, r.note, cpu = _spawn_and_wait(
        [cmd] * r.workers, env=bl.django_env(url), cwd=bl.ROOT, tag=tag, timeout=timeout(r)
    )
    r.cpu_s = cpu - r.workers * STARTUP_CPU.get((r.system, r.backend), 0.0)
    if tasks:
        s = ours_json(url, "tasks-span", "--since", since)
    else:
        s = ours_json(url, "span", "--mission", mission)
    r.done, r.span_s, r.events = s["succeeded"], s["span_s"], s["events"]
    r.joined_s = _joined(s, r)
    if r.done != r.jobs:
        r.note = (r.note + "; " if r.note else "") + f"only {r.done}/{r.jobs} succeeded"


def _joined(span: dict[str, Any], r: Round) -> float:
    """How far into the span the last executor made its first claim; the whole span when one
    of the K never claimed (it was still starting when the drain ended)."""
    if span.get("claimers", 0) < r.workers:
        return r.span_s
    return span.get("joined_s", float("nan"))


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


# How many jobs of the scope have finished, ever: the executors' own per-minute counts
# (``inbox_finishedcount``, written in the statement that finishes the jobs), a table of a few
# rows. A warm round is over when it grew by the round's N. (Until 2026-12-03 the probe asked
# inbox_job whether any job was left: with a bulk load's statistics PostgreSQL read it by a
# sequential scan, 20 times a second beside the drain: a few ms of server CPU each, billed to
# ours alone; the cold rounds and the ceilings poll nothing.)
_FINISHED = "SELECT coalesce(sum(finished), 0) FROM inbox_finishedcount WHERE scope = 'noop'"
# Is any job of the scope not finished? Read once, after the drain, for the round's note.
_LEFT = (
    "SELECT EXISTS (SELECT 1 FROM inbox_job WHERE scope = 'noop' AND state = 'READY') "
    "OR EXISTS (SELECT 1 FROM inbox_job WHERE scope = 'noop' "
    "AND state IN ('CLAIMED', 'EXECUTING'))"
)


def _proc_cpu(pids: tuple[int, ...]) -> float:
    """CPU seconds (user + system) the live processes ``pids`` have used so far."""
    ticks = 0
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def drain_ours_warm(
    url: str,
    r: Round,
    mission: str,
    executor_args: list[str],
    *,
    before_release: Callable[[], None] | None = None,
    at: Callable[[str], None] | None = None,
) -> None:
    """The round's N READY jobs wait in a paused scope while K executors start and register;
    the scope is resumed (``manage.py resume``) and they drain it; they are stopped with
    SIGTERM once none is left.

    The ceilings start instantly (pgbench's C clients) and a production executor is a
    long-running process, so this is the drain to compare with them: in a cold round
    (``drain_ours``) the first executors share the cores with the others' Python start-up
    (about 0.9 s of CPU each) inside the measured span. CPU and commits are read over the drain
    alone (resumed → the N jobs finished), never over start-up. The summary takes the lower of the
    warm and the cold ratio. ``before_release`` runs once every
    executor is up; ``at("start")`` / ``at("end")`` bracket the drain (live_load.py reads its
    web server's CPU there).
    """
    env = bl.django_env(url)
    bl.run([bl.PY, bl.MANAGE, "pause", "noop", "--reason", "bench: a warm round"], env=env)
    ours_json(url, "load", "--n", str(r.jobs), "--mission", mission)
    # Polling every 0.25 s while paused: every executor claims within 0.25 s of the resume (a
    # shorter poll would also beat the heartbeat and check the connection that often).
    cmd = [bl.PY, bl.MANAGE, "run_executor", "--scope", "noop", "--poll", "0.25"]
    cmd += ["--progress-every", "3600", *executor_args]
    LOGS.mkdir(parents=True, exist_ok=True)
    tag = f"warm-{r.backend}-k{r.workers}-r{r.repeat}"
    logs = [open(LOGS / f"{tag}-{i}.log", "w") for i in range(r.workers)]  # noqa: SIM115
    procs = [
        subprocess.Popen(cmd, env=env, cwd=bl.ROOT, stdout=log, stderr=subprocess.STDOUT)
        for log in logs
    ]
    pids = tuple(p.pid for p in procs)
    marks = ", ".join("?" for _ in pids)
    pg = url.rsplit("/", 1)[-1] if url.startswith("postgres") else ""
    deadline = time.monotonic() + timeout(r)
    note = ""
    reader = _Reader(url)
    try:
        # Every executor registered (its heartbeat row is written after its checks pass).
        registered = f"SELECT count(*) FROM inbox_worker WHERE pid IN ({marks})"
        while reader.one(registered, pids) < len(pids):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"an executor did not start (log: var/bench/logs/{tag}-*)")
            time.sleep(0.05)
        if pg:
            bl.pg_quiesce(pg)
        if before_release is not None:
            before_release()
        cpu0, server0 = _proc_cpu(pids), bl.pg_cpu_seconds() if pg else float("nan")
        commits0 = bl.pg_commits(pg) if pg else 0
        finished0 = reader.one(_FINISHED)
        bl.run([bl.PY, bl.MANAGE, "resume", "noop", "--reason", "bench: drain"], env=env)
        if at is not None:
            at("start")
        start = time.perf_counter()
        while reader.one(_FINISHED) - finished0 < r.jobs:
            if time.monotonic() > deadline:
                note = f"timed out after {timeout(r):.0f} s"
                break
            time.sleep(0.05)
        r.wall_s = time.perf_counter() - start  # resumed → N finished (polled every 50 ms)
        if at is not None:
            at("end")
        r.cpu_s = _proc_cpu(pids) - cpu0
        if pg:
            r.server_cpu_s = bl.pg_cpu_seconds() - server0
            time.sleep(0.6)  # backends flush their statistics at most once a second
            r.commits_per_job = (bl.pg_commits(pg) - commits0) / max(r.jobs, 1)
        if not note and reader.one(_LEFT):
            note = "jobs of the scope were left unfinished"
    finally:
        reader.close()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode and not note:
                note = f"an executor exited {proc.returncode} (log: var/bench/logs/{tag}-*.log)"
        for log in logs:
            log.close()
        # A round that failed must not leave the next one paused.
        bl.run([bl.PY, bl.MANAGE, "resume", "noop", "--reason", "bench: round over"], env=env)
    s = ours_json(url, "span", "--mission", mission)
    r.done, r.span_s, r.events = s["succeeded"], s["span_s"], s["events"]
    r.joined_s = _joined(s, r)
    r.note = note
    if r.done != r.jobs:
        r.note = (r.note + "; " if r.note else "") + f"only {r.done}/{r.jobs} succeeded"


def drain_peer(url: str, r: Round) -> None:
    cmd = [str(PEER_PY), "manage.py", "db_worker", "--batch", "--no-startup-delay"]
    cmd += ["--no-reload", "--interval", "0.1", "-v", "0"]
    since = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 1))
    tag = f"peer-{r.backend}-k{r.workers}-r{r.repeat}"
    r.wall_s, r.note, cpu = _spawn_and_wait(
        [cmd] * r.workers, env=peer_env(url), cwd=PEER_DIR, tag=tag, timeout=timeout(r)
    )
    r.cpu_s = cpu - r.workers * STARTUP_CPU.get(("django-tasks-db", r.backend), 0.0)
    r.note = r.note or ""
    s = peer_json(url, "span", "--since", since)
    r.done, r.span_s = s["succeeded"], s["span_s"]
    if r.done != r.jobs:
        r.note = (r.note + "; " if r.note else "") + f"{r.done}/{r.jobs} succeeded"


def drain_pgbench(db: str, r: Round, mission: str, script: str = "pgbench_lifecycle.sql") -> None:
    """The ceiling: pgbench running ``script`` on our own tables (one job per pgbench
    transaction, or a batch of ``PGBENCH_BATCH`` for pgbench_batched.sql)."""
    import psycopg

    with psycopg.connect(bl.pg_url(db), autocommit=True) as conn:
        conn.execute((bl.BENCH / "pgbench_load.sql").read_text(), {"mission": mission, "n": r.jobs})
    bl.pg_quiesce(db)
    size = PGBENCH_BATCH if script.startswith("pgbench_batched") else 1
    per_client = r.jobs // (r.workers * size)
    r.jobs = per_client * r.workers * size
    pgbench = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
    cmd = [pgbench, "-n", "-M", "prepared", "-f", str(bl.BENCH / script)]
    cmd += ["-c", str(r.workers), "-j", str(r.workers), "-t", str(per_client), bl.pg_url(db)]
    commits0, server0 = bl.pg_commits(db), bl.pg_cpu_seconds()
    start = time.perf_counter()
    cpu_before = _children_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    r.wall_s = time.perf_counter() - start
    r.cpu_s = _children_cpu() - cpu_before
    r.server_cpu_s = bl.pg_cpu_seconds() - server0
    time.sleep(0.6)  # backends flush their statistics at exit
    r.commits_per_job = (bl.pg_commits(db) - commits0) / max(r.jobs, 1)
    if proc.returncode != 0:
        r.note = "pgbench failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    with psycopg.connect(bl.pg_url(db), autocommit=True) as conn:
        n, first, last = conn.execute(
            "SELECT count(*), min(claimed_at), max(updated_at) FROM inbox_job "
            "WHERE mission_id = %s AND state = 'SUCCEEDED'",
            [mission],
        ).fetchone()
    r.done = n
    r.span_s = (last - first).total_seconds() if n else float("nan")
    m = re.search(r"tps = ([\d.]+)", proc.stdout)
    if m:
        r.events = {"pgbench tps": round(float(m.group(1)))}


# Jobs per pgbench transaction in the batched ceiling (as the executor's --batch default).
PGBENCH_BATCH = 10


def counting_commits(url: str, r: Round, drain: Any) -> None:
    """Run ``drain()`` and record the database's commits per job and the server's CPU per job
    (PostgreSQL only). The database settles first (``pg_quiesce``): a round must not pay for
    the dead rows and dirty pages the previous round left behind."""
    name = url.rsplit("/", 1)[-1] if url.startswith("postgres") else ""
    if name:
        bl.pg_quiesce(name)
    before = bl.pg_commits(name) if name else 0
    cpu_before = bl.pg_cpu_seconds() if name else float("nan")
    drain()
    if name and r.done:
        time.sleep(0.6)  # backends flush their statistics at exit / at most once a second
        r.commits_per_job = (bl.pg_commits(name) - before) / r.done
        r.server_cpu_s = bl.pg_cpu_seconds() - cpu_before


def timeout(r: Round) -> float:
    return max(120.0, r.jobs / 20)


# --- the benchmark ----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> tuple[list[Round], list[Enqueue], dict[str, str]]:
    rounds: list[Round] = []
    enqueues: list[Enqueue] = []
    notes: dict[str, str] = {}
    direct = not bl.has_run_executor()
    if direct:
        notes["ours"] = (
            "`manage.py run_executor` was not available: our figures come from "
            "bench/ourside.py `work` (claim_next_jobs → begin_job → complete_job in K processes)"
        )
    executor_args = args.executor_args.split()
    systems = ["ours"] if args.no_tasks else ["ours", "ours-tasks"]
    if not args.no_peer:
        ensure_peer_venv()
        notes["django-tasks-db"] = peer_version()
        # Twice: on a table that keeps its earlier rounds' rows, as ours does, and on a fresh
        # table each round (its claim query slows as its table grows).
        systems += ["django-tasks-db", "django-tasks-db fresh"]
    backends = [b for b in args.backends.split(",") if b]
    if "pg" in backends and not bl.pg_available():
        notes["pg"] = f"PostgreSQL at {bl.PG_BASE} not reachable: skipped"
        backends.remove("pg")
    for backend in backends:
        urls: dict[str, str] = {}
        for system in systems:
            name = f"tp_{_db_of(system)}"
            if backend == "pg":
                bl.recreate_pg_db(bl.db_name(name))
                urls[system] = bl.pg_url(bl.db_name(name))
            else:
                path = bl.VAR / f"{bl.DB_PREFIX}_{name}.sqlite3"
                bl.fresh_sqlite(path)
                urls[system] = bl.sqlite_url(path)
            if system not in PEERS:
                bl.migrate(urls[system])
            else:
                migrate_peer(urls[system])
        for system in systems:
            probe = Round(system, backend, 1, 0, 0)
            if system in PEERS:
                drain_peer(urls[system], probe)
            else:
                tasks = system == "ours-tasks"
                drain_ours(urls[system], probe, "startup-probe", executor_args, direct, tasks)
            STARTUP_CPU[(system, backend)] = probe.cpu_s
        ceiling = backend == "pg" and not args.no_pgbench
        if ceiling:
            pgdb = bl.db_name("tp_pgbench")
            bl.recreate_pg_db(pgdb)
            bl.migrate(bl.pg_url(pgdb))
        for rep in range(1, args.repeats + 1):
            for idx, k in enumerate(args.workers):
                mode = {0: "per-commit", 1: "one-tx"}.get(idx)
                ours_mode = {0: "per-commit", 1: "one-tx", 2: "batch-1000"}.get(idx)
                mission = f"tp-{backend}-r{rep}-k{k}"
                for system in systems:
                    r = Round(system, backend, k, rep, args.jobs)
                    url = urls[system]
                    if system == "ours":
                        if ours_mode:
                            e = ours_json(
                                url,
                                "enqueue",
                                "--n",
                                str(args.jobs),
                                "--mission",
                                mission,
                                "--mode",
                                ours_mode,
                            )
                            enqueues.append(Enqueue(system, backend, ours_mode, e["per_s"]))
                        else:
                            ours_json(url, "load", "--n", str(args.jobs), "--mission", mission)
                        counting_commits(
                            url, r, partial(drain_ours, url, r, mission, executor_args, direct)
                        )
                    elif system == "ours-tasks":
                        if mode:
                            e = ours_json(
                                url, "tasks-enqueue", "--n", str(args.jobs), "--mode", mode
                            )
                            enqueues.append(Enqueue(system, backend, mode, e["per_s"]))
                        else:
                            ours_json(url, "tasks-load", "--n", str(args.jobs))
                        drain = partial(drain_ours, url, r, mission, executor_args, direct, True)
                        counting_commits(url, r, drain)
                    else:
                        if system == "django-tasks-db fresh":
                            fresh_peer(backend, urls, system)
                            url = urls[system]
                        if mode:
                            e = peer_json(url, "enqueue", "--n", str(args.jobs), "--mode", mode)
                            enqueues.append(Enqueue(system, backend, mode, e["per_s"]))
                        else:
                            peer_json(url, "load", "--n", str(args.jobs))
                        counting_commits(url, r, partial(drain_peer, url, r))
                    rounds.append(r)
                    show(r)
                    if system == "ours" and not (args.no_warm or direct):
                        # The same drain with the executors up before the jobs land.
                        w = Round("ours warm", backend, k, rep, args.jobs)
                        drain_ours_warm(url, w, f"{mission}-warm", executor_args)
                        rounds.append(w)
                        show(w)
                if ceiling:
                    for name, script in CEILINGS.items():
                        r = Round(name, backend, k, rep, args.jobs)
                        # The load and the settling are inside; CPU and commits are the run's.
                        drain_pgbench(pgdb, r, f"{mission}-{script[:-4]}", script)
                        rounds.append(r)
                        show(r)
        if args.profile:
            notes[f"profile {backend}, ours"] = profile_ours(
                urls["ours"], backend, args, executor_args, direct
            )
            if "django-tasks-db" in urls:
                notes[f"profile {backend}, django-tasks-db"] = profile_peer(
                    urls["django-tasks-db"], backend, args
                )
        if not args.keep_dbs and backend == "pg":
            for system in systems:
                bl.drop_pg_db(bl.db_name(f"tp_{_db_of(system)}"))
            if ceiling:
                bl.drop_pg_db(pgdb)
    return rounds, enqueues, notes


def _db_of(system: str) -> str:
    """Each system drains its own database (ours-tasks too: no NOOP rows beside its tasks)."""
    return {
        "ours": "ours",
        "ours-tasks": "ourtasks",
        "django-tasks-db fresh": "peerfresh",
    }.get(system, "peer")


PEERS = ("django-tasks-db", "django-tasks-db fresh")
# The two pgbench ceilings: one job per transaction, and our shape (a batch of 10 claimed in
# one transaction with its audit rows, completed in another).
CEILINGS = {
    "pgbench": "pgbench_lifecycle.sql",
    "pgbench batched": "pgbench_batched.sql",
    "pgbench batched lean": "pgbench_batched_lean.sql",
}


def migrate_peer(url: str) -> None:
    bl.run([str(PEER_PY), "manage.py", "migrate", "-v", "0"], env=peer_env(url), cwd=PEER_DIR)


def fresh_peer(backend: str, urls: dict[str, str], system: str) -> None:
    """The peer's database anew before a round (setup, not measured)."""
    name = bl.db_name(f"tp_{_db_of(system)}")
    if backend == "pg":
        bl.recreate_pg_db(name)
    else:
        bl.fresh_sqlite(bl.VAR / f"{name}.sqlite3")
    migrate_peer(urls[system])


def show(r: Round) -> None:
    bl.say(
        f"  {r.backend:6} {r.system:16} K={r.workers} rep {r.repeat}: "
        f"{r.done:,}/{r.jobs:,} in span {r.span_s:.2f} s = {r.span_rate:,.0f}/s "
        f"(wall {r.wall_s:.2f} s = {r.wall_rate:,.0f}/s; CPU/job worker "
        f"{r.cpu_ms_per_job:.2f} ms, server {r.server_cpu_ms_per_job:.2f} ms) {r.note}"
    )


def profile_ours(
    url: str, backend: str, args: argparse.Namespace, executor_args: list[str], direct: bool
) -> str:
    """One extra K=1 round under cProfile; return a short summary of where the time went."""
    import pstats

    mission = f"tp-{backend}-profile"
    ours_json(url, "load", "--n", str(args.jobs), "--mission", mission)
    out = bl.VAR / f"profile-{backend}.prof"
    if direct:
        target = [str(bl.BENCH / "ourside.py"), "work", "--scope", "noop", *executor_args]
    else:
        target = [bl.MANAGE, "run_executor", "--scope", "noop", "--exit-when-idle"]
        target += executor_args
    bl.run([bl.PY, "-m", "cProfile", "-o", str(out), *target], env=bl.django_env(url))
    return summarise_profile(pstats.Stats(str(out)), args.jobs)


def profile_peer(url: str, backend: str, args: argparse.Namespace) -> str:
    """The same for the peer: one K=1 ``db_worker --batch`` under cProfile."""
    import pstats

    peer_json(url, "load", "--n", str(args.jobs))
    out = bl.VAR / f"profile-{backend}-peer.prof"
    cmd = [str(PEER_PY), "-m", "cProfile", "-o", str(out), "manage.py", "db_worker", "--batch"]
    cmd += ["--no-startup-delay", "--no-reload", "-v", "0"]
    bl.run(cmd, env=peer_env(url), cwd=PEER_DIR)
    return summarise_profile(pstats.Stats(str(out)), args.jobs)


_DRIVER_FILES = ("psycopg/connection.py", "psycopg/client_cursor.py")
_WAITS = ("wait", "_execute_send")
_DRIVER_WAITS: set[tuple[str, str]] = set()


def _db_calls(raw: dict) -> dict[str, float]:
    """Driver-level counts and self time: statements, BEGIN/COMMIT, time blocked on the DB."""
    out = {"statements": 0.0, "begin/commit": 0.0, "db_wait_s": 0.0}
    for (file, _line, func), (_cc, nc, tt, _ct, _callers) in raw.items():
        if file.endswith("psycopg/cursor.py") and func == "execute":
            out["statements"] += nc
        elif file.endswith("psycopg/_connection_base.py") and func == "_exec_command":
            out["begin/commit"] += nc
            out["db_wait_s"] += tt
        elif (file, func) in _DRIVER_WAITS or (file.endswith(_DRIVER_FILES) and func in _WAITS):
            out["db_wait_s"] += tt
        elif file == "~" and "SQLiteCursorWrapper.execute" in func:
            out["statements"] += nc
            out["db_wait_s"] += tt
        elif file == "~" and "sqlite3.Connection" in func and "commit" in func:
            out["begin/commit"] += nc
            out["db_wait_s"] += tt
    return out


LIBRARIES = (
    ("psycopg driver (incl. waiting on PostgreSQL)", "/psycopg/"),
    ("Django ORM: SQL compiler", "/django/db/models/sql/"),
    ("Django ORM: models, querysets, expressions", "/django/db/models/"),
    ("Django database backend", "/django/db/backends/"),
    ("Django transactions", "/django/db/transaction.py"),
    ("Django, other", "/django/"),
    ("django-tasks-db", "/django_tasks_db/"),
    ("project code", "/work/"),
)


def self_time_by_library(raw: dict) -> list[tuple[str, float]]:
    """Share of self time per library: where the CPU of a worker goes."""
    shares: dict[str, float] = {}
    total = 0.0
    for (file, _line, _func), (_cc, _nc, tt, _ct, _callers) in raw.items():
        total += tt
        name = next((n for n, key in LIBRARIES if key in file), "other (C builtins, stdlib)")
        if name == "project code" and "site-packages" in file:
            name = "other (C builtins, stdlib)"
        shares[name] = shares.get(name, 0.0) + tt
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])
    return [(name, tt / total * 100) for name, tt in ranked if total][:6]


def summarise_profile(stats: Any, jobs: int) -> str:
    """Where one job's time goes: database round trips vs Python, and the hot functions."""
    raw = stats.stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    # The worker loop's run (inbox/loop.py; the executor's own before the redesign).
    loops = [
        v[3]
        for (f, _l, fn), v in raw.items()
        if f.endswith(("inbox/loop.py", "inbox/executor.py")) and fn == "run"
    ]
    loops += [v[3] for (f, _l, fn), v in raw.items() if f.endswith("ourside.py") and fn == "work"]
    loops += [v[3] for (f, _l, fn), v in raw.items() if f.endswith("db_worker.py") and fn == "run"]
    # The drain loop itself (Django start-up excluded) when it can be found.
    total = max(loops) if loops else stats.total_tt
    db = _db_calls(raw)
    rows = []
    interesting = (
        "db_worker.py",
        "django_tasks_db/models.py",
        "transitions.py",
        "executor.py",
        "audit/events.py",
        "jobtypes.py",
        "workers.py",
        "scopes.py",
        "approvals.py",
        "ourside.py",
    )
    for (file, line, func), (_cc, nc, _tt, ct, _callers) in raw.items():
        if any(file.endswith(key) for key in interesting) and nc >= jobs / 2:
            short = "/".join(Path(file).parts[-2:])
            rows.append((f"{short}:{line} {func}", nc, ct))
    rows.sort(key=lambda row: -row[2])
    python_s = total - db["db_wait_s"]
    by_library = self_time_by_library(raw)
    lines = [
        f"cProfile of one K=1 drain of {jobs:,} jobs: {total:.2f} s in the drain loop "
        f"({total / jobs * 1000:.2f} ms per job, profiler overhead included). Per job: "
        f"{db['statements'] / jobs:.1f} SQL statements (plus BEGIN/COMMIT), "
        f"{db['begin/commit'] / jobs:.1f} driver transaction commands; "
        f"{db['db_wait_s'] / jobs * 1000:.2f} ms blocked in the "
        f"database driver, {python_s / jobs * 1000:.2f} ms in Python (ORM, transitions, "
        "executor).",
        "",
        "Self time by library (whole process): "
        + ", ".join(f"{name} {share:.0f} %" for name, share in by_library)
        + ".",
        "",
        bl.table(
            ["function (inclusive)", "calls", "s", "µs per job"],
            # Formatted here: the table's default of one decimal printed most rows as 0.0 ms.
            [(name, nc, f"{ct:.2f}", f"{ct / jobs * 1e6:,.1f}") for name, nc, ct in rows[:14]],
        ),
    ]
    return "\n".join(lines)


# --- report -----------------------------------------------------------------------------------


def report(
    rounds: list[Round], enqueues: list[Enqueue], notes: dict[str, str], args: argparse.Namespace
) -> list[str]:
    by: dict[tuple[str, str, int], list[Round]] = defaultdict(list)
    for r in rounds:
        by[(r.backend, r.system, r.workers)].append(r)
    med_span = {key: bl.median(r.span_rate for r in rs) for key, rs in by.items()}
    med_wall = {key: bl.median(r.wall_rate for r in rs) for key, rs in by.items()}
    out: list[str] = []
    out.append(
        f"N = {args.jobs:,} jobs per round, K = {', '.join(map(str, args.workers))}, "
        f"{args.repeats} repeats; figures are medians. Drain rate = jobs / (last completion − "
        "first claim) read from the database; wall = process start → last process exit."
    )
    out.append("")
    out.append("## Drain rate (jobs/s)")
    out.append("")
    rows = []
    for (backend, system, k), rs in sorted(by.items()):
        rows.append(
            (
                backend,
                system,
                k,
                round(med_span[(backend, system, k)]),
                round(med_wall[(backend, system, k)]),
                " / ".join(f"{r.span_rate:,.0f}" for r in rs),
                fmt_commits(bl.median(r.commits_per_job for r in rs)),
                fmt_commits(bl.median(r.cpu_ms_per_job for r in rs)),
                fmt_commits(bl.median(r.server_cpu_ms_per_job for r in rs)),
                "; ".join(sorted({r.note for r in rs if r.note})) or "",
            )
        )
    out.append(
        bl.table(
            [
                "db",
                "system",
                "K",
                "median span rate",
                "median wall rate",
                "each repeat (span)",
                "commits/job",
                "worker CPU ms/job",
                "server CPU ms/job",
                "notes",
            ],
            rows,
        )
    )
    out.append("")
    out.append("## Ratios (medians of the same session)")
    out.append("")
    out.append(
        "Every peer ratio twice: against django-tasks-db on a table that keeps its earlier "
        "rounds' rows (the same history as ours) and on a fresh table each round. The ceilings: "
        "pgbench running one job per transaction; our shape (a batch of "
        f"{PGBENCH_BATCH} claimed and begun with their CLAIMED, STARTED and AUTHORIZED rows in "
        "one transaction, completed with their EXECUTED and SUCCEEDED rows in another: our "
        "executor's statements and rows, without Python); and a lean batched shape with one "
        "audit row per step. Ours against a ceiling twice: `ours` (cold: the executors started "
        "with the jobs waiting, their Python start-up inside the span, started as the peer is) "
        "and `ours warm` (the executors up before the jobs are released, as in production and as "
        "pgbench's clients are). Before every PostgreSQL round its database settles: VACUUM "
        "(ANALYZE) and a CHECKPOINT (the server runs with autovacuum off; the round before must "
        "not bill the next one)."
    )
    out.append("")
    rows = []
    conservative = []
    backends = sorted({r.backend for r in rounds})

    def rate(backend: str, system: str, k: int) -> float:
        return med_span.get((backend, system, k), float("nan"))

    def lower(*values: float) -> float:
        known = [v for v in values if v == v]
        return min(known) if known else float("nan")

    def cell(value: float, pct: bool = False) -> str:
        if value != value:
            return "n/a"
        return f"{value * 100:.0f} %" if pct else f"{value:.2f}×"

    for backend in backends:
        for k in args.workers:
            ours, tasks = rate(backend, "ours", k), rate(backend, "ours-tasks", k)
            warm = rate(backend, "ours warm", k)
            peer, fresh = (
                rate(backend, "django-tasks-db", k),
                rate(backend, "django-tasks-db fresh", k),
            )
            ceil, batched = rate(backend, "pgbench", k), rate(backend, "pgbench batched", k)
            lean = rate(backend, "pgbench batched lean", k)
            vs_peer = [bl.ratio(ours, x) for x in (peer, fresh) if x == x]
            rows.append(
                (
                    backend,
                    k,
                    round(ours),
                    round(warm) if warm == warm else "n/a",
                    round(tasks) if tasks == tasks else "n/a",
                    cell(bl.ratio(ours, peer)),
                    cell(bl.ratio(ours, fresh)),
                    cell(bl.ratio(tasks, fresh)),
                    cell(bl.ratio(warm, ceil), pct=True),
                    cell(bl.ratio(warm, batched), pct=True),
                    cell(bl.ratio(ours, batched), pct=True),
                    cell(bl.ratio(warm, lean), pct=True),
                )
            )
            conservative.append(
                (
                    backend,
                    k,
                    cell(min(vs_peer)) if vs_peer else "n/a",
                    cell(lower(bl.ratio(warm, batched), bl.ratio(ours, batched)), pct=True),
                )
            )
    out.append(
        bl.table(
            [
                "db",
                "K",
                "ours",
                "ours warm",
                "ours-tasks",
                "ours/peer (history)",
                "ours/peer (fresh)",
                "ours-tasks/peer (fresh)",
                "warm/ceiling (1 job)",
                "warm/ceiling (batched)",
                "cold/ceiling (batched)",
                "warm/ceiling (batched lean)",
            ],
            rows,
        )
    )
    out.append("")
    out.append(
        "Summary, the conservative ratio of each pair (the lower peer ratio; the lower of the "
        "warm and the cold ratio to the batched ceiling):"
    )
    out.append("")
    out.append(
        bl.table(["db", "K", "ours/peer (lower)", "ours/batched ceiling (lower)"], conservative)
    )
    out.append("")
    out.append(
        "ours-tasks/peer is the exact task-backend comparison: `noop.enqueue()` through "
        "`django.tasks` on both sides, the same no-op task, the same database settings."
    )
    out.append("")
    out.append(
        "Goals (issue 15): PostgreSQL K=4 ours ≥ 60 % of the batched ceiling; SQLite K=1 ≥ "
        "1,500 jobs/s at N = 20,000 on a table that keeps the earlier rounds' rows."
    )
    out.append("")
    out.append("## Enqueue (jobs/s, median)")
    out.append("")
    eby: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for e in enqueues:
        eby[(e.backend, e.system, e.mode)].append(e.per_s)
    out.append(
        bl.table(
            ["db", "system", "mode", "median enqueue/s", "each repeat"],
            [
                (b, s, m, round(bl.median(v)), " / ".join(f"{x:,.0f}" for x in v))
                for (b, s, m), v in sorted(eby.items())
            ],
        )
    )
    out.append("")
    trail = [r for r in rounds if r.system == "ours" and r.events]
    if trail:
        r = trail[-1]
        out.append(
            f"Audit trail written by ours (last round, {r.jobs:,} jobs): "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(r.events.items()))
        )
        out.append("")
    for key, value in notes.items():
        if key.startswith("profile"):
            out += [f"## {key.capitalize()}", "", value, ""]
        else:
            out += [f"- {key}: {value}"]
    return out


def fmt_commits(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f}"


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per round (20,000)")
    parser.add_argument("--workers", default="1,2,4", help="K values, comma-separated (1,2,4)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per K (3)")
    parser.add_argument("--backends", default="pg,sqlite", help="pg,sqlite (both)")
    parser.add_argument(
        "--executor-args", default="", help="extra run_executor flags, e.g. '--batch 20' (none)"
    )
    parser.add_argument("--no-peer", action="store_true", help="skip django-tasks-db")
    parser.add_argument("--no-pgbench", action="store_true", help="skip the pgbench ceiling")
    parser.add_argument(
        "--no-warm",
        action="store_true",
        help="skip the warm rounds (executors running before the jobs land)",
    )
    parser.add_argument(
        "--no-tasks", action="store_true", help="skip the tasks round (ours through django.tasks)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="add one cProfile'd K=1 round per database and summarise it",
    )
    parser.add_argument("--keep-dbs", action="store_true", help="keep the PostgreSQL databases")
    args = parser.parse_args()
    args.workers = [int(k) for k in args.workers.split(",") if k]
    lcm = 4 if max(args.workers) <= 4 else max(args.workers)
    args.jobs = max(lcm, args.jobs - args.jobs % lcm)
    return args


def main() -> None:
    args = parse_args()
    os.chdir(bl.ROOT)
    facts = bl.machine_facts()
    bl.say(f"throughput: N={args.jobs:,} K={args.workers} repeats={args.repeats}")
    rounds, enqueues, notes = run(args)
    bl.VAR.mkdir(parents=True, exist_ok=True)
    (bl.VAR / "throughput-last.json").write_text(
        json.dumps(
            {
                "rounds": [vars(r) for r in rounds],
                "enqueues": [vars(e) for e in enqueues],
                "notes": notes,
            },
            default=str,
        )
    )
    body = report(rounds, enqueues, notes, args)
    text = "\n".join(body)
    bl.say()
    bl.say(text)
    facts["django-tasks-db"] = notes.get("django-tasks-db", "not run")
    facts["executor flags"] = args.executor_args or "(defaults)"
    path = bl.write_result(
        "throughput", "Throughput: ours vs django-tasks-db vs pgbench", body, facts
    )
    bl.say(f"\nwrote {path.relative_to(bl.ROOT)}")


if __name__ == "__main__":
    main()
