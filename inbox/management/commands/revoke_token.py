"""End a producer's API token: its next request is refused (401)."""

from __future__ import annotations

from typing import Any

from audit.models import AuditEvent
from inbox.management.commands._common import cli_actor
from inbox.management.commands._operator import OperatorCommand, add_actor, add_producer, add_reason
from inbox.tokens import revoke_token


class Command(OperatorCommand):
    help = (
        "Revoke the active API token of a producer: its next request is answered 401. "
        "Recorded in the audit log. Make a new one with create_token."
    )

    def add_arguments(self, parser) -> None:
        add_producer(parser, help="the producer's name")
        add_reason(parser, required=False, help="why (recorded in the audit log)")
        add_actor(parser, AuditEvent, "actor", help="who revokes it (default: cli:<login>)")

    def act(self, options: dict[str, Any]) -> str:
        row = revoke_token(
            producer=options["producer"],
            actor=cli_actor(options["actor"]),
            reason=options["reason"],
        )
        return f"revoked token {row.prefix}… of producer {row.producer}"
