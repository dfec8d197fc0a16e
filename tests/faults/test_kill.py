"""kill -9 at each transaction point of the executor, for an idempotent and a
non-idempotent type: after recovery every SAVE lands and no DELETE is executed twice.

A worker killed inside a transaction leaves it uncommitted (the database rolls it back); the
jobs it held lapse and the sweep applies the lapsed-lease rules (an idempotent job back to
READY, a non-idempotent one parked as OUTCOME_UNKNOWN). Runs on both databases.

Also: 200 ``pg_terminate_backend`` calls against the executors' sessions during a 5,000-job
drain (PostgreSQL): nothing is lost, nothing runs twice, every job has one chain of events.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import urlsplit

import pytest

from tests.executors.support import (
    event_counts,
    oplog_counts,
    output_of,
    put_object,
    seed,
    sha,
    start_executor,
    states,
    vault_dir,
    wait_all,
)
from tests.factories import delete_doc, noop_doc, save_doc
from tests.faults.support import output, start
from tests.support.procdb import _with_dbname, suite_database_url

pytestmark = pytest.mark.slow

LEASE = 2


def _deletes(proc_db, n: int) -> list[dict]:
    docs = []
    for i in range(n):
        doc = delete_doc(uid=f"kd{i}")
        content = f"# kill {i}\n"
        put_object(proc_db, doc["vault_path"], content)
        doc["expected_provenance_hash"] = sha(content)
        docs.append(doc)
    return docs


@pytest.mark.parametrize("point", ["claim", "begin", "finish"])
@pytest.mark.parametrize("job_type", ["SAVE_OBJECT", "DELETE_OBJECT"])
def test_executor_killed_at_a_transaction_point_runs_no_delete_twice(proc_db_via, point, job_type):
    proc_db = proc_db_via
    scope = "save" if job_type == "SAVE_OBJECT" else "delete"
    if scope == "save":
        docs = [save_doc(uid=f"ks{i}", content=f"kill save {i}\n") for i in range(3)]
    else:
        docs = _deletes(proc_db, 3)
    seed(proc_db, docs)
    marker = proc_db.workdir / "killed.txt"
    victim = start(
        proc_db,
        "run_executor",
        "--scope",
        scope,
        "--exit-when-idle",
        "--lease",
        str(LEASE),
        "--batch",
        "3",
        env={"CONSOLE_FAULT": f"{point}:{job_type}=kill", "CONSOLE_FAULT_MARKER": str(marker)},
        log=proc_db.workdir / "victim.log",
    )
    victim.wait(timeout=120)
    assert victim.returncode == -9, output(victim)[-2000:]  # killed at the point, not earlier
    assert marker.read_text().split()[1] == f"{point}:{job_type}"
    time.sleep(LEASE + 1)
    proc_db.manage("recover_stale")
    again = proc_db.manage("run_executor", "--scope", scope, "--exit-when-idle")
    assert "stopped" in again.stdout

    final = states(proc_db)
    deletes = oplog_counts(proc_db)
    for doc in docs:
        job_id = doc["job_id"]
        assert event_counts(proc_db, "EXECUTED")[job_id] <= 1
        if scope == "save":
            assert final[job_id] == "SUCCEEDED"
            target = vault_dir(proc_db) / doc["vault_path"]
            assert target.read_text(encoding="utf-8") == doc["content"]
        else:
            assert deletes[job_id] <= 1, f"DELETE {job_id} executed twice"
            # A DELETE whose claim outlived its worker is parked, never requeued.
            expected = {"SUCCEEDED"} if point == "claim" else {"SUCCEEDED", "OUTCOME_UNKNOWN"}
            assert final[job_id] in expected
    if scope == "delete" and point != "claim":
        # Evidence decides: the one the killed worker deleted (finish) is confirmed; one it
        # never began (begin) is still in the vault: not applied, an operator decides.
        proc_db.manage("reconcile", "--auto")
        after = proc_db.query("SELECT job_id, state, result_code FROM inbox_job")
        for job_id, state, code in after:
            assert state in {"SUCCEEDED", "RECONCILED", "OUTCOME_UNKNOWN"}
            if state == "OUTCOME_UNKNOWN":
                assert code == "RECONCILE_NOT_APPLIED" and deletes[job_id] == 0
        parked = [s for _j, s, _c in after if s != "SUCCEEDED"]
        assert parked, "the kill left nothing to recover: it happened at the wrong point"
    print(f"\nkill -9 at {point}:{job_type}: final {sorted(states(proc_db).values())}")


@pytest.mark.postgresql
def test_two_hundred_terminated_sessions_during_a_drain_lose_nothing_and_run_nothing_twice(
    proc_db_via,
):
    proc_db = proc_db_via
    n_jobs, terminations = 5000, 200
    seed(proc_db, [noop_doc(uid=f"t{i:05d}") for i in range(n_jobs)])
    args = ("--exit-when-idle", "--lease", "10", "--batch", "10", "--sweep-every", "20")
    args += ("--poll", "0.2")
    procs = [
        start_executor(proc_db, "noop", *args, "--worker-id", f"term-{k}", log_dir=proc_db.workdir)
        for k in range(2)
    ]
    done = threading.Event()
    killed: list[int] = []
    failures: list[BaseException] = []
    # The terminator talks to PostgreSQL itself, never through PgBouncer: behind a transaction
    # pool its two statements may run on two server sessions, the second being the one it
    # terminates, which would end the terminator instead of a worker's session.
    direct = _with_dbname(suite_database_url(), urlsplit(proc_db.url).path.lstrip("/"))

    def terminator() -> None:
        """Terminate sessions in step with the drain (one per 20 jobs done, so all 200 land
        inside it however fast it runs), preferring one inside a transaction."""
        import psycopg

        deadline = time.monotonic() + 180
        try:
            with psycopg.connect(direct, autocommit=True) as conn:
                while not done.is_set() and len(killed) < terminations:
                    if time.monotonic() > deadline:
                        break
                    finished, registered = conn.execute(
                        "SELECT (SELECT count(*) FROM inbox_job WHERE state = 'SUCCEEDED'),"
                        " (SELECT count(*) FROM inbox_worker WHERE worker_id LIKE 'term-%%')"
                    ).fetchone()
                    # The drain has begun once both workers are registered and a job is done.
                    if registered < 2 or finished == 0 or len(killed) > finished // 20:
                        time.sleep(0.02)
                        continue
                    rows = conn.execute(
                        "SELECT pg_terminate_backend(pid), pid FROM ("
                        " SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                        " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                        " ORDER BY state = 'idle', random() LIMIT 1) AS one"
                    ).fetchall()
                    killed.extend(pid for ok, pid in rows if ok)
                    time.sleep(0.02)
        except BaseException as exc:  # the test fails on it below, not silently in a thread
            failures.append(exc)

    thread = threading.Thread(target=terminator)
    thread.start()
    codes = wait_all(procs, timeout=900)
    done.set()
    thread.join()
    assert not failures, failures
    # A worker whose every retry met a terminated session may have left claims to lapse.
    time.sleep(11)
    proc_db.manage("recover_stale")
    proc_db.manage("run_executor", "--scope", "noop", "--exit-when-idle")

    final = states(proc_db)
    executed = event_counts(proc_db, "EXECUTED")
    succeeded = event_counts(proc_db, "SUCCEEDED")
    lost = [j for j, s in final.items() if s != "SUCCEEDED"]
    twice = [j for j in final if executed[j] != 1 or succeeded[j] != 1]
    print(
        f"\n{len(killed)} sessions terminated during a {n_jobs}-job drain; exit codes {codes}; "
        f"lost {len(lost)}, run twice {len(twice)}; database errors seen: "
        + ", ".join(str(output_of(p).count("database error")) for p in procs)
    )
    assert len(killed) == terminations, f"only {len(killed)} terminations happened"
    assert codes == [0, 0], [output_of(p)[-2000:] for p in procs]
    assert (len(lost), len(twice)) == (0, 0), (lost[:5], twice[:5])
    first = proc_db.query(
        "SELECT DISTINCT ON (job_id) job_id, event_type FROM audit_auditevent "
        "ORDER BY job_id, event_id"
    )
    assert {t for _j, t in first} == {"REQUESTED"}
