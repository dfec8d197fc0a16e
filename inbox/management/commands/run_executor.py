"""Run an executor: claim jobs of one scope, run them against the vault, record outcomes."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from inbox.errors import ConfigurationError
from inbox.executor import Executor
from inbox.management.commands._common import (
    WORKER_SYSTEM_CHECKS,
    ConsoleCommand,
    allow_bare_verbose,
    column,
    setup_logging,
)
from inbox.models import Job, Worker


class Command(ConsoleCommand):
    requires_system_checks = WORKER_SYSTEM_CHECKS
    help = (
        "Run an executor for one scope (save, delete, noop, a django.tasks queue of "
        "InboxTaskBackend such as default, or any registered scope): claim a "
        "batch under a lease, authorize each job (schema, fingerprint, approval), run its "
        "handler and record EXECUTED with SUCCEEDED / FAILED / OUTCOME_UNKNOWN (or, for a task "
        "with retries left, RETRY_SCHEDULED). Beats a "
        "heartbeat, sweeps lapsed leases every --sweep-every turns, does not claim while the "
        "scope is paused, and prints progress every --progress-every seconds. Jobs of "
        "idempotent types that need no approval (NOOP, SAVE) begin and record together, one "
        "transaction per step; a DELETE is always a batch of one. SIGTERM/SIGINT: stop "
        "claiming, finish the jobs begun, release the rest of the batch, exit 0. Exits non-zero "
        "on a configuration error."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        allow_bare_verbose(parser)
        return parser

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--scope",
            required=True,
            type=column(Job, "scope"),
            help="the scope to claim (e.g. save)",
        )
        parser.add_argument(
            "--worker-id",
            default=None,
            type=column(Worker, "worker_id"),
            help="heartbeat id (default: executor-SCOPE-HOST-PID-…)",
        )
        parser.add_argument(
            "--lease", type=int, default=60, help="lease length in seconds (default 60)"
        )
        parser.add_argument("--batch", type=int, default=10, help="jobs per claim (default 10)")
        parser.add_argument(
            "--poll", type=float, default=1.0, help="seconds to wait when idle (default 1.0)"
        )
        parser.add_argument("--max-jobs", type=int, default=None, help="stop after this many jobs")
        parser.add_argument(
            "--exit-when-idle",
            action="store_true",
            help="exit when a claim finds nothing (or the scope is paused)",
        )
        parser.add_argument(
            "--sweep-every",
            type=int,
            default=50,
            help="run the stale-lease sweep every N turns; 0 disables it (default 50)",
        )
        parser.add_argument(
            "--progress-every",
            type=float,
            default=10.0,
            help="seconds between progress lines (default 10)",
        )
        parser.add_argument(
            "--one-by-one",
            action="store_true",
            help="begin and record every job in its own transaction, idempotent ones too "
            "(slower; for comparison and debugging)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        setup_logging(options["verbosity"])
        try:
            executor = Executor(
                scope=options["scope"],
                worker_id=options["worker_id"],
                lease_seconds=options["lease"],
                batch=options["batch"],
                poll_seconds=options["poll"],
                max_jobs=options["max_jobs"],
                exit_when_idle=options["exit_when_idle"],
                sweep_every=options["sweep_every"],
                progress_seconds=options["progress_every"],
                batch_steps=not options["one_by_one"],
                out=self.stdout.write,
            )
            executor.run()
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
