"""The django.tasks backend through Django's own task API: enqueue → run → result.

Every test enqueues with ``some_task.enqueue(...)`` and reads back with ``get_result`` /
``TaskResult.refresh``; the executor runs in-process against the suite's database (SQLite or
PostgreSQL, whichever ``DATABASE_URL`` names).
"""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist

from audit.models import AuditEvent, EventType
from inbox import reconcile, transitions
from inbox.jobtypes import TASK, TASK_NON_IDEMPOTENT, scopes
from inbox.models import Job, JobState
from inbox.tasks import InboxTaskBackend, TaskArgumentsNotJSON
from tests.factories import OPERATOR, make_job
from tests.tasks import sample
from tests.tasks.support import drain, drain_in_a_thread, unknown_task

S = JobState


def _events(job_id: str) -> list[str]:
    return list(AuditEvent.objects.for_job(job_id).values_list("event_type", flat=True))


# --- the backend as Django sees it ----------------------------------------------------------


def test_backend_flags_true_only_for_what_works():
    backend = task_backends["default"]
    assert isinstance(backend, InboxTaskBackend)
    assert backend.supports_defer
    assert backend.supports_get_result
    assert backend.supports_async_task
    assert not backend.supports_priority


def test_task_with_priority_refused_by_django_because_priority_is_unsupported():
    with pytest.raises(InvalidTask, match="priority"):
        sample.add.using(priority=5)


def test_backend_queues_are_executor_scopes():
    assert "default" in scopes()


@pytest.mark.parametrize(
    ("queues", "code"), [([], "inbox.E020"), (["default", "bad queue!"], "inbox.E021")]
)
def test_backend_check_bad_queues_reported(queues, code):
    backend = InboxTaskBackend("x", {"QUEUES": queues})
    assert [m.id for m in backend.check()] == [code]


# --- enqueue ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_enqueue_creates_ready_task_job_scoped_to_its_queue():
    result = sample.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.backend == "default"
    job = Job.objects.get(job_id=result.id)
    assert (job.state, job.job_type, job.scope) == (S.READY, TASK, "default")
    assert (job.object_id, job.vault_path) == ("tests.tasks.sample.add", "")
    assert job.payload["args"] == [2, 3] and job.payload["kwargs"] == {}
    assert job.idempotency_key == f"task:{result.id}"
    assert result.enqueued_at == job.created_at
    assert _events(job.job_id) == [EventType.REQUESTED, EventType.READY]
    assert transitions.fingerprint_ok(job)


@pytest.mark.django_db
def test_enqueue_non_idempotent_task_creates_non_idempotent_job():
    job = Job.objects.get(job_id=sample.charge.enqueue("o-1").id)
    assert job.job_type == TASK_NON_IDEMPOTENT


@pytest.mark.django_db
def test_enqueue_other_queue_scoped_to_that_queue(settings):
    settings.TASKS = {
        "default": {"BACKEND": "inbox.tasks.InboxTaskBackend", "QUEUES": ["default", "mail"]}
    }
    result = sample.add.using(queue_name="mail").enqueue(1, 1)
    assert Job.objects.get(job_id=result.id).scope == "mail"
    assert "mail" in scopes()
    assert default_task_backend.get_result(result.id).task.queue_name == "mail"


