"""Hostile vault contents against real worker processes: nothing waits without a bound, and
anything at an object's path that is not a regular file is refused without blocking.

- A FIFO at a SAVE's and at a DELETE's path: the executors finish both jobs as FAILED
  (``NOT_A_FILE``, definite), exit when idle, and answer SIGTERM — before the fix they sat in
  ``open()`` waiting for a writer while the heartbeat kept the lease alive.
- A probe that cannot get evidence (a FIFO, a directory the process may not read, a path
  component longer than the filesystem allows): ``reconcile --auto`` and ``--loop`` report that
  one job as "evidence unavailable", go on with the others and exit 0.

The permission test needs a real EACCES. These tests may run as root, which reads any
directory; the reconciler then runs with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped from
its capability bounding set (``prctl``), so root is held to the file modes like anyone else.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from inbox.models import JobState
from tests.executors.support import (
    output_of,
    put_object,
    seed,
    start_executor,
    vault_dir,
    wait_for,
)
from tests.factories import delete_doc, save_doc
from tests.support.procdb import MANAGE, ROOT, ProcDB

pytestmark = pytest.mark.slow

# A worker that has not finished a handful of jobs after this long is taken as blocked.
BLOCKED_AFTER = 60

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2


def _drop_dac_capabilities() -> None:
    """preexec_fn: after exec, even root obeys file modes (no-op when not root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)


def _stop(proc: subprocess.Popen) -> None:
    """Kill a worker a failed test left running (a blocked one would outlive the test)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def _fifo(db: ProcDB, vault_path: str) -> Path:
    path = vault_dir(db) / vault_path
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _unblock(fifos: list[Path]) -> None:
    """Give a blocked reader its writer, so a failing test can clean up."""
    for path in fifos:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def _job(db: ProcDB, job_id: str) -> tuple[str, str]:
    rows = db.query("SELECT state, result_code FROM inbox_job WHERE job_id = %s", (job_id,))
    return rows[0]


def test_executors_with_fifo_at_save_and_delete_paths_fail_them_and_exit(proc_db):
    fifo_save = save_doc(uid="fifo-save", vault_path="odd/save.md")
    fifo_delete = delete_doc(uid="fifo-delete", vault_path="odd/delete.md")
    fine_save = save_doc(uid="fine-save")
    fine_delete = delete_doc(uid="fine-delete")
    put_object(proc_db, fine_delete["vault_path"], "# Note fine-delete\n")
    fifos = [_fifo(proc_db, "odd/save.md"), _fifo(proc_db, "odd/delete.md")]
    seed(proc_db, [fifo_save, fifo_delete, fine_save, fine_delete])

    procs = [
        start_executor(proc_db, scope, "--exit-when-idle", "--one-by-one", log_dir=proc_db.workdir)
        for scope in ("save", "delete")
    ]
    try:
        codes = [p.wait(timeout=BLOCKED_AFTER) for p in procs]
    except subprocess.TimeoutExpired:
        _unblock(fifos)
        raise AssertionError(
            "an executor was still running: " + " | ".join(output_of(p)[-800:] for p in procs)
        ) from None
    finally:
        for proc in procs:
            _stop(proc)
    assert codes == [0, 0], [output_of(p)[-2000:] for p in procs]
    assert _job(proc_db, fifo_save["job_id"]) == (JobState.FAILED, "NOT_A_FILE")
    assert _job(proc_db, fifo_delete["job_id"]) == (JobState.FAILED, "NOT_A_FILE")
    assert _job(proc_db, fine_save["job_id"]) == (JobState.SUCCEEDED, "WRITTEN")
    assert _job(proc_db, fine_delete["job_id"]) == (JobState.SUCCEEDED, "DELETED")
    assert all(path.exists() for path in fifos)
    error = proc_db.scalar(
        "SELECT last_error FROM inbox_job WHERE job_id = %s", (fifo_delete["job_id"],)
    )
    assert "not a regular file" in error and "FIFO" in error


@pytest.mark.parametrize("kind", ["save", "delete"])
def test_executor_on_fifo_job_answers_sigterm(proc_db, kind):
    doc = (save_doc if kind == "save" else delete_doc)(uid=f"fifo-{kind}", vault_path="odd/x.md")
    fifos = [_fifo(proc_db, "odd/x.md")]
    seed(proc_db, [doc])
    proc = start_executor(proc_db, kind, "--poll", "0.2", log_dir=proc_db.workdir)
    try:
        # The moment it holds the job, ask it to stop: a blocked open() would never return.
        wait_for(lambda: _job(proc_db, doc["job_id"])[0] != JobState.READY, timeout=60)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=BLOCKED_AFTER)
        except subprocess.TimeoutExpired:
            _unblock(fifos)
            raise AssertionError(f"SIGTERM was not answered: {output_of(proc)[-2000:]}") from None
    finally:
        _stop(proc)
    assert code == 0, output_of(proc)
    assert _job(proc_db, doc["job_id"]) == (JobState.FAILED, "NOT_A_FILE")
    held = proc_db.scalar("SELECT COUNT(*) FROM inbox_job WHERE state IN ('CLAIMED', 'EXECUTING')")
    assert held == 0


# --- the reconciler ---------------------------------------------------------------------------

UNKNOWN_CODE = """
from tests.factories import delete_doc, make_job

