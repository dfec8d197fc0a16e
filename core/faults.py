"""Test-only fault injection at named transaction points; inert unless the environment asks.

``CONSOLE_FAULT=<point>=<action>[@<n>]`` makes the process, the n-th time (default 1st) it
reaches ``<point>`` while inside that point's transaction, either ``stop`` (SIGSTOP itself: a
frozen worker holding its locks, as a paused VM or a long GC pause would) or ``kill`` (SIGKILL
itself: a crash mid-transaction). Points are named where they are reached:

- ``claim:<JOB_TYPE>``, ``begin:<JOB_TYPE>``, ``finish:<JOB_TYPE>`` — the job writer, after its
  UPDATE and before the commit (``inbox.transitions``);
- ``plan``, ``dispose`` — the run writer, the same moment (``runs.transitions``).

The fault tests (``tests/faults/``) use it; production never sets the variable.
"""

from __future__ import annotations

import os
import signal

_SPEC = os.environ.get("CONSOLE_FAULT", "")
_POINT, _, _REST = _SPEC.partition("=")
_ACTION, _, _NTH = _REST.partition("@")
_hits = 0


def point(name: str) -> None:
    """Reached ``name``: do what ``CONSOLE_FAULT`` asks there (nothing when unset)."""
    global _hits
    if not _SPEC or name != _POINT:
        return
    _hits += 1
    if _hits != int(_NTH or 1):
        return
    marker = os.environ.get("CONSOLE_FAULT_MARKER")
    if marker:  # tell the test we got here (and which process)
        with open(marker, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {name}\n")
    if _ACTION == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif _ACTION == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