@pytest.mark.django_db
def test_enqueue_unknown_queue_refused_and_nothing_written():
    with pytest.raises(InvalidTask, match="Queue 'nope'"):
        sample.add.using(queue_name="nope").enqueue(1, 2)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_enqueue_queue_that_cannot_be_a_scope_refused_and_nothing_written(settings):
    settings.TASKS = {
        "default": {"BACKEND": "inbox.tasks.InboxTaskBackend", "QUEUES": ["default", "bad q!"]}
    }
    with pytest.raises(InvalidTask, match="'bad q!' is not a valid scope name"):
        sample.add.using(queue_name="bad q!").enqueue(1, 2)
    assert not Job.objects.exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_enqueue_tuple_argument_stored_as_list_like_django():
    result = sample.echo.enqueue((1, 2), key=("a",))
    assert result.args == [[1, 2]]
    assert Job.objects.get(job_id=result.id).payload["kwargs"] == {"key": ["a"]}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        ((dt.datetime(2026, 1, 1, tzinfo=dt.UTC),), {}, "args[0]: a datetime is not JSON"),
        ((), {"when": {1, 2}}, "kwargs['when']: a set is not JSON"),
        (([1, math.nan],), {}, "args[0][1]: nan is not a JSON number"),
        (({1: "one"},), {}, "key 1 is a int; JSON keys are text"),
        (("a\x00b",), {}, "args[0]: must not contain NUL"),
        (("\ud800",), {}, "args[0]: must be valid Unicode text"),
        ((object(),), {}, "args[0]: a object is not JSON"),
    ],
    ids=["datetime", "set", "nan", "int-key", "nul", "surrogate", "object"],
)
def test_enqueue_arguments_not_json_refused_clearly_and_nothing_written(args, kwargs, named):
    with pytest.raises(TaskArgumentsNotJSON, match="arguments are not JSON") as info:
        sample.echo.enqueue(*args, **kwargs)
    assert named in str(info.value)
    assert isinstance(info.value, InvalidTask)
    assert not Job.objects.exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_enqueue_arguments_over_the_size_limit_refused(settings):
    settings.INBOX_TASK_MAX_JSON_BYTES = 100
    with pytest.raises(TaskArgumentsNotJSON, match="over the limit of 100"):
        sample.echo.enqueue("x" * 200)
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_enqueue_inside_a_rolled_back_transaction_leaves_no_job():
    with pytest.raises(RuntimeError), transaction.atomic():
        sample.add.enqueue(1, 2)
        raise RuntimeError("the request failed")
    assert not Job.objects.exists()
    assert not AuditEvent.objects.exists()


# --- run and result -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sync_task_enqueue_run_result_successful_with_return_value():
    result = sample.add.enqueue(2, 3)
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished
    assert result.return_value == 5
    assert result.errors == []
    assert result.attempts == 1
    assert result.worker_ids[0].startswith("executor-default-")
    assert result.enqueued_at <= result.started_at <= result.finished_at
    executed = AuditEvent.objects.get(job_id=result.id, event_type=EventType.EXECUTED)
    assert executed.detail["return_value"] == 5


@pytest.mark.django_db(transaction=True)
def test_async_task_runs_and_returns():
    result = sample.async_add.enqueue(4, 5)
    drain_in_a_thread()
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 9)


@pytest.mark.django_db(transaction=True)
def test_task_taking_context_sees_its_attempt():
    result = sample.attempt_number.enqueue()
    drain()
    assert default_task_backend.get_result(result.id).return_value == 1


@pytest.mark.django_db(transaction=True)
def test_raising_task_failed_with_exception_class_and_message_kept():
    result = sample.boom.enqueue("card declined")
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.is_finished
    [error] = result.errors
    assert error.exception_class is sample.PaymentDeclined
    assert error.exception_class_path == "tests.tasks.sample.PaymentDeclined"
    assert "card declined" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    job = Job.objects.get(job_id=result.id)
    assert (job.state, job.result_code) == (S.FAILED, "TASK_ERROR")
    assert "PaymentDeclined: card declined" in job.last_error


@pytest.mark.django_db(transaction=True)
def test_task_returning_non_json_fails_like_djangos_backends():
    result = sample.not_json.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError


@pytest.mark.django_db
def test_get_result_unknown_id_raises_task_result_does_not_exist():
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("no-such-task")


@pytest.mark.django_db
def test_get_result_of_a_job_that_is_not_a_task_raises_does_not_exist():
    job = make_job("noop")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(job.job_id)


@pytest.mark.django_db
def test_get_result_of_another_backends_task_raises_does_not_exist(settings):
    result = sample.add.enqueue(1, 2)
    settings.TASKS = {
        "default": {"BACKEND": "inbox.tasks.InboxTaskBackend"},
        "other": {"BACKEND": "inbox.tasks.InboxTaskBackend"},
    }
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["other"].get_result(result.id)


