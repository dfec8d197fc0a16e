"""Deny a DELETE job as a named user (four eyes: not its requester)."""

from __future__ import annotations

from typing import Any

from inbox.approvals import deny_delete
from inbox.management.commands._operator import DecisionCommand
from inbox.models import Job


class Command(DecisionCommand):
    help = (
        "Deny the CREATED DELETE job JOB_ID as --as USERNAME (who needs the "
        "inbox.approve_delete permission and must not be the requester), with a reason. The job "
        "becomes REJECTED and keeps the reason."
    )
    target = (Job, "job_id")
    user_help = "the deciding user"

    def decide(self, target: str, user: Any, options: dict[str, Any]) -> str:
        approval = deny_delete(target, approver=user, reason=options["reason"])
        return f"denied {approval.job_id} as {approval.approver}: job REJECTED"
