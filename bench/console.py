"""Console latency at scale: p50/p95 of every console page next to the stock Django admin.

Setup (not measured): a PostgreSQL database with --jobs jobs across all states and types and
--events audit events (default 1,000,000 and 3,000,000), generated server-side with
INSERT … SELECT over generate_series with the secondary indexes dropped and rebuilt, then
VACUUM ANALYZE; the throughput chart's per-minute counts are made from the finished jobs. Rows
are valid: every sealed job's fingerprint is the sha256 the product computes (checked on a
sample before measuring).

Measured: each page --requests times (default 30, after --warmup) through Django's test Client
in this process — server time: URL routing, middleware, view, queries, template rendering; no
network or browser. Each page's queries are captured once (count, and any COUNT without a LIMIT,
i.e. an unbounded count). The stock admin is a default ModelAdmin on a proxy of Job registered
only by bench/settings_bench.py.

    .venv/bin/python bench/console.py                         # 1M jobs / 3M events
    .venv/bin/python bench/console.py --jobs 20000 --events 60000   # what `make bench` runs
    .venv/bin/python bench/console.py --reuse                 # keep the loaded database
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

import benchlib as bl

DB = bl.db_name("console")


# --- the load (setup) -------------------------------------------------------------------------

STATE_SQL = """CASE
    WHEN b < 800 THEN 'SUCCEEDED' WHEN b < 840 THEN 'READY' WHEN b < 850 THEN 'CLAIMED'
    WHEN b < 860 THEN 'EXECUTING' WHEN b < 900 THEN 'FAILED' WHEN b < 910 THEN 'OUTCOME_UNKNOWN'
    WHEN b < 950 THEN 'REJECTED' WHEN b < 960 THEN 'RECONCILED' ELSE 'CREATED' END"""


def _q(expr: str) -> str:
    """A JSON string value or null, for the canonical fingerprint text."""
    return f"COALESCE('\"' || {expr} || '\"', 'null')"


JOBS_SQL = f"""
INSERT INTO inbox_job (
    job_id, job_version, mission_id, job_type, scope, object_id, vault_path, approval_id,
    payload, state, idempotency_key, requested_by, worker_id, claim_id, claimed_at, lease_until,
    attempt_count, max_attempts, result_code, last_error, supersedes, note, fingerprint,
    created_at, updated_at
)
SELECT
    job_id, 1, mission, jt, scope, obj, path, appr,
    jsonb_strip_nulls(jsonb_build_object(
        'job_id', job_id, 'job_version', 1, 'mission_id', mission, 'job_type', jt,
        'object_id', obj, 'vault_path', path, 'idempotency_key', ikey,
        'content', content, 'provenance_hash', ph, 'source_commit', sc,
        'delete_request_id', drid, 'expected_provenance_hash', eph)),
    st, ikey, 'producer-' || mod(i, 5),
    CASE WHEN held_once THEN 'executor-' || scope || '-' || mod(i, 4) ELSE '' END,
    CASE WHEN held_once THEN md5(i::text) ELSE '' END,
    CASE WHEN held_once THEN created + interval '1 second' END,
    CASE WHEN st IN ('CLAIMED', 'EXECUTING')
         THEN statement_timestamp() + (mod(i, 90) - 15) * interval '1 second' END,
    CASE WHEN held_once THEN 1 + (mod(i, 3) = 0)::int ELSE 0 END,
    5,
    CASE st WHEN 'SUCCEEDED' THEN 'OK' WHEN 'FAILED' THEN 'HASH_MISMATCH'
            WHEN 'OUTCOME_UNKNOWN' THEN 'UNKNOWN' WHEN 'REJECTED' THEN 'APPROVAL_DENIED'
            WHEN 'RECONCILED' THEN 'CONFIRMED_DELETED' ELSE '' END,
    CASE WHEN st IN ('FAILED', 'REJECTED', 'OUTCOME_UNKNOWN') THEN 'benchmark row' ELSE '' END,
    NULL, '',
    CASE WHEN st = 'CREATED' THEN '' ELSE encode(sha256(convert_to(
        '{{"approval_id":' || {_q("appr")} || ',"delete_request_id":' || {_q("drid")}
        || ',"expected_commit":null,"expected_provenance_hash":' || {_q("eph")}
        || ',"job_type":"' || jt || '","mission_id":"' || mission || '","object_id":"' || obj
        || '","provenance_hash":' || {_q("ph")} || ',"source_commit":' || {_q("sc")}
        || ',"vault_path":"' || path || '"}}', 'UTF8')), 'hex') END,
    created,
    created + CASE WHEN st IN ('CREATED', 'READY') THEN interval '0' ELSE interval '2 s' END
