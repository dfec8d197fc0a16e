"""The benchmarks' shared ground: paths, databases, subprocess environments, source trees,
machine facts, tables and result files.

Every script imports this module first (``from lib import base as bl``). It puts the repository
root first on ``sys.path``, so a script run as a plain file (``.venv/bin/python
bench/throughput.py``) imports the project's ``console`` app, never ``bench/console.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
LIB = BENCH / "lib"
VAR = ROOT / "var" / "bench"
# Raw results: written by every run, never committed (var/ is ignored by git).
RESULTS = VAR / "results"
LOGS = VAR / "logs"
PY = sys.executable
MANAGE = str(ROOT / "manage.py")

if str(ROOT) in sys.path:
    sys.path.remove(str(ROOT))
sys.path.insert(0, str(ROOT))

# Where PostgreSQL lives and how benchmark databases are named (override per run).
PG_BASE = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432").rstrip("/")
DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "bench")

# Production-like settings for every process we start: no per-query debug log, quiet logging,
# persistent connections (the project's own default of 60 s, shared by the peer). No process
# writes bytecode: each tree's modules are compiled once before the runs (``Tree.compile``), as
# pip compiled Django and the peer at install time, so no measured start compiles source.
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


def times(value: float) -> str:
    """A ratio as ``1.23×`` (``n/a`` when unknown)."""
    return "n/a" if value != value else f"{value:.2f}×"


def pct(value: float) -> str:
    """A ratio as a percentage (``n/a`` when unknown)."""
    return "n/a" if value != value else f"{value * 100:.1f} %"


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


def require_pg(script: str) -> None:
    if not pg_available():
        raise SystemExit(f"{script}: PostgreSQL at {PG_BASE} is not reachable")


def recreate_pg_db(name: str) -> None:
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_pg_db(name: str) -> None:
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
    background processes included. NaN where /proc cannot tell (not Linux, or a remote server)."""
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


def proc_cpu(pids: Iterable[int]) -> float:
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


def pg_quiesce(name: str, timeout: float = 120.0) -> float:
    """Let database ``name`` settle before a measured round, as a production server would
    between two bursts: ``VACUUM (ANALYZE)`` (the dead rows and stale statistics of the last
    rounds; a server with ``autovacuum = off`` would otherwise drain a table fuller of dead
    entries every round), a ``CHECKPOINT`` (dirty pages written now, not during the next
    drain), then no autovacuum worker running. Returns the seconds it took; nothing of it is
    inside a measured span."""
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


