"""Retries of a failed idempotent job: the policy a document declares and the delay it gives."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inbox.jobtypes import JobType


# The bounds of a policy's values, in one place for the validator and the API's schema:
# retries (a whole number), backoff and cap (seconds), jitter (a share of the delay).
RETRIES_RANGE = (1, 100)
SECONDS_RANGES = {"backoff": (0.001, 86400.0), "cap": (0.001, 7 * 86400.0)}
JITTER_RANGE = (0.0, 1.0)
DEFAULTS = {"backoff": 1.0, "cap": 300.0, "jitter": 0.5}


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of a failed idempotent job: exponential backoff with jitter, capped.

    Attempt ``n`` (1 for the first) that fails is retried when ``n <= retries``, after a delay
    drawn from ``[ceiling × (1 − jitter), ceiling]`` with ``ceiling = min(cap, backoff × 2^(n−1))``:
    the ceilings double and stop at the cap; the jitter spreads a burst of failures apart.
    """

    retries: int
    backoff: float = 1.0
    cap: float = 300.0
    jitter: float = 0.5

    KEYS = ("retries", "backoff", "cap", "jitter")

    def __post_init__(self) -> None:
        problems = self.problems(asdict_of(self))
        if problems:
            raise ValueError("; ".join(problems))

    @staticmethod
    def problems(data: Mapping[str, Any]) -> list[str]:
        """What is wrong with a policy as a document carries it (``retry``)."""
        out = [f"retry.{k}: unknown field" for k in sorted(set(data) - set(RetryPolicy.KEYS))]
        retries = data.get("retries")
        low, high = RETRIES_RANGE
        if isinstance(retries, bool) or not isinstance(retries, int) or not low <= retries <= high:
            out.append(f"retry.retries: must be a whole number from {low} to {high}")
        numbers = {}
        for key, (low, high) in SECONDS_RANGES.items():
            value = data.get(key, DEFAULTS[key])
            if isinstance(value, bool) or not isinstance(value, int | float):
                out.append(f"retry.{key}: must be a number of seconds")
            elif not (math.isfinite(value) and low <= value <= high):
                out.append(f"retry.{key}: must be between {low} and {high:.0f} seconds")
            else:
                numbers[key] = value
        if len(numbers) == 2 and numbers["cap"] < numbers["backoff"]:
            out.append("retry.cap: must not be shorter than retry.backoff")
        jitter = data.get("jitter", DEFAULTS["jitter"])
        number = isinstance(jitter, int | float) and not isinstance(jitter, bool)
        low, high = JITTER_RANGE
        if not (number and low <= jitter <= high):
            out.append(f"retry.jitter: must be a number from {low:g} to {high:g}")
        return out

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> RetryPolicy | None:
        """The policy a (validated) document or payload declares, or None."""
        data = doc.get("retry")
        if not data:
            return None
        return cls(**{k: data[k] for k in cls.KEYS if k in data})

    def as_document(self) -> dict[str, Any]:
        return asdict_of(self)

    def ceiling(self, attempt: int) -> float:
        """The longest delay after failed attempt ``attempt`` (1-based): doubling, capped."""
        exponent = min(max(attempt, 1) - 1, 64)  # 2^64 × any backoff is past every cap
        return min(self.cap, self.backoff * 2.0**exponent)

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """The delay after failed attempt ``attempt``, jittered below its ceiling."""
        return self.ceiling(attempt) * (1.0 - self.jitter * rand())


def asdict_of(policy: RetryPolicy) -> dict[str, Any]:
    return {k: getattr(policy, k) for k in RetryPolicy.KEYS}


def retry_delay(job: Any, job_type: JobType) -> float | None:
    """Seconds until the next attempt of ``job``, whose attempt just failed; None when it must
    not be retried: a non-idempotent type (never retried blindly), no retry policy, or no
    retry left (its ``attempt_count`` is the attempt that failed)."""
    if not job_type.idempotent:
        return None
    policy = RetryPolicy.of(job.payload or {})
    if policy is None:
        return None
    if job.attempt_count > policy.retries or job.attempt_count >= job.max_attempts:
        return None
    return policy.delay(job.attempt_count)
