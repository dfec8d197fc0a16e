"""Close a stuck consolidation run as an operator's action."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from inbox.management.commands._common import ConsoleCommand, column, reason, username
from runs.errors import RunError
from runs.models import Run, RunStatus
from runs.transitions import OPERATOR_CLOSE_STATUSES, close_run


class Command(ConsoleCommand):
    help = (
        "Close an active consolidation run, recorded as USERNAME's action with the reason "
        "(audit event RUN_ABANDONED by default). The user must exist, be active and hold the "
        "runs.close_run permission. Refused, with nothing written, when the run is already "
        "closed; --status expired additionally needs its lease to have lapsed and --status "
        "complete needs no group pending or served."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("run_id", type=column(Run, "run_id"), help="the run to close")
        parser.add_argument(
            "--reason", required=True, type=reason(), help="why (recorded on the event)"
        )
        parser.add_argument(
            "--as",
            dest="username",
            required=True,
            type=username(),
            help="the operator this action is recorded as",
        )
        parser.add_argument(
            "--status",
            default=RunStatus.ABANDONED,
            choices=[str(s) for s in OPERATOR_CLOSE_STATUSES],
            help="closing status (default abandoned)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        reason = options["reason"].strip()
        if not reason:
            raise CommandError("--reason must not be empty")
        User = get_user_model()
        user = User.objects.filter(**{User.USERNAME_FIELD: options["username"]}).first()
        if user is None or not user.is_active:
            raise CommandError(f"no active user {options['username']!r}")
        if not user.has_perm("runs.close_run"):
            raise CommandError(f"user {options['username']!r} lacks the runs.close_run permission")
        try:
            run = close_run(
                options["run_id"],
                status=options["status"],
                actor=user.get_username(),
                reason=reason,
            )
        except RunError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"run {run.run_id} on {run.store} closed {run.status} by {run.closed_by}")
