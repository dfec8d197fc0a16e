"""A ``django.tasks`` backend on the inbox: any Django app's tasks get leases, fencing, the
audit trail, non-idempotent safety and the console, as jobs of the ``TASK`` type.

    TASKS = {"default": {"BACKEND": "inbox.tasks.InboxTaskBackend", "QUEUES": ["default"]}}

``some_task.enqueue(...)`` creates a ``TASK`` job (``create_job``: validated, idempotent, sealed,
REQUESTED and READY recorded) whose scope is the task's queue; ``manage.py run_executor --scope
<queue>`` runs it like any other job; ``get_result(id)`` reads Django's ``TaskResult`` back
from the job row and its trail. Enqueued inside a transaction, the job commits with it.

A task is idempotent by default: after a lost lease it is offered again. ``@non_idempotent``
makes it a ``TASK_NON_IDEMPOTENT`` job, which follows the DELETE rules (never batched, never
retried, OUTCOME_UNKNOWN after a lost lease or an exception, an operator reconciles it).
``@retry(retries=…)`` gives an idempotent task retries with exponential backoff, jitter and a
cap. Both decorators work above or below ``@task`` and only mark the function, so a project
whose tests use another backend keeps working.

Callers: any Django app (through ``django.tasks``), and ``inbox.handlers.run_task`` (the
executor's side, ``execute``). Job rows change only through ``inbox.transitions``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Callable, Sequence
from traceback import format_exception
from typing import Any

from django.conf import settings
from django.core import checks
from django.tasks import (
    DEFAULT_TASK_BACKEND_ALIAS,
    Task,
    TaskContext,
    TaskResult,
    TaskResultStatus,
)
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.jobtypes import (
    QUEUE_NAME_RE,
    TASK,
    TASK_NON_IDEMPOTENT,
    TASK_TYPES,
    RetryPolicy,
    get_job_type,
    json_problems,
)
from inbox.models import Job, JobState
from inbox.reconcile import APPLIED
from inbox.results import DefiniteFailure, HandlerResult

__all__ = [
    "InboxTaskBackend",
    "TaskArgumentsNotJSON",
    "TaskOutcomeUnknown",
    "execute",
    "is_idempotent",
    "non_idempotent",
    "retry",
    "retry_policy",
]

# Marks the decorators leave on a task's function (``Task`` itself is a frozen dataclass).
_IDEMPOTENT = "inbox_task_idempotent"
_RETRY = "inbox_task_retry"
# How much of a failed task's traceback the trail keeps (its end, where the error is).
TRACEBACK_CHARS = 8000
# The job's state → Django's status. OUTCOME_UNKNOWN reads as RUNNING, not FAILED: whether it
# ran is not known until an operator reconciles it, and a caller that saw FAILED could enqueue
# a non-idempotent task again — the one thing this backend must never invite.
_STATUS = {
    JobState.CREATED: TaskResultStatus.READY,
    JobState.READY: TaskResultStatus.READY,
    JobState.CLAIMED: TaskResultStatus.RUNNING,
    JobState.EXECUTING: TaskResultStatus.RUNNING,
    JobState.OUTCOME_UNKNOWN: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.REJECTED: TaskResultStatus.FAILED,
}


class TaskArgumentsNotJSON(InvalidTask, TypeError):
    """A task's arguments cannot be stored as JSON; nothing was enqueued."""


class TaskOutcomeUnknown(Exception):
    """A non-idempotent task raised: it may have done part of its work. The executor records
    OUTCOME_UNKNOWN with ``detail`` (exception class, message, traceback); an operator decides."""

    def __init__(self, message: str, detail: dict[str, Any]) -> None:
        self.detail = detail
        super().__init__(message)


# --- declaring a task's policy -----------------------------------------------------------------


def _func_of(obj: Any) -> Callable[..., Any]:
    return obj.func if isinstance(obj, Task) else obj


def non_idempotent[T](obj: T) -> T:
    """Declare a task non-idempotent: its jobs are ``TASK_NON_IDEMPOTENT``, never run twice
    blindly (no batching, no retry; a lost lease or an exception parks it OUTCOME_UNKNOWN for an
    operator). Put it above or below ``@task``."""
    func = _func_of(obj)
    if getattr(func, _RETRY, None) is not None:
        raise TypeError(f"{func.__qualname__}: a non-idempotent task cannot declare retries")
    setattr(func, _IDEMPOTENT, False)
    return obj


