"""The guard every run write passes: one guarded UPDATE, and the owner's write scope.

``write`` is the one UPDATE of a run, group or member row: its queryset carries every guard (the
allowed from-status and, for an owner's write, "the caller's run is effectively active"), and
anything but the expected row count is refused with nothing written. An owner's write runs
inside ``as_owner``, which locks the run, checks that the caller holds it effectively and, if
not, records the rejection once (RUN_REJECTED_WRITE, in its own transaction, like the inbox's
stale writes) and raises ``GroupExpired``; no run, group or member row changes.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from audit.events import Event, record_events
from core.clock import db_now
from core.db import bounded
from runs.errors import GroupExpired, InvalidRunTransition
from runs.models import Run, RunStatus
from runs.writer import events
from runs.writer.rows import load_run

# Logged under the public face's name: one logger for every run transition.
log = logging.getLogger("runs.transitions")


def write(
    qs: QuerySet,
    values: dict[str, Any],
    *,
    what: str,
    frm: str | None,
    to: str,
    why: str = "lost a race",
    event: Event | Callable[[], Event] | None = None,
    exactly_one: bool = True,
) -> int:
    """The one guarded UPDATE of a run, group or member row: ``qs`` carries every guard.

    With ``exactly_one`` anything but one changed row is refused (``InvalidRunTransition``,
    nothing written); otherwise 0 changed rows is a no-op (a run that is already complete).
    ``event`` (or what it builds, read after the write) is recorded only when a row changed.
    """
    changed = qs.update(**values)
    if exactly_one and changed != 1:
        raise InvalidRunTransition(what, frm, to, why)
    if changed and event is not None:
        record_events([event() if callable(event) else event])
    return changed


@contextmanager
def as_owner(
    run_id: str, *, owner: str, what: str, detail: dict[str, Any], at: dt.datetime | None
) -> Iterator[tuple[Run, dt.datetime]]:
    """One transaction in which ``owner`` writes to its run: yields (the locked run, now).

    A caller that does not hold the run effectively gets ``GroupExpired`` and a
    RUN_REJECTED_WRITE event with ``detail``, recorded once here for every owner write.
    """
    rejected: GroupExpired | None = None
    try:
        with bounded(f"run {run_id!r}"), transaction.atomic():
            run = load_run(run_id, lock=True)
            now = db_now(at)
            try:
                writable_or_reject(run, owner, now, what)
            except GroupExpired as exc:
                rejected = exc
                raise
            yield run, now
    except GroupExpired as exc:
        if exc is rejected:
            _record_rejection(exc, detail=detail, at=at)
        raise


def writable_or_reject(run: Run, caller: str, now: dt.datetime, what: str) -> None:
    """Raise ``GroupExpired`` unless ``run`` is effectively active and owned by ``caller``."""
    stored = run.status
    effective = stored
    if stored == RunStatus.ACTIVE and run.expires_at < now:
        effective = RunStatus.EXPIRED
    if effective == RunStatus.ACTIVE and run.worker_id == caller:
        return
    if effective != RunStatus.ACTIVE:
        why = f"the run is {effective}"
        if stored == RunStatus.ACTIVE:
            why += f" (lease lapsed at {run.expires_at.isoformat()})"
    else:
        why = f"the run belongs to {run.worker_id!r}"
    raise GroupExpired(
        run_id=run.run_id,
        stored_status=stored,
        effective_status=effective,
        owner=run.worker_id,
        caller=caller,
        why=f"{what}: {why}",
    )


def _record_rejection(exc: GroupExpired, *, detail: dict[str, Any], at: dt.datetime | None) -> None:
    """Record a rejected owner write in its own transaction; no run/group/member row changes."""
    with transaction.atomic():
        events.record_one(events.rejected_write(exc, detail=detail, at=at))
    log.warning("%s", exc)
