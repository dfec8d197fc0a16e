"""Helpers for the executor tests: seeding jobs in a process database, reading results."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.procdb import ProcDB

PRODUCER = "producer-e2e"
APPROVER = "approver-e2e"

SEED_CODE = """
import json
from django.contrib.auth.models import Permission, User
from django.db import transaction
from inbox.approvals import approve_delete
from inbox.transitions import create_job

user, _ = User.objects.get_or_create(username={approver!r})
user.user_permissions.add(Permission.objects.get(codename="approve_delete"))
user = User.objects.get(pk=user.pk)
to_approve = []
with transaction.atomic():
    with open({path!r}, encoding="utf-8") as fh:
        for line in fh:
            job, _ = create_job(json.loads(line), requested_by={producer!r})
            if job.state == "CREATED":
                to_approve.append(job.job_id)
    if {approve!r}:
        for job_id in to_approve:
            approve_delete(job_id, approver=user, reason="test approval")
print(len(to_approve))
"""


def seed(db: ProcDB, docs: list[dict[str, Any]], *, approve: bool = True) -> None:
    """Store ``docs`` (and approve every DELETE) in one process, one transaction."""
    path = db.workdir / f"seed-{time.monotonic_ns()}.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    db.python(
        SEED_CODE.format(path=str(path), approver=APPROVER, producer=PRODUCER, approve=approve)
    )


def vault_dir(db: ProcDB) -> Path:
    return db.workdir / "vault"


def put_object(db: ProcDB, vault_path: str, content: str) -> None:
    target = vault_dir(db) / vault_path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def states(db: ProcDB) -> dict[str, str]:
    return dict(db.query("SELECT job_id, state FROM inbox_job"))


def event_counts(db: ProcDB, event_type: str) -> Counter:
    rows = db.query("SELECT job_id FROM audit_auditevent WHERE event_type = %s", (event_type,))
    return Counter(job_id for (job_id,) in rows)


def oplog(db: ProcDB) -> list[dict[str, Any]]:
    path = vault_dir(db) / ".vault" / "ops.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def oplog_counts(db: ProcDB) -> Counter:
    """Compare-and-delete attempts per job id, from the vault's own log."""
    return Counter(entry["tag"].split(" ")[0] for entry in oplog(db) if entry["op"] == "delete")


def start_executor(db: ProcDB, scope: str, *args: str, log_dir: Path) -> subprocess.Popen:
    """Start ``run_executor`` with its output in files (a full pipe would stall it)."""
    stamp = time.monotonic_ns()
    out = (log_dir / f"exec-{scope}-{stamp}.out").open("w")
    err = (log_dir / f"exec-{scope}-{stamp}.err").open("w")
    proc = db.popen("run_executor", "--scope", scope, *args, stdout=out, stderr=err)
    proc.out_path = Path(out.name)  # type: ignore[attr-defined]
    proc.err_path = Path(err.name)  # type: ignore[attr-defined]
    out.close()
    err.close()
    return proc


def wait_all(procs: list[subprocess.Popen], timeout: float = 600) -> list[int]:
    return [p.wait(timeout=timeout) for p in procs]


def output_of(proc: subprocess.Popen) -> str:
    return proc.out_path.read_text() + proc.err_path.read_text()  # type: ignore[attr-defined]


def wait_for(predicate, *, timeout: float = 60, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(every)
