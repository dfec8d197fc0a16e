"""One producer for the real-process idempotency test: creates one job document.

    python tests/concurrency/create_worker.py --doc doc.json --ready ready-0 --go go

Sets Django up from ``DATABASE_URL``, waits for ``go``, calls ``create_job`` once and prints
``created`` or ``replayed`` (anything else goes to stderr with a non-zero exit).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--doc", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--go", required=True)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from inbox.models import Job
    from inbox.transitions import create_job

    doc = json.loads(Path(args.doc).read_text(encoding="utf-8"))
    Job.objects.exists()  # connect before the start signal
    Path(args.ready).touch()
    go = Path(args.go)
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            print("no start signal within 120 s", file=sys.stderr)
            return 2
        time.sleep(0.002)
    job, created = create_job(doc, requested_by=f"producer-{os.getpid()}")
    print(("created" if created else "replayed") + f" {job.job_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
