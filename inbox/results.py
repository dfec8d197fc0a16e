"""What a job handler returns (``HandlerResult``) or raises when its mutation certainly did
not happen (``DefiniteFailure``).

Its own module so that the handlers (``inbox.handlers``), the task backend (``inbox.tasks``,
whose ``execute`` is the TASK handler) and the executor share it without importing each other
in a circle.
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
