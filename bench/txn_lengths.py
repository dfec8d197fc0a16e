"""How long do the workers hold SQLite's write lock? The longest write transaction of an
executor draining SAVE and DELETE jobs and of a consolidator run, measured in-process.

Every outermost ``transaction.atomic()`` block is timed from entry to exit (BEGIN IMMEDIATE
takes the write lock at its first statement, COMMIT releases it), so the figures are an upper
bound of the lock hold. Run on a fresh SQLite file under var/bench/:

    .venv/bin/python bench/txn_lengths.py [--jobs 500]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs", type=int, default=500, help="SAVE jobs (and half as many DELETEs)"
    )
    args = parser.parse_args()
    import benchlib as bl

    facts = bl.machine_facts()  # at the start: the load average and the bytecode, before the runs
    (ROOT / "var").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="txn-", dir=ROOT / "var"))
    os.environ["DATABASE_URL"] = f"sqlite:///{work / 'db.sqlite3'}"
    os.environ["VAULT_ROOT"] = str(work / "vault")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    import django

    django.setup()
    from django.contrib.auth.models import Permission, User
    from django.core.management import call_command
    from django.db import transaction

    call_command("migrate", verbosity=0)
    spans: dict[str, list[float]] = defaultdict(list)
    phase = ["setup"]
    depth = [0]
    started = [0.0]
    enter, exit_ = transaction.Atomic.__enter__, transaction.Atomic.__exit__

    def timed_enter(self):
        if depth[0] == 0:
            started[0] = time.perf_counter()
        depth[0] += 1
        return enter(self)

    def timed_exit(self, *exc):
        try:
            return exit_(self, *exc)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spans[phase[0]].append(time.perf_counter() - started[0])

    transaction.Atomic.__enter__, transaction.Atomic.__exit__ = timed_enter, timed_exit

    from inbox.approvals import approve_delete
    from inbox.executor import Executor
    from inbox.jobtypes import sha256_hex
    from inbox.transitions import create_jobs
    from runs.consolidators import seed_duplicate_vault
    from runs.worker import ConsolidatorWorker

    vault = Path(os.environ["VAULT_ROOT"])
    saves = []
    for i in range(args.jobs):
        content = f"# {i}\n" + "x" * (i % 2000)
        saves.append(
            {
                "job_id": f"s{i}",
                "job_version": 1,
                "mission_id": "m",
                "job_type": "SAVE_OBJECT",
                "object_id": f"o{i}",
                "vault_path": f"s/{i}.md",
                "idempotency_key": f"s{i}",
                "content": content,
                "provenance_hash": sha256_hex(content),
            }
        )
    deletes = []
    for i in range(args.jobs // 2):
        content = f"# d{i}\n"
        (vault / "d").mkdir(parents=True, exist_ok=True)
        (vault / "d" / f"{i}.md").write_text(content)
        deletes.append(
            {
                "job_id": f"d{i}",
                "job_version": 1,
                "mission_id": "m",
                "job_type": "DELETE_OBJECT",
                "object_id": f"d{i}",
                "vault_path": f"d/{i}.md",
                "idempotency_key": f"d{i}",
                "delete_request_id": f"r{i}",
                "expected_provenance_hash": sha256_hex(content),
            }
        )
    create_jobs(saves + deletes, requested_by="producer")
    approver = User.objects.create_user("approver")
    approver.user_permissions.add(Permission.objects.get(codename="approve_delete"))
    approver = User.objects.get(pk=approver.pk)
    for doc in deletes:
        approve_delete(doc["job_id"], approver=approver, reason="bench")
    quiet = dict(exit_when_idle=True, out=lambda _line: None)
    for scope in ("save", "delete"):
        phase[0] = f"executor {scope}"
        Executor(scope=scope, **quiet).run()
    seed_duplicate_vault(vault / "dups", originals=20, copies=3)
    phase[0] = "consolidator"
    ConsolidatorWorker(store="vault", once=True, say=lambda _t: None).run()

    body = [
        f"SQLite write transactions (outermost atomic blocks), {args.jobs} SAVE + "
        f"{args.jobs // 2} DELETE jobs, one consolidator run (20 groups of 4 copies):",
        "",
    ]
    rows = []
    for name in ("executor save", "executor delete", "consolidator"):
        values = sorted(spans[name])
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        rows.append(
            (
                name,
                len(values),
                f"{statistics.median(values) * 1000:.2f}",
                f"{p99 * 1000:.2f}",
                f"{values[-1] * 1000:.2f}",
            )
        )
    body.append(bl.table(["worker", "transactions", "median ms", "p99 ms", "longest ms"], rows))
    print("\n".join(body))
    path = bl.write_result("txn-lengths", "SQLite write transaction lengths", body, facts)
    print(f"txn_lengths: wrote {path.relative_to(ROOT)}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
