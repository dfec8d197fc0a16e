"""End a producer's API token (issue 13)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from inbox.errors import InboxError
from inbox.management.commands._common import cli_actor
from inbox.tokens import revoke_token


class Command(BaseCommand):
    help = (
        "Revoke the active API token of a producer: its next request is answered 401. "
        "Recorded in the audit log. Make a new one with create_token."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--producer", required=True, help="the producer's name")
        parser.add_argument("--reason", default="", help="why (recorded in the audit log)")
        parser.add_argument("--as", dest="actor", help="who revokes it (default: cli:<login>)")

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
