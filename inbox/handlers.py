"""Job handlers, resolved through the job-type registry.

A handler takes the claimed ``Job`` and returns a ``HandlerResult``. It raises
``DefiniteFailure`` when the mutation certainly did not happen; any other exception means the
outcome is unknown to the executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HandlerResult:
    result_code: str = "OK"
    detail: dict[str, Any] = field(default_factory=dict)


class DefiniteFailure(Exception):
    """The mutation certainly did not happen (e.g. a hash precondition failed)."""

    def __init__(self, result_code: str, message: str, detail: dict[str, Any] | None = None):
        self.result_code = result_code
        self.detail = detail or {}
        super().__init__(message)


def noop(job) -> HandlerResult:
    """Do nothing; for tests and benchmarks of the claim path."""
    return HandlerResult("OK", {})


def save_object(job) -> HandlerResult:  # pragma: no cover - replaced by the executors issue
    raise NotImplementedError("SAVE_OBJECT handler arrives with the vault")


def delete_object(job) -> HandlerResult:  # pragma: no cover - replaced by the executors issue
    raise NotImplementedError("DELETE_OBJECT handler arrives with the vault")
