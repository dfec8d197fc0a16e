"""The console under live load: 50 operators polling while K executors drain on PostgreSQL.

Setup (not measured): a fresh PostgreSQL database, migrated, with ``--history`` finished jobs,
three stores with an active run, and one user in the ``operator`` group per simulated operator,
each with a session made server-side (no login round trip, no password hashing). gunicorn runs
as in production: ``CONSOLE_ENV=production`` (hashed static files after ``collectstatic``, the
security headers, secure cookies; TLS is the proxy's, so ``DJANGO_SECURE_SSL_REDIRECT=0``),
``--workers`` sync workers (2, like ``manage.py demo``), the production-like settings of every
benchmark (DEBUG off, quiet logs, persistent connections).

The operators are threads of this process, one HTTP connection each, on loopback. Each opens one
page (the mix is ``MIX``: dashboard, jobs list, a job of the round being drained, workers, runs,
approvals, audit log) and then does what the page's own HTML tells a browser to do: every element
with ``data-poll`` and ``hx-trigger="every Ns"`` is requested every N seconds (random phase) as
htmx would (``HX-Request``, ``HX-Target``/``HX-Trigger`` = the element's id, ``?v=`` when it
carries ``data-v``, as static/js/console.js adds it), and the version it shows is taken from each
answer. A job page that stops polling (the job is final) is read for ``READ_SECONDS`` (10), then
left for another job of the round. The refresh rates are therefore the templates', whatever they
are.

Measured, rounds alternating quiet / loaded (``--repeats`` each, default 3):
- **drain rate**: N jobs bulk-loaded READY in a paused scope, K ``run_executor`` processes
  started and registered, then the scope resumed (``lib/drains.py``
  ``drain_warm``: N / first claim → last completion, read back from the database; the
  executors are long-running processes, so their Python start-up is not part of the drain;
  ``--cold`` starts them with the jobs waiting instead); quiet = no operator, loaded = the
  operators polling from ``--warmup`` seconds before the resume until the drain is over;
- **page latency** under load: p50/p95 per poller (and per full page load), requests sent
  during the drain (resume → last job finished);
- **cost of one poll**, with nothing draining: M sequential requests per poller, first with the
  version the page shows (what a poll of an unchanged page costs) and then without one (a poll
  that must render); CPU of the gunicorn workers plus PostgreSQL's processes, per request.

    .venv/bin/python bench/live_load.py                          # N=20,000, 3 repeats, 50 operators
    .venv/bin/python bench/live_load.py --jobs 3000 --repeats 2 --history 20000 --poll-requests 30
    # (the last line is what `make bench` runs)
"""

from __future__ import annotations

import argparse
import html
import http.client
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from urllib.parse import urljoin

from lib import base as bl
from lib import drains as dr

DB = bl.db_name("live")
K = 4
# Which page each operator opens, in proportion (50 operators: 14 dashboards, 10 jobs lists, …).
MIX = (
    ("dashboard", 14),
    ("jobs", 10),
    ("job", 10),
    ("workers", 5),
    ("runs", 4),
    ("approvals", 3),
    ("audit", 4),
)
PATHS = {
    "dashboard": "/",
    "jobs": "/jobs/",
    "workers": "/workers/",
    "runs": "/runs/",
    "approvals": "/approvals/",
    "audit": "/audit/",
}
STORES = ("store-a", "store-b", "store-c")
# How long an operator reads a job's page that stopped polling (final) before opening another.
READ_SECONDS = 10
TAG = re.compile(r"<([a-zA-Z]+)\s([^>]*)>")
ATTR = re.compile(r'([\w:-]+)="([^"]*)"')
EVERY = re.compile(r"every\s+(\d+(?:\.\d+)?)s")


# --- setup inside Django (run as ``live_load.py prepare`` with the database's environment) ------


