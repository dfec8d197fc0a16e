"""Make a producer's API token and print it once (only its sha256 is stored)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from audit.models import AuditEvent
from inbox.errors import InboxError
from inbox.management.commands._common import ConsoleCommand, cli_actor, column
from inbox.models import ProducerToken
from inbox.tokens import create_token


class Command(ConsoleCommand):
    help = (
        "Make the API token of a producer (one active token per producer) and print it on the "
        "last line, once: only its sha256 is stored, so it cannot be shown again. The producer "
        "sends it as 'Authorization: Bearer <token>' to /api/v1/; its name becomes requested_by "
        "of the jobs it sends. Recorded in the audit log (without the token)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--producer",
            required=True,
            type=column(ProducerToken, "producer"),
            help="the producer's name (letters, digits, . _ : @ -)",
        )
        parser.add_argument(
            "--as",
            dest="actor",
            type=column(AuditEvent, "actor"),
            help="who makes it (default: cli:<login>)",
        )

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