for uid, path in {jobs!r}:
    make_job("delete", "OUTCOME_UNKNOWN", **delete_doc(uid=uid, vault_path=path))
print("ok")
"""

# A job stored before component lengths were checked: its path cannot exist on the filesystem.
LEGACY_PATH = "legacy/" + "n" * 300 + ".md"


def _unknown_deletes(db: ProcDB, jobs: list[tuple[str, str]]) -> None:
    db.python(UNKNOWN_CODE.format(jobs=jobs))


def _make_legacy(db: ProcDB, job_id: str) -> None:
    """Rewrite a job's path to one validation now refuses, resealed as if it had always been
    so (the fingerprint covers the path): a job stored before component lengths were checked."""
    fingerprint = db.python(
        "from inbox.jobtypes import IMMUTABLE_COLUMNS, compute_fingerprint\n"
        "from inbox.models import Job\n"
        f"job = Job.objects.get(job_id={job_id!r})\n"
        f"job.vault_path = {LEGACY_PATH!r}\n"
        "cols = {n: getattr(job, n) for n in IMMUTABLE_COLUMNS}\n"
        "print(compute_fingerprint(columns=cols, payload=job.payload))"
    ).strip()
    changed = db.execute(
        "UPDATE inbox_job SET vault_path = %s, fingerprint = %s WHERE job_id = %s",
        (LEGACY_PATH, fingerprint, job_id),
    )
    assert changed == 1


@pytest.fixture
def hostile_unknowns(proc_db) -> dict[str, str]:
    """Five OUTCOME_UNKNOWN deletes: two absent (decidable), one behind a directory nobody may
    read, one at a FIFO, one with a path no filesystem can hold."""
    jobs = {
        "absent-1": "gone/a.md",
        "absent-2": "gone/b.md",
        "denied": "private/x.md",
        "fifo": "odd/fifo.md",
        "legacy": "legacy/short.md",
    }
    _unknown_deletes(proc_db, [(uid, path) for uid, path in jobs.items()])
    private = vault_dir(proc_db) / "private"
    private.mkdir()
    (private / "x.md").write_text("# Note denied\n")
    private.chmod(0)
    _fifo(proc_db, "odd/fifo.md")
    _make_legacy(proc_db, "delete-legacy")
    yield {uid: f"delete-{uid}" for uid in jobs}
    private.chmod(0o755)


def _manage(db: ProcDB, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, MANAGE, *args],
        env=db.env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_drop_dac_capabilities,
    )


def test_reconcile_auto_reports_unavailable_evidence_and_goes_on(proc_db, hostile_unknowns):
    proc = _manage(proc_db, "reconcile", "--auto")
    try:
        out, err = proc.communicate(timeout=BLOCKED_AFTER)
    finally:
        _stop(proc)
    assert proc.returncode == 0, out + err
    assert "Traceback" not in err
    ids = hostile_unknowns
    for uid in ("absent-1", "absent-2"):
        assert _job(proc_db, ids[uid]) == (JobState.RECONCILED, "CONFIRMED_DELETED")
    for uid in ("denied", "fifo", "legacy"):
        assert _job(proc_db, ids[uid]) == (JobState.OUTCOME_UNKNOWN, "UNKNOWN")
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("delete-")}
    assert "evidence unavailable" in lines[ids["denied"]]
    assert "Permission denied" in lines[ids["denied"]]
    assert "not a regular file" in lines[ids["fifo"]]
    assert "at most 255" in lines[ids["legacy"]]
    assert "reconcile 2 as CONFIRMED_DELETED" in out
    assert "3 skipped" in out


def test_reconcile_loop_goes_on_past_unavailable_evidence_and_stops_on_sigterm(
    proc_db, hostile_unknowns
):
    proc = _manage(proc_db, "reconcile", "--auto", "--loop", "--interval", "0.3")
    ids = hostile_unknowns
    try:
        wait_for(
            lambda: _job(proc_db, ids["absent-2"])[0] == JobState.RECONCILED, timeout=BLOCKED_AFTER
        )
        # A second pass over the same unavailable evidence must not end the loop either.
        _unknown_deletes(proc_db, [("absent-3", "gone/c.md")])
        wait_for(
            lambda: _job(proc_db, "delete-absent-3")[0] == JobState.RECONCILED,
            timeout=BLOCKED_AFTER,
        )
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=BLOCKED_AFTER)
    finally:
        _stop(proc)
    assert proc.returncode == 0, out + err
    assert "Traceback" not in err
    for uid in ("denied", "fifo", "legacy"):
        assert _job(proc_db, ids[uid])[0] == JobState.OUTCOME_UNKNOWN
    passes = int(out.rsplit("stopped after ", 1)[1].split()[0])
    assert passes >= 2


def test_permission_denied_is_real_in_the_reconciler_process(proc_db):
    """The control for the capability drop: the reconciler really cannot read a 000 directory
    (else the EACCES case above would test nothing)."""
    private = vault_dir(proc_db) / "private"
    private.mkdir()
    private.chmod(0)
    try:
        proc = _manage(
            proc_db,
            "shell",
            "--no-imports",
            "-c",
            f"import os\ntry:\n    os.listdir({str(private)!r})\nexcept PermissionError:\n"
            "    print('denied')",
        )
        out, err = proc.communicate(timeout=BLOCKED_AFTER)
    finally:
        private.chmod(0o755)
    assert out.strip() == "denied", err
