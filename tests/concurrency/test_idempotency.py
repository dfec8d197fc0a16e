"""Sixteen producers send the same job document at once: a replay with the same content returns
the stored job, so there is one row, one creator, fifteen replays and no server error."""

from __future__ import annotations

import json

import pytest

from tests.concurrency.procs import run_fleet
from tests.factories import save_doc

CREATORS = 16


@pytest.mark.slow
def test_create_job_same_key_from_16_processes_makes_one_row(proc_db, tmp_path):
    doc = save_doc()
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc), encoding="utf-8")

    fleet = run_fleet(proc_db, "create_worker.py", [["--doc", str(path)]] * CREATORS, tmp_path)

    outcomes = [p.read_text(encoding="utf-8").split() for p in fleet.stdout]
    errors = [p.read_text(encoding="utf-8") for p in fleet.stderr if p.read_text().strip()]
    print(
        f"idempotent create on {proc_db.vendor}: {CREATORS} processes, {fleet.seconds:.2f} s, "
        f"{sum(o[:1] == ['created'] for o in outcomes)} created"
    )
    assert errors == []
    assert fleet.returncodes() == [0] * CREATORS
    assert sorted(o[0] for o in outcomes) == ["created"] + ["replayed"] * (CREATORS - 1)
    assert {o[1] for o in outcomes} == {doc["job_id"]}
    assert proc_db.scalar("SELECT COUNT(*) FROM inbox_job") == 1
    events = proc_db.query("SELECT event_type FROM audit_auditevent ORDER BY event_id")
    assert [e for (e,) in events] == ["REQUESTED", "READY"]
