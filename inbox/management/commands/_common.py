"""Helpers shared by the inbox's management commands (argument parsing only)."""

from __future__ import annotations

import contextlib
import getpass
import logging
import os

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError


def cli_actor(name: str | None) -> str:
    """The actor recorded for a command-line action: ``--as NAME`` or ``cli:<login>``."""
    if name:
        return name
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def user_named(username: str):
    """The active user ``username`` or a CommandError that says so."""
    user = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: username}).first()
    if user is None:
        raise CommandError(f"no user named {username!r}")
    return user


def allow_bare_verbose(parser) -> None:
    """Let ``-v`` alone mean ``-v 2`` (Django's -v otherwise needs a level)."""
    for action in parser._actions:
        if action.dest == "verbosity":
            action.nargs = "?"
            action.const = 2


def setup_logging(verbosity: int) -> None:
    level = logging.DEBUG if verbosity >= 2 else logging.INFO if verbosity >= 1 else logging.WARNING
    logging.getLogger("inbox").setLevel(level)


def run_loop(*, kind: str, interval: float, body, say) -> None:
    """Run ``body()`` every ``interval`` s as a heartbeat-registered worker until SIGTERM/SIGINT.

    Calls ``close_old_connections()`` every turn and survives a dropped database connection
    (logged; the next turn reconnects).
    """
    import signal
    import threading

    from django.db import InterfaceError, OperationalError, close_old_connections, connection

    from inbox import workers

    if interval <= 0:
        raise CommandError(f"--interval must be positive, got {interval}")
    stop = threading.Event()
    worker_id = workers.new_worker_id(kind)

    def on_signal(signum, _frame) -> None:
        # A raw write: buffered streams must not be re-entered from a signal handler.
        with contextlib.suppress(OSError):
            os.write(2, f"{signal.Signals(signum).name}: stopping after this turn\n".encode())
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    workers.register_worker(
        worker_id=worker_id, kind=kind, poll_seconds=interval, lease_seconds=int(interval) + 1
    )
    say(f"{kind} {worker_id}: every {interval}s until SIGTERM/SIGINT")
    log = logging.getLogger(f"inbox.{kind}")
    try:
        while not stop.is_set():
            close_old_connections()
            try:
                workers.beat(worker_id=worker_id)
                body(worker_id)
            except (OperationalError, InterfaceError) as exc:
                log.error("database error; reconnecting on the next turn: %s", exc)
                connection.close()
            stop.wait(interval)
        try:
            workers.mark_stopped(worker_id=worker_id)
        except (OperationalError, InterfaceError):
            connection.close()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
