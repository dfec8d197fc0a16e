"""Jobs, approvals, worker heartbeats, scope pauses and producer tokens.

State, claim and lease fields of ``Job`` are written only by ``inbox.transitions``; the
querysets here are read filters.
"""

from __future__ import annotations

import datetime as dt

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class JobState(models.TextChoices):
    # Stored, not yet validated/approved (a DELETE waits here for its approval).
    CREATED = "CREATED"
    # Valid and approved: may be claimed.
    READY = "READY"
    # Held by a worker under a lease, not yet started.
    CLAIMED = "CLAIMED"
    # The worker confirmed it is running the handler.
    EXECUTING = "EXECUTING"
    # Done (terminal).
    SUCCEEDED = "SUCCEEDED"
    # Definitely not applied; an operator may retry.
    FAILED = "FAILED"
    # The handler could not tell whether the mutation happened; needs reconciliation.
    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    # Validation failed or approval denied/expired/revoked (terminal; keeps the reason).
    REJECTED = "REJECTED"
    # An unknown outcome resolved from evidence (terminal).
    RECONCILED = "RECONCILED"


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.REJECTED, JobState.RECONCILED})
HELD_STATES = (JobState.CLAIMED, JobState.EXECUTING)


class JobQuerySet(models.QuerySet):
    def ready(self, scope: str | None = None) -> JobQuerySet:
        qs = self.filter(state=JobState.READY)
        return qs.filter(scope=scope) if scope else qs

    def held(self) -> JobQuerySet:
        return self.filter(state__in=HELD_STATES)

    def lapsed(self, now: dt.datetime) -> JobQuerySet:
        """Held jobs whose lease ended strictly before ``now`` (database time)."""
        return self.held().filter(lease_until__lt=now)

    def unknown(self) -> JobQuerySet:
        return self.filter(state=JobState.OUTCOME_UNKNOWN)

    def awaiting_approval(self) -> JobQuerySet:
        return self.filter(state=JobState.CREATED, approval_id__isnull=True)


class Job(models.Model):
    job_id = models.CharField(max_length=200, primary_key=True)
    job_version = models.PositiveIntegerField()
    mission_id = models.CharField(max_length=200)
    job_type = models.CharField(max_length=64)
    # Denormalised from the job-type registry at creation so claims filter on a column.
    scope = models.CharField(max_length=32)
    object_id = models.CharField(max_length=500)
    vault_path = models.CharField(max_length=1024)
    approval_id = models.CharField(max_length=64, null=True, blank=True)
    payload = models.JSONField()
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.CREATED)
    idempotency_key = models.CharField(max_length=255, unique=True)
    requested_by = models.CharField(max_length=200)
    worker_id = models.CharField(max_length=200, blank=True, default="")
    claim_id = models.CharField(max_length=64, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    attempt_count = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=5, validators=[MinValueValidator(1)])
    # Not claimed before this time (deferred tasks, retry backoff, scheduled jobs); null: now.
    run_after = models.DateTimeField(null=True, blank=True)
    result_code = models.CharField(max_length=64, blank=True, default="")
    # Why a job was rejected or failed; kept for operators.
    last_error = models.TextField(blank=True, default="")
    # The job this one was requested to replace (a fresh DELETE after NOT_APPLIED).
    supersedes = models.CharField(max_length=200, null=True, blank=True)
    # Free text operators may edit in admin (recorded as ADMIN_EDIT).
    note = models.TextField(blank=True, default="")
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "job_id"]
        indexes = [
            # Claim order: the next READY job of a scope.
            models.Index(
                fields=["scope", "created_at", "job_id"],
                condition=Q(state="READY"),
                name="job_claim_idx",
            ),
            # Stale sweep: held jobs by lease end, in the sweep's order (inbox 0008).
            models.Index(
                fields=["lease_until", "job_id"],
                condition=Q(state__in=["CLAIMED", "EXECUTING"]),
                name="job_lease_idx",
            ),
            models.Index(fields=["state", "created_at", "job_id"], name="job_state_created_idx"),
            models.Index(fields=["created_at", "job_id"], name="job_created_idx"),
            models.Index(fields=["state", "updated_at"], name="job_state_updated_idx"),
            # The console's "sort by updated" over all states.
            models.Index(fields=["updated_at", "job_id"], name="job_updated_idx"),
            # Equality and LIKE 'prefix%' (search) in one index each on PostgreSQL; a plain
            # index on SQLite, whose search is a range on the BINARY collation (inbox 0008).
            models.Index(
                fields=["object_id"], name="job_object_idx", opclasses=["varchar_pattern_ops"]
            ),
            models.Index(
                fields=["mission_id"], name="job_mission_idx", opclasses=["varchar_pattern_ops"]
            ),
            # Jobs a worker has held (the jobs list's worker filter). A job that was never
            # claimed has no worker and no entry: an enqueue writes one index fewer, and a
            # claim adds an entry instead of moving one (inbox 0011).
            models.Index(
                fields=["worker_id"], condition=~Q(worker_id=""), name="job_worker_set_idx"
            ),
            # The workers page's held count per scope: an index-only range for each scope,
            # where the lease index made it read every held row (inbox 0009).
            models.Index(
                fields=["scope"],
                condition=Q(state__in=["CLAIMED", "EXECUTING"]),
                name="job_held_scope_idx",
            ),
            # The approvals queue, oldest first, and its capped counts (the page's and the
            # dashboard's): job_type last, so the order holds for any set of approval types
            # and the type is checked in the index (inbox 0009).
            models.Index(
                fields=["created_at", "job_id", "job_type"],
                condition=Q(state="CREATED", approval_id__isnull=True),
                name="job_approval_queue_idx",
            ),
            # A reconcile case's fresh DELETE (supersedes the case); almost every job has none,
            # so the index holds only the few that do (inbox 0009).
            models.Index(
                fields=["supersedes"],
                condition=Q(supersedes__isnull=False),
                name="job_supersedes_idx",
            ),
        ]
        constraints = [
            # A job with no attempt to give could never run: refused by the database too.
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="job_max_attempts_at_least_one"
            ),
        ]
        permissions = [
            ("approve_delete", "Can approve or deny DELETE jobs"),
            ("view_payload", "Can see job payload content"),
            ("retry_job", "Can retry failed jobs"),
            ("reconcile_job", "Can reconcile unknown outcomes"),
            ("pause_scope", "Can pause and resume executor scopes"),
            ("cancel_job", "Can cancel jobs that have not begun"),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.job_id} [{self.state}]"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class ApprovalDecision(models.TextChoices):
    APPROVED = "approved"
    DENIED = "denied"


