"""Delete finished jobs and closed runs older than a cut; audit events are never deleted."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from core import logs
from inbox.management.commands._common import ConsoleCommand
from inbox.management.commands._operator import add_age, age_of
from inbox.retention import DEFAULT_BATCH, prune_jobs
from runs.retention import prune_runs


class Command(ConsoleCommand):
    help = (
        "Delete terminal jobs (SUCCEEDED, REJECTED, RECONCILED) that finished before the cut, "
        "with their approval rows and the throughput chart's per-minute counts, and closed "
        "consolidation runs (closed before the cut) with their groups and members. Works in "
        "small batches, each its own short transaction, printing progress; every DELETE "
        "re-checks state and age, so a job or run that changed meanwhile is kept. Audit events "
        "are never deleted: a pruned job's trail stays in the audit log. --dry-run counts what "
        "would go and deletes nothing."
    )

    def add_arguments(self, parser) -> None:
        add_age(
            parser,
            "--finished-older-than",
            help="the cut: jobs finished and runs closed longer ago than this, e.g. 30d, 12h, "
            "90m, 2w",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be deleted; delete nothing"
        )
        parser.add_argument(
            "--batch",
            type=int,
            default=DEFAULT_BATCH,
            help=f"rows per transaction (default {DEFAULT_BATCH})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        age = age_of(options, "--finished-older-than")
        if options["batch"] < 1:
            raise CommandError(f"--batch must be at least 1, got {options['batch']}")
        dry = options["dry_run"]
        say = logs.worker_out(self.stdout.write, logger="prune")
        say(
            f"{'dry run: counting' if dry else 'pruning'} jobs finished and runs closed more "
            f"than {options['finished_older_than']} ago (audit events are kept)"
        )
        jobs = prune_jobs(older_than=age, batch=options["batch"], dry_run=dry, progress=say)
        verb = "would delete" if dry else "deleted"
        say(
            f"jobs: {verb} {jobs.jobs:,} (and {jobs.approvals:,} approval rows, "
            f"{jobs.counts:,} per-minute throughput counts) in {jobs.seconds:.1f}s"
        )
        runs = prune_runs(older_than=age, batch=options["batch"], dry_run=dry, progress=say)
        say(
            f"runs: {verb} {runs.runs:,} with {runs.groups:,} groups and {runs.members:,} "
            f"members in {runs.seconds:.1f}s"
        )
