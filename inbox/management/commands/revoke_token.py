"""End a producer's API token: its next request is refused (401)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from audit.models import AuditEvent
from inbox.errors import InboxError
from inbox.management.commands._common import ConsoleCommand, cli_actor, column, reason
from inbox.models import ProducerToken
from inbox.tokens import revoke_token


class Command(ConsoleCommand):
    help = (
        "Revoke the active API token of a producer: its next request is answered 401. "
        "Recorded in the audit log. Make a new one with create_token."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--producer",
            required=True,
            type=column(ProducerToken, "producer"),
            help="the producer's name",
        )
        parser.add_argument(
            "--reason", default="", type=reason(), help="why (recorded in the audit log)"
        )
        parser.add_argument(
            "--as",
            dest="actor",
            type=column(AuditEvent, "actor"),
            help="who revokes it (default: cli:<login>)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            row = revoke_token(
                producer=options["producer"],
                actor=cli_actor(options["actor"]),
                reason=options["reason"],
            )
        except InboxError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"revoked token {row.prefix}… of producer {row.producer}")
