"""Run every benchmark at small sizes (`make bench`): minutes on a 2-core machine.

Each benchmark prints its tables and writes var/bench/results/<name>-<timestamp>.md. The sizes
below only shrink the scripts' own defaults, which are the full-size runs (see bench/README.md):

    throughput   --jobs 400 --repeat 1    (ours, warm, tasks, the peer, the ceiling; both DBs)
    ceiling      --pairs 3 --jobs 2000    (PostgreSQL, K = 4, interleaved pairs)
    enqueue      --pairs 5 --jobs 300 --history 3000   (SQLite, one by one and batched)
    api_enqueue  --batches 3 --repeats 1  (POST lists of 1,000 jobs through gunicorn)
    console      --jobs 20000 --events 60000
    live_load    --jobs 3000 --repeats 2 --history 20000 --poll-requests 30
    sweeps       --jobs 50000 --lapsed 2000 --unknown 200 --repeats 1
    memory       --jobs 5000

Pass --full for the scripts' full-size defaults (hours on 2 cores), or --only NAME to pick one.
Without PostgreSQL, throughput runs its SQLite half and enqueue runs; the rest is skipped with a
note.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from lib import base as bl

SMALL = {
    "throughput": ["--jobs", "400", "--repeat", "1"],
    "ceiling": ["--pairs", "3", "--jobs", "2000"],
    "enqueue": ["--pairs", "5", "--jobs", "300", "--history", "3000"],
    "api_enqueue": ["--batches", "3", "--repeats", "1"],
    "console": ["--jobs", "20000", "--events", "60000"],
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
    "sweeps": ["--jobs", "50000", "--lapsed", "2000", "--unknown", "200", "--repeats", "1"],
    "memory": ["--jobs", "5000"],
}
# The scripts that need PostgreSQL whatever their flags.
PG_ONLY = {"ceiling", "api_enqueue", "console", "live_load", "sweeps", "memory"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the scripts' full-size defaults")
    parser.add_argument("--only", choices=sorted(SMALL), action="append", help="run only NAME")
    args = parser.parse_args()
    pg = bl.pg_available()
    failed = []
    for name in args.only or list(SMALL):
        cmd = [bl.PY, str(bl.BENCH / f"{name}.py"), *([] if args.full else SMALL[name])]
        if not pg and name in PG_ONLY:
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
