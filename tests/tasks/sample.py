"""Tasks the task-backend tests enqueue through Django's own API (``@task``).

``MARKER`` (an environment variable naming a file) collects one line per run, so a test can
count how often a task really ran, across processes. ``GATE`` (a file) holds ``gated`` tasks
until the test creates it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from django.tasks import task

from inbox.tasks import non_idempotent, retry


def _mark(line: str) -> None:
    marker = os.environ.get("TASK_MARKER")
    if marker:
        with open(marker, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def _wait_for_gate() -> None:
    gate = os.environ.get("TASK_GATE")
    if not gate:
        return
    deadline = time.monotonic() + 60  # never longer than a minute
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


class PaymentDeclined(Exception):
    """A task's own exception: its class path must survive into the TaskResult."""


@task
def add(a: int, b: int) -> int:
    _mark(f"add {a} {b}")
    return a + b


@task
def echo(*args, **kwargs) -> dict:
    return {"args": list(args), "kwargs": kwargs}


@task
def boom(message: str) -> None:
    _mark("boom")
    raise PaymentDeclined(message)


@task
def not_json() -> object:
    return object()


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    _mark(f"async_add {a} {b}")
    return a + b


@task(takes_context=True)
def attempt_number(context) -> int:
    return context.attempt


@task
def gated(name: str) -> str:
    _mark(f"gated {name}")
    _wait_for_gate()
    return name


@non_idempotent
@task
def gated_once(name: str) -> str:
    _mark(f"gated_once {name}")
    _wait_for_gate()
    return name


@non_idempotent
@task
def charge(order: str) -> str:
    _mark(f"charge {order}")
    return f"charged {order}"


@non_idempotent
@task
def charge_fails(order: str) -> None:
    _mark(f"charge_fails {order}")
    raise PaymentDeclined(f"card declined for {order}")


# The first retry waits at least 0.5 s: long enough that the test's first drain, on a busy CI
# machine, ends before it is due (with 0.1 s it sometimes ran the second attempt too).
@retry(retries=3, backoff=1.0, cap=2.0, jitter=0.5)
@task
def flaky(name: str, fail_times: int) -> str:
    """Fails its first ``fail_times`` runs (counted in the marker file), then succeeds."""
    marker = os.environ.get("TASK_MARKER")
    runs = 0
    if marker and Path(marker).exists():
        runs = Path(marker).read_text(encoding="utf-8").split().count(f"flaky:{name}")
    _mark(f"flaky:{name}")
    if runs < fail_times:
        raise RuntimeError(f"flaky {name} run {runs + 1}")
    return f"{name} ok after {runs + 1}"


@task
@retry(retries=2, backoff=0.5, cap=1)
def retried_below(x: int) -> int:
    return x


@task
@non_idempotent
def once_below(x: int) -> int:
    return x


@task
def calls_exit() -> None:
    """A task that ends the process the way a script would: ``exit()`` (``SystemExit``)."""
    exit()


@task
def raises_system_exit(code: int) -> None:
    raise SystemExit(code)


@task
def raises_generator_exit() -> None:
    raise GeneratorExit("closed from inside the task")


@task(takes_context=True)
def own_id(context) -> str:
    """The id its context names: the id ``enqueue`` returned."""
    return context.task_result.id


@task(takes_context=True)
def status_while_running(context) -> str:
    """Its own status as any process reads it back while it runs."""
    return str(context.task_result.task.get_result(context.task_result.id).status)


@retry(retries=1, backoff=0.2, cap=0.2, jitter=0.0)
@task(takes_context=True)
def second_attempt_succeeds(context) -> int:
    """Fails its first attempt; returns the attempt its context counts on the next one."""
    if context.attempt < 2:
        raise RuntimeError(f"attempt {context.attempt} fails on purpose")
    return context.attempt
