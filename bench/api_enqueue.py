"""The producer API's batch enqueue rate: jobs per second through HTTP, batches of 1,000.

Setup (not measured): a fresh PostgreSQL database, migrated, one producer token, and gunicorn
(``--workers``, default 2, sync) serving the console with the production-like settings of every
benchmark (DEBUG off, quiet logs, persistent connections).

Measured: for each number of concurrent clients (``--clients``, default 1 and 2, each its own
process with one keep-alive HTTP connection), every client POSTs ``--batches`` lists of
``--batch`` job documents (default 10 × 1,000) to ``/api/v1/jobs``. The rate is the jobs stored
divided by the time from the first request sent to the last answer received; every answer must
be 201 and the database must hold every job afterwards. SAVE_OBJECT documents (a short content
and its sha256) by default, ``--type NOOP`` for the smallest documents. ``--repeats`` rounds
(default 3) give the median. Client, server and PostgreSQL share the machine's cores.

    .venv/bin/python bench/api_enqueue.py
    .venv/bin/python bench/api_enqueue.py --clients 1,2,4 --batches 20
"""

from __future__ import annotations

import hashlib
import http.client
import json
import multiprocessing
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid

from lib import base as bl

DB = bl.db_name("api")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _doc(kind: str, tag: str, n: int) -> dict:
    doc = {
        "job_id": f"api-{tag}-{n}",
        "job_version": 1,
        "mission_id": f"bench-{tag}",
        "job_type": kind,
        "object_id": f"o-{tag}-{n}",
        "vault_path": f"bench/{tag}/{n}.md",
        "idempotency_key": f"api:{tag}:{n}",
    }
    if kind == "SAVE_OBJECT":
        content = f"# Bench note {tag} {n}\n\nSome text to store.\n"
        doc["content"] = content
        doc["provenance_hash"] = hashlib.sha256(content.encode()).hexdigest()
    return doc


def _client(port: int, token: str, bodies: list[bytes], out: multiprocessing.Queue) -> None:
    """POST every body on one keep-alive connection; report (statuses, latencies, start, end)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    statuses, latencies = [], []
    start = time.time()
    for body in bodies:
        t = time.perf_counter()
        conn.request("POST", "/api/v1/jobs", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        latencies.append((time.perf_counter() - t) * 1000)
        statuses.append(response.status)
    end = time.time()
    conn.close()
    out.put((statuses, latencies, start, end))


def _round(port: int, token: str, *, clients: int, batches: int, batch: int, kind: str) -> dict:
    tag = uuid.uuid4().hex[:8]
    # Bodies are encoded before the clock starts: the server's work is what is measured.
    work = [
        [
            json.dumps([_doc(kind, f"{tag}-{c}", b * batch + i) for i in range(batch)]).encode()
            for b in range(batches)
        ]
        for c in range(clients)
    ]
    queue: multiprocessing.Queue = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=_client, args=(port, token, bodies, queue))
        for bodies in work
    ]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=1800) for _ in procs]
    for proc in procs:
        proc.join()
    statuses = [s for r in results for s in r[0]]
    latencies = [x for r in results for x in r[1]]
    elapsed = max(r[3] for r in results) - min(r[2] for r in results)
    jobs = clients * batches * batch
    return {
        "jobs": jobs,
        "elapsed": elapsed,
        "rate": jobs / elapsed,
        "p50": bl.percentile(latencies, 50),
        "p95": bl.percentile(latencies, 95),
        "ok": all(s == 201 for s in statuses),
        "tag": tag,
    }


def main() -> None:
    parser = bl.arg_parser(__doc__)
    parser.add_argument("--clients", default="1,2", help="concurrent clients per round (1,2)")
    parser.add_argument("--batches", type=int, default=10, help="requests per client (10)")
    parser.add_argument("--batch", type=int, default=1000, help="documents per request (1000)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per client count (3)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (2)")
    parser.add_argument("--type", default="SAVE_OBJECT", choices=["SAVE_OBJECT", "NOOP"])
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()
    bl.require_pg("api_enqueue")
    facts = bl.machine_facts()
    bl.recreate_pg_db(DB)
    url = bl.pg_url(DB)
    bl.migrate(url)
    env = bl.django_env(url, DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost")
    token = bl.run([bl.PY, bl.MANAGE, "create_token", "--producer", "bench"], env=env).split()[-1]
    port = _free_port()
    web = subprocess.Popen(
        [
            bl.PY,
            "-m",
            "gunicorn",
            "config.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(args.workers),
            "--timeout",
            "300",
        ],
        env=env,
        cwd=bl.ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rows = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or web.poll() is not None:
                    raise SystemExit("gunicorn did not come up") from None
                time.sleep(0.3)
        # One warm-up request per worker (imports, connections), not measured.
        _round(port, token, clients=args.workers, batches=1, batch=10, kind=args.type)
        for clients in [int(c) for c in args.clients.split(",")]:
            rounds = []
            for _ in range(args.repeats):
                result = _round(
                    port,
                    token,
                    clients=clients,
                    batches=args.batches,
                    batch=args.batch,
                    kind=args.type,
                )
                bl.say(
                    f"  clients {clients}: {result['jobs']:,} jobs in {result['elapsed']:.2f} s "
                    f"= {result['rate']:,.0f} jobs/s (request p50 {result['p50']:.0f} ms, "
                    f"p95 {result['p95']:.0f} ms){'' if result['ok'] else ' NOT ALL 201'}"
                )
                rounds.append(result)
            rows.append(
                (
                    clients,
                    f"{args.batches} × {args.batch:,}",
                    round(bl.median(r["rate"] for r in rounds)),
                    ", ".join(f"{r['rate']:,.0f}" for r in rounds),
                    round(bl.median(r["p50"] for r in rounds)),
                    round(bl.median(r["p95"] for r in rounds)),
                    "yes" if all(r["ok"] for r in rounds) else "NO",
                )
            )
    finally:
        web.terminate()
        web.wait(timeout=30)
    import psycopg

    with psycopg.connect(url) as conn:
        stored = conn.execute("SELECT count(*) FROM inbox_job").fetchone()[0]
    expected = (
        sum(int(c) * args.batches * args.batch * args.repeats for c in args.clients.split(","))
        + args.workers * 10
    )
    body = [
        f"POST /api/v1/jobs with lists of {args.batch:,} {args.type} documents, gunicorn "
        f"{args.workers} sync workers, PostgreSQL; every client its own process with one "
        "keep-alive connection; bodies encoded before the clock starts.",
        "",
        bl.table(
            [
                "clients",
                "requests per client",
                "jobs/s (median)",
                "jobs/s per round",
                "request p50 ms",
                "request p95 ms",
                "all 201",
            ],
            rows,
        ),
        "",
        f"- jobs stored: {stored:,} (expected {expected:,})",
        f"- cores: {os.cpu_count()}; client processes, gunicorn and PostgreSQL share them",
    ]
    bl.finish("api-enqueue", "Producer API batch enqueue rate", body, facts)
    if not args.keep_db:
        bl.drop_pg_db(DB)


if __name__ == "__main__":
    main()
