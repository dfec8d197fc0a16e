"""THREADS threads call plan_run on one store, all released together each round.

Usage: plan_race.py STORE THREADS ROUNDS LEASE PAUSE_EVERY OWNERS
Every PAUSE_EVERY rounds all threads wait LEASE + 0.5 s first, so the last run lapses and the
next plan must close it expired. Prints one JSON line: planned count and errors.
"""

import json
import sys
import threading
import time

from _setup import setup

setup()

from django.db import connection  # noqa: E402

from runs.errors import RunError  # noqa: E402
from runs.transitions import plan_run  # noqa: E402
from tests.runs.support import StaticConsolidator  # noqa: E402

store, threads, rounds, lease, pause_every, owners = sys.argv[1:7]
threads, rounds, lease, pause_every, owners = map(
    int, (threads, rounds, lease, pause_every, owners)
)
barrier = threading.Barrier(threads, timeout=300)
lock = threading.Lock()
planned = 0
errors: list[str] = []


def work(index: int) -> None:
    global planned
    consolidator = StaticConsolidator(groups=1, members=1)
    try:
        for r in range(rounds):
            barrier.wait()
            if r and r % pause_every == 0:
                time.sleep(lease + 0.5)
            try:
                plan_run(
                    store=store,
                    owner=f"w{index % owners}",
                    lease_seconds=lease,
                    consolidator=consolidator,
                )
                with lock:
                    planned += 1
            except RunError as exc:
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        connection.close()


workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(json.dumps({"planned": planned, "errors": errors}))
