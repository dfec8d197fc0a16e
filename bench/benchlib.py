"""Shared helpers for the benchmark scripts: databases, subprocess environments, machine facts,
tables and result files.

Every benchmark imports this module first; it puts the repository root on ``sys.path`` so the
scripts run as plain files (``.venv/bin/python bench/throughput.py``) and can still import the
project's packages in their helper subprocesses.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
VAR = ROOT / "var" / "bench"
RESULTS = BENCH / "results"
PY = sys.executable
MANAGE = str(ROOT / "manage.py")

# The repository root goes first: bench/console.py must not shadow the ``console`` app.
if str(ROOT) in sys.path:
    sys.path.remove(str(ROOT))
sys.path.insert(0, str(ROOT))

# Where PostgreSQL lives and how benchmark databases are named (override per run).
PG_BASE = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432").rstrip("/")
DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "bench")

# Production-like settings for every process we start: no per-query debug log, quiet logging,
# persistent connections (the project's own default of 60 s, shared by the peer).
CONN_MAX_AGE = os.environ.get("CONN_MAX_AGE", "60")
BASE_ENV = {
    "DJANGO_DEBUG": "0",
    "LOG_LEVEL": "WARNING",
    "CONN_MAX_AGE": CONN_MAX_AGE,
    "DJANGO_ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
    "PYTHONDONTWRITEBYTECODE": "1",
}


# --- numbers and tables -----------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    data = [v for v in values if v == v]  # drop NaN
    return statistics.median(data) if data else float("nan")


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (p50, p95) of a sample."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.4999)))
    return ordered[rank - 1]


def fmt(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        if value != value:
            return "n/a"
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def ratio(ours: float, theirs: float) -> float:
    if not theirs or theirs != theirs or ours != ours:
        return float("nan")
    return ours / theirs


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table (printed as is: it reads fine in a terminal too)."""
    text_rows = [[fmt(c) if not isinstance(c, str) else c for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(list(headers)), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(row) for row in text_rows]
    return "\n".join(out)


# --- databases ------------------------------------------------------------------------------


def db_name(suffix: str) -> str:
    return f"{DB_PREFIX}_{suffix}"


def pg_url(name: str) -> str:
    return f"{PG_BASE}/{name}"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _pg_admin():  # -> psycopg.Connection
    import psycopg

    return psycopg.connect(pg_url("postgres"), autocommit=True, connect_timeout=5)


def pg_available() -> bool:
    try:
        with _pg_admin() as conn:
            conn.execute("SELECT 1")
        return True
    except Exception:
        return False


def recreate_pg_db(name: str) -> None:
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def pg_commits(name: str) -> int:
    """Committed transactions of a database so far (pg_stat_database.xact_commit)."""
    with _pg_admin() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()
        return int(row[0]) if row else 0


def pg_cpu_seconds() -> float:
    """CPU seconds (user + system) PostgreSQL's processes have used so far: every live server
    process plus what the postmaster has collected from its exited children (the backends of
    workers that already disconnected). The difference over a round is the server's CPU for it,
    background processes (WAL writer, checkpointer, autovacuum) included. NaN where /proc
    cannot tell (not Linux, or PostgreSQL on another host)."""
    procs: dict[int, tuple[int, int, int]] = {}  # pid -> (ppid, own ticks, reaped children)
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        if not raw[raw.index("(") + 1 : raw.rindex(")")].startswith("postgres"):
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        ppid, utime, stime, cutime, cstime = (int(fields[i]) for i in (1, 11, 12, 13, 14))
        procs[int(entry.name)] = (ppid, utime + stime, cutime + cstime)
    if not procs:
        return float("nan")
    ticks = 0
    for ppid, own, reaped in procs.values():
        ticks += own
        if ppid not in procs:  # the postmaster: it reaps every backend that exited
            ticks += reaped
    return ticks / os.sysconf("SC_CLK_TCK")


def pg_quiesce(name: str, timeout: float = 120.0) -> float:
    """Let database ``name`` settle before a measured round, as a production server would
    between two bursts: ``VACUUM (ANALYZE)`` (the dead rows and stale statistics the last rounds
    left; this machine's server runs with ``autovacuum = off``, so nothing else ever removes
    them and every round would drain a table fuller of dead entries than the one before), a
    ``CHECKPOINT`` (the dirty pages written now, not during the next drain), then no autovacuum
    worker running where autovacuum is on. Returns the seconds it took. Every system's round
    starts from the same calm; nothing of it is inside a measured span."""
    import time

    import psycopg

    start = time.monotonic()
    with psycopg.connect(pg_url(name), autocommit=True, connect_timeout=5) as conn:
        conn.execute("VACUUM (ANALYZE)")
        conn.execute("CHECKPOINT")
        while time.monotonic() - start < timeout:
            busy = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
            ).fetchone()[0]
            if not busy:
                break
            time.sleep(0.25)
    return time.monotonic() - start


