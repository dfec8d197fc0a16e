"""A page reads in one trip: following a job from the retry action on its detail page through
the project's code enters no project module more than twice.

The trip is traced with ``sys.setprofile`` at module level. A frame is on the trip when it is a
project function (not Django, a third-party package, the standard library or the tests) whose
arguments carry the job: its id, the ``Job``, or a value holding either (a list of them, an
audit event, a read model with a ``job``). Entering a module is a call on the trip from a frame
of another module. Below the job writer's face (``inbox/transitions.py`` and its engine in
``inbox/writer/``, counted as one module) the trip is the writer's own and is not followed: the
page makes one call into the writer and one into the read model, then renders.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inbox.models import Job, JobState
from tests.console.pagekit import action_form, hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
WRITER = "inbox/transitions.py"
# The most entries into one module the trip may make.
MOST_ENTRIES = 2
# Queries of the retry request (its own writes, the request id, the page's reads) when the page
# still called selector after selector; the one read model must not need more.
QUERIES_BEFORE = 19
# The URL converter runs inside Django's resolver and reverse(): routing, not a stay of the page.
URL_LAYER = {"console/converters.py"}


def _module(frame: FrameType) -> str | None:
    """The project module a frame runs in (the writer's engine folded into its face)."""
    path = frame.f_code.co_filename
    root = f"{ROOT}/"
    if not path.startswith(root) or "/.venv/" in path or path.startswith(f"{root}tests/"):
        return None
    name = path[len(root) :]
    if name in URL_LAYER:
        return None
    return WRITER if name.startswith("inbox/writer/") else name


def _carries(value: Any, job_id: str, depth: int = 0) -> bool:
    if value == job_id if isinstance(value, str) else False:
        return True
    if getattr(value, "job_id", None) == job_id:
        return True
    if depth < 1:
        if getattr(value, "job", None) is not None:
            return _carries(value.job, job_id, depth + 1)
        if isinstance(value, list | tuple | set | frozenset):
            return any(_carries(item, job_id, depth + 1) for item in list(value)[:50])
        if isinstance(value, dict):
            return any(_carries(item, job_id, depth + 1) for item in list(value.values())[:50])
    return False


@dataclass
class Trip:
    """The modules a job's trip stays in, in order, and how often each is entered."""

    job_id: str
    stays: list[str] = field(default_factory=list)
    entries: Counter[str] = field(default_factory=Counter)
    # One entry per live frame: its module when the frame is on the trip, else None.
    _stack: list[str | None] = field(default_factory=list)

    def _current(self) -> str | None:
        return next((m for m in reversed(self._stack) if m), None)

    def _stay(self, module: str | None) -> None:
        if module and (not self.stays or self.stays[-1] != module):
            self.stays.append(module)

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event == "return":
            if self._stack:
                self._stack.pop()
                self._stay(self._current())
            return
        if event != "call":
            return
        current = self._current()
        module = _module(frame)
        below_writer = WRITER in self._stack
        on_trip = (
            module is not None
            and not below_writer
            and any(_carries(v, self.job_id) for v in frame.f_locals.values())
        )
        self._stack.append(module if on_trip else None)
        if on_trip and module != current:
            self.entries[module] += 1
            self._stay(module)


def _retry_trip(client, job: Job) -> tuple[Trip, int]:
    url = reverse("console:job_retry", args=[job.job_id])
    form = action_form("disk was full")
    trip = Trip(job.job_id)
    with CaptureQueriesContext(connection) as queries:
        sys.setprofile(trip.profile)
        try:
            response = client.post(url, form, headers=hx("job-actions"))
        finally:
            sys.setprofile(None)
    assert response.status_code == 200
    assert "Retried" in response.content.decode()
    return trip, len(queries)


def test_retry_on_detail_page_enters_no_module_more_than_twice(client) -> None:
    login(client, "ops", "operator")
    job = make_job("save", state=JobState.FAILED)
    trip, queries = _retry_trip(client, job)
    over = {module: n for module, n in trip.entries.items() if n > MOST_ENTRIES}
    assert over == {}, f"stays: {trip.stays}"
    assert "console/jobs.py" in trip.entries
    assert trip.entries[WRITER] >= 1
    assert queries <= QUERIES_BEFORE
    assert Job.objects.get(job_id=job.job_id).state == JobState.READY