def prepare(operators: int, history: int) -> None:
    """Operators with sessions (printed one per line), finished history, one run per store."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import Group, User
    from django.contrib.sessions.backends.db import SessionStore
    from django.db import connection

    from runs.transitions import plan_run

    group = Group.objects.get(name="operator")
    for i in range(operators):
        user = User.objects.create_user(f"op{i:02d}", password=None)
        user.groups.add(group)
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[-1]
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        print(f"session {session.session_key}")
    for store in STORES:
        plan_run(store=store, owner=f"bench-{store}", lease_seconds=24 * 3600)
    if history:
        # Finished jobs behind the live ones, so the pages read a table that is not empty.
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO inbox_job (job_id, job_version, mission_id, job_type, scope,
                    object_id, vault_path, payload, idempotency_key, requested_by, state,
                    result_code, attempt_count, max_attempts, worker_id, claim_id, last_error, note,
                    fingerprint, created_at, updated_at)
                SELECT 'hist-' || g, 1, 'history', 'NOOP', 'noop', 'obj-h' || g, 'noop/h/' || g,
                    '{}'::jsonb, 'hist:' || g, 'bench', 'SUCCEEDED', 'OK', 1, 5, 'bench-history',
                    'hist-claim-' || g, '', '', '',
                    now() - (g || ' seconds')::interval, now() - (g || ' seconds')::interval
                FROM generate_series(1, %s) AS g
                """,
                [history],
            )
            cursor.execute("ANALYZE")


# --- one simulated operator ---------------------------------------------------------------------


@dataclass
class Poller:
    """One element of a page that polls: where, how often, and the version it shows."""

    name: str  # page:element, the row of the latency table
    elt_id: str
    url: str
    every: float
    version: str | None
    due: float = 0.0


def pollers(page: str, path: str, body: str) -> list[Poller]:
    """Every ``data-poll`` element with an ``every Ns`` trigger, as htmx would poll it (its
    URL resolved against the page's, as the browser does: ``?from_row=…`` is relative)."""
    found = []
    for match in TAG.finditer(body):
        attrs = dict(ATTR.findall(match.group(2)))
        if "data-poll" not in match.group(2) or "hx-get" not in attrs:
            continue
        every = EVERY.search(attrs.get("hx-trigger", ""))
        if not every or "id" not in attrs:
            continue
        elt_id = attrs["id"]
        # Per-store and per-row ids (live-<hash>) are one kind of poller.
        kind = re.sub(r"-[0-9a-f]{12}$", "", elt_id)
        kind = {"live": "store-live"}.get(kind, kind)
        found.append(
            Poller(
                name=f"{page}:{kind}",
                elt_id=elt_id,
                url=urljoin(path, html.unescape(attrs["hx-get"])),
                every=float(every.group(1)),
                version=attrs.get("data-v"),
            )
        )
    return found


def refreshed(poller: Poller, body: str) -> Poller | None:
    """The poller as the answer left it (new version, new URL), None when it stopped."""
    for match in TAG.finditer(body):
        attrs = dict(ATTR.findall(match.group(2)))
        if attrs.get("id") != poller.elt_id:
            continue
        if "hx-get" not in attrs or not EVERY.search(attrs.get("hx-trigger", "")):
            return None
        poller.url = urljoin(poller.url, html.unescape(attrs["hx-get"]))
        poller.version = attrs.get("data-v", poller.version)
        return poller
    return poller


@dataclass
class Sample:
    name: str
    sent: float
    ms: float
    status: int


