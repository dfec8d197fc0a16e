"""The one worker loop every long-running worker shares: one id scheme, heartbeats, signals.

``WorkerLoop`` owns what a worker process does around its work: one worker-id scheme
(``inbox.workers.new_worker_id``), the heartbeat row (registered at start, beaten at most every
poll interval, marked stopped on the way out), SIGTERM/SIGINT (a flag: the work in hand
finishes; installed first, so a stop also ends a wait for the database at start-up), progress
lines, and database outages (``inbox.outage``: the start-up and every turn are retried with
capped, jittered backoff, one line per retry and one when the database is back; an error no wait
mends, such as refused credentials or an unmigrated schema, ends the worker with a
``ConfigurationError`` that says what to do).
``close_old_connections`` runs every turn (at most once a poll interval, see
``_refresh_connection``), so a kept connection survives a restarted database.

A worker subclasses it and fills in ``setup`` (check the configuration, describe the worker),
``turn`` (one unit of work; False ends the loop) and, when it holds something, ``finish``
(hand it back). The executor (``inbox.executor``), the consolidator (``runs.worker``), the
sweeper and the auto-reconciler (``PeriodicWorker``, from ``recover_stale --loop`` and
``reconcile --loop``) are the subclasses.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from core import logs
from inbox import workers
from inbox.checks import require_worker_checks
from inbox.outage import DB_ERRORS, Outage, require_migrated

log = logging.getLogger("inbox.loop")


class WorkerLoop:
    """A heartbeat-registered worker process's loop; see the module docstring."""

    kind: ClassVar[str] = "worker"

    def __init__(
        self,
        *,
        worker_id: str | None = None,
        scope: str = "",
        store: str = "",
        poll_seconds: float = 1.0,
        lease_seconds: int = 60,
        progress_seconds: float = 10.0,
        out: Callable[[str], None] = print,
    ) -> None:
        if progress_seconds <= 0:
            raise ValueError(f"progress lines need a positive interval, got {progress_seconds}")
        self.scope = scope
        self.store = store
        self.worker_id = worker_id or workers.new_worker_id(self.kind, scope or store)
        self.poll = poll_seconds
        self.lease_seconds = lease_seconds
        self.progress_seconds = progress_seconds
        # JSON logs: progress lines become log records in LOG_FORMAT=json.
        self.out = logs.worker_out(out)
        self.db_errors = 0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._stop_reason = ""
        self.outage = Outage(self.worker_id)
        self._registered = False
        self._last_beat = 0.0
        self._last_refresh = 0.0
        self._last_progress = time.monotonic()

    # --- what a worker fills in -------------------------------------------------------------

    def setup(self) -> str:
        """Check the configuration (raise ``ConfigurationError``); describe the worker."""
        return ""

    def turn(self) -> bool:
        """One unit of work; False when the loop should end."""
        raise NotImplementedError

    def finish(self) -> None:
        """Hand back what the worker holds; runs once, on every way out of the loop."""

    def progress_line(self) -> str:
        """The progress line's text (empty: print nothing)."""
        return ""

    def counters(self) -> tuple[int | None, int | None]:
        """(done, failed) for the heartbeat row."""
        return None, None

    def summary(self) -> str:
        return f"{self.kind} {self.worker_id} stopped" + self._reason_suffix()

    def current(self) -> str:
        """The job or item in hand, for the heartbeat row."""
        return ""

    # --- control ----------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def stop_reason(self) -> str:
        return self._stop_reason

    def stop(self, reason: str = "asked to stop") -> None:
        """Stop after the work in hand; safe from any thread."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` (a stop ends the wait), beating on long waits."""
        deadline = time.monotonic() + seconds
        while not self.stopping and (left := deadline - time.monotonic()) > 0:
            self._stop.wait(min(left, max(self.poll, 1.0)))
            if time.monotonic() < deadline:
                close_old_connections()
                with contextlib.suppress(*DB_ERRORS):
                    self.beat(force=True)

    def say(self, text: str) -> None:
        self.out(f"[{self.worker_id}] {text}")

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> Any:
        """Run until ``turn`` says so or a stop signal; always hand back and mark stopped.

        The system checks a worker needs run first (``inbox.checks``), and the migrations: a
        misconfiguration is a ``ConfigurationError`` before anything is registered or claimed.
        """
        # JSON logs: every record of this process carries the worker id.
        logs.bind_process(worker_id=self.worker_id)
        previous = self._install_signals()
        try:
            description = self._start()
            if description is None:  # stopped while the database was away
                self.out(self.summary())
                return self.result()
            self.out(f"{self.kind} {self.worker_id}" + (f": {description}" if description else ""))
            self._warn_if_lease_within_idle_timeout()
            self._loop()
        finally:
            try:
                self._hand_back()
            finally:
                self._restore_signals(previous)
        self.out(self.summary())
        return self.result()

    def _start(self) -> str | None:
        """The checks, ``setup`` and the heartbeat row, tried again for as long as the database
        stays away; None when a stop came first. ``setup`` runs once (it may start threads)."""
        description: str | None = None
        while not self.stopping:
            try:
                require_worker_checks()
                require_migrated()
                if description is None:
                    description = self.setup()
                self._register()
                self.outage.ended()
                return description
            except DatabaseError as exc:
                delay = self.outage.failed(exc, doing="starting")
                self.drop_connection()
                self._stop.wait(delay)
        return None

    def _loop(self) -> None:
        while not self.stopping:
            self._refresh_connection()
            try:
                self.beat()
                if not self.turn():
                    break
                self.outage.ended()
            except DatabaseError as exc:
                self.db_errors += 1
                delay = self.outage.failed(exc, doing="working")
                self.drop_connection()
                self.on_db_error()
                self._stop.wait(delay)
            self.maybe_progress()

    def _hand_back(self) -> None:
        if not self._registered:
            return
        try:
            self.finish()
            done, failed = self.counters()
            workers.mark_stopped(worker_id=self.worker_id, jobs_done=done, jobs_failed=failed)
        except DB_ERRORS as exc:
            log.error("%s: could not hand back or mark the worker stopped: %s", self.worker_id, exc)
            self.drop_connection()

    def result(self) -> Any:
        return None

    def _refresh_connection(self) -> None:
        """``close_old_connections`` at most once a poll interval (and at least once a second):
        it re-arms Django's health check, a ``SELECT 1`` round trip before the next query,
        which a busy executor would otherwise pay every turn. A connection that died between
        checks surfaces as a database error, which the loop already survives."""
        now = time.monotonic()
        if now - self._last_refresh >= min(max(self.poll, 0.1), 1.0):
            close_old_connections()
            self._last_refresh = now

    def _warn_if_lease_within_idle_timeout(self) -> None:
        """Say so when the server would end a frozen transaction only after the lease lapsed:
        the sweep then finds the job's row locked (busy) until the server frees it."""
        idle_ms = settings.DB_IDLE_IN_TRANSACTION_TIMEOUT_MS
        lease = self.lease_seconds or 0
        if connection.vendor == "postgresql" and idle_ms and 0 < lease * 1000 <= idle_ms:
            log.warning(
                "%s: lease %ss is not longer than the server's idle-in-transaction timeout "
                "(%gs, DB_IDLE_IN_TRANSACTION_TIMEOUT_MS): a frozen worker's rows stay locked "
                "past its lease until the server ends it",
                self.worker_id,
                lease,
                idle_ms / 1000,
            )

    def _register(self) -> None:
        """Write the heartbeat row (``_start`` retries it while the database is away)."""
        workers.register_worker(
            worker_id=self.worker_id,
            kind=self.kind,
            scope=self.scope,
            store=self.store,
            poll_seconds=self.poll,
            lease_seconds=self.lease_seconds,
        )
        self._registered = True

    def on_db_error(self) -> None:
        """Called after a turn a database error cut short (the worker may have lost track)."""

    def beat(self, *, force: bool = False, status: str | None = None) -> None:
        """Heartbeat at most every poll interval (never per job)."""
        now = time.monotonic()
        if not force and status is None and now - self._last_beat < self.poll:
            return
        self._last_beat = now
        done, failed = self.counters()
        workers.beat(
            worker_id=self.worker_id,
            current_job_id=self.current(),
            jobs_done=done,
            jobs_failed=failed,
            status=status,
        )

    def maybe_progress(self) -> None:
        now = time.monotonic()
        if now - self._last_progress < self.progress_seconds:
            return
        text = self.progress_line()
        if text:
            self.say(text)
        self._last_progress = now

    def drop_connection(self) -> None:
        with contextlib.suppress(*DB_ERRORS):
            connection.close()

    def _reason_suffix(self) -> str:
        return f"; reason: {self._stop_reason}" if self._stop_reason else ""

    # --- signals ----------------------------------------------------------------------------

    def stopping_note(self) -> str:
        """What a stop signal makes the worker do, said once when it arrives."""
        return "stopping after the work in hand"

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Only a flag and one raw write: logging or print() from a signal handler can re-enter
        # a buffered stream the main thread is writing to.
        name = signal.Signals(signum).name
        if self.stopping:
            raw_stderr(f"{name} again: already stopping")
            return
        raw_stderr(f"{name}: {self.stopping_note()}")
        self.stop(f"received {name}")

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)
        return previous

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def raw_stderr(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, logs.raw_line(text))


class PeriodicWorker(WorkerLoop):
    """Run ``body(worker_id)`` every ``interval`` seconds: the sweeper and the auto-reconciler.

    ``body`` returns a line to print when something changed (empty when nothing did), so a
    quiet pass prints nothing.
    """

    def __init__(
        self,
        *,
        kind: str,
        interval: float,
        body: Callable[[str], str],
        out: Callable[[str], None] = print,
        worker_id: str | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"--interval must be positive, got {interval}")
        self.kind = kind  # type: ignore[misc]
        self.interval = interval
        self.body = body
        self.passes = 0
        super().__init__(
            worker_id=worker_id,
            poll_seconds=interval,
            lease_seconds=int(interval) + 1,
            out=out,
        )

    def setup(self) -> str:
        return f"every {self.interval}s until SIGTERM/SIGINT"

    def turn(self) -> bool:
        said = self.body(self.worker_id)
        self.passes += 1
        if said:
            self.out(said)
        self.wait(self.interval)
        return True

    def summary(self) -> str:
        return f"{self.kind} {self.worker_id} stopped after {self.passes} pass(es)" + (
            self._reason_suffix()
        )
