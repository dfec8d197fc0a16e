"""Make a producer's API token and print it once (issue 13)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from inbox.errors import InboxError
from inbox.management.commands._common import cli_actor
from inbox.tokens import create_token


class Command(BaseCommand):
    help = (
        "Make the API token of a producer (one active token per producer) and print it on the "
        "last line, once: only its sha256 is stored, so it cannot be shown again. The producer "
        "sends it as 'Authorization: Bearer <token>' to /api/v1/; its name becomes requested_by "
        "of the jobs it sends. Recorded in the audit log (without the token)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--producer", required=True, help="the producer's name (letters, digits, . _ : @ -)"
        )
        parser.add_argument("--as", dest="actor", help="who makes it (default: cli:<login>)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            made = create_token(producer=options["producer"], actor=cli_actor(options["actor"]))
        except InboxError as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(
            f"token {made.row.prefix}… made for producer {made.row.producer}; it is shown once, "
            "on the next line: keep it now."
        )
        self.stdout.write(made.token)