@dataclass
class Load:
    """The operators of one loaded round: threads, their samples and errors."""

    port: int
    sessions: list[str]
    job_ids: list[str]
    stop: threading.Event = field(default_factory=threading.Event)
    samples: list[Sample] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        pages = [page for page, n in MIX for _ in range(n)]
        for i, session in enumerate(self.sessions):
            page = pages[i % len(pages)]
            thread = threading.Thread(target=self.operator, args=(page, session), daemon=True)
            thread.start()
            self.threads.append(thread)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def get(
        self, conn: http.client.HTTPConnection, session: str, name: str, url: str, **headers: str
    ) -> tuple[int, str]:
        headers = {"Cookie": f"sessionid={session}", **headers}
        sent = time.perf_counter()
        try:
            conn.request("GET", url, headers=headers)
            response = conn.getresponse()
            body = response.read().decode()
            status = response.status
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            self.errors[f"{name}: {exc.__class__.__name__}"] += 1
            return 0, ""
        self.samples.append(Sample(name, sent, (time.perf_counter() - sent) * 1000, status))
        if status not in (200, 204):
            self.errors[f"{name}: HTTP {status}"] += 1
        return status, body

    def open_page(
        self, conn: http.client.HTTPConnection, session: str, page: str
    ) -> tuple[str, list[Poller]]:
        path = PATHS.get(page) or f"/jobs/{random.choice(self.job_ids)}/"
        _status, body = self.get(conn, session, f"{page} (full page)", path)
        now = time.perf_counter()
        found = pollers(page, path, body)
        for poller in found:
            poller.due = now + random.uniform(0, poller.every)
        return path, found

    def operator(self, page: str, session: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        # Operators arrive over two seconds, not all in the same instant.
        if self.stop.wait(random.uniform(0, 2)):
            return
        path, active = self.open_page(conn, session, page)
        while not self.stop.is_set():
            if not active:
                # A final job's page no longer polls: read it, then open another job.
                if self.stop.wait(READ_SECONDS):
                    break
                path, active = self.open_page(conn, session, page)
                continue
            poller = min(active, key=lambda p: p.due)
            if self.stop.wait(max(0.0, poller.due - time.perf_counter())):
                break
            url = poller.url
            if poller.version is not None:
                url += ("&" if "?" in url else "?") + f"v={poller.version}"
            status, body = self.get(
                conn,
                session,
                poller.name,
                url,
                **{
                    "HX-Request": "true",
                    "HX-Target": poller.elt_id,
                    "HX-Trigger": poller.elt_id,
                    "HX-Current-URL": f"http://127.0.0.1:{self.port}{path}",
                },
            )
            poller.due += poller.every
            if status == 200 and refreshed(poller, body) is None:
                active.remove(poller)
        conn.close()


# --- the measurement ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_web(env: dict[str, str], port: int, workers: int) -> subprocess.Popen:
    web = subprocess.Popen(
        [
            *(bl.PY, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}"),
            *("--workers", str(workers), "--graceful-timeout", "5"),
        ],
        env=env,
        cwd=bl.ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(bl.LOGS / "live-gunicorn.log", "w"),  # noqa: SIM115
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
            return web
        except OSError:  # refused, reset or timed out while it starts
            if time.monotonic() > deadline or web.poll() is not None:
                web.terminate()
                raise SystemExit("gunicorn did not come up") from None
            time.sleep(0.3)


def web_cpu_seconds(web: subprocess.Popen) -> float:
    """CPU (user + system) of gunicorn's workers so far (the arbiter's children)."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = open(f"/proc/{entry}/stat").read()  # noqa: SIM115
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        if int(fields[1]) == web.pid or int(entry) == web.pid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class DrainResult:
    mode: str  # quiet | loaded
    repeat: int
    rate: float
    note: str
    samples: list[Sample] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    client_cpu_s: float = 0.0
    web_cores: float = 0.0
    executor_cpu_ms_per_job: float = float("nan")
    # PostgreSQL's CPU over the drain per job drained: the executors' statements, and in a
    # loaded round the console's queries too (the difference is what the console costs there).
    server_cpu_ms_per_job: float = float("nan")


def drain_round(
    url: str,
    web: subprocess.Popen,
    mode: str,
    repeat: int,
    n: int,
    load: Load | None,
    warmup: float,
    cold: bool = False,
) -> DrainResult:
    mission = f"live-{mode}-{repeat}"
    r = dr.Round("ours", "pg", K, repeat, n)
    cpu_before = time.process_time()
    marks: dict[str, tuple[float, float]] = {}

    def operators_in() -> None:
        if load is not None:
            load.job_ids = [f"{mission}-{i:07d}" for i in range(n)]
            load.start()
            time.sleep(warmup)

    def at(when: str) -> None:
        marks[when] = (web_cpu_seconds(web), time.perf_counter())

    if cold:
        bl.OWN.side(url, "load", "--n", str(n), "--mission", mission)
        operators_in()
        at("start")
        dr.drain_cold(bl.OWN, url, r, mission)
        at("end")
    else:
        dr.drain_warm(bl.OWN, url, r, mission, before_release=operators_in, at=at)
    (web0, start), (web1, end) = marks["start"], marks["end"]
    result = DrainResult(mode, repeat, r.span_rate, r.note)
    # The cores gunicorn used while the executors ran: what the console took from the drain.
    result.web_cores = (web1 - web0) / (end - start)
    result.executor_cpu_ms_per_job = r.cpu_ms_per_job
    result.server_cpu_ms_per_job = r.server_cpu_ms_per_job
    if load is not None:
        load.finish()
        result.samples = [s for s in load.samples if start <= s.sent <= end]
        result.errors = dict(load.errors)
        result.requests = len(load.samples)
        result.client_cpu_s = time.process_time() - cpu_before
    bl.say(
        f"  {mode:6} repeat {repeat}: {r.span_rate:,.0f} jobs/s"
        + (f", {len(result.samples)} requests during the drain" if load else "")
        + (f" ({r.note})" if r.note else "")
    )
    return result


def poll_cost(
    url: str, web: subprocess.Popen, port: int, session: str, requests: int
) -> list[tuple]:
    """CPU per poll of every poller, unchanged (with the version shown) and forced to render."""
    # One READY job for the job page's watcher (drained with the first round's jobs).
    bl.OWN.side(url, "load", "--n", "1", "--mission", "watch")
    load = Load(port, [session], ["watch-0000000"])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    rows = []
    seen: set[str] = set()
    for page, _n in MIX:
        path, found = load.open_page(conn, session, page)
        for poller in found:
            if poller.name in seen:
                continue
            seen.add(poller.name)
            costs = []
            for with_version in (True, False):
                if not with_version or poller.version is not None:
                    url = poller.url
                    if with_version:
                        url += ("&" if "?" in url else "?") + f"v={poller.version}"
                    headers = {
                        "HX-Request": "true",
                        "HX-Target": poller.elt_id,
                        "HX-Trigger": poller.elt_id,
                        "HX-Current-URL": f"http://127.0.0.1:{port}{path}",
                    }
                    for _ in range(5):  # warm-up
                        load.get(conn, session, "warm-up", url, **headers)
                    web_before, pg_before = web_cpu_seconds(web), bl.pg_cpu_seconds()
                    load.samples.clear()
                    for _ in range(requests):
                        load.get(conn, session, poller.name, url, **headers)
                    web_ms = (web_cpu_seconds(web) - web_before) * 1000 / requests
                    pg_ms = (bl.pg_cpu_seconds() - pg_before) * 1000 / requests
                    statuses = sorted({s.status for s in load.samples})
                    size = len(load.get(conn, session, "size", url, **headers)[1])
                    costs.append((web_ms, pg_ms, statuses, size))
                else:
                    costs.append(None)
            unchanged, render = costs
            rows.append(
                (
                    poller.name,
                    f"{poller.every:g} s",
                    *(
                        (
                            "/".join(str(s) for s in c[2]),
                            f"{c[0]:.1f}",
                            f"{c[1]:.1f}",
                            f"{c[0] + c[1]:.1f}",
                            f"{c[3]:,}",
                        )
                        if c
                        else ("no version", "", "", "", "")
                        for c in (unchanged, render)
                    ),
                )
            )
            bl.say(f"  poll cost {rows[-1]}")
    conn.close()
    return [
        tuple(x for part in row for x in (part if isinstance(part, tuple) else (part,)))
        for row in rows
    ]


def live_cache(args: argparse.Namespace) -> str:
    """The web's CONSOLE_LIVE_CACHE as the report says it."""
    if args.live_cache is None:
        return "unset (the product's default)"
    return f"{args.live_cache:g}"


def report(
    args: argparse.Namespace,
    drains: list[DrainResult],
    costs: list[tuple],
    facts: dict[str, str],
) -> list[str]:
    quiet = [d.rate for d in drains if d.mode == "quiet"]
    loaded = [d.rate for d in drains if d.mode == "loaded"]
    q, lo = bl.median(quiet), bl.median(loaded)
    drop = (q - lo) / q * 100 if q else float("nan")
    samples: dict[str, list[float]] = defaultdict(list)
    statuses: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for d in drains:
        for s in d.samples:
            samples[s.name].append(s.ms)
            statuses[s.name][s.status] += 1
    worst_p95 = max((bl.percentile(v, 95) for v in samples.values()), default=float("nan"))
    loaded_rounds = [d for d in drains if d.mode == "loaded"]
    # Each loaded round against the quiet rounds on either side of it (the rate drifts as the
    # table grows and as the machine's neighbours come and go): a drop per pair.
    paired = []
    for i, d in enumerate(drains):
        if d.mode != "loaded":
            continue
        around = [x.rate for x in (drains[i - 1 : i] + drains[i + 1 : i + 2]) if x.mode == "quiet"]
        if around:
            base = sum(around) / len(around)
            paired.append((d.rate and (base - d.rate) / base * 100) if base else float("nan"))
    errors: dict[str, int] = defaultdict(int)
    for d in loaded_rounds:
        for k, v in d.errors.items():
            errors[k] += v
    start_words = (
        "started with the jobs waiting (`run_executor --scope noop --exit-when-idle`: their "
        "start-up inside the drain)"
        if args.cold
        else "already running when the round's jobs are released (`run_executor --scope noop`, "
        "the jobs waiting in a paused scope until every executor is up, then resumed; stopped "
        "when none is left)"
    )
    window = (
        "the executors' start to the round's read-back"
        if args.cold
        else "the resume to the last job finished"
    )
    body = [
        f"K = {K} executors, {start_words}, drain N = "
        f"{args.jobs:,} READY NOOP jobs per round on PostgreSQL, beside {args.history:,} finished "
        f"jobs; gunicorn {args.web_workers} sync workers, `CONSOLE_ENV=production`, "
        f"`CONSOLE_LIVE_CACHE` {live_cache(args)}; "
        f"{args.operators} operators (threads of the benchmark, one connection each, loopback) "
        "polling as the templates say; rounds alternate quiet / loaded, "
        f"{args.repeats} of each. Everything shares {os.cpu_count()} cores.",
        "",
        "## Drain rate, quiet vs loaded",
        "",
        bl.table(
            [
                "round",
                "repeat",
                "drain jobs/s",
                "requests in the window",
                "gunicorn cores in the window",
                "executors' CPU ms/job",
                "PostgreSQL CPU ms/job",
                "note",
            ],
            [
                (
                    d.mode,
                    d.repeat,
                    round(d.rate),
                    len(d.samples) if d.mode == "loaded" else "—",
                    f"{d.web_cores:.2f}",
                    f"{d.executor_cpu_ms_per_job:.2f}",
                    f"{d.server_cpu_ms_per_job:.2f}",
                    d.note,
                )
                for d in drains
            ],
        ),
        "",
        f"- median quiet: **{q:,.0f} jobs/s**; median loaded: **{lo:,.0f} jobs/s**; drop "
        f"**{drop:.1f} %** (goal ≤ 10 %: {'met' if drop <= 10 else 'NOT met'})",
        "- each loaded round against the mean of the quiet rounds beside it: "
        + " / ".join(f"{p:.1f} %" for p in paired)
        + f" (median {bl.median(paired):.1f} %)",
        "- PostgreSQL CPU per job drained, median: quiet "
        f"{bl.median(d.server_cpu_ms_per_job for d in drains if d.mode == 'quiet'):.2f} ms, "
        f"loaded {bl.median(d.server_cpu_ms_per_job for d in loaded_rounds):.2f} ms (the "
        "difference is the console's queries, per job)",
        f"- gunicorn used {bl.median(d.web_cores for d in loaded_rounds):.2f} of "
        f"{os.cpu_count()} cores while the executors ran (loaded rounds, median): that CPU, and "
        "the PostgreSQL work of its queries, is what the console takes from the drain"
        + ("; executors' CPU per job includes their start-up" if args.cold else ""),
        f"- operators' requests per loaded round ({window}): "
        f"{sum(len(d.samples) for d in loaded_rounds) / max(len(loaded_rounds), 1):,.0f}"
        "; the benchmark's own CPU over the loaded rounds (client threads): "
        f"{sum(d.client_cpu_s for d in loaded_rounds):.1f} s",
        f"- errors: {dict(errors) if errors else 'none'}",
        "",
        f"## Page latency under load (requests sent from {window})",
        "",
        bl.table(
            ["poller / page", "requests", "statuses", "p50 ms", "p95 ms", "max ms"],
            [
                (
                    name,
                    len(v),
                    ", ".join(f"{k}×{c}" for k, c in sorted(statuses[name].items())),
                    f"{bl.percentile(v, 50):.1f}",
                    f"{bl.percentile(v, 95):.1f}",
                    f"{max(v):.1f}",
                )
                for name, v in sorted(samples.items())
            ],
        ),
        "",
        f"- worst p95: **{worst_p95:.1f} ms** (goal < 200 ms: "
        f"{'met' if worst_p95 < 200 else 'NOT met'})",
        "",
        "## Cost of one poll (nothing draining)",
        "",
        f"{args.poll_requests} sequential requests per poller from one client; CPU of the gunicorn "
        "workers and of PostgreSQL's processes (background ones included) divided by the "
        "requests. *Unchanged*: the request carries the version the page shows (what almost "
        "every poll of a quiet page is); *render*: no version, the region is rendered. With "
        "`CONSOLE_LIVE_CACHE` above 0 the global regions (dashboard, store live blocks) answer "
        "both from the reading shared within their window, so both columns are mostly what an "
        "operator costs beside others, not a database read.",
        "",
        bl.table(
            [
                "poller",
                "every",
                "unchanged: status",
                "web ms",
                "PG ms",
                "total ms",
                "bytes",
                "render: status",
                "web ms",
                "PG ms",
                "total ms",
                "bytes",
            ],
            costs,
        ),
    ]
    return body


def main() -> None:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=20000, help="jobs per drain (20,000)")
    parser.add_argument("--repeats", type=int, default=3, help="quiet and loaded rounds (3 each)")
    parser.add_argument("--operators", type=int, default=50, help="simulated operators (50)")
    parser.add_argument("--history", type=int, default=100000, help="finished jobs (100,000)")
    parser.add_argument("--web-workers", type=int, default=2, help="gunicorn workers (2)")
    parser.add_argument("--warmup", type=float, default=5.0, help="operators before drain (5 s)")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="start the executors with the jobs waiting (their start-up inside the drain) "
        "instead of before the jobs are released",
    )
    parser.add_argument("--poll-requests", type=int, default=100, help="per poller (100)")
    parser.add_argument(
        "--live-cache",
        type=float,
        default=None,
        help="CONSOLE_LIVE_CACHE of the web (default: the product's, 0.5; 0 = no sharing)",
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    bl.require_pg("live_load")
    facts = bl.machine_facts()
    bl.recreate_pg_db(DB)
    url = bl.pg_url(DB)
    bl.migrate(url)
    static = bl.VAR / "live-static"
    bl.LOGS.mkdir(parents=True, exist_ok=True)
    env = bl.django_env(
        url,
        CONSOLE_ENV="production",
        DJANGO_SECRET_KEY="bench-live-load-" + "x" * 40,
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SECURE_SSL_REDIRECT="0",
        STATIC_ROOT=str(static),
        VAULT_ROOT=str(bl.VAR / "live-vault"),
    )
    if args.live_cache is not None:
        env["CONSOLE_LIVE_CACHE"] = f"{args.live_cache:g}"
    for store in STORES:
        (bl.VAR / "live-vault" / store).mkdir(parents=True, exist_ok=True)
    bl.run([bl.PY, bl.MANAGE, "collectstatic", "--noinput", "-v", "0"], env=env)
    out = bl.run([bl.PY, __file__, "prepare", str(args.operators), str(args.history)], env=env)
    sessions = [line.split()[1] for line in out.splitlines() if line.startswith("session ")]
    port = free_port()
    web = start_web(env, port, args.web_workers)
    drains: list[DrainResult] = []
    try:
        bl.say(f"poll cost ({args.poll_requests} requests per poller) …")
        costs = poll_cost(url, web, port, sessions[0], args.poll_requests)
        # One drain not measured: the executors' and the server's caches warm, as in a session.
        drain_round(url, web, "warm-up", 0, min(args.jobs, 2000), None, 0, args.cold)
        for rep in range(1, args.repeats + 1):
            for mode in ("quiet", "loaded"):
                load = Load(port, sessions, []) if mode == "loaded" else None
                drains.append(
                    drain_round(url, web, mode, rep, args.jobs, load, args.warmup, args.cold)
                )
    finally:
        web.terminate()
        web.wait(timeout=30)
    body = report(args, drains, costs, facts)
    bl.finish("live-load", "The console under live load", body, facts)
    if not args.keep_db:
        bl.drop_pg_db(DB)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "prepare":
        prepare(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
