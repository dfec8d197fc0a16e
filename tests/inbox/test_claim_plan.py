"""The claim's choice of rows plans one way only (inbox 0012).

On PostgreSQL the claim orders by ``created_at AT TIME ZONE 'UTC'``, an order only
``job_claim_order_idx`` provides, with its scope and limit in the statement text: PostgreSQL
can then plan the executor's turn once per connection. The failure it prevents: after a bulk
load, statistics say every row is READY, and a plan ordered by plain ``created_at`` took the
creation-order index, which walks every finished job before the next READY one.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection, transaction

from inbox import transitions
from inbox.models import JobState
from inbox.writer.sql import pick_sql
from inbox.writer.values import DbClock
from tests.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "w-plan"


def _claim(scope: str, limit: int = 10) -> list[str]:
    with transaction.atomic():
        jobs = transitions.claim_and_begin_jobs(
            scope=scope, worker_id=WORKER, lease_seconds=30, limit=limit, authorize=lambda j: True
        )
    return [job.job_id for job in jobs]


@pytest.mark.postgresql
def test_claim_takes_the_claim_order_index_when_every_row_looks_ready():
    now = transitions.db_now()
    ids = [
        make_job("noop", JobState.READY, at=now + dt.timedelta(microseconds=n)).job_id
        for n in range(60)
    ]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE inbox_job")  # every row READY, every row of scope noop
    pick = transitions.Pick("noop", 10, unless_paused=True)
    sql, params = pick_sql(pick, DbClock(), [])
    assert params == []  # nothing a plan could depend on
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a 60-row table would be scanned
        cursor.execute("EXPLAIN " + sql.replace("%%", "%"))
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "job_claim_order_idx" in plan, plan
    assert "Sort" not in plan, plan
    # The order is the claim order all the same: oldest first.
    assert _claim("noop", limit=3) == ids[:3]


def test_claim_of_a_scope_with_quotes_and_percent_signs_is_data_not_sql():
    odd = "it's 100%'); DROP TABLE inbox_job; --"
    assert _claim(odd) == []
    job = make_job("noop", JobState.READY)
    assert _claim("noop") == [job.job_id]
