"""Delete heartbeat rows of workers dead for a long time (retention, run from cron)."""

from __future__ import annotations

from typing import Any

from core import logs
from inbox.management.commands._common import ConsoleCommand
from inbox.management.commands._operator import add_age, age_of
from inbox.retention import forget_workers


class Command(ConsoleCommand):
    help = (
        "Delete the heartbeat rows of workers dead for longer than --dead-for (a cleanly "
        "stopped worker is dead from its last beat; any other from when it missed 3 x poll + "
        "lease), on the database clock. A live worker is never deleted: the DELETE is guarded "
        "on the last beat it judged. --dry-run lists them and deletes nothing."
    )

    def add_arguments(self, parser) -> None:
        add_age(
            parser, "--dead-for", help="how long a worker must have been dead, e.g. 24h, 7d, 90m"
        )
        parser.add_argument("--dry-run", action="store_true", help="list them; delete nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        age = age_of(options, "--dead-for")
        say = logs.worker_out(self.stdout.write, logger="forget_workers")
        rows = forget_workers(dead_for=age, dry_run=options["dry_run"])
        verb = "would forget" if options["dry_run"] else "forgot"
        for row in rows:
            seen = row.last_seen_at.strftime("%Y-%m-%d %H:%M:%S")
            dead = row.dead_since.strftime("%Y-%m-%d %H:%M:%S")
            say(f"{verb} {row.worker_id} ({row.kind}), last seen {seen}, dead since {dead}")
        say(f"{verb} {len(rows)} worker(s) dead for more than {options['dead_for']}")
