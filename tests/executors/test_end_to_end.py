"""End to end: 2,000 SAVE and 200 approved DELETE jobs through 2 + 2 executor processes."""

from __future__ import annotations

import re

import pytest

from inbox.models import JobState
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
from tests.factories import delete_doc, save_doc

N_SAVE = 2000
N_DELETE = 200

pytestmark = pytest.mark.slow


def test_run_executors_on_saves_and_approved_deletes_every_job_settles_once(proc_db):
    saves = [
        save_doc(uid=f"s{i:05d}", content=f"# Note {i}\n" + "x" * (i % 97)) for i in range(N_SAVE)
    ]
    deletes = []
    expected: dict[str, tuple[str, str]] = {}
    for i in range(N_DELETE):
        doc = delete_doc(uid=f"d{i:04d}")
        content = f"# Note d{i:04d}\n"
        if i % 10 == 0:
            expected[doc["job_id"]] = (JobState.FAILED, "NOT_FOUND")  # never stored
        elif i % 10 == 1:
            put_object(proc_db, doc["vault_path"], content + "edited later\n")
            expected[doc["job_id"]] = (JobState.FAILED, "HASH_MISMATCH")
        else:
            put_object(proc_db, doc["vault_path"], content)
            assert doc["expected_provenance_hash"] == sha(content)
            expected[doc["job_id"]] = (JobState.SUCCEEDED, "DELETED")
        deletes.append(doc)
    seed(proc_db, saves + deletes)

    logs = proc_db.workdir
    procs = [
        start_executor(proc_db, scope, "--exit-when-idle", "--batch", "20", log_dir=logs)
        for scope in ("save", "save", "delete", "delete")
    ]
    assert wait_all(procs) == [0, 0, 0, 0], [output_of(p)[-2000:] for p in procs]

    state = states(proc_db)
    results = dict(proc_db.query("SELECT job_id, result_code FROM inbox_job"))
    for doc in saves:
        assert state[doc["job_id"]] == JobState.SUCCEEDED
        assert (vault_dir(proc_db) / doc["vault_path"]).read_bytes() == doc["content"].encode()
    for doc in deletes:
        assert (state[doc["job_id"]], results[doc["job_id"]]) == expected[doc["job_id"]]
        present = (vault_dir(proc_db) / doc["vault_path"]).exists()
        assert present == (expected[doc["job_id"]][1] == "HASH_MISMATCH")
    executed = event_counts(proc_db, "EXECUTED")
    attempts = oplog_counts(proc_db)
    assert all(executed[doc["job_id"]] == 1 for doc in deletes)
    assert all(attempts[doc["job_id"]] == 1 for doc in deletes)
    assert not list((vault_dir(proc_db)).rglob(".tmp-*"))
    # The throughput counts, written by four processes at once, match the jobs exactly, and
    # each process wrote only its own rows.
    counted = proc_db.query(
        "SELECT scope, state, SUM(finished), MIN(shard), MAX(shard) FROM inbox_finishedcount "
        "GROUP BY scope, state"
    )
    ended = proc_db.query(
        "SELECT scope, state, COUNT(*) FROM inbox_job GROUP BY scope, state ORDER BY 1, 2"
    )
    assert sorted((scope, state, int(n)) for scope, state, n, _a, _b in counted) == [
        (scope, state, n) for scope, state, n in ended
    ]
    pids = {proc.pid for proc in procs}
    assert {int(shard) for *_rest, low, high in counted for shard in (low, high)} <= pids
    for proc in procs:
        summary = re.search(r"stopped: (\d+) jobs .* \(([\d.]+) jobs/s\)", output_of(proc))
        assert summary is not None
        print(f"throughput {proc.args[4]}: {summary.group(1)} jobs, {summary.group(2)} jobs/s")
