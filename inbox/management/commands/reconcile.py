"""Probe the vault for every OUTCOME_UNKNOWN job; with --auto, act on the evidence."""

from __future__ import annotations

from typing import Any

from audit.models import AuditEvent
from inbox import reconcile
from inbox.management.commands._common import ConsoleCommand
from inbox.management.commands._operator import add_actor, add_loop, run_loop


class Command(ConsoleCommand):
    help = (
        "Probe the vault (read-only) for every OUTCOME_UNKNOWN job and print the evidence and "
        "the action. With --auto: an absent object → RECONCILED CONFIRMED_DELETED; present with "
        "the expected hash → result_code RECONCILE_NOT_APPLIED; present with another hash → "
        "RECONCILE_CONFLICT (state unchanged; an operator decides). Evidence goes into the "
        "audit event. --dry-run (or no --auto) writes nothing; --loop repeats --auto every "
        "--interval seconds as a worker with a heartbeat."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--auto", action="store_true", help="apply the unambiguous outcomes")
        parser.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
        add_loop(parser, interval=30.0)
        add_actor(
            parser,
            AuditEvent,
            "actor",
            default="auto-reconciler",
            help="actor (default auto-reconciler)",
        )
        parser.add_argument("--quiet", action="store_true", help="print only the summary")

    def handle(self, *args: Any, **options: Any) -> None:
        apply = options["auto"] and not options["dry_run"]
        if options["loop"]:
            run_loop(
                "reconciler",
                options,
                lambda worker_id: self._once(apply=apply, actor=worker_id, quiet=True),
                self.stdout.write,
            )
            return
        said = self._once(apply=apply, actor=options["actor"], quiet=options["quiet"])
        if said:
            self.stdout.write(said)

    def _once(self, *, apply: bool, actor: str, quiet: bool) -> str:
        """One pass; the summary line to print (empty when a quiet pass changed nothing)."""
        plan = reconcile.plan_auto_reconcile()
        if not quiet:
            for a in plan:
                if a.evidence is None:
                    why = a.error or "no probe"
                    self.stdout.write(f"{a.job.job_id}  {a.job.vault_path}  ({why})  {a.action}")
                    continue
                state = (
                    "absent"
                    if not a.evidence.present
                    else ("present, expected hash" if a.evidence.matches else "present, OTHER hash")
                )
                self.stdout.write(f"{a.job.job_id}  {a.job.vault_path}  {state}  {a.action}")
        report = reconcile.auto_reconcile(actor=actor, dry_run=not apply, assessments=plan)
        if not quiet or report.confirmed or report.not_applied or report.conflict:
            return report.summary(dry_run=not apply)
        return ""
