"""Console latency at scale: p50/p95 of every console page next to the stock Django admin.

Setup (not measured): a PostgreSQL database with --jobs jobs across all states and types and
--events audit events (default 1,000,000 and 3,000,000), generated server-side
(``lib/dataset.py``). Rows are valid: every sealed job's fingerprint is the sha256 the product
computes (checked on a sample before measuring).

Measured: each page --requests times (default 30, after --warmup) through Django's test Client
in this process — server time: URL routing, middleware, view, queries, template rendering; no
network or browser. Each page's queries are captured once (count, and any COUNT without a LIMIT,
i.e. an unbounded count). The stock admin is a default ModelAdmin on a proxy of Job registered
only by bench/lib/settings_bench.py.

    .venv/bin/python bench/console.py                         # 1M jobs / 3M events
    .venv/bin/python bench/console.py --jobs 20000 --events 60000   # what `make bench` runs
    .venv/bin/python bench/console.py --reuse                 # keep the loaded database
"""

from __future__ import annotations

import argparse
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from lib import base as bl
from lib import dataset

DB = bl.db_name("console")


# --- the measurement --------------------------------------------------------------------------


@dataclass
class Page:
    name: str
    urls: list[str]
    htmx: bool = False
    times_ms: list[float] = field(default_factory=list)
    statuses: set[int] = field(default_factory=set)
    queries: int = 0
    unbounded_counts: list[str] = field(default_factory=list)
    slowest_sql: str = ""
    error: str = ""
    sql_ms: list[float] = field(default_factory=list)
    profile: str = ""
    # The very first request, before the warm-ups (a cold per-process cache shows here).
    first_ms: float = float("nan")
    # /metrics only: the first scrape of a later process (its tally copy empty, the stored
    # one filled by the very first scrape).
    new_process_ms: float = float("nan")

    @property
    def p50(self) -> float:
        return bl.percentile(self.times_ms, 50)

    @property
    def p95(self) -> float:
        return bl.percentile(self.times_ms, 95)


# The goals: every console page, deep pages included, p95 < 100 ms; the scrape < 50 ms.
PAGE_GOAL_MS = 100.0
METRICS_PAGE = "metrics (Prometheus scrape)"
GOAL_MS = {METRICS_PAGE: 50.0}

COUNT_RE = re.compile(r"\bCOUNT\(", re.IGNORECASE)


def _unbounded(sql: str) -> bool:
    """A COUNT with no LIMIT anywhere in the statement counts every matching row."""
    return bool(COUNT_RE.search(sql)) and " LIMIT " not in sql.upper()


def _full_table(sql: str) -> bool:
    """A COUNT with neither LIMIT nor WHERE: it reads the whole table."""
    return _unbounded(sql) and " WHERE " not in sql.upper()


def setup_django() -> None:
    os.environ.update(bl.BASE_ENV)
    os.environ["DATABASE_URL"] = bl.pg_url(DB)
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.lib.settings_bench"
    import django

    django.setup()


