"""Domain errors of the inbox. Every one says what to do or what was refused."""

from __future__ import annotations

from core.errors import ConfigurationError, DomainError

__all__ = [
    "ApprovalError",
    "ConfigurationError",
    "IdempotencyConflict",
    "ImmutableFieldDrift",
    "InboxError",
    "InvalidTransition",
    "JobNotFound",
    "JobValidationError",
    "LostClaim",
]


class InboxError(DomainError):
    """Base of every inbox refusal; the console answers 409, commands a CommandError."""


class JobNotFound(InboxError):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r} does not exist")


class InvalidTransition(InboxError):
    """A transition whose guard did not match; nothing was written."""

    def __init__(self, job_id: str, from_state: str | None, to_state: str, why: str = "") -> None:
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state
        self.why = why
        text = f"job {job_id!r}: transition {from_state} → {to_state} refused"
        super().__init__(f"{text}: {why}" if why else text)


class LostClaim(InvalidTransition):
    """A worker-side write by a holder that no longer holds the claim (fencing)."""

    def __init__(
        self, job_id: str, from_state: str | None, to_state: str, *, claim_id: str, why: str
    ) -> None:
        self.claim_id = claim_id
        super().__init__(job_id, from_state, to_state, why)


class ImmutableFieldDrift(InboxError):
    """A job's immutable fields no longer match its sealed fingerprint; fail closed."""

    def __init__(self, job_id: str, sealed: str, current: str) -> None:
        self.job_id = job_id
        self.sealed = sealed
        self.current = current
        super().__init__(
            f"job {job_id!r}: immutable fields changed since the job was sealed "
            f"(fingerprint {sealed[:12]}… now {current[:12]}…); transition refused"
        )


class JobValidationError(InboxError):
    """A job document was refused; ``problems`` lists every reason at once."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("job refused: " + "; ".join(self.problems))


class IdempotencyConflict(InboxError):
    """Same job_id or idempotency_key as an existing job, with different content."""

    def __init__(self, key: str, existing_job_id: str) -> None:
        self.key = key
        self.existing_job_id = existing_job_id
        super().__init__(
            f"idempotency conflict: {key!r} already names job {existing_job_id!r} "
            "with different content; nothing was overwritten"
        )


class ApprovalError(InboxError):
    """An approval decision was refused (four-eyes, permission, state)."""
