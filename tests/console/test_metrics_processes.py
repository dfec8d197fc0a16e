"""The stored audit-event tally (console.metrics.EventTally) under real concurrent processes:
scrapers in several processes, each appending events between scrapes and sometimes starting
over as a new process would, never count an event twice or miss one."""

from __future__ import annotations

import collections

SCRAPER = """
import datetime as dt
from audit.events import record_event
from console.metrics import EventTally
from core.clock import db_now
tally = EventTally()
for i in range({rounds}):
    record_event(event_type="OPERATOR_ACTION", actor="p{n}", detail={{"i": i}})
    if i % 4 == 0:
        tally = EventTally()  # as a new gunicorn worker would
    # Five minutes on: every event so far is past the settle window and gets stored.
    tally.totals(db_now() + dt.timedelta(minutes=5))
print("done")
"""

PROCESSES = 3
ROUNDS = 25


def test_concurrent_scrapers_store_each_event_once(proc_db) -> None:
    procs = [
        proc_db.popen("shell", "--no-imports", "-c", SCRAPER.format(rounds=ROUNDS, n=n))
        for n in range(PROCESSES)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        assert "done" in out
    [(settled_id,)] = proc_db.query("SELECT settled_id FROM console_audittally")
    events = proc_db.query("SELECT event_id, event_type FROM audit_auditevent")
    assert len(events) >= PROCESSES * ROUNDS
    expected = collections.Counter(t for event_id, t in events if event_id <= settled_id)
    stored = dict(proc_db.query("SELECT event_type, events FROM console_audittallycount"))
    assert stored == dict(expected)
    # The last scrape of the last process settled everything it could see: all of them.
    assert settled_id == max(event_id for event_id, _t in events)