class Approval(models.Model):
    """A four-eyes decision on one DELETE job: approved or denied by someone other than its
    requester, with an expiry the executor re-checks right before it deletes."""

    approval_id = models.CharField(max_length=64, primary_key=True)
    job_id = models.CharField(max_length=200, db_index=True)
    delete_request_id = models.CharField(max_length=200)
    object_id = models.CharField(max_length=500)
    requested_by = models.CharField(max_length=200)
    approver = models.CharField(max_length=200)
    decision = models.CharField(max_length=16, choices=ApprovalDecision.choices)
    reason = models.TextField()
    decided_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True, default="")
    revoke_reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-decided_at"]

    def __str__(self) -> str:
        return f"{self.decision} {self.job_id} by {self.approver}"


class WorkerStatus(models.TextChoices):
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Worker(models.Model):
    """A worker process's heartbeat row: id, kind, host, pid, started, last seen, counters."""

    worker_id = models.CharField(max_length=200, primary_key=True)
    kind = models.CharField(max_length=32)
    # The executor scope it claims from (executors only).
    scope = models.CharField(max_length=32, blank=True, default="")
    # The store it consolidates (consolidators only).
    store = models.CharField(max_length=200, blank=True, default="")
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    poll_seconds = models.FloatField(default=1.0)
    lease_seconds = models.PositiveIntegerField(default=60)
    current_job_id = models.CharField(max_length=200, blank=True, default="")
    jobs_done = models.PositiveIntegerField(default=0)
    jobs_failed = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=16, choices=WorkerStatus.choices, default=WorkerStatus.RUNNING
    )

    class Meta:
        ordering = ["-last_seen_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.worker_id}"

    def dead_after(self) -> dt.timedelta:
        """A worker not seen for 3 × poll + lease is dead: three missed beats, plus a lease
        so that a worker busy with one long job is not judged dead while it still holds it."""
        return dt.timedelta(seconds=3 * self.poll_seconds + self.lease_seconds)


class ScopePause(models.Model):
    """An operator's pause of one executor scope; executors do not claim while paused."""

    scope = models.CharField(max_length=32, primary_key=True)
    paused = models.BooleanField(default=True)
    reason = models.TextField(blank=True, default="")
    changed_by = models.CharField(max_length=200)
    changed_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.scope} {'paused' if self.paused else 'running'}"


class ProducerToken(models.Model):
    """A producer's API token, stored only as its sha256.

    One active token per producer (a conditional unique constraint); ``inbox.tokens`` makes,
    checks and revokes them. The producer's name becomes ``requested_by`` of the jobs it sends.
    """

    producer = models.CharField(max_length=200)
    # sha256 hex of the whole token: the token has 256 random bits, so a fast hash is enough.
    token_hash = models.CharField(max_length=64, unique=True)
    # The token's first characters, so an operator can tell tokens apart without the secret.
    prefix = models.CharField(max_length=16)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(db_default=Now())
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["producer", "-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["producer"],
                condition=Q(revoked_at__isnull=True),
                name="token_one_active_per_producer",
            ),
        ]

    def __str__(self) -> str:
        state = "revoked" if self.revoked_at else "active"
        return f"token {self.prefix}… of {self.producer} [{state}]"


# Where a job's execution ends (what the dashboard's throughput counts): SUCCEEDED, FAILED or
# OUTCOME_UNKNOWN.
FINISHED_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.OUTCOME_UNKNOWN)


class FinishedCount(models.Model):
    """Executions that ended, per minute, scope and final state, as one process counted them.

    The dashboard's throughput chart reads these instead of the job rows: a handful of rows per
    minute however fast the executors drain (reading the job rows cost a poll 50-450 ms at
    2,000 jobs/s). ``inbox.transitions`` adds to them in the same statement that moves jobs
    into a finished state, so a count commits or rolls back with its jobs. Each process adds
    to its own rows (``shard``: its pid), so concurrent executors never wait on one another's
    counter; readers sum the shards. Counts are of endings, not of jobs: a FAILED job retried
    and finished again counts twice, and a reconciled OUTCOME_UNKNOWN stays counted where it
    ended. ``prune`` deletes old minutes with the old jobs.
    """

    minute = models.DateTimeField()
    scope = models.CharField(max_length=32)
    state = models.CharField(max_length=20, choices=JobState.choices)
    shard = models.IntegerField()
    finished = models.PositiveBigIntegerField()

    class Meta:
        constraints = [
            # Its index (minute first) is also the chart's range scan.
            models.UniqueConstraint(
                fields=["minute", "scope", "state", "shard"], name="finished_count_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.scope} {self.state}: {self.finished}"
