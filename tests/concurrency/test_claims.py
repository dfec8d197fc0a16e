"""Concurrent claims with real processes: two workers never both hold one job, so every job
is claimed exactly once.

PostgreSQL: 8 processes over 5,000 jobs; SQLite: 4 processes over 2,000 jobs — the vendor
follows the suite's ``DATABASE_URL``. The measured figures are printed and written to
``artifacts/figures/claims-<vendor>.txt``.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from inbox import transitions
from inbox.models import Job, JobState
from inbox.writer import claims, engine
from inbox.writer.events import claim_events
from inbox.writer.values import Move
from tests.concurrency.procs import run_fleet
from tests.factories import make_job

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "artifacts" / "figures"
SIZES = {"postgresql": (5000, 8), "sqlite": (2000, 4)}
BATCH = 10


def _detail(value) -> dict:
    return value if isinstance(value, dict) else json.loads(value)


@pytest.mark.slow
def test_claim_concurrent_processes_claim_every_job_exactly_once(proc_db_via, tmp_path):
    proc_db = proc_db_via
    jobs, processes = SIZES[proc_db.vendor]
    started = time.monotonic()
    loaded = proc_db.python(
        f"from tests.concurrency.pool import load_pool; print(len(load_pool({jobs})))"
    )
    load_seconds = time.monotonic() - started
    assert loaded.strip() == str(jobs)

    argv = [
        [
            *("--scope", "noop", "--limit", str(BATCH), "--worker-id", f"w{i}"),
            *("--work-ms", "5"),
            "--out",
            str(tmp_path / f"claims-{i}.txt"),
        ]
        for i in range(processes)
    ]
    fleet = run_fleet(proc_db, "claim_worker.py", argv, tmp_path)

    reported: list[tuple[str, str, str]] = []
    per_worker = {}
    for i in range(processes):
        lines = (tmp_path / f"claims-{i}.txt").read_text().split()
        pairs = list(zip(lines[::2], lines[1::2], strict=True))
        per_worker[f"w{i}"] = len(pairs)
        reported.extend((job_id, claim_id, f"w{i}") for job_id, claim_id in pairs)
    counts = Counter(job_id for job_id, _, _ in reported)
    duplicates = sum(1 for n in counts.values() if n > 1)
    rows = {
        job_id: (state, claim_id, worker_id)
        for job_id, state, claim_id, worker_id in proc_db.query(
            "SELECT job_id, state, claim_id, worker_id FROM inbox_job"
        )
    }
    lost = len(set(rows) - set(counts))
    errors = fleet.errors()
    claimed_events = proc_db.query(
        "SELECT job_id, detail FROM audit_auditevent WHERE event_type = %s", ["CLAIMED"]
    )
    rate = jobs / fleet.seconds
    figures = (
        f"claims on {proc_db.vendor}: {jobs} jobs, {processes} processes, batch {BATCH}: "
        f"{fleet.seconds:.2f} s ({rate:.0f} jobs/s); pool loaded in {load_seconds:.2f} s; "
        f"claimed {len(counts)}, duplicates {duplicates}, lost {lost}, "
        f"'database is locked' {fleet.locked()}, error lines {len(errors)}; "
        f"per worker {per_worker}"
    )
    print(figures)
    FIGURES.mkdir(parents=True, exist_ok=True)
    (FIGURES / f"claims-{proc_db.vendor}.txt").write_text(figures + "\n", encoding="utf-8")

    assert errors == [], "\n".join(errors[:20])
    assert fleet.returncodes() == [0] * processes
    assert len(rows) == jobs
    assert (duplicates, lost, len(reported)) == (0, 0, jobs)
    for job_id, claim_id, worker_id in reported:
        assert rows[job_id] == (JobState.CLAIMED, claim_id, worker_id)
    event_claims = Counter(job_id for job_id, _ in claimed_events)
    assert len(event_claims) == jobs and set(event_claims.values()) == {1}
    assert {(j, _detail(d)["claim_id"]) for j, d in claimed_events} == {
        (j, c) for j, c, _ in reported
    }
    assert len([w for w, n in per_worker.items() if n]) > 1  # the workers really competed


@pytest.mark.django_db
def test_claim_rows_from_a_stale_candidate_list_never_reclaims_a_held_job():
    """Another claimer took the job between candidate selection and the UPDATE: the guarded
    UPDATE (state = READY) must leave it alone."""
    job = make_job("noop", JobState.READY)
    stale_candidates = [Job.objects.get(job_id=job.job_id)]
    first = transitions.claim_job(job.job_id, worker_id="w-first", lease_seconds=60)
    now = transitions.db_now()
    # The claim's own UPDATE (the one guarded writer), fed the stale candidate ids.
    claimed = engine.run(
        Move(
            [transitions.Held(j.job_id) for j in stale_candidates],
            to=JobState.CLAIMED,
            allowed=[JobState.READY],
            actor="w-second",
            values=claims._claim_values("w-second", now, now + dt.timedelta(seconds=60)),
            events=claim_events("w-second"),
            at=now,
        )
    ).jobs
    assert claimed == []
    stored = Job.objects.get(job_id=job.job_id)
    assert (stored.worker_id, stored.claim_id, stored.attempt_count) == (
        "w-first",
        first.claim_id,
        1,
    )
