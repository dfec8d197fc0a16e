"""TASK job documents sent by a producer (the ``enqueue`` command's path), not the backend:
validated like any job, and the executor runs only a real ``@task``."""

from __future__ import annotations

from typing import Any

import pytest

from inbox import transitions
from inbox.errors import JobValidationError
from inbox.executor import Executor
from inbox.models import Job, JobState
from tests.factories import PRODUCER

S = JobState


def task_doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "job_id": "t-1",
        "job_version": 1,
        "mission_id": "m",
        "job_type": "TASK",
        "object_id": "tests.tasks.sample.add",
        "idempotency_key": "task:t-1",
        "task_path": "tests.tasks.sample.add",
        "args": [1, 2],
        "kwargs": {},
        "queue_name": "default",
    }
    doc.update(overrides)
    return {k: v for k, v in doc.items() if v is not None}


def _problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(JobValidationError) as info:
        transitions.build_job(doc, requested_by=PRODUCER)
    return info.value.problems


def test_task_document_valid_without_a_vault_path():
    job, _events = transitions.build_job(task_doc(), requested_by=PRODUCER)
    assert (job.scope, job.vault_path, job.state) == ("default", "", S.READY)


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"vault_path": "notes/x.md"}, "vault_path: a TASK job touches no vault object"),
        ({"object_id": "something.else"}, "object_id: must equal task_path"),
        ({"task_path": "not a path", "object_id": "not a path"}, "task_path: must be a dotted"),
        ({"queue_name": "mail"}, "queue_name: 'mail' is not a queue of the task backend"),
        ({"args": {"a": 1}}, "args: must be list, got dict"),
        ({"kwargs": {"k": float("nan")}}, "kwargs['k']: nan is not a JSON number"),
        ({"retry": {"retries": 0}}, "retry.retries"),
        ({"job_type": "TASK_NON_IDEMPOTENT", "retry": {"retries": 2}}, "retry: unknown field"),
        ({"args": None}, "args: missing"),
    ],
)
def test_task_document_bad_field_refused(overrides, problem):
    assert any(problem in p for p in _problems(task_doc(**overrides))), _problems(
        task_doc(**overrides)
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "path", ["tests.tasks.sample.nothing_here", "os.path.join"], ids=["missing", "not-a-task"]
)
@pytest.mark.parametrize("job_type", ["TASK", "TASK_NON_IDEMPOTENT"])
def test_task_path_that_is_no_task_never_runs_and_fails_definitely(path, job_type):
    job, _created = transitions.create_job(
        task_doc(task_path=path, object_id=path, job_type=job_type), requested_by=PRODUCER
    )
    Executor(scope="default", exit_when_idle=True, out=lambda _line: None).run()
    stored = Job.objects.get(job_id=job.job_id)
    # Nothing ran, so even a non-idempotent task fails definitely (no reconciliation needed).
    assert (stored.state, stored.result_code) == (S.FAILED, "TASK_NOT_FOUND")


@pytest.mark.django_db
def test_producer_task_document_result_readable_through_the_default_backend():
    from django.tasks import TaskResultStatus, default_task_backend

    job, _created = transitions.create_job(task_doc(), requested_by=PRODUCER)
    result = default_task_backend.get_result(job.job_id)
    assert (result.status, result.args) == (TaskResultStatus.READY, [1, 2])
