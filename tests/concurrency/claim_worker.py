"""A claim worker for the real-process tests: claims batches until the pool is empty.

    python tests/concurrency/claim_worker.py --scope noop --limit 5 --worker-id w1 \
        --out claims-w1.txt --ready ready-w1 --go go

Sets Django up from ``DATABASE_URL`` (the ``proc_db`` environment), writes ``ready`` once set
up, waits for ``go`` so every worker starts together, then loops ``claim_next_jobs`` and writes
one ``job_id claim_id`` line per claimed job. Errors go to stderr (the test counts them); the
loop ends when nothing of the scope is READY any more.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scope", required=True)
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--lease-seconds", type=int, default=600)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--go", required=True)
    # Time "spent on" each claimed batch outside any transaction, as a real worker would;
    # without it SQLite's unfair lock can hand every batch to the first claimer.
    parser.add_argument("--work-ms", type=float, default=0.0)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from inbox.models import Job
    from inbox.transitions import claim_next_jobs

    Job.objects.exists()  # connect before the start signal
    Path(args.ready).touch()
    go = Path(args.go)
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            print("no start signal within 120 s", file=sys.stderr)
            return 2
        time.sleep(0.005)

    errors = 0
    with open(args.out, "w", encoding="utf-8") as out:
        while True:
            try:
                claimed = claim_next_jobs(
                    scope=args.scope,
                    worker_id=args.worker_id,
                    lease_seconds=args.lease_seconds,
                    limit=args.limit,
                )
            except Exception:
                errors += 1
                traceback.print_exc()
                if errors > 20:
                    return 1
                continue
            for job in claimed:
                out.write(f"{job.job_id} {job.claim_id}\n")
            if claimed and args.work_ms:
                time.sleep(args.work_ms / 1000)
            if not claimed and not Job.objects.ready(args.scope).exists():
                break
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