def targets(requests: int) -> dict[str, list[str]]:
    """Distinct ids per request (no single hot row): jobs spread over the table, one held."""
    from inbox.models import Job

    total = Job.objects.count()
    step = max(1, total // (requests + 1))
    ids = [f"job-{min(total, 1 + step * (i + 1)):08d}" for i in range(requests)]
    objects = list(Job.objects.filter(job_id__in=ids).values_list("object_id", flat=True))
    held = list(
        Job.objects.filter(state="EXECUTING")
        .order_by("lease_until")
        .values_list("job_id", flat=True)[:requests]
    )
    return {"ids": ids, "objects": objects, "held": held or ids}


def check_fingerprints(sample: int = 200) -> str:
    from inbox.models import Job
    from inbox.transitions import fingerprint_ok

    jobs = list(Job.objects.order_by("?")[:sample]) if sample else []
    bad = [j.job_id for j in jobs if not fingerprint_ok(j)]
    return f"{len(jobs) - len(bad)}/{len(jobs)} sampled jobs pass the product's fingerprint check"


class SqlTimer:
    """An execute wrapper summing the time spent in the database driver."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - start


# Where a page's time goes, by the file a function lives in (self time).
PROFILE_GROUPS = (
    ("django-tables2", "/django_tables2/"),
    ("template rendering", "/django/template/"),
    ("ORM (query building, model instances)", "/django/db/models/"),
    ("database driver (psycopg, waiting on PostgreSQL)", "/psycopg/"),
    ("admin", "/django/contrib/admin/"),
    ("inspect (signature lookups)", "/inspect.py"),
    ("project code", "/work/"),
)


def profile_page(client: Any, page: Page, headers: dict[str, str], runs: int = 5) -> str:
    """cProfile a few requests; the share of self time by library names the bottleneck."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(runs):
        client.get(page.urls[i % len(page.urls)], headers=headers)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = stats.total_tt or 1.0
    shares: dict[str, float] = {}
    for (file, _line, _func), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        group = next((name for name, key in PROFILE_GROUPS if key in file), "other")
        if group == "project code" and "site-packages" in file:
            group = "other"
        shares[group] = shares.get(group, 0.0) + tt
    top = sorted(shares.items(), key=lambda kv: -kv[1])[:5]
    return ", ".join(f"{name} {tt / total * 100:.0f} %" for name, tt in top)


def measure(pages: list[Page], *, requests: int, warmup: int, profile: float = 0.0) -> None:
    from django.contrib.auth import get_user_model
    from django.core.signals import got_request_exception
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    user_model = get_user_model()
    user = user_model.objects.filter(
        username="bench"
    ).first() or user_model.objects.create_superuser(
        "bench", "bench@example.invalid", "bench-password-not-used"
    )
    client = Client(raise_request_exception=False)
    client.force_login(user)
    errors: list[str] = []

    def on_error(sender: Any, request: Any = None, **kwargs: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        errors.append(f"{exc.__class__.__name__}: {exc}" if exc else "unknown error")

    got_request_exception.connect(on_error, weak=False)
    for page in pages:
        errors.clear()
        headers = {"HX-Request": "true"} if page.htmx else {}
        start = time.perf_counter()
        client.get(page.urls[0], headers=headers)
        page.first_ms = (time.perf_counter() - start) * 1000
        if page.name == METRICS_PAGE:
            from console import metrics as console_metrics

            console_metrics.TALLY.reset()  # what a new process starts from
            start = time.perf_counter()
            client.get(page.urls[0], headers=headers)
            page.new_process_ms = (time.perf_counter() - start) * 1000
        for i in range(warmup):
            client.get(page.urls[i % len(page.urls)], headers=headers)
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(page.urls[0], headers=headers)
        page.statuses.add(response.status_code)
        page.queries = len(ctx.captured_queries)
        page.unbounded_counts = [q["sql"] for q in ctx.captured_queries if _unbounded(q["sql"])]
        if ctx.captured_queries:
            slowest = max(ctx.captured_queries, key=lambda q: float(q["time"]))
            page.slowest_sql = f"{float(slowest['time']) * 1000:.0f} ms: {slowest['sql'][:160]}"
        for i in range(requests):
            url = page.urls[i % len(page.urls)]
            timer = SqlTimer()
            with connection.execute_wrapper(timer):
                start = time.perf_counter()
                response = client.get(url, headers=headers)
                page.times_ms.append((time.perf_counter() - start) * 1000)
            page.sql_ms.append(timer.seconds * 1000)
            page.statuses.add(response.status_code)
        if profile and page.p50 >= profile:
            page.profile = profile_page(client, page, headers)
        if errors:
            page.error = errors[0][:200]
        bl.say(
            f"  {page.name:30} p50 {page.p50:8.1f} ms  p95 {page.p95:8.1f} ms  "
            f"queries {page.queries:3}  status {sorted(page.statuses)} {page.error}"
        )


def build_pages(t: dict[str, list[str]]) -> list[Page]:
    """Every console page: routes by name (``reverse``), deep pages by keyset cursor."""
    from django.urls import reverse

    from console import keyset
    from console.jobs import ORDERINGS
    from inbox.models import Job

    def cursor_at(sort: str, job_id: str) -> str:
        ordering = ORDERINGS[sort]
        row = keyset.paginate(Job.objects.filter(job_id=job_id), ordering, {}, per_page=1).rows[0]
        return keyset.encode(ordering, ordering.values(row))

    jobs = reverse("console:job_list")
    middle = t["ids"][len(t["ids"]) // 4 : len(t["ids"]) // 4 + 5]
    deep = {
        sort: [f"{jobs}?sort={sort}&after_row={cursor_at(sort, j)}" for j in middle]
        for sort in ("-created_at", "-updated_at")
    }
    return [
        Page("dashboard", [reverse("console:home")]),
        Page("jobs list, first page", [jobs]),
        Page("jobs list, deep page (created)", deep["-created_at"]),
        Page("jobs list, deep page (updated)", deep["-updated_at"]),
        Page("jobs filtered state=FAILED", [f"{jobs}?state=FAILED"]),
        Page("jobs search by object_id", [f"{jobs}?q={o}" for o in t["objects"]]),
        Page("jobs search, job id prefix", [f"{jobs}?q={j[:9]}" for j in t["ids"]]),
        Page("job detail", [reverse("console:job_detail", args=[j]) for j in t["ids"]]),
        Page(
            "lease countdown fragment",
            [reverse("console:job_lease", args=[j]) for j in t["held"]],
            htmx=True,
        ),
        Page("audit log, first page", [reverse("console:event_list")]),
        Page("reconcile queue", [reverse("console:reconcile")]),
        Page("approvals queue", [reverse("console:approvals")]),
        Page("runs", [reverse("console:runs")]),
        Page("workers", [reverse("console:workers")]),
        Page("our admin: job changelist", ["/admin/inbox/job/"]),
        Page("stock admin: job changelist", ["/admin/stockadmin/stockjob/"]),
        # A Prometheus scrape (the test client is a loopback caller).
        Page(METRICS_PAGE, [reverse("console:metrics")]),
    ]


def disk_usage() -> str:
    """What the loaded database takes on disk (tables with their indexes and TOAST)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        (total,) = cursor.fetchone()
        parts = []
        for table in ("inbox_job", "audit_auditevent"):
            cursor.execute(
                "SELECT pg_size_pretty(pg_total_relation_size(%s)), "
                "pg_size_pretty(pg_table_size(%s)), pg_size_pretty(pg_indexes_size(%s))",
                [table, table, table],
            )
            all_, heap, indexes = cursor.fetchone()
            parts.append(f"{table} {all_}: table and TOAST {heap}, indexes {indexes}")
    return f"disk: database {total} ({'; '.join(parts)})"


def report(pages: list[Page], args: argparse.Namespace, notes: list[str]) -> list[str]:
    by_name = {p.name: p for p in pages}
    stock = by_name["stock admin: job changelist"]
    rows = []
    for p in pages:
        ok = "yes" if p.p95 < GOAL_MS.get(p.name, PAGE_GOAL_MS) else "NO"
        vs_stock = bl.ratio(stock.p50, p.p50)
        rows.append(
            (
                p.name,
                round(p.p50, 1),
                round(p.p95, 1),
                p.queries,
                round(bl.median(p.sql_ms), 1),
                sum(1 for q in p.unbounded_counts if _full_table(q)),
                len(p.unbounded_counts),
                ", ".join(map(str, sorted(p.statuses))),
                ok if p is not stock else "-",
                f"{vs_stock:.1f}×" if p is not stock else "1.0×",
            )
        )
    out = [
        f"{args.jobs:,} jobs and {args.events:,} audit events on PostgreSQL; {args.requests} "
        f"requests per page after {args.warmup} warm-up requests; server time through "
        "Django's test Client in one process (routing, middleware, view, queries, templates; "
        "no network, no browser). Goal: p95 < 100 ms on every console page, < 50 ms on "
        "/metrics (the stock admin is only the yardstick).",
        "",
        "## Latency per page",
        "",
        bl.table(
            [
                "page",
                "p50 ms",
                "p95 ms",
                "queries",
                "SQL ms (median)",
                "full-table COUNT",
                "COUNT w/o LIMIT",
                "HTTP",
                "p95 under goal",
                "stock admin p50 / this p50",
            ],
            rows,
        ),
        "",
    ]
    jobs_p1 = by_name["jobs list, first page"]
    ours_admin = by_name["our admin: job changelist"]
    out.append(
        f"Same list, stock admin changelist vs ours: jobs list page 1 is "
        f"{bl.ratio(stock.p50, jobs_p1.p50):.1f}× faster at p50 "
        f"({bl.ratio(stock.p95, jobs_p1.p95):.1f}× at p95); our admin changelist is "
        f"{bl.ratio(stock.p50, ours_admin.p50):.1f}× faster at p50 "
        f"({bl.ratio(stock.p95, ours_admin.p95):.1f}× at p95). Goal: ≥ 5×."
    )
    scrape = by_name.get(METRICS_PAGE)
    if scrape is not None:
        out += [
            "",
            f"Prometheus scrape (/metrics): p50 {scrape.p50:.1f} ms, p95 {scrape.p95:.1f} ms "
            f"(goal: p95 < 50 ms: {'met' if scrape.p95 < 50 else 'NOT met'}), "
            f"{scrape.queries} queries; the very first scrape, which counts the whole audit log "
            f"once for the event counters and stores the tally, took {scrape.first_ms:.0f} ms; "
            f"the first scrape of a later process, which reads the stored tally, "
            f"{scrape.new_process_ms:.0f} ms.",
        ]
    profiled = [(p.name, round(p.p50, 1), p.profile) for p in pages if p.profile]
    if profiled:
        out += [
            "",
            "## Where the slow pages spend their time (cProfile, share of self time)",
            "",
            bl.table(["page", "p50 ms", "self time by library"], profiled),
        ]
    out += ["", "## Slowest query of each page (one captured request)", ""]
    out.append(
        bl.table(
            ["page", "slowest query"], [(p.name, p.slowest_sql.replace("|", "\\|")) for p in pages]
        )
    )
    failing = [(p.name, p.error.replace("|", "\\|")) for p in pages if p.error]
    if failing:
        out += ["", "## Pages that raised an error", "", bl.table(["page", "error"], failing)]
    unbounded = [(p.name, q[:300].replace("|", "\\|")) for p in pages for q in p.unbounded_counts]
    if unbounded:
        out += [
            "",
            "## COUNT queries without a LIMIT",
            "",
            "A full-table COUNT has no WHERE either; the others are bounded by their WHERE "
            "(for example a time window), not by a row cap.",
            "",
            bl.table(["page", "query"], unbounded),
        ]
    out += ["", *notes]
    return out


def parse_args() -> argparse.Namespace:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs to load (1,000,000)")
    parser.add_argument(
        "--events",
        type=int,
        default=3_000_000,
        help="audit events to load (3,000,000; a whole number per job)",
    )
    parser.add_argument("--requests", type=int, default=30, help="requests per page (30)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up requests per page (3)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="skip the load when the database already holds these counts",
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--profile-over",
        type=float,
        default=50.0,
        help="cProfile pages whose p50 is at least this many ms (50; 0 = never)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    bl.require_pg("console")
    facts = bl.machine_facts()
    notes: list[str] = []
    per_job = max(1, args.events // args.jobs)
    args.events = per_job * args.jobs
    if args.reuse and dataset.loaded_counts(DB) == (args.jobs, args.events):
        bl.migrate(bl.pg_url(DB))  # indexes added by migrations since the load
        notes.append(f"- reused the loaded database {DB} (migrated to the current schema)")
        record = dataset.recorded_load(DB)
        if record:
            notes.append(dataset.setup_note(record["timings"], at=record.get("at", "")))
    else:
        bl.say(f"console: loading {args.jobs:,} jobs and {args.events:,} events into {DB} …")
        timings = dataset.load(DB, args.jobs, args.events)
        for step, seconds in timings.items():
            bl.say(f"  {step}: {seconds:.1f} s")
        notes.append(dataset.setup_note(timings))
    setup_django()
    notes.append("- " + check_fingerprints())
    notes.append("- " + disk_usage())
    t = targets(args.requests)
    pages = build_pages(t)
    bl.say(f"console: {args.requests} requests per page")
    measure(pages, requests=args.requests, warmup=args.warmup, profile=args.profile_over)
    body = report(pages, args, notes)
    facts["measured through"] = "django.test.Client in-process (server time)"
    bl.finish("console", "Console latency at scale", body, facts)
    if not args.keep_db:
        from django.db import connections

        connections.close_all()
        bl.drop_pg_db(DB)


if __name__ == "__main__":
    main()
