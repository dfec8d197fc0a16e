"""Start the consolidator worker for one store."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.management.base import CommandError

from core import logs
from inbox.dbcheck import describe_database
from inbox.errors import ConfigurationError
from inbox.management.commands._common import WORKER_SYSTEM_CHECKS, ConsoleCommand, column
from runs.errors import ConsolidatorError, RunError
from runs.models import Run
from runs.transitions import DEFAULT_LEASE_SECONDS
from runs.worker import ConsolidatorWorker


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds >= 1")
    return value


class Command(ConsoleCommand):
    requires_system_checks = WORKER_SYSTEM_CHECKS
    help = (
        "Run the consolidator on one store: plan a run under a lease (taking over or closing any "
        "run already active there), serve its groups one by one, dispose each member (the "
        "bundled vault deduplicator keeps one copy per identical content and requests an "
        "approval-gated DELETE job for each other copy), and print progress. The lease is "
        "refreshed on every group served and member disposed. On SIGTERM/SIGINT the worker "
        "finishes the member in flight, then closes its run 'abandoned' (instead of leaving it "
        "to expire) so operators see at once that nobody holds the store and the next "
        "consolidator need not take over a dead lease; a worker killed outright leaves its run "
        "to expire. If another worker takes the store over, this one stops (exit 0). Exits "
        "non-zero with a message on a configuration error (database not fit for workers, "
        "RUNS_CONSOLIDATOR not importable, VAULT_ROOT missing)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--store",
            required=True,
            type=column(Run, "store"),
            help="store name the run belongs to",
        )
        parser.add_argument(
            "--lease",
            type=_positive_int,
            default=DEFAULT_LEASE_SECONDS,
            help=f"run lease in whole seconds (default {DEFAULT_LEASE_SECONDS})",
        )
        parser.add_argument(
            "--worker-id",
            default="",
            type=column(Run, "worker_id"),
            help="owner id recorded on the run (default consolidator-STORE-HOST-PID-…)",
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help="stop after one run completes (default: plan again after --idle seconds)",
        )
        parser.add_argument(
            "--idle",
            type=float,
            default=30.0,
            help="seconds to wait after a run completes before planning the next (default 30)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = options["verbosity"]
        if verbosity >= 2:
            logging.getLogger("runs").setLevel(logging.DEBUG)
        try:
            # The worker checks (with the database) run in the loop's start-up, which waits
            # out a database that is away.
            description = describe_database()
            worker = ConsolidatorWorker(
                store=options["store"],
                worker_id=options["worker_id"] or None,
                lease_seconds=options["lease"],
                once=options["once"],
                idle_seconds=options["idle"],
                say=self._say(verbosity),
            )
            worker.consolidator.check()
        except (ConfigurationError, ConsolidatorError) as exc:
            raise CommandError(f"configuration error: {exc}") from exc
        if verbosity >= 1:
            logs.worker_out(self.stdout.write)(f"database: {description}")
        try:
            worker.run()  # prints its summary line last
        except ConfigurationError as exc:
            raise CommandError(f"configuration error: {exc}") from exc
        except ConsolidatorError as exc:
            raise CommandError(f"consolidator error: {exc}") from exc
        except RunError as exc:
            # e.g. two active rows for the store: refused, never resolved by picking one.
            raise CommandError(f"run error: {exc}") from exc

    def _say(self, verbosity: int):
        def say(text: str) -> None:
            if verbosity >= 1:
                self.stdout.write(text)
                self.stdout.flush()

        return say
