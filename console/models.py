"""Console bookkeeping: the request ids of operator actions (double-click / retry dedupe).

Rows are written only by ``console.policy.action`` in the same transaction as the action's own
writes, so "the action happened" and "this request id was used" commit or roll back together.

A request id belongs to its user: the same id from another user is another request,
never "already done" with someone else's outcome.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class ActionRequest(models.Model):
    """One operator POST, keyed by its user and the form's ``request_id``; a repeat by the same
    user does not act again."""

    request_id = models.CharField(max_length=64)
    # The user may be deleted later; the username keeps the record readable.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    username = models.CharField(max_length=150)
    action = models.CharField(max_length=100)
    outcome = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "request_id"], name="console_request_id_per_user"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.request_id} by {self.username}"


class AuditTally(models.Model):
    """How far ``/metrics`` has counted the audit log: events up to ``settled_id`` are in
    ``AuditTallyCount``. One row (pk 1), locked while a scrape moves it forward, so processes
    share one count and a new process does not count the whole log again
    (``console.metrics.EventTally``)."""

    settled_id = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"audit events counted through id {self.settled_id}"


class AuditTallyCount(models.Model):
    """Audit events of one type with ``event_id <= AuditTally.settled_id``."""

    event_type = models.CharField(max_length=40, primary_key=True)
    events = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.event_type}: {self.events}"
