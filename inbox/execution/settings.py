"""The executor's configuration (checked once, frozen) and its counters."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from inbox.errors import ConfigurationError


@dataclass(frozen=True)
class ExecutorConfig:
    """What an executor is asked to do; a value that cannot work is refused here, at start."""

    scope: str
    worker_id: str | None = None
    lease_seconds: int = 60
    batch: int = 10
    poll_seconds: float = 1.0
    max_jobs: int | None = None
    exit_when_idle: bool = False
    # Run the stale-lease sweep every N turns; 0 turns it off.
    sweep_every: int = 50
    progress_seconds: float = 10.0
    # Tries of one step on a dropped connection before the turn gives up.
    db_retries: int = 5
    # False: every job begins and records in its own transaction (``--one-by-one``).
    batch_steps: bool = True

    def __post_init__(self) -> None:
        if self.lease_seconds < 1:
            raise ConfigurationError(f"the lease must be at least 1 s, got {self.lease_seconds}")
        if self.batch < 1:
            raise ConfigurationError(f"the batch must be at least 1, got {self.batch}")
        if self.poll_seconds <= 0:
            raise ConfigurationError(f"the poll interval must be positive, got {self.poll_seconds}")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ConfigurationError(f"--max-jobs must be at least 1, got {self.max_jobs}")
        if self.progress_seconds <= 0:
            raise ConfigurationError(
                f"--progress-every must be positive, got {self.progress_seconds}"
            )
        if self.sweep_every < 0:
            raise ConfigurationError(
                f"--sweep-every must be 0 (off) or more, got {self.sweep_every}"
            )


@dataclass
class ExecutorStats:
    """What an executor did; ``run()`` returns it and the progress lines print it."""

    succeeded: int = 0
    failed: int = 0
    unknown: int = 0
    rejected: int = 0
    lost: int = 0
    # Failed attempts sent back to the queue by their retry policy (not outcomes yet).
    retried: int = 0
    released: int = 0
    db_errors: int = 0
    sweeps: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def processed(self) -> int:
        return self.succeeded + self.not_ok

    @property
    def not_ok(self) -> int:
        return self.failed + self.unknown + self.rejected + self.lost + self.retried

    def line(self) -> str:
        retried = f", {self.retried} retried later" if self.retried else ""
        return (
            f"{self.processed} jobs ({self.succeeded} succeeded, {self.failed} failed, "
            f"{self.unknown} unknown, {self.rejected} rejected, {self.lost} lost{retried})"
        )
