"""Make a producer's API token and print it once (only its sha256 is stored)."""

from __future__ import annotations

from typing import Any

from audit.models import AuditEvent
from inbox.management.commands._common import cli_actor
from inbox.management.commands._operator import OperatorCommand, add_actor, add_producer
from inbox.tokens import create_token


class Command(OperatorCommand):
    help = (
        "Make the API token of a producer (one active token per producer) and print it on the "
        "last line, once: only its sha256 is stored, so it cannot be shown again. The producer "
        "sends it as 'Authorization: Bearer <token>' to /api/v1/; its name becomes requested_by "
        "of the jobs it sends. Recorded in the audit log (without the token)."
    )

    def add_arguments(self, parser) -> None:
        add_producer(parser, help="the producer's name (letters, digits, . _ : @ -)")
        add_actor(parser, AuditEvent, "actor", help="who makes it (default: cli:<login>)")

    def act(self, options: dict[str, Any]) -> str:
        """The token itself is the line printed (on stdout, alone, for a script to read)."""
        made = create_token(producer=options["producer"], actor=cli_actor(options["actor"]))
        self.stderr.write(
            f"token {made.row.prefix}… made for producer {made.row.producer}; it is shown once, "
            "on the next line: keep it now."
        )
        return made.token