FROM (
    SELECT s.*,
        st NOT IN ('CREATED', 'READY') AS held_once,
        CASE WHEN jt = 'SAVE_OBJECT' THEN '# Note ' || i END AS content,
        CASE WHEN jt = 'SAVE_OBJECT'
             THEN encode(sha256(convert_to('# Note ' || i, 'UTF8')), 'hex') END AS ph,
        CASE WHEN jt = 'SAVE_OBJECT' THEN 'c' || mod(i, 997) END AS sc,
        CASE WHEN jt = 'DELETE_OBJECT' THEN 'r' || i END AS drid,
        CASE WHEN jt = 'DELETE_OBJECT'
             THEN encode(sha256(convert_to('old ' || i, 'UTF8')), 'hex') END AS eph,
        CASE WHEN jt = 'DELETE_OBJECT' AND st <> 'CREATED' THEN 'ap-' || i END AS appr,
        lower(jt) || ':' || obj || ':' || i AS ikey
    FROM (
        SELECT i, b, {STATE_SQL} AS st,
            'job-' || lpad(i::text, 8, '0') AS job_id,
            CASE WHEN mod(i, 20) < 12 THEN 'SAVE_OBJECT' WHEN mod(i, 20) < 16 THEN 'DELETE_OBJECT'
                 ELSE 'NOOP' END AS jt,
            CASE WHEN mod(i, 20) < 12 THEN 'save' WHEN mod(i, 20) < 16 THEN 'delete'
                 ELSE 'noop' END AS scope,
            'm-' || (i / 100) AS mission,
            'obj-' || i AS obj,
            'notes/obj-' || i || '.md' AS path,
            statement_timestamp() - (%(n)s - i) * interval '2 seconds' AS created
        FROM (SELECT i, mod(i::bigint * 7919, 1000) AS b FROM generate_series(1, %(n)s) AS i) g
    ) s
) t
"""

EVENTS_SQL = """
INSERT INTO audit_auditevent (job_id, run_id, event_type, actor, result_code, detail, created_at)
SELECT j.job_id, NULL,
    CASE k WHEN 0 THEN 'REQUESTED'
           WHEN 1 THEN CASE WHEN j.state = 'CREATED' THEN 'OPERATOR_ACTION' ELSE 'READY' END
           ELSE CASE j.state WHEN 'CLAIMED' THEN 'CLAIMED' WHEN 'EXECUTING' THEN 'STARTED'
                WHEN 'READY' THEN 'LEASE_EXPIRED' WHEN 'CREATED' THEN 'OPERATOR_ACTION'
                ELSE j.state END END,
    CASE WHEN k = 0 OR j.worker_id = '' THEN j.requested_by ELSE j.worker_id END,
    CASE WHEN k >= 2 THEN j.result_code ELSE '' END,
    jsonb_build_object('from', CASE k WHEN 0 THEN NULL WHEN 1 THEN 'CREATED' ELSE 'READY' END,
                       'to', CASE k WHEN 0 THEN 'CREATED' WHEN 1 THEN 'READY' ELSE j.state END,
                       'object_id', j.object_id),
    j.created_at + k * interval '500 milliseconds'
