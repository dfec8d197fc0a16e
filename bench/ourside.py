"""Our side of the throughput and memory benchmarks, run as a subprocess per step.

It runs inside the project (``config.settings``, ``DATABASE_URL`` from the environment) and
prints one JSON object per call, so the orchestrator can drive PostgreSQL and SQLite from one
process. Subcommands:

- ``enqueue``: create N NOOP jobs through ``inbox.transitions.create_job`` (the measured path),
  one commit per job or one transaction for all.
- ``load``: bulk-insert N READY NOOP jobs with their REQUESTED and READY events (setup for the
  drain rounds; the same rows ``create_job`` writes, without the per-job cost).
- ``span``: read back a round from the database: first claim, last completion, audit events,
  and when the last of its executors made its first claim.
- ``work``: the fallback drain loop (claim_next_jobs → begin_job → complete_job in one process),
  used only when ``manage.py run_executor`` is not available; results say so.
- ``tasks-enqueue``, ``tasks-load``, ``tasks-span``: the same for N no-op tasks through
  ``django.tasks`` (``bench.ourtasks.noop.enqueue()`` on ``InboxTaskBackend``, queue
  ``default``); the load hands the backend's own documents to ``create_jobs`` (setup), the span
  reads the TASK jobs claimed since a given time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import datetime as dt  # noqa: E402

from django.db import connection, transaction  # noqa: E402
from django.db.models import Count, Max, Min  # noqa: E402

from audit.events import Event, record_events  # noqa: E402
from audit.models import AuditEvent, EventType  # noqa: E402
from inbox.models import Job, JobState  # noqa: E402
from inbox.transitions import create_job, create_jobs, fingerprint_of  # noqa: E402


def noop_document(mission: str, i: int) -> dict[str, Any]:
    """A valid NOOP job document (DESIGN §1.8)."""
    return {
        "job_id": f"{mission}-{i:07d}",
        "job_version": 1,
        "mission_id": mission,
        "job_type": "NOOP",
        "object_id": f"obj-{i}",
        "vault_path": f"noop/{mission}/{i}",
        "idempotency_key": f"noop:{mission}:{i}",
    }


def enqueue(n: int, mission: str, mode: str) -> dict[str, Any]:
    docs = [noop_document(mission, i) for i in range(n)]
    start = time.perf_counter()
    if mode == "one-tx":
        with transaction.atomic():
            for doc in docs:
                create_job(doc, requested_by="bench")
    elif mode == "batch-1000":
        # create_jobs: one set-based call (one transaction) per 1,000 documents.
        for i in range(0, n, 1000):
            create_jobs(docs[i : i + 1000], requested_by="bench")
    else:
        for doc in docs:
            create_job(doc, requested_by="bench")
    seconds = time.perf_counter() - start
    return {"jobs": n, "seconds": seconds, "per_s": n / seconds}


def load(n: int, mission: str, batch: int = 2000) -> dict[str, Any]:
    start = time.perf_counter()
    for offset in range(0, n, batch):
        jobs, events = [], []
        for i in range(offset, min(n, offset + batch)):
            doc = noop_document(mission, i)
            job = Job(
                job_id=doc["job_id"],
                job_version=1,
                mission_id=mission,
                job_type="NOOP",
                scope="noop",
                object_id=doc["object_id"],
                vault_path=doc["vault_path"],
                payload=doc,
                idempotency_key=doc["idempotency_key"],
                requested_by="bench",
                state=JobState.READY,
            )
            job.fingerprint = fingerprint_of(job)
            jobs.append(job)
            events.append(
                Event(
                    EventType.REQUESTED,
                    "bench",
                    job_id=job.job_id,
                    detail={"job_type": "NOOP", "object_id": job.object_id, "to": "CREATED"},
                )
            )
            events.append(
                Event(
                    EventType.READY,
                    "bench",
                    job_id=job.job_id,
                    detail={"from": "CREATED", "to": "READY", "fingerprint": job.fingerprint},
                )
            )
        with transaction.atomic():
            Job.objects.bulk_create(jobs)
            record_events(events)
    return {"jobs": n, "seconds": time.perf_counter() - start}


def span(mission: str) -> dict[str, Any]:
    jobs = Job.objects.filter(mission_id=mission)
    succeeded = jobs.filter(state=JobState.SUCCEEDED)
    agg = succeeded.aggregate(n=Count("job_id"), first=Min("claimed_at"), last=Max("updated_at"))
    states = dict(jobs.values_list("state").annotate(c=Count("job_id")).values_list("state", "c"))
    # Events of this round's jobs, by type (the audit trail each job got).
    prefix = f"{mission}-"
    by_type = dict(
        AuditEvent.objects.filter(job_id__startswith=prefix)
        .values_list("event_type")
        .annotate(c=Count("event_id"))
        .values_list("event_type", "c")
    )
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
        "states": states,
        "span_s": seconds,
        "events": by_type,
        "claimers": len(firsts),
        "joined_s": joined,
    }


def tasks_enqueue(n: int, mode: str) -> dict[str, Any]:
    """N no-op tasks through Django's task API, one commit each or one transaction for all."""
    from bench.ourtasks import noop

    start = time.perf_counter()
    if mode == "one-tx":
        with transaction.atomic():
            for _ in range(n):
                noop.enqueue()
    else:
        for _ in range(n):
            noop.enqueue()
    seconds = time.perf_counter() - start
    return {"jobs": n, "seconds": seconds, "per_s": n / seconds}


