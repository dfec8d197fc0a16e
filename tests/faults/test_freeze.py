"""A worker frozen inside a transaction never freezes anyone else.

Each test stops a real worker process (SIGSTOP, ``core.faults``) at one of its transaction
points while it holds row locks, as a paused VM, a long GC pause or a half-dead network would.
Meanwhile an operator's action on a locked row, the sweeper and the auto-reconciler each finish
within 15 s: the operator is told a worker holds the job (409, after ``lock_timeout``), the
sweeper and the reconciler skip what is locked and say so. PostgreSQL then ends the frozen
transaction (``idle_in_transaction_session_timeout``), freeing its locks; the resumed worker
logs the lost connection, finds its claims fenced, reconnects, goes on and exits 0 — and
writes nothing the fence should refuse: no job runs twice, no DELETE executes twice.

On SQLite a process frozen while it holds the write lock blocks every writer until it dies
(there is no server to end it; docs/operations.md says so); the SQLite test shows the bounded
side: every other writer gives up within its busy timeout, writes nothing, and all goes on once
the frozen process is gone.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from runs.consolidators import seed_duplicate_vault
from tests.executors.support import (
    event_counts,
    oplog_counts,
    put_object,
    seed,
    sha,
    states,
    wait_for,
)
from tests.factories import delete_doc, noop_doc
from tests.faults.support import (
    concurrently,
    freeze_at,
    operator_retry,
    output,
    resume,
    row_locked,
    run_timed,
)

pytestmark = pytest.mark.slow

BOUND = 15.0  # seconds anyone else may wait on a frozen worker
OPERATOR_BOUND = 3.0  # seconds an operator waits for "a worker holds this job"
LEASE = 3
IDLE_MS = 12_000  # the server ends a frozen transaction after this long
EXECUTOR = ("run_executor", "--exit-when-idle", "--lease", str(LEASE), "--batch", "4")
WORKER_ENV = {"DB_IDLE_IN_TRANSACTION_TIMEOUT_MS": str(IDLE_MS)}
# Phase A (while frozen) and the figures the closing note quotes are printed (-s).


def _others_while_frozen(proc_db, job_id: str) -> None:
    """The operator, the sweeper and the auto-reconciler, side by side, against the frozen
    worker's rows: each answers within BOUND and the operator hears why."""
    operator, sweep, reconcile = concurrently(
        lambda: operator_retry(proc_db, job_id),
        lambda: run_timed(proc_db, "recover_stale"),
        lambda: run_timed(proc_db, "reconcile", "--auto"),
    )
    print(
        f"\nwhile frozen: operator {operator['status']} in {operator['seconds']:.2f}s, "
        f"sweep {sweep.seconds:.2f}s ({sweep.out.strip()[-120:]}), "
        f"reconcile {reconcile.seconds:.2f}s"
    )
    assert operator["status"] == 409, operator["body"]
    assert "holds it right now" in operator["body"]
    assert operator["seconds"] < OPERATOR_BOUND  # lock_timeout (1.5 s) plus the request
    assert sweep.code == 0 and sweep.seconds < BOUND, sweep.out
    assert reconcile.code == 0 and reconcile.seconds < BOUND, reconcile.out


def _released(proc_db, job_id: str, frozen_at: float) -> float:
    """Wait until the server has ended the frozen transaction; how long the row was locked."""
    wait_for(
        lambda: not row_locked(proc_db, "inbox_job", "job_id", job_id), timeout=IDLE_MS / 1000 + 30
    )
    return time.monotonic() - frozen_at


def _finish_resumed(proc, proc_db) -> str:
    resume(proc)
    assert proc.wait(timeout=120) == 0, output(proc)[-3000:]
    text = output(proc)
    assert "database error" in text  # the lost connection, said once per retry
    assert text.count("database error") <= 3, text[-3000:]
    return text


def _db(request, via: str):
    return request.getfixturevalue("proc_db" if via == "direct" else "bouncer_db")


