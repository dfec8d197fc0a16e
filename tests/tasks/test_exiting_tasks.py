"""A task that raises what is not an ``Exception`` (``exit()``, ``SystemExit``,
``GeneratorExit``) fails its own job, recorded like any error; the executor and the rest of
its batch go on. Real executor processes, on a SQLite file or PostgreSQL."""

from __future__ import annotations

import json
import signal

import pytest

from inbox.models import JobState
from tests.executors.support import output_of, start_executor, wait_for

pytestmark = pytest.mark.slow

ENQUEUE = """
from tests.tasks import sample
calls = [
    sample.add.enqueue(1, 1), sample.calls_exit.enqueue(), sample.add.enqueue(2, 2),
    sample.raises_system_exit.enqueue(3), sample.add.enqueue(3, 3),
    sample.raises_generator_exit.enqueue(), sample.add.enqueue(4, 4),
]
print(" ".join(result.id for result in calls))
"""
ADD = "from tests.tasks import sample; print(sample.add.enqueue(5, 5).id)"
RESULTS = """
import json
from django.tasks import default_task_backend
out = {{}}
for job_id in {ids!r}:
    r = default_task_backend.get_result(job_id)
    out[job_id] = {{"status": r.status, "errors": [[e.exception_class_path, e.traceback]
                                                 for e in r.errors]}}
print(json.dumps(out))
"""


def _states(proc_db, ids: list[str]) -> dict[str, str]:
    rows = proc_db.query("SELECT job_id, state FROM inbox_job")
    return {job_id: state for job_id, state in rows if job_id in ids}


def test_tasks_that_exit_fail_alone_and_the_executor_goes_on_claiming(proc_db):
    ids = proc_db.python(ENQUEUE).split()
    normal = [ids[0], ids[2], ids[4], ids[6]]
    exiting = {ids[1]: "builtins.SystemExit", ids[3]: "builtins.SystemExit"}
    exiting[ids[5]] = "builtins.GeneratorExit"
    proc = start_executor(
        proc_db, "default", "--batch", "10", "--poll", "0.2", log_dir=proc_db.workdir
    )
    try:
        final = {JobState.SUCCEEDED, JobState.FAILED}
        wait_for(
            lambda: proc.poll() is not None or set(_states(proc_db, ids).values()) <= final,
            timeout=120,
            every=0.2,
        )
        assert proc.poll() is None, output_of(proc)  # still running
        later = proc_db.python(ADD).strip()
        wait_for(lambda: _states(proc_db, [later]) == {later: JobState.SUCCEEDED}, timeout=60)
        assert proc.poll() is None, output_of(proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, output_of(proc)

    states = _states(proc_db, ids)
    assert {states[job_id] for job_id in normal} == {JobState.SUCCEEDED}
    assert {job_id: states[job_id] for job_id in exiting} == dict.fromkeys(exiting, JobState.FAILED)
    results = json.loads(proc_db.python(RESULTS.format(ids=ids)).strip().splitlines()[-1])
    for job_id, kind in exiting.items():
        assert results[job_id]["status"] == "FAILED"
        [(path, trace)] = results[job_id]["errors"]
        assert path == kind
        assert kind.split(".")[-1] in trace
    assert "closed from inside the task" in results[ids[5]]["errors"][0][1]
    for job_id in normal:
        assert results[job_id] == {"status": "SUCCESSFUL", "errors": []}
