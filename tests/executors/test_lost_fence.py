"""A holder whose claim is taken away mid-job records nothing for it and says so loudly."""

from __future__ import annotations

from pathlib import Path

import pytest

from inbox.models import JobState
from tests.executors.support import event_counts, output_of, seed, start_executor, wait_for
from tests.factories import noop_doc

pytestmark = pytest.mark.slow

STEAL = """
import datetime as dt
from inbox.transitions import db_now, recover_stale_claims_report
print(recover_stale_claims_report(at=db_now() + dt.timedelta(hours=1), actor="test-sweeper").total)
"""


def _gated(proc_db) -> tuple[Path, Path]:
    """Slow handlers that note their start in a marker file and wait for a gate file."""
    marker = proc_db.workdir / "started.txt"
    gate = proc_db.workdir / "gate"
    proc_db.extra_env.update(
        DJANGO_SETTINGS_MODULE="tests.executors.slow_settings",
        SLOW_HANDLER_MARKER=str(marker),
        SLOW_HANDLER_GATE=str(gate),
    )
    return marker, gate


def test_claim_lost_mid_job_outcome_not_recorded_and_job_runs_again(proc_db):
    marker, gate = _gated(proc_db)
    doc = noop_doc(job_type="SLOW_NOOP")
    seed(proc_db, [doc])
    proc = start_executor(
        proc_db, "slow", "--exit-when-idle", "--lease", "30", log_dir=proc_db.workdir
    )
    wait_for(lambda: marker.exists() and marker.read_text().strip())
    # A sweep that believes the lease lapsed requeues the job while the handler runs.
    assert proc_db.python(STEAL).strip() == "1"
    gate.touch()  # the handler returns; its holder must find the claim gone
    assert proc.wait(timeout=120) == 0, output_of(proc)

    assert "LOST FENCE" in output_of(proc)
    assert proc_db.scalar("SELECT state FROM inbox_job") == JobState.SUCCEEDED
    # The first run's outcome was refused; only the second run recorded EXECUTED.
    assert len(marker.read_text().split()) == 2
    assert event_counts(proc_db, "EXECUTED")[doc["job_id"]] == 1
    assert event_counts(proc_db, "SUCCEEDED")[doc["job_id"]] == 1


def test_claims_lost_mid_batch_outcomes_refused_and_the_batch_runs_again(proc_db):
    """The batched path: the sweep takes the whole begun batch away while its first handler
    runs. Every outcome is refused at commit (the fence), and each job runs again once."""
    marker, gate = _gated(proc_db)
    docs = [noop_doc(job_type="SLOW_NOOP") for _ in range(3)]
    seed(proc_db, docs)
    proc = start_executor(
        proc_db, "slow", "--exit-when-idle", "--lease", "30", log_dir=proc_db.workdir
    )
    wait_for(lambda: marker.exists() and marker.read_text().strip())
    assert proc_db.python(STEAL).strip() == "3"
    gate.touch()
    assert proc.wait(timeout=120) == 0, output_of(proc)

    assert output_of(proc).count("LOST FENCE") == 3
    assert set(proc_db.query("SELECT state FROM inbox_job")) == {(JobState.SUCCEEDED,)}
    assert len(marker.read_text().split()) == 6
    for doc in docs:
        assert event_counts(proc_db, "EXECUTED")[doc["job_id"]] == 1
        assert event_counts(proc_db, "SUCCEEDED")[doc["job_id"]] == 1
