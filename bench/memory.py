"""Executor memory: RSS after --early jobs and after --jobs jobs (flat = no leak).

Bulk-loads --jobs READY NOOP jobs on PostgreSQL (setup), starts one
``manage.py run_executor --scope noop --exit-when-idle`` and samples the process's VmRSS and
VmHWM from /proc every --interval seconds together with the number of jobs it has completed
(read from the database). Reports RSS at the first sample past --early jobs, at a few points in
between, and at the last sample before the process exits; the goal is the last within 10 % of
the early one. RSS is not timing: one run is enough, --repeats adds more.

    .venv/bin/python bench/memory.py                       # 1,000 vs 100,000 jobs
    .venv/bin/python bench/memory.py --jobs 10000          # what `make bench` runs
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from lib import base as bl

DB = bl.db_name("memory")


def proc_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def one_run(args: argparse.Namespace, rep: int) -> dict:
    import psycopg

    url = bl.pg_url(DB)
    mission = f"mem-r{rep}"
    bl.OWN.side(url, "load", "--n", str(args.jobs), "--mission", mission)
    cmd = [*bl.OWN.manage, "run_executor", "--scope", "noop", "--exit-when-idle"]
    cmd += args.executor_args.split()
    bl.LOGS.mkdir(parents=True, exist_ok=True)
    samples: list[tuple[float, int, int, int]] = []  # (t, done, rss KiB, hwm KiB)
    with (
        open(bl.LOGS / f"{DB}-r{rep}.log", "w") as log,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd, env=bl.OWN.env(url), cwd=bl.ROOT, stdout=log, stderr=subprocess.STDOUT
        )
        while proc.poll() is None:
            rss, hwm = proc_kib(proc.pid, "VmRSS"), proc_kib(proc.pid, "VmHWM")
            done = conn.execute(
                "SELECT count(*) FROM inbox_job WHERE mission_id = %s AND state = 'SUCCEEDED'",
                [mission],
            ).fetchone()[0]
            if rss is not None and proc.poll() is None:
                samples.append((time.perf_counter() - start, done, rss, hwm or 0))
            time.sleep(args.interval)
        rc = proc.returncode
    seconds = time.perf_counter() - start
    return {"samples": samples, "rc": rc, "seconds": seconds}


def summarise(run: dict, args: argparse.Namespace) -> tuple[list[tuple], float]:
    samples = run["samples"]
    if not samples:
        return [], float("nan")
    early = next((s for s in samples if s[1] >= args.early), samples[0])
    last = samples[-1]
    picks = [early]
    for frac in (0.1, 0.25, 0.5, 0.75):
        target = args.jobs * frac
        s = next((s for s in samples if s[1] >= target), None)
        if s and s not in picks and s[1] > early[1]:
            picks.append(s)
    if last not in picks:
        picks.append(last)
    rows = [
        (
            f"{s[1]:,}",
            round(s[0], 1),
            round(s[2] / 1024, 1),
            round(s[3] / 1024, 1),
            f"{(s[2] - early[2]) / early[2] * 100:+.1f} %",
        )
        for s in picks
    ]
    growth = (last[2] - early[2]) / early[2] * 100
    return rows, growth


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs to drain (100,000)")
    parser.add_argument("--early", type=int, default=1_000, help="the early mark (1,000)")
    parser.add_argument("--interval", type=float, default=0.25, help="sampling period, s")
    parser.add_argument("--repeats", type=int, default=1, help="runs (1)")
    parser.add_argument("--executor-args", default="", help="extra run_executor flags")
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--durable",
        action="store_true",
        help="keep synchronous_commit on (slower drain; memory is the same)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    bl.require_pg("memory")
    facts = bl.machine_facts()
    bl.recreate_pg_db(DB)
    bl.migrate(bl.pg_url(DB))
    if not args.durable:
        import psycopg

        with psycopg.connect(bl.pg_url("postgres"), autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{DB}" SET synchronous_commit = off')
    command = f"run_executor --scope noop --exit-when-idle {args.executor_args}".strip()
    body = [
        f"One `{command}`"
        f" process draining {args.jobs:,} NOOP jobs on PostgreSQL; VmRSS and VmHWM sampled "
        f"every {args.interval} s from /proc with the completed count from the database.",
        "",
        "The database runs with synchronous_commit = off for this benchmark only (commits do "
        "not wait for the WAL flush): the executor's code path, and so its memory, is the "
        "same; the drain is just quicker. `--durable` keeps the server default."
        if not args.durable
        else "The database keeps the server's synchronous_commit.",
        "",
    ]
    growths = []
    for rep in range(1, args.repeats + 1):
        bl.say(f"memory: run {rep}: draining {args.jobs:,} jobs …")
        run = one_run(args, rep)
        rows, growth = summarise(run, args)
        growths.append(growth)
        body += [
            f"## Run {rep} (exit code {run['rc']}, {run['seconds']:.0f} s, "
            f"{len(run['samples'])} samples)",
            "",
            bl.table(["jobs done", "t s", "RSS MiB", "peak (HWM) MiB", "RSS vs early"], rows),
            "",
        ]
        bl.say("\n".join(body[-4:]))
    verdict = "flat (within 10 %)" if all(abs(g) <= 10 for g in growths) else "NOT flat"
    body.append(
        f"RSS growth from {args.early:,} jobs to the end: "
        + ", ".join(f"{g:+.1f} %" for g in growths)
        + f" → {verdict}. Goal: within 10 %."
    )
    bl.finish("memory", "Executor memory (RSS) over a long drain", body, facts)
    if not args.keep_db:
        bl.drop_pg_db(DB)


if __name__ == "__main__":
    main()
