"""SQLite single-job enqueue: Django's BEGIN/COMMIT path against the project's engine.

``core.backends.sqlite3`` sends an ``atomic()`` block's ``BEGIN IMMEDIATE`` and ``COMMIT``
straight to the driver while no query log or execute wrapper watches. This measures what that
saves on the path it was made for, ``create_job`` with one commit per job, in one process on
one fresh file: rounds of --jobs enqueues taken in turns, one with Django's own two methods
put back, one with the engine's, the order reversed every other pair. It reports wall time and
the process's CPU time a job, each pair's ratio, and the sign test's 95 % interval of the
median ratio, twice: with ``synchronous=FULL`` (as shipped) and with ``synchronous=OFF`` (not
an option; without the fsync's noise it shows the CPU saved).

    .venv/bin/python bench/sqlite_txn.py                 # 20 pairs of 500 in each mode
    .venv/bin/python bench/sqlite_txn.py --pairs 7 --jobs 200
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import benchlib as bl
import enqueue_pairs as ep

MODES = ("FULL", "OFF")


def child(mode: str, pairs: int, jobs: int) -> dict[str, list[float]]:
    """Inside the project: the interleaved rounds, each side's µs a job (wall and CPU)."""
    from django.db import connection
    from django.db.backends.sqlite3.base import DatabaseWrapper as Django
    from ourside import noop_document  # sets the project up (path, settings, django.setup)

    from core.backends.sqlite3.base import DatabaseWrapper as Engine
    from inbox.transitions import create_job

    paths = {
        "engine": (Engine._start_transaction_under_autocommit, Engine._commit),
        "django": (Django._start_transaction_under_autocommit, Django._commit),
    }
    connection.ensure_connection()
    connection.connection.execute(f"PRAGMA synchronous={mode}")
    mission, done = f"txn-{mode.lower()}", 0
    out: dict[str, list[float]] = {f"{s}_{k}": [] for s in paths for k in ("wall", "cpu")}

    def one_round(side: str) -> tuple[float, float]:
        nonlocal done
        Engine._start_transaction_under_autocommit, Engine._commit = paths[side]
        docs = [noop_document(mission, done + i) for i in range(jobs)]
        done += jobs
        wall, cpu = time.perf_counter(), time.process_time()
        for doc in docs:
            create_job(doc, requested_by="bench")
        return (time.perf_counter() - wall) / jobs * 1e6, (time.process_time() - cpu) / jobs * 1e6

    try:
        one_round("django")  # warm-up, not counted
        for n in range(pairs):
            for side in ("engine", "django") if n % 2 == 0 else ("django", "engine"):
                wall, cpu = one_round(side)
                out[f"{side}_wall"].append(wall)
                out[f"{side}_cpu"].append(cpu)
    finally:
        Engine._start_transaction_under_autocommit, Engine._commit = paths["engine"]
    return out


def report(got: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> list[str]:
    rows = []
    for mode in MODES:
        for what in ("wall", "cpu"):
            django, engine = got[mode][f"django_{what}"], got[mode][f"engine_{what}"]
            ratios = [d / e for d, e in zip(django, engine, strict=True)]
            low, high, coverage = ep.median_interval(ratios)
            rows.append(
                [
                    f"synchronous={mode}, {'wall' if what == 'wall' else 'CPU'}",
                    f"{statistics.median(django):.0f}",
                    f"{statistics.median(engine):.0f}",
                    f"{statistics.median(ratios):.3f}",
                    f"{low:.3f} - {high:.3f} ({coverage * 100:.1f} %)",
                    f"{sum(r > 1 for r in ratios)} of {len(ratios)}",
                ]
            )
    return [
        f"SQLite, one fresh file, {args.pairs} pairs of {args.jobs:,} single-job `create_job` "
        "calls (one commit each) in each mode; within a pair Django's path and the engine's "
        "take turns, the order reversed every other pair.",
        "",
        bl.table(
            [
                "mode, time",
                "Django's path µs/job",
                "engine µs/job",
                "speed-up (median of pairs)",
                "95 % interval of the median (coverage)",
                "pairs the engine won",
            ],
            rows,
        ),
        "",
        "A speed-up above 1 means the engine's path took less time a job. CPU is the process's "
        "own (user and system, the kernel's part of the fsync included).",
    ]


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--pairs", type=int, default=20, help="pairs of rounds per mode (20)")
    parser.add_argument("--jobs", type=int, default=500, help="enqueues per round (500)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pairs < 1 or args.jobs < 1:
        parser.error("--pairs and --jobs must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.pairs, args.jobs)))
        return
    os.chdir(bl.ROOT)
    facts = bl.machine_facts()
    bl.say(f"sqlite txn path: {args.pairs} pairs of {args.jobs:,} in each of {', '.join(MODES)}")
    got = {}
    for mode in MODES:
        path = bl.VAR / f"{bl.db_name('txn')}-{mode.lower()}.sqlite3"
        bl.fresh_sqlite(path)
        url = bl.sqlite_url(path)
        bl.migrate(url)
        cmd = [bl.PY, __file__, "--child", mode, "--pairs", str(args.pairs)]
        out = bl.run([*cmd, "--jobs", str(args.jobs)], env=bl.django_env(url))
        got[mode] = json.loads(out.strip().splitlines()[-1])
    body = report(got, args)
    bl.say()
    bl.say("\n".join(body))
    path = bl.write_result(
        "sqlite-txn",
        "SQLite single-job enqueue: Django's BEGIN/COMMIT path and the engine's",
        body,
        facts,
    )
    bl.say(f"\nwrote {path.relative_to(bl.ROOT)}")


if __name__ == "__main__":
    main()
