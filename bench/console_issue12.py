"""Issue 12 at scale: keyset pages, prefix search, the payload filter and the live polls, on
PostgreSQL and SQLite with 1,000,000 jobs.

Setup (not measured): PostgreSQL is loaded by ``bench/console.py``'s loader (``--jobs`` jobs,
one audit event per job by default); SQLite gets a copy of the same rows (a migrated file, rows
copied in chunks, then ANALYZE). Measured: server time of each request through Django's test
Client in a process of its own per database (p50 / p95 over ``--requests`` requests, distinct
targets per request where the page takes one), plus the query count of one request.

    .venv/bin/python bench/console_issue12.py                  # both databases, 1M jobs
    .venv/bin/python bench/console_issue12.py --jobs 50000     # a quick look
    BENCH_DB_PREFIX=me .venv/bin/python bench/console_issue12.py --reuse --keep-db

The payload filter is measured on PostgreSQL without and then with a GIN index
(``jsonb_path_ops``), whose build time and size are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import benchlib as bl

HERE = Path(__file__).resolve().parent
SQLITE_PATH = bl.VAR / "console-issue12.sqlite3"
GIN = "job_payload_gin_bench"


def _console_module():
    """bench/console.py (its loader and Page), by path: ``console`` is the Django app."""
    import importlib.util

    if "bench_console" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_console", HERE / "console.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_console"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_console"]


# --- setup ------------------------------------------------------------------------------------


def copy_to_sqlite(pg_url: str, path: Path, chunk: int = 20_000) -> float:
    """A migrated SQLite file holding the PostgreSQL database's jobs and audit events."""
    import psycopg

    start = time.perf_counter()
    bl.fresh_sqlite(path)
    bl.migrate(bl.sqlite_url(path))
    lite = sqlite3.connect(path)
    lite.execute("PRAGMA journal_mode = WAL")
    lite.execute("PRAGMA synchronous = OFF")
    for table, order in (("inbox_job", "job_id"), ("audit_auditevent", "event_id")):
        with psycopg.connect(pg_url) as pg, pg.cursor(name=f"copy_{table}") as cursor:
            cursor.execute(f"SELECT * FROM {table} ORDER BY {order}")
            columns = [d.name for d in cursor.description]
            marks = ", ".join("?" for _ in columns)
            sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
            while rows := cursor.fetchmany(chunk):
                lite.executemany(sql, [tuple(_lite(v) for v in row) for row in rows])
                lite.commit()
    lite.execute("ANALYZE")
    lite.commit()
    lite.close()
    return time.perf_counter() - start


def _lite(value: Any) -> Any:
    """A PostgreSQL value as Django stores it in SQLite (times as UTC text, JSON as text)."""
    import datetime as dt

    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(" ")
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


# --- measurement (in a process per database) ---------------------------------------------------


