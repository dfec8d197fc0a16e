"""`manage.py seed_demo`: demo users and a small inbox with a job in every state.

Idempotent: every seeded job has a fixed ``job_id`` and is created (and driven to its state) only
if it does not exist yet, so a second run changes nothing but the users' passwords (which it
sets to the same value). Every state is reached through ``inbox.transitions``, the approvals and
reconcile services and ``runs.transitions`` only — the seed is a producer, workers and operators
acting in fast-forward, never a row written by hand.

Users: ``admin`` (superuser), ``operator``, ``approver``, ``viewer`` (the roles of
``console.roles``). The password is ``DEMO_PASSWORD``; without it one is generated once, kept in
``<var>/demo-password`` (mode 0600) so restarts reuse it, and printed.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.db.models.functions import Now

from inbox import transitions, vault
from inbox.approvals import approve_delete, deny_delete
from inbox.errors import InboxError
from inbox.jobtypes import sha256_hex
from inbox.models import Job, JobState, Worker
from inbox.reconcile import confirm_deleted
from inbox.workers import beat, mark_stopped, register_worker
from runs.models import Run, RunStatus
from runs.transitions import plan_run

SEED_WORKER = "seed-worker"
LOST_WORKER = "seed-worker-lost"
PRODUCER = "seed-producer"
MISSION = "demo-seed"
STUCK_STORE = "archive"

# Demo users and their role group (None: superuser, no group needed).
USERS: dict[str, str | None] = {
    "admin": None,
    "operator": "operator",
    "approver": "approver",
    "viewer": "viewer",
}

# Content shared by three objects: the consolidator's duplicates.
DUPLICATE_BODY = "# Checklist\n\n- backups\n- alerts\n- on-call\n"


def demo_password(var_dir: Path | None = None) -> tuple[str, str]:
    """Return (password, where it came from): DEMO_PASSWORD, the kept file, or a new one."""
    env = os.environ.get("DEMO_PASSWORD", "")
    if env:
        return env, "DEMO_PASSWORD"
    path = Path(var_dir or settings.VAR_DIR) / "demo-password"
    if path.exists():
        kept = path.read_text(encoding="utf-8").strip()
        if kept:
            return kept, str(path)
    password = secrets.token_urlsafe(12)
    # Created 0600 from the start: the password never sits world-readable, even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(password + "\n")
    return password, f"generated, kept in {path}"


def seed_users(password: str) -> list[str]:
    """Create or update the demo users; return the names created this time."""
    User = get_user_model()
    created = []
    for username, role in USERS.items():
        user, was_created = User.objects.get_or_create(username=username)
        if was_created:
            created.append(username)
        user.is_staff = role is None
        user.is_superuser = role is None
        user.set_password(password)
        user.save()
        if role is not None:
            user.groups.set([Group.objects.get(name=role)])
    return created


# --- documents ------------------------------------------------------------------------------


def save_doc(name: str, body: str) -> dict[str, Any]:
    return {
        "job_id": f"seed-save-{name}",
        "job_version": 1,
        "mission_id": MISSION,
        "job_type": "SAVE_OBJECT",
        "object_id": name,
        "vault_path": f"notes/{name}.md",
        "idempotency_key": f"seed:save:{name}",
        "content": body,
        "provenance_hash": sha256_hex(body),
        "source_commit": "seed",
    }


def delete_doc(name: str, expected_body: str, *, request: str = "r1") -> dict[str, Any]:
    return {
        "job_id": f"seed-delete-{name}-{request}",
        "job_version": 1,
        "mission_id": MISSION,
        "job_type": "DELETE_OBJECT",
        "object_id": name,
        "vault_path": f"notes/{name}.md",
        "idempotency_key": f"seed:delete:{name}:{request}",
        "delete_request_id": f"seed-{name}-{request}",
        "expected_provenance_hash": sha256_hex(expected_body),
    }


def body(name: str) -> str:
    return f"# {name.replace('-', ' ').title()}\n\nSeeded by seed_demo.\n"


# --- the vault --------------------------------------------------------------------------------


def write_object(vault_path: str, content: str) -> None:
    """Put an object in the vault the way the save handler does (atomic write)."""

    vault.save(vault_path, content=content, provenance_hash=sha256_hex(content))


# --- steps ----------------------------------------------------------------------------------


@dataclass
class Seed:
    """One seeded job: its id and how to make it (run only if the id does not exist)."""

    job_id: str
    label: str
    make: Callable[[], None]


class Seeder:
    """Builds the demo inbox through the same services the workers and operators use."""

    def __init__(self, *, lease_seconds: int = 90) -> None:
        self.lease_seconds = lease_seconds
        User = get_user_model()
        self.approver = User.objects.get(username="approver")
        self.admin = User.objects.get(username="admin")

    # Building blocks ------------------------------------------------------------------------

    def create(self, doc: dict[str, Any], *, requested_by: str = PRODUCER) -> str:
        job, _ = transitions.create_job(doc, requested_by=requested_by)
        return job.job_id

    def claim(self, job_id: str, *, worker: str = SEED_WORKER, lease: int | None = None) -> str:
        job = transitions.claim_job(
            job_id, worker_id=worker, lease_seconds=lease or self.lease_seconds
        )
        return job.claim_id

    def begin(self, job_id: str, *, worker: str = SEED_WORKER, lease: int | None = None) -> str:
        """Claim the job and begin it, as a worker does before it writes; the claim id."""
        claim = self.claim(job_id, worker=worker, lease=lease)
        transitions.begin_job(job_id, claim_id=claim, actor=worker)
        return claim

    def approve(self, job_id: str, *, reason: str = "seeded: object is a known duplicate") -> None:

        approve_delete(job_id, approver=self.approver, reason=reason)

    def run_save(self, name: str, content: str) -> None:
        """A SAVE that a worker ran to the end: the object is in the vault."""
        doc = save_doc(name, content)
        job_id = self.create(doc)
        claim = self.begin(job_id)
        write_object(doc["vault_path"], content)
        transitions.complete_job(job_id, claim_id=claim, actor=SEED_WORKER)

    def unknown_delete(self, name: str, expected: str, *, vault_content: str | None) -> None:
        """An approved DELETE whose worker lost track mid-flight; the vault is left as given."""
        doc = delete_doc(name, expected)
        if vault_content is not None:
            write_object(doc["vault_path"], vault_content)
        job_id = self.create(doc, requested_by="operator")
        self.approve(job_id)
        claim = self.begin(job_id)
        transitions.mark_outcome_unknown(
            job_id,
            claim_id=claim,
            actor=SEED_WORKER,
            error="connection to the vault dropped after the request was sent",
        )

    # The catalogue --------------------------------------------------------------------------

    def seeds(self) -> list[Seed]:
        return [*self.save_seeds(), *self.delete_seeds()]

    def claimed(self) -> None:
        job_id = self.create(save_doc("meeting-notes", body("meeting-notes")))
        self.claim(job_id, worker=LOST_WORKER)

    def executing(self) -> None:
        job_id = self.create(save_doc("changelog", body("changelog")))
        self.begin(job_id, worker=LOST_WORKER, lease=self.lease_seconds + 30)

    def lapsed(self) -> None:
        job_id = self.create(save_doc("draft", body("draft")))
        self.claim(job_id, worker=LOST_WORKER, lease=1)

    def failed(self) -> None:
        job_id = self.create(save_doc("oversized-export", body("oversized-export")))
        claim = self.begin(job_id)
        transitions.fail_job(
            job_id,
            claim_id=claim,
            actor=SEED_WORKER,
            result_code="VAULT_UNAVAILABLE",
            error="vault root was read-only (seeded failure; retry it)",
        )

    def save_seeds(self) -> list[Seed]:
        s = self
        out: list[Seed] = []
        for name in ("handbook", "roadmap", "glossary"):
            out.append(
                Seed(f"seed-save-{name}", "SUCCEEDED", lambda n=name: s.run_save(n, body(n)))
            )
        # Three objects with identical content: the consolidator's duplicates.
        for name in ("checklist-a", "checklist-b", "checklist-c"):
            out.append(
                Seed(
                    f"seed-save-{name}",
                    "SUCCEEDED (duplicate)",
                    lambda n=name: s.run_save(n, DUPLICATE_BODY),
                )
            )
        for name in ("inbox-zero", "faq"):
            out.append(
                Seed(f"seed-save-{name}", "READY", lambda n=name: s.create(save_doc(n, body(n))))
            )
        return [
            *out,
            Seed("seed-save-meeting-notes", "CLAIMED (worker gone, lease ticking)", s.claimed),
            Seed("seed-save-changelog", "EXECUTING (worker gone, lease ticking)", s.executing),
            Seed("seed-save-draft", "CLAIMED, lease lapsed (awaiting the sweep)", s.lapsed),
            Seed("seed-save-oversized-export", "FAILED (retry it)", s.failed),
        ]

    def rejected(self) -> None:
        job_id = self.create(delete_doc("handbook", body("handbook")), requested_by="operator")
        deny_delete(job_id, approver=self.approver, reason="the handbook is still in use")

    def reconciled(self) -> None:
        self.unknown_delete("temp-upload", body("temp-upload"), vault_content=None)
        confirm_deleted(
            "seed-delete-temp-upload-r1",
            actor="operator",
            reason="probe shows the object is gone",
        )

    def delete_seeds(self) -> list[Seed]:
        s = self
        return [
            # Awaiting approval: one asked by the operator, one by the approver (four-eyes: the
            # approver cannot decide their own request; admin can).
            Seed(
                "seed-delete-checklist-c-r1",
                "CREATED (awaiting approval, asked by operator)",
                lambda: s.create(
                    delete_doc("checklist-c", DUPLICATE_BODY), requested_by="operator"
                ),
            ),
            Seed(
                "seed-delete-checklist-b-r1",
                "CREATED (awaiting approval, asked by approver)",
                lambda: s.create(
                    delete_doc("checklist-b", DUPLICATE_BODY), requested_by="approver"
                ),
            ),
            Seed("seed-delete-handbook-r1", "REJECTED (approval denied)", s.rejected),
            # Unknown outcomes: absent (confirm deleted), untouched (not applied), changed
            # (conflict).
            Seed(
                "seed-delete-old-minutes-r1",
                "OUTCOME_UNKNOWN (object absent)",
                lambda: s.unknown_delete("old-minutes", body("old-minutes"), vault_content=None),
            ),
            Seed(
                "seed-delete-stale-plan-r1",
                "OUTCOME_UNKNOWN (object untouched)",
                lambda: s.unknown_delete(
                    "stale-plan", body("stale-plan"), vault_content=body("stale-plan")
                ),
            ),
            Seed(
                "seed-delete-shared-notes-r1",
                "OUTCOME_UNKNOWN (object changed since: conflict)",
                lambda: s.unknown_delete(
                    "shared-notes",
                    body("shared-notes"),
                    vault_content=body("shared-notes") + "\nEdited after the delete was asked.\n",
                ),
            ),
            Seed("seed-delete-temp-upload-r1", "RECONCILED", s.reconciled),
        ]

    def run(self, write: Callable[[str], None]) -> tuple[int, int]:
        made = skipped = 0
        existing = set(
            Job.objects.filter(job_id__startswith="seed-").values_list("job_id", flat=True)
        )
        for seed in self.seeds():
            if seed.job_id in existing:
                skipped += 1
                continue
            with transaction.atomic():
                seed.make()
            made += 1
            write(f"  {seed.job_id:<36} {seed.label}")
        return made, skipped


def seed_workers() -> list[str]:
    """Heartbeat rows for the seed's workers: one that stopped cleanly, one that died holding
    jobs (it goes silent now, so within seconds the console shows it dead while the leases
    of its jobs still run). Rows that exist are left alone."""

    made = []
    if not Worker.objects.filter(worker_id=SEED_WORKER).exists():
        register_worker(worker_id=SEED_WORKER, kind="executor", scope="save", host="seed")
        mark_stopped(worker_id=SEED_WORKER, jobs_done=6, jobs_failed=1)
        made.append(SEED_WORKER)
    if not Worker.objects.filter(worker_id=LOST_WORKER).exists():
        register_worker(
            worker_id=LOST_WORKER,
            kind="executor",
            scope="save",
            host="seed",
            poll_seconds=1.0,
            lease_seconds=10,
        )
        beat(worker_id=LOST_WORKER, current_job_id="seed-save-changelog")
        made.append(LOST_WORKER)
    return made


def seed_stuck_run() -> str | None:
    """A run on ``archive`` whose owner died with a long lease: an operator closes it. Every
    demo start shows one: while the last one is still effectively active it is left alone;
    once it was closed or its lease lapsed, a new one is planned (the old row keeps its
    history: the plan closes it as expired, as any new plan would)."""

    if Run.objects.filter(
        store=STUCK_STORE, status=RunStatus.ACTIVE, expires_at__gte=Now()
    ).exists():
        return None

    # Ten minutes: long enough to need an operator, short enough to watch the bar move.
    run = plan_run(store=STUCK_STORE, owner="seed-consolidator-gone", lease_seconds=600)
    return run.run_id


class Command(BaseCommand):
    help = (
        "Seed the demo (idempotent): users admin, operator, approver and viewer (password from "
        "DEMO_PASSWORD, else generated once, kept in <var>/demo-password and printed), jobs in "
        "every state (pending approvals, unknown outcomes, a failed job, leases ticking and one "
        "lapsed), a vault with duplicate objects and a stuck run on the 'archive' store. Jobs "
        "that already exist are left as they are."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--lease",
            type=int,
            default=90,
            help="lease in seconds of the seeded held jobs whose worker is gone (default 90)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["lease"] < 2:
            raise CommandError("--lease must be at least 2 seconds")
        password, source = demo_password()
        created_users = seed_users(password)
        self.stdout.write(
            f"users: {', '.join(USERS)} ({len(created_users)} new); password: {password} ({source})"
        )
        try:
            made, skipped = Seeder(lease_seconds=options["lease"]).run(self.stdout.write)
            run_id = seed_stuck_run()
            workers = seed_workers()
        except InboxError as exc:
            raise CommandError(f"seeding refused: {exc}") from exc
        self.stdout.write(f"jobs: {made} seeded, {skipped} already there")
        if workers:
            self.stdout.write(f"workers: {', '.join(workers)} (heartbeat rows)")
        if run_id:
            self.stdout.write(f"run: {run_id} on '{STUCK_STORE}' (stuck: its owner is gone)")
        counts = {s: Job.objects.filter(state=s).count() for s in JobState}
        self.stdout.write("states: " + ", ".join(f"{s} {n}" for s, n in counts.items() if n))
