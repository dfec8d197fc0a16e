"""A real process that holds a database write lock until told to let go.

SQLite: ``BEGIN IMMEDIATE`` (the one write lock; every other writer waits on its busy timeout).
PostgreSQL: ``LOCK TABLE … IN EXCLUSIVE MODE`` on the named tables (reads go on, writes wait).
The holder prints ``locked`` once it holds the lock and lets go when its stdin closes, or after
``--hold`` seconds at the latest, so a failed test can never leave it behind for long.

    with hold_write_lock(url) as holder:
        ...  # every writer is blocked here
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve()


@contextmanager
def hold_write_lock(
    url: str, *, tables: tuple[str, ...] = ("inbox_job",), hold: float = 300
) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE), url, "--hold", str(hold), *[f"--table={t}" for t in tables]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip() if proc.stdout else ""
        if line != "locked":
            proc.kill()
            raise AssertionError(f"the lock holder did not take the lock: {line!r} {proc.stderr}")
        yield proc
    finally:
        try:
            proc.communicate(timeout=30)  # closes stdin (the holder lets go) and the pipes
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=30)


def _main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--hold", type=float, default=300)
    parser.add_argument("--table", action="append", default=[])
    args = parser.parse_args()
    import select

    if args.url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(args.url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
    else:
        import psycopg

        conn = psycopg.connect(args.url)
        for table in args.table:
            conn.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
    print("locked", flush=True)
    select.select([sys.stdin], [], [], args.hold)
    conn.rollback()
    conn.close()


if __name__ == "__main__":
    _main()
