"""Pause an executor scope: executors stop claiming in it."""

from __future__ import annotations

from inbox.management.commands._operator import ScopeCommand
from inbox.scopes import pause_scope


class Command(ScopeCommand):
    help = (
        "Pause SCOPE with a reason: running executors stop claiming in it (jobs already in "
        "hand finish) until `resume SCOPE`. Recorded as an operator action."
    )
    reason_required = True
    reason_help = "why (recorded)"

    def change(self, scope: str, actor: str, reason: str) -> str:
        pause_scope(scope, actor=actor, reason=reason)
        return f"scope {scope} paused by {actor}: {reason}"