@pytest.mark.postgresql
@pytest.mark.parametrize(
    ("point", "via"),
    [
        ("claim:NOOP", "direct"),
        ("begin:NOOP", "direct"),
        ("finish:NOOP", "direct"),
        ("begin:NOOP", "pgbouncer"),
    ],
)
def test_worker_frozen_in_a_noop_batch_blocks_nobody_and_runs_no_job_twice(request, point, via):
    proc_db = _db(request, via)
    docs = [noop_doc(uid=f"f{i}") for i in range(4)]
    seed(proc_db, docs)
    held = docs[0]["job_id"]
    proc = freeze_at(proc_db, point, (*EXECUTOR, "--scope", "noop"), env=WORKER_ENV)
    frozen_at = time.monotonic()
    assert row_locked(proc_db, "inbox_job", "job_id", held)
    time.sleep(LEASE + 1)  # the frozen claims' leases lapse: the sweep must skip, not wait
    _others_while_frozen(proc_db, held)
    locked_for = _released(proc_db, held, frozen_at)
    print(f"row locked by the frozen worker for {locked_for:.1f}s (idle timeout {IDLE_MS} ms)")
    proc_db.manage("recover_stale")  # the lapsed leases go back to READY
    _finish_resumed(proc, proc_db)

    assert set(states(proc_db).values()) == {"SUCCEEDED"}
    for doc in docs:
        assert event_counts(proc_db, "EXECUTED")[doc["job_id"]] == 1
        assert event_counts(proc_db, "SUCCEEDED")[doc["job_id"]] == 1


@pytest.mark.postgresql
@pytest.mark.parametrize(
    ("point", "via"),
    [
        ("begin:DELETE_OBJECT", "direct"),
        ("finish:DELETE_OBJECT", "direct"),
        ("finish:DELETE_OBJECT", "pgbouncer"),
    ],
)
def test_worker_frozen_in_a_delete_blocks_nobody_and_never_deletes_twice(request, point, via):
    proc_db = _db(request, via)
    doc = delete_doc(uid="frozen")
    put_object(proc_db, doc["vault_path"], "# Note frozen\n")
    # The object's hash must be the one the DELETE expects.
    doc["expected_provenance_hash"] = sha("# Note frozen\n")
    seed(proc_db, [doc])
    job_id = doc["job_id"]
    proc = freeze_at(proc_db, point, (*EXECUTOR, "--scope", "delete"), env=WORKER_ENV)
    frozen_at = time.monotonic()
    time.sleep(LEASE + 1)
    _others_while_frozen(proc_db, job_id)
    locked_for = _released(proc_db, job_id, frozen_at)
    print(f"row locked by the frozen worker for {locked_for:.1f}s (idle timeout {IDLE_MS} ms)")
    sweep = proc_db.manage("recover_stale").stdout
    assert "parked 1 DELETE_OBJECT" in sweep  # never READY: the outcome is unknown
    text = _finish_resumed(proc, proc_db)
    assert "LOST FENCE" in text

    deletes = oplog_counts(proc_db)[job_id]
    trail = [
        t
        for (t,) in proc_db.query(
            "SELECT event_type FROM audit_auditevent WHERE job_id = %s ORDER BY event_id", [job_id]
        )
    ]
    assert "READY" not in trail[trail.index("CLAIMED") :]  # never requeued once claimed
    if point.startswith("begin"):
        assert deletes == 0  # the begin never committed: the delete never ran
        assert states(proc_db)[job_id] == "OUTCOME_UNKNOWN"
    else:
        assert deletes == 1  # it ran once, before the freeze; never again
        proc_db.manage("reconcile", "--auto")
        assert states(proc_db)[job_id] == "RECONCILED"
    assert event_counts(proc_db, "EXECUTED")[job_id] == 0


def _operator_close(proc_db, run_id: str) -> dict:
    code = f"""
import json, time, uuid
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
user, _ = get_user_model().objects.get_or_create(username="fault-op", is_superuser=True)
client = Client(HTTP_HOST="localhost")
client.force_login(user)
start = time.monotonic()
r = client.post(reverse("console:close_run", args=[{run_id!r}]),
    {{"request_id": uuid.uuid4().hex, "reason": "operator during the freeze"}},
    headers={{"HX-Request": "true"}})
print(json.dumps({{"status": r.status_code, "seconds": time.monotonic() - start,
                  "body": r.content.decode()}}))
"""
    return json.loads(proc_db.python(code).strip().splitlines()[-1])


