"""Django's documented ``django.tasks`` behaviour, run against this project's backend.

Each test states one thing Django's documentation (and its own backends' tests) promise a
caller: how a task is validated and overridden, what ``enqueue``/``aenqueue`` return, how a
result moves from READY to RUNNING to SUCCESSFUL or FAILED and what it records, the signals,
the task context. Where ``InboxTaskBackend`` deliberately differs, the test pins the
difference and docs/tasks.md ("Where this backend differs from Django's documented
behaviour") says why. Tasks run in an executor in this process (``_drain``), except the last
test, where enqueue, executor and reader are three processes.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.tasks import (
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
)
from django.tasks.backends.immediate import ImmediateBackend
from django.tasks.exceptions import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

from inbox import transitions
from inbox.models import Job
from inbox.tasks import InboxTaskBackend
from tests.tasks import sample
from tests.tasks.support import drain, drain_in_a_thread

R = TaskResultStatus
OURS = "inbox.tasks.InboxTaskBackend"


def _local_function() -> None:
    """Stands in for a function Django refuses as a task (see the module-level test)."""


# --- validation: refused before anything is stored --------------------------------------------


def test_backend_named_in_tasks_setting_is_ours_with_its_queues():
    backend = task_backends["default"]
    assert isinstance(backend, InboxTaskBackend)
    assert default_task_backend.alias == backend.alias == "default"
    assert backend.queues == {"default"}


@pytest.mark.django_db
@pytest.mark.parametrize("priority", [-100, 5, 100, 101, 3.5])
def test_priority_other_than_the_default_refused_because_unsupported(priority):
    assert task_backends["default"].supports_priority is False
    with pytest.raises(InvalidTask, match="does not support setting priority"):
        sample.add.using(priority=priority)
    assert sample.add.using(priority=0).enqueue(1, 2).status == R.READY


def test_unknown_queue_name_refused_naming_the_queue():
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid for backend"):
        sample.add.using(queue_name="nope")


def test_naive_run_after_refused():
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        sample.add.using(run_after=dt.datetime(2030, 1, 1))


def test_unknown_backend_alias_refused():
    with pytest.raises(InvalidTaskBackend, match="'elsewhere'"):
        sample.add.using(backend="elsewhere")


def test_function_not_at_module_level_refused():
    def inner() -> None: ...

    with pytest.raises(InvalidTask, match="module level"):
        task(inner)


def test_context_taking_task_without_a_context_argument_refused():
    with pytest.raises(InvalidTask, match="first argument of 'context'"):
        task(takes_context=True)(_local_function)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value", [dt.datetime.now(dt.UTC), {1, 2}, object()], ids=["datetime", "set", "object"]
)
def test_arguments_not_json_refused_as_type_error_and_nothing_stored(value):
    with pytest.raises(TypeError):
        sample.echo.enqueue(value)
    with pytest.raises(TypeError):
        async_to_sync(sample.echo.aenqueue)(key=value)
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value", [{1: "one"}, float("nan"), "nul\x00byte"], ids=["int-key", "nan", "nul"]
)
def test_values_django_normalizes_but_no_database_keeps_refused(value):
    # Django's own backends pass these through; a row in PostgreSQL's jsonb cannot hold
    # them unchanged (NaN, NUL) or gives them back changed (an int key comes back as text).
    with pytest.raises(InvalidTask, match="not JSON"):
        sample.echo.enqueue(value)
    assert not Job.objects.exists()


# --- using(): a new task, the original untouched ----------------------------------------------


def test_using_returns_a_new_task_and_leaves_the_original_alone():
    later = timezone.now() + dt.timedelta(hours=1)
    deferred = sample.add.using(run_after=later)
    chained = deferred.using(queue_name="default")
    assert deferred is not sample.add and deferred.run_after == later
    assert chained.run_after == later and chained.queue_name == "default"
    assert sample.add.run_after is None
    assert sample.add.using() == sample.add and sample.add.using() is not sample.add


@pytest.mark.django_db
def test_using_queue_name_enqueues_into_that_queue(settings):
    settings.TASKS = {"default": {"BACKEND": OURS, "QUEUES": ["default", "mail"]}}
    result = sample.add.using(queue_name="mail").enqueue(1, 1)
    assert result.task.queue_name == "mail"
    assert default_task_backend.get_result(result.id).task.queue_name == "mail"


@pytest.mark.django_db
def test_using_backend_keeps_the_result_with_that_backend(settings):
    settings.TASKS = {"default": {"BACKEND": OURS}, "other": {"BACKEND": OURS}}
    result = sample.add.using(backend="other").enqueue(2, 2)
    assert result.backend == "other"
    assert task_backends["other"].get_result(result.id).backend == "other"
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result.id)


@pytest.mark.django_db(transaction=True)
def test_immediate_backend_runs_at_enqueue_where_ours_waits_for_an_executor(settings):
    settings.TASKS = {
        "default": {"BACKEND": OURS},
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
    }
    at_once = sample.add.using(backend="immediate").enqueue(2, 3)
    assert isinstance(task_backends["immediate"], ImmediateBackend)
    assert (at_once.status, at_once.return_value) == (R.SUCCESSFUL, 5)
    later = sample.add.enqueue(2, 3)
    assert later.status == R.READY
    with pytest.raises(ValueError, match="not finished yet"):
        later.return_value  # noqa: B018
    drain()
    later.refresh()
    assert (later.status, later.return_value) == (R.SUCCESSFUL, 5)


def test_run_after_refused_by_the_immediate_backend_accepted_by_ours(settings):
    settings.TASKS = {
        "default": {"BACKEND": OURS},
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
    }
    later = timezone.now() + dt.timedelta(minutes=5)
    with pytest.raises(InvalidTask, match="does not support run_after"):
        sample.add.using(backend="immediate", run_after=later)
    assert sample.add.using(run_after=later).run_after == later


# --- enqueue and read back ----------------------------------------------------------------------


def _assert_unstarted(result: Any) -> None:
    assert result.status == R.READY and not result.is_finished
    assert result.enqueued_at is not None
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None,) * 3
    assert (result.errors, result.worker_ids, result.attempts) == ([], [], 0)
    with pytest.raises(ValueError, match="not finished yet"):
        result.return_value  # noqa: B018


@pytest.mark.django_db
def test_enqueue_returns_a_ready_result_with_its_arguments_as_json():
    result = sample.echo.enqueue(1, (2, 3), key="v")
    _assert_unstarted(result)
    assert (result.args, result.kwargs) == ([1, [2, 3]], {"key": "v"})
    assert result.task == sample.echo and result.backend == "default"
    read = default_task_backend.get_result(result.id)
    _assert_unstarted(read)
    assert (read.id, read.args, read.kwargs) == (result.id, [1, [2, 3]], {"key": "v"})
    assert read.enqueued_at == result.enqueued_at


@pytest.mark.django_db
def test_aenqueue_and_aget_result_behave_like_their_sync_twins():
    result = async_to_sync(sample.add.aenqueue)(4, 5)
    _assert_unstarted(result)
    read = async_to_sync(default_task_backend.aget_result)(result.id)
    assert (read.id, read.status, read.args) == (result.id, R.READY, [4, 5])
    assert async_to_sync(sample.add.aget_result)(result.id).id == result.id
    async_to_sync(result.arefresh)()
    assert result.status == R.READY


@pytest.mark.django_db
def test_get_result_of_an_unknown_id_raises_does_not_exist():
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("no-such-result")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(sample.add.aget_result)("no-such-result")


@pytest.mark.django_db
def test_get_result_through_another_task_raises_mismatch():
    result = sample.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch, match=r"tests\.tasks\.sample\.add"):
        sample.echo.get_result(result.id)
    with pytest.raises(TaskResultMismatch):
        async_to_sync(sample.echo.aget_result)(result.id)


@pytest.mark.django_db(transaction=True)
def test_result_of_a_task_that_no_longer_imports_raises_invalid_task():
    # A TaskResult needs its Task; a task renamed or removed after it was enqueued has none.
    doc = task_backends["default"].document(sample.add, [1, 2], {})
    gone = "tests.tasks.sample.renamed_away"
    doc.update(task_path=gone, object_id=gone)
    job = transitions.create_jobs([doc], requested_by="tasks:default").created[0]
    drain()
    assert Job.objects.get(job_id=job.job_id).result_code == "TASK_NOT_FOUND"
    with pytest.raises(InvalidTask, match="does not import"):
        default_task_backend.get_result(job.job_id)


@pytest.mark.django_db
def test_empty_queues_an_error_here_not_any_queue():
    # Django reads an empty QUEUES as "any queue"; here each queue is an executor scope.
    assert [m.id for m in InboxTaskBackend("x", {"QUEUES": []}).check()] == ["inbox.E020"]


# --- running: status, return value, errors ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_successful_task_result_finished_with_value_times_and_worker():
    result = sample.add.enqueue(2, 3)
    executor = drain()
    result.refresh()  # in place, as Django documents
    assert (result.status, result.is_finished, result.return_value) == (R.SUCCESSFUL, True, 5)
    assert result.worker_ids == [executor.worker_id] and result.attempts == 1
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert result.errors == []


@pytest.mark.django_db(transaction=True)
def test_async_task_runs_to_its_return_value():
    assert task_backends["default"].supports_async_task is True
    result = sample.async_add.enqueue(20, 22)
    drain_in_a_thread()
    assert default_task_backend.get_result(result.id).return_value == 42


@pytest.mark.django_db(transaction=True)
def test_status_reads_running_while_the_task_runs():
    result = sample.status_while_running.enqueue()
    assert result.status == R.READY
    drain()
    result.refresh()
    assert (result.status, result.return_value) == (R.SUCCESSFUL, "RUNNING")


@pytest.mark.django_db(transaction=True)
def test_failed_task_records_exception_class_path_and_traceback():
    result = sample.boom.enqueue("card declined")
    drain()
    result.refresh()
    assert (result.status, result.is_finished) == (R.FAILED, True)
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    [error] = result.errors
    assert error.exception_class_path == "tests.tasks.sample.PaymentDeclined"
    assert error.exception_class is sample.PaymentDeclined
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert error.traceback.endswith("PaymentDeclined: card declined\n")
    assert result.enqueued_at <= result.started_at <= result.finished_at


@pytest.mark.django_db(transaction=True)
def test_return_value_not_json_fails_the_task_with_type_error():
    result = sample.not_json.enqueue()
    drain()
    result.refresh()
    assert result.status == R.FAILED
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback


@pytest.mark.django_db(transaction=True)
def test_system_exit_inside_a_task_is_that_tasks_failure():
    failing = sample.raises_system_exit.enqueue(3)
    after = sample.add.enqueue(1, 1)
    drain()
    assert default_task_backend.get_result(failing.id).errors[0].exception_class is SystemExit
    assert default_task_backend.get_result(after.id).return_value == 2


@pytest.mark.django_db(transaction=True)
def test_non_idempotent_task_that_raises_reads_running_not_failed():
    result = sample.charge_fails.enqueue("o-contract")
    drain()
    result.refresh()
    # Not known whether it charged: not finished, so nobody enqueues it again unawares.
    assert (result.status, result.is_finished) == (R.RUNNING, False)
    assert result.errors[0].exception_class is sample.PaymentDeclined


# --- the task context ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_context_names_the_running_result_and_its_first_attempt():
    own = sample.own_id.enqueue()
    first = sample.attempt_number.enqueue()
    drain()
    assert default_task_backend.get_result(own.id).return_value == own.id
    assert default_task_backend.get_result(first.id).return_value == 1


@pytest.mark.django_db(transaction=True)
def test_context_attempt_counts_every_attempt_of_a_retried_task():
    result = sample.second_attempt_succeeds.enqueue()
    drain()
    result.refresh()
    assert (result.status, result.attempts) == (R.READY, 1)  # the retry waits its backoff
    assert result.errors[0].exception_class is RuntimeError
    time.sleep(0.3)  # past its backoff of 0.2 s
    drain()
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (R.SUCCESSFUL, 2, 2)


# --- signals and Django's log lines -------------------------------------------------------------


@pytest.fixture
def signalled() -> Iterator[list[tuple[str, type, str, str, list[str]]]]:
    """(signal, sender, result id, status, error classes) for every task signal sent."""
    seen: list[tuple[str, type, str, str, list[str]]] = []
    receivers = {}
    for name, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def receive(sender, task_result, _name=name, **kwargs):
            errors = [e.exception_class_path for e in task_result.errors]
            seen.append((_name, sender, task_result.id, str(task_result.status), errors))

        signal.connect(receive, weak=False)
        receivers[signal] = receive
    yield seen
    for signal, receive in receivers.items():
        signal.disconnect(receive)


@pytest.mark.django_db(transaction=True)
def test_signals_enqueued_started_finished_sent_in_order(signalled):
    result = sample.add.enqueue(1, 2)
    assert signalled == [("enqueued", InboxTaskBackend, result.id, "READY", [])]
    drain()
    assert [(s[0], s[1], s[2], s[3]) for s in signalled[1:]] == [
        ("started", InboxTaskBackend, result.id, "RUNNING"),
        ("finished", InboxTaskBackend, result.id, "SUCCESSFUL"),
    ]


@pytest.mark.django_db(transaction=True)
def test_finished_signal_of_a_failed_task_carries_its_error(signalled):
    result = sample.boom.enqueue("no")
    drain()
    assert signalled[-1] == (
        "finished",
        InboxTaskBackend,
        result.id,
        "FAILED",
        ["tests.tasks.sample.PaymentDeclined"],
    )


@pytest.mark.django_db(transaction=True)
def test_failed_attempt_with_a_retry_left_signalled_failed_but_reads_ready(signalled):
    result = sample.second_attempt_succeeds.enqueue()
    drain()
    assert signalled[-1][:4] == ("finished", InboxTaskBackend, result.id, "FAILED")
    read = default_task_backend.get_result(result.id)
    assert read.status == R.READY
    assert read.task.run_after == Job.objects.get(job_id=result.id).run_after is not None


@pytest.mark.django_db(transaction=True)
def test_enqueue_in_a_rolled_back_transaction_stores_nothing_but_was_signalled(signalled):
    with transaction.atomic():
        result = sample.add.enqueue(1, 2)
        transaction.set_rollback(True)
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)
    assert [s[0] for s in signalled] == ["enqueued"]  # sent before the commit that never came


@pytest.mark.django_db(transaction=True)
def test_django_tasks_log_lines_for_enqueue_run_and_failure(caplog):
    caplog.set_level(logging.DEBUG, logger="django.tasks")
    ok = sample.add.enqueue(1, 2)
    bad = sample.boom.enqueue("no")
    drain()
    lines = [
        (r.levelno, r.getMessage(), r.exc_info) for r in caplog.records if r.name == "django.tasks"
    ]
    said = [text for _level, text, _exc in lines]
    assert any(ok.id in t and "enqueued backend=default" in t for t in said)
    assert any(ok.id in t and "state=RUNNING" in t for t in said)
    assert any(ok.id in t and "state=SUCCESSFUL" in t for t in said)
    [failed] = [line for line in lines if bad.id in line[1] and "state=FAILED" in line[1]]
    assert failed[0] == logging.ERROR and failed[2][0] is sample.PaymentDeclined


# --- deferred ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_deferred_task_left_ready_until_its_run_after():
    assert task_backends["default"].supports_defer is True
    later = transitions.db_now() + dt.timedelta(hours=1)
    result = sample.add.using(run_after=later).enqueue(1, 2)
    drain()
    read = default_task_backend.get_result(result.id)
    assert (read.status, read.task.run_after) == (R.READY, later)


# --- from any process ----------------------------------------------------------------------------


@pytest.mark.slow
def test_result_enqueued_in_one_process_read_back_in_another(proc_db):
    assert task_backends["default"].supports_get_result is True
    result_id = proc_db.python(
        "from tests.tasks import sample; print(sample.add.enqueue(20, 22).id)"
    ).strip()
    proc_db.manage("run_executor", "--scope", "default", "--exit-when-idle")
    said = proc_db.python(
        "from django.tasks import default_task_backend as b\n"
        f"r = b.get_result({result_id!r})\n"
        "print(r.status, r.return_value, r.attempts, r.worker_ids[0].startswith('executor-'))"
    )
    assert said.split() == ["SUCCESSFUL", "42", "1", "True"]
