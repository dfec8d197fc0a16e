"""``/metrics`` in the Prometheus text format, computed from the database at scrape
time with bounded queries.

Gauges (each one or a few indexed, capped queries; nothing scans a whole table):

- ``console_jobs{state,scope}``: exact while a state holds at most ``METRICS_EXACT_COUNT_CAP``
  jobs (1,000); above that an estimate — on PostgreSQL a repeatable ~5,000-row
  ``TABLESAMPLE`` scaled to the planner's row count, on SQLite the count capped at
  ``core.paging.COUNT_CAP`` per scope. ``console_jobs_estimated{state}`` says which.
- ``console_ready_oldest_age_seconds{scope}``: how long the next job an executor of the scope
  would claim has been waiting (since it was created, or since its ``run_after`` if later);
  deferred jobs not yet due do not count. 0 when nothing is waiting.
- ``console_leases_lapsing_next_minute``, ``console_leases_lapsed`` (awaiting the sweep),
  ``console_jobs_orphaned`` (held, lease running, holder dead),
  ``console_outcome_unknown_jobs`` and
  ``console_outcome_unknown_oldest_age_seconds``, ``console_approvals_pending``: capped at
  1,000 like the dashboard's alert tiles (``inbox.selectors.ALERT_CAP``).
- ``console_runs_active{store}``, ``console_runs_stuck{store}`` (owner dead or no progress),
  ``console_workers{kind,state}`` (alive / dead; cleanly stopped workers are neither),
  ``console_scope_paused{scope}``, ``console_scrape_duration_seconds``.

Counters that survive restarts: ``console_audit_events_total{event_type}``, the audit log's
events by type. Events are never deleted (the log is append-only), so the count only grows and
is the same in every process. A running tally up to a settled event id (events older than
``SETTLE_SECONDS``, so a transaction that committed late is not skipped) is stored in the
database (``console.models.AuditTally``) and each scrape counts only the newer events, by
primary-key range; only the very first scrape counts the whole log (5-7 s at 30M events), not
the first of every process.

Access (``console.policy.metrics_route``): ``Authorization: Bearer <METRICS_TOKEN>`` when the
setting is made; without it only loopback clients, and never a request a proxy forwarded.

"Stuck" and "orphaned" are counted with the one rule the pages use too
(``runs.selectors.stuck_reasons``, ``inbox.selectors.orphaned_jobs``).
"""

from __future__ import annotations

import datetime as dt
import hmac
import ipaddress
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Max, Min, Q
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from audit.models import AuditEvent, EventType
from console.models import AuditTally, AuditTallyCount
from console.policy import metrics_route
from core import paging
from core.clock import db_now
from inbox import selectors
from inbox.jobtypes import scopes
from inbox.models import Job, JobState, ScopePause, Worker, WorkerStatus
from inbox.selectors import ALERT_CAP, state_counts
from inbox.workers import is_alive
from runs import selectors as run_selectors
from runs.models import Run, RunStatus

# Audit events younger than this are counted afresh on every scrape, never cached: on
# PostgreSQL ids are handed out before commit, so a late commit could fall below a cached id.
SETTLE_SECONDS = 60
# Rows a PostgreSQL TABLESAMPLE aims at when a state is too large to count. At 1M jobs a
# 10,000-row sample cost 17 ms of a 51 ms p95 scrape; 5,000 halves that, and a state above the
# exact cap (1,000) still shows in the sample with a few rows (the gauge says it is estimated).
SAMPLE_ROWS = 5_000
# Heartbeat rows read at most (forget_workers keeps the table small).
WORKER_ROWS = 10_000


# --- access -----------------------------------------------------------------------------------


