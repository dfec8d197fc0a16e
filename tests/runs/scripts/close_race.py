"""Race the paths that notice a run's completion: THREADS threads calling close_if_finished or
close_run(status=complete) at once on a run with nothing left open, ROUNDS times.

The run is set up with its only group already done but the run still active — the moment every
noticing path races on. (Our own writes close in the same transaction as the last change, so the
setup marks the group done directly; this is test scaffolding, not a code path.)

Usage: close_race.py THREADS ROUNDS
Prints one JSON line per round: run_id and which callers reported closing it.
"""

import json
import sys
import threading

from _setup import setup

setup()

from django.db import connection  # noqa: E402

from runs import transitions as t  # noqa: E402
from runs.errors import RunError  # noqa: E402
from runs.models import Group  # noqa: E402
from tests.runs.support import StaticConsolidator  # noqa: E402


def close_once(index: int, run_id: str) -> str:
    """Try to close; return the path name if this caller closed the run, else ''."""
    if index % 2:
        return "close_if_finished" if t.close_if_finished(run_id, actor=f"noticer-{index}") else ""
    try:
        t.close_run(run_id, status="complete", actor=f"closer-{index}", reason="race")
    except RunError:
        return ""
    return "close_run"


def race(threads: int, run_id: str) -> list[str]:
    barrier = threading.Barrier(threads, timeout=120)
    closed: list[str] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        try:
            barrier.wait()
            path = close_once(index, run_id)
            if path:
                with lock:
                    closed.append(path)
        finally:
            connection.close()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return closed


def main() -> None:
    threads, rounds = int(sys.argv[1]), int(sys.argv[2])
    for r in range(rounds):
        served = t.next_group(
            store=f"close-{r}",
            owner="owner",
            lease_seconds=60,
            consolidator=StaticConsolidator(groups=1, members=1),
        )
        Group.objects.filter(id=served.group.id).update(status="done")
        closed = race(threads, served.run.run_id)
        print(json.dumps({"run_id": served.run.run_id, "closed": closed}), flush=True)


main()
