"""Sweeps at scale: the stale-lease sweep and the auto-reconciler on a big table (PostgreSQL).

Setup (not measured): --jobs jobs over every state and type, generated server-side like
bench/console.py; then, per repeat, exactly --lapsed held jobs (idempotent and not) whose lease
lapsed a minute ago, every other held job's lease pushed an hour ahead, and exactly --unknown
DELETE jobs in OUTCOME_UNKNOWN, half of whose objects are still in the vault (present with the
expected hash: diagnosed NOT_APPLIED) and half gone (CONFIRMED_DELETED).

Measured in this process, through the product's own functions (``recover_stale_claims_report``
and ``auto_reconcile``, what ``recover_stale`` and ``reconcile --auto`` call): wall time, and
every write transaction's length (outermost ``atomic()`` block, entry to exit) — the longest is
an upper bound of how long any row stays locked.

Goals (issue 15): the sweep of 10,000 lapsed leases among 1M jobs in < 5 s, never holding a row
lock longer than 1 s; the auto-reconciler with 1,000 unknown outcomes likewise.

    .venv/bin/python bench/sweeps.py                                   # 1M jobs, 10,000 / 1,000
    .venv/bin/python bench/sweeps.py --jobs 50000 --lapsed 2000 --unknown 200   # make bench
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import time

import benchlib as bl

DB = bl.db_name("sweeps")

RESET_SQL = """
UPDATE inbox_job SET lease_until = statement_timestamp() + interval '1 hour'
WHERE state IN ('CLAIMED', 'EXECUTING');
UPDATE inbox_job SET state = 'RECONCILED', result_code = 'CONFIRMED_DELETED'
WHERE state = 'OUTCOME_UNKNOWN';
"""

LAPSE_SQL = """
UPDATE inbox_job j SET state = CASE WHEN mod(p.n, 2) = 0 THEN 'CLAIMED' ELSE 'EXECUTING' END,
    worker_id = 'gone-' || mod(p.n, 7), claim_id = md5(j.job_id), attempt_count = 1,
    claimed_at = statement_timestamp() - interval '5 minutes',
    lease_until = statement_timestamp() - interval '1 minute'
FROM (SELECT job_id, row_number() OVER (ORDER BY job_id) AS n FROM inbox_job
      WHERE state IN ('READY', 'SUCCEEDED') ORDER BY job_id LIMIT %(n)s) p
WHERE j.job_id = p.job_id
"""

UNKNOWN_SQL = """
UPDATE inbox_job j SET state = 'OUTCOME_UNKNOWN', result_code = 'UNKNOWN', lease_until = NULL
FROM (SELECT job_id FROM inbox_job WHERE state = 'SUCCEEDED' AND job_type = 'DELETE_OBJECT'
      ORDER BY job_id LIMIT %(n)s) p
WHERE j.job_id = p.job_id
RETURNING j.job_id, j.vault_path, j.payload->>'delete_request_id'
"""

COUNT_SQL = """
SELECT count(*) FILTER (WHERE state IN ('CLAIMED', 'EXECUTING')
                          AND lease_until < statement_timestamp()),
       count(*) FILTER (WHERE state = 'OUTCOME_UNKNOWN')
