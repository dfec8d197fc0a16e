"""List worker heartbeats, alive or dead."""

from __future__ import annotations

import json
from typing import Any

from inbox.management.commands._common import ConsoleCommand
from inbox.workers import worker_rows


class Command(ConsoleCommand):
    help = (
        "List workers from their heartbeat rows: id, kind, scope, host, pid, status, last seen, "
        "current job, jobs done/failed, and ALIVE or DEAD (dead = not seen for 3 x poll + "
        "lease, on the database clock). --alive shows only live ones; --json prints JSON Lines."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--alive", action="store_true", help="only workers that are alive")
        parser.add_argument("--json", action="store_true", help="one JSON object per line")

    def handle(self, *args: Any, **options: Any) -> None:
        rows = [w for w in worker_rows() if w.alive or not options["alive"]]
        if options["json"]:
            for w in rows:
                self.stdout.write(
                    json.dumps(
                        {
                            "worker_id": w.worker_id,
                            "kind": w.kind,
                            "scope": w.scope,
                            "host": w.host,
                            "pid": w.pid,
                            "status": w.status,
                            "alive": w.alive,
                            "started_at": w.started_at.isoformat(),
                            "last_seen_at": w.last_seen_at.isoformat(),
                            "seen_ago_s": round(w.seen_ago_s, 1),
                            "current_job_id": w.current_job_id,
                            "jobs_done": w.jobs_done,
                            "jobs_failed": w.jobs_failed,
                        }
                    )
                )
            return
        if not rows:
            self.stdout.write("no workers")
            return
        header = (
            f"{'WORKER':<44} {'KIND':<9} {'SCOPE':<7} {'PID':>7} {'STATUS':<9} {'LIVE':<5} "
            f"{'SEEN':>8} {'DONE':>8} {'FAILED':>7}  CURRENT"
        )
        self.stdout.write(header)
        for w in rows:
            self.stdout.write(
                f"{w.worker_id[:44]:<44} {w.kind[:9]:<9} {w.scope[:7]:<7} {w.pid:>7} "
                f"{w.status:<9} {'ALIVE' if w.alive else 'DEAD':<5} {w.seen_ago_s:>7.1f}s "
                f"{w.jobs_done:>8} {w.jobs_failed:>7}  {w.current_job_id or '-'}"
            )
