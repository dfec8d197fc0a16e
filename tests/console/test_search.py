"""Search: prefix match on job id, object id, idempotency key and mission id,
exact and index-backed on both databases; on PostgreSQL an exact payload key=value filter."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from inbox.selectors import (
    PayloadFilterError,
    parse_payload_filter,
    prefix_upper_bound,
    search_matches,
)
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client: Client):
    return login(client, "look", "viewer")


def _list(client: Client, **params) -> str:
    response = client.get(reverse("console:job_list"), params, headers=hx("job-table"))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize(
    ("prefix", "bound"),
    [
        ("abc", "abd"),
        ("a", "b"),
        ("x\U0010ffff", "y"),
        ("\U0010ffff\U0010ffff", None),
        ("a\ud7ff", "a\ue000"),
        ("é", "ê"),
    ],
)
def test_prefix_upper_bound_is_the_least_string_after_every_extension(prefix, bound):
    assert prefix_upper_bound(prefix) == bound


def test_search_prefix_is_exact_for_odd_characters(client, viewer):
    """LIKE's % and _ and the range's edges are taken literally: only real prefixes match."""
    literal = make_job("noop", job_id="job%_a1", idempotency_key="k-odd-1")
    wildcard_bait = make_job("noop", job_id="jobXYa1", idempotency_key="k-odd-2")
    unicode_id = make_job("noop", job_id="naïve-1", idempotency_key="k-odd-3")
    html = _list(client, q="job%_")
    assert literal.job_id in html and wildcard_bait.job_id not in html
    assert unicode_id.job_id in _list(client, q="naï")
    assert unicode_id.job_id not in _list(client, q="nai")


def test_search_prefix_pages_like_any_list(client, viewer, monkeypatch):
    monkeypatch.setattr("console.jobs.PER_PAGE", 2)
    matching = [make_job("noop", mission_id="mission-77") for _ in range(3)]
    make_job("noop", mission_id="mission-8")
    first = _list(client, q="mission-7")
    assert sum(job.job_id in first for job in matching) == 2
    assert "Next →" in first


def _plan(sql: str, params) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # A tiny test table is cheapest to scan; ask which indexes the plan can use.
            cursor.execute("SET enable_seqscan = off")
            try:
                cursor.execute("EXPLAIN " + sql, params)
                return "\n".join(str(row) for row in cursor.fetchall())
            finally:
                cursor.execute("RESET enable_seqscan")
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return "\n".join(str(row) for row in cursor.fetchall())


def test_search_reads_each_identifier_as_an_index_range_in_one_query(transactional_db):
    for _ in range(3):
        make_job("noop")
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        search_matches("noop-ab")
    [query] = captured.captured_queries
    sql = query["sql"]
    if connection.vendor == "postgresql":
        plan = _plan(sql.replace("%", "%%"), [])
        # One index scan per identifier; the pattern-ops indexes serve LIKE.
        for index in (
            "inbox_job_job_id_6678ca10_like",
            "job_object_idx",
            "inbox_job_idempotency_key_d70ebe5a_like",
            "job_mission_idx",
        ):
            assert index in plan, plan
        assert "Seq Scan" not in plan
    else:
        plan = _plan(sql, [])
        # SQLite: every branch a range search on an index, no table scan.
        assert "SCAN inbox_job" not in plan.replace("USING", ""), plan
        for index in ("sqlite_autoindex_inbox_job_1", "job_object_idx", "job_mission_idx"):
            assert index in plan, plan


def test_search_a_prefix_matching_more_than_the_cap_is_bounded_and_says_so(client, viewer):
    for _ in range(5):
        make_job("noop", mission_id="wide-mission")
    matches = search_matches("wide-", cap=3)
    assert not matches.complete
    assert len(matches.ids) == 4  # cap + 1 from the mission index, nothing from the others
    assert search_matches("wide-", cap=5).complete


def test_search_page_notice_when_the_prefix_is_too_broad(client, viewer, monkeypatch):
    monkeypatch.setattr("inbox.selectors.SEARCH_CAP", 2)
    for _ in range(4):
        make_job("noop", mission_id="broad-1")
    html = _list(client, q="broad-")
    assert "the list holds only the first" in html


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("source_commit=a1b2c3", ("source_commit", "a1b2c3")),
        ("n=42", ("n", 42)),
        ('title="a b"', ("title", "a b")),
        ("flag=true", ("flag", True)),
        ("k = v ", ("k", "v")),
        ("obj={}", ("obj", "{}")),
    ],
)
def test_payload_filter_parses_key_and_typed_value(text, parsed):
    assert parse_payload_filter(text) == parsed


@pytest.mark.parametrize("text", ["novalue", "=x", ""])
def test_payload_filter_without_key_is_refused(text):
    with pytest.raises(PayloadFilterError):
        parse_payload_filter(text)


def test_payload_filter_exact_key_value_on_postgresql_or_a_clear_refusal(client, viewer):
    hit = make_job("save", source_commit="c0ffee")
    miss = make_job("save", source_commit="c0ffee-2")
    html = _list(client, payload="source_commit=c0ffee")
    if connection.vendor == "postgresql":
        assert hit.job_id in html and miss.job_id not in html
        assert hit.job_id not in _list(client, payload="source_commit=c0ff")
    else:
        assert "The payload filter needs PostgreSQL" in html
        # Refused, not silently ignored as "everything": the field is named in the message.
        assert "payload:" in html


def test_worker_filter_reads_the_partial_worker_index(client, viewer):
    """The worker filter matches only that worker's jobs and reads ``job_worker_set_idx``,
    which holds only jobs that have a worker (never-claimed jobs write no entry)."""
    from django.test.utils import CaptureQueriesContext

    from console.filters import JobFilter
    from inbox.models import Job, JobState

    held = make_job("noop", JobState.EXECUTING)
    make_job("noop")
    assert held.worker_id
    html = _list(client, worker=held.worker_id)
    assert held.job_id in html
    with CaptureQueriesContext(connection) as captured:
        list(JobFilter({"worker": held.worker_id}, queryset=Job.objects.all()).qs[:5])
    [query] = captured.captured_queries
    plan = _plan(query["sql"].replace("%", "%%"), [])
    assert "job_worker_set_idx" in plan, plan
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'job_worker_set_idx'")
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'job_worker_set_idx'")
        (definition,) = cursor.fetchone()
    # Partial: the never-claimed READY job above has no entry in it.
    assert "WHERE" in definition and "worker_id" in definition.split("WHERE")[1], definition
