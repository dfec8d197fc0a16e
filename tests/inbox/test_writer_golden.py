"""The one guarded writer changes no trail: every transition, driven through the current code,
writes exactly the rows and audit events the three write paths before it wrote.

``golden_transitions.json`` was written by ``transition_scenario.dump`` on commit 9963659 (the
code before ``_move``), on SQLite; the same scenario gives the same file on PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.inbox import transition_scenario

pytestmark = pytest.mark.django_db

GOLDEN = Path(__file__).with_name("golden_transitions.json")


def test_every_transition_writes_the_rows_and_events_of_the_code_before_the_one_writer():
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    transition_scenario.run()
    got = transition_scenario.snapshot()
    assert len(got["events"]) == len(expected["events"]) == 69
    # Columns added since the golden file was written must hold their defaults here.
    added = {"run_after": None}
    for mine, theirs in zip(got["jobs"], expected["jobs"], strict=True):
        assert {k: mine[k] for k in theirs} == theirs, mine["job_id"]
        assert {k: v for k, v in mine.items() if k not in theirs} == added, mine["job_id"]
    for n, (mine, theirs) in enumerate(zip(got["events"], expected["events"], strict=True)):
        assert mine == theirs, f"event {n}: {mine['event_type']} of {mine['job_id']}"
