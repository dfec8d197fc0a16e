"""The append-only audit log: events are never updated or deleted, by any path.

Rows are created only by ``audit.events.record_event``. Updates and deletes are refused by the
model, the queryset, the admin and, last and strongest, by database triggers (migration 0002).
"""

from django.db import models
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from core.db import is_new


class AppendOnlyError(Exception):
    """Raised when code tries to change or remove an audit event."""


class EventType(models.TextChoices):
    # A producer asked for a job (never an authorization).
    REQUESTED = "REQUESTED"
    # Schema (and, for DELETE, approval) checked: CREATED → READY.
    READY = "READY"
    # Validation failed, approval denied/expired, or authorization failed at execution.
    REJECTED = "REJECTED"
    # A worker took the job under a lease.
    CLAIMED = "CLAIMED"
    # A holder extended its lease (heartbeat).
    LEASE_RENEWED = "LEASE_RENEWED"
    # A holder handed back a job it never began.
    RELEASED = "RELEASED"
    # The worker confirmed it is starting: CLAIMED → EXECUTING.
    STARTED = "STARTED"
    # The executor validated the job (and approval) right before running it.
    AUTHORIZED = "AUTHORIZED"
    # The mutation was attempted; detail carries its result.
    EXECUTED = "EXECUTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    # The sweep found a lapsed lease and moved the job on by the recovery rules (detail: to-state).
    LEASE_EXPIRED = "LEASE_EXPIRED"
    # An operator sent a FAILED job back to READY.
    RETRIED = "RETRIED"
    # A failed attempt of an idempotent job with retries left: EXECUTING → READY, not claimed
    # before its ``run_after`` (detail: attempt, delay, run_after, error).
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    RECONCILED = "RECONCILED"
    # A diagnosis stored as result_code without a state change.
    DIAGNOSED = "DIAGNOSED"
    # An immutable field changed behind our back; the transition was refused.
    FINGERPRINT_DRIFT = "FINGERPRINT_DRIFT"
    # A worker-side write from a holder that no longer holds the claim.
    STALE_WRITE_REJECTED = "STALE_WRITE_REJECTED"
    # Approval decisions.
    APPROVED = "APPROVED"
    DENIED = "DENIED"
    APPROVAL_REVOKED = "APPROVAL_REVOKED"
    # A raw edit through Django admin (detail: changed field names).
    ADMIN_EDIT = "ADMIN_EDIT"
    # Any other operator action (pause, resume, notes): who, what, why.
    OPERATOR_ACTION = "OPERATOR_ACTION"
    # Consolidation run phases.
    RUN_PLANNED = "RUN_PLANNED"
    RUN_GROUP_SERVED = "RUN_GROUP_SERVED"
    RUN_MEMBER_DISPOSED = "RUN_MEMBER_DISPOSED"
    RUN_GROUP_DEFERRED = "RUN_GROUP_DEFERRED"
    RUN_COMPLETE = "RUN_COMPLETE"
    RUN_EXPIRED = "RUN_EXPIRED"
    RUN_ABANDONED = "RUN_ABANDONED"
    RUN_TAKEN_OVER = "RUN_TAKEN_OVER"
    RUN_REJECTED_WRITE = "RUN_REJECTED_WRITE"


# The events every job writes on its way through (and every heartbeat): the bulk of the log,
# about seven of every eight rows. The type index leaves them out (audit 0007): a filter on one
# of them reads the newest events by id and keeps about one in seven, as quick for a page as
# the index, while the types an operator hunts for (refusals, failures, approvals, operator
# actions, runs) stay indexed however rare they are among millions of routine rows.
ROUTINE_EVENT_TYPES = (
    EventType.REQUESTED,
    EventType.READY,
    EventType.CLAIMED,
    EventType.STARTED,
    EventType.AUTHORIZED,
    EventType.EXECUTED,
    EventType.SUCCEEDED,
    EventType.LEASE_RENEWED,
)


class EventIdField(models.BigAutoField):
    """The event id, without SQLite's AUTOINCREMENT (audit 0006).

    AUTOINCREMENT only keeps SQLite from reusing the id of a deleted last row, and no event row
    is ever deleted or replaced (the append-only triggers refuse it), so the next id is always
    one above every id ever written. What AUTOINCREMENT does cost is a write of the
    ``sqlite_sequence`` page in every transaction that records an event: one page of about
    twenty in an enqueue's commit. PostgreSQL keeps its identity column unchanged.
    """

    def db_type_suffix(self, connection):  # type: ignore[no-untyped-def]
        if connection.vendor == "sqlite":
            return None
        return super().db_type_suffix(connection)


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("audit events are append-only: update() is refused")

    def delete(self):
        raise AppendOnlyError("audit events are append-only: delete() is refused")

    def for_job(self, job_id: str) -> "AuditEventQuerySet":
        return self.filter(job_id=job_id).order_by("event_id")

    def for_run(self, run_id: str) -> "AuditEventQuerySet":
        return self.filter(run_id=run_id).order_by("event_id")

    def of_type(self, event_type: str) -> "AuditEventQuerySet":
        """The events of one type. For a type the type index holds, the query also states the
        index's condition: SQLite uses a partial index only when the WHERE clause repeats it
        (PostgreSQL proves it from the equality, and the extra term costs it nothing)."""
        matching = self.filter(event_type=event_type)
        if event_type in ROUTINE_EVENT_TYPES:
            return matching
        # As literals: SQLite matches the condition to the index's only if its list is the
        # index's list of constants, not bound parameters (the types are our own constants).
        listed = ", ".join(f"'{t}'" for t in ROUTINE_EVENT_TYPES)
        table = self.model._meta.db_table
        not_routine = f'NOT ("{table}"."event_type" IN ({listed}))'
        return matching.filter(RawSQL(not_routine, (), output_field=models.BooleanField()))


class AuditEvent(models.Model):
    event_id = EventIdField(primary_key=True)
    job_id = models.CharField(max_length=200, null=True, blank=True)
    run_id = models.CharField(max_length=64, null=True, blank=True)
    event_type = models.CharField(max_length=40, choices=EventType.choices)
    actor = models.CharField(max_length=200)
    result_code = models.CharField(max_length=64, blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-event_id"]
        indexes = [
            # Only the events of a job, or of a run, are in each (audit 0005).
            models.Index(
                fields=["job_id", "event_id"],
                condition=Q(job_id__isnull=False),
                name="audit_job_idx",
            ),
            models.Index(
                fields=["run_id", "event_id"],
                condition=Q(run_id__isnull=False),
                name="audit_run_idx",
            ),
            # The types worth an index: every type but the routine ones (audit 0007).
            models.Index(
                fields=["event_type", "event_id"],
                condition=~Q(event_type__in=ROUTINE_EVENT_TYPES),
                name="audit_type_idx",
            ),
            models.Index(fields=["actor", "event_id"], name="audit_actor_idx"),
            models.Index(fields=["created_at"], name="audit_created_idx"),
        ]

    def __str__(self) -> str:
        subject = self.job_id or self.run_id or "-"
        return f"#{self.event_id} {self.event_type} {subject} by {self.actor}"

    def save(self, *args, **kwargs) -> None:
        if not is_new(self):
            raise AppendOnlyError(f"audit event {self.pk} is append-only: save() is refused")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"audit event {self.pk} is append-only: delete() is refused")