def fresh_sqlite(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def fresh_db(backend: str, name: str) -> str:
    """A new empty database ``name`` on ``backend`` (``pg`` or ``sqlite``); its URL."""
    if backend == "pg":
        recreate_pg_db(name)
        return pg_url(name)
    path = VAR / f"{name}.sqlite3"
    fresh_sqlite(path)
    return sqlite_url(path)


def drop_db(url: str) -> None:
    """Drop a PostgreSQL database made by ``fresh_db`` (SQLite files stay under var/bench/)."""
    if url.startswith("postgres"):
        drop_pg_db(url.rsplit("/", 1)[-1])


def django_env(database_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(BASE_ENV)
    env["DATABASE_URL"] = database_url
    env.update(extra)
    return env


def run(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 3600,
) -> str:
    """Run a command, return its stdout; on failure show its stderr and stop."""
    proc = subprocess.run(
        list(cmd),
        env=env,
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout


def migrate(database_url: str) -> None:
    """Migrate a database with this checkout's schema (see ``Tree.migrate`` for another's)."""
    OWN.migrate(database_url)


# --- source trees -----------------------------------------------------------------------------

# The project's own packages, compiled once per tree before any measured process starts.
PROJECT_PACKAGES = ("audit", "inbox", "runs", "console", "core", "config", "bench")
TREE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,19}$")


@dataclass(frozen=True)
class Tree:
    """A checkout of the project that a benchmark runs: its root, its interpreter (the tree's
    own ``.venv`` when it has one, else this one) and a short name for its databases and rows.
    Every process of a tree runs from its root, so ``manage.py`` imports that tree's code."""

    name: str
    root: Path
    python: str

    @classmethod
    def parse(cls, spec: str) -> Tree:
        """``NAME=PATH`` from the command line; a clear error for anything else."""
        name, sep, path = spec.partition("=")
        if not sep or not TREE_NAME.match(name):
            raise SystemExit(
                f"--tree {spec!r}: expected NAME=PATH, NAME lower-case letters, digits and _"
            )
        root = Path(path).expanduser().resolve()
        if not (root / "manage.py").is_file():
            raise SystemExit(f"--tree {spec!r}: {root} has no manage.py")
        venv = root / ".venv" / "bin" / "python"
        return cls(name, root, str(venv) if venv.exists() else PY)

    @property
    def manage(self) -> list[str]:
        return [self.python, str(self.root / "manage.py")]

    def env(self, database_url: str, **extra: str) -> dict[str, str]:
        env = django_env(database_url, VAULT_ROOT=str(VAR / f"vault-{self.name}"), **extra)
        env.pop("PYTHONPATH", None)
        env.pop("DJANGO_SETTINGS_MODULE", None)
        return env

    def run(self, args: Sequence[str], database_url: str, **extra: str) -> str:
        """``manage.py ARGS`` of this tree against ``database_url``; its stdout."""
        return run([*self.manage, *args], env=self.env(database_url, **extra), cwd=self.root)

    def migrate(self, database_url: str) -> None:
        self.run(["migrate", "-v", "0"], database_url)

    def side(self, database_url: str, *args: str) -> dict[str, Any]:
        """One call of ``lib/ourside.py`` inside this tree (its code, its interpreter): the
        JSON object it prints."""
        env = self.env(database_url, BENCH_TREE=str(self.root))
        out = run([self.python, str(LIB / "ourside.py"), *args], env=env, cwd=self.root)
        return json.loads(out.strip().splitlines()[-1])

    def compile(self) -> str:
        """Compile the tree's packages with its interpreter (into their ``__pycache__``
        folders, which git ignores): a measured process never compiles source, and Python
        checks each file against its source at import, so an edited module never runs stale."""
        dirs = [str(self.root / p) for p in PROJECT_PACKAGES if (self.root / p).is_dir()]
        proc = subprocess.run(
            [self.python, "-m", "compileall", "-q", "-j", "1", *dirs],
            capture_output=True,
            check=False,
        )
        return "compiled before the runs" if proc.returncode == 0 else "compiling failed"

    def facts(self) -> dict[str, str]:
        """What identifies this tree's code and interpreter in a result."""
        version = subprocess.run(
            [
                self.python,
                "-c",
                "import django, platform; print(platform.python_version(), django.get_version())",
            ],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.root,
        ).stdout.split()
        python, django = [*version, "?", "?"][:2]
        return {
            f"tree {self.name}": f"{self.root} at {git_commit(self.root)}",
            f"tree {self.name} Python / Django": f"{python} ({self.python}) / {django}",
            f"tree {self.name} bytecode": self.compile(),
        }


OWN = Tree("ours", ROOT, PY)


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
        "max_connections",
        "jit",
        "autovacuum",
    )
    try:
        with _pg_admin() as conn:
            return {f"PostgreSQL {n}": str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}
    except Exception as exc:
        return {"PostgreSQL": f"not reachable ({exc.__class__.__name__})"}


def git_commit(root: Path = ROOT) -> str:
    """The short commit of a checkout, ``+changes`` when its tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + (" +changes" if dirty else "")


def machine_facts(trees: Sequence[Tree] = (OWN,)) -> dict[str, str]:
    """The run's conditions for its result file: call it first (the load average at start, and
    every tree's bytecode compiled before any measured process)."""
    try:
        import psycopg

        psycopg_version = psycopg.__version__
    except ImportError:
        psycopg_version = "not installed"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    facts = {
        "date (UTC)": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "cores (nproc)": str(os.cpu_count()),
        "CPU": _cpu_model(),
        "RAM": _meminfo_gib(),
        "load average (1/5/15 min) at start": " / ".join(f"{x:.2f}" for x in load),
        "OS": platform.platform(),
        "psycopg (this interpreter)": psycopg_version,
        "SQLite": sqlite3.sqlite_version,
        "pgbench": shutil.which("pgbench") or "not found",
    }
    for tree in trees:
        facts.update(tree.facts())
    facts.update(pg_facts())
    facts["settings used"] = (
        f"DJANGO_DEBUG=0, LOG_LEVEL=WARNING, CONN_MAX_AGE={CONN_MAX_AGE} (persistent, health "
        "checks on); SQLite: the project's WAL, synchronous=FULL, IMMEDIATE, 30 s busy timeout"
    )
    return facts


def utc_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def write_result(
    name: str, title: str, body: Sequence[str], facts: dict[str, str], raw: Any = None
) -> Path:
    """Write ``var/bench/results/<name>-<timestamp>.md`` (the tables, then the machine facts)
    and, given ``raw``, the same name with ``.json`` beside it. Never committed."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{utc_stamp()}.md"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    facts = {**facts, "load average at end": " / ".join(f"{x:.2f}" for x in load)}
    lines = [f"# {title}", "", *body, "", "## Machine and settings", ""]
    lines += [table(["fact", "value"], facts.items()), ""]
    path.write_text("\n".join(lines))
    if raw is not None:
        path.with_suffix(".json").write_text(json.dumps(raw, default=str, indent=1))
    return path


def finish(name: str, title: str, body: Sequence[str], facts: dict[str, str], raw: Any = None):
    """Print the report and write it (``write_result``); say where."""
    say()
    say("\n".join(body))
    path = write_result(name, title, body, facts, raw)
    say(f"\nwrote {path.relative_to(ROOT)}")


def arg_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring's first paragraph as the description, the rest
    (what it measures, example commands) as the epilog, laid out as written."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 1)[1] if "\n\n" in doc else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def say(text: str = "") -> None:
    print(text, flush=True)