@pytest.mark.django_db
def test_get_result_through_the_task_checks_it_is_that_task():
    from django.tasks.exceptions import TaskResultMismatch

    result = sample.add.enqueue(1, 2)
    assert sample.add.get_result(result.id).id == result.id
    with pytest.raises(TaskResultMismatch):
        sample.echo.get_result(result.id)


# --- deferred tasks -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_deferred_task_not_claimed_before_its_time_and_claimed_after():
    later = transitions.db_now() + dt.timedelta(hours=1)
    result = sample.add.using(run_after=later).enqueue(1, 2)
    job = Job.objects.get(job_id=result.id)
    assert job.run_after == later
    assert default_task_backend.get_result(result.id).task.run_after == later
    claim = {"scope": "default", "worker_id": "w", "lease_seconds": 30}
    assert transitions.claim_next_jobs(**claim, at=later - dt.timedelta(seconds=1)) == []
    assert Job.objects.get(job_id=result.id).state == S.READY
    [claimed] = transitions.claim_next_jobs(**claim, at=later)
    assert claimed.job_id == result.id


@pytest.mark.django_db(transaction=True)
def test_deferred_task_left_alone_by_a_running_executor():
    result = sample.add.using(run_after=transitions.db_now() + dt.timedelta(hours=1)).enqueue(1, 2)
    drain()
    assert Job.objects.get(job_id=result.id).state == S.READY
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY


# --- non-idempotent tasks -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_non_idempotent_task_runs_once_and_succeeds():
    result = sample.charge.enqueue("o-7")
    drain()
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "charged o-7")


@pytest.mark.django_db(transaction=True)
def test_non_idempotent_task_that_raises_parked_unknown_until_an_operator_decides():
    result = sample.charge_fails.enqueue("o-8")
    drain()
    job = Job.objects.get(job_id=result.id)
    assert job.state == S.OUTCOME_UNKNOWN
    result.refresh()
    # Not FAILED: a caller must not enqueue it again while nobody knows whether it charged.
    assert result.status == TaskResultStatus.RUNNING
    assert not result.is_finished
    assert result.errors[0].exception_class is sample.PaymentDeclined
    drain()  # nothing runs it again
    assert _events(job.job_id).count(EventType.STARTED) == 1

    reconcile.decide_unprobed(
        job.job_id, actor=OPERATOR, reason="no charge at the bank", applied=False
    )
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert Job.objects.get(job_id=job.job_id).result_code == reconcile.NOT_APPLIED


@pytest.mark.django_db
def test_unknown_task_decided_applied_reads_successful():
    job = unknown_task()
    reconcile.decide_unprobed(job.job_id, actor=OPERATOR, reason="the bank shows it", applied=True)
    assert default_task_backend.get_result(job.job_id).status == TaskResultStatus.SUCCESSFUL


@pytest.mark.django_db
def test_probe_outcomes_refuse_a_task_and_decide_unprobed_refuses_a_delete():
    delete = make_job("delete", S.OUTCOME_UNKNOWN)
    with pytest.raises(reconcile.ReconcileRefused, match="decided from vault evidence"):
        reconcile.decide_unprobed(delete.job_id, actor=OPERATOR, reason="x", applied=True)
    job = unknown_task()
    for refused in (reconcile.confirm_deleted, reconcile.not_applied):
        with pytest.raises(reconcile.ReconcileRefused, match="no vault probe"):
            refused(job.job_id, actor=OPERATOR, reason="x")
    noted = reconcile.annotate(job.job_id, actor=OPERATOR, reason="asked the bank")
    assert (noted.state, noted.result_code) == (S.OUTCOME_UNKNOWN, reconcile.DIAG_UNPROBED)
    [assessment] = reconcile.assess([noted])
    assert assessment.action == reconcile.SKIP  # the auto-reconciler never decides a task
