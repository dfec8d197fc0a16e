"""The peer's side of the throughput benchmark: django-tasks-db, run with its own venv.

Mirrors ``bench/lib/ourside.py`` and prints one JSON object per call:
``enqueue`` (N no-op tasks through ``Task.enqueue``, one commit each or one transaction for all),
``load`` (bulk rows for the drain rounds: setup) and ``span`` (a round read back from the
database: first start to last finish of the tasks started since a given time).
"""

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peer_settings")

import django

django.setup()

from django.db import transaction  # noqa: E402
from django.db.models import Count, Max, Min  # noqa: E402
from django_tasks_db.models import DBTaskResult, get_date_max  # noqa: E402
from peer_tasks import noop  # noqa: E402


def enqueue(n: int, mode: str) -> dict:
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


def load(n: int, batch: int = 2000) -> dict:
    start = time.perf_counter()
    backend = noop.get_backend()
    for offset in range(0, n, batch):
        rows = [
            DBTaskResult(
                id=backend._get_id(),
                args_kwargs={"args": [], "kwargs": {}},
                priority=noop.priority,
                task_path=noop.module_path,
                queue_name=noop.queue_name,
                run_after=get_date_max(),
                backend_name=backend.alias,
            )
            for _ in range(min(batch, n - offset))
        ]
        DBTaskResult.objects.bulk_create(rows)
    return {"jobs": n, "seconds": time.perf_counter() - start}


def span(since: str) -> dict:
    rows = DBTaskResult.objects.filter(started_at__gte=dt.datetime.fromisoformat(since))
    agg = rows.filter(status="SUCCESSFUL").aggregate(
        n=Count("id"), first=Min("started_at"), last=Max("finished_at")
    )
    seconds = (agg["last"] - agg["first"]).total_seconds() if agg["n"] else float("nan")
    ready = DBTaskResult.objects.filter(status="READY").count()
    return {"succeeded": agg["n"], "span_s": seconds, "ready_left": ready}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("enqueue")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--mode", choices=["per-commit", "one-tx"], default="per-commit")
    p = sub.add_parser("load")
    p.add_argument("--n", type=int, required=True)
    p = sub.add_parser("span")
    p.add_argument("--since", required=True)
    args = parser.parse_args()
    if args.cmd == "enqueue":
        out = enqueue(args.n, args.mode)
    elif args.cmd == "load":
        out = load(args.n)
    else:
        out = span(args.since)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