def drop_pg_db(name: str) -> None:
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fresh_sqlite(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def django_env(database_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(BASE_ENV)
    env["DATABASE_URL"] = database_url
    env.update(extra)
    return env


def migrate(database_url: str) -> None:
    run([PY, MANAGE, "migrate", "-v", "0"], env=django_env(database_url))


def run(cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run a command, return its stdout; on failure show its stderr and stop."""
    proc = subprocess.run(
        list(cmd), env=env, cwd=cwd or ROOT, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout


def has_run_executor() -> bool:
    """True once the project has ``manage.py run_executor`` (the executors issue)."""
    proc = subprocess.run(
        [PY, MANAGE, "help", "run_executor"],
        env=django_env(sqlite_url(VAR / "probe.sqlite3")),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode == 0


def executor_command(extra: Sequence[str] = ()) -> tuple[list[str], bool]:
    """The drain command for one process, and whether it is the fallback loop."""
    if has_run_executor():
        return [PY, MANAGE, "run_executor", "--scope", "noop", "--exit-when-idle", *extra], False
    return [PY, str(BENCH / "ourside.py"), "work", "--scope", "noop", *extra], True


# --- machine facts and result files -----------------------------------------------------------


def _meminfo_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def pg_facts() -> dict[str, str]:
    names = (
        "server_version",
        "shared_buffers",
        "synchronous_commit",
        "fsync",
        "wal_level",
        "max_connections",
        "work_mem",
        "effective_cache_size",
        "random_page_cost",
        "jit",
        "autovacuum",
    )
    try:
        with _pg_admin() as conn:
            return {f"PostgreSQL {n}": str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}
    except Exception as exc:
        return {"PostgreSQL": f"not reachable ({exc.__class__.__name__})"}


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return "unknown"


# The project's own packages: run from the source tree, not installed.
PROJECT_PACKAGES = ("audit", "inbox", "runs", "console", "core", "config", "bench")


def compile_project() -> str:
    """Compile the project's modules to bytecode once, before any measured process starts.

    Every process a benchmark starts runs with ``PYTHONDONTWRITEBYTECODE=1`` (they write
    none of their own), so without this each executor compiled the project's
    source (about 40 modules, ``inbox/transitions.py`` the largest) on every start: about
    0.3 s of CPU that a cold round billed four times at K = 4. ``machine_facts`` calls it, and
    every benchmark calls that first. The peer and Django are installed by pip,
    which compiles them at install time; this gives our modules the same footing. The files go
    to the usual ``__pycache__`` folders (ignored by git); Python checks each against its
    source's size and time at import, so an edited module is never run stale.
    """
    import compileall

    ok = all(
        compileall.compile_dir(str(ROOT / package), quiet=1, workers=1)
        for package in PROJECT_PACKAGES
    )
    return (
        "compiled before the runs"
        if ok
        else "compiling failed: the sources were compiled at each start"
    )


def machine_facts() -> dict[str, str]:
    """The run's conditions for its result file (and the bytecode compiled: one of them)."""
    import django

    try:
        import psycopg

        psycopg_version = psycopg.__version__
    except ImportError:
        psycopg_version = "not installed"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    facts = {
        "date (UTC)": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "git commit": git_commit(),
        "cores (nproc)": str(os.cpu_count()),
        "CPU": _cpu_model(),
        "RAM": _meminfo_gib(),
        "load average (1/5/15 min) at start": " / ".join(f"{x:.2f}" for x in load),
        "OS": platform.platform(),
        "Python": platform.python_version(),
        "Django": django.get_version(),
        "psycopg": psycopg_version,
        "SQLite": sqlite3.sqlite_version,
        "pgbench": shutil.which("pgbench") or "not found",
        "project bytecode": compile_project(),
    }
    facts.update(pg_facts())
    facts["settings used"] = (
        "DJANGO_DEBUG=0, LOG_LEVEL=WARNING, CONN_MAX_AGE="
        f"{CONN_MAX_AGE} (persistent, health checks on); SQLite: WAL, synchronous=FULL, "
        "transaction_mode=IMMEDIATE, busy_timeout=30 s (the project's defaults)"
    )
    return facts


def utc_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def write_result(name: str, title: str, body: Sequence[str], facts: dict[str, str]) -> Path:
    """Write ``bench/results/<name>-<timestamp>.md``: the tables, then the machine facts."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{utc_stamp()}.md"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    facts = {**facts, "load average at end": " / ".join(f"{x:.2f}" for x in load)}
    lines = [f"# {title}", "", *body, "", "## Machine and settings", ""]
    lines += [table(["fact", "value"], facts.items()), ""]
    path.write_text("\n".join(lines))
    return path


def arg_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring's first paragraph as the description, the rest
    (what it measures, example commands) as the epilog, laid out as written."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def say(text: str = "") -> None:
    print(text, flush=True)
