"""Read queries behind the console's job list and dashboard (the job detail page's read model
and the orphan rule live in ``inbox.read``, re-exported here).

Everything here reads; writes go through ``inbox.transitions`` (and the reconcile service).
Queries are bounded so pages stay fast at millions of rows: counts are capped, lists are
paginated without COUNT(*), and each dashboard region is one or two indexed queries.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection, connections
from django.db.models import Q, QuerySet, Sum
from django.db.models.expressions import RawSQL
from django.utils import timezone

from core import paging
from inbox.jobtypes import registry
from inbox.models import FinishedCount, Job, JobState, Worker, WorkerStatus
from inbox.read.job_detail import (
    CANCELLABLE_STATES,
    Attempt,
    allowed_actions,
    attempts_from_trail,
    expiry_behaviour,
    job_trail,
)
from inbox.read.orphans import WORKER_SCAN, Orphan, alive_worker_ids, orphaned, orphaned_jobs
from inbox.scopes import paused_scopes
from inbox.transitions import db_now
from inbox.workers import is_alive

# Alert tiles stop counting here ("1,000+" is alarm enough and keeps each tile ~ms at 1M rows).
ALERT_CAP = 1_000


def any_lease_lapsed() -> bool:
    """Has any held job's lease ended by the database clock (what the sweep would take)? An
    executor asks before each sweep: one probe of ``job_lease_idx``."""
    return Job.objects.lapsed(db_now()).exists()


# --- job list ---------------------------------------------------------------------------------


# The identifiers the search box matches by prefix; each has an index that serves a prefix range.
SEARCH_FIELDS = ("job_id", "object_id", "idempotency_key", "mission_id")
# The largest code point: no character sorts after it.
_MAX_CHAR = 0x10FFFF


def prefix_upper_bound(prefix: str) -> str | None:
    """The least string greater than every string that starts with ``prefix`` (code point
    order, which is SQLite's BINARY collation: UTF-8 bytes sort like code points), or None
    when there is none (a prefix of only U+10FFFF characters).

    ``col >= prefix AND col < prefix_upper_bound(prefix)`` is then exactly "starts with", and
    is an index range; a bound made by appending U+10FFFF would miss ids that continue with
    U+10FFFF itself.
    """
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last == _MAX_CHAR:
            continue
        following = last + 1
        if 0xD800 <= following <= 0xDFFF:
            following = 0xE000  # surrogates are not characters; UTF-8 cannot hold them
        return "".join(chars) + chr(following)
    return None


def _starts_with(field: str, prefix: str, vendor: str) -> Q:
    if vendor == "postgresql":
        # LIKE 'prefix%' (escaped by Django) is the exact predicate; the varchar_pattern_ops
        # indexes (Django's own *_like ones for the key columns, migration 0006 for the rest)
        # turn it into an index range whatever the database's collation.
        return Q(**{f"{field}__startswith": prefix})
    # SQLite: LIKE is case-insensitive there and never uses an index; a range on the
    # column's BINARY collation is exact and uses the column's index.
    upper = prefix_upper_bound(prefix)
    condition = Q(**{f"{field}__gte": prefix})
    return condition & Q(**{f"{field}__lt": upper}) if upper is not None else condition


# Each identifier contributes at most this many candidates to one search: a search costs at
# most 4 × (SEARCH_CAP + 1) index entries however many jobs a short prefix matches.
SEARCH_CAP = 2_000


@dataclass(frozen=True)
class SearchMatches:
    """The job ids a search term matches, from one bounded read of the four identifier indexes."""

    term: str
    ids: frozenset[str]
    # False when some identifier matched more than SEARCH_CAP jobs: ``ids`` holds only the
    # first SEARCH_CAP of those (in that index's order), and the page says so.
    complete: bool


def search_matches(term: str, *, cap: int | None = None, using: str = "default") -> SearchMatches:
    """The ids of the jobs whose id, object id, idempotency key or mission id starts with
    ``term`` (case matters), in ONE query: a UNION ALL of four index ranges, each stopped after
    ``cap + 1`` entries.

    Bounded on purpose. Letting the database pick its own plan for "an OR of four prefixes,
    newest first" was measured at 1M jobs: PostgreSQL walked 490,000 rows of the created index
    for a prefix matching 11,000 jobs (0.3 s), SQLite sorted all 1,000,000 matches of a short
    prefix (4 to 11 s). Reading the matches from the identifier indexes and paging them by
    keyset afterwards costs the same for every term.
    """
    cap = SEARCH_CAP if cap is None else cap
    term = term.strip()
    vendor = connections[using].vendor
    parts: list[str] = []
    params: list[object] = []
    for i, name in enumerate(SEARCH_FIELDS):
        branch = Job.objects.using(using).filter(_starts_with(name, term, vendor))
        sql, branch_params = (
            branch.order_by().values_list("job_id")[: cap + 1].query.sql_with_params()
        )
        parts.append(f"SELECT {i} AS b, job_id FROM ({sql}) AS s{i}")
        params += list(branch_params)
    with connections[using].cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        rows = cursor.fetchall()
    per_branch: dict[int, int] = {}
    for branch_no, _job_id in rows:
        per_branch[branch_no] = per_branch.get(branch_no, 0) + 1
    complete = all(n <= cap for n in per_branch.values())
    return SearchMatches(term, frozenset(job_id for _b, job_id in rows), complete)


def with_ids(qs: QuerySet[Job], ids: Iterable[str]) -> QuerySet[Job]:
    """``qs`` narrowed to the jobs with these ids (a search's matches, a few thousand at most).

    On PostgreSQL the ids travel as one array joined through ``unnest``: given a literal
    ``IN (…)`` list and ``ORDER BY created_at DESC LIMIT 51``, the planner walked the created
    index backwards and probed the list (0.2 to 0.5 s at 1M jobs); the array's small row
    estimate makes it look the ids up by primary key and sort them (13 to 20 ms)."""
    ids = sorted(ids)
    if connections[qs.db].vendor == "postgresql":
        return qs.filter(job_id__in=RawSQL("SELECT unnest(%s::text[])", [ids]))
    return qs.filter(job_id__in=ids)


def search_jobs(qs: QuerySet[Job], term: str) -> QuerySet[Job]:
    """Jobs of ``qs`` whose id, object id, idempotency key or mission id starts with ``term``
    (see ``search_matches``: prefix, not substring — each branch is an index range)."""
    term = term.strip()
    if not term:
        return qs
    return with_ids(qs, search_matches(term, using=qs.db).ids)


class PayloadFilterError(ValueError):
    """A payload filter that cannot be applied (bad syntax, or not on PostgreSQL)."""


def parse_payload_filter(text: str) -> tuple[str, object]:
    """``key=value`` → (key, value). The value is matched as written: a JSON literal
    (``42``, ``true``, ``"a b"``, ``null``) keeps its type, anything else is a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise PayloadFilterError("write the payload filter as key=value, e.g. source_commit=a1b2c3")
    raw = raw.strip()
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    if isinstance(value, dict | list):
        value = raw  # exact key/value only: objects and lists are matched as their text
    return key, value


def payload_supported(qs: QuerySet[Job]) -> bool:
    return connections[qs.db].vendor == "postgresql"


def filter_payload(qs: QuerySet[Job], text: str) -> QuerySet[Job]:
    """Jobs whose payload has exactly this top-level key/value (PostgreSQL: JSONB containment,
    ``payload @> '{"key": value}'``, served by the GIN index of migration 0006)."""
    if not payload_supported(qs):
        raise PayloadFilterError("the payload filter needs PostgreSQL (JSONB containment)")
    key, value = parse_payload_filter(text)
    return qs.filter(payload__contains={key: value})


# --- dashboard --------------------------------------------------------------------------------


def state_counts(cap: int | None = None) -> list[tuple[str, int]]:
    """Jobs per state, each capped at ``cap + 1``, in ONE query.

    A plain GROUP BY reads every row (about 100 ms at 1M rows on PostgreSQL); a capped scalar
    subquery per state stops after ``cap + 1`` entries of the (state, created_at) index, so
    the cost is bounded however large the table grows. Counts above the cap read "10,000+".
    """
    # Read at call time (not imported by value) so one setting of core.paging.COUNT_CAP rules.
    cap = paging.COUNT_CAP if cap is None else cap
    table = connection.ops.quote_name(Job._meta.db_table)
    column = connection.ops.quote_name("state")
    parts = [
        f"(SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {column} = %s LIMIT %s) AS s{i})"
        for i in range(len(JobState))
    ]
    params: list[object] = []
    for state in JobState:
        params += [state.value, cap + 1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    return [(state.value, int(n)) for state, n in zip(JobState, row, strict=True)]


@dataclass(frozen=True)
class Alerts:
    unknown: int
    lapsed: int
    dead_workers: int
    pending_approvals: int
    paused_scopes: list[str]
    # Held jobs whose lease runs but whose holder is dead (they wait for the lease to lapse).
    orphaned: int = 0


def capped_counts(querysets: Iterable[QuerySet], cap: int) -> list[int]:
    """Several capped counts (each at most ``cap + 1``) in ONE query: a scalar subquery per
    queryset, each reading at most ``cap + 1`` index entries."""
    parts: list[str] = []
    params: list[object] = []
    for i, qs in enumerate(querysets):
        sql, qparams = qs.order_by().values_list("pk")[: cap + 1].query.sql_with_params()
        parts.append(f"(SELECT COUNT(*) FROM ({sql}) AS c{i})")
        params += list(qparams)
    if not parts:
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        return [int(n) for n in cursor.fetchone()]


def dashboard_alerts(now: dt.datetime) -> Alerts:
    """The alert tiles: capped, indexed counts in one query, plus one read of the live
    heartbeat rows (alive and dead workers, and who may hold a lease) and one of the pauses."""
    workers = list(
        Worker.objects.exclude(status=WorkerStatus.STOPPED).order_by("-last_seen_at")[:WORKER_SCAN]
    )
    # A stopped worker is not dead: it said goodbye. Same rule as inbox.workers.is_alive.
    alive = {w.worker_id for w in workers if is_alive(w, now)}
    unknown, lapsed, pending, orphans = capped_counts(
        [
            Job.objects.filter(state=JobState.OUTCOME_UNKNOWN),
            Job.objects.lapsed(now),
            Job.objects.awaiting_approval(),
            orphaned_jobs(Job.objects.all(), now, alive=alive),
        ],
        ALERT_CAP,
    )
    paused = [pause.scope for pause in paused_scopes()]
    return Alerts(
        unknown=unknown,
        lapsed=lapsed,
        dead_workers=len(workers) - len(alive),
        pending_approvals=pending,
        paused_scopes=paused,
        orphaned=orphans,
    )


# Of the three ways an execution ends (``inbox.models.FINISHED_STATES``), these two make the
# throughput chart's failed / unknown rate.
BAD_STATES = (JobState.FAILED, JobState.OUTCOME_UNKNOWN)


@dataclass(frozen=True)
class Throughput:
    """Executions finished per minute, oldest first, zero-filled: in total, per scope, and how
    many of them failed or ended unknown."""

    points: list[tuple[str, int]]
    # {scope: finished per minute}, aligned with ``points``.
    by_scope: dict[str, list[int]] = field(default_factory=dict)
    # FAILED + OUTCOME_UNKNOWN per minute, aligned with ``points``.
    bad: list[int] = field(default_factory=list)

    @property
    def bad_rate(self) -> list[float | None]:
        """Failed or unknown share of each minute's finished jobs (None: nothing finished)."""
        return [
            (bad / total if total else None)
            for (_label, total), bad in zip(self.points, self.bad, strict=True)
        ]


def throughput_per_minute(now: dt.datetime, minutes: int = 60) -> Throughput:
    """Executions finished per minute over the last ``minutes``, per scope and per outcome: one
    query over the per-minute counts (``FinishedCount``), exact however busy the hour.

    The counts are written where jobs finish, in the same statement (``inbox.transitions``),
    one row per minute, scope, final state and writing process; this reads at most a few
    hundred of them, a range of their key's index. They count endings: a FAILED job retried
    and finished again counts twice, and an OUTCOME_UNKNOWN counts where it ended, reconciled
    or not.
    """
    start = (now - dt.timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    rows = (
        FinishedCount.objects.filter(minute__gte=start, minute__lte=now)
        .values_list("minute", "scope", "state")
        .annotate(n=Sum("finished"))
        .order_by()
    )
    buckets = [0] * minutes
    bad = [0] * minutes
    by_scope: dict[str, list[int]] = {}
    for minute_at, scope, state, count in rows:
        index = int((minute_at - start).total_seconds() // 60)
        if 0 <= index < minutes:
            buckets[index] += count
            by_scope.setdefault(scope, [0] * minutes)[index] += count
            if state in BAD_STATES:
                bad[index] += count
    labels = [(start + dt.timedelta(minutes=i)).strftime("%H:%M") for i in range(minutes)]
    return Throughput(
        list(zip(labels, buckets, strict=True)),
        by_scope=dict(sorted(by_scope.items())),
        bad=bad,
    )


# Age buckets of the READY backlog chart: (label, lower bound in seconds); the last is open.
READY_AGE_BUCKETS = (("<1m", 0), ("1–5m", 60), ("5–15m", 300), ("15–60m", 900))
READY_AGE_OPEN = ("≥1h", 3600)
# Each bucket counts at most this many jobs ("1,000+").
READY_AGE_CAP = 1_000


@dataclass(frozen=True)
class ReadyAge:
    """One scope's READY backlog: its oldest job's age and how many wait in each age bucket."""

    scope: str
    # Seconds the oldest READY job has waited since it was created (None: nothing READY).
    oldest_seconds: int | None
    # (label, count capped at READY_AGE_CAP + 1), youngest first.
    buckets: list[tuple[str, int]]


def ready_age_by_scope(now: dt.datetime, cap: int = READY_AGE_CAP) -> list[ReadyAge]:
    """Per scope: the oldest READY job's age and the backlog by age, in ONE query.

    Every part reads the claim index (``job_claim_idx``: READY only, by scope and created_at),
    so each is a bounded range however many jobs wait. Ages count from ``created_at``: a job
    deferred with ``run_after`` or handed back by the sweep counts its whole wait.
    """
    names = sorted({t.scope for t in registry().values()})
    if not names:
        return []
    table = connection.ops.quote_name(Job._meta.db_table)
    edges = [*READY_AGE_BUCKETS, READY_AGE_OPEN]
    parts: list[str] = []
    params: list[object] = []

    def stamp(seconds: int) -> object:
        return connection.ops.adapt_datetimefield_value(now - dt.timedelta(seconds=seconds))

    for i, scope in enumerate(names):
        # The first entry of the index, never an aggregate over the range: given a row
        # estimate of 1 (statistics behind a fresh backlog), PostgreSQL planned MIN() as a scan
        # of every READY entry of the scope (61 ms at 130,000 waiting, every poll).
        parts.append(
            f"(SELECT created_at FROM {table} WHERE state = %s AND scope = %s "
            f"ORDER BY created_at LIMIT 1) AS o{i}"
        )
        params += [str(JobState.READY), scope]
        for j, (_label, low) in enumerate(edges):
            high = edges[j + 1][1] if j + 1 < len(edges) else None
            # Younger than ``low`` seconds is created after now - low.
            condition = "created_at <= %s"
            bounds: list[object] = [stamp(low)]
            if high is not None:
                condition += " AND created_at > %s"
                bounds.append(stamp(high))
            parts.append(
                f"(SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE state = %s AND scope = %s "
                f"AND {condition} LIMIT %s) AS a{i}_{j})"
            )
            params += [str(JobState.READY), scope, *bounds, cap + 1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    per_scope = len(edges) + 1
    result = []
    for i, scope in enumerate(names):
        values = row[i * per_scope : (i + 1) * per_scope]
        oldest = values[0]
        if isinstance(oldest, str):
            oldest = dt.datetime.fromisoformat(oldest).replace(tzinfo=dt.UTC)
        if oldest is not None and timezone.is_naive(oldest):
            oldest = oldest.replace(tzinfo=dt.UTC)
        age = None if oldest is None else max(math.floor((now - oldest).total_seconds()), 0)
        buckets = [(label, int(n)) for (label, _low), n in zip(edges, values[1:], strict=True)]
        result.append(ReadyAge(scope, age, buckets))
    return result


__all__ = [
    "ALERT_CAP",
    "CANCELLABLE_STATES",
    "SEARCH_CAP",
    "SEARCH_FIELDS",
    "WORKER_SCAN",
    "Alerts",
    "Attempt",
    "Orphan",
    "PayloadFilterError",
    "ReadyAge",
    "SearchMatches",
    "alive_worker_ids",
    "allowed_actions",
    "attempts_from_trail",
    "dashboard_alerts",
    "expiry_behaviour",
    "filter_payload",
    "job_trail",
    "orphaned",
    "orphaned_jobs",
    "parse_payload_filter",
    "payload_supported",
    "prefix_upper_bound",
    "ready_age_by_scope",
    "search_jobs",
    "search_matches",
    "state_counts",
    "throughput_per_minute",
    "with_ids",
]
