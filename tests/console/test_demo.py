"""The demo: its process supervisor, its trickle producer and seed_demo's idempotency."""

from __future__ import annotations

import io
import sys
import time

import pytest

from console.demo import ChildSpec, Supervisor

# A child that prints, then waits for SIGTERM and exits 0 (like our workers).
POLITE = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.05)\n"
)
# A child that ignores SIGTERM: the supervisor must kill it after the timeout.
STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(0.05)\n"
)


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def test_stop_with_polite_and_stubborn_children_reports_each():
    out = io.StringIO()
    sup = Supervisor(
        [ChildSpec("polite", _py(POLITE)), ChildSpec("stubborn", _py(STUBBORN))],
        out=out,
        stop_timeout=1.5,
    )
    sup.start()
    _wait_for(lambda: out.getvalue().count("| ready") == 2)
    statuses = sup.stop()
    assert statuses == {"polite": 0, "stubborn": None}
    assert all(child.proc.poll() is not None for child in sup.children)


def test_poll_with_periodic_child_restarts_it_after_exit():
    out = io.StringIO()
    sup = Supervisor([ChildSpec("pass", _py("print('one pass')"), every=0.0)], out=out)
    sup.start()
    _wait_for(lambda: (sup.poll() or True) and out.getvalue().count("one pass") >= 2)
    sup.stop()
    assert sup.children[0].returncodes[:2] == [0, 0]


def test_poll_with_dead_essential_child_names_it():
    out = io.StringIO()
    sup = Supervisor([ChildSpec("web", _py("raise SystemExit(3)"), essential=True)], out=out)
    sup.start()
    died: list[str | None] = []
    _wait_for(lambda: died.append(sup.poll()) or died[-1] is not None)
    sup.stop()
    assert died[-1] == "web"
    assert "exited unexpectedly with 3" in out.getvalue()


def test_start_with_delayed_periodic_child_waits_for_its_turn():
    out = io.StringIO()
    sup = Supervisor([ChildSpec("later", _py("print('ran')"), every=60, delay=60)], out=out)
    sup.start()
    sup.poll()
    assert sup.children[0].proc is None
    sup.poll(now=time.monotonic() + 61)
    assert sup.children[0].proc is not None
    sup.stop()


def test_stop_sends_sigterm_not_sigint():
    out = io.StringIO()
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), sys.exit(0)))\n"
        "signal.signal(signal.SIGINT, lambda *a: (print('got INT', flush=True), sys.exit(1)))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.05)\n"
    )
    sup = Supervisor([ChildSpec("w", _py(code))], out=out)
    sup.start()
    _wait_for(lambda: "| ready" in out.getvalue())
    assert sup.stop() == {"w": 0}
    assert "got TERM" in out.getvalue()


@pytest.mark.django_db
def test_trickle_tick_creates_ready_save_jobs():
    from console.demo import Trickle
    from inbox.models import Job, JobState

    trickle = Trickle(per_tick=3, crash_every=0, seed=1)
    trickle.tick()
    trickle.tick()
    jobs = Job.objects.filter(requested_by="demo-producer")
    assert jobs.count() == 6
    assert set(jobs.values_list("state", flat=True)) == {JobState.READY}


@pytest.mark.django_db
def test_trickle_crash_tick_leaves_a_held_claim_for_the_sweeper():
    from console.demo import PHANTOM_WORKER, Trickle
    from inbox.models import Job, JobState

    trickle = Trickle(per_tick=1, crash_every=1, crash_lease=30, seed=1)
    trickle.tick()
    held = Job.objects.filter(worker_id=PHANTOM_WORKER)
    assert list(held.values_list("state", flat=True)) == [JobState.CLAIMED]
