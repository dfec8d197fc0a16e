"""The demo's process supervisor and its trickle producer (``manage.py demo``).

``Supervisor`` starts every demo process (web server, executors, sweeper, auto-reconciler,
consolidator) in its own session, so a Ctrl-C in the terminal reaches only the supervisor; it
then sends SIGTERM to each child, waits, kills what is left and reports every exit status.
Children's output is interleaved on the demo's stdout with a ``name |`` prefix.

Why not a Procfile under honcho: the demo needs what a Procfile cannot say — the URL banner
only once ``/healthz`` answers, a busy port refused before anything starts, the reconciler
started one interval late (so a newcomer sees OUTCOME_UNKNOWN first), the trickle producer in
this process, and the demo ending (every child stopped, its status reported) when the web
process dies rather than when any child does. That is less code here than around honcho.

``Trickle`` keeps the demo moving: every few seconds it asks for a few SAVE jobs (some with
content another object already has, so the consolidator finds duplicates) and now and then
plays a crashed worker — it claims one fresh job under a short lease and walks away, so the
newcomer sees a lease count down and the sweeper hand the job back. It writes only through
``inbox.transitions``. Only ``console.management.commands.demo`` calls this module.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from django.conf import settings

from inbox import transitions
from inbox.errors import InboxError
from inbox.jobtypes import sha256_hex

MANAGE = str(settings.BASE_DIR / "manage.py")


@dataclass
class ChildSpec:
    """One demo process. ``every`` makes it periodic: it is started again ``every`` seconds
    after it exits (for commands that do one pass and have no loop of their own)."""

    name: str
    argv: Sequence[str]
    every: float | None = None
    # Seconds after the demo starts before the child first starts.
    delay: float = 0.0
    # If this child dies, the demo is over (the web server): stop everything.
    essential: bool = False


@dataclass
class _Child:
    spec: ChildSpec
    proc: subprocess.Popen | None = None
    next_start: float = 0.0
    returncodes: list[int] = field(default_factory=list)
    reader: threading.Thread | None = None
    reported: bool = False
    started: bool = False


def manage(*args: str) -> list[str]:
    """The argv of ``manage.py <args>`` with this interpreter."""
    return [sys.executable, MANAGE, *args]


class Supervisor:
    """Start, watch and stop a set of child processes."""

    def __init__(
        self,
        specs: Sequence[ChildSpec],
        *,
        env: Mapping[str, str] | None = None,
        out: TextIO | None = None,
        stop_timeout: float = 15.0,
    ) -> None:
        self.children = [_Child(spec) for spec in specs]
        self.env = dict(env if env is not None else os.environ)
        self.out = out or sys.stdout
        self.stop_timeout = stop_timeout
        self._lock = threading.Lock()
        self.width = max((len(s.name) for s in specs), default=4)

    # --- output ------------------------------------------------------------------------------

    def say(self, name: str, line: str) -> None:
        # A closed terminal must not keep the supervisor from stopping its children.
        with self._lock, contextlib.suppress(OSError, ValueError):
            self.out.write(f"{name:>{self.width}} | {line.rstrip()}\n")
            self.out.flush()

    def _pump(self, child: _Child, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                self.say(child.spec.name, line)

    # --- lifecycle ---------------------------------------------------------------------------

    def _start(self, child: _Child) -> None:
        proc = subprocess.Popen(
            list(child.spec.argv),
            env=self.env,
            cwd=settings.BASE_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            # A session of its own: the terminal's Ctrl-C goes to the supervisor only, which
            # then stops each child in order and can report how each one ended.
            start_new_session=True,
        )
        child.proc = proc
        child.started = True
        child.reported = False
        child.reader = threading.Thread(target=self._pump, args=(child, proc), daemon=True)
        child.reader.start()

    def start(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.spec.delay > 0:
                child.next_start = now + child.spec.delay
                self.say(child.spec.name, f"starts in {child.spec.delay:g} s")
                continue
            self._start(child)
            self.say(child.spec.name, f"started (pid {child.proc.pid})")

    def poll(self, now: float | None = None) -> str | None:
        """Restart periodic children that are due; report unexpected exits.

        Returns the name of an essential child that died (the demo must stop), else None.
        """
        now = time.monotonic() if now is None else now
        for child in self.children:
            proc = child.proc
            if proc is not None and proc.poll() is not None:
                if child.reader is not None:
                    child.reader.join(timeout=2)
                child.returncodes.append(proc.returncode)
                child.proc = None
                if child.spec.every is not None:
                    if proc.returncode != 0:
                        self.say(child.spec.name, f"pass exited {proc.returncode}")
                    child.next_start = now + child.spec.every
                else:
                    self.say(child.spec.name, f"exited unexpectedly with {proc.returncode}")
                    if child.spec.essential:
                        return child.spec.name
            due = child.spec.every is not None or not child.started
            if child.proc is None and due and now >= child.next_start:
                self._start(child)
        return None

    def stop(self) -> dict[str, int | None]:
        """SIGTERM every running child, wait up to ``stop_timeout``, SIGKILL what is left.

        Returns each child's last exit status (None if it had to be killed).
        """
        running = [c for c in self.children if c.proc is not None and c.proc.poll() is None]
        for child in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        statuses: dict[str, int | None] = {}
        try:
            for child in self.children:
                proc = child.proc
                if proc is None:
                    statuses[child.spec.name] = child.returncodes[-1] if child.returncodes else 0
                    continue
                try:
                    proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
                    statuses[child.spec.name] = proc.returncode
                except subprocess.TimeoutExpired:
                    self._kill(child)
                    statuses[child.spec.name] = None
        except KeyboardInterrupt:
            # Asked again while waiting: no more patience, kill whatever still runs.
            for child in self.children:
                if child.spec.name in statuses:
                    continue
                if child.proc is None:
                    statuses[child.spec.name] = child.returncodes[-1] if child.returncodes else 0
                else:
                    exited = self._kill(child)
                    statuses[child.spec.name] = child.proc.returncode if exited else None
        for child in self.children:
            if child.reader is not None:
                child.reader.join(timeout=2)
        return statuses

    @staticmethod
    def _kill(child: _Child) -> bool:
        """SIGKILL the child's process group; True if it had exited by itself already."""
        proc = child.proc
        if proc is None or proc.poll() is not None:
            return True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False

    def run(
        self,
        *,
        tick: Callable[[], None] | None = None,
        tick_every: float = 5.0,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> str | None:
        """Start everything and supervise until Ctrl-C (KeyboardInterrupt), SIGTERM or
        ``should_stop``; ``tick`` runs every ``tick_every`` seconds in this process.

        Returns the name of an essential child that died, if that is why it stopped.
        """
        self.start()
        next_tick = time.monotonic() + 1.0
        died: str | None = None
        try:
            while not should_stop():
                died = self.poll()
                if died:
                    break
                if tick is not None and time.monotonic() >= next_tick:
                    try:
                        tick()
                    except Exception as exc:  # the trickle must never take the demo down
                        self.say("demo", f"trickle error: {exc}")
                    next_tick = time.monotonic() + tick_every
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        return died


# --- the trickle producer ---------------------------------------------------------------------

# A small, fixed vocabulary: repeated bodies give the consolidator duplicates to find.
_BODIES = (
    "# Meeting notes\n\nShip the console on Friday.\n",
    "# Checklist\n\n- backups\n- alerts\n- on-call\n",
    "# Runbook\n\nRestart the executor, then check the audit log.\n",
)

PHANTOM_WORKER = "demo-crashed-worker"


class Trickle:
    """Enqueue a few SAVE jobs per tick; now and then abandon a claim like a crashed worker."""

    def __init__(
        self,
        *,
        per_tick: int = 3,
        crash_every: int = 4,
        crash_lease: int = 25,
        say: Callable[[str], None] = lambda line: None,
        seed: int | None = None,
    ) -> None:
        self.per_tick = per_tick
        self.crash_every = crash_every
        self.crash_lease = crash_lease
        self.say = say
        self.rng = random.Random(seed)
        self.ticks = itertools.count(1)
        # Unique per demo start, so a restarted demo never replays an older batch.
        self.batch = uuid.uuid4().hex[:6]
        self.created = 0

    def _doc(self, n: int) -> dict:
        # Now and then a body another object already has: work for the consolidator (each
        # duplicate becomes a DELETE awaiting approval, so not too often).
        duplicate = self.rng.random() < 0.2
        body = (
            self.rng.choice(_BODIES)
            if duplicate
            else f"# Trickle note {self.batch}-{n}\n\nWritten by the demo producer.\n"
        )
        object_id = f"trickle-{self.batch}-{n}"
        return {
            "job_id": f"demo-{self.batch}-{n}",
            "job_version": 1,
            "mission_id": f"demo-trickle-{self.batch}",
            "job_type": "SAVE_OBJECT",
            "object_id": object_id,
            "vault_path": f"trickle/{object_id}.md",
            "idempotency_key": f"save:{object_id}:1",
            "content": body,
            "provenance_hash": sha256_hex(body),
            "source_commit": "demo",
        }

    def tick(self) -> None:
        tick = next(self.ticks)
        made = []
        for _ in range(self.per_tick):
            self.created += 1
            job, _ = transitions.create_job(self._doc(self.created), requested_by="demo-producer")
            made.append(job.job_id)
        self.say(f"enqueued {len(made)} SAVE jobs ({self.created} so far)")
        if self.crash_every and tick % self.crash_every == 0:
            self._abandon_claim()

    def _abandon_claim(self) -> None:
        """Claim one fresh job and never finish it: the sweeper must recover it."""
        self.created += 1
        job, _ = transitions.create_job(self._doc(self.created), requested_by="demo-producer")
        try:
            transitions.claim_job(
                job.job_id, worker_id=PHANTOM_WORKER, lease_seconds=self.crash_lease
            )
        except InboxError:
            return  # a real executor was quicker; fine
        self.say(
            f"{PHANTOM_WORKER} claimed {job.job_id} for {self.crash_lease}s and crashed; "
            "watch the sweeper hand it back"
        )
