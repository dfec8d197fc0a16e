"""List consolidation runs with their effective status and lease."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError

from inbox.management.commands._common import ConsoleCommand, column
from runs.models import Run
from runs.selectors import group_counts_by_run, list_runs


class Command(ConsoleCommand):
    help = (
        "List consolidation runs, most recent first: store, owner, stored status, effective "
        "status (an 'active' row past its lease shows as expired — reading never writes it), "
        "seconds left on the lease and group counts. --json prints one JSON array."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--store", default=None, type=column(Run, "store"), help="only runs of this store"
        )
        parser.add_argument("--limit", type=int, default=50, help="how many runs (default 50)")
        parser.add_argument("--json", action="store_true", help="print one JSON array")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["limit"] < 1:
            raise CommandError(f"--limit must be at least 1, got {options['limit']}")
        views = list_runs(store=options["store"], limit=options["limit"])
        counts = group_counts_by_run([v.run.run_id for v in views])
        rows = [
            {
                "run_id": v.run.run_id,
                "store": v.run.store,
                "worker_id": v.run.worker_id,
                "host": v.run.host,
                "pid": v.run.pid,
                "status": v.run.status,
                "effective_status": v.effective_status,
                "seconds_left": round(v.seconds_left, 3),
                "started_at": v.run.started_at.isoformat(),
                "expires_at": v.run.expires_at.isoformat(),
                "lease_seconds": v.run.lease_seconds,
                "closed_at": v.run.closed_at.isoformat() if v.run.closed_at else None,
                "closed_by": v.run.closed_by,
                "close_reason": v.run.close_reason,
                "replaced_run_id": v.run.replaced_run_id,
                "groups": counts[v.run.run_id],
            }
            for v in views
        ]
        if options["json"]:
            self.stdout.write(json.dumps(rows))
            return
        if not rows:
            self.stdout.write("no runs")
            return
        self.stdout.write(
            f"{'run_id':<32}  {'store':<16} {'owner':<28} {'status':<10} {'effective':<10} "
            f"{'left':>7}  groups p/s/d/def"
        )
        for r in rows:
            g = r["groups"]
            left = f"{r['seconds_left']:.0f}s" if r["effective_status"] == "active" else "-"
            self.stdout.write(
                f"{r['run_id']:<32}  {r['store'][:16]:<16} {r['worker_id'][:28]:<28} "
                f"{r['status']:<10} {r['effective_status']:<10} {left:>7}  "
                f"{g['pending']}/{g['served']}/{g['done']}/{g['deferred']}"
            )