FROM inbox_job
"""


def setup_repeat(args: argparse.Namespace, vault: str) -> tuple[int, int]:
    """Exactly --lapsed lapsed leases and --unknown unknown outcomes (half still present);
    returns the lapsed and unknown counts read back (the check that the setup did that)."""
    import psycopg

    with psycopg.connect(bl.pg_url(DB), autocommit=True) as conn:
        conn.execute(RESET_SQL)
        conn.execute(LAPSE_SQL, {"n": args.lapsed})
        rows = conn.execute(UNKNOWN_SQL, {"n": args.unknown}).fetchall()
        conn.execute("VACUUM (ANALYZE) inbox_job")
        lapsed, unknown = conn.execute(COUNT_SQL).fetchone()
    shutil.rmtree(vault, ignore_errors=True)
    for n, (job_id, path, _rid) in enumerate(rows):
        if n % 2:
            continue  # gone: the delete happened
        target = os.path.join(vault, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        number = job_id.removeprefix("job-").lstrip("0")
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(f"old {number}")  # the content whose hash the DELETE expects
    return lapsed, unknown


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs in the table (1M)")
    parser.add_argument("--lapsed", type=int, default=10_000, help="lapsed leases (10,000)")
    parser.add_argument("--unknown", type=int, default=1_000, help="unknown outcomes (1,000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats (3)")
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    if not bl.pg_available():
        raise SystemExit(f"sweeps: PostgreSQL at {bl.PG_BASE} is not reachable")
    facts = bl.machine_facts()
    # bench/console.py's server-side generator (loaded by path: ``console`` is also an app).
    spec = importlib.util.spec_from_file_location("bench_console", bl.BENCH / "console.py")
    loader = importlib.util.module_from_spec(spec)
    sys.modules["bench_console"] = loader  # its dataclasses look their module up
    spec.loader.exec_module(loader)
    loader.DB = DB
    bl.say(f"sweeps: loading {args.jobs:,} jobs into {DB} …")
    started = time.perf_counter()
    timings = loader.load(args.jobs, args.jobs)
    setup = time.perf_counter() - started
    vault = str(bl.VAR / "sweeps-vault")
    os.environ.update(bl.django_env(bl.pg_url(DB), VAULT_ROOT=vault))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import transaction

    from inbox.reconcile import auto_reconcile
    from inbox.transitions import recover_stale_claims_report

    spans: list[float] = []
    depth, begun = [0], [0.0]
    enter, leave = transaction.Atomic.__enter__, transaction.Atomic.__exit__

    def timed_enter(self):
        if depth[0] == 0:
            begun[0] = time.perf_counter()
        depth[0] += 1
        return enter(self)

    def timed_exit(self, *exc):
        try:
            return leave(self, *exc)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spans.append(time.perf_counter() - begun[0])

    transaction.Atomic.__enter__, transaction.Atomic.__exit__ = timed_enter, timed_exit
    rows = []
    for repeat in range(1, args.repeats + 1):
        lapsed, unknown = setup_repeat(args, vault)
        bl.say(f"  repeat {repeat}: {lapsed:,} lapsed leases, {unknown:,} unknown outcomes")
        spans.clear()
        t = time.perf_counter()
        report = recover_stale_claims_report(actor="bench-sweeper")
        sweep = time.perf_counter() - t
        sweep_spans = list(spans)
        spans.clear()
        t = time.perf_counter()
        auto = auto_reconcile(actor="bench-reconciler")
        reconcile = time.perf_counter() - t
        rows.append((repeat, report, sweep, sweep_spans, auto, reconcile, list(spans)))
        bl.say(
            f"  repeat {repeat}: sweep {report.total:,} in {sweep:.2f} s "
            f"(longest txn {max(sweep_spans) * 1000:.0f} ms); reconcile "
            f"{len(auto.confirmed)}+{len(auto.not_applied)} in {reconcile:.2f} s "
            f"(longest txn {max(spans or [0]) * 1000:.0f} ms)"
        )
    body = [
        f"{args.jobs:,} jobs; per repeat {args.lapsed:,} lapsed leases and "
        f"{args.unknown:,} unknown outcomes (half still in the vault); the DELETEs among "
        "the lapsed leases are parked as unknown by the sweep and join the reconciler's "
        "queue. Setup (not measured): "
        + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items())
        + f"; total {setup:.0f} s.",
        "",
        bl.table(
            [
                "repeat",
                "sweep moved",
                "sweep s",
                "sweep txns",
                "longest sweep txn ms",
                "reconciled + diagnosed",
                "reconcile s",
                "reconcile txns",
                "longest reconcile txn ms",
            ],
            [
                (
                    repeat,
                    f"{report.total:,} ({sum(report.parked.values()):,})",
                    f"{sweep:.2f}",
                    len(sweep_spans),
                    f"{max(sweep_spans) * 1000:.0f}",
                    f"{len(auto.confirmed)} + {len(auto.not_applied) + len(auto.conflict)}",
                    f"{reconcile:.2f}",
                    len(rspans),
                    f"{max(rspans or [0]) * 1000:.0f}",
                )
                for repeat, report, sweep, sweep_spans, auto, reconcile, rspans in rows
            ],
        ),
        "",
        f"Medians: sweep {bl.median([r[2] for r in rows]):.2f} s (goal < 5 s), longest sweep "
        f"transaction {max(max(r[3]) for r in rows) * 1000:.0f} ms (goal < 1,000 ms); reconcile "
        f"{bl.median([r[5] for r in rows]):.2f} s, longest reconcile transaction "
        f"{max(max(r[6] or [0]) for r in rows) * 1000:.0f} ms.",
    ]
    path = bl.write_result("sweeps", "Sweeps at scale", body, facts)
    bl.say("\n".join(body))
    bl.say(f"sweeps: wrote {path.relative_to(bl.ROOT)}")
    if not args.keep_db:
        from django.db import connections

        connections.close_all()
        bl.drop_pg_db(DB)


if __name__ == "__main__":
    main()
