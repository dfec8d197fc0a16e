"""Replay race through HTTP: 16 identical POSTs at once against a live server make
one job; every other answer is a safe replay (200), never an error or a second job."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from audit.models import AuditEvent, EventType
from inbox.models import Job
from inbox.tokens import create_token
from tests.factories import noop_doc, save_doc

pytestmark = pytest.mark.django_db(transaction=True)

CALLERS = 16


def _post_all_at_once(url: str, token: str, body: bytes) -> list[int]:
    barrier = threading.Barrier(CALLERS)
    statuses: list[int] = []
    lock = threading.Lock()

    def call() -> None:
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        barrier.wait(timeout=30)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=call) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return statuses


def test_post_same_job_16_times_at_once_makes_one_job(live_server) -> None:
    token = create_token(producer="racer", actor="test").token
    doc = save_doc()
    statuses = _post_all_at_once(live_server.url + "/api/v1/jobs", token, json.dumps(doc).encode())
    assert sorted(statuses) == [200] * (CALLERS - 1) + [201]
    assert Job.objects.filter(job_id=doc["job_id"]).count() == 1
    requested = AuditEvent.objects.filter(job_id=doc["job_id"], event_type=EventType.REQUESTED)
    assert requested.count() == 1


def test_post_same_list_16_times_at_once_makes_each_job_once(live_server) -> None:
    token = create_token(producer="racer", actor="test").token
    docs = [noop_doc() for _ in range(50)]
    statuses = _post_all_at_once(live_server.url + "/api/v1/jobs", token, json.dumps(docs).encode())
    assert sorted(statuses) == [200] * (CALLERS - 1) + [201]
    assert Job.objects.count() == 50
    assert AuditEvent.objects.filter(event_type=EventType.REQUESTED).count() == 50
