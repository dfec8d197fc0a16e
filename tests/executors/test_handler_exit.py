"""A handler that raises ``SystemExit`` or ``GeneratorExit`` gets its job's outcome like any
other error; only ``KeyboardInterrupt`` goes through (as Django's own task backend lets it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from inbox.execution.handling import run_handler
from inbox.models import JobState


def _type(error: BaseException, *, idempotent: bool) -> SimpleNamespace:
    def handler(_job):
        raise error

    return SimpleNamespace(handler=handler, handler_path="tests.handler", idempotent=idempotent)


@pytest.mark.parametrize("error", [SystemExit(2), GeneratorExit("closed")])
@pytest.mark.parametrize(
    ("idempotent", "to"), [(True, JobState.FAILED), (False, JobState.OUTCOME_UNKNOWN)]
)
def test_handler_that_exits_gets_an_outcome_with_its_error(error, idempotent, to):
    job = SimpleNamespace(job_id="j-1")
    state, code, _detail, message = run_handler(job, _type(error, idempotent=idempotent))
    assert (state, code) == (to, "HANDLER_ERROR")
    assert message == f"{type(error).__name__}: {error}"


def test_handler_keyboard_interrupt_goes_through():
    with pytest.raises(KeyboardInterrupt):
        run_handler(SimpleNamespace(job_id="j-1"), _type(KeyboardInterrupt(), idempotent=True))
