"""Operator pauses of executor scopes.

Owns ``ScopePause`` rows. A paused scope is not claimed by any executor (they check every turn
and say so). Every change records an OPERATOR_ACTION event with who, what and why. Callers: the
console, the ``pause``/``resume`` commands and ``inbox.executor`` (``is_paused``).
"""

from __future__ import annotations

from django.db import transaction

from audit.events import record_event
from audit.models import EventType
from core.clock import db_now
from inbox.errors import InboxError
from inbox.jobtypes import scopes
from inbox.models import ScopePause


def _known(scope: str) -> str:
    known = scopes()
    if scope not in known:
        raise InboxError(f"unknown scope {scope!r}; known scopes: {', '.join(known)}")
    return scope


def _set(scope: str, *, paused: bool, actor: str, reason: str) -> ScopePause:
    if not actor:
        raise InboxError("a pause or resume needs an actor")
    with transaction.atomic():
        now = db_now()
        row, _ = ScopePause.objects.update_or_create(
            scope=_known(scope),
            defaults={"paused": paused, "reason": reason, "changed_by": actor, "changed_at": now},
        )
        record_event(
            event_type=EventType.OPERATOR_ACTION,
            actor=actor,
            detail={
                "action": "pause_scope" if paused else "resume_scope",
                "scope": scope,
                "reason": reason,
            },
            at=now,
        )
    return row


def pause_scope(scope: str, *, actor: str, reason: str) -> ScopePause:
    """Stop executors of ``scope`` from claiming (jobs in hand finish)."""
    if not (reason or "").strip():
        raise InboxError("pausing a scope needs a reason")
    return _set(scope, paused=True, actor=actor, reason=reason.strip())


def resume_scope(scope: str, *, actor: str, reason: str = "") -> ScopePause:
    """Let executors of ``scope`` claim again."""
    return _set(scope, paused=False, actor=actor, reason=(reason or "").strip())


def is_paused(scope: str) -> bool:
    return ScopePause.objects.filter(scope=scope, paused=True).exists()


def pause_of(scope: str) -> ScopePause | None:
    """The active pause of ``scope`` (who and why), or None."""
    return ScopePause.objects.filter(scope=scope, paused=True).first()


def paused_scopes() -> list[ScopePause]:
    return list(ScopePause.objects.filter(paused=True).order_by("scope"))