FROM inbox_job j CROSS JOIN generate_series(0, %(per_job)s - 1) AS k
ORDER BY j.job_id, k
"""

# What the executors would have counted as the jobs finished (inbox.FinishedCount, one shard):
# every minute of the generated history, so the throughput chart reads a table of its real size.
COUNTS_SQL = """
INSERT INTO inbox_finishedcount (minute, scope, state, shard, finished)
SELECT date_trunc('minute', updated_at, 'UTC'), scope, state, 0, count(*)
FROM inbox_job WHERE state IN ('SUCCEEDED', 'FAILED', 'OUTCOME_UNKNOWN')
GROUP BY 1, 2, 3
"""

SECONDARY_INDEXES_SQL = """
SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
WHERE t.relname = ANY(%s)
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
"""


def load(jobs: int, events: int) -> dict[str, float]:
    """Create, migrate and fill the database; return the setup timings."""
    import psycopg

    timings: dict[str, float] = {}
    t = time.perf_counter()
    bl.recreate_pg_db(DB)
    bl.migrate(bl.pg_url(DB))
    timings["create + migrate"] = time.perf_counter() - t
    tables = ["inbox_job", "audit_auditevent"]
    with psycopg.connect(bl.pg_url(DB), autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        indexes = conn.execute(SECONDARY_INDEXES_SQL, [tables]).fetchall()
        for name, _ in indexes:
            conn.execute(f"DROP INDEX {name}")
        t = time.perf_counter()
        conn.execute(JOBS_SQL, {"n": jobs})
        timings[f"insert {jobs:,} jobs"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute(EVENTS_SQL, {"per_job": max(1, events // jobs)})
        timings[f"insert {max(1, events // jobs) * jobs:,} events"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute(COUNTS_SQL)
        timings["per-minute throughput counts"] = time.perf_counter() - t
        t = time.perf_counter()
        for _, definition in indexes:
            conn.execute(definition)
        timings[f"rebuild {len(indexes)} secondary indexes"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) inbox_job")
        conn.execute("VACUUM (ANALYZE) audit_auditevent")
        conn.execute("VACUUM (ANALYZE) inbox_finishedcount")
        timings["VACUUM ANALYZE"] = time.perf_counter() - t
        # Kept with the data, so a --reuse run still reports what the load cost.
        record = {"at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "timings": timings}
        conn.execute(f'COMMENT ON DATABASE "{DB}" IS {_literal(json.dumps(record))}')
    return timings


def _literal(text: str) -> str:
    """A SQL string literal (COMMENT takes no parameters)."""
    return "'" + text.replace("'", "''") + "'"


def recorded_load() -> dict[str, Any] | None:
    """The timings the load of this database recorded (None: loaded before they were kept)."""
    import psycopg

    with psycopg.connect(bl.pg_url(DB), autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            [DB],
        ).fetchone()
    try:
        return json.loads(row[0]) if row and row[0] else None
    except ValueError:
        return None


def setup_note(timings: dict[str, float], *, at: str = "") -> str:
    total = sum(timings.values())
    steps = "; ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    when = f", loaded {at}" if at else ""
    return f"- setup (not measured{when}): {total / 60:.1f} min in all: {steps}"


def loaded_counts() -> tuple[int, int] | None:
    import psycopg

    try:
        with psycopg.connect(bl.pg_url(DB), autocommit=True, connect_timeout=5) as conn:
            j = conn.execute("SELECT count(*) FROM inbox_job").fetchone()[0]
            e = conn.execute("SELECT count(*) FROM audit_auditevent").fetchone()[0]
            return j, e
    except Exception:
        return None


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


# Issue 15: every console page, deep pages included, p95 < 100 ms; the scrape < 50 ms.
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
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings_bench"
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
        # Issue 13: a Prometheus scrape (the test client is a loopback caller).
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
    if not bl.pg_available():
        raise SystemExit(f"console: PostgreSQL at {bl.PG_BASE} is not reachable")
    facts = bl.machine_facts()
    notes: list[str] = []
    per_job = max(1, args.events // args.jobs)
    args.events = per_job * args.jobs
    if args.reuse and loaded_counts() == (args.jobs, args.events):
        bl.migrate(bl.pg_url(DB))  # indexes added by migrations since the load
        notes.append(f"- reused the loaded database {DB} (migrated to the current schema)")
        record = recorded_load()
        if record:
            notes.append(setup_note(record["timings"], at=record.get("at", "")))
    else:
        bl.say(f"console: loading {args.jobs:,} jobs and {args.events:,} events into {DB} …")
        timings = load(args.jobs, args.events)
        for step, seconds in timings.items():
            bl.say(f"  {step}: {seconds:.1f} s")
        notes.append(setup_note(timings))
    setup_django()
    notes.append("- " + check_fingerprints())
    notes.append("- " + disk_usage())
    t = targets(args.requests)
    pages = build_pages(t)
    bl.say(f"console: {args.requests} requests per page")
    measure(pages, requests=args.requests, warmup=args.warmup, profile=args.profile_over)
    body = report(pages, args, notes)
    bl.say()
    bl.say("\n".join(body))
    facts["measured through"] = "django.test.Client in-process (server time)"
    path = bl.write_result("console", "Console latency at scale", body, facts)
    bl.say(f"\nwrote {path.relative_to(bl.ROOT)}")
    if not args.keep_db:
        from django.db import connections

        connections.close_all()
        bl.drop_pg_db(DB)


if __name__ == "__main__":
    main()
