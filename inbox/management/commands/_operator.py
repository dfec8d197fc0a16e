"""The shape shared by the operator commands (pause, resume, approve, deny, revoke_approval,
create_token, revoke_token): each records one operator action under an actor and a reason, and
a refusal by the inbox (``InboxError``) is the command's error — its message, exit 1, nothing
written — never a traceback. ``ScopeCommand`` is pause and resume (one scope, either way),
``DecisionCommand`` a decision on a DELETE approval by a named user. Also the age argument of
the retention commands.

The arguments are added by the helpers below so that the same option is spelled, typed and
checked the same way in every command that takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError
from django.db import models

from inbox.errors import ConfigurationError, InboxError
from inbox.loop import PeriodicWorker
from inbox.management.commands._common import (
    ConsoleCommand,
    cli_actor,
    column,
    reason,
    user_named,
    username,
)
from inbox.models import ProducerToken, ScopePause
from inbox.retention import parse_duration


class OperatorCommand(ConsoleCommand):
    """A command that performs one operator action (``act``) and prints the line it returns."""

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            line = self.act(options)
        except InboxError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(line)

    def act(self, options: dict[str, Any]) -> str:
        """Do the action; return the line that reports it (a refusal raises ``InboxError``)."""
        raise NotImplementedError


class ScopeCommand(OperatorCommand):
    """Pause or resume SCOPE as ``--as`` (default ``cli:<login>``), with a reason."""

    reason_required: bool
    reason_help: str

    def add_arguments(self, parser) -> None:
        parser.add_argument("scope", type=column(ScopePause, "scope"))
        add_reason(parser, required=self.reason_required, help=self.reason_help)
        add_actor(parser, ScopePause, "changed_by", help="who (default cli:LOGIN)")

    def act(self, options: dict[str, Any]) -> str:
        return self.change(options["scope"], cli_actor(options["actor"]), options["reason"])

    def change(self, scope: str, actor: str, reason: str) -> str:
        """Change the scope's pause; return the line that reports it."""
        raise NotImplementedError


class DecisionCommand(OperatorCommand):
    """A decision on a DELETE approval: TARGET (a column of ``target``), ``--as USERNAME`` (an
    existing user, whose permission the inbox checks) and a required reason."""

    target: tuple[type[models.Model], str]
    user_help: str

    def add_arguments(self, parser) -> None:
        model, field = self.target
        parser.add_argument(field, type=column(model, field))
        add_deciding_user(parser, help=self.user_help)
        add_reason(parser, required=True, help="why (recorded)")

    def act(self, options: dict[str, Any]) -> str:
        user = user_named(options["username"])
        return self.decide(options[self.target[1]], user, options)

    def decide(self, target: str, user: Any, options: dict[str, Any]) -> str:
        """Record the decision on ``target`` as ``user``; return the line that reports it."""
        raise NotImplementedError


def add_producer(parser, *, help: str) -> None:
    """``--producer NAME``: the producer whose API token the command makes or ends."""
    parser.add_argument(
        "--producer", required=True, type=column(ProducerToken, "producer"), help=help
    )


def add_reason(parser, *, required: bool, help: str) -> None:
    """``--reason``: why, recorded with the action (an optional one defaults to "")."""
    if required:
        parser.add_argument("--reason", required=True, type=reason(), help=help)
    else:
        parser.add_argument("--reason", default="", type=reason(), help=help)


def add_actor(
    parser, model: type[models.Model], field: str, *, help: str, default: str | None = None
) -> None:
    """``--as NAME``: the actor recorded (``cli_actor`` falls back to ``cli:<login>`` when
    there is no default); it must fit ``model.field``, where the name is stored."""
    parser.add_argument("--as", dest="actor", default=default, type=column(model, field), help=help)


def add_loop(parser, *, interval: float) -> None:
    """``--loop`` and ``--interval``: run as a worker with a heartbeat, one turn per interval."""
    parser.add_argument("--loop", action="store_true", help="repeat until SIGTERM/SIGINT")
    parser.add_argument(
        "--interval",
        type=float,
        default=interval,
        help=f"seconds between loop turns (default {interval:g})",
    )


def run_loop(kind: str, options: dict[str, Any], body: Callable[[str], str], out: Any) -> None:
    """Run ``body(worker_id)`` every ``--interval`` seconds as a heartbeat worker (``--loop``);
    a bad interval or a configuration no wait mends is a ``CommandError``."""
    try:
        PeriodicWorker(kind=kind, interval=options["interval"], body=body, out=out).run()
    except (ValueError, ConfigurationError) as exc:
        raise CommandError(str(exc)) from exc


def add_deciding_user(parser, *, help: str) -> None:
    """``--as USERNAME``: the existing user whose decision this is (looked up by ``user_named``)."""
    parser.add_argument("--as", dest="username", required=True, type=username(), help=help)


def add_age(parser, flag: str, *, help: str) -> None:
    """A required age (``24h``, ``7d``, ``90m``), kept as typed: the report repeats it."""
    parser.add_argument(flag, required=True, metavar="AGE", help=help)


def age_of(options: dict[str, Any], flag: str) -> timedelta:
    """The age given to ``flag``, or a CommandError that names the flag."""
    try:
        return parse_duration(options[flag.removeprefix("--").replace("-", "_")])
    except ValueError as exc:
        raise CommandError(f"{flag}: {exc}") from exc
