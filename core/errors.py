"""The project's two error roots.

- ``DomainError``: a request the domain refused (an illegal transition, a lost claim, a run
  write by a caller that does not hold the run). Nothing was written; the message says what was
  refused and why. The console answers 409, commands exit with a ``CommandError``.
- ``ConfigurationError``: the settings or the database cannot run the project as configured. It
  is an ``ImproperlyConfigured``, never a ``DomainError``, so it can never pass for a refusal;
  system checks (``inbox.checks``) report these before a worker starts.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class DomainError(Exception):
    """Base of every refusal of the inbox and the runs (``InboxError``, ``RunError``)."""


class Busy(DomainError):
    """The row is locked by another transaction right now (a worker mid-step, or frozen); the
    caller gave up within its bound instead of waiting. Nothing was written; try again."""


class ConfigurationError(ImproperlyConfigured):
    """Settings or the database are not fit for what was asked; the message says what to fix."""
