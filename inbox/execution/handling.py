"""What a claimed job must pass before it begins, and running its handler.

Pure functions of the job and its type (the approval re-check reads its approval row): the
executor asks them, records what they say through ``inbox.transitions``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from inbox import transitions
from inbox.approvals import check_approval
from inbox.errors import JobValidationError
from inbox.jobtypes import JobType, validate_job_document
from inbox.models import Job, JobState
from inbox.results import DefiniteFailure, HandlerResult

log = logging.getLogger("inbox.executor")


@dataclass(frozen=True)
class Verdict:
    """May the job begin (``ok``), and if not the result code and why; ``detail`` is what
    the AUTHORIZED event records of the checks made."""

    ok: bool
    code: str
    why: str
    detail: dict[str, Any]


def batchable_type(job_type: JobType) -> bool:
    """Jobs of this type may be begun together, and as soon as they are claimed: a crash
    between begin and handler leaves them EXECUTING, which the sweep returns to READY exactly
    like CLAIMED (idempotent, no approval to re-check right before executing)."""
    return job_type.idempotent and not job_type.needs_approval


def authorize(job: Job, job_type: JobType | None, *, seal_checked: bool = False) -> Verdict:
    """The checks before a job may begin: its type, its document's schema, its seal (unless
    the writer has just checked it on this very row: ``seal_checked``) and, for the types
    that need one, its approval."""
    if job_type is None:
        return Verdict(False, "UNKNOWN_JOB_TYPE", f"job type {job.job_type} is unknown", {})
    try:
        validate_job_document(job.payload)
    except JobValidationError as exc:
        return Verdict(False, "SCHEMA_INVALID", str(exc), {})
    if not seal_checked and not transitions.fingerprint_ok(job):
        # The begin refuses it (and records the drift); say why there.
        return Verdict(True, "OK", "", {"schema": "ok"})
    detail: dict[str, Any] = {"schema": "ok", "fingerprint": job.fingerprint}
    if job_type.needs_approval:
        check = check_approval(job)
        if not check.ok:
            return Verdict(False, check.code, check.why, {})
        detail.update(approval_id=job.approval_id, approval=check.why)
    return Verdict(True, "OK", "", detail)


def run_handler(job: Job, job_type: JobType) -> tuple[str, str, dict[str, Any], str]:
    """(outcome state, result code, detail, error) — raises only ``KeyboardInterrupt``."""
    try:
        result = job_type.handler(job)
    except DefiniteFailure as exc:
        return JobState.FAILED, exc.result_code, dict(exc.detail), str(exc)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        # ``SystemExit`` and ``GeneratorExit`` too: a handler's exit is its job's outcome, not
        # the executor's; only the executor's own stop signals stop it.
        log.exception("job %s: handler %s raised", job.job_id, job_type.handler_path)
        error = f"{type(exc).__name__}: {exc}"
        # What the handler knew about its error (a task's exception class and traceback).
        detail = dict(getattr(exc, "detail", None) or {})
        if job_type.idempotent:
            # Safe to run again: a definite FAILED an operator may retry.
            return JobState.FAILED, "HANDLER_ERROR", detail, error
        return JobState.OUTCOME_UNKNOWN, "HANDLER_ERROR", detail, error
    if not isinstance(result, HandlerResult):
        result = HandlerResult()
    return JobState.SUCCEEDED, result.result_code, dict(result.detail), ""