def _loopback(request: HttpRequest) -> bool:
    if request.headers.get("X-Forwarded-For") or request.headers.get("Forwarded"):
        return False  # came through a proxy: the proxy is local, the client may not be
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def _refused(request: HttpRequest) -> HttpResponse | None:
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        scheme, _, value = sent.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            value.strip().encode(), token.encode()
        ):
            return None
        response = HttpResponse("a valid METRICS_TOKEN bearer token is needed\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if _loopback(request):
        return None
    return HttpResponse(
        "/metrics answers loopback clients only; set METRICS_TOKEN to scrape from elsewhere\n",
        status=403,
    )


@metrics_route
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refused = _refused(request)
    if refused is not None:
        return refused
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(collect_metrics()))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class _Snapshot:
    """A collector that hands out metrics computed once for this scrape."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


# --- derived states: orphaned jobs, stuck runs ---------------------------------------------


def worker_liveness(now: dt.datetime) -> dict[str, tuple[str, bool]]:
    """{worker_id: (kind, alive)} for workers not cleanly stopped (``inbox.workers.is_alive``)."""
    rows = Worker.objects.exclude(status=WorkerStatus.STOPPED)[:WORKER_ROWS]
    return {w.worker_id: (w.kind, is_alive(w, now)) for w in rows}


def alive_worker_ids(now: dt.datetime) -> set[str]:
    """Workers running or stopping and seen within 3 × poll + lease (database time)."""
    return {worker_id for worker_id, (_kind, alive) in worker_liveness(now).items() if alive}


def orphaned_jobs(
    now: dt.datetime, *, alive: set[str] | None = None, cap: int | None = None
) -> int:
    """How many jobs are orphaned (the one rule: ``inbox.selectors.orphaned_jobs``), capped."""
    alive = alive_worker_ids(now) if alive is None else alive
    held = selectors.orphaned_jobs(Job.objects.all(), now, alive=alive).order_by()
    return paging.capped_count(held, cap)


def stuck_runs(now: dt.datetime, *, alive: set[str] | None = None) -> dict[str, int]:
    """``{store: 0 | 1}`` for every store with an effectively active run: 1 when that run is
    stuck (the one rule: ``runs.selectors.stuck_reasons``)."""
    live = Run.objects.filter(status=RunStatus.ACTIVE, expires_at__gte=now)
    runs = run_selectors.with_owner_heartbeat(live)
    reasons = run_selectors.stuck_reasons(runs, now)
    stuck: dict[str, int] = {}
    for run in runs:
        stuck[run.store] = max(stuck.get(run.store, 0), int(run.run_id in reasons))
    return stuck


# --- job counts -------------------------------------------------------------------------------


@dataclass
class JobCounts:
    by_state_scope: dict[tuple[str, str], int] = field(default_factory=dict)
    estimated: set[str] = field(default_factory=set)
    # Per state, counted exactly up to the exact cap (cap + 1 means "more").
    per_state: dict[str, int] = field(default_factory=dict)


def job_counts(exact_cap: int | None = None) -> JobCounts:
    """Jobs by state and scope: exact for states up to ``exact_cap`` jobs, estimated above."""
    exact_cap = settings.METRICS_EXACT_COUNT_CAP if exact_cap is None else exact_cap
    per_state = dict(state_counts(cap=exact_cap))
    small = [state for state, n in per_state.items() if n <= exact_cap]
    large = [state for state, n in per_state.items() if n > exact_cap]
    counts = JobCounts(per_state=per_state)
    known_scopes = scopes()
    for state in JobState:
        for scope in known_scopes:
            counts.by_state_scope[(state.value, scope)] = 0
    if small:
        rows = (
            Job.objects.filter(state__in=small)
            .order_by()
            .values_list("state", "scope")
            .annotate(n=Count("job_id"))
        )
        for state, scope, n in rows:
            counts.by_state_scope[(state, scope)] = n
    if large:
        counts.estimated.update(large)
        if connection.vendor == "postgresql":
            estimates = _sampled(large, exact_cap)
        else:
            estimates = {k: v for state in large for k, v in _capped_by_scope(state).items()}
        counts.by_state_scope.update(estimates)
    return counts


def _capped_by_scope(state: str) -> dict[tuple[str, str], int]:
    return {
        (state, scope): paging.capped_count(Job.objects.filter(state=state, scope=scope))
        for scope in scopes()
    }


def _sampled(states: list[str], floor: int) -> dict[tuple[str, str], int]:
    """PostgreSQL: (state, scope) counts of ``states`` from a repeatable block sample of about
    ``SAMPLE_ROWS`` rows, scaled to the planner's row count (pg_class.reltuples). A state the
    sample barely sees (its estimate is not above ``floor``, which the exact pass already
    passed) is counted instead, capped."""
    table = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [Job._meta.db_table]
        )
        row = cursor.fetchone()
        total = max(int(row[0]) if row else 0, 0)
        sampled: list[tuple[str, str, int]] = []
        sample_size = 0
        if total > 0:  # -1 or 0: never analysed, nothing to scale to
            percent = min(100.0, SAMPLE_ROWS * 100.0 / total)
            cursor.execute(
                f"SELECT state, scope, COUNT(*) FROM {table} TABLESAMPLE SYSTEM (%s) "
                "REPEATABLE (13) GROUP BY state, scope",
                [percent],
            )
            sampled = cursor.fetchall()
            sample_size = sum(n for _state, _scope, n in sampled)
    out: dict[tuple[str, str], int] = {}
    for state in states:
        parts = {
            (s, scope): round(n * total / sample_size)
            for s, scope, n in sampled
            if s == state and sample_size
        }
        out.update(parts if sum(parts.values()) > floor else _capped_by_scope(state))
    return out


# --- the audit-event counters -----------------------------------------------------------------


class EventTally:
    """Events per type, counted incrementally by event id (see the module docstring).

    The settled part lives in the database (``console.models.AuditTally``): a scrape that can
    settle newer events locks the tally row, counts only the events past it, stores the sum and
    moves it forward; a process that finds the row further on than its own copy (another
    process moved it, or this process is new) reloads the stored counts instead of counting
    the log again. Only the first scrape ever counts the whole log.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.settled_id = 0
        self.settled: Counter[str] = Counter()

    def totals(self, now: dt.datetime) -> Counter[str]:
        cutoff = now - dt.timedelta(seconds=SETTLE_SECONDS)
        with self._lock:
            self._settle(cutoff)
            live = _by_type(AuditEvent.objects.filter(event_id__gt=self.settled_id))
            return self.settled + live

    def _settle(self, cutoff: dt.datetime) -> None:
        with transaction.atomic():
            AuditTally.objects.get_or_create(pk=1)
            # Bounded by the lock timeout: a scrape behind a slow one fails rather than hangs.
            mark = AuditTally.objects.select_for_update().get(pk=1)
            if mark.settled_id != self.settled_id:
                stored = AuditTallyCount.objects.values_list("event_type", "events")
                self.settled = Counter(dict(stored))
                self.settled_id = mark.settled_id
            newer = AuditEvent.objects.filter(event_id__gt=self.settled_id)
            settle_to = newer.filter(created_at__lt=cutoff).aggregate(m=Max("event_id"))["m"]
            if settle_to is None:
                return
            delta = _by_type(newer.filter(event_id__lte=settle_to))
            for event_type, n in delta.items():
                updated = AuditTallyCount.objects.filter(event_type=event_type).update(
                    events=F("events") + n
                )
                if not updated:
                    AuditTallyCount.objects.create(event_type=event_type, events=n)
            mark.settled_id = settle_to
            mark.save(update_fields=["settled_id", "updated_at"])
        # Only once the transaction committed: a rolled-back one leaves both copies as they were.
        self.settled.update(delta)
        self.settled_id = settle_to

    def reset(self) -> None:
        """Forget this process's copy (the stored tally is reloaded on the next scrape)."""
        with self._lock:
            self.settled_id = 0
            self.settled = Counter()


