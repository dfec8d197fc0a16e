"""Revoke a granted DELETE approval before the job runs."""

from __future__ import annotations

from typing import Any

from inbox.approvals import revoke_approval
from inbox.management.commands._operator import DecisionCommand
from inbox.models import Approval


class Command(DecisionCommand):
    help = (
        "Revoke approval APPROVAL_ID as --as USERNAME (inbox.approve_delete permission), with a "
        "reason. Allowed while the job is READY or CLAIMED; the executor then rejects the job "
        "instead of running it."
    )
    target = (Approval, "approval_id")
    user_help = "the revoking user"

    def decide(self, target: str, user: Any, options: dict[str, Any]) -> str:
        approval = revoke_approval(target, actor=user, reason=options["reason"])
        return (
            f"revoked approval {approval.approval_id} of job {approval.job_id} "
            f"as {approval.revoked_by}"
        )
