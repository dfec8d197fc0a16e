"""Loading (and locking) the rows a run write acts on; the store lock of a plan.

Reads here never write. ``current_run`` and ``deferred_item_refs`` are public through
``runs.transitions``; the rest serve the writer modules.
"""

from __future__ import annotations

import hashlib
import logging

from django.db import connection
from django.db.models import Model, Q, QuerySet

from core.db import locked
from runs.errors import MultipleActiveRuns, RunNotFound
from runs.models import Disposition, GroupStatus, Member, Run, RunStatus

log = logging.getLogger("runs.transitions")


def rows[M: Model](qs: QuerySet[M], *, lock: bool) -> list[M]:
    """The runs' one load(-and-lock) helper (``core.db.locked`` when ``lock``)."""
    return list(locked(qs) if lock else qs)


def active_rows(store: str, *, lock: bool = False) -> list[Run]:
    """The store's ``status = active`` rows; more than one is refused loudly, never acted on."""
    qs = Run.objects.filter(store=store, status=RunStatus.ACTIVE).order_by("run_id")
    found = rows(qs, lock=lock)
    if len(found) > 1:
        ids = [r.run_id for r in found]
        log.critical("store %s has %d active runs %s: refusing to act", store, len(found), ids)
        raise MultipleActiveRuns(store, ids)
    return found


def current_run(store: str) -> Run | None:
    """The store's ``status = active`` row (maybe lapsed), or None. Two rows → refused."""
    found = active_rows(store)
    return found[0] if found else None


def run_id_of(rows: QuerySet, column: str, what: str) -> str:
    """The run id ``column`` of the first of ``rows`` (a group's, a member's), or ``RunNotFound``
    naming ``what``: read before the owner's transaction, which then locks that run."""
    found = rows.values_list(column, flat=True).first()
    if found is None:
        raise RunNotFound(what)
    return found


def load_run(run_id: str, *, lock: bool = False) -> Run:
    """The run ``run_id`` (locked on PostgreSQL with ``lock``), or ``RunNotFound``."""
    found = rows(Run.objects.filter(run_id=run_id), lock=lock)
    if not found:
        raise RunNotFound(f"run {run_id!r}")
    return found[0]


def deferred_item_refs(store: str) -> list[str]:
    """Items the store's latest run put aside (deferred groups, ``defer`` members).

    They return to the next plan: deferring is terminal for the run only, not for the item.
    """
    latest = Run.objects.filter(store=store).order_by("-started_at", "-created_at").first()
    if latest is None:
        return []
    return list(
        Member.objects.filter(group__run_id=latest.run_id)
        .filter(
            Q(group__status=GroupStatus.DEFERRED, disposition__isnull=True)
            | Q(disposition=Disposition.DEFER)
        )
        .order_by("id")
        .values_list("item_ref", flat=True)
    )


def lock_store(store: str) -> None:
    """Serialise plans for one store on PostgreSQL (SQLite's IMMEDIATE already does).

    Without it two plans could both find no active row and race to INSERT; the unique index
    would refuse one, but every planner should instead see its predecessor and close it.
    """
    if connection.vendor != "postgresql":
        return
    key = int.from_bytes(hashlib.sha256(f"runs.store:{store}".encode()).digest()[:8], "big")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key - (1 << 63)])
