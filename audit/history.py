"""Rolling the audit app's migrations back erases the history: refused unless a setting says so.

Events are never deleted, not even by rolling a migration back. ``migrate audit zero``
used to drop the table (and ``migrate audit 0001`` the triggers) and exit 0. Two guards, both
read ``settings.AUDIT_ALLOW_ERASING_HISTORY`` (default False; the environment variable of the
same name set to 1 turns it on, see config/settings.py):

- ``refuse_backwards_plan`` (``pre_migrate``): ``migrate`` refuses a plan that unapplies any
  audit migration *before* it runs anything — other apps' migrations that depend on audit would
  otherwise be unapplied first;
- ``refuse_unless_allowed``: the reverse of migration 0003, for code that runs the migration
  executor without the ``migrate`` command. Every later audit migration must call it in its
  reverse too.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

SETTING = "AUDIT_ALLOW_ERASING_HISTORY"


class HistoryErasureRefused(CommandError):
    """Unapplying an audit migration would erase the audit history."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"refused: {what} would erase the audit history (audit events are never "
            f"deleted). If that is really meant, set {SETTING}=1 in the environment "
            f"(settings.{SETTING} = True) for this one command."
        )


def erasing_allowed() -> bool:
    return bool(getattr(settings, SETTING, False))


def refuse_backwards_plan(sender: Any, plan: Any = None, **kwargs: Any) -> None:
    """pre_migrate: refuse a plan that unapplies an audit migration (see the module docstring)."""
    if erasing_allowed() or not plan:
        return
    undone = [m for m, backwards in plan if backwards and m.app_label == "audit"]
    if undone:
        names = ", ".join(f"audit.{m.name}" for m in undone)
        raise HistoryErasureRefused(f"unapplying {names}")


def refuse_unless_allowed(apps: Any, schema_editor: Any) -> None:
    """A migration's reverse: refuse unless erasing the history is allowed."""
    if not erasing_allowed():
        raise HistoryErasureRefused("unapplying the audit migrations")
