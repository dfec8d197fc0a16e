"""Consolidation runs, their groups and members.

Status fields are written only by ``runs.transitions``.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class RunStatus(models.TextChoices):
    # Holds the store while expires_at >= now ("effectively active").
    ACTIVE = "active"
    # Nothing was left pending or served.
    COMPLETE = "complete"
    # Its lease lapsed; written only when a new plan is made.
    EXPIRED = "expired"
    # Its own owner replanned while the lease was still running, or an operator closed it.
    ABANDONED = "abandoned"
    # Another owner planned while the lease was still running.
    TAKEN_OVER = "taken_over"


class GroupStatus(models.TextChoices):
    # Planned, not yet handed to the owner.
    PENDING = "pending"
    # Handed to the owner; members are being disposed.
    SERVED = "served"
    # Every member has a disposition.
    DONE = "done"
    # Put aside as a whole; terminal for this run, its members return to the next plan.
    DEFERRED = "deferred"


# A run is complete when none of its groups is in one of these.
OPEN_GROUP_STATUSES = (GroupStatus.PENDING, GroupStatus.SERVED)


class Disposition(models.TextChoices):
    KEEP = "keep"
    MERGE = "merge"
    DROP = "drop"
    DEFER = "defer"


class Run(models.Model):
    run_id = models.CharField(max_length=64, primary_key=True)
    store = models.CharField(max_length=200)
    worker_id = models.CharField(max_length=200)
    host = models.CharField(max_length=255, blank=True, default="")
    pid = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    # When the lease was last granted (plan or progress): expires_at = renewed_at + lease_seconds
    # on every row, and renewed_at = started_at until the first refresh.
    renewed_at = models.DateTimeField()
    lease_seconds = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.ACTIVE)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.CharField(max_length=200, blank=True, default="")
    close_reason = models.TextField(blank=True, default="")
    # The run this one displaced, if any (takeover history).
    replaced_run_id = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            # At most one status='active' row per store, enforced by the database.
            models.UniqueConstraint(
                fields=["store"], condition=Q(status="active"), name="run_one_active_per_store"
            ),
        ]
        indexes = [models.Index(fields=["store", "-started_at"], name="run_store_idx")]
        permissions = [("close_run", "Can close a stuck consolidation run")]

    def __str__(self) -> str:
        return f"run {self.run_id} on {self.store} [{self.status}]"


class Group(models.Model):
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="groups")
    seq = models.PositiveIntegerField()
    key = models.CharField(max_length=200)
    status = models.CharField(
        max_length=16, choices=GroupStatus.choices, default=GroupStatus.PENDING
    )
    served_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="group_run_seq_uniq")]
        indexes = [models.Index(fields=["run", "status", "seq"], name="group_status_idx")]

    def __str__(self) -> str:
        return f"group {self.seq} of {self.run_id} [{self.status}]"


class Member(models.Model):
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="members")
    item_ref = models.CharField(max_length=1024)
    disposition = models.CharField(
        max_length=16, choices=Disposition.choices, null=True, blank=True
    )
    disposed_at = models.DateTimeField(null=True, blank=True)
    # What applying the disposition produced (e.g. the DELETE job it requested).
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["group", "id"]

    def __str__(self) -> str:
        return f"{self.item_ref} ({self.disposition or 'undecided'})"