@pytest.mark.postgresql
@pytest.mark.parametrize(
    ("point", "via"), [("plan", "direct"), ("dispose", "direct"), ("plan", "pgbouncer")]
)
def test_consolidator_frozen_in_a_run_write_blocks_nobody(request, point, via):
    proc_db = _db(request, via)
    seed_duplicate_vault(proc_db.workdir / "vault", originals=2, copies=2)
    if point == "plan":
        # A live run of another owner: the frozen plan locks it to take the store over.
        proc_db.python(
            "from runs.transitions import plan_run\n"
            "from tests.runs.support import StaticConsolidator\n"
            "plan_run(store='vault', owner='other', lease_seconds=600,"
            " consolidator=StaticConsolidator(groups=1, members=1))"
        )
    proc = freeze_at(
        proc_db,
        point,
        ("run_consolidator", "--store", "vault", "--once", "--lease", str(LEASE)),
        env=WORKER_ENV,
    )
    frozen_at = time.monotonic()
    run_id = proc_db.scalar(
        "SELECT run_id FROM runs_run WHERE status = 'active' ORDER BY started_at LIMIT 1"
    )
    assert row_locked(proc_db, "runs_run", "run_id", run_id)
    closing, sweep, reconcile = concurrently(
        lambda: _operator_close(proc_db, run_id),
        lambda: run_timed(proc_db, "recover_stale"),
        lambda: run_timed(proc_db, "reconcile", "--auto"),
    )
    print(f"\nclose_run while frozen: {closing['status']} in {closing['seconds']:.2f}s")
    assert closing["status"] == 409 and "holds it right now" in closing["body"]
    assert closing["seconds"] < BOUND
    assert sweep.seconds < BOUND and reconcile.seconds < BOUND
    wait_for(
        lambda: not row_locked(proc_db, "runs_run", "run_id", run_id),
        timeout=IDLE_MS / 1000 + 30,
    )
    print(f"run row locked for {time.monotonic() - frozen_at:.1f}s")
    active_before = proc_db.scalar("SELECT COUNT(*) FROM runs_run WHERE status = 'active'")
    assert active_before == 1  # the frozen plan or disposition was rolled back whole
    resume(proc)
    assert proc.wait(timeout=180) == 0, output(proc)[-3000:]
    assert proc_db.scalar("SELECT COUNT(*) FROM runs_run WHERE status = 'active'") <= 1
    # Every DELETE the consolidator asked for exists once (idempotency keys), none twice.
    keys = proc_db.query("SELECT idempotency_key, COUNT(*) FROM inbox_job GROUP BY idempotency_key")
    assert all(n == 1 for _key, n in keys)


@pytest.mark.sqlite
def test_sqlite_worker_frozen_with_the_write_lock_bounds_every_other_writer(proc_db):
    docs = [noop_doc(uid=f"s{i}") for i in range(4)]
    seed(proc_db, docs)
    busy = {"SQLITE_BUSY_TIMEOUT": "2"}
    proc_db.extra_env.update(busy)
    proc = freeze_at(proc_db, "begin:NOOP", (*EXECUTOR, "--scope", "noop"))
    before = proc_db.query("SELECT job_id, state, updated_at FROM inbox_job ORDER BY job_id")
    sweep = run_timed(proc_db, "recover_stale")
    print(f"\nSQLite sweep while a writer is frozen: exit {sweep.code} in {sweep.seconds:.2f}s")
    assert sweep.seconds < BOUND
    assert sweep.code != 0 and "busy" in sweep.out.lower(), sweep.out
    after = proc_db.query("SELECT job_id, state, updated_at FROM inbox_job ORDER BY job_id")
    assert after == before  # nothing written by the writer that gave up
    proc.send_signal(signal.SIGKILL)  # the frozen process dies: its lock goes with it
    proc.wait(timeout=30)
    time.sleep(LEASE + 1)
    proc_db.manage("recover_stale")
    proc_db.manage("run_executor", "--scope", "noop", "--exit-when-idle")
    assert set(states(proc_db).values()) == {"SUCCEEDED"}
    for doc in docs:
        assert event_counts(proc_db, "EXECUTED")[doc["job_id"]] == 1
