"""Resume a paused executor scope."""

from __future__ import annotations

from inbox.management.commands._operator import ScopeCommand
from inbox.scopes import resume_scope


class Command(ScopeCommand):
    help = "Resume SCOPE: executors claim in it again. Recorded as an operator action."
    reason_required = False
    reason_help = "why (recorded; optional)"

    def change(self, scope: str, actor: str, reason: str) -> str:
        resume_scope(scope, actor=actor, reason=reason)
        return f"scope {scope} resumed by {actor}"
