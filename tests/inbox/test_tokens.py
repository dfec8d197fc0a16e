"""Producer API tokens: one active per producer, stored hashed, shown once."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction

from audit.models import AuditEvent, EventType
from inbox import tokens
from inbox.errors import InboxError
from inbox.models import ProducerToken

pytestmark = pytest.mark.django_db


def test_create_token_stores_only_its_hash_and_finds_the_producer() -> None:
    made = tokens.create_token(producer="acme", actor="ops")
    assert made.token.startswith("jrc_") and len(made.token) > 40
    row = ProducerToken.objects.get()
    assert row.token_hash == tokens.hash_token(made.token)
    assert made.token not in {row.token_hash, row.prefix}
    assert made.token.startswith(row.prefix)
    assert tokens.producer_for(made.token) == "acme"
    assert tokens.producer_for(made.token + "x") is None
    assert tokens.producer_for("") is None


def test_create_token_twice_for_one_producer_is_refused_until_revoked() -> None:
    first = tokens.create_token(producer="acme", actor="ops")
    with pytest.raises(InboxError, match="already has an active token"):
        tokens.create_token(producer="acme", actor="ops")
    tokens.revoke_token(producer="acme", actor="ops", reason="rotated")
    assert tokens.producer_for(first.token) is None
    second = tokens.create_token(producer="acme", actor="ops")
    assert tokens.producer_for(second.token) == "acme"
    assert ProducerToken.objects.count() == 2


def test_two_active_tokens_for_one_producer_are_refused_by_the_database() -> None:
    ProducerToken.objects.create(producer="acme", token_hash="a" * 64, prefix="x", created_by="t")
    with pytest.raises(IntegrityError), transaction.atomic():
        ProducerToken.objects.create(
            producer="acme", token_hash="b" * 64, prefix="y", created_by="t"
        )


def test_revoke_without_active_token_is_refused() -> None:
    with pytest.raises(InboxError, match="no active token"):
        tokens.revoke_token(producer="nobody", actor="ops")


@pytest.mark.parametrize("name", ["", " ", "a b", "-lead", "x" * 201, "semi;colon", "é"])
def test_create_token_with_bad_producer_name_is_refused(name: str) -> None:
    with pytest.raises(InboxError, match="not allowed"):
        tokens.create_token(producer=name, actor="ops")
    assert not ProducerToken.objects.exists()


def test_token_actions_are_audited_without_the_token() -> None:
    made = tokens.create_token(producer="acme", actor="ops")
    tokens.revoke_token(producer="acme", actor="sec", reason="leaked")
    events = list(AuditEvent.objects.filter(event_type=EventType.OPERATOR_ACTION))
    assert [(e.actor, e.detail["action"]) for e in events] == [
        ("sec", "revoke_token"),
        ("ops", "create_token"),
    ]
    assert all(made.token not in str(e.detail) for e in events)
    assert events[0].detail["reason"] == "leaked"


def test_create_token_command_prints_the_token_on_its_last_line() -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_token", "--producer", "acme", "--as", "ops", stdout=out, stderr=err)
    token = out.getvalue().strip().splitlines()[-1]
    assert tokens.producer_for(token) == "acme"
    assert "shown once" in err.getvalue()
    with pytest.raises(CommandError, match="already has an active token"):
        call_command("create_token", "--producer", "acme", stdout=out, stderr=err)
    call_command("revoke_token", "--producer", "acme", "--reason", "r", stdout=out)
    assert "revoked token" in out.getvalue()
    assert tokens.producer_for(token) is None
    with pytest.raises(CommandError, match="no active token"):
        call_command("revoke_token", "--producer", "acme", stdout=out)
