"""How fast ``prune`` deletes finished jobs, and how long each batch holds its locks.

Setup (not measured): a PostgreSQL database loaded like bench/console.py (``--jobs`` jobs over
all states, created two seconds apart, three audit events each), VACUUM ANALYZE.

Measured, in this process: ``inbox.retention.prune_jobs(older_than=--older-than)`` with
``--batch`` rows per transaction. Reported: jobs deleted, the rate, and the duration of each
batch's transaction (the locking SELECT, the guarded DELETE, its approvals, the COMMIT: the time
its row locks are held) as p50 / p95 / max; audit events before and after (never changed).

    .venv/bin/python bench/prune.py                      # 200,000 jobs, cut 1 day, batch 500
    .venv/bin/python bench/prune.py --jobs 1000000 --batch 1000
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import time

import benchlib as bl

DB = bl.db_name("prune")


def _console_bench():
    """bench/console.py by path (its module name would shadow the console app)."""
    spec = importlib.util.spec_from_file_location("bench_console", bl.BENCH / "console.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_console"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=200_000, help="jobs to load (200,000)")
    parser.add_argument("--batch", type=int, default=500, help="rows per transaction (500)")
    parser.add_argument("--older-than", default="1d", help="the cut (1d)")
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    if not bl.pg_available():
        raise SystemExit(f"prune: PostgreSQL at {bl.PG_BASE} is not reachable")
    facts = bl.machine_facts()
    loader = _console_bench()
    loader.DB = DB
    bl.say(f"prune: loading {args.jobs:,} jobs and {3 * args.jobs:,} events into {DB} …")
    timings = loader.load(args.jobs, 3 * args.jobs)
    os.environ.update(bl.BASE_ENV)
    os.environ["DATABASE_URL"] = bl.pg_url(DB)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    import django

    django.setup()
    from audit.models import AuditEvent
    from inbox import retention
    from inbox.models import Job

    age = retention.parse_duration(args.older_than)
    events_before = AuditEvent.objects.count()
    jobs_before = Job.objects.count()
    dry = retention.prune_jobs(older_than=age, dry_run=True)
    batch_ms: list[float] = []
    real = retention.transaction

    class TimedTransactions:
        """``retention.transaction`` with each ``atomic()`` block timed: one batch, from the
        locking SELECT to the COMMIT, i.e. how long its row locks are held."""

        @staticmethod
        @contextlib.contextmanager
        def atomic(*args, **kwargs):
            start = time.perf_counter()
            try:
                with real.atomic(*args, **kwargs):
                    yield
            finally:
                batch_ms.append((time.perf_counter() - start) * 1000)

    retention.transaction = TimedTransactions
    try:
        report = retention.prune_jobs(older_than=age, batch=args.batch, progress=bl.say)
    finally:
        retention.transaction = real
    events_after = AuditEvent.objects.count()
    jobs_after = Job.objects.count()
    rows = [
        (
            f"{jobs_before:,}",
            f"{dry.jobs:,}",
            f"{report.jobs:,}",
            f"{report.seconds:.1f}",
            f"{report.jobs / max(report.seconds, 1e-9):,.0f}",
            args.batch,
            f"{bl.percentile(batch_ms, 50):.1f}",
            f"{bl.percentile(batch_ms, 95):.1f}",
            f"{max(batch_ms or [float('nan')]):.1f}",
        )
    ]
    body = [
        f"prune_jobs(older_than={args.older_than}) on PostgreSQL, {args.batch} rows per "
        "transaction; a batch's transaction (the locking SELECT, the guarded DELETE, its "
        "approvals, the COMMIT) is how long it holds its row locks.",
        "",
        bl.table(
            [
                "jobs before",
                "dry run: would delete",
                "deleted",
                "seconds",
                "jobs/s",
                "batch",
                "batch p50 ms",
                "batch p95 ms",
                "batch max ms",
            ],
            rows,
        ),
        "",
        f"- jobs after: {jobs_after:,}; audit events before {events_before:,}, after "
        f"{events_after:,} (never deleted)",
        "- setup (not measured): " + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items()),
    ]
    bl.say("\n".join(body))
    path = bl.write_result("prune", "prune: deletion rate and lock time per batch", body, facts)
    bl.say(f"\nwrote {path.relative_to(bl.ROOT)}")
    if not args.keep_db:
        from django.db import connections

        connections.close_all()
        bl.drop_pg_db(DB)


if __name__ == "__main__":
    main()
