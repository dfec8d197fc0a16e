"""Is ``DATABASE_POOLER`` right for the way this process reaches PostgreSQL?

Behind PgBouncer in transaction-pooling mode a client connection has no session of its own:
each transaction may run on another server backend, and a backend is shared by many clients.
Without ``DATABASE_POOLER=pgbouncer`` the project relies on session state there (psycopg's
server-side prepared statements, the timeouts passed as connection options, Django's
server-side cursors), and the first sign is an error that reads like a bug in the code:
``prepared statement "_pg3_0" does not exist`` (or ``already exists``), ``cursor
"_django_curs_…" does not exist``, or PgBouncer refusing the connection with ``unsupported
startup parameter: options``.

- ``transaction_pooled`` (system check ``inbox.E013``) proves a transaction pooler from two
  client connections: each asks for ``pg_backend_pid()`` a few times, alternately. Connected
  directly, or through a session pooler, each keeps one backend of its own for life; only a
  pooler that hands out backends per transaction lets a client's backend change, or two open
  clients meet on one backend (PgBouncer reuses the backend freed last, so on a quiet pool the
  second client gets the first one's at once). ``SHOW pool_mode`` is no test: PgBouncer
  answers it only on its admin console, which the app's role may not reach.
- ``reached_directly`` (``inbox.W014``) tells a direct TCP connection from one through
  anything in between: the server sees the client's own address and port only when nothing
  sits between them. Over a Unix socket it cannot tell, and says so (``None``).
- ``explain_pooler_error`` turns the errors above, met at run time, into a
  ``ConfigurationError`` that names the setting. Callers: every management command
  (``ConsoleCommand.execute``) and the worker loop, where a database error surfaces.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from inbox.errors import ConfigurationError

MISSING = (
    "the database is reached through a transaction pooler (PgBouncer) but DATABASE_POOLER is "
    "not set: set DATABASE_POOLER=pgbouncer"
)
NEEDLESS = (
    "DATABASE_POOLER=pgbouncer but the database is reached directly (no pooler in between): "
    "unset DATABASE_POOLER"
)
# Session state that went missing, by SQLSTATE and the name the driver or Django gave it: one
# of psycopg's prepared statements (26000 invalid SQL statement name, 42P05 duplicate prepared
# statement) or one of Django's server-side cursors (34000 invalid cursor name). Names the
# project never makes (a hand-written PREPARE) are someone else's mistake, not the pooler's.
_LOST_STATEMENT = {"26000", "42P05"}
_PSYCOPG_STATEMENT = 'prepared statement "_pg3_'
_LOST_CURSOR = "34000"
_DJANGO_CURSOR = 'cursor "_django_curs_'
# What PgBouncer says when a client sends startup parameters it does not pass on; without
# DATABASE_POOLER the timeouts travel as the ``options`` parameter.
_REFUSED_STARTUP = "unsupported startup parameter"
# Rounds of the backend-pid test: one is enough on a quiet pool; more ride out other clients
# taking the freed backend in between.
ROUNDS = 3


def explain_pooler_error(exc: BaseException) -> ConfigurationError | None:
    """The ``ConfigurationError`` (one line naming ``DATABASE_POOLER``) that ``exc`` really
    is, when it is what a transaction pooler does to a client relying on session state; None
    for any other error, and always when ``DATABASE_POOLER`` is set (nothing then relies on a
    session, so the same words would mean something else)."""
    if getattr(settings, "DATABASE_POOLER", ""):
        return None
    for error in _chain(exc):
        said = _first_line(error)
        sqlstate = getattr(error, "sqlstate", None)
        lost_statement = sqlstate in _LOST_STATEMENT and _PSYCOPG_STATEMENT in said
        lost_cursor = sqlstate == _LOST_CURSOR and _DJANGO_CURSOR in said
        if lost_statement or lost_cursor or _REFUSED_STARTUP in said:
            return ConfigurationError(f"{MISSING} (the server said: {said})")
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors behind it (Django's error wraps the driver's as its cause)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # psycopg's connection failures read "connection failed: … failed: FATAL:  <reason>".
    text = lines[0] if lines else type(error).__name__
    return " ".join(text.split())


def backend_pid(raw: Any) -> int:
    """The server backend running this statement on the driver connection ``raw``."""
    return int(raw.execute("SELECT pg_backend_pid()").fetchone()[0])


def transaction_pooled(connect: Callable[[], Any], *, rounds: int = ROUNDS) -> bool:
    """Do two client connections from ``connect`` (autocommit driver connections) land on
    server backends the way only transaction pooling places them? See the module docstring."""
    first = connect()
    try:
        second = connect()
        try:
            seen_first: set[int] = set()
            seen_second: set[int] = set()
            for _ in range(rounds):
                seen_first.add(backend_pid(first))
                seen_second.add(backend_pid(second))
                if len(seen_first) > 1 or len(seen_second) > 1 or seen_first & seen_second:
                    return True
            return False
        finally:
            second.close()
    finally:
        first.close()


def reached_directly(raw: Any) -> bool | None:
    """Is the driver connection ``raw`` a direct TCP connection to the server (True), one
    through something in between (False), or can that not be told (None: a Unix socket)?"""
    with socket.socket(fileno=os.dup(raw.pgconn.socket)) as sock:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        local_host, local_port = sock.getsockname()[:2]
    row = raw.execute("SELECT inet_client_addr()::text, inet_client_port()").fetchone()
    if row[0] is None:
        return None
    seen = ipaddress.ip_address(str(row[0]).split("/")[0])
    mine = ipaddress.ip_address(local_host.split("%")[0])
    seen = getattr(seen, "ipv4_mapped", None) or seen
    mine = getattr(mine, "ipv4_mapped", None) or mine
    return seen == mine and int(row[1]) == local_port


def _connector(alias: str) -> Callable[[], Any]:
    """Open autocommit driver connections with exactly the settings ``alias`` connects with
    (its options, prepare threshold, host and port), apart from Django's own connection."""
    wrapper = connections[alias]

    def connect() -> Any:
        with wrapper.wrap_database_errors:
            return wrapper.Database.connect(**wrapper.get_connection_params(), autocommit=True)

    return connect


def missing_pooler_setting(alias: str = DEFAULT_DB_ALIAS) -> str | None:
    """``inbox.E013``'s message when ``alias`` is PostgreSQL behind a transaction pooler while
    ``DATABASE_POOLER`` is not set; None when it is set, or no pooler shows."""
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql" or settings.DATABASE_POOLER:
        return None
    try:
        pooled = transaction_pooled(_connector(alias))
    except Exception as exc:
        explained = explain_pooler_error(exc)
        if explained is None:
            raise
        return str(explained)
    if not pooled:
        return None
    return f"{MISSING} (two client connections were served by one server backend in turn)"


def needless_pooler_setting(alias: str = DEFAULT_DB_ALIAS) -> str | None:
    """``inbox.W014``'s message when ``DATABASE_POOLER=pgbouncer`` but ``alias`` reaches
    PostgreSQL directly over TCP; None otherwise, and when it cannot be told (Unix socket)."""
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql" or settings.DATABASE_POOLER != "pgbouncer":
        return None
    raw = _connector(alias)()
    try:
        direct = reached_directly(raw)
    finally:
        raw.close()
    return NEEDLESS if direct else None
