"""Run every benchmark with small defaults (`make bench`): a few minutes on a 2-core machine.

Each benchmark prints its table and writes bench/results/<name>-<timestamp>.md. The full-size
runs are the scripts' own defaults (see bench/README.md); this runner only shrinks them:

    throughput  --jobs 400 (K = 1, 2, 4; 3 repeats; PostgreSQL and SQLite; peers included)
    enqueue_pairs --pairs 7 --jobs 300 --history 3000 (SQLite single-job enqueue against the
                peer in interleaved pairs)
    sqlite_txn  --pairs 7 --jobs 200 (SQLite single-job enqueue: Django's BEGIN/COMMIT path
                against the project's engine, interleaved)
    sqlite_schema_ab --pairs 7 --jobs 200 --history 1000 (SQLite single-job enqueue with the
                audit type index as before audit 0007 against the shipped schema, in pairs)
    ceiling_pairs --pairs 3 --jobs 2000 (PostgreSQL, K = 4: ours warm and cold against the
                batched ceiling in interleaved pairs)
    console     --jobs 20000 --events 60000 (30 requests per page)
    memory      --jobs 5000 (RSS after 1,000 vs after 5,000 jobs)
    api_enqueue --batches 3 --repeats 1 (POST lists of 1,000 jobs through gunicorn)
    prune       --jobs 50000 (delete the finished ones older than a day, in batches of 500)
    sweeps      --jobs 50000 --lapsed 2000 --unknown 200 --repeats 1 (sweep and auto-reconcile)
    txn_lengths --jobs 300 (SQLite: the longest write transaction of each worker)
    live_load   --jobs 3000 --repeats 2 --history 20000 --poll-requests 30 (50 operators polling
                while 4 executors drain; quiet vs loaded)

Pass --full to run the scripts' full-size defaults instead (hours on 2 cores), or --only NAME to
pick one.
PostgreSQL-only parts are skipped with a note when PostgreSQL is not reachable.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import benchlib as bl

SMALL = {
    "throughput": ["--jobs", "400"],
    "enqueue_pairs": ["--pairs", "7", "--jobs", "300", "--history", "3000"],
    "sqlite_txn": ["--pairs", "7", "--jobs", "200"],
    "sqlite_schema_ab": ["--pairs", "7", "--jobs", "200", "--history", "1000"],
    "ceiling_pairs": ["--pairs", "3", "--jobs", "2000"],
    "console": ["--jobs", "20000", "--events", "60000"],
    "memory": ["--jobs", "5000"],
    "api_enqueue": ["--batches", "3", "--repeats", "1"],
    "prune": ["--jobs", "50000"],
    "sweeps": ["--jobs", "50000", "--lapsed", "2000", "--unknown", "200", "--repeats", "1"],
    "txn_lengths": ["--jobs", "300"],
    "live_load": [
        "--jobs",
        "3000",
        "--repeats",
        "2",
        "--history",
        "20000",
        "--poll-requests",
        "30",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the scripts' full-size defaults")
    parser.add_argument("--only", choices=sorted(SMALL), action="append", help="run only NAME")
    args = parser.parse_args()
    names = args.only or list(SMALL)
    pg = bl.pg_available()
    failed = []
    for name in names:
        cmd = [bl.PY, str(bl.BENCH / f"{name}.py"), *([] if args.full else SMALL[name])]
        if not pg and name in (
            "ceiling_pairs",
            "console",
            "memory",
            "api_enqueue",
            "prune",
            "sweeps",
            "live_load",
        ):
            bl.say(f"== {name}: skipped, PostgreSQL at {bl.PG_BASE} is not reachable")
            continue
        if not pg and name == "throughput":
            cmd += ["--backends", "sqlite"]
        bl.say(f"== {name}: {' '.join(cmd[1:])}")
        start = time.perf_counter()
        rc = subprocess.run(cmd, cwd=bl.ROOT, check=False).returncode
        bl.say(f"== {name}: exit {rc} after {time.perf_counter() - start:.0f} s\n")
        if rc:
            failed.append(name)
    if failed:
        sys.exit(f"benchmarks failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
