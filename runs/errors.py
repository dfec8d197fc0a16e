"""Domain errors of consolidation runs. Every one says what was refused and why.

Raised by ``runs.transitions`` and the consolidators; commands turn them into ``CommandError``.
"""

from __future__ import annotations

from core.errors import DomainError


class RunError(DomainError):
    """Base of every run refusal."""


class RunNotFound(RunError):
    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"{what} does not exist")


class RunAlreadyActive(RunError):
    """The database refused a second status='active' row for the store (a lost plan race)."""

    def __init__(self, store: str, why: str = "") -> None:
        self.store = store
        text = f"store {store!r} already has an active run; the new plan was not stored"
        super().__init__(f"{text}: {why}" if why else text)


class MultipleActiveRuns(RunError):
    """Two status='active' rows for one store: only a bug (or a dropped constraint) does this.

    Refused loudly and never resolved by picking one.
    """

    def __init__(self, store: str, run_ids: list[str]) -> None:
        self.store = store
        self.run_ids = list(run_ids)
        super().__init__(
            f"store {store!r} has {len(run_ids)} active runs ({', '.join(run_ids)}); at most one "
            "is allowed — refusing to act; check the run_one_active_per_store constraint"
        )


class GroupExpired(RunError):
    """A write by a caller whose run is not effectively active, or not theirs; nothing written."""

    code = "group_expired"

    def __init__(
        self,
        *,
        run_id: str,
        stored_status: str,
        effective_status: str,
        owner: str,
        caller: str,
        why: str,
    ) -> None:
        self.run_id = run_id
        self.stored_status = stored_status
        self.effective_status = effective_status
        self.owner = owner
        self.caller = caller
        self.why = why
        super().__init__(
            f"{self.code}: run {run_id} is {stored_status} (effectively {effective_status}), "
            f"owned by {owner!r}; write by {caller!r} refused: {why}"
        )


class InvalidRunTransition(RunError):
    """A run, group or member change whose guard did not match; nothing was written."""

    def __init__(self, what: str, from_status: str | None, to_status: str, why: str = "") -> None:
        self.what = what
        self.from_status = from_status
        self.to_status = to_status
        self.why = why
        text = f"{what}: {from_status} → {to_status} refused"
        super().__init__(f"{text}: {why}" if why else text)


class ConsolidatorError(RunError):
    """The consolidator could not plan or apply (configuration or input); says what to fix."""