def tasks_load(n: int, batch: int = 2000) -> dict[str, Any]:
    """N READY no-op task jobs: the backend's own documents through ``create_jobs`` (setup)."""
    from bench.ourtasks import noop
    from inbox.transitions import create_jobs

    backend = noop.get_backend()
    start = time.perf_counter()
    for offset in range(0, n, batch):
        docs = [backend.document(noop, (), {}) for _ in range(min(batch, n - offset))]
        assert create_jobs(docs, requested_by="bench").ok
    return {"jobs": n, "seconds": time.perf_counter() - start}


def tasks_span(since: str) -> dict[str, Any]:
    """A tasks round read back: TASK jobs claimed since ``since`` (first claim → last finish)."""
    jobs = Job.objects.filter(job_type="TASK", claimed_at__gte=dt.datetime.fromisoformat(since))
    agg = jobs.filter(state=JobState.SUCCEEDED).aggregate(
        n=Count("job_id"), first=Min("claimed_at"), last=Max("updated_at")
    )
    by_type = dict(
        AuditEvent.objects.filter(job_id__in=jobs.values("job_id"))
        .values_list("event_type")
        .annotate(c=Count("event_id"))
        .values_list("event_type", "c")
    )
    seconds = (agg["last"] - agg["first"]).total_seconds() if agg["n"] else float("nan")
    ready = Job.objects.filter(job_type="TASK", state=JobState.READY).count()
    return {"succeeded": agg["n"], "span_s": seconds, "events": by_type, "ready_left": ready}


def work(scope: str, batch: int, lease: int) -> dict[str, Any]:
    """Fallback drain loop through the public transitions (no executor command)."""
    from inbox.transitions import begin_job, claim_next_jobs, complete_job

    worker_id = f"bench-direct-{os.getpid()}"
    done = 0
    while True:
        jobs = claim_next_jobs(scope=scope, worker_id=worker_id, lease_seconds=lease, limit=batch)
        if not jobs:
            break
        for job in jobs:
            begin_job(job.job_id, claim_id=job.claim_id, actor=worker_id)
            complete_job(job.job_id, claim_id=job.claim_id, actor=worker_id)
            done += 1
    return {"done": done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("enqueue", help="create N NOOP jobs through create_job (measured)")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--mission", required=True)
    p.add_argument("--mode", choices=["per-commit", "one-tx", "batch-1000"], default="per-commit")
    p = sub.add_parser("load", help="bulk-insert N READY NOOP jobs (setup)")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--mission", required=True)
    p = sub.add_parser("span", help="read a round's figures back from the database")
    p.add_argument("--mission", required=True)
    p = sub.add_parser("work", help="fallback drain loop through the transitions")
    p.add_argument("--scope", default="noop")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--lease", type=int, default=60)
    p = sub.add_parser("tasks-enqueue", help="N no-op tasks through Task.enqueue() (measured)")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--mode", choices=["per-commit", "one-tx"], default="per-commit")
    p = sub.add_parser("tasks-load", help="N READY no-op task jobs (setup)")
    p.add_argument("--n", type=int, required=True)
    p = sub.add_parser("tasks-span", help="read a tasks round back from the database")
    p.add_argument("--since", required=True)
    p = sub.add_parser("vendor", help="print the database vendor")
    args = parser.parse_args()
    if args.cmd == "enqueue":
        out = enqueue(args.n, args.mission, args.mode)
    elif args.cmd == "load":
        out = load(args.n, args.mission)
    elif args.cmd == "span":
        out = span(args.mission)
    elif args.cmd == "work":
        out = work(args.scope, args.batch, args.lease)
    elif args.cmd == "tasks-enqueue":
        out = tasks_enqueue(args.n, args.mode)
    elif args.cmd == "tasks-load":
        out = tasks_load(args.n)
    elif args.cmd == "tasks-span":
        out = tasks_span(args.since)
    else:
        out = {"vendor": connection.vendor}
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
