"""Maintenance at scale: the stale-lease sweep, the auto-reconciler and ``prune`` on a big table
(PostgreSQL).

Setup (not measured): --jobs jobs over every state and type, generated server-side
(``lib/dataset.py``); then, per repeat, exactly --lapsed held jobs (idempotent and not) whose
lease lapsed a minute ago, every other held job's lease pushed an hour ahead, and exactly
--unknown DELETE jobs in OUTCOME_UNKNOWN, half of whose objects are still in the vault (present
with the expected hash: diagnosed NOT_APPLIED) and half gone (CONFIRMED_DELETED).

Measured in this process, through the product's own functions (what ``recover_stale``,
``reconcile --auto`` and ``prune`` call): wall time, and every write transaction's length
(outermost ``atomic()`` block, entry to exit): the longest is an upper bound of how long any
row stays locked. ``prune`` runs once, after the repeats, on the same table: the terminal jobs
older than --older-than, --batch a transaction.

Goals: the sweep of 10,000 lapsed leases among 1M jobs in < 5 s, never holding a row lock
longer than 1 s; the auto-reconciler with 1,000 unknown outcomes likewise.

    .venv/bin/python bench/sweeps.py                               # 1M jobs, 10,000 / 1,000
    .venv/bin/python bench/sweeps.py --jobs 50000 --lapsed 2000 --unknown 200 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from lib import base as bl
from lib import dataset

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


class Transactions:
    """Times every outermost ``atomic()`` block, entry to exit, while installed."""

    def __init__(self) -> None:
        from django.db import transaction

        self.spans: list[float] = []
        self._depth, self._begun = 0, 0.0
        self._atomic = transaction.Atomic
        self._enter, self._exit = self._atomic.__enter__, self._atomic.__exit__
        timer = self

        def enter(atomic: Any) -> Any:
            if timer._depth == 0:
                timer._begun = time.perf_counter()
            timer._depth += 1
            return timer._enter(atomic)

        def leave(atomic: Any, *exc: Any) -> Any:
            try:
                return timer._exit(atomic, *exc)
            finally:
                timer._depth -= 1
                if timer._depth == 0:
                    timer.spans.append(time.perf_counter() - timer._begun)

        self._atomic.__enter__, self._atomic.__exit__ = enter, leave

    def timed(self, call: Callable[[], Any]) -> tuple[Any, float, list[float]]:
        """``call()``'s result, its wall seconds and its transactions' lengths."""
        self.spans = []
        start = time.perf_counter()
        result = call()
        return result, time.perf_counter() - start, self.spans

    def close(self) -> None:
        self._atomic.__enter__, self._atomic.__exit__ = self._enter, self._exit


def longest_ms(spans: list[float]) -> str:
    return f"{max(spans or [0.0]) * 1000:,.0f}"


def sweep_rows(args: argparse.Namespace, vault: str, timer: Transactions) -> list[tuple]:
    from inbox.reconcile import auto_reconcile
    from inbox.transitions import recover_stale_claims_report

    rows = []
    for repeat in range(1, args.repeats + 1):
        lapsed, unknown = setup_repeat(args, vault)
        bl.say(f"  repeat {repeat}: {lapsed:,} lapsed leases, {unknown:,} unknown outcomes")
        swept, sweep_s, sweep_spans = timer.timed(
            lambda: recover_stale_claims_report(actor="bench-sweeper")
        )
        auto, reconcile_s, spans = timer.timed(lambda: auto_reconcile(actor="bench-reconciler"))
        rows.append((repeat, swept, sweep_s, sweep_spans, auto, reconcile_s, spans))
        bl.say(
            f"  repeat {repeat}: sweep {swept.total:,} in {sweep_s:.2f} s (longest txn "
            f"{longest_ms(sweep_spans)} ms); reconcile in {reconcile_s:.2f} s "
            f"(longest txn {longest_ms(spans)} ms)"
        )
    return rows


def prune_row(args: argparse.Namespace, timer: Transactions) -> tuple:
    from inbox import retention
    from inbox.models import Job

    age = retention.parse_duration(args.older_than)
    before = Job.objects.count()
    report, seconds, spans = timer.timed(
        lambda: retention.prune_jobs(older_than=age, batch=args.batch)
    )
    ms = [s * 1000 for s in spans]
    bl.say(f"  prune: {report.jobs:,} jobs in {seconds:.2f} s")
    return (
        f"{before:,}",
        f"{report.jobs:,}",
        f"{seconds:.2f}",
        f"{report.jobs / max(seconds, 1e-9):,.0f}",
        args.batch,
        f"{bl.percentile(ms, 50):.1f}",
        f"{bl.percentile(ms, 95):.1f}",
        f"{max(ms or [float('nan')]):.1f}",
    )


def report(args: argparse.Namespace, rows: list[tuple], prune: tuple, setup: str) -> list[str]:
    sweep_table = bl.table(
        [
            "repeat",
            "sweep moved (parked)",
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
                f"{swept.total:,} ({sum(swept.parked.values()):,})",
                f"{sweep_s:.2f}",
                len(sweep_spans),
                longest_ms(sweep_spans),
                f"{len(auto.confirmed)} + {len(auto.not_applied) + len(auto.conflict)}",
                f"{reconcile_s:.2f}",
                len(spans),
                longest_ms(spans),
            )
            for repeat, swept, sweep_s, sweep_spans, auto, reconcile_s, spans in rows
        ],
    )
    prune_headers = ["jobs before", "deleted", "seconds", "jobs/s", "batch"]
    prune_headers += ["batch p50 ms", "batch p95 ms", "batch max ms"]
    return [
        f"{args.jobs:,} jobs; per repeat {args.lapsed:,} lapsed leases and {args.unknown:,} "
        "unknown outcomes (half still in the vault); the DELETEs among the lapsed leases are "
        f"parked as unknown by the sweep and join the reconciler's queue. {setup}",
        "",
        sweep_table,
        "",
        f"Medians: sweep {bl.median(r[2] for r in rows):.2f} s (goal < 5 s), longest sweep "
        f"transaction {max(max(r[3] or [0]) for r in rows) * 1000:,.0f} ms (goal < 1,000 ms); "
        f"reconcile {bl.median(r[5] for r in rows):.2f} s, longest reconcile transaction "
        f"{max(max(r[6] or [0]) for r in rows) * 1000:,.0f} ms.",
        "",
        f"## prune_jobs(older_than={args.older_than}), {args.batch} jobs a transaction",
        "",
        bl.table(prune_headers, [prune]),
        "",
        "A batch's transaction (the locking SELECT, the guarded DELETE, its approvals, the "
        "COMMIT) is how long it holds its row locks. Audit events are never deleted.",
    ]


def main() -> None:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs in the table (1M)")
    parser.add_argument("--lapsed", type=int, default=10_000, help="lapsed leases (10,000)")
    parser.add_argument("--unknown", type=int, default=1_000, help="unknown outcomes (1,000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats (3)")
    parser.add_argument("--older-than", default="1d", help="prune's cut (1d)")
    parser.add_argument("--batch", type=int, default=500, help="prune's jobs a transaction (500)")
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    bl.require_pg("sweeps")
    facts = bl.machine_facts()
    bl.say(f"sweeps: loading {args.jobs:,} jobs into {DB} …")
    started = time.perf_counter()
    timings = dataset.load(DB, args.jobs, args.jobs)
    setup = "Setup (not measured): " + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    setup += f"; total {time.perf_counter() - started:.0f} s."
    vault = str(bl.VAR / "sweeps-vault")
    os.environ.update(bl.django_env(bl.pg_url(DB), VAULT_ROOT=vault))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    timer = Transactions()
    try:
        rows = sweep_rows(args, vault, timer)
        prune = prune_row(args, timer)
    finally:
        timer.close()
    bl.finish("sweeps", "Sweeps at scale", report(args, rows, prune, setup), facts)
    if not args.keep_db:
        from django.db import connections

        connections.close_all()
        bl.drop_pg_db(DB)


if __name__ == "__main__":
    main()
