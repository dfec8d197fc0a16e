"""/metrics: who may scrape, the metric names and their values on a known data set,
the derived states (orphaned jobs, stuck runs) and the audit-event counters."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from django.db import connection
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from audit.events import record_event
from audit.models import AuditEvent, EventType
from console import metrics
from console.models import AuditTally, AuditTallyCount
from core.clock import db_now
from inbox import transitions, workers
from inbox.models import Job, JobState, Worker
from inbox.scopes import pause_scope
from runs.models import Run
from runs.transitions import plan_run
from tests.factories import make_job
from tests.runs.support import StaticConsolidator

pytestmark = pytest.mark.django_db


def scrape(client: Client, **extra) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


# --- access -------------------------------------------------------------------------------------


def test_metrics_from_loopback_without_token_setting_is_served(client: Client) -> None:
    assert client.get("/metrics").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200


def test_metrics_from_elsewhere_without_token_setting_is_forbidden(client: Client) -> None:
    response = client.get("/metrics", REMOTE_ADDR="10.1.2.3")
    assert response.status_code == 403
    assert b"METRICS_TOKEN" in response.content
    assert b"console_jobs" not in response.content


def test_metrics_forwarded_by_a_local_proxy_is_forbidden(client: Client) -> None:
    response = client.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9"})
    assert response.status_code == 403
    assert client.get("/metrics", headers={"Forwarded": "for=203.0.113.9"}).status_code == 403


def test_metrics_with_token_setting_needs_the_bearer_token(client: Client, settings) -> None:
    settings.METRICS_TOKEN = "scrape-secret-1"
    assert client.get("/metrics").status_code == 401  # loopback no longer enough
    wrong = client.get("/metrics", headers={"Authorization": "Bearer scrape-secret-2"})
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"].startswith("Bearer")
    right = {"Authorization": "Bearer scrape-secret-1"}
    assert client.get("/metrics", headers=right).status_code == 200
    assert client.get("/metrics", headers=right, REMOTE_ADDR="10.1.2.3").status_code == 200


def test_metrics_post_is_not_allowed(client: Client) -> None:
    assert client.post("/metrics").status_code == 405


def test_metrics_route_declares_the_metrics_policy() -> None:
    from tests.console.test_routes import ROUTES

    [route] = [r for r in ROUTES if r.route == "metrics"]
    assert route.policy.kind == "metrics"


# --- a known data set ---------------------------------------------------------------------------


@pytest.fixture
def known(db) -> dict[str, object]:
    """Jobs in several states, an alive, a dead and a stopped worker, three runs."""
    workers.register_worker(worker_id="w-alive", kind="executor", scope="save")
    workers.register_worker(worker_id="w-dead", kind="executor", scope="save", lease_seconds=5)
    workers.register_worker(worker_id="w-stopped", kind="consolidator", store="s3")
    workers.mark_stopped(worker_id="w-stopped")
    now = db_now()
    Worker.objects.filter(worker_id="w-dead").update(last_seen_at=now - dt.timedelta(minutes=5))
    make_job("save")
    make_job("save")
    make_job("noop")
    held = make_job("save", state=JobState.CLAIMED, worker_id="w-alive", lease_seconds=30)
    orphan = make_job("save", state=JobState.CLAIMED, worker_id="w-dead", lease_seconds=30)
    ghost = make_job("save", state=JobState.EXECUTING, worker_id="ghost", lease_seconds=300)
    make_job("delete", state=JobState.OUTCOME_UNKNOWN)
    make_job("delete", state=JobState.CREATED)
    make_job("save", state=JobState.SUCCEEDED)
    make_job("save", state=JobState.SUCCEEDED)
    make_job("noop", state=JobState.FAILED)
    # Runs: s1 owned by a live worker (fine), s2 by a dead one, s3 quiet for too long.
    plan_run(store="s1", owner="w-alive", lease_seconds=600, consolidator=StaticConsolidator())
    plan_run(store="s2", owner="w-dead", lease_seconds=600, consolidator=StaticConsolidator())
    quiet = plan_run(
        store="s3",
        owner="w-alive",
        lease_seconds=3600,
        consolidator=StaticConsolidator(),
        at=now - dt.timedelta(seconds=600),
    )
    pause_scope("noop", actor="ops", reason="test")
    return {"held": held, "orphan": orphan, "ghost": ghost, "quiet": quiet}


def test_metrics_values_on_a_known_data_set(client: Client, known) -> None:
    s = scrape(client)
    assert value(s, "console_jobs", state="READY", scope="save") == 2
    assert value(s, "console_jobs", state="READY", scope="noop") == 1
    assert value(s, "console_jobs", state="READY", scope="delete") == 0
    assert value(s, "console_jobs", state="CLAIMED", scope="save") == 2
    assert value(s, "console_jobs", state="EXECUTING", scope="save") == 1
    assert value(s, "console_jobs", state="OUTCOME_UNKNOWN", scope="delete") == 1
    assert value(s, "console_jobs", state="CREATED", scope="delete") == 1
    assert value(s, "console_jobs", state="SUCCEEDED", scope="save") == 2
    assert value(s, "console_jobs", state="FAILED", scope="noop") == 1
    assert sum(v for (name, _), v in s.items() if name == "console_jobs") == Job.objects.count()
    assert all(value(s, "console_jobs_estimated", state=state) == 0 for state in JobState.values)
    assert 0 < value(s, "console_ready_oldest_age_seconds", scope="save") < 120
    assert value(s, "console_ready_oldest_age_seconds", scope="delete") == 0
    assert value(s, "console_leases_lapsing_next_minute") == 2  # the two 30 s leases
    assert value(s, "console_leases_lapsed") == 0
    assert value(s, "console_jobs_orphaned") == 2  # held by a dead worker and by no worker
    assert value(s, "console_outcome_unknown_jobs") == 1
    assert value(s, "console_approvals_pending") == 1
    assert value(s, "console_outcome_unknown_oldest_age_seconds") >= 0
    assert value(s, "console_runs_active", store="s1") == 1
    assert value(s, "console_runs_stuck", store="s1") == 0
    assert value(s, "console_runs_stuck", store="s2") == 1  # its owner is dead
    assert value(s, "console_runs_stuck", store="s3") == 1  # no progress for 10 minutes
    assert value(s, "console_workers", kind="executor", state="alive") == 1
    assert value(s, "console_workers", kind="executor", state="dead") == 1
    assert ("console_workers", (("kind", "consolidator"), ("state", "dead"))) not in s
    assert value(s, "console_scope_paused", scope="noop") == 1
    assert value(s, "console_scope_paused", scope="save") == 0
    assert value(s, "console_scrape_duration_seconds") > 0


def test_metrics_names_follow_prometheus_conventions(client: Client, known) -> None:
    text = client.get("/metrics").content.decode()
    families = list(text_string_to_metric_families(text))
    assert families
    for family in families:
        assert family.name.startswith("console_")
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples)
        if "age" in family.name or "duration" in family.name:
            assert family.name.endswith("_seconds")
        assert family.documentation


def test_metrics_ready_age_skips_deferred_jobs_and_counts_from_run_after(known) -> None:
    now = db_now()
    later = now + dt.timedelta(hours=1)
    for job in Job.objects.filter(state=JobState.READY, scope="save"):
        # Deferred for an hour: not waiting yet, so not "late".
        Job.objects.filter(job_id=job.job_id).update(run_after=later)
    s = {m.name: m for m in metrics.collect_metrics()}
    ages = {x.labels["scope"]: x.value for x in s["console_ready_oldest_age_seconds"].samples}
    assert ages["save"] == 0
    soon = metrics.collect_metrics(at=later + dt.timedelta(seconds=30))
    ages = {
        x.labels["scope"]: x.value
        for m in soon
        if m.name == "console_ready_oldest_age_seconds"
        for x in m.samples
    }
    assert ages["save"] == pytest.approx(30, abs=1)


def test_orphaned_counts_only_running_leases_of_dead_holders(known) -> None:
    now = db_now()
    assert metrics.orphaned_jobs(now) == 2
    workers.beat(worker_id="w-dead")  # the holder comes back
    assert metrics.orphaned_jobs(db_now()) == 1
    # Once the lease lapses it is the sweep's business, no longer an orphan.
    assert metrics.orphaned_jobs(now + dt.timedelta(hours=1)) == 0


def test_stuck_runs_follow_the_threshold_setting(known, settings) -> None:
    now = db_now()
    assert metrics.stuck_runs(now) == {"s1": 0, "s2": 1, "s3": 1}
    settings.RUNS_STUCK_AFTER_SECONDS = 3600
    assert metrics.stuck_runs(now) == {"s1": 0, "s2": 1, "s3": 0}
    # A run past its lease is not effectively active: neither active nor stuck.
    assert metrics.stuck_runs(now + dt.timedelta(hours=2)) == {}
    assert Run.objects.filter(status="active").count() == 3


# --- estimated counts ---------------------------------------------------------------------------


def test_job_counts_above_the_exact_cap_are_estimated_and_flagged(known) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE inbox_job")
    counts = metrics.job_counts(exact_cap=1)
    assert counts.estimated == {"READY", "CLAIMED", "SUCCEEDED"}
    # A small table is sampled whole (PostgreSQL) or counted (SQLite): the estimate is exact.
    assert counts.by_state_scope[("READY", "save")] == 2
    assert counts.by_state_scope[("CLAIMED", "save")] == 2
    assert counts.by_state_scope[("SUCCEEDED", "save")] == 2
    assert counts.by_state_scope[("FAILED", "noop")] == 1


# --- counters -----------------------------------------------------------------------------------


def _events_by_type() -> dict[str, int]:
    out: dict[str, int] = {}
    for event_type in AuditEvent.objects.values_list("event_type", flat=True):
        out[event_type] = out.get(event_type, 0) + 1
    return out


def test_audit_event_counters_match_the_log_and_grow(known) -> None:
    tally = metrics.EventTally()
    later = db_now() + dt.timedelta(minutes=5)  # everything so far is settled by then
    assert dict(+tally.totals(later)) == _events_by_type()
    settled = tally.settled_id
    assert settled == max(AuditEvent.objects.values_list("event_id", flat=True))
    job = make_job("noop")
    transitions.claim_job(job.job_id, worker_id="w-alive", lease_seconds=60)
    record_event(event_type=EventType.OPERATOR_ACTION, actor="ops", detail={"n": 1})
    # New events are younger than the settle window: counted live, not cached.
    totals = tally.totals(db_now())
    assert dict(+totals) == _events_by_type()
    assert tally.settled_id == settled
    # Counted again later (and again): never twice.
    assert dict(+tally.totals(later + dt.timedelta(minutes=5))) == _events_by_type()
    assert dict(+tally.totals(later + dt.timedelta(minutes=6))) == _events_by_type()
    assert tally.settled_id > settled


def test_audit_event_counter_in_the_scrape_counts_every_type(client: Client, known) -> None:
    metrics.TALLY.reset()
    s = scrape(client)
    expected = _events_by_type()
    for event_type in EventType.values:
        got = value(s, "console_audit_events_total", event_type=event_type)
        assert got == expected.get(event_type, 0)


def test_a_new_process_reads_the_stored_tally_instead_of_counting_the_log(known) -> None:
    later = db_now() + dt.timedelta(minutes=5)
    first = metrics.EventTally()
    assert dict(+first.totals(later)) == _events_by_type()
    stored = AuditTally.objects.get(pk=1)
    assert stored.settled_id == first.settled_id > 0
    assert dict(AuditTallyCount.objects.values_list("event_type", "events")) == _events_by_type()
    # Make the stored count wrong on purpose: a new process must show it, proving it read the
    # store and did not count the log again.
    AuditTallyCount.objects.filter(event_type=EventType.CLAIMED).update(events=1000)
    fresh = metrics.EventTally()
    totals = fresh.totals(later)
    assert totals[EventType.CLAIMED] == 1000
    assert fresh.settled_id == stored.settled_id


def test_tallies_of_two_processes_never_count_an_event_twice(known) -> None:
    later = db_now() + dt.timedelta(minutes=5)
    one, two = metrics.EventTally(), metrics.EventTally()
    one.totals(later)
    record_event(event_type=EventType.OPERATOR_ACTION, actor="ops", detail={"n": 1})
    # The second process settles the new event and moves the stored tally on ...
    assert dict(+two.totals(later + dt.timedelta(minutes=1))) == _events_by_type()
    record_event(event_type=EventType.OPERATOR_ACTION, actor="ops", detail={"n": 2})
    # ... so the first one, behind it, reloads instead of adding the same events again.
    assert dict(+one.totals(later + dt.timedelta(minutes=2))) == _events_by_type()
    newest = max(AuditEvent.objects.values_list("event_id", flat=True))
    assert one.settled_id == AuditTally.objects.get(pk=1).settled_id == newest
    assert dict(AuditTallyCount.objects.values_list("event_type", "events")) == _events_by_type()
    assert dict(+two.totals(later + dt.timedelta(minutes=3))) == _events_by_type()


def test_a_failed_settle_changes_neither_copy(known, monkeypatch) -> None:
    later = db_now() + dt.timedelta(minutes=5)
    tally = metrics.EventTally()
    tally.totals(later)
    before = (tally.settled_id, Counter(tally.settled))
    record_event(event_type=EventType.OPERATOR_ACTION, actor="ops", detail={"n": 1})

    def refuse(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(metrics.AuditTally, "save", refuse)
    with pytest.raises(RuntimeError):
        tally.totals(later + dt.timedelta(minutes=1))
    assert (tally.settled_id, tally.settled) == before
    assert AuditTally.objects.get(pk=1).settled_id == before[0]
    monkeypatch.undo()
    assert dict(+tally.totals(later + dt.timedelta(minutes=1))) == _events_by_type()
