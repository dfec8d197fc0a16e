"""Revoke a granted DELETE approval before the job runs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from inbox.approvals import revoke_approval
from inbox.errors import InboxError
from inbox.management.commands._common import ConsoleCommand, column, reason, user_named, username
from inbox.models import Approval


class Command(ConsoleCommand):
    help = (
        "Revoke approval APPROVAL_ID as --as USERNAME (inbox.approve_delete permission), with a "
        "reason. Allowed while the job is READY or CLAIMED; the executor then rejects the job "
        "instead of running it."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("approval_id", type=column(Approval, "approval_id"))
        parser.add_argument(
            "--as", dest="username", required=True, type=username(), help="the revoking user"
        )
        parser.add_argument("--reason", required=True, type=reason(), help="why (recorded)")

    def handle(self, *args: Any, **options: Any) -> None:
        user = user_named(options["username"])
        try:
            approval = revoke_approval(options["approval_id"], actor=user, reason=options["reason"])
        except InboxError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"revoked approval {approval.approval_id} of job {approval.job_id} "
            f"as {approval.revoked_by}"
        )
