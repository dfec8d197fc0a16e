"""Helpers shared by the management commands: the actor of a command-line action, user
lookup, ``-v`` and logging set-up. Worker loops live in ``inbox.loop``."""

from __future__ import annotations

import getpass
import logging

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
