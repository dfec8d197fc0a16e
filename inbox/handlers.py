"""Job handlers, resolved through the job-type registry.

A handler takes the claimed ``Job`` and returns a ``HandlerResult``. It raises
``DefiniteFailure`` when the mutation certainly did not happen; any other exception means the
outcome is unknown to the executor. Called only by ``inbox.executor``, outside any transaction.
"""

from __future__ import annotations

from inbox import vault
from inbox.results import DefiniteFailure, HandlerResult

__all__ = ["DefiniteFailure", "HandlerResult", "delete_object", "noop", "run_task", "save_object"]


def noop(job) -> HandlerResult:
    """Do nothing; for tests and benchmarks of the claim path."""
    return HandlerResult("OK", {})


def save_object(job) -> HandlerResult:
    """Write the object atomically; the same content already there is a no-op (UNCHANGED)."""
    try:
        outcome = vault.save(
            job.vault_path,
            content=job.payload["content"],
            provenance_hash=job.payload["provenance_hash"],
        )
    except vault.VaultError as exc:
        # Refused before anything was renamed into place: definitely not applied.
        raise DefiniteFailure(exc.result_code, str(exc), exc.detail) from exc
    return HandlerResult(outcome.result_code, outcome.as_detail())


def delete_object(job) -> HandlerResult:
    """Compare-and-delete; NOT_FOUND and HASH_MISMATCH are definite failures, never guesses.

    Any other error (an I/O error around the unlink) propagates: the executor then records
    OUTCOME_UNKNOWN, because a DELETE is not idempotent.
    """
    try:
        outcome = vault.delete(
            job.vault_path,
            expected_hash=job.payload["expected_provenance_hash"],
            tag=f"{job.job_id} {job.claim_id}",
        )
    except vault.VaultError as exc:
        raise DefiniteFailure(exc.result_code, str(exc), exc.detail) from exc
    return HandlerResult(outcome.result_code, outcome.as_detail())


def run_task(job) -> HandlerResult:
    """Run the ``django.tasks`` function a TASK job names (``inbox.tasks.execute``)."""
    # Imported when a task runs: the backend module (and django.tasks) load only where tasks do.
    from inbox.tasks import execute

    return execute(job)
