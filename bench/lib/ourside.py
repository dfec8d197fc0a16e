"""Our side of the benchmarks, run as a subprocess inside the tree under test.

It runs with that tree's interpreter and imports that tree's code (``BENCH_TREE``, this
checkout by default; ``config.settings``, ``DATABASE_URL`` from the environment), and prints one
JSON object per call, so one orchestrator drives several trees and both databases. It uses only
the project's public job API (``create_job``, ``create_jobs``) and its models' fields, which
every tree compared shares. Subcommands:

- ``enqueue``: N NOOP jobs through ``create_job``, one commit each (``--mode single``), or
  through ``create_jobs`` in calls of 1,000 (``--mode batched``): the measured paths.
- ``load``: N READY NOOP jobs through ``create_jobs`` (setup for a drain round, not measured).
- ``span``: a round read back from the database: first claim, last completion, audit events,
  and when the last of its executors made its first claim.
- ``tasks-enqueue``, ``tasks-span``: the same for no-op tasks through ``django.tasks``
  (``bench.lib.tasks.noop.enqueue()`` on the project's task backend, queue ``default``); the
  batched mode enqueues N in one transaction, as the API offers no bulk call.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(os.environ.get("BENCH_TREE") or Path(__file__).resolve().parents[2])
# This folder must not shadow the tree's modules; the tree comes first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.db import transaction  # noqa: E402
from django.db.models import Count, Max, Min  # noqa: E402

from audit.models import AuditEvent  # noqa: E402
from inbox.models import Job  # noqa: E402
from inbox.transitions import create_job, create_jobs  # noqa: E402

BATCH = 1000


def noop_document(mission: str, i: int) -> dict[str, Any]:
    """A valid NOOP job document (no approval: it is READY as soon as it is stored)."""
    return {
        "job_id": f"{mission}-{i:07d}",
        "job_version": 1,
        "mission_id": mission,
        "job_type": "NOOP",
        "object_id": f"obj-{i}",
        "vault_path": f"noop/{mission}/{i}",
        "idempotency_key": f"noop:{mission}:{i}",
    }


def _create_many(docs: list[dict[str, Any]]) -> None:
    for i in range(0, len(docs), BATCH):
        chunk = docs[i : i + BATCH]
        result = create_jobs(chunk, requested_by="bench")
        if not result.ok or len(result.created) != len(chunk):
            raise SystemExit(f"create_jobs stored {len(result.created)} of {len(chunk)} jobs")


def enqueue(n: int, mission: str, mode: str, offset: int = 0) -> dict[str, Any]:
    docs = [noop_document(mission, offset + i) for i in range(n)]
    start = time.perf_counter()
    if mode == "batched":
        _create_many(docs)
    else:
        for doc in docs:
            create_job(doc, requested_by="bench")
    seconds = time.perf_counter() - start
    return {"jobs": n, "seconds": seconds, "per_s": n / seconds}


def load(n: int, mission: str) -> dict[str, Any]:
    start = time.perf_counter()
    _create_many([noop_document(mission, i) for i in range(n)])
    return {"jobs": n, "seconds": time.perf_counter() - start}


def _events_by_type(events: Any) -> dict[str, int]:
    rows = events.values_list("event_type").annotate(c=Count("event_id"))
    return dict(rows.values_list("event_type", "c"))


def span(mission: str) -> dict[str, Any]:
    jobs = Job.objects.filter(mission_id=mission)
    succeeded = jobs.filter(state="SUCCEEDED")
    agg = succeeded.aggregate(n=Count("job_id"), first=Min("claimed_at"), last=Max("updated_at"))
    seconds = (agg["last"] - agg["first"]).total_seconds() if agg["n"] else float("nan")
    # Each executor's first claim of the round: the last of them is when every executor was
    # draining (a cold round's start-up shows here; a job keeps its claimer's id).
    firsts = list(
        succeeded.values("worker_id")
        .annotate(first=Min("claimed_at"))
        .values_list("first", flat=True)
    )
    joined = (max(firsts) - agg["first"]).total_seconds() if agg["n"] else float("nan")
    return {
        "succeeded": agg["n"],
        "span_s": seconds,
        "events": _events_by_type(AuditEvent.objects.filter(job_id__startswith=f"{mission}-")),
        "claimers": len(firsts),
        "joined_s": joined,
    }


def tasks_enqueue(n: int, mode: str) -> dict[str, Any]:
    """N no-op tasks through Django's task API, one commit each or one transaction for all."""
    from bench.lib.tasks import noop

    start = time.perf_counter()
    if mode == "batched":
        with transaction.atomic():
            for _ in range(n):
                noop.enqueue()
    else:
        for _ in range(n):
            noop.enqueue()
    seconds = time.perf_counter() - start
    return {"jobs": n, "seconds": seconds, "per_s": n / seconds}


def tasks_span(since: str) -> dict[str, Any]:
    """A tasks round read back: TASK jobs claimed since ``since`` (first claim → last finish)."""
    jobs = Job.objects.filter(job_type="TASK", claimed_at__gte=dt.datetime.fromisoformat(since))
    agg = jobs.filter(state="SUCCEEDED").aggregate(
        n=Count("job_id"), first=Min("claimed_at"), last=Max("updated_at")
    )
    seconds = (agg["last"] - agg["first"]).total_seconds() if agg["n"] else float("nan")
    events = _events_by_type(AuditEvent.objects.filter(job_id__in=jobs.values("job_id")))
    return {"succeeded": agg["n"], "span_s": seconds, "events": events}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("enqueue", help="N NOOP jobs through the public API (measured)")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--mission", required=True)
    p.add_argument("--mode", choices=["single", "batched"], default="single")
    p.add_argument("--offset", type=int, default=0, help="first document number (0)")
    p = sub.add_parser("load", help="N READY NOOP jobs (setup)")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--mission", required=True)
    p = sub.add_parser("span", help="read a round's figures back from the database")
    p.add_argument("--mission", required=True)
    p = sub.add_parser("tasks-enqueue", help="N no-op tasks through Task.enqueue() (measured)")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--mode", choices=["single", "batched"], default="single")
    p = sub.add_parser("tasks-span", help="read a tasks round back from the database")
    p.add_argument("--since", required=True)
    args = parser.parse_args()
    if args.cmd == "enqueue":
        out = enqueue(args.n, args.mission, args.mode, args.offset)
    elif args.cmd == "load":
        out = load(args.n, args.mission)
    elif args.cmd == "span":
        out = span(args.mission)
    elif args.cmd == "tasks-enqueue":
        out = tasks_enqueue(args.n, args.mode)
    else:
        out = tasks_span(args.since)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
