"""Row locks for writes, the project's one load-and-lock helper.

PostgreSQL takes ``FOR UPDATE`` row locks; SQLite has none (``select_for_update`` is a no-op
there) and relies on its IMMEDIATE transactions, which hold the database's write lock from the
first statement. Either way the guarded UPDATE that follows re-checks every condition.
"""

from __future__ import annotations

from django.db import connection
from django.db.models import Model, QuerySet


def locked[M: Model](qs: QuerySet[M], *, skip_locked: bool = False) -> QuerySet[M]:
    """``qs`` locking its rows until the end of the transaction (PostgreSQL); with
    ``skip_locked``, rows another transaction holds right now are left out instead of waited on."""
    if connection.vendor == "postgresql":
        return qs.select_for_update(skip_locked=skip_locked)
    return qs