def _by_type(qs) -> Counter[str]:
    rows = qs.order_by().values_list("event_type").annotate(n=Count("event_id"))
    return Counter({event_type: n for event_type, n in rows})


TALLY = EventTally()


# --- the scrape -------------------------------------------------------------------------------


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _labelled(
    name: str, doc: str, labels: list[str], samples: Iterable[tuple[list[str], float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


def _capped_state(counts: JobCounts, state: str, qs, cap: int) -> int:
    """``qs`` (a subset of ``state``) counted up to ``cap``. When the state alone already holds
    more than ``cap`` jobs (known from the index-only per-state count), that count stands in:
    no CREATED job with an approval stays committed (the approval moves it to READY in the
    same transaction), so "awaiting approval" is every CREATED job; and OUTCOME_UNKNOWN is the
    whole state."""
    known = counts.per_state.get(state)
    if known is not None and known > cap:
        return min(known, cap + 1)
    return paging.capped_count(qs, cap)


def _job_families(counts: JobCounts) -> list[Metric]:
    """Jobs by state and scope, and which of those counts are estimates."""
    families: list[Metric] = []
    families.append(
        _labelled(
            "console_jobs",
            "Jobs by state and scope (exact up to METRICS_EXACT_COUNT_CAP per state, "
            "then estimated; see console_jobs_estimated).",
            ["state", "scope"],
            (([s, sc], n) for (s, sc), n in sorted(counts.by_state_scope.items())),
        )
    )
    families.append(
        _labelled(
            "console_jobs_estimated",
            "1 when console_jobs of this state is an estimate (too many jobs to count), else 0.",
            ["state"],
            (([s.value], int(s.value in counts.estimated)) for s in JobState),
        )
    )
    return families


def _ready_age_family(now: dt.datetime) -> list[Metric]:
    """Per scope, how long the next claimable READY job has waited."""
    families: list[Metric] = []
    ages = []
    for scope in scopes():
        head = (
            Job.objects.ready(scope)
            .filter(Q(run_after__isnull=True) | Q(run_after__lte=now))
            .order_by("created_at", "job_id")
            .values_list("created_at", "run_after")
            .first()
        )
        age = 0.0
        if head is not None:
            waiting_since = max(head[0], head[1]) if head[1] else head[0]
            age = max((now - waiting_since).total_seconds(), 0.0)
        ages.append(([scope], age))
    families.append(
        _labelled(
            "console_ready_oldest_age_seconds",
            "Seconds the next claimable READY job of the scope has waited (0: none waiting).",
            ["scope"],
            ages,
        )
    )
    return families


def _lease_families(now: dt.datetime, cap: int) -> list[Metric]:
    """Leases about to lapse and lapsed ones the sweep has not taken yet."""
    families: list[Metric] = []
    minute = now + dt.timedelta(seconds=60)
    families.append(
        _gauge(
            "console_leases_lapsing_next_minute",
            f"Held jobs whose lease ends within the next 60 s (capped at {cap:,}).",
            paging.capped_count(
                Job.objects.held().filter(lease_until__gte=now, lease_until__lt=minute), cap
            ),
        )
    )
    families.append(
        _gauge(
            "console_leases_lapsed",
            f"Held jobs whose lease has lapsed, waiting for the sweep (capped at {cap:,}).",
            paging.capped_count(Job.objects.lapsed(now), cap),
        )
    )
    return families


def _held_families(now: dt.datetime, counts: JobCounts, alive: set[str], cap: int) -> list[Metric]:
    """Orphaned jobs, unknown outcomes and pending approvals: jobs that wait on the sweep or
    on a person."""
    families: list[Metric] = []
    families.append(
        _gauge(
            "console_jobs_orphaned",
            "CLAIMED or EXECUTING jobs whose lease runs but whose holder's heartbeat is dead "
            f"(capped at {cap:,}).",
            orphaned_jobs(now, alive=alive, cap=cap),
        )
    )
    families.append(
        _gauge(
            "console_outcome_unknown_jobs",
            f"Jobs in OUTCOME_UNKNOWN, waiting for reconciliation (capped at {cap:,}).",
            _capped_state(counts, JobState.OUTCOME_UNKNOWN, Job.objects.unknown(), cap),
        )
    )
    oldest_unknown = Job.objects.unknown().order_by().aggregate(m=Min("updated_at"))["m"]
    families.append(
        _gauge(
            "console_outcome_unknown_oldest_age_seconds",
            "Seconds since the oldest OUTCOME_UNKNOWN job became unknown (0: none).",
            max((now - oldest_unknown).total_seconds(), 0.0) if oldest_unknown else 0.0,
        )
    )
    families.append(
        _gauge(
            "console_approvals_pending",
            f"DELETE jobs awaiting an approval decision (capped at {cap:,}).",
            _capped_state(counts, JobState.CREATED, Job.objects.awaiting_approval(), cap),
        )
    )
    return families


def _run_families(now: dt.datetime, alive: set[str]) -> list[Metric]:
    """Active consolidation runs per store, and which of them are stuck."""
    families: list[Metric] = []
    # Every store with an effectively active run has an entry (0 or 1).
    stuck = stuck_runs(now, alive=alive)
    active_stores = sorted(stuck)
    families.append(
        _labelled(
            "console_runs_active",
            "Effectively active consolidation runs per store (status active, lease running).",
            ["store"],
            (([store], 1) for store in active_stores),
        )
    )
    families.append(
        _labelled(
            "console_runs_stuck",
            "Effectively active runs per store whose owner is dead or that made no progress "
            "for RUNS_STUCK_AFTER_SECONDS.",
            ["store"],
            (([store], stuck.get(store, 0)) for store in active_stores),
        )
    )
    return families


def _worker_families(liveness: dict[str, tuple[str, bool]]) -> list[Metric]:
    """Workers by kind and life, and the paused scopes."""
    families: list[Metric] = []
    workers: Counter[tuple[str, str]] = Counter(
        (kind, "alive" if up else "dead") for kind, up in liveness.values()
    )
    families.append(
        _labelled(
            "console_workers",
            "Worker processes by kind, alive or dead (cleanly stopped ones are not counted).",
            ["kind", "state"],
            (([kind, state], n) for (kind, state), n in sorted(workers.items())),
        )
    )
    paused = set(ScopePause.objects.filter(paused=True).values_list("scope", flat=True))
    families.append(
        _labelled(
            "console_scope_paused",
            "1 when an operator paused claiming in the scope.",
            ["scope"],
            (([scope], int(scope in paused)) for scope in sorted(set(scopes()) | paused)),
        )
    )
    return families


def _audit_family(now: dt.datetime) -> Metric:
    """Audit events by type since the log began."""
    totals = TALLY.totals(now)
    events = CounterMetricFamily(
        "console_audit_events",
        "Audit events by type since the log began (events are never deleted).",
        labels=["event_type"],
    )
    for event_type in sorted(set(EventType.values) | set(totals)):
        events.add_metric([event_type], totals.get(event_type, 0))
    return events


def collect_metrics(at: dt.datetime | None = None) -> list[Metric]:
    """Every metric of one scrape, read from the database (``at`` pins the clock in tests)."""
    started = time.perf_counter()
    now = db_now(at)
    # Alert gauges stop counting where the dashboard's tiles do: "1,000+" is alarm enough, and
    # each count stays a short index range at millions of rows.
    cap = ALERT_CAP
    counts = job_counts()
    families = [*_job_families(counts), *_ready_age_family(now), *_lease_families(now, cap)]
    liveness = worker_liveness(now)
    alive = {worker_id for worker_id, (_kind, up) in liveness.items() if up}
    families += _held_families(now, counts, alive, cap)
    families += _run_families(now, alive)
    families += _worker_families(liveness)
    families.append(_audit_family(now))
    families.append(
        _gauge(
            "console_scrape_duration_seconds",
            "Time this scrape spent reading the database and building the metrics.",
            time.perf_counter() - started,
        )
    )
    return families
