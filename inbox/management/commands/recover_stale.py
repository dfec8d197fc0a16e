"""Apply the lapsed-lease rules to held jobs: requeue SAVE, park DELETE as OUTCOME_UNKNOWN."""

from __future__ import annotations

from typing import Any

from audit.models import AuditEvent
from inbox.management.commands._common import ConsoleCommand, cli_actor
from inbox.management.commands._operator import add_actor, add_loop, run_loop
from inbox.transitions import recover_stale_claims_report


class Command(ConsoleCommand):
    help = (
        "Recover jobs whose lease lapsed: idempotent ones (SAVE) go back to READY, "
        "or FAILED with MAX_ATTEMPTS once out of attempts; non-idempotent ones (DELETE) are "
        "parked as OUTCOME_UNKNOWN, never requeued. Prints what it did; --dry-run prints what it "
        "would do and writes nothing; --loop repeats every --interval seconds as a worker with "
        "a heartbeat until SIGTERM/SIGINT."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="report only; write nothing")
        add_loop(parser, interval=10.0)
        add_actor(parser, AuditEvent, "actor", help="actor (default sweeper)")

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = options["dry_run"]

        def sweep(actor: str) -> str:
            report = recover_stale_claims_report(dry_run=dry_run, actor=actor)
            if report.total or report.refused or not options["loop"]:
                return report.summary(dry_run=dry_run)
            return ""

        if options["loop"]:
            run_loop(
                "sweeper",
                options,
                lambda worker_id: sweep(options["actor"] or worker_id),
                self.stdout.write,
            )
        else:
            self.stdout.write(
                sweep(options["actor"] or cli_actor(None).replace("cli:", "sweeper:"))
            )
