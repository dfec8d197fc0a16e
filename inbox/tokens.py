"""Producer API tokens: make, check and revoke them.

Owns ``ProducerToken`` rows. A token is ``jrc_`` plus 43 URL-safe characters (256 random bits);
only its sha256 is stored, so the database never holds a usable secret and ``create_token``
shows the token once. Each producer has at most one active token (the database enforces it);
the producer's name becomes ``requested_by`` of the jobs it sends. Making and revoking a token
are operator actions recorded in the audit log (never the token itself).

Callers: the ``create_token`` / ``revoke_token`` commands and the API's authentication
(``console.api``).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from audit.events import record_event
from audit.models import EventType
from inbox.errors import InboxError
from inbox.models import ProducerToken

TOKEN_PREFIX = "jrc_"
# Producer names end up in requested_by and audit actors: keep them plain.
PRODUCER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$")
# A bearer value longer than this is not one of ours: refuse it without hashing megabytes.
MAX_TOKEN_LENGTH = 200


@dataclass(frozen=True)
class NewToken:
    """A token just made: the row, and the secret (shown once, never stored)."""

    row: ProducerToken
    token: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _check_producer(producer: str) -> str:
    producer = producer.strip()
    if not PRODUCER_RE.match(producer):
        raise InboxError(
            f"producer name {producer!r} is not allowed: 1 to 200 characters, letters, digits "
            "and . _ : @ - (starting with a letter or digit)"
        )
    return producer


def create_token(*, producer: str, actor: str) -> NewToken:
    """Make the producer's token; refused if it already has an active one (revoke it first)."""
    producer = _check_producer(producer)
    if not actor:
        raise InboxError("making a token needs an actor")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            row = ProducerToken.objects.create(
                producer=producer,
                token_hash=hash_token(token),
                prefix=token[:12],
                created_by=actor,
            )
            record_event(
                event_type=EventType.OPERATOR_ACTION,
                actor=actor,
                detail={"action": "create_token", "producer": producer, "prefix": row.prefix},
            )
    except IntegrityError:
        raise InboxError(
            f"producer {producer!r} already has an active token; revoke it first "
            f"(manage.py revoke_token --producer {producer})"
        ) from None
    return NewToken(row=row, token=token)


def revoke_token(*, producer: str, actor: str, reason: str = "") -> ProducerToken:
    """End the producer's active token; its next request is answered 401."""
    producer = _check_producer(producer)
    if not actor:
        raise InboxError("revoking a token needs an actor")
    with transaction.atomic():
        row = ProducerToken.objects.filter(producer=producer, revoked_at__isnull=True).first()
        # Guarded: a concurrent revoke of the same row changes nothing the second time.
        changed = (
            ProducerToken.objects.filter(pk=row.pk, revoked_at__isnull=True).update(
                revoked_at=Now(), revoked_by=actor
            )
            if row is not None
            else 0
        )
        if not changed:
            raise InboxError(f"producer {producer!r} has no active token")
        record_event(
            event_type=EventType.OPERATOR_ACTION,
            actor=actor,
            detail={
                "action": "revoke_token",
                "producer": producer,
                "prefix": row.prefix,
                "reason": reason,
            },
        )
    row.refresh_from_db()
    return row


def producer_for(token: str) -> str | None:
    """The producer an active token belongs to, or None (unknown, revoked, malformed)."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        return None
    return (
        ProducerToken.objects.filter(token_hash=hash_token(token), revoked_at__isnull=True)
        .values_list("producer", flat=True)
        .first()
    )


def active_tokens() -> list[ProducerToken]:
    return list(ProducerToken.objects.filter(revoked_at__isnull=True).order_by("producer"))