def retry[T](
    *, retries: int, backoff: float = 1.0, cap: float = 300.0, jitter: float = 0.5
) -> Callable[[T], T]:
    """Declare retries for an idempotent task that raises: up to ``retries`` more attempts,
    the n-th after about ``backoff × 2^(n−1)`` seconds (at most ``cap``), each delay drawn from
    its top ``jitter`` share. Put it above or below ``@task``."""
    policy = RetryPolicy(retries=retries, backoff=backoff, cap=cap, jitter=jitter)

    def decorate(obj: T) -> T:
        func = _func_of(obj)
        if getattr(func, _IDEMPOTENT, True) is False:
            raise TypeError(f"{func.__qualname__}: a non-idempotent task cannot declare retries")
        setattr(func, _RETRY, policy)
        return obj

    return decorate


def is_idempotent(task: Task) -> bool:
    return getattr(task.func, _IDEMPOTENT, True) is not False


def retry_policy(task: Task) -> RetryPolicy | None:
    return getattr(task.func, _RETRY, None)


# --- the backend -----------------------------------------------------------------------------


class InboxTaskBackend(BaseTaskBackend):
    """``django.tasks`` on the inbox. Flags are true only for what works: ``run_after`` defers
    the claim; results come back from any process; coroutine tasks run (``Task.call``). No
    priority: the claim order is the queue's order (creation time), and ordering by a priority
    first would cost the hot path its claim index."""

    supports_defer = True
    supports_get_result = True
    supports_async_task = True
    supports_priority = False

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        """Store a TASK job for ``task`` (READY, or deferred to ``task.run_after``); refused with
        ``TaskArgumentsNotJSON`` or ``InvalidTask`` before anything is written."""
        self.validate_task(task)
        doc = self.document(task, args, kwargs)
        # The set-based writer (one raw INSERT for the job, one for its events): the same rows,
        # checks and audit as create_job, without the ORM's per-insert SQL compilation.
        created = transitions.create_jobs([doc], requested_by=f"tasks:{self.alias}")
        if created.refused:
            refusal = created.refused[0]
            problems = getattr(refusal, "problems", None) or [str(refusal)]
            raise InvalidTask(f"task {task.module_path}: {'; '.join(problems)}") from refusal
        job = created.created[0]
        result = _unfinished_result(job, task, TaskResultStatus.READY, backend=self.alias)
        task_enqueued.send(type(self), task_result=result)
        return result

    def document(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The job document ``enqueue`` stores for one call (a fresh id each time); a bulk
        loader may hand many to ``transitions.create_jobs``. ``TaskArgumentsNotJSON`` if the
        arguments cannot be stored."""
        json_args, json_kwargs = _json_arguments(task, args, kwargs)
        result_id = str(uuid.uuid4())
        doc: dict[str, Any] = {
            "job_id": result_id,
            "job_version": 1,
            "mission_id": f"tasks:{self.alias}",
            "job_type": TASK if is_idempotent(task) else TASK_NON_IDEMPOTENT,
            "object_id": task.module_path,
            "idempotency_key": f"task:{result_id}",
            "task_path": task.module_path,
            "args": json_args,
            "kwargs": json_kwargs,
            "queue_name": task.queue_name,
            "backend": self.alias,
        }
        if task.run_after is not None:
            doc["run_after"] = task.run_after.isoformat()
        policy = retry_policy(task)
        if policy is not None and is_idempotent(task):
            doc["retry"] = policy.as_document()
        return doc

    def get_result(self, result_id: str) -> TaskResult:
        """Django's ``TaskResult`` from the job row and its trail; ``TaskResultDoesNotExist``
        for an id that is not a task of this backend."""
        job = Job.objects.filter(job_id=str(result_id), job_type__in=TASK_TYPES).first()
        # A producer's TASK document (the enqueue command) names no backend: the default's.
        alias = (job.payload or {}).get("backend", DEFAULT_TASK_BACKEND_ALIAS) if job else None
        if job is None or alias != self.alias:
            raise TaskResultDoesNotExist(result_id)
        trail = list(
            AuditEvent.objects.filter(
                job_id=job.job_id, event_type__in=(EventType.STARTED, EventType.EXECUTED)
            )
            .order_by("event_id")
            .values_list("event_type", "actor", "created_at", "detail")
        )
        started = [(actor, at) for kind, actor, at, _detail in trail if kind == EventType.STARTED]
        executed = [detail for kind, _a, _at, detail in trail if kind == EventType.EXECUTED]
        status = _status_of(job)
        task = _task_of(job.payload["task_path"])
        task = dataclasses.replace(
            task, queue_name=job.scope, backend=self.alias, run_after=job.run_after
        )
        result = TaskResult(
            task=task,
            id=job.job_id,
            status=status,
            enqueued_at=job.created_at,
            started_at=started[0][1] if started else None,
            last_attempted_at=started[-1][1] if started else None,
            finished_at=job.updated_at if status in _FINISHED else None,
            args=job.payload.get("args", []),
            kwargs=job.payload.get("kwargs", {}),
            backend=self.alias,
            errors=[_task_error(d) for d in executed if d.get("exception_class")],
            worker_ids=[actor for actor, _at in started],
        )
        if job.state == JobState.SUCCEEDED and executed:
            object.__setattr__(result, "_return_value", executed[-1].get("return_value"))
        return result

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Each queue is an executor scope: they must be listed, and be valid scope names."""
        if not self.queues:
            return [
                checks.Error(
                    f"TASKS[{self.alias!r}]: QUEUES is empty; InboxTaskBackend needs its queues "
                    "listed (each is an executor scope: run_executor --scope <queue>)",
                    id="inbox.E020",
                )
            ]
        return [
            checks.Error(
                f"TASKS[{self.alias!r}]: queue {queue!r} cannot be an executor scope",
                hint="Use 1 to 32 letters, digits, '_', '.' or '-', starting with a letter "
                "or digit.",
                id="inbox.E021",
            )
            for queue in sorted(map(str, self.queues))
            if not QUEUE_NAME_RE.fullmatch(queue)
        ]


_FINISHED = frozenset({TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED})


def _status_of(job: Job) -> TaskResultStatus:
    if job.state == JobState.RECONCILED:
        # An operator decided: the task ran (APPLIED) or it did not.
        ran = job.result_code == APPLIED
        return TaskResultStatus.SUCCESSFUL if ran else TaskResultStatus.FAILED
    return _STATUS[JobState(job.state)]


def _task_error(detail: dict[str, Any]) -> TaskError:
    return TaskError(
        exception_class_path=str(detail["exception_class"]),
        traceback=str(detail.get("traceback") or detail.get("message") or ""),
    )


def _task_of(path: str) -> Task:
    """The ``Task`` a job names (a module-level ``@task``, as ``Task.module_path`` gives it)."""
    try:
        found = import_string(path)
    except ImportError as exc:
        raise InvalidTask(f"task {path!r} does not import: {exc}") from exc
    if not isinstance(found, Task):
        raise InvalidTask(f"{path!r} is not a task (decorate it with @task)")
    return found


def _max_json_bytes() -> int:
    return int(getattr(settings, "INBOX_TASK_MAX_JSON_BYTES", 1024 * 1024))


def _json_arguments(
    task: Task, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """``args`` and ``kwargs`` as they will reach the task (Django's ``normalize_json``: a
    tuple becomes a list), or ``TaskArgumentsNotJSON`` naming every argument that is not JSON."""
    try:
        json_args, json_kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
    except (TypeError, ValueError) as exc:
        problems = json_problems("args", list(args)) + json_problems("kwargs", dict(kwargs))
        raise TaskArgumentsNotJSON(
            f"task {task.module_path}: arguments are not JSON: " + "; ".join(problems or [str(exc)])
        ) from exc
    problems = json_problems("args", json_args) + json_problems("kwargs", json_kwargs)
    if problems:
        raise TaskArgumentsNotJSON(
            f"task {task.module_path}: arguments are not JSON: " + "; ".join(problems)
        )
    size = len(json.dumps([json_args, json_kwargs], ensure_ascii=False).encode("utf-8"))
    if size > _max_json_bytes():
        raise TaskArgumentsNotJSON(
            f"task {task.module_path}: arguments are {size} bytes of JSON, over the limit of "
            f"{_max_json_bytes()} (INBOX_TASK_MAX_JSON_BYTES); pass a reference instead"
        )
    return json_args, json_kwargs


# --- the executor's side -------------------------------------------------------------------------


def execute(job: Job) -> HandlerResult:
    """Run the task a claimed, begun TASK job names; its JSON return value is the result.

    A task that does not import never ran: a definite failure. A task that raises: FAILED for
    an idempotent task (retried if it declared retries), OUTCOME_UNKNOWN for a non-idempotent
    one (it may have done part of its work). The EXECUTED event keeps the exception's class,
    message and traceback, or the return value.
    """
    payload = job.payload
    try:
        task = _task_of(payload["task_path"])
    except InvalidTask as exc:
        raise DefiniteFailure("TASK_NOT_FOUND", str(exc)) from exc
    idempotent = get_job_type(job.job_type).idempotent
    result = _running_result(job, task)
    task_started.send(InboxTaskBackend, task_result=result)
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = _json_return(value)
    except KeyboardInterrupt:
        raise  # as Django's own backend: a person pressing Ctrl-C means it
    except BaseException as exc:
        # Anything else the task raised, ``SystemExit`` (``exit()``) and ``GeneratorExit``
        # included, is the task's failure, recorded on its result: it must not end the worker.
        detail = _error_detail(exc)
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", timezone.now())
        result.errors.append(_task_error(detail))
        task_finished.send(InboxTaskBackend, task_result=result)
        message = f"{detail['exception_class']}: {detail['message']}"
        if idempotent:
            raise DefiniteFailure("TASK_ERROR", message, detail) from exc
        raise TaskOutcomeUnknown(message, detail) from exc
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    task_finished.send(InboxTaskBackend, task_result=result)
    return HandlerResult("OK", {"return_value": value})


def _running_result(job: Job, task: Task) -> TaskResult:
    """The ``TaskResult`` a running task (its context) and the signals see. Its attempts are
    read from the trail only when the task asks for its context."""
    workers = [job.worker_id]
    if task.takes_context:
        workers = list(
            AuditEvent.objects.filter(job_id=job.job_id, event_type=EventType.STARTED)
            .order_by("event_id")
            .values_list("actor", flat=True)
        ) or [job.worker_id]
    backend = str(job.payload.get("backend", "default"))
    running = TaskResultStatus.RUNNING
    return _unfinished_result(
        job, task, running, backend=backend, started=timezone.now(), workers=workers
    )


def _unfinished_result(
    job: Job,
    task: Task,
    status: TaskResultStatus,
    *,
    backend: str,
    started: dt.datetime | None = None,
    workers: Sequence[str] = (),
) -> TaskResult:
    """The ``TaskResult`` of a job that has not finished: just enqueued (READY, not started)
    or RUNNING (started now, by ``workers``); its arguments as the job stores them."""
    return TaskResult(
        task=task,
        id=job.job_id,
        status=status,
        enqueued_at=job.created_at,
        started_at=started,
        last_attempted_at=started,
        finished_at=None,
        args=job.payload.get("args", []),
        kwargs=job.payload.get("kwargs", {}),
        backend=backend,
        errors=[],
        worker_ids=list(workers),
    )


def _json_return(value: Any) -> Any:
    """The return value as stored, or an error: a result that is not JSON, or too big for the
    audit trail, is the task's failure (as Django's own backends treat it)."""
    value = normalize_json(value)
    problems = json_problems("return value", value)
    if problems:
        raise TypeError("; ".join(problems))
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > _max_json_bytes():
        raise ValueError(
            f"the return value is {size} bytes of JSON, over the limit of {_max_json_bytes()}"
        )
    return value


def _error_detail(exc: BaseException) -> dict[str, Any]:
    kind = type(exc)
    trace = "".join(format_exception(exc))
    return {
        "exception_class": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(exc),
        "traceback": trace[-TRACEBACK_CHARS:],
    }
