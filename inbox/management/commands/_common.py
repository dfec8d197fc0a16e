"""Helpers shared by the management commands: the base class every command of the project
derives from (``ConsoleCommand``: checked arguments), typed argument validators, the actor of
a command-line action, user lookup, ``-v`` and logging set-up. Worker loops live in
``inbox.loop``.

Arguments are checked before any database sees them: a NUL byte or bytes that are
not UTF-8 in *any* argument, and text longer than the column it ends up in (``column(...)``,
``text(...)``), are refused with a message that names the argument — never a traceback from
PostgreSQL ("cannot contain NUL") or a silently truncated value.
"""

from __future__ import annotations

import argparse
import getpass
import logging
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, models

from audit.events import REASON_MAX
from inbox.outage import unmendable


def _clean(value: str) -> str:
    """The argument itself, or ArgumentTypeError for text no database can store."""
    if "\x00" in value:
        raise argparse.ArgumentTypeError("contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Command-line bytes that are not UTF-8 arrive as lone surrogates.
        raise argparse.ArgumentTypeError("is not valid UTF-8 text") from None
    return value


def text(max_length: int, *, holds: str = "") -> Callable[[str], str]:
    """argparse ``type=``: text of at most ``max_length`` characters (and no NUL)."""

    def check(value: str) -> str:
        value = _clean(value)
        if len(value) > max_length:
            where = f" {holds}" if holds else ""
            raise argparse.ArgumentTypeError(
                f"is {len(value)} characters long; at most {max_length} fit{where}"
            )
        return value

    check.__name__ = f"text({max_length})"  # argparse names the type in its messages
    return check


def column(model: type[models.Model], field: str) -> Callable[[str], str]:
    """argparse ``type=``: text that fits ``model.field`` (its ``max_length``)."""
    max_length = model._meta.get_field(field).max_length
    return text(max_length, holds=f"in {model._meta.db_table}.{field}")


def reason() -> Callable[[str], str]:
    """argparse ``type=`` for a recorded reason."""
    return text(REASON_MAX, holds="in a recorded reason")


def username() -> Callable[[str], str]:
    """argparse ``type=`` for a user name (looked up, then recorded as the actor)."""
    return column(get_user_model(), get_user_model().USERNAME_FIELD)


def database_busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" or PostgreSQL's lock_timeout (lock_not_available)."""
    if "database is locked" in str(exc) or "database table is locked" in str(exc):
        return True
    return getattr(exc.__cause__, "sqlstate", None) == "55P03"


def _guarded(convert: Callable[[str], Any] | None) -> Callable[[str], Any]:
    def check(value: str) -> Any:
        value = _clean(value)
        return convert(value) if convert is not None else value

    # argparse reports "invalid <name> value" using the type's name; keep the original's.
    check.__name__ = getattr(convert, "__name__", "text")
    return check


class ConsoleCommand(BaseCommand):
    """Base of every management command of the project: each argument (Django's own too) is
    refused if it holds a NUL byte or non-UTF-8 bytes, before ``handle`` runs; a database that
    stays locked past its busy timeout is reported as such (exit 1), not as a traceback, and so
    is what no wait mends (``inbox.outage``, a pooler that needs ``DATABASE_POOLER`` included)."""

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except DatabaseError as exc:
            # What no wait mends (an unmigrated schema, refused credentials, a pooler that
            # needs DATABASE_POOLER) says what to do instead of a traceback, from any command.
            if (fatal := unmendable(exc)) is not None:
                raise CommandError(str(fatal)) from exc
            if not database_busy(exc):
                raise
            raise CommandError(
                f"the database is busy: {exc}. Another process holds the lock this command "
                "needs; nothing was changed. Try again when it is done (on SQLite, a process "
                "frozen while holding the write lock blocks every writer until it ends)."
            ) from exc

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        for action in parser._actions:
            if action.nargs != 0:  # flags (store_true, help, version) take no value
                action.type = _guarded(action.type)
        return parser


# The system checks a worker command runs before it starts (``requires_system_checks``): the
# models', the compatibility and the runs settings' (``runs.checks``). A worker serves no URL,
# view, template or admin page, and Django's full check imports the whole console to check them
# (its URL conf, views, tables and API: about 0.1 s of CPU, most of a worker's start-up after
# Django's own) at every start of every executor. The web server, ``manage.py check`` and CI
# check those; the worker's loop then runs the checks that concern it, with the database
# (``inbox.checks.require_worker_checks``).
WORKER_SYSTEM_CHECKS = [Tags.models, Tags.compatibility, "runs"]


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
