"""Deny a DELETE job as a named user (four eyes: not its requester)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from inbox.approvals import deny_delete
from inbox.errors import InboxError
from inbox.management.commands._common import ConsoleCommand, column, reason, user_named, username
from inbox.models import Job


class Command(ConsoleCommand):
    help = (
        "Deny the CREATED DELETE job JOB_ID as --as USERNAME (who needs the "
        "inbox.approve_delete permission and must not be the requester), with a reason. The job "
        "becomes REJECTED and keeps the reason."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("job_id", type=column(Job, "job_id"))
        parser.add_argument(
            "--as", dest="username", required=True, type=username(), help="the deciding user"
        )
        parser.add_argument("--reason", required=True, type=reason(), help="why (recorded)")

    def handle(self, *args: Any, **options: Any) -> None:
        user = user_named(options["username"])
        try:
            approval = deny_delete(options["job_id"], approver=user, reason=options["reason"])
        except InboxError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"denied {approval.job_id} as {approval.approver}: job REJECTED")
