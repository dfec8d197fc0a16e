"""Resume a paused executor scope."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from inbox.errors import InboxError
from inbox.management.commands._common import ConsoleCommand, cli_actor, column, reason
from inbox.models import ScopePause
from inbox.scopes import resume_scope


class Command(ConsoleCommand):
    help = "Resume SCOPE: executors claim in it again. Recorded as an operator action."

    def add_arguments(self, parser) -> None:
        parser.add_argument("scope", type=column(ScopePause, "scope"))
        parser.add_argument("--reason", default="", type=reason(), help="why (recorded; optional)")
        parser.add_argument(
            "--as",
            dest="actor",
            default=None,
            type=column(ScopePause, "changed_by"),
            help="who (default cli:LOGIN)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        actor = cli_actor(options["actor"])
        try:
            resume_scope(options["scope"], actor=actor, reason=options["reason"])
        except InboxError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"scope {options['scope']} resumed by {actor}")
