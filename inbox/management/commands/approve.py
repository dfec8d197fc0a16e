"""Approve a DELETE job as a named user (four eyes: not its requester)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from inbox.approvals import approve_delete
from inbox.errors import InboxError
from inbox.management.commands._common import ConsoleCommand, column, reason, user_named, username
from inbox.models import Job


class Command(ConsoleCommand):
    help = (
        "Approve the CREATED DELETE job JOB_ID as --as USERNAME (who needs the "
        "inbox.approve_delete permission and must not be the requester), with a reason. The job "
        "becomes READY; the approval expires after --ttl seconds "
        "(default INBOX_APPROVAL_TTL_SECONDS)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("job_id", type=column(Job, "job_id"))
        parser.add_argument(
            "--as", dest="username", required=True, type=username(), help="the approving user"
        )
        parser.add_argument("--reason", required=True, type=reason(), help="why (recorded)")
        parser.add_argument("--ttl", type=int, default=None, help="approval lifetime in seconds")

    def handle(self, *args: Any, **options: Any) -> None:
        user = user_named(options["username"])
        try:
            approval = approve_delete(
                options["job_id"],
                approver=user,
                reason=options["reason"],
                ttl_seconds=options["ttl"],
            )
        except InboxError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"approved {approval.job_id} as {approval.approver}: approval {approval.approval_id}, "
            f"valid until {approval.expires_at.isoformat()}"
        )