def pages(vendor: str, total: int, requests: int) -> list[Any]:
    """The requests to time: (name, urls, headers)."""
    from console import keyset
    from console.jobs import ORDERINGS
    from inbox.models import Job

    cb = _console_module()
    Page = cb.Page

    def cursor_at(sort: str, job_id: str) -> str:
        ordering = ORDERINGS[sort]
        qs = Job.objects.filter(job_id=job_id)
        row = keyset.paginate(qs, ordering, {}, per_page=1).rows[0]
        return keyset.encode(ordering, ordering.values(row))

    def job(i: int) -> str:
        return f"job-{i:08d}"

    spread = [max(1, (total * (k + 1)) // (requests + 1)) for k in range(requests)]
    middle = [job(i) for i in spread]
    deep = {
        sort: [f"/jobs/?sort={sort}&after_row={cursor_at(sort, j)}" for j in middle[:5]]
        for sort in ("-created_at", "-updated_at", "state", "job_id")
    }
    out = [
        Page("jobs list, first page", ["/jobs/"]),
        Page("jobs list, deep page (newest first)", deep["-created_at"]),
        Page("jobs list, deep page (updated)", deep["-updated_at"]),
        Page("jobs list, deep page (state)", deep["state"]),
        Page("jobs list, deep page (job id)", deep["job_id"]),
        Page("jobs FAILED, first page", ["/jobs/?state=FAILED"]),
        Page("search: whole job id", [f"/jobs/?q={j}" for j in middle]),
        Page("search: object id prefix (~11)", [f"/jobs/?q=obj-{i // 10}" for i in spread]),
        Page("search: mission prefix (~11,100)", [f"/jobs/?q=m-{i // 10000}" for i in spread]),
        Page("search: job id prefix (~10,000)", [f"/jobs/?q={job(i)[:8]}" for i in spread]),
        Page("search: prefix of every job", ["/jobs/?q=job-"]),
        Page(
            "search: idempotency key prefix",
            [f"/jobs/?q=save_object:obj-{i // 100}" for i in spread],
        ),
        Page("job page", [f"/jobs/{j}/" for j in middle]),
        Page("audit log, first page", ["/audit/"]),
        Page("dashboard, whole page", ["/"]),
        Page("approvals, first page", ["/approvals/"]),
    ]
    if vendor == "postgresql":
        out += [
            Page(
                "payload: source_commit (~600)",
                [f"/jobs/?payload=source_commit%3Dc{i % 997}" for i in spread],
            ),
            Page(
                "payload: delete_request_id (1)",
                [f"/jobs/?payload=delete_request_id%3Dr{i}" for i in spread],
            ),
        ]
    return out


def measure(vendor: str, requests: int, warmup: int, gin: bool) -> list[dict[str, Any]]:
    """Time every page in this process (Django is set up for one database here)."""
    import re

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from inbox.models import Job

    total = Job.objects.count()
    user_model = get_user_model()
    user = user_model.objects.filter(
        username="bench"
    ).first() or user_model.objects.create_superuser("bench", "bench@example.invalid", "not-used")
    client = Client(raise_request_exception=True)
    client.force_login(user)
    results = []
    todo = pages(vendor, total, requests)
    Page = _console_module().Page

    def rows_poll() -> list[str]:
        """The first page's poll as the browser holding it sends it (version read off it)."""
        html = client.get("/jobs/").content.decode()
        tag = re.search(r'<tbody id="job-rows"[^>]*>', html).group(0)
        url = re.search(r'hx-get="([^"]*)"', tag).group(1).replace("&amp;", "&")
        version = re.search(r'data-v="([^"]*)"', tag).group(1)
        return [f"/jobs/{url}&v={version}"]

    def watch_poll() -> list[str]:
        """A held job's watcher, its version read off the job page just before polling."""
        held = Job.objects.filter(state="EXECUTING").order_by("-lease_until").first()
        html = client.get(f"/jobs/{held.job_id}/").content.decode()
        token = re.search(r'id="job-watch"[^>]*data-v="([^"]+)"', html).group(1)
        return [f"/jobs/{held.job_id}/?v={token}"]

    polls = {
        "rows poll, unchanged (204)": (rows_poll, "job-rows"),
        "job page watcher, unchanged (204)": (watch_poll, "job-watch"),
    }
    todo += [Page(name, []) for name in polls]
    for page in todo:
        target = ""
        if page.name in polls:
            make, target = polls[page.name]
            page.urls = make()
        headers = {"HX-Request": "true", "HX-Target": target} if target else {}
        for i in range(warmup):
            client.get(page.urls[i % len(page.urls)], headers=headers)
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(page.urls[0], headers=headers)
        # Read now: the next request's start empties the connection's query log.
        queries = len(ctx.captured_queries)
        sql = " ".join(q["sql"] for q in ctx.captured_queries).upper()
        status = {response.status_code}
        for i in range(requests):
            start = time.perf_counter()
            response = client.get(page.urls[i % len(page.urls)], headers=headers)
            page.times_ms.append((time.perf_counter() - start) * 1000)
            status.add(response.status_code)
        row = {
            "page": page.name,
            "p50": page.p50,
            "p95": page.p95,
            "queries": queries,
            "status": sorted(status),
            "offset": " OFFSET " in sql,
        }
        results.append(row)
        bl.say(
            f"  {vendor:10} {page.name:40} p50 {page.p50:8.1f}  p95 {page.p95:8.1f} ms  "
            f"q {row['queries']:2}  {row['status']}"
        )
    return results


def child(vendor: str, requests: int, warmup: int, gin: bool) -> None:
    os.environ.update(bl.BASE_ENV)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    import django

    django.setup()
    print("RESULT " + json.dumps(measure(vendor, requests, warmup, gin)), flush=True)


def run_child(url: str, vendor: str, args: argparse.Namespace, *, gin: bool = False) -> list:
    env = {**os.environ, **bl.BASE_ENV, "DATABASE_URL": url}
    cmd = [
        sys.executable,
        __file__,
        "--child",
        vendor,
        "--requests",
        str(args.requests),
        "--warmup",
        str(args.warmup),
    ] + (["--gin"] if gin else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=bl.ROOT)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-4000:])
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=None, help="default: one per job")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument("--child", default="")
    parser.add_argument("--gin", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests, args.warmup, args.gin)
        return
    facts = bl.machine_facts()  # at the start: the load average and the bytecode, before the runs
    cb = _console_module()
    events = args.events or args.jobs
    notes: list[str] = []
    if args.reuse and cb.loaded_counts() == (args.jobs, events) and SQLITE_PATH.exists():
        bl.migrate(bl.pg_url(cb.DB))
        notes.append(f"- reused {cb.DB} and {SQLITE_PATH.name}")
    else:
        bl.say(f"issue12: loading {args.jobs:,} jobs and {events:,} events into {cb.DB} …")
        timings = cb.load(args.jobs, events)
        bl.say(f"issue12: copying them into {SQLITE_PATH} …")
        timings["copy to SQLite + ANALYZE"] = copy_to_sqlite(bl.pg_url(cb.DB), SQLITE_PATH)
        notes.append(
            "- setup (not measured): " + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items())
        )
    pg = run_child(bl.pg_url(cb.DB), "postgresql", args)
    lite = run_child(bl.sqlite_url(SQLITE_PATH), "sqlite", args)
    import psycopg

    with psycopg.connect(bl.pg_url(cb.DB), autocommit=True) as conn:
        conn.execute(f"DROP INDEX IF EXISTS {GIN}")
        start = time.perf_counter()
        conn.execute(f"CREATE INDEX {GIN} ON inbox_job USING gin (payload jsonb_path_ops)")
        built = time.perf_counter() - start
        size = conn.execute(f"SELECT pg_size_pretty(pg_relation_size('{GIN}'))").fetchone()[0]
        table = conn.execute("SELECT pg_size_pretty(pg_relation_size('inbox_job'))").fetchone()[0]
        conn.execute("ANALYZE inbox_job")
    pg_gin = run_child(bl.pg_url(cb.DB), "postgresql", args, gin=True)
    with psycopg.connect(bl.pg_url(cb.DB), autocommit=True) as conn:
        conn.execute(f"DROP INDEX IF EXISTS {GIN}")
    notes.append(
        f"- GIN index (jsonb_path_ops) on payload: built in {built:.1f} s, {size} "
        f"(the table's heap: {table})"
    )
    gin_rows = {r["page"]: r for r in pg_gin if r["page"].startswith("payload")}
    lite_rows = {r["page"]: r for r in lite}
    rows = []
    for r in pg:
        lt = lite_rows.get(r["page"])
        g = gin_rows.get(r["page"])
        rows.append(
            [
                r["page"],
                bl.fmt(r["p50"]),
                bl.fmt(r["p95"]),
                f"{bl.fmt(g['p50'])} / {bl.fmt(g['p95'])}" if g else "",
                bl.fmt(lt["p50"]) if lt else "—",
                bl.fmt(lt["p95"]) if lt else "—",
                f"{r['queries']} / {lt['queries'] if lt else '—'}",
                "yes" if r["offset"] or (lt and lt["offset"]) else "no",
            ]
        )
    body = [
        f"{args.jobs:,} jobs, {events:,} audit events; {args.requests} requests per page after "
        f"{args.warmup} warm-up; server time through Django's test Client (ms).",
        "",
        bl.table(
            [
                "page",
                "PG p50",
                "PG p95",
                "PG + GIN p50 / p95",
                "SQLite p50",
                "SQLite p95",
                "queries PG / SQLite",
                "OFFSET",
            ],
            rows,
        ),
        "",
        *notes,
    ]
    bl.say("\n".join(body))
    facts["measured through"] = "django.test.Client in-process (server time)"
    path = bl.write_result("console-issue12", "Issue 12 at scale", body, facts)
    bl.say(f"\nwrote {path.relative_to(bl.ROOT)}")
    if not args.keep_db:
        bl.drop_pg_db(cb.DB)
        SQLITE_PATH.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
