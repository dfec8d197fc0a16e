"""Approve a DELETE job as a named user (four eyes: not its requester)."""

from __future__ import annotations

from typing import Any

from inbox.approvals import approve_delete
from inbox.management.commands._operator import DecisionCommand
from inbox.models import Job


class Command(DecisionCommand):
    help = (
        "Approve the CREATED DELETE job JOB_ID as --as USERNAME (who needs the "
        "inbox.approve_delete permission and must not be the requester), with a reason. The job "
        "becomes READY; the approval expires after --ttl seconds "
        "(default INBOX_APPROVAL_TTL_SECONDS)."
    )
    target = (Job, "job_id")
    user_help = "the approving user"

    def add_arguments(self, parser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--ttl", type=int, default=None, help="approval lifetime in seconds")

    def decide(self, target: str, user: Any, options: dict[str, Any]) -> str:
        approval = approve_delete(
            target, approver=user, reason=options["reason"], ttl_seconds=options["ttl"]
        )
        return (
            f"approved {approval.job_id} as {approval.approver}: approval {approval.approval_id}, "
            f"valid until {approval.expires_at.isoformat()}"
        )
